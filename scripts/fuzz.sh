#!/usr/bin/env bash
# Builds a libFuzzer target with clang and runs it for SECONDS (default 300).
#   bash scripts/fuzz.sh [SECONDS] [load|calibrate]
# load (default): inputs up to 1 MB as schedules, loaded and validated, the
#   small ones run on the cpu backend and simulated; corpus seeded from
#   examples/, tests/malformed/ and tests/hostile/.
# calibrate: inputs as nccl-tests output (read and priced), as machine
#   models (parsed and priced) and as NCCL_ALGO / NCCL_PROTO values; corpus
#   seeded from tests/nccl/ and models/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
target="${2:-load}"
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
