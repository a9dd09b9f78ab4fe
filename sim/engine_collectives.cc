// Collectives: the rendezvous of their ranks, and the flows they drive.
#include "sim/engine_internal.h"
#include "sim/nccl_model.h"

namespace thunky::sim::internal {

SetId Engine::member_set(int info, int64_t rank) {
  CmdInfo& in = infos_[info];
  if (in.sets < 0) {
    in.sets = static_cast<int32_t>(set_of_rank_.size());
    set_of_rank_.emplace_back(static_cast<size_t>(p_.mesh.size()), SetId());
  }
  std::pmr::vector<SetId>& set_of_rank = set_of_rank_[in.sets];
  if (set_of_rank[rank].valid()) return set_of_rank[rank];
  std::vector<const Command*> members;
  if (in.cmd->op() == Op::collective_group)
    for (int m = members_begin(info); m < members_end(info); ++m) members.push_back(infos_[m].cmd);
  else
    members.push_back(in.cmd);
  std::vector<int> set = launch_members(p_.mesh, rank, members);
  if (fold_) {  // the ranks meet as their representatives
    for (int& q : set) q = static_cast<int>(representative(q));
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
  }
  const SetId id = rendezvous_.intern(set);
  for (int q : set) set_of_rank[q] = id;
  return id;
}

void Engine::arrive(int si, const Task& t) {
  Stream& s = streams_[si];
  s.since = now_;
  if (one_class_) {
    // Every rank reaches it now.
    s.state = Stream::State::running;
    Comm act = new_comm();
    act.streams.push_back(si);
    act.since.push_back(now_);
    start_collective(std::move(act));
    return;
  }
  s.state = Stream::State::waiting_collective;
  std::optional<Rendezvous::Met> met = rendezvous_.arrive(member_set(t.info, s.rank), s.rank, si, now_);
  if (!met) return;
  Comm act = new_comm();
  act.streams.assign(met->streams.begin(), met->streams.end());
  act.since.assign(met->since.begin(), met->since.end());
  for (int st : act.streams) streams_[st].state = Stream::State::running;
  if (m_.host_cores > 0) {  // it waits for a core, as a command does, ahead of compute
    waiting_for_core_.push_back(std::move(act));
    compute_.ask_core_for_collective(now_);
    return;
  }
  start_collective(std::move(act));
}

int64_t Engine::ctas_for(const Collective& k, int64_t nccl_count) const {
  int64_t ctas = k.ctas.value_or(nccl_count);
  if (options_.nccl_max_ctas > 0) ctas = std::min(ctas, options_.nccl_max_ctas);
  return ctas;
}

double Engine::member_flows(Comm& act, int a, int mi, int64_t rank, const Participants& part, double& latency, MemberLoad& load) {
  const Command& c = *infos_[mi].cmd;
  const Collective& k = collective_of(c);
  Work scratch;
  const int64_t n = static_cast<int64_t>(part.ranks.size());
  const double bytes = static_cast<double>(work(mi, rank, scratch).bytes);
  std::vector<AxisSpan>& spans = scratch_spans_;
  spans.clear();
  needing(c, [&] {
    for (const auto& ax : k.axis) spans.push_back({&axis_links(ax), p_.mesh.shape[*p_.mesh.axis(ax)]});
  });
  if (k.groups) {  // one axis of the group's size
    spans.resize(1);
    spans.front().ranks = n;
  }
  const AxisLinks& first = *spans.front().links;
  if (const CollectivePermute* permute = c.get_if<CollectivePermute>()) {
    // The pairs: explicit, or every i to (i + shift) mod n; folded, the
    // flows from representatives stand for their translates (in one
    // class, this rank's alone).
    const auto* pairs = permute->pairs.get();
    const size_t npairs = pairs ? pairs->size() : one_class_ ? 1 : static_cast<size_t>(n);
    const bool ring = first.topology == AxisLinks::Topology::ring && k.axis.size() == 1 && !k.groups;
    const int dim = ring ? *p_.mesh.axis(k.axis[0]) : 0;
    // On a hierarchical axis a pair in two groups (nodes) goes through the
    // sender's NIC and the receiver's, one each per GPU.
    const int64_t group = first.topology == AxisLinks::Topology::hierarchical ? std::max<int64_t>(1, first.group_size) : 0;
    for (size_t i = 0; i < npairs; ++i) {
      const int64_t s = pairs ? (*pairs)[i].first : one_class_ ? part.position : static_cast<int64_t>(i);
      const int64_t t = pairs ? (*pairs)[i].second : shift_target(c, s, n);
      if (s == t || !simulated(part.ranks[s])) continue;
      const FlowId f = network_.new_flow(CommId(a), bytes, now_);
      std::pmr::vector<LinkId>& links = network_.flow(f).links;
      const int64_t from = part.ranks[s], to = part.ranks[t];
      const bool across = group > 0 && s / group != t / group;
      int64_t hops = 1;
      if (across) {
        links.push_back(link(LinkKey::make(LinkKey::nic_out, from, 0), first.nic_bandwidth));
        links.push_back(link(LinkKey::make(LinkKey::nic_in, 0, to), first.nic_bandwidth));
      } else if (ring) {
        const int64_t cw = floor_mod(t - s, n), ccw = floor_mod(s - t, n);
        // Shortest way round (ties clockwise); a line has only the direct way.
        const int dir = first.wraparound ? (cw <= ccw ? 1 : -1) : (t > s ? 1 : -1);
        hops = dir > 0 ? (first.wraparound ? cw : t - s) : (first.wraparound ? ccw : s - t);
        int64_t at = from;
        for (int64_t h = 0; h < hops; ++h) {
          links.push_back(ring_link(at, dim, dir, first));
          at = neighbour(at, dim, dir);
        }
      } else {
        const double egress = first.topology == AxisLinks::Topology::ring ? first.link_bandwidth : first.egress_bandwidth;
        links.push_back(link(LinkKey::make(LinkKey::egress, from, 0), egress));
        links.push_back(link(LinkKey::make(LinkKey::ingress, 0, to), egress));
      }
      if (first.nccl) {
        // As NCCL sends: its latency, and its protocol's rate, the flow
        // sized so that alone it takes that time at its links' rate; no
        // less than one launch of the rank's host thread.
        const NcclChoice p = with_host_floor(nccl_p2p(first, across, bytes), first.nccl_params, 1);
        double cap = std::numeric_limits<double>::infinity();
        for (LinkId l : links) cap = std::min(cap, network_.capacity(l));
        // Fewer CTAs than NCCL gives a peer move proportionally less.
        const int64_t ctas = ctas_for(k, first.nccl_params.p2p_channels);
        const double slower = std::max(1.0, static_cast<double>(first.nccl_params.p2p_channels) / static_cast<double>(ctas));
        network_.flow(f).remaining = p.transfer_s * slower * cap;
        // Each GPU sends its part and receives another's: 2 bytes of HBM per byte sent.
        load.ctas = std::max(load.ctas, ctas);
        if (p.transfer_s > 0) load.hbm = std::max(load.hbm, bytes * nccl_hbm_per_link_byte(c.op(), NcclAlgo::p2p) / (p.transfer_s * slower));
        latency = std::max(latency, p.latency_s);
        algorithm_of(mi) = {p.latency_s, p.transfer_s, true, p.algo, p.proto};
      } else {
        latency = std::max(latency, across ? first.nic_latency_s : permute_seconds(first, hops, 0, false));
      }
      act.flows.push_back(f);
    }
    return bytes;
  }
  const CollectiveCost cost = collective_cost(c.op(), spans, bytes);
  double transfer = cost.transfer_s;
  latency = std::max(latency, cost.latency_s);
  if (cost.nccl) {
    algorithm_of(mi) = cost;
    // NCCL's CTAs: fewer than its own count move proportionally less.
    const int64_t nccl_count = nccl_ctas(c.op(), cost.algo, cost.proto, first.nccl_params, n, bytes);
    const int64_t ctas = ctas_for(k, nccl_count);
    transfer *= std::max(1.0, static_cast<double>(nccl_count) / static_cast<double>(ctas));
    load.ctas = std::max(load.ctas, ctas);
    // The bytes each GPU sends (nccl-tests' bus bytes), through its HBM at the algorithm's rate.
    if (transfer > 0) load.hbm = std::max(load.hbm, bytes * bus_factor(c.op(), n) * nccl_hbm_per_link_byte(c.op(), cost.algo) / transfer);
  }
  // One flow over every link the collective drives, sized so that alone
  // it takes the closed-form transfer time at the slowest link's rate.
  const FlowId f = network_.new_flow(CommId(a), 0, now_);
  std::pmr::vector<LinkId>& links = network_.flow(f).links;
  double cap = std::numeric_limits<double>::infinity();
  for (int r : part.ranks) {
    // Folded, every rank's links fall in its representative's classes.
    if (!simulated(r)) continue;
    if (first.topology == AxisLinks::Topology::ring) {
      for (const auto& ax : k.axis) {
        const int dim = *p_.mesh.axis(ax);
        const AxisLinks& al = axis_links(ax);
        const int64_t co = coord(r, dim);
        if (al.wraparound || co + 1 < p_.mesh.shape[dim]) links.push_back(ring_link(r, dim, 1, al));
        if (al.wraparound || co > 0) links.push_back(ring_link(r, dim, -1, al));
        cap = std::min(cap, al.link_bandwidth);
      }
    } else {
      links.push_back(link(LinkKey::make(LinkKey::egress, r, 0), first.egress_bandwidth));
      cap = std::min(cap, first.egress_bandwidth);
      if (first.topology == AxisLinks::Topology::hierarchical && n > first.group_size) {
        // Each GPU's own NIC, each way: what a permute across nodes drives too.
        links.push_back(link(LinkKey::make(LinkKey::nic_out, r, 0), first.nic_bandwidth));
        links.push_back(link(LinkKey::make(LinkKey::nic_in, 0, r), first.nic_bandwidth));
      }
    }
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  // Alone, the flow runs at its slowest link's capacity.
  for (LinkId l : links) cap = std::min(cap, network_.capacity(l));
  network_.flow(f).remaining = transfer * cap;
  if (network_.flow(f).remaining > 0 && !links.empty()) act.flows.push_back(f);
  else network_.free_flow(f);
  return bytes;
}

Comm Engine::new_comm() {
  if (spare_comms_.empty()) return Comm(&arena_);
  Comm c = std::move(spare_comms_.back());
  spare_comms_.pop_back();
  c.streams.clear();
  c.since.clear();
  c.flows.clear();
  c.stats.clear();
  c.version = 0;
  c.finished = false;
  c.holds_core = false;
  c.ctas = 0;
  c.hbm = 0;
  return c;
}

void Engine::start_collective(Comm act) {
  const int a = static_cast<int>(comms_.size());
  act.start = now_;
  const Stream& s0 = streams_[act.streams[0]];
  const Task& t0 = s0.tasks[s0.pc];
  // The members: a group's body, or the collective itself.
  const bool group = infos_[t0.info].cmd->op() == Op::collective_group;
  const int first_member = group ? members_begin(t0.info) : t0.info, end_member = group ? members_end(t0.info) : t0.info + 1;
  double latency = 0;
  if (rank_stamp_.size() < static_cast<size_t>(p_.mesh.size())) rank_stamp_.resize(static_cast<size_t>(p_.mesh.size()), 0);
  for (int mi = first_member; mi < end_member; ++mi) {
    MemberLoad load;
    const Command& c = *infos_[mi].cmd;
    // Every instance of the member among the launched ranks moves data: a
    // group whose members span several communicators (a row shift beside
    // a column reduction) drives them all. Folded, rank 0's stands for all.
    ++rank_stamp_now_;
    for (int st : act.streams) {
      const int64_t rank = streams_[st].rank;
      if (rank_stamp_[rank] == rank_stamp_now_) continue;
      const Participants part = participants(p_.mesh, rank, collective_of(c).axis, collective_of(c).groups.get());
      for (int q : part.ranks) rank_stamp_[q] = rank_stamp_now_;
      const double bytes = member_flows(act, a, mi, rank, part, latency, load);
      // Ranks are in order, so rank 0's instance comes first.
      if (rank == 0 && recorder_.keep() != Keep::count) add_stat(act, mi, t0.instance, static_cast<int64_t>(part.ranks.size()), bytes);
    }
    // A group's members run side by side, each with its CTAs.
    act.ctas += load.ctas;
    act.hbm += load.hbm;
  }
  if (interference_) take_from_devices(act);
  act.latency_end = now_ + latency;
  comms_.push_back(std::move(act));
  Comm& ref = comms_[a];
  if (m_.additive_latency && latency > 0) {
    queue_.push({ref.latency_end}, SimEvent{SimEvent::Kind::flow_start, a}.pack());
    return;
  }
  if (latency > 0) queue_.push({ref.latency_end}, SimEvent{SimEvent::Kind::latency, a}.pack());
  if (latency <= 0 && ref.flows.empty()) {
    finish_comm(a);
    return;
  }
  activate(a);
}

void Engine::take_from_devices(Comm& act) {
  if (act.ctas <= 0 && act.hbm <= 0) return;
  for (int st : act.streams) compute_.take(streams_[st].rank, act.ctas, act.hbm, now_);
}

void Engine::add_stat(Comm& act, int info, int32_t inst, int64_t n, double bytes) {
  const Command& c = *infos_[info].cmd;
  const int row = recorder_.new_row(info, inst, [&] { return CollectiveStat{0, op_id(info, inst), std::string(op_name(c.op())), n, bytes, 0, 0, 0, algorithm_at(info)}; });
  if (row >= 0) act.stats.push_back(row);
}

}  // namespace thunky::sim::internal
