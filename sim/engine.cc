#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/accounting.h"
#include "core/mesh.h"
#include "core/validate.h"
#include "sim/collective_cost.h"
#include "sim/event_queue.h"
#include "sim/maxmin.h"

namespace thunky::sim {

double compute_seconds(const Program& p, const Machine& m, const Command& c, int64_t rank) {
  const RankCtx ctx = rank_ctx(p.mesh, rank);
  if (c.cost && c.cost->seconds) return *c.cost->seconds;
  const Work w = command_work(p, c, ctx);
  double flops_time = 0;
  if (w.flops > 0) {
    DType t = DType::f32;
    if (c.op == Op::gemm) t = p.buffers[resolve(p, *c.a, ctx).buffer].dtype;
    const double eff = c.op == Op::gemm ? m.gemm_efficiency : 1.0;
    const bool flop_bound = c.op == Op::gemm || c.op == Op::custom_call || c.op == Op::kernel || c.op == Op::ptx_kernel;
    if (flop_bound) flops_time = w.flops / (m.peak(t) * eff);
  }
  return std::max(flops_time, static_cast<double>(w.bytes) / m.hbm_bandwidth) + m.launch_overhead_s;
}

namespace {

// A collective_group's task id lists its members' ids joined by '|'.
std::vector<std::string> split_ids(const std::string& joined) {
  std::vector<std::string> ids;
  size_t pos = 0;
  for (;;) {
    const size_t bar = joined.find('|', pos);
    ids.push_back(joined.substr(pos, bar == std::string::npos ? std::string::npos : bar - pos));
    if (bar == std::string::npos) return ids;
    pos = bar + 1;
  }
}

struct Task {
  enum class Kind { op, record, wait };
  Kind kind = Kind::op;
  const Command* cmd = nullptr;
  std::string id;     // report id (with #k inside loops)
  int event = -1;     // record / wait
  std::string token;
  bool join = false;
};

struct Stream {
  int64_t rank = 0;
  StreamId sid;
  std::vector<Task> tasks;
  size_t pc = 0;
  enum class State { ready, running, waiting_event, waiting_collective, done } state = State::ready;
  std::map<std::string, int64_t>* instances = nullptr;
};

struct EventState {
  bool done = false;
  double t = 0;
  std::string stream;
  std::vector<int> waiters;
};

// A running compute command or collective.
struct Activity {
  bool comm = false;
  int64_t rank = 0;
  std::vector<int> streams;  // streams released when it ends
  double remaining = 0;      // compute: seconds of work at full rate; comm: unused
  double rate = 0;
  double last = 0;
  uint64_t version = 0;
  bool finished = false;
  double start = 0;
  // comm
  std::vector<int> flows;  // indices into flows_
  double latency_end = 0;
  bool additive = false;
  std::vector<std::pair<int, const Command*>> records;  // (stream, command) to report
  std::vector<std::string> record_ids;
  std::map<int, double> since;  // stream -> when it reached the collective (it holds the stream from then)
};

struct Flow {
  int activity = -1;
  std::vector<int> links;
  double remaining = 0;  // bytes
  double rate = 0;
  bool active = false;   // started (after additive latency)
  bool done = false;
};

struct Rendezvous {
  std::vector<int> members;  // global ranks
  std::map<int64_t, int> arrived;  // rank -> stream
  std::map<int, double> since;       // stream -> arrival time
  std::map<int64_t, const Task*> tasks;
};

class Engine {
 public:
  Engine(const Program& p, const Machine& m, const Decisions* d) : p_(p), m_(m), decisions_(d) {}

