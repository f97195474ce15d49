/* load_gguf.c - builds a tokenizer from GGUF metadata (tokenizer.ggml.*).
 *
 * "gpt2" vocabularies are byte-level BPE with ranked merges ("a b" strings); their
 * pre-tokenizer is not in the file, only its name (tokenizer.ggml.pre), so this file keeps a
 * table from those names to the pipeline the original tokenizer.json describes (regex splits,
 * digits, punctuation, NFC). "llama" vocabularies are SentencePiece BPE driven by scores, with
 * the dummy-prefix space and byte fallback. Token types map to the added-token rules: CONTROL
 * and UNKNOWN are special, USER_DEFINED are matched in any text, BYTE are <0xXX> fallbacks.
 * Everything is copied out of the GGUF, so the tokenizer does not keep it open. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* ---- pre-tokenizer presets ---- */

#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
                  "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}" \
                 "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CASED_WORD(q) "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*" \
                         "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" q "|[^\\r\\n\\p{L}\\p{N}]?" \
                         "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" q
#define RE_CONTRACT "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define RE_TEKKEN RE_CASED_WORD("") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|" \
                  "\\s+(?!\\S)|\\s+"
#define RE_GPT4O RE_CASED_WORD(RE_CONTRACT) "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek's splits. The letter class lists cased-letter ranges by code point (its source
 * writes them as characters, which NFC would turn into descending ranges). */
#define RE_DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_DS_LETTERS                                                                          \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"         \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"       \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"               \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"  \
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"             \
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"             \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"      \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"     \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"             \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"      \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"      \
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"               \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"              \
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"             \
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"             \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"         \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"     \
    "\\x{1E900}-\\x{1E943}]+"
#define RE_DS_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}" \
                    "\\x{3000}-\\x{3002}]+"
#define RE_DS3_PUNCT "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}" \
                     "\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                     "\\s+(?!\\S)|\\s+"

/* One step of a preset: a regex split (Isolated), or one of the built-in pre-tokenizers. */
typedef enum { P_END, P_SPLIT, P_BYTELEVEL_RE, P_BYTELEVEL, P_DIGITS1, P_DIGITS, P_PUNCT } pstep;

typedef struct {
    const char *names;  /* '|'-separated tokenizer.ggml.pre values */
    bool        nfc, ignore_merges;
    struct { pstep kind; const char *re; } steps[7];
} preset;

static const preset presets[] = {
    { "default|gpt-2|gpt2|phi-2|jina-es|jina-de|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|"
      "roberta-bpe|jais|poro-chat|gpt3-finnish|bloom|viking|trillion",
      false, false, { { P_BYTELEVEL_RE, NULL } } },
    { "mpt|gpt-neox|olmo", true, false, { { P_BYTELEVEL_RE, NULL } } },
    { "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|midm-2.0|lfm2", false, true,
      { { P_SPLIT, RE_LLAMA3 }, { P_BYTELEVEL, NULL } } },
    { "smaug-bpe|dbrx|chatglm-bpe|glm4|exaone|bailingmoe|a.x-4.0", false, false,
      { { P_SPLIT, RE_LLAMA3 }, { P_BYTELEVEL, NULL } } },
    { "qwen2|deepseek-r1-qwen|megrez|qwen35", true, false,
      { { P_SPLIT, RE_QWEN2 }, { P_BYTELEVEL, NULL } } },
    { "stablelm2|hunyuan|seed-coder", false, false,
      { { P_SPLIT, RE_QWEN2 }, { P_BYTELEVEL, NULL } } },
    { "starcoder|refact|smollm|codeshell|granite", false, false,
      { { P_DIGITS1, NULL }, { P_BYTELEVEL_RE, NULL } } },
    { "command-r", true, false, { { P_DIGITS1, NULL }, { P_BYTELEVEL_RE, NULL } } },
    { "falcon", false, false,
      { { P_PUNCT, NULL }, { P_BYTELEVEL_RE, NULL }, { P_DIGITS, NULL },
        { P_SPLIT, "[0-9][0-9][0-9]" } } },
    { "deepseek-llm", false, false,
      { { P_SPLIT, "[\\r\\n]" }, { P_SPLIT, RE_DS_LETTERS }, { P_SPLIT, RE_DS_PUNCT },
        { P_SPLIT, "\\s+$" }, { P_SPLIT, RE_DS_CJK }, { P_SPLIT, "\\p{N}+" },
        { P_BYTELEVEL, NULL } } },
    { "deepseek-coder", false, false,
      { { P_SPLIT, "[\\r\\n]" }, { P_SPLIT, "\\s?\\p{L}+" }, { P_SPLIT, "\\s?\\p{P}+" },
        { P_SPLIT, RE_DS_CJK }, { P_SPLIT, "\\p{N}" }, { P_BYTELEVEL, NULL } } },
    { "deepseek-v3|hunyuan-dense", false, false,
      { { P_SPLIT, "\\p{N}{1,3}" },
        { P_SPLIT, "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+" },
        { P_SPLIT, RE_DS3_PUNCT }, { P_BYTELEVEL, NULL } } },
    { "tekken", false, false, { { P_SPLIT, RE_TEKKEN }, { P_BYTELEVEL, NULL } } },
    { "pixtral", false, true, { { P_SPLIT, RE_TEKKEN }, { P_BYTELEVEL, NULL } } },
    { "gpt-4o|llama4|minerva-7b", false, false, { { P_SPLIT, RE_GPT4O }, { P_BYTELEVEL, NULL } } },
};

