/* test_tokenizer.c - loading and encoding (src/tokenizer/tokenizer.h).
 *
 * BPE merge order on a hand-made vocabulary, the byte-level alphabet, added and special tokens
 * (allowed or not, lstrip/rstrip), the post-processor, SentencePiece scores from GGUF, invalid
 * UTF-8, concurrent encodes, loading errors that name the file and the problem, and allocation
 * failures injected at every step of loading and encoding (no crash, no leak), decoding and the
 * streaming detokenizer. The vocab files of ../shared/data are used when present. */
#include <pthread.h>

#include "base/alloc.h"
#include "check.h"
#include "tokenizer/tokenizer.h"

/* ---- fixtures ----
 * tiny_json: BPE over the letters a-e with a few ranked merges, added tokens (special
 * <|im_end|> and <s>, non-special [X], rstrip <|r|>) and a TemplateProcessing wrapping a
 * sequence in <s> ... </s>. bytelevel_json(): the 256-character GPT-2 alphabet (id = byte) plus
 * the merge "Ġ t". spm_json(): SentencePiece style (Metaspace, byte fallback, <unk>). fx_*: a
 * minimal GGUF v3 writer (key/values only). */
static const char tiny_json[] =
    "{\"version\": \"1.0\", \"added_tokens\": ["
    " {\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
    " {\"id\": 1, \"content\": \"<s>\", \"special\": true},"
    " {\"id\": 2, \"content\": \"</s>\", \"special\": true},"
    " {\"id\": 13, \"content\": \"<|im_end|>\", \"special\": true},"
    " {\"id\": 14, \"content\": \"[X]\", \"special\": false, \"normalized\": false},"
    " {\"id\": 15, \"content\": \"<|r|>\", \"special\": true, \"rstrip\": true}],"
    " \"normalizer\": null,"
    " \"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\","
    "   \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
    "              {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
    "              {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}],"
    "   \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]},"
    "                        \"</s>\": {\"id\": \"</s>\", \"ids\": [2], \"tokens\": [\"</s>\"]}}},"
    " \"decoder\": null,"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true,"
    "   \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"a\": 3, \"b\": 4, \"c\": 5,"
    "             \"d\": 6, \"e\": 7, \"ab\": 8, \"bc\": 9, \"abc\": 10, \"aa\": 11, \"aaaa\": 12},"
    "   \"merges\": [\"b c\", \"a b\", \"a bc\", \"a a\", \"aa aa\"]}}";

/* The GPT-2 byte → character table, computed here independently of the library. */
static uint32_t fx_byte_cp(int b)
{
    int self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (self) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        n += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE);
    return 0x100 + n;
}

static size_t fx_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* the table stays below U+0800 */
}

/* Writes a JSON string literal for s (which holds no quotes or backslashes) into p. */
static char *fx_put(char *p, const char *s) { return p + sprintf(p, "%s", s); }

/* Byte-level BPE: ids 0..255 are the byte characters in byte order, 256 is "Ġt", 257 is
 * <|endoftext|> (special). hx_alloc'd; free with hx_free. */
static char *bytelevel_json(void)
{
    char *buf = hx_alloc(16384), *p = buf;
    if (!buf) return NULL;
    p = fx_put(p, "{\"added_tokens\": [{\"id\": 257, \"content\": \"<|endoftext|>\", "
                  "\"special\": true}], \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                  "\"add_prefix_space\": false, \"use_regex\": true}, \"decoder\": {\"type\": "
                  "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        char c[4];
        size_t n = fx_utf8(fx_byte_cp(b), c);
        c[n] = '\0';
        if (b == '"' || b == '\\') p += sprintf(p, "\"\\%s\": %d, ", c, b);
        else p += sprintf(p, "\"%s\": %d, ", c, b);
    }
    p = fx_put(p, "\"\xC4\xA0t\": 256, \"<|endoftext|>\": 257}, \"merges\": [\"\xC4\xA0 t\"]}}");
    return buf;
}

