// One walk of a program as a host thread issues it: a block's commands in
// order, each async region forked onto its stream and joined back, calls
// inlined. It is resumable (a stack of frames, not recursion): a consumer
// takes one step at a time, and enters a control-flow command's block
// (or a while loop's blocks, trip by trip) when it decides to. Control
// flow is a step of its own, as its meaning differs by consumer: the cpu
// backend runs it when its stream reaches it, cuda eager reads its
// predicate, a graph captures it, the simulator takes the decided branch.
//
// A consumer that keeps tables by command may have the walk number each
// step in preorder (every command of the program, its blocks' commands
// right after it, taken or not): `Subtree` gives the size of a command's
// subtree from its number, and entering a block names the number of its
// first command. Without it (NoNumbers) the numbers mean nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/schedule.h"
#include "core/status.h"

namespace thunky {

// No numbering: the numbers of the steps mean nothing.
struct NoNumbers {
  int operator()(int) const { return 0; }
};

template <typename Subtree = NoNumbers>
class BasicProgramWalk {
 public:
  struct Step {
    enum class Kind : uint8_t {
      command,   // a command of the compute, collective, group or control families
      fork,      // an async_start: from `stream`, its body goes onto `target`
      fork_end,  // the end of an async_start's body, on `stream` (its target)
      join,      // an async_done on `stream`, of the async_start `start`
    };
    Kind kind = Kind::command;
    const Command* cmd = nullptr;    // the command, the async_start or the async_done
    const Command* start = nullptr;  // join: the async_start it joins
    StreamId stream;
    StreamId target;  // fork: where the body runs
    bool in_loop = false;
    int number = 0;        // cmd's number in preorder (fork_end: the async_start's)
    int start_number = 0;  // join: the async_start's number
    int tag = -1;          // the consumer's tag of `stream` (enter, tag_fork_body)
  };

  explicit BasicProgramWalk(Subtree subtree = {}) : subtree_(subtree) {}
  BasicProgramWalk(const Block& b, StreamId stream, bool in_loop = false, Subtree subtree = {}) : subtree_(subtree) { enter(b, stream, in_loop, 0); }

  // The next step, or nothing at the end. A join of a token no live
  // async_start holds is refused (ThunkyError at its pointer).
  std::optional<Step> next() {
    Step s;
    if (next(s)) return s;
    return std::nullopt;
  }
  // The same into `s`; false at the end.
  bool next(Step& s) {
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.loop) {
        // A while loop's blocks: cond, then body and cond again while trips are left.
        const While& w = f.loop->template as<While>();
        const StreamId s = f.stream;
        if (!f.body_next) {
          f.body_next = true;
          enter(w.cond, s, true, f.cond_number, f.tag);
        } else if (f.trip < f.trips) {
          f.body_next = false;
          ++f.trip;
          enter(w.body, s, true, f.number, f.tag);
        } else {
          stack_.pop_back();
        }
        continue;
      }
      if (f.pos == f.block->size()) {
        const Frame done = f;
        stack_.pop_back();
        if (done.async) {
          s = Step{Step::Kind::fork_end, done.async, nullptr, done.stream, done.stream, done.in_loop, done.async_number, 0, done.tag};
          return true;
        }
        continue;
      }
      prefetch_ahead(*f.block, f.pos);
      const Command& c = (*f.block)[f.pos++];
      const StreamId cur = f.stream;
      const bool in_loop = f.in_loop;
      const int number = f.number, tag = f.tag;
      f.number += subtree_(number);
      // Most commands are one step as they are: no need to visit them.
      const OpFamily family = op_family(c.op());
      if (family != OpFamily::stream && family != OpFamily::call) {
        s = Step{Step::Kind::command, &c, nullptr, cur, cur, in_loop, number, 0, tag};
        return true;
      }
      // `f` may dangle from here on: the cases below push frames.
      bool stepped = true;
      std::visit(Overload{
          [&](const AsyncStart& a) {
            live_.push_back({&c, number});
            Frame body{&a.body, 0, a.stream, in_loop, number + 1, -1};
            body.async = &c;
            body.async_number = number;
            stack_.push_back(body);
            s = Step{Step::Kind::fork, &c, nullptr, cur, a.stream, in_loop, number, 0, tag};
          },
          [&](const AsyncDone& d) {
            const auto [start, start_number] = take_live(c, d.token);
            s = Step{Step::Kind::join, &c, start, cur, cur, in_loop, number, start_number, tag};
          },
          [&](const Call& x) {
            enter(x.body, cur, in_loop, number + 1, tag);
            stepped = false;
          },
          [](const OfFamily<OpFamily::compute, OpFamily::collective, OpFamily::group, OpFamily::control> auto&) {},  // a command step, above
      }, c.spec);
      if (stepped) return true;
    }
    return false;
  }

  // Walks `b` next on `stream`, its first command numbered `first` (a
  // branch of the control-flow command just taken, or a program); its
  // steps carry `tag`, the consumer's name for the stream.
  void enter(const Block& b, StreamId stream, bool in_loop, int first, int tag = -1) {
    if (!b.empty()) stack_.push_back({&b, 0, stream, in_loop, first, tag});
  }
  // Right after a fork step: the steps of its body carry `tag`.
  void tag_fork_body(int tag) { stack_.back().tag = tag; }
  // Walks the while loop `w` next: its cond, then `trips` times its body
  // and cond again; the body's first command is numbered `body_first`, the
  // cond's `cond_first`.
  void enter_loop(const Command& w, int64_t trips, StreamId stream, int body_first, int cond_first, int tag = -1) {
    Frame f{nullptr, 0, stream, true, body_first, tag};
    f.loop = &w;
    f.trips = trips;
    f.cond_number = cond_first;
    stack_.push_back(f);
  }

 private:
  struct Frame {
    const Block* block;
    size_t pos;
    StreamId stream;
    bool in_loop;
    int number;                      // the next command's (a loop: its body's first)
    int tag;                         // the consumer's name for `stream`
    const Command* async = nullptr;  // the async_start whose body this is, or null
    int async_number = 0;
    const Command* loop = nullptr;   // a while loop's frame: the while
    int64_t trips = 0, trip = 0;
    int cond_number = 0;
    bool body_next = false;
  };

  std::pair<const Command*, int> take_live(const Command& done, const std::string& token) {
    for (size_t i = live_.size(); i-- > 0;)
      if (live_[i].first->template as<AsyncStart>().token == token) {
        const auto start = live_[i];
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        return start;
      }
    throw ThunkyError(done.pointer + "/token", "async_done of token '" + token + "', which no live async_start started");
  }

  Subtree subtree_;
  std::vector<Frame> stack_;
  std::vector<std::pair<const Command*, int>> live_;  // async_starts not yet joined, in order, with their numbers
};

using ProgramWalk = BasicProgramWalk<>;

}  // namespace thunky
