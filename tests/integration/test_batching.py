"""Continuous batching and the prefix cache through the real server and the openai SDK:
concurrent streams complete with their own text, a request's output is the same alone or among
others, a conversation's next turn reuses the KV of the first, cancelled clients give their
KV blocks back, and a too-large max_tokens is capped by the context."""
import json
import os
import socket
import threading
import time

import openai
import pytest

from server import Server, stats, wait_idle

PROMPTS = ["Tell me about the moon.", "What is 2+2?", "Write a poem about cats.",
           "Name three colors.", "Why is the sky blue?", "Describe a forest.", "What is Python?",
           "Say hello in French.", "What is a prime number?", "How do birds fly?",
           "Give me a recipe for tea.", "What is the capital of Italy?", "Explain gravity.",
           "Count from one to five.", "What does a cat eat?", "Who wrote Hamlet?"]


@pytest.fixture(scope="module")
def srv(starter):
    with Server("smollm2", "--batch", "8") as s:
        yield s


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=120)


def chat(c, prompt, **kw):
    kw.setdefault("max_tokens", 32)
    kw.setdefault("temperature", 0)
    return c.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], **kw)


def in_parallel(fn, args):
    out = [None] * len(args)
    errors = []

    def run(i):
        try:
            out[i] = fn(args[i])
        except Exception as e:  # surfaced below with the failing index
            errors.append((i, e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return out


# On a GPU a step's matmuls take the row count's kernel: up to 8 rows the GEMV (16-bit
# activations), more (a prompt chunk beside decode rows, or more than 8 streams) the tensor
# cores (f16 inputs). A row's logits then differ alone and batched (~1e-3 relative): a sampled
# draw near a boundary parts, and so, more rarely, does a greedy choice between near-equal
# tokens once a step holds more than 8 rows (1 of 16 streams in one H200 run): not
# batch-invariant there (architecture.md). On the CPU these tests assert equality.
GPU_ROWS = pytest.mark.xfail(bool(os.environ.get("HEARTH_TEST_DEVICE")), strict=False,
                             reason="GPU kernels depend on the step's row count")


def test_sixteen_concurrent_streams_complete_with_their_own_text(srv):
    c = client(srv)
    alone = {p: chat(c, p).choices[0].message.content for p in PROMPTS}

    def stream(p):
        parts, finish = [], None
        for ch in chat(c, p, stream=True):
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
            if ch.choices and ch.choices[0].finish_reason:
                finish = ch.choices[0].finish_reason
        return "".join(parts), finish

    got = in_parallel(stream, PROMPTS)
    for p, (text, finish) in zip(PROMPTS, got):
        assert finish in ("stop", "length")
    assert stats(srv)["requests"]["served"] >= 32
    parted = [(p, text, alone[p]) for p, (text, _) in zip(PROMPTS, got) if text != alone[p]]
    if parted and os.environ.get("HEARTH_TEST_DEVICE"):
        pytest.xfail(f"{len(parted)} of {len(PROMPTS)} greedy streams parted from their text "
                     "alone: GPU kernels depend on the step's row count")
    assert not parted, parted[0]


@pytest.mark.parametrize("temperature,seed", [(0, None),
                                              pytest.param(0.9, 1234, marks=GPU_ROWS)])
def test_output_is_the_same_alone_or_batched(srv, temperature, seed):
    c = client(srv)
    kw = {"temperature": temperature, "max_tokens": 40}
    if seed is not None:
        kw["seed"] = seed
    prompts = PROMPTS[:8]
    alone = [chat(c, p, **kw).choices[0].message.content for p in prompts]
    batched = in_parallel(lambda p: chat(c, p, **kw).choices[0].message.content, prompts)
    assert batched == alone


def test_second_turn_reuses_the_first_turns_kv(srv):
    c = client(srv)
    system = {"role": "system", "content": "You are a careful assistant who answers briefly. " * 6}
    first = [system, {"role": "user", "content": "What is the largest planet?"}]
    r1 = c.chat.completions.create(model="m", messages=first, max_tokens=24, temperature=0)
    second = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                      {"role": "user", "content": "And the smallest?"}]
    r2 = c.chat.completions.create(model="m", messages=second, max_tokens=8, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= 0.9 * r1.usage.prompt_tokens, (cached, r1.usage.prompt_tokens)


def test_a_prompt_diverging_inside_a_block_copies_the_cached_part_of_that_block(srv):
    """Full 16-token blocks are shared; the positions after them come from a copy of the cached
    block that agrees longest, so the reuse is exact to the token, and the text is the same as
    with no cache at all."""
    c = client(srv)
    base = "The old lighthouse keeper climbed the stairs every evening at dusk. " * 3
    base = base.strip()
    n_base = c.completions.create(model="m", prompt=base, max_tokens=1).usage.prompt_tokens
    assert n_base % 16 != 0, n_base  # else there is no partial block to copy
    kw = {"model": "m", "max_tokens": 16, "temperature": 0}
    r = c.completions.create(prompt=base + " Then he lit the lamp and", **kw)
    assert r.usage.prompt_tokens_details.cached_tokens == n_base, (r.usage, n_base)
    with Server("smollm2", "--prompt-cache", "0") as plain:
        fresh = client(plain).completions.create(prompt=base + " Then he lit the lamp and", **kw)
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert r.choices[0].text == fresh.choices[0].text


def test_same_system_prompt_is_shared_while_the_first_request_still_generates(srv):
    c = client(srv)
    system = {"role": "system", "content": "Answer as a pirate would, in one short line. " * 8}
    done = {}

    def long_one():
        done["a"] = c.chat.completions.create(
            model="m", messages=[system, {"role": "user", "content": "Tell me a long story."}],
            max_tokens=120, temperature=0)

    t = threading.Thread(target=long_one)
    t.start()
    time.sleep(0.3)  # the first request is past its prefill and decoding now
    r = c.chat.completions.create(model="m", messages=[system, {"role": "user", "content": "Hi!"}],
                                  max_tokens=4, temperature=0)
    t.join(timeout=120)
    assert r.usage.prompt_tokens_details.cached_tokens >= 64, r.usage


def test_disconnected_clients_give_their_kv_blocks_back(starter):
    with Server("smollm2", "--batch", "8", "--prompt-cache", "0") as s:
        body = json.dumps({"messages": [{"role": "user", "content": "Write a long story."}],
                           "max_tokens": 400, "stream": True, "temperature": 0.8,
                           "logit_bias": {"0": -100, "2": -100}}).encode()  # no early end
        socks = []
        for _ in range(8):
            k = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            k.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: " +
                      str(len(body)).encode() + b"\r\n\r\n" + body)
            socks.append(k)
        for k in socks:  # every stream has started: headers, then the first event
            got = b""
            while b"data:" not in got:
                chunk = k.recv(4096)
                assert chunk, got
                got += chunk
        t_end = time.monotonic() + 10  # the opening event comes before admission
        while time.monotonic() < t_end:
            busy = stats(s)
            if busy["requests"]["active"] == 8 and busy["kv_blocks"]["used"] >= 8:
                break
            time.sleep(0.02)
        assert busy["requests"]["active"] == 8 and busy["kv_blocks"]["used"] >= 8, busy
        for k in socks[:4]:
            k.close()
        t_end = time.monotonic() + 10
        while stats(s)["requests"]["active"] > 4 and time.monotonic() < t_end:
            time.sleep(0.02)
        assert stats(s)["requests"]["active"] <= 4
        for k in socks[4:]:
            k.close()
        idle = wait_idle(s)
        assert idle["kv_blocks"]["used"] == 0, idle["kv_blocks"]


def test_too_large_max_tokens_is_capped_by_the_context(starter):
    with Server("smollm2", "--ctx", "96") as s:
        c = client(s)
        r = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Write a very long story."}],
            max_tokens=100000, temperature=0.8, seed=3,
            logit_bias={"2": -100, "0": -100})  # no end of turn: only the context stops it
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens + r.usage.completion_tokens == 96


