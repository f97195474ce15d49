"""`hearth serve` through the OpenAI Python SDK's Responses API (POST /v1/responses, GET and
DELETE /v1/responses/<id>): plain and streamed replies, instructions, max_output_tokens, stored
conversations continued with previous_response_id, structured output, function tools and their
outputs, and the errors (404 for unknown ids, 400 naming the field at fault).

One server for the whole file; replies are kept short and greedy."""
import json

import jsonschema
import openai
import pytest

from server import Server, req

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
QUESTION = "What is the capital of France?"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def srv(starter):
    with Server("smollm2") as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def create(client, input=QUESTION, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_output_tokens", 16)
    return client.responses.create(model="anything", input=input, **kw)


def post_json(srv, path, body):
    """Raw POST; returns (status, parsed JSON or None)."""
    status, _, raw = req(srv, "POST", path, body)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def messages_of(r):
    return [item for item in r.output if item.type == "message"]


def calls_of(r):
    return [item for item in r.output if item.type == "function_call"]


# ---- plain responses ---------------------------------------------------------------------------

def test_create_returns_output_text_and_usage(client):
    r = create(client)
    assert r.id.startswith("resp_")
    assert r.object == "response"
    assert r.status == "completed"
    assert r.model == MODEL_ID
    assert isinstance(r.created_at, (int, float)) and r.created_at > 1_600_000_000
    assert r.error is None and r.incomplete_details is None
    [msg] = r.output
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert msg.id.startswith("msg_")
    [part] = msg.content
    assert part.type == "output_text" and part.annotations == []
    assert "Paris" in r.output_text
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 16
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert 0 <= u.input_tokens_details.cached_tokens <= u.input_tokens
    assert u.output_tokens_details.reasoning_tokens == 0
    # The request's settings come back.
    assert r.max_output_tokens == 16 and r.temperature == 0
    assert r.store is True and r.tools == [] and r.tool_choice == "auto"
    assert r.parallel_tool_calls is True
    assert r.text.format.type == "text"
    assert r.previous_response_id is None and r.instructions is None


def test_metadata_and_reasoning_effort_are_echoed(client):
    r = create(client, metadata={"purpose": "test"}, reasoning={"effort": "none"},
               max_output_tokens=4)
    assert r.metadata == {"purpose": "test"}
    assert r.reasoning.effort == "none"


def test_message_items_equal_a_string_input(client):
    a = create(client)
    b = create(client, [{"role": "user", "content": QUESTION}])
    c = create(client, [{"type": "message", "role": "user",
                         "content": [{"type": "input_text", "text": QUESTION}]}])
    assert a.output_text == b.output_text == c.output_text
    assert a.usage.input_tokens == b.usage.input_tokens == c.usage.input_tokens


def test_instructions_come_first_as_a_system_message(client):
    plain = create(client, max_output_tokens=4)
    sys_msg = create(client, [{"role": "system", "content": "Answer in one word."},
                              {"role": "user", "content": QUESTION}], max_output_tokens=4)
    instr = create(client, instructions="Answer in one word.", max_output_tokens=4)
    dev = create(client, [{"role": "developer", "content": "Answer in one word."},
                          {"role": "user", "content": QUESTION}], max_output_tokens=4)
    assert instr.instructions == "Answer in one word."
    assert instr.usage.input_tokens == sys_msg.usage.input_tokens == dev.usage.input_tokens
    assert instr.usage.input_tokens != plain.usage.input_tokens
    assert instr.output_text == sys_msg.output_text


def test_max_output_tokens_makes_an_incomplete_response(client):
    r = create(client, "Write a long story about a dragon.", max_output_tokens=3)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    assert messages_of(r)[0].status == "incomplete"


# ---- stored responses --------------------------------------------------------------------------

def test_previous_response_id_continues_the_conversation(client):
    first = create(client, instructions="You are a geography teacher.")
    follow = create(client, "And what is the capital of Germany?",
                    previous_response_id=first.id)
    assert follow.previous_response_id == first.id
    assert follow.instructions is None
    # The follow-up's prompt holds the first exchange, so it is longer and starts with the part
    # the engine has cached from the first request.
    assert follow.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    # Instructions are not carried over: the stored conversation is exactly the first question
    # and answer, which spelled out as input items gives the same prompt.
    spelled = create(client, [
        {"role": "user", "content": QUESTION},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": first.output_text}]},
        {"role": "user", "content": "And what is the capital of Germany?"},
    ])
    assert follow.usage.input_tokens == spelled.usage.input_tokens
    assert follow.output_text == spelled.output_text
    assert spelled.usage.input_tokens_details.cached_tokens > 0


def test_a_chain_of_three_responses(client):
    a = create(client, "My name is Tom. Reply with OK.", max_output_tokens=4)
    b = create(client, "I live in Paris. Reply with OK.", previous_response_id=a.id,
               max_output_tokens=4)
    c = create(client, "What is my name?", previous_response_id=b.id, max_output_tokens=8)
    assert a.usage.input_tokens < b.usage.input_tokens < c.usage.input_tokens
    assert c.usage.input_tokens_details.cached_tokens > 0


def test_unknown_previous_response_id_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        create(client, previous_response_id="resp_000000000000000000000000")
    assert "resp_000000000000000000000000" in str(e.value)
    assert e.value.body["param"] == "previous_response_id"


def test_get_returns_the_stored_response_and_delete_removes_it(client):
    r = create(client)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.status == "completed"
    assert got.output_text == r.output_text
    assert got.usage.input_tokens == r.usage.input_tokens
    assert client.responses.delete(r.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        create(client, "And Germany?", previous_response_id=r.id)


def test_delete_body_shape(srv, client):
    r = create(client, max_output_tokens=2)
    status, _, raw = req(srv, "DELETE", f"/v1/responses/{r.id}")
    assert status == 200
    assert json.loads(raw) == {"id": r.id, "object": "response", "deleted": True}


def test_store_false_is_not_kept(client):
    r = create(client, store=False, max_output_tokens=4)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        create(client, "And Germany?", previous_response_id=r.id)


def test_get_of_an_unknown_id_is_an_openai_404(srv):
    status, _, raw = req(srv, "GET", "/v1/responses/resp_nothing")
    assert status == 404
    err = json.loads(raw)["error"]
    assert err["type"] == "not_found_error" and "resp_nothing" in err["message"]


# ---- streaming ---------------------------------------------------------------------------------

def test_stream_events_in_order(client):
    ref = create(client, max_output_tokens=12)
    events = list(create(client, max_output_tokens=12, stream=True))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    n_delta = types.count("response.output_text.delta")
    assert n_delta >= 1
    assert types == (["response.created", "response.in_progress",
                      "response.output_item.added", "response.content_part.added"]
                     + ["response.output_text.delta"] * n_delta
                     + ["response.output_text.done", "response.content_part.done",
                        "response.output_item.done", "response.completed"])
    created, done = events[0].response, events[-1].response
    assert created.status == "in_progress" and created.output == [] and created.usage is None
    assert created.id == done.id
    item_id = events[2].item.id
    assert events[2].item.type == "message" and events[2].output_index == 0
    for e in events[3:-1]:
        assert e.output_index == 0
        assert getattr(e, "item_id", item_id) == item_id
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-4].text == events[-3].part.text
    assert events[-2].item.content[0].text == text
    assert done.status == "completed" and done.output_text == text == ref.output_text
    assert done.output[0].id == item_id
    assert done.usage.output_tokens == ref.usage.output_tokens


def test_stream_stops_at_max_output_tokens_with_response_incomplete(client):
    events = list(create(client, "Write a long story about a dragon.", max_output_tokens=3,
                         stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-2].item.status == "incomplete"


def test_streamed_response_is_stored(client):
    events = list(create(client, max_output_tokens=8, stream=True))
    final = events[-1].response
    got = client.responses.retrieve(final.id)
    assert got.output_text == final.output_text
    follow = create(client, "And Germany?", previous_response_id=final.id, max_output_tokens=4)
    assert follow.usage.input_tokens > final.usage.input_tokens


# ---- structured output -------------------------------------------------------------------------

def test_json_schema_output_validates(client):
    r = create(client, "Give me a person named Ann who is 30 years old, as JSON.",
               max_output_tokens=60,
               text={"format": {"type": "json_schema", "name": "person", "strict": True,
                                "schema": PERSON_SCHEMA}})
    assert r.status == "completed"
    assert r.text.format.type == "json_schema"
    jsonschema.validate(json.loads(r.output_text), PERSON_SCHEMA)


def test_json_object_output_parses(client):
    r = create(client, 'What is the capital of France? Answer as JSON like {"capital": "..."}',
               max_output_tokens=60, text={"format": {"type": "json_object"}})
    assert r.status == "completed"
    assert isinstance(json.loads(r.output_text), dict)
    assert r.text.format.type == "json_object"


# ---- tools -------------------------------------------------------------------------------------

def test_required_tool_call_then_its_output(client):
    r = create(client, "What is the weather in Paris?", max_output_tokens=80,
               tools=[WEATHER_TOOL], tool_choice="required", parallel_tool_calls=False)
    assert r.status == "completed"
    [call] = calls_of(r)
    assert call.name == "get_weather" and call.status == "completed"
    assert call.id.startswith("fc_") and call.call_id
    args = json.loads(call.arguments)
    jsonschema.validate(args, WEATHER_TOOL["parameters"])
    assert r.tools[0].name == "get_weather" and r.tool_choice == "required"

    follow = create(client, [{"type": "function_call_output", "call_id": call.call_id,
                              "output": json.dumps({"city": args["city"],
                                                    "temperature": "18 C", "sky": "sunny"})}],
                    previous_response_id=r.id, tools=[WEATHER_TOOL], max_output_tokens=40)
    assert follow.status in ("completed", "incomplete")
    assert follow.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens
    assert follow.output_text or calls_of(follow)


def test_function_call_items_as_input(client):
    """A conversation with a call and its output spelled out, without stored state."""
    r = create(client, [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": json.dumps({"city": "Paris"})},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C and sunny"},
    ], tools=[WEATHER_TOOL], tool_choice="none", max_output_tokens=30)
    assert r.status in ("completed", "incomplete")
    assert r.output_text
    assert calls_of(r) == []


def test_streamed_tool_call_events(client):
    events = list(create(client, "What is the weather in Paris?", max_output_tokens=80,
                         tools=[WEATHER_TOOL], tool_choice="required",
                         parallel_tool_calls=False, stream=True))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert events[2].item.type == "function_call" and events[2].item.name == "get_weather"
    n_delta = types.count("response.function_call_arguments.delta")
    assert n_delta >= 1
    assert types[3:] == (["response.function_call_arguments.delta"] * n_delta
                         + ["response.function_call_arguments.done",
                            "response.output_item.done", "response.completed"])
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert events[-3].arguments == args == events[-2].item.arguments
    jsonschema.validate(json.loads(args), WEATHER_TOOL["parameters"])
    final = events[-1].response
    [call] = calls_of(final)
    assert call.id == events[2].item.id and call.call_id == events[2].item.call_id


# ---- errors ------------------------------------------------------------------------------------

def test_missing_input_is_a_400(srv):
    status, body = post_json(srv, "/v1/responses", {"model": "x"})
    assert status == 400
    assert body["error"]["param"] == "input"


def test_malformed_items_name_their_path(srv):
    cases = [
        ([{"role": "robot", "content": "hi"}], "input[0].role"),
        ([{"role": "user", "content": [{"type": "input_text"}]}], "input[0].content[0]"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
        ([{"role": "user", "content": "hi"}, {"type": "telepathy"}], "input[1]"),
        ([42], "input[0]"),
    ]
    for items, param in cases:
        status, body = post_json(srv, "/v1/responses", {"model": "x", "input": items})
        assert status == 400, (items, body)
        assert body["error"]["param"] == param, (items, body)
        assert body["error"]["type"] == "invalid_request_error"


def test_unsupported_items_and_parts_are_named(client):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "https://example.com/a.png"}]}])
    assert "input_image" in str(e.value)
    assert e.value.body["param"] == "input[0].content[1]"
    with pytest.raises(openai.BadRequestError) as e:
        create(client, [{"type": "file_search_call", "id": "fs_1", "queries": [],
                         "status": "completed"}])
    assert "file_search_call" in str(e.value)


def test_bad_text_format_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, text={"format": {"type": "json_schema", "name": "x"}})
    assert e.value.body["param"] == "text.format.schema"
    with pytest.raises(openai.BadRequestError) as e:
        create(client, text={"format": {"type": "yaml"}})
    assert e.value.body["param"] == "text.format.type"
