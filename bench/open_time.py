#!/usr/bin/env python3
"""Opening the starter model: hearth's open (map + parse + validate) against the `gguf` Python
package's reader on the same file, in the same run, and a cold `hearth inspect` process.

usage: open_time.py  (HEARTH_BUILD points at the build folder; default ./build)
"""
import json
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))
MODEL = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def gguf_reader_ms(runs=5):
    try:
        from gguf import GGUFReader
    except ImportError:
        return None
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = GGUFReader(MODEL)
        _ = len(r.tensors)
        times.append((time.perf_counter() - t0) * 1e3)
        del r
    return statistics.median(times)


def process_ms(runs=10):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([os.path.join(BUILD, "hearth"), "inspect", MODEL], check=True,
                       stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    out = subprocess.run([os.path.join(BUILD, "hx-bench-open"), MODEL, "50"], check=True,
                         capture_output=True, text=True).stdout
    h = json.loads(out)
    peer = gguf_reader_ms()
    proc = process_ms()
    print(f"starter model: {MODEL}")
    print(f"hearth open+close      median {h['median_ms']:.2f} ms (min {h['min_ms']:.2f}, "
          f"max {h['max_ms']:.2f}, {h['runs']} runs, {h['tensors']} tensors); target < 50 ms")
    print(f"hearth inspect process median {proc:.1f} ms (exec, open, describe, print)")
    if peer is not None:
        print(f"gguf.GGUFReader        median {peer:.1f} ms  → hearth is {peer / h['median_ms']:.0f}x faster")


if __name__ == "__main__":
    main()
