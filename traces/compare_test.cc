#include "traces/compare.h"

#include <gtest/gtest.h>

#include <sstream>

namespace thunky {
namespace {

Report report(const std::string& source, std::vector<std::vector<OpRecord>> ranks) {
  Report r;
  r.source = source;
  r.schedule = "s";
  r.axis_names = {"x"};
  r.mesh_shape = {static_cast<int64_t>(ranks.size())};
  for (size_t k = 0; k < ranks.size(); ++k) {
    RankReport rr;
    rr.rank = static_cast<int64_t>(k);
    rr.coords = {static_cast<int64_t>(k)};
    rr.ops = std::move(ranks[k]);
    r.ranks.push_back(std::move(rr));
  }
  summarize(r);
  return r;
}

OpRecord op(const std::string& id, const std::string& kind, double start, double end) {
  OpRecord o;
  o.id = id;
  o.op = kind;
  o.stream = kind == "gemm" ? "computation:0" : "communication:0";
  o.start_s = start;
  o.end_s = end;
  return o;
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
}

TEST(Compare, DifferentMeshesAreAnError) {
  Report p = report("sim", {{}, {}});
  Report m = report("exec", {{}});
  EXPECT_THROW(compare_reports(p, m), ThunkyError);
}

}  // namespace
}  // namespace thunky
