// The CPU reference backend: every rank of the mesh in one process, every
// stream of a rank a thread of its own, ordered only by stream order and
// token events, collectives through the in-process communicator.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <map>
#include <set>
#include <memory>
#include <system_error>
#include <thread>

#include <unistd.h>

#include "core/accounting.h"
#include "core/broadcast.h"
#include "core/control_flow.h"
#include "core/program_walk.h"
#include "core/init.h"
#include "core/mesh.h"
#include "core/validate.h"
#include "exec/backend.h"
#include "exec/communicator.h"
#include "exec/processes.h"
#include "exec/cores.h"
#include "core/program_walk.h"
#include "exec/cpu/kernels.h"
#include "exec/monitor.h"
#include "exec/workers.h"

namespace thunky {

namespace {

using Clock = std::chrono::steady_clock;

struct Event {
  bool done = false;
  double t = 0;
  std::string stream;
};
using EventPtr = std::shared_ptr<Event>;

struct Task {
  enum class Kind { exec, record, wait };
  Kind kind = Kind::exec;
  const Command* cmd = nullptr;
  EventPtr event;
  std::string token;  // for wait: the token or fork it belongs to
  bool join = false;  // wait of an async_done (else of an async_start fork)
};

struct RankState {
  int64_t rank = 0;
  RankCtx ctx;
  std::vector<std::vector<uint8_t>>* memory = nullptr;
  std::vector<std::pair<std::string, int64_t>> axis_values;
  std::mutex mu;  // guards ops, flows, instances
  std::vector<OpRecord> ops;
  std::vector<FlowEdge> flows;
  std::map<std::string, int64_t> instances;
  std::map<std::string, std::vector<int64_t>> decisions;
};

class Run {
 public:
  Run(const Program& p, const ExecOptions& o, std::vector<std::vector<std::vector<uint8_t>>>& memory, Workers& workers, StagingPool& staging,
      CorePool& cores)
      : p_(p), opts_(o), workers_(workers), cores_(cores) {
    const RankBlock block = o.processes ? rank_block(p.mesh.size(), o.processes->place().index, o.processes->place().count) : RankBlock{0, p.mesh.size()};
    if (o.processes) cross_ = CrossProcess{o.processes, p.mesh.size(), block, o.timeout_s};
    comm_ = make_inprocess_communicator(monitor_, staging, &cores, o.processes ? &cross_ : nullptr);
    ranks_.resize(static_cast<size_t>(block.n));
    for (size_t r = 0; r < ranks_.size(); ++r) {
      auto& s = ranks_[r];
      s = std::make_unique<RankState>();
      s->rank = block.first + static_cast<int64_t>(r);
      s->ctx = rank_ctx(p.mesh, s->rank);
      s->memory = &memory[static_cast<size_t>(s->rank)];
      for (size_t a = 0; a < p.mesh.axis_names.size(); ++a) s->axis_values.emplace_back(p.mesh.axis_names[a], s->ctx.coords[a]);
    }
  }

  // Returns "" or the reason the run was aborted; sets deadlock.
  std::string execute(bool& deadlock) {
    std::vector<Workers::Worker*> threads;
    // Count every rank before any starts: a rank that waits early must not
    // look like the last one running.
    for (size_t i = 0; i < ranks_.size(); ++i) monitor_.thread_started();
    start_.expect(static_cast<int64_t>(ranks_.size()));
    for (auto& rs : ranks_) {
      threads.push_back(workers_.start([this, s = rs.get()] { thread_main([&] { run_block(*s, p_.program, StreamId{}, false, &start_); }); }));
    }
    // Across processes, every process's ranks leave together: a barrier
    // before the clock starts (its time bounds the skew of their clocks).
    start_.open_when_all_arrived(t0_, [&] {
      if (!opts_.processes) return;
      try {
        opts_.processes->barrier();
      } catch (const std::exception& e) {
        std::unique_lock<std::mutex> l(monitor_.mutex());
        monitor_.abort(l, e.what(), false);
      }
    });
    for (auto* t : threads)
      while (!workers_.wait_for(t, 0.5)) report_progress();
    deadlock = monitor_.deadlocked();
    return monitor_.aborted() ? monitor_.reason() : "";
  }
  // Why a run across processes stopped (Communicator::stop_exit_code).
  int stop_exit_code() const { return comm_->stop_exit_code(); }
  const std::string& failed_pointer() const { return monitor_.pointer(); }

