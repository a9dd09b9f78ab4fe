// libFuzzer target: any bytes as a schedule, loaded (parse, lower,
// validate), then, when it loads and is small enough to run quickly, run on
// the cpu backend and simulated on a small ring machine. Built with
// -DTHUNKY_FUZZ=ON and clang; the corpus is seeded from examples/ and
// tests/malformed/. Any crash, sanitizer report or hang is a bug.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/load.h"
#include "core/validate.h"
#include "exec/backend.h"
#include "sim/engine.h"
#include "sim/machine.h"

namespace {

// The caps that keep one input's run short: ranks (threads), bytes, the
// commands, a kernel stand-in's sleep, .npy inits (files outside the input).
bool small_enough(const thunky::Program& p) {
  if (p.mesh.size() > 8 || p.command_count > 20000) return false;
  double bytes = 0;
  for (const auto& b : p.buffers) {
    bytes += static_cast<double>(b.bytes());
    if (b.init.kind == thunky::Init::Kind::npy) return false;
  }
  if (bytes * static_cast<double>(p.mesh.size()) > 64e6) return false;
  bool quick = true;
  std::function<void(const thunky::Block&)> walk = [&](const thunky::Block& block) {
    for (const auto& c : block) {
      if (c.op() == thunky::Op::kernel && c.cost && c.cost->seconds && *c.cost->seconds > 1e-3) quick = false;
      thunky::for_each_sub_block(c, walk);
    }
  };
  walk(p.program);
  return quick;
}

const thunky::sim::Machine& machine() {
  static const thunky::sim::Machine m = thunky::sim::parse_machine_text(R"({"format": "thunky.machine/1", "name": "fuzz-ring",
    "chip": {"peak_flops": {"f64": 1e12, "f32": 1e12, "f16": 1e12, "bf16": 1e12, "f8e4m3": 1e12, "f8e5m2": 1e12, "s64": 1e12, "s32": 1e12,
                            "s16": 1e12, "s8": 1e12, "u32": 1e12, "u8": 1e12, "bool": 1e12},
             "hbm_bandwidth": 1e12, "launch_overhead_s": 1e-6, "gemm_efficiency": 1.0, "source": "fuzzer"},
    "axes": {"*": {"topology": "ring", "wraparound": true, "link_bandwidth": 1e10, "hop_latency_s": 1e-6}}})");
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto p = thunky::load_schedule_text(text, "fuzz.json");
  if (!p) {
    for (const auto& e : p.errors()) (void)e.str();
    return 0;
  }
  if (!small_enough(p.value())) return 0;
  thunky::ExecOptions opts;
  opts.max_trip_count = 64;
  auto run = thunky::make_cpu_backend()->run(p.value(), opts);
  const thunky::sim::Decisions* decisions = run ? &run.value().decisions : nullptr;
  auto sim = thunky::sim::simulate(p.value(), machine(), decisions);
  if (!sim) (void)sim.errors().front().str();
  return 0;
}
