#!/usr/bin/env python3
"""Hugging Face transformers peer for the dsinfer GPU benchmarks (docs/benchmarks.md).

Builds the model from a config directory alone (no network, no checkpoint): random bf16 weights on the GPU,
e.g. bench/configs/llama-3.1-8b (the Llama-3.1-8B shape of DeepSeek-R1-Distill-Llama-8B) or any other
config.json transformers knows (a DeepSeek-V2-Lite config later). Measures, with plain `generate` (greedy,
dynamic KV cache, sdpa attention, EOS disabled so every sequence runs its full length):

  decode      ms/token at batch 1 after a --decode-prompt token prompt: (generate(N) - generate(1)) / (N - 1),
              so the prefill and the first token are subtracted; the prefill (generate(1)) is reported too
  ttft        time to first token for a --ttft-prompt token prompt at batch 1 (generate(max_new_tokens=1))
  throughput  --num-prompts prompts of --input-len random ids, --output-len new tokens each, in batches of
              --batch (equal lengths: no padding), output tokens/s over the whole run
  roofline    bf16 weight bytes / measured device copy bandwidth = the least ms/token at batch 1

Prints one JSON object (and writes it to --out when given). Usage:
  python3 bench/peers/hf_generate_bench.py --config bench/configs/llama-3.1-8b --num-prompts 256
"""
import argparse
import json
import os
import statistics
import time

import torch
import transformers


def sync():
    torch.cuda.synchronize()


def timed(fn, repeat):
    """Median wall seconds of fn() over `repeat` runs (after the caller's warm-up)."""
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(nbytes=4 << 30):
    """Device-to-device copy bandwidth (bytes read + written per second), as bench/cuda_baseline.sh uses."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    seconds = timed(lambda: dst.copy_(src), 5)
    del src, dst
    return 2 * nbytes / seconds


def build_model(config_dir, dtype):
    cfg = transformers.AutoConfig.from_pretrained(config_dir)
    cfg.use_cache = True
    torch.manual_seed(0)
    cfg._attn_implementation = "sdpa"
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters are created in bf16 directly (no dtype kwarg: it was renamed)
    try:
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    finally:
        torch.set_default_dtype(default)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, cfg


def generate(model, ids, new_tokens):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, do_sample=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="bench/configs/llama-3.1-8b", help="directory with config.json")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--ttft-prompt", type=int, default=2048)
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats of the batch-1 measurements")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: decode,ttft,throughput,roofline")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16

    t0 = time.perf_counter()
    model, cfg = build_model(a.config, dtype)
    sync()
    params = sum(p.numel() for p in model.parameters())
    result = {
        "peer": "transformers.generate",
        "config": os.path.abspath(a.config),
        "model_type": cfg.model_type,
        "params": params,
        "weight_bytes": params * 2,
        "dtype": a.dtype,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "build_s": round(time.perf_counter() - t0, 2),
    }
    vocab = cfg.vocab_size
    g = torch.Generator(device="cuda").manual_seed(1234)

    def rand_ids(batch, n):
        return torch.randint(0, vocab, (batch, n), device="cuda", generator=g)

    if "roofline" not in skip:
        bw = copy_bandwidth()
        result["copy_bandwidth_gb_s"] = round(bw / 1e9, 1)
        result["roofline_ms_per_token"] = round(params * 2 / bw * 1e3, 3)

    if "decode" not in skip:
        ids = rand_ids(1, a.decode_prompt)
        generate(model, ids, 4)  # warm-up
        first = timed(lambda: generate(model, ids, 1), a.repeat)
        full = timed(lambda: generate(model, ids, a.decode_tokens), a.repeat)
        result["decode_b1"] = {
            "prompt_tokens": a.decode_prompt,
            "new_tokens": a.decode_tokens,
            "prefill_plus_first_token_ms": round(first * 1e3, 2),
            "ms_per_token": round((full - first) / (a.decode_tokens - 1) * 1e3, 3),
        }

    if "ttft" not in skip:
        ids = rand_ids(1, a.ttft_prompt)
        generate(model, ids, 1)  # warm-up at this length
        result["ttft_b1"] = {"prompt_tokens": a.ttft_prompt,
                             "ms": round(timed(lambda: generate(model, ids, 1), a.repeat) * 1e3, 2)}

    if "throughput" not in skip:
        generate(model, rand_ids(a.batch, a.input_len), 2)  # warm-up at this batch
        batches = [min(a.batch, a.num_prompts - i) for i in range(0, a.num_prompts, a.batch)]
        sync()
        t0 = time.perf_counter()
        produced = 0
        for b in batches:
            out = generate(model, rand_ids(b, a.input_len), a.output_len)
            produced += (out.shape[1] - a.input_len) * b
        sync()
        seconds = time.perf_counter() - t0
        result["throughput"] = {
            "prompts": a.num_prompts, "input_len": a.input_len, "output_len": a.output_len, "batch": a.batch,
            "seconds": round(seconds, 2), "output_tokens": produced,
            "output_tokens_per_s": round(produced / seconds, 1),
            "total_tokens_per_s": round((produced + a.num_prompts * a.input_len) / seconds, 1),
        }

    # Flat copies of the headline figures (bench/cuda_llama8b.sh tabulates top-level numbers).
    if "decode_b1" in result:
        result["decode_ms_per_token"] = result["decode_b1"]["ms_per_token"]
    if "ttft_b1" in result:
        result["ttft_ms"] = result["ttft_b1"]["ms"]
    if "throughput" in result:
        result["output_tokens_per_s"] = result["throughput"]["output_tokens_per_s"]
    text = json.dumps(result)
    print(text, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
