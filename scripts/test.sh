#!/usr/bin/env bash
# Install, build and run every test. With THUNKY_SANITIZE=1 the build and
# the run use AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${THUNKY_SANITIZE:-0}" = 1 ]; then
  dir=build-asan
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DTHUNKY_SANITIZE=ON -DTHUNKY_BENCH=OFF > /dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
cmake --build "$dir" -j2
ctest --test-dir "$dir" -j2 --output-on-failure --timeout 300
# The Python package, against the tools just built.
THUNKY_BIN=$PWD/$dir .venv/bin/python -m pytest -q python/tests
# What a Python user does: pip install the repository root in a fresh venv
# (the wheel compiles the tools into the package), then import thunky and
# run the README's example and the console scripts from it alone.
if [ "${THUNKY_SANITIZE:-0}" != 1 ]; then
  bash scripts/wheel-check.sh
fi
