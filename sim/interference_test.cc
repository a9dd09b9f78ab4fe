// Interference (docs/machines.md): a collective's CTAs take SMs from the
// kernels beside it and its HBM traffic shares the chip's bandwidth.
#include <gtest/gtest.h>

#include "core/load.h"
#include "sim/collective_cost.h"
#include "sim/engine.h"
#include "sim/nccl_model.h"
#include "tests/test_util.h"

namespace thunky::sim {
namespace {

using testing::load_ok;

// 132 SMs taking 128 x 256 tiles (K rounded to 64, nothing more), bf16 at
// 1e15 flop/s, f32 at 1e14, HBM at 1e13 B/s, no launch overhead; an
// NVLink-like switch priced by the NCCL model at 1e12 B/s a GPU.
Machine gpu() {
  return parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "test-gpu",
    "chip": {"peak_flops": {"bf16": 1e15, "f32": 1e14}, "hbm_bandwidth": 1e13, "launch_overhead_s": 0,
             "sm_count": 132, "gemm_tile": [128, 256, 64], "gemm_k_overhead": 0, "source": "test"},
    "axes": {"*": {"topology": "switch", "egress_bandwidth": 1e12, "latency_s": 1e-6, "collective_model": "nccl"}}})"));
}

// On 8 ranks: an all_gather of `gathered` bf16 elements on a communication
// stream (with `ctas`: "ctas" on the command), beside `work` on the
// computation stream, both issued at 0.
std::string beside(const std::string& work, int64_t gathered, int ctas, const std::string& buffers) {
  const std::string cta = ctas > 0 ? R"(, "ctas": )" + std::to_string(ctas) : "";
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [8]},
    "buffers": {"s": {"shape": [)" + std::to_string(gathered / 8) + R"(], "dtype": "bf16", "role": "input", "init": {"kind": "zeros"}},
                "d": {"shape": [)" + std::to_string(gathered) + R"(], "dtype": "bf16"})" + buffers + R"(},
    "program": [{"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0},
                 "body": [{"op": "all_gather", "src": "s", "dst": "d", "axis": "x")" + cta + R"(}]},
                )" + work + R"(, {"op": "async_done", "token": "t"}]})";
}

// A GEMM of [1536, 16384] x [16384, n] in bf16.
std::string gemm(int64_t n) {
  return R"(, "a": {"shape": [1536, 16384], "dtype": "bf16", "role": "input", "init": {"kind": "zeros"}},
              "b": {"shape": [16384, )" + std::to_string(n) + R"(], "dtype": "bf16", "role": "input", "init": {"kind": "zeros"}},
              "c": {"shape": [1536, )" + std::to_string(n) + R"(], "dtype": "bf16"})";
}
const char* kGemm = R"({"op": "gemm", "a": "a", "b": "b", "c": "c"})";
constexpr int64_t kGiB = int64_t{1} << 30;

// Rank 0's op `op` ("gemm", "all_gather", "map") in the report.
OpRecord op_of(const std::string& sched, const std::string& op, const SimOptions& options = {}) {
  Program p = load_ok(sched);
  auto r = simulate(p, gpu(), nullptr, options);
  EXPECT_TRUE(r) << (r ? "" : r.errors()[0].str());
  if (!r) return {};
  for (const OpRecord& o : r->report.ranks[0].ops)
    if (o.op == op) return o;
  ADD_FAILURE() << "no " << op;
  return {};
}

// One wave of tiles alone: 1536 / 128 x 2816 / 256 = 12 x 11 = 132 tiles
// on 132 SMs, each 128 x 256 x 16384 at 2 flops: 2 x 132 x 128 x 256 x
// 16384 / 1e15 = 141.73 us (its 75.6 MB take 7.6 us of HBM: compute-bound).
constexpr double kOneWave = 2.0 * 132 * 128 * 256 * 16384 / 1e15;

TEST(Interference, OneWaveOfTilesBesideTwentyFourCtasTakesTwoWaves) {
  // 132 tiles on the 108 SMs the collective leaves: two waves, the whole
  // time (the 1 GiB all_gather lasts about 1 ms), so twice as long; half
  // of it is lost to interference.
  const OpRecord g = op_of(beside(kGemm, kGiB / 2, 24, gemm(2816)), "gemm");
  EXPECT_NEAR(g.end_s - g.start_s, 2 * kOneWave, 1e-12);
  EXPECT_NEAR(g.interference_s, kOneWave, 1e-12);
}

