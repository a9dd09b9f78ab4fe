// Reading and writing NumPy .npy files (format versions 1-3, little endian).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace thunky {

struct NpyArray {
  // The file's element type, when thunky has it; empty for the raw-bits
  // types that only carry another dtype's bits (<u2, <u8, V2, ...).
  std::optional<DType> dtype;
  size_t item_size = 0;  // bytes an element, whatever the type
  std::string descr;     // as the header writes it ('<f4', '<u2')
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // row-major elements
};

// Throws ThunkyError (empty pointer) with a message naming the file. With
// header_only the data is checked to be all there but not read.
NpyArray read_npy(const std::string& path, bool header_only = false);
// bf16 and f8 are widened exactly to f32; other dtypes are written as themselves.
void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const uint8_t* data);

}  // namespace thunky