/* SentencePiece style: Metaspace (prepend "first"), byte fallback for every byte, <unk>. */
static char *spm_json(void)
{
    char *buf = hx_alloc(16384), *p = buf;
    if (!buf) return NULL;
    p = fx_put(p, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
                  "{\"id\": 1, \"content\": \"<s>\", \"special\": true}],"
                  "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\","
                  " \"prepend_scheme\": \"first\", \"split\": false},"
                  "\"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
                  "{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xE2\x96\x81\"}, "
                  "\"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
                  "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
                  "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\","
                  " \"byte_fallback\": true, \"fuse_unk\": true,"
                  " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, ");
    for (int b = 0; b < 256; b++) p += sprintf(p, "\"<0x%02X>\": %d, ", b, 2 + b);
    p = fx_put(p, "\"\xE2\x96\x81\": 258, \"H\": 259, \"i\": 260, \"Hi\": 261, "
                  "\"\xE2\x96\x81Hi\": 262, \"w\": 263},"
                  " \"merges\": [\"H i\", \"\xE2\x96\x81 Hi\"]}}");
    return buf;
}

/* ---- a minimal GGUF writer ---- */

typedef struct {
    unsigned char data[1 << 16];
    size_t        len;
} fx_gguf;

static void fx_raw(fx_gguf *g, const void *p, size_t n)
{
    memcpy(g->data + g->len, p, n);
    g->len += n;
}

static void fx_u32(fx_gguf *g, uint32_t v) { fx_raw(g, &v, 4); }
static void fx_u64(fx_gguf *g, uint64_t v) { fx_raw(g, &v, 8); }

static void fx_str(fx_gguf *g, const char *s)
{
    fx_u64(g, strlen(s));
    fx_raw(g, s, strlen(s));
}

static void fx_header(fx_gguf *g, uint64_t n_kv)
{
    g->len = 0;
    fx_raw(g, "GGUF", 4);
    fx_u32(g, 3);
    fx_u64(g, 0);
    fx_u64(g, n_kv);
}

static void fx_kv_str(fx_gguf *g, const char *key, const char *v)
{
    fx_str(g, key);
    fx_u32(g, 8);
    fx_str(g, v);
}

static void fx_kv_strs(fx_gguf *g, const char *key, const char *const *v, uint64_t n)
{
    fx_str(g, key);
    fx_u32(g, 9);
    fx_u32(g, 8);
    fx_u64(g, n);
    for (uint64_t i = 0; i < n; i++) fx_str(g, v[i]);
}

static void fx_kv_f32s(fx_gguf *g, const char *key, const float *v, uint64_t n)
{
    fx_str(g, key);
    fx_u32(g, 9);
    fx_u32(g, 6);
    fx_u64(g, n);
    fx_raw(g, v, 4 * n);
}

static void fx_kv_i32s(fx_gguf *g, const char *key, const int32_t *v, uint64_t n)
{
    fx_str(g, key);
    fx_u32(g, 9);
    fx_u32(g, 5);
    fx_u64(g, n);
    fx_raw(g, v, 4 * n);
}

static void fx_kv_u32(fx_gguf *g, const char *key, uint32_t v)
{
    fx_str(g, key);
    fx_u32(g, 4);
    fx_u32(g, v);
}

static void fx_pad(fx_gguf *g)
{
    while (g->len % 32) g->data[g->len++] = 0;
}

/* ---- helpers ---- */

static hx_tokenizer *open_mem(const char *json)
{
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    if (hx_tokenizer_open_json_memory(json, strlen(json), "mem.json", &t, &err) != HX_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return NULL;
    }
    return t;
}

