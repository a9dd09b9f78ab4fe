#include <cstring>

#include "core/init.h"
#include "exec/backend.h"

namespace thunky {

Expected<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda")
    return std::vector<Diagnostic>{{ErrorKind::input, "", "", "this build of thunky has no CUDA backend (configure with a CUDA toolkit present); use --backend cpu"}};
  return std::vector<Diagnostic>{{ErrorKind::input, "", "", "unknown backend '" + name + "' (expected cpu or cuda)"}};
}

std::vector<uint8_t> gather_global(const Program& p, int buffer, const ExecResult& r) {
  const Buffer& b = p.buffers[buffer];
  const size_t es = dtype_size(b.dtype);
  const auto& gshape = b.global->shape;
  int64_t total = 1;
  for (auto d : gshape) total *= d;
  std::vector<uint8_t> out(static_cast<size_t>(total) * es, 0);
  const size_t nd = gshape.size();
  for (int64_t rank = 0; rank < p.mesh.size(); ++rank) {
    ShardLayout l = shard_layout(p.mesh, *b.global, rank);
    const auto& src = r.memory[rank][buffer];
    std::vector<int64_t> idx(nd, 0);
    const int64_t n = b.count();
    // Copy row by row (the last dimension is contiguous in both).
    const int64_t row = nd ? b.shape[nd - 1] : 1;
    for (int64_t i = 0; i < n; i += row) {
      int64_t g = 0;
      for (size_t d = 0; d < nd; ++d) g = g * gshape[d] + l.start[d] + idx[d];
      std::memcpy(out.data() + g * es, src.data() + i * es, row * es);
      for (int d = static_cast<int>(nd) - 2; d >= 0; --d) {
        if (++idx[d] < b.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

}  // namespace thunky
