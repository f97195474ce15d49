"""hearth's forward pass against the reference (tests/parity/reference.py) on the starter model.

Teacher-forced over 16 prompts of 160 tokens: hearth's top-1 token must agree with the reference
at >= 99% of positions and the mean KL(reference || hearth) must be <= 0.01 nats; greedy
64-token continuations (through hearth's KV cache) must equal the reference's on >= 14 of 16.
The top-1 tokens and continuations come from tests/parity/goldens/ (regenerate with `make
parity`); the KL needs full distributions, so it is computed live with the reference, which
needs only numpy and gguf.

HEARTH_TEST_DEVICE=cuda runs hearth's side on that device (the CUDA backend on a machine with a
GPU): the same thresholds against the same reference, plus the starter's GPU logits against the
CPU backend's.
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
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens", "smollm2-q4_1.json")
DEVICE = os.environ.get("HEARTH_TEST_DEVICE")
DEV = ["--device", DEVICE] if DEVICE else []
# Families whose forward the GPU backend does not run yet (mixtures of experts).
MOE = ("mixtral", "qwen3moe", "olmoe", "qwen2moe")


def skip_unsupported_on_device(name):
    if DEVICE and DEVICE.startswith("cuda") and any(m in name for m in MOE):
        pytest.skip(f"{name}: the cuda backend does not run mixtures of experts yet")


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tool = os.path.join(BUILD, "hx-logits")
    if not os.path.exists(tool):
        pytest.skip(f"{tool} not built")
    if not os.path.exists(STARTER):
        pytest.skip(f"starter model absent ({STARTER})")
    golden = json.load(open(GOLDEN))
    out = []
    d = tmp_path_factory.mktemp("logits")
    for i, case in enumerate(golden["cases"]):
        path = d / f"{i}.bin"
        p = subprocess.run([tool, STARTER, str(path), "--greedy", str(len(case["greedy"])), *DEV],
                           input=json.dumps(case["tokens"]), capture_output=True, text=True,
                           check=True, timeout=600)
        logits = np.fromfile(path, dtype=np.float32).reshape(len(case["tokens"]), -1)
        out.append((case, logits, json.loads(p.stdout)))
    return out


def test_teacher_forced_top1_agreement(runs):
    agree = total = 0
    for case, logits, _ in runs:
        top = logits.argmax(axis=-1)
        agree += int((top == np.array(case["top1"])).sum())
        total += len(top)
    print(f"top-1 agreement with the reference: {agree}/{total} = {agree / total:.4f}")
    assert agree / total >= 0.99


def test_greedy_continuations(runs):
    same = sum(1 for case, _, g in runs if g == case["greedy"])
    print(f"greedy 64-token continuations equal to the reference: {same}/{len(runs)}")
    assert same >= 14


def test_device_logits_match_the_cpu(runs, tmp_path):
    """On a GPU (HEARTH_TEST_DEVICE): the starter's teacher-forced top-1 tokens and greedy
    continuations on the device against the CPU backend's own, the issue's >= 99% and >= 14 of
    16."""
    if not DEVICE:
        pytest.skip("HEARTH_TEST_DEVICE is not set: nothing but the CPU to compare")
    tool = os.path.join(BUILD, "hx-logits")
    agree = total = same = 0
    for i, (case, logits, greedy) in enumerate(runs):
        path = tmp_path / f"cpu{i}.bin"
        p = subprocess.run([tool, STARTER, str(path), "--greedy", str(len(case["greedy"]))],
                           input=json.dumps(case["tokens"]), capture_output=True, text=True,
                           check=True, timeout=600)
        cpu = np.fromfile(path, dtype=np.float32).reshape(len(case["tokens"]), -1)
        agree += int((cpu.argmax(-1) == logits.argmax(-1)).sum())
        total += len(cpu)
        same += json.loads(p.stdout) == greedy
    print(f"{DEVICE} vs cpu: top-1 {agree}/{total} = {agree / total:.4f}, greedy equal "
          f"{same}/{len(runs)}")
    assert agree / total >= 0.99
    assert same >= 14


def test_mean_kl_against_the_live_reference(runs):
    pytest.importorskip("gguf")
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reference
    m = reference.load(STARTER)
    kls = []
    for case, logits, _ in runs[:8]:  # half the prompts keep the live reference under a minute
        ref = log_softmax(m.forward(case["tokens"]))
        ours = log_softmax(logits.astype(np.float64))
        kls.append(float((np.exp(ref) * (ref - ours)).sum(axis=-1).mean()))
    mean = sum(kls) / len(kls)
    print(f"mean KL(reference || hearth) over {len(kls)} prompts: {mean:.6f} nats "
          f"(max per prompt {max(kls):.6f})")
    assert mean <= 0.01


# ---- tiny random-weight models of each supported family, generated by the test ----

TINY = ["tiny-llama", "tiny-llama-mlx4", "tiny-llama-mlx8", "tiny-qwen2", "tiny-qwen3",
        "tiny-llama3", "tiny-gemma", "tiny-gemma-mlx4", "tiny-gemma2", "tiny-gemma2-mlx4",
        "tiny-gemma3", "tiny-gemma3-mlx8", "tiny-phi3", "tiny-phi3-mlx4", "tiny-mixtral",
        "tiny-mixtral-mlx4", "tiny-qwen3moe", "tiny-olmoe", "tiny-qwen2moe"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import sys
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_tiny_models.py"),
                    str(out)], check=True)
    return out


# On a GPU the GEMV over block formats rounds its input to int8 per 32 values (as llama.cpp
# does; tests/unit/test_cuda_ops.c bounds its error), so a random tiny model's greedy path may
# take the other side of a near tie. There the continuations must agree up to a step where the
# reference itself rates our token within TIE_NATS of its best; on the CPU they must be equal.
TIE_NATS = 0.05


def greedy_matches(m, tokens, ours, ref):
    if ours == ref:
        return True
    if not DEVICE or len(ours) != len(ref):
        return False
    i = next(k for k in range(len(ref)) if ours[k] != ref[k])
    row = log_softmax(m.forward(tokens + ref[:i])[-1].astype(np.float64))
    gap = float(row.max() - row[ours[i]])
    print(f"greedy paths part at step {i}: our token is {gap:.3g} nats below the reference's")
    return gap <= TIE_NATS


def compare_tiny(model, tokens, tmp_path, name):
    """Runs hx-logits (teacher-forced, chunks of 40, then 16 greedy tokens) and the reference on
    one tiny model; returns top-1 agreement, mean KL(reference || hearth), the largest log-prob
    difference, the widest log-prob span of a row, and whether the greedy tokens are equal."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reference
    tool = os.path.join(BUILD, "hx-logits")
    if not os.path.exists(tool):
        pytest.skip(f"{tool} not built")
    skip_unsupported_on_device(name)
    p = subprocess.run([tool, model, str(tmp_path / "l.bin"), "--chunk", "40", "--greedy", "16",
                        *DEV],
                       input=json.dumps(tokens), capture_output=True, text=True, check=True)
    ours = log_softmax(np.fromfile(tmp_path / "l.bin", dtype=np.float32)
                       .reshape(len(tokens), -1).astype(np.float64))
    m = reference.load(model)
    ref = log_softmax(m.forward(tokens))
    agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    kl = float((np.exp(ref) * (ref - ours)).sum(-1).mean())
    dlogp, span = float(np.abs(ref - ours).max()), float((ref.max(-1) - ref.min(-1)).max())
    greedy_equal = greedy_matches(m, tokens, json.loads(p.stdout), m.greedy(tokens, 16))
    print(f"{name}: top-1 {agree:.4f}, mean KL {kl:.2e}, max |dlogp| {dlogp:.2e} of a span of "
          f"{span:.0f}, greedy equal {greedy_equal}")
    return agree, kl, dlogp, span, greedy_equal


