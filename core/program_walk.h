// One walk of a program as a host thread issues it: a block's commands in
// order, each async region forked onto its stream and joined back, calls
// inlined. It is resumable (a stack of frames, not recursion): a consumer
// takes one step at a time, and enters a control-flow command's block
// when it decides to. Control flow is a step of its own, as its meaning
// differs by consumer: the cpu backend runs it when its stream reaches it,
// cuda eager reads its predicate, a graph captures it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/schedule.h"
#include "core/status.h"

namespace thunky {

class ProgramWalk {
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
  };

  ProgramWalk(const Block& b, StreamId stream, bool in_loop = false) { stack_.push_back({&b, 0, stream, in_loop, nullptr}); }

  // The next step, or nothing at the end. A join of a token no live
  // async_start holds is refused (ThunkyError at its pointer).
  std::optional<Step> next() {
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.pos == f.block->size()) {
        const Frame done = f;
        stack_.pop_back();
        if (done.async) return Step{Step::Kind::fork_end, done.async, nullptr, done.stream, done.stream, done.in_loop};
        continue;
      }
      const Command& c = (*f.block)[f.pos++];
      const StreamId cur = f.stream;
      const bool in_loop = f.in_loop;
      // `f` may dangle from here on: the cases below push frames.
      std::optional<Step> step;
      std::visit(Overload{
          [&](const AsyncStart& a) {
            live_.push_back(&c);
            stack_.push_back({&a.body, 0, a.stream, in_loop, &c});
            step = Step{Step::Kind::fork, &c, nullptr, cur, a.stream, in_loop};
          },
          [&](const AsyncDone& d) { step = Step{Step::Kind::join, &c, take_live(c, d.token), cur, cur, in_loop}; },
          [&](const Call& x) { stack_.push_back({&x.body, 0, cur, in_loop, nullptr}); },
          [&](const OfFamily<OpFamily::compute, OpFamily::collective, OpFamily::group, OpFamily::control> auto&) {
            step = Step{Step::Kind::command, &c, nullptr, cur, cur, in_loop};
          },
      }, c.spec);
      if (step) return step;
    }
    return std::nullopt;
  }

  // Walks `b` next, on the stream of the last step (a branch or loop
  // block of the control-flow command just taken).
  void enter(const Block& b, StreamId stream, bool in_loop) { stack_.push_back({&b, 0, stream, in_loop, nullptr}); }

 private:
  struct Frame {
    const Block* block;
    size_t pos;
    StreamId stream;
    bool in_loop;
    const Command* async;  // the async_start whose body this is, or null
  };

  const Command* take_live(const Command& done, const std::string& token) {
    for (size_t i = live_.size(); i-- > 0;)
      if (live_[i]->as<AsyncStart>().token == token) {
        const Command* start = live_[i];
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        return start;
      }
    throw ThunkyError(done.pointer + "/token", "async_done of token '" + token + "', which no live async_start started");
  }

  std::vector<Frame> stack_;
  std::vector<const Command*> live_;  // async_starts not yet joined, in order
};

}  // namespace thunky
