"""`hearth fit`: the memory contract on the starter model. The JSON report is consistent with
itself, the predicted total matches the peak memory of a real run that fills its context, and
the exit status says whether the model fits."""
import json
import re

from conftest import run

KEYS = {
    "model", "n_ctx", "n_batch", "n_threads", "kv_type", "repacked", "n_ctx_train",
    "weights_bytes", "weights_packed_bytes", "kv_bytes", "kv_bytes_per_token", "kv_window_layers",
    "kv_window", "scratch_bytes",
    "scratch_reserved_bytes", "embed_bytes", "load_bytes", "overhead_bytes", "total_bytes",
    "budget_bytes", "fits", "max_ctx", "read_bytes_per_token", "bandwidth_bytes_per_s",
    "bandwidth_threads", "decode_tok_s", "decode_tok_s_batch",
}

# Plain prose, so the prompt has the variety of real text (distinct tokens touch the embedding
# table's pages, which the prediction counts).
PROSE = (
    "The old harbour town sits where the river bends before it meets the sea. Fishing boats "
    "leave before dawn and come back at noon with mackerel, crabs and the occasional conger eel, "
    "which the children chase along the quay. In the square, a market opens on Thursdays: "
    "farmers bring cheese, apples, honey and wool; a baker sells rye loaves still warm from the "
    "oven; an old clockmaker repairs watches under a striped awning. Visitors climb the hill to "
    "the lighthouse, whose lamp was first lit in 1821 and was tended by the same family for four "
    "generations. From the gallery you can see the islands, the sandbanks that shift with every "
    "winter storm, and on clear days the mountains far to the north. The town library keeps "
    "logbooks of ships that sank nearby, letters from emigrants who left for Canada and "
    "Argentina, and a collection of recipes for fish stew that nobody agrees about. "
)


def fit_json(*args):
    p = run("fit", "smollm2", "--json", *args)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def test_json_report_is_consistent(starter):
    rc, d = fit_json("--ctx", "1000", "--batch", "3", "--no-speed")
    assert rc == 0 and set(d) == KEYS
    assert d["n_ctx"] == 1000 and d["n_batch"] == 3 and d["kv_type"] == "f16"
    assert d["total_bytes"] == sum(d[k] for k in ("weights_bytes", "kv_bytes", "scratch_bytes",
                                                  "embed_bytes", "load_bytes", "overhead_bytes"))
    # 30 layers x 3 kv heads x 64 dims x K and V x f16; the context in whole blocks of 16
    assert d["kv_bytes_per_token"] == 30 * 3 * 64 * 2 * 2
    assert d["kv_bytes"] == 1008 * 3 * d["kv_bytes_per_token"]
    assert d["fits"] == (d["total_bytes"] <= d["budget_bytes"])
    assert d["max_ctx"] % 16 == 0 and 0 < d["max_ctx"] <= d["n_ctx_train"] == 8192
    assert d["scratch_bytes"] <= d["scratch_reserved_bytes"]
    assert d["weights_bytes"] >= d["weights_packed_bytes"]
    assert d["bandwidth_bytes_per_s"] is None and d["decode_tok_s"] is None
    _, q4 = fit_json("--ctx", "1000", "--batch", "3", "--no-speed", "--kv", "q4")
    assert q4["kv_bytes"] * 64 == d["kv_bytes"] * 20


def test_speed_is_bandwidth_over_bytes_per_token(starter):
    rc, d = fit_json("--ctx", "512", "--batch", "1")
    assert rc == 0
    assert d["bandwidth_bytes_per_s"] > 1e8 and d["bandwidth_threads"] == 2
    assert abs(d["decode_tok_s"] - d["bandwidth_bytes_per_s"] / d["read_bytes_per_token"]) < 1e-3 * d["decode_tok_s"]


def test_prediction_matches_peak_memory_of_a_full_context(starter):
    """A run whose prompt and reply fill all 512 positions touches the whole KV pool; its peak
    resident memory must be within 10% of the prediction for one sequence of 512."""
    _, d = fit_json("--ctx", "512", "--batch", "1", "--no-speed")
    p = run("run", "smollm2", PROSE, "--raw", "--ctx", "512", "--max-tokens", "600",
            "--ignore-eos", "--temp", "0", "--verbose")
    assert p.returncode == 0, p.stderr
    n_prompt = int(re.search(r"prompt (\d+) tokens", p.stderr).group(1))
    n_gen = int(re.search(r"generated (\d+) tokens", p.stderr).group(1))
    assert n_prompt > 150 and n_prompt + n_gen >= 511  # the whole context was used
    peak = float(re.search(r"peak memory ([\d.]+) MiB", p.stderr).group(1)) * 2**20
    predicted = d["total_bytes"]
    print(f"predicted {predicted / 2**20:.1f} MiB, measured peak {peak / 2**20:.1f} MiB, "
          f"error {100 * (predicted - peak) / peak:+.1f}%")
    assert abs(predicted - peak) <= 0.10 * peak


def test_exit_status_says_whether_it_fits(starter):
    small = run("fit", "smollm2", "--ctx", "512", "--batch", "1", "--memory-budget", "0.05",
                "--no-speed")
    assert small.returncode == 1
    assert re.search(r"fits\s+NO, [\d.]+ MiB over the budget", small.stdout)
    assert re.search(r"max context\s+none", small.stdout)
    big = run("fit", "smollm2", "--ctx", "512", "--batch", "1", "--memory-budget", "64",
              "--no-speed")
    assert big.returncode == 0
    assert re.search(r"fits\s+yes", big.stdout)
    assert re.search(r"max context\s+8192 positions", big.stdout)
    assert re.search(r"budget\s+59.60 GiB", big.stdout)
    rc, d = fit_json("--memory-budget", "0.05", "--no-speed")
    assert rc == 1 and d["fits"] is False and d["budget_bytes"] == 50_000_000 and d["max_ctx"] == 0


def test_usage_errors_and_missing_models(starter):
    for args in (["--kv", "q5"], ["--batch", "0"], ["--ctx", "abc"], ["--memory-budget", "-1"],
                 ["--bogus"]):
        p = run("fit", "smollm2", *args)
        assert p.returncode == 2, args
        assert "hearth fit:" in p.stderr
    assert run("fit").returncode == 2
    p = run("fit", "/nonexistent/model.gguf")
    assert p.returncode == 1
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
