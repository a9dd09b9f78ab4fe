#include "core/load.h"
#include "core/validate.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <set>

#include "core/lower.h"
#include "tests/test_util.h"
#include "tools/gen.h"

namespace thunky {
namespace {

using testing::load_errors;
using testing::load_ok;

// A schedule over mesh x of `n` with buffers a, b (f32[8], inout) and the given program.
std::string sched(const std::string& program, int n = 1, const std::string& extra_buffers = "") {
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [)" + std::to_string(n) + R"(]},
    "buffers": {"a": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "iota"}},
                "b": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "in": {"shape": [8], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}})" +
         extra_buffers + R"(},
    "program": )" + program + "}";
}

std::string start(const std::string& tok, const std::string& body, const std::string& stream = "communication") {
  return R"({"op": "async_start", "token": ")" + tok + R"(", "stream": {"kind": ")" + stream + R"(", "id": 0}, "body": )" + body + "}";
}
std::string done(const std::string& tok) { return R"({"op": "async_done", "token": ")" + tok + R"("})"; }

bool has(const std::vector<Diagnostic>& errs, const std::string& pointer, const std::string& text) {
  for (const auto& e : errs)
    if (e.pointer == pointer && e.message.find(text) != std::string::npos) return true;
  return false;
}

TEST(Tokens, NeverAwaitedTwiceAndUnknown) {
  const std::string body = R"([{"op": "memzero", "dst": "b"}])";
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", body) + "]")), "/program/0/token", "never awaited"));
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", body) + "," + done("t") + "," + done("t") + "]")), "/program/2/token", "awaited twice"));
  EXPECT_TRUE(has(load_errors(sched("[" + done("t") + "," + start("t", body) + "," + done("t") + "]")), "/program/0/token", "no earlier async_start"));
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", body) + "," + start("t", body) + "," + done("t") + "]")), "/program/1/token", "started again"));
  // Awaited inside its own body: the token is not started until the body ends.
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", "[" + done("t") + "]") + "," + done("t") + "]")), "/program/0/body/0/token", "no earlier async_start"));
}

TEST(Tokens, MayNotCrossACondBranch) {
  const std::string body = R"([{"op": "memzero", "dst": "b"}])";
  // Awaiting an outer token inside a branch would await it on one path only.
  auto errs = load_errors(sched("[" + start("t", body) + R"(, {"op": "cond", "pred": "p", "then": [)" + done("t") + R"(], "else": []}])"));
  EXPECT_TRUE(has(errs, "/program/1/then/0/token", "did not start it"));
  // Starting inside a branch and awaiting outside is the same mistake.
  errs = load_errors(sched(R"([{"op": "cond", "pred": "p", "then": [)" + start("t", body) + R"(], "else": []}, )" + done("t") + "]"));
  EXPECT_TRUE(has(errs, "/program/0/then/0/token", "not awaited there"));
}

// Tokens left live are reported by name, whatever the order they started
// in; a region that joins what it forks (here, 50 branches one after
// another, each awaiting its own token) reports nothing.
TEST(Tokens, LiveTokensAreReportedInNameOrder) {
  const std::string body = R"([{"op": "memzero", "dst": "b"}])";
  auto errs = load_errors(sched("[" + start("zeta", body) + "," + start("alpha", body) + "," + start("mid", body) + "]"));
  std::vector<std::string> order;
  for (const auto& e : errs)
    if (e.message.find("never awaited") != std::string::npos) order.push_back(e.pointer);
  // alpha is /program/1, mid /program/2, zeta /program/0.
  EXPECT_EQ(order, (std::vector<std::string>{"/program/1/token", "/program/2/token", "/program/0/token"}));
  // Two tokens left live in one branch: the first by name is named.
  errs = load_errors(sched(R"([{"op": "cond", "pred": "p", "then": [)" + start("y", body) + "," + start("x", body) + R"(], "else": []}])"));
  EXPECT_TRUE(has(errs, "/program/0/then/1/token", "not awaited there"));
  std::string prog = "[";
  for (int i = 0; i < 50; ++i) {
    const std::string t = std::string("t").append(std::to_string(i));  // (GCC 12 warns falsely on "t" + std::string)
    prog += std::string(i ? "," : "") + R"({"op": "cond", "pred": "p", "then": [)" + start(t, body) + "," + done(t) + R"(], "else": []})";
  }
  auto ok = load_schedule_text(sched(prog + "]"), "t.json");
  EXPECT_TRUE(ok) << ok.errors().front().str();
}

