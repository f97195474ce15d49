"""tokenizer_corpus.py - a deterministic corpus of strings for tokenizer parity tests.

corpus(n) returns n strings (the same ones on every run and machine: a fixed seed and fixed
fragments, no files read) covering what breaks tokenizers: English prose, code with indentation
and tabs, CJK, Arabic, Hebrew, Devanagari, Thai, Khmer, Cyrillic, Greek, Vietnamese, emoji with
ZWJ sequences, skin tones, flags and variation selectors, whitespace and newline runs (including
NBSP, ideographic and thin spaces), numbers in many shapes, contractions, decomposed (NFD)
accents, control and zero-width characters, and text containing special-token spellings such as
"<|im_end|>", "<s>" and "[INST]". Run as a script it prints the corpus as JSON lines.
"""
import json
import random
import sys

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Tokenizers split text into pieces; a model only ever sees the pieces.",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong stepped onto its surface.",
    "She said: \"I'm not sure we'll make it, but they've promised they'd wait.\"",
    "Don't panic! You're fine, it's OK -- we'll handle it... probably.",
    "HELLO WORLD. Hello World. hello world. hELLO wORLD.",
    "The committee's decision (announced on Tuesday) surprised everyone.",
    "Large language models are trained on trillions of tokens of text.",
    "Mr. O'Neil and Dr. Smith-Jones met at 3:45 p.m. on 12/31/1999.",
    "Prices rose 3.5% year-over-year, to $1,234,567.89 in total.",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=2#frag.",
    "Well—this is an em dash—and this is an en dash: 1–2.",
    "“Curly quotes” and ‘single ones’ aren’t the same as \"straight\" ones.",
    "A sentence with trailing spaces.   ",
    "   A sentence with leading spaces.",
    "Multiple     spaces    between     words.",
    "Tabs\tbetween\twords\tand\t\ttwo tabs.",
    "Line one.\nLine two.\n\nLine four after a blank line.\n",
    "Windows line endings\r\nare different\r\n",
    "I've, you'd, he'll, we're, they've, it's, I'M, YOU'RE, She'S, 'tis, rock'n'roll",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic",
    "naïve café résumé coöperate façade jalapeño piñata Zoë Ångström",
    "Führer Straße Größe Mädchen Übermut schön",
    "Cửa Việt, Hà Nội, Thành phố Hồ Chí Minh, Đà Nẵng.",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <stdio.h>\n\nint main(void)\n{\n    printf(\"hello, world\\n\");\n    return 0;\n}\n",
    "const x = {a: 1, b: [2, 3], c: \"four\"};\nconsole.log(JSON.stringify(x, null, 2));",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<div class=\"row\"><span id='x'>&amp; &lt;tag&gt;</span></div>",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": {}}}",
    "    \t  mixed\t \tindent\n        deeper\n",
    "x+=1;y-=2;z*=3;w/=4;v%=5;u**=6;t//=7;s<<=8;r>>=9;q&=1;p|=2;o^=3",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "if __name__ == \"__main__\":\n    import sys; sys.exit(main(sys.argv[1:]))",
    "$ ls -la | grep '^d' | awk '{print $9}' > dirs.txt && wc -l dirs.txt",
    "a=>b; c->d; e::f; g!=h; i<=j; k>=l; m===n; o!==p; q&&r; s||t; u??v; w?.x",
    "    return self._cache.get(key) or self._compute(key, *args, **kwargs)",
    "// TODO(issue 3): handle the \\r\\n case\n/* block\n * comment */",
    "matrix = [[1, 2, 3],\n          [4, 5, 6],\n          [7, 8, 9]]",
    "@decorator\nclass Foo(Bar, metaclass=Meta):\n    \"\"\"Docstring.\"\"\"\n    x: int = 0\n",
    "0x1F 0b1010 0o777 1e-9 6.02214076e23 -0.0 NaN inf 1_000_000",
]

SCRIPTS = [
    "我们正在测试分词器。今天天气很好，我们去公园散步吧！",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。",
    "한국어 텍스트입니다. 토크나이저를 시험하고 있어요.",
    "مرحبا بالعالم! هذه جملة باللغة العربية للاختبار.",
    "שלום עולם! זה משפט בעברית.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "ផ្ទះរបស់ខ្ញុំនៅភ្នំពេញ។ សួស្តី",
    "Привет, мир! Это предложение на русском языке. Ёлка и ёж.",
    "Γειά σου Κόσμε! Αυτή είναι μια ελληνική πρόταση.",
    "Ελληνικά: ΆΈΉΊΌΎΏ άέήίόύώ ϊϋΐΰ",
    "Tiếng Việt có nhiều dấu: ắ ằ ẳ ẵ ặ ấ ầ ẩ ẫ ậ ế ề ể ễ ệ.",
    "Ελλάδα Україна Беларусь Қазақстан Монгол Улс ประเทศไทย",
    "ａｂｃ ＡＢＣ １２３ ！？ （全角） 「括弧」 『二重』 【隅付き】",
    "Ｈｅｌｌｏ，ｗｏｒｌｄ！",
    "𝓗𝓮𝓵𝓵𝓸 𝕎𝕠𝕣𝕝𝕕 𝟙𝟚𝟛 ℌℑℜ ﬁ ﬂ ﬀ Ⅻ ½ ¾ ² ³ ™ ℃",
    "ⓐⓑⓒ ⒜⒝⒞ ㈱ ㍿ ㌔ ㎏ ㎞",
    "Āā Ēē Īī Ōō Ūū Ǖǖ Ǘǘ Ǚǚ Ǜǜ ḀḁḂḃ",
    "𐐀𐐁𐐂 𐓘𐓙 𞤀𞤁 ꭰꭱ Ꭰ",
]

EMOJI = [
    "😀😃😄😁😆😅😂🤣🥲☺️😊",
    "👨‍👩‍👧‍👦 family, 👩‍💻 coder, 🏳️‍🌈 flag, 🧑🏽‍🚀 astronaut",
    "👍🏻👍🏼👍🏽👍🏾👍🏿 thumbs in every tone",
    "🇺🇸🇬🇧🇯🇵🇩🇪🇫🇷 flags",
    "❤️ ♥ ❤ 💔 ✨ ⭐️ 1️⃣ #️⃣ *️⃣",
    "I ❤️ NY 🗽 and 🍕!",
    "🤖: beep boop 🔋⚡️ 100%",
    "emoji at end 🎉",
    "🫠🫥🫨 newer emoji 🪿🪼",
]

SPECIAL = [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<s>[INST] What is 2+2? [/INST] 4</s>",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<s>",
    "</s>",
    "<unk>",
    " <s> spaced </s> ",
    "<|eot_id|><|start_header_id|>user<|end_header_id|>",
    "<|user|>\nhi<|end|>\n<|assistant|>\n",
    "<|assistant|>   \n  answer",
    "</s>   trailing spaces after a stripped token",
    "[INST][/INST][TOOL_CALLS][AVAILABLE_TOOLS]",
    "<fim_prefix>def f():<fim_suffix>\n<fim_middle>",
    ">>TITLE<<Some title>>ABSTRACT<<",
    "<|im_end",
    "<|im_start|",
    "<<s>>",
    "<|im_end|><|im_end|><|im_end|>",
    "<start_of_turn>user\nhi<end_of_turn>",
    "<|padding|>[PAD]",
]

WHITESPACE = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t \n \r\n",
    "\u00a0", "a\u00a0b", "\u3000", "a\u3000b", "\u2009thin\u2009space", "\u200bzero\u200bwidth",
    "\ufeffBOM", "\u2028line\u2029para", "\u0085next", "\x0bvt\x0cff",
    "word\n\n\n\nword", "     ", "\t\t\t", "end with newline\n", " leading", "trailing ",
    "a \n b", "x  \n  y",
]

NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789",
    "3.14159", "-273.15", "1,000,000", "1.000.000,00", "+1 (555) 123-4567", "2024-02-29",
    "10:30:59", "v1.2.3-rc.4", "100%", "$5", "€10", "£20", "¥30", "1st 2nd 3rd 4th",
    "٠١٢٣٤٥٦٧٨٩", "०१२३४५", "１２３４５", "²³¹", "½¼¾", "Ⅳ Ⅸ", "፩፪", "3×4=12", "2^10=1024",
    "1e10", "0.000001", "99 bottles", "abc123def456", "a1b2c3",
]

NFD = [
    "e\u0301", "cafe\u0301", "na\u0308ive", "A\u030a", "n\u0303", "\u1100\u1161\u11a8",
    "o\u0308\u0304", "Zoe\u0308", "i\u0307", "\u0041\u0300\u0301", "s\u0323\u0307",
]

CONTROL = ["\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m", "bell\x07", "\x08\x08"]

ALL = PROSE + CODE + SCRIPTS + EMOJI + SPECIAL + WHITESPACE + NUMBERS + NFD + CONTROL
SEPARATORS = [" ", "", "\n", "  ", "\t", ", ", "\n\n", " \n", "\u3000", "-"]


def corpus(n=2400, seed=1234):
    """The first len(ALL) strings are the fragments themselves; the rest mix them."""
    rng = random.Random(seed)
    out = [""] + list(ALL)
    pools = [PROSE, CODE, SCRIPTS, EMOJI, SPECIAL, WHITESPACE, NUMBERS, NFD, CONTROL]
    weights = [6, 4, 4, 2, 2, 2, 2, 1, 1]
    while len(out) < n:
        kind = rng.random()
        if kind < 0.75:  # a mix of a few fragments
            parts = [rng.choice(rng.choices(pools, weights)[0]) for _ in range(rng.randint(1, 5))]
            s = ""
            for p in parts:
                s += (rng.choice(SEPARATORS) if s else "") + p
        elif kind < 0.85:  # a random slice: cuts inside words, numbers and emoji sequences
            s = rng.choice(ALL)
            a = rng.randint(0, len(s))
            s = s[a:a + rng.randint(1, 40)]
        elif kind < 0.95:  # random characters from the fragments' alphabet
            alphabet = "".join(ALL)
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        else:  # long documents
            s = "\n\n".join(rng.choice(PROSE + CODE + SCRIPTS) for _ in range(rng.randint(20, 80)))
        out.append(s)
    return out[:n]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2400
    for s in corpus(n):
        print(json.dumps(s))
