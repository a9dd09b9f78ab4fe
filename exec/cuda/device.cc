#include "exec/cuda/device.h"

#include <algorithm>

#include "exec/cuda/nvrtc.h"

namespace thunky::cuda {

void fail_call(const char* call, const std::string& what, const char* file, int line) {
  std::string f = file;
  if (auto k = f.find("exec/cuda/"); k != std::string::npos) f = f.substr(k);
  throw DeviceError(std::string(call) + " failed: " + what + " (at " + f + ":" + std::to_string(line) + ")");
}

const char* cublas_status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS could not allocate";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "not supported by this GPU";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "cuBLAS error";
  }
}

const char* cusolver_status_text(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "cuSOLVER not initialised";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "cuSOLVER could not allocate";
    case CUSOLVER_STATUS_INVALID_VALUE: return "invalid value";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "execution failed";
    default: return "cuSOLVER error";
  }
}

KernelCache::~KernelCache() {
  for (auto& [k, lib] : libraries_) cudaLibraryUnload(lib);
}

cudaKernel_t KernelCache::get(const KernelSource& src, const std::string& entry) {
  const std::string name = entry.empty() ? src.entry : entry;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = kernels_.find({src.code, name}); it != kernels_.end()) return it->second;
    if (auto it = libraries_.find(src.code); it != libraries_.end()) {
      cudaKernel_t k;
      THUNKY_CUDA_CHECK(cudaLibraryGetKernel(&k, it->second, name.c_str()));
      return kernels_[{src.code, name}] = k;
    }
  }
  // Compile outside the lock: other ranks' launches go on meanwhile.
  std::string ptx = compile_ptx(src, arch_);
  return load(src.code, ptx, name);
}

cudaKernel_t KernelCache::get_ptx(const std::string& ptx, const std::string& name) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = kernels_.find({ptx, name}); it != kernels_.end()) return it->second;
  }
  return load(ptx, ptx, name);
}

void KernelCache::load_on(int device) {
  std::lock_guard<std::mutex> l(mu_);
  THUNKY_CUDA_CHECK(cudaSetDevice(device));
  for (auto& [key, k] : kernels_) {
    cudaFuncAttributes attributes;
    THUNKY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(k)));
  }
}

cudaKernel_t KernelCache::load(const std::string& key, const std::string& ptx, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = libraries_.find(key);
  if (it == libraries_.end()) {
    cudaLibrary_t lib;
    THUNKY_CUDA_CHECK(cudaLibraryLoadData(&lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    it = libraries_.emplace(key, lib).first;
  }
  cudaKernel_t k;
  THUNKY_CUDA_CHECK(cudaLibraryGetKernel(&k, it->second, name.c_str()));
  return kernels_[{key, name}] = k;
}

void launch(cudaKernel_t k, int64_t elements, const std::vector<uint8_t>& params, cudaStream_t s, int sms) {
  constexpr int64_t kThreads = 256;
  // Grid-stride loops: enough blocks to fill the GPU a few times over.
  const int64_t blocks = std::clamp<int64_t>((elements + kThreads - 1) / kThreads, 1, std::max(1, sms) * int64_t{8});
  void* args[] = {const_cast<uint8_t*>(params.data())};
  THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(static_cast<unsigned>(blocks)), dim3(kThreads), args, 0, s));
}

// One cached matrix product: descriptors, layouts and the algorithm.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool f64 = false;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

Gemm::Gemm() { THUNKY_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

namespace {
cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f32: return CUDA_R_32F;
    // The GEMM plan widens the others to their accumulator (gemm_direct), so
    // these are their own types, for whatever plan reads them next.
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    case DType::f8e5m2: return CUDA_R_8F_E5M2;
    case DType::s64: return CUDA_R_64I;
    case DType::s32: return CUDA_R_32I;
    case DType::s16: return CUDA_R_16I;
    case DType::s8: return CUDA_R_8I;
    case DType::u32: return CUDA_R_32U;
    case DType::u8:
    case DType::boolean: return CUDA_R_8U;
  }
  return CUDA_R_32F;  // not reached: the switch names every dtype
}
}  // namespace

// Row-major C[m, n] = op(A) · op(B) is column-major Cᵀ[n, m] = op(B)ᵀ · op(A)ᵀ,
// and a row-major matrix stored as [r, c] is the column-major [c, r] one:
// so cuBLASLt's A is our b (transposed as we transpose b), its B our a.
Gemm::Plan& Gemm::plan(const GemmShape& g, size_t workspace_bytes) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = plans_[g.key()];
  if (slot) return *slot;
  auto p = std::make_unique<Plan>();
  p->f64 = g.dtype == DType::f64;
  const cudaDataType_t t = cuda_type(g.in), out = cuda_type(g.dtype);
  const cublasComputeType_t compute = p->f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  THUNKY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, p->f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  THUNKY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  THUNKY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  THUNKY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, g.b_cols, g.b_rows, g.b_cols));
  THUNKY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, g.a_cols, g.a_rows, g.a_cols));
  THUNKY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out, g.n, g.m, g.n));
  if (g.batch > 1) {
    // Only called with both operands batched (a broadcast operand runs per matrix).
    const int32_t count = static_cast<int32_t>(g.batch);
    const int64_t sa = g.b_rows * g.b_cols, sb = g.a_rows * g.a_cols, sc = g.m * g.n;
    for (auto [layout, stride] : {std::pair{p->a, sa}, std::pair{p->b, sb}, std::pair{p->c, sc}}) {
      THUNKY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      THUNKY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }
  cublasLtMatmulPreference_t pref;
  THUNKY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  THUNKY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    THUNKY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &g.align, sizeof g.align));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw DeviceError("cuBLASLt has no algorithm for a " + std::string(dtype_name(g.dtype)) + " GEMM of [" + std::to_string(g.m) + ", " +
                      std::to_string(g.k) + "] x [" + std::to_string(g.k) + ", " + std::to_string(g.n) + "]");
  p->algo = result.algo;
  slot = std::move(p);
  return *slot;
}

void Gemm::run(const GemmShape& g, const void* a, const void* b, void* c, double alpha, double beta, void* workspace,
               size_t workspace_bytes, cudaStream_t s) {
  Plan& p = plan(g, workspace_bytes);
  const float af = static_cast<float>(alpha), bf = static_cast<float>(beta);
  const void* pa = p.f64 ? static_cast<const void*>(&alpha) : &af;
  const void* pb = p.f64 ? static_cast<const void*>(&beta) : &bf;
  THUNKY_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, pa, b, p.a, a, p.b, pb, c, p.c, c, p.c, &p.algo, workspace, workspace_bytes, s));
}

uint32_t common_alignment(std::initializer_list<const void*> pointers) {
  uintptr_t bits = 256;
  for (const void* p : pointers) bits |= reinterpret_cast<uintptr_t>(p);
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

EventPool::~EventPool() {
  for (auto e : events_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::next() {
  if (used_ == events_.size()) {
    cudaEvent_t e;
    THUNKY_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags_));
    events_.push_back(e);
  }
  return events_[used_++];
}

void* device_alloc(size_t bytes, const std::string& what, int device) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    throw DeviceError("out of device memory on GPU " + std::to_string(device) + ": " + what + " needs " + std::to_string(bytes) + " bytes, " +
                      std::to_string(free_b) + " of " + std::to_string(total) + " bytes are free");
  }
  THUNKY_CUDA_CHECK(e);
  return p;
}

}  // namespace thunky::cuda
