"""The agent API through the real SDKs: structured output (response_format), tool calling
(tool_choice, streamed tool_calls, Anthropic tool_use round trips) and reasoning (a thinking
template's block split into reasoning_content / thinking blocks).

The starter model's template knows no tools, so the server describes them in the system message
and reads calls in the generic <tool_call> markup; tool_choice "required" and structured output
are enforced by the grammar engine, so even this 135M model must produce valid calls and JSON."""
import json
import random
import re

import anthropic
import jsonschema
import openai
import pytest

from server import Server, req

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a timezone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 32},
                           "hours24": {"type": "boolean"}},
            "required": ["zone"],
        },
    },
}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
GREEDY = {"temperature": 0}  # the Anthropic SDK (2.x) has no temperature argument
NO_END = {"0": -100, "2": -100}  # the starter model's <|endoftext|> and <|im_end|>

# A minimal thinking template: the generation prompt opens <think> unless thinking is off,
# when it writes an empty, closed block (as Qwen3's does).
THINK_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{%- else %}<think>\n{%- endif %}{%- endif %}")


@pytest.fixture(scope="module")
def srv(starter):
    with Server("smollm2") as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def aclient(srv):
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)


def chat(client, messages=ASK, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 200)
    return client.chat.completions.create(model="m", messages=messages, **kw)


# ---- structured output ------------------------------------------------------------------------

def schema_variants(n, seed=7):
    """n varied schemas from the supported subset, deterministic. Strings are bounded so a small
    model cannot ramble past max_tokens inside one."""
    rnd = random.Random(seed)
    leaves = [
        lambda: {"type": "string", "maxLength": rnd.choice([8, 16, 30])},
        lambda: {"type": "integer"},
        lambda: {"type": "number"},
        lambda: {"type": "boolean"},
        lambda: {"type": "null"},
        lambda: {"enum": rnd.sample(["red", "green", "blue", "cyan", 3, True, None], 3)},
        lambda: {"const": rnd.choice(["fixed", 42, False])},
        lambda: {"type": "string", "format": rnd.choice(["date", "uuid", "time"])},
        lambda: {"type": "string", "minLength": 2, "maxLength": 6},
        lambda: {"type": ["integer", "null"]},
        lambda: {"type": "integer", "minimum": rnd.choice([-50, 0, 7]),
                 "exclusiveMaximum": rnd.choice([60, 1000])},
        lambda: {"type": "string", "pattern": rnd.choice([r"^[A-Z]{2}-\d{3}$",
                                                          r"^(yes|no|maybe)$", r"^\w{1,8}$"])},
    ]

    def leaf():
        return rnd.choice(leaves)()

    def node(depth):
        r = rnd.random()
        if depth < 2 and r < 0.2:
            return {"type": "array", "items": node(depth + 1),
                    "minItems": rnd.choice([0, 1]), "maxItems": rnd.choice([2, 3])}
        if depth < 2 and r < 0.35:
            return obj(depth + 1)
        if depth < 2 and r < 0.45:
            return {"anyOf": [leaf(), leaf()]}
        return leaf()

    def obj(depth):
        names = rnd.sample(["name", "age", "city", "tags", "score", "ok", "note", "id", "when",
                            "kind", "size", "meta"], rnd.randint(1, 5))
        props = {k: node(depth) for k in names}
        req_ = [k for k in names if rnd.random() < 0.7]
        return {"type": "object", "properties": props, "required": req_,
                "additionalProperties": False}

    out = []
    for i in range(n):
        s = obj(0)
        if i % 10 == 3:  # a $ref through $defs
            s = {"type": "object", "$defs": {"pt": {"type": "object", "properties": {
                "x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}},
                 "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
                 "required": ["a", "b"]}
        out.append(s)
    return out


def test_json_schema_replies_always_validate(client):
    prompts = ["Describe a person.", "Give me some data.", "Tell me about a city.",
               "Invent a product.", "Answer in JSON."]
    for i, schema in enumerate(schema_variants(50)):
        r = chat(client, [{"role": "user", "content": prompts[i % len(prompts)]}],
                 temperature=0.8, seed=i, max_tokens=400,
                 response_format={"type": "json_schema",
                                  "json_schema": {"name": f"s{i}", "schema": schema,
                                                  "strict": True}})
        ch = r.choices[0]
        assert ch.finish_reason == "stop", (i, schema, ch.message.content)
        value = json.loads(ch.message.content)
        jsonschema.validate(value, schema)


def test_json_object_reply_is_an_object(client):
    r = chat(client, [{"role": "user", "content": "List three colours."}],
             response_format={"type": "json_object"}, max_tokens=300)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_structured_stream_equals_plain(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                         "age": {"type": "integer"}},
        "required": ["name", "age"]}}}
    plain = chat(client, response_format=fmt).choices[0].message.content
    parts = [c.choices[0].delta.content or "" for c in
             chat(client, response_format=fmt, stream=True) if c.choices]
    assert "".join(parts) == plain
    assert set(json.loads(plain)) == {"name", "age"}


