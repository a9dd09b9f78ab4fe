#include "core/ops/collective.h"

#include "core/ops/op_io.h"
#include "core/schedule.h"

namespace thunky {

namespace {
constexpr const char* kReductions = "sum, prod, min, max or mean";
}

void Collective::read_common(OpReader& r) {
  src = r.ref("src");
  dst = r.ref("dst");
  axis = r.names("axis");
  if (auto g = r.int_lists("groups", "expected a list of groups (lists of axis indices)")) groups = std::move(*g);
  ctas = r.int_or_none("ctas");
  if (ctas && (*ctas < 1 || *ctas > kMaxCtas)) r.fail("ctas", "expected a count of CTAs from 1 to " + std::to_string(kMaxCtas));
}
void Collective::write_common(json& j) const {
  j["src"] = ref_json(src);
  j["dst"] = ref_json(dst);
  j["axis"] = axis.size() == 1 ? json(axis[0]) : json(axis);
  if (groups) j["groups"] = *groups;
  if (ctas) j["ctas"] = *ctas;
}

void ReducingCollective::read_common(OpReader& r) {
  Collective::read_common(r);
  reduction = r.reduction("reduction", false, kReductions);
}
void ReducingCollective::write_common(json& j) const {
  Collective::write_common(j);
  j["reduction"] = reduction_name(reduction);
}

namespace {
// A collective with no fields of its own beyond its part's.
template <typename T>
T read_collective(OpReader& r) {
  T c;
  c.read_common(r);
  return c;
}
}  // namespace

AllReduce AllReduce::read(OpReader& r) { return read_collective<AllReduce>(r); }
AllGather AllGather::read(OpReader& r) { return read_collective<AllGather>(r); }
ReduceScatter ReduceScatter::read(OpReader& r) { return read_collective<ReduceScatter>(r); }
AllToAll AllToAll::read(OpReader& r) { return read_collective<AllToAll>(r); }

CollectivePermute CollectivePermute::read(OpReader& r) {
  CollectivePermute c;
  c.read_common(r);
  if (r.has("pairs") == r.has("shift")) r.fail("", "a collective_permute needs exactly one of 'pairs' or 'shift'");
  if (auto pairs = r.int_lists("pairs", "expected [[source, target], ...]")) {
    std::vector<std::pair<int64_t, int64_t>> ps;
    for (size_t i = 0; i < pairs->size(); ++i) {
      if ((*pairs)[i].size() != 2) r.fail("pairs", i, "expected [source, target]");
      ps.emplace_back((*pairs)[i][0], (*pairs)[i][1]);
    }
    c.pairs = std::move(ps);
  } else {
    c.shift = r.int_or_none("shift");
  }
  return c;
}
void CollectivePermute::write(json& j) const {
  write_common(j);
  if (pairs) {
    json ps = json::array();
    for (auto [s, t] : *pairs) ps.push_back({s, t});
    j["pairs"] = ps;
  } else {
    j["shift"] = *shift;
  }
}

CollectiveGroup CollectiveGroup::read(OpReader& r) { return CollectiveGroup{.body = r.block("body")}; }
void CollectiveGroup::write(json& j) const { j["body"] = block_json(body); }

}  // namespace thunky
