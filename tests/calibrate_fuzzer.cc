// libFuzzer target for the measurements thunky-calibrate reads and the
// machine files it writes: any bytes as nccl-tests output (read, then every
// row priced on a two-node NCCL axis and checked against its hosts), as a
// machine model (parsed, then a collective of each kind priced on each
// axis), and as NCCL_ALGO and NCCL_PROTO values. Built with
// -DTHUNKY_FUZZ=ON and clang; the corpus is seeded from tests/nccl/ and
// models/. Any crash, sanitizer report or hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "sim/calibrate.h"
#include "sim/machine.h"
#include "sim/nccl_model.h"

namespace {

const thunky::sim::AxisLinks& cluster() {
  static const thunky::sim::Machine m = thunky::sim::parse_machine_text(R"({"format": "thunky.machine/1", "name": "fuzz-cluster",
    "chip": {"peak_flops": {"bf16": 1e15}, "hbm_bandwidth": 3e12, "source": "fuzzer"},
    "axes": {"*": {"topology": "hierarchical", "group_size": 8, "switch": {"egress_bandwidth": 4.5e11, "latency_s": 5e-6},
                   "nic_bandwidth": 5e10, "nic_latency_s": 1e-5, "nccl": {"nvls_bandwidth": 4.8e11}}}})");
  return *m.axis("x");
}

void price_nccl_tests(const std::string& text) {
  try {
    const auto rows = thunky::sim::read_nccl_tests(text, "all_reduce_perf.txt");
    if (rows.size() > 256) return;
    for (const auto& r : rows) {
      (void)thunky::sim::model_seconds(cluster(), r);
      (void)thunky::sim::machine_mismatch(cluster(), r);
    }
  } catch (const thunky::ThunkyError&) {
  }
}

void price_machine(const std::string& text) {
  try {
    const thunky::sim::Machine m = thunky::sim::parse_machine_text(text);
    for (const auto& [name, axis] : m.axes) {
      if (!axis.nccl) continue;
      for (thunky::Op op : {thunky::Op::all_reduce, thunky::Op::all_gather, thunky::Op::reduce_scatter, thunky::Op::all_to_all})
        for (int64_t n : {2, 8, 16, 64})
          for (double bytes : {8.0, 1048576.0, 8589934592.0}) (void)thunky::sim::nccl_collective(op, axis, n, bytes);
      (void)thunky::sim::nccl_p2p(axis, axis.topology == thunky::sim::AxisLinks::Topology::hierarchical, 65536);
    }
  } catch (const thunky::ThunkyError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  price_nccl_tests(text);
  price_machine(text);
  std::string error;
  (void)thunky::sim::nccl_algo_setting(text, error);
  (void)thunky::sim::nccl_proto_setting(text, error);
  return 0;
}