def test_prompt_that_leaves_no_room_is_a_memory_admission_error(starter):
    with Server("smollm2", "--ctx", "32") as s:
        c = client(s)
        with pytest.raises(openai.BadRequestError) as e:
            chat(c, "word " * 40)
        assert e.value.body["type"] == "memory_admission"


def test_server_refuses_to_start_beyond_its_memory_budget(starter):
    from conftest import run
    # 0.3 GB holds the weights but not 8 sequences of 8192 positions of KV (~1.4 GiB).
    p = run("serve", "smollm2", "--port", "0", "--memory-budget", "0.3")
    assert p.returncode == 1
    for term in ("does not fit", "weights", "KV cache", "scratch", "overhead", "smaller --ctx"):
        assert term in p.stderr, p.stderr


def test_stats_show_the_memory_contract(srv):
    m = stats(srv)["memory"]
    terms = ("weights_bytes", "kv_bytes", "scratch_bytes", "overhead_bytes")
    assert all(m[t] > 0 for t in terms), m
    assert m["total_bytes"] >= sum(m[t] for t in terms)
    assert m["budget_bytes"] >= m["total_bytes"] + m["prompt_cache_bytes"]
    assert m["max_ctx"] >= 8192 and m["kv_bytes_per_token"] > 0
    # dequantized copies live in what is left of the budget, and only on a GPU (opt-in there)
    assert m["budget_bytes"] >= (m["total_bytes"] + m["prompt_cache_bytes"]
                                 + m["dequantized_weights_bytes"])
    if stats(srv)["device"] == "cpu":
        assert m["dequantized_weights_bytes"] == 0


def test_two_requests_arriving_together_share_their_system_prompt(starter):
    # Small steps: the first prompt takes several steps to prefill, so the second arrives while
    # it does; it then waits for those blocks instead of computing the same prefix beside it.
    with Server("smollm2", "--step-tokens", "32") as s:
        c = client(s)
        system = {"role": "system", "content": "You are the ship's computer. Report briefly. " * 12}
        users = ["Status of the engines?", "Status of the shields?"]
        got = in_parallel(lambda u: c.chat.completions.create(
            model="m", messages=[system, {"role": "user", "content": u}], max_tokens=6,
            temperature=0), users)
        cached = sorted(r.usage.prompt_tokens_details.cached_tokens for r in got)
        assert cached[0] == 0 and cached[1] >= 0.8 * got[0].usage.prompt_tokens - 32, cached
