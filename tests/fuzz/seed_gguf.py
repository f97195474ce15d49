#!/usr/bin/env python3
"""seed_gguf.py - writes a seed corpus for fuzz_gguf into the directory given as argv[1].

Small valid GGUF v2/v3 files (every kv type, string arrays, 1-3 tensors of F32/F16/Q4_0/Q8_0/Q4_K,
default and custom alignment) built with plain struct packing, plus a few broken ones (truncated,
bad counts, duplicate keys, overlapping tensors) so the fuzzer starts next to the error paths.
Standard library only; output is deterministic."""
import os
import struct
import sys

# value types (gguf.h hx_gguf_type)
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block size, bytes per block)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34),
        "Q4_K": (12, 256, 144)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, [ne...], ggml type name)]. Tensors are laid out
    in order, each at the next multiple of the alignment; the file ends at the last one's end."""
    infos, offset, sizes = b"", 0, []
    for name, ne, tname in tensors:
        tid, bn, bb = GGML[tname]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // bn * bb
        offset = (offset + alignment - 1) // alignment * alignment
        infos += gstr(name) + struct.pack("<I", len(ne))
        infos += b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", tid, offset)
        sizes.append((offset, nbytes))
        offset += nbytes
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    out += b"".join(gstr(k) + struct.pack("<I", t) + value(t, v) for k, t, v in kvs)
    out += infos
    if tensors:
        out += b"\0" * (-len(out) % alignment)
        data = bytearray()
        for off, nbytes in sizes:
            data += b"\0" * (off - len(data))
            data += bytes((i * 31 + off) & 0xFF for i in range(nbytes))
        out += bytes(data)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: seed_gguf.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    arch = [("general.architecture", STRING, "llama")]
    every = [
        ("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 60000), ("t.i16", I16, -30000),
        ("t.u32", U32, 4000000000), ("t.i32", I32, -2000000000), ("t.f32", F32, 1.5),
        ("t.bool", BOOL, 1), ("t.str", STRING, "h\u00e9llo"), ("t.u64", U64, 1 << 40),
        ("t.i64", I64, -(1 << 40)), ("t.f64", F64, 3.25),
        ("t.arr_i32", ARRAY, (I32, [1, -2, 3])), ("t.arr_f32", ARRAY, (F32, [0.5, 1.5])),
        ("t.arr_empty", ARRAY, (U8, [])),
    ]
    vocab = [("tokenizer.ggml.model", STRING, "gpt2"),
             ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "a", "b", "", "\u00e9"])),
             ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 1, 1, 1, 1])),
             ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b", "\u0120 a"])),
             ("tokenizer.ggml.add_bos_token", BOOL, 0)]
    llama = [("llama.block_count", U32, 2), ("llama.embedding_length", U32, 64),
             ("llama.rope.freq_base", F32, 10000.0), ("general.alignment", U32, 64)]
    seeds = {
        "empty_v3": gguf([], []),
        "empty_v2": gguf([], [], version=2),
        "every_kv_type": gguf(arch + every, []),
        "vocab_only": gguf(arch + vocab, []),
        "one_f32": gguf(arch, [("w", [8], "F32")]),
        "f16_matrix": gguf(arch, [("w", [4, 3], "F16"), ("b", [4], "F32")]),
        "q4_0_q8_0": gguf(arch + every, [("q4", [64, 2], "Q4_0"), ("q8", [32], "Q8_0")]),
        "q4_k": gguf(arch, [("k", [256, 2, 1, 1], "Q4_K")]),
        "llama_like": gguf(arch + llama + vocab,
                           [("token_embd.weight", [64, 6], "Q8_0"),
                            ("blk.0.attn_q.weight", [256, 2], "Q4_K"),
                            ("output_norm.weight", [64], "F32")], alignment=64),
        "three_types_v2": gguf(arch + every[:4],
                               [("a", [32], "F16"), ("b", [32], "Q4_0"), ("c", [2], "F32")],
                               version=2),
    }
    good = seeds["q4_0_q8_0"]
    seeds.update({
        "bad_truncated_half": good[: len(good) // 2],
        "bad_truncated_data": good[:-1],
        "bad_version1": b"GGUF" + struct.pack("<IQQ", 1, 0, 0),
        "bad_huge_kv_count": b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 60) + gstr("k"),
        "bad_duplicate_key": gguf([("k", U8, 1), ("k", U8, 2)], []),
        "bad_nested_array": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("n")
                            + struct.pack("<IIQ", ARRAY, ARRAY, 0),
        "bad_overlap": gguf([], [("a", [8], "F32"), ("b", [8], "F32")]).replace(
            struct.pack("<IQ", 0, 32), struct.pack("<IQ", 0, 0)),
        "bad_string_len": gguf([("k", STRING, "abc")], []).replace(
            struct.pack("<Q", 3) + b"abc", struct.pack("<Q", 1 << 63) + b"abc"),
    })
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out_dir, name + ".gguf"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out_dir}")


if __name__ == "__main__":
    main()
