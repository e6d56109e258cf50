#!/usr/bin/env bash
# GPU checks and figures of the DeepSeek-V2/V3 CUDA ops: op tests against the CPU reference, goldens (tiny V2,
# tiny V3 also chunked, small V3 FP8), batched-vs-one-at-a-time agreement, the MLA / routing / expert
# micro-benchmarks and DeepSeek-V2-Lite (dummy weights) decode and batch figures.
# Usage: bench/cuda_deepseek.sh BIN_DIR (holding dsinfer and cuda_device_tests, or a build dir); OUT=dir.
set -u
D=${1:-build}; B=$D/dsinfer; T=$D/cuda_device_tests; [ -x "$T" ] || T=$D/tests/cuda_device_tests
O=${OUT:-/tmp}; M=tests/data/models; L=bench/configs/deepseek-v2-lite
echo "== op tests"; timeout 120 $T --gtest_filter='CudaDeepseek*:*Graph*' 2>&1 | grep -E "^\[  (FAILED|     OK|  PASSED) |Failure|Expected|Which is" | head -40
echo "== golden"
for m in tiny-deepseek-v2 tiny-deepseek-v3 small-deepseek-v3-fp8; do echo "$m: $(timeout 60 $B eval golden --model $M/$m --device cuda --tolerance 2e-2 | tail -1)"
  timeout 60 $B eval golden --model $M/$m --device cuda --json > $O/golden_$m.json; python3 -c "import json;d=json.load(open('$O/golden_$m.json'));print('  rel_l2, greedy, excused:', [(round(c['rel_l2_err'],5),c['greedy_match'],(c.get('excused_mismatch') or {}).get('excused')) for c in d['cases']])"; done
echo "tiny-deepseek-v3, teacher-forced routing check:"; timeout 120 $B eval golden --model $M/tiny-deepseek-v3 --device cuda --routing-check | grep "routing check"
echo "tiny-deepseek-v3 chunk 5: $(timeout 60 $B eval golden --model $M/tiny-deepseek-v3 --device cuda --tolerance 2e-2 --prefill-chunk 5 | tail -1)"
echo "== batch agreement"
for m in tiny-deepseek-v2 tiny-deepseek-v3; do timeout 120 $B eval batch-agreement --model $M/$m --device cuda --prompts 32 --max-tokens 16 --prompt-len 100 --context-chunk-size 64 --json > $O/agree_$m.json; python3 -c "import json;d=json.load(open('$O/agree_$m.json'));print('$m', {k:d.get(k) for k in ['exact','excused','excused_routing','differ','agreement_rate']})"; done
echo "== micro-benchmarks"; timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter='CudaDeepseek*Bench*' 2>&1 | grep -vE "^\[|^Running|^Note|^$|YOU HAVE"
bench() { timeout 400 $B bench --model $L --dummy-weights --device cuda --json "$@" 2>$O/ds_bench.log | python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['output_tokens_per_s']:.1f} out tok/s, TPOT p50 {d['tpot_ms']['p50']:.2f} ms, TTFT p50 {d['ttft_ms']['p50']:.1f} ms, errors {d['errors']}\")"; }
echo "== V2-Lite decode, batch 1"; bench --num-prompts 4 --input-len 128 --output-len 128 --max-batch-size 1
echo "== V2-Lite 1000 prompts, input 128:1024, output 128:512 (the issue's throughput workload), batch 1024"
bench --num-prompts 1000 --input-len 128:1024 --output-len 128:512 --max-batch-size 1024 --max-num-tokens 16384
echo "== the same at batch 512, 8192 tokens a step"
bench --num-prompts 1000 --input-len 128:1024 --output-len 128:512 --max-batch-size 512 --max-num-tokens 8192