  Expected<SimResult> run() {
    try {
      expand();
    } catch (const ThunkyError& e) {
      return std::vector<Diagnostic>{{e.kind(), p_.file, e.pointer(), e.what()}};
    }
    for (size_t s = 0; s < streams_.size(); ++s) ready_.push_back(static_cast<int>(s));
    advance();
    while (auto e = queue_.pop()) {
      now_ = e->time.s;
      handle(e->payload);
      advance();
    }
    std::vector<std::string> blocked;
    for (const auto& s : streams_) {
      if (s.state == Stream::State::done) continue;
      const Task& t = s.tasks[s.pc];
      blocked.push_back(rank_label(p_.mesh, s.rank) + " " + s.sid.str() + " at " + (t.cmd ? t.cmd->id : std::string("?")) +
                        (s.state == Stream::State::waiting_collective ? " (waiting for the other ranks of a collective)" : " (waiting for a token)"));
    }
    if (!blocked.empty()) {
      std::string msg = "deadlock: nothing can progress;";
      for (size_t i = 0; i < blocked.size() && i < 16; ++i) msg += " " + blocked[i] + ";";
      msg.pop_back();
      return std::vector<Diagnostic>{{ErrorKind::schedule, p_.file, "", msg}};
    }
    SimResult r;
    r.report.source = "sim";
    r.report.schedule = p_.name.empty() ? p_.file : p_.name;
    r.report.machine = m_.name;
    r.report.axis_names = p_.mesh.axis_names;
    r.report.mesh_shape = p_.mesh.shape;
    for (int64_t rank = 0; rank < p_.mesh.size(); ++rank) {
      RankReport rr;
      rr.rank = rank;
      rr.coords = rank_coords(p_.mesh, rank);
      rr.ops = std::move(ops_[rank]);
      std::stable_sort(rr.ops.begin(), rr.ops.end(), [](const OpRecord& a, const OpRecord& b) { return a.start_s < b.start_s; });
      rr.flows = std::move(flows_out_[rank]);
      r.report.ranks.push_back(std::move(rr));
    }
    summarize(r.report);
    for (const auto& [name, id] : link_ids_) {
      LinkSeries ls;
      ls.name = name;
      const auto digits = name.find_first_of("0123456789");
      ls.rank = digits == std::string::npos ? 0 : std::stoll(name.substr(digits));
      if (static_cast<size_t>(id) < link_series_.size()) ls.samples = link_series_[id];
      r.report.links.push_back(std::move(ls));
    }
    r.collectives = std::move(stats_);
    return r;
  }

 private:
  // ---- expansion of the program into per-stream task lists ----
  int stream_index(int64_t rank, const StreamId& sid) {
    auto key = std::make_pair(rank, sid);
    auto it = stream_ids_.find(key);
    if (it != stream_ids_.end()) return it->second;
    Stream s;
    s.rank = rank;
    s.sid = sid;
    s.instances = &instances_[rank];
    streams_.push_back(std::move(s));
    return stream_ids_[key] = static_cast<int>(streams_.size()) - 1;
  }

  int64_t decision(int64_t rank, const Command& c) {
    if (decisions_) {
      const auto& per = (*decisions_)[rank];
      auto it = per.find(c.id);
      size_t& cursor = cursors_[{rank, c.id}];
      if (it != per.end() && cursor < it->second.size()) return it->second[cursor++];
      if (it != per.end()) throw ThunkyError(c.pointer, "the functional model ran " + c.id + " fewer times than the timing model expands it");
    }
    if (c.op == Op::cond && c.sim.taken) return *c.sim.taken ? 1 : 0;
    if (c.op == Op::switch_ && c.sim.branch) return *c.sim.branch;
    if (c.op == Op::while_ && c.sim.trip_count) return *c.sim.trip_count;
    if (!decisions_) throw ThunkyError(c.pointer, std::string(op_name(c.op)) + " " + c.id + " needs a sim hint (" +
                                                      (c.op == Op::cond ? "\"sim\": {\"taken\": true}" : c.op == Op::switch_ ? "\"sim\": {\"branch\": k}" : "\"sim\": {\"trip_count\": n}") +
                                                      ") or inputs for the functional model");
    // The functional model never reached this command (it sits in a branch not taken).
    return 0;
  }

