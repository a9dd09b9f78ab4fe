#!/usr/bin/env bash
# The cuda backend on a machine with an NVIDIA GPU, in one call of at most
# five minutes, each step under its own limit (and none past the whole
# budget), writing summary.md to $OUT as each step ends, so that a run cut
# short still returns what it measured:
#   binaries   the Release tools and tests carried in .gpu-pack/ (made by
#              scripts/gpu-deps.sh) when they start here and match the
#              sources; else built here with ninja, only the targets needed;
#   tests      the GPU tests, the NVRTC tests and the generated kernels
#              compiled as host C++;
#   schedules  every example and test schedule on the cpu backend, then on
#              cuda eager and --graph, the dumps compared (below);
#   compare    the ring collective matmul, thunky-sim against cuda;
#   bench      the overlap benchmarks on cuda;
#   calibrate  thunky-calibrate exec --backend cuda (interference too);
#   jax        the JAX and jaxlib versions there, and whether jaxlib
#              carries upstream thunky's dialect.
# $OUT (default ./gpu-check-out) receives at most 6 files, each cut to 15 MiB:
# summary.md, log.txt, reports.tar.gz, bench.json, calibrated-gpu.json,
# gtest.xml. Exit 0 when everything passed.
#
# --rehearse runs, here, every step that needs no GPU: from a copy of the
# pack and the sources in an empty folder, the cuda backend must refuse
# cleanly (exit 2, "no CUDA device"), the GPU tests skip, the rest runs.
# It prints each step's time and exits 0 when all of that holds.
#
# Dumps are compared by scripts/compare_dumps.py (its docstring gives the
# rule: NaN and inf exactly, floats within a bound that follows the dtype).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/gpu-common.sh

rehearse=0
[ "${1:-}" = --rehearse ] && rehearse=1
budget=${GPU_CHECK_BUDGET_S:-290}

if [ $rehearse = 1 ] && [ -z "${GPU_CHECK_IN_COPY:-}" ]; then
  # A copy of what travels to the GPU machine, in an empty folder.
  [ -d .gpu-pack ] || { echo "gpu-check --rehearse: no .gpu-pack/; run bash scripts/gpu-deps.sh first" >&2; exit 2; }
  copy=$(mktemp -d)
  { git ls-files -co --exclude-standard 2>/dev/null || find . -path ./.git -prune -o -type f -print; } | grep -v '^build' | tar -cf - -T - | tar -xf - -C "$copy"
  cp -r .gpu-pack "$copy/"
  OUT=${OUT:-$root/gpu-check-out} GPU_CHECK_IN_COPY=1 bash "$copy/scripts/gpu-check.sh" --rehearse
  rc=$?
  rm -rf "$copy"
  exit $rc
fi

OUT=${OUT:-$root/gpu-check-out}
mkdir -p "$OUT"
work=$(mktemp -d)
summary=$OUT/summary.md
log=$OUT/log.txt
: > "$log"
start=$(date +%s)
status=0
export PATH=$PATH:/usr/local/cuda/bin
export THUNKY_SOURCE_DIR=$root

elapsed() { echo $(($(date +%s) - start)); }
say() { echo "$*" >> "$summary"; }
# The limit of a step: its own, but never past the whole budget.
limit() { local left=$((budget - $(elapsed))); echo $(($1 < left ? $1 : (left > 1 ? left : 1))); }
# step NAME LIMIT CMD...: runs CMD under its limit, logs it, and prints its
# exit status (124 when cut off).
step_start=0
begin() { step_start=$(date +%s); echo "== $1 (limit $2 s, at $(elapsed) s)" | tee -a "$log"; }
end() { echo "   $1: $(($(date +%s) - step_start)) s" | tee -a "$log"; }
fail() { status=1; say "- **$1**"; }

{
  echo "# thunky gpu-check$([ $rehearse = 1 ] && echo ' (rehearsal, no GPU)')"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); sources: $(source_hash)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"
  echo "- CUDA: $(nvcc --version 2>/dev/null | tail -1 || echo 'no nvcc')"
} > "$summary"

