"""template_cases.py - conversations and the oracle for the chat-template parity test.

The oracle is transformers' own rendering path (render_jinja_template: the sandboxed jinja2
environment apply_chat_template uses, with its tojson, raise_exception and strftime_now). Each
case is a request object as `hearth template` reads it on stdin; `oracle()` splits it into the
keyword arguments render_jinja_template takes.
"""
import copy
import json
import os
import subprocess

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web and return the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": "integer", "default": 5},
                },
                "required": ["query"],
            },
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _tool_turns(arguments):
    return [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "name": "get_weather",
            "content": '{"temperature": 21, "condition": "sunny"}',
        },
        {"role": "assistant", "content": "It is 21 degrees and sunny in Paris."},
        {"role": "user", "content": "Thanks! And in Rome?"},
    ]


CONVERSATIONS = {
    "system_user": {
        "messages": [SYSTEM, {"role": "user", "content": "Hello, who are you?"}],
        "add_generation_prompt": True,
    },
    "multi_turn": {
        "messages": [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
        ],
        "add_generation_prompt": False,
    },
    "multi_turn_system_gen": {
        "messages": [
            SYSTEM,
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "2 + 2 = 4."},
            {"role": "user", "content": "And 3 + 3?"},
        ],
        "add_generation_prompt": True,
    },
    "tool_call": {
        "messages": _tool_turns({"city": "Paris", "unit": "celsius"}),
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    "tool_call_string_args": {
        "messages": _tool_turns('{"city": "Paris", "unit": "celsius"}'),
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    "thinking_on": {
        "messages": [
            {"role": "user", "content": "Is 17 prime?"},
            {
                "role": "assistant",
                "content": "Yes, 17 is prime.",
                "reasoning_content": "17 has no divisors besides 1 and itself.",
            },
            {"role": "user", "content": "And 21?"},
        ],
        "add_generation_prompt": True,
        "enable_thinking": True,
        "reasoning_effort": "high",
    },
    "thinking_off": {
        "messages": [SYSTEM, {"role": "user", "content": "Say hi."}],
        "add_generation_prompt": True,
        "enable_thinking": False,
        "reasoning_effort": "low",
    },
    "content_parts": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe this in one line:"},
                    {"type": "text", "text": "a red bicycle"},
                ],
            },
        ],
        "add_generation_prompt": True,
    },
    "special_chars": {
        "messages": [
            {"role": "system", "content": "Answer in <b>HTML</b> & keep 'quotes' \"intact\"."},
            {"role": "user", "content": "  Héllo wörld — ünïcode ✓ 🚀\n\tline two\\n  "},
            {"role": "assistant", "content": "Ça va? 你好!\n"},
            {"role": "user", "content": "{{ not a template }} {% neither %}"},
        ],
        "add_generation_prompt": True,
    },
}

CONVERSATIONS["parallel_tools"] = {
    "messages": [
        {"role": "user", "content": "Weather in Paris and news about Zürich?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "search", "arguments": {
                     "query": "Zürich news", "max_results": 3, "fresh": True,
                     "filters": {"lang": ["de", "en"], "score": 0.5, "since": None}}}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather",
         "content": '{"temperature": 18.5}'},
        {"role": "tool", "tool_call_id": "call_b", "name": "search",
         "content": "1. Zürich opens a new bridge"},
    ],
    "tools": TOOLS,
    "add_generation_prompt": True,
}
CONVERSATIONS["documents_rag"] = {
    "messages": [SYSTEM, {"role": "user", "content": "What do the documents say about tea?"}],
    "documents": [
        {"title": "Tea history", "text": "Tea was first drunk in China."},
        {"title": "Tea types", "text": "Green, black & oolong teas differ in oxidation."},
    ],
    "add_generation_prompt": True,
}
CONVERSATIONS["reasoning_tool"] = {
    "messages": [
        {"role": "user", "content": "Find the weather in Oslo."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should call get_weather for Oslo.",
            "tool_calls": [{"id": "call_9", "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "tool_call_id": "call_9", "name": "get_weather", "content": "-3 C"},
        {"role": "assistant", "content": "It is -3 C in Oslo.",
         "reasoning_content": "The tool said -3 C."},
        {"role": "user", "content": "Thanks."},
    ],
    "tools": TOOLS,
    "add_generation_prompt": True,
    "enable_thinking": True,
}

BOS, EOS = "<s>", "</s>"


def request(conv):
    """The JSON object sent to `hearth template` for a conversation name."""
    req = copy.deepcopy(CONVERSATIONS[conv])
    req.setdefault("bos_token", BOS)
    req.setdefault("eos_token", EOS)
    return req


def oracle(template, req):
    """Renders with transformers; returns (ok, text_or_error)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    kw = copy.deepcopy(req)
    messages = kw.pop("messages")
    tools = kw.pop("tools", None)
    documents = kw.pop("documents", None)
    agp = kw.pop("add_generation_prompt", False)
    try:
        out, _ = render_jinja_template(
            conversations=[messages], tools=tools, documents=documents, chat_template=template,
            add_generation_prompt=agp, **kw)
        return True, out[0]
    except Exception as e:  # the template rejects this conversation (raise_exception etc.)
        return False, f"{type(e).__name__}: {e}"


def hearth(binary, template_path, req):
    """Renders with `hearth template`; returns (ok, text_or_error)."""
    p = subprocess.run([binary, "template", template_path], input=json.dumps(req).encode(),
                       capture_output=True, timeout=60)
    if p.returncode == 0:
        return True, p.stdout.decode("utf-8", errors="surrogateescape")
    return False, p.stderr.decode("utf-8", errors="replace").strip()


def compare(binary, template_path, conv):
    """One template x conversation: (agree, detail)."""
    with open(template_path, encoding="utf-8", newline="") as f:
        src = f.read()
    req = request(conv)
    ok_o, out_o = oracle(src, req)
    ok_h, out_h = hearth(binary, template_path, req)
    if not ok_o:
        if ok_h:
            return False, f"oracle fails ({out_o}) but hearth renders"
        # A template's own raise_exception message must come through unchanged.
        if out_o.startswith("TemplateError: ") and out_o[len("TemplateError: "):] not in out_h:
            return False, f"both fail, but differently: oracle {out_o!r}, hearth {out_h!r}"
        return True, "both fail"
    if not ok_h:
        return False, f"hearth fails: {out_h}"
    if out_o == out_h:
        return True, "identical"
    i = next((k for k in range(min(len(out_o), len(out_h))) if out_o[k] != out_h[k]),
             min(len(out_o), len(out_h)))
    return False, (f"differs at char {i}: oracle {out_o[max(0, i - 30):i + 30]!r} "
                   f"vs hearth {out_h[max(0, i - 30):i + 30]!r}")


def templates_dir(root):
    return os.path.join(os.path.dirname(root), "shared", "data", "templates")
