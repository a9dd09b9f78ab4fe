// NVRTC: generated kernel source to PTX. Needs no GPU, so it is tested on
// every machine that has the CUDA toolkit.
#pragma once

#include <string>

#include "exec/cuda/kernel_source.h"

namespace thunky::cuda {

// Compiles `src` for compute capability `arch` (90 for Hopper) and returns
// the PTX text, compiled once per process for each source and arch.
// Throws DeviceError with NVRTC's log on a compile error. Thread-safe.
std::string compile_ptx(const KernelSource& src, int arch);

}  // namespace thunky::cuda