  std::string instance_id(int64_t rank, const Command& c, bool in_loop) {
    if (!in_loop) return c.id;
    return c.id + "#" + std::to_string(instances_[rank][c.id]++);
  }

  void issue(int64_t rank, const Block& b, const StreamId& cur, bool in_loop, std::map<std::string, int>& tokens) {
    for (const auto& c : b) {
      switch (c.op) {
        case Op::async_start: {
          int fork = new_event();
          streams_[stream_index(rank, cur)].tasks.push_back({Task::Kind::record, &c, "", fork, c.token, false});
          streams_[stream_index(rank, c.stream)].tasks.push_back({Task::Kind::wait, &c, "", fork, c.token, false});
          issue(rank, c.body, c.stream, in_loop, tokens);
          int done = new_event();
          streams_[stream_index(rank, c.stream)].tasks.push_back({Task::Kind::record, &c, "", done, c.token, true});
          tokens[c.token] = done;
          break;
        }
        case Op::async_done:
          streams_[stream_index(rank, cur)].tasks.push_back({Task::Kind::wait, &c, "", tokens.at(c.token), c.token, true});
          break;
        case Op::call: issue(rank, c.body, cur, in_loop, tokens); break;
        case Op::cond: {
          const bool taken = decision(rank, c) != 0;
          std::map<std::string, int> inner;
          issue(rank, taken ? c.then_ : c.else_, cur, in_loop, inner);
          break;
        }
        case Op::switch_: {
          int64_t k = std::clamp<int64_t>(decision(rank, c), 0, static_cast<int64_t>(c.branches.size()) - 1);
          std::map<std::string, int> inner;
          issue(rank, c.branches[k], cur, in_loop, inner);
          break;
        }
        case Op::while_: {
          const int64_t trips = decision(rank, c);
          for (int64_t t = 0; t <= trips; ++t) {
            std::map<std::string, int> inner;
            issue(rank, c.cond, cur, true, inner);
            if (t < trips) issue(rank, c.body, cur, true, inner);
          }
          break;
        }
        default: {
          Task t{Task::Kind::op, &c, "", -1, "", false};
          if (c.op == Op::collective_group) {
            for (const auto& m : c.body) t.id += (t.id.empty() ? "" : "|") + instance_id(rank, m, in_loop);
          } else {
            t.id = instance_id(rank, c, in_loop);
          }
          streams_[stream_index(rank, cur)].tasks.push_back(std::move(t));
        }
      }
    }
  }

  void expand() {
    ops_.resize(static_cast<size_t>(p_.mesh.size()));
    flows_out_.resize(static_cast<size_t>(p_.mesh.size()));
    for (int64_t r = 0; r < p_.mesh.size(); ++r) {
      std::map<std::string, int> tokens;
      stream_index(r, StreamId{});
      issue(r, p_.program, StreamId{}, false, tokens);
    }
  }

  int new_event() {
    events_.emplace_back();
    return static_cast<int>(events_.size()) - 1;
  }

  // ---- links ----
  int link(const std::string& key, double capacity) {
    auto it = link_ids_.find(key);
    if (it != link_ids_.end()) return it->second;
    capacity_.push_back(capacity);
    return link_ids_[key] = static_cast<int>(capacity_.size()) - 1;
  }

  const AxisLinks& axis_links(const std::string& axis) const {
    const AxisLinks* a = m_.axis(axis);
    if (!a) throw ThunkyError("", "machine '" + m_.name + "' models no axis '" + axis + "' (and has no \"*\" entry)");
    return *a;
  }

  // Directed ring links from `from` one step along `axis` (dir +1 or -1).
  int ring_link(int64_t from, int axis_dim, int dir, const AxisLinks& a) {
    auto c = rank_coords(p_.mesh, from);
    const int64_t n = p_.mesh.shape[axis_dim];
    c[axis_dim] = (c[axis_dim] + dir + n) % n;
    const int64_t to = rank_of(p_.mesh, c);
    return link("ring " + std::to_string(from) + ">" + std::to_string(to), a.link_bandwidth);
  }