def test_unsupported_schema_feature_is_named(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "patternProperties": {"^a": {}}}}})
    assert "patternProperties" in str(e.value)


def test_other_servers_structured_fields(client, srv):
    """vLLM's guided_choice / structured_outputs and llama-server's grammar and json_schema, in
    chat and in raw completions."""
    colours = ["red", "green", "blue"]
    r = chat(client, [{"role": "user", "content": "Pick a colour."}],
             extra_body={"guided_choice": colours})
    assert r.choices[0].message.content in colours and r.choices[0].finish_reason == "stop"
    r = chat(client, [{"role": "user", "content": "Give me a phone number."}],
             extra_body={"guided_regex": r"\(\d{3}\) \d{3}-\d{4}"})
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", r.choices[0].message.content)
    assert r.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError) as e:  # refused by name, never ignored
        chat(client, extra_body={"guided_regex": r"(a)\1"})
    assert "backreferences" in str(e.value) and e.value.param == "guided_regex"
    r = chat(client, [{"role": "user", "content": "Yes or no?"}],
             extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert r.choices[0].message.content in ("yes", "no")
    r = client.completions.create(model="m", prompt="The answer is", max_tokens=20, temperature=0,
                                  extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
    assert r.choices[0].text in (" yes.", " no.")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = client.completions.create(model="m", prompt="JSON:", max_tokens=30, temperature=0,
                                  extra_body={"json_schema": schema})
    jsonschema.validate(json.loads(r.choices[0].text), schema)
    status, _, raw = req(srv, "POST", "/v1/chat/completions", {
        "messages": ASK, "guided_choice": ["a"], "response_format": {"type": "json_object"}})
    assert status == 400 and "both ask for structured output" in json.loads(raw)["error"]["message"]
    status, _, raw = req(srv, "POST", "/v1/completions", {
        "prompt": "x", "grammar": "root ::= ("})
    assert status == 400 and json.loads(raw)["error"]["param"] == "grammar"


# ---- tool calling: OpenAI ---------------------------------------------------------------------

def check_call(call, names=None):
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in (names or PARAMS)
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, PARAMS[call.function.name])
    return args


def test_required_tool_choice_always_yields_a_valid_call(client):
    questions = ["What is the weather like in Paris right now?", "Is it raining in Oslo?",
                 "What time is it in Tokyo?", "Hello!", "Write a poem about the sea.",
                 "Weather for Lima in fahrenheit please", "2+2?", "Time in UTC, 24h clock"]
    for i, q in enumerate(questions):
        r = chat(client, [{"role": "user", "content": q}], tools=TOOLS, tool_choice="required",
                 temperature=0.7, seed=i)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", (q, ch)
        assert ch.message.tool_calls, (q, ch.message)
        for call in ch.message.tool_calls:
            check_call(call)
        assert "<tool_call>" not in (ch.message.content or "")


def test_named_tool_choice_calls_that_tool(client):
    r = chat(client, tools=TOOLS,
             tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls
    assert calls and all(c.function.name == "get_time" for c in calls)
    check_call(calls[0], ["get_time"])


def test_tool_choice_none_and_auto_answer_in_words_or_call(client):
    r = chat(client, tools=TOOLS, tool_choice="none", max_tokens=24)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")
    r = chat(client, tools=TOOLS, max_tokens=120)  # auto: either shape, never leaked markup
    msg = r.choices[0].message
    assert "<tool_call>" not in (msg.content or "")
    if msg.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls"


def test_streamed_tool_calls_follow_openai_shape(client):
    chunks = list(chat(client, tools=TOOLS, tool_choice="required", stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and
              c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls, deltas
    first = calls[0]
    assert first.index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name in PARAMS
    args = "".join(tc.function.arguments or "" for tc in calls if tc.index == 0)
    for tc in calls[1:]:
        if tc.index == 0:
            assert tc.id is None and tc.function.name is None
    jsonschema.validate(json.loads(args), PARAMS[first.function.name])
    assert not any("<tool_call>" in (d.content or "") for d in deltas)
    # the same request unstreamed gives the same call
    plain = chat(client, tools=TOOLS, tool_choice="required").choices[0].message.tool_calls[0]
    assert plain.function.name == first.function.name
    assert json.loads(plain.function.arguments) == json.loads(args)


def test_tool_result_round_trip(client):
    r = chat(client, tools=TOOLS, tool_choice="required")
    call = r.choices[0].message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
    r2 = chat(client, history, tools=TOOLS, tool_choice="none", max_tokens=32)
    assert r2.choices[0].finish_reason in ("stop", "length")
    assert r2.choices[0].message.content
    # the call and its result are in the prompt
    alone = chat(client, tools=TOOLS, tool_choice="none", max_tokens=1)
    assert r2.usage.prompt_tokens > alone.usage.prompt_tokens + 15


def test_bad_tools_are_refused_with_the_field(srv):
    status, _, raw = req(srv, "POST", "/v1/chat/completions", {
        "messages": ASK, "tools": [{"type": "function", "function": {"name": "bad name!"}}]})
    assert status == 400
    err = json.loads(raw)["error"]
    assert err["param"].startswith("tools") and "name" in err["message"]


# ---- tool calling: Anthropic ------------------------------------------------------------------

ATOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
           "input_schema": t["function"]["parameters"]} for t in TOOLS]


def test_anthropic_tool_use_round_trip(aclient):
    m = aclient.messages.create(model="m", max_tokens=200, tools=ATOOLS, extra_body=GREEDY,
                                tool_choice={"type": "any"}, messages=ASK)
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and uses[0].id.startswith("toolu_")
    jsonschema.validate(uses[0].input, PARAMS[uses[0].name])
    m2 = aclient.messages.create(
        model="m", max_tokens=32, tools=ATOOLS, extra_body=GREEDY, messages=ASK + [
            {"role": "assistant", "content": m.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                          "content": "18 degrees and sunny"}]}],
        tool_choice={"type": "none"})
    assert m2.stop_reason in ("end_turn", "max_tokens")
    assert m2.content[0].type == "text" and m2.content[0].text
    assert m2.usage.input_tokens + m2.usage.cache_read_input_tokens > m.usage.input_tokens


