#include "exec/cuda/loopback.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <set>
#include <shared_mutex>
#include <thread>

namespace thunky::cuda {

namespace {

cudaStream_t stream_of(const CollectiveCall& c) { return static_cast<cudaStream_t>(c.stream); }
size_t bytes_of(const CollectiveCall& c, int64_t count) { return static_cast<size_t>(count) * dtype_size(c.dtype); }

// Every rank on one GPU: the data moves through each member's staging
// buffer, all on the members' own streams.
class Loopback final : public RendezvousCommunicator {
 public:
  Loopback(Monitor& m, int ranks, KernelCache& kernels, int sms, std::mutex& turn)
      : RendezvousCommunicator(m), ranks_(static_cast<size_t>(ranks)), kernels_(kernels), sms_(sms), turn_(turn) {}
  ~Loopback() override {
    for (auto& r : ranks_) {
      if (r.stage) cudaFree(r.stage);
      for (auto e : {r.staged, r.done, r.free})
        if (e) cudaEventDestroy(e);
    }
  }

 protected:
  // On the issuing rank's thread and stream: copy every source aside, so
  // that in-place collectives read them before any member's dst changes.
  void stage(int rank, std::vector<CollectiveCall>& group) override {
    std::lock_guard<std::mutex> turn(turn_);
    Rank& r = ranks_[static_cast<size_t>(rank)];
    cudaStream_t s = stream_of(group.front());
    size_t total = 0;
    r.offsets.clear();
    for (const auto& c : group) {
      r.offsets.push_back(total);
      total += (bytes_of(c, c.src_count) + 255) & ~size_t{255};
    }
    if (total > r.capacity) {
      if (r.stage) THUNKY_CUDA_CHECK(cudaFree(r.stage));
      int device = 0;
      THUNKY_CUDA_CHECK(cudaGetDevice(&device));
      r.stage = static_cast<uint8_t*>(device_alloc(total, "the collective staging buffer of rank " + std::to_string(rank), device));
      r.capacity = total;
    }
    for (auto* e : {&r.staged, &r.done, &r.free})
      if (!*e) THUNKY_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    // The rank's previous collective may have run on another of its
    // streams, its members still reading this staging buffer.
    if (r.free_recorded && r.free_capture == capture_id(s)) THUNKY_CUDA_CHECK(cudaStreamWaitEvent(s, r.free, 0));
    for (size_t i = 0; i < group.size(); ++i) {
      const CollectiveCall& c = group[i];
      if (c.src_count) THUNKY_CUDA_CHECK(cudaMemcpyAsync(r.stage + r.offsets[i], c.src, bytes_of(c, c.src_count), cudaMemcpyDeviceToDevice, s));
    }
    THUNKY_CUDA_CHECK(cudaEventRecord(r.staged, s));
  }

  void move(const Launch& launch) override {
    std::lock_guard<std::mutex> turn(turn_);
    for (const auto& [rank, calls] : launch) {
      cudaStream_t s = stream_of(calls->front());
      for (const auto& [q, other] : launch) THUNKY_CUDA_CHECK(cudaStreamWaitEvent(s, ranks_[static_cast<size_t>(q)].staged, 0));
      for (size_t i = 0; i < calls->size(); ++i) build_dst((*calls)[i], i);
      THUNKY_CUDA_CHECK(cudaEventRecord(ranks_[static_cast<size_t>(rank)].done, s));
    }
    // Nobody's staging is reused, and nobody runs past the collective,
    // before every member has built its dst: as NCCL, a collective ends
    // together on all its members.
    for (const auto& [rank, calls] : launch) {
      cudaStream_t s = stream_of(calls->front());
      for (const auto& [q, other] : launch)
        if (q != rank) THUNKY_CUDA_CHECK(cudaStreamWaitEvent(s, ranks_[static_cast<size_t>(q)].done, 0));
      // Past every member's build: the rank's staging buffer is free again.
      Rank& r = ranks_[static_cast<size_t>(rank)];
      THUNKY_CUDA_CHECK(cudaEventRecord(r.free, s));
      r.free_recorded = true;
      r.free_capture = capture_id(s);
    }
  }