static bool name_in(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !memcmp(p, name, n)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static hx_status add_pre_step(hx_tokenizer *t, pstep k, const char *re, hx_err *err)
{
    hx_tok_pre *p = hx_realloc(t->pre, ((size_t)t->n_pre + 1) * sizeof *p);
    if (!p) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    t->pre = p;
    p = &t->pre[t->n_pre++];
    memset(p, 0, sizeof *p);
    p->behavior = HX_SPLIT_ISOLATED;
    switch (k) {
    case P_SPLIT:
        p->kind = HX_PRE_SPLIT;
        return hx_tok_regex_compile(t, re, strlen(re), "tokenizer.ggml.pre", &p->re, err);
    case P_BYTELEVEL_RE:
        p->kind = HX_PRE_BYTELEVEL;
        p->use_regex = true;
        return hx_tok_regex_compile(t, hx_tok_gpt2_regex, strlen(hx_tok_gpt2_regex),
                                    "tokenizer.ggml.pre", &p->re, err);
    case P_BYTELEVEL: p->kind = HX_PRE_BYTELEVEL; break;
    case P_DIGITS1: p->kind = HX_PRE_DIGITS; break;
    case P_DIGITS:
        p->kind = HX_PRE_DIGITS;
        p->behavior = HX_SPLIT_CONTIGUOUS;
        break;
    case P_PUNCT:
        p->kind = HX_PRE_PUNCT;
        p->behavior = HX_SPLIT_CONTIGUOUS;
        break;
    case P_END: break;
    }
    return HX_OK;
}

static hx_status add_norm_step(hx_tokenizer *t, hx_tok_norm_kind k, const char *a, const char *b,
                               hx_err *err)
{
    hx_tok_norm *n = hx_realloc(t->norm, ((size_t)t->n_norm + 1) * sizeof *n);
    if (!n) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    t->norm = n;
    n = &t->norm[t->n_norm++];
    memset(n, 0, sizeof *n);
    n->kind = k;
    if (a) {
        n->a_len = (uint32_t)strlen(a);
        n->a_off = hx_tok_pool_add(t, a, n->a_len);
    }
    if (b) {
        n->b_len = (uint32_t)strlen(b);
        n->b_off = hx_tok_pool_add(t, b, n->b_len);
    }
    if (n->a_off == UINT32_MAX || n->b_off == UINT32_MAX)
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    return HX_OK;
}

static hx_status add_dec_step(hx_tokenizer *t, hx_tok_dec d, hx_err *err)
{
    hx_tok_dec *p = hx_realloc(t->dec, ((size_t)t->n_dec + 1) * sizeof *p);
    if (!p) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    t->dec = p;
    t->dec[t->n_dec++] = d;
    return HX_OK;
}

/* ---- metadata readers ---- */

static bool get_string(const hx_gguf *g, const char *key, char *buf, size_t cap)
{
    hx_gguf_str s;
    if (!hx_gguf_get_str(g, key, &s) || s.len >= cap) return false;
    memcpy(buf, s.ptr, (size_t)s.len);
    buf[s.len] = '\0';
    return true;
}

/* Element i of a numeric array, whatever its element type (the parser bounded the array). */
static double arr_num(const hx_gguf_kv *kv, uint64_t i)
{
    const unsigned char *p = kv->arr_data;
    switch (kv->arr_type) {
    case HX_GGUF_U8: return p[i];
    case HX_GGUF_I8: return (int8_t)p[i];
    case HX_GGUF_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case HX_GGUF_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case HX_GGUF_U32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case HX_GGUF_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case HX_GGUF_F32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
    case HX_GGUF_U64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    case HX_GGUF_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    case HX_GGUF_F64: { double v; memcpy(&v, p + 8 * i, 8); return v; }
    default: return 0;
    }
}

static const hx_gguf_kv *num_array(const hx_gguf *g, const char *key, uint64_t n)
{
    const hx_gguf_kv *kv = hx_gguf_find(g, key);
    if (!kv || kv->type != HX_GGUF_ARRAY || kv->arr_n != n || kv->arr_type == HX_GGUF_STRING ||
        kv->arr_type == HX_GGUF_ARRAY || kv->arr_type == HX_GGUF_BOOL)
        return NULL;
    return kv;
}

static int32_t get_id(const hx_tokenizer *t, const hx_gguf *g, const char *key)
{
    uint64_t v;
    if (!hx_gguf_get_u64(g, key, &v) || v >= (uint64_t)t->n_vocab) return -1;
    return (int32_t)v;
}

/* ---- loading ---- */

static hx_status load_tokens(hx_tokenizer *t, const hx_gguf *g, bool spm, hx_err *err)
{
    const hx_gguf_kv *toks = hx_gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != HX_GGUF_ARRAY || toks->arr_type != HX_GGUF_STRING)
        return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.tokens: missing or not an array "
                          "of strings", t->name);
    if (toks->arr_n == 0 || toks->arr_n > HX_TOK_MAX_VOCAB)
        return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens (expected 1 "
                          "to %d)", t->name, (unsigned long long)toks->arr_n, HX_TOK_MAX_VOCAB);
    const int32_t n = (int32_t)toks->arr_n;
    const hx_gguf_kv *types = num_array(g, "tokenizer.ggml.token_type", toks->arr_n);
    const hx_gguf_kv *scores = num_array(g, "tokenizer.ggml.scores", toks->arr_n);
    if (spm && !scores)
        return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.scores: missing or not one number "
                          "per token (a llama vocabulary needs them)", t->name);
    if (spm && !(t->scores = hx_calloc((size_t)n, sizeof *t->scores)))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    hx_status st = hx_tok_set_vocab_size(t, n, err);
    if (st != HX_OK) return st;
    t->added = hx_calloc((size_t)n, sizeof *t->added);
    if (!t->added) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    uint64_t pos = 0;
    const unsigned char *cur = NULL;
    hx_gguf_str s;
    for (int32_t i = 0; hx_gguf_str_array(toks, &pos, &cur, &s); i++) {
        if (s.len > HX_TOK_MAX_TOKEN_BYTES)
            return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.tokens[%d]: %llu bytes long",
                              t->name, i, (unsigned long long)s.len);
        uint32_t off = hx_tok_pool_add(t, s.ptr, (size_t)s.len);
        if (off == UINT32_MAX) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
        int type = types ? (int)arr_num(types, (uint64_t)i) : TT_NORMAL;
        uint8_t attr = HX_TOKA_MODEL;
        if (type == TT_NORMAL || type == TT_USER) attr |= HX_TOKA_MERGE;
        if (type == TT_CONTROL || type == TT_UNKNOWN || type == TT_USER) {
            attr |= HX_TOKA_ADDED;
            if (type != TT_USER) attr |= HX_TOKA_SPECIAL;
            t->added[t->n_added++] = (hx_tok_added){ .id = i, .off = off, .len = (uint32_t)s.len,
                                                     .special = type != TT_USER };
        }
        t->tok[i] = (hx_tok_entry){ off, (uint32_t)s.len, attr, 0 };
        if (spm) {
            double v = arr_num(scores, (uint64_t)i);
            t->scores[i] = v == v ? (float)v : 0.0f; /* NaN would break the heap's order */
        }
    }
    return hx_tok_strmap_build(t, err);
}

