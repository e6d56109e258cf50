#!/usr/bin/env bash
# Every GPU correctness check in one command, for the GPU machine (built binaries carried there): the CUDA op
# tests, `eval golden --device cuda` on every fixture model the CUDA backend covers (the others are reported
# as not covered), batched vs one-at-a-time agreement on the dense and DeepSeek fixtures, constrained decoding
# and prompt scoring through `dsinfer serve` (scripts/gpu_serve_check.py), and, where PyTorch
# and transformers are present, the goldens of tests/gpu_references/ (scripts/gpu_reference_golden.sh: V2-Lite's
# MLA shape, Llama at head_dim 128, Qwen2 at head_dim 64, DeepSeek-V3.2's indexer). The V3.2 and V4 fixtures'
# goldens were made by torch on the CPU, whose top-k keeps other exactly tied indexer keys than the GPU: eval
# golden's routing rule judges those differing selections (and routing flips) by the CPU's own scores.
# Logs go to LOG_DIR (default $OUT, else gpu-check-logs); a table of results is printed last. Exits non-zero
# when any check fails.
# Usage: scripts/gpu_check.sh [--poison] [--no-references | --references-only] [DSINFER] [CUDA_DEVICE_TESTS]
# [LOG_DIR] (defaults: build/dsinfer from scripts/build.sh, build/tests/cuda_device_tests, built here when
# missing). The transformers references take several minutes: --no-references leaves them out,
# --references-only runs just them, so that the whole check fits two short calls of a lent GPU machine.
set -uo pipefail
cd "$(dirname "$0")/.."
# --poison: every GPU allocation reads as NaN until written (DSINFER_CUDA_POISON=1), so a kernel that uses
# memory nothing wrote (a stale KV row, a tile's padding) fails the checks instead of passing by luck.
poison=off
part=all  # all, engine (--no-references) or references (--references-only)
while [ $# -gt 0 ]; do
  case "$1" in
    --poison)
      export DSINFER_CUDA_POISON=1
      poison=on
      ;;
    --no-references | --references-only)
      if [ "$part" != all ]; then
        echo "gpu_check.sh: give at most one of --no-references and --references-only" >&2
        exit 2
      fi
      if [ "$1" = --no-references ]; then part=engine; else part=references; fi
      ;;
    --*)
      echo "gpu_check.sh: unknown option $1 (see the usage at the top of the script)" >&2
      exit 2
      ;;
    *) break ;;
  esac
  shift
done
bin=${1:-build/dsinfer}
tests=${2:-build/tests/cuda_device_tests}
logs=${3:-${OUT:-gpu-check-logs}}
mkdir -p "$logs"
# The CUDA test binary is built on request (it holds every CUDA test, to carry one file to a GPU machine).
if [ "$part" != references ] && [ $# -lt 2 ] && [ ! -x "$tests" ] && [ -f build/build.ninja ]; then
  cmake --build build --target cuda_device_tests > "$logs/build_cuda_device_tests.log" 2>&1
fi
results=()
failed=0

# record NAME STATUS DETAIL
record() {
  results+=("$(printf '%-44s %-12s %s' "$1" "$2" "$3")")
  if [ "$2" = FAIL ]; then failed=1; fi
}

if [ "$part" != references ]; then
  if [ -x "$tests" ]; then
    timeout 900 "$tests" > "$logs/cuda_device_tests.log" 2>&1
    rc=$?
    summary=$(grep -E '^\[  (PASSED|FAILED)  \]' "$logs/cuda_device_tests.log" | tr '\n' ' ')
    if [ $rc -eq 0 ]; then record cuda_device_tests PASS "$summary"; else record cuda_device_tests FAIL "rc $rc $summary"; fi
  else
    record cuda_device_tests FAIL "no executable at $tests"
  fi

  for dir in tests/data/models/*/; do
    model=$(basename "$dir")
    [ -f "$dir/golden.safetensors" ] || continue
    log="$logs/golden_$model.log"
    timeout 300 "$bin" eval golden --device cuda --model "$dir" > "$log" 2>&1
    rc=$?
    verdict=$(grep -E '^(PASS|FAIL)' "$log" | head -1 | cut -c1-60)
    if [ $rc -eq 0 ]; then
      record "golden $model" PASS "$verdict"
    elif grep -q 'the CUDA backend has no kernels yet' "$log"; then
      record "golden $model" "not covered" "$(grep -o 'for these ops of [^(]*' "$log" | head -1 | cut -c1-80)"
    else
      record "golden $model" FAIL "rc $rc ${verdict:-$(grep -m1 -i 'error' "$log" | cut -c1-70)}"
    fi
  done

  for model in tiny-llama tiny-qwen2 tiny-deepseek-v2 tiny-deepseek-v3 tiny-deepseek-v32 tiny-deepseek-v4; do
    log="$logs/agreement_$model.log"
    timeout 300 "$bin" eval batch-agreement --device cuda --model "tests/data/models/$model" --prompts 32 \
      --max-tokens 16 --prompt-len 100 > "$log" 2>&1
    rc=$?
    line=$(grep -E 'agreement' "$log" | tail -1 | sed 's/.*: //' | cut -c1-80)
    if [ $rc -eq 0 ]; then
      record "agreement $model" PASS "$line"
    else
      record "agreement $model" FAIL "rc $rc ${line:-$(grep -m1 -i 'error' "$log" | cut -c1-70)}"
    fi
  done

  # Constrained decoding end to end through the server on the GPU (json_object, json_schema, logit_bias).
  log="$logs/serve_constrained.log"
  timeout 600 python3 scripts/gpu_serve_check.py "$bin" --device cuda > "$log" 2>&1
  rc=$?
  line="$(grep -c '^PASS' "$log") passed, $(grep -c '^FAIL' "$log") failed"
  if [ $rc -eq 0 ]; then record "serve constrained decoding, scoring" PASS "$line"; else record "serve constrained decoding, scoring" FAIL "rc $rc $line"; fi
fi

if [ "$part" != engine ]; then
  for ref_dir in tests/gpu_references/*/; do
    ref=$(basename "$ref_dir")
    if python3 -c 'import torch, transformers' > /dev/null 2>&1; then
      log="$logs/golden_ref_$ref.log"
      DSINFER_BIN="$bin" timeout 600 bash scripts/gpu_reference_golden.sh "$ref" "${TMPDIR:-/tmp}/dsinfer-$ref" \
        > "$log" 2>&1
      rc=$?
      verdict=$(grep -E '^(PASS|FAIL)' "$log" | head -1 | cut -c1-60)
      if [ $rc -eq 0 ]; then record "golden reference $ref" PASS "$verdict"; else record "golden reference $ref" FAIL "rc $rc $verdict"; fi
    else
      record "golden reference $ref" skipped "no PyTorch + transformers here"
    fi
  done
fi

printf '\n%-44s %-12s %s\n' check result "detail (allocations poisoned: $poison; part: $part)"
printf '%s\n' "${results[@]}"
exit $failed