/* Encodes text and compares with the expected ids (n of them). */
static int expect_ids(const hx_tokenizer *t, const char *text, unsigned flags, const int32_t *want,
                      size_t n)
{
    hx_tok_ids ids = { 0 };
    hx_err err = { 0 };
    CHECK_EQ(hx_tokenizer_encode(t, text, strlen(text), flags, &ids, &err), HX_OK);
    if (ids.n != n) {
        fprintf(stderr, "\"%s\": got", text);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.ids[i]);
        fputc('\n', stderr);
    }
    CHECK_EQ(ids.n, n);
    for (size_t i = 0; i < n; i++) CHECK_EQ(ids.ids[i], want[i]);
    hx_tok_ids_free(&ids);
    return 0;
}

#define EXPECT(t, text, flags, ...)                                                   \
    do {                                                                              \
        static const int32_t w_[] = { __VA_ARGS__ };                                  \
        if (expect_ids(t, text, flags, w_, sizeof w_ / sizeof w_[0])) CHECK_FAIL("see above"); \
    } while (0)

static int test_bpe_merges_follow_rank_order(void)
{
    hx_tokenizer *t = open_mem(tiny_json);
    CHECK(t != NULL);
    /* "b c" (rank 0) beats "a b" (rank 1): abc = a + bc, then "a bc" gives abc. */
    EXPECT(t, "abc", 0, 10);
    /* Ties go leftmost: aaaa → aa a a → aa aa → aaaa; aaa → aa a. */
    EXPECT(t, "aaaa", 0, 12);
    EXPECT(t, "aaa", 0, 11, 3);
    EXPECT(t, "ab abc cab", 0, 8, 10, 5, 8);
    /* Unknown characters become one fused <unk>, kept between known ones. */
    EXPECT(t, "axyb", 0, 3, 0, 4);
    hx_tokenizer_close(t);
    return 0;
}

static int test_byte_level_maps_every_byte(void)
{
    char *json = bytelevel_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    CHECK_STR(hx_tokenizer_kind(t), "bpe");
    /* Each byte of each pre-token is its own symbol (ids are byte values here). */
    EXPECT(t, "a\n\t~", 0, 'a', '\n', '\t', '~');
    EXPECT(t, "\xC3\xA9", 0, 0xC3, 0xA9);                 /* é: two bytes */
    EXPECT(t, "\xF0\x9F\x98\x80", 0, 0xF0, 0x9F, 0x98, 0x80); /* an emoji: four */
    EXPECT(t, "a to", 0, 'a', 256, 'o');                  /* "Ġ t" merges; "to" splits */
    /* Decoding gives every byte back, whatever the pieces. */
    char text[128];
    hx_tok_ids ids = { 0 };
    hx_tok_text out = { 0 };
    hx_err err = { 0 };
    for (int i = 0; i < 127; i++) text[i] = (char)(i + 1);
    text[127] = '\0';
    CHECK_EQ(hx_tokenizer_encode(t, text, 127, 0, &ids, &err), HX_OK);
    CHECK_EQ(hx_tokenizer_decode(t, ids.ids, ids.n, 0, &out, &err), HX_OK);
    CHECK_EQ(out.len, 127);
    CHECK(memcmp(out.data, text, 127) == 0);
    hx_tok_ids_free(&ids);
    hx_tok_text_free(&out);
    hx_tokenizer_close(t);
    return 0;
}

static int test_special_tokens_split_only_when_allowed(void)
{
    hx_tokenizer *t = open_mem(tiny_json);
    CHECK(t != NULL);
    /* Allowed: the special token is one id. Not allowed: its characters are text (here all
     * unknown, so one fused <unk> per pre-token). [X] is not special: always matched. */
    EXPECT(t, "ab<|im_end|>c", HX_TOK_PARSE_SPECIAL, 8, 13, 5);
    EXPECT(t, "ab<|im_end|>c", 0, 8, 0, 7, 0, 6, 0, 5); /* e, n, d: e and d are letters here */
    EXPECT(t, "a[X]b", 0, 3, 14, 4);
    EXPECT(t, "a[X]b", HX_TOK_PARSE_SPECIAL, 3, 14, 4);
    /* rstrip swallows the whitespace after the token; lstrip is off, so text before stays. */
    EXPECT(t, "a <|r|>   b", HX_TOK_PARSE_SPECIAL, 3, 15, 4);
    CHECK(hx_tokenizer_is_special(t, 13));
    CHECK(!hx_tokenizer_is_special(t, 14));
    CHECK_EQ(hx_tokenizer_token_id(t, "<|im_end|>", 10), 13);
    CHECK_EQ(hx_tokenizer_token_id(t, "abc", 3), 10);
    CHECK_EQ(hx_tokenizer_token_id(t, "zz", 2), -1);
    hx_tokenizer_close(t);
    return 0;
}