static hx_status load_merges(hx_tokenizer *t, const hx_gguf *g, hx_err *err)
{
    const hx_gguf_kv *kv = hx_gguf_find(g, "tokenizer.ggml.merges");
    if (!kv || kv->type != HX_GGUF_ARRAY || kv->arr_type != HX_GGUF_STRING)
        return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.merges: missing or not an array "
                          "of strings (a gpt2 vocabulary needs them)", t->name);
    if (kv->arr_n > HX_TOK_MAX_VOCAB * 4ull)
        return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.merges: too many", t->name);
    if (hx_tok_merges_init(&t->merges, (uint32_t)kv->arr_n))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    uint64_t pos = 0;
    const unsigned char *cur = NULL;
    hx_gguf_str s;
    char buf[2 * HX_TOK_MAX_TOKEN_BYTES];
    for (uint32_t i = 0; hx_gguf_str_array(kv, &pos, &cur, &s); i++) {
        const char *sp = s.len ? memchr(s.ptr, ' ', (size_t)s.len) : NULL;
        if (!sp || s.len > sizeof buf)
            return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.merges[%u]: expected \"a b\"",
                              t->name, i);
        size_t al = (size_t)(sp - s.ptr), bl = (size_t)s.len - al - 1;
        int32_t a = hx_tok_strmap_get(t, s.ptr, al), b = hx_tok_strmap_get(t, sp + 1, bl);
        memcpy(buf, s.ptr, al);
        memcpy(buf + al, sp + 1, bl);
        int32_t m = hx_tok_strmap_get(t, buf, al + bl);
        if (a < 0 || b < 0 || m < 0)
            return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.merges[%u]: \"%.*s\" refers to "
                              "tokens not in the vocabulary", t->name, i,
                              (int)(s.len > 80 ? 80 : s.len), s.ptr);
        if (hx_tok_merges_put(&t->merges, a, b, i, m))
            return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    }
    return HX_OK;
}

