// How much communication a schedule hides, measured and predicted, on the
// cpu backend everywhere and on the cuda backend where a GPU answers.
//
//  - BM_GemmBesideCopy: a GEMM on computation:0 beside a large device copy
//    on communication:0, against max(t_gemm, t_copy) (the physical bound)
//    and their sum (no overlap);
//  - BM_RingMatmul: the ring collective matmul (uni and bidirectional),
//    its blocking baseline (all_gather, then one GEMM) and the unsharded
//    GEMM (the GEMM each rank does, A already whole, no communication),
//    for N = 1, 2, 4, 8; on one GPU the ranks share it (the report says
//    shared-device);
//    the overlapped variants report the recovered fraction
//    (T_blocking - T_overlapped) / (T_blocking - T_unsharded);
//  - BM_Dispatch: host time to issue one command eagerly, and the launch
//    of a captured CUDA graph (cuda).
//
// Every benchmark's time is the measured makespan (manual time); counters
// give thunky-sim's prediction, the overlap fraction and the exposed
// communication. The prediction is for THUNKY_BENCH_MACHINE (a machine file
// or a name under models/) when it is set; else for h200-8gpu on the cuda
// backend, and on the cpu backend for a model of this host that the
// benchmark calibrates once, as `thunky-calibrate exec --backend cpu
// --quick` does (about a second; its small copies rate the memory faster
// than a large copy runs). THUNKY_BENCH_MACHINE=build/main/cpu-model.json
// takes the main job's full calibration instead.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "core/load.h"
#include "core/validate.h"
#include "exec/backend.h"
#include "sim/engine.h"
#include "sim/machine.h"
#include "tools/calibrate_exec.h"
#include "tools/gen.h"
#include "sim/models_dir.h"

