"""Parity of hearth's dequantize with the reference implementations of each format.

GGUF formats (F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K) are compared with
gguf.quants.dequantize from the `gguf` Python package (llama.cpp's gguf-py) on random blocks;
MLX affine 4/8-bit with groups 32/64/128 and F16/BF16/F32 scales is compared with mlx's
mx.dequantize on weights quantized by mx.quantize. Each row goes through the `hx-dequant` test
tool (tests/tools/dequant.c), which calls hx_tensor_dequant_row, the path the engine uses.

The tool is found at $HEARTH_BUILD/hx-dequant (default <repo>/build); without it, or without
gguf / mlx, the tests skip with a message saying what is missing. Inputs are deterministic
(fixed seeds). Run with -s to see the maximum difference per format.
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("HEARTH_BUILD", REPO / "build"))
TOOL = BUILD / "hx-dequant"

try:
    import gguf
    import gguf.quants
    GGUF_ERR = None
except Exception as e:  # ImportError, or a broken install
    gguf = None
    GGUF_ERR = e

try:
    import mlx.core as mx
    MLX_ERR = None
except Exception as e:  # ImportError, or a native library that fails to load
    mx = None
    MLX_ERR = e


@pytest.fixture(scope="module")
def tool():
    if not TOOL.exists():
        pytest.skip(f"{TOOL} is not built (build hx-dequant, or set HEARTH_BUILD to its folder)")
    return TOOL


def run_tool(tool, args, raw):
    """Runs hx-dequant with ARGS on RAW bytes; returns its float32 output."""
    p = subprocess.run([str(tool), *map(str, args)], input=raw, capture_output=True, timeout=60)
    assert p.returncode == 0, f"hx-dequant {args} failed: {p.stderr.decode(errors='replace')}"
    return np.frombuffer(p.stdout, dtype="<f4").astype(np.float32)


def compare(name, got, want, rel=1e-6):
    """Asserts |got - want| <= rel * |want| elementwise (so zeros must match exactly) and prints
    the largest differences."""
    assert got.shape == want.shape, f"{name}: {got.shape} values, want {want.shape}"
    assert np.all(np.isfinite(want)), f"{name}: reference has non-finite values (test bug)"
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = ~(diff <= rel * np.abs(want.astype(np.float64)))
    identical = np.array_equal(got.view(np.uint32), want.view(np.uint32))
    print(f"{name}: {got.size} values, max abs diff {diff.max():.3g}, "
          f"{'bit-identical' if identical else 'not bit-identical'}")
    if bad.any():
        i = int(np.argmax(bad))
        pytest.fail(f"{name}: {int(bad.sum())} of {got.size} values differ; first at {i}: "
                    f"got {got[i]!r}, want {want[i]!r}")


# ---- GGUF formats ----

# name: (block elements, block bytes, byte offsets of the f16 fields in a block)
GGUF_FORMATS = {
    "f32":  (1, 4, ()),
    "f16":  (1, 2, ()),
    "bf16": (1, 2, ()),
    "q4_0": (32, 18, (0,)),
    "q4_1": (32, 20, (0, 2)),
    "q8_0": (32, 34, (0,)),
    "q4_k": (256, 144, (0, 2)),
    "q5_k": (256, 176, (0, 2)),
    "q6_k": (256, 210, (208,)),
}
N_GGUF = 4096  # elements per row
ROWS_GGUF = 4  # rows (tool runs) per format: 16384 elements


def finite_halves(rng, n):
    """N random IEEE halves (as uint16) over the whole finite range, subnormals included."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    inf_exp = (h & 0x7C00) == 0x7C00
    h[inf_exp] ^= 0x4000  # exponent 31 → 15: finite
    return h


