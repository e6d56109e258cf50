#!/usr/bin/env bash
# The persistent decode schedule's premises on a GPU (docs/persistent_decode.md): the phase and latency probes'
# tests, then their benchmarks (phase boundary against kernel handoff, the ring across barriers and across a
# latency-bound part, one dependent hop alone and beside the weight stream). Logs under OUT; tables last.
# Usage: bench/persistent_probes.sh BIN_DIR (holding cuda_device_tests, or a build dir); OUT=dir.
set -u
D=${1:-build}; T=$D/cuda_device_tests; [ -x "$T" ] || T=$D/tests/cuda_device_tests
O=${OUT:-/tmp}
echo "== probe tests"
timeout 300 "$T" --gtest_filter='*PhaseProbe*:*LatencyProbe*:*HandoffProbe*' > "$O/probe_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|  PASSED) |Failure|Expected|Which is" "$O/probe_tests.log" | head -30
echo "== probe benchmarks"
timeout 300 "$T" --gtest_also_run_disabled_tests --gtest_filter='*BenchPhases:*BenchHops:*BenchHandoff' \
  > "$O/probe_bench.log" 2>&1
echo "rc $?"; grep -vE "^\[|^Running|^Note|^$|YOU HAVE" "$O/probe_bench.log"
