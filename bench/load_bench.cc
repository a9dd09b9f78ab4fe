// load + validate + race check throughput on large schedules.
// Target: at least 1 M commands/s on a 100,000-command schedule of 8 ranks.
#include <benchmark/benchmark.h>

#include <optional>

#include "core/json_reader.h"
#include "core/load.h"
#include "core/validate.h"
#include "tools/gen.h"

namespace {

// A pipelined schedule: per step, a shift on communication:0 into one of
// two ping-pong buffers, a join, a rank-dependent GEMM into c and a map.
std::string big_schedule(int64_t commands, int64_t ranks) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["name"] = "bench";
  s["mesh"] = {{"axis_names", {"x"}}, {"shape", {ranks}}};
  s["buffers"] = {{"a", {{"shape", {8, 8}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "iota"}}}}},
                  {"b", {{"shape", {8, 8}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "ones"}}}}},
                  {"r0", {{"shape", {8, 8}}, {"dtype", "f32"}}},
                  {"r1", {{"shape", {8, 8}}, {"dtype", "f32"}}},
                  {"c", {{"shape", {8 * ranks, 8}}, {"dtype", "f32"}, {"role", "output"}}}};
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  int64_t step = 0;
  while (static_cast<int64_t>(prog.size()) + 4 <= commands) {
    std::string buf = step % 2 ? "r1" : "r0";
    std::string tok = std::string("t").append(std::to_string(step));  // (GCC 12 warns falsely on "t" + std::string)
    prog.push_back({{"op", "async_start"}, {"token", tok}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                    {"body", {{{"op", "collective_permute"}, {"src", "a"}, {"dst", buf}, {"axis", "x"}, {"shift", 1}}}}});
    prog.push_back({{"op", "async_done"}, {"token", tok}});
    prog.push_back({{"op", "gemm"}, {"a", buf}, {"b", "b"}, {"c", "c[ds(((x + " + std::to_string(step) + ") % " + std::to_string(ranks) + ") * 8, 8)]"}});
    prog.push_back({{"op", "map"}, {"out", buf}, {"expr", "v * 2.0"}, {"in", {{"v", buf}}}});
    ++step;
  }
  s["program"] = prog;
  return s.dump();
}

