#!/usr/bin/env bash
# What a run across processes costs against one process, on the cpu
# backend: an all_reduce (sum, f32) over 4 ranks at three sizes, run by
# thunky-exec in one process and in 2 and 4 processes (blocks of 2 and 1
# ranks), launched by mpirun (MPI carries the data) and as torchrun
# launches (tests/launch_like_torchrun.sh: process 0's TCP store carries
# it). Prints, per size, launcher and process count, the median
# iteration's all_reduce time (rank 0's, from report.json) and the whole
# command's wall time (the launcher's start included).
#
#   bash bench/processes.sh [BUILD_DIR]     # default: build
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
exec_bin=$build/thunky-exec
[ -x "$exec_bin" ] || { echo "bench/processes.sh: no $exec_bin (cmake --build $build --target thunky-exec)" >&2; exit 2; }
command -v mpirun > /dev/null || { echo "bench/processes.sh: mpirun is not installed (apt-get install openmpi-bin)" >&2; exit 2; }
# As root (containers), Open MPI asks for these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

schedule() {  # elements per rank
  cat <<EOF
{"format": "thunky.sched/1", "name": "all_reduce_$1",
 "mesh": {"axis_names": ["x"], "shape": [4]},
 "buffers": {"x": {"shape": [$1], "dtype": "f32", "role": "input", "init": {"kind": "iota"}},
             "out": {"shape": [$1], "dtype": "f32", "role": "output"}},
 "program": [{"op": "all_reduce", "src": "x", "dst": "out", "axis": "x", "reduction": "sum"}]}
EOF
}

printf '%-12s %-10s %-10s %16s %14s\n' "bytes/rank" launcher processes "all_reduce_us" "wall_s"
port=29700
for elems in 1024 262144 1048576; do
  schedule $elems > "$work/s.json"
  for run in "- 1" "mpirun 2" "mpirun 4" "torchrun 2" "torchrun 4"; do
    read -r how n <<< "$run"
    rm -f "$work/r.json"
    case $how in
      -) launch=() ;;
      mpirun) launch=(mpirun --oversubscribe -np "$n") ;;
      torchrun) port=$((port + 1)); launch=(bash tests/launch_like_torchrun.sh "$n" "$port" 5) ;;
    esac
    start=$(date +%s.%N)
    "${launch[@]}" "$exec_bin" "$work/s.json" --warmup 3 --iters 20 --report "$work/r.json" > /dev/null
    end=$(date +%s.%N)
    python3 - "$work/r.json" $((elems * 4)) "$how" "$n" "$start" "$end" <<'PY'
import json, sys
op = json.load(open(sys.argv[1]))["ranks"][0]["ops"][0]
print("%-12s %-10s %-10s %16.1f %14.2f" % (sys.argv[2], sys.argv[3], sys.argv[4], (op["end_s"] - op["start_s"]) * 1e6, float(sys.argv[6]) - float(sys.argv[5])))
PY
  done
done
