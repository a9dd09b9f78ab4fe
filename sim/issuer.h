// The issuer: the engine's part that turns each rank's program into its
// streams' tasks, on demand, as a host thread would enqueue them, so that
// only the tasks between what a stream runs and what the issuer has
// reached are held. It walks blocks, async regions and calls, and takes
// the branches and trips that the sim hints or the functional model's
// decisions give. It owns each rank's walk (core/program_walk.h, numbered
// as the engine's tables), the rank's streams by id, its tokens' events, its cursors into the decisions, and the
// runs so far of commands inside loops. It fills the engine's tables of
// streams and events, which the engine runs.
#pragma once

#include <cstdint>
#include <memory_resource>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/program_walk.h"
#include "core/schedule.h"
#include "sim/engine.h"

namespace thunky::sim::internal {

struct Task {
  enum class Kind : uint8_t { op, record, wait };
  Kind kind = Kind::op;
  bool join = false;
  int32_t info = -1;
  int32_t instance = -1;  // k-th run inside a loop, -1 outside loops
  int32_t event = -1;     // record / wait
};

struct Stream {
  int64_t rank = 0;
  StreamId sid;
  std::vector<Task> tasks;
  size_t pc = 0;
  double since = 0;  // running or waiting in a collective: when its task began
  enum class State : uint8_t { ready, running, waiting_event, waiting_collective, done } state = State::ready;
};

struct Event {
  double t = 0;
  double ready = 0;     // when a stream waiting for it goes on: t plus the chip's event_latency_s
  int32_t stream = -1;  // the stream that recorded it
  int32_t waiter = -1;  // the stream waiting for it
  bool done = false;
};

struct CmdInfo;  // sim/engine_internal.h

// The tables the issuer fills and the engine runs.
struct StreamTables {
  std::pmr::vector<Stream>& streams;
  std::pmr::vector<Event>& events;
  std::pmr::vector<int>& free_events;  // event slots to reuse
  std::pmr::vector<int>& ready;        // streams that can step
};

class Issuer {
 public:
  // `infos` and `block_starts` are the commands' facts, numbered in
  // preorder (Engine::number).
  Issuer(const Program& p, const Decisions* decisions, const std::pmr::vector<CmdInfo>& infos, const std::pmr::vector<int>& block_starts, StreamTables tables,
         std::pmr::memory_resource* arena)
      : p_(p), decisions_(decisions), infos_(infos), block_starts_(block_starts), t_(tables), arena_(arena), ranks_(arena) {}

  // The simulated ranks (`ranks`, or, empty, all `mesh_size` of them) start
  // their programs on their main streams. A while loop whose trip count
  // passes `trip_limit` is refused (`limit_verb`: what thunky-sim does
  // with that many commands).
  void start(const std::vector<int64_t>& ranks, int64_t mesh_size, int64_t trip_limit, const char* limit_verb);

  // Issues until stream `si` has a task to run; false when its rank's
  // program is exhausted first.
  bool issue_until(int si);

  // The streams of `rank` that have been issued to.
  const std::pmr::vector<std::pair<StreamId, int>>& streams_of(int64_t rank) const { return ranks_[static_cast<size_t>(rank)].streams; }

 private:
  // The size of a command's subtree, by its number (CmdInfo::subtree).
  struct SubtreeOf {
    const std::pmr::vector<CmdInfo>* infos;
    int operator()(int info) const;
  };
  using Walk = BasicProgramWalk<SubtreeOf>;
  struct RankState {
    RankState(std::pmr::memory_resource* m, SubtreeOf subtree) : walk(subtree), streams(m), tokens(m), cursors(m), instances(m) {}
    Walk walk;
    std::pmr::vector<std::pair<StreamId, int>> streams;
    std::pmr::vector<std::pair<int, int>> tokens;  // async_start number -> the event its body's end records
    std::pmr::unordered_map<const Command*, size_t> cursors;
    std::pmr::unordered_map<int, int32_t> instances;  // commands inside loops -> runs so far
    Walk::Step step;  // the walk's last step
  };

  int block(int info, size_t k) const;
  int members_begin(int info) const { return block(info, 0); }
  int members_end(int info) const;
  int stream_index(int64_t rank, const StreamId& sid);
  int64_t decision(int64_t rank, const Command& c);
  int32_t instance(int64_t rank, int info, bool in_loop) { return in_loop ? ranks_[static_cast<size_t>(rank)].instances[info]++ : -1; }
  void push(int stream, Task t) { t_.streams[static_cast<size_t>(stream)].tasks.push_back(t); }
  int new_event();

  const Program& p_;
  const Decisions* decisions_;
  const std::pmr::vector<CmdInfo>& infos_;
  const std::pmr::vector<int>& block_starts_;
  StreamTables t_;
  std::pmr::memory_resource* arena_;
  std::pmr::vector<RankState> ranks_;
  std::vector<bool> written_;     // written_buffers: a cond on an unwritten axis index is decided by the rank
  std::vector<int64_t> stride_;  // of each mesh axis in the rank numbering
  int64_t trip_limit_ = 0;
  const char* limit_verb_ = "";
};

}  // namespace thunky::sim::internal
