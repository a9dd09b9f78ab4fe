// Initial buffer contents: every init kind of sched.json, per rank, as a
// deterministic function of the global index so that every backend and
// rank count produces the same global data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/npy.h"
#include "core/schedule.h"

namespace thunky {

// Where rank `rank`'s shard of a global buffer starts, per dimension (in
// elements), and the local shape the spec implies. Throws ThunkyError.
struct ShardLayout {
  std::vector<int64_t> local_shape;
  std::vector<int64_t> start;
};
ShardLayout shard_layout(const Mesh& m, const GlobalLayout& g, int64_t rank);

// Loads the npy files a program's inits name, once. Paths are relative to
// the schedule file. Throws ThunkyError naming the buffer's init pointer.
std::map<std::string, NpyArray> load_npy_inits(const Program& p);
// Checks the npy files' headers alone (shapes, dtypes, lengths): the validator's check.
void check_npy_inits(const Program& p);

// Fills `dst` (buffer.bytes() bytes) with rank `rank`'s initial contents.
void init_buffer(const Program& p, const Buffer& b, int64_t rank, const std::map<std::string, NpyArray>& npy, uint8_t* dst);

// Counter-based random numbers in [0, 1), a function of (seed, index) only.
double uniform01(uint64_t seed, uint64_t index);

}  // namespace thunky
