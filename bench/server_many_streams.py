#!/usr/bin/env python3
# Opens N concurrent SSE completion streams (16 greedy tokens each) against a running `dsinfer serve` on
# 127.0.0.1:PORT with asyncio and reports the status/[DONE] counts and the wall time. Loopback only, bounded
# by N. Usage: bench/server_many_streams.py PORT N
import asyncio, json, sys, time
PORT = int(sys.argv[1]); N = int(sys.argv[2])
async def one(i):
    r, w = await asyncio.open_connection('127.0.0.1', PORT)
    body = json.dumps({"prompt": f"def f{i % 50}():", "max_tokens": 16, "temperature": 0, "ignore_eos": True, "stream": True}).encode()
    w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await w.drain()
    data = b""
    while b"0\r\n\r\n" not in data:
        chunk = await r.read(65536)
        if not chunk: break
        data += chunk
    w.close()
    return data.split(b"\r\n")[0], b"[DONE]" in data
async def main():
    t = time.time()
    res = await asyncio.gather(*[one(i) for i in range(N)])
    status = {}
    for s, done in res: status[(s, done)] = status.get((s, done), 0) + 1
    print(N, "streams in", round(time.time() - t, 2), "s:", status)
asyncio.run(main())
