#include "sim/compute_shares.h"

#include <algorithm>

#include "sim/sim_event.h"

namespace thunky::sim::internal {

void ComputeShares::start(int64_t rank, int stream, double seconds, double now, const KernelNeeds& needs) {
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
  k.needs = needs;
  k.slowdown = 1;
  k.lost = 0;
  k.start = k.last = now;
  live_[static_cast<size_t>(rank)].push_back(i);
  if (host_cores_ > 0) core_queue_.push_back(i);
  share(rank, now);
}

std::optional<ComputeShares::Ended> ComputeShares::end(KernelId id, uint32_t version) {
  Kernel& k = kernels_[id.index()];
  if (k.version != version || k.stream < 0) return std::nullopt;
  // It ends now, its remaining work done at its last rate: what it lost up to here.
  if (k.rate > 0) k.lost += (1 - k.slowdown) * k.remaining / k.rate;
  const Ended e{k.rank, k.stream, k.start, k.lost};
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
  const Taken& t = taken_[static_cast<size_t>(rank)];
  for (KernelId i : live) set_rate(i, r, kept(kernels_[i.index()], t), now);
}

void ComputeShares::take(int64_t rank, int64_t ctas, double hbm, double now) {
  Taken& t = taken_[static_cast<size_t>(rank)];
  t.ctas += ctas;
  t.hbm = std::max(0.0, t.hbm + hbm);
  if (t.ctas <= 0) t = {};  // all gone: exactly none, whatever rounding left
  share(rank, now);
}

double ComputeShares::kept(const Kernel& k, const Taken& t) const {
  const KernelNeeds& n = k.needs;
  const double body = std::max(n.compute_s, n.memory_s);
  if ((t.ctas <= 0 && t.hbm <= 0) || body <= 0) return 1;
  double compute = n.compute_s, memory = n.memory_s;
  if (sms_ > 0 && t.ctas > 0) {
    // The SMs the collectives leave: a GEMM's tiles take them in waves.
    const int64_t left = std::max<int64_t>(1, sms_ - t.ctas);
    if (n.tiles > 0) {
      auto waves = [&](int64_t sms) { return static_cast<double>((n.tiles + sms - 1) / sms); };
      compute *= waves(left) / waves(sms_);
    } else {
      compute *= static_cast<double>(sms_) / static_cast<double>(left);
    }
  }
  if (hbm_ > 0 && t.hbm > 0) memory *= std::max(1.0, (hbm_ * n.memory_s / body + t.hbm) / hbm_);
  return body / std::max(compute, memory);
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
    set_rate(i, 1.0, 1.0, now);
  }
}

void ComputeShares::set_rate(KernelId i, double share, double slowdown, double now) {
  Kernel& k = kernels_[i.index()];
  k.remaining = std::max(0.0, k.remaining - k.rate * (now - k.last));
  // At share x slowdown for dt, it did the work of slowdown x dt at its share alone.
  k.lost += (1 - k.slowdown) * (now - k.last);
  k.last = now;
  k.slowdown = slowdown;
  const double r = share * slowdown;
  if (r != k.rate) {
    k.rate = r;
    queue_.push({now + k.remaining / k.rate}, SimEvent{SimEvent::Kind::compute, i.v, ++k.version}.pack());
  }
}

}  // namespace thunky::sim::internal
