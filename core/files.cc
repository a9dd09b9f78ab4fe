#include "core/files.h"

#include <filesystem>
#include <fstream>

namespace thunky {

namespace fs = std::filesystem;

std::string check_input_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return "cannot be opened (no such file)";
  if (!fs::is_regular_file(st)) return "is not a regular file (a FIFO, a device or a directory); give a file";
  return "";
}

std::string read_input_file(const std::string& path, std::string& error, size_t reserve_extra, uint64_t max_bytes) {
  error = check_input_file(path);
  if (!error.empty()) return "";
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) {
    error = "cannot be opened (" + ec.message() + ")";
    return "";
  }
  if (size > max_bytes) {
    error = "is larger than " + std::to_string(max_bytes >> 20) + " MiB (" + std::to_string(size) + " bytes)";
    return "";
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = "cannot be opened";
    return "";
  }
  std::string text;
  text.reserve(static_cast<size_t>(size) + reserve_extra);
  text.resize(static_cast<size_t>(size));
  f.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<size_t>(f.gcount()));
  return text;
}

bool overwrites_input(const std::string& output, const std::vector<std::string>& inputs) {
  std::error_code ec;
  for (const auto& in : inputs) {
    if (fs::equivalent(output, in, ec) && !ec) return true;
    ec.clear();
  }
  return false;
}

}  // namespace thunky
