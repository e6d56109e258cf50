#!/usr/bin/env bash
# GPU checks and decode figures of DeepSeek-V3.2 and V4: their op and model tests against the CPU, the goldens,
# their decode-op micro-benchmarks, and decode with dummy weights on two slices that fit one GPU
# (bench/configs/deepseek-v32-3l: V3.2 at V3's published shape, 3 layers; bench/configs/deepseek-v4-flash-4l:
# V4-Flash's first 4 layers): batch 1 after a 128-token prompt, batch 1 after an 8192-token prompt, and 64
# requests at batch 32.
# Usage: bench/cuda_v32_v4.sh BIN_DIR (holding dsinfer and cuda_device_tests, or a build dir); OUT=dir keeps
# each run's JSON; TRACE=1 also writes a kernel trace of each batch-1 run (DSINFER_KERNEL_TRACE) there.
set -u
D=${1:-build}; B=$D/dsinfer; T=$D/cuda_device_tests; [ -x "$T" ] || T=$D/tests/cuda_device_tests
O=${OUT:-/tmp}; M=tests/data/models
echo "== op and model tests"
timeout 300 $T --gtest_filter='*V4*:*HyperConn*:*Dsa*:*IndexerTopk*:*IndexTies*' 2>&1 |
  grep -E "^\[  (FAILED|  PASSED) |Failure" | head -20
echo "== golden"
for m in tiny-deepseek-v32 tiny-deepseek-v4 small-deepseek-v4-fp8-fp4; do
  echo "$m: $(timeout 100 $B eval golden --model $M/$m --device cuda | tail -1 | cut -c1-60)"
done
echo "== micro-benchmarks (V3.2 indexer / sparse MLA, V4 attention per layer kind and hc_pre)"
timeout 300 $T --gtest_also_run_disabled_tests --gtest_filter='*BenchDsaDecode*:*BenchV4Decode*' 2>&1 |
  grep -vE "^\[|^Running|^Note|^$|YOU HAVE"
run() {  # run NAME MODEL ARGS...: one bench, its TPOT and output rate
  local name=$1 model=$2; shift 2
  local env=(); [ "${TRACE:-0}" = 1 ] && [[ $name == *b1 ]] && env=(DSINFER_KERNEL_TRACE=$O/trace-$name.txt)
  env "${env[@]}" timeout 400 $B bench --model bench/configs/$model --dummy-weights --device cuda --json "$@" \
    > $O/$name.json 2> $O/$name.log
  python3 -c "import json; d=json.load(open('$O/$name.json')); print(f\"$name: TPOT mean {d['tpot_ms']['mean']:.4f} ms (p99 {d['tpot_ms']['p99']:.4f}), {d['output_tokens_per_s']:.1f} out tok/s, TTFT mean {d['ttft_ms']['mean']:.1f} ms, errors {d['errors']}\")" 2>/dev/null ||
    echo "$name: failed (see $O/$name.log)"
}
for model in deepseek-v32-3l deepseek-v4-flash-4l; do
  echo "== $model"
  run $model-b1 $model --num-prompts 3 --input-len 128 --output-len 128 --max-batch-size 1
  run $model-8k $model --num-prompts 2 --input-len 8192 --output-len 64 --max-batch-size 1
  run $model-b32 $model --num-prompts 64 --input-len 1024 --output-len 128 --max-batch-size 32
done
