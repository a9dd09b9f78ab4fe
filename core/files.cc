#include "core/files.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

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

namespace {

// The temporary file being written, for remove_partial_output: a fixed
// buffer, since a signal handler may neither allocate nor lock.
char g_partial[4096];
std::atomic<bool> g_partial_set{false};

// Marks `temp` as the file being written for as long as it lives.
class PartialFile {
 public:
  explicit PartialFile(const std::string& temp) {
    if (temp.size() >= sizeof g_partial) return;
    std::memcpy(g_partial, temp.c_str(), temp.size() + 1);
    g_partial_set = true;
  }
  ~PartialFile() { g_partial_set = false; }
};

}  // namespace

void remove_partial_output() noexcept {
  if (g_partial_set) ::unlink(g_partial);
}

std::string write_output_file(const std::string& path, const std::function<void(std::ostream&)>& write, bool binary) {
  const auto mode = binary ? std::ios::out | std::ios::binary : std::ios::out;
  auto failed = [&](const std::string& why) { return "cannot write '" + path + "'" + (why.empty() ? "" : ": " + why); };
  auto reason = [] { return errno ? std::string(std::strerror(errno)) : std::string(); };
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    if (fs::is_directory(st)) return failed("it is a directory");
    std::ofstream f(path, mode);
    if (!f) return failed(reason());
    write(f);
    f.close();
    return f ? "" : failed(reason());
  }
  const fs::path target(path);
  if (!target.parent_path().empty()) fs::create_directories(target.parent_path(), ec);
  const std::string temp = (target.parent_path() / ("." + target.filename().string() + ".partial." + std::to_string(::getpid()))).string();
  errno = 0;
  PartialFile partial(temp);
  std::ofstream f(temp, mode);
  if (!f) return failed(reason());
  write(f);
  f.close();  // a full device fails here, when the buffer is written
  if (!f) {
    const std::string why = reason();
    fs::remove(temp, ec);
    return failed(why);
  }
  fs::rename(temp, target, ec);
  if (ec) {
    fs::remove(temp, ec);
    return failed(ec.message());
  }
  return "";
}

}  // namespace thunky