# ---- binaries: carried, or built here
begin binaries 200
libs=$root/.gpu-pack/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && libs+=":$d"; done
# NCCL and CUDA libraries that a Python package (PyTorch's, JAX's) installed.
for d in $(python3 -c 'import nvidia, os; [print(os.path.join(p, n, "lib")) for p in nvidia.__path__ for n in os.listdir(p)]' 2>/dev/null); do
  [ -d "$d" ] && libs+=":$d"
done
orig_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$libs:$orig_ld
# Python (numpy, JAX) with the machine's own library path, not thunky's.
py() { LD_LIBRARY_PATH=$orig_ld python3 "$@"; }
bin=$root/.gpu-pack/bin
how=""
if [ ! -x "$bin/thunky-exec" ]; then
  how="no pack (.gpu-pack/bin)"
elif [ "$(sed -n 's/^source //p' .gpu-pack/MANIFEST)" != "$(source_hash)" ]; then
  how="the pack was built from other sources"
elif missing=$(for b in "$bin"/*; do ldd "$b" | grep 'not found'; done | sort -u | tr -s ' \t' ' ') && [ -n "$missing" ]; then
  how="carried binaries miss libraries:$missing"
elif ! timeout 20 "$bin/thunky-exec" examples/init_and_copy.json > "$work/start.txt" 2>&1; then
  how="a carried binary does not start: $(head -c 300 "$work/start.txt")"
elif ! timeout 20 "$bin/thunky-exec-cuda" --help > "$work/start.txt" 2>&1; then
  # thunky-exec hands every --backend cuda run to thunky-exec-cuda beside it.
  how="thunky-exec-cuda is missing or does not start: $(head -c 300 "$work/start.txt")"
fi
if [ -z "$how" ]; then
  say "- binaries: carried in .gpu-pack ($(sed -n 's/^built //p' .gpu-pack/MANIFEST)), $(($(date +%s) - step_start)) s"
elif [ $rehearse = 1 ]; then
  fail "binaries: $how (a rehearsal checks the pack; run bash scripts/gpu-deps.sh)"
  cat "$summary"
  exit 1
else
  echo "   building here: $how" | tee -a "$log"
  cmake_args=(-DCMAKE_BUILD_TYPE=Release -DTHUNKY_CUDA=ON -DTHUNKY_MIMALLOC=OFF -DTHUNKY_MPI=OFF)
  if [ -d .gpu-pack/deps ]; then
    deps=$root/.gpu-pack/deps
    arch=$(cat "$deps/ARCH")
    cmake_args+=(-DCMAKE_PREFIX_PATH="$deps" -Dsimdjson_DIR="$deps/lib/$arch/cmake/simdjson" -DGTest_DIR="$deps/lib/$arch/cmake/GTest"
                 -Dbenchmark_DIR="$deps/lib/$arch/cmake/benchmark" -DEigen3_DIR="$deps/share/eigen3/cmake"
                 -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" -DCLI11_DIR="$deps/share/cmake/CLI11")
    export LD_LIBRARY_PATH=$deps/lib/$arch:$LD_LIBRARY_PATH
  fi
  command -v ninja > /dev/null && cmake_args+=(-G Ninja)
  targets=(thunky-exec thunky-exec-cuda thunky-sim thunky-compare thunky-calibrate cuda_gpu_test nvrtc_test exec_test overlap_bench)
  if timeout "$(limit 200)" cmake -S . -B build-gpu "${cmake_args[@]}" >> "$log" 2>&1 &&
     timeout "$(limit 200)" cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}" >> "$log" 2>&1; then
    mkdir -p "$work/bin"
    for t in "${targets[@]}"; do cp "$(find build-gpu -name "$t" -type f -perm -u+x | head -1)" "$work/bin/"; done
    bin=$work/bin
    say "- binaries: built here ($how), $(($(date +%s) - step_start)) s"
  else
    fail "binaries: the build failed ($how); see log.txt"
    tail -40 "$log"
    cat "$summary"
    exit 1
  fi
fi
end binaries

# ---- tests
begin tests 90
t0=$(date +%s)
timeout "$(limit 60)" "$bin/cuda_gpu_test" --gtest_output=xml:"$OUT/gtest.xml" > "$work/gpu-tests.txt" 2>&1
gpu_rc=$?
timeout "$(limit 30)" "$bin/nvrtc_test" > "$work/nvrtc.txt" 2>&1
nvrtc_rc=$?
timeout "$(limit 60)" "$bin/exec_test" --gtest_filter='GeneratedKernels*' > "$work/kernels.txt" 2>&1
kernels_rc=$?
cat "$work/gpu-tests.txt" "$work/nvrtc.txt" "$work/kernels.txt" >> "$log"
count() { grep -cE "^\[ +$2 +\] [A-Za-z][^ ]* \([0-9]+ ms\)$" "$1"; }
say "- GPU tests (cuda_gpu_test): exit $gpu_rc, $(count "$work/gpu-tests.txt" OK) passed, $(count "$work/gpu-tests.txt" FAILED) failed, $(count "$work/gpu-tests.txt" SKIPPED) skipped"
grep -E '^\[ +(FAILED|OK|SKIPPED) +\] [A-Za-z][^ ]* \([0-9]+ ms\)$' "$work/gpu-tests.txt" | sed -E 's/^/    /' >> "$summary"
say "- NVRTC tests: exit $nvrtc_rc; generated kernels on the host: exit $kernels_rc"
[ $nvrtc_rc = 0 ] && [ $kernels_rc = 0 ] || status=1
if [ $rehearse = 1 ]; then
  # Without a GPU every GPU test must skip, none fail.
  [ $gpu_rc = 0 ] && [ "$(count "$work/gpu-tests.txt" FAILED)" = 0 ] || fail "GPU tests failed without a GPU"
else
  [ $gpu_rc = 0 ] || status=1
fi
end tests

# ---- schedules
begin schedules 120
have_numpy=0
py -c 'import numpy' 2> /dev/null && have_numpy=1
say ""
say "| schedule | cpu | cuda eager | cuda --graph | makespan eager (us) |"
say "| --- | --- | --- | --- | --- |"
mkdir -p "$work/reports"
step_limit=$(limit 120)
for f in examples/*.json tests/schedules/*.json; do
  name=$(basename "$f" .json)
  if [ $(($(date +%s) - step_start)) -ge "$step_limit" ]; then
    say "| $name | not run: the step's $step_limit s were spent | | | |"
    status=1
    continue
  fi
  timeout 20 "$bin/thunky-exec" "$f" --dump "$work/cpu/$name" --max-trip-count 1000 > "$work/$name.cpu.txt" 2>&1
  cpu_rc=$?
  row="| $name | exit $cpu_rc |"
  for mode in eager graph; do
    flags=(--backend cuda --max-trip-count 1000 --warmup 2 --iters 10)
    [ $mode = graph ] && flags+=(--graph)
    timeout 20 "$bin/thunky-exec" "$f" "${flags[@]}" --dump "$work/$mode/$name" --report "$work/reports/$name.$mode.report.json" \
      --trace "$work/reports/$name.$mode.trace.json" > "$work/$name.$mode.txt" 2>&1
    rc=$?
    cat "$work/$name.$mode.txt" >> "$log"
    if [ $rehearse = 1 ]; then
      # The cuda backend must refuse cleanly: exit 2 naming the missing GPU.
      if [ $rc = 2 ] && grep -q "no CUDA device" "$work/$name.$mode.txt"; then row+=" refused (no GPU) |"
      elif [ $rc = "$cpu_rc" ] && [ $rc != 0 ]; then row+=" same exit $rc (refused before any backend) |"
      else row+=" **FAIL** exit $rc: $(grep -m1 -v '^$' "$work/$name.$mode.txt" | cut -c1-120) |"; status=1; fi
    elif [ $rc -ne $cpu_rc ]; then
      row+=" **FAIL** exit $rc (cpu $cpu_rc): $(grep -m1 -v '^$' "$work/$name.$mode.txt" | cut -c1-120) |"
      status=1
    elif [ $rc -ne 0 ]; then
      row+=" same exit $rc |"
    elif [ $have_numpy = 1 ]; then
      verdict=$(py scripts/compare_dumps.py "$f" "$work/cpu/$name" "$work/$mode/$name" 2>&1)
      compared=$?
      verdict=$(echo "$verdict" | tail -1 | cut -c1-160)
      if [ $compared = 0 ]; then row+=" pass ($verdict) |"; else row+=" **FAIL** ($verdict) |"; status=1; fi
    else
      if diff -rq "$work/cpu/$name" "$work/$mode/$name" > /dev/null; then row+=" pass (exact) |"; else row+=" differs (no numpy to weigh it) |"; fi
    fi
  done
  span=$(grep -m1 -oE 'makespan [0-9.]+' "$work/$name.eager.txt" | cut -d' ' -f2)
  say "$row ${span:--} |"
done
end schedules

# ---- across processes: one process a GPU, launched as torchrun launches
# (no MPI there): with two GPUs the dumps must be the cpu backend's; with
# one, process 1 must refuse in one line (it needs GPU 1) and none hang.
begin processes 30
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
sum=examples/sum_across_gpus.json
timeout "$(limit 30)" bash tests/launch_like_torchrun.sh 2 29611 5 "$bin/thunky-exec" "$sum" --backend cuda --timeout 20 \
  --dump "$work/procs/sum" --report "$work/reports/sum.processes.report.json" > "$work/procs.txt" 2>&1
rc=$?
cat "$work/procs.txt" >> "$log"
if [ $rehearse = 1 ] || [ "${gpus:-0}" = 0 ]; then
  n=$(grep -c "no CUDA device" "$work/procs.txt")
  if [ $rc = 2 ] && [ "$n" = 2 ]; then say "- 2 processes, cuda: refused on both (no GPU)"; else fail "2 processes, cuda, no GPU: exit $rc, $n refusals (log.txt)"; fi
elif [ "$gpus" = 1 ]; then
  if [ $rc = 2 ] && grep -q "needs GPU 1, but this node has 1" "$work/procs.txt"; then say "- 2 processes, cuda, one GPU: process 1 refused (it needs GPU 1), none hung"
  else fail "2 processes, cuda, one GPU: exit $rc: $(grep -m1 -v '^$' "$work/procs.txt" | cut -c1-160)"; fi
elif [ $rc != 0 ]; then
  fail "2 processes, cuda, $gpus GPUs: exit $rc: $(grep -m1 -v '^$' "$work/procs.txt" | cut -c1-160)"
elif [ $have_numpy = 1 ]; then
  verdict=$(py scripts/compare_dumps.py "$sum" "$work/cpu/sum_across_gpus" "$work/procs/sum" 2>&1)
  if [ $? = 0 ]; then say "- 2 processes, cuda, $gpus GPUs: pass ($(echo "$verdict" | tail -1 | cut -c1-120)); $(grep -m1 -oE 'makespan [0-9.]+ us' "$work/procs.txt")"
  else fail "2 processes, cuda: dumps differ from the cpu backend's ($(echo "$verdict" | tail -1 | cut -c1-160))"; fi
else
  say "- 2 processes, cuda, $gpus GPUs: ran (exit 0); no numpy to compare the dumps"
fi
end processes

# ---- predicted against measured
begin compare 20
ring=examples/ring_collective_matmul_n4.json
timeout "$(limit 20)" "$bin/thunky-sim" "$ring" --machine h200-8gpu --report "$work/reports/ring.predicted.json" > /dev/null 2>&1
if [ -f "$work/reports/ring_collective_matmul_n4.eager.report.json" ]; then
  {
    echo
    echo "## Ring collective matmul, N = 4: thunky-sim (h200-8gpu) against the cuda backend (one GPU, shared-device)"
    echo '```'
    timeout "$(limit 10)" "$bin/thunky-compare" "$work/reports/ring.predicted.json" "$work/reports/ring_collective_matmul_n4.eager.report.json" 2>&1 | head -40
    echo '```'
  } >> "$summary"
else
  say "- compare: no cuda report of the ring to compare$([ $rehearse = 1 ] && echo ' (none without a GPU)')"
  [ $rehearse = 1 ] || status=1
fi
end compare

# ---- overlap benchmarks (cuda only: the cpu ones run anywhere)
begin bench 45
timeout "$(limit 45)" "$bin/overlap_bench" --benchmark_filter=/cuda/ --benchmark_min_time=0.05 --benchmark_format=console \
  --benchmark_out="$OUT/bench.json" --benchmark_out_format=json > "$work/bench.txt" 2>&1
rc=$?
cat "$work/bench.txt" >> "$log"
{
  echo
  echo "## Overlap benchmarks (bench/overlap_bench, cuda; exit $rc; time = measured makespan)"
  echo '```'
  grep -E '^BM_' "$work/bench.txt" | sed -E 's/ +/ /g'
  echo '```'
} >> "$summary"
[ $rc = 0 ] || [ $rehearse = 1 ] || status=1
end bench

# ---- a model of this GPU
begin calibrate 60
timeout "$(limit 60)" "$bin/thunky-calibrate" exec --backend cuda --ranks 1 -o "$OUT/calibrated-gpu.json" > "$work/calibrate.txt" 2>&1
rc=$?
cat "$work/calibrate.txt" >> "$log"
if [ $rehearse = 1 ]; then
  if [ $rc = 2 ] && grep -q "no CUDA device" "$work/calibrate.txt"; then say "- calibrate exec --backend cuda: refused (no GPU)"
  else fail "calibrate exec --backend cuda without a GPU: exit $rc, $(head -c 200 "$work/calibrate.txt")"; fi
elif [ $rc = 124 ]; then
  fail "calibrate exec: cut off at its limit (log.txt)"
elif [ $rc = 0 ]; then
  say "- calibrate exec: $(py -c 'import json,sys; c=json.load(open(sys.argv[1]))["chip"]; print(c["source"] + "; peak " + ", ".join("%s %.0f TFLOP/s" % (k, v / 1e12) for k, v in c["peak_flops"].items()) + "; launch %.2f us, event latency %.2f us" % (c["launch_overhead_s"] * 1e6, c.get("event_latency_s", 0) * 1e6))' "$OUT/calibrated-gpu.json" 2>&1)"
else
  fail "calibrate exec: exit $rc (log.txt)"
fi
end calibrate

# ---- JAX on this machine
begin jax 20
jax=$(timeout "$(limit 20)" env LD_LIBRARY_PATH="$orig_ld" python3 -c '
import jax, jaxlib
try:
    from jax._src.lib import thunky_dialect
    dialect = "carries upstream thunky (thunky_dialect is a module)" if thunky_dialect is not None else "no upstream thunky (thunky_dialect is None)"
except Exception as e:
    dialect = "no upstream thunky (%s)" % type(e).__name__
print("jax %s, jaxlib %s, devices %s; %s" % (jax.__version__, jaxlib.__version__, [d.platform for d in jax.devices()], dialect))' 2>&1 | tail -1)
say "- JAX: ${jax:-not found}"
end jax

tar -czf "$OUT/reports.tar.gz" -C "$work" reports 2> /dev/null
for f in "$OUT"/*; do  # every file that comes back stays under 16 MiB
  [ "$(stat -c %s "$f")" -gt 15728640 ] && truncate -s 15728640 "$f"
done
say ""
say "- total: $(elapsed) s; $([ $status = 0 ] && echo 'everything passed' || echo '**something failed**')"
cat "$summary"
rm -rf "$work"
exit $status
