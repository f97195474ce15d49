#!/usr/bin/env python3
"""Regenerates tests/parity/goldens/ with the reference implementation (tests/parity/reference.py).

usage: make_goldens.py MODEL_PATH NAME [--tokenizer tokenizer.json] [--prompts N] [--greedy N]

Prompts are the docstrings of Python standard-library modules (deterministic, varied prose and
code), tokenized with the Hugging Face `tokenizers` package and cut to 160 tokens. The golden
file records the token ids, the reference's top-1 token and log-probability at every position
(teacher-forced), and a greedy continuation of --greedy tokens. Only this script writes goldens.
"""
import argparse
import importlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

MODULES = ["json", "re", "argparse", "itertools", "subprocess", "unittest", "csv", "heapq",
           "statistics", "doctest", "socket", "sqlite3", "optparse", "difflib", "inspect", "ast",
           "typing", "pdb", "trace", "uuid", "struct", "io", "os", "sched", "configparser",
           "tempfile", "copy", "cmd", "timeit", "mimetypes"]


def prompts(tok, n, length=160):
    out = []
    for name in MODULES:
        doc = importlib.import_module(name).__doc__ or ""
        ids = tok.encode(" ".join(doc.split())).ids
        if len(ids) >= length:
            out.append(ids[:length])
        if len(out) == n:
            break
    return out


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("name")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--greedy", type=int, default=64)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer)
    m = reference.load(a.model)
    cases = []
    for ids in prompts(tok, a.prompts):
        lp = log_softmax(m.forward(ids))
        top = lp.argmax(axis=-1)
        cases.append({"tokens": ids, "top1": top.tolist(),
                      "top1_logprob": [round(float(lp[i, t]), 6) for i, t in enumerate(top)],
                      "greedy": m.greedy(ids, a.greedy)})
        print(f"prompt {len(cases)}: {len(ids)} tokens", file=sys.stderr)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens", a.name + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"model": os.path.basename(a.model), "reference": "tests/parity/reference.py "
                   "(numpy float64 on gguf-dequantized weights)", "cases": cases}, f)
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
