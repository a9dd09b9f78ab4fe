#!/usr/bin/env bash
# The closed loop at three sizes: the ring collective matmul (f32) for
# N = 2 and 4 ranks with blocks of 64 x 256, 128 x 512 and 256 x 768 (GEMMs
# of about 0.07, 0.5 and 3 ms on one core), each predicted by thunky-sim
# with this host's calibrated model and measured by thunky-exec (cpu
# backend, RUNS runs of 5 iterations each, default 3). Prints one row per
# case: the makespans, the makespan error of each run and the mean
# per-command error of each run. Run scripts/main.sh first (it builds the
# tools and calibrates the model).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
model=build/main/cpu-model.json
[ -s "$model" ] || { echo "closed-loop-sweep: no $model; run bash scripts/main.sh first" >&2; exit 2; }
dir=$(mktemp -d)
printf '%-3s %-14s %13s %13s  %-28s %s\n' N "m x k x n" "predicted_us" "measured_us" "makespan error per run" "mean |error| per command, per run"
for n in 2 4; do
  for blocks in "64 256 64" "128 512 128" "256 768 256"; do
    set -- $blocks
    ring=$dir/ring_n${n}_$1.json
    ./build/thunky-gen ring_matmul -n "$n" --dtype f32 --m-block "$1" --k "$2" --n-block "$3" -o "$ring" > /dev/null
    ./build/thunky-sim "$ring" --machine "$model" --report "$dir/p.json" > /dev/null
    errors="" commands="" measured=""
    for ((r = 0; r < runs; ++r)); do
      ./build/thunky-exec "$ring" --warmup 1 --iters 5 --report "$dir/m.json" > /dev/null
      line=$(./build/thunky-compare "$dir/p.json" "$dir/m.json" | sed -n 3p)
      predicted=$(./build/thunky-compare "$dir/p.json" "$dir/m.json" | sed -n 1p | grep -oE 'makespan [0-9.]+' | cut -d' ' -f2)
      measured+="$(./build/thunky-compare "$dir/p.json" "$dir/m.json" | sed -n 2p | grep -oE 'makespan [0-9.]+' | cut -d' ' -f2 | cut -d. -f1) "
      errors+="$(echo "$line" | grep -oE 'makespan error [-+0-9.]+%' | cut -d' ' -f3) "
      commands+="$(echo "$line" | grep -oE 'per command [0-9.]+%' | cut -d' ' -f3) "
    done
    printf '%-3s %-14s %13.0f %13s  %-28s %s\n' "$n" "$1x$2x$3" "$predicted" "$(echo $measured | tr ' ' '\n' | sort -n | sed -n "$(((runs + 1) / 2))p")" "$errors" "$commands"
  done
done
rm -rf "$dir"
