#include "exec/communicator.h"

#include "core/command_facts.h"
#include "core/mesh.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

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
    store_from_double(dst, c.dtype, i, reduction_finish(c.reduction, acc, static_cast<int64_t>(src.size())));
  }
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// Appends to / reads from a message between processes.
void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof v);
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}
struct Reader {
  const std::vector<uint8_t>& in;
  size_t at = 0;
  const uint8_t* take(size_t n) {
    if (n > in.size() - at) throw std::runtime_error("a message between processes ends early (a process of another build, or a corrupted message)");
    at += n;
    return in.data() + at - n;
  }
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string string() {
    const auto n = get<uint64_t>();
    const auto* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
};

// Host memory: every member's sources are copied before the rendezvous,
// so an in-place collective reads them before anyone's dst changes.
class InProcess final : public RendezvousCommunicator {
 public:
  InProcess(Monitor& m, StagingPool& staging, CorePool* cores, const CrossProcess* cross)
      : RendezvousCommunicator(m, cores), pool_(staging), cross_(cross ? std::optional<CrossProcess>(*cross) : std::nullopt) {}

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
        for (size_t p = 0; p < mine.ranks.size(); ++p) {
          const int q = mine.ranks[p];
          src[p] = is_local(q) ? staged_.at(launch.at(q))[i].data() : remote_.at(&launch).sources.at(q)[i];
        }
        collective_result(mine, src, mine.dst);
        if (same_for_all) computed[mine.ranks] = &mine;
      }
    }
    for (const auto& [r, calls] : launch) {
      auto it = staged_.find(calls);
      for (auto& buffer : it->second) pool_.give(std::move(buffer));
      staged_.erase(it);
    }
    remote_.erase(&launch);
  }

  bool is_local(int rank) const override { return !cross_ || cross_->block.holds(rank); }

  // This process's members' sources go to every process that runs one of
  // the others, and theirs come back: [members][rank, calls][signature,
  // id, bytes] each way. Every process then computes its own members'
  // results from all the sources, as one process does, bit for bit.
  void join_remote(const Launch& launch, const std::vector<int>& key, int64_t seq) override {
    std::vector<int> peers;
    for (int m : key)
      if (!is_local(m)) peers.push_back(process_of(m, cross_->ranks, cross_->processes->place().count));
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    const uint64_t exchange_key = launch_key(key, seq);
    std::vector<uint8_t> mine;
    std::vector<size_t> expected;  // each call's source bytes, alike on every member (their signatures match)
    {
      std::lock_guard<std::mutex> l(staged_mu_);
      for (const auto& b : staged_.at(launch.begin()->second)) expected.push_back(b.size());
      size_t size = sizeof exchange_key + sizeof(uint32_t);  // sized first: one allocation, no regrowth
      for (const auto& [r, calls] : launch)
        for (size_t i = 0; i < calls->size(); ++i)
          size += 2 * sizeof(uint32_t) + 3 * sizeof(uint64_t) + (*calls)[i].signature.size() + (*calls)[i].id.size() + expected[i];
      mine.reserve(size);
      put<uint64_t>(mine, exchange_key);
      put<uint32_t>(mine, static_cast<uint32_t>(launch.size()));
      for (const auto& [r, calls] : launch) {
        put<int32_t>(mine, r);
        put<uint32_t>(mine, static_cast<uint32_t>(calls->size()));
        const auto& staged = staged_.at(calls);
        for (size_t i = 0; i < calls->size(); ++i) {
          put_string(mine, (*calls)[i].signature);
          put_string(mine, (*calls)[i].id);
          put<uint64_t>(mine, staged[i].size());
          put_bytes(mine, staged[i].data(), staged[i].size());
        }
      }
    }
    auto poll = [this] {
      std::lock_guard<std::mutex> l(monitor().mutex());
      if (monitor().aborted()) throw Aborted(monitor().reason());
    };
    std::vector<std::vector<uint8_t>> got;
    try {
      got = cross_->processes->exchange(exchange_key, mine, peers, cross_->timeout_s, poll);
    } catch (const ProcessTimeout& e) {
      // Which ranks it waits for: the members the silent processes run.
      std::vector<int> silent;
      for (int m : key)
        if (std::count(e.missing.begin(), e.missing.end(), process_of(m, cross_->ranks, cross_->processes->place().count))) silent.push_back(m);
      throw ProcessTimeout(std::string(e.what()) + " (it runs rank" + (silent.size() > 1 ? "s " : " ") + list(silent) + ")", e.missing);
    }
    const auto& ref = *launch.begin()->second;
    std::map<int, std::vector<const uint8_t*>> theirs;  // into the messages, kept until move()
    for (const auto& message : got) {
      Reader in{message, sizeof exchange_key};
      for (uint32_t n = in.get<uint32_t>(); n > 0; --n) {
        const int r = in.get<int32_t>();
        const uint32_t calls = in.get<uint32_t>();
        if (std::find(key.begin(), key.end(), r) == key.end() || is_local(r) || theirs.count(r))
          throw std::runtime_error("a process sent the sources of rank " + std::to_string(r) + ", not one of the others of communicator {" + list(key) + "}");
        auto& sources = theirs[r];
        for (uint32_t i = 0; i < calls; ++i) {
          const std::string signature = in.string(), id = in.string();
          if (calls != ref.size() || signature != ref[i].signature)
            throw std::runtime_error("deadlock: ranks " + std::to_string(launch.begin()->first) + " and " + std::to_string(r) + " of communicator {" + list(key) +
                                     "} issue different collectives: rank " + std::to_string(launch.begin()->first) + " " + ref.front().id + " " +
                                     ref.front().signature + ", rank " + std::to_string(r) + " " + id + " " + signature);
          const auto bytes = in.get<uint64_t>();
          if (bytes != expected[i])
            throw std::runtime_error("rank " + std::to_string(r) + " sent " + std::to_string(bytes) + " bytes for " + ref[i].id + ", where " +
                                     std::to_string(expected[i]) + " were due (a process of another build, or a corrupted message)");
          sources.push_back(in.take(bytes));
        }
      }
    }
    std::lock_guard<std::mutex> l(staged_mu_);
    remote_[&launch] = Remote{std::move(got), std::move(theirs)};
  }

 private:
  StagingPool& pool_;
  std::optional<CrossProcess> cross_;
  // The sources of other processes' members, by launch: the messages that
  // brought them, and by rank, where each call's source is in them.
  struct Remote {
    std::vector<std::vector<uint8_t>> messages;
    std::map<int, std::vector<const uint8_t*>> sources;
  };
  std::map<const Launch*, Remote> remote_;
  std::mutex staged_mu_;
  // By the issuing thread's group (a rank's streams are threads of their
  // own, so one rank may be in several launches at once).
  std::map<const std::vector<CollectiveCall>*, std::vector<std::vector<uint8_t>>> staged_;
};

}  // namespace