// Top-level programs of 8,192 commands or more are parsed in chunks, one
// thread each: the program must come out whole and in order, errors found
// after parsing must still name their pointer, and of parse errors in two
// chunks the one earlier in the document is reported.
TEST(Loading, LargeProgramsParseWholeAndInOrder) {
  // 24,000 memsets, command i setting the value i: about 1.2 MB.
  auto program = [](int bad_op, int bad_key) {
    std::string prog = "[";
    for (int i = 0; i < 24000; ++i) {
      std::string extra = i == bad_key ? R"(, "colour": "red")" : "";
      std::string op = i == bad_op ? "memfill" : "memset";
      prog += std::string(i ? "," : "") + R"({"op": ")" + op + R"(", "dst": "b[ds(0, 4)]", "value": )" + std::to_string(i) + extra + "}";
    }
    return prog;
  };
  const std::string ok = sched(program(-1, -1) + "]");
  ASSERT_GE(ok.size(), size_t{1} << 20);
  auto p = load_schedule_text(ok, "big.json");
  ASSERT_TRUE(p) << p.errors().front().str();
  ASSERT_EQ(p->program.size(), 24000u);
  int out_of_place = 0;
  for (int i = 0; i < 24000; ++i)
    if (p->program[i].as<Memset>().value != i || p->program[i].pointer != "/program/" + std::to_string(i)) ++out_of_place;
  EXPECT_EQ(out_of_place, 0);
  // The last command writes an input: found by validation, after parsing.
  auto errs = load_errors(sched(program(-1, -1) + R"(, {"op": "memzero", "dst": "in"}])"));
  EXPECT_TRUE(has(errs, "/program/24000/dst", "role input"));
  // Chunks of 1,024 commands, taken in order by the threads: chunks 2
  // (command 3000) and 19 (command 20000) each meet an error, and the
  // first in the document is the one reported, on one thread or many.
  errs = load_errors(sched(program(3000, 20000) + "]"));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/3000/op") << errs[0].str();
  errs = load_errors(sched(program(20000, 12001) + "]"));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/12001/colour") << errs[0].str();
}

TEST(Loading, MoreCommandsThanThunkyTakesAreRefusedBeforeTheyAreRead) {
  // 4,194,305 empty objects (2^22 + 1, 12 MB of text): refused at the
  // program by its length, before any element is read (an element's own
  // error, "needs an op", would come first otherwise).
  std::string prog = "[";
  prog.reserve(3 * ((1u << 22) + 1) + 2);
  for (int64_t i = 0; i <= int64_t{1} << 22; ++i) prog += i ? ",{}" : "{}";
  auto errs = load_errors(sched(prog + "]"));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program");
  EXPECT_NE(errs[0].message.find("more than 4194304 commands"), std::string::npos) << errs[0].str();
}

TEST(Loading, KeysGivenTwiceAreErrors) {
  auto errs = load_errors(sched(R"([{"op": "copy", "src": "a", "dst": "b", "src": "in"}])"));
  EXPECT_TRUE(has(errs, "/program/0/src", "given twice"));
  errs = load_errors(sched(R"([{"op": "map", "out": "b", "expr": "u + v", "in": {"u": "a", "v": "in", "u": "b"}}])"));
  EXPECT_TRUE(has(errs, "/program/0/in/u", "given twice"));
  std::string many;
  for (int i = 0; i < 20; ++i) many += R"(, "s)" + std::to_string(i % 19) + R"(": {"shape": [2], "dtype": "f32"})";
  errs = load_errors(sched("[]", 1, many));
  // s0 .. s18, then s0 again: the 24th of 24 buffers.
  EXPECT_TRUE(has(errs, "/buffers/s0", "given twice"));
}

// A collective's axis is a name or a non-empty list of names; the error
// names the entry or the field.
TEST(Loading, CollectiveAxisMustBeNames) {
  auto errs = load_errors(sched(R"([{"op": "all_gather", "src": "a", "dst": "b", "axis": ["x", 3]}])", 2));
  EXPECT_TRUE(has(errs, "/program/0/axis/1", "expected an axis name"));
  errs = load_errors(sched(R"([{"op": "all_gather", "src": "a", "dst": "b", "axis": []}])", 2));
  EXPECT_TRUE(has(errs, "/program/0/axis", "non-empty list"));
}

// Malformed JSON keeps its line and column; integers past int64 are out of
// range, not wrapped.
TEST(Loading, MalformedJsonNamesLineAndColumn) {
  auto errs = load_errors("{\n  \"format\": \"thunky.sched/1\",\n  \"buffers\": {,}\n}");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "");
  EXPECT_NE(errs[0].message.find("line 3, column 15"), std::string::npos) << errs[0].message;
  errs = load_errors(sched("[]", 1, R"(, "big": {"shape": [18446744073709551615], "dtype": "f32"})"));
  EXPECT_TRUE(has(errs, "/buffers/big/shape/0", "out of range"));
}

// Nesting is bounded by the parser; brackets inside strings (after
// escaped quotes and backslashes) do not count.
TEST(Loading, NestingDeeperThan256IsRefusedOutsideStrings) {
  const std::string deep = std::string(300, '[') + "1" + std::string(300, ']');
  auto errs = load_errors(sched(R"([{"op": "memzero", "dst": "b", "name": )" + deep + "}]"));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].message.find("nested more than 256 levels"), std::string::npos) << errs[0].str();
  // 256 levels in all are allowed: the document, the program, the command
  // and its value make 3 (a value that is not a string is then refused by
  // the loader, not by the bound).
  errs = load_errors(sched(R"([{"op": "memzero", "dst": "b", "name": )" + std::string(253, '[') + "1" + std::string(253, ']') + "}]"));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].message.find("nested more than"), std::string::npos) << errs[0].str();
  EXPECT_EQ(errs[0].pointer, "/program/0/name");
  // One more (257) is refused.
  errs = load_errors(sched(R"([{"op": "memzero", "dst": "b", "name": )" + std::string(254, '[') + "1" + std::string(254, ']') + "}]"));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].message.find("nested more than 256 levels"), std::string::npos) << errs[0].str();
  // Escaped quotes and backslashes, the last one just before the closing
  // quote: were it taken for escaping that quote, the next command's name
  // (300 brackets) would be counted as nesting.
  const std::string name = std::string(300, '{') + R"(\" \\ \"\\)";
  auto p = load_schedule_text(sched(R"([{"op": "memzero", "dst": "b", "name": ")" + name + R"("}, )" +
                                    R"({"op": "memzero", "dst": "b", "name": ")" + std::string(300, '[') + R"("}])"),
                              "t.json");
  ASSERT_TRUE(p) << p.errors().front().str();
  EXPECT_EQ(p->program[0].name, std::string(300, '{') + R"(" \ "\)");
  EXPECT_EQ(p->program[1].name, std::string(300, '['));
}

