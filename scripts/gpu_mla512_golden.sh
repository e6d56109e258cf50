#!/usr/bin/env bash
# GPU check of the MLA decode kernels at DeepSeek-V2-Lite's attention shape (16 heads, kv_lora_rank 512,
# rope 64: the tensor-core designs; the fixtures' tiny models are too small for them), end to end: a
# random-weight 2-layer model from tests/gpu_references/deepseek-v2-mla512/config.json, Hugging Face
# transformers' logits and greedy continuations for prompts of 7, 64 and 300 tokens (scripts/hf_reference.py),
# then `dsinfer eval golden --device cuda`. Needs a GPU, PyTorch and transformers, and build/dsinfer (or the
# binary named by DSINFER_BIN).
# Usage: scripts/gpu_mla512_golden.sh [WORK_DIR] [extra eval golden flags]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/dsinfer-mla512}
shift || true
mkdir -p "$dir"
cp tests/gpu_references/deepseek-v2-mla512/config.json "$dir/config.json"
python3 scripts/hf_reference.py --config "$dir/config.json" --save-model "$dir" --seed 0 \
  --out "$dir/golden.safetensors" --lengths 7,64,300 --greedy 16
"${DSINFER_BIN:-build/dsinfer}" eval golden --model "$dir" --device cuda "$@"