def test_anthropic_streamed_tool_use(aclient):
    named = {"type": "tool", "name": "get_weather"}
    with aclient.messages.stream(model="m", max_tokens=200, tools=ATOOLS, extra_body=GREEDY,
                                 tool_choice=named, messages=ASK) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    starts = [e for e in events if e.type == "content_block_start"]
    tool_starts = [e for e in starts if e.content_block.type == "tool_use"]
    assert tool_starts and tool_starts[0].content_block.name == "get_weather"
    idx = tool_starts[0].index
    partial = "".join(e.delta.partial_json for e in events
                      if e.type == "content_block_delta" and e.index == idx)
    jsonschema.validate(json.loads(partial), PARAMS["get_weather"])
    assert final.stop_reason == "tool_use"
    assert [b for b in final.content if b.type == "tool_use"][0].input == json.loads(partial)


# ---- reasoning --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def think_srv(starter, tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "think.jinja"
    path.write_text(THINK_TEMPLATE)
    with Server("smollm2", "--chat-template-file", str(path)) as s:
        yield s


def test_thinking_goes_to_reasoning_fields(think_srv):
    client = openai.OpenAI(base_url=think_srv.url + "/v1", api_key="unused", max_retries=0)
    r = chat(client, max_tokens=24)
    msg = r.choices[0].message
    extra = msg.model_extra or {}
    assert extra.get("reasoning_content"), msg  # the prompt opened the block
    assert extra.get("reasoning") == extra["reasoning_content"]
    assert "<think>" not in (msg.content or "") and "</think>" not in extra["reasoning_content"]
    # reasoning_effort none: the template closes the block (a longer prompt), so the reply is
    # content (kept from ending at once: after an empty block this model tends to stop)
    r2 = chat(client, max_tokens=24, reasoning_effort="none", logit_bias=NO_END)
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens
    assert r2.choices[0].message.content
    assert not (r2.choices[0].message.model_extra or {}).get("reasoning_content")
    # streamed: reasoning deltas, in order, add up to the plain reply's reasoning
    parts = [(c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
             for c in chat(client, max_tokens=24, stream=True) if c.choices]
    assert "".join(parts) == extra["reasoning_content"]


def test_anthropic_thinking_blocks(think_srv):
    a = anthropic.Anthropic(base_url=think_srv.url, api_key="unused", max_retries=0)
    m = a.messages.create(model="m", max_tokens=24, extra_body=GREEDY, messages=ASK,
                          thinking={"type": "enabled", "budget_tokens": 1024})
    assert m.content[0].type == "thinking" and m.content[0].thinking
    assert "<think>" not in m.content[0].thinking
    m = a.messages.create(model="m", max_tokens=24, messages=ASK,
                          thinking={"type": "disabled"}, extra_body=GREEDY)
    assert [b.type for b in m.content] == ["text"]


def test_server_thinking_flag_sets_the_default(starter, tmp_path):
    path = tmp_path / "think.jinja"
    path.write_text(THINK_TEMPLATE)
    with Server("smollm2", "--chat-template-file", str(path), "--thinking", "off") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        r = chat(client, max_tokens=16, logit_bias=NO_END)
        assert r.choices[0].message.content
        assert not (r.choices[0].message.model_extra or {}).get("reasoning_content")
