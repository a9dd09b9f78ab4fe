#!/usr/bin/env bash
# The main job, a closed loop on any machine: install, build, calibrate a
# machine model of this host from micro-benchmarks on the cpu backend (once;
# cached in build/main/cpu-model.json until thunky-calibrate changes),
# predict the bundled ring collective matmul (N = 4) with it (thunky-sim),
# measure it (thunky-exec, cpu backend), and print both tables and the two
# side by side command by command (thunky-compare). THUNKY_RECALIBRATE=1
# measures the host again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target thunky-exec thunky-sim thunky-gen thunky-compare thunky-calibrate
mkdir -p build/main
model=build/main/cpu-model.json
# The cache is made again when thunky-calibrate has changed since.
if [ ! -s "$model" ] || [ build/thunky-calibrate -nt "$model" ] || [ "${THUNKY_RECALIBRATE:-0}" = 1 ]; then
  echo "== calibrating this host (thunky-calibrate exec --backend cpu)"
  ./build/thunky-calibrate exec --backend cpu --ranks 4 -o "$model" > /dev/null
fi
echo "== predicted (thunky-sim --machine $model)"
./build/thunky-sim examples/ring_collective_matmul_n4.json --machine "$model" --report build/main/predicted.json
echo
echo "== measured (thunky-exec --backend cpu)"
./build/thunky-exec examples/ring_collective_matmul_n4.json --warmup 1 --iters 5 --report build/main/measured.json "$@"
echo
echo "== side by side (thunky-compare)"
./build/thunky-compare build/main/predicted.json build/main/measured.json