static int test_add_special_follows_the_post_processor(void)
{
    hx_tokenizer *t = open_mem(tiny_json);
    CHECK(t != NULL);
    EXPECT(t, "ab", HX_TOK_ADD_SPECIAL, 1, 8, 2);
    EXPECT(t, "", HX_TOK_ADD_SPECIAL, 1, 2);
    CHECK_EQ(hx_tokenizer_bos(t), 1);
    hx_tokenizer_close(t);
    return 0;
}

static int test_invalid_utf8_is_encoded_as_replacement(void)
{
    char *json = bytelevel_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    EXPECT(t, "a\xFF", 0, 'a', 0xEF, 0xBF, 0xBD); /* U+FFFD's bytes */
    EXPECT(t, "\xE6\x97", 0, 0xEF, 0xBF, 0xBD);   /* a truncated character: one U+FFFD */
    hx_tokenizer_close(t);
    return 0;
}

typedef struct {
    const hx_tokenizer *t;
    const char         *text;
    hx_tok_ids          ids;
    int                 rc;
} job;

static void *encode_many(void *arg)
{
    job *j = arg;
    hx_err err = { 0 };
    for (int k = 0; k < 200 && j->rc == 0; k++) {
        j->ids.n = 0;
        if (hx_tokenizer_encode(j->t, j->text, strlen(j->text), 0, &j->ids, &err) != HX_OK)
            j->rc = 1;
    }
    return NULL;
}

static int test_one_tokenizer_serves_many_threads(void)
{
    char *json = bytelevel_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    static const char text[] = "to be or not to be, that is the question to ask";
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){ .t = t, .text = text };
        CHECK_EQ(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(jobs[i].rc, 0);
        CHECK_EQ(jobs[i].ids.n, jobs[0].ids.n);
        CHECK(memcmp(jobs[i].ids.ids, jobs[0].ids.ids, jobs[0].ids.n * sizeof(int32_t)) == 0);
    }
    for (int i = 0; i < 4; i++) hx_tok_ids_free(&jobs[i].ids);
    hx_tokenizer_close(t);
    return 0;
}

/* ---- GGUF ---- */

/* A SentencePiece vocabulary: pieces merge by score, highest first. */
static void build_spm_gguf(fx_gguf *g, const char *model)
{
    static const char *const toks[] = { "<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c",
                                        "ab", "bc", ("\xE2\x96\x81" "a"), "<0x7A>", "<|u|>" };
    static const float scores[] = { 0, 0, 0, -1, -2, -3, -4, -5, -0.5f, -6, 0, 0 };
    static const int32_t types[] = { 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 4 };
    fx_header(g, 6);
    fx_kv_str(g, "tokenizer.ggml.model", model);
    fx_kv_strs(g, "tokenizer.ggml.tokens", toks, 12);
    fx_kv_f32s(g, "tokenizer.ggml.scores", scores, 12);
    fx_kv_i32s(g, "tokenizer.ggml.token_type", types, 12);
    fx_kv_u32(g, "tokenizer.ggml.bos_token_id", 1);
    fx_kv_u32(g, "tokenizer.ggml.eos_token_id", 2);
    fx_pad(g);
}

