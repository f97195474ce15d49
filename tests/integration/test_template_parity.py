"""Chat-template parity: `hearth template` against transformers' rendering, byte for byte.

Every template in ../shared/data/templates/*.jinja is rendered with every conversation in
template_cases.CONVERSATIONS by both. A case agrees when the outputs are identical, or when
both fail (the template itself rejects that conversation). test_case_<conv>[<template>] shows
each pair; test_parity_summary requires at least 95% of templates to agree on every
conversation and lists every template that does not, with the reason. Set
HEARTH_TEMPLATE_REPORT=path to also write the per-case results as JSON (docs/templates.md is
written from it).
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import template_cases as tc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HEARTH = os.path.join(BUILD, "hearth")
TEMPLATES = tc.templates_dir(ROOT)
NAMES = sorted(f for f in os.listdir(TEMPLATES) if f.endswith(".jinja")) \
    if os.path.isdir(TEMPLATES) else []
CONVS = list(tc.CONVERSATIONS)

pytest.importorskip("transformers")


def _need():
    if not NAMES:
        pytest.skip(f"no templates at {TEMPLATES} (../shared/data/templates is absent)")
    if not os.path.exists(HEARTH):
        pytest.skip(f"hearth binary not built at {HEARTH}")


_cache = {}


def result(name, conv):
    key = (name, conv)
    if key not in _cache:
        _cache[key] = tc.compare(HEARTH, os.path.join(TEMPLATES, name), conv)
    return _cache[key]


@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("name", NAMES or ["(none)"])
def test_case(name, conv):
    _need()
    agree, detail = result(name, conv)
    assert agree, f"{name} / {conv}: {detail}"


def test_parity_summary():
    _need()
    failing = {}
    report = {}
    for name in NAMES:
        for conv in CONVS:
            agree, detail = result(name, conv)
            report.setdefault(name, {})[conv] = {"agree": agree, "detail": detail}
            if not agree:
                failing.setdefault(name, []).append(f"{conv}: {detail}")
    out = os.environ.get("HEARTH_TEMPLATE_REPORT")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    n_ok = len(NAMES) - len(failing)
    lines = [f"{n_ok} of {len(NAMES)} templates agree on all {len(CONVS)} conversations"]
    for name, why in sorted(failing.items()):
        lines.append(f"  {name}:")
        lines.extend(f"    {w[:300]}" for w in why)
    print("\n".join(lines))
    assert n_ok >= 0.95 * len(NAMES), "\n".join(lines)


def test_starter_model_template_matches_transformers():
    """The starter model's own template, read from its GGUF, through `hearth template smollm2`."""
    home = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))
    gguf_path = os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(gguf_path):
        pytest.skip(f"starter model absent ({gguf_path})")
    if not os.path.exists(HEARTH):
        pytest.skip(f"hearth binary not built at {HEARTH}")
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(gguf_path)

    def field(key):
        f = reader.fields[key]
        return f.parts[f.data[0]]

    template = bytes(field("tokenizer.chat_template")).decode("utf-8")
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def token(key):
        i = int(field(key)[0])
        return bytes(tokens.parts[tokens.data[i]]).decode("utf-8")

    bos, eos = token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")
    for conv in CONVS:
        req = tc.request(conv)
        req.pop("bos_token")
        req.pop("eos_token")
        ok_o, out_o = tc.oracle(template, dict(req, bos_token=bos, eos_token=eos))
        ok_h, out_h = tc.hearth(HEARTH, "smollm2", req)
        assert ok_o == ok_h, f"{conv}: oracle {ok_o} ({out_o[:200]}) vs hearth {ok_h} ({out_h[:200]})"
        if ok_o:
            assert out_h == out_o, f"{conv}: {out_o!r} vs {out_h!r}"
