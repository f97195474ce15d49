#!/usr/bin/env python3
"""The reference forward pass: the exact math of a Llama-family model on dequantized weights.

This is the oracle hearth's CPU engine is checked against (tests/parity). It is deliberately
plain: numpy in float64, weights dequantized by the `gguf` package (GGUF files) or read with
numpy from safetensors (MLX affine weights are dequantized here by their definition,
w = scale * q + bias), no quantization of activations, no fused kernels. It covers the families
issue 4 names: Llama 2/3.x (incl. llama3 / linear / yarn rope scaling), SmolLM2, Mistral,
Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm), with tied or separate output embeddings.

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
    return cfg, w


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
            "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def _hf_name(n):
    whole = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    stem, kind = n.rsplit(".", 1)
    if stem in whole:
        return f"{whole[stem]}.{kind}"
    parts = stem.split(".")
    if parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        if rest in HF_NAMES:
            return f"blk.{parts[2]}.{HF_NAMES[rest]}.{kind}"
    return n


def _hf_load(folder):
    c = json.load(open(os.path.join(folder, "config.json")))
    tensors = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            tensors.update(_st_read(os.path.join(folder, f)))
    q = c.get("quantization")
    w = {}
    for name, (dt, a) in tensors.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        if dt == "U32" and q:
            stem = name[: -len(".weight")]
            bits, group = q["bits"], q["group_size"]
            sdt, s = tensors[stem + ".scales"]
            _, b = tensors[stem + ".biases"]
            conv = (lambda x: _bf16_to_f32(x)) if sdt == "BF16" else (lambda x: x.astype(np.float32))
            s, b = conv(s).astype(np.float64), conv(b).astype(np.float64)
            per = 32 // bits
            shifts = (np.arange(per, dtype=np.uint32) * bits)
            qv = ((a[..., None] >> shifts) & ((1 << bits) - 1)).reshape(a.shape[0], -1)
            g = qv.reshape(a.shape[0], -1, group).astype(np.float64)
            arr = (g * s[..., None] + b[..., None]).reshape(a.shape[0], -1)
        elif dt == "BF16":
            arr = _bf16_to_f32(a).astype(np.float64)
        else:
            arr = a.astype(np.float64)
        w[_hf_name(name)] = arr
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
    return cfg, w


# ---- the model ----

def _rope_freqs(cfg):
    """Inverse frequencies per rotated pair, with the config's scaling, and the attention
    magnitude factor (yarn scales attention by 0.1*ln(factor)+1)."""
    d = cfg.d_head
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    mscale = 1.0
    s = cfg.scaling
    if s is None:
        return inv, mscale
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


class Model:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.inv_freq, self.mscale = _rope_freqs(cfg)
        self.out = w.get("output.weight", w["token_embd.weight"])

    def _norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * weight

    def _rope(self, x, pos):
        """x: [T, H, D]; rotates pairs (2i, 2i+1) or halves (i, i+D/2) by pos * inv_freq."""
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]  # [T, D/2]
        cos, sin = np.cos(ang)[:, None, :] * self.mscale, np.sin(ang)[:, None, :] * self.mscale
        if self.cfg.rope_pairs:
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def new_cache(self):
        return {"k": [None] * self.cfg.n_layer, "v": [None] * self.cfg.n_layer, "pos": 0}

    def run(self, cache, tokens):
        """Appends tokens to the cache and returns their logits [T, n_vocab]."""
        c, w = self.cfg, self.w
        T = len(tokens)
        pos = np.arange(cache["pos"], cache["pos"] + T)
        x = w["token_embd.weight"][np.asarray(tokens)]
        rep = c.n_head // c.n_kv_head
        for i in range(c.n_layer):
            p = f"blk.{i}."
            h = self._norm(x, w[p + "attn_norm.weight"])
            q = h @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0)
            k = h @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0)
            v = h @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0)
            q = q.reshape(T, c.n_head, c.d_head)
            k = k.reshape(T, c.n_kv_head, c.d_head)
            v = v.reshape(T, c.n_kv_head, c.d_head)
            if p + "attn_q_norm.weight" in w:
                q = self._norm(q, w[p + "attn_q_norm.weight"])
                k = self._norm(k, w[p + "attn_k_norm.weight"])
            q, k = self._rope(q, pos), self._rope(k, pos)
            if cache["k"][i] is not None:
                k = np.concatenate([cache["k"][i], k])
                v = np.concatenate([cache["v"][i], v])
            cache["k"][i], cache["v"][i] = k, v
            S = k.shape[0]
            kk = np.repeat(k, rep, axis=1)  # [S, H, D]
            vv = np.repeat(v, rep, axis=1)
            scores = np.einsum("thd,shd->hts", q, kk) / math.sqrt(c.d_head)
            mask = pos[:, None] < np.arange(S)[None, :]  # causal
            scores = np.where(mask[None], -np.inf, scores)
            scores -= scores.max(axis=-1, keepdims=True)
            prob = np.exp(scores)
            prob /= prob.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", prob, vv).reshape(T, c.n_head * c.d_head)
            x = x + att @ w[p + "attn_output.weight"].T
            h = self._norm(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "ffn_down.weight"].T
        cache["pos"] += T
        return self._norm(x, w["output_norm.weight"]) @ self.out.T

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