// Loading is parse, lower, validate: in a long program each stage reports
// the error it meets first, wherever in the program it is, and the loader
// reports exactly what running the stages by hand reports.
TEST(Loading, LongProgramsReportWhatTheStagesFind) {
  // 12,000 commands (12 chunks): pairs of a map on a, then `extra` at
  // command `at` and `tail` appended.
  auto program = [](int at, const std::string& extra, const std::string& tail = "") {
    std::string prog = "[";
    for (int i = 0; i < 12000; ++i) {
      prog += std::string(i ? "," : "") + (i == at ? extra : R"({"op": "map", "out": "a", "expr": "v + 1.0", "in": {"v": "a"}})");
    }
    return prog + tail + "]";
  };
  auto after = [](const std::string& text) {
    Program p = parse_program_text(text, "test.json");
    lower(p);
    return validate(p);
  };
  auto same = [&](const std::string& text, int n = 1, const std::string& extra_buffers = "") {
    const std::string s = sched(text, n, extra_buffers);
    std::vector<Diagnostic> during = load_errors(s), then = after(s);
    EXPECT_FALSE(during.empty());
    EXPECT_EQ(during.size(), then.size());
    for (size_t i = 0; i < std::min(during.size(), then.size()); ++i) EXPECT_EQ(during[i].str(), then[i].str());
    return during;
  };
  // A token awaited twice at command 100, in the walk's first chunk.
  auto errs = same(program(100, done("t"), ""), 1);
  EXPECT_TRUE(has(errs, "/program/100/token", "no earlier async_start"));
  // A race late in the program: a map of b on a communication stream
  // never joined, and a later memzero of b (commands 11000 and 12000).
  errs = same(program(11000, start("t", R"([{"op": "map", "out": "b", "expr": "v", "in": {"v": "in"}}])"),
                      R"(, {"op": "memzero", "dst": "b"}, )" + done("t")),
              4);
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_TRUE(has(errs, "/program/12000", "race on buffer 'b'")) << errs[0].str();
  EXPECT_NE(errs[0].message.find("(on every rank)"), std::string::npos) << errs[0].str();
  // Control flow in the walk: a token started inside a cond branch at
  // command 4000 and awaited after it.
  errs = same(program(4000, R"({"op": "cond", "pred": "p", "then": [)" + start("c", "[]") + R"(], "else": []})", ", " + done("c")), 2);
  EXPECT_TRUE(has(errs, "/program/4000/then/0/token", "not awaited there")) << errs[0].str();
  // A map of b on a communication stream (command 8000) and a while loop
  // whose body zeroes b (command 12000), joined only after it.
  errs = same(program(8000, start("w", R"([{"op": "map", "out": "b", "expr": "v", "in": {"v": "b"}}])"),
                      R"(, {"op": "while", "cond_buf": "p", "cond": [], "body": [{"op": "memzero", "dst": "b"}]}, )" + done("w")),
              2);
  EXPECT_TRUE(has(errs, "/program/12000/body/0", "race on buffer 'b'")) << errs[0].str();
  // Never awaited.
  errs = same(program(5000, start("late", "[]")), 2);
  EXPECT_TRUE(has(errs, "/program/5000/token", "never awaited"));
  // A view whose size moves with the rank: rank 2 goes out of bounds at
  // command 7000 (x + 7 > 8 elements of a).
  errs = same(program(7000, R"({"op": "memzero", "dst": "a[0:x + 7]"})"), 4);
  EXPECT_TRUE(has(errs, "/program/7000/dst", "rank 2"));
  // Sizes that move with the rank may make the collective sequences
  // differ: rank 0 all-reduces 1 element at command 6000, rank 1 two.
  errs = same(program(6000, R"({"op": "all_reduce", "src": "a[ds(0, x + 1)]", "dst": "b[ds(0, x + 1)]", "axis": "x"})"), 2);
  EXPECT_TRUE(has(errs, "/program/6000", "deadlock: ranks 0 and 1")) << errs[0].str();
  // A rank-dependent view out of bounds on ranks 4 and up only (x * 2 + 2 > 8).
  errs = same(program(9000, R"({"op": "memzero", "dst": "a[ds(x * 2, 2)]"})"), 8);
  EXPECT_TRUE(has(errs, "/program/9000/dst", "rank 4"));
  // A buffer error (a values list too short) comes before the walk's.
  errs = same(program(100, done("t")), 1, R"(, "v": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "values", "values": [1]}})");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/buffers/v/init/values");
  // A parse error comes before any walk's, however late it is.
  errs = load_errors(sched(program(100, done("t"), R"(, {"op": "memzero", "dst": "nowhere"})")));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/12000/dst") << errs[0].str();
  EXPECT_NE(errs[0].message.find("unknown buffer 'nowhere'"), std::string::npos);
  // And a valid long program loads whole.
  auto p = load_schedule_text(sched(program(-1, "")), "big.json");
  ASSERT_TRUE(p) << p.errors().front().str();
  EXPECT_EQ(p->program.size(), 12000u);
}