  // ---- collectives ----
  void start_collective(const std::vector<int>& streams, const std::vector<const Command*>& cmds, const std::vector<std::string>& ids,
                        const std::map<int, double>& since) {
    Activity act;
    act.since = since;
    act.comm = true;
    act.streams = streams;
    act.start = now_;
    act.additive = m_.additive_latency;
    double latency = 0;
    const int64_t rank0 = streams_[streams[0]].rank;
    for (size_t k = 0; k < cmds.size(); ++k) {
      const Command& c = *cmds[k];
      Participants part = participants(p_.mesh, rank0, c.axis, c.groups);
      const int64_t n = static_cast<int64_t>(part.ranks.size());
      const Work w = command_work(p_, c, rank_ctx(p_.mesh, rank0));
      const double bytes = static_cast<double>(w.bytes);
      std::vector<AxisSpan> spans;
      for (const auto& a : c.axis) spans.push_back({&axis_links(a), p_.mesh.shape[*p_.mesh.axis(a)]});
      if (c.groups) spans = {{spans.front().links, n}};
      const AxisLinks& first = *spans.front().links;
      if (c.op == Op::collective_permute) {
        std::vector<std::pair<int64_t, int64_t>> pairs;
        if (c.pairs) pairs = *c.pairs;
        else
          for (int64_t i = 0; i < n; ++i) pairs.emplace_back(i, floor_mod(i + *c.shift, n));
        const double per_pair = bytes;
        for (auto [s, t] : pairs) {
          if (s == t) continue;
          Flow f;
          const int64_t from = part.ranks[s], to = part.ranks[t];
          int64_t hops = 1;
          if (first.topology == AxisLinks::Topology::ring && c.axis.size() == 1 && !c.groups) {
            const int dim = *p_.mesh.axis(c.axis[0]);
            const int64_t cw = floor_mod(t - s, n), ccw = floor_mod(s - t, n);
            // Shortest way round (ties clockwise); a line has only the direct way.
            const int dir = first.wraparound ? (cw <= ccw ? 1 : -1) : (t > s ? 1 : -1);
            hops = dir > 0 ? (first.wraparound ? cw : t - s) : (first.wraparound ? ccw : s - t);
            int64_t at = from;
            for (int64_t h = 0; h < hops; ++h) {
              f.links.push_back(ring_link(at, dim, dir, first));
              auto cc = rank_coords(p_.mesh, at);
              cc[dim] = (cc[dim] + dir + p_.mesh.shape[dim]) % p_.mesh.shape[dim];
              at = rank_of(p_.mesh, cc);
            }
          } else {
            const double egress = first.topology == AxisLinks::Topology::ring ? first.link_bandwidth : first.egress_bandwidth;
            f.links.push_back(link("egress " + std::to_string(from), egress));
            f.links.push_back(link("ingress " + std::to_string(to), egress));
          }
          latency = std::max(latency, permute_seconds(first, hops, 0, false));
          f.remaining = per_pair;
          f.activity = static_cast<int>(activities_.size());
          act.flows.push_back(static_cast<int>(flows_.size()));
          flows_.push_back(std::move(f));
        }
        add_stat(ids[k], c, n, bytes);
      } else {
        const double lat_only = collective_seconds(c.op, spans, 0, false);
        const double transfer = std::max(0.0, collective_seconds(c.op, spans, bytes, true) - lat_only);
        latency = std::max(latency, lat_only);
        // One flow over every link the collective drives, sized so that alone
        // it takes the closed-form transfer time at the slowest link's rate.
        Flow f;
        double cap = std::numeric_limits<double>::infinity();
        for (int rank : part.ranks) {
          if (first.topology == AxisLinks::Topology::ring) {
            for (const auto& a : c.axis) {
              const int dim = *p_.mesh.axis(a);
              const AxisLinks& al = axis_links(a);
              auto co = rank_coords(p_.mesh, rank);
              if (al.wraparound || co[dim] + 1 < p_.mesh.shape[dim]) f.links.push_back(ring_link(rank, dim, 1, al));
              if (al.wraparound || co[dim] > 0) f.links.push_back(ring_link(rank, dim, -1, al));
              cap = std::min(cap, al.link_bandwidth);
            }
          } else {
            f.links.push_back(link("egress " + std::to_string(rank), first.egress_bandwidth));
            cap = std::min(cap, first.egress_bandwidth);
            if (first.topology == AxisLinks::Topology::hierarchical && n > first.group_size)
              f.links.push_back(link("nic " + std::to_string(rank), first.nic_bandwidth * static_cast<double>(first.group_size)));
          }
        }
        std::sort(f.links.begin(), f.links.end());
        f.links.erase(std::unique(f.links.begin(), f.links.end()), f.links.end());
        // Alone, the flow runs at its slowest link's capacity.
        for (int l : f.links) cap = std::min(cap, capacity_[l]);
        f.remaining = transfer * cap;
        f.activity = static_cast<int>(activities_.size());
        if (f.remaining > 0 && !f.links.empty()) {
          act.flows.push_back(static_cast<int>(flows_.size()));
          flows_.push_back(std::move(f));
        }
        add_stat(ids[k], c, n, bytes);
      }
      for (int s : streams) act.records.push_back({s, &c});
      act.record_ids.push_back(ids[k]);
    }
    act.latency_end = now_ + latency;
    const int a = static_cast<int>(activities_.size());
    for (int f : act.flows) live_flows_.push_back(f);
    activities_.push_back(std::move(act));
    new_activities_.push_back(a);
    Activity& ref = activities_[a];
    if (ref.additive && latency > 0) {
      queue_.push({ref.latency_end}, encode(kFlowStart, a));
    } else {
      for (int f : ref.flows) flows_[f].active = true;
      if (latency > 0) queue_.push({ref.latency_end}, encode(kLatency, a));
      if (latency <= 0 && ref.flows.empty()) {
        finish(a);
        return;
      }
    }
    solve_links();
  }