 private:
  struct Rank {
    uint8_t* stage = nullptr;
    size_t capacity = 0;
    std::vector<size_t> offsets;  // of the calls of its current launch
    cudaEvent_t staged = nullptr, done = nullptr, free = nullptr;
    // `free` was recorded, and in which graph capture (0: none). A capture
    // cannot wait on an event recorded outside it, nor needs to: nothing
    // of the graph runs before its start.
    bool free_recorded = false;
    unsigned long long free_capture = 0;
  };

  // The id of the graph capture `s` takes part in, 0 when none.
  static unsigned long long capture_id(cudaStream_t s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    THUNKY_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id, nullptr, nullptr, nullptr, nullptr));
    return status == cudaStreamCaptureStatusActive ? id : 0;
  }

  const uint8_t* staged_src(int rank, size_t call) const {
    const Rank& r = ranks_[static_cast<size_t>(rank)];
    return r.stage + r.offsets[call];
  }

  void build_dst(const CollectiveCall& c, size_t i) {
    cudaStream_t s = stream_of(c);
    const int64_t n = static_cast<int64_t>(c.ranks.size());
    auto copy = [&](uint8_t* dst, const uint8_t* src, size_t bytes) {
      if (bytes) THUNKY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    };
    switch (collective_kind(c.op)) {
      case CollectiveKind::all_gather:
        for (int64_t p = 0; p < n; ++p) copy(c.dst + p * bytes_of(c, c.src_count), staged_src(c.ranks[p], i), bytes_of(c, c.src_count));
        break;
      case CollectiveKind::all_to_all: {
        const size_t chunk = bytes_of(c, c.src_count / n);
        for (int64_t p = 0; p < n; ++p) copy(c.dst + p * chunk, staged_src(c.ranks[p], i) + c.position * chunk, chunk);
        break;
      }
      case CollectiveKind::collective_permute: {
        int64_t from = -1;
        for (auto [src, dst] : c.pairs)
          if (dst == c.position) from = src;  // the last pair wins, as on the cpu backend
        if (from >= 0) copy(c.dst, staged_src(c.ranks[from], i), bytes_of(c, c.dst_count));
        else if (c.dst_count) THUNKY_CUDA_CHECK(cudaMemsetAsync(c.dst, 0, bytes_of(c, c.dst_count), s));
        break;
      }
      case CollectiveKind::all_reduce:
      case CollectiveKind::reduce_scatter: {
        std::vector<const void*> srcs;
        for (int64_t p = 0; p < n; ++p) srcs.push_back(staged_src(c.ranks[p], i));
        const int64_t offset = c.op == Op::reduce_scatter ? c.position * c.dst_count : 0;
        if (c.dst_count) launch(kernels_.get(combine_kernel(c.dtype, c.reduction)), c.dst_count, combine_params(c.dst, c.dst_count, offset, srcs), s, sms_);
        break;
      }
    }
  }

  std::vector<Rank> ranks_;
  KernelCache& kernels_;
  int sms_;
  std::mutex& turn_;
};

class InProcessIds : public IdExchange {
 public:
  void exchange(const std::vector<int>& members, int position, std::vector<char>& bytes) override {
    pass(members, position == 0, members.size(), bytes);
  }

 protected:
  // The id of member set `key`, from the thread that is its `source` to
  // the `takers` threads of this process (the source among them).
  void pass(const std::vector<int>& key, bool source, size_t takers, std::vector<char>& bytes) {
    std::unique_lock<std::mutex> l(mu_);
    Slot& s = slots_[key];
    if (source) {
      s.bytes = bytes;
      s.ready = true;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return s.ready; });
      bytes = s.bytes;
    }
    if (++s.taken == takers) slots_.erase(key);
  }

 private:
  struct Slot {
    std::vector<char> bytes;
    bool ready = false;
    size_t taken = 0;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::vector<int>, Slot> slots_;
};

