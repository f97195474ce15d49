"""`hearth serve` through the OpenAI Python SDK: chat and text completions (plain and streamed),
models, sampling fields, logprobs, stop strings, seeds, prompt-cache accounting and the API key.

One server for the whole file (plus a short-lived one with --api-key); replies are kept short."""
import http.client
import json

import openai
import pytest

from server import Server, req

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def srv(starter):
    with Server("smollm2") as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, messages=CAPITAL, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 16)
    return client.chat.completions.create(model="anything", messages=messages, **kw)


def post_json(srv, path, body, headers=None):
    """Raw POST; returns (status, parsed JSON or None, raw bytes)."""
    status, _, raw = req(srv, "POST", path, body, headers)
    try:
        return status, json.loads(raw), raw
    except ValueError:
        return status, None, raw


def assert_openai_error(body):
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    for k in ("message", "type", "param", "code"):
        assert k in body["error"], (k, body)
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


# ---- chat completions -------------------------------------------------------------------------

def test_chat_non_stream_reply_and_usage(client):
    r = chat(client, max_tokens=16)
    assert r.id and isinstance(r.created, int) and r.created > 1_600_000_000
    assert r.object == "chat.completion"
    assert r.model == MODEL_ID
    assert len(r.choices) == 1
    ch = r.choices[0]
    assert ch.index == 0
    assert ch.message.role == "assistant"
    assert ch.message.content and ch.message.content.strip()
    assert ch.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 16
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details is not None
    assert 0 <= u.prompt_tokens_details.cached_tokens <= u.prompt_tokens


def test_chat_greedy_answer_is_paris(client):
    r = chat(client, max_tokens=16)
    assert "Paris" in r.choices[0].message.content


def test_any_model_name_is_accepted_and_reported_as_the_loaded_one(client):
    r = chat(client, max_tokens=2)
    r2 = client.chat.completions.create(model="gpt-4o", messages=CAPITAL, max_tokens=2,
                                        temperature=0)
    assert r.model == r2.model == MODEL_ID


def test_chat_content_parts_equal_string_content(client):
    a = chat(client, max_tokens=12)
    parts = [{"role": "user",
              "content": [{"type": "text", "text": "What is the capital of France?"}]}]
    b = chat(client, parts, max_tokens=12)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens


def test_system_and_multi_turn_messages(client):
    msgs = [{"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello. How can I help?"},
            {"role": "user", "content": "What is the capital of France?"}]
    r = chat(client, msgs, max_tokens=16)
    assert r.choices[0].message.content
    assert r.usage.prompt_tokens > chat(client, max_tokens=1).usage.prompt_tokens


def test_max_tokens_limits_the_reply_with_finish_length(client):
    r = chat(client, [{"role": "user", "content": "Write a long story about a dragon."}],
             max_tokens=3)
    assert r.usage.completion_tokens == 3
    assert r.choices[0].finish_reason == "length"


def test_max_completion_tokens_is_honoured(client):
    r = client.chat.completions.create(
        model="x", temperature=0, max_completion_tokens=4,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}])
    assert r.usage.completion_tokens == 4
    assert r.choices[0].finish_reason == "length"


def test_chat_stream_equals_non_stream(client):
    ref = chat(client, max_tokens=20)
    stream = chat(client, max_tokens=20, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks, "no chunks"
    ids = {c.id for c in chunks}
    assert len(ids) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.model == MODEL_ID for c in chunks)
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert text == ref.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in with_choices if c.choices[0].finish_reason]
    assert finishes == [ref.choices[0].finish_reason]
    # the usage chunk comes last, with no choices
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == ref.usage.completion_tokens
    assert last.usage.prompt_tokens == ref.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = list(chat(client, max_tokens=4, stream=True))
    assert chunks and all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_n_greater_than_one_is_refused(srv, client):
    with pytest.raises(openai.BadRequestError):
        chat(client, max_tokens=2, n=2)
    status, body, _ = post_json(srv, "/v1/chat/completions",
                                {"messages": CAPITAL, "max_tokens": 2, "n": 2})
    assert status == 400
    assert_openai_error(body)
    # n=1 is fine
    assert chat(client, max_tokens=2, n=1).choices


