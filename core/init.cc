#include "core/init.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/mesh.h"

namespace thunky {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

double uniform01(uint64_t seed, uint64_t index) {
  uint64_t h = splitmix64(splitmix64(seed) ^ (index * 0xd1b54a32d192ed03ull));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

ShardLayout shard_layout(const Mesh& m, const GlobalLayout& g, int64_t rank) {
  ShardLayout s;
  auto coords = rank_coords(m, rank);
  for (size_t d = 0; d < g.shape.size(); ++d) {
    int64_t parts = 1, index = 0;
    for (const auto& a : g.spec[d]) {
      auto ax = m.axis(a);
      if (!ax) throw ThunkyError("", "spec names unknown mesh axis '" + a + "'");
      parts *= m.shape[*ax];
      index = index * m.shape[*ax] + coords[*ax];
    }
    if (g.shape[d] % parts != 0)
      throw ThunkyError("", "global dimension " + std::to_string(d) + " of size " + std::to_string(g.shape[d]) + " does not split into " + std::to_string(parts) + " shards");
    int64_t local = g.shape[d] / parts;
    s.local_shape.push_back(local);
    s.start.push_back(index * local);
  }
  return s;
}

namespace {
// Reads buffer b's npy init (its header alone with header_only) and checks
// its shape and element type against the buffer and the init's "dtype".
NpyArray read_npy_init(const Program& p, const Buffer& b, bool header_only) {
  namespace fs = std::filesystem;
  const fs::path base = fs::path(p.file).parent_path();
  const fs::path path = fs::path(b.init.path).is_absolute() ? fs::path(b.init.path) : base / b.init.path;
  try {
    NpyArray a = read_npy(path.string(), header_only);
    const auto& want = b.global ? b.global->shape : b.shape;
    if (a.shape != want)
      throw ThunkyError("", "npy file '" + path.string() + "' has shape " + shape_str(a.shape) + ", the buffer's " + (b.global ? "global " : "") + "shape is " + shape_str(want));
    if (b.init.bits) {
      if (a.item_size != dtype_size(*b.init.bits))
        throw ThunkyError("", "npy file '" + path.string() + "' holds elements of " + std::to_string(a.item_size) + " bytes ('" + a.descr + "'), not the bits of " +
                                  std::string(dtype_name(*b.init.bits)) + " (" + std::to_string(dtype_size(*b.init.bits)) + " bytes)");
      a.dtype = b.init.bits;
    } else if (!a.dtype) {
      throw ThunkyError("", "npy file '" + path.string() + "' has dtype '" + a.descr + "', which thunky has not: if it holds another dtype's raw bits (bf16 as <u2), name that dtype in the init's \"dtype\"");
    }
    return a;
  } catch (const ThunkyError& e) {
    throw ThunkyError(b.pointer + "/init/path", e.what());
  }
}
}  // namespace

void check_npy_inits(const Program& p) {
  for (const auto& b : p.buffers)
    if (b.init.kind == Init::Kind::npy) read_npy_init(p, b, true);
}

std::map<std::string, NpyArray> load_npy_inits(const Program& p) {
  std::map<std::string, NpyArray> out;
  for (const auto& b : p.buffers)
    if (b.init.kind == Init::Kind::npy && !out.count(b.name)) out.emplace(b.name, read_npy_init(p, b, false));
  return out;
}

void init_buffer(const Program& p, const Buffer& b, int64_t rank, const std::map<std::string, NpyArray>& npy, uint8_t* dst) {
  const int64_t n = b.count();
  const Init& in = b.init;
  // Global flat index of local element i.
  std::vector<int64_t> gshape = b.shape, start(b.shape.size(), 0);
  if (b.global) {
    gshape = b.global->shape;
    start = shard_layout(p.mesh, *b.global, rank).start;
  }
  const size_t rank_n = b.shape.size();
  std::vector<int64_t> idx(rank_n, 0);
  auto global_index = [&]() {
    int64_t g = 0;
    for (size_t d = 0; d < rank_n; ++d) g = g * gshape[d] + start[d] + idx[d];
    return g;
  };
  auto advance = [&]() {
    for (int d = static_cast<int>(rank_n) - 1; d >= 0; --d) {
      if (++idx[d] < b.shape[d]) return;
      idx[d] = 0;
    }
  };
  double axis_value = 0;
  if (in.kind == Init::Kind::axis_index) {
    auto ax = p.mesh.axis(in.axis);
    if (!ax) throw ThunkyError(b.pointer + "/init/axis", "unknown mesh axis '" + in.axis + "'");
    axis_value = static_cast<double>(rank_coords(p.mesh, rank)[*ax]);
  }
  const NpyArray* arr = nullptr;
  if (in.kind == Init::Kind::npy) {
    auto it = npy.find(b.name);
    if (it == npy.end()) throw ThunkyError(b.pointer + "/init/path", "npy file was not loaded");
    arr = &it->second;
    if (arr->dtype == b.dtype) {  // the same type: its bytes, exactly (s64 past 2^53, NaN payloads)
      // A row of the last dimension at a time: a shard's rows are contiguous in the global array.
      const size_t size = dtype_size(b.dtype);
      const int64_t row = rank_n ? b.shape.back() : 1;
      for (int64_t i = 0; i < n; i += row) {
        std::memcpy(dst + static_cast<size_t>(i) * size, arr->data.data() + static_cast<size_t>(global_index()) * size, static_cast<size_t>(row) * size);
        if (rank_n) idx.back() = row - 1;  // the row's last element: advance() moves to the next row
        advance();
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i, advance()) {
    double v = 0;
    switch (in.kind) {
      case Init::Kind::none:
      case Init::Kind::zeros: v = 0; break;
      case Init::Kind::ones: v = 1; break;
      case Init::Kind::constant: v = in.value; break;
      case Init::Kind::axis_index: v = axis_value; break;
      case Init::Kind::iota: v = static_cast<double>(global_index()); break;
      case Init::Kind::values: v = in.values[static_cast<size_t>(global_index())]; break;
      case Init::Kind::uniform: v = in.low + (in.high - in.low) * uniform01(in.seed, static_cast<uint64_t>(global_index())); break;
      case Init::Kind::normal: {
        uint64_t g = static_cast<uint64_t>(global_index());
        double u1 = uniform01(in.seed, 2 * g), u2 = uniform01(in.seed, 2 * g + 1);
        v = std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
        break;
      }
      case Init::Kind::npy: v = load_as_double(arr->data.data(), *arr->dtype, static_cast<size_t>(global_index())); break;
    }
    store_from_double(dst, b.dtype, static_cast<size_t>(i), v);
  }
}

}  // namespace thunky