// Across processes: each process's first member of a set trades with the
// other processes' (the holder of member 0 sends the id, the others
// receive it), then passes it to its process's other members.
class ProcessIds final : public InProcessIds {
 public:
  ProcessIds(Processes& procs, int64_t ranks, double timeout_s) : procs_(procs), ranks_(ranks), timeout_s_(timeout_s) {}
  void exchange(const std::vector<int>& members, int position, std::vector<char>& bytes) override {
    const int me = procs_.place().index, count = procs_.place().count;
    std::vector<int> local, peers;  // this process's members; the other processes holding some
    for (int m : members) {
      const int q = process_of(m, ranks_, count);
      if (q == me) local.push_back(m);
      else if (std::find(peers.begin(), peers.end(), q) == peers.end()) peers.push_back(q);
    }
    const int rank = members[static_cast<size_t>(position)];
    const bool leader = rank == local.front();
    if (leader && !peers.empty()) {
      const uint64_t key = launch_key(members, -1);  // collectives' launches count from 0
      std::vector<uint8_t> msg(sizeof key + (position == 0 ? bytes.size() : 0));  // the key, then the id from its holder
      std::memcpy(msg.data(), &key, sizeof key);
      if (position == 0) std::memcpy(msg.data() + sizeof key, bytes.data(), bytes.size());
      const auto got = procs_.exchange(key, msg, peers, timeout_s_, {});
      if (position != 0) {
        const int holder = process_of(members.front(), ranks_, count);
        const auto& m = got[static_cast<size_t>(std::find(peers.begin(), peers.end(), holder) - peers.begin())];
        if (m.size() != sizeof key + bytes.size())
          throw std::runtime_error("process " + std::to_string(holder) + " sent an NCCL id of " + std::to_string(m.size() - sizeof key) + " bytes, not " +
                                   std::to_string(bytes.size()));
        std::memcpy(bytes.data(), m.data() + sizeof key, bytes.size());
      }
    }
    if (local.size() > 1) pass(members, leader, local.size(), bytes);
  }

 private:
  Processes& procs_;
  int64_t ranks_;
  double timeout_s_;
};

}  // namespace

std::unique_ptr<IdExchange> make_process_id_exchange(Processes& procs, int64_t ranks, double timeout_s) {
  return std::make_unique<ProcessIds>(procs, ranks, timeout_s);
}

std::unique_ptr<Communicator> make_loopback_communicator(Monitor& monitor, int ranks, KernelCache& kernels, int sms, std::mutex& turn) {
  return std::make_unique<Loopback>(monitor, ranks, kernels, sms, turn);
}

std::unique_ptr<IdExchange> make_inprocess_id_exchange() { return std::make_unique<InProcessIds>(); }

#ifdef THUNKY_HAVE_NCCL

bool have_nccl() { return true; }

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f64: return ncclFloat64;
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::f8e4m3: return ncclFloat8e4m3;
    case DType::f8e5m2: return ncclFloat8e5m2;
    case DType::s64: return ncclInt64;
    case DType::s32: return ncclInt32;
    case DType::u32: return ncclUint32;
    case DType::s8: return ncclInt8;
    case DType::u8:
    case DType::boolean:
    case DType::s16: return ncclUint8;  // s16 moves as bytes (the plan refuses reducing it)
  }
  return ncclUint8;  // not reached: the switch names every dtype
}

ncclRedOp_t nccl_op(Reduction r) {
  switch (r) {
    case Reduction::sum: return ncclSum;
    case Reduction::prod: return ncclProd;
    case Reduction::min: return ncclMin;
    case Reduction::max: return ncclMax;
    case Reduction::mean: return ncclAvg;
  }
  return ncclSum;
}

