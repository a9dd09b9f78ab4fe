// What the cuda backend keeps per GPU and per process: generated kernels
// compiled once and loaded with the runtime's library API, launches of
// them, cuBLASLt matrix products in row-major terms, and pooled events.
// Only exec/cuda/ includes this.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "exec/cuda/check.h"
#include "exec/cuda/kernel_source.h"

namespace thunky::cuda {

// Compiled kernels by source text: one NVRTC compile and one library load
// per distinct source, shared by every rank and device of the process
// (a library is loaded into each context on first launch).
class KernelCache {
 public:
  explicit KernelCache(int arch) : arch_(arch) {}
  ~KernelCache();
  // The kernel `entry` of `src` (src.entry when empty). Thread-safe.
  cudaKernel_t get(const KernelSource& src, const std::string& entry = "");
  // A kernel of user PTX (ptx_kernel), by its text and name.
  cudaKernel_t get_ptx(const std::string& ptx, const std::string& name);
  int compiled() const { return static_cast<int>(libraries_.size()); }
  // Loads every kernel got so far into `device`'s context (the runtime
  // loads a library's kernels lazily, at their first launch otherwise:
  // inside a timed command, or a graph capture).
  void load_on(int device);

 private:
  cudaKernel_t load(const std::string& key, const std::string& ptx, const std::string& name);
  int arch_;
  std::mutex mu_;
  std::map<std::string, cudaLibrary_t> libraries_;  // by source (or PTX) text
  std::map<std::pair<std::string, std::string>, cudaKernel_t> kernels_;
};

// Launches a generated kernel whose one parameter is the struct `params`.
void launch(cudaKernel_t k, int64_t elements, const std::vector<uint8_t>& params, cudaStream_t s, int sms);

// c = alpha · op(a) · op(b) + beta · c in row-major terms through cuBLASLt,
// for f64, f32, f16 and bf16 operands of one dtype (f32 accumulation for
// the half types), or bf16 / f16 operands into f32; a 2-D operand
// broadcasts over a 3-D batch. Matrix
// layouts, descriptors and the chosen algorithm are cached by shape.
struct GemmShape {
  DType dtype;  // c's
  DType in;     // a's and b's: dtype, or bf16 / f16 into an f32 c
  int64_t batch, m, n, k;
  bool ta, tb;
  int64_t a_rows, a_cols, b_rows, b_cols;  // as stored (row-major)
  bool a_batched, b_batched;
  // The alignment (bytes, a power of two up to 256) that every pointer of
  // the product has: views start anywhere in their buffer, and cuBLASLt
  // must be told, or it may pick a kernel that assumes 256.
  uint32_t align = 256;
  auto key() const { return std::tuple(dtype, in, batch, m, n, k, ta, tb, a_rows, a_cols, b_rows, b_cols, a_batched, b_batched, align); }
};
// The largest power of two, up to 256, that divides every address.
uint32_t common_alignment(std::initializer_list<const void*> pointers);
class Gemm {
 public:
  Gemm();
  ~Gemm();
  static bool supports(DType t) { return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16; }
  void run(const GemmShape& g, const void* a, const void* b, void* c, double alpha, double beta, void* workspace, size_t workspace_bytes,
           cudaStream_t s);
  static constexpr size_t kWorkspace = 32u << 20;

 private:
  struct Plan;
  Plan& plan(const GemmShape& g, size_t workspace_bytes);
  cublasLtHandle_t handle_ = nullptr;
  std::mutex mu_;
  std::map<decltype(GemmShape{}.key()), std::unique_ptr<Plan>> plans_;
};

// Events without timing for token edges, reused in order; and timing
// events for the timeline, handed out in order within an iteration.
class EventPool {
 public:
  explicit EventPool(unsigned flags) : flags_(flags) {}
  ~EventPool();
  cudaEvent_t next();
  void rewind() { used_ = 0; }
  cudaEvent_t at(size_t i) const { return events_[i]; }
  size_t used() const { return used_; }

 private:
  unsigned flags_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

// Device memory that names itself when it cannot be had.
void* device_alloc(size_t bytes, const std::string& what, int device);

}  // namespace thunky::cuda