static hx_status open_gguf_mem(const fx_gguf *fg, hx_tokenizer **t, hx_err *err)
{
    hx_gguf *g = NULL;
    hx_status st = hx_gguf_open_memory(fg->data, fg->len, "mem.gguf", &g, err);
    if (st == HX_OK) st = hx_tokenizer_from_gguf(g, t, err);
    hx_gguf_close(g);
    return st;
}

static int test_spm_scores_merge_highest_first(void)
{
    static fx_gguf fg;
    build_spm_gguf(&fg, "llama");
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    CHECK_EQ(open_gguf_mem(&fg, &t, &err), HX_OK);
    CHECK_STR(hx_tokenizer_kind(t), "spm-bpe");
    /* "▁abc": bc (-0.5) merges before ab (-5) and ▁a (-6); then ▁a; "▁abc" is no piece. */
    EXPECT(t, "abc", 0, 9, 8);
    /* "z" has no piece: byte fallback <0x7A>; a user-defined token is cut out first. */
    EXPECT(t, "z<|u|>a", 0, 3, 10, 11, 9);
    EXPECT(t, "a", HX_TOK_ADD_SPECIAL, 1, 9);  /* add_bos_token defaults to true for llama */
    CHECK_EQ(hx_tokenizer_eos(t), 2);
    CHECK(hx_tokenizer_is_eot(t, 2));
    hx_tokenizer_close(t);
    return 0;
}

static int test_unknown_gguf_model_is_unsupported(void)
{
    static fx_gguf fg;
    build_spm_gguf(&fg, "bert");
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    CHECK_EQ(open_gguf_mem(&fg, &t, &err), HX_E_UNSUPPORTED);
    CHECK(t == NULL);
    CHECK_CONTAINS(err.msg, "mem.gguf");
    CHECK_CONTAINS(err.msg, "\"bert\"");
    return 0;
}

static int test_gguf_vocab_file_encodes_like_llama_cpp(void)
{
    const char *d = check_shared_data();
    if (!d) return 0;
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", d);
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_tokenizer_open_gguf(path, &t, &err), HX_OK);
    EXPECT(t, "Hello world", 0, 15496, 995);
    EXPECT(t, " Hello World!<|endoftext|>", HX_TOK_PARSE_SPECIAL, 18435, 2159, 0, 50256);
    hx_tokenizer_close(t);
    return 0;
}

/* ---- loading errors ---- */

static int expect_error(const char *json, hx_status want, const char *needle)
{
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_tokenizer_open_json_memory(json, strlen(json), "bad.json", &t, &err), want);
    CHECK(t == NULL);
    CHECK_CONTAINS(err.msg, "bad.json: ");
    CHECK_CONTAINS(err.msg, needle);
    return 0;
}

static int test_malformed_json_names_file_and_problem(void)
{
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", ", HX_E_FORMAT,
                          "not valid JSON (line 1"), 0);
    CHECK_EQ(expect_error("[1, 2]", HX_E_FORMAT, "expected an object"), 0);
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                          "\"merges\": [\"a b\"]}}", HX_E_FORMAT,
                          "model.merges[0]: \"b\" is not in the vocabulary"), 0);
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, "
                          "\"merges\": []}}", HX_E_FORMAT, "model.vocab"), 0);
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                          " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
                          "\"(a\"}, \"behavior\": \"Isolated\"}}", HX_E_FORMAT,
                          "pre_tokenizer.pattern: bad regex"), 0);
    return 0;
}

static int test_unknown_model_type_is_unsupported(void)
{
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", HX_E_UNSUPPORTED,
                          "model.type \"Unigram\" is not supported"), 0);
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
                          "\"normalizer\": {\"type\": \"Precompiled\"}}", HX_E_UNSUPPORTED,
                          "normalizer.type \"Precompiled\""), 0);
    return 0;
}