# ---- sampling fields ----------------------------------------------------------------------------

def test_every_sampling_field_is_accepted(client):
    r = client.chat.completions.create(
        model="x", messages=CAPITAL, max_tokens=6, temperature=0.7, top_p=0.9, seed=3,
        presence_penalty=0.5, frequency_penalty=0.5, stop=["\n\n"], user="someone",
        logit_bias={"7042": 1},
        extra_body={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1})
    assert r.choices[0].message.content is not None
    assert r.choices[0].finish_reason in ("stop", "length")


def test_logit_bias_forces_a_token(client):
    # token 21285 is " banana" in SmolLM2's vocabulary
    r = chat(client, max_tokens=4, logit_bias={"21285": 100})
    assert r.choices[0].message.content.count("banana") == 4, r.choices[0].message.content


def test_logit_bias_bans_a_token(client):
    plain = chat(client, max_tokens=16).choices[0].message.content
    assert "Paris" in plain
    # 7042 " Paris", 38634 "Paris"
    banned = chat(client, max_tokens=16, logit_bias={"7042": -100, "38634": -100})
    assert banned.choices[0].message.content != plain


def test_repetition_penalty_changes_a_repetitive_reply(client):
    msgs = [{"role": "user", "content": "Repeat the word 'yes' twenty times."}]
    a = chat(client, msgs, max_tokens=24).choices[0].message.content
    b = chat(client, msgs, max_tokens=24,
             extra_body={"repetition_penalty": 2.0}).choices[0].message.content
    assert a != b


def test_seed_reproducibility(client):
    msgs = [{"role": "user", "content": "Tell me a story."}]
    kw = dict(temperature=1.0, max_tokens=12)
    a = chat(client, msgs, seed=7, **kw).choices[0].message.content
    b = chat(client, msgs, seed=7, **kw).choices[0].message.content
    assert a == b
    others = [chat(client, msgs, seed=s, **kw).choices[0].message.content for s in (8, 9, 10)]
    assert any(o != a for o in others)


def test_temperature_zero_is_deterministic(client):
    msgs = [{"role": "user", "content": "Tell me a story."}]
    a = chat(client, msgs, max_tokens=12, seed=1).choices[0].message.content
    b = chat(client, msgs, max_tokens=12, seed=2).choices[0].message.content
    assert a == b


# ---- stop strings -------------------------------------------------------------------------------

def test_stop_word_from_the_greedy_reply(client):
    ref = chat(client, max_tokens=24).choices[0].message.content
    assert "Paris" in ref
    cut = ref[:ref.index("Paris")]
    for stop in ("Paris", ["Paris"], ["zzzz-never", "Paris"]):
        r = chat(client, max_tokens=24, stop=stop)
        text = r.choices[0].message.content
        assert "Paris" not in text
        assert text.rstrip() == cut.rstrip(), (text, cut)
        assert r.choices[0].finish_reason == "stop"


def test_stop_newline(client):
    msgs = [{"role": "user", "content": "List three fruits, one per line."}]
    ref = chat(client, msgs, max_tokens=32).choices[0].message.content
    if "\n" not in ref.strip():
        pytest.skip(f"greedy reply has no inner newline: {ref!r}")
    first = ref.strip("\n")
    first = first[:first.index("\n")]
    r = chat(client, msgs, max_tokens=32, stop=["\n"])
    text = r.choices[0].message.content
    assert "\n" not in text.strip("\n")
    assert text.strip() == first.strip()
    assert r.choices[0].finish_reason == "stop"


