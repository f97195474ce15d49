"""Sliding-window layers (Gemma 2/3) keep only their window's KV. A tiny Gemma 3 (window 20, every
third layer global), served prompts a dozen windows long, continues them greedily exactly as the
float64 reference does (tests/parity/reference.py), alone and four at a time, and again when a
longer prompt reuses what the prefix cache holds (the reuse ends where the sliding layers'
window is still cached); `hearth fit` counts the sliding layers' KV at their window, not at the
context."""
import json
import os
import shutil
import sys
import threading

import numpy as np
import openai
import pytest

from conftest import ROOT, run
from server import Server, stats, wait_idle

GEN = 12


@pytest.fixture(scope="module")
def gemma3(tiny_models, tmp_path_factory):
    """The tiny Gemma 3 (its tokenizer has only byte tokens: prompts go in as token ids)."""
    path = tmp_path_factory.mktemp("gemma3") / "tiny-gemma3"
    shutil.copytree(tiny_models / "tiny-gemma3", path)
    return str(path)


@pytest.fixture(scope="module")
def reference(gemma3):
    sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
    import reference as ref
    return ref.load(gemma3)


def ids(seed, n):
    return np.random.default_rng(seed).integers(3, 256, n).tolist()


def greedy(s, prompt):
    """The server's greedy continuation of token ids, as ids, and the cached prompt tokens."""
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=120)
    r = c.completions.create(model="m", prompt=prompt, max_tokens=GEN, temperature=0, logprobs=1)
    got = [int(t[3:-1], 16) for t in r.choices[0].logprobs.tokens]  # "<0xNN>": byte tokens
    return got, r.usage.prompt_tokens_details.cached_tokens


def in_parallel(fn, args):
    out, threads = [None] * len(args), []
    for i, a in enumerate(args):
        threads.append(threading.Thread(target=lambda i=i, a=a: out.__setitem__(i, fn(a))))
        threads[-1].start()
    for t in threads:
        t.join(timeout=120)
    assert all(o is not None for o in out)
    return out


def test_long_prompts_continue_as_the_reference_does_with_the_cache(gemma3, reference):
    """Prefill in chunks of 64 rows, so the sliding layers drop blocks while a prompt is still
    being read: what the cache then holds for them is the last window of each prompt."""
    firsts = [ids(i, 230 + 7 * i) for i in range(4)]  # ~12 windows each, partial last blocks
    longer = [p + ids(10 + i, 40) for i, p in enumerate(firsts)]
    a = firsts[0]
    early, late = a[:150] + ids(20, 30), a[:200] + ids(21, 30)
    with Server(gemma3, "--batch", "4", "--ctx", "1024", "--step-tokens", "64") as s:
        alone = [greedy(s, p) for p in firsts]
        together = in_parallel(lambda p: greedy(s, p), longer)
        got_early, got_late = greedy(s, early), greedy(s, late)
        wait_idle(s)
        kv, win = stats(s)["kv_blocks"], stats(s)["kv_window_blocks"]
    for p, (got, cached) in zip(firsts, alone):
        assert got == reference.greedy(p, GEN)
        assert cached == 0
    for p, first, (got, cached) in zip(longer, firsts, together):
        assert got == reference.greedy(p, GEN)
        assert cached == len(first), (cached, len(first))  # the whole first prompt
    # Diverging at 150, the global layers' blocks are cached but the sliding layers' window
    # before 150 is not: nothing is reused. At 200 it is (blocks 10-14 were still held when the
    # prompt was cached): 12 full blocks shared and 8 positions of the 13th copied.
    assert got_early[0] == reference.greedy(early, GEN) and got_early[1] == 0
    assert got_late[0] == reference.greedy(late, GEN) and got_late[1] == 200
    # The sliding pool: 4 sequences x (a window of 20 before a step of 64 rows and those rows:
    # 7 blocks), and as much again for the prefix cache; idle, only cached blocks stay in it
    # (each prompt's last chunk and window), fewer than the global layers' (every position).
    assert win["total"] == 2 * 4 * 7
    assert 0 < win["used"] <= win["total"] and win["used"] < kv["cached"], (win, kv)


def test_fit_counts_the_sliding_layers_at_their_window(gemma3):
    p = run("fit", gemma3, "--ctx", "4096", "--batch", "1", "--json", "--no-speed")
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    # 6 layers x 1 kv head x 32 dims x K and V x f16 = 768 bytes a position; the 2 global layers
    # keep all 4096 positions, the 4 sliding ones the window of 20 before a step of 256 rows and
    # those rows, in whole blocks of 16: 19 blocks.
    assert d["kv_bytes_per_token"] == 768
    assert d["kv_window_layers"] == 4 and d["kv_window"] == 20
    assert d["kv_bytes"] == 4096 * 256 + 19 * 16 * 512