std::chrono::steady_clock::time_point RendezvousCommunicator::run(int rank, std::vector<CollectiveCall>& group, const std::vector<int>& members,
                                                                  const std::string& waiter) {
  const std::vector<int>& key = members;
  size_t here = 0;
  for (int m : key) here += is_local(m);
  const bool remote = here < key.size();
  // With cores, the last to arrive stages every member's; a launch with
  // members elsewhere stages first, to send the sources before it moves.
  if (!cores_ || remote) stage(rank, group);
  std::unique_lock<std::mutex> lock(monitor_.mutex());
  if (monitor_.aborted()) throw Aborted(monitor_.reason());
  const int64_t seq = seq_[{rank, key}]++;
  auto& rv = pending_[{key, seq}];
  rv.expected = here;
  rv.calls[rank] = &group;
  if (rv.calls.size() == rv.expected) {
    complete(lock, key, seq, remote, rv);
  } else {
    try {
      // Said when a deadlock is found: who has joined by then, and who never came.
      auto what = [&] {
        std::vector<int> missing;
        for (int m : key)
          if (is_local(m) && !rv.calls.count(m)) missing.push_back(m);
        std::string s = waiter + " in collective #" + std::to_string(seq) + " (" + group.front().id + ") with ranks {" + list(key) + "}, where rank";
        s += missing.size() > 1 ? "s " : " ";
        s += list(missing);
        s += missing.size() > 1 ? " never arrive" : " never arrives";
        return s;
      };
      monitor_.wait(lock, [&] { return rv.done; }, what, group.front().pointer);
    } catch (const Aborted&) {
      rv.calls.erase(rank);  // `group` dies with this frame
      throw;
    }
  }
  const auto moved = rv.moved;
  if (--rv.left == 0) pending_.erase({key, seq});
  return moved;
}

