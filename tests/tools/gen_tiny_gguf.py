#!/usr/bin/env python3
"""Writes tiny random-weight GGUF models, deterministically, for the parity tests.

usage: gen_tiny_gguf.py OUT_DIR

Each model is the same random weights as tests/tools/gen_tiny_models.py would make for the
family, converted the way llama.cpp's converter does (GGUF tensor names; Llama-family Q/K rows
permuted for pairwise RoPE) and quantized:
  tiny-llama-f16.gguf  tiny-llama-q8_0.gguf  tiny-llama-q4_0.gguf  tiny-llama-q4_1.gguf
  tiny-llama-q4_k.gguf (weights Q4_K, quantized here: gguf-py has no K-quant quantizer)
  tiny-qwen2-q4_k.gguf (biases F32)          tiny-qwen3-q8_0.gguf (q/k norms)
  split/tiny-llama-q8_0-0000k-of-00003.gguf (the Q8_0 Llama as gguf-split writes it)
Norms and biases stay F32, as llama.cpp keeps them.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tiny_models as tm  # noqa: E402

import gguf  # noqa: E402
from gguf.quants import quantize  # noqa: E402

Q = gguf.GGMLQuantizationType


def q4_k(w):
    """Q4_K blocks of 256: 8 sub-blocks of 32 with 6-bit scales and mins (w ~ d*sc*q - dmin*m)."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // 256, 8, 32).astype(np.float32)
    mn = np.maximum(0.0, -g.min(axis=3))                    # offsets, >= 0
    sc = np.maximum((g.max(axis=3) + mn) / 15.0, 1e-8)       # step per sub-block
    d = sc.max(axis=2) / 63.0
    dmin = np.maximum(mn.max(axis=2) / 63.0, 1e-8)
    sci = np.clip(np.round(sc / d[..., None]), 1, 63).astype(np.uint8)
    mi = np.clip(np.round(mn / dmin[..., None]), 0, 63).astype(np.uint8)
    step = (d[..., None] * sci)[..., None]
    off = (dmin[..., None] * mi)[..., None]
    q = np.clip(np.round((g + off) / step), 0, 15).astype(np.uint8)  # [r, nb, 8, 32]
    out = np.zeros((rows, cols // 256, 144), dtype=np.uint8)
    out[..., 0:2] = d.astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    out[..., 2:4] = dmin.astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    s = np.zeros((rows, cols // 256, 12), dtype=np.uint8)
    for j in range(4):
        s[..., j] = (sci[..., j] & 63) | ((sci[..., j + 4] >> 4) << 6)
        s[..., j + 4] = (mi[..., j] & 63) | ((mi[..., j + 4] >> 4) << 6)
        s[..., j + 8] = (sci[..., j + 4] & 15) | ((mi[..., j + 4] & 15) << 4)
    out[..., 4:16] = s
    for c in range(4):  # chunk c: sub-block 2c in low nibbles, 2c+1 in high nibbles
        out[..., 16 + 32 * c:16 + 32 * (c + 1)] = q[..., 2 * c, :] | (q[..., 2 * c + 1, :] << 4)
    return out.reshape(rows, -1)


def write(path, arch, cfg, w, qtype, pairs, split=0):
    """split > 0: gguf-split's form, NAME-0000k-of-0000n.gguf of at most `split` tensors each."""
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    per = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
           "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
           "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}
    wr = gguf.GGUFWriter(path, arch, split_max_tensors=split)
    tm.add_base_keys(wr, cfg)
    for hf in sorted(w):
        a = w[hf]
        if hf in names:
            name = names[hf]
        else:
            parts = hf.split(".")
            stem, kind = ".".join(parts[3:-1]), parts[-1]
            name = f"blk.{parts[2]}.{per[stem]}.{kind}"
        if pairs and name.endswith("attn_q.weight"):
            a = tm.permute_qk(a, cfg["num_attention_heads"])
        if pairs and name.endswith("attn_k.weight"):
            a = tm.permute_qk(a, cfg["num_key_value_heads"])
        a = a.astype(np.float32)
        if a.ndim == 1 or qtype == Q.F32:
            wr.add_tensor(name, a)
        elif qtype == Q.F16:
            wr.add_tensor(name, a.astype(np.float16))
        elif qtype == Q.Q4_K:
            wr.add_tensor(name, q4_k(a), raw_dtype=Q.Q4_K)
        else:
            wr.add_tensor(name, quantize(a, qtype), raw_dtype=qtype)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def main(out):
    os.makedirs(out, exist_ok=True)
    # Q4_K needs rows of 256: widen the tiny models' hidden size for the K-quant variants.
    llama = dict(tm.LLAMA)
    w = tm.weights(llama, seed=1234)
    for name, qt in [("f16", Q.F16), ("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("q4_1", Q.Q4_1)]:
        write(os.path.join(out, f"tiny-llama-{name}.gguf"), "llama", llama, w, qt, True)
    wide = dict(tm.LLAMA, hidden_size=256, intermediate_size=512)
    write(os.path.join(out, "tiny-llama-q4_k.gguf"), "llama", wide, tm.weights(wide, seed=3), Q.Q4_K, True)
    qwen2 = dict(tm.QWEN2, hidden_size=256, intermediate_size=512)
    write(os.path.join(out, "tiny-qwen2-q4_k.gguf"), "qwen2", qwen2, tm.weights(qwen2, seed=7), Q.Q4_K, False)
    write(os.path.join(out, "tiny-qwen3-q8_0.gguf"), "qwen3", tm.QWEN3, tm.weights(tm.QWEN3, seed=99), Q.Q8_0, False)
    # The Q8_0 Llama again, split in three parts in a folder of its own
    os.makedirs(os.path.join(out, "split"), exist_ok=True)
    write(os.path.join(out, "split", "tiny-llama-q8_0.gguf"), "llama", llama, w, Q.Q8_0, True,
          split=8)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
