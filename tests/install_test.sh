#!/usr/bin/env bash
# `cmake --install` into a fresh prefix: the installed tools run from there,
# away from the source tree, and find their machine models beside them
# (THUNKY_MODELS overrides that); a project outside the tree builds against
# the installed C++ API with find_package(thunky) and predicts, runs and
# checks schedules through it. Arguments: the build folder, the sources.
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
away=$(mktemp -d)  # the consumer's build, apart from the prefix: it finds the models through its package
trap 'rm -rf "$prefix" "$away"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
cp "$src/examples/ring_collective_matmul_n4.json" "$prefix/ring.json"
cd "$prefix"
[ -f share/thunky/models/h100-8gpu.json ] || { echo "no share/thunky/models/h100-8gpu.json under the prefix"; exit 1; }
out=$(bin/thunky-sim ring.json --machine h100-8gpu)
grep -q "machine h100-8gpu-nvlink" <<< "$out" || { echo "the installed thunky-sim did not price with h100-8gpu: $out"; exit 1; }
bin/thunky-exec ring.json > /dev/null
mkdir empty
if THUNKY_MODELS="$prefix/empty" bin/thunky-sim ring.json --machine h100-8gpu > /dev/null 2>&1; then
  echo "THUNKY_MODELS naming an empty folder still found h100-8gpu"
  exit 1
fi

# The C++ API: a consumer project configured against the prefix alone.
echo '{"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f33", "role": "input"}}, "program": []}' > bad.json
flags=""
if grep -q '^THUNKY_SANITIZE:BOOL=ON' "$build/CMakeCache.txt"; then
  flags="-fsanitize=address,undefined"  # the installed libraries were built with the sanitizers
fi
cmake -S "$src/tests/consumer" -B "$away/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" > consumer.log 2>&1 || { cat consumer.log; exit 1; }
cmake --build "$away/consumer" -j2 > consumer.log 2>&1 || { cat consumer.log; exit 1; }
out=$("$away/consumer/consumer" ring.json bad.json) || { echo "the consumer failed ($?): $out"; exit 1; }
grep -q "bad.json:/buffers/a/dtype" <<< "$out" || { echo "the API's error did not name the file and the pointer: $out"; exit 1; }
echo "installed tools ran from $prefix with their models; the C++ API: $out"
