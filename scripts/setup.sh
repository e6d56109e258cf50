#!/usr/bin/env bash
# Installs every Debian package dsinfer needs to build and test (idempotent; run as root).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libpcre2-dev libyaml-cpp-dev libcli11-dev libboost1.81-dev
  libgtest-dev libgmock-dev libbenchmark-dev libomp-dev clang-format zlib1g-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
