#!/usr/bin/env bash
# The main job, a closed loop on any machine: install, build, calibrate a
# machine model of this host from micro-benchmarks on the cpu backend (once;
# cached in build/main/cpu-model.json until thunky-calibrate changes),
# predict a ring collective matmul with it (thunky-sim), measure it
# (thunky-exec, cpu backend), and print the two side by side command by
# command (thunky-compare), with both timelines drawn in one SVG.
# THUNKY_RECALIBRATE=1 measures the host again; arguments go to thunky-exec.
#
# The ring is N = 4 f32 with 256 x 1024 blocks (thunky-gen ring_matmul
# --m-block 256 --k 1024 --n-block 256): GEMMs of about 4 ms and shifts of
# 1 MiB. On a CPU each hand-off between threads costs microseconds to tens
# of them, which the bundled 64 x 128 example's 40 us GEMMs cannot hide;
# at this size they are a few percent (docs/decisions.md, "The closed loop").
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/main
log=build/main/build.log
start=$(date +%s)
stage() { echo "== $* ($(($(date +%s) - start)) s)"; }
fail() {
  echo "main: $1 failed; the whole log is $log" >&2
  tail -20 "$log" >&2
  exit 1
}

stage "installing what thunky builds with (scripts/setup.sh)"
bash scripts/setup.sh > "$log" 2>&1 || fail "setup"
stage "configuring (cmake, Release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >> "$log" 2>&1 || fail "configuring"
stage "building thunky-exec, thunky-sim, thunky-gen, thunky-compare, thunky-calibrate (log: $log)"
cmake --build build -j2 --target thunky-exec thunky-sim thunky-gen thunky-compare thunky-calibrate >> "$log" 2>&1 || fail "the build"

model=build/main/cpu-model.json
ring=build/main/ring_n4_256x1024.json
./build/thunky-gen ring_matmul -n 4 --dtype f32 --m-block 256 --k 1024 --n-block 256 -o "$ring" > /dev/null
# The cache is made again when thunky-calibrate has changed since.
if [ ! -s "$model" ] || [ build/thunky-calibrate -nt "$model" ] || [ "${THUNKY_RECALIBRATE:-0}" = 1 ]; then
  stage "calibrating this host (thunky-calibrate exec --backend cpu, about 20 s)"
  ./build/thunky-calibrate exec --backend cpu --ranks 4 -o "$model" >> "$log" 2>&1 || fail "calibrating"
fi
stage "predicted (thunky-sim $ring --machine $model)"
./build/thunky-sim "$ring" --machine "$model" --report build/main/predicted.json
echo
stage "measured (thunky-exec $ring, cpu backend)"
./build/thunky-exec "$ring" --warmup 1 --iters 5 --report build/main/measured.json "$@"
echo
stage "side by side (thunky-compare)"
rm -f build/main/compare.svg
./build/thunky-compare build/main/predicted.json build/main/measured.json --svg build/main/compare.svg
