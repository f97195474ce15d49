#!/usr/bin/env python3
"""The reference forward pass: the exact math of a Llama-family model on dequantized weights.

This is the oracle hearth's CPU engine is checked against (tests/parity). It is deliberately
plain: numpy in float64, weights dequantized by the `gguf` package (GGUF files) or read with
numpy from safetensors (MLX affine weights are dequantized here by their definition,
w = scale * q + bias), no quantization of activations, no fused kernels. It covers the families
issue 4 names: Llama 2/3.x (incl. llama3 / linear / yarn rope scaling), SmolLM2, Mistral,
Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm), with tied or separate output embeddings;
and issue 8's, written from transformers' modeling_gemma.py / modeling_gemma2.py /
modeling_gemma3.py / modeling_phi3.py:
  Gemma 1: RMSNorm as x/rms * (1 + w) in Hugging Face files (GGUF stores 1 + w), embeddings
    times sqrt(d_model), GeGLU (gelu, tanh form), scores scaled by head_dim^-0.5; otherwise
    Llama's layer (a norm before attention and one before the MLP, RoPE over halves).
  Gemma 2: RMSNorm as x/rms * (1 + w) in Hugging Face files (GGUF stores 1 + w), embeddings
    times sqrt(d_model), a norm after attention and after the MLP, GeGLU (gelu, tanh form),
    scores scaled by query_pre_attn_scalar^-0.5 and soft-capped (c * tanh(s / c)), logits
    soft-capped, sliding-window layers (even ones) beside global ones.
  Gemma 3: the same without caps (unless configured), q/k RMSNorm per head, layer types from
    layer_types or sliding_window_pattern, RoPE base rope_local_base_freq on sliding layers and
    rope_theta with rope_scaling on global ones. In GGUF: the pattern from
    gemma3.attention.sliding_window_pattern (a period, or one bool per layer, true = sliding;
    else a period of 6), the local base from rope.freq_base_swa, the query scale from
    attention.scale (else llama.cpp's rule).
  Phi-3: fused qkv_proj and gate_up_proj (split as transformers does), partial rotary,
    LongRoPE (long factors when the sequence exceeds original_max_position_embeddings, cos and
    sin times the magnitude factor), a sliding window on every layer.
and the mixture-of-experts families, written from transformers' modeling_mixtral.py,
modeling_qwen2_moe.py, modeling_qwen3_moe.py and modeling_olmoe.py (and llama.cpp's graphs for
their GGUF forms):
  every MoE layer: router logits h @ gate.T, a softmax over all experts (float64), the top
    num_experts_per_tok by probability (ties to the lower expert id), their probabilities
    renormalised to sum to 1 where the family does (Mixtral always, the others per
    norm_topk_prob; in GGUF: llama-with-experts and qwen3moe do, olmoe and qwen2moe do not),
    out = sum_j w_j * down_e(silu(gate_e h) * up_e h). Experts load from per-expert Hugging
    Face names (Mixtral's w1/w3/w2, the others' gate/up/down_proj), mlx_lm's stacked
    switch_mlp tensors (dequantized) or GGUF's stacked ffn_*_exps tensors.
  Qwen3-MoE: dense MLPs on mlp_only_layers (and off the decoder_sparse_step); Qwen3's q/k norms.
  OLMoE: q/k RMSNorms over the whole projection, before the split into heads.
  Qwen2-MoE: q/k/v biases, a shared expert added to every token's output, scaled by
    sigmoid(h @ shared_expert_gate).

usage as a library:
    m = load("model.gguf" | "hf_folder")
    logits = m.forward(tokens)              # [len(tokens), n_vocab] float64
    state = m.new_cache(); m.step(state, tok) -> logits of the next token (KV-cached decode)
"""
import json
import math
import os

import numpy as np


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


# ---- loading ----