static int test_missing_fields_are_format_errors(void)
{
    CHECK_EQ(expect_error("{}", HX_E_FORMAT, "model: expected an object"), 0);
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", \"merges\": []}}", HX_E_FORMAT,
                          "model.vocab: expected an object"), 0);
    CHECK_EQ(expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                          " \"added_tokens\": [{\"content\": \"x\"}]}", HX_E_FORMAT,
                          "added_tokens[0]"), 0);
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_tokenizer_open_json("/nonexistent/tokenizer.json", &t, &err), HX_E_NOTFOUND);
    CHECK_CONTAINS(err.msg, "/nonexistent/tokenizer.json");
    return 0;
}

/* ---- fault injection ---- */

/* Opens the tiny tokenizer and encodes with the k-th allocation failing; never a crash or a
 * leak, and once k passes the number of allocations, everything succeeds. */
static int run_with_failure(const char *json, int64_t k, bool *all_ok)
{
    size_t live = hx_alloc_live_bytes();
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    hx_tok_ids ids = { 0 };
    hx_tok_text txt = { 0 };
    hx_alloc_fail_after(k);
    hx_status st = hx_tokenizer_open_json_memory(json, strlen(json), "mem.json", &t, &err);
    if (st == HX_OK) {
        st = hx_tokenizer_encode(t, "ab abc<|im_end|> to be", 22, HX_TOK_PARSE_SPECIAL |
                                 HX_TOK_ADD_SPECIAL, &ids, &err);
        if (st == HX_OK) st = hx_tokenizer_decode(t, ids.ids, ids.n, 0, &txt, &err);
    } else {
        CHECK(t == NULL);
        CHECK_EQ(st, HX_E_NOMEM);
        CHECK_CONTAINS(err.msg, "out of memory");
    }
    hx_alloc_fail_after(-1);
    *all_ok = st == HX_OK;
    hx_tok_text_free(&txt);
    hx_tok_ids_free(&ids);
    hx_tokenizer_close(t);
    CHECK_EQ(hx_alloc_live_bytes(), live);
    return 0;
}

static int test_allocation_failures_never_leak(void)
{
    char *bl = bytelevel_json();
    CHECK(bl != NULL);
    const char *jsons[] = { tiny_json, bl };
    for (size_t j = 0; j < 2; j++) {
        bool ok = false;
        int64_t k = 0;
        for (; !ok && k < 100000; k++)
            if (run_with_failure(jsons[j], k, &ok)) {
                hx_free(bl);
                CHECK_FAIL("allocation %lld failing", (long long)k);
            }
        CHECK(ok);
    }
    hx_free(bl);
    return 0;
}


/* ---- decoding and streaming ---- */

/* Pushes ids through a stream and returns everything it handed out (hx_alloc'd, NUL-ended). */
static char *stream_all(const hx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        size_t *len)
{
    hx_detok d;
    hx_tok_text all = { 0 };
    hx_err err = { 0 };
    const char *p;
    size_t l;
    hx_detok_init(&d, t, flags);
    for (size_t i = 0; i < n; i++) {
        if (hx_detok_push(&d, ids[i], &p, &l, &err) != HX_OK) break;
        hx_tok_text_append(&all, p, l);
    }
    if (hx_detok_flush(&d, &p, &l, &err) == HX_OK) hx_tok_text_append(&all, p, l);
    hx_detok_free(&d);
    hx_tok_text_append(&all, "", 0);
    *len = all.len;
    return all.data;
}

