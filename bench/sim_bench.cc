// thunky-sim throughput: the bidirectional ring collective matmul at growing
// rank counts, and a long single-rank schedule. Reports rank-commands/s
// (simulated commands summed over ranks, per second of simulation) and the
// peak heap the simulation itself allocates, per rank-command (counted by
// replacing operator new in this binary).
//
// BM_SimEngine runs the engine alone (simulate_summary); BM_SimReport also
// builds the full report (every command's record with its strings, the
// statistics and the critical path), as thunky-sim does. Schedules are
// parsed and lowered but not validated: validation is load_bench's subject.
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <new>

#include <benchmark/benchmark.h>

#include "core/load.h"
#include "core/lower.h"
#include "sim/engine.h"
#include "traces/compare.h"
#include "traces/report.h"
#include "tools/gen.h"

// Live and peak heap bytes allocated through operator new.
std::atomic<int64_t> g_live{0}, g_peak{0};

void* count_block(void* p) {
  if (!p) throw std::bad_alloc();
  const int64_t live = g_live += static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}
void* counted(size_t n) { return count_block(std::malloc(n == 0 ? 1 : n)); }
void release(void* p) {
  if (!p) return;
  g_live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

// Over-aligned requests (std::pmr's new_delete_resource makes them) are
// counted alike; aligned_alloc's blocks are freed with free.
void* counted_aligned(size_t n, std::align_val_t a) {
  const size_t align = static_cast<size_t>(a);
  return count_block(std::aligned_alloc(align, (n + align - 1) / align * align + (n == 0 ? align : 0)));
}

void* operator new(size_t n) { return counted(n); }
void* operator new(size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { release(p); }
void* operator new[](size_t n) { return counted(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, size_t) noexcept { release(p); }
void operator delete[](void* p, size_t) noexcept { release(p); }

namespace {

thunky::sim::Machine machine() {
  return thunky::sim::parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "bench",
    "chip": {"peak_flops": {"f32": 1e14}, "hbm_bandwidth": 2e12, "source": "bench"},
    "axes": {"*": {"topology": "ring", "wraparound": true, "link_bandwidth": 9e10, "hop_latency_s": 1e-6}}})"));
}

thunky::Program program(const nlohmann::ordered_json& doc) {
  thunky::Program p = thunky::parse_program(doc, "bench.json");
  thunky::lower(p);
  return p;
}

thunky::Program ring(int64_t ranks) {
  thunky::gen::RingMatmulOptions o;
  o.ranks = ranks;
  return program(thunky::gen::bidirectional_ring_matmul(o));
}

thunky::Program long_single_rank(int64_t commands) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["buffers"] = {{"a", {{"shape", {64, 64}}, {"dtype", "f32"}}}, {"b", {{"shape", {64, 64}}, {"dtype", "f32"}}}};
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < commands; ++i) prog.push_back({{"op", "gemm"}, {"a", "a"}, {"b", "a"}, {"c", "b"}});
  s["program"] = prog;
  return program(s);
}

// Heap the simulation adds at its peak above what was live before it
// (the program and the machine), over all iterations.
struct PeakHeap {
  int64_t base = g_live.load();
  PeakHeap() { g_peak = base; }
  int64_t bytes() const { return g_peak.load() - base; }
};

