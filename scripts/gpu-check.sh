#!/usr/bin/env bash
# The cuda backend on a machine with an NVIDIA GPU, in one go:
#  1. configure and build with CUDA (Release; ninja where installed);
#  2. the tests labelled `gpu`, and the NVRTC tests;
#  3. every example and every schedule under tests/schedules on the cuda
#     backend, eager and --graph, its dumps compared with the cpu backend's
#     (exact, or within 1e-2 relative where floats were computed in
#     another order), with report and Chrome trace;
#  4. the predicted-versus-measured table of the ring collective matmul;
#  5. the overlap benchmarks on the cuda backend (bench/overlap_bench);
#  6. thunky-calibrate exec --backend cuda (a model of this GPU);
# and writes summary.md (pass or fail per schedule, the figures) and the
# logs to $OUT (default ./gpu-check-out). Exit 0 when everything passed.
#
# A machine without thunky's Debian packages builds against .gpu-deps/
# (made by scripts/gpu-deps.sh on a machine that has them) when present.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT=${OUT:-$root/gpu-check-out}
mkdir -p "$OUT"
work=$(mktemp -d)
summary=$OUT/summary.md
start=$(date +%s)
status=0

cmake_args=(-DCMAKE_BUILD_TYPE=Release -DTHUNKY_CUDA=ON)
if [ -d .gpu-deps ]; then
  arch=$(cat .gpu-deps/ARCH)
  deps=$root/.gpu-deps
  cmake_args+=(-DCMAKE_PREFIX_PATH="$deps" -Dsimdjson_DIR="$deps/lib/$arch/cmake/simdjson" -DGTest_DIR="$deps/lib/$arch/cmake/GTest"
               -Dbenchmark_DIR="$deps/lib/$arch/cmake/benchmark" -DEigen3_DIR="$deps/share/eigen3/cmake"
               -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" -DCLI11_DIR="$deps/share/cmake/CLI11")
  export LD_LIBRARY_PATH=$deps/lib/$arch:${LD_LIBRARY_PATH:-}
fi
command -v ninja > /dev/null && cmake_args+=(-G Ninja)
export PATH=$PATH:/usr/local/cuda/bin

{
  echo "# thunky gpu-check"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"
  echo "- CUDA: $(nvcc --version 2>/dev/null | tail -1)"
  echo
} > "$summary"

echo "== build" | tee -a "$OUT/build.log"
if ! cmake -S . -B build-gpu "${cmake_args[@]}" >> "$OUT/build.log" 2>&1 || ! cmake --build build-gpu -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
  echo "**build failed**: see build.log" >> "$summary"
  tail -40 "$OUT/build.log"
  exit 1
fi
echo "- build: ok ($(( $(date +%s) - start )) s)" >> "$summary"
bin=$root/build-gpu

echo "== gpu tests"
ctest --test-dir build-gpu -R 'Nvrtc|GeneratedKernels' --output-on-failure --timeout 300 > "$OUT/gpu-tests.log" 2>&1 || status=1
ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 300 >> "$OUT/gpu-tests.log" 2>&1 || status=1
echo "- gpu tests: $(grep -E 'tests passed' "$OUT/gpu-tests.log" | tail -1)" >> "$summary"
grep -E 'Test +#[0-9]+: (CudaBackend|Nvrtc)' "$OUT/gpu-tests.log" | sed -E 's/^ *[0-9]+\/[0-9]+ /    /; s/ \.{3,}/ /' >> "$summary"

echo "== schedules"
cat > "$work/compare.py" <<'PY'
import sys, os, glob
import numpy as np
a, b = sys.argv[1], sys.argv[2]
worst, exact, files = 0.0, True, 0
for fa in sorted(glob.glob(os.path.join(a, "*.npy"))):
    fb = os.path.join(b, os.path.basename(fa))
    if not os.path.exists(fb):
        print("missing " + os.path.basename(fa)); sys.exit(1)
    x, y = np.load(fa), np.load(fb)
    files += 1
    if x.shape != y.shape:
        print("shape %s vs %s in %s" % (x.shape, y.shape, os.path.basename(fa))); sys.exit(1)
    if np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
        continue
    exact = False
    if x.dtype.kind not in "fc":
        print("integers differ in " + os.path.basename(fa)); sys.exit(1)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    err = np.abs(x64 - y64) / np.maximum(np.maximum(np.abs(x64), np.abs(y64)), 1e-3)
    err = np.where(np.isnan(x64) & np.isnan(y64), 0, err)
    worst = max(worst, float(np.nanmax(err)))
print("exact" if exact else "max relative error %.2e" % worst)
sys.exit(0 if worst <= 1e-2 else 1)
PY
have_numpy=0
python3 -c 'import numpy' 2> /dev/null && have_numpy=1
echo >> "$summary"
echo "| schedule | cpu | cuda eager | cuda --graph | makespan eager (us) |" >> "$summary"
echo "| --- | --- | --- | --- | --- |" >> "$summary"
mkdir -p "$work/reports"
for f in examples/*.json tests/schedules/*.json; do
  name=$(basename "$f" .json)
  timeout 120 "$bin/thunky-exec" "$f" --dump "$work/cpu/$name" --max-trip-count 1000 > "$work/$name.cpu.txt" 2>&1
  cpu_rc=$?
  row="| $name | exit $cpu_rc |"
  for mode in eager graph; do
    flags=(--backend cuda --max-trip-count 1000 --warmup 2 --iters 10)
    [ $mode = graph ] && flags+=(--graph)
    timeout 120 "$bin/thunky-exec" "$f" "${flags[@]}" --dump "$work/$mode/$name" --report "$work/reports/$name.$mode.report.json" \
      --trace "$work/reports/$name.$mode.trace.json" > "$work/$name.$mode.txt" 2>&1
    rc=$?
    cat "$work/$name.$mode.txt" >> "$OUT/schedules.log"
    if [ $rc -ne $cpu_rc ]; then
      row+=" **FAIL** exit $rc (cpu $cpu_rc): $(grep -m1 -v '^$' "$work/$name.$mode.txt" | cut -c1-120) |"
      status=1
    elif [ $rc -ne 0 ]; then
      row+=" same exit $rc |"
    elif [ $have_numpy = 1 ]; then
      verdict=$(python3 "$work/compare.py" "$work/cpu/$name" "$work/$mode/$name" 2>&1)
      if [ $? -eq 0 ]; then row+=" pass ($verdict) |"; else row+=" **FAIL** ($verdict) |"; status=1; fi
    else
      if diff -rq "$work/cpu/$name" "$work/$mode/$name" > /dev/null; then row+=" pass (exact) |"; else row+=" differs (no numpy to weigh it) |"; fi
    fi
  done
  span=$(grep -m1 -oE 'makespan [0-9.]+' "$work/$name.eager.txt" | cut -d' ' -f2)
  echo "$row ${span:--} |" >> "$summary"
done

echo "== predicted vs measured"
ring=examples/ring_collective_matmul_n4.json
"$bin/thunky-sim" "$ring" --machine h200-8gpu --report "$work/reports/ring.predicted.json" > /dev/null 2>&1
{
  echo
  echo "## Ring collective matmul, N = 4: thunky-sim (h200-8gpu) against the cuda backend (one GPU, shared-device)"
  echo '```'
  "$bin/thunky-compare" "$work/reports/ring.predicted.json" "$work/reports/ring_collective_matmul_n4.eager.report.json" 2>&1 | head -40
  echo '```'
} >> "$summary"

echo "== overlap benchmarks"
# The cuda runs only: the cpu ones run anywhere, and device time is scarce.
timeout 300 "$bin/bench/overlap_bench" --benchmark_filter=/cuda/ --benchmark_format=console --benchmark_out="$OUT/bench.json" --benchmark_out_format=json > "$work/bench.txt" 2>&1
{
  echo
  echo "## Overlap benchmarks (bench/overlap_bench; time = measured makespan)"
  echo '```'
  grep -E '^BM_' "$work/bench.txt" | sed -E 's/ +/ /g'
  echo '```'
} >> "$summary"

echo "== calibrate exec"
# A model of this GPU from micro-benchmarks, its GEMMs priced by shape.
timeout 150 "$bin/thunky-calibrate" exec --backend cuda --ranks 1 -o "$OUT/calibrated-gpu.json" > "$OUT/calibrate.log" 2>&1
rc=$?
if [ $rc -eq 124 ]; then
  echo "- calibrate exec: did not finish within 150 s (calibrate.log)" >> "$summary"
elif [ $rc -eq 0 ]; then
  {
    echo
    echo "## thunky-calibrate exec --backend cuda (calibrated-gpu.json)"
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["chip"]; print("- " + c["source"]); print("- peak_flops: " + ", ".join("%s %.0f TFLOP/s" % (k, v / 1e12) for k, v in c["peak_flops"].items())); print("- launch_overhead %.2f us, event_latency %.2f us" % (c["launch_overhead_s"] * 1e6, c.get("event_latency_s", 0) * 1e6))' "$OUT/calibrated-gpu.json"
  } >> "$summary"
else
  echo "- calibrate exec: **failed** (calibrate.log)" >> "$summary"
  status=1
fi

tar -czf "$OUT/reports.tar.gz" -C "$work" reports
echo >> "$summary"
echo "- total: $(( $(date +%s) - start )) s; $([ $status = 0 ] && echo 'everything passed' || echo '**something failed**')" >> "$summary"
cat "$summary"
rm -rf "$work"
exit $status
