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
  tiny-gemma/           Gemma 1: (1 + w) norms (w drawn around 0), embeddings times
                        sqrt(d_model), GeGLU, one KV head of 16 dims, no post-norms, no caps and
                        no sliding window, tied embeddings; F32
  tiny-gemma-mlx4/      the same weights, MLX 4-bit group 32
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
  tiny-mixtral/         Mixtral: 8 experts of width 96 (block_sparse_moe.experts.E.w1/w3/w2),
                        top-2 routing renormalised, untied lm_head; F32
  tiny-mixtral-mlx4/    the same weights, MLX 4-bit group 32 in mlx_lm's layout: each layer's
                        experts stacked into 3-D switch_mlp.{gate,up,down}_proj tensors, the
                        router 8-bit through a per-module override in config.json
  tiny-qwen3moe/        Qwen3-MoE: per-head q/k norms, 8 experts of width 32 (top-2,
                        norm_topk_prob), layer 1 a dense MLP of width 96 (mlp_only_layers); BF16
  tiny-olmoe/           OLMoE: q/k RMSNorms over the whole projection (before the split into
                        heads), 8 experts of width 32, top-2 NOT renormalised; F16
  tiny-qwen2moe/        Qwen2-MoE: q/k/v biases, 8 experts of width 32 (top-2, not
                        renormalised) plus a shared expert of width 48 scaled by
                        sigmoid(shared_expert_gate); F32
  tiny-gemma.gguf, tiny-gemma2.gguf, tiny-gemma3.gguf, tiny-phi3.gguf, tiny-mixtral.gguf,
  tiny-qwen3moe.gguf (only when the `gguf` package is importable): the same families as
                        llama.cpp's converter writes them (Gemma norms stored as 1 + w, GGUF
                        names; Gemma 3's local RoPE base, linear scaling of the global layers,
                        period of global layers and query scale as gemma3.* keys; Phi-3's
                        LongRoPE factors as rope_factors_* tensors; Mixtral as arch "llama" with
                        Q/K permuted for pairwise RoPE, experts stacked into 3-D ffn_*_exps
                        tensors and the router ffn_gate_inp kept F32; Qwen3-MoE with every layer
                        MoE)
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

# Gemma 1: hidden_act "gelu" as the released configs have it (transformers reads it as the tanh
# form, as it does hidden_activation); one KV head, head_dim * n_head == hidden_size.
GEMMA = dict(model_type="gemma", hidden_size=64, intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=1, head_dim=16, vocab_size=256,
             max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
             hidden_act="gelu", hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
             architectures=["GemmaForCausalLM"], bos_token_id=2, eos_token_id=1)

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

# Mixture-of-experts families, all with 8 experts of which each token uses 2. Expert widths differ
# from the hidden size (a transposed expert cannot pass) and, where MLX quantizes them, are
# multiples of its group of 32 (mlx_lm leaves a weight whose rows do not split into groups
# unquantized).
MIXTRAL = dict(model_type="mixtral", hidden_size=64, intermediate_size=96, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
               max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=1000000.0,
               num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
               tie_word_embeddings=False, architectures=["MixtralForCausalLM"],
               bos_token_id=1, eos_token_id=2)

# Qwen3-MoE: layer 1 is a dense MLP (mlp_only_layers), the others route over experts of width
# moe_intermediate_size and renormalise the top-k weights (norm_topk_prob).
QWEN3MOE = dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=96,
                moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=1024,
                rms_norm_eps=1e-6, rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2,
                decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=True,
                attention_bias=False, tie_word_embeddings=False,
                architectures=["Qwen3MoeForCausalLM"], bos_token_id=1, eos_token_id=2)

# llama.cpp's qwen3moe has no dense layers: the GGUF form routes in every layer.
QWEN3MOE_GGUF = dict(QWEN3MOE, mlp_only_layers=[])

# OLMoE: intermediate_size is the expert width; the chosen experts' probabilities are used as
# they are (norm_topk_prob false), so the two weights sum to less than 1.
OLMOE = dict(model_type="olmoe", hidden_size=64, intermediate_size=32, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
             num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, clip_qkv=None,
             tie_word_embeddings=False, architectures=["OlmoeForCausalLM"],
             bos_token_id=1, eos_token_id=2)