// Communicators are non-blocking (ncclConfig_t.blocking = 0): no NCCL
// call holds its thread while a peer is missing, so every wait polls
// ncclCommGetAsyncError against --timeout. Every NCCL call holds `calls_`
// shared, and abort() alone holds it exclusively: a communicator is never
// aborted while another thread is inside a call on it.
class Nccl final : public NcclTransport {
 public:
  Nccl(int ranks, IdExchange& ids, double timeout_s) : ranks_(ranks), ids_(ids), timeout_s_(timeout_s), scratch_(static_cast<size_t>(ranks)) {}
  // Non-blocking communicators end in two steps: every one finalised (all
  // ranks' at once, since a finalise completes when its peers' do), then
  // each destroyed once quiet; one still busy after 10 s is aborted.
  ~Nccl() override {
    std::vector<ncclComm_t> all;
    for (auto& [members, by_rank] : comms_)
      for (auto& [rank, comm] : by_rank) all.push_back(comm);
    for (ncclComm_t comm : all) ncclCommFinalize(comm);
    const auto start = std::chrono::steady_clock::now();
    while (!all.empty()) {
      const bool late = std::chrono::steady_clock::now() - start > std::chrono::seconds(10);
      std::vector<ncclComm_t> busy;
      for (ncclComm_t comm : all) {
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(comm, &state);
        if (state == ncclSuccess) ncclCommDestroy(comm);
        else if (state != ncclInProgress || late) ncclCommAbort(comm);
        else busy.push_back(comm);
      }
      all.swap(busy);
      if (!all.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (auto& by_stream : scratch_)
      for (auto& [stream, s] : by_stream)
        if (s.ptr) cudaFree(s.ptr);
  }

  // One communicator of every rank from a unique id (ncclCommInitRank),
  // then one per other member set split from it: ncclCommSplit is
  // collective over every rank, so each calls it for every set, with no
  // color where it is not a member.
  void connect(int rank, int device, const std::vector<std::vector<int>>& member_sets) override {
    THUNKY_CUDA_CHECK(cudaSetDevice(device));
    std::vector<int> everyone(static_cast<size_t>(ranks_));
    for (size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
    std::vector<char> id(sizeof(ncclUniqueId));
    if (rank == 0) {
      ncclUniqueId u;
      THUNKY_NCCL_CHECK(ncclGetUniqueId(&u));
      std::memcpy(id.data(), &u, sizeof u);
    }
    ids_.exchange(everyone, rank, id);
    ncclUniqueId u;
    std::memcpy(&u, id.data(), sizeof u);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t world = nullptr;
    {
      std::shared_lock<std::shared_mutex> l(calls_);
      THUNKY_NCCL_CHECK(ncclCommInitRankConfig(&world, static_cast<int>(everyone.size()), u, rank, &config));
    }
    keep(everyone, rank, world);
    settle({world}, "creating the NCCL communicator of every rank");
    for (const auto& members : member_sets) {  // the same order on every rank
      if (members == everyone) continue;
      auto it = std::find(members.begin(), members.end(), rank);
      const bool member = it != members.end();
      ncclComm_t comm = nullptr;
      {
        std::shared_lock<std::shared_mutex> l(calls_);
        THUNKY_NCCL_CHECK(ncclCommSplit(world, member ? 0 : NCCL_SPLIT_NOCOLOR, static_cast<int>(it - members.begin()), &comm, &config));
      }
      if (member) keep(members, rank, comm);
      settle(member ? std::vector<ncclComm_t>{world, comm} : std::vector<ncclComm_t>{world},
             "splitting the NCCL communicator of ranks " + members_text(members));
    }
  }

  void keep(const std::vector<int>& members, int rank, ncclComm_t comm) {
    std::lock_guard<std::mutex> l(mu_);
    comms_[members][rank] = comm;
  }

  // Issues the group on the device and returns at once: NCCL's kernels wait
  // for their peers on the device, where the host cannot see when they
  // arrive (the returned time is the issue's).
  std::chrono::steady_clock::time_point run(int rank, std::vector<CollectiveCall>& group, const std::vector<int>& members,
                                            const std::string& waiter) override {
    // Staging is sized before the group: no cudaFree inside one.
    for (auto& c : group)
      if (c.op == Op::collective_permute && c.src == c.dst) scratch(rank, stream_of(c), bytes_of(c, c.src_count));
    std::vector<ncclComm_t> used;
    {
      std::shared_lock<std::shared_mutex> l(calls_);
      if (aborted_) throw CollectiveTimeout(waiter + ": the NCCL communicators were aborted");
      THUNKY_NCCL_CHECK(ncclGroupStart());
      for (auto& c : group) used.push_back(issue(rank, c));
      THUNKY_NCCL_CHECK(ncclGroupEnd());
    }
    settle(used, waiter + " issuing its collective");
    return std::chrono::steady_clock::now();
  }

  void wait(int rank, cudaStream_t stream, const std::string& what) override {
    if (timeout_s_ <= 0) {
      THUNKY_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) THUNKY_CUDA_CHECK(e);
      check_async(rank, what);
      past_timeout(start, what);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void abort_all() override {
    std::unique_lock<std::shared_mutex> calls(calls_);
    std::lock_guard<std::mutex> l(mu_);
    aborted_ = true;
    for (auto& [members, by_rank] : comms_)
      for (auto& [rank, comm] : by_rank) ncclCommAbort(comm);
    comms_.clear();
  }

 private:
  static std::string members_text(const std::vector<int>& members) {
    std::string s;
    for (int m : members) {
      if (!s.empty()) s += ',';
      s += std::to_string(m);
    }
    return s;
  }

  // Past --timeout (when one is set): every communicator aborted, and the
  // run stops with exit 3.
  void past_timeout(std::chrono::steady_clock::time_point start, const std::string& what) {
    if (timeout_s_ <= 0 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <= timeout_s_) return;
    abort_all();
    throw CollectiveTimeout(what + " did not finish within " + std::to_string(timeout_s_) + " s; the communicators were aborted");
  }

  // Waits until NCCL has finished the calls in flight on `comms` (a
  // non-blocking call returns ncclInProgress first).
  void settle(const std::vector<ncclComm_t>& comms, const std::string& what) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      bool pending = false;
      {
        std::shared_lock<std::shared_mutex> l(calls_);
        if (aborted_) throw CollectiveTimeout(what + ": the NCCL communicators were aborted");
        for (ncclComm_t comm : comms) {
          ncclResult_t state = ncclSuccess;
          THUNKY_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
          if (state == ncclInProgress) pending = true;
          else if (state != ncclSuccess) throw DeviceError("NCCL reported an error " + what + ": " + ncclGetErrorString(state));
        }
      }
      if (!pending) return;
      past_timeout(start, what);
      std::this_thread::yield();
    }
  }

  void check_async(int rank, const std::string& what) {
    std::shared_lock<std::shared_mutex> calls(calls_);
    if (aborted_) throw CollectiveTimeout(what + ": the NCCL communicators were aborted");
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [members, by_rank] : comms_)
      if (auto it = by_rank.find(rank); it != by_rank.end()) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(it->second, &async);
        if (async != ncclSuccess && async != ncclInProgress) throw DeviceError("NCCL reported an error during " + what + ": " + ncclGetErrorString(async));
      }
  }

