// Where the machine models are, found at run time, never through a path
// fixed at build time: THUNKY_MODELS when set, else beside the program:
// <prefix>/share/thunky/models after `cmake --install`, or the source
// tree's models/ above a build folder (build/thunky-sim, build/bench/...).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace thunky::cli {

inline std::string models_dir() {
  if (const char* env = std::getenv("THUNKY_MODELS"); env && *env) return env;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
    for (const fs::path& candidate : {bin / ".." / "share" / "thunky" / "models", bin / ".." / "models", bin / ".." / ".." / "models"})
      if (fs::is_directory(candidate, ec)) return candidate.lexically_normal().string();
  }
  return "models";
}

}  // namespace thunky::cli
