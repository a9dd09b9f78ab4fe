#include "core/npy.h"

#include <cstring>
#include <fstream>
#include <filesystem>
#include <optional>

#include "core/files.h"
#include "core/status.h"

namespace thunky {

namespace {
struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"<f8", DType::f64}, {"<f4", DType::f32}, {"<f2", DType::f16}, {"<i8", DType::s64},
                             {"<i4", DType::s32}, {"<i2", DType::s16}, {"|i1", DType::s8},  {"<u4", DType::u32},
                             {"|u1", DType::u8},  {"|b1", DType::boolean}};
}  // namespace

NpyArray read_npy(const std::string& path, bool header_only) {
  auto fail = [&](const std::string& what) -> NpyArray { throw ThunkyError("", "cannot read npy file '" + path + "': " + what); };
  if (auto why = check_input_file(path); !why.empty()) return fail("it " + why);
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail("cannot open it");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return fail("not an .npy file");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint8_t l[2];
    if (!f.read(reinterpret_cast<char*>(l), 2)) return fail("truncated header");
    header_len = l[0] | (l[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    uint8_t l[4];
    if (!f.read(reinterpret_cast<char*>(l), 4)) return fail("truncated header");
    header_len = l[0] | (l[1] << 8) | (l[2] << 16) | (static_cast<uint32_t>(l[3]) << 24);
  } else {
    return fail("unsupported format version " + std::to_string(magic[6]));
  }
  // Real headers are a few hundred bytes (numpy pads them to 64).
  if (header_len > (1u << 16)) return fail("header too large (" + std::to_string(header_len) + " bytes; at most 65536)");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return fail("truncated header");
  NpyArray a;
  // The header is a Python dict literal; its three keys are read by hand
  // (no regular expressions: a long header must cost no deep recursion).
  auto value_of = [&](const std::string& key) -> std::optional<size_t> {
    const size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) return std::nullopt;
    size_t i = header.find(':', k);
    if (i == std::string::npos) return std::nullopt;
    ++i;
    while (i < header.size() && header[i] == ' ') ++i;
    return i;
  };
  const auto d = value_of("descr");
  if (!d || *d >= header.size() || header[*d] != '\'') return fail("no descr in header");
  const size_t d_end = header.find('\'', *d + 1);
  if (d_end == std::string::npos) return fail("no descr in header");
  a.descr = header.substr(*d + 1, d_end - *d - 1);
  // '<' or '|' (or '=' on this little-endian host), a kind letter, a size in bytes.
  const std::string& t = a.descr;
  if (t.size() < 3 || (t[0] != '<' && t[0] != '|' && t[0] != '=')) return fail("unsupported dtype '" + t + "' (big-endian or structured)");
  size_t item = 0;
  for (size_t i = 2; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9' || item > 64) return fail("unsupported dtype '" + t + "'");
    item = item * 10 + static_cast<size_t>(t[i] - '0');
  }
  if (item == 0 || item > 16 || std::string("fiubV").find(t[1]) == std::string::npos) return fail("unsupported dtype '" + t + "'");
  a.item_size = item;
  std::string canonical = t;
  canonical[0] = item == 1 ? '|' : '<';
  for (const auto& e : kDescrs)
    if (canonical == e.text) a.dtype = e.dtype;
  if (const auto fo = value_of("fortran_order"); fo && header.compare(*fo, 4, "True") == 0) return fail("Fortran-ordered arrays are not supported");
  const auto sh = value_of("shape");
  if (!sh || *sh >= header.size() || header[*sh] != '(') return fail("no shape in header");
  const size_t sh_end = header.find(')', *sh);
  if (sh_end == std::string::npos) return fail("no shape in header");
  int64_t count = 1;
  for (size_t i = *sh + 1; i < sh_end;) {
    const char c = header[i];
    if (c == ' ' || c == ',') { ++i; continue; }
    if (c < '0' || c > '9') return fail("shape holds '" + std::string(1, c) + "': dimensions are non-negative integers");
    int64_t dim = 0;
    while (i < sh_end && header[i] >= '0' && header[i] <= '9') {
      dim = dim * 10 + (header[i] - '0');
      if (dim > (int64_t{1} << 40)) return fail("dimension too large");
      ++i;
    }
    a.shape.push_back(dim);
    count *= dim;
    if (count > (int64_t{1} << 34)) return fail("array too large");
  }
  // The data must be there before memory is set aside for it.
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  const uint64_t data_at = static_cast<uint64_t>(f.tellg());
  const uint64_t want = static_cast<uint64_t>(count) * a.item_size;
  if (!ec && file_bytes < data_at + want) return fail("file shorter than its shape says (" + std::to_string(want) + " bytes of data, " + std::to_string(file_bytes - data_at) + " present)");
  if (header_only) return a;
  a.data.resize(static_cast<size_t>(want));
  if (!f.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(a.data.size())))
    return fail("file shorter than its shape says");
  return a;
}

void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const uint8_t* data) {
  int64_t count = 1;
  for (auto d : shape) count *= d;
  DType out = dtype;
  if (dtype == DType::bf16 || dtype == DType::f8e4m3 || dtype == DType::f8e5m2) out = DType::f32;
  const char* descr = "<f4";
  for (const auto& d : kDescrs)
    if (d.dtype == out) descr = d.text;
  std::string shape_s = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_s += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  shape_s += ")";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape_s + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const std::string error = write_output_file(
      path,
      [&](std::ostream& f) {
        f.write("\x93NUMPY\x01\x00", 8);
        const uint16_t len = static_cast<uint16_t>(header.size());
        const char l[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
        f.write(l, 2);
        f.write(header.data(), static_cast<std::streamsize>(header.size()));
        if (out == dtype) {
          f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * dtype_size(dtype)));
        } else {
          std::vector<float> wide(static_cast<size_t>(count));
          for (int64_t i = 0; i < count; ++i) wide[i] = static_cast<float>(load_as_double(data, dtype, i));
          f.write(reinterpret_cast<const char*>(wide.data()), static_cast<std::streamsize>(wide.size() * 4));
        }
      },
      true);
  if (!error.empty()) throw ThunkyError("", error);
}

}  // namespace thunky
