#include "core/mesh.h"

#include <algorithm>
#include <array>
#include <set>

namespace thunky {

std::vector<int64_t> rank_coords(const Mesh& m, int64_t rank) {
  std::vector<int64_t> c(m.shape.size());
  for (int i = static_cast<int>(m.shape.size()) - 1; i >= 0; --i) {
    c[i] = rank % m.shape[i];
    rank /= m.shape[i];
  }
  return c;
}

int64_t rank_of(const Mesh& m, const std::vector<int64_t>& coords) {
  int64_t r = 0;
  for (size_t i = 0; i < m.shape.size(); ++i) r = r * m.shape[i] + coords[i];
  return r;
}

std::string rank_label(const Mesh& m, int64_t rank) {
  std::string s = "rank " + std::to_string(rank);
  if (m.axis_names.empty()) return s;
  auto c = rank_coords(m, rank);
  s += " (";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + m.axis_names[i] + "=" + std::to_string(c[i]);
  return s + ")";
}

Participants participants(const Mesh& m, int64_t rank, const std::vector<std::string>& axes,
                          const std::vector<std::vector<int64_t>>* groups, bool members) {
  // The collective's dimensions, each with its size, its stride in the
  // rank numbering and this rank's coordinate. Held on the stack for up to
  // eight axes: this runs for every collective the simulator starts.
  struct Dim {
    int axis;
    int64_t size, stride, coord;
  };
  std::array<Dim, 8> local;
  std::vector<Dim> spill;
  if (axes.size() > local.size()) spill.resize(axes.size());
  Dim* const dims = axes.size() > local.size() ? spill.data() : local.data();
  size_t nd = 0;
  for (const auto& a : axes) {
    auto d = m.axis(a);
    if (!d) throw ThunkyError("", "unknown mesh axis '" + a + "'");
    for (size_t k = 0; k < nd; ++k)
      if (dims[k].axis == *d) throw ThunkyError("", "axis '" + a + "' listed twice");
    int64_t stride = 1;
    for (size_t i = static_cast<size_t>(*d) + 1; i < m.shape.size(); ++i) stride *= m.shape[i];
    const int64_t size = m.shape[*d];
    dims[nd++] = {*d, size, stride, rank / stride % size};
  }
  int64_t n = 1, my_index = 0;
  // Global rank of combined index k (other coordinates as this rank's):
  // this rank with its coordinates along `dims` replaced, by strides.
  int64_t base = rank;
  for (size_t k = 0; k < nd; ++k) {
    n *= dims[k].size;
    my_index = my_index * dims[k].size + dims[k].coord;
    base -= dims[k].coord * dims[k].stride;
  }
  auto rank_at = [&](int64_t k) {
    int64_t r = base;
    for (size_t i = nd; i-- > 0;) {
      r += (k % dims[i].size) * dims[i].stride;
      k /= dims[i].size;
    }
    return static_cast<int>(r);
  };
  Participants p;
  if (!groups) {
    p.size = n;
    p.position = static_cast<int>(my_index);
    if (!members) return p;
    p.ranks.reserve(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) p.ranks.push_back(rank_at(k));
    return p;
  }
  std::set<int64_t> seen;
  size_t size = groups->empty() ? 0 : (*groups)[0].size();
  const std::vector<int64_t>* mine = nullptr;
  for (size_t g = 0; g < groups->size(); ++g) {
    const auto& grp = (*groups)[g];
    if (grp.size() != size || grp.empty())
      throw ThunkyError("", "groups must be non-empty and of equal size (group " + std::to_string(g) + " has " + std::to_string(grp.size()) + " members, group 0 has " + std::to_string(size) + ")");
    for (auto k : grp) {
      if (k < 0 || k >= n) throw ThunkyError("", "group member " + std::to_string(k) + " is not an index of an axis of size " + std::to_string(n));
      if (!seen.insert(k).second) throw ThunkyError("", "axis index " + std::to_string(k) + " appears in more than one group");
      if (k == my_index) mine = &grp;
    }
  }
  if (static_cast<int64_t>(seen.size()) != n)
    throw ThunkyError("", "groups cover " + std::to_string(seen.size()) + " of the " + std::to_string(n) + " axis indices; every index must be in exactly one group");
  for (size_t i = 0; i < mine->size(); ++i) {
    p.ranks.push_back(rank_at((*mine)[i]));
    if ((*mine)[i] == my_index) p.position = static_cast<int>(i);
  }
  p.size = static_cast<int64_t>(p.ranks.size());
  return p;
}

std::vector<int> launch_members(const Mesh& m, int64_t rank, const std::vector<const Command*>& members) {
  const size_t n = static_cast<size_t>(m.size());
  std::vector<char> in(n, 0);
  // covered[k][q]: q's participants in member k are already in (each
  // member's participants partition the mesh, so one visit per block).
  std::vector<std::vector<char>> covered(members.size(), std::vector<char>(n, 0));
  std::vector<int> out{static_cast<int>(rank)}, frontier{static_cast<int>(rank)};
  in[rank] = 1;
  while (!frontier.empty()) {
    const int q = frontier.back();
    frontier.pop_back();
    for (size_t k = 0; k < members.size(); ++k) {
      if (covered[k][q]) continue;
      for (int r : participants(m, q, collective_of(*members[k]).axis, collective_of(*members[k]).groups.get()).ranks) {
        covered[k][r] = 1;
        if (!in[r]) {
          in[r] = 1;
          out.push_back(r);
          frontier.push_back(r);
        }
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace thunky
