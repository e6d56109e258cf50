#!/usr/bin/env bash
# Installs every Debian package dsinfer needs to build and test, and the npm packages of the server's
# client test (idempotent; run as root).
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

# The openai npm client for tests/server/openai_client_test (node 20 + npm; versions pinned by the
# committed package-lock.json). Idempotent: skipped when the installed tree matches the lock file.
node_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/server/node"
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs and npm (Debian packages) for the openai client test"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null || true
fi
if command -v npm >/dev/null 2>&1; then
  if [ ! -d "$node_dir/node_modules/openai" ] || ! npm ls --prefix "$node_dir" openai >/dev/null 2>&1; then
    echo "setup: installing the openai npm client into tests/server/node"
    npm ci --prefix "$node_dir" --no-audit --no-fund >/dev/null
  fi
  echo "setup: openai npm client present"
else
  echo "setup: npm not found; the openai client test will be skipped"
fi
