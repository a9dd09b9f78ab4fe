#include "core/ref.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/expr.h"
#include "core/status.h"

namespace thunky {
namespace {

View view(const std::string& ref, std::vector<int64_t> shape, int64_t x = 0, DType dtype = DType::f32) {
  RefSyntax r = parse_ref(ref);
  return resolve_view(0, shape, dtype, r, [&](std::string_view n) -> std::optional<int64_t> {
    if (n == "x") return x;
    return std::nullopt;
  });
}

TEST(RefSyntax, ParsingClassifiesRankDependence) {
  // ds(start, size): the start places the view, the size sizes it; slice
  // bounds do both; an index only places it.
  EXPECT_FALSE(parse_ref("a[3]").moves_with_rank);
  EXPECT_TRUE(parse_ref("a[x]").moves_with_rank);
  EXPECT_FALSE(parse_ref("a[x]").sized_by_rank);
  EXPECT_TRUE(parse_ref("a[ds(x * 2, 2)]").moves_with_rank);
  EXPECT_FALSE(parse_ref("a[ds(x * 2, 2)]").sized_by_rank);
  EXPECT_TRUE(parse_ref("a[ds(0, x + 1)]").sized_by_rank);
  EXPECT_TRUE(parse_ref("a[1][0:x]").sized_by_rank);
  EXPECT_FALSE(parse_ref("a[1:3]").sized_by_rank);
}

TEST(Shape, ShapesOfAnyRankCopyCompareAndResizeAsVectors) {
  // Shapes of 3 and of 8 dimensions, and resizes across 6 (the most a
  // shape holds without allocating), behave as std::vector<int64_t>.
  const Shape small{2, 3, 4};
  const Shape large{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(small.size(), 3u);
  EXPECT_EQ(small.back(), 4);
  EXPECT_EQ(large.size(), 8u);
  EXPECT_EQ(large[7], 8);
  Shape copy = large;
  EXPECT_TRUE(copy == large);
  copy.resize(2);
  EXPECT_TRUE(copy == (Shape{1, 2}));
  copy.push_back(9);
  EXPECT_TRUE(copy == (std::vector<int64_t>{1, 2, 9}));
  copy.resize(7);  // new dimensions zero
  EXPECT_EQ(std::vector<int64_t>(copy), (std::vector<int64_t>{1, 2, 9, 0, 0, 0, 0}));
  EXPECT_FALSE(small == large);
  // A 7-dimensional buffer still resolves: a[1] of [2,1,1,1,1,1,3] is 3
  // elements at offset 3.
  View v = view("a[1]", {2, 1, 1, 1, 1, 1, 3});
  EXPECT_EQ(v.offset, 3);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{1, 1, 1, 1, 1, 3}));
}

TEST(Ref, LeadingSlicesAndIndices) {
  // a[8, 4]: row stride 4.
  EXPECT_EQ(view("a", {8, 4}).offset, 0);
  EXPECT_EQ(view("a[2:6]", {8, 4}).offset, 8);
  EXPECT_EQ(view("a[2:6]", {8, 4}).shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(view("a[3]", {8, 4}).shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(view("a[1, 0:2]", {8, 4}).offset, 4);
  EXPECT_EQ(view("a[1][1:3]", {8, 4}).offset, 5);
  EXPECT_EQ(view("a[4:, :]", {8, 4}).offset, 16);
  EXPECT_EQ(view("a[-1]", {8, 4}).offset, 28);  // negative literal indexes from the end
  EXPECT_EQ(view("a[:-2]", {8, 4}).shape, (std::vector<int64_t>{6, 4}));
}

TEST(Ref, DsWithAxisExpressions) {
  // ds(((x - 1) % 4) * 2, 2) on rank x = 0: rows 6..8 of a [8, 3].
  View v = view("a[ds(((x - 1) % 4) * 2, 2)]", {8, 3}, 0);
  EXPECT_EQ(v.offset, 18);
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 3}));
}

TEST(Ref, ComposedViewsSliceTheViewAgain) {
  // a[2:6][1:3] is rows 3 and 4 of a.
  View v = view("a[2:6][1:3]", {8, 4});
  EXPECT_EQ(v.offset, 12);
  EXPECT_EQ(v.shape[0], 2);
}