# Qwen2-MoE: intermediate_size would size the dense layers of mlp_only_layers (none here).
QWEN2MOE = dict(model_type="qwen2_moe", hidden_size=64, intermediate_size=96,
                moe_intermediate_size=32, shared_expert_intermediate_size=48,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=256, max_position_embeddings=1024, rms_norm_eps=1e-6,
                rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2,
                norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
                tie_word_embeddings=False, architectures=["Qwen2MoeForCausalLM"],
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
    """Hugging Face-named random weights for Gemma 1/2/3 and Phi-3, in each family's own layout:
    Gemma norms hold w (applied as 1 + w; drawn around 0 with a spread that makes 1 + w and w
    very different), Gemma 1 has only the two pre-norms per layer (post_attention_layernorm
    before the MLP, as in Llama), Phi-3 fuses q/k/v and gate/up."""
    rng = np.random.default_rng(seed)
    mt = cfg["model_type"]
    gemma = mt.startswith("gemma")
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim", d // cfg["num_attention_heads"])
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    lin = lambda o, i: rng.normal(0, 1 / np.sqrt(i), (o, i))
    # Gemma: w around 0 for the pre-norms (1 + w ~ 1), around 1 for the post-norms and 1.5
    # for the output norm, so that the sub-layers weigh as much as the scaled embedding in the
    # residual stream and the tied logits are not just "repeat the current token". Gemma 1 has
    # no post-norms (its post_attention_layernorm is the MLP's pre-norm, around 0 too), so its
    # embedding is narrower instead.
    norm = ((lambda n, mu=0.0: rng.normal(mu, 0.2, (n,))) if gemma
            else (lambda n, mu=0.0: 1 + rng.normal(0, 0.02, (n,))))
    embed_sd = 1.0 if not gemma else 0.08 if mt == "gemma" else 0.3
    w = {"model.embed_tokens.weight": rng.normal(0, embed_sd, (v, d)),
         "model.norm.weight": norm(d, 1.5)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d, 0.0 if mt == "gemma" else 1.0)
        w[p + "self_attn.o_proj.weight"] = lin(d, nq)
        w[p + "mlp.down_proj.weight"] = lin(d, f)
        if mt == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = lin(nq + 2 * nkv, d)
            w[p + "mlp.gate_up_proj.weight"] = lin(2 * f, d)
            continue
        if mt != "gemma":
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


def moe_layer(cfg, i):
    """Whether layer i routes over experts (transformers' rule: every decoder_sparse_step-th
    layer, except those of mlp_only_layers, which keep a dense MLP)."""
    return (i not in cfg.get("mlp_only_layers", [])
            and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)


def moe_weights(cfg, seed):
    """Hugging Face-named random weights (float32) for a mixture-of-experts config, in each
    family's own names: Mixtral's router block_sparse_moe.gate and experts
    block_sparse_moe.experts.E.w1/w3/w2 (gate/up/down); the Qwen MoEs' and OLMoE's mlp.gate and
    mlp.experts.E.gate_proj/up_proj/down_proj; Qwen3-MoE's per-head q/k norms and dense
    mlp_only_layers; OLMoE's q/k norms over the whole projection; Qwen2-MoE's q/k/v biases,
    mlp.shared_expert.* and mlp.shared_expert_gate."""
    rng = np.random.default_rng(seed)
    mt = cfg["model_type"]
    d, v = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    n_exp = cfg.get("num_local_experts", cfg.get("num_experts"))
    f_exp = cfg.get("moe_intermediate_size", cfg["intermediate_size"])  # an expert's width
    lin = lambda o, i: rng.normal(0, 1 / np.sqrt(i), (o, i))
    norm = lambda n: 1 + rng.normal(0, 0.02, (n,))
    w = {"model.embed_tokens.weight": rng.normal(0, 1.0, (v, d)),
         "model.norm.weight": norm(d)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = lin(nq, d)
        w[p + "self_attn.k_proj.weight"] = lin(nkv, d)
        w[p + "self_attn.v_proj.weight"] = lin(nkv, d)
        w[p + "self_attn.o_proj.weight"] = lin(d, nq)
        if mt == "qwen2_moe":
            w[p + "self_attn.q_proj.bias"] = rng.normal(0, 0.5, (nq,))
            w[p + "self_attn.k_proj.bias"] = rng.normal(0, 0.5, (nkv,))
            w[p + "self_attn.v_proj.bias"] = rng.normal(0, 0.5, (nkv,))
        if mt in ("qwen3_moe", "olmoe"):
            # Qwen3-MoE: one weight per head dimension; OLMoE: one per projection output. The
            # spread is wide enough that applying a weight to the wrong dims shows.
            q_n, k_n = (hd, hd) if mt == "qwen3_moe" else (nq, nkv)
            w[p + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.2, (q_n,))
            w[p + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.2, (k_n,))
        if not moe_layer(cfg, i):
            f = cfg["intermediate_size"]
            w[p + "mlp.gate_proj.weight"] = lin(f, d)
            w[p + "mlp.up_proj.weight"] = lin(f, d)
            w[p + "mlp.down_proj.weight"] = lin(d, f)
            continue
        moe = p + ("block_sparse_moe." if mt == "mixtral" else "mlp.")
        gate, up, down = (("w1", "w3", "w2") if mt == "mixtral"
                          else ("gate_proj", "up_proj", "down_proj"))
        w[moe + "gate.weight"] = lin(n_exp, d)  # the router: logits of the order of 1
        for e in range(n_exp):
            w[f"{moe}experts.{e}.{gate}.weight"] = lin(f_exp, d)
            w[f"{moe}experts.{e}.{up}.weight"] = lin(f_exp, d)
            w[f"{moe}experts.{e}.{down}.weight"] = lin(d, f_exp)
        if mt == "qwen2_moe":
            fs = cfg["shared_expert_intermediate_size"]
            w[p + "mlp.shared_expert.gate_proj.weight"] = lin(fs, d)
            w[p + "mlp.shared_expert.up_proj.weight"] = lin(fs, d)
            w[p + "mlp.shared_expert.down_proj.weight"] = lin(d, fs)
            w[p + "mlp.shared_expert_gate.weight"] = lin(1, d)
    return {k: a.astype(np.float32) for k, a in w.items()}


EXPERT_PROJ = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj", "gate_proj": "gate_proj",
               "up_proj": "up_proj", "down_proj": "down_proj"}


def stacked_experts(w):
    """w with each layer's per-expert weights stacked as mlx_lm stores them (its sanitize step):
    ....experts.E.w1/gate_proj.weight for E = 0..n-1 become one ....switch_mlp.gate_proj.weight
    of shape [n_expert, out, in] (w3/up_proj -> up_proj, w2/down_proj -> down_proj)."""
    out, stacks = {}, {}
    for k, a in w.items():
        parts = k.split(".")
        if "experts" not in parts:
            out[k] = a
            continue
        j = parts.index("experts")
        stem = ".".join(parts[:j] + ["switch_mlp", EXPERT_PROJ[parts[j + 2]], parts[j + 3]])
        stacks.setdefault(stem, {})[int(parts[j + 1])] = a
    for stem, by_expert in stacks.items():
        out[stem] = np.stack([by_expert[e] for e in range(len(by_expert))])
    return out


def permute_qk(w, n_head):
    """llama.cpp's Q/K row permutation for arch llama: Hugging Face rotates the two halves of
    each head, GGUF Llama rotates adjacent pairs (also gen_tiny_gguf.py)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


GGUF_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "self_attn.qkv_proj": "attn_qkv",
              "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "pre_feedforward_layernorm": "ffn_norm",
              "post_feedforward_layernorm": "post_ffw_norm",
              "block_sparse_moe.gate": "ffn_gate_inp", "mlp.gate": "ffn_gate_inp",
              "block_sparse_moe.switch_mlp.gate_proj": "ffn_gate_exps",
              "block_sparse_moe.switch_mlp.up_proj": "ffn_up_exps",
              "block_sparse_moe.switch_mlp.down_proj": "ffn_down_exps",
              "mlp.switch_mlp.gate_proj": "ffn_gate_exps", "mlp.switch_mlp.up_proj": "ffn_up_exps",
              "mlp.switch_mlp.down_proj": "ffn_down_exps"}


def add_base_keys(wr, cfg):
    """The GGUF metadata every family has, from a config.json dict (also gen_tiny_gguf.py)."""
    hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(cfg["num_attention_heads"])
    wr.add_head_count_kv(cfg["num_key_value_heads"])
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(cfg["rope_theta"])
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_vocab_size(cfg["vocab_size"])


def write_family_gguf(path, cfg, w):
    """A Gemma 1/2/3, Phi-3, Mixtral or Qwen3-MoE GGUF as llama.cpp's converter writes it: GGUF
    names, Gemma norms stored as 1 + w (convert_hf_to_gguf adds 1 to every "norm.weight"; Gemma
    1's post_attention_layernorm is ffn_norm, Gemma 2/3's post_attention_norm), Gemma 3's
    rope.freq_base_swa (the local base), rope.scaling.type/factor (the global layers' linear
    scaling), attention.sliding_window_pattern (the period of global layers, which llama.cpp
    otherwise takes as 6) and attention.scale (query_pre_attn_scalar^-0.5, for which llama.cpp's
    converter has no key: GGUF readers otherwise use 1/sqrt(head_dim)), Phi-3's rotated dims and
    LongRoPE (factors as F32 tensors, the magnitude factor as rope.scaling.attn_factor), Mixtral
    as arch llama with Q/K permuted for pairwise RoPE, each layer's experts stacked into
    ffn_{gate,up,down}_exps ([n_expert, out, in] in numpy's order, which the writer reverses
    into ggml's) and the router ffn_gate_inp kept F32; other matrices F16, vectors F32. Needs
    the `gguf` package."""
    import gguf
    import math
    mt = cfg["model_type"]
    arch = {"gemma": "gemma", "gemma2": "gemma2", "gemma3_text": "gemma3", "phi3": "phi3",
            "mixtral": "llama", "qwen3_moe": "qwen3moe"}[mt]
    n_exp = cfg.get("num_local_experts", cfg.get("num_experts", 0))
    hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    wr = gguf.GGUFWriter(path, arch)
    add_base_keys(wr, cfg)
    if cfg.get("sliding_window"):
        wr.add_sliding_window(cfg["sliding_window"])
    if n_exp:
        assert all(moe_layer(cfg, i) for i in range(cfg["num_hidden_layers"])), \
            "llama.cpp's MoE architectures have no dense layers"
        wr.add_rope_dimension_count(hd)
        wr.add_expert_count(n_exp)
        wr.add_expert_used_count(cfg["num_experts_per_tok"])
        if "moe_intermediate_size" in cfg:
            wr.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w = stacked_experts(w)
    if mt == "gemma2":
        wr.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        wr.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if mt == "gemma3_text":
        wr.add_rope_freq_base_swa(cfg["rope_local_base_freq"])
        rs = cfg.get("rope_scaling")
        if rs:
            assert rs["rope_type"] == "linear", "llama.cpp's Gemma 3 scales linearly"
            wr.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            wr.add_rope_scaling_factor(rs["factor"])
        wr.add_sliding_window_pattern(cfg["sliding_window_pattern"])
        wr.add_attention_scale(cfg["query_pre_attn_scalar"] ** -0.5)
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
                gg = "post_attention_norm" if mt in ("gemma2", "gemma3_text") else "ffn_norm"
            else:
                gg = GGUF_LAYER[stem]
            name = f"blk.{parts[2]}.{gg}.{parts[-1]}"
        if mt.startswith("gemma") and hf.endswith("norm.weight"):
            a = a + 1
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            a = permute_qk(a, cfg["num_attention_heads"] if "attn_q" in name
                           else cfg["num_key_value_heads"])
        keep_f32 = a.ndim == 1 or name.endswith("ffn_gate_inp.weight")
        wr.add_tensor(name, a if keep_f32 else a.astype(np.float16))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def bf16_bits(a):
    """float32 → bfloat16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_round(a):
    """a rounded to bfloat16, as float32: the values a BF16 file holds."""
    return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32)


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
    """MLX affine quantization along the last axis: per group of `group` elements,
    w ≈ scale * q + bias, with q in [0, 2^bits), packed little-endian into uint32 words
    (element j at bits*j). A 3-D stack of experts [n, out, in] gives packed [n, out, in*bits/32]
    and scales/biases [n, out, in/group], the layout of mlx.core.quantize (whose choice of
    scales differs; mlx.core.dequantize reads these exactly)."""
    lead, cols = w.shape[:-1], w.shape[-1]
    rows = int(np.prod(lead))
    w = w.reshape(rows, cols)
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
    return (packed.reshape(*lead, -1), scale.reshape(*lead, -1),
            lo.astype(np.float32).reshape(*lead, -1))


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


def mlx_tensors(w, bits, group, sb, overrides=None):
    """MLX-quantized tensors: every matrix (or 3-D stack of expert matrices) whose rows split
    into groups, the rest F16. overrides: module name (the weight's name less ".weight") ->
    {"bits", "group_size"}, as mlx_lm writes per-module settings into config.json's
    "quantization"."""
    out = {}
    for k, a in w.items():
        stem = k[: -len(".weight")]
        o = (overrides or {}).get(stem, {})
        bits_k, group_k = o.get("bits", bits), o.get("group_size", group)
        if a.ndim >= 2 and a.shape[-1] % group_k == 0:
            q, s, b = mlx_quantize(a, bits_k, group_k)
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
    gm = family_weights(GEMMA, seed=19)
    write_folder(out, "tiny-gemma", GEMMA, {k: ("F32", a) for k, a in gm.items()})
    write_folder(out, "tiny-gemma-mlx4", GEMMA, mlx_tensors(gm, 4, 32, "F16"),
                 extra_cfg={"quantization": {"group_size": 32, "bits": 4}},
                 metadata={"format": "mlx"})
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
    mx = moe_weights(MIXTRAL, seed=41)
    write_folder(out, "tiny-mixtral", MIXTRAL, {k: ("F32", a) for k, a in mx.items()})
    # mlx_lm's layout: stacked experts 4-bit, the routers 8-bit through per-module overrides
    # (its Mixtral quant_predicate), the override keyed by module name as mlx_lm writes it.
    routers = {f"model.layers.{i}.block_sparse_moe.gate": {"group_size": 32, "bits": 8}
               for i in range(MIXTRAL["num_hidden_layers"])}
    write_folder(out, "tiny-mixtral-mlx4", MIXTRAL,
                 mlx_tensors(stacked_experts(mx), 4, 32, "F16", overrides=routers),
                 extra_cfg={"quantization": dict({"group_size": 32, "bits": 4}, **routers)},
                 metadata={"format": "mlx"})
    q3m = moe_weights(QWEN3MOE, seed=43)
    write_folder(out, "tiny-qwen3moe", QWEN3MOE,
                 {k: ("BF16", bf16_bits(a)) for k, a in q3m.items()})
    om = moe_weights(OLMOE, seed=47)
    write_folder(out, "tiny-olmoe", OLMOE,
                 {k: ("F16", a.astype(np.float16)) for k, a in om.items()})
    q2m = moe_weights(QWEN2MOE, seed=53)
    write_folder(out, "tiny-qwen2moe", QWEN2MOE, {k: ("F32", a) for k, a in q2m.items()})
    try:
        import gguf  # noqa: F401
    except ImportError:
        return
    write_family_gguf(os.path.join(out, "tiny-gemma.gguf"), GEMMA, gm)
    write_family_gguf(os.path.join(out, "tiny-gemma2.gguf"), GEMMA2_GGUF, family_weights(GEMMA2_GGUF, seed=21))
    # the BF16 folder's values (the converter reads them as they are stored)
    write_family_gguf(os.path.join(out, "tiny-gemma3.gguf"), GEMMA3,
                      {k: bf16_round(a) for k, a in g3.items()})
    write_family_gguf(os.path.join(out, "tiny-phi3.gguf"), PHI3, p3)
    write_family_gguf(os.path.join(out, "tiny-mixtral.gguf"), MIXTRAL, mx)
    write_family_gguf(os.path.join(out, "tiny-qwen3moe.gguf"), QWEN3MOE_GGUF,
                      moe_weights(QWEN3MOE_GGUF, seed=43))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
