#!/usr/bin/env python3
"""Writes a random-weight GGUF in the shape of a real model, for speed benchmarks only.

usage: gen_shaped_gguf.py OUT.gguf [--shape llama-3.2-1b] [--type q4_0|q8_0|q4_k_m]

The weights are random blocks of the type written directly as bytes (seconds for a 1B model,
no float matrix is ever built): their values are meaningless, their size and layout are exactly
those of the real model, which is all a throughput measurement reads. The vocabulary is the
starter model's (SmolLM2, byte-level BPE) padded with unused tokens up to the shape's vocabulary
size, so both hearth and llama.cpp can tokenize a prompt for it. q4_k_m mixes formats the way
llama.cpp's Q4_K_M files do: Q6_K for the embedding/output and for attn_v and ffn_down of every
other layer, Q4_K for the rest.
"""
import argparse
import os

import numpy as np
import gguf

SHAPES = {
    # name: (layers, hidden, ffn, heads, kv heads, vocab, rope theta, tied)
    "llama-3.2-1b": (16, 2048, 8192, 32, 8, 128256, 500000.0, True),
    "llama-3.1-8b": (32, 4096, 14336, 32, 8, 128256, 500000.0, False),
    "qwen2.5-7b": (28, 3584, 18944, 28, 4, 152064, 1000000.0, False),
    # mixtures of experts: ffn is each expert's width
    "olmoe-1b-7b": (16, 2048, 1024, 16, 16, 50304, 10000.0, False),
}
# name: (architecture, experts, experts per token); the rest are "llama" without experts
MOE = {"olmoe-1b-7b": ("olmoe", 64, 8)}
Q = gguf.GGMLQuantizationType
# type: (elements per block, bytes per block, byte offsets of the f16 scales, their value); the
# K-quants' super-block scales multiply 6-bit (Q4_K) or 8-bit (Q6_K) sub-block scales
BLOCK = {Q.Q4_0: (32, 18, [0], 0.02), Q.Q8_0: (32, 34, [0], 0.02),
         Q.Q4_K: (256, 144, [0, 2], 0.0005), Q.Q6_K: (256, 210, [208], 0.0005)}


def random_blocks(rng, rows, cols, qtype):
    n, size, scale_at, scale = BLOCK[qtype]
    b = rng.integers(0, 256, (rows, cols // n, size), dtype=np.uint8)
    # a small positive f16 scale in every block keeps values finite and tame
    for o in scale_at:
        b[..., o:o + 2] = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
    return b.reshape(rows, -1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.2-1b", choices=sorted(SHAPES))
    ap.add_argument("--type", default="q4_0", choices=["q4_0", "q8_0", "q4_k_m"])
    ap.add_argument("--tokenizer-from", default=os.path.join(
        os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth")), "models",
        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()
    L, d, f, h, kv, V, theta, tied = SHAPES[a.shape]
    qt = {"q4_0": Q.Q4_0, "q8_0": Q.Q8_0, "q4_k_m": Q.Q4_K}[a.type]
    big = Q.Q6_K if a.type == "q4_k_m" else qt  # embedding/output, and some attn_v/ffn_down
    hd = d // h
    src = gguf.GGUFReader(a.tokenizer_from)

    def field(k):
        fl = src.fields[k]
        return [bytes(fl.parts[i]).decode("utf-8", "replace") if fl.types[-1].name == "STRING"
                else fl.parts[i].tolist()[0] for i in fl.data]

    tokens = field("tokenizer.ggml.tokens")
    ttypes = field("tokenizer.ggml.token_type")
    merges = field("tokenizer.ggml.merges")
    tokens += [f"<|unused_{i}|>" for i in range(V - len(tokens))]
    ttypes += [5] * (V - len(ttypes))  # UNUSED
    arch, n_exp, n_used = MOE.get(a.shape, ("llama", 0, 0))
    w = gguf.GGUFWriter(a.out, arch)
    if n_exp:
        w.add_expert_count(n_exp)
        w.add_expert_used_count(n_used)
    w.add_block_count(L)
    w.add_embedding_length(d)
    w.add_feed_forward_length(f)
    w.add_head_count(h)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(theta)
    w.add_context_length(8192)
    w.add_rope_dimension_count(hd)
    w.add_file_type({"q4_0": 2, "q8_0": 7, "q4_k_m": 15}[a.type])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(ttypes)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    rng = np.random.default_rng(0)
    ones = np.ones(d, dtype=np.float32)
    w.add_tensor("token_embd.weight", random_blocks(rng, V, d, big), raw_dtype=big)
    w.add_tensor("output_norm.weight", ones)
    if not tied:
        w.add_tensor("output.weight", random_blocks(rng, V, d, big), raw_dtype=big)
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "ffn_norm.weight", ones)
        mats = [("attn_q", h * hd, d), ("attn_k", kv * hd, d), ("attn_v", kv * hd, d),
                ("attn_output", d, h * hd)]
        if n_exp:  # OLMoE: q/k norms over the whole projection; F32 router; stacked experts
            w.add_tensor(p + "attn_q_norm.weight", np.ones(h * hd, dtype=np.float32))
            w.add_tensor(p + "attn_k_norm.weight", np.ones(kv * hd, dtype=np.float32))
            w.add_tensor(p + "ffn_gate_inp.weight",
                         rng.standard_normal((n_exp, d), dtype=np.float32) * 0.02)
            for name, rows, cols in [("ffn_gate_exps", f, d), ("ffn_up_exps", f, d),
                                     ("ffn_down_exps", d, f)]:
                t = big if name == "ffn_down_exps" and i % 2 == 0 else qt
                b = random_blocks(rng, n_exp * rows, cols, t).reshape(n_exp, rows, -1)
                w.add_tensor(p + name + ".weight", b, raw_dtype=t)
        else:
            mats += [("ffn_gate", f, d), ("ffn_up", f, d), ("ffn_down", d, f)]
        for name, rows, cols in mats:
            t = big if name in ("attn_v", "ffn_down") and i % 2 == 0 else qt
            w.add_tensor(p + name + ".weight", random_blocks(rng, rows, cols, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
