// Loading a schedule: the pipeline every tool starts with.
//
//   parse (core/schedule.cc)   sched.json -> Program: fields, types, unknown keys
//   lower (core/lower.cc)      inline calls, bind refs to buffers, resolve fixed views
//   validate (core/validate.cc) buffers, then every rank's walk (core/rank_walk.cc):
//                              views, op rules (core/op_rules.cc), tokens,
//                              happens-before and races; then collective order
//                              (core/collective_order.cc)
//
// Every error names the file and the JSON pointer of what is wrong.
#pragma once

#include <string>

#include "core/schedule.h"
#include "core/status.h"
#include "core/validate.h"

namespace thunky {

// parse + lower + validate. The file's text is read here; errors name it.
Expected<Program> load_schedule_file(const std::string& path, const ValidateOptions& opts = {});
Expected<Program> load_schedule_text(const std::string& text, const std::string& file, const ValidateOptions& opts = {});

}  // namespace thunky
