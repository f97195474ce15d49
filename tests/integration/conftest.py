"""Shared fixtures: the built binary, the starter model and tiny generated models."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HEARTH_BUILD", os.path.join(ROOT, "build"))
HEARTH = os.path.join(BUILD, "hearth")
HEARTH_HOME = os.environ.get("HEARTH_HOME", os.path.expanduser("~/.cache/hearth"))
STARTER = os.path.join(HEARTH_HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run(*args, env=None, check=False):
    """Runs the hearth binary; returns the CompletedProcess (text mode)."""
    if not os.path.exists(HEARTH):
        pytest.skip(f"hearth binary not built at {HEARTH}")
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([HEARTH, *args], capture_output=True, text=True, env=e, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"hearth {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def inspect_json(model, *extra, env=None):
    p = run("inspect", model, "--json", *extra, env=env, check=True)
    return json.loads(p.stdout)


@pytest.fixture(scope="session")
def starter():
    if not os.path.exists(STARTER):
        pytest.skip(f"starter model absent ({STARTER}); run scripts/starter-model.sh")
    return STARTER


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Folder of tiny random-weight models written by tests/tools/gen_tiny_models.py."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_tiny_models.py"),
                    str(out)], check=True)
    return out
