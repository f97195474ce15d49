#!/usr/bin/env python3
"""tokenizer_speed.py - encoding speed of hearth against Hugging Face `tokenizers`, same run.

The text is English prose gathered deterministically from the docstrings of the Python modules
installed next to this interpreter (sorted paths, the first --mb megabytes), cut into lines of
at most 4 KiB. hearth runs `hearth tokenize SOURCE --ids` in bulk mode (one JSON string per
line in, one JSON object per line out, one process, one thread); its load time is measured on
an empty input and subtracted. `tokenizers` runs encode_batch on one thread (RAYON_NUM_THREADS=1
is set before it is imported). Both use the starter model's vocabulary: hearth the GGUF (or
tokenizer.json with --json-source), `tokenizers` ../shared/data/tokenizers/smollm2/tokenizer.json.
The ids are compared too, so the numbers are for identical work. Prints MB/s for both and the
ratio; runs alternate --rounds times and the best round of each counts.

    python bench/tokenizer_speed.py [--mb 20] [--rounds 3] [--source PATH]
"""
import argparse
import ast
import json
import os
import subprocess
import sys
import sysconfig
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers is imported
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HEARTH_HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))
STARTER = os.path.join(HEARTH_HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
HF_JSON = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "tokenizers", "smollm2",
                                        "tokenizer.json"))


def english_corpus(limit_bytes):
    """Docstrings of the installed pure-Python modules, in sorted path order."""
    site = sysconfig.get_paths()["purelib"]
    paths = []
    for d, dirs, files in os.walk(site):
        dirs.sort()
        paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    out, total = [], 0
    for p in paths:
        try:
            tree = ast.parse(open(p, encoding="utf-8").read())
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    out.append(doc)
                    total += len(doc.encode())
                    if total >= limit_bytes:
                        return out
    return out


def lines_of(docs, max_bytes=4096):
    lines, cur = [], ""
    for d in docs:
        for para in d.split("\n\n"):
            if len(cur) + len(para) > max_bytes and cur:
                lines.append(cur)
                cur = ""
            cur += para + "\n\n"
    if cur:
        lines.append(cur)
    return lines


def run_hearth(source, payload):
    t0 = time.perf_counter()
    p = subprocess.run([os.path.join(BUILD, "hearth"), "tokenize", source, "--ids"],
                       input=payload, capture_output=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"hearth failed: {p.stderr.decode()}")
    return dt, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--source", default=None, help="hearth's tokenizer (default: starter GGUF)")
    a = ap.parse_args()
    source = a.source or (STARTER if os.path.exists(STARTER) else HF_JSON)
    from tokenizers import Tokenizer
    ref = Tokenizer.from_file(HF_JSON)
    lines = lines_of(english_corpus(int(a.mb * 1e6)))
    n_bytes = sum(len(s.encode()) for s in lines)
    payload = "".join(json.dumps(s) + "\n" for s in lines).encode()
    print(f"text: {n_bytes / 1e6:.1f} MB in {len(lines)} lines (docstrings of {sys.prefix})")
    print(f"hearth: {source}\ntokenizers {__import__('tokenizers').__version__}: {HF_JSON}")
    load, _ = run_hearth(source, b"")
    best_h = best_r = float("inf")
    for _ in range(a.rounds):
        dt, out = run_hearth(source, payload)
        best_h = min(best_h, dt - load)
        t0 = time.perf_counter()
        enc = ref.encode_batch(lines, add_special_tokens=False)
        best_r = min(best_r, time.perf_counter() - t0)
    got = [json.loads(l)["ids"] for l in out.decode().split("\n")[:-1]]
    same = sum(g == e.ids for g, e in zip(got, enc))
    n_tok = sum(len(e.ids) for e in enc)
    h, r = n_bytes / best_h / 1e6, n_bytes / best_r / 1e6
    print(f"tokens: {n_tok}; lines with identical ids: {same}/{len(lines)}")
    print(f"hearth      {h:8.2f} MB/s  ({best_h:.3f} s, load {load:.3f} s not counted)")
    print(f"tokenizers  {r:8.2f} MB/s  ({best_r:.3f} s, 1 thread)")
    print(f"ratio hearth/tokenizers: {h / r:.2f}")


if __name__ == "__main__":
    main()
