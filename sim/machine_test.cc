#include "sim/machine.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace thunky::sim {
namespace {

const std::string kModels = std::string(THUNKY_SOURCE_DIR) + "/models";

TEST(Machine, EveryShippedModelLoadsAndNamesItsSource) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kModels)) {
    auto m = load_machine(e.path().string(), kModels);
    ASSERT_TRUE(m.ok()) << m.errors()[0].str();
    EXPECT_FALSE(m->source.empty()) << e.path();
    EXPECT_NE(m->axis("x"), nullptr) << e.path();
    ++n;
  }
  EXPECT_EQ(n, 11);  // TPU v4, v5e, v5p, Ironwood; A100, H100, H200, B200 nodes; A100, H100, H200 clusters
}

TEST(Machine, EveryShippedModelHasItsSourcesHeadlineFigures) {
  // Each model's bf16 peak, HBM bandwidth and interconnect figure, as its
  // "source" states them (the figure quoted in the comment).
  struct Headline {
    const char* file;
    double bf16, hbm, link;  // link: ring link_bandwidth one way, switch egress, or cluster NIC
    const char* quoted;      // the peak as the source writes it
  };
  const Headline models[] = {
      {"tpu-v4", 2.75e14, 1.2e12, 4.5e10, "275 TFLOP/s"},       // 1.2 TB/s HBM, ICI 4.5e10 one-way
      {"tpu-v5e", 1.97e14, 8.19e11, 4.5e10, "197 TFLOP/s"},     // 819 GB/s HBM
      {"tpu-v5p", 4.59e14, 2.765e12, 9e10, "459 TFLOP/s"},      // 2765 GB/s HBM, ICI 9e10 one-way
      {"tpu-ironwood", 2.307e15, 7.37e12, 1e11, "4,614 TFLOP/s"},  // fp8, bf16 taken as half; W = 2e11 both ways
      {"a100-8gpu", 3.12e14, 2.039e12, 3e11, "312 TFLOP/s"},    // 2,039 GB/s, 600 GB/s NVLink bidirectional
      {"h100-8gpu", 9.89e14, 3.35e12, 4.5e11, "989 TFLOP/s"},   // 3.35 TB/s, 900 GB/s NVLink bidirectional
      {"h200-8gpu", 9.89e14, 4.8e12, 4.5e11, "989 TFLOP/s"},    // 4.8 TB/s
      {"h100-cluster", 9.89e14, 3.35e12, 5e10, "H100"},         // 400 Gb/s NIC per GPU = 5e10 B/s
      {"a100-cluster", 3.12e14, 2.039e12, 2.5e10, "312 TFLOP/s"},  // 200 Gb/s HDR NIC per GPU = 2.5e10 B/s (axis x: across nodes)
      {"h200-cluster", 9.89e14, 4.8e12, 5e10, "H200"},          // the same wiring, H200 chips
      {"b200-8gpu", 2.25e15, 8e12, 9e11, "2.25 PFLOP/s"},       // 8 TB/s HBM3e, 1.8 TB/s NVLink 5 bidirectional
  };
  for (const auto& h : models) {
    auto m = load_machine(h.file, kModels);
    ASSERT_TRUE(m.ok()) << h.file;
    EXPECT_DOUBLE_EQ(m->peak(DType::bf16), h.bf16) << h.file;
    EXPECT_DOUBLE_EQ(m->hbm_bandwidth, h.hbm) << h.file;
    const AxisLinks& a = *m->axis("x");
    const double link = a.topology == AxisLinks::Topology::ring ? a.link_bandwidth
                        : a.topology == AxisLinks::Topology::switch_ ? a.egress_bandwidth
                                                                      : a.nic_bandwidth;
    EXPECT_DOUBLE_EQ(link, h.link) << h.file;
    EXPECT_NE(m->source.find(h.quoted), std::string::npos) << h.file << ": " << m->source;
  }
}

TEST(Machine, LoadsByNameAndRejectsUnknownKeys) {
  auto m = load_machine("tpu-v5e", kModels);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->name, "tpu-v5e-4x4");
  EXPECT_FALSE(m->axis("x")->wraparound);
  EXPECT_DOUBLE_EQ(m->peak(DType::bf16), 1.97e14);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "m",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s", "turbo": true},
    "axes": {"*": {"topology": "ring", "link_bandwidth": 1e10}}})");
  try {
    parse_machine(j);
    FAIL() << "unknown key accepted";
  } catch (const ThunkyError& e) {
    EXPECT_EQ(e.pointer(), "/chip/turbo");
  }
}

TEST(Machine, ZeroPeakAndMisplacedNcclFiguresAreRefused) {
  auto refused_at = [](const std::string& chip, const std::string& axis) {
    try {
      parse_machine_text(R"({"format": "thunky.machine/1", "name": "m", "chip": )" + chip + R"(, "axes": {"*": )" + axis + "}}");
    } catch (const ThunkyError& e) {
      return e.pointer();
    }
    return std::string("accepted");
  };
  const std::string chip = R"({"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s"})";
  const std::string sw = R"({"topology": "switch", "egress_bandwidth": 1e9)";
  // A zero peak would price every GEMM at infinity.
  EXPECT_EQ(refused_at(R"({"peak_flops": {"f32": 0}, "hbm_bandwidth": 1e11, "source": "s"})", sw + "}"), "/chip/peak_flops/f32");
  EXPECT_EQ(refused_at(chip, sw + R"(, "collective_model": "nccl", "nccl": {"ring": {"LL": {"efficiency": 1.5}}}})"), "/axes/*/nccl/ring/LL/efficiency");
  EXPECT_EQ(refused_at(chip, sw + R"(, "collective_model": "ideal", "nccl": {}})"), "/axes/*/nccl");  // figures of a model not in use
  EXPECT_EQ(refused_at(chip, sw + R"(, "nccl": {"rings": {}}})"), "/axes/*/nccl/rings");              // unknown key
  EXPECT_EQ(refused_at(R"({"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s", "gemm_tile": [128, 256, 64]})", sw + "}"), "/chip/sm_count");
  EXPECT_EQ(refused_at(R"({"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s", "event_latency_s": -1e-6})", sw + "}"),
            "/chip/event_latency_s");  // a hand-off cannot end before it starts
  EXPECT_EQ(refused_at(R"({"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s", "event_latency_s": 2e-5})", sw + "}"), "accepted");
  EXPECT_EQ(refused_at(R"({"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s", "host_cores": 0})", sw + "}"), "/chip/host_cores");
  EXPECT_EQ(refused_at(R"({"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e11, "source": "s", "host_cores": 2.5})", sw + "}"), "/chip/host_cores");
  EXPECT_EQ(refused_at(chip, sw + "}"), "accepted");
  // A dtype the model does not rate is an error when priced, not another dtype's peak.
  const Machine m = parse_machine_text(R"({"format": "thunky.machine/1", "name": "m", "chip": )" + chip + R"(, "axes": {"*": )" + sw + "}}}");
  EXPECT_DOUBLE_EQ(m.peak(DType::f32), 1e12);
  try {
    m.peak(DType::bf16);
    FAIL() << "bf16 priced at f32's peak";
  } catch (const ThunkyError& e) {
    EXPECT_NE(std::string(e.what()).find("no peak_flops for bf16 (it rates f32)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace thunky::sim
