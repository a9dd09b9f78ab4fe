#include "core/schedule.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/accounting.h"
#include "core/validate.h"
#include "tests/test_util.h"

namespace thunky {
namespace {

json parse_file(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// Whether `saved` holds every field of `original` with its value. Saving
// may add fields the original left to their defaults and writes refs in
// their canonical form ("a[ds((x * 2), 2)]" for "a[ds(x*2, 2)]"), so a
// string that differs must parse to the same ref. An init's values may be
// nested by dimension or flat, and are saved flat. Returns the first
// pointer that differs, or "" when none does.
json flattened(const json& values) {
  if (!values.is_array()) return json::array({values});
  json flat = json::array();
  for (const auto& v : values)
    for (const auto& x : flattened(v)) flat.push_back(x);
  return flat;
}

std::string first_difference(const json& original, const json& saved, const std::string& at = "") {
  if (at.ends_with("/init/values") && original.is_array() && original != saved) return first_difference(flattened(original), saved, at + "/");
  if (original.is_object()) {
    if (!saved.is_object()) return at;
    for (const auto& [k, v] : original.items()) {
      if (!saved.contains(k)) return at + "/" + k;
      if (std::string d = first_difference(v, saved[k], at + "/" + k); !d.empty()) return d;
    }
    return "";
  }
  if (original.is_array()) {
    if (!saved.is_array() || saved.size() != original.size()) return at;
    for (size_t i = 0; i < original.size(); ++i)
      if (std::string d = first_difference(original[i], saved[i], at + "/" + std::to_string(i)); !d.empty()) return d;
    return "";
  }
  if (original.is_number() && saved.is_number()) return original.get<double>() == saved.get<double>() ? "" : at;
  if (original.is_boolean() && saved.is_number()) return saved.get<double>() == (original.get<bool>() ? 1 : 0) ? "" : at;
  if (original.is_string() && saved.is_string() && original != saved) {
    try {
      return parse_ref(original.get<std::string>()).text() == parse_ref(saved.get<std::string>()).text() ? "" : at;
    } catch (const ThunkyError&) {
      return at;
    }
  }
  return original == saved ? "" : at;
}

TEST(Schedule, SavingKeepsEveryFieldOfEveryExample) {
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(THUNKY_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    const json original = parse_file(e.path().string());
    const json saved = to_json(parse_program(original, e.path().string()));
    EXPECT_EQ(first_difference(original, saved), "") << e.path();
    // And what was saved reads back to the same save.
    EXPECT_EQ(to_json(parse_program(saved, e.path().string())).dump(), saved.dump()) << e.path();
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(Schedule, TheRoundTripCheckSeesADroppedOrChangedField) {
  // The comparison itself: a field dropped, a value changed, a ref moved.
  const json original = json::parse(R"({"a": {"b": [1, 2], "r": "x[ds(y*2, 2)]"}, "c": true, "init": {"values": [[1, 2], [3, 4]]}})");
  EXPECT_EQ(first_difference(original["init"], json::parse(R"({"values": [1, 2, 3, 4]})"), "/init"), "");
  EXPECT_EQ(first_difference(original["init"], json::parse(R"({"values": [1, 2, 4, 3]})"), "/init"), "/init/values//2");
  EXPECT_EQ(first_difference(original, json::parse(R"({"a": {"b": [1, 2], "r": "x[ds((y * 2), 2)]"}, "c": true, "d": 0, "init": {"values": [1, 2, 3, 4]}})")), "");
  EXPECT_EQ(first_difference(original, json::parse(R"({"a": {"b": [1, 2], "r": "x[ds((y * 2), 2)]"}})")), "/c");
  EXPECT_EQ(first_difference(original, json::parse(R"({"a": {"b": [1, 3], "r": "x[ds((y * 2), 2)]"}, "c": true, "init": {"values": [1, 2, 3, 4]}})")), "/a/b/1");
  EXPECT_EQ(first_difference(original, json::parse(R"({"a": {"b": [1, 2], "r": "x[ds((y * 3), 2)]"}, "c": true, "init": {"values": [1, 2, 3, 4]}})")), "/a/r");
}

TEST(Schedule, UnknownKeysNameTheirPointer) {
  auto errs = testing::load_errors(R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f32"}},
    "program": [{"op": "memzero", "dst": "a"}, {"op": "memzero", "dst": "a", "colour": "red"}]})");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/1/colour");
  EXPECT_EQ(errs[0].kind, ErrorKind::input);
}

TEST(Schedule, MalformedJsonIsAnInputError) {
  auto errs = testing::load_errors("{\"format\": ");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].message.find("malformed JSON"), std::string::npos);
}

TEST(Schedule, BadDtypeAndRole) {
  auto errs = testing::load_errors(R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f33"}}, "program": []})");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/buffers/a/dtype");
  errs = testing::load_errors(R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f32", "role": "input"}}, "program": []})");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/buffers/a");  // an input needs an init
}

TEST(Schedule, ComposedViewsKnowWhetherTheRankSizesOrPlacesThem) {
  // f's own ref names no axis; bound to a view placed by x it moves with
  // the rank, and bound to one sized by x its size depends on it.
  Program p = testing::load_ok(R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]},
    "buffers": {"a": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}}},
    "functions": {"f": {"params": ["v"], "program": [{"op": "memset", "dst": "v[0:1]", "value": 1}]},
                  "g": {"params": ["v"], "program": [{"op": "memset", "dst": "v[0:x + 1]", "value": 1}]}},
    "program": [{"op": "call", "fn": "f", "args": {"v": "a[ds(x * 4, 4)]"}},
                {"op": "call", "fn": "f", "args": {"v": "a[0:x + 1]"}},
                {"op": "call", "fn": "f", "args": {"v": "a[2:]"}},
                {"op": "call", "fn": "g", "args": {"v": "a[2:]"}}]})");
  const Ref& placed = p.program[0].as<Call>().body[0].as<Memset>().dst;
  const Ref& sized = p.program[1].as<Call>().body[0].as<Memset>().dst;
  const Ref& fixed = p.program[2].as<Call>().body[0].as<Memset>().dst;
  EXPECT_TRUE(ref_moves_with_rank(placed));
  EXPECT_FALSE(size_depends_on_rank(placed));
  EXPECT_TRUE(ref_moves_with_rank(sized));
  EXPECT_TRUE(size_depends_on_rank(sized));
  EXPECT_FALSE(ref_moves_with_rank(fixed));
  EXPECT_FALSE(size_depends_on_rank(fixed));
  // g's own ref is sized by x, inside a fixed view.
  EXPECT_TRUE(size_depends_on_rank(p.program[3].as<Call>().body[0].as<Memset>().dst));
}

