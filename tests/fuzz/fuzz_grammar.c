/* fuzz_grammar.c - libFuzzer target for the grammar compiler and the JSON Schema and regex
 * translations (src/sample/grammar.h, src/sample/json_schema.h, src/sample/regex.h).
 *
 * Input layout: the first byte picks the path: 'S' means the rest is a JSON schema, translated
 * and then compiled; 'R' the rest is a regex, 'J' a regex over a JSON string's content (its
 * grammar must always compile: a syntax error in it is a translator bug); anything else means
 * the whole input is grammar text. A compiled grammar is
 * then run: the input's own bytes are fed to a recognizer (most are refused, which is fine) and
 * a token mask over a small byte-level vocabulary is taken before and after, checked against
 * accepting tokens on a copy. Failures are fine; crashes, leaks, hangs, sanitizer reports,
 * a failure without a message and a mask that disagrees with the recognizer are what this looks
 * for. Build: clang -fsanitize=fuzzer. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_tokens[] = { "{\"", "\":", "true", "null", "\"}", ", \"", "ab",
                                        "\xC3\xA9", "12", "]" };
enum { N_VOCAB = 256 + sizeof k_tokens / sizeof k_tokens[0] + 1 };

static hx_grammar_vocab *vocab(void)
{
    static hx_grammar_vocab *v; /* built once, kept for the process (not a per-input leak) */
    static char singles[256];
    if (!v) {
        const char *bytes[N_VOCAB];
        size_t lens[N_VOCAB];
        for (int b = 0; b < 256; b++) singles[b] = (char)b, bytes[b] = &singles[b], lens[b] = 1;
        for (size_t i = 0; i < sizeof k_tokens / sizeof k_tokens[0]; i++)
            bytes[256 + i] = k_tokens[i], lens[256 + i] = strlen(k_tokens[i]);
        bytes[N_VOCAB - 1] = "", lens[N_VOCAB - 1] = 0;
        int32_t end = N_VOCAB - 1;
        hx_err err = { 0 };
        if (hx_grammar_vocab_init(bytes, lens, N_VOCAB, &end, 1, &v, &err) != HX_OK)
            __builtin_trap();
    }
    return v;
}

/* The brute-force side copies the state once per token, which a state near the limits makes
 * slow; so it checks the multi-byte tokens, the bytes the input starts with and every 7th byte. */
static void check_mask(hx_grammar_state *s, const char *in, size_t in_len)
{
    uint8_t allowed[N_VOCAB], check[N_VOCAB] = { 0 };
    if (hx_grammar_mask(s, vocab(), allowed) != HX_OK) return;
    for (int32_t id = 0; id < N_VOCAB - 1; id++) check[id] = id >= 256 || id % 7 == 0;
    for (size_t i = 0; i < in_len && i < 32; i++) check[(uint8_t)in[i]] = 1;
    for (int32_t id = 0; id < N_VOCAB - 1; id++) {
        if (!check[id]) continue;
        hx_grammar_state *c = hx_grammar_state_copy(s);
        if (!c) return;
        const char *p = id < 256 ? (const char[]){ (char)id } : k_tokens[id - 256];
        const size_t n = id < 256 ? 1 : strlen(p);
        if (hx_grammar_accept_bytes(c, p, n) != (allowed[id] != 0)) __builtin_trap();
        hx_grammar_state_free(c);
    }
    if ((allowed[N_VOCAB - 1] != 0) != hx_grammar_done(s)) __builtin_trap();
}

static hx_status run_text(const char *text, size_t len, const char *feed, size_t feed_len)
{
    hx_grammar *g = NULL;
    hx_err err = { 0 };
    const hx_status st = hx_grammar_compile(text, len, &g, &err);
    if (st != HX_OK) {
        if (err.msg[0] == '\0' || g != NULL) __builtin_trap();
        return st;
    }
    hx_grammar_state *s = hx_grammar_start(g);
    if (s) {
        check_mask(s, feed, feed_len);
        if (feed_len > 512) feed_len = 512;
        for (size_t i = 0; i < feed_len; i++) hx_grammar_accept_bytes(s, feed + i, 1);
        check_mask(s, feed, feed_len);
        hx_grammar_state_free(s);
    }
    hx_grammar_free(g);
    return HX_OK;
}

static void run_regex(const char *re, size_t len, bool json)
{
    char *text = NULL;
    hx_err err = { 0 };
    const unsigned flags = json ? HX_REGEX_JSON_STRING : 0;
    if (hx_regex_to_grammar(re, len, json ? "p" : "root", flags, &text, &err) != HX_OK) {
        if (err.msg[0] == '\0' || text != NULL) __builtin_trap();
        return;
    }
    static const char wrap[] = "root ::= \"\\\"\" p \"\\\"\"\n";
    const size_t n = strlen(text);
    char *full = json ? hx_realloc(text, n + sizeof wrap) : text;
    if (!full) {
        hx_free(text);
        return;
    }
    if (json) memcpy(full + n, wrap, sizeof wrap);
    if (run_text(full, strlen(full), re, len) == HX_E_INVALID) __builtin_trap();
    hx_free(full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    if (size > 0 && s[0] == 'S') {
        json_t *schema = json_loadb(s + 1, size - 1, JSON_DECODE_ANY, NULL);
        if (!schema) return 0;
        char *text = NULL;
        hx_err err = { 0 };
        if (hx_json_schema_to_grammar(schema, &text, &err) == HX_OK) {
            run_text(text, strlen(text), s + 1, size - 1);
            hx_free(text);
        } else if (err.msg[0] == '\0' || text != NULL) {
            __builtin_trap();
        }
        json_decref(schema);
        return 0;
    }
    if (size > 0 && (s[0] == 'R' || s[0] == 'J')) {
        run_regex(s + 1, size - 1, s[0] == 'J');
        return 0;
    }
    run_text(s, size, s, size);
    return 0;
}
