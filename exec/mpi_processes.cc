// Processes over MPI: every call is nonblocking and polled, under one
// mutex (so any thread level MPI provides will do), so that a wait can
// notice a local abort, a failure another process sent, or its timeout.
// The C API only (no MPI C++ bindings to link).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "exec/processes.h"

namespace thunky {

namespace {

using Clock = std::chrono::steady_clock;

// Tags: a failure, the gather to process 0; exchanges take the rest.
constexpr int kFailTag = 1, kGatherTag = 2, kFirstExchangeTag = 3;

class MpiProcesses final : public Processes {
 public:
  explicit MpiProcesses(ProcessPlace place) : place_(std::move(place)) {
    int flag = 0;
    void* ub = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = flag ? *static_cast<int*>(ub) : 32767;
  }
  ~MpiProcesses() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  const ProcessPlace& place() const override { return place_; }

  std::vector<std::vector<uint8_t>> exchange(uint64_t key, const std::vector<uint8_t>& mine, const std::vector<int>& peers, double timeout_s,
                                             const std::function<void()>& poll) override {
    const int tag = kFirstExchangeTag + static_cast<int>(key % static_cast<uint64_t>(tag_ub_ - kFirstExchangeTag));
    auto begins_with_key = [&](const std::vector<uint8_t>& m) {
      uint64_t k = 0;
      return m.size() >= sizeof k && (std::memcpy(&k, m.data(), sizeof k), k == key);
    };
    if (!begins_with_key(mine)) throw std::logic_error("Processes::exchange: a message must begin with its key");
    std::vector<std::vector<uint8_t>> got = transfer(tag, mine, peers, peers, timeout_s, poll);
    for (size_t i = 0; i < got.size(); ++i)
      if (!begins_with_key(got[i]))
        throw std::runtime_error("process " + std::to_string(peers[i]) + " sent the data of another collective under the same MPI tag " +
                                 std::to_string(tag) + " (two collectives in flight whose keys collide): rerun, or report the schedule");
    return got;
  }

  std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine) override {
    std::vector<int> others;
    for (int p = 1; p < place_.count; ++p) others.push_back(p);
    if (place_.index == 0) {
      auto got = transfer(kGatherTag, {}, {}, others, timeout_s, {});
      got.insert(got.begin(), mine);
      return got;
    }
    transfer(kGatherTag, mine, {0}, {}, timeout_s, {});
    return {};
  }

  double max(double mine) override {
    double out = mine;
    MPI_Request r;
    {
      std::lock_guard<std::mutex> l(mu_);
      MPI_Iallreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r);
    }
    wait(r, "the others' makespans");
    return out;
  }

  void barrier() override {
    MPI_Request r;
    {
      std::lock_guard<std::mutex> l(mu_);
      MPI_Ibarrier(MPI_COMM_WORLD, &r);
    }
    wait(r, "the others at a barrier");
  }

  void fail(const std::string& reason, int exit_code) override {
    std::vector<uint8_t> msg(sizeof exit_code + reason.size());
    std::memcpy(msg.data(), &exit_code, sizeof exit_code);
    std::memcpy(msg.data() + sizeof exit_code, reason.data(), reason.size());
    std::vector<MPI_Request> rs;
    std::lock_guard<std::mutex> l(mu_);
    for (int p = 0; p < place_.count; ++p) {
      if (p == place_.index) continue;
      rs.emplace_back();
      MPI_Isend(msg.data(), static_cast<int>(msg.size()), MPI_BYTE, p, kFailTag, MPI_COMM_WORLD, &rs.back());
    }
    // A second at most: a peer that is gone never takes it.
    const auto until = Clock::now() + std::chrono::seconds(1);
    int done = 0;
    while (!done && Clock::now() < until) MPI_Testall(static_cast<int>(rs.size()), rs.data(), &done, MPI_STATUSES_IGNORE);
    if (!done)
      for (auto& r : rs) MPI_Request_free(&r);  // msg must outlive them: kept
    if (!done) kept_.push_back(std::move(msg));
  }

  std::optional<ProcessStop> failure() override {
    std::lock_guard<std::mutex> l(mu_);
    return failure_locked();
  }

 private:
  std::optional<ProcessStop> failure_locked() {
    if (failure_) return failure_;
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kFailTag, MPI_COMM_WORLD, &flag, &st);
    if (!flag) return std::nullopt;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<uint8_t> msg(static_cast<size_t>(std::max(n, 0)));
    MPI_Recv(msg.data(), n, MPI_BYTE, st.MPI_SOURCE, kFailTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    ProcessStop stop;
    if (msg.size() >= sizeof stop.exit_code) {
      std::memcpy(&stop.exit_code, msg.data(), sizeof stop.exit_code);
      stop.reason.assign(msg.begin() + sizeof stop.exit_code, msg.end());
    }
    stop.reason = "process " + std::to_string(st.MPI_SOURCE) + " stopped: " + stop.reason;
    failure_ = stop;
    return failure_;
  }

