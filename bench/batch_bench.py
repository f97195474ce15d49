#!/usr/bin/env python3
"""Aggregate decode speed of `hearth serve` at 1, 4, 8 and 16 concurrent streams, the prefix
cache's effect on time to first token, and (with the peer installed) llama-cpp-python's server
at 8 concurrent clients.

usage: batch_bench.py [--model PATH] [--threads 2] [--gen 128] [--streams 1,4,8,16] [--no-peer]

Each stream is a /v1/completions request with its own prompt (a fresh number first, so no
prefix is shared), max_tokens --gen and end-of-text forbidden by logit_bias, so every stream
generates exactly --gen tokens. Aggregate tok/s = all streams' tokens after their first / (the
last stream's end - the first stream's first token). Time to first token is reported as p50 and
p99 over the streams. The clients run in threads of this process and parse each stream only
after it ends, to take as little CPU from the server as possible (it shares the machine).

Prefix reuse: a ~2,000-token prompt is sent twice, the second time with only its last ~100
tokens changed; the second time to first token over the first shows what the cache saves.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_bench import (HOME, eos_bias, start_hearth, start_peer, stop)  # noqa: E402

STORY = ("The old lighthouse keeper climbed the spiral stairs every evening, counting the steps "
         "as his father had taught him, and watched the ships pass along the dark coast. ")


def one_stream(url, prompt, gen, bias, out, i):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": gen, "temperature": 0,
                       "stream": True, "logit_bias": bias}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    times = []
    with urllib.request.urlopen(req, timeout=900) as r:
        for raw in r:
            if raw.startswith(b"data: {"):
                times.append(time.monotonic())
    out[i] = (t0, times)


def run_streams(url, n, gen, bias, tag):
    out = [None] * n
    threads = [threading.Thread(target=one_stream,
                                args=(url, f"{tag}-{i}. {STORY}", gen, bias, out, i))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = min(o[1][0] for o in out)
    last = max(o[1][-1] for o in out)
    tokens = sum(len(o[1]) - 1 for o in out)
    ttft = sorted((o[1][0] - o[0]) * 1e3 for o in out)
    p99 = ttft[min(len(ttft) - 1, int(round(0.99 * (len(ttft) - 1))))]
    return tokens / (last - first), statistics.median(ttft), p99


def ttft_once(url, prompt, bias):
    out = [None]
    one_stream(url, prompt, 2, bias, out, 0)
    return (out[0][1][0] - out[0][0]) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("serve_args", nargs="*", help="more hearth serve flags, after --")
    a = ap.parse_args()
    bias = eos_bias(a.model)
    counts = [int(x) for x in a.streams.split(",")]
    print(f"batch bench: {os.path.basename(a.model)}, {a.threads} threads, {a.gen} tokens/stream")
    p, url, _ = start_hearth(a.model, a.threads, "--batch", str(max(counts)), *a.serve_args)
    base = None
    for n in counts:
        agg, p50, p99 = run_streams(url, n, a.gen, bias, f"h{n}")
        base = base or agg
        print(f"hearth {n:>2} streams: {agg:7.1f} tok/s aggregate ({agg / base:4.2f}x one stream),"
              f" TTFT p50 {p50:7.1f} ms p99 {p99:7.1f} ms")
    long_prompt = STORY * 57  # ~2,000 tokens
    cold = ttft_once(url, "cold. " + long_prompt, bias)
    warm = ttft_once(url, "cold. " + long_prompt[:-600] + "A different ending: " * 12, bias)
    print(f"prefix reuse: ~2,000-token prompt TTFT {cold:.0f} ms cold, {warm:.0f} ms with its"
          f" first ~1,900 tokens cached ({warm / cold:.1%})")
    stop(p)
    if a.no_peer:
        return
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        print("peer: llama-cpp-python[server] is not installed; skipped")
        return
    pp, purl, _ = start_peer(a.model, a.threads)
    agg, p50, p99 = run_streams(purl, 8, a.gen, bias, "p8")
    stop(pp)
    print(f"llama-cpp-python server 8 clients: {agg:7.1f} tok/s aggregate, TTFT p50 {p50:7.1f} ms"
          f" p99 {p99:7.1f} ms")


if __name__ == "__main__":
    main()
