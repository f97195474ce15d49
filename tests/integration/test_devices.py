"""Device selection through the binary: `hearth devices` (text and --json), the backends in
`hearth --version`, --device on run, chat, fit and serve, and the device in /stats. A device that
cannot be used fails with one clear line and a nonzero exit, never a crash or a silent fallback
to the CPU. The cases that need a GPU, or its absence, skip with the reason."""
import json
import os
import urllib.request

import pytest

from conftest import run
from server import Server


def devices():
    p = run("devices", "--json", check=True)
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def no_gpu():
    d = devices()
    if d["gpus"]:
        names = ", ".join(g["name"] for g in d["gpus"])
        pytest.skip(f"this machine has a GPU ({names}): the no-GPU failure cannot be shown here")
    return d


@pytest.fixture(scope="module")
def gpu():
    d = devices()
    if not d["gpus"]:
        pytest.skip(f"no GPU here: {d['reason']}")
    return d["gpus"][0]


def test_devices_lists_the_cpu():
    p = run("devices", check=True)
    first = p.stdout.splitlines()[0].split()
    assert first[0] == "backends" and "cpu" in first[1:]
    assert "cpu" in p.stdout and "physical core" in p.stdout


def test_devices_json_shape():
    d = devices()
    assert set(d) == {"backends", "gpus", "reason"}
    assert d["backends"][0] == "cpu" and set(d["backends"]) <= {"cpu", "cuda"}
    assert isinstance(d["gpus"], list)
    # A reason exactly when no GPU was found.
    assert (d["reason"] is None) == bool(d["gpus"])
    for i, g in enumerate(d["gpus"]):
        assert g["index"] == i and g["device"] == f"cuda:{i}"
        assert g["name"] and g["sms"] > 0
        assert 0 <= g["free_bytes"] <= g["total_bytes"]
        major, minor = g["compute_capability"].split(".")
        assert int(major) >= 1 and int(minor) >= 0
    if "cuda" not in d["backends"]:
        assert d["gpus"] == [] and "CUDA" in d["reason"]


def test_devices_rejects_unknown_arguments():
    p = run("devices", "--bogus")
    assert p.returncode == 2 and "--bogus" in p.stderr


def test_version_names_every_compiled_backend():
    p = run("--version", check=True)
    line = next(l for l in p.stdout.splitlines() if l.startswith("backends:"))
    for b in devices()["backends"]:
        assert b in line
    assert "cpu (" in line  # the CPU keeps its ISA detail


@pytest.mark.parametrize("verb", ["run", "chat", "fit", "serve"])
def test_help_names_the_device_option(verb):
    p = run(verb, "--help")
    assert p.returncode == 0
    assert "--device" in p.stderr and "cuda:N" in p.stderr


def test_unknown_device_fails_clearly(starter):
    for verb in (("run", "smollm2", "hi"), ("fit", "smollm2"), ("serve", "smollm2", "--port", "0")):
        p = run(*verb, "--device", "bogus")
        assert p.returncode > 0, (verb, p.returncode)  # an exit status, not a signal
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "unknown device 'bogus'" in lines[0], p.stderr
        assert p.stdout == ""


def test_cuda_without_a_gpu_fails_cleanly(starter, no_gpu):
    for verb in (("run", "smollm2", "hi"), ("fit", "smollm2"), ("serve", "smollm2", "--port", "0"),
                 ("run", "smollm2", "hi", "--device", "cuda:1")):
        args = verb if "--device" in verb else (*verb, "--device", "cuda")
        p = run(*args)
        assert p.returncode > 0, (args, p.returncode)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "CUDA" in lines[0], p.stderr
        assert "device 'cuda" in lines[0]
        assert p.stdout == ""


def test_fit_on_the_cpu_is_the_default(starter):
    a = json.loads(run("fit", "smollm2", "--json", "--no-speed", check=True).stdout)
    b = json.loads(run("fit", "smollm2", "--json", "--no-speed", "--device", "cpu",
                       check=True).stdout)
    assert a == b and "device" not in a


def test_stats_names_the_device(starter):
    want = os.environ.get("HEARTH_TEST_DEVICE") or "cpu"
    if want == "cuda":
        want = "cuda:0"
    with Server("smollm2") as s:
        with urllib.request.urlopen(s.url + "/stats", timeout=10) as r:
            st = json.load(r)
    assert st["device"] == want
    if want == "cpu":
        assert "gpu_memory" not in st
    else:
        m = st["gpu_memory"]
        assert 0 < m["free_bytes"] <= m["total_bytes"]


def test_fit_on_a_gpu_reports_its_memory(starter, gpu):
    p = run("fit", "smollm2", "--json", "--device", "cuda")
    assert p.returncode in (0, 1), p.stderr
    d = json.loads(p.stdout)
    assert d["device"] == "cuda:0" and d["gpu_name"] == gpu["name"]
    assert d["gpu_memory"]["total_bytes"] == gpu["total_bytes"]
    assert 0 < d["budget_bytes"] <= d["gpu_memory"]["free_bytes"]
    assert d["repacked"] is False and d["embed_bytes"] == 0 and d["load_bytes"] == 0
    assert d["decode_tok_s"] is None  # the probe measures the host, not the GPU
    text = run("fit", "smollm2", "--device", "cuda").stdout
    assert "cuda:0" in text and gpu["name"] in text


def test_run_on_a_gpu_answers(starter, gpu):
    p = run("run", "smollm2", "What is the capital of France?", "--temp", "0",
            "--max-tokens", "12", "--device", "cuda", check=True)
    assert "Paris" in p.stdout
