#!/usr/bin/env bash
# What a Python user does: `pip install .` in a fresh venv (the wheel builds
# the C++ tools in Release into the package), then `import thunky`, the
# README's first "From Python" example and every console script, from a
# folder outside the checkout and with no THUNKY_BIN, so that only what the
# wheel installed is used. Prints one line a step; exit 1 on a failure.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unset THUNKY_BIN THUNKY_MODELS
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
start=$SECONDS
python3 -m venv "$work/venv"
if ! "$work/venv/bin/pip" install -q --disable-pip-version-check "$repo" > "$work/pip.log" 2>&1; then
  tail -30 "$work/pip.log"
  echo "wheel-check: pip install failed"
  exit 1
fi
echo "wheel-check: pip install . in a fresh venv ($((SECONDS - start)) s)"
cd "$work"
where=$("$work/venv/bin/python" -c 'import thunky, os; print(os.path.dirname(thunky.__file__))')
case "$where" in "$work"/venv/*) ;; *) echo "wheel-check: import thunky found $where, not the venv's"; exit 1 ;; esac
for tool in thunky-sim thunky-exec thunky-check thunky-gen thunky-compare thunky-calibrate; do
  [ -x "$work/venv/bin/$tool" ] || { echo "wheel-check: $tool is not on the venv's PATH"; exit 1; }
  "$work/venv/bin/$tool" --help > /dev/null || { echo "wheel-check: $tool --help failed"; exit 1; }
done
"$work/venv/bin/thunky-sim" "$repo/examples/init_and_copy.json" --machine h100-8gpu > sim.txt
grep -q "makespan" sim.txt || { echo "wheel-check: thunky-sim printed no makespan"; cat sim.txt; exit 1; }
# The README's first Python example, as a user pastes it.
awk '/^## From Python/{on=1} on&&/^```python/{grab=1; next} grab&&/^```/{exit} grab{print}' "$repo/README.md" > example.py
PATH="/usr/bin:/bin" "$work/venv/bin/python" example.py > example.txt
grep -q "^\[0. 1. 2. 3. 1. 1. 1. 1.\]$" example.txt || { echo "wheel-check: the README's example printed:"; cat example.txt; exit 1; }
grep -q "^\[6. 7. 0. 1. 2. 3. 4. 5.\]$" example.txt || { echo "wheel-check: the README's example printed:"; cat example.txt; exit 1; }
echo "wheel-check: import thunky, the six console scripts and the README's example ran from the wheel alone ($((SECONDS - start)) s)"
