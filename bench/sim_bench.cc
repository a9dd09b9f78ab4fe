// thunky-sim throughput: the bidirectional ring collective matmul at growing
// rank counts, and a long single-rank schedule. Reports rank-commands/s
// (simulated commands summed over ranks, per second of simulation).
#include <benchmark/benchmark.h>

#include "core/validate.h"
#include "sim/engine.h"
#include "tools/gen.h"

namespace {

thunky::sim::Machine machine() {
  return thunky::sim::parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "bench",
    "chip": {"peak_flops": {"f32": 1e14}, "hbm_bandwidth": 2e12, "source": "bench"},
    "axes": {"*": {"topology": "ring", "wraparound": true, "link_bandwidth": 9e10, "hop_latency_s": 1e-6}}})"));
}

void run(benchmark::State& state, const thunky::Program& p) {
  const auto m = machine();
  int64_t rank_commands = 0;
  for (auto _ : state) {
    auto r = thunky::sim::simulate(p, m, nullptr);
    if (!r) state.SkipWithError(r.errors().front().str().c_str());
    rank_commands = 0;
    for (const auto& rank : r->report.ranks) rank_commands += static_cast<int64_t>(rank.ops.size());
  }
  state.counters["rank-commands"] = static_cast<double>(rank_commands);
  state.counters["rank-commands/s"] = benchmark::Counter(static_cast<double>(rank_commands * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_SimBidirectionalRing(benchmark::State& state) {
  thunky::gen::RingMatmulOptions o;
  o.ranks = state.range(0);
  auto p = thunky::load_schedule_text(thunky::gen::bidirectional_ring_matmul(o).dump(), "bench.json");
  if (!p) {
    state.SkipWithError(p.errors().front().str().c_str());
    return;
  }
  run(state, *p);
}
BENCHMARK(BM_SimBidirectionalRing)->Arg(8)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_SimLongSingleRank(benchmark::State& state) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["buffers"] = {{"a", {{"shape", {64, 64}}, {"dtype", "f32"}}}, {"b", {{"shape", {64, 64}}, {"dtype", "f32"}}}};
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < state.range(0); ++i) prog.push_back({{"op", "gemm"}, {"a", "a"}, {"b", "a"}, {"c", "b"}});
  s["program"] = prog;
  auto p = thunky::load_schedule_text(s.dump(), "bench.json");
  run(state, *p);
}
BENCHMARK(BM_SimLongSingleRank)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
