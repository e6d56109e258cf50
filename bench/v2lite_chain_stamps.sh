#!/usr/bin/env bash
# Where a V2-Lite batch-1 layer's latency chain goes, in one GPU call: the MLA stamp tests, a stamped decode
# (DSINFER_GEMV_STAMPS: the GEMVs, the routing, the MLA attention and merge + W_UV launches), the phase tables
# of scripts/mla_stamp_phases.py, route_stamp_phases.py and gemv_stamp_sms.py, then the A/B of the shared
# memory split (main's default, 100, against the driver's choice). Logs and the stamps file (xz) under OUT;
# tables last. The GPU's identity is printed first: pooled machines differ (the issue's figures are H200's).
# Usage: bench/v2lite_chain_stamps.sh BIN_DIR (holding dsinfer and cuda_device_tests, or a build dir)
#        [ROUNDS, default 4]; OUT=dir.
set -u
D=${1:-build}; B=$D/dsinfer; T=$D/cuda_device_tests; [ -x "$T" ] || T=$D/tests/cuda_device_tests
R=${2:-4}; O=${OUT:-/tmp}; L=bench/configs/deepseek-v2-lite; S=$O/stamps.txt
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader 2>/dev/null | tee "$O/gpu.txt"
echo "== stamp tests"
timeout 200 "$T" --gtest_filter='*Stamps*' > "$O/stamp_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|  PASSED) |Failure|Expected|Which is" "$O/stamp_tests.log" | head -20
echo "== stamped decode (1 prompt, 128 in, 64 out)"
rm -f "$S"
DSINFER_GEMV_STAMPS=$S timeout 300 "$B" bench --model $L --dummy-weights --device cuda --json --num-prompts 1 \
  --input-len 128 --output-len 64 --max-batch-size 1 > "$O/stamp_bench.json" 2> "$O/stamp_bench.err"
echo "rc $?"
if [ -s "$S" ]; then
  python3 scripts/mla_stamp_phases.py "$S" > "$O/mla_phases.txt" 2>&1
  python3 scripts/route_stamp_phases.py "$S" > "$O/route_phases.txt" 2>&1
  python3 scripts/gemv_stamp_sms.py "$S" > "$O/gemv_sms.txt" 2>&1
  xz -T4 -c "$S" > "$S.xz" && rm -f "$S"
fi
echo "== the shared memory split, $R rounds"
python3 bench/decode_b1_ab.py --arm main="$B" --arm driver="$B:DSINFER_CUDA_SMEM_CARVEOUT=driver" --model $L \
  --rounds "$R" --out "$O/ab" > "$O/ab.log" 2>&1
echo "rc $?"
for f in mla_phases route_phases gemv_sms; do echo "== $f"; cat "$O/$f.txt" 2>/dev/null; done
echo "== A/B"; tail -6 "$O/ab.log"
