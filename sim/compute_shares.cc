#include "sim/compute_shares.h"

#include <algorithm>

#include "sim/sim_event.h"

namespace thunky::sim::internal {

void ComputeShares::start(int64_t rank, int stream, double seconds, double now) {
  KernelId i;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    i = KernelId(kernels_.size());
    kernels_.emplace_back();
  }
  Kernel& k = kernels_[i.index()];
  k.rank = rank;
  k.stream = stream;
  k.remaining = seconds;
  k.rate = 0;
  k.start = k.last = now;
  live_[static_cast<size_t>(rank)].push_back(i);
  if (host_cores_ > 0) core_queue_.push_back(i);
  share(rank, now);
}

std::optional<ComputeShares::Ended> ComputeShares::end(KernelId id, uint32_t version) {
  Kernel& k = kernels_[id.index()];
  if (k.version != version || k.stream < 0) return std::nullopt;
  const Ended e{k.rank, k.stream, k.start};
  auto& live = live_[static_cast<size_t>(k.rank)];
  *std::find(live.begin(), live.end(), id) = live.back();
  live.pop_back();
  k.stream = -1;
  free_.push_back(id);
  if (host_cores_ > 0) --cores_busy_;
  return e;
}

void ComputeShares::share(int64_t rank, double now) {
  if (host_cores_ > 0) return grant_cores(now);
  const auto& live = live_[static_cast<size_t>(rank)];
  const double r = live.empty() ? 0 : 1.0 / static_cast<double>(live.size());
  for (KernelId i : live) set_rate(i, r, now);
}

void ComputeShares::ask_core_for_collective(double now) {
  core_queue_.insert(core_queue_.begin() + static_cast<std::ptrdiff_t>(collectives_asking_++), KernelId());
  grant_cores(now);
}

void ComputeShares::release_collective_core(double now) {
  --cores_busy_;
  grant_cores(now);
}

void ComputeShares::grant_cores(double now) {
  while (cores_busy_ < host_cores_ && !core_queue_.empty()) {
    const KernelId i = core_queue_.front();
    core_queue_.pop_front();
    ++cores_busy_;
    if (!i.valid()) {
      --collectives_asking_;
      grant_collective_();
      continue;
    }
    kernels_[i.index()].start = kernels_[i.index()].last = now;  // it runs from here
    set_rate(i, 1.0, now);
  }
}

void ComputeShares::set_rate(KernelId i, double r, double now) {
  Kernel& k = kernels_[i.index()];
  k.remaining = std::max(0.0, k.remaining - k.rate * (now - k.last));
  k.last = now;
  if (r != k.rate) {
    k.rate = r;
    queue_.push({now + k.remaining / k.rate}, SimEvent{SimEvent::Kind::compute, i.v, ++k.version}.pack());
  }
}

}  // namespace thunky::sim::internal
