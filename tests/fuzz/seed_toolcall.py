"""Seeds for fuzz_toolcall: recorded model outputs in each tool-call family's markup, each
prefixed with the byte that picks the family (index mod the family count) and the chunk size."""
import os
import sys

OUTPUTS = [
    (1, 'Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'),
    (2, '<tool_call><function=search><parameter=q>cats</parameter></function></tool_call>'),
    (3, '<|python_tag|>{"name": "calc", "parameters": {"x": [1, 2, {"y": "}"}]}}'),
    (4, '[TOOL_CALLS][{"name": "f", "arguments": {"a": "\\u00fc"}}]'),
    (5, '```tool_code\nprint(f(a=1, b="x", c=True))\n```'),
    (6, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    (7, '[f(a=1), g(b="two")]'),
    (0, '<think>let me see</think>{"name": "f", "arguments": {}}'),
    (1, '<tool_call>{"name": "broken", "arguments": {'),
]


def main(out):
    os.makedirs(out, exist_ok=True)
    for i, (fam, text) in enumerate(OUTPUTS):
        for chunk in (0, 5):
            with open(os.path.join(out, f"seed{i}_{chunk}"), "wb") as f:
                f.write(bytes([fam + 8 * chunk]) + text.encode())
    print(f"wrote {2 * len(OUTPUTS)} seeds to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
