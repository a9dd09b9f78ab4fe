#!/usr/bin/env bash
# Gathers the Debian packages thunky builds with (headers, libraries and
# their CMake files) into .gpu-deps/, an installation prefix that a GPU
# machine without those packages (and without a package registry) can
# build against: scripts/gpu-check.sh uses it when it is there. About 15 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
out=.gpu-deps
rm -rf "$out"
mkdir -p "$out/include" "$out/lib/$arch/cmake" "$out/share/cmake" "$out/share/eigen3"
for h in eigen3 nlohmann CLI gtest gmock benchmark simdjson.h; do cp -rL "/usr/include/$h" "$out/include/"; done
for lib in libsimdjson.so libsimdjson.so.14 libsimdjson.so.14.0.0 libgtest.a libgtest_main.a libgmock.a libgmock_main.a \
           libbenchmark.so libbenchmark.so.1debian libbenchmark.so.1.7.1 libbenchmark_main.a; do
  [ -e "/usr/lib/$arch/$lib" ] && cp -L "/usr/lib/$arch/$lib" "$out/lib/$arch/"
done
for pkg in simdjson GTest benchmark; do cp -rL "/usr/lib/$arch/cmake/$pkg" "$out/lib/$arch/cmake/"; done
cp -rL /usr/share/eigen3/cmake "$out/share/eigen3/"
cp -rL /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$out/share/cmake/"
echo "$arch" > "$out/ARCH"
du -sh "$out"
