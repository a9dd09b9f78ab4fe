#!/usr/bin/env bash
# Makes .gpu-pack/, what scripts/gpu-check.sh needs on a GPU machine that
# has the CUDA toolkit, CMake and ninja but none of thunky's Debian
# packages (and no registry to fetch them from):
#   bin/   the Release tools, the GPU tests and the overlap benchmark,
#          built here with the cuda backend;
#   lib/   the Debian libraries those binaries load (simdjson, mimalloc,
#          Google Benchmark): the CUDA ones are the GPU machine's own;
#   deps/  headers, libraries and CMake files of every Debian package the
#          build uses, for building there when a binary made here does
#          not start on that machine's image;
#   MANIFEST  the source hash the binaries were built from (gpu-check
#          builds afresh when the tree has changed since), the date, sizes.
# About 40 MB; carry it with the working tree: run(carry=[".gpu-pack"]).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
bash scripts/setup.sh
out=.gpu-pack
build=${THUNKY_PACK_BUILD:-build}
targets=(thunky-exec thunky-exec-cuda thunky-sim thunky-compare thunky-calibrate cuda_gpu_test nvrtc_test exec_test overlap_bench)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTHUNKY_CUDA=ON > /dev/null
cmake --build "$build" -j2 --target "${targets[@]}"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] || { echo "gpu-deps: $t was not built" >&2; exit 1; }
  cp "$f" "$out/bin/"
done
# The libraries the binaries load from outside the C runtime and CUDA.
for t in "$out"/bin/*; do ldd "$t"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$lib" in
    /usr/local/cuda*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/libstdc++.so*|*/libgcc_s.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done

# Headers and CMake files for a build on the GPU machine.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
deps=$out/deps
mkdir -p "$deps/include" "$deps/lib/$arch/cmake" "$deps/share/cmake" "$deps/share/eigen3"
for h in eigen3 nlohmann CLI gtest gmock benchmark simdjson.h mimalloc.h mimalloc-override.h mimalloc-new-delete.h; do
  [ -e "/usr/include/$h" ] && cp -rL "/usr/include/$h" "$deps/include/"
done
for lib in simdjson gtest gtest_main gmock gmock_main benchmark benchmark_main mimalloc; do
  # Every name the CMake files import (lib.so.14.0.0 and its links), links kept.
  for f in /usr/lib/$arch/lib$lib.a /usr/lib/$arch/lib$lib.so*; do [ -e "$f" ] && cp -a "$f" "$deps/lib/$arch/"; done
done
for pkg in simdjson GTest benchmark mimalloc-2.0 mimalloc; do
  [ -d "/usr/lib/$arch/cmake/$pkg" ] && cp -rL "/usr/lib/$arch/cmake/$pkg" "$deps/lib/$arch/cmake/"
done
cp -rL /usr/share/eigen3/cmake "$deps/share/eigen3/"
cp -rL /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$deps/share/cmake/"
echo "$arch" > "$deps/ARCH"
{
  echo "source $(source_hash)"
  echo "built $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $(ldd --version | head -1)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
} > "$out/MANIFEST"
du -sh "$out" "$out"/*