static hx_status setup_gpt2(hx_tokenizer *t, const hx_gguf *g, hx_err *err)
{
    char pre[64] = "", arch[64] = "";
    bool have_pre = get_string(g, "tokenizer.ggml.pre", pre, sizeof pre);
    (void)get_string(g, "general.architecture", arch, sizeof arch);
    const preset *ps = NULL;
    for (size_t i = 0; have_pre && i < HX_COUNTOF(presets); i++)
        if (name_in(presets[i].names, pre)) ps = &presets[i];
    if (!ps) {
        /* Unknown or absent: GPT-2's split, the one llama.cpp falls back to as well. GPT-NeoX
         * files predate tokenizer.ggml.pre, and its tokenizer normalizes to NFC. */
        ps = &presets[!have_pre && !strcmp(arch, "gptneox") ? 1 : 0];
        if (have_pre)
            fprintf(stderr, "hearth: warning: %s: tokenizer.ggml.pre \"%s\" is not known; "
                    "splitting text with the GPT-2 regex\n", t->name, pre);
    }
    if (ps->nfc && add_norm_step(t, HX_NORM_NFC, NULL, NULL, err)) return HX_E_NOMEM;
    for (int i = 0; i < 7 && ps->steps[i].kind != P_END; i++) {
        hx_status st = add_pre_step(t, ps->steps[i].kind, ps->steps[i].re, err);
        if (st != HX_OK) return st;
    }
    t->ignore_merges = ps->ignore_merges;
    t->byte_level = true;
    return add_dec_step(t, (hx_tok_dec){ .kind = HX_DEC_BYTELEVEL }, err);
}

