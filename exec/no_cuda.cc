// Linked in builds without the cuda backend (THUNKY_CUDA off or no CUDA
// toolkit): `--backend cuda` then says so and exits 2.
#include "exec/backend.h"

namespace thunky {

std::unique_ptr<Backend> make_cuda_backend() { return nullptr; }

}  // namespace thunky
