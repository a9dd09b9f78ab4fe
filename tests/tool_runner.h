// Runs a command-line tool for a test: its exit code, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

// stderr without the progress lines a run past five seconds prints
// ("thunky-exec: ..., 5 s elapsed"): a slow machine (a sanitizer, a busy
// CI) prints them where a fast one does not. They are in `progress`.
struct Result {
  int code = -1;
  std::string out, err, progress;
};

Result run_tool(const std::string& tool, const std::string& args) {
  const std::filesystem::path err = std::filesystem::temp_directory_path() / ("thunky_cli_err_" + std::to_string(::getpid()));
  std::string cmd = tool + " " + args + " 2>" + err.string();
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  // A signal (a crash) is never an acceptable outcome.
  EXPECT_TRUE(WIFEXITED(status)) << cmd;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream ss;
  {
    std::ifstream f(err);
    ss << f.rdbuf();
  }
  std::error_code ignored;
  std::filesystem::remove(err, ignored);  // one file a test process: none left behind in /tmp
  for (std::string line; std::getline(ss, line);) {
    const bool progress = line.rfind("thunky-", 0) == 0 && line.find(" s elapsed") != std::string::npos;
    std::string& to = progress ? r.progress : r.err;
    to += line;
    to += '\n';
  }
  return r;
}

}  // namespace
