// Links, and how the flows of concurrent collectives share them.
#include "sim/engine_internal.h"

namespace thunky::sim::internal {

int Engine::link(uint64_t key, double capacity) {
  if (fold_) key = link_class(key);
  auto [it, fresh] = link_ids_.try_emplace(key, static_cast<int>(capacity_.size()));
  if (fresh) {
    capacity_.push_back(capacity);
    link_keys_.push_back(key);
    link_flows_.emplace_back();
    link_series_.emplace_back();
    link_stamp_.push_back(0);
  }
  return it->second;
}

const AxisLinks& Engine::axis_links(const std::string& axis) const {
  const auto dim = p_.mesh.axis(axis);
  const AxisLinks* a = dim ? links_by_dim_[*dim] : m_.axis(axis);
  if (!a) throw MachineError("/axes", "machine '" + m_.name + "' models no axis '" + axis + "' (and has no \"*\" entry)");
  return *a;
}

int64_t Engine::translate(int64_t rank, int64_t by, int sign) const {
  int64_t r = 0;
  for (size_t d = 0; d < strides_.size(); ++d) r += floor_mod(coord(rank, static_cast<int>(d)) + sign * coord(by, static_cast<int>(d)), p_.mesh.shape[d]) * strides_[d];
  return r;
}

uint64_t Engine::link_class(uint64_t key) const {
  const auto kind = static_cast<LinkKey::Kind>(key >> 60);
  const int64_t from = static_cast<int64_t>((key >> 30) & 0x3fffffff), to = static_cast<int64_t>(key & 0x3fffffff);
  if (kind == LinkKey::ring) return LinkKey::make(kind, 0, translate(to, from, -1));
  return LinkKey::make(kind, 0, 0);
}

uint64_t Engine::link_at(uint64_t key, int64_t rank) const {
  const auto kind = static_cast<LinkKey::Kind>(key >> 60);
  if (kind == LinkKey::ring) return LinkKey::make(kind, rank, translate(static_cast<int64_t>(key & 0x3fffffff), rank, 1));
  if (kind == LinkKey::ingress || kind == LinkKey::nic_in) return LinkKey::make(kind, 0, rank);
  return LinkKey::make(kind, rank, 0);
}

int64_t Engine::neighbour(int64_t rank, int dim, int dir) const {
  const int64_t n = p_.mesh.shape[dim], c = coord(rank, dim);
  return rank + ((c + dir + n) % n - c) * strides_[dim];
}

int Engine::ring_link(int64_t from, int dim, int dir, const AxisLinks& a) {
  return link(LinkKey::make(LinkKey::ring, from, neighbour(from, dim, dir)), a.link_bandwidth);
}

void Engine::activate(int a) {
  std::vector<int>& seeds = scratch_seeds_;
  seeds.clear();
  for (int f : comms_[a].flows) {
    Flow& fl = flows_[f];
    fl.active = true;
    fl.last = now_;
    for (int l : fl.links) {
      link_flows_[l].push_back(f);
      seeds.push_back(l);
    }
  }
  solve_links(seeds, a);
}

void Engine::retire_flow(int f, std::vector<int>& seeds) {
  Flow& fl = flows_[f];
  if (fl.done) return;
  fl.done = true;
  if (!fl.active) return;
  for (int l : fl.links) {
    auto& on = link_flows_[l];
    auto it = std::find(on.begin(), on.end(), f);
    *it = on.back();
    on.pop_back();
    seeds.push_back(l);
  }
}

void Engine::solve_links(const std::vector<int>& seeds, int also) {
  ++stamp_;
  std::vector<int>& links = scratch_links_;
  std::vector<int>& flows = scratch_flows_;
  links.clear();
  flows.clear();
  for (int l : seeds)
    if (link_stamp_[l] != stamp_) {
      link_stamp_[l] = stamp_;
      links.push_back(l);
    }
  if (flow_stamp_.size() < flows_.size()) flow_stamp_.resize(flows_.size(), 0);
  for (size_t k = 0; k < links.size(); ++k)
    for (int f : link_flows_[links[k]]) {
      if (flow_stamp_[f] == stamp_) continue;
      flow_stamp_[f] = stamp_;
      flows.push_back(f);
      for (int l : flows_[f].links)
        if (link_stamp_[l] != stamp_) {
          link_stamp_[l] = stamp_;
          links.push_back(l);
        }
    }
  // When no link carries two flows, each flow runs at its slowest link's
  // capacity; otherwise progressive filling over the component.
  bool shared = false;
  for (int l : links) shared = shared || link_flows_[l].size() > 1;
  std::vector<double>& rates = scratch_rates_;
  rates.assign(flows.size(), std::numeric_limits<double>::infinity());
  if (!shared) {
    for (size_t k = 0; k < flows.size(); ++k)
      for (int l : flows_[flows[k]].links) rates[k] = std::min(rates[k], capacity_[l]);
  } else {
    if (local_.size() < capacity_.size()) local_.resize(capacity_.size(), -1);
    std::vector<double> cap(links.size());
    for (size_t k = 0; k < links.size(); ++k) {
      local_[links[k]] = static_cast<int>(k);
      cap[k] = capacity_[links[k]];
    }
    std::vector<MaxMinFlow> mm(flows.size());
    for (size_t k = 0; k < flows.size(); ++k)
      for (int l : flows_[flows[k]].links) mm[k].links.push_back(local_[l]);
    rates = max_min_rates(cap, mm);
    for (int l : links) local_[l] = -1;
  }
  std::vector<int>& dirty = scratch_dirty_;
  dirty.clear();
  if (also >= 0) dirty.push_back(also);
  for (size_t k = 0; k < flows.size(); ++k) {
    Flow& fl = flows_[flows[k]];
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now_ - fl.last));
    fl.last = now_;
    if (fl.rate != rates[k]) {
      fl.rate = rates[k];
      dirty.push_back(fl.activity);
    }
  }
  if (recorder_.keep() == Keep::records) sample_links(links);
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  for (int a : dirty) reschedule_comm(a);
}

void Engine::sample_links(const std::vector<int>& links) {
  for (int l : links) {
    double load = 0;
    for (int f : link_flows_[l]) load += flows_[f].rate;
    const double u = capacity_[l] > 0 ? std::min(1.0, load / capacity_[l]) : 0.0;
    auto& s = link_series_[l];
    // Shares that differ only by rounding (the same load summed in
    // another order) are no change.
    if (s.empty() ? u > 1e-12 : std::abs(s.back().second - u) > 1e-9) {
      if (!s.empty() && s.back().first == now_) {
        // Changed twice at one instant: back to what it was is no change.
        s.back().second = u;
        if (s.size() > 1 && std::abs(s[s.size() - 2].second - u) <= 1e-9) s.pop_back();
      } else {
        s.emplace_back(now_, u);
      }
    }
  }
}

void Engine::reschedule_comm(int a) {
  Comm& act = comms_[a];
  if (act.finished) return;
  ++act.version;
  double end = INFINITY;
  for (int f : act.flows) {
    Flow& fl = flows_[f];
    if (fl.done || !fl.active || fl.rate <= 0) continue;
    // A flow too slow to end in a double's range (a link of 1e-300 B/s)
    // still ends past the simulated-time limit, which names the cause.
    end = std::min(end, std::min(fl.last + fl.remaining / fl.rate, 2 * kMaxSimulatedSeconds));
  }
  if (end < INFINITY) queue_.push({end}, SimEvent{SimEvent::Kind::comm, a, act.version}.pack());
}

}  // namespace thunky::sim::internal
