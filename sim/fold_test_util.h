// What the simulator's tests of folded ranks share: the bundled machine
// models, and the check that a folded prediction is every rank's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "sim/engine.h"

namespace thunky::sim {

inline Machine model(const std::string& name) {
  auto m = load_machine(name, THUNKY_SOURCE_DIR "/models");
  if (!m) ADD_FAILURE() << m.errors()[0].str();
  return m ? *m : Machine{};
}

// Folding must change nothing a user sees: every rank's commands at the
// same times, the same token edges, the same link utilisation and the same
// collective table as when every rank is simulated.
inline void expect_same_prediction(const Program& p, const Machine& m, const Decisions* d = nullptr) {
  auto folded = simulate(p, m, d);
  SimOptions every_rank;
  every_rank.fold_symmetric_ranks = false;
  auto every = simulate(p, m, d, every_rank);
  ASSERT_TRUE(folded.ok() && every.ok());
  const Report &a = folded->report, &b = every->report;
  EXPECT_NEAR(a.makespan_s, b.makespan_s, 1e-12 * b.makespan_s);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  auto by_start = [](std::vector<OpRecord> ops) {
    std::sort(ops.begin(), ops.end(), [](const OpRecord& x, const OpRecord& y) { return std::tie(x.start_s, x.id) < std::tie(y.start_s, y.id); });
    return ops;
  };
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const auto x = by_start(a.timeline(a.ranks[r]).ops), y = by_start(b.timeline(b.ranks[r]).ops);
    ASSERT_EQ(x.size(), y.size()) << "rank " << r;
    for (size_t k = 0; k < x.size(); ++k) {
      EXPECT_EQ(x[k].id, y[k].id) << "rank " << r;
      EXPECT_EQ(x[k].stream, y[k].stream) << x[k].id;
      EXPECT_NEAR(x[k].start_s, y[k].start_s, 1e-12 * b.makespan_s) << "rank " << r << " " << x[k].id;
      EXPECT_NEAR(x[k].end_s, y[k].end_s, 1e-12 * b.makespan_s) << "rank " << r << " " << x[k].id;
      EXPECT_EQ(x[k].bytes, y[k].bytes);
    }
    EXPECT_EQ(a.timeline(a.ranks[r]).flows.size(), b.timeline(b.ranks[r]).flows.size());
  }
  ASSERT_EQ(a.links.size(), b.links.size());
  for (size_t l = 0; l < a.links.size(); ++l) {
    EXPECT_EQ(a.links[l].name, b.links[l].name);
    EXPECT_EQ(a.links[l].rank, b.links[l].rank);
    ASSERT_EQ(a.links[l].samples.size(), b.links[l].samples.size()) << a.links[l].name;
    for (size_t k = 0; k < a.links[l].samples.size(); ++k) {
      EXPECT_NEAR(a.links[l].samples[k].first, b.links[l].samples[k].first, 1e-12 * b.makespan_s);
      EXPECT_NEAR(a.links[l].samples[k].second, b.links[l].samples[k].second, 1e-12);
    }
  }
  ASSERT_EQ(folded->collectives.size(), every->collectives.size());
  for (size_t k = 0; k < folded->collectives.size(); ++k) {
    EXPECT_EQ(folded->collectives[k].id, every->collectives[k].id);
    EXPECT_NEAR(folded->collectives[k].seconds, every->collectives[k].seconds, 1e-12 * b.makespan_s);
  }
}

}  // namespace thunky::sim
