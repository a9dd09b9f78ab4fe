// The device code of the cuda backend, as CUDA C++ source text that NVRTC
// compiles at initialise: one kernel per distinct map expression (with its
// input and output dtypes), one per reduce and collective-reduction
// signature, and a small support module (fills, the `kernel` stand-in,
// graph conditionals). Every kernel computes as the cpu backend does:
// values widened to double, the same integer and float semantics, and
// stores that round and wrap exactly as core/dtype.cc's, so both backends
// give the same bits. Generating the text needs no CUDA headers; it is
// tested (and compiled to PTX) on machines without a GPU.
//
// Kernel parameters are one struct of 8-byte fields passed by value; the
// *_params functions below write the matching bytes on the host.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/reduction.h"
#include "core/expr.h"

namespace thunky::cuda {

struct KernelSource {
  std::string entry;  // the extern "C" __global__ function to launch
  std::string code;   // the whole translation unit (the cache key)
};

// A map input: its dtype and whether it is one element, broadcast.
struct MapOperand {
  std::string name;
  DType dtype = DType::f32;
  bool scalar = false;
};

// out[i] = expr(inputs...[i]) for i < n. Mesh axis names in the expression
// are kernel parameters (one compiled kernel serves every rank).
// Parameters: in_0 .. in_{k-1}, out, n, axis_0 .. axis_{a-1}.
// Throws ThunkyError on a name that is neither an input nor an axis.
KernelSource map_kernel(const Expr& expr, const std::vector<MapOperand>& inputs, const std::vector<std::string>& axis_names,
                        DType out);
std::vector<uint8_t> map_params(const std::vector<const void*>& inputs, void* out, int64_t n, const std::vector<int64_t>& axis_values);

// Reduction over the listed axes of a row-major input of rank at most
// kMaxRank, one thread per output element, accumulating in double in the
// input's row-major order (as the cpu backend). fn: sum, prod, max, min.
// Parameters: in, out, out_count, rank, shape[8], reduced[8].
constexpr int kMaxRank = 8;
// With `arg` (argmax, argmin: fn max or min over one axis), out holds the
// index where the extreme is first reached, a NaN's first (arg_beats).
KernelSource reduce_kernel(DType in, DType out, Reduction fn, bool arg = false);
// transpose: one thread per dst element, moving `element_bytes` bytes from
// src's element at the permuted index (views of at most kMaxRank dimensions).
KernelSource transpose_kernel(size_t element_bytes);
// The transpose kernel's parameters for any strided gather: dst (of
// dst_shape, row-major) element i reads src at the offset that steps by
// stride[d] along dst's dimension d (0: src repeats, as a broadcast map
// input does).
std::vector<uint8_t> strided_copy_params(const void* src, void* dst, const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& stride);
std::vector<uint8_t> transpose_params(const void* src, void* dst, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& perm);
std::vector<uint8_t> reduce_params(const void* in, void* out, int64_t out_count, const std::vector<int64_t>& shape,
                                   const std::vector<bool>& reduced);

// A reducing collective between ranks of one GPU (shared-device
// placement): out[i] = r(src_0[offset + i], ..., src_{k-1}[offset + i]),
// folded left from src_0 in double, as the cpu backend's communicator.
// Parameters: out, count, offset, k, src[kMaxCombine].
constexpr int kMaxCombine = 256;
KernelSource combine_kernel(DType t, Reduction reduction);
std::vector<uint8_t> combine_params(void* out, int64_t count, int64_t offset, const std::vector<const void*>& srcs);

// The support module:
//  - thunky_fill(dst, n, elem_bytes, pattern): n elements of a pattern of
//    1, 2, 4 or 8 bytes (memset of a converted value);
//  - thunky_touch(src, bytes, dst, dst_bytes): reads src, rewrites dst
//    (the `kernel` stand-in's memory traffic);
//  - thunky_spin(ns): every block's first thread waits on the global timer
//    for ns nanoseconds (the stand-in's modelled time);
//  - thunky_set_if(handle, pred) / thunky_set_switch(handle, index, n):
//    sets a CUDA graph conditional from a bool or s32 scalar on the device
//    (switch indices clamp as lax.switch);
//  - thunky_set_while(handle, pred, counter, max, overflow): a while
//    node's handle, stopping the loop and raising *overflow once *counter
//    reaches max trips.
KernelSource support_kernels();

// Kernel parameters as the generated structs lay them out: 8-byte fields
// in order (pointers as their bits).
std::vector<uint8_t> pack_params(std::initializer_list<uint64_t> fields);
inline uint64_t ptr_bits(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// The fill pattern of `value` converted to dtype t (store_from_double's
// bytes), little-endian in the low bytes.
uint64_t fill_pattern(DType t, double value);

}  // namespace thunky::cuda
