#!/usr/bin/env bash
# Sets up, builds and runs every test (CTest + GoogleTest). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
# ctest runs one test per core; each test process uses one OpenMP thread (tests that exercise the
# parallel paths ask for threads themselves).
OMP_NUM_THREADS=1 ctest --output-on-failure -j"$(nproc)" --timeout 900
