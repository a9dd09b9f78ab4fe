#include "exec/processes.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace thunky {

namespace {

// A variable's value as a non-negative int; nullopt when unset or empty.
std::optional<int> read_int(const std::function<const char*(const char*)>& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (*end || errno || n < 0 || n > (1 << 24))
    throw ThunkyError("", std::string("the launcher's variable ") + name + "='" + v + "' is not a process number (0 to 16777216)");
  return static_cast<int>(n);
}

}  // namespace

ProcessPlace place_from_environment(const std::function<const char*(const char*)>& env_in) {
  const std::function<const char*(const char*)> env = env_in ? env_in : [](const char* n) -> const char* { return std::getenv(n); };
  // The launchers in the order they are trusted: a variable set by mpirun
  // beats one inherited from an enclosing srun, which beats torchrun's.
  struct Launcher {
    const char *index, *count, *local;
  };
  static const Launcher launchers[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
  };
  for (const auto& l : launchers) {
    const auto index = read_int(env, l.index), count = read_int(env, l.count);
    if (!index || !count) continue;
    if (*count < 1 || *index >= *count)
      throw ThunkyError("", std::string("the launcher's ") + l.index + "=" + std::to_string(*index) + " is not below " + l.count + "=" + std::to_string(*count));
    ProcessPlace p;
    p.index = *index;
    p.count = *count;
    p.local = read_int(env, l.local).value_or(0);
    p.from = std::string(l.index) + "/" + l.count;
    return p;
  }
  return {};
}

RankBlock rank_block(int64_t ranks, int index, int count) {
  const int64_t n = ranks / count;
  return {n * index, n};
}

uint64_t fingerprint(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool same_on_every_process(Processes& procs, uint64_t value) {
  // Each 32-bit half is exact in a double: all equal when the largest and
  // the smallest (the largest of the negated) agree.
  for (int shift : {0, 32}) {
    const double half = static_cast<double>((value >> shift) & 0xffffffffu);
    if (procs.max(half) != -procs.max(-half)) return false;
  }
  return true;
}

uint64_t launch_key(const std::vector<int>& members, int64_t seq) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  mix(members.size());
  for (int m : members) mix(static_cast<uint64_t>(m));
  mix(static_cast<uint64_t>(seq));
  return h;
}

std::unique_ptr<Processes> start_processes() {
  const ProcessPlace place = place_from_environment();
  if (place.count <= 1) return nullptr;
  // torchrun's variables use the store; so does any launcher's in a build
  // without MPI, where MASTER_ADDR names process 0's host.
  const char* master = std::getenv("MASTER_ADDR");
  if (place.from == "RANK/WORLD_SIZE" || (!processes_supported() && master && *master))
    return start_store_processes(place, [](const char* n) -> const char* { return std::getenv(n); });
  return start_mpi_processes(place);
}

#ifndef THUNKY_HAS_MPI
bool processes_supported() { return false; }

std::unique_ptr<Processes> start_mpi_processes(const ProcessPlace& place) {
  throw ThunkyError("", "launched as process " + std::to_string(place.index) + " of " + std::to_string(place.count) + " (" + place.from +
                            ") but this thunky-exec was built without MPI: install Open MPI (libopenmpi-dev) and rebuild, run one process, "
                            "or set MASTER_ADDR and MASTER_PORT (process 0's host and a free port) for thunky's own store");
}
#endif

}  // namespace thunky