  // The iteration this run is, and the clock of the progress lines, which
  // outlives it.
  struct ProgressClock {
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now(), last = started;
  };
  void set_iteration(int iteration, int iterations, ProgressClock* clock) {
    iteration_ = iteration;
    iterations_ = iterations;
    clock_ = clock;
  }
  // A progress line (ExecOptions::progress) if five seconds passed since the last.
  void report_progress() {
    if (!opts_.progress || !clock_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - clock_->last < std::chrono::seconds(5)) return;
    clock_->last = now;
    opts_.progress({finished_.load(), 0, iteration_, iterations_, std::chrono::duration<double>(now - clock_->started).count()});
  }
  bool out_of_memory() const { return out_of_memory_; }

  std::vector<std::map<std::string, std::vector<int64_t>>> decisions() {
    std::vector<std::map<std::string, std::vector<int64_t>>> d;
    for (auto& rs : ranks_) d.push_back(std::move(rs->decisions));
    return d;
  }

  Report report() {
    Report r;
    for (auto& rs : ranks_) {
      RankReport rr;
      rr.rank = rs->rank;
      rr.coords = rs->ctx.coords;
      rr.ops = std::move(rs->ops);
      std::stable_sort(rr.ops.begin(), rr.ops.end(), [](const OpRecord& a, const OpRecord& b) { return a.start_s < b.start_s; });
      rr.flows = std::move(rs->flows);
      r.ranks.push_back(std::move(rr));
    }
    return r;
  }

 private:
  double now() const { return since_start(Clock::now()); }
  double since_start(Clock::time_point t) const { return std::chrono::duration<double>(t - t0_).count(); }

  // Body of every thread: the monitor counts it, and an abort unwinds it.
  void thread_main(const std::function<void()>& body, const std::function<void()>& last_words = {}) {
    try {
      body();
    } catch (const Aborted&) {
    } catch (const std::bad_alloc&) {
      out_of_memory_ = true;
      std::unique_lock<std::mutex> l(monitor_.mutex());
      monitor_.abort(l, "out of memory while running (a map's or a GEMM's temporaries, or a collective's staging)", false);
    } catch (const ThunkyError& e) {
      std::unique_lock<std::mutex> l(monitor_.mutex());
      monitor_.abort(l, e.what(), false, e.pointer());
    } catch (const std::exception& e) {
      std::unique_lock<std::mutex> l(monitor_.mutex());
      monitor_.abort(l, e.what(), false);
    }
    monitor_.thread_finished(last_words);
  }

  std::string who(const RankState& s, const StreamId& stream) const {
    return "rank " + std::to_string(s.rank) + " " + stream.str();
  }

  using Queues = std::map<StreamId, std::vector<Task>>;

  // The block's tasks, stream by stream (core/program_walk.h): an async
  // region is an event recorded where it forks and waited for on its
  // stream, and one recorded at its end for its async_done; every other
  // command is one task of its stream (control flow runs its blocks when
  // the stream reaches it).
  void issue(const Block& b, const StreamId& main, Queues& q) {
    std::map<const Command*, EventPtr> done;  // by async_start
    ProgramWalk walk(b, main);
    while (const std::optional<ProgramWalk::Step> s = walk.next()) {
      const Command& c = *s->cmd;
      switch (s->kind) {
        case ProgramWalk::Step::Kind::fork: {
          auto fork = std::make_shared<Event>();
          const std::string& token = c.as<AsyncStart>().token;
          q[s->stream].push_back({Task::Kind::record, nullptr, fork, token, false});
          q[s->target].push_back({Task::Kind::wait, &c, fork, token, false});
          break;
        }
        case ProgramWalk::Step::Kind::fork_end: {
          auto end = done[&c] = std::make_shared<Event>();
          q[s->stream].push_back({Task::Kind::record, nullptr, end, c.as<AsyncStart>().token, true});
          break;
        }
        case ProgramWalk::Step::Kind::join: q[s->stream].push_back({Task::Kind::wait, &c, done.at(s->start), c.as<AsyncDone>().token, true}); break;
        case ProgramWalk::Step::Kind::command: q[s->stream].push_back({Task::Kind::exec, &c, nullptr, "", false}); break;
      }
    }
  }

