"""Split GGUF files (llama.cpp's gguf-split form, NAME-0000k-of-0000n.gguf) load as one model.

gen_tiny_gguf.py writes the Q8_0 tiny Llama whole and split in three parts (gguf-py's writer,
8 tensors a part). Opened by its first part or by its folder, the split model must give the
same logits, bit for bit, as the whole file; a later part, or a set with a part missing, is
refused with a message that says which part.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
TOOL = os.path.join(BUILD, "hx-logits")
TOKENS = json.dumps(list(range(3, 60)))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("gguf")
    if not os.path.exists(TOOL):
        pytest.skip(f"{TOOL} not built")
    out = tmp_path_factory.mktemp("split")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_tiny_gguf.py"),
                    str(out)], check=True)
    return out


def logits(model, tmp_path):
    p = subprocess.run([TOOL, str(model), str(tmp_path / "l.bin")], input=TOKENS,
                       capture_output=True, text=True)
    return p, (np.fromfile(tmp_path / "l.bin", dtype=np.float32) if p.returncode == 0 else None)


def test_split_file_equals_the_whole_file(models, tmp_path):
    parts = sorted(os.listdir(models / "split"))
    assert parts == [f"tiny-llama-q8_0-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    _, whole = logits(models / "tiny-llama-q8_0.gguf", tmp_path)
    for model in (models / "split" / parts[0], models / "split"):
        p, split = logits(model, tmp_path)
        assert p.returncode == 0, p.stderr
        assert split.shape == whole.shape and np.array_equal(split, whole)


def test_a_later_part_or_a_missing_part_is_named(models, tmp_path):
    p, _ = logits(models / "split" / "tiny-llama-q8_0-00002-of-00003.gguf", tmp_path)
    assert p.returncode != 0 and "is part 2 of a split GGUF: open its first part" in p.stderr
    partial = tmp_path / "partial"
    partial.mkdir()
    for k in (1, 2):
        shutil.copy(models / "split" / f"tiny-llama-q8_0-0000{k}-of-00003.gguf", partial)
    for model in (partial / "tiny-llama-q8_0-00001-of-00003.gguf", partial):
        p, _ = logits(model, tmp_path)
        assert p.returncode != 0
        assert "part 3 of this split GGUF is missing" in p.stderr, p.stderr