def random_row(name, seed):
    """One row of N_GGUF random elements of format NAME, as raw bytes, every value finite."""
    rng = np.random.default_rng(seed)
    block_n, block_bytes, half_offsets = GGUF_FORMATS[name]
    if name == "f32":
        u = rng.integers(0, 1 << 32, size=N_GGUF, dtype=np.uint32)
        u[(u & 0x7F800000) == 0x7F800000] ^= 0x40000000  # no inf/nan
        return u.astype("<u4").tobytes()
    if name == "f16":
        return finite_halves(rng, N_GGUF).astype("<u2").tobytes()
    if name == "bf16":
        u = rng.integers(0, 1 << 16, size=N_GGUF, dtype=np.uint16)
        u[(u & 0x7F80) == 0x7F80] ^= 0x4000
        return u.astype("<u2").tobytes()
    n_blocks = N_GGUF // block_n
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in half_offsets:
        h = finite_halves(rng, n_blocks).astype("<u2")
        blocks[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return blocks.tobytes()


@pytest.mark.parametrize("name", list(GGUF_FORMATS))
def test_gguf_format_matches_gguf_py(tool, name):
    if gguf is None:
        pytest.skip(f"the gguf package is not importable ({GGUF_ERR}); pip install gguf")
    qtype = getattr(gguf.GGMLQuantizationType, name.upper())
    got, want = [], []
    for seed in range(ROWS_GGUF):
        raw = random_row(name, 1234 + 97 * seed)
        ref = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), qtype)
        want.append(np.asarray(ref, dtype=np.float32).reshape(-1))
        got.append(run_tool(tool, [name, N_GGUF], raw))
    compare(name, np.concatenate(got), np.concatenate(want))


# ---- MLX affine ----

N_MLX = 1024   # elements per row
ROWS_MLX = 4   # rows per (bits, group, scale dtype): 4096 elements


@pytest.fixture(scope="module")
def mlx_quantized():
    """(bits, group) → (q, scales, biases) from mx.quantize of fixed random weights."""
    if mx is None:
        pytest.skip(f"mlx is not importable ({MLX_ERR}); pip install mlx (mlx[cpu] on Linux)")
    w = np.random.default_rng(7).standard_normal((ROWS_MLX, N_MLX)).astype(np.float32)
    out = {}
    for bits in (4, 8):
        for group in (32, 64, 128):
            out[bits, group] = mx.quantize(mx.array(w), group_size=group, bits=bits)[:3]
    return out


def sb_bytes(a, sb):
    """Row of an mlx scales/biases array (already cast to dtype SB) as little-endian bytes."""
    if sb == "bf16":  # numpy has no bfloat16: take the bits
        return np.array(a.view(mx.uint16)).astype("<u2").tobytes()
    return np.array(a).astype("<f2" if sb == "f16" else "<f4").tobytes()


@pytest.mark.parametrize("sb", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("bits", [4, 8])
def test_mlx_affine_matches_mx_dequantize(tool, mlx_quantized, bits, group, sb):
    q, scales, biases = mlx_quantized[bits, group]
    mx_dt = {"f16": mx.float16, "bf16": mx.bfloat16, "f32": mx.float32}[sb]
    s, b = scales.astype(mx_dt), biases.astype(mx_dt)
    # Reference in float32: the widening of f16/bf16 to f32 is exact, so this is exactly
    # scale * q + bias of the stored values, which is what hearth computes.
    want = np.array(mx.dequantize(q, s.astype(mx.float32), b.astype(mx.float32),
                                  group_size=group, bits=bits))
    # mlx's own result in the storage dtype, rounded to it: checked to within that rounding.
    native = np.array(mx.dequantize(q, s, b, group_size=group, bits=bits).astype(mx.float32))
    name = f"mlx{bits}"
    got = []
    for r in range(ROWS_MLX):
        raw = (np.array(q[r]).astype("<u4").tobytes() + sb_bytes(s[r], sb) + sb_bytes(b[r], sb))
        got.append(run_tool(tool, [name, N_MLX, group, sb], raw))
    got = np.stack(got)
    compare(f"{name} group {group} {sb} scales", got.reshape(-1), want.reshape(-1))

    # native vs ours: two roundings (product, sum) to the storage dtype's unit roundoff u
    u = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -24}[sb]
    bias = np.repeat(np.array(b.astype(mx.float32)), group, axis=1)
    bound = 2 * u * (np.abs(got - bias) + np.abs(bias) + np.abs(got)) + 1e-30
    worst = float(np.max(np.abs(native - got) / bound))
    assert worst <= 1.0, f"mx.dequantize in {sb} differs from hearth by {worst:.3g}x its rounding"


def test_tool_rejects_wrong_input_size(tool):
    p = subprocess.run([str(tool), "q4_0", "64"], input=b"\0" * 35, capture_output=True)
    assert p.returncode == 1 and b"expected exactly 36 bytes" in p.stderr
    p = subprocess.run([str(tool), "mlx4", "64", "48", "f16"], input=b"", capture_output=True)
    assert p.returncode == 1 and b"GROUP must be 32, 64 or 128" in p.stderr
