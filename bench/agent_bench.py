#!/usr/bin/env python3
"""What structured output costs: constrained against unconstrained replies, in one run.

usage: agent_bench.py [--model PATH] [--threads 2] [--runs 5] [--props 30]

One `hearth serve`, one client, streamed /v1/chat/completions at temperature 0. Each run sends
  - a free reply that cannot end early (logit_bias forbids the end-of-turn tokens) of as many
    tokens as the constrained reply of the run before it, and
  - a reply constrained to a JSON Schema of --props properties (strings, integers, booleans,
    enums; all required), with a schema the server has never seen (the property names change
    every run, so the compile is in the time), and then the same schema again (cached).
Every prompt starts with a fresh number so no prefix is reused. Figures, medians over --runs:
  - decode tok/s (client side: tokens after the first over first-to-last content chunk) of the
    constrained reply ÷ the free one (the issue's target: at least 0.95);
  - time to first content token, constrained minus free, uncached and cached schema (target:
    at most 20 ms added).
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=120):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.01)
    raise SystemExit("server not ready")


def schema(n, tag):
    rnd = random.Random(tag)
    kinds = [{"type": "string", "maxLength": 12}, {"type": "integer"}, {"type": "boolean"},
             {"enum": ["low", "mid", "high"]}]
    props = {f"{tag}_{i}": dict(rnd.choice(kinds)) for i in range(n)}
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def stream(url, body):
    """(time to first content chunk, decode tok/s, completion tokens, text)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    rq = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = last = None
    text, n_tok = [], 0
    with urllib.request.urlopen(rq, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                n_tok = ev["usage"]["completion_tokens"]
            for ch in ev.get("choices", []):
                c = ch["delta"].get("content")
                if c:
                    now = time.monotonic()
                    first = first or now
                    last = now
                    text.append(c)
    ttft = (first - t0) * 1000
    rate = (n_tok - 1) / (last - first) if last > first and n_tok > 1 else float("nan")
    return ttft, rate, n_tok, "".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HOME, "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--props", type=int, default=30)
    a = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([os.path.join(BUILD, "hearth"), "serve", a.model, "--port", str(port),
                             "--threads", str(a.threads), "--quiet", "--batch", "1"],
                            stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url + "/health", proc)
        ask = "Fill in the record."
        # the end-of-turn tokens of the starter model: <|endoftext|> 0, <|im_end|> 2
        free_bias = {"0": -100, "2": -100}
        rows = []
        n_gen = 200
        for run in range(a.runs + 1):  # the first run warms up and is dropped
            sch = schema(a.props, f"r{run}")
            fmt = {"type": "json_schema", "json_schema": {"name": "rec", "schema": sch}}
            msgs = lambda: [{"role": "user", "content": f"{random.random():.12f} {ask}"}]
            base = {"model": "m", "temperature": 0, "max_tokens": 2000}
            c_new = stream(url, dict(base, messages=msgs(), response_format=fmt))
            c_hit = stream(url, dict(base, messages=msgs(), response_format=fmt))
            json.loads(c_hit[3])
            n_gen = c_new[2]
            f = stream(url, dict(base, messages=msgs(), max_tokens=n_gen, logit_bias=free_bias))
            if run:
                rows.append((c_new, c_hit, f))
        med = lambda xs: statistics.median(xs)
        rate_c = med([r[1][1] for r in rows])
        rate_f = med([r[2][1] for r in rows])
        print(f"structured output, {a.props}-property schema, {a.runs} runs, "
              f"~{n_gen} tokens per reply, {a.threads} threads")
        print(f"  decode tok/s: constrained {rate_c:.1f}, free {rate_f:.1f}, "
              f"ratio {rate_c / rate_f:.3f} (target >= 0.95)")
        tt_f = med([r[2][0] for r in rows])
        tt_new = med([r[0][0] for r in rows])
        tt_hit = med([r[1][0] for r in rows])
        print(f"  time to first token ms: free {tt_f:.1f}, constrained new schema {tt_new:.1f} "
              f"(+{tt_new - tt_f:.1f}), cached schema {tt_hit:.1f} (+{tt_hit - tt_f:.1f}) "
              f"(target <= +20)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
