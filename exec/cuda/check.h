// One checking macro per CUDA library. Each keeps the call's text, so a
// failure reads "cudaMemcpyAsync(...) failed: out of memory (at
// exec/cuda/device.cc:120)", and throws DeviceError, which the backend
// turns into a diagnostic at its API edge. Only exec/cuda/ includes this.
#pragma once

#include <stdexcept>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <nvrtc.h>
#ifdef THUNKY_HAVE_NCCL
#include <nccl.h>
#endif

namespace thunky::cuda {

struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_call(const char* call, const std::string& what, const char* file, int line);

const char* cublas_status_text(cublasStatus_t s);
const char* cusolver_status_text(cusolverStatus_t s);

}  // namespace thunky::cuda

#define THUNKY_CUDA_CHECK(call)                                                                       \
  do {                                                                                                \
    const cudaError_t thunky_e_ = (call);                                                             \
    if (thunky_e_ != cudaSuccess) ::thunky::cuda::fail_call(#call, cudaGetErrorString(thunky_e_), __FILE__, __LINE__); \
  } while (0)

#define THUNKY_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                                \
    const cublasStatus_t thunky_e_ = (call);                                                          \
    if (thunky_e_ != CUBLAS_STATUS_SUCCESS)                                                           \
      ::thunky::cuda::fail_call(#call, ::thunky::cuda::cublas_status_text(thunky_e_), __FILE__, __LINE__); \
  } while (0)

#define THUNKY_CUSOLVER_CHECK(call)                                                                   \
  do {                                                                                                \
    const cusolverStatus_t thunky_e_ = (call);                                                        \
    if (thunky_e_ != CUSOLVER_STATUS_SUCCESS)                                                         \
      ::thunky::cuda::fail_call(#call, ::thunky::cuda::cusolver_status_text(thunky_e_), __FILE__, __LINE__); \
  } while (0)

#define THUNKY_NVRTC_CHECK(call)                                                                      \
  do {                                                                                                \
    const nvrtcResult thunky_e_ = (call);                                                             \
    if (thunky_e_ != NVRTC_SUCCESS) ::thunky::cuda::fail_call(#call, nvrtcGetErrorString(thunky_e_), __FILE__, __LINE__); \
  } while (0)

#ifdef THUNKY_HAVE_NCCL
#define THUNKY_NCCL_CHECK(call)                                                                       \
  do {                                                                                                \
    const ncclResult_t thunky_e_ = (call);                                                            \
    if (thunky_e_ != ncclSuccess && thunky_e_ != ncclInProgress)                                      \
      ::thunky::cuda::fail_call(#call, ncclGetErrorString(thunky_e_), __FILE__, __LINE__);            \
  } while (0)
#endif
