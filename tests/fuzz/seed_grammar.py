#!/usr/bin/env python3
"""seed_grammar.py - writes a seed corpus for fuzz_grammar into the directory given as argv[1].

Grammar seeds are plain grammar text; schema seeds start with the byte 'S' followed by a JSON
schema, regex seeds with 'R' (whole match) or 'J' (JSON-string content) followed by the regex
(the layout fuzz_grammar.c reads). The snippets cover the grammar syntax (literals with
escapes, classes with ranges and negation, groups, every repetition form, recursion, comments,
and a few errors) and the supported schema keywords, plus a few byte-level mutations of them.
Standard library only; deterministic (fixed random seed)."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seedlib import mutate, write_seeds  # noqa: E402

GRAMMARS = [
    'root ::= "a" | "b" "c"*',
    'root ::= [a-z0-9_]+ ("=" [^\\n]*)? "\\n"',
    'root ::= "\\"" ([^"\\\\] | "\\\\" ["\\\\nt])* "\\""',
    'root ::= list\nlist ::= "[" (item ("," item)*)? "]"\nitem ::= list | [0-9]{1,3}',
    'root ::= "x"{2} "y"{1,} "z"{0,3} "w"?  # comment\n',
    'root ::= [\\u00e9-\\u00ff\\x41] . [^\\U0001F600]',
    'root ::= a b\na ::= "1" | \nb ::= ("2" | "3")+',
    'root ::= root "a"',
    'root ::= ("a" | "")*',
    'root ::= "unterminated',
    'root ::= (a',
    'root ::= "a"{9999}',
    'root ::= [z-a]',
    'x ::= "no root"',
    'root ::= "\\q"',
]

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                      "age": {"type": "integer"}, "ok": {"type": "boolean"}},
     "required": ["name"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "minItems": 1, "maxItems": 3},
    {"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {
        "v": {"anyOf": [{"type": "string"}, {"const": {"k": [1]}}]},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}}},
    {"definitions": {"d": {"type": "string", "format": "date-time"}},
     "oneOf": [{"$ref": "#/definitions/d"}, {"type": ["number", "null"]}]},
    {"type": "object"},
    {"type": "object", "additionalProperties": {"type": "string", "format": "uuid"}},
    {"properties": {"ab": {"type": "integer"}, "a": {"type": "null"}, "\u00e9": {"const": 1}},
     "required": ["a"], "additionalProperties": True},
    {"type": "string", "minLength": 2, "maxLength": 4, "title": "t"},
    {"type": "object", "patternProperties": {"a": {}}},
    {"type": "string", "format": "email"},
    True,
]


REGEXES = [
    r"\(\d{3}\) \d{3}-\d{4}",
    r"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$",
    r"(?P<y>\d{4})-(?<m>0[1-9]|1[0-2])|n/a",
    r"[^\s\d\\\"]+\W?\S*?.{2,}",
    r"a{,3}b{2}c+?d??[]x-]\x41\u00e9\U0001F600é",
    r"(a|)(((b)))|\.\*\+\?\{\}",
    r"a{3,2}",
    r"(a)\1",
    r"(?=x)",
    r"[z-a]",
    "\\",
    r"((",
]


def main():
    out = sys.argv[1]
    files = [g.encode() for g in GRAMMARS]
    files += [b"S" + json.dumps(s).encode() for s in SCHEMAS]
    files += [p + r.encode() for r in REGEXES for p in (b"R", b"J")]
    rng = random.Random(4321)
    mutate(files, rng, 40, 3, 8, 16)
    write_seeds(out, files)


if __name__ == "__main__":
    main()