void counters(benchmark::State& state, int64_t rank_commands, const PeakHeap& heap) {
  state.counters["rank-commands"] = static_cast<double>(rank_commands);
  state.counters["rank-commands/s"] = benchmark::Counter(static_cast<double>(rank_commands * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["peak-heap-MB"] = static_cast<double>(heap.bytes()) / 1e6;
  state.counters["B/rank-command"] = static_cast<double>(heap.bytes()) / static_cast<double>(rank_commands);
}

// Times `sim(p, m)` once per iteration; `count` gives the rank-commands of
// its result.
template <typename Sim, typename Count>
void measure(benchmark::State& state, const thunky::Program& p, Sim sim, Count count) {
  const auto m = machine();
  int64_t rank_commands = 0;
  const PeakHeap heap;
  for (auto _ : state) {
    auto r = sim(p, m, nullptr);
    if (!r) {
      state.SkipWithError(r.errors().front().str().c_str());
      return;
    }
    rank_commands = count(*r);
  }
  counters(state, rank_commands, heap);
}

void engine(benchmark::State& state, const thunky::Program& p, bool fold = true) {
  thunky::sim::SimOptions o;
  o.fold_symmetric_ranks = fold;
  measure(
      state, p, [&](const auto& prog, const auto& m, const thunky::sim::Decisions* d) { return thunky::sim::simulate_summary(prog, m, d, o); },
      [](const thunky::sim::SimSummary& s) { return s.rank_commands; });
}

void with_report(benchmark::State& state, const thunky::Program& p, bool fold = true) {
  thunky::sim::SimOptions o;
  o.fold_symmetric_ranks = fold;
  measure(state, p, [&](const auto& prog, const auto& m, const thunky::sim::Decisions* d) { return thunky::sim::simulate(prog, m, d, o); }, [](const thunky::sim::SimResult& r) {
    int64_t n = 0;
    for (const auto& rank : r.report.ranks) n += static_cast<int64_t>(r.report.timeline(rank).ops.size());
    return n;
  });
}

// The ring runs twice: as thunky-sim runs it (its ranks are symmetric, so
// one rank is simulated for all) and with every rank simulated.
void BM_SimEngineRing(benchmark::State& state) { engine(state, ring(state.range(0))); }
void BM_SimEngineRingEveryRank(benchmark::State& state) { engine(state, ring(state.range(0)), false); }
void BM_SimEngineSingleRank(benchmark::State& state) { engine(state, long_single_rank(state.range(0))); }
void BM_SimReportRing(benchmark::State& state) { with_report(state, ring(state.range(0))); }
void BM_SimReportRingEveryRank(benchmark::State& state) { with_report(state, ring(state.range(0)), false); }
void BM_SimReportSingleRank(benchmark::State& state) { with_report(state, long_single_rank(state.range(0))); }

// The big-schedule targets, end to end through the library entry points
// the tools call:
// - `rounds` rounds of (an async shift to the ring neighbour, a GEMM, the
//   join) on `ranks` ranks: 1024 x 2,000 is 8.2 M rank-commands (target:
//   10 M rank-commands/s and 64 B each without output files; with the
//   report and the trace of the ranks thunky-sim traces by default, under
//   20 s and 2 GB);
// - every rank simulated, 512 x 10,000 rounds of 10 us of compute and a
//   1 MiB shift (target: under 1 s);
// - two 1 M-command reports read and compared (target: 5 s and 1 GB).
nlohmann::ordered_json rounds_ring_doc(int64_t ranks, int64_t rounds, int64_t shift_bytes, double compute_s) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["mesh"] = {{"axis_names", {"x"}}, {"shape", {ranks}}};
  const int64_t n = shift_bytes / 4;
  s["buffers"] = {{"a", {{"shape", {n}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "ones"}}}}},
                  {"r0", {{"shape", {n}}, {"dtype", "f32"}}}, {"r1", {{"shape", {n}}, {"dtype", "f32"}}},
                  {"w", {{"shape", {64, 64}}, {"dtype", "f32"}}}, {"c", {{"shape", {64, 64}}, {"dtype", "f32"}}}};
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < rounds; ++i) {
    const std::string tok = "t" + std::to_string(i);
    prog.push_back({{"op", "async_start"}, {"token", tok}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                    {"body", {{{"op", "collective_permute"}, {"src", "a"}, {"dst", i % 2 ? "r1" : "r0"}, {"axis", "x"}, {"shift", 1}}}}});
    nlohmann::ordered_json gemm = {{"op", "gemm"}, {"a", "w"}, {"b", "w"}, {"c", "c"}};
    if (compute_s > 0) gemm["cost"] = {{"seconds", compute_s}};
    prog.push_back(gemm);
    prog.push_back({{"op", "async_done"}, {"token", tok}});
  }
  s["program"] = prog;
  return s;
}

