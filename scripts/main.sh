#!/usr/bin/env bash
# The main job: install, build, then predict (thunky-sim, on the H100 8-GPU
# NVLink model) and measure (thunky-exec, CPU reference backend) the bundled
# ring collective matmul (N = 4), printing both tables one after the other.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target thunky-exec thunky-sim thunky-gen
echo "== predicted (thunky-sim --machine h100-8gpu)"
./build/thunky-sim examples/ring_collective_matmul_n4.json --machine h100-8gpu
echo
echo "== measured (thunky-exec --backend cpu)"
./build/thunky-exec examples/ring_collective_matmul_n4.json --warmup 1 --iters 5 "$@"