TEST(Schedule, CallsInlineWithComposedViewsAndRenamedTokens) {
  Program p = testing::load_ok(R"({"format": "thunky.sched/1",
    "buffers": {"a": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}}},
    "functions": {"f": {"params": ["v"], "program": [
      {"op": "async_start", "token": "t", "stream": {"kind": "computation", "id": 1}, "body": [{"op": "memset", "dst": "v[1:]", "value": 1}]},
      {"op": "async_done", "token": "t"}]}},
    "program": [{"op": "call", "fn": "f", "args": {"v": "a[4:]"}}, {"op": "call", "fn": "f", "args": {"v": "a[:4]"}}]})");
  const Command& first = p.program[0].as<Call>().body[0];
  EXPECT_EQ(first.id(), "/program/0/body/0");
  EXPECT_NE(first.as<AsyncStart>().token, p.program[1].as<Call>().body[0].as<AsyncStart>().token);  // per call instance
  const Command& memset = first.as<AsyncStart>().body[0];
  EXPECT_EQ(memset.pointer, "/functions/f/program/0/body/0");
  View v = resolve(p, memset.as<Memset>().dst, rank_ctx(p.mesh, 0));
  EXPECT_EQ(v.offset, 5);  // a[4:][1:]
  EXPECT_EQ(v.count(), 3);
}

TEST(Schedule, RecursiveCallsAreRejected) {
  auto errs = testing::load_errors(R"({"format": "thunky.sched/1", "buffers": {},
    "functions": {"f": {"program": [{"op": "call", "fn": "f"}]}}, "program": [{"op": "call", "fn": "f"}]})");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].message.find("recursive"), std::string::npos);
}

}  // namespace
}  // namespace thunky
