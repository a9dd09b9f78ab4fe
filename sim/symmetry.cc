#include "sim/symmetry.h"

#include <functional>
#include <memory>
#include <map>
#include <set>

#include "core/accounting.h"
#include "core/control_flow.h"
#include "core/mesh.h"

namespace thunky::sim {

RankClasses RankClasses::none(const Mesh& mesh, const std::string& why) {
  RankClasses c;
  c.shape = mesh.shape;
  c.step = mesh.shape;
  c.why.assign(mesh.shape.size(), why);
  return c;
}

int64_t RankClasses::count() const {
  int64_t n = 1;
  for (int64_t s : step) n *= s;
  return n;
}

int64_t RankClasses::ranks() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t RankClasses::representative(int64_t rank) const {
  int64_t rep = 0, stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    rep += (rank / stride % shape[d]) % step[d] * stride;
    stride *= shape[d];
  }
  return rep;
}

std::vector<int64_t> RankClasses::representatives() const {
  std::vector<int64_t> reps;
  reps.reserve(static_cast<size_t>(count()));
  for (int64_t r = 0; r < ranks(); ++r)
    if (representative(r) == r) reps.push_back(r);
  return reps;
}

std::string RankClasses::label(int64_t rep, const std::vector<std::string>& axis_names) const {
  std::vector<int64_t> coords(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = rep % shape[d];
    rep /= shape[d];
  }
  std::string s;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!s.empty()) s += ", ";
    s += axis_names[d] + "=";
    if (step[d] == shape[d]) s += std::to_string(coords[d]);  // (an axis of one rank too)
    else if (step[d] == 1) s += "*";
    else s += std::to_string(coords[d]) + " mod " + std::to_string(step[d]);
  }
  return s;
}

std::string RankClasses::explain(const std::vector<std::string>& axis_names) const {
  std::string s = std::to_string(ranks()) + " ranks in " + std::to_string(count()) + (count() == 1 ? " class" : " classes") + " of " +
                  std::to_string(class_size()) + (class_size() == 1 ? " rank" : " ranks") + ", one rank of each simulated\n";
  for (size_t d = 0; d < shape.size(); ++d) {
    s += "axis " + axis_names[d] + " (" + std::to_string(shape[d]) + "): ";
    if (step[d] == 1) s += "folded whole";
    else if (step[d] == shape[d]) s += "not folded: " + why[d];
    else s += "folded in part, ranks " + std::to_string(step[d]) + " apart share a timeline: nearer ones do not, as " + why[d];
    s += "\n";
  }
  return s;
}

namespace {

// A translation by `by` along dimension `dim` of an index space of `sizes`
// (row-major, the first slowest): a mesh, or a collective's axes.
int64_t shifted(int64_t k, const std::vector<int64_t>& sizes, size_t dim, int64_t by) {
  int64_t inner = 1;
  for (size_t i = dim + 1; i < sizes.size(); ++i) inner *= sizes[i];
  const int64_t c = k / inner % sizes[dim];
  return k + ((c + by) % sizes[dim] - c) * inner;
}

// One thing a translation along an axis must respect, other than the
// links: true when translating by `by` maps it onto itself.
struct Test {
  std::string what;  // said when it fails: the command and why
  std::function<bool(int64_t by)> holds;
};

void names_in(const Expr* e, std::vector<std::string>& out) {
  if (!e) return;
  if (e->kind == Expr::Kind::name) out.push_back(e->text);
  for (const auto& a : e->args) names_in(a.get(), out);
}

// How a collective's ranks launch it, in its index space (its axes'
// positions, row-major): the groups that launch (those with a member whose
// coordinates the enclosing rank-decided branches allow; all of them
// outside such branches) and, for a permute, the edges its pairs or shift
// make within them. A translation must map both onto themselves.
struct Launches {
  std::vector<int64_t> sizes;                 // of the collective's axes
  std::vector<std::vector<int64_t>> groups;   // that launch
  std::set<std::pair<int64_t, int64_t>> edges;  // a permute's sends
  std::vector<int64_t> group_of;                // by position: its launching group, or -1 (index_groups)
  void index_groups() {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    group_of.assign(static_cast<size_t>(n), -1);
    for (size_t g = 0; g < groups.size(); ++g)
      for (int64_t k : groups[g]) group_of[static_cast<size_t>(k)] = static_cast<int64_t>(g);
  }
  bool holds(size_t dim, int64_t by) const {
    for (const auto& g : groups) {
      const int64_t h = group_of[static_cast<size_t>(shifted(g.front(), sizes, dim, by))];
      if (h < 0 || groups[static_cast<size_t>(h)].size() != g.size()) return false;
      for (int64_t k : g)
        if (group_of[static_cast<size_t>(shifted(k, sizes, dim, by))] != h) return false;
    }
    for (const auto& [s, t] : edges)
      if (!edges.count({shifted(s, sizes, dim, by), shifted(t, sizes, dim, by)})) return false;
    return true;
  }
};

}  // namespace