static int test_detok_holds_split_utf8_characters(void)
{
    char *json = spm_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    hx_detok d;
    hx_err err = { 0 };
    const char *p;
    size_t n;
    hx_detok_init(&d, t, 0);
    /* 日 is E6 97 A5: nothing comes out until its last byte arrives. */
    CHECK_EQ(hx_detok_push(&d, 2 + 0xE6, &p, &n, &err), HX_OK);
    CHECK_EQ(n, 0);
    CHECK_EQ(hx_detok_push(&d, 2 + 0x97, &p, &n, &err), HX_OK);
    CHECK_EQ(n, 0);
    CHECK_EQ(hx_detok_push(&d, 2 + 0xA5, &p, &n, &err), HX_OK);
    CHECK_STR(p, "\xE6\x97\xA5");
    /* An unfinished character at the end is flushed as U+FFFD; a bad byte comes out at once. */
    CHECK_EQ(hx_detok_push(&d, 2 + 0xE6, &p, &n, &err), HX_OK);
    CHECK_EQ(n, 0);
    CHECK_EQ(hx_detok_push(&d, 2 + 'x', &p, &n, &err), HX_OK);
    CHECK_STR(p, "\xEF\xBF\xBDx");
    CHECK_EQ(hx_detok_push(&d, 2 + 0xF0, &p, &n, &err), HX_OK);
    CHECK_EQ(hx_detok_flush(&d, &p, &n, &err), HX_OK);
    CHECK_STR(p, "\xEF\xBF\xBD");
    hx_detok_free(&d);
    hx_tokenizer_close(t);
    return 0;
}

static int test_detok_drops_the_spm_leading_space(void)
{
    char *json = spm_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    EXPECT(t, "Hi w", 0, 262, 258, 263); /* ▁Hi ▁ w: the dummy prefix was added */
    static const int32_t ids[] = { 262, 258, 263 };
    size_t n;
    char *s = stream_all(t, ids, 3, 0, &n);
    CHECK_STR(s, "Hi w");
    hx_free(s);
    /* Only the first space of the stream goes: "▁ ▁Hi" keeps the second. */
    static const int32_t ids2[] = { 258, 262 };
    s = stream_all(t, ids2, 2, 0, &n);
    CHECK_STR(s, " Hi");
    hx_free(s);
    hx_tokenizer_close(t);
    return 0;
}

static int test_detok_stream_equals_decode(void)
{
    char *json = bytelevel_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    static const char text[] = "a \xF0\x9F\x98\x80 to \xC3\xA9t\xC3\xA9\n<|endoftext|>!";
    hx_tok_ids ids = { 0 };
    hx_tok_text dec = { 0 };
    hx_err err = { 0 };
    CHECK_EQ(hx_tokenizer_encode(t, text, strlen(text), HX_TOK_PARSE_SPECIAL, &ids, &err), HX_OK);
    CHECK_EQ(hx_tokenizer_decode(t, ids.ids, ids.n, 0, &dec, &err), HX_OK);
    CHECK_STR(dec.data, text);
    size_t n;
    char *s = stream_all(t, ids.ids, ids.n, 0, &n);
    CHECK_STR(s, text);
    hx_free(s);
    /* Skipping special tokens: the same text without <|endoftext|>. */
    s = stream_all(t, ids.ids, ids.n, HX_TOK_SKIP_SPECIAL, &n);
    CHECK_STR(s, "a \xF0\x9F\x98\x80 to \xC3\xA9t\xC3\xA9\n!");
    hx_free(s);
    CHECK_EQ(hx_tokenizer_decode(t, ids.ids, ids.n, HX_TOK_SKIP_SPECIAL, &dec, &err), HX_OK);
    CHECK_STR(dec.data, "a \xF0\x9F\x98\x80 to \xC3\xA9t\xC3\xA9\n!");
    hx_tok_ids_free(&ids);
    hx_tok_text_free(&dec);
    hx_tokenizer_close(t);
    return 0;
}

