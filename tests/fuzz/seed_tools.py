#!/usr/bin/env python3
"""seed_tools.py - writes a seed corpus for fuzz_tools into the directory given as argv[1].

Each seed is one byte (request shape in bits 0-1, tool-call family in bits 2-4, parallel calls in
bit 7) and then a JSON object {"tools", "tool_choice", "messages"} in that shape: valid tools with
varied schemas, choices of every kind, histories with calls and results, and broken entries next
to each error path; then byte-level mutations. Standard library only; output is deterministic.
"""
import json
import random
import sys

from seedlib import mutate, write_seeds

PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]},
    "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"},
                                          "maxItems": 3},
    "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}}},
    "required": ["city"]}
CHAT = [{"type": "function", "function": {"name": "get_weather", "description": "w",
                                          "parameters": PARAMS}},
        {"type": "function", "function": {"name": "now"}}]
ANTHROPIC = [{"name": "get_weather", "description": "w", "input_schema": PARAMS},
             {"name": "now", "input_schema": {"type": "object"}}]
RESPONSES = [{"type": "function", "name": "get_weather", "parameters": PARAMS},
             {"type": "function", "name": "now"}]
HISTORY = [{"role": "user", "content": "weather?"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
           {"role": "tool", "tool_call_id": "c1", "content": "rain"},
           {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "x"}]}]


def bodies():
    choices = [
        (0, CHAT, ["auto", "none", "required",
                   {"type": "function", "function": {"name": "now"}},
                   {"type": "function", "function": {"name": "nope"}}, 7]),
        (1, ANTHROPIC, [{"type": "any"}, {"type": "tool", "name": "get_weather"},
                        {"type": "auto", "disable_parallel_tool_use": True}, {"type": "x"}]),
        (2, RESPONSES, ["required", {"type": "function", "name": "now"}, "auto"]),
    ]
    for shape, tools, chs in choices:
        for ch in chs:
            yield shape, {"tools": tools, "tool_choice": ch, "messages": HISTORY}
    yield 0, {"tools": [{"type": "function", "function": {"name": "bad name!"}}]}
    yield 0, {"tools": [{"type": "custom", "name": "x"}], "tool_choice": "required"}
    yield 1, {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    yield 0, {"tools": CHAT + CHAT[:1], "tool_choice": "required"}
    yield 0, {"tools": [{"type": "function", "function": {
        "name": "p", "parameters": {"type": "object", "patternProperties": {}}}}],
        "tool_choice": "required"}


def main(out):
    files = []
    for i, (shape, body) in enumerate(bodies()):
        for fam in range(8):
            if (i + fam) % 3:  # every family, a third of the bodies each
                continue
            head = shape | fam << 2 | (0x80 if fam % 2 else 0)
            files.append(bytes([head]) + json.dumps(body).encode())
    rng = random.Random(11)
    mutate(files, rng, 60, 4, 12, 16)
    write_seeds(out, files)
    print(f"wrote {len(files)} seeds to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