RankClasses rank_classes(const Program& p, const Machine& m, const Decisions* decisions) {
  const Mesh& mesh = p.mesh;
  const size_t dims = mesh.shape.size();
  if (m.host_cores > 0) return RankClasses::none(mesh, "the machine's ranks share a host's cores (chip.host_cores)");
  std::vector<std::vector<Test>> tests(dims);
  std::vector<std::string> broken(dims);  // an axis no translation respects, and why
  std::vector<std::string> used(dims);    // a collective over the axis (its links matter)
  std::vector<bool> permuted(dims, false);
  auto dim_of = [&](const std::string& name) { return mesh.axis(name); };
  const std::vector<bool> written = written_buffers(p);
  auto about = [](const Command& c) { return c.pointer + " (" + std::string(op_name(c.op())) + ")"; };
  // Inside a branch decided by an axis index, only the coordinates that
  // take it issue its commands: per mesh axis, the range they lie in.
  std::vector<std::pair<int64_t, int64_t>> pins(dims);
  for (size_t d = 0; d < dims; ++d) pins[d] = {0, mesh.shape[d] - 1};
  std::function<void(const Block&)> visit = [&](const Block& block) {
   for (const Command& c : block) {
    // A view sized by an axis index gives the ranks along it different work.
    for_each_use(c, [&](RefUse u) {
      if (!size_depends_on_rank(*u.ref)) return;
      std::vector<std::string> names;
      for (const auto& g : u.ref->syntax->groups)
        for (const auto& it : g) names_in(it.a.get(), names), names_in(it.b.get(), names);
      for (const auto& n : names)
        if (auto d = dim_of(n); d && broken[*d].empty()) broken[*d] = about(c) + " sizes a view by the axis index";
    });
    // A branch taken by the axis index differs along the axis; inside it,
    // only the coordinates that take it issue.
    if (auto d = deciding_axis(p, c, written)) {
      if (broken[*d].empty()) broken[*d] = about(c) + " takes its branch by the axis index";
      const auto outer = pins[*d];
      const int64_t n = mesh.shape[*d];
      int64_t k = 0;
      for_each_sub_block(c, [&](const Block& sub) {
        // The coordinates whose value takes branch k (take_branch's rule).
        int64_t lo = n, hi = -1;
        for (int64_t x = outer.first; x <= outer.second; ++x)
          if (branch_at(c, x) == (c.op() == Op::cond ? 1 - k : k)) lo = std::min(lo, x), hi = std::max(hi, x);
        ++k;
        if (lo > hi) return;  // no rank takes it
        pins[*d] = {lo, hi};
        visit(sub);
        pins[*d] = outer;
      });
      continue;
    }
    for_each_sub_block(c, [&](const Block& sub) { visit(sub); });
    if (!is_collective(c.op())) continue;
    const Collective& k = collective_of(c);
    std::vector<size_t> axes;
    std::vector<int64_t> sizes;
    for (const auto& a : k.axis)
      if (auto d = dim_of(a)) axes.push_back(*d), sizes.push_back(mesh.shape[*d]);
    for (size_t d : axes)
      if (used[d].empty()) used[d] = about(c);
    const CollectivePermute* permute = c.get_if<CollectivePermute>();
    for (size_t d : axes) permuted[d] = permuted[d] || permute;
    // A collective over whole axes, or a shift along one, maps onto itself
    // under any translation; groups and pairs, or a shift over the
    // combined index of several axes, need the check.
    if (!k.groups && !(permute && (permute->pairs || axes.size() > 1))) continue;
    auto l = std::make_shared<Launches>();
    l->sizes = sizes;
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    auto allowed = [&](int64_t pos) {  // the position's coordinates within the pins
      for (size_t j = 0; j < axes.size(); ++j) {
        int64_t inner = 1;
        for (size_t i = j + 1; i < sizes.size(); ++i) inner *= sizes[i];
        const int64_t x = pos / inner % sizes[j];
        if (x < pins[axes[j]].first || x > pins[axes[j]].second) return false;
      }
      return true;
    };
    if (k.groups) {
      for (const auto& g : *k.groups)
        if (std::any_of(g.begin(), g.end(), allowed)) l->groups.push_back(g);
    } else {
      l->groups.emplace_back();
      for (int64_t pos = 0; pos < n; ++pos) l->groups.back().push_back(pos);
    }
    if (permute)
      for (const auto& g : l->groups) {
        const int64_t size = static_cast<int64_t>(g.size());
        if (permute->pairs) {
          for (auto [s, t] : *permute->pairs)
            if (s >= 0 && t >= 0 && s < size && t < size) l->edges.insert({g[static_cast<size_t>(s)], g[static_cast<size_t>(t)]});
        } else {
          for (int64_t s = 0; s < size; ++s) l->edges.insert({g[static_cast<size_t>(s)], g[static_cast<size_t>(floor_mod(s + permute->shift.value_or(0), size))]});
        }
      }
    l->index_groups();
    for (size_t j = 0; j < axes.size(); ++j)
      tests[axes[j]].push_back({about(c) + (permute ? ": its pairs (or shift) and groups do not map onto themselves" : ": its groups do not map onto groups"),
                                [l, j](int64_t by) { return l->holds(j, by); }});
   }
  };
  visit(p.program);
  // The control-flow decisions of the functional run: equal along a
  // translation where each rank's equal its image's.
  std::vector<int> decided;
  if (decisions && !decisions->empty()) {
    std::map<const std::map<std::string, std::vector<int64_t>>*, int, bool (*)(const std::map<std::string, std::vector<int64_t>>*, const std::map<std::string, std::vector<int64_t>>*)>
        ids([](const auto* a, const auto* b) { return *a < *b; });
    for (const auto& per : *decisions) decided.push_back(ids.emplace(&per, static_cast<int>(ids.size())).first->second);
  }
  RankClasses classes = RankClasses::none(mesh, "");
  for (size_t d = 0; d < dims; ++d) {
    const int64_t n = mesh.shape[d];
    std::string& why = classes.why[d];
    if (n == 1) {
      classes.step[d] = 1;
      continue;
    }
    if (!broken[d].empty()) {
      why = broken[d];
      continue;
    }
    const AxisLinks* a = m.axis(mesh.axis_names[d]);
    if (!used[d].empty() && !a) {
      why = "the machine models no axis '" + mesh.axis_names[d] + "'";
      continue;
    }
    if (!used[d].empty() && a->topology == AxisLinks::Topology::ring && !a->wraparound) {
      why = "its links are a line (no wrap-around) and " + used[d] + " communicates over it";
      continue;
    }
    // Past one node, a shift crosses nodes at some ranks only: whole nodes translate.
    const int64_t unit = a && permuted[d] && a->topology == AxisLinks::Topology::hierarchical && n > a->group_size ? a->group_size : 1;
    auto fails = [&](int64_t by) -> std::string {
      if (by % unit != 0) return "its shifts cross nodes (groups of " + std::to_string(unit) + ") at some ranks only";
      for (const Test& t : tests[d])
        if (!t.holds(by)) return t.what;
      if (!decided.empty())
        for (int64_t r = 0; r < mesh.size(); ++r)
          if (decided[static_cast<size_t>(r)] != decided[static_cast<size_t>(shifted(r, mesh.shape, d, by))])
            return "the functional run decides control flow differently along it (" + rank_label(mesh, r) + " and " + rank_label(mesh, shifted(r, mesh.shape, d, by)) + ")";
      return "";
    };
    why = fails(1);
    for (int64_t by = 1; by < n; ++by)
      if (n % by == 0 && (by == 1 ? why.empty() : fails(by).empty())) {
        classes.step[d] = by;
        break;
      }
  }
  return classes;
}

}  // namespace thunky::sim
