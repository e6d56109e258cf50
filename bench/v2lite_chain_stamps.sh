#!/usr/bin/env bash
# Where a V2-Lite batch-1 layer's time goes, in one GPU call: the stamp and MoE units tests, a stamped decode
# (DSINFER_GEMV_STAMPS: the GEMVs, the routing, the MLA attention and merge + W_UV launches) with the units
# launches row-major and again with their packed copies (DSINFER_GEMV_UNITS_PACKED=1), the phase tables of
# scripts/mla_stamp_phases.py, route_stamp_phases.py and gemv_stamp_sms.py, then the A/B of main against the
# driver's shared memory split, the packed units, and the attention GEMVs' matrices packed too (measured slower
# in the twenty-eighth session, before one block per SM and the split). Logs and the stamps files (xz) under
# OUT; tables last. The GPU's identity is printed first: pooled machines differ (the issue's figures are H200's).
# ~8 minutes with 2 rounds; more rounds: bench/decode_b1_ab.py with the same arms in a call of its own.
# Usage: bench/v2lite_chain_stamps.sh BIN_DIR (holding dsinfer and cuda_device_tests, or a build dir)
#        [ROUNDS, default 2; 0: no A/B]; OUT=dir.
set -u
D=${1:-build}; B=$D/dsinfer; T=$D/cuda_device_tests; [ -x "$T" ] || T=$D/tests/cuda_device_tests
R=${2:-2}; O=${OUT:-/tmp}; L=bench/configs/deepseek-v2-lite
ATTN=mlp.gate_proj.weight,mlp.up_proj.weight,lm_head.weight,self_attn.q_proj.weight
ATTN=$ATTN,self_attn.kv_a_proj_with_mqa.weight,self_attn.o_proj.weight
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader 2>/dev/null | tee "$O/gpu.txt"
echo "== stamp and units tests"
timeout 200 "$T" --gtest_filter='*Stamps*:*MoeUnits*' > "$O/unit_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|  PASSED) |Failure|Expected|Which is" "$O/unit_tests.log" | head -20
stamped() {  # NAME [VAR=VALUE]: a stamped decode (1 prompt, 128 in, 64 out) and its tables, NAME_*.txt
  local S=$O/$1_stamps.txt; rm -f "$S"
  env DSINFER_GEMV_STAMPS="$S" ${2:+"$2"} timeout 300 "$B" bench --model $L --dummy-weights --device cuda --json \
    --num-prompts 1 --input-len 128 --output-len 64 --max-batch-size 1 > "$O/$1_bench.json" 2> "$O/$1_bench.err"
  echo "$1 stamped decode rc $?"
  [ -s "$S" ] || return
  python3 scripts/mla_stamp_phases.py "$S" > "$O/$1_mla_phases.txt" 2>&1
  python3 scripts/route_stamp_phases.py "$S" > "$O/$1_route_phases.txt" 2>&1
  python3 scripts/gemv_stamp_sms.py "$S" > "$O/$1_gemv_sms.txt" 2>&1
  xz -T4 -c "$S" > "$S.xz" && rm -f "$S"
}
stamped main
stamped packed DSINFER_GEMV_UNITS_PACKED=1
if [ "$R" -gt 0 ]; then
  echo "== A/B, $R rounds"
  python3 bench/decode_b1_ab.py --arm main="$B" --arm driver="$B:DSINFER_CUDA_SMEM_CARVEOUT=driver" \
    --arm packed="$B:DSINFER_GEMV_UNITS_PACKED=1" --arm packattn="$B:DSINFER_GEMV_PACKED_NAMES=$ATTN" \
    --model $L --rounds "$R" --out "$O/ab" > "$O/ab.log" 2>&1
  echo "rc $?"
fi
for f in main_mla_phases main_route_phases main_gemv_sms packed_gemv_sms; do echo "== $f"; cat "$O/$f.txt" 2>/dev/null; done
if [ "$R" -gt 0 ]; then echo "== A/B"; tail -8 "$O/ab.log"; fi
