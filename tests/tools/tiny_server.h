/* tiny_server.h - a fake hx_server for the protocol adapters' unit tests and fuzz target.
 *
 * The adapters' parse functions read only the tokenizer, the chat template and a few limits of
 * the server, so these tests build just that: a byte-level BPE tokenizer with no merges (ids
 * 0..255 are the 256 GPT-2 byte characters, 256 <|endoftext|>, 257 <|im_start|>, 258 <|im_end|>)
 * and a ChatML template, with no model and no engine. Header-only: each test program includes
 * it once. */
#ifndef HX_TESTS_TINY_SERVER_H
#define HX_TESTS_TINY_SERVER_H
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

static const char tiny_chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* The GPT-2 byte -> character table: printable bytes stand for themselves, the others are
 * numbered from U+0100 in byte order. */
static inline uint32_t tiny_byte_cp(int b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++) n += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE);
    return 0x100 + n;
}

/* Fills s (zeroed first) with the tiny tokenizer and template, n_ctx and max_tokens, default
 * sampling with a fixed seed. false (err set) on failure; release with tiny_server_close. */
static inline bool tiny_server_open(hx_server *s, int32_t n_ctx, int32_t max_tokens, hx_err *err)
{
    memset(s, 0, sizeof *s);
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        const uint32_t cp = tiny_byte_cp(b);
        char c[3] = {0};
        if (cp < 0x80) c[0] = (char)cp;
        else c[0] = (char)(0xC0 | cp >> 6), c[1] = (char)(0x80 | (cp & 0x3F));
        json_object_set_new(vocab, c, json_integer(b));
    }
    json_t *tj = json_pack(
        "{s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}, {s:i, s:s, s:b}], s:{s:s, s:b, s:b},"
        " s:{s:s}, s:{s:s, s:o, s:[]}}",
        "added_tokens", "id", 256, "content", "<|endoftext|>", "special", 1, "id", 257,
        "content", "<|im_start|>", "special", 1, "id", 258, "content", "<|im_end|>", "special", 1,
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder",
        "type", "ByteLevel", "model", "type", "BPE", "vocab", vocab, "merges");
    char *text = tj ? json_dumps(tj, JSON_COMPACT) : NULL;
    json_decref(tj);
    if (!text) return hx_err_set(err, HX_E_NOMEM, "tokenizer.json"), false;
    hx_status st = hx_tokenizer_open_json_memory(text, strlen(text), "tiny", &s->tok, err);
    free(text);
    if (st == HX_OK) st = hx_template_compile(tiny_chatml, strlen(tiny_chatml), &s->tpl, err);
    if (st == HX_OK) st = hx_server_chat_open(s, tiny_chatml, "llama", err);
    if (st != HX_OK) return false;
    snprintf(s->model_id, sizeof s->model_id, "tiny-model");
    s->created = 1700000000;
    s->n_ctx = n_ctx;
    s->max_tokens = max_tokens;
    s->sampling = hx_sampling_default();
    s->sampling.seed = 42;
    s->opts.sampling.seed_set = true;
    s->opts.thinking = -1;
    return true;
}

static inline void tiny_server_close(hx_server *s)
{
    hx_server_chat_close(s);
    hx_template_free(s->tpl);
    hx_tokenizer_close(s->tok);
    memset(s, 0, sizeof *s);
}

#endif