TEST(Interference, TilesThatFitInTheSmsLeftLoseNothing) {
  // 12 x 8 = 96 tiles: one wave on 132 SMs and on the 108 left.
  const OpRecord g = op_of(beside(kGemm, kGiB / 2, 24, gemm(2048)), "gemm");
  EXPECT_NEAR(g.end_s - g.start_s, kOneWave, 1e-12);
  EXPECT_EQ(g.interference_s, 0);
}

TEST(Interference, NoInterferencePricesTheGemmAlone) {
  SimOptions o;
  o.interference = false;
  const OpRecord g = op_of(beside(kGemm, kGiB / 2, 24, gemm(2816)), "gemm", o);
  EXPECT_NEAR(g.end_s - g.start_s, kOneWave, 1e-12);
  EXPECT_EQ(g.interference_s, 0);
}

TEST(Interference, TheGemmsRemainingTilesTakeTheSmsBackWhenTheCollectiveEnds) {
  // A 16 MiB all_gather ends at T, well before the GEMM: up to T the GEMM
  // runs at half speed (two waves), then at full, so it ends at
  // T + (kOneWave - T / 2) = kOneWave + T / 2.
  const std::string s = beside(kGemm, 8 << 20, 24, gemm(2816));
  const OpRecord ag = op_of(s, "all_gather"), g = op_of(s, "gemm");
  ASSERT_LT(ag.end_s, kOneWave);
  EXPECT_NEAR(g.end_s, kOneWave + ag.end_s / 2, 1e-12);
}

TEST(Interference, AMemoryBoundMapBesideAnAllGatherSlowsByItsHbmShare) {
  // y = x * 2 over 2^24 f32: 2^27 bytes at 1e13 B/s = 13.42 us (its 2^24
  // flops take 0.17 us at 1e14). The all_gather of V = 1 GiB moves its bus
  // bytes V x 7/8 through each GPU's HBM twice (a copy: read, then write)
  // in its transfer time t: d = 2 x 7/8 x V / t B/s. The map's memory
  // side then takes (1e13 + d) / 1e13 as long: it gets its proportional
  // share of the HBM.
  const std::string map = R"({"op": "map", "out": "y", "expr": "x * 2", "in": {"x": "x"}})";
  const std::string bufs = R"(, "x": {"shape": [16777216], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
                               "y": {"shape": [16777216], "dtype": "f32"})";
  const Machine m = gpu();
  const double t = collective_cost(Op::all_gather, {AxisSpan{m.axis("x"), 8}}, static_cast<double>(kGiB)).transfer_s;
  const double d = 2 * 7.0 / 8 * static_cast<double>(kGiB) / t;
  const double alone = static_cast<double>(int64_t{1} << 27) / 1e13;
  const OpRecord y = op_of(beside(map, kGiB / 2, 0, bufs), "map");
  EXPECT_NEAR(y.end_s - y.start_s, alone * (1e13 + d) / 1e13, 1e-12);
  EXPECT_GT(d, 1e12);  // a slowdown worth the name: over 10%
}

TEST(Interference, ACollectiveWithFewerCtasThanNcclGivesItMovesProportionallySlower) {
  // NCCL gives a 1 GiB all_gather q.channels = 24 CTAs; capped at 8 (on the
  // command, or as NCCL_MAX_CTAS) its transfer takes 24 / 8 = 3 times as
  // long. (Its latency, 32 us, is a floor under the far longer transfer.)
  const Machine m = gpu();
  const CollectiveCost c = collective_cost(Op::all_gather, {AxisSpan{m.axis("x"), 8}}, static_cast<double>(kGiB));
  ASSERT_EQ(nccl_ctas(Op::all_gather, c.algo, c.proto, m.axis("x")->nccl_params, 8, static_cast<double>(kGiB)), 24);
  const std::string none = R"({"op": "memzero", "dst": "z"})", z = R"(, "z": {"shape": [4], "dtype": "f32"})";
  const OpRecord full = op_of(beside(none, kGiB / 2, 0, z), "all_gather");
  ASSERT_LT(c.latency_s, c.transfer_s);
  EXPECT_NEAR(full.end_s - full.start_s, c.transfer_s, 1e-12);
  const OpRecord eight = op_of(beside(none, kGiB / 2, 8, z), "all_gather");
  EXPECT_NEAR(eight.end_s - eight.start_s, 3 * c.transfer_s, 1e-12);
  SimOptions capped;
  capped.nccl_max_ctas = 8;
  const OpRecord max8 = op_of(beside(none, kGiB / 2, 0, z), "all_gather", capped);
  EXPECT_NEAR(max8.end_s - max8.start_s, eight.end_s - eight.start_s, 1e-12);
}

