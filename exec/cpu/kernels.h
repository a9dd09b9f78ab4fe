// The CPU reference implementations of thunky's compute commands. They
// work on typed memory described by a pointer, a dtype and a shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/reduction.h"
#include "core/expr.h"

namespace thunky::cpu {

struct Tensor {
  uint8_t* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  int64_t count() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(count()) * dtype_size(dtype); }
};

void fill(const Tensor& dst, double value);
// Every 4-byte element of dst set to `bits` (memset's "bits").
void fill_bits(const Tensor& dst, uint32_t bits);
// dst = src with its dimensions permuted: dst's dimension d is src's perm[d].
void transpose(const Tensor& src, const std::vector<int64_t>& perm, const Tensor& dst);

// c = alpha * op(a) @ op(b) + beta * c, row-major, 2-D or batched 3-D
// (a 2-D operand broadcasts over the batch); f32 accumulation for
// f32/f16/bf16/f8 inputs, f64 for f64. c may alias a or b.
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a, bool transpose_b, double alpha, double beta);

// dst[i] = src[offset], where offset steps by stride[d] as dst's index in
// dimension d grows (0: src repeats along it). A transpose, or a map
// input broadcast to out's shape (core/broadcast.h).
void strided_copy(const Tensor& src, const std::vector<int64_t>& stride, const Tensor& dst);

// Elementwise out = expr(inputs); inputs of one element broadcast (others
// have out's element count: run_map expands a broadcast input first).
// `axis_values` give the mesh axis names' values on this rank.
struct MapInput {
  std::string name;
  Tensor tensor;
};
void map(const Expr& expr, const std::vector<MapInput>& inputs,
         const std::vector<std::pair<std::string, int64_t>>& axis_values, const Tensor& out);

void reduce(const Tensor& in, const std::vector<int64_t>& axes, Reduction fn, const Tensor& out);
// argmax (fn max) or argmin (fn min) along one axis: out holds, for each
// position of the other axes, the index where the extreme is first reached.
void arg_reduce(const Tensor& in, int64_t axis, Reduction fn, const Tensor& out);

// Cholesky of each matrix of `a` (row-major, symmetric), written to
// `result`. lower is cuSOLVER's column-major flag: lower=false writes the
// row-major lower factor L (A = L L^T), lower=true the row-major upper
// factor U (A = U^T U); the other triangle keeps result's values (a's when
// result aliases a). info gets 0, or the order of the first leading minor
// that is not positive definite.
void cholesky(const Tensor& a, const Tensor& result, const Tensor& info, bool lower);

}  // namespace thunky::cpu
