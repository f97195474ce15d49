#!/usr/bin/env python3
"""Every GPU speed figure of hearth in one run, on the GPU machine: the GPU's ceilings, then per
model decode and prefill against them, and aggregate decode under concurrent streams.

usage: gpu_bench.py [--build build] [--dir /tmp/hx-shapes] [--models SPEC,...] [--out FILE]
                    [--quick] [--runs 3] [--gen 256] [--prompt-tokens 2048] [--streams 8,32,64]
                    [--stream-gen 128] [--no-serve] [--gib 4] [--ab VAR=VALUE]
                    [--against BUILD]

1. Ceilings: BUILD/hx-gpu-roofline (bench/gpu/roofline.cu) measures HBM read bandwidth and the
   cuBLAS bf16/f16 GEMM rate; its JSON line is read. Without it (a build where nvcc was not
   found) the run goes on and the percentages are left out.
2. Models: each SPEC is SHAPE:TYPE, a shape of bench/gen_shaped_gguf.py and a type of it (q4_0,
   q4_1, q8_0, q4_k, q4_k_m) or "mlx4" (bench/gen_shaped_mlx.py: MLX 4-bit, group 64). The files are
   written into --dir with the generators' built-in byte-level vocabulary (every byte of text is
   one token, so GGUF and MLX see the same token stream) and kept: a later run reuses them.
   Default: llama-3.2-1b:q4_0, llama-3.1-8b:q4_0, llama-3.1-8b:q4_k, qwen2.5-7b:q4_0,
   llama-3.1-8b:mlx4; --quick: llama-3.2-1b:q4_0 only, with short runs.
3. Per model, with `hearth run MODEL TEXT --raw --temp 0 --ignore-eos --verbose --device cuda`
   (the timing line engine_bench.py parses; each figure the median of --runs processes):
   - decode tok/s at batch 1: a short prompt, --gen tokens;
   - prefill tok/s: a prompt of --prompt-tokens tokens (the text sized with `hearth tokenize`),
     one token generated: in a fresh `hearth run` process (cold: every kernel's first use and
     scratch growth in the figure) and, with serving on, in a warm server (warm_prefill);
   - bytes per token: every matmul weight, from `hearth inspect --json --tensors` (every 2-D
     tensor, less token_embd when the output projection is its own tensor, and the active
     experts' share of 3-D expert tensors, as engine_bench.py counts; MLX scales and biases
     included; the KV cache read is small at these lengths and left out). Roofline tok/s =
     HBM read GB/s * 1e9 / bytes per token; decode is shown as a fraction of it (target: 60%
     for the 8B-class models).
   - prefill ceiling tok/s = bf16 GEMM TFLOP/s * 1e12 / (2 * matmul parameters), the
     parameters of the same tensors (attention's own FLOPs are left out); prefill is shown as a
     fraction of it (target: 40%).
4. Concurrency (unless --no-serve): `hearth serve MODEL --device cuda --port 0 --batch MAX`,
   one warm-up round, then for each of --streams N concurrent /v1/completions streams (each its
   own prompt, --stream-gen tokens, end-of-text forbidden by logit_bias as batch_bench.py
   does): aggregate decode tok/s = the streams' tokens after their first / (last stream's end -
   first stream's first token), and the median and p99 time to first token under that load.
5. A table, and every number as JSON in --out (default $OUT/gpu_bench.json when OUT is set).

--ab VAR=VALUE compares the build with itself, without and with that environment setting (a
switch such as HEARTH_CUDA_F16_WEIGHTS=0): every `hearth run` figure is taken both ways, the
processes alternating (A, B, A, B, ...) so that a drift of the machine's speed falls on both;
the servers run one after the other. Each model then has two rows, the second named with the
setting, and a line of B/A ratios follows the table. --against BUILD does the same with another
build's hearth as B (a branch against main, both built here and carried to the GPU machine),
and says whether the two builds' decode texts are the same (a kernel that should only be
faster must not change them).

The script checks first that the hearth binary has a CUDA backend (`hearth devices --json`, or
`hearth --version` listing cuda where that verb does not exist) and that `hearth run` takes
--device, and stops with a message saying what is missing. A model that fails to generate, load
or run is reported in the table and the JSON and the others still run. Needs python3 with numpy
(for the generators); not the `gguf` package, nor torch.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_bench  # noqa: E402
from server_bench import eos_bias, stop, wait_ready  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
DEFAULT_MODELS = ["llama-3.2-1b:q4_0", "llama-3.1-8b:q4_0", "llama-3.1-8b:q4_k",
                  "qwen2.5-7b:q4_0", "llama-3.1-8b:mlx4"]
GGUF_TYPES = ["q4_0", "q4_1", "q8_0", "q4_k", "q4_k_m"]
STORY = ("The old lighthouse keeper climbed the spiral stairs every evening, counting the steps "
         "as his father had taught him, and watched the ships pass along the dark coast. ")
TIMING = re.compile(r"prompt (\d+) tokens \((\d+) cached\) in ([\d.]+) ms = ([\d.]+) tok/s \| "
                    r"generated (\d+) tokens, ([\d.]+) tok/s \| first token ([\d.]+) ms")
DECODE_TARGET, PREFILL_TARGET = 0.60, 0.40
BIG_MODEL = 5e9  # matmul parameters from which the decode target applies (the 7-8B shapes)
TIMEOUT = 600    # seconds any one hearth process may take


class BenchError(Exception):
    """A step of one model failed; the message says which and why."""


def log(msg):
    print(msg, flush=True)


def tail(text, n=600):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


# ---- checks ----

def check_hearth(hearth, device):
    """Returns (the --device flags to pass, a line describing the backend) or exits with what
    is missing."""
    if not os.access(hearth, os.X_OK):
        sys.exit(f"gpu_bench: {hearth} not found: build hearth first (make, or --build DIR)")
    ver = subprocess.run([hearth, "--version"], capture_output=True, text=True)
    version = " / ".join(ver.stdout.split("\n")[:2]).strip()
    p = subprocess.run([hearth, "run", os.path.join(tempfile.gettempdir(), "hx-no-such-model"),
                        "x", "--device", device], capture_output=True, text=True)
    has_flag = "unknown option" not in p.stderr
    if device == "cpu":
        return (["--device", "cpu"] if has_flag else []), version
    d = subprocess.run([hearth, "devices", "--json"], capture_output=True, text=True)
    try:
        dev = json.loads(d.stdout) if d.returncode == 0 else None
    except ValueError:
        dev = None
    if dev is None:  # no such verb (an older build): the version's backend list says it
        if "cuda" not in ver.stdout.lower():
            sys.exit(f"gpu_bench: hearth has no cuda backend (`hearth --version`: {version}); "
                     "build it where nvcc is installed (cmake finds it and builds "
                     "src/backend/cuda)")
        info = version
    else:  # {"backends": ["cpu", "cuda"], "gpus": [{...}], "reason": null or why none}
        backends = dev.get("backends", []) if isinstance(dev, dict) else []
        if "cuda" not in backends:
            sys.exit(f"gpu_bench: hearth has no cuda backend (`hearth devices --json`: backends "
                     f"{backends}); build it where nvcc is installed (cmake finds it and builds "
                     "src/backend/cuda)")
        gpus = dev.get("gpus") or []
        if not gpus:
            sys.exit(f"gpu_bench: hearth has a cuda backend but sees no GPU: "
                     f"{dev.get('reason') or tail(d.stdout)}")
        info = f"{version}; GPUs: " + ", ".join(f"{g.get('device', '?')} {g.get('name', '')}"
                                                for g in gpus)
    if not has_flag:
        sys.exit("gpu_bench: this hearth's `run` has no --device option yet (hearth run: "
                 f"{tail(p.stderr, 200)})")
    return ["--device", device], info


# ---- ceilings ----

def roofline(build, gib):
    """Runs hx-gpu-roofline; returns its JSON object, or None (with a message) when it is
    missing or fails."""
    exe = os.path.join(build, "hx-gpu-roofline")
    if not os.access(exe, os.X_OK):
        log(f"roofline: {exe} not built (CMake builds it only where nvcc was found); "
            "percentages of the ceilings are left out")
        return None
    p = subprocess.run([exe, "--gib", str(gib)], capture_output=True, text=True, timeout=TIMEOUT)
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            log("  " + line)
    if p.returncode != 0:
        log(f"roofline: hx-gpu-roofline exited {p.returncode}: {tail(p.stderr)}; percentages "
            "are left out")
        return None
    js = [line for line in p.stdout.splitlines() if line.startswith("{")]
    return json.loads(js[-1]) if js else None


# ---- models ----

def parse_spec(spec):
    sys.path.insert(0, BENCH)
    from gen_shaped_gguf import MOE, SHAPES
    shape, _, kind = spec.partition(":")
    if shape not in SHAPES or kind not in GGUF_TYPES + ["mlx4"] or (kind == "mlx4" and
                                                                    shape in MOE):
        sys.exit(f"gpu_bench: bad model '{spec}': want SHAPE:TYPE, SHAPE one of "
                 f"{', '.join(sorted(SHAPES))} and TYPE one of {', '.join(GGUF_TYPES)}, mlx4 "
                 "(mlx4 for the dense shapes)")
    return shape, kind


def ensure_model(spec, folder, layers):
    """The path of the model spec names under folder, written first when it is not there."""
    shape, kind = parse_spec(spec)
    stem = f"{shape}-{kind}" + (f"-{layers}l" if layers else "")
    extra = ["--layers", str(layers)] if layers else []
    if kind == "mlx4":
        path = os.path.join(folder, stem)
        cmd = [sys.executable, os.path.join(BENCH, "gen_shaped_mlx.py"), path, "--shape", shape,
               "--bits", "4", "--group-size", "64"] + extra
        present = os.path.isfile(os.path.join(path, "model.safetensors"))
    else:
        path = os.path.join(folder, stem + ".gguf")
        cmd = [sys.executable, os.path.join(BENCH, "gen_shaped_gguf.py"), path, "--shape", shape,
               "--type", kind, "--tokenizer-from", "bytes"] + extra
        present = os.path.isfile(path)
    if present:
        return path, 0.0
    os.makedirs(folder, exist_ok=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError(f"generating {path} failed: {tail(p.stderr)}")
    return path, time.monotonic() - t0


def weights_of(hearth, model):
    """(bytes per token, matmul parameters, all parameters, arch) from hearth inspect."""
    p = subprocess.run([hearth, "inspect", model, "--json", "--tensors"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        raise BenchError(f"hearth inspect failed: {tail(p.stderr)}")
    d = json.loads(p.stdout)
    hp = d["hparams"]
    share = hp["n_expert_used"] / hp["n_expert"] if hp.get("n_expert") else 1.0
    names = {t["name"] for t in d["tensors"]}
    n_bytes = n_params = 0.0
    for t in d["tensors"]:
        if len(t["shape"]) not in (2, 3) or \
                (t["name"] == "token_embd.weight" and "output.weight" in names):
            continue
        k = share if len(t["shape"]) == 3 else 1.0
        n_bytes += t["bytes"] * k
        n_params += k * math.prod(t["shape"])
    return int(n_bytes), int(n_params), d["n_params"], d["arch"]


def prompt_text(hearth, model, n_tokens):
    """Text that tokenizes to about n_tokens - 1 tokens (the BOS makes n_tokens), sized with
    `hearth tokenize`."""
    want = max(n_tokens - 1, 1)
    n_chars = want
    base = STORY * (want // 20 + 2)
    for _ in range(4):
        text = base[:n_chars]
        p = subprocess.run([hearth, "tokenize", model, text, "--json"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        if p.returncode != 0:
            raise BenchError(f"hearth tokenize failed: {tail(p.stderr)}")
        got = len(json.loads(p.stdout)["ids"])
        if got == want:
            break
        n_chars = max(1, int(n_chars * want / got))
        while len(base) < n_chars:
            base += STORY
    return text


def hearth_run(hearth, model, text, gen, ctx, dev, env=None):
    """One `hearth run` process (env: its environment, None for ours); its timing line as a
    dict."""
    cmd = [hearth, "run", model, text, "--raw", "--temp", "0", "--ignore-eos", "--max-tokens",
           str(gen), "--ctx", str(ctx), "--verbose"] + dev
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"hearth run did not finish within {TIMEOUT} s")
    m = TIMING.search(p.stderr)
    if p.returncode != 0 or not m:
        raise BenchError(f"hearth run exited {p.returncode}: {tail(p.stderr)}")
    return {"n_prompt": int(m.group(1)), "prompt_ms": float(m.group(3)),
            "prompt_tps": float(m.group(4)), "n_gen": int(m.group(5)),
            "decode_tps": float(m.group(6)), "first_ms": float(m.group(7)), "text": p.stdout}


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


# ---- concurrency ----

def start_server(hearth, model, dev, batch, ctx, logf, env=None):
    """Starts `hearth serve` on a free port (env: its environment, None for ours); returns
    (process, base url). Its stderr goes to logf, quoted when it does not come up."""
    p = subprocess.Popen([hearth, "serve", model, "--port", "0", "--ctx", str(ctx), "--batch",
                          str(batch), "--max-queue", str(max(64, 2 * batch)), "--quiet"] + dev,
                         stdout=subprocess.PIPE, stderr=logf, text=True, env=env)
    url = None
    deadline = time.monotonic() + TIMEOUT
    while url is None and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            p.wait()
            logf.seek(0)
            raise BenchError(f"hearth serve exited {p.returncode}: {tail(logf.read())}")
        m = re.search(r"(http://[^\s/]+:\d+)/", line)
        url = m.group(1) if m else None
    if url is None:
        stop(p)
        raise BenchError("hearth serve printed no address")
    # keep reading its stdout so the pipe never fills
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    try:
        wait_ready(url + "/health", p, timeout=TIMEOUT)
    except SystemExit as e:
        stop(p)
        logf.seek(0)
        raise BenchError(f"hearth serve: {e}: {tail(logf.read())}")
    return p, url


def one_stream(url, prompt, gen, bias, out, i):
    """Streams one /v1/completions request; out[i] = (start, first text chunk time, last text
    chunk time, completion tokens) or an error string. The chunks are parsed after the stream
    ends, to take little CPU while the server works."""
    req = server_bench.completion_request(url, prompt, gen, bias)
    t0 = time.monotonic()
    lines = []
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            for raw in r:
                if raw.startswith(b"data: {"):
                    lines.append((time.monotonic(), raw))
    except OSError as e:
        out[i] = f"request failed: {e}"
        return
    first, last, n = server_bench.parse_stream(lines)
    if first is None:
        out[i] = "no text streamed"
        return
    out[i] = (t0, first, last, n)


def streams(url, n, gen, bias, tag):
    """n concurrent streams; (aggregate decode tok/s, TTFT p50 ms, TTFT p99 ms, tokens)."""
    out = [None] * n
    th = [threading.Thread(target=one_stream, args=(url, f"{tag}-{i}. {STORY}", gen, bias, out, i))
          for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    bad = [o for o in out if not isinstance(o, tuple)]
    if bad:
        raise BenchError(f"{len(bad)} of {n} streams failed: {bad[0]}")
    first = min(o[1] for o in out)
    last = max(o[2] for o in out)
    tokens = sum(o[3] - 1 for o in out)
    ttft = sorted((o[1] - o[0]) * 1e3 for o in out)
    p99 = ttft[min(len(ttft) - 1, int(round(0.99 * (len(ttft) - 1))))]
    return tokens / (last - first), statistics.median(ttft), p99, sum(o[3] for o in out)


def warm_prefill(url, text, runs):
    """Prefill tok/s of a warm server: the prompt answered with one token, each time behind its
    own first word (so the prefix cache holds none of it), timed by the server itself (/stats
    last_request). The first run is left out: it is the first at this length (kernels loaded
    on first use, scratch grown, cuBLAS choosing its algorithms), a cost `hearth run` pays on
    every prompt and a server once."""
    tps = []
    for i in range(runs + 1):
        req = server_bench.completion_request(url, f"Run {i}: {text}", 1, None, stream=False)
        urllib.request.urlopen(req, timeout=TIMEOUT).read()
        with urllib.request.urlopen(url + "/stats", timeout=TIMEOUT) as r:
            last = json.load(r)["last_request"]
        n = last["prompt_tokens"] - last["cached_tokens"]
        if i > 0 and last["prompt_ms"] > 0:
            tps.append(n / last["prompt_ms"] * 1e3)
    return statistics.median(tps), n


def serve_figures(hearth, model, dev, counts, gen, ctx, prompt_text=None, runs=1, env=None):
    """Aggregate decode and TTFT at each count of concurrent streams, one server for all; with
    prompt_text, first the warm prefill of that prompt (warm_prefill)."""
    res = {}
    with tempfile.TemporaryFile("w+") as logf:
        p, url = start_server(hearth, model, dev, max(counts), ctx, logf, env)
        try:
            if prompt_text:
                tps, n = warm_prefill(url, prompt_text, runs)
                res["warm_prefill"] = {"prefill_tps": tps, "prompt_tokens": n}
                log(f"    prefill in a warm server: {tps:.1f} tok/s on {n} tokens")
            bias = eos_bias(model)
            streams(url, max(counts), 4, bias, "warm")  # first-use costs out of the figures
            for n in counts:
                agg, p50, p99, tok = streams(url, n, gen, bias, f"s{n}")
                res[str(n)] = {"aggregate_tps": agg, "ttft_p50_ms": p50, "ttft_p99_ms": p99,
                               "tokens": tok}
                log(f"    {n:>3} streams: {agg:9.1f} tok/s aggregate, TTFT p50 {p50:8.1f} ms, "
                    f"p99 {p99:8.1f} ms")
        finally:
            stop(p)
    return res


# ---- one model ----

def alternating(n, variants, fn):
    """fn(variant) n times for each variant, the variants taking turns; a list of results per
    variant."""
    out = [[] for _ in variants]
    for _ in range(n):
        for k, v in enumerate(variants):
            out[k].append(fn(v))
    return out


def bench_model(a, hearth, dev, spec, roof, variants):
    """The figures of one model for each variant (a label, an environment, None for ours, and a
    hearth, None for `hearth`): a result per variant."""
    path, gen_s = ensure_model(spec, a.dir, a.layers)
    log(f"{spec}: {path}" + (f" (written in {gen_s:.1f} s)" if gen_s else ""))
    wb, mp, n_params, arch = weights_of(hearth, path)
    rs = []
    for label, _, _ in variants:
        r = {"spec": spec + (f" {label}" if label else ""), "path": path, "arch": arch,
             "bytes_per_token": wb, "matmul_params": mp, "n_params": n_params}
        if gen_s:
            r["generate_s"] = round(gen_s, 1)
        if label:
            r["env"] = label
        rs.append(r)

    short = STORY[:48]
    ctx = -(-max(a.prompt_tokens + 64, a.gen + 128) // 256) * 256
    decs = alternating(a.runs, variants,
                       lambda v: hearth_run(v[2] or hearth, path, short, a.gen, ctx, dev, v[1]))
    text = prompt_text(hearth, path, a.prompt_tokens)
    pres = alternating(a.runs, variants,
                       lambda v: hearth_run(v[2] or hearth, path, text, 1, ctx, dev, v[1]))
    for r, dec, pre in zip(rs, decs, pres):
        if r is not rs[0]:
            r["same_text"] = {x["text"] for x in dec} == {x["text"] for x in decs[0]}
        name = f"  {r['env']}: " if r.get("env") else "  "
        r["decode_tps"] = median_of(dec, "decode_tps")
        r["decode_runs"] = [x["decode_tps"] for x in dec]
        log(f"{name}decode {r['decode_tps']:.1f} tok/s at batch 1 (runs: "
            f"{', '.join(f'{x:.1f}' for x in r['decode_runs'])})")
        r["prompt_tokens"] = pre[0]["n_prompt"]
        r["prefill_tps"] = median_of(pre, "prompt_tps")
        r["prefill_runs"] = [x["prompt_tps"] for x in pre]
        r["prefill_first_token_ms"] = median_of(pre, "first_ms")
        log(f"{name}prefill {r['prefill_tps']:.1f} tok/s on {r['prompt_tokens']} tokens (runs: "
            f"{', '.join(f'{x:.1f}' for x in r['prefill_runs'])})")
        if roof:
            r["roofline_tps"] = roof["hbm_read_gbs"] * 1e9 / wb
            r["decode_of_roofline"] = r["decode_tps"] / r["roofline_tps"]
            r["prefill_ceiling_tps"] = roof["bf16_tflops"] * 1e12 / (2 * mp)
            r["prefill_of_ceiling"] = r["prefill_tps"] / r["prefill_ceiling_tps"]
            log(f"{name}{wb / 2**20:.0f} MiB read per token: roofline {r['roofline_tps']:.1f} "
                f"tok/s, decode at {r['decode_of_roofline']:.0%}; prefill ceiling "
                f"{r['prefill_ceiling_tps']:.0f} tok/s ({mp / 1e9:.2f}B matmul parameters), "
                f"prefill at {r['prefill_of_ceiling']:.0%}")
    if not a.no_serve:
        for r, (label, env, other) in zip(rs, variants):
            if label:
                log(f"  serving with {label}:")
            r["serve"] = serve_figures(other or hearth, path, dev, a.counts, a.stream_gen,
                                       max(a.serve_ctx, ctx), text, a.runs, env)
            w = r["serve"]["warm_prefill"]
            if r.get("prefill_ceiling_tps"):
                w["of_ceiling"] = w["prefill_tps"] / r["prefill_ceiling_tps"]
    return rs


def ratios(results, counts):
    """B/A of each figure, for each model measured both ways (--ab)."""
    lines = []
    for a_, b in zip(results, results[1:]):
        if "error" in a_ or "error" in b or a_.get("env") or not b.get("env") or \
                not b["spec"].startswith(a_["spec"]):
            continue
        parts = [f"decode {b['decode_tps'] / a_['decode_tps']:.3f}",
                 f"prefill {b['prefill_tps'] / a_['prefill_tps']:.3f}"]
        sa, sb = a_.get("serve", {}), b.get("serve", {})
        if sa.get("warm_prefill") and sb.get("warm_prefill"):
            x = sb["warm_prefill"]["prefill_tps"] / sa["warm_prefill"]["prefill_tps"]
            parts.append(f"warm prefill {x:.3f}")
        for n in counts:
            if str(n) in sa and str(n) in sb:
                x = sb[str(n)]["aggregate_tps"] / sa[str(n)]["aggregate_tps"]
                parts.append(f"{n} streams {x:.3f}")
        if "same_text" in b:
            parts.append("the same decode text" if b["same_text"] else "DECODE TEXT DIFFERS")
        lines.append(f"{a_['spec']}, {b['env']} / without: " + ", ".join(parts))
    for line in lines:
        log(line)
    return lines


# ---- report ----

def pct(x):
    return f"{x:.0%}" if x is not None else "n/a"


def table(results, roof, counts):
    log("")
    if roof:
        log(f"GPU {roof['gpu']}: HBM read {roof['hbm_read_gbs']:.0f} GB/s, bf16 GEMM "
            f"{roof['bf16_tflops']:.0f} TFLOP/s, f16 {roof['f16_tflops']:.0f} TFLOP/s")
    mw = max([22] + [len(r["spec"]) + 2 for r in results])  # the model column
    h = (f"{'model':<{mw}}{'decode':>9}{'MiB/tok':>9}{'roofline':>10}{'%roof':>7}{'prefill':>10}"
         f"{'ceiling':>11}{'%ceil':>7}{'warm':>9}{'%ceil':>7}")
    for n in counts:
        h += f"{f'{n} streams':>13}{'TTFT':>8}"
    log(h)
    log(f"{'':<{mw}}{'tok/s':>9}{'':>9}{'tok/s':>10}{'':>7}{'tok/s':>10}{'tok/s':>11}{'':>7}"
        f"{'tok/s':>9}{'':>7}" +
        "".join(f"{'tok/s':>13}{'ms':>8}" for _ in counts))
    for r in results:
        if "error" in r:
            log(f"{r['spec']:<{mw}}failed: {r['error']}")
            continue
        dr, pc = r.get("decode_of_roofline"), r.get("prefill_of_ceiling")
        big = r["matmul_params"] >= BIG_MODEL
        dmark = "" if dr is None or not big else (" " if dr >= DECODE_TARGET else "!")
        pmark = "" if pc is None else (" " if pc >= PREFILL_TARGET else "!")
        roof_tps, ceil_tps = r.get("roofline_tps"), r.get("prefill_ceiling_tps")
        line = (f"{r['spec']:<{mw}}{r['decode_tps']:9.1f}{r['bytes_per_token'] / 2**20:9.0f}"
                f"{f'{roof_tps:.1f}' if roof_tps else 'n/a':>10}{pct(dr) + dmark:>7}"
                f"{r['prefill_tps']:10.0f}{f'{ceil_tps:.0f}' if ceil_tps else 'n/a':>11}"
                f"{pct(pc) + pmark:>7}")
        w = r.get("serve", {}).get("warm_prefill")
        wc = w.get("of_ceiling") if w else None
        wmark = "" if wc is None else (" " if wc >= PREFILL_TARGET else "!")
        line += (f"{w['prefill_tps']:9.0f}{pct(wc) + wmark:>7}" if w else f"{'-':>9}{'-':>7}")
        for n in counts:
            s = r.get("serve", {}).get(str(n))
            line += f"{s['aggregate_tps']:13.1f}{s['ttft_p50_ms']:8.0f}" if s else \
                f"{'-':>13}{'-':>8}"
        log(line)
    log(f"targets: decode >= {DECODE_TARGET:.0%} of the roofline for the 7-8B models, prefill >= "
        f"{PREFILL_TARGET:.0%} of the ceiling ('!' marks a miss); TTFT is the median time to "
        "first token with that many streams")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build")),
                    help="the build folder with hearth and hx-gpu-roofline (default: $HEARTH_BUILD "
                    "or ./build)")
    ap.add_argument("--dir", default="/tmp/hx-shapes", help="where the model files are kept")
    ap.add_argument("--models", help="comma-separated SHAPE:TYPE list (default: "
                    + ",".join(DEFAULT_MODELS) + ")")
    ap.add_argument("--out", help="JSON of every number (default: $OUT/gpu_bench.json when OUT "
                    "is set)")
    ap.add_argument("--quick", action="store_true", help="1B only, short runs: a smoke test")
    ap.add_argument("--runs", type=int, help="hearth run processes per figure (default 3; "
                    "quick 1)")
    ap.add_argument("--gen", type=int, help="decode tokens at batch 1 (default 256; quick 64)")
    ap.add_argument("--prompt-tokens", type=int, help="prefill prompt length (default 2048; "
                    "quick 512)")
    ap.add_argument("--streams", help="concurrent stream counts (default 8,32,64; quick 8)")
    ap.add_argument("--stream-gen", type=int, help="tokens per stream (default 128; quick 32)")
    ap.add_argument("--serve-ctx", type=int, default=1024, help="hearth serve --ctx")
    ap.add_argument("--no-serve", action="store_true", help="skip the concurrency figures")
    ap.add_argument("--gib", type=float, default=4, help="hx-gpu-roofline's read buffer")
    ap.add_argument("--ab", metavar="VAR=VALUE", help="every figure also with this environment "
                    "setting, the runs alternating; B/A ratios at the end")
    ap.add_argument("--against", metavar="BUILD", help="every figure also with BUILD's hearth, "
                    "the runs alternating; B/A ratios and whether the texts agree at the end")
    # for testing this script without a GPU: --device cpu, and a layer count override
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    q = a.quick
    a.runs = a.runs or (1 if q else 3)
    a.gen = a.gen or (64 if q else 256)
    a.prompt_tokens = a.prompt_tokens or (512 if q else 2048)
    a.stream_gen = a.stream_gen or (32 if q else 128)
    a.counts = [int(x) for x in (a.streams or ("8" if q else "8,32,64")).split(",")]
    models = a.models.split(",") if a.models else (["llama-3.2-1b:q4_0"] if q else DEFAULT_MODELS)
    for m in models:
        parse_spec(m)
    out = a.out or (os.path.join(os.environ["OUT"], "gpu_bench.json") if os.environ.get("OUT")
                    else None)

    hearth = os.path.join(a.build, "hearth")
    dev, info = check_hearth(hearth, a.device)
    server_bench.HEARTH = hearth  # eos_bias runs `hearth tokenize` through it
    log(f"gpu_bench: {hearth} ({info}), device {a.device}")
    t_start = time.monotonic()
    roof = roofline(a.build, a.gib) if a.device != "cpu" else None
    if roof:
        log(f"ceilings: HBM read {roof['hbm_read_gbs']:.0f} GB/s, bf16 {roof['bf16_tflops']:.0f}"
            f" TFLOP/s, f16 {roof['f16_tflops']:.0f} TFLOP/s ({roof['gpu']})")
    variants = [("", None, None)]
    if a.ab and a.against:
        sys.exit("gpu_bench: --ab and --against compare two ways; give one")
    if a.ab:
        var, eq, val = a.ab.partition("=")
        if not var or not eq:
            sys.exit(f"gpu_bench: --ab wants VAR=VALUE, not '{a.ab}'")
        variants.append((a.ab, dict(os.environ, **{var: val}), None))
    if a.against:
        other = os.path.join(a.against, "hearth")
        _, other_info = check_hearth(other, a.device)
        log(f"against: {other} ({other_info})")
        variants.append((f"against {a.against}", None, other))
    results = []
    for spec in models:
        try:
            results.extend(bench_model(a, hearth, dev, spec, roof, variants))
        except (BenchError, subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
            log(f"{spec}: FAILED: {e}")
            results.append({"spec": spec, "error": str(e)})
    table(results, roof, [] if a.no_serve else a.counts)
    compared = a.ab or a.against
    ab_lines = ratios(results, [] if a.no_serve else a.counts) if compared else []
    doc = {"hearth": info, "device": a.device, "roofline": roof,
           "settings": {"runs": a.runs, "gen": a.gen, "prompt_tokens": a.prompt_tokens,
                        "streams": a.counts, "stream_gen": a.stream_gen, "serve": not a.no_serve,
                        "dir": a.dir, "layers": a.layers},
           "targets": {"decode_of_roofline": DECODE_TARGET, "prefill_of_ceiling": PREFILL_TARGET},
           "models": results, "wall_s": round(time.monotonic() - t_start, 1)}
    if compared:
        doc["ab"] = {"setting": a.ab or f"against {a.against}", "ratios": ab_lines}
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(doc, f, indent=2)
        log(f"wrote {out}")
    log(f"total {doc['wall_s']:.0f} s")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