@pytest.mark.parametrize("name", TINY)
def test_tiny_model_matches_the_reference(tiny, tmp_path, name):
    """Llama (F16), MLX 4/8-bit, Qwen2 (biases), Qwen3 (qk-norm), Llama 3 (llama3 rope scaling,
    run past its original context), Gemma 1 ((1 + w) norms with w around 0, embeddings times
    sqrt(d_model), GeGLU, one KV head, no post-norms; F32), Gemma 2 (soft-capping, alternating
    sliding windows, (1 + w) pre/post norms, GeGLU), Gemma 3 (q/k norms, local/global RoPE
    bases, every third layer global), Phi-3 (fused weights, partial rotary, LongRoPE past the
    original context, a sliding window), each also MLX-quantized; and the mixtures of experts (8
    experts, top-2): Mixtral (per-expert w1/w3/w2, renormalised top-2; F32) and its MLX 4-bit
    form in mlx_lm's layout (experts stacked into 3-D switch_mlp tensors, the router 8-bit by a
    per-module override), Qwen3-MoE (per-head q/k norms, norm_topk_prob, a dense mlp_only_layers
    layer; BF16), OLMoE (q/k norms over the whole projection, top-2 weights not renormalised;
    F16), Qwen2-MoE (q/k/v biases, a sigmoid-gated shared expert; F32): teacher-forced top-1 >=
    99%, mean KL <= 0.01, and the greedy continuation through the KV cache equal to the
    reference's."""
    tokens = np.random.default_rng(5).integers(3, 256, 96).tolist()
    agree, kl, _, _, greedy_equal = compare_tiny(str(tiny / name), tokens, tmp_path, name)
    assert agree >= 0.99 and kl <= 0.01
    assert greedy_equal


