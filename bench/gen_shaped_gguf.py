#!/usr/bin/env python3
"""Writes a random-weight GGUF in the shape of a real model, for speed benchmarks only.

usage: gen_shaped_gguf.py OUT.gguf [--shape llama-3.2-1b] [--type q4_0|q4_1|q8_0|q4_k|q4_k_m]
                          [--layers N] [--tokenizer-from GGUF|bytes]

The weights are random blocks of the type written directly as bytes (no float matrix is ever
built): their values are meaningless, their size and layout are exactly those of the real model,
which is all a throughput measurement reads. The bytes come from one pool of random blocks per
type (64 MiB, made once), each tensor streamed from it starting at a random block, so writing a
file costs what the disk costs (an 8B model in seconds). Every block gets a small positive scale
so values stay finite. The file is written as OUT.part and renamed when complete.

Types: q4_0, q4_1 and q8_0 use that type for every matrix. q4_k is every matmul weight Q4_K, with
the output projection Q6_K as llama.cpp's K-quant files have it (token_embd too when it is the
tied output; an untied token_embd stays Q4_K). q4_k_m mixes formats the way llama.cpp's Q4_K_M files
do: Q6_K for the embedding/output and for attn_v and ffn_down of every other layer, Q4_K for the
rest.

Shapes: Llama-3.2-1B, Llama-3.1-8B (architecture "llama"), Qwen2.5-7B (architecture "qwen2",
with F32 biases on attn_q/k/v as the real model has), OLMoE-1B-7B (a mixture of experts), and
"tiny" / "tiny-qwen2" (two layers of 256, for testing the scripts). --layers overrides the layer
count of any shape. RoPE scaling (Llama 3.1's rope_freqs) is left out; it costs nothing
measurable.

The vocabulary: --tokenizer-from names a GGUF whose byte-level BPE vocabulary and merges are
copied (default: the starter model, SmolLM2, when it and the `gguf` package are present, so
llama.cpp can tokenize prompts for the file too), or "bytes": a byte-level BPE vocabulary of the
256 bytes and three special tokens (<|begin_of_text|> = 256, BOS; <|end_of_text|> = 257, EOS;
<|eot_id|> = 258), no merges, so every byte of text is one token. Either is padded with unused
tokens up to the shape's vocabulary size. Without the starter file or the package the default
falls back to "bytes". This script needs only numpy: the GGUF is written by the small writer
below (bench/gen_shaped_mlx.py imports its shapes, tokenizer and pools).
"""
import argparse
import os
import struct
import sys

import numpy as np

SHAPES = {
    # name: (layers, hidden, ffn, heads, kv heads, vocab, rope theta, tied)
    "llama-3.2-1b": (16, 2048, 8192, 32, 8, 128256, 500000.0, True),
    "llama-3.1-8b": (32, 4096, 14336, 32, 8, 128256, 500000.0, False),
    "qwen2.5-7b": (28, 3584, 18944, 28, 4, 152064, 1000000.0, False),
    # mixtures of experts: ffn is each expert's width
    "olmoe-1b-7b": (16, 2048, 1024, 16, 16, 50304, 10000.0, False),
    # for testing the scripts: a few MiB, runs on a CPU in a blink
    "tiny": (2, 256, 512, 4, 2, 512, 10000.0, True),
    "tiny-qwen2": (2, 256, 512, 4, 2, 512, 10000.0, False),
}
# name: (architecture, experts, experts per token); the rest are "llama" without experts
MOE = {"olmoe-1b-7b": ("olmoe", 64, 8)}
# Qwen2: q/k/v biases, RMSNorm epsilon 1e-6
QWEN2 = {"qwen2.5-7b", "tiny-qwen2"}

