#!/usr/bin/env python3
"""A server's answers must not depend on what else it runs, nor on a switch (on a GPU machine).

usage: serve_check.py HEARTH MODEL [DEVICE] [VAR]

Starts `HEARTH serve MODEL --device DEVICE` (default cuda) twice, with VAR=0 and VAR=1 (default
HEARTH_CUDA_AHEAD), and sends 8 completions alone and then 8 at once, greedy and seeded (one
with stop strings). Every answer (text, finish reason, token count) must equal the one the
first server gave alone. Prints one line: OK, or how many differ (and each difference).
"""
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
import urllib.request

PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):",
           "My favourite colour", "In 1969, the first", "Water boils at", "The quick brown fox",
           "List three fruits:"]


def ask(port, i, seed):
    body = {"model": "m", "prompt": PROMPTS[i], "max_tokens": 24 + 7 * i,
            "temperature": 0 if seed is None else 0.8}
    if seed is not None:
        body["seed"] = seed + i
    if i == 3:
        body["stop"] = ["the", "a"]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as f:
        j = json.load(f)
    c = j["choices"][0]
    return c["text"], c["finish_reason"], j["usage"]["completion_tokens"]


def main():
    hearth, model = sys.argv[1], sys.argv[2]
    device = sys.argv[3] if len(sys.argv) > 3 else "cuda"
    var = sys.argv[4] if len(sys.argv) > 4 else "HEARTH_CUDA_AHEAD"
    got = {}
    for val in ("0", "1"):
        port = 18080 + int(val)
        proc = subprocess.Popen([hearth, "serve", model, "--device", device, "--port", str(port),
                                 "--batch", "8"], env=dict(os.environ, **{var: val}),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            for seed in (None, 5):
                got[(val, seed, "alone")] = [ask(port, i, seed) for i in range(8)]
                with cf.ThreadPoolExecutor(8) as ex:
                    got[(val, seed, "together")] = list(ex.map(lambda i: ask(port, i, seed),
                                                               range(8)))
        finally:
            proc.terminate()
            proc.wait()
    bad = 0
    for key, answers in got.items():
        want = got[("0", key[1], "alone")]
        for i in range(8):
            if answers[i] != want[i]:
                bad += 1
                print("DIFF", var, key, i, repr(answers[i])[:120], "vs", repr(want[i])[:120])
    print("serve_check:", "OK" if bad == 0 else f"{bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
