#include "sim/issuer.h"

#include <algorithm>

#include "core/control_flow.h"
#include "sim/engine_internal.h"

namespace thunky::sim::internal {

int Issuer::block(int info, size_t k) const { return block_start(infos_, block_starts_, info, k); }

int Issuer::members_end(int info) const { return internal::members_end(infos_, block_starts_, info); }

int Issuer::stream_index(int64_t rank, const StreamId& sid) {
  auto& mine = ranks_[static_cast<size_t>(rank)].streams;
  for (const auto& [id, s] : mine)
    if (id == sid) return s;
  Stream s;
  s.rank = rank;
  s.sid = sid;
  t_.streams.push_back(std::move(s));
  const int idx = static_cast<int>(t_.streams.size()) - 1;
  mine.emplace_back(sid, idx);
  t_.ready.push_back(idx);
  return idx;
}

int64_t Issuer::decision(int64_t rank, const Command& c) {
  if (decisions_) {
    const auto& per = (*decisions_)[rank];
    auto it = per.find(c.id());
    size_t& cursor = ranks_[static_cast<size_t>(rank)].cursors[&c];
    if (it != per.end() && cursor < it->second.size()) return it->second[cursor++];
    if (it != per.end()) throw ThunkyError(c.pointer, "the functional model ran " + c.id() + " fewer times than the timing model expands it");
  }
  // A branch its rank's coordinates decide needs no run to know.
  if (std::optional<int> axis = deciding_axis(p_, c, written_)) return branch_at(c, rank / stride_[*axis] % p_.mesh.shape[*axis]);
  if (std::optional<int64_t> k = hinted_branch(c)) return *k;
  if (const While* w = c.get_if<While>(); w && w->trip_count) {
    const int64_t trips = *w->trip_count;
    if (trips > trip_limit_)
      throw ThunkyError(c.pointer + "/sim/trip_count", "a trip count of " + std::to_string(trips) + " passes the " + std::to_string(trip_limit_) +
                                                            " commands thunky-sim " + limit_verb_);
    return trips;
  }
  if (!decisions_) throw ThunkyError(c.pointer, std::string(op_name(c.op())) + " " + c.id() + " needs a sim hint (" +
                                                    (c.op() == Op::cond ? "\"sim\": {\"taken\": true}" : c.op() == Op::switch_ ? "\"sim\": {\"branch\": k}" : "\"sim\": {\"trip_count\": n}") +
                                                    ") or inputs for the functional model");
  // The functional model never reached this command (it sits in a branch not taken).
  return 0;
}

void Issuer::enter(int64_t rank, const Block& b, int base, int stream, bool in_loop) {
  if (!b.empty()) ranks_[static_cast<size_t>(rank)].stack.push_back({Frame::Kind::block, stream, in_loop, &b, 0, base});
}

bool Issuer::issue_until(int si) {
  const int64_t rank = t_.streams[si].rank;
  RankState& me = ranks_[static_cast<size_t>(rank)];
  auto& stack = me.stack;
  // Indexed each time: issuing may add streams (and move them).
  while (t_.streams[si].pc >= t_.streams[si].tasks.size()) {
    if (stack.empty()) return false;
    Frame& f = stack.back();
    if (f.kind == Frame::Kind::async_end) {
      const int done = new_event(), target = f.stream, i = f.info;
      stack.pop_back();
      push(target, {Task::Kind::record, true, i, -1, done});
      auto& tokens = me.tokens;
      auto it = std::find_if(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == i; });
      if (it != tokens.end()) it->second = done;
      else tokens.emplace_back(i, done);
      continue;
    }
    if (f.kind == Frame::Kind::loop) {
      const Command& c = *infos_[f.info].cmd;
      const int i = f.info, cur = f.stream;
      if (!f.body_next) {
        f.body_next = true;
        enter(rank, c.as<While>().cond, block(i, 1), cur, true);
      } else if (f.trip < f.trips) {
        f.body_next = false;
        ++f.trip;
        enter(rank, c.as<While>().body, block(i, 0), cur, true);
      } else {
        stack.pop_back();
      }
      continue;
    }
    if (f.pos == f.block->size()) {
      stack.pop_back();
      continue;
    }
    prefetch_ahead(*f.block, f.pos);
    const Command& c = (*f.block)[f.pos++];
    const int i = f.info, cur = f.stream;
    const bool in_loop = f.in_loop;
    f.info += infos_[i].subtree;
    // `f` may dangle from here on: the cases below push frames.
    // The block's position among a command's blocks: then 0, else 1; branch k at k.
    auto branch = [&](size_t slot, const Branch& b) { enter(rank, *b.block, block(i, slot), cur, in_loop); };
    std::visit(Overload{
        [&](const AsyncStart& a) {
          const int fork = new_event(), target = stream_index(rank, a.stream);
          push(cur, {Task::Kind::record, false, i, -1, fork});
          push(target, {Task::Kind::wait, false, i, -1, fork});
          stack.push_back({Frame::Kind::async_end, target, in_loop, nullptr, 0, i});
          enter(rank, a.body, block(i, 0), target, in_loop);
        },
        [&](const AsyncDone&) {
          auto& tokens = me.tokens;
          const int start = infos_[i].partner;
          auto it = std::find_if(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == start; });
          push(cur, {Task::Kind::wait, true, i, -1, it->second});
          *it = tokens.back();
          tokens.pop_back();
        },
        [&](const Call& x) { enter(rank, x.body, block(i, 0), cur, in_loop); },
        [&](const Cond&) {
          const Branch b = take_branch(c, decision(rank, c));
          branch(b.decision ? 0 : 1, b);
        },
        [&](const Switch&) {
          const Branch b = take_branch(c, decision(rank, c));
          branch(static_cast<size_t>(b.decision), b);
        },
        [&](const While&) {
          Frame loop{Frame::Kind::loop, cur, true, nullptr, 0, i};
          loop.trips = decision(rank, c);
          stack.push_back(loop);
        },
        [&](const TaskSpec auto& x) {
          push(cur, {Task::Kind::op, false, i, instance(rank, i, in_loop), -1});
          // A group's members run exactly as often as the group.
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, CollectiveGroup>)
            for (int m = members_begin(i); m < members_end(i); ++m) instance(rank, m, in_loop);
        },
    }, c.spec);
  }
  return true;
}

void Issuer::start(const std::vector<int64_t>& ranks, int64_t mesh_size, int64_t trip_limit, const char* limit_verb) {
  trip_limit_ = trip_limit;
  limit_verb_ = limit_verb;
  written_ = written_buffers(p_);
  stride_.assign(p_.mesh.shape.size(), 1);
  for (size_t d = p_.mesh.shape.size(); d-- > 1;) stride_[d - 1] = stride_[d] * p_.mesh.shape[d];
  ranks_.reserve(static_cast<size_t>(mesh_size));
  for (int64_t r = 0; r < mesh_size; ++r) ranks_.emplace_back(arena_);
  auto begin = [&](int64_t r) { enter(r, p_.program, 0, stream_index(r, StreamId{}), false); };
  if (ranks.empty())
    for (int64_t r = 0; r < mesh_size; ++r) begin(r);
  for (int64_t r : ranks) begin(r);
}

int Issuer::new_event() {
  if (!t_.free_events.empty()) {
    const int e = t_.free_events.back();
    t_.free_events.pop_back();
    return e;
  }
  t_.events.emplace_back();
  return static_cast<int>(t_.events.size()) - 1;
}


}  // namespace thunky::sim::internal
