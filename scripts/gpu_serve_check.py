#!/usr/bin/env python3
"""Constrained decoding and prompt scoring end to end through `dsinfer serve` on the GPU (the GPU sampling path's
logit_bias, allowed-token masks and forced rows): starts the server on the bundled deepseek-v3-tiny-code model,
sends requests with `response_format` json_object and json_schema, with `logit_bias`, and with `echo` and
`logprobs` (the prompt's scores against the logprobs of the same tokens generated), and checks what comes back. Prints one
line per check (PASS / FAIL and why) and exits non-zero when any fails. Standard library only.

Usage: scripts/gpu_serve_check.py DSINFER [--device cuda] [--model models/deepseek-v3-tiny-code] [--port 18123]
"""
import argparse
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request


def post(base, path, body, timeout=120):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(base, proc, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(base + "/health/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    return False


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "kind": {"enum": ["list", "dict", "set"]},
    },
    "required": ["name", "count", "kind"],
    "additionalProperties": False,
}


def schema_problem(doc):
    """Why doc breaks SCHEMA, or None."""
    if not isinstance(doc, dict):
        return "not an object"
    if list(doc.keys()) != ["name", "count", "kind"]:
        return f"keys {list(doc.keys())}"
    if not isinstance(doc["name"], str) or len(doc["name"]) > 8:
        return f"name {doc['name']!r}"
    if not isinstance(doc["count"], int) or isinstance(doc["count"], bool) or not 0 <= doc["count"] <= 99:
        return f"count {doc['count']!r}"
    if doc["kind"] not in ("list", "dict", "set"):
        return f"kind {doc['kind']!r}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dsinfer")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="models/deepseek-v3-tiny-code")
    ap.add_argument("--port", type=int, default=18123)
    args = ap.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    proc = subprocess.Popen([args.dsinfer, "serve", "--model", args.model, "--device", args.device, "--port",
                             str(args.port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    results = []

    def record(name, problem):
        results.append((name, problem))
        print(f"{'PASS' if problem is None else 'FAIL'} {name}{'' if problem is None else ': ' + problem}",
              flush=True)

    try:
        if not wait_ready(base, proc, 120):
            record("server ready", "did not become ready in 120 s")
            return 1
        record("server ready", None)
        chat = [{"role": "user", "content": "Describe a Python container as JSON."}]
        # json_object, greedy and sampled: every answer that stops is one JSON object.
        for temperature in (0.0, 1.0):
            r = post(base, "/v1/chat/completions",
                     {"messages": chat, "max_tokens": 256, "temperature": temperature, "n": 3,
                      "response_format": {"type": "json_object"}, "seed": 7})
            problems = []
            for c in r["choices"]:
                text = c["message"]["content"]
                if c["finish_reason"] == "stop":
                    try:
                        if not isinstance(json.loads(text), dict):
                            problems.append(f"not an object: {text[:60]!r}")
                    except json.JSONDecodeError as e:
                        problems.append(f"invalid JSON ({e}): {text[:60]!r}")
                elif not text.lstrip().startswith("{"):
                    problems.append(f"cut answer does not start an object: {text[:60]!r}")
            record(f"json_object temperature {temperature}", "; ".join(problems) or None)
        # json_schema (strict): bounded documents (whitespace runs are bounded too), so every answer must stop and
        # validate within 800 tokens.
        for temperature in (0.0, 1.0):
            r = post(base, "/v1/chat/completions",
                     {"messages": chat, "max_tokens": 800, "temperature": temperature, "n": 4, "seed": 11,
                      "response_format": {"type": "json_schema",
                                          "json_schema": {"name": "box", "strict": True, "schema": SCHEMA}}})
            problems = []
            for c in r["choices"]:
                text = c["message"]["content"]
                if c["finish_reason"] != "stop":
                    problems.append(f"finish {c['finish_reason']}: {text[:60]!r}")
                    continue
                try:
                    why = schema_problem(json.loads(text))
                except json.JSONDecodeError as e:
                    why = f"invalid JSON ({e})"
                if why:
                    problems.append(f"{why}: {text[:80]!r}")
            record(f"json_schema temperature {temperature}", "; ".join(problems) or None)
        # logit_bias: +100 on one token makes greedy decoding repeat it; -100 on the unbiased greedy's first
        # token moves the first token elsewhere.
        prompt = "def binary_search(items, target):"
        target = 100
        target_text = post(base, "/detokenize", {"tokens": [target]})["prompt"]
        r = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0.0,
                                           "logit_bias": {str(target): 100}})
        text = r["choices"][0]["text"]
        record("logit_bias +100 repeats the token",
               None if text == target_text * 4 else f"got {text!r}, want {target_text * 4!r}")
        # The unbiased greedy first token, banned: the first piece of text changes.
        one = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0.0})
        piece = one["choices"][0]["text"]
        ids = post(base, "/tokenize", {"prompt": piece, "add_special_tokens": False})["tokens"]
        if len(ids) != 1:
            record("logit_bias -100 bans the greedy token", f"greedy piece {piece!r} is not one token: {ids}")
        else:
            r = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                                               "logit_bias": {str(ids[0]): -100}})
            got = r["choices"][0]["text"]
            record("logit_bias -100 bans the greedy token",
                   None if got != piece else f"token {ids[0]} ({piece!r}) came anyway")
        # The streamed json_schema answer equals the whole one (greedy).
        body = {"messages": chat, "max_tokens": 200, "temperature": 0.0, "stream": True,
                "response_format": {"type": "json_schema", "json_schema": {"name": "box", "schema": SCHEMA}}}
        req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        pieces = []
        with urllib.request.urlopen(req, timeout=120) as resp:
            for line in resp.read().decode().splitlines():
                m = re.match(r"data: (.*)", line)
                if m and m.group(1) != "[DONE]":
                    for c in json.loads(m.group(1))["choices"]:
                        pieces.append(c["delta"].get("content") or "")
        body.pop("stream")
        whole = post(base, "/v1/chat/completions", body)["choices"][0]["message"]["content"]
        record("json_schema streamed == whole", None if "".join(pieces) == whole else
               f"{''.join(pieces)[:60]!r} vs {whole[:60]!r}")
        # echo with logprobs: the prompt's scores (one prefill) equal the logprobs the engine reported while it
        # generated the same tokens (decode steps), within bf16 tolerance; the first token's entry is null.
        prompt = "def fibonacci(n):"
        gen = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0.0,
                                             "logprobs": 1})["choices"][0]["logprobs"]
        ids = post(base, "/tokenize", {"prompt": prompt, "add_special_tokens": True})["tokens"]
        pieces = [post(base, "/tokenize", {"prompt": t, "add_special_tokens": False})["tokens"]
                  for t in gen["tokens"]]
        if any(len(p) != 1 for p in pieces):
            record("echo logprobs == generated logprobs", f"a generated piece is not one token: {pieces}")
        else:
            scored = ids + [p[0] for p in pieces]
            r = post(base, "/v1/completions", {"prompt": scored, "max_tokens": 0, "echo": True, "logprobs": 1})
            lp = r["choices"][0]["logprobs"]["token_logprobs"]
            problems = []
            if len(lp) != len(scored) or lp[0] is not None:
                problems.append(f"{len(lp)} entries for {len(scored)} tokens, first {lp[0] if lp else None}")
            else:
                for i, want in enumerate(gen["token_logprobs"]):
                    got = lp[len(ids) + i]
                    if abs(got - want) > 0.05:
                        problems.append(f"token {i}: scored {got:.4f}, generated {want:.4f}")
                if any(v > 0 for v in lp[1:]):
                    problems.append("a positive logprob")
            if r["usage"]["completion_tokens"] != 0:
                problems.append(f"completion_tokens {r['usage']['completion_tokens']}")
            record("echo logprobs == generated logprobs", "; ".join(problems) or None)
    except Exception as e:  # a failed request is a failed check, with the server's last words
        record("requests", f"{type(e).__name__}: {e}")
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if any(p is not None for _, p in results):
            sys.stderr.write(err[-3000:] if err else "")
    return 0 if results and all(p is None for _, p in results) else 1


if __name__ == "__main__":
    sys.exit(main())
