// --dump and --dump-inputs: a run's buffers as .npy files, one per rank
// (DIR/<buffer>.rank<k>.npy) and the gathered whole for buffers that
// declare `global` (DIR/<buffer>.npy).
#pragma once

#include <string>
#include <vector>

#include "core/schedule.h"
#include "exec/backend.h"

namespace thunky::cli {

// The files a run reads: the schedule, its .npy inits and PTX files.
std::vector<std::string> inputs_of(const Program& p);

// Which buffers a dump writes: outputs and inouts (their final contents),
// or inputs and inouts (their initial contents).
enum class Dumped { outputs, inputs };

// Writes `which` buffers of `r.memory` into `dir`; returns 0, or 2 after
// a one-line error (a name that is not a file name, a file that would
// replace an input of the run, a directory that cannot be made).
int dump(const Program& p, const ExecResult& r, const std::string& dir, Dumped which);

// Every rank's input and inout buffers as their inits make them (the
// rest empty): what --dump-inputs writes, without running anything.
// Throws ThunkyError for an unreadable .npy init.
ExecResult initial_inputs(const Program& p);
// --dump-inputs: initial_inputs written by dump(); 0, or 2 after a line.
int dump_inputs(const Program& p, const std::string& dir);

}  // namespace thunky::cli
