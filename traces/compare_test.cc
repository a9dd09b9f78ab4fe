#include "traces/compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <sstream>
#include <vector>

#include "traces/test_reports.h"

namespace thunky {
namespace {

using testing::op;
using testing::report;

TEST(Compare, WaitingAndTransferAreComparedApart) {
  // A 10 us shift: predicted to wait 4 us and move data for 6, measured to
  // wait 1 us and move data for 9. The rank's row gives wait 4 | 1 and
  // transfer 6 | 9, predicted then measured.
  OpRecord pred = op("/program/0", "collective_permute", 0, 10e-6), meas = pred;
  pred.transfer_start_s = 4e-6;
  meas.transfer_start_s = 1e-6;
  Report p = report("sim", {{pred}}), m = report("exec", {{meas}});
  const Comparison c = compare_reports(p, m);
  EXPECT_DOUBLE_EQ(c.ranks[0].predicted.wait_s, 4e-6);
  EXPECT_DOUBLE_EQ(c.ranks[0].measured.transfer_s, 9e-6);
  std::ostringstream os;
  print_comparison(p, m, c, os);
  EXPECT_NE(os.str().find("wait pred"), std::string::npos) << os.str();
  EXPECT_TRUE(testing::has_row(os.str(), {"4.000", "1.000", "6.000", "9.000"})) << os.str();
}

TEST(Compare, MatchesCommandsByRankAndIdAndMeasuresTheError) {
  // Predicted: a 2 us GEMM beside a 1 us shift (hidden), makespan 2 us.
  // Measured: the GEMM took 4 us and the shift 2 us, makespan 4 us; the
  // measured run also logged a copy the prediction lacks.
  Report p = report("sim", {{op("/program/0", "gemm", 0, 2e-6), op("/program/1", "collective_permute", 0, 1e-6)}});
  Report m = report("exec", {{op("/program/0", "gemm", 0, 4e-6), op("/program/1", "collective_permute", 0, 2e-6), op("/program/2", "copy", 4e-6, 4e-6)}});
  const Comparison c = compare_reports(p, m);
  // Makespan (2 - 4) / 4 = -50 %.
  EXPECT_DOUBLE_EQ(c.makespan_error, -0.5);
  // GEMM and shift match; the copy has no predicted twin.
  ASSERT_EQ(c.commands.size(), 2u);
  EXPECT_EQ(c.only_measured, 1u);
  EXPECT_EQ(c.only_predicted, 0u);
  // GEMM |2 - 4| / 4 = 0.5, shift |1 - 2| / 2 = 0.5: mean 0.5.
  EXPECT_DOUBLE_EQ(c.mean_command_error, 0.5);
  // Both runs hide the shift completely behind the GEMM.
  EXPECT_DOUBLE_EQ(c.ranks[0].predicted.overlap_fraction, 1.0);
  EXPECT_DOUBLE_EQ(c.ranks[0].measured.overlap_fraction, 1.0);
  std::ostringstream os;
  print_comparison(p, m, c, os);
  EXPECT_NE(os.str().find("makespan error -50.0%"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("/program/0"), std::string::npos);
  // p is a prediction for devices (no host_cores) and m a run on the cpu
  // backend (an exec report's default): said before the figures; a model
  // of the CPU host (host_cores) draws no note.
  const std::string note = "note: the prediction is for GPUs or TPUs and the measurement ran on a CPU (backend cpu)";
  EXPECT_LT(os.str().find(note), os.str().find("makespan error")) << os.str();
  std::ostringstream host;
  p.host_cores = 2;
  print_comparison(p, m, c, host);
  EXPECT_EQ(host.str().find("note:"), std::string::npos) << host.str();
}

TEST(Compare, PredictedInterferenceIsShownByRankAndCommand) {
  // Predicted: a GEMM of 30 us, 12 of them lost to a collective's CTAs
  // beside it, and the collective itself (nothing lost). The rank row
  // gives 12.000 us of kernels and 0.000 of collectives lost; the GEMM's
  // command row ends in its 12.000 us.
  OpRecord gemm = op("/program/0", "gemm", 0, 30e-6);
  gemm.interference_s = 12e-6;
  Report p = report("sim", {{gemm, op("/program/1", "all_gather", 0, 20e-6)}});
  Report m = report("exec", {{op("/program/0", "gemm", 0, 25e-6), op("/program/1", "all_gather", 0, 20e-6)}});
  std::ostringstream os;
  print_comparison(p, m, compare_reports(p, m), os);
  EXPECT_TRUE(testing::has_row(os.str(), {"0", "12.000", "0.000"})) << os.str();
  EXPECT_TRUE(testing::has_row(os.str(), {"/program/0", "gemm", "30.000", "25.000", "+20.0%", "12.000"})) << os.str();
  // Nothing lost, no interference columns.
  std::ostringstream solo;
  print_comparison(m, m, compare_reports(m, m), solo);
  EXPECT_EQ(solo.str().find("intf"), std::string::npos) << solo.str();
}

TEST(Compare, DifferentMeshesAreAnError) {
  Report p = report("sim", {{}, {}});
  Report m = report("exec", {{}});
  EXPECT_THROW(compare_reports(p, m), ThunkyError);
}

}  // namespace
}  // namespace thunky

namespace thunky {
namespace {

TEST(Recovery, FractionOfTheCommunicationCostHidden) {
  using testing::op;
  using testing::report;
  // blocking: AllGather 0-300 us, GEMM 300-400 us; overlapped: the same work
  // in 250 us; unsharded: the GEMM alone, 100 us.
  // (400 - 250) / (400 - 100) = 0.5.
  Report b = report("sim", {{op("/0", "all_gather", 0, 300e-6), op("/1", "gemm", 300e-6, 400e-6)}});
  Report o = report("sim", {{op("/0", "collective_permute", 0, 200e-6), op("/1", "gemm", 0, 250e-6)}});
  Report u = report("sim", {{op("/0", "gemm", 0, 100e-6)}});
  Recovery r = recovered_fraction(b, o, u);
  EXPECT_NEAR(r.blocking_s, 400e-6, 1e-12);
  ASSERT_TRUE(r.fraction);
  EXPECT_NEAR(*r.fraction, 0.5, 1e-9);
  std::ostringstream text;
  print_recovery(b, o, u, r, text);
  EXPECT_NE(text.str().find("recovered by overlap (blocking - overlapped): 150.000 us = 50.0% of it"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("interference"), std::string::npos) << text.str();
  // The overlapped GEMM lost 40 us of its 250 to the collective beside it:
  // said under the fraction.
  o.ranks[0].ops[1].interference_s = 40e-6;
  summarize(o);
  std::ostringstream lost;
  print_recovery(b, o, u, recovered_fraction(b, o, u), lost);
  EXPECT_NE(lost.str().find("lost to interference in the overlapped schedule (a rank's most): kernels 40.000 us, collectives 0.000 us"), std::string::npos)
      << lost.str();
  // A blocking schedule no slower than the unsharded one has nothing to recover.
  EXPECT_FALSE(recovered_fraction(u, o, u).fraction);
}

}  // namespace
}  // namespace thunky

#include "traces/svg.h"

namespace thunky {
namespace {

// How many times `needle` occurs in `hay`.
size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(CompareSvg, APredictedLaneAboveAMeasuredOneForEachRankAndStream) {
  // 2 ranks with a GEMM and a shift each. Rank 0's GEMM: predicted 2 us,
  // measured 2.2 us (-9.1%); rank 1's: predicted 2 us, measured 4 us
  // (-50%, off by more than 25%, so outlined in red).
  Report p = report("sim", {{op("/program/0", "gemm", 0, 2e-6), op("/program/1", "collective_permute", 0, 1e-6)},
                            {op("/program/0", "gemm", 0, 2e-6), op("/program/1", "collective_permute", 0, 1e-6)}});
  Report m = report("exec", {{op("/program/0", "gemm", 0, 2.2e-6), op("/program/1", "collective_permute", 0, 1e-6)},
                             {op("/program/0", "gemm", 0, 4e-6), op("/program/1", "collective_permute", 0, 1e-6)}});
  const std::string svg = comparison_svg(p, m);
  // 2 ranks x 2 streams: 4 predicted lanes, 4 measured ones.
  EXPECT_EQ(count(svg, "computation:0 predicted</text>"), 2u) << svg;
  EXPECT_EQ(count(svg, "communication:0 predicted</text>"), 2u);
  EXPECT_EQ(count(svg, ">measured</text>"), 4u + 1u);  // and the legend's entry
  // Every command, both bars, carries both times and the error.
  EXPECT_EQ(count(svg, "<title>/program/0 gemm\npredicted 0.00 - 2.00 us (2.00 us)\nmeasured 0.00 - 4.00 us (4.00 us)\nerror -50.00%</title>"), 2u) << svg;
  EXPECT_EQ(count(svg, "error -9.09%"), 2u);
  // Only rank 1's GEMM is off by more than 25%: one red outline (plus the legend's).
  EXPECT_EQ(count(svg, "stroke=\"#d62728\""), 2u);
  // One time axis for both: 0 to the longer makespan, 4 us.
  EXPECT_NE(svg.find(">4</text>"), std::string::npos);
  EXPECT_NE(svg.find("time (us)"), std::string::npos);
}

}  // namespace
}  // namespace thunky
