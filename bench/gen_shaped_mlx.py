#!/usr/bin/env python3
"""Writes a random-weight MLX-quantized model folder in the shape of a real model, for speed
benchmarks only.

usage: gen_shaped_mlx.py OUT_DIR [--shape llama-3.1-8b] [--bits 4] [--group-size 64] [--layers N]

The folder is what mlx_lm.convert -q writes, and what hearth opens as an MLX model:
  config.json       the Hugging Face config of the shape (model_type "llama" or "qwen2") with
                    "quantization": {"group_size": 64, "bits": 4} (also as
                    "quantization_config", as newer mlx_lm writes it)
  model.safetensors every linear layer and the embedding as mlx_lm's QuantizedLinear /
                    QuantizedEmbedding hold them: NAME.weight (U32, [out, in * bits / 32], the
                    codes packed little-endian), NAME.scales and NAME.biases (BF16, [out, in /
                    group_size]; w = scale * q + bias); the RMSNorm weights BF16 ones; Qwen2's
                    q/k/v_proj.bias BF16 (mlx_lm leaves them unquantized); lm_head only when the
                    shape does not tie it to the embedding
  tokenizer.json, tokenizer_config.json
                    the byte-level BPE vocabulary of bench/gen_shaped_gguf.py's "bytes": the 256
                    bytes, <|begin_of_text|> (256, BOS, added first), <|end_of_text|> (257,
                    EOS), <|eot_id|> (258), no merges, so every byte of text is one token;
                    padded to the model's vocabulary with "<|unused_N|>" tokens
Shapes, RoPE base and norm epsilon are those of gen_shaped_gguf.py (the dense ones), so a GGUF
and an MLX folder of one shape compare the formats alone. The codes are random bytes, the
scales random in [0.003, 0.005) and the biases in [-0.04, -0.024) (values of a few hundredths,
like a trained model's); as in gen_shaped_gguf.py they are streamed from small random pools, so
an 8B folder takes about as long as the disk needs for its 4.5 GB. The folder is written as
OUT_DIR.part and renamed when complete. Needs only numpy.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_shaped_gguf import (MOE, POOL_BYTES, QWEN2, SHAPES, SPECIALS,  # noqa: E402
                             gpt2_byte_chars, shape_of, stream_pool)


def bf16_bits(a):
    """float32 → bfloat16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def tokenizer_files(out, n_vocab):
    """Writes tokenizer.json and tokenizer_config.json of the built-in byte-level vocabulary,
    padded to n_vocab with tokens "<|unused_N|>" that no text encodes to (there are no merges)
    but that decode to that text, as the GGUF's do: a random model mostly samples them, and a
    streamed reply then still has one non-empty piece per token."""
    vocab = {c: i for i, c in enumerate(gpt2_byte_chars())}
    added = []
    for k, s in enumerate(SPECIALS):
        vocab[s] = 256 + k
        added.append({"id": 256 + k, "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    base = len(vocab)
    vocab.update((f"<|unused_{i}|>", base + i) for i in range(n_vocab - base))
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": SPECIALS[0], "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": SPECIALS[0], "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {SPECIALS[0]: {"id": SPECIALS[0], "ids": [256],
                                                               "tokens": [SPECIALS[0]]}}},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)


def config(shape, layers, bits, group):
    L, d, f, h, kv, V, theta, tied = shape_of(shape, layers)
    qwen2 = shape in QWEN2
    q = {"group_size": group, "bits": bits}
    c = {"architectures": ["Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"],
         "model_type": "qwen2" if qwen2 else "llama", "hidden_size": d, "intermediate_size": f,
         "num_hidden_layers": L, "num_attention_heads": h, "num_key_value_heads": kv,
         "head_dim": d // h, "vocab_size": V, "rms_norm_eps": 1e-6 if qwen2 else 1e-5,
         "rope_theta": theta, "max_position_embeddings": 8192, "tie_word_embeddings": tied,
         "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 256,
         "eos_token_id": 257, "quantization": q, "quantization_config": q}
    if qwen2:
        c.update(use_sliding_window=False, sliding_window=131072, max_window_layers=L)
    else:
        c.update(attention_bias=False, mlp_bias=False)
    return c


