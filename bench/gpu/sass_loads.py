#!/usr/bin/env python3
"""How many trips to memory the one-row GEMV's loop takes, read from its SASS (no GPU needed).

usage: bench/gpu/sass_loads.py [--cuobjdump PATH] [--define NAME=VALUE ...] [--arch sm_90]

Compiles src/backend/cuda/gemv.cu for the given architecture (nvcc, -O3, as the build does),
disassembles it (cuobjdump -sass, which runs nvdisasm from its PATH: where the toolkit lacks
them, PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels carry both) and prints, for
each one-row wide kernel (gemv_wide_kernel<DT, 1, false>), the global loads of its loop body
issued before the first dot product (IDP) against all of them, and the order of loads (L) and
runs of dot products (I<n>). A load issued after dot products that use earlier loads waits for
them: at one row a block lives for one unit of each output row, so each such break is one more
trip to memory in the block's life (docs/performance.md, 12-05).
--define passes -D to nvcc (e.g. HX_WIDE_BLOCKS_Q4=5 on a branch that has that knob).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORMATS = {3: "Q4_0", 4: "Q4_1", 5: "Q8_0", 6: "Q4_K", 8: "Q6_K", 9: "MLX4"}


def loop_of(lines):
    """The loop body: from its first 16-byte global load to the branch back above it."""
    first = next((i for i, l in enumerate(lines) if "LDG" in l and ".128" in l), None)
    if first is None:
        return []
    at = int(re.search(r"/\*([0-9a-f]{4,})\*/", lines[first]).group(1), 16)
    for i in range(first, len(lines)):
        m = re.search(r"\bBRA\s+0x([0-9a-f]+)", lines[i])
        if m and int(m.group(1), 16) <= at:
            return lines[first:i]
    return lines[first:]


def pattern(body):
    out, before, total, seen = [], 0, 0, False
    for l in body:
        if re.search(r"\bLDG\b", l):
            total += 1
            before += 0 if seen else 1
            out.append("L")
        elif re.search(r"\bIDP\b", l):
            seen = True
            if out and out[-1].startswith("I"):
                out[-1] = "I%d" % (int(out[-1][1:]) + 1)
            else:
                out.append("I1")
    return before, total, " ".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    ap.add_argument("--define", action="append", default=[])
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "gemv.cubin")
        cmd = ["nvcc", "-std=c++17", "-O3", "-arch=" + a.arch, "--expt-relaxed-constexpr",
               "-I" + os.path.join(ROOT, "src"), "-cubin", "-o", cubin]
        cmd += ["-D" + d for d in a.define]
        cmd.append(os.path.join(ROOT, "src", "backend", "cuda", "gemv.cu"))
        subprocess.run(cmd, check=True)
        # (nvdisasm beside the cuobjdump given, as the two wheels unpack them, is found too)
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(os.path.abspath(a.cuobjdump)) + os.pathsep + env["PATH"]
        sass = subprocess.run([a.cuobjdump, "-sass", cubin], check=True, capture_output=True,
                              text=True, env=env).stdout
    for f in re.split(r"\n\s+Function : ", sass)[1:]:
        m = re.search(r"gemv_wide_kernelILi(\d+)ELi1ELb0E", f.split("\n")[0])
        if not m:
            continue
        lines = [l for l in f.split("\n") if re.search(r"/\*[0-9a-f]{4,}\*/", l)]
        before, total, pat = pattern(loop_of(lines))
        name = FORMATS.get(int(m.group(1)), m.group(1))
        print(f"{name:5s} {before:2d} of {total:2d} loads before the first dot product: {pat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
