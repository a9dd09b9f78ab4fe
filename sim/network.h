// The network part of the simulator's engine: the links (each a directed
// link of the machine model, or its class when ranks are folded) and the
// flows that collectives drive over them, which share each link by
// max-min (progressive filling). A flow belongs to an activity (a running
// collective); when shares change, the part says which activities' flows
// changed rate, and the engine predicts their next end. It owns its links,
// flows and samples of each link's use.
#pragma once

#include <cstdint>
#include <memory_resource>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/ids.h"

namespace thunky::sim::internal {

struct Flow {
  explicit Flow(std::pmr::memory_resource* m) : links(m) {}
  CommId activity;
  std::pmr::vector<LinkId> links;
  double remaining = 0;  // bytes
  double rate = 0;
  double last = 0;
  bool active = false;  // moving bytes (after the additive latency)
  bool done = false;
};

class Network {
 public:
  explicit Network(std::pmr::memory_resource* arena) : arena_(arena), ids_(arena), keys_(arena), capacity_(arena), on_link_(arena) {}

  // With `on`, each re-solve samples the links it touched (the report's
  // utilisation tracks).
  void sample(bool on) { sample_ = on; }

  // The id of link `key` of `capacity` bytes/s, made on first use.
  LinkId link(uint64_t key, double capacity);
  double capacity(LinkId l) const { return capacity_[l.index()]; }

  // A flow of `bytes` for `activity`, not moving yet, from `now`; its
  // links are added to flow(f).links. free_flow lets its id be reused.
  FlowId new_flow(CommId activity, double bytes, double now);
  Flow& flow(FlowId f) { return flows_[f.index()]; }
  const Flow& flow(FlowId f) const { return flows_[f.index()]; }
  void free_flow(FlowId f) { free_.push_back(f); }

  // `flows` start moving bytes at `now`: the shares are solved again; the
  // activities whose flows changed rate (and `also`) come back, sorted.
  const std::vector<CommId>& start(std::span<const FlowId> flows, CommId also, double now);
  // Flow `f` is done: it leaves its links, which go to `seeds`.
  void retire(FlowId f, std::vector<LinkId>& seeds);
  // Solves again the shares of the flows connected (through shared links)
  // to the `seeds` links and brings them up to `now`; the activities whose
  // flows changed rate (and `also`) come back, sorted.
  const std::vector<CommId>& solve(const std::vector<LinkId>& seeds, CommId also, double now);

  // The report: each link's key and its samples (time, fraction in use).
  size_t links() const { return keys_.size(); }
  uint64_t key(LinkId l) const { return keys_[l.index()]; }
  const std::vector<std::pair<double, double>>& samples(LinkId l) const { return series_[l.index()]; }

 private:
  void sample_links(const std::vector<LinkId>& links, double now);

  std::pmr::memory_resource* arena_;
  bool sample_ = false;
  std::pmr::unordered_map<uint64_t, LinkId> ids_;
  std::pmr::vector<uint64_t> keys_;
  std::pmr::vector<double> capacity_;
  std::pmr::vector<std::pmr::vector<FlowId>> on_link_;  // live flows on each link
  std::vector<std::vector<std::pair<double, double>>> series_;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_;
  // solve's marks and scratch, kept between calls.
  std::vector<uint32_t> link_stamp_, flow_stamp_;
  uint32_t stamp_ = 0;
  std::vector<int> local_;  // a link's place among those solve touches
  std::vector<LinkId> links_, seeds_;
  std::vector<FlowId> flows_touched_;
  std::vector<CommId> dirty_;
  std::vector<double> rates_;
};

}  // namespace thunky::sim::internal
