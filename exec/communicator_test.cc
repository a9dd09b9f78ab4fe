#include "exec/communicator.h"

#include <gtest/gtest.h>

namespace thunky {
namespace {

CollectiveCall call(Op op, int64_t sc, int64_t dc, int pos, int n) {
  CollectiveCall c;
  c.op = op;
  c.src_count = sc;
  c.dst_count = dc;
  c.position = pos;
  for (int i = 0; i < n; ++i) c.ranks.push_back(i);
  return c;
}

TEST(CollectiveSemantics, EachOpOnThreeRanks) {
  // Rank p's src is [10p, 10p + 1, 10p + 2].
  std::vector<std::vector<float>> src = {{0, 1, 2}, {10, 11, 12}, {20, 21, 22}};
  std::vector<const uint8_t*> s;
  for (auto& v : src) s.push_back(reinterpret_cast<const uint8_t*>(v.data()));
  std::vector<float> out(9);
  auto* o = reinterpret_cast<uint8_t*>(out.data());
  collective_result(call(Op::all_reduce, 3, 3, 1, 3), s, o);
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), (std::vector<float>{30, 33, 36}));
  collective_result(call(Op::all_gather, 3, 9, 1, 3), s, o);
  EXPECT_EQ(out, (std::vector<float>{0, 1, 2, 10, 11, 12, 20, 21, 22}));
  collective_result(call(Op::reduce_scatter, 3, 1, 2, 3), s, o);
  EXPECT_EQ(out[0], 2 + 12 + 22);  // element 2 reduced
  std::vector<std::vector<float>> src6 = {{0, 1, 2, 3, 4, 5}, {10, 11, 12, 13, 14, 15}, {20, 21, 22, 23, 24, 25}};
  std::vector<const uint8_t*> s6;
  for (auto& v : src6) s6.push_back(reinterpret_cast<const uint8_t*>(v.data()));
  collective_result(call(Op::all_to_all, 6, 6, 1, 3), s6, o);
  // Rank 1 receives chunk 1 (elements 2, 3) of every rank.
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 6), (std::vector<float>{2, 3, 12, 13, 22, 23}));
  CollectiveCall perm = call(Op::collective_permute, 3, 3, 0, 3);
  perm.pairs = {{2, 1}};  // nobody sends to 0
  out.assign(9, 7);
  collective_result(perm, s, o);
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), (std::vector<float>{0, 0, 0}));
  perm.position = 1;
  collective_result(perm, s, o);
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), (std::vector<float>{20, 21, 22}));
}

TEST(CollectiveSemantics, MaxOverS32) {
  std::vector<std::vector<int32_t>> src = {{5, -1}, {3, 9}};
  std::vector<const uint8_t*> s{reinterpret_cast<const uint8_t*>(src[0].data()), reinterpret_cast<const uint8_t*>(src[1].data())};
  std::vector<int32_t> out(2);
  CollectiveCall c = call(Op::all_reduce, 2, 2, 0, 2);
  c.dtype = DType::s32;
  c.reduction = Reduction::max;
  collective_result(c, s, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(out, (std::vector<int32_t>{5, 9}));
}

TEST(StagingPool, ABufferGivenBackServesTheNextThatFitsIt) {
  StagingPool pool;
  std::vector<uint8_t> a = pool.take(1 << 20);
  EXPECT_EQ(a.size(), size_t{1} << 20);
  const uint8_t* first = a.data();
  pool.give(std::move(a));
  // 512 KiB fits the 1 MiB buffer kept: the same memory, already faulted in.
  std::vector<uint8_t> b = pool.take(1 << 19);
  EXPECT_EQ(b.size(), size_t{1} << 19);
  EXPECT_EQ(b.data(), first);
  // Taken, it is no longer kept: another take gets other memory.
  std::vector<uint8_t> c = pool.take(16);
  EXPECT_NE(c.data(), first);
  EXPECT_EQ(c.size(), 16u);
}

}  // namespace
}  // namespace thunky
