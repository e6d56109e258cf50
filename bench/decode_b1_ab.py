#!/usr/bin/env python3
"""Batch-1 decode A/B benches on the GPU machine: several arms (a dsinfer binary and environment settings each),
interleaved round by round so that every arm sees the same moments of the machine, on one or more models.

Each bench is `DSINFER bench --model MODEL --dummy-weights --device cuda --json --num-prompts 3 --input-len 128
--output-len 128 --max-batch-size 1` (--num-prompts and --output-len change those: 48 x 64 is a sustained decode of
~12 s on the 8B, long enough for the GPU's power limit to lower its clock); its line gives the UTC time, arm, model,
mean and p99 TPOT (ms/token), the copy bandwidth the same process measured, the roofline over the mean TPOT and,
where the bench sampled them (its `gpu_power`), the mean power and SM clock and the share of samples power-capped. The GPU's identity (nvidia-smi, else the
bench's `gpu` object) is printed first, since machines lent from a pool may be another GPU each time. Last, a table
per model: each arm's mean TPOT over the rounds, its range, and its difference from the first arm.

Usage:
  bench/decode_b1_ab.py --arm main=/tmp/b/dsinfer_main \\
      --arm paced=/tmp/b/dsinfer:DSINFER_GEMV_PREISSUE_INFLIGHT=1 \\
      [--model bench/configs/llama-3.1-8b] [--model bench/configs/deepseek-v2-lite] [--rounds 2] [--out DIR]
An arm is LABEL=BINARY[:VAR=VALUE[,VAR=VALUE...]]; a part without `=` continues the value before it (a
comma list such as DSINFER_GEMV_PACKED_NAMES). Every bench's JSON is kept under --out (default $OUT, else
/tmp/decode_b1_ab) as LABEL-MODEL-ROUND.json with its stderr beside it.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys


def parse_arm(text):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"arm {text!r}: expected LABEL=BINARY[:VAR=VALUE,...]")
    label, rest = text.split("=", 1)
    binary, _, settings = rest.partition(":")
    env = {}
    var = None
    for item in filter(None, settings.split(",")):
        if "=" in item:
            var, value = item.split("=", 1)
            env[var] = value
        elif var is not None:  # a comma inside a value (a list, e.g. DSINFER_GEMV_PACKED_NAMES)
            env[var] += "," + item
        else:
            raise argparse.ArgumentTypeError(f"arm {label!r}: setting {item!r} is not VAR=VALUE")
    if not label or not binary:
        raise argparse.ArgumentTypeError(f"arm {text!r}: empty label or binary")
    return label, binary, env


def load_text(seconds):
    """The model's load time, where the bench reports it (its `load_s`)."""
    return f", load {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""


def gpu_identity():
    if shutil.which("nvidia-smi") is None:
        return None
    query = "name,uuid,serial,pci.bus_id,power.limit,clocks.max.sm,clocks.max.mem,driver_version"
    r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                       text=True)
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None


def run_bench(binary, env, model, json_path, err_path, timeout, prompts, output_len):
    cmd = [binary, "bench", "--model", model, "--dummy-weights", "--device", "cuda", "--json", "--num-prompts",
           str(prompts), "--input-len", "128", "--output-len", str(output_len), "--max-batch-size", "1"]
    with open(err_path, "w") as err:
        try:
            r = subprocess.run(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=err, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout} s"
    with open(json_path, "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        return None, f"exit status {r.returncode} (see {err_path})"
    try:
        return json.loads(r.stdout.strip().splitlines()[-1]), None
    except (json.JSONDecodeError, IndexError):
        return None, f"no JSON on stdout (see {json_path})"


def power_text(p):
    if not p or not p.get("samples"):
        return ""
    return (f", {p['power_mean_w']:.0f} W (limit {p['power_limit_w']:.0f}), SM clock {p['sm_clock_mean_mhz']:.0f} MHz "
            f"(min {p['sm_clock_min_mhz']}), power-capped {100 * p['power_capped_fraction']:.0f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", action="append", type=parse_arm, required=True)
    ap.add_argument("--model", action="append")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/decode_b1_ab"))
    ap.add_argument("--timeout", type=int, default=300, help="seconds one bench may take")
    ap.add_argument("--num-prompts", type=int, default=3, help="requests of each bench, one at a time (3)")
    ap.add_argument("--output-len", type=int, default=128, help="tokens each request generates (128)")
    a = ap.parse_args()
    models = a.model or ["bench/configs/llama-3.1-8b"]
    os.makedirs(a.out, exist_ok=True)
    ident = gpu_identity()
    if ident:
        print(f"gpu: {ident}", flush=True)
    results = {}  # (label, model) -> [tpot means]
    for rnd in range(1, a.rounds + 1):
        for model in models:
            name = os.path.basename(os.path.normpath(model))
            for label, binary, env in a.arm:
                stem = os.path.join(a.out, f"{label}-{name}-{rnd}")
                d, why = run_bench(binary, env, model, stem + ".json", stem + ".err", a.timeout, a.num_prompts,
                                   a.output_len)
                at = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
                if d is None:
                    print(f"{at} {label:>12} {name}: FAILED, {why}", flush=True)
                    continue
                if not ident and d.get("gpu"):
                    ident = f"{d['gpu'].get('name')}, {d['gpu'].get('uuid')}, {d['gpu'].get('pci_bus_id')}"
                    print(f"gpu: {ident}", flush=True)
                tpot = d["tpot_ms"]
                roof = d.get("decode_roofline_batch1") or {}
                results.setdefault((label, name), []).append(tpot["mean"])
                print(f"{at} {label:>12} {name}: TPOT {tpot['mean']:.4f} (p99 {tpot['p99']:.4f}) ms, copy "
                      f"{roof.get('copy_bandwidth_gbs', 0):.0f} GB/s, roofline/TPOT "
                      f"{100 * roof.get('tpot_fraction', 0):.2f}%{power_text(d.get('gpu_power'))}"
                      f"{load_text(d.get('load_s'))}", flush=True)
    failed = False
    for model in models:
        name = os.path.basename(os.path.normpath(model))
        print(f"\n{name}: arm, mean TPOT over rounds (ms/token), range, against {a.arm[0][0]}")
        base = results.get((a.arm[0][0], name))
        for label, _, _ in a.arm:
            v = results.get((label, name))
            if not v:
                print(f"  {label:>12}  no result")
                failed = True
                continue
            m = statistics.mean(v)
            delta = ""
            if base and label != a.arm[0][0]:
                b = statistics.mean(base)
                delta = f"  {1000 * (m - b):+.1f} us ({100 * (m - b) / b:+.2f}%)"
            print(f"  {label:>12}  {m:.4f}  [{min(v):.4f}, {max(v):.4f}] n={len(v)}{delta}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