// Ranks are walked on several threads when there are many. The error
// reported is the lowest failing rank's first, whichever thread found it.
TEST(Loading, TheLowestFailingRanksFirstErrorIsReported) {
  // Mesh x of 16; 20,000 memsets of b[ds(x % 2, 4)] (a ref that moves with
  // the rank).
  std::string prog = "[";
  for (int i = 0; i < 20000; ++i) {
    std::string dst = "b[ds(x % 2, 4)]";
    // Command 15000 is out of bounds on ranks 7..15 (x + 2 > 8), command
    // 5000 only on ranks 12..15 (offset 8 of 8 elements). On two threads,
    // ranks 1..7 fail first at 15000, ranks 8..15 at 5000.
    if (i == 15000) dst = "a[ds(x, 2)]";
    if (i == 5000) dst = "a[ds(x // 12 * 8, 1)]";
    prog += std::string(i ? "," : "") + R"({"op": "memset", "dst": ")" + dst + R"(", "value": 1})";
  }
  auto errs = load_errors(sched(prog + "]", 16));
  ASSERT_EQ(errs.size(), 1u);
  // x = 7 is the lowest failing rank; it passes command 5000 (7 // 12 = 0).
  EXPECT_EQ(errs[0].pointer, "/program/15000/dst") << errs[0].str();
  EXPECT_NE(errs[0].message.find("rank 7"), std::string::npos) << errs[0].str();
}

TEST(Validation, WriteToAnInputIsAnError) {
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "memzero", "dst": "in[2:]"}])")), "/program/0/dst", "role input"));
}

TEST(Validation, ShapeAndDtypeRules) {
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "copy", "src": "a[:4]", "dst": "b[:2]"}])")), "/program/0/dst", "equal byte sizes"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "copy", "src": "a[:, 1]", "dst": "b"}])")), "/program/0/src", "too many indices"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "memzero", "dst": "nope"}])")), "/program/0/dst", "unknown buffer"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "map", "out": "b", "expr": "q + 1", "in": {"v": "a"}}])")), "/program/0/expr", "unknown name 'q'"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "cond", "pred": "a[0]", "then": []}])")), "/program/0/pred", "bool scalar"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "gemm", "a": "m", "b": "m", "c": "mm"}])", 1, R"(, "m": {"shape": [2, 3], "dtype": "f32"}, "mm": {"shape": [2, 2], "dtype": "f32"})")),
                  "/program/0", "contraction dimensions differ"));
}

TEST(Validation, ViewsAreCheckedOnEveryRank) {
  // a[ds(x * 3, 3)] fits on ranks 0 and 1 (rows 0..6) but not on rank 2 (rows 6..9).
  auto errs = load_errors(sched(R"([{"op": "memzero", "dst": "a[ds(x * 3, 3)]"}])", 3));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/0/dst");
  EXPECT_NE(errs[0].message.find("rank 2"), std::string::npos);
}

TEST(Validation, LoweringRecordsHowViewsUseTheRank) {
  auto use = [](const std::string& program) {
    auto p = load_schedule_text(sched(program, 2), "t.json");
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.errors()[0].str());
    return p.ok() ? p.value().rank_use : Program::RankUse{.moves = true, .sized = true, .positional = true, .moving_buffers = {}};
  };
  // Fixed views: neither flag.
  auto u = use(R"([{"op": "memzero", "dst": "a[2:4]"}])");
  EXPECT_FALSE(u.moves);
  EXPECT_FALSE(u.sized);
  // A ds start over x places the view by rank; a ds size over x sizes it.
  u = use(R"([{"op": "memzero", "dst": "a[ds(x * 2, 2)]"}])");
  EXPECT_TRUE(u.moves);
  EXPECT_FALSE(u.sized);
  u = use(R"([{"op": "memzero", "dst": "a[ds(0, x + 1)]"}])");
  EXPECT_TRUE(u.sized);
  // Nested in an async body counts; so do communicator groups.
  u = use("[" + start("t", R"([{"op": "memzero", "dst": "b[ds(x, 1)]"}])") + "," + done("t") + "]");
  EXPECT_TRUE(u.moves);
  u = use(R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "x", "groups": [[0], [1]]}])");
  EXPECT_TRUE(u.moves);
  EXPECT_FALSE(u.sized);
  // A gather or scatter within one buffer is checked by the rank's place
  // in its communicator (in place, src must be the rank's slice of dst),
  // though no view moves; between two buffers it is not.
  u = use(R"([{"op": "all_gather", "src": "a[0:2]", "dst": "a[4:8]", "axis": "x"}])");
  EXPECT_FALSE(u.moves);
  EXPECT_TRUE(u.positional);
  u = use(R"([{"op": "reduce_scatter", "src": "a", "dst": "b[0:4]", "axis": "x"}])");
  EXPECT_FALSE(u.positional);
}

