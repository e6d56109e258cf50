#!/usr/bin/env bash
# GPU golden of one model shape the fixtures are too small for, end to end: a random-weight 2-layer model from
# tests/gpu_references/REF/config.json, Hugging Face transformers' logits and greedy continuations for prompts
# of 7, 64 and 300 tokens (scripts/hf_reference.py), then `dsinfer eval golden --device cuda`. The references:
#   deepseek-v2-mla512  V2-Lite's attention shape (16 heads, kv_lora_rank 512, rope 64): the tensor-core MLA
#                       decode designs
#   llama-d128          Llama with head_dim 128 (4 q / 2 kv heads): the register-resident decode kernel and its
#                       fused rope + cache write
#   qwen2-d64           Qwen2 with head_dim 64 (8 q / 2 kv heads, q/k/v biases): the same at D 64, where one
#                       split's last step names rows of the next
#   deepseek-v32-dsa    DeepSeek-V3.2 with V3.2's indexer heads (64 x 128), top_k 64 (the 300-token prompt
#                       selects) over V2-Lite's MLA shape: the indexer and sparse MLA kernels
#   deepseek-v32-ties   the tiny-deepseek-v32 fixture's shape (2 indexer heads: many keys score exactly 0), made
#                       by torch on the GPU: the tie rule at the top-k boundary is torch.topk's on CUDA (the
#                       lowest positions), which the GPU backend follows; the fixture's own golden was made on
#                       the CPU, whose torch.topk keeps other tied keys
# Needs a GPU, PyTorch and transformers, and build/dsinfer (or the binary named by DSINFER_BIN).
# Usage: scripts/gpu_reference_golden.sh REF [WORK_DIR] [extra eval golden flags]
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: scripts/gpu_reference_golden.sh REF [WORK_DIR] [extra eval golden flags]}
shift
[ -f "tests/gpu_references/$ref/config.json" ] || { echo "no tests/gpu_references/$ref/config.json" >&2; exit 2; }
dir=${1:-/tmp/dsinfer-$ref}
shift || true
mkdir -p "$dir"
cp "tests/gpu_references/$ref/config.json" "$dir/config.json"
python3 scripts/hf_reference.py --config "$dir/config.json" --save-model "$dir" --seed 0 \
  --out "$dir/golden.safetensors" --lengths 7,64,300 --greedy 16
"${DSINFER_BIN:-build/dsinfer}" eval golden --model "$dir" --device cuda "$@"
