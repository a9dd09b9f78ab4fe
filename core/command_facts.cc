#include "core/command_facts.h"

#include <algorithm>


namespace thunky {

std::vector<std::pair<int64_t, int64_t>> permute_pairs(const Command& c, int64_t n) {
  if (const auto& given = c.as<CollectivePermute>().pairs) return *given;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  pairs.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pairs.emplace_back(i, shift_target(c, i, n));
  return pairs;
}

std::string collective_signature(const Program& p, const Command& c, const View& src, const View& dst, int64_t n) {
  auto view = [&](const View& v) { return std::string(dtype_name(v.dtype)) + shape_str(v.shape); };
  std::string s(op_name(c.op()));
  // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) of " " + std::string.
  s += ' ';
  s += view(src);
  s += "->";
  s += view(dst);
  if (c.op() == Op::all_reduce || c.op() == Op::reduce_scatter) {
    s += ' ';
    s += reduction_name(reduction_of(c));
  }
  if (c.op() == Op::collective_permute) {
    auto pairs = permute_pairs(c, n);
    std::sort(pairs.begin(), pairs.end());
    s += " pairs";
    for (auto [a, b] : pairs) {
      s += ' ';
      s += std::to_string(a);
      s += '>';
      s += std::to_string(b);
    }
  }
  return s;
}

}  // namespace thunky
