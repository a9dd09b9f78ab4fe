// The simulator's issuer through its own interface: a program's numbered
// tables in, each stream's tasks out, issued on demand.
#include <gtest/gtest.h>

#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

#include "core/load.h"
#include "sim/engine_internal.h"
#include "sim/issuer.h"

namespace thunky::sim::internal {
namespace {

Program load(const std::string& program) {
  const std::string text = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]},
    "buffers": {"a": {"shape": [4], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "b": {"shape": [4], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "n": {"shape": [], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "p": {"shape": [], "dtype": "bool", "role": "inout", "init": {"kind": "zeros"}}},
    "program": )" + program + "}";
  auto p = load_schedule_text(text, "issue.json");
  if (!p) throw std::runtime_error(p.errors().front().message);
  return std::move(*p);
}

// The issuer over a program's tables, and what it issued.
struct Issued {
  explicit Issued(Program program) : p(std::move(program)) {
    number_commands(p.program, infos, starts);
    issuer = std::make_unique<Issuer>(p, nullptr, infos, starts, StreamTables{streams, events, free_events, ready}, &arena);
    issuer->start({}, p.mesh.size(), 1 << 20, "runs");
  }

  // Issues every rank's program to its end, taking each task as soon as
  // it is issued (as if each ran at once).
  void drain() {
    for (bool more = true; more;) {
      more = false;
      for (size_t s = 0; s < streams.size(); ++s) {
        streams[s].pc = streams[s].tasks.size();
        if (issuer->issue_until(static_cast<int>(s))) more = true;
      }
    }
  }

  // Stream `s`'s tasks: "op NAME" (with "#k" inside a loop), "record",
  // "wait", with " join" for a token's end and its async_done.
  std::vector<std::string> tasks(size_t s) const {
    std::vector<std::string> out;
    for (const Task& t : streams[s].tasks) {
      std::string line = t.kind == Task::Kind::op ? "op " + std::string(infos[static_cast<size_t>(t.info)].cmd->name)
                         : t.kind == Task::Kind::record ? "record"
                                                        : "wait";
      if (t.instance >= 0) {
        line += '#';  // piece by piece: GCC 12 warns (-Wrestrict, wrongly) of "#" + std::string
        line += std::to_string(t.instance);
      }
      if (t.join) line += " join";
      out.push_back(line);
    }
    return out;
  }

  Program p;
  std::pmr::monotonic_buffer_resource arena;
  std::pmr::vector<CmdInfo> infos{&arena};
  std::pmr::vector<int> starts{&arena};
  std::pmr::vector<Stream> streams{&arena};
  std::pmr::vector<Event> events{&arena};
  std::pmr::vector<int> free_events{&arena};
  std::pmr::vector<int> ready{&arena};
  std::unique_ptr<Issuer> issuer;
};

TEST(Issuer, AnAsyncRegionIsAForkEventAndAJoinEventBetweenTwoStreams) {
  Issued i(load(R"([
    {"op": "memzero", "name": "z1", "dst": "a"},
    {"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "memset", "name": "side", "dst": "b", "value": 1}]},
    {"op": "memzero", "name": "z2", "dst": "a"},
    {"op": "async_done", "token": "t"}])"));
  i.drain();
  // Two ranks, each with its computation stream (made first) and its
  // communication stream: rank 0's are streams 0 and 2, rank 1's 1 and 3.
  ASSERT_EQ(i.streams.size(), 4u);
  for (size_t main : {0u, 1u}) {
    const size_t side = main + 2;
    EXPECT_EQ(i.streams[main].rank, static_cast<int64_t>(main));
    EXPECT_EQ(i.streams[side].sid.kind, StreamId::Kind::communication);
    EXPECT_EQ(i.tasks(main), (std::vector<std::string>{"op z1", "record", "op z2", "wait join"}));
    EXPECT_EQ(i.tasks(side), (std::vector<std::string>{"wait", "op side", "record join"}));
    // The side stream waits for the fork the main stream records, and the
    // main stream's join for the event the side stream records at its end.
    EXPECT_EQ(i.streams[side].tasks[0].event, i.streams[main].tasks[1].event);
    EXPECT_EQ(i.streams[main].tasks[3].event, i.streams[side].tasks[2].event);
  }
}

TEST(Issuer, ACondHintedNotTakenIssuesOnlyItsElseBranch) {
  Issued i(load(R"([
    {"op": "cond", "pred": "p", "sim": {"taken": false},
     "then": [{"op": "memzero", "name": "then", "dst": "a"}],
     "else": [{"op": "memzero", "name": "else", "dst": "a"}, {"op": "copy", "name": "else2", "src": "a", "dst": "b"}]},
    {"op": "memzero", "name": "after", "dst": "a"}])"));
  i.drain();
  ASSERT_EQ(i.streams.size(), 2u);  // no side streams: one a rank
  for (size_t s : {0u, 1u}) EXPECT_EQ(i.tasks(s), (std::vector<std::string>{"op else", "op else2", "op after"}));
}

TEST(Issuer, AWhileLoopRunsItsCondOnceMoreThanItsBodyAndCountsEachRun) {
  Issued i(load(R"([
    {"op": "while", "cond_buf": "p", "sim": {"trip_count": 2},
     "cond": [{"op": "map", "name": "cond", "out": "p", "expr": "x > 0.0", "in": {"x": "n"}}],
     "body": [{"op": "copy", "name": "body", "src": "a", "dst": "b"}]}])"));
  i.drain();
  // Trip count 2: cond, body, cond, body, cond; each run numbered.
  for (size_t s : {0u, 1u})
    EXPECT_EQ(i.tasks(s), (std::vector<std::string>{"op cond#0", "op body#0", "op cond#1", "op body#1", "op cond#2"}));
}

TEST(Issuer, IssuingStopsWhereTheStreamAskedForHasATask) {
  Issued i(load(R"([
    {"op": "memzero", "name": "z1", "dst": "a"},
    {"op": "memzero", "name": "z2", "dst": "a"},
    {"op": "memzero", "name": "z3", "dst": "a"}])"));
  // On demand: asking for rank 0's stream issues one command, not three.
  ASSERT_TRUE(i.issuer->issue_until(0));
  EXPECT_EQ(i.tasks(0), (std::vector<std::string>{"op z1"}));
  EXPECT_TRUE(i.tasks(1).empty());
  i.drain();
  EXPECT_EQ(i.tasks(0), (std::vector<std::string>{"op z1", "op z2", "op z3"}));
  EXPECT_FALSE(i.issuer->issue_until(0));  // the program is exhausted
}

}  // namespace
}  // namespace thunky::sim::internal
