"""Quantized KV cache (--kv q8|q4) against the f16 cache on the starter model.

Teacher-forced over the parity prompts (tests/parity/goldens/, 160 tokens each): hx-logits runs
every prompt with the KV cache stored as f16, q8 and q4 (prefill in chunks of 64 rows, so each
chunk's attention reads the earlier chunks from the quantized cache, as decode does). q8's top-1
token must agree with f16's at >= 98% of positions; q4's agreement and the mean KL(f16 || kv)
of both are printed (run with -s) and bounded loosely, so that a broken kernel fails while the
figures themselves are reported rather than gated. About 1.5 s per prompt and format.
HEARTH_TEST_DEVICE=cuda runs hx-logits and `hearth run` there too (the GPU's quantized cache).
"""
import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))
STARTER = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GOLDEN = os.path.join(ROOT, "tests", "parity", "goldens", "smollm2-q4_1.json")
N_PROMPTS = int(os.environ.get("HEARTH_KVQ_PROMPTS", "6"))
DEVICE = ["--device", os.environ["HEARTH_TEST_DEVICE"]] if os.environ.get("HEARTH_TEST_DEVICE") else []


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def logits(tmp_path_factory):
    tool = os.path.join(BUILD, "hx-logits")
    if not os.path.exists(tool):
        pytest.skip(f"{tool} not built")
    if not os.path.exists(STARTER):
        pytest.skip(f"starter model absent ({STARTER})")
    cases = json.load(open(GOLDEN))["cases"][:N_PROMPTS]
    d = tmp_path_factory.mktemp("kvq")
    out = {}
    for kv in ("f16", "q8", "q4"):
        out[kv] = []
        for i, case in enumerate(cases):
            path = d / f"{kv}-{i}.bin"
            subprocess.run([tool, STARTER, str(path), "--kv", kv, *DEVICE],
                           input=json.dumps(case["tokens"]), capture_output=True, text=True,
                           check=True, timeout=120)
            out[kv].append(np.fromfile(path, dtype=np.float32).reshape(len(case["tokens"]), -1))
    return out


def compare(logits, kv):
    agree = total = 0
    kls = []
    for a, b in zip(logits["f16"], logits[kv]):
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.shape[0]
        la, lb = log_softmax(a.astype(np.float64)), log_softmax(b.astype(np.float64))
        kls.append((np.exp(la) * (la - lb)).sum(-1))
    kl = float(np.concatenate(kls).mean())
    print(f"--kv {kv} vs f16: top-1 agreement {agree}/{total} = {agree / total:.4f}, "
          f"mean KL {kl:.5f} nats ({len(logits[kv])} prompts)")
    return agree / total, kl


def test_q8_top1_agrees_with_f16_at_98_percent(logits):
    agreement, kl = compare(logits, "q8")
    assert agreement >= 0.98
    assert kl <= 0.01


def test_q4_stays_close_to_f16(logits):
    agreement, kl = compare(logits, "q4")
    assert agreement >= 0.70
    assert kl <= 0.5


def test_unknown_kv_type_is_refused(tmp_path):
    tool = os.path.join(BUILD, "hx-logits")
    if not os.path.exists(tool) or not os.path.exists(STARTER):
        pytest.skip("hx-logits or the starter model absent")
    p = subprocess.run([tool, STARTER, str(tmp_path / "x.bin"), "--kv", "q5"], input="[1, 2]",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "f16, q8 or q4" in p.stderr


def test_run_and_serve_take_kv(starter):
    from conftest import run
    from server import Server, stats
    for kv in ("q8", "q4"):
        p = run("run", "smollm2", "The capital of France is", "--raw", "--temp", "0",
                "--max-tokens", "4", "--kv", kv, *DEVICE, check=True)
        assert "Paris" in p.stdout, (kv, p.stdout)
    p = run("serve", "smollm2", "--kv", "q5")
    assert p.returncode == 2 and "f16, q8 or q4" in p.stderr
    sizes = {}
    for kv in ("f16", "q8"):
        with Server("smollm2", "--kv", kv, "--prompt-cache", "0") as s:
            import openai
            c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
            r = c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=12, temperature=0)
            assert "Paris" in r.choices[0].message.content, (kv, r)
            sizes[kv] = stats(s)["memory"]["kv_bytes_per_token"]
    assert sizes["q8"] * 32 == sizes["f16"] * 18  # 36 bytes per 32 elements against 64
