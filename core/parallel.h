// Running independent chunks of work on threads of their own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace thunky {

// Calls f(k) for every k in [0, chunks): chunk 0 on the calling thread,
// each other chunk on a thread of its own (or on the calling thread when no
// thread can be had). Returns when all have returned; f must not throw.
template <class F>
void run_chunks(size_t chunks, F&& f) {
  std::vector<std::jthread> pool;  // joined when this returns
  if (chunks > 1) pool.reserve(chunks - 1);
  for (size_t k = 1; k < chunks; ++k) {
    try {
      pool.emplace_back([&f, k] { f(k); });
    } catch (const std::system_error&) {  // no thread to spare: run it here
      f(k);
    }
  }
  if (chunks > 0) f(0);
}

// How many threads this machine runs at once (at least 1).
inline size_t hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace thunky