  // The collective table: rank 0's collectives; seconds are filled in at the end.
  void add_stat(const std::string& id, const Command& c, int64_t n, double bytes) {
    if (streams_started_rank0_ && stats_seen_.insert(id).second)
      stats_.push_back({id, std::string(op_name(c.op)), n, bytes, 0, 0, 0});
  }

  // ---- rates ----
  // Bring the live activities up to now, re-solve the link shares (over the
  // links live flows use) or one rank's compute shares, and re-predict the
  // end of every activity whose rate changed.
  // Link shares change only when a flow starts or ends.
  void solve_links() {
    for (int f : live_flows_) {
      Flow& fl = flows_[f];
      if (fl.active) fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now_ - flow_last_));
    }
    flow_last_ = now_;
    std::vector<int> live;
    for (int f : live_flows_)
      if (flows_[f].active && !flows_[f].done) live.push_back(f);
    // Solve on the links in use only.
    if (local_.size() < capacity_.size()) local_.resize(capacity_.size(), -1);
    std::vector<int> used;
    std::vector<double> cap;
    std::vector<MaxMinFlow> mm;
    mm.reserve(live.size());
    for (int f : live) {
      MaxMinFlow m;
      for (int l : flows_[f].links) {
        if (local_[l] < 0) {
          local_[l] = static_cast<int>(used.size());
          used.push_back(l);
          cap.push_back(capacity_[l]);
        }
        m.links.push_back(local_[l]);
      }
      mm.push_back(std::move(m));
    }
    std::vector<double> rates = max_min_rates(cap, mm);
    for (int l : used) local_[l] = -1;
    std::set<int> dirty(new_activities_.begin(), new_activities_.end());
    new_activities_.clear();
    for (size_t k = 0; k < live.size(); ++k) {
      Flow& fl = flows_[live[k]];
      if (fl.rate != rates[k]) {
        fl.rate = rates[k];
        dirty.insert(fl.activity);
      }
    }
    sample_links(live);
    reschedule(dirty);
  }

