#!/usr/bin/env bash
# The main job: install, build, then predict (thunky-sim, on the H100 8-GPU
# NVLink model) and measure (thunky-exec, CPU reference backend) the bundled
# ring collective matmul (N = 4), printing both tables, then the two side by
# side command by command (thunky-compare). The CPU backend stands in for
# the GPUs here, so the error column measures this machine, not the model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target thunky-exec thunky-sim thunky-gen thunky-compare
mkdir -p build/main
echo "== predicted (thunky-sim --machine h100-8gpu)"
./build/thunky-sim examples/ring_collective_matmul_n4.json --machine h100-8gpu --report build/main/predicted.json
echo
echo "== measured (thunky-exec --backend cpu)"
./build/thunky-exec examples/ring_collective_matmul_n4.json --warmup 1 --iters 5 --report build/main/measured.json "$@"
echo
echo "== side by side (thunky-compare)"
./build/thunky-compare build/main/predicted.json build/main/measured.json