void RendezvousCommunicator::complete(std::unique_lock<std::mutex>& lock, const std::vector<int>& key, int64_t seq, bool remote, Rendezvous& rv) {
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
    if (remote) {
      // The other processes' sources, waited for holding neither the lock
      // nor a core, which this process's other streams may need meanwhile.
      lock.unlock();
      try {
        join_remote(rv.calls, key, seq);
      } catch (const ProcessTimeout& e) {
        lock.lock();
        stop_exit_code_ = 3;
        const auto& first = rv.calls.begin()->second->front();
        throw std::runtime_error("timeout: rank " + std::to_string(rv.calls.begin()->first) + " waited in collective #" + std::to_string(seq) + " (" + first.id +
                                 ") with ranks {" + list(key) + "}, " + e.what());
      } catch (const ProcessFailure& e) {
        lock.lock();
        stop_exit_code_ = e.exit_code;
        throw;
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
    }
    if (cores_) {
      // Moving is the cpu's work: on a core, and not under the lock that
      // every other thread's events and waits need meanwhile.
      lock.unlock();
      try {
        cores_->run([&] {
          rv.moved = std::chrono::steady_clock::now();
          if (!remote)
            for (auto& [r, calls] : rv.calls) stage(r, *calls);  // every source read before any dst changes
          move(rv.calls);
        }, /*urgent=*/true);
      } catch (...) {
        lock.lock();
        throw;
      }
      lock.lock();
    } else {
      rv.moved = std::chrono::steady_clock::now();
      move(rv.calls);
    }
  } catch (const std::exception& e) {
    failed = e.what();
  }
  if (!failed.empty()) {
    monitor_.abort(lock, failed, false, rv.calls.begin()->second->front().pointer);
    throw Aborted(monitor_.reason());
  }
  rv.done = true;
  monitor_.notify_all();
}

CollectiveCall collective_call(const Program& p, const Command& c, const RankCtx& ctx, const std::function<uint8_t*(const View&)>& address) {
  CollectiveCall call;
  call.op = c.op();
  call.reduction = reduction_of(c);
  const Collective& k = collective_of(c);
  const View sv = resolve(p, k.src, ctx), dv = resolve(p, k.dst, ctx);
  call.dtype = sv.dtype;
  call.src = address(sv);
  call.dst = address(dv);
  call.src_count = sv.count();
  call.dst_count = dv.count();
  const Participants part = participants(p.mesh, ctx.rank, k.axis, k.groups.get());
  call.ranks = part.ranks;
  call.position = part.position;
  const int64_t n = static_cast<int64_t>(part.ranks.size());
  if (c.op() == Op::collective_permute) call.pairs = permute_pairs(c, n);
  call.id = c.id();
  call.pointer = c.pointer;
  call.signature = collective_signature(p, c, sv, dv, n);
  return call;
}

void collective_result(const CollectiveCall& c, const std::vector<const uint8_t*>& src, uint8_t* dst) {
  const size_t es = dtype_size(c.dtype);
  const int64_t n = static_cast<int64_t>(c.ranks.size());
  switch (collective_kind(c.op)) {
    case CollectiveKind::all_reduce: reduce_into(c, src, 0, c.dst_count, dst); break;
    case CollectiveKind::reduce_scatter: reduce_into(c, src, c.position * c.dst_count, c.dst_count, dst); break;
    case CollectiveKind::all_gather:
      for (int64_t p = 0; p < n; ++p) std::memcpy(dst + p * c.src_count * es, src[p], c.src_count * es);
      break;
    case CollectiveKind::all_to_all: {
      const int64_t chunk = c.src_count / n;
      for (int64_t p = 0; p < n; ++p) std::memcpy(dst + p * chunk * es, src[p] + c.position * chunk * es, chunk * es);
      break;
    }
    case CollectiveKind::collective_permute: {
      bool received = false;
      for (auto [s, t] : c.pairs)
        if (t == c.position) {
          std::memcpy(dst, src[s], c.dst_count * es);
          received = true;
        }
      if (!received) std::memset(dst, 0, c.dst_count * es);
      break;
    }
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

std::unique_ptr<Communicator> make_inprocess_communicator(Monitor& monitor, StagingPool& staging, CorePool* cores, const CrossProcess* cross) {
  return std::make_unique<InProcess>(monitor, staging, cores, cross);
}

}  // namespace thunky