def test_stop_word_in_a_stream_is_not_leaked(client):
    ref = chat(client, max_tokens=24, stop=["Paris"]).choices[0].message.content
    chunks = list(chat(client, max_tokens=24, stop=["Paris"], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref
    assert [c.choices[0].finish_reason for c in chunks if c.choices and
            c.choices[0].finish_reason] == ["stop"]


def test_stop_strings_across_token_boundaries(client):
    msgs = [{"role": "user", "content": "Tell me a story about a cat."}]
    ref = chat(client, msgs, max_tokens=40).choices[0].message.content
    assert len(ref) > 60, ref
    checked = 0
    for k in (7, 19, 33, 50):
        stop = ref[k:k + 5]
        if not stop.strip():
            continue
        want = ref[:ref.index(stop)]
        r = chat(client, msgs, max_tokens=40, stop=[stop])
        assert r.choices[0].message.content == want, (stop, r.choices[0].message.content)
        assert r.choices[0].finish_reason == "stop"
        streamed = "".join(c.choices[0].delta.content or "" for c in
                           chat(client, msgs, max_tokens=40, stop=[stop], stream=True)
                           if c.choices)
        assert streamed == want, (stop, streamed)
        checked += 1
    assert checked >= 3


# ---- logprobs -----------------------------------------------------------------------------------

def test_logprobs_with_top_logprobs(client):
    r = chat(client, max_tokens=8, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content
    assert len(lp.content) == r.usage.completion_tokens
    for e in lp.content:
        assert isinstance(e.token, str)
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 3
        for alt in e.top_logprobs:
            assert alt.logprob <= 0 and isinstance(alt.token, str)
        vals = [alt.logprob for alt in e.top_logprobs]
        assert vals == sorted(vals, reverse=True)
        # greedy: the chosen token is the most likely one
        assert e.logprob == pytest.approx(vals[0], abs=1e-3)
        assert e.token == e.top_logprobs[0].token
    assert "".join(e.token for e in lp.content) == r.choices[0].message.content


def test_logprobs_cover_tokens_held_back_for_a_stop_string(client):
    # " Paris" is a prefix of the stop string, so its text waits until the next token shows the
    # stop string did not complete; its log-probability must still be reported.
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12, temperature=0, logprobs=True, top_logprobs=1,
        stop=[" Paris is lovely"])
    content = r.choices[0].message.content
    assert "Paris" in content
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens
    assert "".join(e.token for e in entries) == content


def test_logprobs_in_a_stream(client):
    chunks = list(chat(client, max_tokens=6, logprobs=True, top_logprobs=2, stream=True))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs
               for e in (c.choices[0].logprobs.content or [])]
    assert len(entries) == 6
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in entries)


def test_no_logprobs_unless_asked(client):
    r = chat(client, max_tokens=3)
    assert r.choices[0].logprobs is None


# ---- prompt cache -------------------------------------------------------------------------------

def test_cached_tokens_on_a_repeated_prompt(client):
    sys_prompt = ("You are a meticulous geography tutor. You answer in one short sentence, "
                  "you never invent facts, and you always name the country. ") * 3
    msgs = [{"role": "system", "content": sys_prompt},
            {"role": "user", "content": "What is the capital of Italy?"}]
    a = chat(client, msgs, max_tokens=4)
    b = chat(client, msgs, max_tokens=4)
    assert b.usage.prompt_tokens == a.usage.prompt_tokens
    cached = b.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached <= b.usage.prompt_tokens
    assert cached >= b.usage.prompt_tokens // 2
    # a third request sharing only the system prompt still reuses that prefix
    msgs2 = [msgs[0], {"role": "user", "content": "And what is the capital of Spain?"}]
    c = chat(client, msgs2, max_tokens=4)
    assert c.usage.prompt_tokens_details.cached_tokens > 40


def test_prefix_cache_does_not_change_greedy_output(client):
    base = [{"role": "system", "content": "You are a kind teacher who explains things simply."}]
    q1 = base + [{"role": "user", "content": "Why is the sky blue?"}]
    q2 = base + [{"role": "user", "content": "Why is the grass green?"}]
    other = [{"role": "user", "content": "Name a fruit."}]
    chat(client, other, max_tokens=2)  # the cache now shares little with q1/q2
    fresh = chat(client, q2, max_tokens=16)
    chat(client, q1, max_tokens=16)     # shares the system prompt with q2
    again = chat(client, q2, max_tokens=16)
    assert again.usage.prompt_tokens_details.cached_tokens > \
        fresh.usage.prompt_tokens_details.cached_tokens
    assert again.choices[0].message.content == fresh.choices[0].message.content
    # and a request whose whole prompt is cached
    third = chat(client, q2, max_tokens=16)
    assert third.choices[0].message.content == fresh.choices[0].message.content


# ---- text completions ---------------------------------------------------------------------------