// Loads `text` once per iteration; `counted` commands (nested ones
// included) on `ranks` ranks each time. Freeing the previous iteration's
// program is not part of a load (a tool frees it once, at exit), so it
// happens with the clock stopped.
void load_repeatedly(benchmark::State& state, const std::string& text, int64_t counted, int64_t ranks) {
  std::optional<thunky::Expected<thunky::Program>> p;
  for (auto _ : state) {
    state.PauseTiming();
    p.reset();
    state.ResumeTiming();
    p.emplace(thunky::load_schedule_text(text, "bench.json"));
    if (!*p) state.SkipWithError(p->errors().front().str().c_str());
    benchmark::DoNotOptimize(*p);
  }
  state.counters["commands/s"] = benchmark::Counter(static_cast<double>(counted * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["rank-commands/s"] = benchmark::Counter(static_cast<double>(counted * ranks * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_LoadValidate(benchmark::State& state) {
  const int64_t commands = state.range(0), ranks = state.range(1);
  // The async_start and its body are two commands.
  load_repeatedly(state, big_schedule(commands, ranks), commands + commands / 4, ranks);
}
// Parsing and replaying use threads, so rates are over wall-clock time.
BENCHMARK(BM_LoadValidate)->Args({100000, 8})->Args({100000, 1})->Args({10000, 8})->Args({100000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

// A mix of every common op, per step of ten commands: a gemm on a block
// of rows, an all_gather on one of two communication streams, a map of
// two inputs, a copy of a slice, the join, a reduce over a rank-dependent
// row, a memset, a kernel, a map in place and a memzero.
std::string mixed_schedule(int64_t commands, int64_t ranks) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["name"] = "mixed";
  s["mesh"] = {{"axis_names", {"x"}}, {"shape", {ranks}}};
  s["buffers"] = {{"a", {{"shape", {64, 16}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "iota"}}}}},
                  {"w", {{"shape", {16, 16}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "ones"}}}}},
                  {"h", {{"shape", {64, 16}}, {"dtype", "f32"}}},
                  {"g", {{"shape", {8 * ranks, 16}}, {"dtype", "f32"}}},
                  {"s", {{"shape", {16}}, {"dtype", "f32"}}},
                  {"out", {{"shape", {64, 16}}, {"dtype", "f32"}, {"role", "output"}}}};
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  auto n = [](int64_t v) { return std::to_string(v); };
  for (int64_t step = 0; static_cast<int64_t>(prog.size()) + 10 <= commands; ++step) {
    const int64_t r = step % 8 * 8;
    const std::string tok = "g" + n(step);
    prog.push_back({{"op", "gemm"}, {"a", "a[ds(" + n(r) + ", 8)]"}, {"b", "w"}, {"c", "h[ds(" + n(r) + ", 8)]"}});
    prog.push_back({{"op", "async_start"}, {"token", tok}, {"stream", {{"kind", "communication"}, {"id", step % 2}}},
                    {"body", {{{"op", "all_gather"}, {"src", "h[ds(" + n(r) + ", 1)]"}, {"dst", "g[0:" + n(ranks) + "]"}, {"axis", "x"}}}}});
    prog.push_back({{"op", "map"}, {"out", "out[" + n(r + 1) + "]"}, {"expr", "p * 0.5 + q"}, {"in", {{"p", "h[" + n(r + 1) + "]"}, {"q", "w[3]"}}}});
    prog.push_back({{"op", "copy"}, {"src", "a[" + n(r + 2) + ":" + n(r + 4) + "]"}, {"dst", "out[" + n(r + 2) + ":" + n(r + 4) + "]"}});
    prog.push_back({{"op", "async_done"}, {"token", tok}});
    prog.push_back({{"op", "reduce"}, {"in", "g[ds((x * 8 + " + n(step % 8) + ") % " + n(8 * ranks) + ", 1)]"}, {"out", "s"}, {"fn", "sum"}, {"axes", {0}}});
    prog.push_back({{"op", "memset"}, {"dst", "out[" + n(r + 5) + "]"}, {"value", static_cast<double>(step)}});
    prog.push_back({{"op", "kernel"}, {"name", "k"}, {"cost", {{"seconds", 1e-6}}}, {"reads", {"out[" + n(r + 5) + "]"}}, {"writes", {"out[" + n(r + 6) + "]"}}});
    prog.push_back({{"op", "map"}, {"out", "s"}, {"expr", "max(v, 0.0)"}, {"in", {{"v", "s"}}}});
    prog.push_back({{"op", "memzero"}, {"dst", "h[ds(" + n(r + 7) + ", 1)]"}});
  }
  s["program"] = prog;
  return s.dump();
}

void BM_LoadValidateMixed(benchmark::State& state) {
  const int64_t commands = state.range(0), ranks = state.range(1);
  load_repeatedly(state, mixed_schedule(commands, ranks), commands + commands / 10, ranks);  // and the async_start bodies
}
BENCHMARK(BM_LoadValidateMixed)->Args({100000, 8})->Unit(benchmark::kMillisecond)->UseRealTime();

// A few collectives over a large mesh (an in-place all_reduce over every
// rank, another along one axis): validation must stay linear in ranks, as
// each rank's walk learns its communicator's size and its place in it
// without listing the members.
std::string many_ranks(int64_t side) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["mesh"] = {{"axis_names", {"x", "y"}}, {"shape", {side, side}}};
  s["buffers"]["a"] = {{"shape", {4}}, {"dtype", "f32"}, {"role", "inout"}, {"init", {{"kind", "ones"}}}};
  s["program"] = {{{"op", "all_reduce"}, {"src", "a"}, {"dst", "a"}, {"axis", {"x", "y"}}},
                  {{"op", "all_reduce"}, {"src", "a"}, {"dst", "a"}, {"axis", "y"}}};
  return s.dump();
}

// Loads `text` once per iteration; `counter` gives the time per one of
// `items` (ranks, commands).
void load_each_iteration(benchmark::State& state, const std::string& text, double items, const char* counter) {
  for (auto _ : state) {
    auto p = thunky::load_schedule_text(text, "bench.json");
    if (!p) state.SkipWithError("the schedule does not load");
    benchmark::DoNotOptimize(p);
  }
  state.counters[counter] = benchmark::Counter(items, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_LoadValidateManyRanks(benchmark::State& state) {
  load_each_iteration(state, many_ranks(state.range(0)), static_cast<double>(state.range(0) * state.range(0)), "ns_per_rank");
}
BENCHMARK(BM_LoadValidateManyRanks)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

// Two streams that never join until the end, each writing alternate
// elements of one buffer: the race checker sees n unordered accesses and
// must stay linear in them (time per command flat as n grows).
std::string disjoint_streams(int64_t n) {
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["buffers"]["x"] = {{"shape", {n}}, {"dtype", "f32"}, {"role", "output"}};
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  for (int stream = 0; stream < 2; ++stream) {
    nlohmann::ordered_json body = nlohmann::ordered_json::array();
    for (int64_t i = stream; i < n; i += 2) body.push_back({{"op", "memset"}, {"dst", "x[" + std::to_string(i) + "]"}, {"value", 1.0}});
    prog.push_back({{"op", "async_start"}, {"token", "t" + std::to_string(stream)}, {"stream", {{"kind", "computation"}, {"id", stream + 1}}}, {"body", body}});
  }
  for (int stream = 0; stream < 2; ++stream) prog.push_back({{"op", "async_done"}, {"token", "t" + std::to_string(stream)}});
  s["program"] = prog;
  return s.dump();
}

void BM_RaceCheckDisjointStreams(benchmark::State& state) {
  load_each_iteration(state, disjoint_streams(state.range(0)), static_cast<double>(state.range(0)), "ns_per_command");
}
BENCHMARK(BM_RaceCheckDisjointStreams)->Arg(50000)->Arg(100000)->Arg(200000)->Unit(benchmark::kMillisecond)->UseRealTime();

// Parsing JSON alone, for reference: the tape the loader reads, and a
// nlohmann-json tree of the same text.
void BM_JsonParseOnly(benchmark::State& state) {
  const std::string text = big_schedule(state.range(0), 8);
  for (auto _ : state) {
    thunky::json_reader::Document doc(text);
    benchmark::DoNotOptimize(doc.root());
  }
}
BENCHMARK(BM_JsonParseOnly)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_JsonParseTree(benchmark::State& state) {
  const std::string text = big_schedule(state.range(0), 8);
  for (auto _ : state) benchmark::DoNotOptimize(nlohmann::ordered_json::parse(text));
}
BENCHMARK(BM_JsonParseTree)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
