#include "tools/calibrate_exec.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "core/load.h"
#include "core/validate.h"
#include "exec/backend.h"
#include "exec/cores.h"
#include "sim/gemm_fit.h"

namespace thunky::calibrate {

namespace {

using ojson = nlohmann::ordered_json;

ojson schedule(const std::string& name, int ranks, ojson buffers, ojson program) {
  ojson s;
  s["format"] = "thunky.sched/1";
  s["name"] = name;
  if (ranks > 1) s["mesh"] = {{"axis_names", {"x"}}, {"shape", {ranks}}};
  s["buffers"] = std::move(buffers);
  s["program"] = std::move(program);
  return s;
}

ojson input(ojson shape, const std::string& dtype) {
  return {{"shape", std::move(shape)}, {"dtype", dtype}, {"role", "input"}, {"init", {{"kind", "uniform"}, {"low", -1}, {"high", 1}, {"seed", 1}}}};
}
ojson output(ojson shape, const std::string& dtype) { return {{"shape", std::move(shape)}, {"dtype", dtype}, {"role", "output"}}; }

// Runs benchmark schedules on one backend.
class Runner {
 public:
  explicit Runner(std::string backend) : backend_(std::move(backend)) {}

  // The median over `iters` runs of the time rank 0's ops named `name`
  // take (summed within a run); plan and initialise are not timed.
  Expected<double> op_seconds(const ojson& doc, const std::string& name, int iters = 5) {
    std::vector<double> times;
    auto ran = each_run(doc, iters, [&](const Report& r) {
      double t = 0;
      for (const auto& op : r.ranks.front().ops)
        if (op.name == name) t += op.end_s - op.start_s;
      times.push_back(t);
    });
    if (!ran) return ran.errors();
    return median(times);
  }

  // The median time from a fork's record (async_start) to the first
  // command of the stream that waits for it, over every rank's forks in
  // `iters` runs.
  Expected<double> fork_seconds(const ojson& doc, int iters = 5) {
    std::vector<double> times;
    auto ran = each_run(doc, iters, [&](const Report& r) {
      for (const auto& rank : r.ranks)
        for (const auto& f : rank.flows)
          if (!f.join) times.push_back(f.to_s - f.from_s);
    });
    if (!ran) return ran.errors();
    if (times.empty()) return std::vector<Diagnostic>{{ErrorKind::input, doc["name"].get<std::string>(), "", "the benchmark recorded no fork"}};
    return median(times);
  }

  // The GPU's multiprocessors, as the last run reported them (0 on the cpu).
  int64_t sm_count() const { return sm_count_; }
  // The cuda backend's placement in the last run ("shared-device": every rank on one GPU).
  const std::string& placement() const { return placement_; }

 private:
  static double median(std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }

  // Plans and initialises `doc` (not timed), then runs it `iters` times,
  // handing each run's timeline to `visit`.
  Expected<bool> each_run(const ojson& doc, int iters, const std::function<void(const Report&)>& visit) {
    auto p = load_schedule_text(doc.dump(), doc["name"].get<std::string>() + ".json");
    if (!p) return p.errors();
    auto b = make_backend(backend_);
    if (!b) return b.errors();
    ExecOptions o;
    o.warmup = 1;
    o.iters = 1;
    if (auto e = (*b)->plan(*p, o); !e.empty()) return e;
    if (auto e = (*b)->initialise(); !e.empty()) return e;
    for (int i = 0; i < iters; ++i) {
      auto r = (*b)->execute();
      if (!r) return r.errors();
      visit(r->report);
      sm_count_ = r->sm_count;
      placement_ = r->report.placement.value_or("");
    }
    return true;
  }