  // Compute shares change only on the rank where a kernel starts or ends
  // (rank < 0: every rank).
  void solve_compute(int64_t rank) {
    std::set<int> dirty(new_activities_.begin(), new_activities_.end());
    new_activities_.clear();
    std::map<int64_t, int> running;
    for (int i : live_compute_) ++running[activities_[i].rank];
    for (int i : live_compute_) {
      Activity& a = activities_[i];
      if (rank >= 0 && a.rank != rank) continue;
      a.remaining = std::max(0.0, a.remaining - a.rate * (now_ - a.last));
      a.last = now_;
      const double r = 1.0 / running[a.rank];
      if (r != a.rate) {
        a.rate = r;
        dirty.insert(i);
      }
    }
    reschedule(dirty);
  }

  void reschedule(const std::set<int>& dirty) {
    for (int i : dirty) {
      Activity& a = activities_[i];
      if (a.finished) continue;
      ++a.version;
      if (!a.comm) {
        queue_.push({now_ + a.remaining / a.rate}, encode(kCompute, i, a.version));
        continue;
      }
      // The next change: the earliest end of one of its flows.
      double end = INFINITY;
      for (int f : a.flows) {
        const Flow& fl = flows_[f];
        if (fl.done || !fl.active || fl.rate <= 0) continue;
        end = std::min(end, now_ + fl.remaining / fl.rate);
      }
      if (end < INFINITY) queue_.push({end}, encode(kComm, i, a.version));
    }
  }

  // One utilisation step per link whose load changed.
  void sample_links(const std::vector<int>& live) {
    if (link_series_.size() < capacity_.size()) link_series_.resize(capacity_.size());
    std::map<int, double> load;
    for (int l : hot_links_) load[l] = 0.0;
    for (int f : live)
      for (int l : flows_[f].links) load[l] += flows_[f].rate;
    hot_links_.clear();
    for (const auto& [l, v] : load) {
      const double u = capacity_[l] > 0 ? std::min(1.0, v / capacity_[l]) : 0.0;
      if (u > 0) hot_links_.push_back(l);
      auto& s = link_series_[l];
      if (s.empty() || s.back().second != u) {
        if (!s.empty() && s.back().first == now_) s.back().second = u;
        else s.emplace_back(now_, u);
      }
    }
  }

  static constexpr uint64_t kCompute = 0, kComm = 1, kLatency = 2, kFlowStart = 3;
  static uint64_t encode(uint64_t kind, int activity, uint64_t version = 0) {
    return (kind << 62) | (static_cast<uint64_t>(activity) << 32) | (version & 0xffffffffu);
  }

  void drop_done_flows() {
    live_flows_.erase(std::remove_if(live_flows_.begin(), live_flows_.end(), [&](int f) { return flows_[f].done; }), live_flows_.end());
  }

  bool flows_done(const Activity& act) const {
    for (int f : act.flows)
      if (!flows_[f].done) return false;
    return true;
  }

