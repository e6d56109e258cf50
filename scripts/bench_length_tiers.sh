#!/usr/bin/env bash
# Length tiers on vs off: the same 80/20 short/long prompt mix (most prompts under 64 tokens, a fifth of
# 1500-1800 tokens), Poisson arrivals, through `dsinfer bench`; prints the short requests' TTFT percentiles
# and the long requests' end-to-end latency for both runs (docs/benchmarks.md, "Length tiers").
# Usage: scripts/bench_length_tiers.sh [MODEL_DIR] [extra dsinfer bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/deepseek-v3-tiny-code}
shift || true
COMMON=(bench --model "$MODEL" --device cpu --num-prompts "${NUM_PROMPTS:-60}" --input-len 16:63
        --long-fraction 0.2 --long-input-len 1500:1800 --output-len 16 --request-rate "${RATE:-4}"
        --seed 1 --json "$@")
off=$(./build/dsinfer "${COMMON[@]}")
on=$(./build/dsinfer "${COMMON[@]}" --length-tiers --long-prompt-tokens 1024 --long-prefill-share "${SHARE:-0.125}")
python3 - "$off" "$on" <<'PY'
import json, sys
off, on = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'':22}{'tiers off':>12}{'tiers on':>12}")
for label, key, q in [("short TTFT p50 ms", "short_ttft_ms", "p50"), ("short TTFT p90 ms", "short_ttft_ms", "p90"),
                      ("short TTFT p99 ms", "short_ttft_ms", "p99"), ("long TTFT p50 ms", "long_ttft_ms", "p50"),
                      ("long e2e p99 ms", "long_e2e_latency_ms", "p99")]:
    print(f"{label:22}{off[key][q]:12.1f}{on[key][q]:12.1f}")
for label, key in [("requests (short/long)", None), ("errors", "errors"), ("duration s", "duration_s")]:
    if key is None:
        print(f"{label:22}{str(off['short_requests'])+'/'+str(off['long_requests']):>12}{str(on['short_requests'])+'/'+str(on['long_requests']):>12}")
    else:
        print(f"{label:22}{off[key]:12.2f}{on[key]:12.2f}")
PY
