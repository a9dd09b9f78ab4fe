// Reading and writing NumPy .npy files (format versions 1-3, little endian).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace thunky {

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // row-major elements of dtype
};

// Throws ThunkyError (empty pointer) with a message naming the file.
NpyArray read_npy(const std::string& path);
// bf16 and f8 are widened exactly to f32; other dtypes are written as themselves.
void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const uint8_t* data);

}  // namespace thunky