  std::string backend_;
  int64_t sm_count_ = 0;
  std::string placement_;
};

// A kernel that holds `ctas` SMs for `ns` nanoseconds and does nothing
// else, as a collective's CTAs hold them: one block an SM, each with 160
// KiB of shared memory, which leaves no room beside it for a GEMM's block
// (cuBLAS's large tiles take more than what is left of an SM's 228 KiB on
// an H100). On one GPU it stands for NCCL's CTAs.
ojson sm_holder(int64_t ctas, int64_t ns) {
  const std::string ptx = ".version 7.0\n.target sm_70\n.address_size 64\n"
                          ".visible .entry thunky_hold(.param .u64 unused)\n{\n"
                          "  .reg .u64 %t<3>;\n  .reg .pred %p;\n"
                          "  mov.u64 %t0, %globaltimer;\n"
                          "$L_spin:\n  mov.u64 %t1, %globaltimer;\n  sub.u64 %t2, %t1, %t0;\n"
                          "  setp.lt.u64 %p, %t2, " + std::to_string(ns) + ";\n  @%p bra $L_spin;\n  ret;\n}\n";
  return {{"op", "ptx_kernel"}, {"name", "hold"}, {"args", {"flag"}}, {"written", {false}}, {"kernel_name", "thunky_hold"}, {"ptx", ptx},
          {"grid", {ctas, 1, 1}}, {"block", {32, 1, 1}}, {"shmem_bytes", 160 * 1024}};
}

// Two factors of n closest to its square root (132: 11 x 12).
std::pair<int64_t, int64_t> near_square(int64_t n) {
  int64_t a = 1;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) a = d;
  return {a, n / a};
}

std::string gemm_label(const std::string& dtype, int64_t m, int64_t n, int64_t k) {
  return "gemm " + dtype + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

}  // namespace

Expected<ojson> calibrate_backend(const std::string& backend, int ranks, bool quick, const std::function<void(const std::string&)>& progress) {
  const bool gpu = backend == "cuda";
  Runner run(backend);
  std::string notes;
  char buf[256];
  // GEMMs: each dtype's best rate over a few shapes is its peak (the model
  // then runs GEMMs at gemm_efficiency 1 of it). On a GPU, GEMMs are then
  // priced by shape: the tile and K overhead are fitted to every GEMM timed.
  ojson peaks = ojson::object();
  std::vector<sim::GemmRow> gemms;
  const std::vector<std::string> dtypes = gpu ? std::vector<std::string>{"bf16", "f16", "f32", "f64"} : std::vector<std::string>{"f32", "f64", "bf16"};
  std::vector<std::array<int64_t, 3>> shapes = gpu ? sim::gemm_calibration_shapes()
                                                   : std::vector<std::array<int64_t, 3>>{{128, 128, 128}, {256, 256, 256}, {512, 512, 512}, {64, 1024, 256}};
  if (quick) shapes = {{64, 64, 64}, {128, 128, 128}, {96, 64, 128}};
  for (const auto& dt : dtypes) {
    double best = 0;
    for (const auto& [m, n, k] : shapes) {
      if (dt == "bf16" && !gpu && m > 256) continue;  // emulated on the CPU: slow, and its rate shows at 256
      const std::string label = gemm_label(dt, m, n, k);
      progress(label);
      auto t = run.op_seconds(schedule("calibrate_gemm", 1, {{"a", input({m, k}, dt)}, {"b", input({k, n}, dt)}, {"c", output({m, n}, dt)}},
                                       ojson::array({{{"op", "gemm"}, {"name", "g"}, {"a", "a"}, {"b", "b"}, {"c", "c"}}})),
                              "g");
      if (!t) return t.errors();
      if (*t > 0) best = std::max(best, 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / *t);
      gemms.push_back({*parse_dtype(dt), m, n, k, *t});
    }
    peaks[dt] = best;
  }
  // Copies: bytes read plus written over time, at the largest size.
  std::vector<int64_t> copy_sizes = gpu ? std::vector<int64_t>{1 << 24, 1 << 28, int64_t{1} << 30} : std::vector<int64_t>{1 << 20, 1 << 23, 1 << 26};
  if (quick) copy_sizes = {1 << 20};
  double hbm = 0;
  for (int64_t bytes : copy_sizes) {
    progress("copy " + std::to_string(bytes >> 20) + " MiB");
    auto t = run.op_seconds(schedule("calibrate_copy", 1, {{"src", input({bytes}, "u8")}, {"dst", output({bytes}, "u8")}},
                                     ojson::array({{{"op", "copy"}, {"name", "c"}, {"src", "src"}, {"dst", "dst"}}})),
                            "c");
    if (!t) return t.errors();
    if (*t > 0) hbm = 2.0 * static_cast<double>(bytes) / *t;
  }
  // Memsets and maps over the same sizes (reported: the model prices them at hbm_bandwidth).
  {
    const int64_t bytes = copy_sizes.back();
    progress("memset " + std::to_string(bytes >> 20) + " MiB");
    auto ms = run.op_seconds(schedule("calibrate_memset", 1, {{"dst", output({bytes / 4}, "f32")}},
                                      ojson::array({{{"op", "memset"}, {"name", "m"}, {"dst", "dst"}, {"value", 1.5}}})),
                             "m");
    progress("map " + std::to_string(bytes >> 20) + " MiB");
    auto mp = run.op_seconds(schedule("calibrate_map", 1, {{"x", input({bytes / 4}, "f32")}, {"y", output({bytes / 4}, "f32")}},
                                      ojson::array({{{"op", "map"}, {"name", "m"}, {"out", "y"}, {"expr", "x * 2.0 + 1.0"}, {"in", {{"x", "x"}}}}})),
                             "m");
    if (!ms) return ms.errors();
    if (!mp) return mp.errors();
    std::snprintf(buf, sizeof buf, "memset %.1f GB/s, map (x * 2 + 1, f32) %.1f GB/s read+written", bytes / std::max(*ms, 1e-12) / 1e9,
                  2.0 * bytes / std::max(*mp, 1e-12) / 1e9);
    notes += std::string("; ") + buf;
  }
  // Launch overhead: the median time of a 4-byte memset.
  progress("tiny commands");
  auto tiny = run.op_seconds(schedule("calibrate_tiny", 1, {{"dst", output({1}, "f32")}}, ojson::array({{{"op", "memset"}, {"name", "t"}, {"dst", "dst"}, {"value", 1.0}}})), "t", 21);
  if (!tiny) return tiny.errors();
  // Two streams at once: a GEMM beside a copy, against each alone.
  {
    const auto [m, n, k] = shapes[gpu ? 1 : 2];
    const std::string dt = gpu ? "bf16" : "f32";
    const int64_t bytes = copy_sizes.back();
    progress("a GEMM beside a copy");
    ojson buffers = {{"a", input({m, k}, dt)}, {"b", input({k, n}, dt)}, {"c", output({m, n}, dt)}, {"src", input({bytes}, "u8")}, {"dst", output({bytes}, "u8")}};
    ojson both = ojson::array({{{"op", "async_start"}, {"token", "t"}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                                {"body", ojson::array({{{"op", "copy"}, {"name", "c"}, {"src", "src"}, {"dst", "dst"}}})}},
                               {{"op", "gemm"}, {"name", "g"}, {"a", "a"}, {"b", "b"}, {"c", "c"}},
                               {{"op", "async_done"}, {"token", "t"}}});
    auto g = run.op_seconds(schedule("calibrate_both", 1, buffers, both), "g");
    auto c = run.op_seconds(schedule("calibrate_both", 1, buffers, both), "c");
    if (!g) return g.errors();
    if (!c) return c.errors();
    const double g_alone = 2.0 * static_cast<double>(m) * n * k / peaks[dt].get<double>(), c_alone = 2.0 * bytes / hbm;
    std::snprintf(buf, sizeof buf, "a GEMM beside a copy took %.2fx and the copy %.2fx their times alone", *g / g_alone, *c / c_alone);
    notes += std::string("; ") + buf;
  }
  // A hand-off between streams while every rank computes: each rank forks
  // a 4-byte memset onto communication:0 before each of 8 GEMMs, and a
  // fork's latency is the time from its record to the memset's start. On
  // the cpu that is the communication thread's wake-up while the ranks'
  // GEMMs hold the cores; on a GPU, the cross-stream dependency.
  double event_latency = 0;
  {
    const auto [m, n, k] = shapes[gpu ? 1 : 0];
    const std::string dt = gpu ? "bf16" : "f32";
    ojson program = ojson::array();
    for (int i = 0; i < 8; ++i) {
      const std::string token = "t" + std::to_string(i);
      program.push_back({{"op", "async_start"}, {"token", token}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                         {"body", ojson::array({{{"op", "memset"}, {"dst", "flag"}, {"value", 1.0}}})}});
      program.push_back({{"op", "gemm"}, {"a", "a"}, {"b", "b"}, {"c", "c"}});
      program.push_back({{"op", "async_done"}, {"token", token}});
    }
    const int computing = std::max(1, ranks);
    progress("hand-offs between streams while " + std::to_string(computing) + " ranks compute");
    auto t = run.fork_seconds(schedule("calibrate_hand_off", computing,
                                       {{"a", input({m, k}, dt)}, {"b", input({k, n}, dt)}, {"c", output({m, n}, dt)}, {"flag", output({1}, "f32")}}, program));
    if (!t) return t.errors();
    event_latency = std::max(0.0, *t);
  }
  // A collective among the ranks: latency from a 4-byte all_reduce, bandwidth from a large one
  // (the ideal formula of a switch: 2 latency + 2 (n-1)/n V / B).
  double latency = 0, egress = hbm;
  if (ranks > 1) {
    const int64_t big = quick ? (1 << 16) : gpu ? (1 << 28) : (1 << 22);
    auto ar = [&](int64_t count) {
      return schedule("calibrate_all_reduce", ranks, {{"a", input({count}, "f32")}, {"b", output({count}, "f32")}},
                      ojson::array({{{"op", "all_reduce"}, {"name", "r"}, {"src", "a"}, {"dst", "b"}, {"axis", "x"}}}));
    };
    progress("all_reduce of 4 bytes on " + std::to_string(ranks) + " ranks");
    auto small = run.op_seconds(ar(1), "r", 21);
    progress("all_reduce of " + std::to_string(big >> 20) + " MiB on " + std::to_string(ranks) + " ranks");
    auto large = run.op_seconds(ar(big / 4), "r");
    if (!small) return small.errors();
    if (!large) return large.errors();
    latency = *small / 2;
    const double frac = 2.0 * (ranks - 1) / ranks;
    if (*large > *small) egress = frac * static_cast<double>(big) / (*large - *small);
    if (run.placement() == "shared-device") {
      notes += "; the all_reduce ran with every rank on one GPU (shared-device), so the axis prices device copies between the ranks' buffers, not links between GPUs";
      progress("note: every rank ran on one GPU; the axis written prices device copies, not links between GPUs");
    }
  }
  ojson chip = {{"peak_flops", peaks}, {"hbm_bandwidth", hbm}, {"launch_overhead_s", *tiny}, {"event_latency_s", event_latency}, {"gemm_efficiency", 1.0}};
  // On the cpu backend every rank's commands run on this host's cores, one
  // a core (exec/cores.h): the figures above are one core's, and the
  // simulator queues the commands of all ranks for the same cores.
  if (!gpu) {
    const int cores = default_host_cores();
    chip["host_cores"] = cores;
    std::snprintf(buf, sizeof buf, "; every rank's commands and collectives run on this host's %d cores (host_cores), one a core, each at the figures above", cores);
    notes += buf;
  }
  std::string gemm_source = "each dtype's peak is its best GEMM rate";
  if (gpu && run.sm_count() > 0) {
    const sim::GemmFit fit = sim::fit_gemm_shapes(gemms, run.sm_count(), hbm, *tiny);
    chip["peak_flops"] = fit.peak_flops;
    chip["sm_count"] = run.sm_count();
    chip["gemm_tile"] = {fit.tile_m, fit.tile_n, fit.tile_k};
    chip["gemm_k_overhead"] = fit.k_overhead;
    char fitted[512];
    std::snprintf(fitted, sizeof fitted,
                  "GEMMs priced by shape: %lld SMs taking %lldx%lld tiles, K rounded to %lld plus %lld, and each dtype's peak within tiles, fitted to "
                  "%zu GEMMs (mean error %.1f%%, largest %.1f%%)",
                  static_cast<long long>(run.sm_count()), static_cast<long long>(fit.tile_m), static_cast<long long>(fit.tile_n), static_cast<long long>(fit.tile_k),
                  static_cast<long long>(fit.k_overhead), gemms.size(), 100 * fit.mean_abs_error, 100 * fit.max_abs_error);
    gemm_source = fitted;
  }
  // Interference (docs/machines.md, "Interference"): a GEMM of one wave
  // (a tile an SM, at the fitted tile) and one of eight waves, each alone
  // and beside a kernel holding 1, 8 and 24 SMs (NCCL's CTAs for a small
  // collective, a send/recv and a ring); a map beside a large copy. The
  // slowdowns measured, and the model's for the same, go into the notes.
  if (gpu && run.sm_count() > 0 && !quick) {
    const int64_t sms = run.sm_count();
    const auto [rows, cols] = near_square(sms);
    const int64_t tm = chip["gemm_tile"][0].get<int64_t>(), tn = chip["gemm_tile"][1].get<int64_t>(), k = 8192;
    std::string measured;
    for (const int64_t waves : {int64_t{1}, int64_t{8}}) {
      const int64_t m = rows * tm * (waves == 8 ? 4 : 1), n = cols * tn * (waves == 8 ? 2 : 1);
      ojson buffers = {{"a", input({m, k}, "bf16")}, {"b", input({k, n}, "bf16")}, {"c", output({m, n}, "bf16")}, {"flag", input({1}, "u8")}};
      const ojson gemm = {{"op", "gemm"}, {"name", "g"}, {"a", "a"}, {"b", "b"}, {"c", "c"}};
      progress("interference: " + gemm_label("bf16", m, n, k) + " alone");
      auto alone = run.op_seconds(schedule("calibrate_gemm_alone", 1, buffers, ojson::array({gemm})), "g");
      if (!alone) return alone.errors();
      std::snprintf(buf, sizeof buf, "; a %lld-wave GEMM (%s, %.1f us alone) beside", static_cast<long long>(waves), gemm_label("bf16", m, n, k).c_str(), *alone * 1e6);
      measured += buf;
      for (const int64_t held : {int64_t{1}, int64_t{8}, int64_t{24}}) {
        // The holder starts first and outlasts the GEMM three times over.
        const int64_t ns = static_cast<int64_t>(3 * *alone * 1e9) + 100000;
        ojson program = ojson::array({{{"op", "async_start"}, {"token", "h"}, {"stream", {{"kind", "communication"}, {"id", 0}}}, {"body", ojson::array({sm_holder(held, ns)})}},
                                      gemm, {{"op", "async_done"}, {"token", "h"}}});
        progress("interference: the GEMM beside " + std::to_string(held) + " SMs held");
        auto beside = run.op_seconds(schedule("calibrate_gemm_beside", 1, buffers, program), "g");
        if (!beside) return beside.errors();
        // The model: the GEMM's tiles in waves on the SMs left while the holder runs.
        const int64_t tiles = waves * sms, left = std::max<int64_t>(1, sms - held);
        const double model = static_cast<double>((tiles + left - 1) / left) / static_cast<double>(waves);
        std::snprintf(buf, sizeof buf, "%s %lld SMs held %.2fx (model %.2fx)", held == 1 ? "" : ",", static_cast<long long>(held), *beside / *alone, model);
        measured += buf;
      }
    }
    {
      const int64_t bytes = copy_sizes.back();
      ojson buffers = {{"x", input({bytes / 4}, "f32")}, {"y", output({bytes / 4}, "f32")}, {"src", input({bytes}, "u8")}, {"dst", output({bytes}, "u8")}};
      const ojson map = {{"op", "map"}, {"name", "m"}, {"out", "y"}, {"expr", "x * 2.0 + 1.0"}, {"in", {{"x", "x"}}}};
      progress("interference: a map beside a copy");
      auto alone = run.op_seconds(schedule("calibrate_map_alone", 1, buffers, ojson::array({map})), "m");
      ojson program = ojson::array({{{"op", "async_start"}, {"token", "t"}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                                     {"body", ojson::array({{{"op", "copy"}, {"name", "c"}, {"src", "src"}, {"dst", "dst"}}})}},
                                    map, {{"op", "async_done"}, {"token", "t"}}});
      auto beside = run.op_seconds(schedule("calibrate_map_beside", 1, buffers, program), "m");
      if (!alone) return alone.errors();
      if (!beside) return beside.errors();
      // The model: both at HBM bandwidth share it in proportion, so the map takes up to 2x while they overlap.
      std::snprintf(buf, sizeof buf, "; a %lld MiB map beside a copy of as many bytes %.2fx its time alone (model: up to 2x)", static_cast<long long>(bytes >> 20), *beside / *alone);
      measured += buf;
    }
    notes += "; interference measured, not yet fitted (the CTA and HBM rules keep their defaults)" + measured;
    progress("interference" + measured);
  }
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  ojson m;
  m["format"] = "thunky.machine/1";
  m["name"] = backend + "-" + host;
  chip["source"] = "measured by thunky-calibrate exec --backend " + backend + " on " + host + ", " + date + ": " + gemm_source +
                   ", hbm_bandwidth the bytes read and written per second of the largest copy, launch_overhead_s a 4-byte memset's time, event_latency_s the median time from a fork's record to its stream's next command while every rank computes GEMMs" + notes;
  m["chip"] = std::move(chip);
  m["latency_model"] = "additive";
  m["axes"] = {{"*", {{"topology", "switch"}, {"egress_bandwidth", egress}, {"latency_s", latency}, {"collective_model", "ideal"}}}};
  return m;
}

}  // namespace thunky::calibrate
