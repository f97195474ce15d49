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
  tiny-gemma2/          Gemma 2: (1 + w) norms, pre/post norms, GeGLU, attention and final
                        logit soft-capping that bite, query_pre_attn_scalar != head_dim, even
                        layers sliding over a window of 24, tied embeddings; F32
  tiny-gemma2-mlx4/     the same weights, MLX 4-bit group 32
  tiny-gemma3/          Gemma 3 (gemma3_text): q/k norms, every 3rd layer global
                        (sliding_window_pattern), local RoPE base 10000 and global 1e6 with
                        linear scaling; BF16
  tiny-gemma3-mlx8/     the same weights, MLX 8-bit, the pattern given as layer_types
  tiny-phi3/            Phi-3 / Phi-4-mini: fused qkv_proj and gate_up_proj, partial rotary
                        (0.75), LongRoPE past original_max_position_embeddings (64), a sliding
                        window of 48, untied lm_head; F16
  tiny-phi3-mlx4/       the same weights, MLX 4-bit (row views of fused quantized weights)
  tiny-gemma2.gguf, tiny-phi3.gguf (only when the `gguf` package is importable): the same
                        families as llama.cpp's converter writes them (Gemma norms stored as
                        1 + w, GGUF names, Phi-3's LongRoPE factors as rope_factors_* tensors)
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

# Gemma 2: the caps are small enough to change the arithmetic (scores have a spread of ~1-3,
# logits of ~10), the window is shorter than the test prompts, and the query scale is not
# 1/sqrt(head_dim).
GEMMA2 = dict(model_type="gemma2", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=256,
              max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
              query_pre_attn_scalar=24, attn_logit_softcapping=2.0, final_logit_softcapping=8.0,
              sliding_window=24, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
              architectures=["Gemma2ForCausalLM"], bos_token_id=2, eos_token_id=1)

GEMMA3 = dict(model_type="gemma3_text", hidden_size=64, intermediate_size=128,
              num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
              vocab_size=256, max_position_embeddings=1024, rms_norm_eps=1e-6,
              rope_theta=1000000.0, rope_local_base_freq=10000.0,
              rope_scaling={"rope_type": "linear", "factor": 4.0}, query_pre_attn_scalar=40,
              sliding_window=20, sliding_window_pattern=3, final_logit_softcapping=None,
              attn_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh",
              tie_word_embeddings=True, architectures=["Gemma3ForCausalLM"],
              bos_token_id=2, eos_token_id=1)

# GGUF has no key for query_pre_attn_scalar: llama.cpp scales by 1/sqrt(head_dim) (27B: by
# d_model / n_head), so the GGUF form of Gemma 2 is a config where the two agree.
GEMMA2_GGUF = dict(GEMMA2, query_pre_attn_scalar=32)

# Phi-3: head_dim 16 with 12 rotated dims; the test's 112 positions exceed the original 64, so
# the long factors apply (and the magnitude factor sqrt(1 + ln(256/64) / ln(64))).
PHI3 = dict(model_type="phi3", hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
            max_position_embeddings=256, original_max_position_embeddings=64,
            rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.75,
            rope_scaling={"type": "longrope",
                          "long_factor": [1.0, 1.5, 2.5, 4.0, 7.0, 12.0],
                          "short_factor": [1.0, 1.0, 1.1, 1.2, 1.5, 2.0]},
            sliding_window=48, tie_word_embeddings=False, architectures=["Phi3ForCausalLM"],
            bos_token_id=1, eos_token_id=2)

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


def family_weights(cfg, seed):
    """Hugging Face-named random weights for Gemma 2/3 and Phi-3, in each family's own layout:
    Gemma norms hold w (applied as 1 + w; drawn around 0 with a spread that makes 1 + w and w
    very different), Phi-3 fuses q/k/v and gate/up."""
    rng = np.random.default_rng(seed)
    mt = cfg["model_type"]
    gemma = mt.startswith("gemma")
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim", d // cfg["num_attention_heads"])
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    lin = lambda o, i: rng.normal(0, 1 / np.sqrt(i), (o, i))
    # Gemma: w around 0 for the pre-norms (1 + w ~ 1), around 1 for the post-norms and 1.5
    # for the output norm, so that the sub-layers weigh as much as the scaled embedding in the
    # residual stream and the tied logits are not just "repeat the current token".
    norm = ((lambda n, mu=0.0: rng.normal(mu, 0.2, (n,))) if gemma
            else (lambda n, mu=0.0: 1 + rng.normal(0, 0.02, (n,))))
    w = {"model.embed_tokens.weight": rng.normal(0, 1.0 if not gemma else 0.3, (v, d)),
         "model.norm.weight": norm(d, 1.5)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d, 1.0)
        w[p + "self_attn.o_proj.weight"] = lin(d, nq)
        w[p + "mlp.down_proj.weight"] = lin(d, f)
        if mt == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = lin(nq + 2 * nkv, d)
            w[p + "mlp.gate_up_proj.weight"] = lin(2 * f, d)
            continue
        w[p + "pre_feedforward_layernorm.weight"] = norm(d)
        w[p + "post_feedforward_layernorm.weight"] = norm(d, 1.0)
        w[p + "self_attn.q_proj.weight"] = lin(nq, d)
        w[p + "self_attn.k_proj.weight"] = lin(nkv, d)
        w[p + "self_attn.v_proj.weight"] = lin(nkv, d)
        w[p + "mlp.gate_proj.weight"] = lin(f, d)
        w[p + "mlp.up_proj.weight"] = lin(f, d)
        if mt == "gemma3_text":
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
    return {k: a.astype(np.float32) for k, a in w.items()}


