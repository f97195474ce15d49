#!/usr/bin/env python3
"""seed_hub.py - writes a seed corpus for fuzz_hub into the directory given as argv[1].

Hub file listings in the shape of GET /api/models/REPO/revision/main?blobs=true (safetensors
repos with an index, GGUF repos with quants, split files, folders and projector files, unsafe
names), safetensors index files, and plain names (repo ids with selectors, ETags, paths); then
byte-level mutations. Standard library only; output is deterministic."""
import json
import random
import sys

from seedlib import mutate, write_seeds

SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def sib(name, size=None, lfs=False):
    s = {"rfilename": name}
    if size is not None:
        s["size"] = size
    if lfs:
        s["lfs"] = {"sha256": SHA, "size": size or 1, "pointerSize": 134}
    return s


def listing(files, sha="0123456789abcdef0123456789abcdef01234567"):
    return {"_id": "x", "id": "org/m", "sha": sha, "private": False, "siblings": files}


def seeds():
    st = [sib(".gitattributes", 1), sib("README.md", 2), sib("config.json", 600),
          sib("generation_config.json", 100), sib("tokenizer.json", 9000),
          sib("tokenizer_config.json", 900), sib("chat_template.jinja", 50),
          sib("model.safetensors.index.json", 300),
          sib("model-00001-of-00002.safetensors", 5 << 30, True),
          sib("model-00002-of-00002.safetensors", 1 << 30, True),
          sib("consolidated.safetensors", 6 << 30, True)]
    gg = [sib("README.md"), sib("m-Q4_K_M.gguf", 400, True), sib("m-Q4_K_S.gguf", 390, True),
          sib("m-Q4_0.gguf", 380, True), sib("m-Q8_0.gguf", 700, True),
          sib("mmproj-m-f16.gguf", 90, True), sib("m-IQ4_XS.gguf", 350, True),
          sib("F16/m-F16-00001-of-00002.gguf", 900, True),
          sib("F16/m-F16-00002-of-00002.gguf", 900, True),
          sib("BF16/m-BF16-00002-of-00003.gguf")]
    out = [
        json.dumps(listing(st)),
        json.dumps(listing(gg)),
        json.dumps(listing(gg[:2])),
        json.dumps(listing([sib("a-Q8_0.gguf"), sib("a-F16.gguf")])),
        json.dumps(listing([sib("../x"), sib("/etc/passwd"), sib("a//b"), sib("a\\b"), {"x": 1},
                            sib("config.json"), sib("config.json")])),
        json.dumps({"siblings": []}),
        json.dumps({"sha": "../../evil", "siblings": []}),
        json.dumps({"sha": 5, "siblings": [sib("x.gguf")]}),
        json.dumps({"siblings": {}}),
        json.dumps({"weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                   "b.weight": "model-00002-of-00002.safetensors"},
                    "siblings": st}),
        json.dumps({"metadata": {"total_size": 5}, "weight_map": {"a": "../x.safetensors"},
                    "siblings": st}),
        json.dumps({"weight_map": {"a": "missing.safetensors"}, "siblings": st}),
        "[]", "{", "", "null",
        "Qwen/Qwen3-0.6B", "bartowski/M-GGUF:Q4_K_M", "org/m:", "a--b/c:Q8_0",
        "W/\"" + SHA + "\"", "\"../../x\"", "F16/m-F16-00002-of-00002.gguf",
        "m-00000-of-00001.gguf", "sub/../../x",
    ]
    return [s.encode() for s in out]


def main(out):
    files = seeds()
    mutate(files, random.Random(5), 200, 4, 16, 32)
    write_seeds(out, files)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