thunky::Program rounds_ring(int64_t ranks, int64_t rounds, int64_t shift_bytes, double compute_s) {
  return program(rounds_ring_doc(ranks, rounds, shift_bytes, compute_s));
}

// A pipeline of `stages` over `replicas` data-parallel ranks: 64
// micro-batches of 8 GEMMs and a send to the next stage each (no
// wrap-around), then a gradient all_reduce over dp beside the last two
// GEMMs. Stages x 584 commands a replica; it folds into one class a stage.
thunky::Program pipeline(int64_t stages, int64_t replicas) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["mesh"] = {{"axis_names", {"pp", "dp"}}, {"shape", {stages, replicas}}};
  s["buffers"] = {{"x", {{"shape", {1024, 4096}}, {"dtype", "f32"}}}, {"w", {{"shape", {4096, 4096}}, {"dtype", "f32"}}},
                  {"y", {{"shape", {1024, 4096}}, {"dtype", "f32"}}}, {"r", {{"shape", {1024, 4096}}, {"dtype", "f32"}}},
                  {"grad", {{"shape", {32, 1024, 1024}}, {"dtype", "f32"}}}, {"go", {{"shape", nlohmann::ordered_json::array()}, {"dtype", "bool"}}}};
  nlohmann::ordered_json body = nlohmann::ordered_json::array(), pairs = nlohmann::ordered_json::array();
  for (int k = 0; k < 8; ++k) body.push_back({{"op", "gemm"}, {"a", "x"}, {"b", "w"}, {"c", "y"}});
  for (int64_t i = 0; i + 1 < stages; ++i) pairs.push_back({i, i + 1});
  body.push_back({{"op", "async_start"}, {"token", "s"}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                  {"body", {{{"op", "collective_permute"}, {"src", "y"}, {"dst", "r"}, {"axis", "pp"}, {"pairs", pairs}}}}});
  body.push_back({{"op", "async_done"}, {"token", "s"}});
  s["program"] = {{{"op", "while"}, {"cond_buf", "go"}, {"cond", nlohmann::ordered_json::array()}, {"body", body}, {"sim", {{"trip_count", 64}}}},
                  {{"op", "async_start"}, {"token", "g"}, {"stream", {{"kind", "communication"}, {"id", 1}}},
                   {"body", {{{"op", "all_reduce"}, {"src", "grad"}, {"dst", "grad"}, {"axis", "dp"}}}}},
                  {{"op", "gemm"}, {"a", "x"}, {"b", "w"}, {"c", "y"}},
                  {{"op", "gemm"}, {"a", "x"}, {"b", "w"}, {"c", "y"}},
                  {{"op", "async_done"}, {"token", "g"}}};
  return program(s);
}

// Folded into a class a stage, with the report (thunky-sim --report).
void BM_PipelineClasses(benchmark::State& state) { with_report(state, pipeline(state.range(0), state.range(1))); }
// Folded, the engine alone (thunky-sim's table).
void BM_PipelineClassesEngine(benchmark::State& state) { engine(state, pipeline(state.range(0), state.range(1))); }

void BM_BigRingEngine(benchmark::State& state) { engine(state, rounds_ring(state.range(0), state.range(1), 4096, 0)); }

void BM_BigRingReportAndTrace(benchmark::State& state) {
  const thunky::Program p = rounds_ring(state.range(0), state.range(1), 4096, 0);
  std::ofstream sink("/dev/null");
  measure(state, p, [&](const auto& prog, const auto& m, const thunky::sim::Decisions* d) {
    auto r = thunky::sim::simulate(prog, m, d);
    if (r) {
      thunky::write_report(r->report, sink);
      std::vector<int64_t> traced;
      for (int64_t k = 0; k < std::min<int64_t>(16, static_cast<int64_t>(r->report.ranks.size())); ++k) traced.push_back(k);
      thunky::write_chrome_trace(thunky::select_ranks(r->report, traced), sink);
    }
    return r;
  }, [](const thunky::sim::SimResult& r) {
    int64_t n = 0;
    for (const auto& rank : r.report.ranks) n += static_cast<int64_t>(r.report.timeline(rank).ops.size());
    return n;
  });
}

