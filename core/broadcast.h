// How a map input broadcasts to its output by numpy's rules: shapes are
// aligned at their last dimension, and each input dimension is 1 (repeated
// along out's) or out's own; an input may have fewer dimensions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace thunky {

// For each of out's dimensions, the step in the input's elements (row-major)
// as that dimension's index grows: 0 where the input repeats. nullopt when
// `in` does not broadcast to `out`.
inline std::optional<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return std::nullopt;
  std::vector<int64_t> stride(out.size(), 0);
  int64_t step = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t di = in.size() - 1 - k, d = out.size() - 1 - k;
    if (in[di] != out[d] && in[di] != 1) return std::nullopt;
    stride[d] = in[di] == 1 ? 0 : step;
    step *= in[di];
  }
  return stride;
}

}  // namespace thunky
