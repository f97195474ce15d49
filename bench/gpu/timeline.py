#!/usr/bin/env python3
"""Where a decode step's time goes, from a timeline build's record of every launch.

usage: bench/gpu/timeline.py FILE [--top N]

A build configured with -DHEARTH_CUDA_TIMELINE=ON (dev only) has block 0 of every kernel note
when its wait for the kernel ahead ended (the GPU's global timer, ns) and the launch's shape;
`HEARTH_CUDA_TIMELINE=FILE hearth run ...` writes those records to FILE at exit (kernels.cuh,
cuda_backend.c). A launch's span is the time from its wait's end to the next launch's: its own
work after the wait plus the boundary to the next kernel. Kernels that never wait (sampling's)
fall into the span of the launch before them, and so does the host's time between two steps.

Steps are cut at the launch shape that recurs once a step most regularly; the most common step
(the same sequence of shapes) is kept, and for each position in it the median span over those
steps is printed, with the positions grouped by their shape and the three shapes before it (so
that a layer's two rmsnorms, or its q/k/v and gate/up GEMVs, are rows of their own, each named by
its first position in the step), the sum over a step and each group's share of it.
"""
import argparse
import collections
import statistics
import struct
import sys

REC = struct.Struct("<QIIII")


def load(path):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    for off in range(0, len(data) - REC.size + 1, REC.size):
        t, gx, gy, bx, used = REC.unpack_from(data, off)
        if used:
            out.append((t, (gx, gy, bx)))
    out.sort()
    return out


def steps_of(recs):
    """The records cut into steps at the shape that recurs most regularly, once a step."""
    shapes = [s for _, s in recs]
    best, best_score = None, None
    for shape, n in collections.Counter(shapes).items():
        if n < 8:
            continue
        at = [i for i, s in enumerate(shapes) if s == shape]
        gaps = collections.Counter(b - a for a, b in zip(at, at[1:]))
        gap, count = gaps.most_common(1)[0]
        score = (count * gap, count)  # covers the most launches with one period
        if best_score is None or score > best_score:
            best, best_score = shape, score
    if best is None:
        return []
    at = [i for i, s in enumerate(shapes) if s == best]
    return [recs[a:b + 1] for a, b in zip(at, at[1:])]  # (each with the next step's first)


def fmt_shape(s):
    return "%dx%dx%d" % s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    recs = load(a.file)
    if len(recs) < 16:
        sys.exit("timeline.py: %d records in %s: too few" % (len(recs), a.file))
    steps = steps_of(recs)
    keyed = collections.Counter(tuple(s for _, s in st) for st in steps)
    if not keyed:
        sys.exit("timeline.py: no recurring step found")
    seq, n_steps = keyed.most_common(1)[0]
    same = [st for st in steps if tuple(s for _, s in st) == seq]
    n_pos = len(seq) - 1
    med = [statistics.median(st[i + 1][0] - st[i][0] for st in same) / 1e3 for i in range(n_pos)]
    total = sum(med)
    print("%d launches; %d steps of %d launches alike (of %d steps); median step %.1f us"
          % (len(recs), n_steps, n_pos, len(steps),
             statistics.median((st[-1][0] - st[0][0]) / 1e3 for st in same)))
    groups = collections.OrderedDict()
    for i in range(n_pos):
        key = tuple(seq[max(0, i - 3):i + 1])
        g = groups.setdefault(key, (i, []))
        g[1].append(med[i])
    rows = sorted(groups.values(), key=lambda g: -sum(g[1]))
    print("%5s %-14s %-14s %5s %9s %9s %6s" % ("first", "launch", "after", "n", "median",
                                                "sum us", "share"))
    for first, spans in rows[:a.top]:
        print("%5d %-14s %-14s %5d %9.2f %9.1f %5.1f%%" % (
            first, fmt_shape(seq[first]), fmt_shape(seq[first - 1]) if first else "-",
            len(spans), statistics.median(spans), sum(spans), 100.0 * sum(spans) / total))
    print("sum of the medians: %.1f us a step" % total)
    print("the step's launches in order (median span us):")
    print("  " + " ".join("%s:%.1f" % (fmt_shape(seq[i]), med[i]) for i in range(min(n_pos, 24))))


if __name__ == "__main__":
    main()
