#include "exec/communicator.h"

#include "core/command_facts.h"
#include "core/mesh.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace thunky {

namespace {

void reduce_into(const CollectiveCall& c, const std::vector<const uint8_t*>& src, int64_t offset, int64_t count, uint8_t* dst) {
  const size_t es = dtype_size(c.dtype);
  if (c.dtype == DType::f32 && c.reduction == Reduction::sum) {
    auto* out = reinterpret_cast<float*>(dst);
    for (int64_t i = 0; i < count; ++i) {
      double acc = 0;
      for (const uint8_t* s : src) {
        float v;
        std::memcpy(&v, s + (offset + i) * es, 4);
        acc += v;
      }
      out[i] = static_cast<float>(acc);
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    double acc = load_as_double(src[0], c.dtype, offset + i);
    for (size_t p = 1; p < src.size(); ++p) acc = reduce_values(c.reduction, acc, load_as_double(src[p], c.dtype, offset + i));
    store_from_double(dst, c.dtype, i, acc);
  }
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// Host memory: every member's sources are copied before the rendezvous,
// so an in-place collective reads them before anyone's dst changes.
class InProcess final : public RendezvousCommunicator {
 public:
  InProcess(Monitor& m, StagingPool& staging, CorePool* cores) : RendezvousCommunicator(m, cores), pool_(staging) {}

 protected:
  void stage(int rank, std::vector<CollectiveCall>& group) override {
    std::vector<std::vector<uint8_t>> staged;
    for (const auto& c : group) {
      const size_t bytes = static_cast<size_t>(c.src_count) * dtype_size(c.dtype);
      staged.push_back(pool_.take(bytes));
      if (bytes) std::memcpy(staged.back().data(), c.src, bytes);
    }
    std::lock_guard<std::mutex> l(staged_mu_);
    staged_[&group] = std::move(staged);
  }

  void move(const Launch& launch) override {
    const auto& ref = *launch.begin()->second;
    std::lock_guard<std::mutex> l(staged_mu_);
    for (size_t i = 0; i < ref.size(); ++i) {
      // An all_reduce or all_gather gives every member of a communicator
      // the same result: it is computed once and copied to the others
      // (N reductions of N sources each took N times as long).
      std::map<std::vector<int>, const CollectiveCall*> computed;
      for (const auto& [r, calls] : launch) {
        const CollectiveCall& mine = (*calls)[i];
        const bool same_for_all = mine.op == Op::all_reduce || mine.op == Op::all_gather;
        if (auto it = computed.find(mine.ranks); same_for_all && it != computed.end()) {
          std::memcpy(mine.dst, it->second->dst, static_cast<size_t>(mine.dst_count) * dtype_size(mine.dtype));
          continue;
        }
        std::vector<const uint8_t*> src(mine.ranks.size());
        for (size_t p = 0; p < mine.ranks.size(); ++p) src[p] = staged_.at(launch.at(mine.ranks[p]))[i].data();
        collective_result(mine, src, mine.dst);
        if (same_for_all) computed[mine.ranks] = &mine;
      }
    }
    for (const auto& [r, calls] : launch) {
      auto it = staged_.find(calls);
      for (auto& buffer : it->second) pool_.give(std::move(buffer));
      staged_.erase(it);
    }
  }

 private:
  StagingPool& pool_;
  std::mutex staged_mu_;
  // By the issuing thread's group (a rank's streams are threads of their
  // own, so one rank may be in several launches at once).
  std::map<const std::vector<CollectiveCall>*, std::vector<std::vector<uint8_t>>> staged_;
};

}  // namespace

void RendezvousCommunicator::run(int rank, std::vector<CollectiveCall>& group, const std::vector<int>& members, const std::string& waiter) {
  const std::vector<int>& key = members;
  if (!cores_) stage(rank, group);  // with cores, the last to arrive stages every member's
  std::unique_lock<std::mutex> lock(monitor_.mutex());
  if (monitor_.aborted()) throw Aborted(monitor_.reason());
  const int64_t seq = seq_[{rank, key}]++;
  auto& rv = pending_[{key, seq}];
  rv.expected = key.size();
  rv.calls[rank] = &group;
  if (rv.calls.size() == rv.expected) {
    complete(lock, key, rv);
  } else {
    try {
      monitor_.wait(lock, [&] { return rv.done; },
                    waiter + " in collective #" + std::to_string(seq) + " (" + group.front().id + ") with ranks {" + list(key) + "}, joined by " + std::to_string(rv.calls.size()) + " of " + std::to_string(rv.expected));
    } catch (const Aborted&) {
      rv.calls.erase(rank);  // `group` dies with this frame
      throw;
    }
  }
  if (--rv.left == 0) pending_.erase({key, seq});
}

void RendezvousCommunicator::complete(std::unique_lock<std::mutex>& lock, const std::vector<int>& key, Rendezvous& rv) {
  rv.left = rv.expected;
  // Every participant must have issued the same collectives.
  const int first = rv.calls.begin()->first;
  const auto& ref = *rv.calls.begin()->second;
  for (const auto& [r, calls] : rv.calls) {
    bool same = calls->size() == ref.size();
    for (size_t i = 0; same && i < ref.size(); ++i) same = (*calls)[i].signature == ref[i].signature;
    if (!same) {
      std::string a = ref.front().id + " " + ref.front().signature + (ref.size() > 1 ? " (+" + std::to_string(ref.size() - 1) + " grouped)" : "");
      std::string b = calls->front().id + " " + calls->front().signature + (calls->size() > 1 ? " (+" + std::to_string(calls->size() - 1) + " grouped)" : "");
      monitor_.abort(lock, "deadlock: ranks " + std::to_string(first) + " and " + std::to_string(r) + " of communicator {" + list(key) + "} issue different collectives: rank " + std::to_string(first) + " " + a + ", rank " + std::to_string(r) + " " + b, true,
                     calls->front().pointer);
      throw Aborted(monitor_.reason());
    }
  }
  std::string failed;
  try {
    if (cores_) {
      // Moving is the cpu's work: on a core, and not under the lock that
      // every other thread's events and waits need meanwhile.
      lock.unlock();
      try {
        cores_->run([&] {
          for (auto& [r, calls] : rv.calls) stage(r, *calls);  // every source read before any dst changes
          move(rv.calls);
        }, /*urgent=*/true);
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
    } else {
      move(rv.calls);
    }
  } catch (const std::exception& e) {
    failed = e.what();
  }
  if (!failed.empty()) {
    monitor_.abort(lock, failed, false);
    throw Aborted(monitor_.reason());
  }
  rv.done = true;
  monitor_.notify_all();
}

CollectiveCall collective_call(const Program& p, const Command& c, const RankCtx& ctx, const std::function<uint8_t*(const View&)>& address) {
  CollectiveCall call;
  call.op = c.op;
  call.reduction = c.rare().reduction;
  const View sv = resolve(p, *c.src, ctx), dv = resolve(p, *c.dst, ctx);
  call.dtype = p.buffers[sv.buffer].dtype;
  call.src = address(sv);
  call.dst = address(dv);
  call.src_count = sv.count();
  call.dst_count = dv.count();
  const Participants part = participants(p.mesh, ctx.rank, c.axis, c.rare().groups);
  call.ranks = part.ranks;
  call.position = part.position;
  const int64_t n = static_cast<int64_t>(part.ranks.size());
  if (c.op == Op::collective_permute) call.pairs = permute_pairs(c, n);
  call.id = c.id();
  call.pointer = c.pointer;
  call.signature = collective_signature(p, c, sv, dv, n);
  return call;
}

void collective_result(const CollectiveCall& c, const std::vector<const uint8_t*>& src, uint8_t* dst) {
  const size_t es = dtype_size(c.dtype);
  const int64_t n = static_cast<int64_t>(c.ranks.size());
  switch (c.op) {
    case Op::all_reduce: reduce_into(c, src, 0, c.dst_count, dst); break;
    case Op::reduce_scatter: reduce_into(c, src, c.position * c.dst_count, c.dst_count, dst); break;
    case Op::all_gather:
      for (int64_t p = 0; p < n; ++p) std::memcpy(dst + p * c.src_count * es, src[p], c.src_count * es);
      break;
    case Op::all_to_all: {
      const int64_t chunk = c.src_count / n;
      for (int64_t p = 0; p < n; ++p) std::memcpy(dst + p * chunk * es, src[p] + c.position * chunk * es, chunk * es);
      break;
    }
    case Op::collective_permute: {
      bool received = false;
      for (auto [s, t] : c.pairs)
        if (t == c.position) {
          std::memcpy(dst, src[s], c.dst_count * es);
          received = true;
        }
      if (!received) std::memset(dst, 0, c.dst_count * es);
      break;
    }
    case Op::memzero:  // not a collective: never called so
    case Op::memset:
    case Op::copy:
    case Op::gemm:
    case Op::map:
    case Op::reduce:
    case Op::kernel:
    case Op::ptx_kernel:
    case Op::custom_call:
    case Op::transpose:
    case Op::collective_group:
    case Op::async_start:
    case Op::async_done:
    case Op::cond:
    case Op::switch_:
    case Op::while_:
    case Op::call: break;
  }
}

std::vector<uint8_t> StagingPool::take(size_t bytes) {
  std::vector<uint8_t> buffer;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->capacity() >= bytes && (best == kept_.end() || it->capacity() < best->capacity())) best = it;
    if (best != kept_.end()) {
      buffer = std::move(*best);
      *best = std::move(kept_.back());
      kept_.pop_back();
    }
  }
  buffer.resize(bytes);
  return buffer;
}

void StagingPool::give(std::vector<uint8_t> buffer) {
  std::lock_guard<std::mutex> l(mu_);
  kept_.push_back(std::move(buffer));
}

std::unique_ptr<Communicator> make_inprocess_communicator(Monitor& monitor, StagingPool& staging, CorePool* cores) {
  return std::make_unique<InProcess>(monitor, staging, cores);
}

}  // namespace thunky
