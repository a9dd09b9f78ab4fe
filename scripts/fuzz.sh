#!/usr/bin/env bash
# Builds the libFuzzer target with clang and runs it for SECONDS (default 300)
# on a corpus seeded from examples/ and tests/malformed/: inputs up to 1 MB
# are loaded and validated, and the small ones run on the cpu backend and
# are simulated.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTHUNKY_FUZZ=ON -DTHUNKY_BENCH=OFF > /dev/null
cmake --build build-fuzz -j2 --target thunky_load_fuzzer
mkdir -p fuzz-corpus
cp examples/*.json tests/malformed/*.json tests/hostile/*.json fuzz-corpus/
./build-fuzz/thunky_load_fuzzer fuzz-corpus -max_total_time="$seconds" -max_len=1048576 -len_control=0 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