TINY_GGUF = ["tiny-llama-f16", "tiny-llama-q8_0", "tiny-llama-q4_0", "tiny-llama-q4_1",
             "tiny-llama-q4_k", "tiny-qwen2-q4_k", "tiny-qwen3-q8_0"]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    import sys
    pytest.importorskip("gguf")
    out = tmp_path_factory.mktemp("tiny_gguf")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_tiny_gguf.py"),
                    str(out)], check=True)
    return out


@pytest.mark.parametrize("name", TINY_GGUF)
def test_tiny_gguf_model_matches_the_reference(tiny_gguf, tmp_path, name):
    """GGUF files as llama.cpp's converter writes them (Llama Q/K permuted for pairwise RoPE) in
    F16, Q8_0, Q4_0, Q4_1 and Q4_K, against the reference on the gguf package's dequantization:
    teacher-forced top-1 >= 99%, mean KL <= 0.01, greedy continuation equal."""
    tokens = np.random.default_rng(9).integers(3, 256, 96).tolist()
    agree, kl, dlogp, span, greedy_equal = compare_tiny(str(tiny_gguf / f"{name}.gguf"), tokens,
                                                        tmp_path, name)
    assert agree >= 0.99 and kl <= 0.01
    # Sharp models (the Q4_K ones: log-probs spanning ~250) make the KL ~0 whatever the error;
    # the largest log-prob difference, against that span, is what shows the arithmetic.
    assert dlogp <= 5e-4 * span
    assert greedy_equal


TINY_FAMILY_GGUF = ["tiny-gemma.gguf", "tiny-gemma2.gguf", "tiny-gemma3.gguf", "tiny-phi3.gguf",
                    "tiny-mixtral.gguf", "tiny-qwen3moe.gguf"]


@pytest.mark.parametrize("name", TINY_FAMILY_GGUF)
def test_tiny_family_gguf_matches_the_reference(tiny, tmp_path, name):
    """Gemma 1/2/3, Phi-3, Mixtral and Qwen3-MoE as llama.cpp's converter writes them
    (gen_tiny_models.py: Gemma norms stored as 1 + w, Gemma 1 as arch gemma with no output
    tensor; Gemma 3 with every third layer global through attention.sliding_window_pattern, the
    local RoPE base as rope.freq_base_swa, linear scaling on the global layers and the query
    scale as attention.scale; fused Phi-3 weights, LongRoPE factors as tensors; Mixtral as arch
    llama with Q/K permuted for pairwise RoPE, expert_count 8, expert_used_count 2; Qwen3-MoE as
    qwen3moe with per-head q/k norms and every layer MoE; experts stacked into 3-D
    ffn_{gate,up,down}_exps, the router ffn_gate_inp F32), F16 matrices: the same thresholds as
    the safetensors forms."""
    pytest.importorskip("gguf")
    tokens = np.random.default_rng(5).integers(3, 256, 96).tolist()
    agree, kl, _, _, greedy_equal = compare_tiny(str(tiny / name), tokens, tmp_path, name)
    assert agree >= 0.99 and kl <= 0.01
    assert greedy_equal
