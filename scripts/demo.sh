#!/usr/bin/env bash
# Sets up, builds and runs the main job: code generation with the bundled deepseek-v3-tiny-code model
# (on the GPU when there is one, else on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/dsinfer generate --model models/deepseek-v3-tiny-code --device auto --max-tokens 120 \
  --prompt "def binary_search(items, target):"
