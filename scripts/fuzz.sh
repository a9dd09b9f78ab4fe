#!/usr/bin/env bash
# Builds a libFuzzer target with clang and runs it for SECONDS (default 300).
#   bash scripts/fuzz.sh [SECONDS] [load|calibrate]
# load (default): inputs up to 1 MB as schedules, loaded and validated, the
#   small ones run on the cpu backend and simulated; corpus seeded from
#   examples/, tests/malformed/ and tests/hostile/.
# calibrate: inputs as nccl-tests output (read and priced), as machine
#   models (parsed and priced) and as NCCL_ALGO / NCCL_PROTO values; corpus
#   seeded from tests/nccl/ and models/.
# tools: the Release tools of build/ (thunky-check, thunky-exec, thunky-sim)
#   on every schedule of the load corpus (what `load` found, and its
#   seeds) under `ulimit -v 2000000`, a 2 GB address space as a batch
#   system sets one: each must exit 0 to 3 within 60 s with no signal,
#   and say why on stderr when it does not exit 0. (The libFuzzer targets
#   run under AddressSanitizer, whose shadow memory no such limit allows.)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
target="${2:-load}"
if [ "$target" = tools ]; then
  for t in thunky-check thunky-exec thunky-sim; do
    [ -x "build/$t" ] || { echo "fuzz.sh: no build/$t (bash scripts/test.sh builds it)" >&2; exit 2; }
  done
  files=(fuzz-corpus/* examples/*.json tests/malformed/*.json tests/hostile/*.json)
  err=$(mktemp)
  trap 'rm -f "$err"' EXIT
  end=$((SECONDS + seconds)) runs=0 bad=0
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    for tool in "thunky-check" "thunky-exec --max-trip-count 100000" "thunky-sim --machine h100-8gpu --max-trip-count 100000"; do
      [ $SECONDS -lt $end ] || break 2
      set +e
      (ulimit -v 2000000; exec timeout 60 build/$tool "$f" > /dev/null 2> "$err")
      rc=$?
      set -e
      runs=$((runs + 1))
      if [ $rc -gt 3 ] || { [ $rc -ne 0 ] && [ ! -s "$err" ]; }; then
        bad=$((bad + 1))
        echo "FAIL (exit $rc): build/$tool $f: $(head -c 300 "$err")"
      fi
    done
  done
  echo "fuzz.sh tools: $runs runs under ulimit -v 2000000, $bad failed"
  [ $bad -eq 0 ]
  exit
fi
case "$target" in
  load) seeds=(examples/*.json tests/malformed/*.json tests/hostile/*.json); max_len=1048576 ;;
  calibrate) seeds=(tests/nccl/*.txt models/*.json); max_len=65536 ;;
  *) echo "fuzz.sh: unknown target '$target' (load or calibrate)" >&2; exit 2 ;;
esac
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTHUNKY_FUZZ=ON -DTHUNKY_BENCH=OFF > /dev/null
cmake --build build-fuzz -j2 --target "thunky_${target}_fuzzer"
corpus=fuzz-corpus
[ "$target" = load ] || corpus="fuzz-corpus-$target"
mkdir -p "$corpus"
cp "${seeds[@]}" "$corpus/"
"./build-fuzz/thunky_${target}_fuzzer" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -len_control=0 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