namespace {

using thunky::ExecOptions;
using thunky::Program;
using ojson = nlohmann::ordered_json;

bool cuda_available() {
  static const bool ok = [] {
    auto b = thunky::make_cuda_backend();
    if (!b) return false;
    Program p = *thunky::load_schedule_text(R"({"format": "thunky.sched/1", "buffers": {}, "program": []})", "probe.json");
    ExecOptions o;
    return b->plan(p, o).empty();
  }();
  return ok;
}

std::unique_ptr<thunky::Backend> backend(const std::string& name) {
  return name == "cuda" ? thunky::make_cuda_backend() : thunky::make_cpu_backend();
}

Program load(const ojson& doc, const std::string& name) {
  auto p = thunky::load_schedule_text(doc.dump(), name + ".json");
  if (!p) throw std::runtime_error(name + ": " + p.errors().front().str());
  return std::move(p.value());
}

// The machine model the predictions of backend `be` are for (see above).
const thunky::sim::Machine& machine(const std::string& be) {
  static std::map<std::string, thunky::sim::Machine> models;
  if (auto it = models.find(be); it != models.end()) return it->second;
  const char* env = std::getenv("THUNKY_BENCH_MACHINE");
  if (!env && be == "cpu") {
    std::fprintf(stderr, "calibrating a model of this host for the cpu predictions (thunky-calibrate exec --backend cpu --quick)\n");
    auto m = thunky::calibrate::calibrate_backend("cpu", 4, true, [](const std::string&) {});
    if (!m) throw std::runtime_error("calibrating this host: " + m.errors().front().str());
    return models[be] = thunky::sim::parse_machine(*m);
  }
  auto r = thunky::sim::load_machine(env ? env : "h200-8gpu", thunky::sim::models_dir());
  if (!r) throw std::runtime_error("machine model: " + r.errors().front().str());
  return models[be] = r.value();
}

// thunky-sim's makespan of `p`, or -1 with the reason in `why` (a model
// that cannot be read or calibrated, a schedule it cannot price).
double predicted(const std::string& be, const Program& p, std::string& why) {
  try {
    auto r = thunky::sim::simulate(p, machine(be), nullptr);
    if (r) return r->report.makespan_s;
    why = r.errors().front().str();
  } catch (const std::exception& e) {
    why = e.what();
  }
  return -1;
}

// Runs `p` once per benchmark iteration (plan and initialise outside the
// timing) and reports its measured makespan as the iteration's time.
thunky::Report measure(benchmark::State& state, const std::string& be, const Program& p, bool graph = false) {
  auto b = backend(be);
  ExecOptions o;
  o.graph = graph;
  if (auto e = b->plan(p, o); !e.empty()) throw std::runtime_error(e.front().str());
  if (auto e = b->initialise(); !e.empty()) throw std::runtime_error(e.front().str());
  thunky::Report last;
  std::vector<double> spans;
  for (auto _ : state) {
    auto r = b->execute();
    if (!r) {
      state.SkipWithError(r.errors().front().str().c_str());
      return last;
    }
    state.SetIterationTime(r->report.makespan_s);
    spans.push_back(r->report.makespan_s);
    last = std::move(r->report);
  }
  std::sort(spans.begin(), spans.end());
  if (!spans.empty()) last.makespan_s = spans[spans.size() / 2];
  state.counters["measured_s"] = last.makespan_s;
  std::string why;
  state.counters["predicted_s"] = predicted(be, p, why);
  if (!why.empty()) state.SkipWithError(("predicting: " + why).c_str());
  state.counters["overlap_fraction"] = last.summary.overlap_fraction;
  state.counters["exposed_comm_s"] = last.summary.exposed_comm_s;
  if (last.placement) state.SetLabel("placement " + *last.placement);
  return last;
}

// Sizes: each side at least ~200 us on an H200; a few ms on this CPU.
struct Sizes {
  int64_t gemm_m, gemm_n, gemm_k, copy_bytes;
  std::string dtype;
};
Sizes sizes(const std::string& be) {
  // On an H200: 275 GFLOP of bf16 (~0.35 ms at ~790 TFLOP/s) beside
  // 768 MiB copied (1.5 GiB of traffic, ~0.37 ms at ~4.3 TB/s).
  if (be == "cuda") return {8192, 8192, 2048, int64_t{768} << 20, "bf16"};
  return {256, 256, 256, int64_t{32} << 20, "f32"};
}

ojson gemm_copy_schedule(const Sizes& s, bool gemm, bool copy) {
  ojson j;
  j["format"] = "thunky.sched/1";
  j["name"] = std::string("gemm_beside_copy") + (gemm ? "_gemm" : "") + (copy ? "_copy" : "");
  auto input = [&](ojson shape, const std::string& dtype) {
    return ojson{{"shape", shape}, {"dtype", dtype}, {"role", "input"}, {"init", {{"kind", "uniform"}, {"low", -1}, {"high", 1}, {"seed", 1}}}};
  };
  j["buffers"]["a"] = input({s.gemm_m, s.gemm_k}, s.dtype);
  j["buffers"]["b"] = input({s.gemm_k, s.gemm_n}, s.dtype);
  j["buffers"]["c"] = {{"shape", {s.gemm_m, s.gemm_n}}, {"dtype", s.dtype}, {"role", "output"}};
  j["buffers"]["src"] = {{"shape", {s.copy_bytes}}, {"dtype", "u8"}, {"role", "input"}, {"init", {{"kind", "zeros"}}}};
  j["buffers"]["dst"] = {{"shape", {s.copy_bytes}}, {"dtype", "u8"}, {"role", "output"}};
  ojson prog = ojson::array();
  if (copy)
    prog.push_back({{"op", "async_start"}, {"token", "t"}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                    {"body", {{{"op", "copy"}, {"name", "big copy"}, {"src", "src"}, {"dst", "dst"}}}}});
  if (gemm) prog.push_back({{"op", "gemm"}, {"name", "gemm"}, {"a", "a"}, {"b", "b"}, {"c", "c"}});
  if (copy) prog.push_back({{"op", "async_done"}, {"token", "t"}});
  j["program"] = prog;
  return j;
}

void BM_GemmBesideCopy(benchmark::State& state, std::string be) {
  const Sizes s = sizes(be);
  // Each alone first (one state iteration each is not enough: time them apart).
  double alone[2];
  for (int k = 0; k < 2; ++k) {
    Program p = load(gemm_copy_schedule(s, k == 0, k == 1), "alone");
    auto b = backend(be);
    ExecOptions o;
    o.warmup = 1;
    o.iters = 5;
    auto r = b->run(p, o);
    if (!r) {
      state.SkipWithError(r.errors().front().str().c_str());
      return;
    }
    alone[k] = r->report.makespan_s;
  }
  Program both = load(gemm_copy_schedule(s, true, true), "both");
  thunky::Report r = measure(state, be, both);
  state.counters["t_gemm_s"] = alone[0];
  state.counters["t_copy_s"] = alone[1];
  state.counters["bound_max_s"] = std::max(alone[0], alone[1]);
  state.counters["no_overlap_sum_s"] = alone[0] + alone[1];
  state.counters["makespan_over_max"] = r.makespan_s / std::max(alone[0], alone[1]);
}

// Measured makespans of the ring variants, by (backend, N), for the recovered fraction.
std::map<std::pair<std::string, int64_t>, std::map<std::string, double>>& ring_results() {
  static std::map<std::pair<std::string, int64_t>, std::map<std::string, double>> r;
  return r;
}

thunky::gen::RingMatmulOptions ring_options(const std::string& be, int64_t n) {
  thunky::gen::RingMatmulOptions o;
  o.ranks = n;
  if (be == "cuda") {
    o.m_block = 1024;
    o.k = 8192;
    o.n_block = 2048;
    o.dtype = "bf16";
  } else {
    o.m_block = 64;
    o.k = 256;
    o.n_block = 64;
  }
  return o;
}

// The GEMM each rank of the ring does, with no communication: every rank
// holds A whole ([N·m_block, k], as if already gathered) and multiplies it
// by its B shard [k, n_block]. On one GPU the N ranks' GEMMs share it, as
// in the other variants, so the recovered fraction compares like with like.
ojson unsharded(const thunky::gen::RingMatmulOptions& o) {
  ojson j;
  j["format"] = "thunky.sched/1";
  j["name"] = "unsharded_matmul_n" + std::to_string(o.ranks);
  j["mesh"] = {{"axis_names", {"x"}}, {"shape", {o.ranks}}};
  j["buffers"]["a"] = {{"shape", {o.ranks * o.m_block, o.k}}, {"dtype", o.dtype}, {"role", "input"},
                       {"init", {{"kind", "uniform"}, {"low", -1}, {"high", 1}, {"seed", 1}}}};
  j["buffers"]["b"] = {{"shape", {o.k, o.n_block}}, {"dtype", o.dtype}, {"role", "input"},
                       {"init", {{"kind", "uniform"}, {"low", -1}, {"high", 1}, {"seed", 2}}}};
  j["buffers"]["c"] = {{"shape", {o.ranks * o.m_block, o.n_block}}, {"dtype", o.dtype}, {"role", "output"}};
  j["program"] = ojson::array({{{"op", "gemm"}, {"a", "a"}, {"b", "b"}, {"c", "c"}}});
  return j;
}

void BM_RingMatmul(benchmark::State& state, std::string be, std::string variant) {
  const int64_t n = state.range(0);
  const auto o = ring_options(be, n);
  ojson doc;
  try {
    // rs_*: the matmul whose output is reduce-scattered (k per rank); its
    // unsharded GEMM has the same shapes as the all-gather one.
    doc = variant == "unsharded" || variant == "rs_unsharded" ? unsharded(o)
          : variant == "blocking"    ? thunky::gen::blocking_matmul(o)
          : variant == "uni"         ? thunky::gen::ring_matmul(o)
          : variant == "bi"          ? thunky::gen::bidirectional_ring_matmul(o)
          : variant == "rs_blocking" ? thunky::gen::blocking_reduce_scatter_matmul(o)
          : variant == "rs_uni"      ? thunky::gen::ring_reduce_scatter_matmul(o)
                                     : thunky::gen::bidirectional_ring_reduce_scatter_matmul(o);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Program p;
  try {
    p = load(doc, variant);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  thunky::Report r = measure(state, be, p);
  auto& got = ring_results()[{be, n}];
  got[variant] = r.makespan_s;
  // Only where the blocking step pays a visible price for its
  // communication (5% of it or more): else the fraction is noise over noise.
  const std::string prefix = variant.rfind("rs_", 0) == 0 ? "rs_" : "";
  const std::string blocking = prefix + "blocking", alone = prefix + "unsharded";
  const bool overlapped = variant == prefix + "uni" || variant == prefix + "bi";
  if (overlapped && got.count(blocking) && got.count(alone)) {
    const double saved = got[blocking] - r.makespan_s, cost = got[blocking] - got[alone];
    if (cost > 0.05 * got[blocking]) state.counters["recovered_fraction"] = saved / cost;
  }
}

void BM_Dispatch(benchmark::State& state, std::string be, bool graph) {
  // 1,000 small commands on one stream: memsets and an in-place map.
  ojson j;
  j["format"] = "thunky.sched/1";
  j["name"] = "dispatch_1000";
  j["buffers"]["x"] = {{"shape", {256}}, {"dtype", "f32"}, {"role", "output"}};
  ojson prog = ojson::array();
  for (int i = 0; i < 500; ++i) {
    prog.push_back({{"op", "memset"}, {"dst", "x"}, {"value", 1.0}});
    prog.push_back({{"op", "map"}, {"out", "x"}, {"expr", "x + 1.0"}, {"in", {{"x", "x"}}}});
  }
  j["program"] = prog;
  Program p = load(j, "dispatch");
  thunky::Report r = measure(state, be, p, graph);
  if (r.dispatch_s_per_command) state.counters["dispatch_us_per_command"] = *r.dispatch_s_per_command * 1e6;
  if (r.graph_launch_s) state.counters["graph_launch_us"] = *r.graph_launch_s * 1e6;
}

void register_all() {
  std::vector<std::string> backends = {"cpu"};
  if (cuda_available()) backends.push_back("cuda");
  for (const auto& be : backends) {
    benchmark::RegisterBenchmark(("BM_GemmBesideCopy/" + be).c_str(), BM_GemmBesideCopy, be)->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
    for (const char* v : {"unsharded", "blocking", "uni", "bi", "rs_unsharded", "rs_blocking", "rs_uni", "rs_bi"})
      benchmark::RegisterBenchmark(("BM_RingMatmul/" + be + "/" + v).c_str(), BM_RingMatmul, be, std::string(v))
          ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_Dispatch/" + be + "/eager").c_str(), BM_Dispatch, be, false)->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
    if (be == "cuda")
      benchmark::RegisterBenchmark(("BM_Dispatch/" + be + "/graph").c_str(), BM_Dispatch, be, true)->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
