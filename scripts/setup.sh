#!/usr/bin/env bash
# Installs what thunky builds with (Debian packages). Safe to run again:
# it only calls apt-get when something is missing.
set -euo pipefail
packages=(cmake g++ make clang libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libsimdjson-dev libmimalloc-dev libeigen3-dev libcli11-dev libopenmpi-dev openmpi-bin python3 python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi

# The Python package (python/, `import thunky`) in a virtual environment
# of the repository, .venv, with numpy, pytest and JAX (CPU, pinned: 0.10.2
# is the newest for Python 3.11): made once, again when something is
# missing from it.
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c 'import numpy, pytest, jax, thunky' > /dev/null 2>&1; then
  echo "setup: making .venv (numpy, pytest, jax, thunky from python/)"
  python3 -m venv .venv 2> /dev/null || /usr/bin/python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check numpy pytest "jax==0.10.2" "jaxlib==0.10.2"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e python
fi
