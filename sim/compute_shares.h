// The compute part of the simulator's engine: the kernels running on each
// rank and how they share its throughput. On a device, a rank's concurrent
// kernels share it equally, and the shares change only on the rank where a
// kernel starts or ends. On a host of chip.host_cores cores (the cpu
// backend's ranks are its threads), a command of any rank runs on a core of
// its own at the full rate, and waits for one, first come first served,
// while all are taken; so does a collective once every member has arrived,
// ahead of the kernels. The part predicts each kernel's end and puts it in
// the engine's queue (SimEvent::Kind::compute); a newer prediction makes an
// older one stale.
//
// Beside a collective, a device's kernels also lose what the collective
// takes (docs/machines.md, "Interference"): its CTAs hold SMs, so a GEMM's
// tiles run in waves on the SMs left and other kernels' compute slows by
// the SMs' fraction; its HBM traffic shares the chip's bandwidth, so a
// kernel's memory side slows by (its demand + the collectives') / the
// bandwidth where that passes 1. A kernel then runs at its share times
// its solo time over its time so slowed; the time it loses so is kept.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "sim/event_queue.h"
#include "sim/ids.h"

namespace thunky::sim::internal {

// What a kernel needs of its device besides its time: the two sides of
// its roofline alone, and a GEMM's tiles (0: not tiled).
struct KernelNeeds {
  double compute_s = 0, memory_s = 0;
  int64_t tiles = 0;
};

class ComputeShares {
 public:
  // `host_cores` > 0: a host's cores shared by every rank; 0: a device per
  // rank. `grant_collective` starts the first collective waiting for a
  // core when one is granted to it.
  ComputeShares(EventQueue& queue, int64_t host_cores, std::function<void()> grant_collective)
      : queue_(queue), host_cores_(host_cores), grant_collective_(std::move(grant_collective)) {}
  void set_ranks(int64_t n) {
    live_.resize(static_cast<size_t>(n));
    taken_.resize(static_cast<size_t>(n));
  }
  // A device of `sms` SMs and `hbm_bandwidth` bytes/s (either 0: not
  // modelled, nothing is taken from it).
  void set_device(int64_t sms, double hbm_bandwidth) {
    sms_ = sms;
    hbm_ = hbm_bandwidth;
  }

  // A kernel of `seconds` at the full rate starts on `rank`'s stream
  // `stream` at `now` (on a host, asks for a core).
  void start(int64_t rank, int stream, double seconds, double now, const KernelNeeds& needs = {});

  // Collectives starting (positive) or ending (negative) on `rank` take
  // `ctas` SMs and `hbm` bytes/s of its HBM from `now`.
  void take(int64_t rank, int64_t ctas, double hbm, double now);

  // The kernel an event of the queue (`id`, `version`) ends at `now`, if
  // the event is its latest prediction: it leaves its rank (and its core);
  // the caller records it, then calls share(rank, now).
  struct Ended {
    int64_t rank = 0;
    int stream = -1;
    double start = 0;
    double lost = 0;  // seconds lost to collectives beside it
  };
  std::optional<Ended> end(KernelId id, uint32_t version);

  // Gives `rank`'s throughput anew among its kernels (on a host: the free
  // cores to those waiting), from `now`.
  void share(int64_t rank, double now);

  // On a host: a collective asks for a core, after the collectives that
  // asked before it and ahead of every kernel; and one that held a core
  // gives it back.
  void ask_core_for_collective(double now);
  void release_collective_core(double now);

 private:
  struct Kernel {
    int64_t rank = 0;
    int32_t stream = -1;   // -1: free
    double remaining = 0;  // seconds of work at full rate
    double rate = 0;
    double last = 0;
    double start = 0;
    KernelNeeds needs;
    double slowdown = 1;  // of its share: what collectives leave it (<= 1)
    double lost = 0;      // seconds lost to them so far
    uint32_t version = 0;  // never reset, so stale predictions are recognised after reuse
  };
  // What the collectives on a rank take.
  struct Taken {
    int64_t ctas = 0;
    double hbm = 0;
  };
  // Brings kernel `i` up to `now` and gives it rate `share` x `slowdown`.
  void set_rate(KernelId i, double share, double slowdown, double now);
  // The fraction of its speed kernel `k` keeps beside `t`.
  double kept(const Kernel& k, const Taken& t) const;
  void grant_cores(double now);

  EventQueue& queue_;
  int64_t host_cores_;
  std::function<void()> grant_collective_;
  std::vector<Kernel> kernels_;
  std::vector<KernelId> free_;
  std::vector<std::vector<KernelId>> live_;  // per rank: its running kernels
  std::vector<Taken> taken_;                  // per rank
  int64_t sms_ = 0;
  double hbm_ = 0;
  // On a host: the cores in use, and what waits for one (a kernel, or none
  // for a collective), collectives first.
  int64_t cores_busy_ = 0;
  std::deque<KernelId> core_queue_;
  size_t collectives_asking_ = 0;  // at core_queue_'s front
};

}  // namespace thunky::sim::internal
