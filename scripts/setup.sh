#!/usr/bin/env bash
# Installs what thunky builds with (Debian packages). Safe to run again:
# it only calls apt-get when something is missing.
set -euo pipefail
packages=(cmake g++ make clang libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libsimdjson-dev libmimalloc-dev libeigen3-dev libcli11-dev)
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
