// The backend a tool names: in a file of its own, so that only the tools
// that can run the cuda backend link it (and load the CUDA libraries).
#include "exec/backend.h"

namespace thunky {

Expected<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
    if (auto b = make_cuda_backend()) return b;
    return std::vector<Diagnostic>{{ErrorKind::input, "", "", "this build has no cuda backend (configure with a CUDA toolkit present, THUNKY_CUDA=ON); use --backend cpu"}};
  }
  return std::vector<Diagnostic>{{ErrorKind::input, "", "", "unknown backend '" + name + "' (expected cpu or cuda)"}};
}

}  // namespace thunky