TEST(Ref, NonContiguousAndOutOfBoundsAreErrors) {
  EXPECT_THROW(view("a[:, 2:4]", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a[::2]", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a[2:6, 1]", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a[8]", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a[6:10]", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a[ds(x, 4)]", {8, 4}, 5), ThunkyError);  // out of bounds on rank x = 5 only
  EXPECT_NO_THROW(view("a[ds(x, 4)]", {8, 4}, 4));
  EXPECT_THROW(view("a[1, 2, 3]", {8, 4}), ThunkyError);
  EXPECT_THROW(parse_ref("a[1"), ThunkyError);
  EXPECT_THROW(parse_ref("[1]"), ThunkyError);
  EXPECT_THROW(parse_ref("a[]"), ThunkyError);
}

TEST(Ref, CompiledIndexCodeAgreesWithTheTree) {
  // Each view's start is compiled to postfix code; the tree evaluator is
  // the reference: offset = eval(E) + 500 rows of 1 element.
  const char* exprs[] = {"x", "-x", "x * 3 - 7", "(x - 5) // 2", "(x - 5) % 3", "min(x, 4) * max(x, 2)", "-(x + 1) * -2", "x // -3"};
  for (const char* e : exprs) {
    const RefSyntax r = parse_ref(std::string("a[ds(") + e + " + 500, 1)]");
    ASSERT_GE(r.groups[0][0].code_a, 0) << e;  // compiled
    for (int64_t x = -4; x <= 9; ++x) {
      const int64_t want = eval_int(*parse_expr(e), [&](std::string_view) -> std::optional<int64_t> { return x; }) + 500;
      EXPECT_EQ(view(std::string("a[ds(") + e + " + 500, 1)]", {1000}, x).offset, want) << e << " at x = " << x;
    }
  }
  // Where the code cannot finish, the tree gives the error.
  auto message = [](const std::string& ref, int64_t x) {
    try {
      view(ref, {1000}, x);
    } catch (const ThunkyError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("a[ds(7 // (x + 1), 1)]", -1).find("division by zero"), std::string::npos);
  EXPECT_NE(message("a[ds(9223372036854775807 + x, 1)]", 1).find("overflow"), std::string::npos);
  EXPECT_NE(message("a[ds(y, 1)]", 0).find("unknown name 'y'"), std::string::npos);
  // True division is no integer operator: left to the tree, which refuses it.
  EXPECT_LT(parse_ref("a[ds(x / 2, 1)]").groups[0][0].code_a, 0);
  EXPECT_NE(message("a[ds(x / 2, 1)]", 0).find("not an integer index expression"), std::string::npos);
}

TEST(Ref, ReshapeGivesTheContiguousViewAnotherShape) {
  // a[2:6] of an [8, 4] buffer is 16 elements at offset 2 * 4 = 8; under
  // .reshape(2, -1) the -1 is 16 / 2 = 8, and indexing goes on in the new
  // shape: [1] is the second row of 8, at offset 8 + 8 = 16.
  View v = view("a[2:6].reshape(2, -1)", {8, 4});
  EXPECT_EQ(v.offset, 8);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{2, 8}));
  v = view("a[2:6].reshape(2, -1)[1]", {8, 4});
  EXPECT_EQ(v.offset, 16);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{8}));
  // A keepdims row vector: a[3] of [8, 4] as [1, 4] (offset 12); a scalar
  // view reshapes to () and back.
  v = view("a[3].reshape(1, 4)", {8, 4});
  EXPECT_EQ(v.offset, 12);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{1, 4}));
  v = view("a[3, 1].reshape()", {8, 4});
  EXPECT_EQ(v.shape.size(), 0u);
  EXPECT_EQ(v.offset, 13);
  // The counts must agree: 32 elements are not 5 x 7, nor a multiple of 5
  // under (5, -1); and -1 is the only negative size, at most once.
  EXPECT_THROW(view("a.reshape(5, 7)", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a.reshape(5, -1)", {8, 4}), ThunkyError);
  EXPECT_THROW(view("a.reshape(4611686018427387904, 4)", {8, 4}), ThunkyError);  // 2^62 * 4 overflows
  EXPECT_THROW(parse_ref("a.reshape(-1, -1)"), ThunkyError);
  EXPECT_THROW(parse_ref("a.reshape(-2, 16)"), ThunkyError);
  EXPECT_THROW(parse_ref("a.reshape(x, 2)"), ThunkyError);
  EXPECT_THROW(parse_ref("a.reshape(2, 2"), ThunkyError);
  EXPECT_THROW(parse_ref("a.reshap(2)"), ThunkyError);
  // Text round-trips.
  EXPECT_EQ(parse_ref("a[2:6].reshape( 2,-1 )[1]").text(), "a[2:6].reshape(2, -1)[1]");
  EXPECT_EQ(parse_ref("a.reshape()").text(), "a.reshape()");
  EXPECT_EQ(parse_ref("w.q.reshape(4, 8)").buffer, "w.q");  // names may hold dots
}

TEST(Ref, BitcastReadsTheViewsBytesAsAnotherType) {
  // The same size keeps the shape: a[1] of an f32 [4, 6] buffer as u32 is
  // [6] at offset 6.
  View v = view("a[1].bitcast(u32)", {4, 6});
  EXPECT_EQ(v.dtype, DType::u32);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{6}));
  EXPECT_EQ(v.offset, 6);
  // A narrower type scales the last axis, as NumPy's view(dtype): f32 [4, 6]
  // as bf16 is [4, 12]; a[1] then starts at element 6 * 2 = 12, byte 24.
  v = view("a[1].bitcast(bf16)", {4, 6});
  EXPECT_EQ(v.dtype, DType::bf16);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{12}));
  EXPECT_EQ(v.offset, 12);
  EXPECT_EQ(v.byte_offset(), 24);
  EXPECT_EQ(v.bytes(), 24);  // 6 f32 = 12 bf16 = 24 bytes
  // A wider one divides it: u8 [2, 8] as f64 is [2, 1]; a[1] as s32 is [2]
  // at s32 element 8 / 4 = 2; indexing goes on in the new type.
  v = view("a.bitcast(f64)", {2, 8}, 0, DType::u8);
  EXPECT_EQ(std::vector<int64_t>(v.shape), (std::vector<int64_t>{2, 1}));
  v = view("a[1].bitcast(s32)[1]", {2, 8}, 0, DType::u8);
  EXPECT_EQ(v.dtype, DType::s32);
  EXPECT_EQ(v.shape.size(), 0u);
  EXPECT_EQ(v.offset, 3);  // element 2 of the row, then the second
  // Refused: a last axis of 6 bytes as 4-byte elements; a row that starts
  // at byte 10, not on a whole s32; a scalar that would change its size.
  EXPECT_THROW(view("a.bitcast(f32)", {2, 6}, 0, DType::u8), ThunkyError);
  EXPECT_THROW(view("a.reshape(3, 8)[1, 2:6].bitcast(s32)", {24}, 0, DType::u8), ThunkyError);  // starts at byte 10
  EXPECT_THROW(view("a[0, 0].bitcast(bf16)", {4, 6}), ThunkyError);
  EXPECT_EQ(view("a[0, 0].bitcast(s32)", {4, 6}).dtype, DType::s32);  // same size: fine
  EXPECT_THROW(parse_ref("a.bitcast(f33)"), ThunkyError);
  EXPECT_THROW(parse_ref("a.bitcast(f32"), ThunkyError);
  EXPECT_THROW(parse_ref("a.bitcast()"), ThunkyError);
  // The type a ref reads as is known before any rank resolves it.
  EXPECT_EQ(ref_dtype(parse_ref("a.bitcast(u8)[2].bitcast(s32)"), DType::f32), DType::s32);
  EXPECT_EQ(ref_dtype(parse_ref("a[2]"), DType::bf16), DType::bf16);
  EXPECT_EQ(parse_ref("w.q.bitcast( u32 )[0]").text(), "w.q.bitcast(u32)[0]");
  EXPECT_EQ(parse_ref("w.q.bitcast(u32)").buffer, "w.q");
}

TEST(Ref, TextIsCanonical) {
  EXPECT_EQ(parse_ref("a[ 2 : 6 ]").text(), "a[2:6]");
  EXPECT_EQ(parse_ref("a[ds(x*2, 2)]").text(), "a[ds((x * 2), 2)]");
}

}  // namespace
}  // namespace thunky
