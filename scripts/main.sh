#!/usr/bin/env bash
# The main job: install, build, and run the bundled ring collective matmul
# (N = 4) on the CPU reference backend, printing its measured table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target thunky-exec thunky-gen
./build/thunky-exec examples/ring_collective_matmul_n4.json --warmup 1 --iters 5 "$@"