def _gguf_load(path):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(path)

    def field(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        if f.types and f.types[0].name == "STRING":
            return bytes(v).decode()
        return v.tolist()[0] if hasattr(v, "tolist") else v

    def array(key):
        """An array's values (field() gives the first); a scalar as it is; None when absent."""
        f = r.fields.get(key)
        if f is None or not f.types or f.types[0].name != "ARRAY":
            return field(key)
        return [f.parts[i].tolist()[0] for i in f.data]

    arch = field("general.architecture")
    a = lambda k, d=None: field(f"{arch}.{k}", d)
    n_head = a("attention.head_count")
    d_model = a("embedding_length")
    cfg = Config(arch=arch, n_layer=a("block_count"), d_model=d_model, n_head=n_head,
                 n_kv_head=a("attention.head_count_kv", n_head),
                 d_head=a("attention.key_length", d_model // n_head),
                 rope_theta=a("rope.freq_base", 10000.0),
                 eps=a("attention.layer_norm_rms_epsilon", 1e-5),
                 rope_pairs=arch in ("llama", "mistral"),  # llama.cpp permutes Q/K for these
                 scaling=None)
    st = a("rope.scaling.type")
    if st in ("linear", "yarn"):
        cfg.scaling = dict(type=st, factor=a("rope.scaling.factor", 1.0),
                           orig=a("rope.scaling.original_context_length", 0))
    w = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # outermost first
        arr = dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = arr.reshape(shape)
    if "rope_freqs.weight" in w:  # llama3 scaling, as precomputed per-dimension factors
        cfg.scaling = dict(type="freq_factors", factors=w["rope_freqs.weight"])
    _defaults(cfg)
    cfg.family = arch
    cfg.n_ctx_train = a("context_length", 0)
    if arch == "gemma":
        cfg.norm_plus_one = False  # the converter stored 1 + w; the query scale is head_dim^-0.5
    if arch in ("gemma2", "gemma3"):
        # llama.cpp's query scale (GGUF has no query_pre_attn_scalar): 1/sqrt(head_dim)
        big = cfg.n_layer == (46 if arch == "gemma2" else 62)
        cfg.attn_scale = a("attention.scale",
                           1 / math.sqrt(d_model / n_head if big else cfg.d_head))
        cfg.attn_softcap = a("attn_logit_softcapping")
        cfg.final_softcap = a("final_logit_softcapping")
        cfg.window = a("attention.sliding_window")
        pattern = array(f"{arch}.attention.sliding_window_pattern")
        if isinstance(pattern, list):  # one per layer, true = sliding
            if len(pattern) != cfg.n_layer:
                raise ValueError(f"sliding_window_pattern has {len(pattern)} entries for "
                                 f"{cfg.n_layer} layers")
            cfg.sliding = [bool(b) for b in pattern]
        else:  # every period-th layer global (a period of 1 or 0: all global)
            period = pattern if pattern is not None else (2 if arch == "gemma2" else 6)
            cfg.sliding = [period > 1 and (i + 1) % period != 0 for i in range(cfg.n_layer)]
        if arch == "gemma3":
            cfg.rope_theta_local = a("rope.freq_base_swa", 10000.0)
        cfg.norm_plus_one = False  # the converter stored 1 + w
    if arch == "phi3":
        cfg.window = a("attention.sliding_window")
        cfg.n_rot = a("rope.dimension_count", cfg.d_head)
        if "rope_factors_long.weight" in w:
            orig = a("rope.scaling.original_context_length")
            cfg.scaling = dict(type="longrope", long=w.pop("rope_factors_long.weight"),
                               short=w.pop("rope_factors_short.weight"), orig=orig,
                               attn_factor=a("rope.scaling.attn_factor"))
    n_exp = a("expert_count", 0) or 0
    if n_exp:
        # llama.cpp's MoE graphs route in every layer; which renormalise the chosen weights is
        # fixed per architecture (llama, i.e. Mixtral, and qwen3moe do), unless the file says.
        cfg.n_expert, cfg.n_expert_used = n_exp, a("expert_used_count")
        cfg.norm_topk = bool(a("expert_weights_norm", arch in ("llama", "qwen3moe")))
        cfg.moe = [True] * cfg.n_layer
    cfg.qk_norm_full = arch == "olmoe"
    _split_fused(cfg, w)
    return cfg, w


def _defaults(cfg):
    """The Llama family's values of the per-family switches."""
    cfg.family = getattr(cfg, "family", "llama")
    cfg.attn_scale = 1 / math.sqrt(cfg.d_head)
    cfg.attn_softcap = cfg.final_softcap = None
    cfg.window = None
    cfg.sliding = [False] * cfg.n_layer
    cfg.rope_theta_local = None
    cfg.n_rot = cfg.d_head
    cfg.norm_plus_one = False
    cfg.n_expert = cfg.n_expert_used = 0
    cfg.norm_topk = False
    cfg.moe = [False] * cfg.n_layer  # which layers route over experts
    cfg.qk_norm_full = False  # OLMoE: q/k norms over the whole projection


def _split_fused(cfg, w):
    """Phi-3's fused weights split the way transformers reads them: qkv rows are q, then k, then
    v; gate_up rows are gate, then up (up_states.chunk(2))."""
    qd, kvd = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        qkv = w.pop(p + "attn_qkv.weight", None)
        if qkv is not None:
            w[p + "attn_q.weight"] = qkv[:qd]
            w[p + "attn_k.weight"] = qkv[qd:qd + kvd]
            w[p + "attn_v.weight"] = qkv[qd + kvd:]
        up = w.get(p + "ffn_up.weight")
        if p + "ffn_gate.weight" not in w and up is not None:
            f = up.shape[0] // 2
            w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = up[:f], up[f:]


def _bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def _st_read(path):
    """Reads a safetensors file with numpy alone: name -> (dtype, array)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        base = 8 + n
    data = np.memmap(path, dtype=np.uint8, mode="r")
    dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "U32": np.uint32,
          "I32": np.int32, "F64": np.float64}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        a = np.frombuffer(data[base + b:base + e], dtype=dt[h["dtype"]]).reshape(h["shape"])
        out[name] = (h["dtype"], a)
    return out


HF_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
            "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
            "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
            "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
            "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
            "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
            "pre_feedforward_layernorm": "ffn_norm",
            "post_feedforward_layernorm": "post_ffw_norm",
            "block_sparse_moe.gate": "ffn_gate_inp", "mlp.gate": "ffn_gate_inp",
            "block_sparse_moe.switch_mlp.gate_proj": "ffn_gate_exps",
            "block_sparse_moe.switch_mlp.up_proj": "ffn_up_exps",
            "block_sparse_moe.switch_mlp.down_proj": "ffn_down_exps",
            "mlp.switch_mlp.gate_proj": "ffn_gate_exps", "mlp.switch_mlp.up_proj": "ffn_up_exps",
            "mlp.switch_mlp.down_proj": "ffn_down_exps",
            "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
            "mlp.shared_expert.up_proj": "ffn_up_shexp",
            "mlp.shared_expert.down_proj": "ffn_down_shexp",
            "mlp.shared_expert_gate": "ffn_gate_inp_shexp"}
# One expert's matrix in Hugging Face's per-expert names: the stack it goes into.
HF_EXPERT_NAMES = {"w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps",
                   "gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps",
                   "down_proj": "ffn_down_exps"}
# Gemma 2/3's post_attention_layernorm follows attention; Llama's (and Gemma 1's) precedes the
# MLP.
GEMMA_NAMES = dict(HF_NAMES, post_attention_layernorm="post_attention_norm")


def _hf_name(n, post_norms=False):
    whole = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    stem, kind = n.rsplit(".", 1)
    if stem in whole:
        return f"{whole[stem]}.{kind}"
    parts = stem.split(".")
    names = GEMMA_NAMES if post_norms else HF_NAMES
    if parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        if rest in names:
            return f"blk.{parts[2]}.{names[rest]}.{kind}"
    return n


def _hf_expert(n):
    """model.layers.L.(block_sparse_moe|mlp).experts.E.PROJ.weight -> (the name of layer L's
    stacked [n_expert, out, in] tensor, E); (None, None) for any other name."""
    parts = n.split(".")
    if len(parts) == 8 and parts[:2] == ["model", "layers"] and parts[4] == "experts":
        return f"blk.{parts[2]}.{HF_EXPERT_NAMES[parts[6]]}.{parts[7]}", int(parts[5])
    return None, None


def _hf_load(folder):
    c = json.load(open(os.path.join(folder, "config.json")))
    c = dict(c, **c.get("text_config", {}))
    post_norms = c["model_type"] in ("gemma2", "gemma3", "gemma3_text")
    gemma = post_norms or c["model_type"] == "gemma"
    tensors = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            tensors.update(_st_read(os.path.join(folder, f)))
    q = c.get("quantization")
    w, experts = {}, {}
    for name, (dt, a) in tensors.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        if dt == "U32" and q:
            # MLX affine, along the last axis (of a matrix, or of each matrix of a 3-D stack of
            # experts); a module's own {"bits", "group_size"} in "quantization" overrides the
            # defaults (mlx_lm writes them for the MoE routers).
            stem = name[: -len(".weight")]
            own = q.get(stem) if isinstance(q.get(stem), dict) else {}
            bits, group = own.get("bits", q["bits"]), own.get("group_size", q["group_size"])
            sdt, s = tensors[stem + ".scales"]
            _, b = tensors[stem + ".biases"]
            conv = (lambda x: _bf16_to_f32(x)) if sdt == "BF16" else (lambda x: x.astype(np.float32))
            s, b = conv(s).astype(np.float64), conv(b).astype(np.float64)
            per = 32 // bits
            shifts = (np.arange(per, dtype=np.uint32) * bits)
            lead = a.shape[:-1]
            qv = ((a[..., None] >> shifts) & ((1 << bits) - 1)).reshape(*lead, -1)
            g = qv.reshape(*lead, -1, group).astype(np.float64)
            arr = (g * s[..., None] + b[..., None]).reshape(*lead, -1)
        elif dt == "BF16":
            arr = _bf16_to_f32(a).astype(np.float64)
        else:
            arr = a.astype(np.float64)
        stack, e = _hf_expert(name)
        if stack:
            experts.setdefault(stack, {})[e] = arr
        else:
            w[_hf_name(name, post_norms)] = arr
    for stack, by_e in experts.items():
        w[stack] = np.stack([by_e[e] for e in range(len(by_e))])
    n_head = c["num_attention_heads"]
    cfg = Config(arch=c["model_type"], n_layer=c["num_hidden_layers"], d_model=c["hidden_size"],
                 n_head=n_head, n_kv_head=c.get("num_key_value_heads", n_head),
                 d_head=c.get("head_dim") or c["hidden_size"] // n_head,
                 rope_theta=c.get("rope_theta", 10000.0), eps=c.get("rms_norm_eps", 1e-6),
                 rope_pairs=False, scaling=None)
    rs = c.get("rope_scaling")
    if rs:
        t = rs.get("rope_type", rs.get("type"))
        if t in ("linear", "llama3", "yarn"):
            cfg.scaling = dict(type=t, factor=rs.get("factor", 1.0),
                               orig=rs.get("original_max_position_embeddings", 0),
                               low=rs.get("low_freq_factor", 1.0),
                               high=rs.get("high_freq_factor", 4.0),
                               beta_fast=rs.get("beta_fast", 32.0),
                               beta_slow=rs.get("beta_slow", 1.0))
    _defaults(cfg)
    mt = c["model_type"]
    cfg.family = {"gemma3_text": "gemma3"}.get(mt, mt)
    cfg.n_ctx_train = c.get("max_position_embeddings", 0)
    cfg.norm_plus_one = gemma  # Gemma 1's query scale is head_dim^-0.5, as _defaults has it
    if post_norms:
        g3 = cfg.family == "gemma3"
        cfg.attn_scale = c.get("query_pre_attn_scalar", 256) ** -0.5
        cfg.attn_softcap = c.get("attn_logit_softcapping", None if g3 else 50.0)
        cfg.final_softcap = c.get("final_logit_softcapping", None if g3 else 30.0)
        cfg.window = c.get("sliding_window", 4096)
        if "layer_types" in c:
            cfg.sliding = [t == "sliding_attention" for t in c["layer_types"]]
        else:
            period = c.get("sliding_window_pattern", 6) if g3 else 2
            cfg.sliding = [(i + 1) % period != 0 for i in range(cfg.n_layer)]
        if g3:
            cfg.rope_theta_local = c.get("rope_local_base_freq", 10000.0)
            cfg.rope_theta = c.get("rope_theta", 1000000.0)
    if mt == "phi3":
        cfg.window = c.get("sliding_window")
        cfg.n_rot = int(cfg.d_head * c.get("partial_rotary_factor", 1.0))
        if rs and rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
            orig = rs.get("original_max_position_embeddings",
                          c.get("original_max_position_embeddings"))
            factor = rs.get("factor", c["max_position_embeddings"] / orig)
            af = rs.get("attention_factor")
            if af is None:
                af = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
            cfg.scaling = dict(type="longrope", long=np.array(rs["long_factor"], np.float64),
                               short=np.array(rs["short_factor"], np.float64), orig=orig,
                               attn_factor=af)
    n_exp = c.get("num_local_experts", c.get("num_experts", 0)) or 0
    if n_exp:
        cfg.n_expert, cfg.n_expert_used = n_exp, c["num_experts_per_tok"]
        # Mixtral always renormalises; the others as norm_topk_prob says (default false).
        cfg.norm_topk = mt == "mixtral" or bool(c.get("norm_topk_prob", False))
        dense, step = c.get("mlp_only_layers") or [], c.get("decoder_sparse_step") or 1
        cfg.moe = [i not in dense and (i + 1) % step == 0 for i in range(cfg.n_layer)]
    cfg.qk_norm_full = mt == "olmoe"
    _split_fused(cfg, w)
    return cfg, w


# ---- the model ----

def _rope_freqs(cfg, theta=None, scaling="config", seq_len=0):
    """Inverse frequencies per rotated pair, with the config's scaling, and the attention
    magnitude factor (yarn scales attention by 0.1*ln(factor)+1; longrope by its attention
    factor, with the long factors once seq_len exceeds the original context)."""
    d = cfg.n_rot
    inv = 1.0 / ((theta or cfg.rope_theta) ** (np.arange(0, d, 2, dtype=np.float64) / d))
    mscale = 1.0
    s = cfg.scaling if scaling == "config" else scaling
    if s is None:
        return inv, mscale
    if s["type"] == "longrope":
        ext = s["long"] if seq_len > s["orig"] else s["short"]
        return inv / ext, s["attn_factor"]
    if s["type"] == "linear":
        return inv / s["factor"], mscale
    if s["type"] == "freq_factors":
        return inv / s["factors"].astype(np.float64), mscale
    if s["type"] == "llama3":
        low_wl = s["orig"] / s["low"]
        high_wl = s["orig"] / s["high"]
        wl = 2 * math.pi / inv
        smooth = (s["orig"] / wl - s["low"]) / (s["high"] - s["low"])
        scaled = np.where(wl > low_wl, inv / s["factor"], inv)
        mid = (wl <= low_wl) & (wl >= high_wl)
        scaled = np.where(mid, (1 - smooth) * inv / s["factor"] + smooth * inv, scaled)
        return scaled, mscale
    if s["type"] == "yarn":
        f, orig = s["factor"], s["orig"]
        def dim_of(rot):
            return d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(cfg.rope_theta))
        lo = max(math.floor(dim_of(s["beta_fast"])), 0)
        hi = min(math.ceil(dim_of(s["beta_slow"])), d - 1)
        ramp = np.clip((np.arange(d // 2) - lo) / max(hi - lo, 1e-3), 0, 1)
        extrap = 1 - ramp
        inv = inv / f * (1 - extrap) + inv * extrap
        return inv, 0.1 * math.log(f) + 1.0
    raise ValueError(f"rope scaling {s['type']}")


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _cap(x, c):
    return x if not c else c * np.tanh(x / c)


class Model:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.out = w.get("output.weight", w["token_embd.weight"])
        self.gemma = cfg.family in ("gemma", "gemma2", "gemma3")
        self.post_norms = cfg.family in ("gemma2", "gemma3")  # a norm after each sub-layer
        for i in range(cfg.n_layer):  # the config and the tensors must agree on the MoE layers
            has = f"blk.{i}.ffn_gate_inp.weight" in w
            if has != cfg.moe[i]:
                raise ValueError(f"layer {i}: config says moe={cfg.moe[i]}, router present={has}")

    def _norm(self, x, weight):
        if self.cfg.norm_plus_one:
            weight = 1 + weight
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * weight

    def _rope(self, x, pos, freqs):
        """x: [T, H, D]; rotates pairs (2i, 2i+1) or halves (i, i+R/2) of the first R = n_rot
        dims by pos * inv_freq; the other dims pass through (partial rotary)."""
        inv_freq, mscale = freqs
        ang = pos[:, None].astype(np.float64) * inv_freq[None, :]  # [T, R/2]
        cos, sin = np.cos(ang)[:, None, :] * mscale, np.sin(ang)[:, None, :] * mscale
        R = self.cfg.n_rot
        xr, rest = x[..., :R], x[..., R:]
        if self.cfg.rope_pairs:
            a, b = xr[..., 0::2], xr[..., 1::2]
            out = np.empty_like(xr)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
        else:
            h = R // 2
            a, b = xr[..., :h], xr[..., h:]
            out = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
        return np.concatenate([out, rest], axis=-1)

    def _moe(self, h, p):
        """A mixture-of-experts MLP on h [T, d_model], token by token: the softmax of the router
        logits over all experts, the n_expert_used most probable (a stable sort, so ties go to
        the lower id), their probabilities renormalised to sum to 1 if the family does, each
        chosen expert a SwiGLU MLP; then Qwen2-MoE's shared expert, times sigmoid of its gate."""
        c, w = self.cfg, self.w
        logits = h @ w[p + "ffn_gate_inp.weight"].T  # [T, n_expert]
        prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
        prob /= prob.sum(axis=-1, keepdims=True)
        gate, up, down = (w[p + "ffn_gate_exps.weight"], w[p + "ffn_up_exps.weight"],
                          w[p + "ffn_down_exps.weight"])  # [E, F, D], [E, F, D], [E, D, F]
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            chosen = np.argsort(-prob[t], kind="stable")[:c.n_expert_used]
            weight = prob[t, chosen]
            if c.norm_topk:
                weight = weight / weight.sum()
            for e, we in zip(chosen, weight):
                g, u = gate[e] @ h[t], up[e] @ h[t]
                out[t] += we * (down[e] @ (g / (1 + np.exp(-g)) * u))
        if p + "ffn_gate_inp_shexp.weight" in w:
            g = h @ w[p + "ffn_gate_shexp.weight"].T
            u = h @ w[p + "ffn_up_shexp.weight"].T
            shared = (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down_shexp.weight"].T
            z = h @ w[p + "ffn_gate_inp_shexp.weight"].reshape(-1, c.d_model).T  # [T, 1]
            out = out + shared / (1 + np.exp(-z))
        return out

    def new_cache(self):
        return {"k": [None] * self.cfg.n_layer, "v": [None] * self.cfg.n_layer, "pos": 0}

    def run(self, cache, tokens):
        """Appends tokens to the cache and returns their logits [T, n_vocab]."""
        c, w = self.cfg, self.w
        T = len(tokens)
        pos = np.arange(cache["pos"], cache["pos"] + T)
        # transformers recomputes longrope's table from the sequence length of each call
        freqs = _rope_freqs(c, seq_len=cache["pos"] + T)
        freqs_local = _rope_freqs(c, theta=c.rope_theta_local, scaling=None) \
            if c.rope_theta_local else freqs
        x = w["token_embd.weight"][np.asarray(tokens)]
        if self.gemma:
            x = x * math.sqrt(c.d_model)
        rep = c.n_head // c.n_kv_head
        for i in range(c.n_layer):
            p = f"blk.{i}."
            sliding = c.window and (c.family == "phi3" or c.sliding[i])
            h = self._norm(x, w[p + "attn_norm.weight"])
            q = h @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0)
            k = h @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0)
            v = h @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0)
            if c.qk_norm_full:  # OLMoE: one RMSNorm over all heads' dims, before the split
                q = self._norm(q, w[p + "attn_q_norm.weight"])
                k = self._norm(k, w[p + "attn_k_norm.weight"])
            q = q.reshape(T, c.n_head, c.d_head)
            k = k.reshape(T, c.n_kv_head, c.d_head)
            v = v.reshape(T, c.n_kv_head, c.d_head)
            if p + "attn_q_norm.weight" in w and not c.qk_norm_full:  # per head (Qwen3, Gemma 3)
                q = self._norm(q, w[p + "attn_q_norm.weight"])
                k = self._norm(k, w[p + "attn_k_norm.weight"])
            f = freqs_local if sliding else freqs
            q, k = self._rope(q, pos, f), self._rope(k, pos, f)
            if cache["k"][i] is not None:
                k = np.concatenate([cache["k"][i], k])
                v = np.concatenate([cache["v"][i], v])
            cache["k"][i], cache["v"][i] = k, v
            S = k.shape[0]
            kk = np.repeat(k, rep, axis=1)  # [S, H, D]
            vv = np.repeat(v, rep, axis=1)
            scores = _cap(np.einsum("thd,shd->hts", q, kk) * c.attn_scale, c.attn_softcap)
            mask = pos[:, None] < np.arange(S)[None, :]  # causal
            if sliding:  # keys within the window: kv > q - window
                mask |= np.arange(S)[None, :] <= pos[:, None] - c.window
            scores = np.where(mask[None], -np.inf, scores)
            scores -= scores.max(axis=-1, keepdims=True)
            prob = np.exp(scores)
            prob /= prob.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", prob, vv).reshape(T, c.n_head * c.d_head)
            o = att @ w[p + "attn_output.weight"].T
            if self.post_norms:
                o = self._norm(o, w[p + "post_attention_norm.weight"])
            x = x + o
            h = self._norm(x, w[p + "ffn_norm.weight"])
            if c.moe[i]:
                m = self._moe(h, p)
            else:
                g = h @ w[p + "ffn_gate.weight"].T
                u = h @ w[p + "ffn_up.weight"].T
                act = _gelu_tanh(g) if self.gemma else g / (1 + np.exp(-g))
                m = (act * u) @ w[p + "ffn_down.weight"].T
            if self.post_norms:
                m = self._norm(m, w[p + "post_ffw_norm.weight"])
            x = x + m
        cache["pos"] += T
        return _cap(self._norm(x, w["output_norm.weight"]) @ self.out.T, c.final_softcap)

    def forward(self, tokens):
        return self.run(self.new_cache(), tokens)

    def greedy(self, tokens, n):
        cache = self.new_cache()
        logits = self.run(cache, tokens)
        out = []
        for _ in range(n):
            t = int(np.argmax(logits[-1]))
            out.append(t)
            logits = self.run(cache, [t])
        return out


def load(path):
    cfg, w = _gguf_load(path) if os.path.isfile(path) else _hf_load(path)
    return Model(cfg, w)