  // One poll round's pause: a spin first, then short sleeps, so that a
  // collective between processes costs microseconds, and a long wait
  // little CPU.
  static void pause(int round) {
    if (round < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(round < 2000 ? 20 : 200));
  }

  void check(Clock::time_point start, double timeout_s, const std::vector<int>& missing, const char* what, const std::function<void()>& poll) {
    if (auto f = failure_locked()) throw ProcessFailure(f->reason, f->exit_code);
    if (poll) {
      mu_.unlock();
      try {
        poll();
      } catch (...) {
        mu_.lock();
        throw;
      }
      mu_.lock();
    }
    if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
      std::string who;
      for (size_t i = 0; i < missing.size(); ++i) who += (i ? ", " : "") + std::to_string(missing[i]);
      std::ostringstream os;
      os << what << ": no word from process" << (missing.size() > 1 ? "es " : " ") << who << " within " << timeout_s << " s";
      throw ProcessTimeout(os.str(), missing);
    }
  }

  // Sends `data` to each of `to` and receives a message of `tag` from each
  // of `from`; returns them in the order of `from`.
  std::vector<std::vector<uint8_t>> transfer(int tag, const std::vector<uint8_t>& data, const std::vector<int>& to, const std::vector<int>& from,
                                             double timeout_s, const std::function<void()>& poll) {
    if (data.size() > static_cast<size_t>(INT32_MAX))
      throw std::runtime_error("a message of " + std::to_string(data.size()) + " bytes between processes, more than MPI's 2147483647 of one send");
    const auto start = Clock::now();
    std::unique_lock<std::mutex> l(mu_);
    std::vector<MPI_Request> sends(to.size());
    for (size_t i = 0; i < to.size(); ++i)
      MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_BYTE, to[i], tag, MPI_COMM_WORLD, &sends[i]);
    std::vector<std::vector<uint8_t>> got(from.size());
    std::vector<bool> have(from.size(), false);
    size_t left = from.size();
    int sent = to.empty();
    try {
      for (int round = 0; left > 0 || !sent; ++round) {
        for (size_t i = 0; i < from.size(); ++i) {
          if (have[i]) continue;
          int flag = 0;
          MPI_Status st;
          MPI_Iprobe(from[i], tag, MPI_COMM_WORLD, &flag, &st);
          if (!flag) continue;
          int n = 0;
          MPI_Get_count(&st, MPI_BYTE, &n);
          got[i].resize(static_cast<size_t>(std::max(n, 0)));
          MPI_Recv(got[i].data(), n, MPI_BYTE, from[i], tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          have[i] = true;
          --left;
        }
        if (!sent) MPI_Testall(static_cast<int>(sends.size()), sends.data(), &sent, MPI_STATUSES_IGNORE);
        if (left == 0 && sent) break;
        std::vector<int> missing;
        for (size_t i = 0; i < from.size(); ++i)
          if (!have[i]) missing.push_back(from[i]);
        if (missing.empty()) missing = to;  // only our sends are waiting: on their receivers
        check(start, timeout_s, missing, "waiting for the other processes", poll);
        l.unlock();
        pause(round);
        l.lock();
      }
    } catch (...) {
      // The sends may never complete: their requests are dropped and the
      // data kept (MPI may still read it).
      int done = 0;
      MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
      if (!done) {
        for (auto& r : sends)
          if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
        kept_.push_back(data);
      }
      throw;
    }
    return got;
  }

  void wait(MPI_Request& r, const char* what) {
    const auto start = Clock::now();
    std::unique_lock<std::mutex> l(mu_);
    for (int round = 0;; ++round) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done) return;
      std::vector<int> everyone;
      for (int p = 0; p < place_.count; ++p)
        if (p != place_.index) everyone.push_back(p);
      check(start, timeout_s, everyone, what, {});
      l.unlock();
      pause(round);
      l.lock();
    }
  }

  ProcessPlace place_;
  int tag_ub_ = 32767;
  std::mutex mu_;
  std::optional<ProcessStop> failure_;
  std::vector<std::vector<uint8_t>> kept_;  // data of sends dropped unfinished
};

}  // namespace

bool processes_supported() { return true; }

std::unique_ptr<Processes> start_mpi_processes(const ProcessPlace& env) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw ThunkyError("", "launched as process " + std::to_string(env.index) + " of " + std::to_string(env.count) + " (" + env.from + ") but MPI did not start");
  // Errors come back as codes; a wait that fails is reported, not a crash.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  ProcessPlace place = env;
  MPI_Comm_rank(MPI_COMM_WORLD, &place.index);
  MPI_Comm_size(MPI_COMM_WORLD, &place.count);
  if (place.count != env.count) {
    MPI_Finalize();
    throw ThunkyError("", env.from + " say " + std::to_string(env.count) + " processes but MPI started " + std::to_string(place.count) +
                              " (under srun, pass --mpi=pmix so that MPI learns the launch)");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw ThunkyError("", "this MPI gives threads no concurrent access (MPI_THREAD_SERIALIZED or better is needed)");
  }
  return std::make_unique<MpiProcesses>(place);
}

}  // namespace thunky
