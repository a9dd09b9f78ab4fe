#include "core/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

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

NpyArray read_npy(const std::string& path) {
  auto fail = [&](const std::string& what) -> NpyArray { throw ThunkyError("", "cannot read npy file '" + path + "': " + what); };
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
  if (header_len > (1u << 20)) return fail("header too large");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return fail("truncated header");
  std::smatch m;
  NpyArray a;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'"))) return fail("no descr in header");
  std::string descr = m[1];
  if (descr == "<u1" || descr == "|u1") descr = "|u1";
  if (descr == "<i1") descr = "|i1";
  bool found = false;
  for (const auto& d : kDescrs)
    if (descr == d.text) { a.dtype = d.dtype; found = true; }
  if (!found) return fail("unsupported dtype '" + descr + "'");
  if (std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*True"))) return fail("Fortran-ordered arrays are not supported");
  if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) return fail("no shape in header");
  std::string dims = m[1];
  std::regex num("\\d+");
  int64_t count = 1;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    int64_t d = std::stoll(it->str());
    if (d > (int64_t{1} << 40)) return fail("dimension too large");
    a.shape.push_back(d);
    count *= d;
    if (count > (int64_t{1} << 34)) return fail("array too large");
  }
  a.data.resize(static_cast<size_t>(count) * dtype_size(a.dtype));
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
  std::ofstream f(path, std::ios::binary);
  if (!f) throw ThunkyError("", "cannot write '" + path + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char l[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(l, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (out == dtype) {
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * dtype_size(dtype)));
  } else {
    std::vector<float> wide(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) wide[i] = static_cast<float>(load_as_double(data, dtype, i));
    f.write(reinterpret_cast<const char*>(wide.data()), static_cast<std::streamsize>(wide.size() * 4));
  }
  if (!f) throw ThunkyError("", "cannot write '" + path + "'");
}

}  // namespace thunky
