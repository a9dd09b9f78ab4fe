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

int Issuer::SubtreeOf::operator()(int info) const { return (*infos)[static_cast<size_t>(info)].subtree; }

bool Issuer::issue_until(int si) {
  const int64_t rank = t_.streams[si].rank;
  RankState& me = ranks_[static_cast<size_t>(rank)];
  // Indexed each time: issuing may add streams (and move them).
  while (t_.streams[si].pc >= t_.streams[si].tasks.size()) {
    if (!me.walk.next(me.step)) return false;
    const Walk::Step* step = &me.step;
    const Command& c = *step->cmd;
    const int i = step->number, cur = step->tag;
    const bool in_loop = step->in_loop;
    switch (step->kind) {
      case Walk::Step::Kind::fork: {
        const int fork = new_event();
        push(cur, {Task::Kind::record, false, i, -1, fork});
        const int target = stream_index(rank, step->target);
        me.walk.tag_fork_body(target);
        push(target, {Task::Kind::wait, false, i, -1, fork});
        break;
      }
      case Walk::Step::Kind::fork_end: {
        const int done = new_event();
        push(cur, {Task::Kind::record, true, i, -1, done});
        auto& tokens = me.tokens;
        auto it = std::find_if(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == i; });
        if (it != tokens.end()) it->second = done;
        else tokens.emplace_back(i, done);
        break;
      }
      case Walk::Step::Kind::join: {
        auto& tokens = me.tokens;
        auto it = std::find_if(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == step->start_number; });
        push(cur, {Task::Kind::wait, true, i, -1, it->second});
        *it = tokens.back();
        tokens.pop_back();
        break;
      }
      case Walk::Step::Kind::command:
        if (op_family(c.op()) != OpFamily::control) {  // one task of its stream
          push(cur, {Task::Kind::op, false, i, instance(rank, i, in_loop), -1});
          // A group's members run exactly as often as the group.
          if (c.op() == Op::collective_group)
            for (int m = members_begin(i); m < members_end(i); ++m) instance(rank, m, in_loop);
          break;
        }
        std::visit(Overload{
            // The block's position among a command's blocks: then 0, else 1; branch k at k.
            [&](const Cond&) {
              const Branch b = take_branch(c, decision(rank, c));
              me.walk.enter(*b.block, step->stream, in_loop, block(i, b.decision ? 0 : 1), cur);
            },
            [&](const Switch&) {
              const Branch b = take_branch(c, decision(rank, c));
              me.walk.enter(*b.block, step->stream, in_loop, block(i, static_cast<size_t>(b.decision)), cur);
            },
            [&](const While&) { me.walk.enter_loop(c, decision(rank, c), step->stream, block(i, 0), block(i, 1), cur); },
            [](const NotControl auto&) {},  // one task, above
        }, c.spec);
        break;
    }
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
  for (int64_t r = 0; r < mesh_size; ++r) ranks_.emplace_back(arena_, SubtreeOf{&infos_});
  auto begin = [&](int64_t r) {
    RankState& me = ranks_[static_cast<size_t>(r)];
    // The main stream first, as a GPU program's.
    me.walk.enter(p_.program, StreamId{}, false, 0, stream_index(r, StreamId{}));
  };
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