GGUF_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "self_attn.qkv_proj": "attn_qkv",
              "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "pre_feedforward_layernorm": "ffn_norm",
              "post_feedforward_layernorm": "post_ffw_norm"}


def write_family_gguf(path, cfg, w):
    """A Gemma 2 or Phi-3 GGUF as llama.cpp's converter writes it: GGUF names, Gemma norms
    stored as 1 + w (convert_hf_to_gguf adds 1 to every "norm.weight"), Phi-3's rotated dims
    and LongRoPE (factors as F32 tensors, the magnitude factor as rope.scaling.attn_factor);
    matrices F16, vectors F32. Needs the `gguf` package."""
    import gguf
    import math
    mt = cfg["model_type"]
    arch = {"gemma2": "gemma2", "phi3": "phi3"}[mt]
    d, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim", d // nh)
    wr = gguf.GGUFWriter(path, arch)
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_embedding_length(d)
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(nh)
    wr.add_head_count_kv(cfg["num_key_value_heads"])
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(cfg["rope_theta"])
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_vocab_size(cfg["vocab_size"])
    if "sliding_window" in cfg:
        wr.add_sliding_window(cfg["sliding_window"])
    if mt == "gemma2":
        wr.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        wr.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if mt == "phi3":
        rs, orig = cfg["rope_scaling"], cfg["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / orig
        wr.add_rope_dimension_count(int(hd * cfg.get("partial_rotary_factor", 1.0)))
        wr.add_rope_scaling_orig_ctx_len(orig)
        wr.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)))
        wr.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        wr.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
    whole = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    for hf in sorted(w):
        a = w[hf].astype(np.float32)
        if hf in whole:
            name = whole[hf]
        else:
            parts = hf.split(".")
            stem = ".".join(parts[3:-1])
            if stem == "post_attention_layernorm":
                gg = "post_attention_norm" if mt.startswith("gemma") else "ffn_norm"
            else:
                gg = GGUF_LAYER[stem]
            name = f"blk.{parts[2]}.{gg}.{parts[-1]}"
        if mt.startswith("gemma") and hf.endswith("norm.weight"):
            a = a + 1
        wr.add_tensor(name, a if a.ndim == 1 else a.astype(np.float16))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


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
    g2 = family_weights(GEMMA2, seed=21)
    write_folder(out, "tiny-gemma2", GEMMA2, {k: ("F32", a) for k, a in g2.items()})
    write_folder(out, "tiny-gemma2-mlx4", GEMMA2, mlx_tensors(g2, 4, 32, "F16"),
                 extra_cfg={"quantization": {"group_size": 32, "bits": 4}},
                 metadata={"format": "mlx"})
    g3 = family_weights(GEMMA3, seed=23)
    write_folder(out, "tiny-gemma3", GEMMA3, {k: ("BF16", bf16_bits(a)) for k, a in g3.items()})
    pattern = GEMMA3["sliding_window_pattern"]
    types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
             for i in range(GEMMA3["num_hidden_layers"])]
    g3_types = {k: v for k, v in GEMMA3.items() if k != "sliding_window_pattern"}
    write_folder(out, "tiny-gemma3-mlx8", dict(g3_types, layer_types=types),
                 mlx_tensors(g3, 8, 64, "BF16"),
                 extra_cfg={"quantization": {"group_size": 64, "bits": 8}},
                 metadata={"format": "mlx"})
    p3 = family_weights(PHI3, seed=31)
    write_folder(out, "tiny-phi3", PHI3, {k: ("F16", a.astype(np.float16)) for k, a in p3.items()})
    write_folder(out, "tiny-phi3-mlx4", PHI3, mlx_tensors(p3, 4, 32, "F16"),
                 extra_cfg={"quantization": {"group_size": 32, "bits": 4}},
                 metadata={"format": "mlx"})
    try:
        import gguf  # noqa: F401
    except ImportError:
        return
    write_family_gguf(os.path.join(out, "tiny-gemma2.gguf"), GEMMA2_GGUF, family_weights(GEMMA2_GGUF, seed=21))
    write_family_gguf(os.path.join(out, "tiny-phi3.gguf"), PHI3, p3)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
