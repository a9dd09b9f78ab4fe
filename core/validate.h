// Validation of a lowered program, for every rank of the mesh, before
// anything runs: views, shapes and dtypes, roles, tokens, collective rules,
// static races (happens-before from stream order and token edges) and the
// collective-order (deadlock) check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/schedule.h"

namespace thunky {

struct RankCtx {
  int64_t rank = 0;
  std::vector<int64_t> coords;
};
RankCtx rank_ctx(const Mesh& m, int64_t rank);

// Resolves a bound ref on one rank. Throws ThunkyError at the ref's pointer.
View resolve(const Program& p, const Ref& r, const RankCtx& ctx);

struct ValidateOptions {
  bool races = true;
  bool collective_order = true;
  size_t max_errors = 20;
};

// Returns every problem found (empty = valid). Input errors (ErrorKind::input)
// come first and suppress the race and deadlock checks.
std::vector<Diagnostic> validate(const Program& p, const ValidateOptions& opts = {});

// parse + lower + validate. The file's text is read here; errors name it.
Expected<Program> load_schedule_file(const std::string& path, const ValidateOptions& opts = {});
Expected<Program> load_schedule_text(const std::string& text, const std::string& file,
                                     const ValidateOptions& opts = {});

}  // namespace thunky
