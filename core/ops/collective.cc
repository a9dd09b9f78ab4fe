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
}
void Collective::write_common(json& j) const {
  j["src"] = ref_json(src);
  j["dst"] = ref_json(dst);
  j["axis"] = axis.size() == 1 ? json(axis[0]) : json(axis);
  if (groups) j["groups"] = *groups;
}

AllReduce AllReduce::read(OpReader& r) {
  AllReduce c;
  c.read_common(r);
  c.reduction = r.reduction("reduction", false, kReductions);
  return c;
}
void AllReduce::write(json& j) const {
  write_common(j);
  j["reduction"] = reduction_name(reduction);
}

AllGather AllGather::read(OpReader& r) {
  AllGather c;
  c.read_common(r);
  return c;
}
void AllGather::write(json& j) const { write_common(j); }

ReduceScatter ReduceScatter::read(OpReader& r) {
  ReduceScatter c;
  c.read_common(r);
  c.reduction = r.reduction("reduction", false, kReductions);
  return c;
}
void ReduceScatter::write(json& j) const {
  write_common(j);
  j["reduction"] = reduction_name(reduction);
}

AllToAll AllToAll::read(OpReader& r) {
  AllToAll c;
  c.read_common(r);
  return c;
}
void AllToAll::write(json& j) const { write_common(j); }

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