  // The start line that every rank's threads of its top-level streams
  // leave together, as a GPU run's streams leave one base event: starting
  // the threads is the host's set-up, as creating streams is a GPU run's,
  // and is not timed (otherwise it fell on the first collective).
  class StartLine {
   public:
    void expect(int64_t n) {
      std::lock_guard<std::mutex> l(mu_);
      expected_ += n;
    }
    void arrive_and_wait() {
      std::unique_lock<std::mutex> l(mu_);
      ++arrived_;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
    }
    // A rank's main thread adds its streams' threads before it arrives, so
    // once every thread expected has arrived, none is still to come. The
    // clock `t0` is set before any thread leaves (under the lock they
    // leave through).
    void open_when_all_arrived(Clock::time_point& t0, const std::function<void()>& before_open) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return arrived_ == expected_; });
      before_open();
      t0 = Clock::now();
      open_ = true;
      cv_.notify_all();
    }

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    int64_t expected_ = 0, arrived_ = 0;
    bool open_ = false;
  };

  // Runs a block whose main stream is the calling thread; other streams get
  // threads of their own for the duration of the block. The top-level
  // block's threads wait at `start` before they run.
  void run_block(RankState& s, const Block& b, const StreamId& main, bool in_loop, StartLine* start = nullptr) {
    Queues q;
    q[main];
    struct Sub {
      Workers::Worker* thread = nullptr;
      std::atomic<bool> finished{false};
    };
    std::vector<std::unique_ptr<Sub>> subs;
    // This thread arrives at the start line whatever happens here: a
    // thread that never arrived would hold every other one there.
    auto arrive = [&, arrived = false]() mutable {
      if (start && !arrived) start->arrive_and_wait();
      arrived = true;
    };
    try {
      issue(b, main, q);
      for (auto& [stream, tasks] : q) {
        if (stream == main) continue;
        auto sub = std::make_unique<Sub>();
        Sub* raw = sub.get();
        std::vector<Task>* queue = &tasks;  // a structured binding cannot be captured (C++17)
        if (start) start->expect(1);
        monitor_.thread_started();
        sub->thread = workers_.start([this, &s, stream = stream, queue, in_loop, raw, start] {
          if (start) start->arrive_and_wait();
          thread_main([&] { run_queue(s, *queue, stream, in_loop); }, [raw] { raw->finished = true; });
        });
        subs.push_back(std::move(sub));
      }
    } catch (const std::exception& e) {
      // issue() fails before any thread starts; a thread that cannot be
      // started leaves the ones already started nothing to wait for.
      arrive();
      if (!subs.empty()) {
        std::unique_lock<std::mutex> l(monitor_.mutex());
        monitor_.abort(l, e.what(), false);
      }
      for (auto& sub : subs) workers_.wait(sub->thread);
      throw;
    }
    arrive();
    std::exception_ptr failure;
    try {
      run_queue(s, q[main], main, in_loop);
      std::unique_lock<std::mutex> l(monitor_.mutex());
      for (auto& sub : subs)
        monitor_.wait(l, [&] { return sub->finished.load(); }, who(s, main) + " waits at the end of a block for its other streams");
    } catch (...) {
      failure = std::current_exception();
    }
    for (auto& sub : subs) workers_.wait(sub->thread);
    if (failure) std::rethrow_exception(failure);
  }

  // A command the cores run (exec/cores.h), as opposed to control flow and
  // collectives, which the stream's thread runs itself.
  static bool on_a_core(const Command& c) {
    return op_family(c.op()) == OpFamily::compute;
  }

  void run_queue(RankState& s, std::vector<Task>& tasks, const StreamId& stream, bool in_loop) {
    const std::string sname = stream.str();
    // A wake-up held for a command that never got queued (the run failed
    // first) is given when the queue is left, whatever happens.
    struct Flush {
      Monitor& m;
      ~Flush() {
        if (!std::exchange(wake_after_queueing_, false)) return;
        std::lock_guard<std::mutex> l(m.mutex());
        m.notify_all();
      }
    } flush{monitor_};
    for (size_t k = 0; k < tasks.size(); ++k) {
      Task& t = tasks[k];
      switch (t.kind) {
        case Task::Kind::record: {
          std::lock_guard<std::mutex> l(monitor_.mutex());
          t.event->done = true;
          t.event->t = now();
          t.event->stream = sname;
          // A fork followed by a command on this stream: as a GPU's host
          // issues both before the device acts on either, the command is
          // queued for a core before the forked stream's thread is woken
          // (a woken thread often runs first, and the two would race for
          // the core by microseconds).
          const bool next_on_core = k + 1 < tasks.size() && tasks[k + 1].kind == Task::Kind::exec && on_a_core(*tasks[k + 1].cmd);
          if (next_on_core) wake_after_queueing_ = true;
          else monitor_.notify_all();
          break;
        }
        case Task::Kind::wait: {
          {
            std::unique_lock<std::mutex> l(monitor_.mutex());
            monitor_.wait(l, [&] { return t.event->done; },
                          who(s, stream) + " waits for token '" + t.token + "' at " + t.cmd->id());
          }
          std::lock_guard<std::mutex> l(s.mu);
          s.flows.push_back({t.event->stream, sname, t.event->t, now(), t.token, t.join});
          break;
        }
        case Task::Kind::exec: exec(s, *t.cmd, stream, in_loop); break;
      }
    }
  }

  cpu::Tensor tensor(RankState& s, const Ref& r) {
    View v = resolve(p_, r, s.ctx);
    return cpu::Tensor{(*s.memory)[v.buffer].data() + v.byte_offset(), v.dtype, v.shape};
  }

  double read_scalar(RankState& s, const Ref& r) {
    cpu::Tensor t = tensor(s, r);
    std::lock_guard<std::mutex> l(monitor_.mutex());  // pairs with writers' stream events
    return load_as_double(t.data, t.dtype, 0);
  }

  // A finished command; a collective's transfer began at `transfer_start`.
  void record(RankState& s, const Command& c, const StreamId& stream, bool in_loop, double start, double end,
              std::optional<double> transfer_start = std::nullopt) {
    Work w = command_work(p_, c, s.ctx);
    std::lock_guard<std::mutex> l(s.mu);
    std::string id = c.id();
    if (in_loop) id += "#" + std::to_string(s.instances[c.id()]++);
    s.ops.push_back({id, std::string(op_name(c.op())), c.name, stream.str(), start, end, w.bytes, w.flops});
    s.ops.back().transfer_start_s = transfer_start;
    ++finished_;
  }

  void decide(RankState& s, const Command& c, int64_t value) {
    std::lock_guard<std::mutex> l(s.mu);
    s.decisions[c.id()].push_back(value);
  }

  // A collective, or a group of them, through the communicator.
  void run_collectives(RankState& s, const Command& c, const StreamId& stream, bool in_loop) {
    std::vector<CollectiveCall> calls;
    std::vector<const Command*> members;
    if (c.op() == Op::collective_group)
      for (const auto& m : c.as<CollectiveGroup>().body) members.push_back(&m);
    else
      members.push_back(&c);
    for (const Command* m : members)
      calls.push_back(collective_call(p_, *m, s.ctx, [&](const View& v) {
        return (*s.memory)[v.buffer].data() + v.byte_offset();
      }));
    const std::vector<int> launch = launch_members(p_.mesh, s.rank, members);
    // From the arrival here until every member has arrived is waiting;
    // then the transfer (measured at the rendezvous).
    const double start = now();
    const Clock::time_point moving = comm_->run(static_cast<int>(s.rank), calls, launch, who(s, stream));
    const double end = now();
    const double moved = std::clamp(since_start(moving), start, end);
    for (const Command* m : members) record(s, *m, stream, in_loop, start, end, moved);
  }

  void exec(RankState& s, const Command& c, const StreamId& stream, bool in_loop) {
    if (stop_at_ && stop_at_->rank == s.rank && stop_at_->pointer == c.pointer) stop_here();
    switch (op_family(c.op())) {
      case OpFamily::control:
        run_control_flow(
            c, s.rank, opts_.max_trip_count, in_loop, [&](const Ref& r) { return read_scalar(s, r); },
            [&](const Block& b, bool loop) { run_block(s, b, stream, loop); }, [&](int64_t v) { decide(s, c, v); });
        return;
      case OpFamily::collective:
      case OpFamily::group: run_collectives(s, c, stream, in_loop); return;
      case OpFamily::compute: break;   // on a core, below
      case OpFamily::stream:           // issue() made these events
      case OpFamily::call: return;     // issue() inlined its body
    }
    // On a core of its own, from its start to its end (exec/cores.h).
    const bool wake = std::exchange(wake_after_queueing_, false);
    const CorePool::Span span = cores_.run([&] { compute(s, c); }, false, [&] {
      if (!wake) return;
      std::lock_guard<std::mutex> l(monitor_.mutex());
      monitor_.notify_all();
    });
    record(s, c, stream, in_loop, since_start(span.start), since_start(span.end));
  }

  void compute(RankState& s, const Command& c) {
    std::visit(Overload{
        [&](const Memzero& x) {
          cpu::Tensor d = tensor(s, x.dst);
          std::memset(d.data, 0, d.bytes());
        },
        [&](const Memset& x) {
          if (x.bits) cpu::fill_bits(tensor(s, x.dst), *x.bits);
          else cpu::fill(tensor(s, x.dst), x.value);
        },
        [&](const Copy& x) {
          cpu::Tensor a = tensor(s, x.src), d = tensor(s, x.dst);
          std::memmove(d.data, a.data, d.bytes());
        },
        [&](const Gemm& g) { cpu::gemm(tensor(s, g.a), tensor(s, g.b), tensor(s, g.c), g.transpose_a, g.transpose_b, g.alpha, g.beta); },
        [&](const Map& x) { run_map(s, x); },
        [&](const Reduce& x) {
          if (x.arg) cpu::arg_reduce(tensor(s, x.in), x.axes.front(), x.fn, tensor(s, x.out));
          else cpu::reduce(tensor(s, x.in), x.axes, x.fn, tensor(s, x.out));
        },
        [&](const Kernel& x) {
          // A stand-in: read every input byte and rewrite every output byte,
          // then hold the stream for the modelled time.
          volatile uint8_t sink = 0;
          for (const auto& r : x.reads) {
            cpu::Tensor t = tensor(s, r);
            for (size_t i = 0; i < t.bytes(); ++i) sink = sink ^ t.data[i];
          }
          for (const auto& r : x.writes) {
            cpu::Tensor t = tensor(s, r);
            for (size_t i = 0; i < t.bytes(); ++i) t.data[i] = static_cast<volatile uint8_t*>(t.data)[i];
          }
          if (c.cost && c.cost->seconds) std::this_thread::sleep_for(std::chrono::duration<double>(*c.cost->seconds));  // at most kMaxKernelSeconds (plan)
        },
        [&](const PtxKernel& x) { run_map(s, *x.cpu); },
        [&](const CustomCall& x) {
          const bool lower = x.spec->backend_config.at("lower").get<bool>();
          cpu::cholesky(tensor(s, x.operands[0]), tensor(s, x.results[0]), tensor(s, x.results[1]), lower);
        },
        [&](const Transpose& x) { cpu::transpose(tensor(s, x.src), x.perm, tensor(s, x.dst)); },
        [](const NotCompute auto&) {},  // run by exec
    }, c.spec);
  }

  void run_map(RankState& s, const Map& m) {
    cpu::Tensor out = tensor(s, m.out);
    std::vector<cpu::MapInput> inputs;
    std::vector<std::vector<uint8_t>> copies;
    copies.reserve(m.in.size());
    for (const auto& [name, r] : m.in) {
      cpu::Tensor t = tensor(s, r);
      // An input that broadcasts to out's shape (a bias row, a per-row
      // max) is expanded to out's shape first.
      if (t.count() != out.count() && t.count() != 1) {
        cpu::Tensor wide{nullptr, t.dtype, out.shape};
        copies.emplace_back(wide.bytes());
        wide.data = copies.back().data();
        cpu::strided_copy(t, *broadcast_strides(t.shape, out.shape), wide);
        t = wide;
      }
      // An input that overlaps out at another offset is read before any write.
      bool overlap = t.data < out.data + out.bytes() && out.data < t.data + t.bytes();
      if (overlap && t.data != out.data) {
        copies.emplace_back(t.data, t.data + t.bytes());
        t.data = copies.back().data();
      }
      inputs.push_back({name, t});
    }
    cpu::map(*m.expr, inputs, s.axis_values, out);
  }

  const Program& p_;
  const ExecOptions& opts_;
  Workers& workers_;
  std::atomic<int64_t> finished_{0};  // commands recorded, every rank's
  int iteration_ = 0, iterations_ = 1;
  ProgressClock* clock_ = nullptr;
  CorePool& cores_;
  // Set by a record whose wake-up waits until this thread's next command is
  // queued for a core (per thread: each stream's thread runs its own queue).
  static thread_local bool wake_after_queueing_;
  // A test hook for runs across processes: THUNKY_TEST_STOP_AT=
  // "RANK:POINTER:exit" ends this process (as a crash would) when that rank
  // reaches that command, ":hang" stops it there for good (as a stuck GPU).
  // Only in builds with the tests (THUNKY_TEST_HOOKS): a product build,
  // as the wheel's, ignores the variable.
  struct StopAt {
    int64_t rank;
    std::string pointer;
    bool hang;
  };
  static std::optional<StopAt> read_stop_at() {
#ifndef THUNKY_TEST_HOOKS
    return std::nullopt;
#endif
    const char* v = std::getenv("THUNKY_TEST_STOP_AT");
    if (!v) return std::nullopt;
    const std::string s = v;
    const size_t a = s.find(':'), b = s.rfind(':');
    if (a == std::string::npos || b == a) return std::nullopt;
    return StopAt{std::atoll(s.substr(0, a).c_str()), s.substr(a + 1, b - a - 1), s.substr(b + 1) == "hang"};
  }
  [[noreturn]] void stop_here() {
    std::cerr << "thunky-exec: THUNKY_TEST_STOP_AT: rank " << stop_at_->rank << " stops at " << stop_at_->pointer << (stop_at_->hang ? " (hangs)" : " (exits)") << std::endl;
    if (stop_at_->hang)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    std::_Exit(9);
  }
  const std::optional<StopAt> stop_at_ = read_stop_at();

  Monitor monitor_;
  CrossProcess cross_;
  std::unique_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  Clock::time_point t0_;
  StartLine start_;
  std::atomic<bool> out_of_memory_ = false;
};