TEST(Interference, NcclSizesItsCtasByTheBytes) {
  NcclParams q;  // 24 channels, 16 for NVLS, 8 a peer
  // Simple: 512 threads x 64 bytes a channel; 1 MiB keeps all 24 (24 x
  // 32 KiB = 768 KiB < 1 MiB); 64 KiB keeps 2 (65536 is not below 2 x 32 KiB).
  EXPECT_EQ(nccl_ctas(Op::all_reduce, NcclAlgo::ring, NcclProto::simple, q, 8, 1 << 20), 24);
  EXPECT_EQ(nccl_ctas(Op::all_reduce, NcclAlgo::ring, NcclProto::simple, q, 8, 1 << 16), 2);
  // all_gather counts one rank's part: 1 MiB over 8 is 128 KiB: 4 x 32 KiB.
  EXPECT_EQ(nccl_ctas(Op::all_gather, NcclAlgo::ring, NcclProto::simple, q, 8, 1 << 20), 4);
  // The ring's LL: 512 x 8 x n = 32 KiB a channel on 8 ranks: 256 KiB keeps 8.
  EXPECT_EQ(nccl_ctas(Op::all_reduce, NcclAlgo::ring, NcclProto::ll, q, 8, 1 << 18), 8);
  // LL128 on the tree: 640 x 8 = 5 KiB a channel: 20 KiB keeps 4.
  EXPECT_EQ(nccl_ctas(Op::all_reduce, NcclAlgo::tree, NcclProto::ll128, q, 8, 20 << 10), 4);
  EXPECT_EQ(nccl_ctas(Op::all_reduce, NcclAlgo::nvls, NcclProto::simple, q, 8, 4), 16);
  EXPECT_EQ(nccl_ctas(Op::collective_permute, NcclAlgo::p2p, NcclProto::simple, q, 8, 4), 8);
}

TEST(Interference, OnAnH100TheOneWaveGemmBesideAnAllGatherNearlyDoubles) {
  // As published for an H100 (a cuBLAS GEMM of one wave beside NCCL's
  // AllGather: about twice as slow), on the bundled model, NCCL's own CTA
  // count: 1536 x 2816 bf16 (132 tiles of 128 x 256) beside a 1 GiB
  // all_gather, which holds 24 SMs: a slowdown of 50-110%; 1536 x 2048 (96
  // tiles) fits in the 108 SMs left: under 15%.
  const Machine h100 = load_machine("h100-8gpu", std::string(THUNKY_SOURCE_DIR) + "/models").value();
  auto slowdown = [&](int64_t n) {
    Program p = load_ok(beside(kGemm, kGiB / 2, 0, gemm(n)));
    SimOptions alone;
    alone.interference = false;
    auto with = simulate(p, h100, nullptr), without = simulate(p, h100, nullptr, alone);
    auto gemm_of = [](const SimResult& r) {
      for (const OpRecord& o : r.report.ranks[0].ops)
        if (o.op == "gemm") return o.end_s - o.start_s;
      return 0.0;
    };
    return gemm_of(*with) / gemm_of(*without) - 1;
  };
  const double one_wave = slowdown(2816), fits = slowdown(2048);
  EXPECT_GE(one_wave, 0.5);
  EXPECT_LE(one_wave, 1.1);
  EXPECT_LT(fits, 0.15);
}

TEST(Interference, CtasOutsideOneToTheLimitAreRefusedWithTheirPointer) {
  const std::string s = beside(kGemm, 1024, 0, gemm(256));
  for (const char* bad : {"0", "-3", "1025"}) {
    std::string t = s;
    t.replace(t.find(R"("axis": "x")"), 11, std::string(R"("axis": "x", "ctas": )") + bad);
    auto p = load_schedule_text(t, "s.json");
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.errors()[0].pointer, "/program/0/body/0/ctas") << p.errors()[0].str();
  }
}

}  // namespace
}  // namespace thunky::sim
