#!/usr/bin/env bash
# GPU correctness of the CUDA backend: kernel path per GPU, goldens on both kernel paths under the margin
# rule, batched-vs-one-at-a-time agreement (tiny fixtures and the Llama-3.1-8B shape with dummy weights), and
# the --cuda-arch flag through bench. Usage: bench/cuda_correctness.sh BIN_DIR (holding dsinfer); OUT=dir.
set -u
B=${1:-build}/dsinfer; O=${OUT:-/tmp}; M=tests/data/models
$B info | tail -1; DSINFER_CUDA_ARCH=sm_80 $B info | tail -1
$B check --model bench/configs/llama-3.1-8b --gpu auto | sed -n 5,16p
echo "== golden"
for m in tiny-llama tiny-qwen2; do for a in auto sm_80; do echo "$m $a: $($B eval golden --model $M/$m --device cuda --cuda-arch $a | tail -1)"; done
  $B eval golden --model $M/$m --device cuda --json > $O/golden_$m.json; python3 -c "import json;d=json.load(open('$O/golden_$m.json'));print([(round(c['rel_l2_err'],6),c['greedy_match'],c['excused_mismatch']) for c in d['cases']])"
  echo "$m split: $(DSINFER_CUDA_GEMM=split $B eval golden --model $M/$m --device cuda | tail -1)"; done
echo "== bench flag"; $B bench --model $M/tiny-llama --device cuda --cuda-arch sm_80 --num-prompts 8 --input-len 16 --output-len 8 --json 2>&1 | python3 -c "import json,sys;d=json.load(sys.stdin);print('bench ok', d.get('output_tokens_per_s'), d.get('errors'))"
echo "== batch agreement"
for m in tiny-llama tiny-qwen2; do for a in auto sm_80; do $B eval batch-agreement --model $M/$m --device cuda --cuda-arch $a --prompts 32 --max-tokens 16 --prompt-len 100 --context-chunk-size 64 --json > $O/agree_${m}_$a.json; python3 -c "import json;d=json.load(open('$O/agree_${m}_$a.json'));print('$m $a', {k:d[k] for k in ['exact','excused','differ','agreement_rate']}); [print('  ', c['case'], c['mismatch']) for c in d['cases'] if not c['exact']][:3]"; done; done
echo "== 8B batch agreement (dummy weights)"
s=$(date +%s); timeout 110 $B eval batch-agreement --model bench/configs/llama-3.1-8b --dummy-weights --device cuda --prompts 16 --max-tokens 32 --prompt-len 128 --json > $O/agree_8b.json 2>$O/agree_8b.log; echo rc=$? s=$(( $(date +%s) - s ))
python3 -c "import json;d=json.load(open('$O/agree_8b.json'));print('8B', {k:d[k] for k in ['exact','excused','differ','agreement_rate']}); [print('  ', c['case'], c['mismatch']) for c in d['cases'] if not c['exact']]" 2>&1 | tail -18; tail -2 $O/agree_8b.log