static hx_status setup_spm(hx_tokenizer *t, const hx_gguf *g, hx_err *err)
{
    static const char space[] = "\xE2\x96\x81"; /* ▁ */
    bool prefix = true;
    (void)hx_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix);
    /* SentencePiece: the dummy prefix on each piece of text, spaces as ▁, byte fallback. */
    if (prefix && add_norm_step(t, HX_NORM_PREPEND, space, NULL, err)) return HX_E_NOMEM;
    if (add_norm_step(t, HX_NORM_REPLACE, " ", space, err)) return HX_E_NOMEM;
    t->byte_fallback = true;
    t->unk_id = get_id(t, g, "tokenizer.ggml.unknown_token_id");
    hx_tok_dec rep = { .kind = HX_DEC_REPLACE };
    rep.a_off = hx_tok_pool_add(t, space, 3);
    rep.a_len = 3;
    rep.b_off = hx_tok_pool_add(t, " ", 1);
    rep.b_len = 1;
    if (rep.a_off == UINT32_MAX || rep.b_off == UINT32_MAX)
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    hx_status st = add_dec_step(t, rep, err);
    if (st == HX_OK) st = add_dec_step(t, (hx_tok_dec){ .kind = HX_DEC_BYTEFALLBACK }, err);
    if (st == HX_OK) st = add_dec_step(t, (hx_tok_dec){ .kind = HX_DEC_FUSE }, err);
    if (st == HX_OK && prefix)
        st = add_dec_step(t, (hx_tok_dec){ .kind = HX_DEC_STRIP, .ch = ' ', .start = 1 }, err);
    return st;
}

/* Phi-3's tokenizer.json strips whitespace to the right of its chat markers (rstrip); GGUF
 * does not record that, so it is restored by name, as llama.cpp does. */
static void phi3_rstrip(hx_tokenizer *t, const hx_gguf *g)
{
    char name[128] = "";
    (void)get_string(g, "general.name", name, sizeof name);
    for (char *p = name; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    if (!strstr(name, "phi-3") && !strstr(name, "phi3")) return;
    for (int32_t i = 0; i < t->n_added; i++) {
        const char *c = t->pool + t->added[i].off;
        t->added[i].rstrip = strcmp(c, "<unk>") && strcmp(c, "<s>") && strcmp(c, "<|endoftext|>");
    }
}

hx_status hx_tok_load_gguf(hx_tokenizer *t, const hx_gguf *g, hx_err *err)
{
    char model[32];
    if (!get_string(g, "tokenizer.ggml.model", model, sizeof model))
        return hx_err_set(err, HX_E_FORMAT, "%s: tokenizer.ggml.model: missing", t->name);
    bool spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2"))
        return hx_err_set(err, HX_E_UNSUPPORTED, "%s: tokenizer.ggml.model \"%s\" is not supported "
                          "(hearth reads \"gpt2\" and \"llama\" vocabularies)", t->name, model);
    t->kind = spm ? HX_TOK_KIND_SPM : HX_TOK_KIND_BPE;
    hx_status st = load_tokens(t, g, spm, err);
    if (st == HX_OK) st = spm ? setup_spm(t, g, err) : load_merges(t, g, err);
    if (st == HX_OK && !spm) st = setup_gpt2(t, g, err);
    if (st != HX_OK) return st;
    phi3_rstrip(t, g);
    t->bos = get_id(t, g, "tokenizer.ggml.bos_token_id");
    t->eos = get_id(t, g, "tokenizer.ggml.eos_token_id");
    t->pad = get_id(t, g, "tokenizer.ggml.padding_token_id");
    bool add_bos = spm, add_eos = false;
    (void)hx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    (void)hx_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
    if (add_bos && t->bos >= 0) {
        if (!(t->post_pre = hx_alloc(sizeof *t->post_pre))) goto nomem;
        t->post_pre[t->n_post_pre++] = t->bos;
    }
    if (add_eos && t->eos >= 0) {
        if (!(t->post_post = hx_alloc(sizeof *t->post_post))) goto nomem;
        t->post_post[t->n_post_post++] = t->eos;
    }
    /* End-of-turn ids the file names explicitly join the EOT list in hx_tok_finish via eos;
     * add them to the list directly here. */
    static const char *const eot_keys[] = { "tokenizer.ggml.eot_token_id",
                                            "tokenizer.ggml.eom_token_id" };
    for (size_t i = 0; i < HX_COUNTOF(eot_keys); i++) {
        int32_t id = get_id(t, g, eot_keys[i]);
        if (id < 0) continue;
        int32_t *p = hx_realloc(t->eot, ((size_t)t->n_eot + 1) * sizeof *p);
        if (!p) goto nomem;
        t->eot = p;
        t->eot[t->n_eot++] = id;
    }
    return HX_OK;
nomem:
    return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
}
