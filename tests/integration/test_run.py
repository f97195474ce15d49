"""`hearth run` and `hearth chat` on the starter model: chat template, greedy answers, seeds,
stop conditions, KV reuse across chat turns."""
import re

from conftest import run


def test_run_answers_with_the_chat_template(starter):
    p = run("run", "smollm2", "What is the capital of France?", "--temp", "0", "--max-tokens", "12",
            check=True)
    assert "Paris" in p.stdout


def test_same_seed_same_text(starter):
    args = ("run", "smollm2", "Tell me a story.", "--temp", "1.0", "--max-tokens", "12")
    a = run(*args, "--seed", "7", check=True).stdout
    b = run(*args, "--seed", "7", check=True).stdout
    c = run(*args, "--seed", "8", check=True).stdout
    assert a == b
    assert a != c


def test_raw_prompt_skips_the_template(starter):
    p = run("run", "smollm2", "The capital of France is", "--raw", "--temp", "0",
            "--max-tokens", "4", "--verbose", check=True)
    assert "Paris" in p.stdout
    m = re.search(r"prompt (\d+) tokens", p.stderr)
    assert m and int(m.group(1)) <= 6  # the bare text, no template around it


def test_verbose_reports_speed_and_memory(starter):
    p = run("run", "smollm2", "Hi", "--temp", "0", "--max-tokens", "3", "--verbose", check=True)
    assert re.search(r"tok/s .* first token [\d.]+ ms .* peak memory [\d.]+ MiB", p.stderr)


def test_int8_kernels_answer_too(starter):
    p = run("run", "smollm2", "The capital of France is", "--raw", "--temp", "0",
            "--max-tokens", "4", "--int8", check=True)
    assert "Paris" in p.stdout


def test_chat_keeps_the_earlier_turns_in_the_cache(starter):
    import os
    import subprocess
    from conftest import HEARTH
    p = subprocess.run([HEARTH, "chat", "smollm2", "--temp", "0", "--max-tokens", "8",
                        "--verbose"], input="Hello!\nAnd who are you?\n", capture_output=True,
                       text=True, timeout=300, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    cached = [int(x) for x in re.findall(r"\((\d+) cached\)", p.stderr)]
    assert len(cached) == 2 and cached[0] == 0 and cached[1] > 20, p.stderr


def test_prompt_longer_than_the_context_is_refused(starter):
    p = run("run", "smollm2", "word " * 300, "--ctx", "64", "--max-tokens", "4")
    assert p.returncode == 1 and "context holds 64" in p.stderr


def test_unknown_model_is_an_error():
    p = run("run", "no-such-model-xyz", "hi")
    assert p.returncode == 1 and "not found" in p.stderr


def test_bad_sampling_flags_are_refused_by_every_verb():
    for verb, extra in (("run", ["hi"]), ("serve", [])):
        for flag, value in (("--temp", "hot"), ("--top-p", "2"), ("--top-k", "-1"),
                            ("--seed", "x")):
            p = run(verb, "smollm2", *extra, flag, value)
            assert p.returncode == 2, (verb, flag, p.stderr)
            assert flag in p.stderr and value in p.stderr, p.stderr


def test_bare_hearth_serves_the_starter_model_or_says_how_to_get_it(tmp_path):
    p = run(env={"HEARTH_HOME": str(tmp_path)})
    assert p.returncode == 1
    assert "SmolLM2-135M-Instruct.Q4_1" in p.stderr and "make run" in p.stderr