TEST(Loading, EveryRefIsBoundAndEveryCommandCounted) {
  // A loaded program has every ref bound to its buffer, its commands
  // counted (the async_start, the memzero in its body, the async_done, the
  // copy: 4) and how views use the rank.
  auto p = load_schedule_text(sched("[" + start("t", R"([{"op": "memzero", "dst": "b[ds(x, 2)]"}])") + "," + done("t") +
                                    R"(, {"op": "copy", "src": "a", "dst": "b"}])", 2), "t.json");
  ASSERT_TRUE(p.ok()) << p.errors()[0].str();
  EXPECT_EQ(p.value().command_count, 4);
  EXPECT_EQ(p.value().program[0].as<AsyncStart>().body[0].as<Memzero>().dst.buffer, 1);  // b, the second buffer
  EXPECT_EQ(p.value().program[2].as<Copy>().src.buffer, 0);          // a
  EXPECT_TRUE(p.value().rank_use.moves);
  // Refs are bound once the whole file is read: a malformed command is
  // reported before an earlier command's unknown buffer.
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "memzero", "dst": "nope"}, {"op": "bogus"}])")), "/program/1/op", "unknown op 'bogus'"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "memzero", "dst": "nope"}])")), "/program/0/dst", "unknown buffer 'nope'"));
}

TEST(Validation, MovingViewsAreCheckedOnEveryRankWithoutRaceTracking) {
  // a[ds(x * 3, 3)] overflows a's 8 rows on rank 2 (rows 6..9), whether or
  // not races are tracked, and inside a PTX kernel's CPU fallback too.
  ValidateOptions no_races;
  no_races.races = false;
  auto p = load_schedule_text(sched(R"([{"op": "memzero", "dst": "a[ds(x * 3, 3)]"}])", 3), "t.json", no_races);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.errors()[0].message.find("rank 2"), std::string::npos) << p.errors()[0].message;
  auto errs = load_errors(sched(R"([{"op": "ptx_kernel", "args": ["b[0:3]"], "written": [true], "kernel_name": "k", "ptx": ".version 8.0",
                                     "cpu": {"out": "a[ds(x * 3, 3)]", "expr": "v", "in": {"v": "b[0:3]"}}}])", 3));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/0/cpu/out");
  EXPECT_NE(errs[0].message.find("rank 2"), std::string::npos) << errs[0].message;
}

TEST(Collectives, CountRulesNameBothShapes) {
  // all_gather over 2 ranks: dst must hold 2 x 4 = 8 elements, b[:6] has 6.
  auto errs = load_errors(sched(R"([{"op": "all_gather", "src": "a[:4]", "dst": "b[:6]", "axis": "x"}])", 2));
  ASSERT_TRUE(has(errs, "/program/0/dst", "n x src"));
  EXPECT_NE(errs[0].message.find("f32[4]"), std::string::npos);
  EXPECT_NE(errs[0].message.find("f32[6]"), std::string::npos);
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "reduce_scatter", "src": "a", "dst": "b[:2]", "axis": "x"}])", 2)), "/program/0/dst", "n x dst"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "all_reduce", "src": "a[:4]", "dst": "a[2:6]", "axis": "x"}])", 2)), "/program/0/dst", "overlap"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "y"}])", 2)), "/program/0/axis", "unknown mesh axis"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "pairs": [[0, 2]]}])", 2)), "/program/0/pairs/0", "outside"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "x", "groups": [[0, 1], [2]]}])", 4)), "/program/0/groups", "equal size"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "collective_group", "body": [{"op": "memzero", "dst": "b"}]}])", 2)), "/program/0/body/0/op", "only collectives"));
}

TEST(Collectives, InPlaceFormsAreAccepted) {
  // all_gather with src = this rank's slice of dst, all_reduce in place.
  load_ok(sched(R"([{"op": "all_gather", "src": "a[ds(x * 4, 4)]", "dst": "a", "axis": "x"},
                    {"op": "all_reduce", "src": "b", "dst": "b", "axis": "x"},
                    {"op": "reduce_scatter", "src": "a", "dst": "a[ds(x * 4, 4)]", "axis": "x"}])", 2));
}

TEST(Collectives, InPlaceRulesAreCheckedOnEveryRank) {
  // a[ds(0, 4)] is rank 0's slice of a (position 0 x 4 elements) but not
  // rank 1's (which starts at element 4): only rank 1 breaks the in-place
  // rule, though no view moves with the rank.
  auto errs = load_errors(sched(R"([{"op": "all_gather", "src": "a[ds(0, 4)]", "dst": "a", "axis": "x"}])", 2));
  EXPECT_TRUE(has(errs, "/program/0/dst", "overlap"));
}