void BM_EveryRankShifts(benchmark::State& state) { engine(state, rounds_ring(state.range(0), state.range(1), 1 << 20, 10e-6), false); }

// As thunky-sim --every-rank runs it without output files: the text
// loaded (parsed, lowered, validated), then every rank simulated with
// each rank's statistics gathered as its commands finish.
void BM_EveryRankShiftsEndToEnd(benchmark::State& state) {
  const std::string text = rounds_ring_doc(state.range(0), state.range(1), 1 << 20, 10e-6).dump();
  const auto m = machine();
  thunky::sim::SimOptions o;
  o.fold_symmetric_ranks = false;
  o.timelines = false;
  int64_t rank_commands = 0;
  const PeakHeap heap;
  for (auto _ : state) {
    auto p = thunky::load_schedule_text(text, "bench.json");
    if (!p) {
      state.SkipWithError(p.errors().front().str().c_str());
      return;
    }
    auto r = thunky::sim::simulate(*p, m, nullptr, o);
    if (!r) {
      state.SkipWithError(r.errors().front().str().c_str());
      return;
    }
    rank_commands = 0;
    for (const auto& rank : r->report.ranks) rank_commands += rank.stats.ops;
  }
  counters(state, rank_commands, heap);
}

void BM_CompareReports(benchmark::State& state) {
  // One rank of state.range(0) ops, as report text, read twice and compared.
  thunky::Report r;
  r.source = "sim";
  r.schedule = "bench";
  thunky::RankReport rank;
  for (int64_t i = 0; i < state.range(0); ++i) {
    thunky::OpRecord op;
    op.id = "/program/" + std::to_string(i);
    op.op = "gemm";
    op.stream = "computation:0";
    op.start_s = static_cast<double>(i) * 1e-6;
    op.end_s = op.start_s + 1e-6;
    rank.ops.push_back(op);
  }
  r.ranks.push_back(std::move(rank));
  std::ostringstream text;
  thunky::write_report(r, text);
  const std::string doc = text.str();
  r = thunky::Report{};
  std::ofstream sink("/dev/null");
  const PeakHeap heap;
  for (auto _ : state) {
    const thunky::Report a = thunky::parse_report(doc), b = thunky::parse_report(doc);
    thunky::print_comparison(a, b, thunky::compare_reports(a, b), sink);
  }
  state.counters["peak-heap-MB"] = static_cast<double>(heap.bytes()) / 1e6;
}

BENCHMARK(BM_BigRingEngine)->Args({1024, 2000})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PipelineClasses)->Args({16, 1024})->Args({16, 4096})->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PipelineClassesEngine)->Args({16, 1024})->Args({16, 4096})->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BigRingReportAndTrace)->Args({1024, 2000})->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EveryRankShifts)->Args({512, 10000})->Iterations(1)->Unit(benchmark::kMillisecond);
// A tenth of it each way, for instruction counts under callgrind (A/B on a noisy machine).
BENCHMARK(BM_EveryRankShifts)->Args({64, 1000})->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EveryRankShiftsEndToEnd)->Args({512, 10000})->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EveryRankShiftsEndToEnd)->Args({64, 1000})->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompareReports)->Arg(1000000)->Iterations(1)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_SimReportRing)->Arg(8)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimReportRingEveryRank)->Arg(8)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimReportSingleRank)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimEngineSingleRank)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimEngineRing)->Arg(8)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimEngineRingEveryRank)->Arg(8)->Arg(64)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimEngineRingEveryRank)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
