// Reading the files a tool is given, and checking where it writes: every
// input must be a regular file no larger than a stated cap (a FIFO, a
// device such as /dev/zero, or a directory is refused before anything is
// read), and no output may be one of the inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace thunky {

// The largest file thunky reads: 1 GiB (schedules, machine models,
// reports; .npy inits are capped by their own header check).
constexpr uint64_t kMaxInputFileBytes = uint64_t{1} << 30;

// The whole file, or "" with `error` set to one line saying why not
// ("is not a regular file (a FIFO, a device or a directory)", "is larger
// than 1 GiB", "cannot be opened"). `reserve_extra` bytes of spare
// capacity are left past the text (the JSON parser reads beyond it).
std::string read_input_file(const std::string& path, std::string& error, size_t reserve_extra = 0, uint64_t max_bytes = kMaxInputFileBytes);

// "" when `path` may be opened for reading as an input (a regular file),
// else why not.
std::string check_input_file(const std::string& path);

// Whether `output` names the same file as one of `inputs` (an existing
// file reached by another path counts).
bool overwrites_input(const std::string& output, const std::vector<std::string>& inputs);

// Writes an output file whole or not at all: `write` fills a temporary file
// beside `path` (missing directories are made), which is renamed onto
// `path` only once every byte is written and closed; on any failure the
// temporary is removed and `path` is left as it was. A path that exists and
// is not a regular file (/dev/null, a FIFO, /dev/stdout) is written in
// place. Returns "" or one line saying why not ("cannot write 'P': ...").
std::string write_output_file(const std::string& path, const std::function<void(std::ostream&)>& write, bool binary = false);

// Removes the temporary file write_output_file is writing, if any. Safe to
// call from a signal handler (a tool stopped by SIGINT leaves nothing).
void remove_partial_output() noexcept;

}  // namespace thunky