  ncclComm_t comm(int rank, const std::vector<int>& members) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = comms_.find(members);
    if (it == comms_.end() || !it->second.count(rank)) throw DeviceError("no NCCL communicator was created for these members");
    return it->second.at(rank);
  }

  // A rank's in-place sends stage per stream: two streams may send at once.
  uint8_t* scratch(int rank, cudaStream_t stream, size_t bytes) {
    auto& s = scratch_[static_cast<size_t>(rank)][stream];
    if (bytes > s.capacity) {
      if (s.ptr) THUNKY_CUDA_CHECK(cudaFree(s.ptr));
      int device = 0;
      cudaGetDevice(&device);
      s.ptr = static_cast<uint8_t*>(device_alloc(bytes, "the collective_permute staging buffer of rank " + std::to_string(rank), device));
      s.capacity = bytes;
    }
    return s.ptr;
  }

  // Issues one collective inside the caller's group; returns its communicator.
  ncclComm_t issue(int rank, CollectiveCall& c) {
    ncclComm_t k = comm(rank, c.ranks);
    cudaStream_t s = stream_of(c);
    const bool bytes_only = c.dtype == DType::s16;
    const ncclDataType_t t = bytes_only ? ncclUint8 : nccl_type(c.dtype);
    const size_t scale = bytes_only ? 2 : 1;
    const int64_t n = static_cast<int64_t>(c.ranks.size());
    switch (collective_kind(c.op)) {
      case CollectiveKind::all_reduce: THUNKY_NCCL_CHECK(ncclAllReduce(c.src, c.dst, c.dst_count, t, nccl_op(c.reduction), k, s)); break;
      case CollectiveKind::all_gather: THUNKY_NCCL_CHECK(ncclAllGather(c.src, c.dst, c.src_count * scale, t, k, s)); break;
      case CollectiveKind::reduce_scatter: THUNKY_NCCL_CHECK(ncclReduceScatter(c.src, c.dst, c.dst_count, t, nccl_op(c.reduction), k, s)); break;
      case CollectiveKind::all_to_all: {
        const int64_t chunk = c.src_count / n;
        const size_t es = dtype_size(c.dtype) / scale;
        for (int64_t p = 0; p < n; ++p) {
          THUNKY_NCCL_CHECK(ncclSend(c.src + p * chunk * es * scale, chunk * scale, t, static_cast<int>(p), k, s));
          THUNKY_NCCL_CHECK(ncclRecv(c.dst + p * chunk * es * scale, chunk * scale, t, static_cast<int>(p), k, s));
        }
        break;
      }
      case CollectiveKind::collective_permute: {
        const size_t bytes = bytes_of(c, c.src_count);
        const uint8_t* src = c.src;
        if (c.src == c.dst && bytes) {  // in place: send from a copy
          uint8_t* tmp = scratch(rank, s, bytes);
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp, c.src, bytes, cudaMemcpyDeviceToDevice, s));
          src = tmp;
        }
        int64_t from = -1;
        for (auto [a, b] : c.pairs) {
          if (a == c.position && b != c.position) THUNKY_NCCL_CHECK(ncclSend(src, c.src_count * scale, t, static_cast<int>(b), k, s));
          if (b == c.position) from = a;
        }
        if (from == c.position) THUNKY_CUDA_CHECK(cudaMemcpyAsync(c.dst, src, bytes, cudaMemcpyDeviceToDevice, s));
        else if (from >= 0) THUNKY_NCCL_CHECK(ncclRecv(c.dst, c.dst_count * scale, t, static_cast<int>(from), k, s));
        else if (bytes) THUNKY_CUDA_CHECK(cudaMemsetAsync(c.dst, 0, bytes, s));
        break;
      }
    }
    return k;
  }

  int ranks_;  // of the mesh, in every process
  IdExchange& ids_;
  double timeout_s_;
  std::shared_mutex calls_;
  bool aborted_ = false;  // under calls_
  std::mutex mu_;         // comms_
  std::map<std::vector<int>, std::map<int, ncclComm_t>> comms_;
  struct Scratch {
    uint8_t* ptr = nullptr;
    size_t capacity = 0;
  };
  std::vector<std::map<cudaStream_t, Scratch>> scratch_;  // by rank (touched by its thread only), then stream
};

}  // namespace

std::unique_ptr<NcclTransport> make_nccl_transport(int ranks, IdExchange& ids, double timeout_s) {
  return std::make_unique<Nccl>(ranks, ids, timeout_s);
}

#else

bool have_nccl() { return false; }
std::unique_ptr<NcclTransport> make_nccl_transport(int, IdExchange&, double) { return nullptr; }

#endif

}  // namespace thunky::cuda