def tensor_list(shape, layers, bits, group):
    """[(name, safetensors dtype, shape, kind)] in file order; kind is "codes", "scales",
    "biases" (random from the pools), "ones" or "bias" (small random)."""
    L, d, f, h, kv, V, theta, tied = shape_of(shape, layers)
    hd = d // h
    out = []

    def quantized(stem, rows, cols):
        assert cols % group == 0 and cols * bits % 32 == 0, f"{stem}: {cols} columns"
        out.extend([(stem + ".weight", "U32", (rows, cols * bits // 32), "codes"),
                    (stem + ".scales", "BF16", (rows, cols // group), "scales"),
                    (stem + ".biases", "BF16", (rows, cols // group), "biases")])

    quantized("model.embed_tokens", V, d)
    out.append(("model.norm.weight", "BF16", (d,), "ones"))
    if not tied:
        quantized("lm_head", V, d)
    for i in range(L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", "BF16", (d,), "ones"),
                (p + "post_attention_layernorm.weight", "BF16", (d,), "ones")]
        for name, rows, cols in [("self_attn.q_proj", h * hd, d), ("self_attn.k_proj", kv * hd, d),
                                 ("self_attn.v_proj", kv * hd, d), ("self_attn.o_proj", d, h * hd),
                                 ("mlp.gate_proj", f, d), ("mlp.up_proj", f, d),
                                 ("mlp.down_proj", d, f)]:
            quantized(p + name, rows, cols)
            if shape in QWEN2 and name in ("self_attn.q_proj", "self_attn.k_proj",
                                           "self_attn.v_proj"):
                out.append((p + name + ".bias", "BF16", (rows,), "bias"))
    return sorted(out)  # mlx saves tensors sorted by name


def write_safetensors(path, tensors, rng):
    """Writes tensors (tensor_list's form) as one safetensors file, the data streamed from
    random pools."""
    size = {"U32": 4, "BF16": 2}
    header, off = {}, 0
    for name, dt, shp, _ in tensors:
        n = int(np.prod(shp, dtype=np.int64)) * size[dt]
        header[name] = {"dtype": dt, "shape": list(shp), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "mlx"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # 8-byte aligned data, as the reference writer keeps it
    pools = {"codes": np.frombuffer(rng.bytes(POOL_BYTES), dtype=np.uint8),
             "scales": bf16_bits(rng.uniform(0.003, 0.005, 1 << 20)).view(np.uint8),
             "biases": bf16_bits(rng.uniform(-0.04, -0.024, 1 << 20)).view(np.uint8)}
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, dt, shp, kind in tensors:
            n = int(np.prod(shp, dtype=np.int64))
            if kind == "ones":
                f.write(bf16_bits(np.ones(n, np.float32)).tobytes())
            elif kind == "bias":
                f.write(bf16_bits(rng.standard_normal(n, dtype=np.float32) * 0.02).tobytes())
            else:
                stream_pool(f, pools[kind], n * size[dt], size[dt], rng)


def main():
    dense = sorted(s for s in SHAPES if s not in MOE)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.1-8b", choices=dense)
    ap.add_argument("--bits", type=int, default=4, choices=[4, 8])
    ap.add_argument("--group-size", type=int, default=64, choices=[32, 64, 128])
    ap.add_argument("--layers", type=int, help="override the shape's layer count")
    a = ap.parse_args()
    out = a.out.rstrip("/")
    part = out + ".part"
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    with open(os.path.join(part, "config.json"), "w") as f:
        json.dump(config(a.shape, a.layers, a.bits, a.group_size), f, indent=2)
    tokenizer_files(part, shape_of(a.shape)[5])
    rng = np.random.default_rng(0)
    write_safetensors(os.path.join(part, "model.safetensors"),
                      tensor_list(a.shape, a.layers, a.bits, a.group_size), rng)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.replace(part, out)
    mib = os.path.getsize(os.path.join(out, "model.safetensors")) / 2**20
    print(f"wrote {out}/ ({mib:.0f} MiB of weights)")


if __name__ == "__main__":
    main()
