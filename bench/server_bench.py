#!/usr/bin/env python3
"""`hearth serve` against `hearth run` and against llama-cpp-python's server, in one run.

usage: server_bench.py [--model PATH] [--threads 2] [--runs 3] [--gen 128] [--no-peer]

Three figures, each the median of --runs:
- start to ready: process start until GET /health answers 200 (hearth; and the peer's server
  until its /v1/models answers, for scale).
- served vs direct: decode tok/s of a streamed /v1/completions request (client side: tokens after
  the first, over the time from the first to the last streamed chunk) against `hearth run
  --verbose` on the same prompt and settings; and the server's overhead per request, the time to
  first token seen by the client minus the engine's own time to first token (from /stats).
- against llama-cpp-python's server (`python -m llama_cpp.server`) on the same GGUF and threads:
  time to first token and decode tok/s, for a short prompt and a ~1,000-token one, one client.
  Every request starts with a fresh number so neither server can reuse a cached prefix, and both
  get the same logit_bias forbidding end-of-text, so both generate exactly --gen tokens.
Ratios are hearth ÷ peer for speeds and peer ÷ hearth for times (above 1: hearth is better).
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))
HEARTH = os.path.join(BUILD, "hearth")

STORY = ("The old lighthouse keeper climbed the spiral stairs every evening, counting the steps "
         "as his father had taught him, and watched the ships pass along the dark coast. ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(url, proc, timeout=300):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.002)
    raise SystemExit(f"{url} not ready within {timeout}s")


def start_hearth(model, threads, *extra):
    t0 = time.monotonic()
    p = subprocess.Popen([HEARTH, "serve", model, "--port", "0", "--threads", str(threads),
                          "--ctx", "2048", "--quiet", *extra], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    url = None
    while url is None:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("hearth serve exited: " + str(p.wait()))
        m = re.search(r"(http://[^\s/]+:\d+)/", line)
        url = m.group(1) if m else None
    wait_ready(url + "/health", p)
    return p, url, (time.monotonic() - t0) * 1e3


def start_peer(model, threads):
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", model,
                          "--n_threads", str(threads), "--n_threads_batch", str(threads),
                          "--n_ctx", "2048", "--n_batch", "512", "--host", "127.0.0.1",
                          "--port", str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/v1/models", p)
    return p, url, (time.monotonic() - t0) * 1e3


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def completion_request(url, prompt, gen, bias, stream=True):
    """A greedy /v1/completions request of gen tokens: streamed with usage included, or whole;
    bias (logit_bias) may be None."""
    req = {"model": "m", "prompt": prompt, "max_tokens": gen, "temperature": 0, "stream": stream}
    if bias is not None:
        req["logit_bias"] = bias
    if stream:
        req["stream_options"] = {"include_usage": True}
    body = json.dumps(req).encode()
    return urllib.request.Request(url + "/v1/completions", data=body,
                                  headers={"Content-Type": "application/json"})


def stream_completion(url, prompt, gen, bias):
    """Streams one /v1/completions request; returns (ttft_ms, decode_tok_s, n_tokens)."""
    req = completion_request(url, prompt, gen, bias)
    t0 = time.monotonic()
    lines = []  # (time, raw line): parsed after the stream ends, so the client (on the same
    #             cores as the server) spends as little CPU as possible while tokens arrive
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            if raw.startswith(b"data: "):
                lines.append((time.monotonic(), raw))
    t_first, t_last, n = parse_stream(lines)
    decode = (n - 1) / (t_last - t_first) if t_last and t_last > t_first else 0.0
    return (t_first - t0) * 1e3, decode, n


def parse_stream(lines):
    """(time of the first text chunk, of the last, completion tokens) of a completions stream
    given as (arrival time, raw "data: " line) pairs; the times are None when no text came."""
    t_first = t_last = None
    n_chunks, usage = 0, None
    for t, raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        if any(c.get("text") for c in ev.get("choices") or []):
            t_first = t_first or t
            t_last = t
            n_chunks += 1
    return t_first, t_last, usage["completion_tokens"] if usage else n_chunks


def direct_decode(model, text, threads, gen):
    p = subprocess.run([HEARTH, "run", model, text, "--raw", "--temp", "0", "--ignore-eos",
                        "--max-tokens", str(gen), "--threads", str(threads), "--ctx", "2048",
                        "--verbose"], capture_output=True, text=True, check=True)
    return float(re.search(r"generated \d+ tokens, ([\d.]+) tok/s", p.stderr).group(1))


def eos_bias(model):
    """logit_bias forbidding the model's end-of-text and end-of-turn tokens (those of the usual
    spellings that are one token in this vocabulary)."""
    ids = set()
    for text in ("<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>", "<|end_of_text|>"):
        t = subprocess.run([HEARTH, "tokenize", model, text, "--json"], capture_output=True,
                           text=True)
        if t.returncode == 0:
            got = json.loads(t.stdout).get("ids", [])
            if len(got) == 1:
                ids.add(got[0])
    return {str(i): -100 for i in sorted(ids)}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    name = os.path.basename(a.model)
    bias = eos_bias(a.model)
    long_text = STORY * 30  # about 1,000 tokens with most tokenizers
    print(f"server bench: {name}, {a.threads} threads, {a.gen} tokens, median of {a.runs}; "
          f"end-of-text forbidden by logit_bias {bias}")

    ready = []
    for _ in range(a.runs):
        p, _, ms = start_hearth(a.model, a.threads)
        ready.append(ms)
        stop(p)
    print(f"start to ready (/health 200): {med(ready):.0f} ms")

    p, url, _ = start_hearth(a.model, a.threads)
    served, direct, overhead = [], [], []
    for i in range(a.runs):
        text = f"{i}. {STORY}"
        ttft, dec, _ = stream_completion(url, text, a.gen, bias)
        served.append(dec)
        st = get_json(url + "/stats")["last_request"]
        overhead.append(ttft - st["first_token_ms"])
        direct.append(direct_decode(a.model, f"{i + 100}. {STORY}", a.threads, a.gen))
    print(f"decode served {med(served):.1f} tok/s vs hearth run {med(direct):.1f} tok/s: "
          f"{med(served) / med(direct):.3f}x")
    print(f"server overhead per request (client TTFT - engine TTFT): {med(overhead):.2f} ms")

    results = {}
    for label, prompt in (("short", STORY[:60]), ("1k", long_text)):
        rows = []
        for i in range(a.runs):
            rows.append(stream_completion(url, f"{i + 1000}. {prompt}", a.gen, bias))
        results[("hearth", label)] = rows
    stop(p)
    if a.no_peer:
        return
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        print("peer: llama-cpp-python[server] is not installed; skipped")
        return
    peer_ready = []
    pp, purl, ms = start_peer(a.model, a.threads)
    peer_ready.append(ms)
    for label, prompt in (("short", STORY[:60]), ("1k", long_text)):
        rows = []
        for i in range(a.runs):
            rows.append(stream_completion(purl, f"{i + 1000}. {prompt}", a.gen, bias))
        results[("peer", label)] = rows
    stop(pp)
    print(f"llama-cpp-python server start to ready: {med(peer_ready):.0f} ms")
    print(f"{'prompt':<7} {'':>6} {'TTFT ms':>9} {'decode tok/s':>13}")
    for label in ("short", "1k"):
        h = results[("hearth", label)]
        q = results[("peer", label)]
        ht, hd = med([r[0] for r in h]), med([r[1] for r in h])
        qt, qd = med([r[0] for r in q]), med([r[1] for r in q])
        n = med([r[2] for r in h])
        print(f"{label:<7} {'hearth':>6} {ht:9.1f} {hd:13.1f}   ({n:.0f} tokens)")
        print(f"{'':<7} {'peer':>6} {qt:9.1f} {qd:13.1f}")
        print(f"{'':<7} {'ratio':>6} {qt / ht:8.2f}x {hd / qd:12.2f}x   (above 1: hearth better)")


if __name__ == "__main__":
    main()
