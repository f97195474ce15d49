"""A mixture-of-experts model whose description disagrees with its tensors is refused by name.

From tiny-mixtral (gen_tiny_models.py): a config claiming 9 experts (the router has 8 rows), or
0 or 9 experts per token, must fail to load with a message naming the tensor or the numbers,
never run.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
TOOL = os.path.join(BUILD, "hx-logits")


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    if not os.path.exists(TOOL):
        pytest.skip(f"{TOOL} not built")
    out = tmp_path_factory.mktemp("moe")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_tiny_models.py"),
                    str(out)], check=True)
    return out / "tiny-mixtral"


@pytest.mark.parametrize("change,message", [
    ({"num_local_experts": 9}, "blk.0.ffn_gate_inp has shape [8, 64], expected [9, 64]"),
    ({"num_experts_per_tok": 0}, "inconsistent mixture of experts (8 experts, 0 per token"),
    ({"num_experts_per_tok": 9}, "inconsistent mixture of experts (8 experts, 9 per token"),
])
def test_inconsistent_experts_are_refused(mixtral, tmp_path, change, message):
    bad = tmp_path / "bad"
    shutil.copytree(mixtral, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg.update(change)
    (bad / "config.json").write_text(json.dumps(cfg))
    p = subprocess.run([TOOL, str(bad), str(tmp_path / "l.bin")], input="[1, 2, 3]",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and message in p.stderr, p.stderr
