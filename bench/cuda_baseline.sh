#!/usr/bin/env bash
# GPU baseline of the CUDA backend on the Llama-3.1-8B shape (R1-Distill-Llama-8B) with dummy weights:
# CUDA op test, dense goldens, decode at batch 1 and a throughput run. Usage: bench/cuda_baseline.sh BIN_DIR
set -uo pipefail
BIN=${1:-build}
OUT=${OUT:-/tmp}
"$BIN/cuda_ops_test" 2>&1 | tail -1
for m in tiny-llama tiny-qwen2; do "$BIN/dsinfer" eval golden --device cuda --tolerance 2e-2 --model tests/data/models/$m | tail -1; done
run() {  # name, extra args
  local name=$1; shift
  "$BIN/dsinfer" bench --model bench/configs/llama-3.1-8b --dummy-weights --device cuda --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.log"
  python3 - "$OUT/$name.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>12}: {d['output_tokens_per_s']:9.1f} out tok/s  TPOT p50 {d['tpot_ms']['p50']:8.2f} ms  "
      f"TTFT p50 {d['ttft_ms']['p50']:8.1f} ms  errors {d['errors']}")
PY
}
run decode_b1 --num-prompts 4 --input-len 128 --output-len 64 --max-batch-size 1
run batch64 --num-prompts 256 --input-len 128 --output-len 128 --max-batch-size 64