TEST(CollectiveOrder, RankDependentSizesAreADeadlock) {
  // Rank 0 all-reduces 1 element, rank 1 two: the sequences differ.
  auto p = load_schedule_text(sched(R"([{"op": "all_reduce", "src": "a[ds(0, x + 1)]", "dst": "b[ds(0, x + 1)]", "axis": "x"}])", 2), "t.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_NE(p.errors()[0].message.find("deadlock: ranks 0 and 1"), std::string::npos);
}

TEST(Races, BitcastViewsRaceByTheirBytes) {
  // b is f32 [8] (32 bytes). b.bitcast(u8)[4:8] is bytes [4, 8): element 1.
  // A write of it on communication:0 races with a read of b[1:2] (bytes
  // [4, 8)) before the join, not with one of b[2:4] (bytes [8, 16)).
  auto racy = [](const std::string& read) {
    auto p = load_schedule_text(sched("[" + start("t", R"([{"op": "memset", "dst": "b.bitcast(u8)[4:8]", "value": 1}])") +
                                      R"(, {"op": "copy", "src": ")" + read + R"(", "dst": "a[:2]"}, )" + done("t") + "]"),
                                "t.json");
    return p.ok() ? std::string() : p.errors()[0].message;
  };
  EXPECT_NE(racy("b[0:2]").find("race on buffer 'b' bytes [4, 8)"), std::string::npos) << racy("b[0:2]");
  EXPECT_EQ(racy("b[2:4]"), "");
}

TEST(Races, UnjoinedStreamsRaceAndTheReportNamesBoth) {
  // b is written on communication:0 and read on computation:0 before the join.
  auto p = load_schedule_text(sched("[" + start("t", R"([{"op": "memset", "dst": "b", "value": 1}])") +
                                    R"(, {"op": "copy", "src": "b[:4]", "dst": "a[:4]"}, )" + done("t") + "]"),
                              "t.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.exit_code(), 1);
  const auto& m = p.errors()[0].message;
  EXPECT_NE(m.find("race on buffer 'b' bytes [0, 16)"), std::string::npos) << m;
  EXPECT_NE(m.find("/program/0/body/0"), std::string::npos);
  EXPECT_NE(m.find("/program/1"), std::string::npos);
  EXPECT_NE(m.find("async_done of token 't'"), std::string::npos);
}

TEST(Races, RankDependentViewsRaceOnlyWhereTheyOverlap) {
  // 4 ranks. The communication stream zeroes a[4:6] while the main stream,
  // unjoined, zeroes a[ds(x * 2, 2)]: rows 2x..2x+1 meet rows 4..5 only on
  // rank 2, bytes [16, 24). b is zeroed on both streams on every rank.
  auto errs = load_errors(sched("[" + start("t", R"([{"op": "memzero", "dst": "a[4:6]"}, {"op": "memzero", "dst": "b"}])") +
                                R"(, {"op": "memzero", "dst": "a[ds(x * 2, 2)]"}, {"op": "memzero", "dst": "b[0:2]"}, )" + done("t") + "]", 4));
  ASSERT_EQ(errs.size(), 2u);
  std::string on_a, on_b;
  for (const auto& e : errs) (e.message.find("buffer 'a'") != std::string::npos ? on_a : on_b) = e.message;
  EXPECT_NE(on_a.find("bytes [16, 24)"), std::string::npos) << on_a;
  EXPECT_NE(on_a.find("(on ranks 2)"), std::string::npos) << on_a;
  // b's views do not move with the rank: one report for all four ranks.
  EXPECT_NE(on_b.find("bytes [0, 8)"), std::string::npos) << on_b;
  EXPECT_NE(on_b.find("(on every rank)"), std::string::npos) << on_b;
}

TEST(Races, MovingRowsOfAMatrixAreCheckedOnEveryRank) {
  // c is f32[4, 8]. The main stream writes c[x, ds(2, 2)] (elements 8x+2,
  // 8x+3) while the communication stream, unjoined, writes c[2, 3:5]
  // (elements 19, 20): they meet on rank 2 only, at element 19, bytes
  // [76, 80).
  const std::string c = R"(, "c": {"shape": [4, 8], "dtype": "f32"})";
  auto errs = load_errors(sched("[" + start("t", R"([{"op": "memzero", "dst": "c[2, 3:5]"}])") +
                                R"(, {"op": "memzero", "dst": "c[x, ds(2, 2)]"}, )" + done("t") + "]", 4, c));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].message.find("bytes [76, 80)"), std::string::npos) << errs[0].message;
  EXPECT_NE(errs[0].message.find("(on ranks 2)"), std::string::npos) << errs[0].message;
  // c[x + 1, ds(0, 2)] leaves c's 4 rows on rank 3 (row 4) only.
  errs = load_errors(sched(R"([{"op": "memzero", "dst": "c[x + 1, ds(0, 2)]"}])", 4, c));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].message.find("index 4 out of bounds"), std::string::npos) << errs[0].message;
  EXPECT_NE(errs[0].message.find("rank 3"), std::string::npos) << errs[0].message;
}

TEST(Races, ExclusiveBranchesAndJoinedWorkDoNotRace) {
  const std::string w = R"([{"op": "memset", "dst": "b", "value": 1}])";
  load_ok(sched(R"([{"op": "cond", "pred": "p", "then": [)" + start("t", w) + "," + done("t") + R"(], "else": [)" +
                start("u", w, "computation") + "," + done("u") + R"(]}, {"op": "copy", "src": "b", "dst": "a"}])", 2));
}

