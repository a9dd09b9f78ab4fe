#!/usr/bin/env bash
# `cmake --install` into a fresh prefix: the installed tools run from there,
# away from the source tree, and find their machine models beside them
# (THUNKY_MODELS overrides that). Arguments: the build folder, the sources.
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
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
echo "installed tools ran from $prefix with their models"
