#!/usr/bin/env python3
"""Writes tiny random-weight models, deterministically, for tests that must not download.

usage: gen_tiny_models.py OUT_DIR

Creates under OUT_DIR (each a model folder hearth can open):
  tiny-llama/           Hugging Face layout, F16 safetensors, one file
  tiny-llama-sharded/   the same weights split over two shards + model.safetensors.index.json
  tiny-llama-mlx4/      MLX-community layout: 4-bit affine, group 32, F16 scales/biases
  tiny-llama-mlx8/      MLX 8-bit affine, group 64, BF16 scales/biases (stored as raw bf16)
  tiny-qwen3/           Qwen3 shape (q/k RMSNorm, separate lm_head), BF16 safetensors
  tiny-qwen2/           Qwen2 shape (q/k/v biases), F32 safetensors
  tiny-llama3/          Llama 3 shape with llama3 rope scaling and an untied lm_head, F16
The same seed always gives byte-identical files. Only numpy is needed; the safetensors files are
written by hand (the format is an 8-byte header length, a JSON header and raw little-endian data).
"""
import json
import os
import struct
import sys

import numpy as np

LLAMA = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
             tie_word_embeddings=True, architectures=["LlamaForCausalLM"],
             bos_token_id=1, eos_token_id=2)

QWEN3 = dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=256,
             max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=1000000.0,
             tie_word_embeddings=False, architectures=["Qwen3ForCausalLM"],
             bos_token_id=1, eos_token_id=2)

QWEN2 = dict(model_type="qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=1000000.0,
             tie_word_embeddings=True, architectures=["Qwen2ForCausalLM"],
             bos_token_id=1, eos_token_id=2)

LLAMA3 = dict(LLAMA, rope_theta=500000.0, tie_word_embeddings=False,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def weights(cfg, seed):
    """Hugging Face-named random weights (float32) for a Llama-family config."""
    rng = np.random.default_rng(seed)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim", d // cfg["num_attention_heads"])
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    # Standard-deviation 1/sqrt(fan_in) projections give logits with real structure, so parity
    # tests compare distributions that are not flat.
    lin = lambda o, i: rng.normal(0, 1 / np.sqrt(i), (o, i))
    w = {"model.embed_tokens.weight": rng.normal(0, 1.0, (v, d)),
         "model.norm.weight": 1 + rng.normal(0, 0.02, (d,))}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.02, (d,))
        w[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.02, (d,))
        w[p + "self_attn.q_proj.weight"] = lin(nq, d)
        w[p + "self_attn.k_proj.weight"] = lin(nkv, d)
        w[p + "self_attn.v_proj.weight"] = lin(nkv, d)
        w[p + "self_attn.o_proj.weight"] = lin(d, nq)
        if cfg["model_type"] == "qwen2":
            w[p + "self_attn.q_proj.bias"] = rng.normal(0, 0.5, (nq,))
            w[p + "self_attn.k_proj.bias"] = rng.normal(0, 0.5, (nkv,))
            w[p + "self_attn.v_proj.bias"] = rng.normal(0, 0.5, (nkv,))
        if cfg["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.02, (hd,))
            w[p + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.02, (hd,))
        w[p + "mlp.gate_proj.weight"] = lin(f, d)
        w[p + "mlp.up_proj.weight"] = lin(f, d)
        w[p + "mlp.down_proj.weight"] = lin(d, f)
    return {k: v.astype(np.float32) for k, v in w.items()}


def bf16_bits(a):
    """float32 → bfloat16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, metadata=None):
    """tensors: name → (dtype string, numpy array already in that storage type)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # keep the data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def mlx_quantize(w, bits, group):
    """MLX affine quantization: per group of `group` elements, w ≈ scale * q + bias, with
    q in [0, 2^bits), packed little-endian into uint32 words (element j at bits*j)."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group)
    lo, hi = g.min(axis=2), g.max(axis=2)
    n = (1 << bits) - 1
    scale = np.where(hi > lo, (hi - lo) / n, 1.0).astype(np.float32)
    q = np.clip(np.round((g - lo[..., None]) / scale[..., None]), 0, n).astype(np.uint32)
    q = q.reshape(rows, cols)
    per = 32 // bits
    q = q.reshape(rows, cols // per, per)
    packed = np.zeros((rows, cols // per), dtype=np.uint32)
    for j in range(per):
        packed |= q[:, :, j] << np.uint32(bits * j)
    return packed, scale, lo.astype(np.float32)


def tokenizer_json(vocab_size):
    """A byte-level BPE tokenizer.json with one token per byte value and no merges."""
    vocab = {f"<0x{i:02X}>": i for i in range(vocab_size)}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "model": {"type": "BPE", "vocab": vocab, "merges": []}, "decoder": None}


def write_folder(out, name, cfg, tensors, shards=1, extra_cfg=None, metadata=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    c = dict(cfg)
    c.update(extra_cfg or {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(cfg["vocab_size"]), f, sort_keys=True)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE, "eos_token": "<0x02>"}, f, sort_keys=True)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"temperature": 0.7, "top_p": 0.9}, f, sort_keys=True)
    names = sorted(tensors)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, metadata)
        return d
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(d, fname), {k: tensors[k] for k in part}, metadata)
        weight_map.update({k: fname for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    return d


def mlx_tensors(w, bits, group, sb):
    out = {}
    for k, a in w.items():
        if a.ndim == 2 and a.shape[1] % group == 0:
            q, s, b = mlx_quantize(a, bits, group)
            stem = k[: -len(".weight")]
            out[k] = ("U32", q)
            if sb == "F16":
                out[stem + ".scales"] = ("F16", s.astype(np.float16))
                out[stem + ".biases"] = ("F16", b.astype(np.float16))
            else:
                out[stem + ".scales"] = ("BF16", bf16_bits(s))
                out[stem + ".biases"] = ("BF16", bf16_bits(b))
        else:
            out[k] = ("F16", a.astype(np.float16))
    return out


def main(out):
    os.makedirs(out, exist_ok=True)
    w = weights(LLAMA, seed=1234)
    f16 = {k: ("F16", a.astype(np.float16)) for k, a in w.items()}
    write_folder(out, "tiny-llama", LLAMA, f16)
    write_folder(out, "tiny-llama-sharded", LLAMA, f16, shards=2)
    write_folder(out, "tiny-llama-mlx4", LLAMA, mlx_tensors(w, 4, 32, "F16"),
                 extra_cfg={"quantization": {"group_size": 32, "bits": 4}},
                 metadata={"format": "mlx"})
    write_folder(out, "tiny-llama-mlx8", LLAMA, mlx_tensors(w, 8, 64, "BF16"),
                 extra_cfg={"quantization": {"group_size": 64, "bits": 8}},
                 metadata={"format": "mlx"})
    w2 = weights(QWEN2, seed=7)
    write_folder(out, "tiny-qwen2", QWEN2, {k: ("F32", a) for k, a in w2.items()})
    w3 = weights(LLAMA3, seed=11)
    write_folder(out, "tiny-llama3", LLAMA3, {k: ("F16", a.astype(np.float16)) for k, a in w3.items()})
    wq = weights(QWEN3, seed=99)
    write_folder(out, "tiny-qwen3", QWEN3, {k: ("BF16", bf16_bits(a)) for k, a in wq.items()})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