STARTER = os.path.join(os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth")),
                       "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

# ggml type ids
F32, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K = 0, 2, 3, 8, 12, 14
# type: (elements per block, bytes per block, byte offsets of the f16 scales, their value); the
# K-quants' super-block scales multiply 6-bit (Q4_K) or 8-bit (Q6_K) sub-block scales
BLOCK = {Q4_0: (32, 18, [0], 0.02), Q4_1: (32, 20, [0, 2], 0.02), Q8_0: (32, 34, [0], 0.02),
         Q4_K: (256, 144, [0, 2], 0.0005), Q6_K: (256, 210, [208], 0.0005)}
# --type: (matmul type, output type, llama.cpp file type)
TYPES = {"q4_0": (Q4_0, Q4_0, 2), "q4_1": (Q4_1, Q4_1, 3), "q8_0": (Q8_0, Q8_0, 7),
         "q4_k": (Q4_K, Q6_K, 14),
         "q4_k_m": (Q4_K, Q6_K, 15)}
POOL_BYTES = 64 << 20


def shape_of(name, layers=None):
    """The shape tuple of SHAPES[name], with the layer count overridden when layers is given."""
    s = SHAPES[name]
    return (layers or s[0],) + s[1:]


# ---- random bytes ----

def block_pool(rng, qtype):
    """About 64 MiB of random blocks of qtype, each with a small positive f16 scale, as a flat
    uint8 array of whole blocks."""
    n, size, scale_at, scale = BLOCK[qtype]
    b = np.frombuffer(rng.bytes(POOL_BYTES // size * size), dtype=np.uint8).reshape(-1, size).copy()
    for o in scale_at:
        b[:, o:o + 2] = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
    return b.reshape(-1)


def stream_pool(f, pool, n_bytes, unit, rng):
    """Writes n_bytes to f from pool (a flat uint8 array of whole units: blocks or elements),
    starting at a random unit and wrapping around, without copying."""
    n_units = len(pool) // unit
    at = int(rng.integers(0, n_units)) * unit
    view = memoryview(pool)
    while n_bytes > 0:
        k = min(n_bytes, len(pool) - at)
        f.write(view[at:at + k])
        n_bytes -= k
        at = 0


# ---- tokenizer ----

def gpt2_byte_chars():
    """GPT-2's byte → printable character map (the strings a byte-level BPE vocabulary holds)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]  # ids 256, 257, 258


def byte_vocab():
    """The built-in vocabulary: (tokens, token types, merges, bos id, eos id, pre-tokenizer)."""
    return gpt2_byte_chars() + SPECIALS, [1] * 256 + [3] * 3, [], 256, 257, "gpt-2"


def starter_vocab(path):
    """The byte-level BPE vocabulary of a GGUF, read with the `gguf` package."""
    import gguf
    src = gguf.GGUFReader(path)

    def field(k):
        fl = src.fields[k]
        return [bytes(fl.parts[i]).decode("utf-8", "replace") if fl.types[-1].name == "STRING"
                else fl.parts[i].tolist()[0] for i in fl.data]

    return (field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type"),
            field("tokenizer.ggml.merges"), 1, 2, "smollm")


def vocab_for(source):
    """The vocabulary --tokenizer-from names; the default falls back to the built-in one."""
    if source == "bytes":
        return byte_vocab()
    try:
        return starter_vocab(source)
    except (ImportError, OSError) as e:
        if source != STARTER:
            sys.exit(f"gen_shaped_gguf: cannot read the vocabulary of {source}: {e}")
        print(f"note: {e.__class__.__name__} reading {source} ({e}); using the built-in "
              f"byte-level vocabulary", file=sys.stderr)
        return byte_vocab()


# ---- GGUF writer ----

def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_u32(k, v):
    return gstr(k) + struct.pack("<II", 4, v)


def kv_f32(k, v):
    return gstr(k) + struct.pack("<If", 6, v)


def kv_bool(k, v):
    return gstr(k) + struct.pack("<I?", 7, v)


def kv_str(k, v):
    return gstr(k) + struct.pack("<I", 8) + gstr(v)


def kv_strs(k, vs):
    return gstr(k) + struct.pack("<IIQ", 9, 8, len(vs)) + b"".join(gstr(v) for v in vs)


def kv_i32s(k, vs):
    return gstr(k) + struct.pack("<IIQ", 9, 5, len(vs)) + np.asarray(vs, dtype="<i4").tobytes()


def tensor_bytes(qtype, shape):
    """Bytes of a tensor of ggml type qtype and shape (outermost first)."""
    n = int(np.prod(shape, dtype=np.int64))
    if qtype == F32:
        return 4 * n
    per, size = BLOCK[qtype][:2]
    assert shape[-1] % per == 0, f"row of {shape[-1]} is not a multiple of {per}"
    return n // per * size


def write_gguf(path, kvs, tensors, pools, rng):
    """Writes a GGUF v3 file: kvs, a list of encoded key-value entries; tensors, a list of
    (name, ggml type, shape outermost first, data) where data is a float32 array (F32) or None
    (random blocks streamed from pools[type]). Tensor data is aligned to 32 bytes."""
    align = 32
    infos, offsets, off = [], [], 0
    for name, qtype, shape, _ in tensors:
        ne = list(reversed(shape))  # GGUF lists the innermost dimension first
        infos.append(gstr(name) + struct.pack("<I", len(ne)) +
                     struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", qtype, off))
        offsets.append(off)
        off += tensor_bytes(qtype, shape)
        off += -off % align
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + \
        b"".join(infos)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * (-len(head) % align))
        start = f.tell()
        for (name, qtype, shape, data), at in zip(tensors, offsets):
            f.write(b"\0" * (start + at - f.tell()))
            n = tensor_bytes(qtype, shape)
            if data is not None:
                raw = np.ascontiguousarray(data, dtype="<f4").tobytes()
                assert len(raw) == n, name
                f.write(raw)
            else:
                stream_pool(f, pools[qtype], n, BLOCK[qtype][1], rng)
        f.write(b"\0" * (start + off - f.tell()))


# ---- the model ----

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.2-1b", choices=sorted(SHAPES))
    ap.add_argument("--type", default="q4_0", choices=sorted(TYPES))
    ap.add_argument("--layers", type=int, help="override the shape's layer count")
    ap.add_argument("--tokenizer-from", default=STARTER,
                    help="a GGUF to copy the vocabulary from, or 'bytes' (default: the starter "
                         "model when present, else bytes)")
    a = ap.parse_args()
    L, d, f, h, kv, V, theta, tied = shape_of(a.shape, a.layers)
    qt, out_t, ftype = TYPES[a.type]
    hd = d // h
    tokens, ttypes, merges, bos, eos, pre = vocab_for(a.tokenizer_from)
    if len(tokens) > V and a.shape.startswith("tiny"):
        V = -(-len(tokens) // 64) * 64  # a test shape takes any vocabulary
    if len(tokens) > V:
        sys.exit(f"gen_shaped_gguf: the vocabulary has {len(tokens)} tokens, more than the "
                 f"shape's {V}")
    tokens = tokens + [f"<|unused_{i}|>" for i in range(V - len(tokens))]
    ttypes = ttypes + [5] * (V - len(ttypes))  # UNUSED
    arch, n_exp, n_used = MOE.get(a.shape, ("qwen2" if a.shape in QWEN2 else "llama", 0, 0))
    qwen2 = a.shape in QWEN2

    kvs = [kv_str("general.architecture", arch), kv_str("general.name", f"{a.shape} (random)"),
           kv_u32("general.alignment", 32)]
    if n_exp:
        kvs += [kv_u32(f"{arch}.expert_count", n_exp), kv_u32(f"{arch}.expert_used_count", n_used)]
    kvs += [kv_u32(f"{arch}.block_count", L), kv_u32(f"{arch}.embedding_length", d),
            kv_u32(f"{arch}.feed_forward_length", f), kv_u32(f"{arch}.attention.head_count", h),
            kv_u32(f"{arch}.attention.head_count_kv", kv),
            kv_f32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6 if qwen2 else 1e-5),
            kv_f32(f"{arch}.rope.freq_base", theta), kv_u32(f"{arch}.context_length", 8192),
            kv_u32(f"{arch}.rope.dimension_count", hd), kv_u32("general.file_type", ftype),
            kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", pre),
            kv_strs("tokenizer.ggml.tokens", tokens), kv_i32s("tokenizer.ggml.token_type", ttypes),
            kv_strs("tokenizer.ggml.merges", merges), kv_u32("tokenizer.ggml.bos_token_id", bos),
            kv_u32("tokenizer.ggml.eos_token_id", eos)]
    if pre == "gpt-2":  # the built-in vocabulary: BOS first, as Llama 3 does
        kvs += [kv_bool("tokenizer.ggml.add_bos_token", True),
                kv_u32("tokenizer.ggml.eot_token_id", 258)]

    rng = np.random.default_rng(0)
    ones = np.ones(d, dtype=np.float32)
    big = out_t  # the output projection's type
    tensors = [("token_embd.weight", big if tied or a.type == "q4_k_m" else qt, (V, d), None),
               ("output_norm.weight", F32, (d,), ones)]
    if not tied:
        tensors.append(("output.weight", big, (V, d), None))
    for i in range(L):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", F32, (d,), ones),
                    (p + "ffn_norm.weight", F32, (d,), ones)]
        mats = [("attn_q", h * hd, d), ("attn_k", kv * hd, d), ("attn_v", kv * hd, d),
                ("attn_output", d, h * hd)]
        if qwen2:  # Qwen2: biases on the q/k/v projections, F32 as llama.cpp writes them
            for name, rows in [("attn_q", h * hd), ("attn_k", kv * hd), ("attn_v", kv * hd)]:
                tensors.append((p + name + ".bias", F32, (rows,),
                                rng.standard_normal(rows, dtype=np.float32) * 0.02))
        # q4_k_m: Q6_K for attn_v and ffn_down of every other layer
        mixed = a.type == "q4_k_m" and i % 2 == 0
        if n_exp:  # OLMoE: q/k norms over the whole projection; F32 router; stacked experts
            tensors += [(p + "attn_q_norm.weight", F32, (h * hd,), np.ones(h * hd, np.float32)),
                        (p + "attn_k_norm.weight", F32, (kv * hd,), np.ones(kv * hd, np.float32)),
                        (p + "ffn_gate_inp.weight", F32, (n_exp, d),
                         rng.standard_normal((n_exp, d), dtype=np.float32) * 0.02)]
            for name, rows, cols in [("ffn_gate_exps", f, d), ("ffn_up_exps", f, d),
                                     ("ffn_down_exps", d, f)]:
                t = Q6_K if mixed and name == "ffn_down_exps" else qt
                tensors.append((p + name + ".weight", t, (n_exp, rows, cols), None))
        else:
            mats += [("ffn_gate", f, d), ("ffn_up", f, d), ("ffn_down", d, f)]
        for name, rows, cols in mats:
            t = Q6_K if mixed and name in ("attn_v", "ffn_down") else qt
            tensors.append((p + name + ".weight", t, (rows, cols), None))

    pools = {t: block_pool(rng, t) for t in {t for _, t, _, data in tensors if data is None}}
    part = a.out + ".part"
    write_gguf(part, kvs, tensors, pools, rng)
    os.replace(part, a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
