#!/usr/bin/env python3
"""seed_tokenizer.py - writes a seed corpus for fuzz_tokenizer into the directory given as argv[1].

Small valid tokenizer.json files (a vocabulary of a few dozen tokens) that between them use every
model option, normalizer, pre-tokenizer, decoder and post-processor hearth reads, plus broken
ones next to the error paths: truncated JSON, wrong types, unknown types, merges naming missing
tokens, bad regexes, out-of-range ids. Standard library only; output is deterministic.
"""
import json
import os
import sys

SP = "\u2581"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def byte_char(b):
    self = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in self:
        return chr(b)
    return chr(0x100 + sorted(set(range(256)) - set(self)).index(b))


def base_vocab(byte_level=False, spm=False):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_level:
        for b in range(256):
            vocab.setdefault(byte_char(b), len(vocab))
    elif spm:
        for b in range(256):
            vocab[f"<0x{b:02X}>"] = len(vocab)
        vocab[SP] = len(vocab)
    for c in LETTERS + "0123456789 .,!?'":
        vocab.setdefault(c, len(vocab))
    merges = []
    for a, b in [("t", "h"), ("th", "e"), ("a", "n"), ("an", "d"), ("i", "n"), ("in", "g"),
                 ("e", "r"), ("o", "n")]:
        vocab.setdefault(a + b, len(vocab))
        merges.append(f"{a} {b}")
    if byte_level:
        g = byte_char(0x20)
        vocab[g + "t"] = len(vocab)
        vocab[g + "the"] = len(vocab)
        merges += [f"{g} t", f"{g}t he"]
        vocab.setdefault("he", len(vocab))
        merges.insert(0, "h e")
    if spm:
        vocab[SP + "the"] = len(vocab)
        merges.append(f"{SP} the")
    return vocab, merges


def added(vocab):
    n = len(vocab)

    def tok(i, content, special, lstrip=False, rstrip=False, normalized=None, single=False):
        return {"id": i, "content": content, "single_word": single, "lstrip": lstrip,
                "rstrip": rstrip, "normalized": (not special) if normalized is None else normalized,
                "special": special}
    return [tok(0, "<unk>", True), tok(1, "<s>", True), tok(2, "</s>", True, rstrip=True),
            tok(n, "<|im_end|>", True, lstrip=True), tok(n + 1, "[X]", False, normalized=False,
                                                          single=True),
            tok(n + 2, " the", False, normalized=True)]


def tokenizer(model_extra=None, normalizer=None, pre=None, decoder=None, post=None,
              byte_level=False, spm=False, pair_merges=False):
    vocab, merges = base_vocab(byte_level, spm)
    if pair_merges:
        merges = [m.split(" ") for m in merges]
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": False,
             "byte_fallback": spm, "vocab": vocab, "merges": merges}
    model.update(model_extra or {})
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added(vocab),
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
            "decoder": decoder, "model": model}


BL_PRE = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
BL_DEC = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
SPM_DEC = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
TEMPLATE = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}


def seeds():
    yield "bytelevel", tokenizer(pre=BL_PRE, decoder=BL_DEC, byte_level=True)
    yield "bytelevel_digits_nfc", tokenizer(
        normalizer={"type": "NFC"}, byte_level=True, decoder=BL_DEC,
        pre={"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                   BL_PRE]},
        post={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False})
    yield "qwen_like", tokenizer(
        byte_level=True, decoder=BL_DEC, model_extra={"ignore_merges": True},
        pre={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+"
                                                   r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                                                   r"|\s*[\r\n]+|\s+(?!\S)|\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]})
    yield "falcon_like", tokenizer(
        byte_level=True, decoder=BL_DEC, pair_merges=True,
        pre={"type": "Sequence", "pretokenizers": [
            {"type": "Punctuation", "behavior": "Contiguous"}, BL_PRE,
            {"type": "Digits", "individual_digits": False},
            {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated",
             "invert": False}]})
    yield "llama_spm", tokenizer(
        spm=True, decoder=SPM_DEC, post=TEMPLATE, model_extra={"fuse_unk": True},
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP},
            {"type": "Replace", "pattern": {"String": " "}, "content": SP}]})
    yield "mistral_spm", tokenizer(
        spm=True, decoder=SPM_DEC, post=TEMPLATE,
        pre={"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False})
    yield "metaspace_split", tokenizer(
        spm=True, pre={"type": "Metaspace", "replacement": SP, "add_prefix_space": True},
        decoder={"type": "Metaspace", "replacement": SP, "prepend_scheme": "always"})
    yield "mixed", tokenizer(
        model_extra={"continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"},
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True,
                                                      "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": r"\d{3,}"}, "content": "#"},
            {"type": "NFD"}, {"type": "NFKD"}]},
        pre={"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Punctuation"},
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious",
             "invert": False},
            {"type": "Split", "pattern": {"String": "x"}, "behavior": "MergedWithNext",
             "invert": True},
            {"type": "CharDelimiterSplit", "delimiter": "q"},
            {"type": "Punctuation", "behavior": "MergedWithNext"}]},
        decoder={"type": "BPEDecoder", "suffix": "</w>"},
        post={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]})
    yield "whitespace_bert", tokenizer(
        normalizer={"type": "ByteLevel"},
        pre={"type": "Sequence", "pretokenizers": [{"type": "Whitespace"},
                                                   {"type": "BertPreTokenizer"}]},
        decoder={"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Strip",
                                                                     "content": "a", "start": 2,
                                                                     "stop": 1}]},
        post={"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": True,
                                                  "trim_offsets": False, "use_regex": True},
                                                 TEMPLATE]})


def broken(valid):
    text = json.dumps(valid)
    yield "truncated", text[:len(text) // 2]
    yield "not_object", "[1, 2, 3]"
    v = json.loads(text)
    v["model"]["type"] = "WordPiece"
    yield "wordpiece", json.dumps(v)
    v = json.loads(text)
    v["model"]["merges"].append("zz qq")
    yield "bad_merge", json.dumps(v)
    v = json.loads(text)
    v["model"]["vocab"]["big"] = 1 << 40
    yield "huge_id", json.dumps(v)
    v = json.loads(text)
    v["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(unclosed"},
                          "behavior": "Isolated"}
    yield "bad_regex", json.dumps(v)
    v = json.loads(text)
    v["added_tokens"][0]["id"] = "zero"
    yield "bad_added", json.dumps(v)
    v = json.loads(text)
    v["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}
    yield "unknown_normalizer", json.dumps(v)
    v = json.loads(text)
    v["decoder"] = {"type": "Strip", "content": "ab", "start": 1, "stop": 0}
    yield "bad_strip", json.dumps(v)
    v = json.loads(text)
    v["model"]["vocab"]["\u0000"] = v["model"]["vocab"].pop("q")  # NUL: jansson needs help
    yield "nul_token", json.dumps(v)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    first = None
    for name, tok in seeds():
        first = first or tok
        with open(os.path.join(out, f"valid_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
    for name, text in broken(first):
        with open(os.path.join(out, f"broken_{name}.json"), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
