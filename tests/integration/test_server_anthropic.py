"""`hearth serve` through the Anthropic Python SDK: /v1/messages (plain and streamed), system
prompts, stop sequences, count_tokens, the streaming event grammar, errors and the API key.

The SDK (2.x) has no temperature argument, so sampling fields go in extra_body; the server itself
runs with --temp 0 so that replies are greedy unless a request says otherwise."""
import json

import anthropic
import pytest

from server import Server, req as raw

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def srv(starter):
    with Server("smollm2", "--temp", "0") as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)


def create(client, messages=CAPITAL, max_tokens=16, **kw):
    kw.setdefault("extra_body", GREEDY)
    return client.messages.create(model="claude-whatever", max_tokens=max_tokens,
                                  messages=messages, **kw)


def prompt_tokens(msg):
    """The whole prompt: Anthropic's input_tokens leave out what was read from the cache."""
    return msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def parse_sse(text):
    """[(event name or None, parsed data)] from an SSE body."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif line.startswith(":"):
                continue
            else:
                raise AssertionError(f"bad SSE line {line!r} in {block!r}")
        out.append((name, json.loads("\n".join(data))))
    return out


def assert_anthropic_error(body, etype="invalid_request_error"):
    assert body.get("type") == "error", body
    assert isinstance(body.get("error"), dict), body
    assert body["error"].get("type") == etype, body
    assert isinstance(body["error"].get("message"), str) and body["error"]["message"], body


# ---- messages ------------------------------------------------------------------------------------

def test_message_non_stream(client):
    m = create(client)
    assert m.id
    assert m.type == "message" and m.role == "assistant"
    assert m.model == MODEL_ID
    assert len(m.content) >= 1 and m.content[0].type == "text"
    assert text_of(m).strip()
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.stop_sequence is None
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 16
    assert m.usage.cache_read_input_tokens is not None


def test_greedy_answer_is_paris(client):
    assert "Paris" in text_of(create(client, max_tokens=16))


def test_server_default_temperature_applies(client):
    # no temperature in the request: the server's --temp 0 makes it greedy
    msgs = [{"role": "user", "content": "Tell me a story."}]
    a = client.messages.create(model="m", max_tokens=12, messages=msgs)
    b = client.messages.create(model="m", max_tokens=12, messages=msgs)
    assert text_of(a) == text_of(b)


def test_max_tokens_stop_reason(client):
    m = create(client, [{"role": "user", "content": "Write a long story about a dragon."}],
               max_tokens=3)
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 3


def test_text_blocks_equal_string_content(client):
    a = create(client, max_tokens=12)
    b = create(client, [{"role": "user", "content": [
        {"type": "text", "text": "What is the capital of France?"}]}], max_tokens=12)
    assert text_of(a) == text_of(b)
    assert prompt_tokens(a) == prompt_tokens(b)


def test_multi_turn(client):
    msgs = [{"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello. How can I help?"},
            {"role": "user", "content": "What is the capital of France?"}]
    m = create(client, msgs, max_tokens=12)
    assert text_of(m)
    assert prompt_tokens(m) > prompt_tokens(create(client, max_tokens=1))


def test_system_prompt_string_and_blocks(client):
    sys_text = "You are a pirate. Answer like a pirate."
    plain = create(client, max_tokens=16)
    s = create(client, max_tokens=16, system=sys_text)
    b = create(client, max_tokens=16, system=[{"type": "text", "text": sys_text}])
    assert text_of(s) == text_of(b)
    assert prompt_tokens(s) == prompt_tokens(b)
    assert prompt_tokens(s) != prompt_tokens(plain)  # it replaced the template's default
    # several blocks are joined into one system prompt
    two = create(client, max_tokens=16, system=[{"type": "text", "text": "You are a pirate."},
                                                 {"type": "text", "text": "Answer like a pirate."}])
    assert abs(prompt_tokens(two) - prompt_tokens(s)) <= 2


def test_sampling_fields_and_metadata_accepted(client):
    m = client.messages.create(model="m", max_tokens=6, messages=CAPITAL,
                               metadata={"user_id": "abc"},
                               extra_body={"temperature": 0.8, "top_p": 0.9, "top_k": 20})
    assert m.type == "message" and m.stop_reason in ("end_turn", "max_tokens")


# ---- stop sequences ------------------------------------------------------------------------------

def test_stop_sequences(client):
    ref = text_of(create(client, max_tokens=24))
    assert "Paris" in ref
    m = create(client, max_tokens=24, stop_sequences=["never-appears", "Paris"])
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == "Paris"
    assert "Paris" not in text_of(m)
    assert text_of(m).rstrip() == ref[:ref.index("Paris")].rstrip()


def test_stop_sequence_not_hit_leaves_it_null(client):
    m = create(client, max_tokens=4, stop_sequences=["zzzz-never"])
    assert m.stop_sequence is None
    assert m.stop_reason in ("end_turn", "max_tokens")


def test_stop_sequence_inside_a_token_plain_and_streamed(client):
    msgs = [{"role": "user", "content": "Tell me a story about a cat."}]
    ref = text_of(create(client, msgs, max_tokens=40))
    assert len(ref) > 40, ref
    stop = ref[21:26]
    want = ref[:ref.index(stop)]
    m = create(client, msgs, max_tokens=40, stop_sequences=[stop])
    assert text_of(m) == want and m.stop_sequence == stop
    with client.messages.stream(model="m", max_tokens=40, messages=msgs, stop_sequences=[stop],
                                extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == want
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


# ---- streaming -----------------------------------------------------------------------------------

def test_stream_text_equals_non_stream(client):
    ref = create(client, max_tokens=20)
    with client.messages.stream(model="m", max_tokens=20, messages=CAPITAL,
                                extra_body=GREEDY) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 2
    assert "".join(pieces) == text_of(ref)
    assert text_of(final) == text_of(ref)
    assert final.stop_reason == ref.stop_reason
    assert final.usage.output_tokens == ref.usage.output_tokens
    assert final.model == MODEL_ID


def test_stream_stop_sequence(client):
    with client.messages.stream(model="m", max_tokens=24, messages=CAPITAL,
                                stop_sequences=["Paris"], extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "Paris" not in text
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "Paris"


def test_stream_event_grammar(srv):
    status, headers, body = raw(srv, "POST", "/v1/messages", {
        "model": "m", "max_tokens": 8, "stream": True, "messages": CAPITAL, "temperature": 0})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = parse_sse(body.decode())
    names = [n for n, _ in events]
    # every event is named, and the name matches the data's type
    for n, d in events:
        assert n == d["type"], (n, d)
    assert names[0] == "message_start"
    assert names[-1] == "message_stop"
    assert names[-2] == "message_delta"
    assert names[-3] == "content_block_stop"
    assert "content_block_start" in names and "ping" in names
    i_start = names.index("content_block_start")
    assert i_start < names.index("content_block_delta")
    middle = names[i_start + 1:-3]
    assert set(middle) <= {"ping", "content_block_delta"}, names
    assert middle.count("content_block_delta") >= 1
    # message_start carries an empty assistant message with input usage
    ms = events[0][1]["message"]
    assert ms["type"] == "message" and ms["role"] == "assistant" and ms["content"] == []
    assert ms["model"] == MODEL_ID and ms["usage"]["input_tokens"] > 0
    cbs = events[i_start][1]
    assert cbs["index"] == 0 and cbs["content_block"]["type"] == "text"
    deltas = [d for n, d in events if n == "content_block_delta"]
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    md = events[-2][1]
    assert md["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert "stop_sequence" in md["delta"]
    assert 0 < md["usage"]["output_tokens"] <= 8
    # the streamed text equals the plain reply
    status, _, plain = raw(srv, "POST", "/v1/messages", {
        "model": "m", "max_tokens": 8, "messages": CAPITAL, "temperature": 0})
    plain = json.loads(plain)
    assert "".join(d["delta"]["text"] for d in deltas) == plain["content"][0]["text"]
    assert md["usage"]["output_tokens"] == plain["usage"]["output_tokens"]


# ---- count_tokens --------------------------------------------------------------------------------

def test_count_tokens(client):
    n = client.messages.count_tokens(model="m", messages=CAPITAL)
    assert n.input_tokens > 0
    m = create(client, max_tokens=1)
    assert n.input_tokens == prompt_tokens(m)
    with_sys = client.messages.count_tokens(model="m", messages=CAPITAL,
                                            system="You are a helpful pirate.")
    assert with_sys.input_tokens != n.input_tokens
    longer = client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "What is the capital of France? " * 5}])
    assert longer.input_tokens > n.input_tokens


def test_count_tokens_raw_shape(srv):
    status, _, body = raw(srv, "POST", "/v1/messages/count_tokens",
                          {"model": "m", "messages": CAPITAL})
    assert status == 200
    body = json.loads(body)
    assert set(body) == {"input_tokens"} and isinstance(body["input_tokens"], int)


# ---- errors --------------------------------------------------------------------------------------

def test_missing_max_tokens_is_400(srv):
    status, headers, body = raw(srv, "POST", "/v1/messages", {"model": "m", "messages": CAPITAL})
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    body = json.loads(body)
    assert_anthropic_error(body)
    assert "max_tokens" in body["error"]["message"]


def test_bad_request_surfaces_as_sdk_error(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="m", max_tokens=4, messages=[])
    assert e.value.status_code == 400
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"


def test_max_tokens_zero_is_400(client):
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=0, messages=CAPITAL)


def test_unknown_role_is_400(client):
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=4,
                               messages=[{"role": "wizard", "content": "hi"}])


# ---- authentication ------------------------------------------------------------------------------

def test_api_key_through_the_sdk(starter):
    with Server("smollm2", "--api-key", "sekrit-456", "--temp", "0") as s:
        good = anthropic.Anthropic(base_url=s.url, api_key="sekrit-456", max_retries=0)
        m = good.messages.create(model="m", max_tokens=2, messages=CAPITAL)
        assert m.type == "message"
        assert good.messages.count_tokens(model="m", messages=CAPITAL).input_tokens > 0
        bad = anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as e:
            bad.messages.create(model="m", max_tokens=2, messages=CAPITAL)
        assert e.value.status_code == 401
        assert e.value.body["type"] == "error"
        assert e.value.body["error"]["type"] == "authentication_error"
        # the Bearer form works for the Anthropic routes too
        st, _, _ = raw(s, "POST", "/v1/messages/count_tokens",
                       {"model": "m", "messages": CAPITAL},
                       {"Authorization": "Bearer sekrit-456"})
        assert st == 200


def test_models_list_through_the_anthropic_sdk(client):
    page = client.models.list()
    assert page.data[0].id == MODEL_ID and page.data[0].type == "model"
    assert page.data[0].display_name == MODEL_ID
    assert page.data[0].created_at.year >= 2024
    assert page.has_more is False and page.first_id == MODEL_ID
