#!/usr/bin/env python3
"""seed_template.py - writes a seed corpus for fuzz_template into the directory given as argv[1].

Each seed is one JSON context line followed by a template. The snippets below are written for
this corpus to cover the template language (whitespace control, loops with loop.*, namespaces,
macros and call blocks, filters, tests, string methods, tojson, slicing, raise_exception); when
../shared/data/templates exists, its real chat templates are added too, each with a typical
conversation, plus a few byte-level mutations of everything. Standard library only;
deterministic (fixed random seed)."""
import glob
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seedlib import mutate, write_seeds  # noqa: E402

CTX = {
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi <there> & 'you'"},
        {"role": "assistant", "content": "", "reasoning_content": "think",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": {"x": [1, 2.5, None, True]}}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "42"},
        {"role": "user", "content": [{"type": "text", "text": "part"}]},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                                                "parameters": {"type": "object"}}}],
    "add_generation_prompt": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "enable_thinking": False,
}

SNIPPETS = [
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
    "{%- for m in messages -%}\n  {{- m['role'] | upper }}: {{ m.content | trim -}}\n{% endfor %}",
    "{% set ns = namespace(sys='', n=0) %}{% for m in messages %}{% if m.role == 'system' %}"
    "{% set ns.sys = m.content %}{% else %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}"
    "{{ ns.sys }}{{ ns.n }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.previtem.role if loop.previtem }}{{ loop.cycle('a','b') }}{% endfor %}",
    "{% macro fmt(x, sep=', ') %}{{ x | join(sep) }}{% endmacro %}{{ fmt(['a', 'b']) }}"
    "{{ fmt([1, 2], sep='-') }}",
    "{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}body{% endcall %}",
    "{{ tools | tojson(indent=2) }}{{ messages[2].tool_calls[0].function.arguments | tojson }}",
    "{% for t in tools %}{{ t.function.name }}{{ t.function.parameters | tojson }}{% endfor %}",
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}",
    "{{ messages | rejectattr('tool_calls', 'defined') | list | length }}",
    "{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ 'a,b,c'.split(',') }}{{ ' x '.strip() }}{{ 'abc'[::-1] }}{{ 'abc'[1:] }}",
    "{{ 1 + 2 * 3 ** 2 // 4 % 5 - -1 }}{{ 7 / 2 }}{{ 'x' * 3 }}{{ [1] + [2] }}{{ 1 ~ 2 }}",
    "{{ none }}{{ true }}{{ 1.0 }}{{ 1e-7 }}{{ [1, 'a', none] }}{{ {'k': (1,)} }}",
    "{% if messages[0].role != 'system' %}{{ raise_exception('need a system message') }}{% endif %}",
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>{% endif %}",
    "{% set x %}captured {{ 1 }}{% endset %}{{ x | length }}{% filter upper %}up{% endfilter %}",
    "{% for i in range(5) if i is odd %}{{ i }}{% else %}none{% endfor %}{% for i in range(3) %}"
    "{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
    "{{ strftime_now('%d %b %Y') }}{{ dict(a=1, b=[2]) }}{{ 'x' is string }}{{ 3 is divisibleby 3 }}",
    "{{ u.missing }}{{ messages[99] }}{{ none.x }}{{ u | default('d') }}{{ '' | default('e', true) }}",
    "{{ '%s-%05.1f' | format('a', 3.14159) }}{{ 'a\\nb' | indent(4, true) }}{{ 3.7 | round }}",
    "{{ 'x'|safe + '<b>' }}{{ '<i>' | e }}{{ [3, 1, 2] | sort | reverse | list }}{{ [1, 1] | unique | list }}",
    "{% generation %}{{ messages[-1].content }}{% endgeneration %}",
    "{% raw %}{{ kept }}{% endraw %}{# comment #}\n  {%+ if true %}x{% endif %}",
    "{{ 'unterminated",
    "{% if %}{% endif %}",
    "{% for x in %}",
    "{{ (((((((1))))))) }}{{ [[[[[]]]]] }}{{ {'a': {'b': {'c': {}}}} }}",
    "{% macro r(n) %}{% if n > 0 %}{{ r(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ r(5) }}",
]


def main():
    out = sys.argv[1]
    ctx_line = json.dumps(CTX, ensure_ascii=False)
    seeds = [s.encode() for s in SNIPPETS]
    here = os.path.dirname(os.path.abspath(__file__))
    tdir = os.path.join(here, "..", "..", "..", "shared", "data", "templates")
    for path in sorted(glob.glob(os.path.join(tdir, "*.jinja"))):
        with open(path, "rb") as f:
            seeds.append(f.read())
    rng = random.Random(1234)
    files = []
    for i, tpl in enumerate(seeds):
        files.append(ctx_line.encode() + b"\n" + tpl)
        files.append(b"{}\n" + tpl)
    mutate(files, rng, 60, 4, 16, 32)
    write_seeds(out, files)


if __name__ == "__main__":
    main()