  void handle(uint64_t payload) {
    const uint64_t kind = payload >> 62;
    const int a = static_cast<int>((payload >> 32) & 0x3fffffff);
    const uint32_t version = static_cast<uint32_t>(payload & 0xffffffffu);
    Activity& act = activities_[a];
    if (act.finished) return;
    if (kind == kFlowStart) {
      for (int f : act.flows) flows_[f].active = true;
      if (flows_done(act)) finish(a);
      else solve_links();
      return;
    }
    if (kind == kLatency) {
      if (flows_done(act)) finish(a);
      return;
    }
    if ((act.version & 0xffffffffu) != version) return;  // a stale prediction
    if (!act.comm) {
      finish(a);
      return;
    }
    // Bring the flows up to now; those with nothing left are done.
    for (int f : live_flows_) {
      Flow& fl = flows_[f];
      if (fl.active && !fl.done) fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now_ - flow_last_));
    }
    flow_last_ = now_;
    for (int f : act.flows) {
      Flow& fl = flows_[f];
      if (fl.active && !fl.done && fl.remaining <= 1e-9 * std::max(1.0, fl.rate)) fl.done = true;
    }
    drop_done_flows();
    if (flows_done(act) && now_ >= act.latency_end) finish(a);
    else solve_links();
  }

  void finish(int a) {
    Activity& act = activities_[a];
    act.finished = true;
    if (!act.comm) live_compute_.erase(std::find(live_compute_.begin(), live_compute_.end(), a));
    for (int f : act.flows) flows_[f].done = true;
    drop_done_flows();
    if (act.comm) {
      // Each stream of the collective reports each member.
      for (const auto& [s, c] : act.records) {
        const Stream& st = streams_[s];
        const Task& t = st.tasks[st.pc];
        const std::vector<std::string> ids = split_ids(t.id);
        size_t k = 0;
        if (t.cmd->op == Op::collective_group)
          for (size_t m = 0; m < t.cmd->body.size(); ++m)
            if (&t.cmd->body[m] == c) k = m;
        record_op(st, *c, ids[std::min(k, ids.size() - 1)], act.since.count(s) ? act.since.at(s) : act.start, now_);
      }
      for (auto& st : stats_)
        for (const auto& id : act.record_ids)
          if (st.id == id && st.seconds == 0) st.seconds = now_ - act.start;
    } else {
      const Stream& st = streams_[act.streams[0]];
      record_op(st, *st.tasks[st.pc].cmd, st.tasks[st.pc].id, act.start, now_);
    }
    for (int s : act.streams) {
      streams_[s].pc++;
      streams_[s].state = Stream::State::ready;
      ready_.push_back(s);
    }
    if (act.comm) solve_links();
    else solve_compute(act.rank);
  }

  void record_op(const Stream& st, const Command& c, const std::string& id, double start, double end) {
    const Work w = command_work(p_, c, rank_ctx(p_.mesh, st.rank));
    ops_[st.rank].push_back({id, std::string(op_name(c.op)), c.name, st.sid.str(), start, end, w.bytes, w.flops});
  }

  // ---- streams ----
  void advance() {
    while (!ready_.empty()) {
      const int s = ready_.back();
      ready_.pop_back();
      step(s);
    }
  }

  void step(int si) {
    Stream& s = streams_[si];
    while (s.state == Stream::State::ready) {
      if (s.pc >= s.tasks.size()) {
        s.state = Stream::State::done;
        return;
      }
      Task& t = s.tasks[s.pc];
      if (t.kind == Task::Kind::record) {
        EventState& e = events_[t.event];
        e.done = true;
        e.t = now_;
        e.stream = s.sid.str();
        for (int w : e.waiters) {
          streams_[w].state = Stream::State::ready;
          ready_.push_back(w);
        }
        e.waiters.clear();
        ++s.pc;
      } else if (t.kind == Task::Kind::wait) {
        EventState& e = events_[t.event];
        if (!e.done) {
          s.state = Stream::State::waiting_event;
          e.waiters.push_back(si);
          return;
        }
        flows_out_[s.rank].push_back({e.stream, s.sid.str(), e.t, now_, t.token, t.join});
        ++s.pc;
      } else if (is_collective(t.cmd->op) || t.cmd->op == Op::collective_group) {
        arrive(si, t);
        return;
      } else {
        Activity act;
        act.rank = s.rank;
        act.streams = {si};
        act.remaining = compute_seconds(p_, m_, *t.cmd, s.rank);
        act.start = act.last = now_;
        s.state = Stream::State::running;
        live_compute_.push_back(static_cast<int>(activities_.size()));
        new_activities_.push_back(static_cast<int>(activities_.size()));
        activities_.push_back(std::move(act));
        solve_compute(s.rank);
        return;
      }
    }
  }

  void arrive(int si, const Task& t) {
    Stream& s = streams_[si];
    s.state = Stream::State::waiting_collective;
    std::set<int> members;
    std::vector<const Command*> cmds;
    if (t.cmd->op == Op::collective_group)
      for (const auto& m : t.cmd->body) cmds.push_back(&m);
    else
      cmds.push_back(t.cmd);
    for (const Command* c : cmds) {
      Participants part = participants(p_.mesh, s.rank, c->axis, c->groups);
      members.insert(part.ranks.begin(), part.ranks.end());
    }
    std::vector<int> key(members.begin(), members.end());
    const int64_t seq = seq_[{s.rank, key}]++;
    Rendezvous& rv = rendezvous_[{key, seq}];
    rv.members = key;
    rv.arrived[s.rank] = si;
    rv.since[si] = now_;
    if (rv.arrived.size() < key.size()) return;
    std::vector<int> streams;
    for (const auto& [r, st] : rv.arrived) streams.push_back(st);
    for (int st : streams) streams_[st].state = Stream::State::running;
    streams_started_rank0_ = rv.arrived.count(0) > 0;
    const Task& t0 = streams_[streams[0]].tasks[streams_[streams[0]].pc];
    const std::vector<std::string> ids = split_ids(t0.id);
    std::map<int, double> since = rv.since;
    rendezvous_.erase({key, seq});
    start_collective(streams, cmds, ids, since);
  }

  const Program& p_;
  const Machine& m_;
  const Decisions* decisions_;
  std::map<std::pair<int64_t, std::string>, size_t> cursors_;
  std::map<int64_t, std::map<std::string, int64_t>> instances_;
  std::map<std::pair<int64_t, StreamId>, int> stream_ids_;
  std::vector<Stream> streams_;
  std::vector<EventState> events_;
  std::vector<Activity> activities_;
  std::vector<Flow> flows_;
  double flow_last_ = 0;
  std::vector<double> capacity_;
  std::vector<std::vector<std::pair<double, double>>> link_series_;
  std::vector<int> hot_links_;       // links with non-zero load at the last sample
  std::vector<int> local_;           // scratch: link -> index in the current solve
  std::vector<int> live_flows_;      // flows not yet done
  std::vector<int> live_compute_;    // compute activities not yet finished
  std::vector<int> new_activities_;  // started since the last solve
  std::map<std::string, int> link_ids_;
  std::map<std::pair<int64_t, std::vector<int>>, int64_t> seq_;
  std::map<std::pair<std::vector<int>, int64_t>, Rendezvous> rendezvous_;
  std::vector<std::vector<OpRecord>> ops_;
  std::vector<std::vector<FlowEdge>> flows_out_;
  std::vector<CollectiveStat> stats_;
  std::set<std::string> stats_seen_;
  bool streams_started_rank0_ = false;
  std::vector<int> ready_;
  EventQueue queue_;
  double now_ = 0;
};

}  // namespace

Expected<SimResult> simulate(const Program& p, const Machine& m, const Decisions* decisions) {
  try {
    Engine e(p, m, decisions);
    auto r = e.run();
    if (!r) return r;
    for (auto& s : r->collectives) {
      if (s.seconds <= 0) continue;
      s.alg_bw = s.bytes / s.seconds;
      Op op = Op::collective_permute;
      for (Op o : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::all_to_all})
        if (s.op == op_name(o)) op = o;
      s.bus_bw = s.alg_bw * bus_factor(op, s.ranks);
    }
    return r;
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{ErrorKind::input, p.file, e.pointer(), e.what()}};
  }
}

}  // namespace thunky::sim
