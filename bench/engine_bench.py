#!/usr/bin/env python3
"""hearth against llama.cpp (llama-cpp-python) on the same GGUF, alternately, in one run.

usage: engine_bench.py [--model PATH] [--threads 2] [--prompt-tokens 512] [--gen 128] [--runs 5]

For each run it times, in separate processes: hearth (`hearth run --raw --ignore-eos --verbose`,
which reports prompt tok/s, decode tok/s and time to first token) and llama-cpp-python (prompt
eval of the same text, then greedy decode of --gen tokens through llm.eval, EOS ignored). Peak
RSS is each process's maximum resident set (llama-cpp-python's includes the Python interpreter,
~30 MiB). Prints medians and the ratios hearth / llama.cpp. A 1-token prompt measures process
start to first token.

The decode roofline: decode reads every matmul weight once per token, so its ceiling is the
machine's streaming read bandwidth with the same thread count (build/hx-membw, measured before
and after the runs; the median is used) divided by the bytes of those weights (every 2-D tensor of the file except token_embd when the
model has its own output.weight, and the active experts' share of a mixture of experts' 3-D
expert tensors; the KV cache read per token is small here and left out). Both engines' decode is printed as a fraction of it.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))

LCP = r'''
import json, resource, sys, time
from llama_cpp import Llama
a = json.loads(sys.argv[1])
t0 = time.perf_counter()
llm = Llama(model_path=a["model"], n_threads=a["threads"], n_threads_batch=a["threads"],
            n_ctx=a["ctx"], n_batch=512, verbose=False, logits_all=False)
toks = llm.tokenize(a["text"].encode(), add_bos=False, special=False)
t1 = time.perf_counter()
llm.eval(toks)
t2 = time.perf_counter()
tok = int(llm.sample(temp=0.0))
t3 = time.perf_counter()
for _ in range(a["gen"] - 1):
    llm.eval([tok])
    tok = int(llm.sample(temp=0.0))
t4 = time.perf_counter()
print(json.dumps({"n_prompt": len(toks), "prompt_tps": len(toks) / (t2 - t1),
                  "decode_tps": (a["gen"] - 1) / (t4 - t3), "first_ms": (t3 - t0) * 1e3,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
'''


def run_hearth(model, text, threads, gen):
    p = subprocess.run([os.path.join(BUILD, "hearth"), "run", model, text, "--raw", "--temp", "0",
                        "--ignore-eos", "--max-tokens", str(gen), "--threads", str(threads),
                        "--ctx", "2048", "--verbose"], capture_output=True, text=True, check=True)
    m = re.search(r"prompt (\d+) tokens.*= ([\d.]+) tok/s \| generated \d+ tokens, ([\d.]+) tok/s"
                  r" \| first token ([\d.]+) ms \| peak memory ([\d.]+) MiB", p.stderr)
    return {"n_prompt": int(m.group(1)), "prompt_tps": float(m.group(2)),
            "decode_tps": float(m.group(3)), "first_ms": float(m.group(4)),
            "rss": float(m.group(5))}


def run_lcp(model, text, threads, gen):
    p = subprocess.run([sys.executable, "-c", LCP, json.dumps(
        {"model": model, "text": text, "threads": threads, "gen": gen, "ctx": 2048})],
        capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def matmul_bytes(model):
    """Bytes of the weights one decode step reads: every 2-D tensor, less the embedding table
    when the output projection is a separate tensor (then the lookup reads one row), and of a
    mixture of experts' stacked 3-D expert tensors the share of the experts a token runs."""
    from gguf import GGUFReader
    r = GGUFReader(model)
    names = {t.name for t in r.tensors}
    share = 1.0
    for f in r.fields.values():
        if f.name.endswith(".expert_count"):
            n_exp = int(f.parts[f.data[0]][0])
            used = [g for g in r.fields.values() if g.name.endswith(".expert_used_count")]
            share = int(used[0].parts[used[0].data[0]][0]) / n_exp if used else 1.0
    return sum(int(t.n_bytes) * (share if len(t.shape) == 3 else 1) for t in r.tensors
               if len(t.shape) in (2, 3) and
               not (t.name == "token_embd.weight" and "output.weight" in names))


def membw_gbs(threads):
    p = subprocess.run([os.path.join(BUILD, "hx-membw"), str(threads)], capture_output=True,
                       text=True, check=True)
    return float(re.search(r"([\d.]+) GB/s", p.stdout).group(1))


def prompt_text(n_words):
    import importlib
    words = []
    for name in ["json", "argparse", "subprocess", "unittest", "doctest", "typing", "inspect"]:
        words += (importlib.import_module(name).__doc__ or "").split()
    return " ".join(words[:n_words])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=210)  # ~512 tokens of docstring text
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        sys.exit("llama-cpp-python is not installed (pip install llama-cpp-python)")
    text = prompt_text(a.prompt_words)
    bws = [membw_gbs(a.threads)]
    res = {"hearth": [], "llama.cpp": []}
    for i in range(a.runs):  # alternate, so drift on a shared machine hits both alike
        res["hearth"].append(run_hearth(a.model, text, a.threads, a.gen))
        res["llama.cpp"].append(run_lcp(a.model, text, a.threads, a.gen))
    starts = []
    for _ in range(a.runs):  # whole process: exec, open, map, prefill, one token, exit
        t0 = time.perf_counter()
        run_hearth(a.model, "Hi", a.threads, 1)
        starts.append((time.perf_counter() - t0) * 1e3)
    bws.append(membw_gbs(a.threads))
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in res.items()}
    print(f"model {a.model}, {a.threads} threads, prompt {med['hearth']['n_prompt']:.0f} tokens, "
          f"{a.gen} generated, median of {a.runs}")
    print(f"{'':18}{'hearth':>12}{'llama.cpp':>12}{'ratio':>8}")
    for m, label, better_high in [("prompt_tps", "prompt tok/s", True),
                                  ("decode_tps", "decode tok/s", True),
                                  ("first_ms", "first token ms", False)]:
        h, l = med["hearth"][m], med["llama.cpp"][m]
        print(f"{label:18}{h:12.1f}{l:12.1f}{h / l:8.2f}")
    print(f"{'peak RSS MiB':18}{med['hearth']['rss']:12.1f}{med['llama.cpp']['rss']:12.1f}"
          f"{med['hearth']['rss'] / med['llama.cpp']['rss']:8.2f}  (llama.cpp's includes Python)")
    wb = matmul_bytes(a.model)
    bw = statistics.median(bws)
    roof = bw * 1e9 / wb
    print(f"decode roofline: {bw:.1f} GB/s streaming read ({a.threads} threads; measured "
          f"{', '.join(f'{b:.1f}' for b in bws)}) / {wb / 2**20:.0f} MiB of weights per token = "
          f"{roof:.1f} tok/s; hearth {med['hearth']['decode_tps'] / roof:.0%}, llama.cpp "
          f"{med['llama.cpp']['decode_tps'] / roof:.0%} of it")
    print(f"hearth whole process for a 1-token prompt and 1 generated token: "
          f"{statistics.median(starts):.1f} ms (median; target: start to first token <= 150 ms)")


if __name__ == "__main__":
    main()
