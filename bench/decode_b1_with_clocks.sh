#!/usr/bin/env bash
# Batch-1 decode benches back to back with the GPU's clocks, temperatures and event reasons sampled beside them
# (nvidia-smi every 500 ms), to tell what changes when the machine has a slow moment (the thirty-third session
# found the 8B at 88.5-88.8% of the in-process roofline at such moments against 90.7-91.0% otherwise, at the same
# copy bandwidth). One line per bench: start time, TPOT mean (ms/token), copy bandwidth (GB/s), roofline / TPOT,
# then the samples taken while it ran.
# Usage: bench/decode_b1_with_clocks.sh DSINFER [MODEL_DIR] [RUNS] (defaults: bench/configs/llama-3.1-8b, 4).
# Samples go to ${OUT:-/tmp}/decode_b1_clocks.csv.
set -uo pipefail
bin=${1:?usage: bench/decode_b1_with_clocks.sh DSINFER [MODEL_DIR] [RUNS]}
model=${2:-bench/configs/llama-3.1-8b}
runs=${3:-4}
csv=${OUT:-/tmp}/decode_b1_clocks.csv
command -v nvidia-smi > /dev/null || { echo "no nvidia-smi here" >&2; exit 1; }
# Which GPU this is (a machine lent later may be another one of the pool) and its limits.
echo "gpu: $(nvidia-smi --query-gpu=name,uuid,serial,pci.bus_id,vbios_version,driver_version,power.limit,enforced.power.limit,clocks.max.sm,clocks.max.mem,ecc.mode.current \
  --format=csv,noheader 2>&1 | head -1)"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active \
  --format=csv,noheader -lms 500 > "$csv" 2>&1 &
smi=$!
trap 'kill $smi 2> /dev/null' EXIT
for _ in $(seq "$runs"); do
  start=$(date -u '+%Y/%m/%d %H:%M:%S')  # nvidia-smi's timestamp format, so that strings compare in time order
  line=$(timeout 300 "$bin" bench --model "$model" --dummy-weights --device cuda --json --num-prompts 3 --input-len 128 \
    --output-len 128 --max-batch-size 1 2> /dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
r = d["decode_roofline_batch1"]
print(round(d["tpot_ms"]["mean"], 4), round(r["copy_bandwidth_gbs"]), round(r["tpot_fraction"], 4))')
  end=$(date -u '+%Y/%m/%d %H:%M:%S')
  # The samples taken in [start, end]: mean temperatures, the most power, each clock and reason.
  samples=$(awk -F', ' -v s="$start" -v e="$end" '{
      at = substr($1, 1, 19);
      if (at >= s && at <= e) {
        n++; tg += $5; tm += $6; if ($4 + 0 > w) w = $4 + 0; clk[$2]++; why[$7]++
      }
    } END {
      if (n == 0) { print "no samples"; exit }
      printf "samples %d, gpu %.1f C, memory %.1f C, max %.0f W, SM clock", n, tg / n, tm / n, w
      for (k in clk) printf " %s x%d", k, clk[k]
      printf ", reasons"
      for (k in why) printf " %s x%d", k, why[k]
      print ""
    }' "$csv")
  echo "${start#* } ${line:-bench failed} | $samples"
done