def test_completions_paris(client):
    r = client.completions.create(model="x", prompt="The capital of France is", temperature=0,
                                  max_tokens=8)
    assert r.object == "text_completion"
    assert r.model == MODEL_ID
    assert r.id and r.created > 0
    assert "Paris" in r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert 0 < u.prompt_tokens <= 8  # the bare text, no chat template
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_completions_stream_equals_non_stream(client):
    kw = dict(model="x", prompt="Once upon a time", temperature=0, max_tokens=16)
    ref = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True},
                                            **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == ref.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks
            if c.choices and c.choices[0].finish_reason] == [ref.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        ref.usage.completion_tokens


def test_completions_stop_and_length(client):
    r = client.completions.create(model="x", prompt="One, two, three, four,", temperature=0,
                                  max_tokens=2)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
    ref = client.completions.create(model="x", prompt="The capital of France is",
                                    temperature=0, max_tokens=8).choices[0].text
    r = client.completions.create(model="x", prompt="The capital of France is", temperature=0,
                                  max_tokens=8, stop="Paris")
    assert r.choices[0].text == ref[:ref.index("Paris")]
    assert r.choices[0].finish_reason == "stop"


# ---- models -------------------------------------------------------------------------------------

def test_models_list(client):
    data = list(client.models.list())
    assert data[0].id == MODEL_ID  # the served model first; other local models may follow
    assert data[0].object == "model"
    assert all(m.id != MODEL_ID for m in data[1:])


def test_models_list_raw_shape(srv):
    """The served model says what it can do: its context, chat, tools, reasoning, structured
    output, and llama-server's "meta" block."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("GET", "/v1/models")
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    assert r.status == 200
    assert body["object"] == "list"
    m = body["data"][0]
    assert m["id"] == MODEL_ID and m["status"] == {"value": "loaded"}
    assert m["context_length"] == m["max_model_len"] == 8192
    assert m["capabilities"] == {"chat": True, "tools": True, "reasoning": False,
                                 "structured_output": True}
    meta = m["meta"]
    assert meta["architecture"] == "llama" and meta["format"] == "gguf"
    assert meta["quant"] == "q4_1" and meta["n_vocab"] == 49152 and meta["n_embd"] == 576
    assert meta["n_ctx_train"] == 8192 and 130e6 < meta["n_params"] < 140e6
    assert 50e6 < meta["size"] < 120e6
    assert all(x["status"] == {"value": "unloaded"} for x in body["data"][1:])


def test_models_list_names_the_other_local_models(starter, tmp_path):
    """hearth serve runs one model; the others found on this machine are listed, unloaded."""
    (tmp_path / "models").mkdir()
    for name in ("first.Q4_1.gguf", "second.Q4_1.gguf"):
        (tmp_path / "models" / name).symlink_to(starter)
    env = {"HEARTH_HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}
    with Server("first", "--ctx", "512", env=env) as s:
        status, _, raw = req(s, "GET", "/v1/models")
    assert status == 200
    data = json.loads(raw)["data"]
    assert [(m["id"], m["status"]["value"]) for m in data] == [
        ("first.Q4_1", "loaded"), ("second.Q4_1", "unloaded")]
    assert data[0]["context_length"] == 512 and data[1]["where"] == "hearth"


def test_models_retrieve(client):
    m = client.models.retrieve(MODEL_ID)
    assert m.id == MODEL_ID and m.object == "model"


def test_models_retrieve_other_id_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.status_code == 404


# ---- errors through the SDK ---------------------------------------------------------------------

def test_bad_request_surfaces_as_sdk_error(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="x", messages=[], max_tokens=4)
    assert e.value.status_code == 400


# ---- authentication -----------------------------------------------------------------------------

def test_api_key_through_the_sdk(starter):
    with Server("smollm2", "--api-key", "sekrit-123") as s:
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit-123", max_retries=0)
        r = good.chat.completions.create(model="x", messages=CAPITAL, max_tokens=2,
                                         temperature=0)
        assert r.choices[0].message.content is not None
        assert [m.id for m in good.models.list()] == [MODEL_ID]
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            bad.models.list()
        assert e.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model="x", messages=CAPITAL, max_tokens=2)
