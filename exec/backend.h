// The executor's backend interface: plan (check what the backend can run),
// then execute the schedule and measure every command.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "traces/report.h"

namespace thunky {

struct ExecOptions {
  int warmup = 0;
  int iters = 1;
  int64_t max_trip_count = 1'000'000;  // a while loop past this is reported, never a hang
};

struct ExecResult {
  Report report;  // the timeline of the median iteration
  // Final contents after the last iteration: [rank][buffer] bytes.
  std::vector<std::vector<std::vector<uint8_t>>> memory;
  // Control-flow decisions of the last iteration, per rank: for each cond,
  // switch and while id, in execution order, the branch taken (cond: 1 then,
  // 0 else; switch: the clamped index) or the trip count (while). The
  // simulator resolves data-dependent control flow from these.
  std::vector<std::map<std::string, std::vector<int64_t>>> decisions;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Expected<ExecResult> run(const Program& p, const ExecOptions& opts) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// "cpu" or "cuda"; an error names what this build lacks.
Expected<std::unique_ptr<Backend>> make_backend(const std::string& name);

// Gathers a buffer that declares `global` from every rank's shard into the
// global array (row-major bytes).
std::vector<uint8_t> gather_global(const Program& p, int buffer, const ExecResult& r);

}  // namespace thunky
