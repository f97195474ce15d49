#!/usr/bin/env python3
"""seed_adapters.py - writes a seed corpus for fuzz_adapters into the directory given as argv[1].

Request bodies for the OpenAI (chat, completions, responses) and Anthropic (messages, count_tokens)
parsers:
valid ones that use every supported field, and broken ones next to each error path (wrong types,
out-of-range numbers, bad roles and content blocks, bad logit_bias, unsupported features,
malformed JSON, invalid UTF-8). Every body goes to every parser, so one corpus serves all four.
Standard library only; output is deterministic.
"""
import json
import os
import sys

USER = [{"role": "user", "content": "hi"}]


def seeds():
    yield "chat_min", {"messages": USER}
    yield "chat_full", {
        "model": "gpt-4o", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": "r", "tool_call_id": "t1", "name": "f"}],
        "max_tokens": 8, "max_completion_tokens": 9, "temperature": 0.7, "top_p": 0.9,
        "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["x", "yy"], "presence_penalty": 0.5,
        "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logit_bias": {"65": 5, "258": -100},
        "logprobs": True, "top_logprobs": 3, "n": 1, "stream": True,
        "stream_options": {"include_usage": True}, "user": "u", "metadata": {"k": "v"},
        "response_format": {"type": "text"}, "tools": []}
    yield "chat_bad_types", {"messages": USER, "temperature": "hot", "max_tokens": 0}
    yield "chat_bad_role", {"messages": [{"role": "wizard", "content": "x"}]}
    yield "chat_image", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:"}}]}]}
    yield "chat_n2", {"messages": USER, "n": 2}
    yield "chat_bias", {"messages": USER, "logit_bias": {"abc": 1, "99999": 200}}
    yield "chat_stop_many", {"messages": USER, "stop": [str(i) for i in range(20)]}
    yield "chat_long", {"messages": [{"role": "user", "content": "word " * 40}]}
    yield "chat_tools", {"messages": USER, "tools": [{"type": "function",
                                                      "function": {"name": "f"}}]}
    fn = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                         "n": {"type": "integer"}}, "required": ["city"]}}}
    yield "chat_tool_required", {"messages": USER, "tools": [fn], "tool_choice": "required",
                                 "parallel_tool_calls": True}
    yield "chat_tool_named", {"messages": USER, "tools": [fn], "tool_choice": {
        "type": "function", "function": {"name": "get_weather"}}}
    yield "chat_tool_history", {"messages": USER + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"}], "tools": [fn]}
    yield "chat_json_schema", {"messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"enum": [1, "b"]}, "b": {"$ref": "#/$defs/d"}},
            "$defs": {"d": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}}}}}}
    yield "chat_json_object", {"messages": USER, "response_format": {"type": "json_object"},
                               "reasoning_effort": "none",
                               "chat_template_kwargs": {"enable_thinking": False}}
    yield "anthropic_tools", {"max_tokens": 4, "tools": [
        {"name": "f", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
        "tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": USER + [
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"},
                                              {"type": "tool_use", "id": "t1", "name": "f",
                                               "input": {"q": "x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": [{"type": "text", "text": "ok"}],
                                          "is_error": True}]}]}
    yield "responses_full", {
        "model": "m", "instructions": "be brief", "max_output_tokens": 8, "store": False,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                  {"type": "function_call", "call_id": "c1", "name": "get_weather",
                   "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "rain"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": fn["function"][
            "parameters"]}], "tool_choice": "required", "text": {"format": {"type": "json_object"}},
        "reasoning": {"effort": "none"}, "metadata": {"k": "v"}, "stream": True}
    yield "responses_str", {"input": "hello", "previous_response_id": "resp_unknown"}
    yield "completion_str", {"prompt": "Once upon", "max_tokens": 4, "logprobs": 2, "echo": False,
                             "suffix": None, "stop": "\n"}
    yield "completion_ids", {"prompt": [72, 105, 257], "stream": True}
    yield "completion_nested", {"prompt": [[72, 105]]}
    yield "completion_bad", {"prompt": [72, -1, 99999], "echo": True, "suffix": "z"}
    yield "completion_many", {"prompt": ["a", "b"]}
    yield "anthropic_min", {"max_tokens": 4, "messages": USER}
    yield "anthropic_full", {
        "model": "claude", "max_tokens": 9, "system": [{"type": "text", "text": "sys"}],
        "messages": [{"role": "user", "content": "a"},
                     {"role": "user", "content": [{"type": "text", "text": "b"}]},
                     {"role": "assistant", "content": "c"},
                     {"role": "user", "content": "d"},
                     {"role": "assistant", "content": "The answer is"}],
        "stop_sequences": ["END"], "temperature": 1, "top_p": 0.5, "top_k": 5, "stream": True,
        "metadata": {"user_id": "u"}, "thinking": {"type": "disabled"}}
    yield "anthropic_bad", {"max_tokens": "many", "system": 5, "messages": [
        {"role": "system", "content": [{"type": "image", "source": {}}]}]}
    yield "anthropic_blocks", {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "x"}, {"type": "text"}]}]}
    yield "anthropic_thinking", {"max_tokens": 4, "messages": USER,
                                 "thinking": {"type": "enabled", "budget_tokens": 10}}


def raw():
    yield "malformed", b'{"messages": [1,}'
    yield "not_object", b"[1, 2, 3]"
    yield "bad_utf8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'
    yield "nul", b'{"messages": [{"role": "user", "content": "a\\u0000b"}], "stop": ["\\u0000"]}'
    yield "special", b'{"prompt": "<|im_start|>user\\n<|im_end|>", "messages": [{"role": "user",' \
                     b' "content": "<|im_end|>"}], "max_tokens": 1}'
    yield "empty", b""


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, body in seeds():
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(body, f)
    for name, body in raw():
        with open(os.path.join(out, name + ".json"), "wb") as f:
            f.write(body)


if __name__ == "__main__":
    main()
