// The program walker: the steps of a block as a host thread issues it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/load.h"
#include "core/program_walk.h"
#include "core/status.h"

namespace thunky {
namespace {

// Each step as "kind op stream[->target]" (in_loop marked with *).
std::vector<std::string> steps(const Block& b) {
  std::vector<std::string> out;
  ProgramWalk walk(b, StreamId{});
  while (const auto s = walk.next()) {
    static const char* kKinds[] = {"command", "fork", "fork_end", "join"};
    std::string line = std::string(kKinds[static_cast<int>(s->kind)]) + " " + std::string(op_name(s->cmd->op())) + " " + s->stream.str();
    if (s->kind == ProgramWalk::Step::Kind::fork) line += "->" + s->target.str();
    if (s->kind == ProgramWalk::Step::Kind::join) line += " of " + s->start->pointer;
    out.push_back(line);
  }
  return out;
}

Program load(const std::string& program) {
  const std::string text = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [1]},
    "buffers": {"a": {"shape": [4], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "b": {"shape": [4], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "c": {"shape": [4], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "zeros"}}},
    "program": )" + program + "}";
  auto p = load_schedule_text(text, "walk.json");
  if (!p) throw std::runtime_error(p.errors().front().message);
  return std::move(*p);
}

TEST(ProgramWalk, AsyncRegionsForkOntoTheirStreamAndJoinBackInIssueOrder) {
  const Program p = load(R"([
    {"op": "memzero", "dst": "a"},
    {"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "memset", "dst": "b", "value": 1},
      {"op": "async_start", "token": "u", "stream": {"kind": "communication", "id": 1}, "body": [{"op": "copy", "src": "b", "dst": "c"}]},
      {"op": "async_done", "token": "u"}]},
    {"op": "memzero", "dst": "a"},
    {"op": "async_done", "token": "t"}])");
  // The body comes right after its fork, then its end on its own stream,
  // before the next command of the forking block; a nested region the same.
  EXPECT_EQ(steps(p.program), (std::vector<std::string>{
                                  "command memzero computation:0",
                                  "fork async_start computation:0->communication:0",
                                  "command memset communication:0",
                                  "fork async_start communication:0->communication:1",
                                  "command copy communication:1",
                                  "fork_end async_start communication:1",
                                  "join async_done communication:0 of /program/1/body/1",
                                  "fork_end async_start communication:0",
                                  "command memzero computation:0",
                                  "join async_done computation:0 of /program/1",
                              }));
}

TEST(ProgramWalk, ControlFlowIsOneStepAndItsBlocksAreWalkedOnlyWhenEntered) {
  const Program p = load(R"([
    {"op": "cond", "pred": "p", "then": [{"op": "memzero", "dst": "a"}], "else": [{"op": "memset", "dst": "a", "value": 2}]},
    {"op": "copy", "src": "a", "dst": "a"}])");
  ProgramWalk walk(p.program, StreamId{});
  auto s = walk.next();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cmd->op(), Op::cond);
  // The consumer decides: the else branch, in a loop for the sake of the flag.
  walk.enter(s->cmd->as<Cond>().else_, s->stream, true, 0);
  s = walk.next();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cmd->op(), Op::memset);
  EXPECT_TRUE(s->in_loop);
  s = walk.next();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cmd->op(), Op::copy);
  EXPECT_FALSE(s->in_loop);
  EXPECT_FALSE(walk.next());
}

TEST(ProgramWalk, AJoinOfATokenNoLiveAsyncStartHoldsIsRefusedAtItsPointer) {
  // Built by hand: the loader refuses such a program before any walk.
  Block b(2);
  b[0].set(AsyncStart{"t", StreamId{StreamId::Kind::communication, 0}, {}});
  b[0].pointer = "/program/0";
  b[1].set(AsyncDone{"t"});
  b[1].pointer = "/program/1";
  ProgramWalk walk(b, StreamId{});
  EXPECT_EQ(walk.next()->kind, ProgramWalk::Step::Kind::fork);
  EXPECT_EQ(walk.next()->kind, ProgramWalk::Step::Kind::fork_end);
  EXPECT_EQ(walk.next()->kind, ProgramWalk::Step::Kind::join);  // t was live
  Block again(1);
  again[0].set(AsyncDone{"t"});
  again[0].pointer = "/program/5";
  ProgramWalk second(again, StreamId{});
  try {
    second.next();
    FAIL() << "a join of a token never started was walked";
  } catch (const ThunkyError& e) {
    EXPECT_EQ(e.pointer(), "/program/5/token");
    EXPECT_NE(std::string(e.what()).find("no live async_start"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace thunky
