#include "exec/cuda/nvrtc.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "exec/cuda/check.h"

namespace thunky::cuda {

namespace {

// Compiles without the cache.
std::string compile(const KernelSource& src, int arch) {
  nvrtcProgram prog;
  THUNKY_NVRTC_CHECK(nvrtcCreateProgram(&prog, src.code.c_str(), "thunky_kernels.cu", 0, nullptr, nullptr));
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  const std::string gpu = "--gpu-architecture=compute_" + std::to_string(arch);
  // No fast-math: the kernels must round as the cpu backend does.
  const char* options[] = {gpu.c_str(), "--std=c++17", "--fmad=false"};
  const nvrtcResult r = nvrtcCompileProgram(prog, 3, options);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    throw DeviceError("NVRTC could not compile the generated kernel '" + src.entry + "': " + log);
  }
  size_t n = 0;
  THUNKY_NVRTC_CHECK(nvrtcGetPTXSize(prog, &n));
  std::string ptx(n, '\0');
  THUNKY_NVRTC_CHECK(nvrtcGetPTX(prog, ptx.data()));
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace

std::string compile_ptx(const KernelSource& src, int arch) {
  // Every backend a process makes (thunky-calibrate makes one per
  // benchmark) compiles the same support kernels: once is enough.
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::string> compiled;
  const auto key = std::pair{src.code, arch};
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = compiled.find(key); it != compiled.end()) return it->second;
  }
  std::string ptx = compile(src, arch);  // outside the lock: other compiles go on
  std::lock_guard<std::mutex> l(mu);
  return compiled.emplace(key, std::move(ptx)).first->second;
}

}  // namespace thunky::cuda