thread_local bool Run::wake_after_queueing_ = false;

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  // Plan: everything the CPU cannot run is refused, and the .npy inits are
  // read, before any buffer is allocated.
  std::vector<Diagnostic> plan(const Program& p, const ExecOptions& opts) override {
    p_ = &p;
    opts_ = &opts;
    const int cores = opts.host_cores > 0 ? opts.host_cores : default_host_cores();
    if (cores > kMaxCores)
      return {{ErrorKind::input, p.file, "", "--host-cores " + std::to_string(cores) + ": the cpu backend runs at most " + std::to_string(kMaxCores) + " cores"}};
    try {
      cores_ = std::make_unique<CorePool>(cores);
    } catch (const std::system_error& e) {
      return {{ErrorKind::input, p.file, "", "the cpu backend cannot start its " + std::to_string(cores) + " core threads: " + e.what()}};
    }
    std::vector<Diagnostic> errors;
    refuse_unrunnable(p, p.program, errors);
    if (!errors.empty()) return errors;
    // Every rank runs as a thread, and every stream of a block as one more:
    // the threads are counted before any starts.
    std::set<StreamId> streams = {StreamId{}};
    count_streams(p.program, streams);
    block_ = opts.processes ? rank_block(p.mesh.size(), opts.processes->place().index, opts.processes->place().count) : RankBlock{0, p.mesh.size()};
    const int64_t threads = block_.n * static_cast<int64_t>(streams.size());
    if (threads > kMaxThreads)
      return {{ErrorKind::input, p.file, "", "the cpu backend runs every rank and stream as a thread: " + std::to_string(block_.n) + " ranks x " +
                                                 std::to_string(streams.size()) + " streams = " + std::to_string(threads) + " threads, more than its limit of " +
                                                 std::to_string(kMaxThreads)}};
    // Every rank holds every buffer: the bytes are counted before any is allocated.
    double bytes = 0;
    for (const auto& b : p.buffers) bytes += static_cast<double>(b.bytes());
    bytes *= static_cast<double>(block_.n);
    if (bytes > static_cast<double>(host_memory_limit()))
      return {{ErrorKind::input, p.file, "", "the cpu backend would allocate " + std::to_string(static_cast<int64_t>(bytes)) + " bytes (" +
                                                 std::to_string(block_.n) + " ranks x every buffer), more than its limit of " +
                                                 std::to_string(host_memory_limit()) + " (3/4 of this machine's memory)"}};
    // The threads and buffers must fit the process's limits, and every
    // thread is made now, before anything runs: a limit is met here, as
    // one line, never halfway through a run.
    share_heaps_under_address_limit();
    const std::string limit = thread_limits_exceeded(threads - static_cast<int64_t>(workers_.size()), bytes);
    if (!limit.empty())
      return {{ErrorKind::input, p.file, "", "the cpu backend, with a thread for every rank and stream, " + limit}};
    try {
      workers_.reserve(static_cast<size_t>(threads));
    } catch (const std::system_error& e) {
      return {{ErrorKind::input, p.file, "", "the cpu backend cannot start its " + std::to_string(threads) + " threads: " + e.what() + " (see ulimit -u and ulimit -v)"}};
    }
    try {
      npy_ = load_npy_inits(p);
    } catch (const ThunkyError& e) {
      return {{ErrorKind::input, p.file, e.pointer(), e.what()}};
    }
    return {};
  }

  // Initialise: every rank's buffers.
  std::vector<Diagnostic> initialise() override {
    const Program& p = *p_;
    try {
      memory_.assign(static_cast<size_t>(p.mesh.size()), {});
      for (int64_t r = block_.first; r < block_.first + block_.n; ++r) {
        auto& m = memory_[static_cast<size_t>(r)];
        m.resize(p.buffers.size());
        for (size_t b = 0; b < p.buffers.size(); ++b) m[b].resize(p.buffers[b].bytes());
      }
    } catch (const std::bad_alloc&) {
      memory_.clear();
      return {{ErrorKind::input, p.file, "", "out of memory: the cpu backend cannot allocate every rank's buffers"}};
    }
    return {};
  }

  // Execute: every iteration sets the inputs afresh, then runs every rank.
  Expected<ExecResult> execute() override {
    const Program& p = *p_;
    const ExecOptions& opts = *opts_;
    ExecResult result;
    MedianTimeline timelines;
    const int total = std::max(0, opts.warmup) + std::max(1, opts.iters);
    Run::ProgressClock clock;
    for (int it = 0; it < total; ++it) {
      set_inputs();
      Run run(p, opts, memory_, workers_, staging_, *cores_);
      run.set_iteration(it, total, &clock);
      // A deadlock, a collective mismatch or a runaway loop: the schedule is wrong (exit 1).
      bool deadlock = false;
      std::string failure = run.execute(deadlock);
      run.report_progress();
      if (!failure.empty()) {
        const int stop = run.stop_exit_code();
        const ErrorKind kind = run.out_of_memory() ? ErrorKind::input : stop == 3 ? ErrorKind::timeout : stop == 2 ? ErrorKind::input : ErrorKind::schedule;
        // The others stop at once rather than at their timeout (a failure
        // that came from another process is theirs already).
        if (opts.processes && stop == 0) opts.processes->fail(failure, kind == ErrorKind::input ? 2 : 1);
        return std::vector<Diagnostic>{{kind, p.file, run.failed_pointer(), failure}};
      }
      if (it == total - 1) result.decisions = run.decisions();
      if (it >= std::max(0, opts.warmup)) {
        Report rep = run.report();
        summarize(rep);
        // Across processes, the iteration's makespan is every process's
        // longest, so that each keeps the timeline of the same iteration.
        if (opts.processes) {
          try {
            rep.makespan_s = opts.processes->max(rep.makespan_s);
          } catch (const ProcessTimeout& e) {
            return std::vector<Diagnostic>{{ErrorKind::timeout, p.file, "", std::string("after iteration ") + std::to_string(it + 1) + ", " + e.what()}};
          } catch (const ProcessFailure& e) {
            return std::vector<Diagnostic>{{e.exit_code == 2 ? ErrorKind::input : ErrorKind::schedule, p.file, "", e.what()}};
          }
        }
        timelines.add(std::move(rep));
      }
    }
    result.report = timelines.take();
    result.report.source = "exec";
    result.report.backend = "cpu";
    result.report.schedule = p.name.empty() ? p.file : p.name;
    result.report.axis_names = p.mesh.axis_names;
    result.report.mesh_shape = p.mesh.shape;
    result.report.host_cores = cores_->cores();
    result.memory = memory_;
    return result;
  }

 private:
  void set_inputs() {
    const Program& p = *p_;
    for (int64_t r = block_.first; r < block_.first + block_.n; ++r) {
      for (size_t b = 0; b < p.buffers.size(); ++b) {
        const Buffer& buf = p.buffers[b];
        auto& bytes = memory_[r][b];
        if (buf.role == Role::input || buf.role == Role::inout) {
          init_buffer(p, buf, r, npy_, bytes.data());
        } else {
          // Undefined contents: NaN for floats, all-ones bits for integers, false for bool.
          std::memset(bytes.data(), buf.dtype == DType::boolean ? 0 : 0xff, bytes.size());
        }
      }
    }
  }

  static constexpr int64_t kMaxThreads = 2048;
  static constexpr int kMaxCores = 1024;
  static constexpr double kMaxKernelSeconds = 600;

  static void count_streams(const Block& b, std::set<StreamId>& streams) {
    for (const auto& c : b) {
      if (const AsyncStart* a = c.get_if<AsyncStart>()) streams.insert(a->stream);
      for_each_sub_block(c, [&](const Block& sub) { count_streams(sub, streams); });
    }
  }

  static void refuse_unrunnable(const Program& p, const Block& b, std::vector<Diagnostic>& errors) {
    for (const auto& c : b) {
      if (c.op() == Op::kernel && c.cost && c.cost->seconds && *c.cost->seconds > kMaxKernelSeconds)
        errors.push_back({ErrorKind::input, p.file, c.pointer + "/cost/seconds",
                          "a kernel stand-in of " + std::to_string(*c.cost->seconds) + " s: the cpu backend holds a stream at most " + std::to_string(static_cast<int>(kMaxKernelSeconds)) + " s for one"});
      if (const PtxKernel* k = c.get_if<PtxKernel>(); k && !k->cpu)
        errors.push_back({ErrorKind::input, p.file, c.pointer,
                          "ptx_kernel '" + k->launch->kernel_name + "' cannot run on the cpu backend: add a 'cpu' fallback (a map: {\"out\", \"expr\", \"in\"}) or use --backend cuda"});
      for_each_sub_block(c, [&](const Block& sub) { refuse_unrunnable(p, sub, errors); });
    }
  }

  const Program* p_ = nullptr;
  const ExecOptions* opts_ = nullptr;
  std::map<std::string, NpyArray> npy_;
  std::vector<std::vector<std::vector<uint8_t>>> memory_;
  RankBlock block_;  // the ranks this process runs
  Workers workers_;      // every rank's and stream's thread, kept between iterations
  StagingPool staging_;  // the collectives' staging buffers, the same
  std::unique_ptr<CorePool> cores_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace thunky
