// Helpers shared by the tests: load a schedule from text or from
// examples/, run it on the CPU backend, and read buffers back as doubles.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/load.h"
#include "core/validate.h"
#include "exec/backend.h"

namespace thunky::testing {

// The source tree: THUNKY_SOURCE_DIR from the environment when set (a
// test binary carried to another machine, as scripts/gpu-check.sh does),
// else where it was built from.
inline std::string source_dir() {
  const char* env = std::getenv("THUNKY_SOURCE_DIR");
  return env && *env ? env : THUNKY_SOURCE_DIR;
}
inline std::string example_path(const std::string& name) { return source_dir() + "/examples/" + name; }

// The program, or a test failure listing every diagnostic.
inline Program unwrap(Expected<Program> p) {
  if (!p) {
    std::string all;
    for (const auto& e : p.errors()) all += e.str() + "\n";
    ADD_FAILURE() << all;
    return Program{};
  }
  return std::move(p.value());
}

inline Program load_ok(const std::string& text) { return unwrap(load_schedule_text(text, "test.json")); }
inline Program load_file_ok(const std::string& path) { return unwrap(load_schedule_file(path)); }

// The diagnostics of a schedule that must fail to load.
inline std::vector<Diagnostic> load_errors(const std::string& text) {
  auto p = load_schedule_text(text, "test.json");
  EXPECT_FALSE(p.ok()) << "expected the schedule to be rejected";
  return p.ok() ? std::vector<Diagnostic>{} : p.errors();
}

inline ExecResult run_cpu(const Program& p, int iters = 1) {
  auto backend = make_cpu_backend();
  ExecOptions o;
  o.iters = iters;
  auto r = backend->run(p, o);
  if (!r) {
    ADD_FAILURE() << r.errors().front().str();
    return ExecResult{};
  }
  return std::move(r.value());
}

inline std::vector<double> values(const Program& p, const ExecResult& r, const std::string& buffer, int64_t rank = 0) {
  int b = p.find_buffer(buffer);
  EXPECT_GE(b, 0) << buffer;
  if (b < 0 || r.memory.empty()) return {};
  std::vector<double> v(static_cast<size_t>(p.buffers[b].count()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_double(r.memory[rank][b].data(), p.buffers[b].dtype, i);
  return v;
}

inline std::vector<double> global_values(const Program& p, const ExecResult& r, const std::string& buffer) {
  int b = p.find_buffer(buffer);
  EXPECT_GE(b, 0) << buffer;
  if (b < 0 || r.memory.empty()) return {};
  if (!p.buffers[b].global) return values(p, r, buffer);  // one array, held whole by rank 0
  auto bytes = gather_global(p, b, r);
  std::vector<double> v(bytes.size() / dtype_size(p.buffers[b].dtype));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_double(bytes.data(), p.buffers[b].dtype, i);
  return v;
}

}  // namespace thunky::testing
