#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/maxmin.h"

namespace thunky::sim::internal {

LinkId Network::link(uint64_t key, double capacity) {
  auto [it, fresh] = ids_.try_emplace(key, LinkId(capacity_.size()));
  if (fresh) {
    capacity_.push_back(capacity);
    keys_.push_back(key);
    on_link_.emplace_back();
    series_.emplace_back();
    link_stamp_.push_back(0);
  }
  return it->second;
}

FlowId Network::new_flow(CommId activity, double bytes, double now) {
  FlowId f;
  if (!free_.empty()) {
    f = free_.back();
    free_.pop_back();
    flow(f).links.clear();
  } else {
    f = FlowId(flows_.size());
    flows_.emplace_back(arena_);
  }
  Flow& fl = flow(f);
  fl.activity = activity;
  fl.remaining = bytes;
  fl.rate = 0;
  fl.last = now;
  fl.active = fl.done = false;
  return f;
}

const std::vector<CommId>& Network::start(std::span<const FlowId> flows, CommId also, double now) {
  seeds_.clear();
  for (FlowId f : flows) {
    Flow& fl = flow(f);
    fl.active = true;
    fl.last = now;
    for (LinkId l : fl.links) {
      on_link_[l.index()].push_back(f);
      seeds_.push_back(l);
    }
  }
  return solve(seeds_, also, now);
}

void Network::retire(FlowId f, std::vector<LinkId>& seeds) {
  Flow& fl = flow(f);
  if (fl.done) return;
  fl.done = true;
  if (!fl.active) return;
  for (LinkId l : fl.links) {
    auto& on = on_link_[l.index()];
    *std::find(on.begin(), on.end(), f) = on.back();
    on.pop_back();
    seeds.push_back(l);
  }
}

const std::vector<CommId>& Network::solve(const std::vector<LinkId>& seeds, CommId also, double now) {
  ++stamp_;
  std::vector<LinkId>& links = links_;
  std::vector<FlowId>& flows = flows_touched_;
  links.clear();
  flows.clear();
  for (LinkId l : seeds)
    if (link_stamp_[l.index()] != stamp_) {
      link_stamp_[l.index()] = stamp_;
      links.push_back(l);
    }
  if (flow_stamp_.size() < flows_.size()) flow_stamp_.resize(flows_.size(), 0);
  for (size_t k = 0; k < links.size(); ++k)
    for (FlowId f : on_link_[links[k].index()]) {
      if (flow_stamp_[f.index()] == stamp_) continue;
      flow_stamp_[f.index()] = stamp_;
      flows.push_back(f);
      for (LinkId l : flow(f).links)
        if (link_stamp_[l.index()] != stamp_) {
          link_stamp_[l.index()] = stamp_;
          links.push_back(l);
        }
    }
  // When no link carries two flows, each flow runs at its slowest link's
  // capacity; otherwise progressive filling over the component.
  bool shared = false;
  for (LinkId l : links) shared = shared || on_link_[l.index()].size() > 1;
  std::vector<double>& rates = rates_;
  rates.assign(flows.size(), std::numeric_limits<double>::infinity());
  if (!shared) {
    for (size_t k = 0; k < flows.size(); ++k)
      for (LinkId l : flow(flows[k]).links) rates[k] = std::min(rates[k], capacity(l));
  } else {
    if (local_.size() < capacity_.size()) local_.resize(capacity_.size(), -1);
    std::vector<double> cap(links.size());
    for (size_t k = 0; k < links.size(); ++k) {
      local_[links[k].index()] = static_cast<int>(k);
      cap[k] = capacity(links[k]);
    }
    std::vector<MaxMinFlow> mm(flows.size());
    for (size_t k = 0; k < flows.size(); ++k)
      for (LinkId l : flow(flows[k]).links) mm[k].links.push_back(local_[l.index()]);
    rates = max_min_rates(cap, mm);
    for (LinkId l : links) local_[l.index()] = -1;
  }
  std::vector<CommId>& dirty = dirty_;
  dirty.clear();
  if (also.valid()) dirty.push_back(also);
  for (size_t k = 0; k < flows.size(); ++k) {
    Flow& fl = flow(flows[k]);
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now - fl.last));
    fl.last = now;
    if (fl.rate != rates[k]) {
      fl.rate = rates[k];
      dirty.push_back(fl.activity);
    }
  }
  if (sample_) sample_links(links, now);
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  return dirty;
}

void Network::sample_links(const std::vector<LinkId>& links, double now) {
  for (LinkId l : links) {
    double load = 0;
    for (FlowId f : on_link_[l.index()]) load += flow(f).rate;
    const double u = capacity(l) > 0 ? std::min(1.0, load / capacity(l)) : 0.0;
    auto& s = series_[l.index()];
    // Shares that differ only by rounding (the same load summed in
    // another order) are no change.
    if (s.empty() ? u > 1e-12 : std::abs(s.back().second - u) > 1e-9) {
      if (!s.empty() && s.back().first == now) {
        // Changed twice at one instant: back to what it was is no change.
        s.back().second = u;
        if (s.size() > 1 && std::abs(s[s.size() - 2].second - u) <= 1e-9) s.pop_back();
      } else {
        s.emplace_back(now, u);
      }
    }
  }
}

}  // namespace thunky::sim::internal