// The ring collective matmuls: every single async_done removed
// leaves a GEMM reading a ring buffer that a shift still writes.
class RingRaces : public ::testing::TestWithParam<int64_t> {};

TEST_P(RingRaces, RemovingAnyAsyncDoneIsReportedAsARace) {
  gen::RingMatmulOptions o{GetParam(), 2, 4, 2, "f32", false};
  for (bool bidir : {false, true}) {
    json s = bidir ? gen::bidirectional_ring_matmul(o) : gen::ring_matmul(o);
    load_ok(s.dump());  // the correct schedule passes
    int removed = 0;
    for (size_t i = 0; i < s["program"].size(); ++i) {
      if (s["program"][i]["op"] != "async_done") continue;
      json broken = s;
      broken["program"].erase(i);
      auto p = load_schedule_text(broken.dump(), "ring.json");
      ASSERT_FALSE(p.ok());
      bool race = false;
      for (const auto& e : p.errors()) race |= e.kind == ErrorKind::schedule && e.message.find("race on buffer") != std::string::npos;
      EXPECT_TRUE(race) << (bidir ? "bidirectional" : "unidirectional") << " N=" << GetParam() << " without /program/" << i;
      ++removed;
    }
    // One async_done per shift step: N - 1 unidirectional, ceil((N - 1) / 2) bidirectional.
    EXPECT_EQ(removed, bidir ? (GetParam() / 2) : GetParam() - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks2To8, RingRaces, ::testing::Range<int64_t>(2, 9));

TEST(Races, LiteralBidirectionalScheduleRacesAtFourRanks) {
  // With N = 4 the literal sizing gives a workspace of min(2, num_pairs) = 1
  // pair buffer. The middle shift (step 2, launched in the prologue) writes
  // pair0[:m] while GEMM 1 reads pair0: bytes [0, 2 * 4 * 4) of pair0 for
  // m_block = 2, k = 4, f32. A real race.
  gen::RingMatmulOptions o{4, 2, 4, 2, "f32", true};
  auto p = load_schedule_text(gen::bidirectional_ring_matmul(o).dump(), "literal.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_NE(p.errors()[0].message.find("race on buffer 'pair0' bytes [0, 32)"), std::string::npos) << p.errors()[0].message;
  // At every other N the literal sizing is race-free.
  for (int64_t n : {1, 2, 3, 5, 6, 7, 8}) {
    o.ranks = n;
    load_ok(gen::bidirectional_ring_matmul(o).dump());
  }
}


// ---- the race checker against a reference ----
// Random single-rank schedules: copies, memzeros and maps over slices of
// three buffers, on four streams forked and joined by (nested) tokens. The
// reference orders commands by an explicit graph (stream order; a fork's
// record before the target's wait; a body's end before the join) and
// calls two commands a race when neither reaches the other, they are on
// different streams, and their byte ranges on a buffer overlap with a
// write. The checker must find a race exactly when the reference does, and
// every pair it names must be one of the reference's.
struct RandomRaceCase {
  nlohmann::ordered_json schedule;
  std::set<std::pair<std::string, std::string>> races;  // both orders
};

RandomRaceCase random_race_case(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  struct Access {
    int buffer;
    int64_t lo, hi;  // elements
    bool write;
  };
  struct Op {
    std::string pointer, stream;
    std::vector<Access> accesses;
  };
  std::vector<Op> ops;
  // Per stream its items in order: an op (>= 0), or an event: record (-2 - 2e), wait (-3 - 2e).
  std::map<std::string, std::vector<int64_t>> items;
  int events = 0, tokens = 0;
  std::vector<std::pair<std::string, int>> live;  // started, not yet awaited: token, its end event
  auto slice = [&](int64_t& lo, int64_t& hi) {
    lo = pick(13);
    hi = lo + 1 + pick(static_cast<int>(16 - lo));
  };
  std::function<nlohmann::ordered_json(const std::string&, int, int, const std::string&)> block = [&](const std::string& stream, int depth, int count,
                                                                                                       const std::string& ptr) {
    nlohmann::ordered_json cmds = nlohmann::ordered_json::array();
    for (int i = 0; i < count; ++i) {
      const std::string at = ptr + "/" + std::to_string(cmds.size());
      const int r = pick(20);
      if (r < 5 && depth < 2) {
        const char* targets[] = {"communication:0", "communication:1", "computation:1"};
        const std::string target = targets[pick(3)], token = "t" + std::to_string(tokens++);
        const int fork = events++;
        items[stream].push_back(-2 - 2 * fork);
        items[target].push_back(-3 - 2 * fork);
        auto body = block(target, depth + 1, 1 + pick(3), at + "/body");
        const int end = events++;
        items[target].push_back(-2 - 2 * end);
        const bool comm = target.rfind("communication", 0) == 0;
        cmds.push_back({{"op", "async_start"}, {"token", token}, {"stream", {{"kind", comm ? "communication" : "computation"}, {"id", target.back() - '0'}}}, {"body", body}});
        live.emplace_back(token, end);
      } else if (r < 8 && !live.empty()) {
        const int k = pick(static_cast<int>(live.size()));
        items[stream].push_back(-3 - 2 * live[k].second);
        cmds.push_back({{"op", "async_done"}, {"token", live[k].first}});
        live.erase(live.begin() + k);
      } else {
        Op op{at, stream, {}};
        const int kind = pick(3);
        int64_t lo, hi;
        slice(lo, hi);
        const int b = pick(3), other = pick(3);
        const int64_t n = hi - lo, olo = pick(static_cast<int>(17 - n));
        auto ref = [](int buf, int64_t l, int64_t h) { return "b" + std::to_string(buf) + "[" + std::to_string(l) + ":" + std::to_string(h) + "]"; };
        if (kind == 0) {
          op.accesses = {{b, lo, hi, false}, {other, olo, olo + n, true}};
          cmds.push_back({{"op", "copy"}, {"src", ref(b, lo, hi)}, {"dst", ref(other, olo, olo + n)}});
        } else if (kind == 1) {
          op.accesses = {{b, lo, hi, true}};
          cmds.push_back({{"op", "memzero"}, {"dst", ref(b, lo, hi)}});
        } else {
          op.accesses = {{b, lo, hi, true}, {other, olo, olo + n, false}};
          cmds.push_back({{"op", "map"}, {"out", ref(b, lo, hi)}, {"expr", "v + 1.0"}, {"in", {{"v", ref(other, olo, olo + n)}}}});
        }
        items[stream].push_back(static_cast<int64_t>(ops.size()));
        ops.push_back(op);
      }
    }
    return cmds;
  };
  auto program = block("computation:0", 0, 2 + pick(7), "/program");
  for (const auto& [token, end] : live) {  // every token is awaited
    items["computation:0"].push_back(-3 - 2 * end);
    program.push_back({{"op", "async_done"}, {"token", token}});
  }
  RandomRaceCase out;
  out.schedule = {{"format", "thunky.sched/1"},
                  {"buffers", {{"b0", {{"shape", {16}}, {"dtype", "f32"}}}, {"b1", {{"shape", {16}}, {"dtype", "f32"}}}, {"b2", {{"shape", {16}}, {"dtype", "f32"}}}}},
                  {"program", program}};
  // The graph: nodes are (stream, position); edges along each stream and
  // from each record to its waits.
  std::map<std::pair<std::string, size_t>, std::vector<std::pair<std::string, size_t>>> next;
  std::map<int, std::pair<std::string, size_t>> record_at;
  std::map<int, std::vector<std::pair<std::string, size_t>>> waits_at;
  std::map<int64_t, std::pair<std::string, size_t>> op_at;
  for (const auto& [stream, list] : items)
    for (size_t k = 0; k < list.size(); ++k) {
      if (k > 0) next[{stream, k - 1}].push_back({stream, k});
      const int64_t it = list[k];
      if (it >= 0) op_at[it] = {stream, k};
      else if ((-it) % 2 == 0) record_at[static_cast<int>((-it - 2) / 2)] = {stream, k};
      else waits_at[static_cast<int>((-it - 3) / 2)].push_back({stream, k});
    }
  for (const auto& [e, rec] : record_at)
    for (const auto& w : waits_at[e]) next[rec].push_back(w);
  auto reaches = [&](std::pair<std::string, size_t> from, std::pair<std::string, size_t> to) {
    std::set<std::pair<std::string, size_t>> seen;
    std::vector<std::pair<std::string, size_t>> stack{from};
    while (!stack.empty()) {
      auto x = stack.back();
      stack.pop_back();
      if (x == to) return true;
      for (const auto& y : next[x])
        if (seen.insert(y).second) stack.push_back(y);
    }
    return false;
  };
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[i].stream == ops[j].stream || reaches(op_at[i], op_at[j]) || reaches(op_at[j], op_at[i])) continue;
      for (const auto& x : ops[i].accesses)
        for (const auto& y : ops[j].accesses)
          if (x.buffer == y.buffer && x.lo < y.hi && y.lo < x.hi && (x.write || y.write)) {
            out.races.insert({ops[i].pointer, ops[j].pointer});
            out.races.insert({ops[j].pointer, ops[i].pointer});
          }
    }
  return out;
}

TEST(RaceChecker, AgreesWithAReferenceOnRandomSchedules) {
  int with_races = 0, checked = 0;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const RandomRaceCase c = random_race_case(seed);
    auto p = load_schedule_text(c.schedule.dump(), "random.json");
    ++checked;
    if (c.races.empty()) {
      EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.errors()[0].str());
      continue;
    }
    ++with_races;
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.exit_code(), 1);
    for (const auto& e : p.errors()) {
      // "... race on buffer 'b1' bytes [a, b): P1 (...) and P2 (...) are not ordered ..."
      const std::string& m = e.message;
      const size_t first = m.find("): /program"), and_at = m.find(") and /program", first + 1);
      ASSERT_NE(first, std::string::npos) << m;
      ASSERT_NE(and_at, std::string::npos) << m;
      const std::string p1 = m.substr(first + 3, m.find(' ', first + 3) - first - 3);
      const std::string p2 = m.substr(and_at + 6, m.find(' ', and_at + 6) - and_at - 6);
      EXPECT_TRUE(c.races.count({p1, p2})) << "not a race by the reference: " << p1 << " and " << p2;
    }
  }
  // Both outcomes occur often enough to mean something.
  EXPECT_GT(with_races, 30);
  EXPECT_GT(checked - with_races, 30);
}

}  // namespace
}  // namespace thunky
