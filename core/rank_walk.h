// One rank's walk of a lowered program, the heart of validation: it goes
// through the commands in program order (both sides of every branch, each
// loop body once), resolves every view on the rank, checks each op's rules
// (core/op_rules.h), tracks streams and tokens (every async_start awaited
// once, in the region that started it), orders commands by happens-before
// (stream order and token edges) and reports unordered overlapping
// accesses as races (core/race.h). It also lists the collectives each
// communicator issues, for the collective-order check.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/status.h"

namespace thunky {

// A collective as issued on one rank: what must match across the members
// of its communicator.
struct CollectiveSig {
  const Command* cmd;
  View src, dst;
  int n;  // the communicator's size
};

struct WalkOptions {
  // Check what is the same on every rank (tokens, map names): one rank's
  // walk does.
  bool structural = true;
  // Track races, on the buffers `race_buffers` marks (every buffer when null).
  bool races = true;
  const std::vector<char>* race_buffers = nullptr;
  // Keep each communicator's collective sequence.
  bool sequences = false;
};

// What one rank's walk found.
struct RankFindings {
  struct Race {
    std::string message;  // both commands, their streams and the missing join
    std::string pointer;  // the later command's id
    int buffer;
  };
  std::vector<Race> races;
  // Communicator (its ranks) -> the collectives this rank issues on it.
  std::map<std::vector<int>, std::vector<CollectiveSig>> collectives;
  std::vector<ThunkyError> unawaited;  // tokens never awaited, by name
  std::exception_ptr error;            // the walk stopped at this error
};

RankFindings walk_rank(const Program& p, int64_t rank, const WalkOptions& opts);

}  // namespace thunky