static int test_decode_replaces_invalid_bytes_like_hf(void)
{
    char *json = spm_json();
    CHECK(json != NULL);
    hx_tokenizer *t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    hx_tok_text out = { 0 };
    hx_err err = { 0 };
    /* ByteFallback: a run of byte tokens that is not UTF-8 is one U+FFFD per byte. */
    static const int32_t ids[] = { 2 + 0xE6, 2 + 0x97, 258, 2 + 0xE6 };
    CHECK_EQ(hx_tokenizer_decode(t, ids, 4, 0, &out, &err), HX_OK);
    CHECK_STR(out.data, "\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD");
    hx_tokenizer_close(t);
    /* ByteLevel: one U+FFFD per maximal invalid sequence (from_utf8_lossy). */
    json = bytelevel_json();
    CHECK(json != NULL);
    t = open_mem(json);
    hx_free(json);
    CHECK(t != NULL);
    static const int32_t ids2[] = { 0xE6, 0x97, 'a', 0xFF };
    CHECK_EQ(hx_tokenizer_decode(t, ids2, 4, 0, &out, &err), HX_OK);
    CHECK_STR(out.data, "\xEF\xBF\xBD" "a\xEF\xBF\xBD");
    /* Ids outside the vocabulary are skipped. */
    static const int32_t ids3[] = { 'o', -5, 100000, 'k' };
    CHECK_EQ(hx_tokenizer_decode(t, ids3, 4, 0, &out, &err), HX_OK);
    CHECK_STR(out.data, "ok");
    hx_tok_text_free(&out);
    hx_tokenizer_close(t);
    return 0;
}

static int test_decode_without_decoder_joins_with_spaces(void)
{
    hx_tokenizer *t = open_mem(tiny_json);
    CHECK(t != NULL);
    hx_tok_text out = { 0 };
    hx_err err = { 0 };
    static const int32_t ids[] = { 1, 8, 5, 2 };
    CHECK_EQ(hx_tokenizer_decode(t, ids, 4, 0, &out, &err), HX_OK);
    CHECK_STR(out.data, "<s> ab c </s>");
    CHECK_EQ(hx_tokenizer_decode(t, ids, 4, HX_TOK_SKIP_SPECIAL, &out, &err), HX_OK);
    CHECK_STR(out.data, "ab c");
    size_t n;
    const char *piece = hx_tokenizer_piece(t, 10, &n);
    CHECK_EQ(n, 3);
    CHECK(memcmp(piece, "abc", 3) == 0);
    hx_tok_text_free(&out);
    hx_tokenizer_close(t);
    return 0;
}

static const check_case cases[] = {
    { "bpe_merges_follow_rank_order", test_bpe_merges_follow_rank_order },
    { "byte_level_maps_every_byte", test_byte_level_maps_every_byte },
    { "special_tokens_split_only_when_allowed", test_special_tokens_split_only_when_allowed },
    { "add_special_follows_the_post_processor", test_add_special_follows_the_post_processor },
    { "invalid_utf8_is_encoded_as_replacement", test_invalid_utf8_is_encoded_as_replacement },
    { "one_tokenizer_serves_many_threads", test_one_tokenizer_serves_many_threads },
    { "spm_scores_merge_highest_first", test_spm_scores_merge_highest_first },
    { "unknown_gguf_model_is_unsupported", test_unknown_gguf_model_is_unsupported },
    { "gguf_vocab_file_encodes_like_llama_cpp", test_gguf_vocab_file_encodes_like_llama_cpp },
    { "malformed_json_names_file_and_problem", test_malformed_json_names_file_and_problem },
    { "unknown_model_type_is_unsupported", test_unknown_model_type_is_unsupported },
    { "missing_fields_are_format_errors", test_missing_fields_are_format_errors },
    { "allocation_failures_never_leak", test_allocation_failures_never_leak },
    { "detok_holds_split_utf8_characters", test_detok_holds_split_utf8_characters },
    { "detok_drops_the_spm_leading_space", test_detok_drops_the_spm_leading_space },
    { "detok_stream_equals_decode", test_detok_stream_equals_decode },
    { "decode_replaces_invalid_bytes_like_hf", test_decode_replaces_invalid_bytes_like_hf },
    { "decode_without_decoder_joins_with_spaces", test_decode_without_decoder_joins_with_spaces },
};
CHECK_MAIN(cases)
