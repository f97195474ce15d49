#!/usr/bin/env python3
"""seed_safetensors.py - writes a seed corpus for fuzz_safetensors into the directory argv[1].

Each seed is a small safetensors file built with struct and json only (no third-party package):
valid files covering every dtype, scalars, empty tensors, metadata and an MLX-style quantized
layer, then a few broken ones (truncated, bad length, overlapping ranges, bad dtype) so the
fuzzer starts next to every error path.
"""
import json
import os
import struct
import sys

DTYPE_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4,
    "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
}


def build(tensors, metadata=None, pad=0):
    """tensors: list of (name, dtype, shape); laid out back to back in the order given."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape in tensors:
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    data = bytes(i * 37 % 251 for i in range(offset))
    return struct.pack("<Q", len(text)) + text + data


def raw(header, data_len):
    """A file from a header given as a dict or as bytes, with data_len bytes of data."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(data_len)


def seeds():
    yield "empty", build([])
    yield "metadata_only", build([], {"format": "pt"})
    yield "one_f32", build([("w", "F32", [2, 3])])
    yield "scalar", build([("s", "F64", [])])
    yield "zero_dim", build([("e", "F16", [0, 4]), ("x", "U8", [3])])
    yield "all_dtypes", build([(f"t_{k.lower()}", k, [2]) for k in DTYPE_SIZE])
    yield "padded", build([("a", "BF16", [4]), ("b", "I32", [1, 2])], {"format": "pt"}, pad=5)
    yield "mlx_q4", build([
        ("model.layers.0.self_attn.q_proj.weight", "U32", [4, 2]),
        ("model.layers.0.self_attn.q_proj.scales", "F16", [4, 1]),
        ("model.layers.0.self_attn.q_proj.biases", "F16", [4, 1]),
        ("model.norm.weight", "F16", [4]),
    ], {"format": "mlx"})
    yield "hf_llama", build([
        ("lm_head.weight", "BF16", [8, 4]),
        ("model.embed_tokens.weight", "BF16", [8, 4]),
        ("model.layers.0.input_layernorm.weight", "BF16", [4]),
    ], {"format": "pt", "total_size": "136"})
    yield "deep_shape", build([("d", "U8", [1, 2, 1, 2, 1, 2, 1, 2])])
    yield "unicode_name", build([("gewicht_\u00fc\u4e2d", "I16", [3])])

    good = build([("a", "F16", [2, 2]), ("b", "U8", [5])], {"format": "mlx"})
    yield "bad_truncated_data", good[:-3]
    yield "bad_truncated_header", good[:20]
    yield "bad_short", good[:5]
    yield "bad_length", struct.pack("<Q", 1 << 40) + good[8:]
    yield "bad_dtype", raw({"a": {"dtype": "Q4K", "shape": [2], "data_offsets": [0, 2]}}, 2)
    yield "bad_shape", raw({"a": {"dtype": "U8", "shape": [2, -2], "data_offsets": [0, 4]}}, 4)
    yield "bad_size", raw({"a": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 10]}}, 12)
    yield "bad_overlap", raw({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                              "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, 6)
    yield "bad_duplicate", raw(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                               b'"a":{"dtype":"U8"}}', 1)

def main():
    if len(sys.argv) != 2:
        sys.exit("usage: seed_safetensors.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, blob in seeds():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
