// Where the machine models are, found at run time: THUNKY_MODELS when set
// (an explicit choice wins), else beside the program
// (<prefix>/share/thunky/models after `cmake --install`, the package's
// models/ in a wheel, the source tree's models/ above a build folder inside
// it), else the source tree the build came from, which the build writes
// in one line into its folder's thunky-models-dir.txt (a build folder
// outside the source tree). When none exists, the places looked at are
// what the tools name in their error.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace thunky::sim {

inline std::vector<std::filesystem::path> models_candidates() {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  if (const char* env = std::getenv("THUNKY_MODELS"); env && *env) out.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return out;
  const fs::path bin = exe.parent_path();
  for (const fs::path& p : {bin / ".." / "share" / "thunky" / "models", bin / "models", bin / ".." / "models", bin / ".." / ".." / "models"})
    out.push_back(p.lexically_normal());
  for (const fs::path& note : {bin / "thunky-models-dir.txt", bin / ".." / "thunky-models-dir.txt"}) {
    std::ifstream f(note);
    std::string line;
    if (f && std::getline(f, line) && !line.empty()) out.emplace_back(line);
  }
  return out;
}

inline std::string models_dir() {
  const auto candidates = models_candidates();
  std::error_code ec;
  for (const auto& c : candidates)
    if (std::filesystem::is_directory(c, ec)) return c.string();
  // None exists: the tools' error names this "folder", which lists them.
  std::string looked = "models (none of the places looked at exists: ";
  if (!std::getenv("THUNKY_MODELS")) looked += "THUNKY_MODELS is not set, ";
  for (size_t i = 0; i < candidates.size(); ++i) looked += (i ? ", " : "") + candidates[i].string();
  return looked + ")";
}

}  // namespace thunky::sim
