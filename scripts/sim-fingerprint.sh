#!/usr/bin/env bash
# The simulator's figures for every bundled example and for generated
# schedules on a single node and a cluster, one line each: the case, the
# makespan, rank 0's compute, communication and exposed seconds, and every
# op's start and end summed (so that a change of any op's timing shows).
# tests/sim_fingerprint.txt holds these figures from before commands and
# the engine were restructured, with the five examples whose GEMMs are
# skinny (a side of C of at most 64) priced anew when thin tiles and
# split-K came in (docs/machines.md); a ctest compares, with
# --no-interference: interference leaves those figures exactly as they
# were. tests/sim_fingerprint_interference.txt holds the same cases with
# interference (the default), which a second ctest compares.
# Usage: sim-fingerprint.sh BUILD_DIR [SOURCE_DIR] [THUNKY-SIM FLAGS...]
set -euo pipefail
bin=$1
src=${2:-$(cd "$(dirname "$0")/.." && pwd)}
flags=("${@:3}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"

line() {  # line NAME REPORT
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
s = r["ranks"][0].get("stats", {})
ops = sum(o["start_s"] + o["end_s"] for rank in r["ranks"] for o in rank.get("ops", []))
print(f'{sys.argv[1]} {r["makespan_s"]:.12g} {s.get("compute_s", 0):.12g} {s.get("comm_s", 0):.12g} {s.get("exposed_comm_s", 0):.12g} {ops:.12g}')
PY
}

for f in examples/*.json; do
  # The literal bidirectional ring races on purpose (exit 1): it has no timeline.
  "$bin/thunky-sim" "$f" --machine h100-8gpu ${flags[@]+"${flags[@]}"} --report "$tmp/r.json" > /dev/null 2>&1 && line "$f" "$tmp/r.json"
  rm -f "$tmp/r.json"
done
while read -r machine args; do
  "$bin/thunky-gen" $args -o "$tmp/g.json"
  "$bin/thunky-sim" "$tmp/g.json" --machine "$machine" ${flags[@]+"${flags[@]}"} --report "$tmp/r.json" > /dev/null
  line "$machine:${args// /_}" "$tmp/r.json"
  rm -f "$tmp/r.json" "$tmp/g.json"
done <<'CASES'
h100-8gpu ring_matmul -n 8 --m-block 512 --k 4096 --n-block 1024 --dtype bf16
h100-8gpu ring_matmul -n 8 --m-block 512 --k 4096 --n-block 1024 --dtype bf16 --collective reduce_scatter
h200-8gpu bidirectional_ring_matmul -n 8 --m-block 256 --k 8192 --n-block 2048 --dtype f16
h100-cluster ring_matmul -n 64 --m-block 256 --k 2048 --n-block 512 --dtype bf16
h200-cluster blocking_matmul -n 32 --m-block 1024 --k 1024 --n-block 1024 --dtype bf16
a100-8gpu unsharded_matmul -n 4 --m-block 128 --k 128 --n-block 128 --dtype f32
CASES
