/* fuzz_adapters.c - libFuzzer target for the protocol adapters' request parsing (src/serve).
 *
 * Each input is a request body handed to every production parse entry point: OpenAI chat and
 * completions, Anthropic messages and count_tokens. They run over a fake server: a tiny
 * byte-level tokenizer (the 256 GPT-2 byte characters plus ChatML's special tokens, built once)
 * and a compiled ChatML template, with a small context so the context check is reached. What must
 * hold: a success yields a prompt inside the context and the vocabulary, a failure says why and
 * leaves the output alone, and every error body can be built from the message (which may quote
 * the input). Everything made for one input is freed before the next; leaks fail the run.
 * Build: clang -fsanitize=fuzzer (the CMake option HEARTH_FUZZ). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "serve/adapter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static uint32_t byte_cp(int b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++) n += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE);
    return 0x100 + n;
}

/* The fake server, built on the first input and kept (it is read-only, as in the server). */
static hx_server *server(void)
{
    static hx_server s;
    static int state; /* 0: not built, 1: built, -1: failed */
    if (state) return state > 0 ? &s : NULL;
    state = -1;
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        const uint32_t cp = byte_cp(b);
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
    hx_err err = {0};
    if (!text) return NULL;
    hx_status st = hx_tokenizer_open_json_memory(text, strlen(text), "tiny", &s.tok, &err);
    free(text);
    if (st != HX_OK || hx_template_compile(chatml, strlen(chatml), &s.tpl, &err) != HX_OK)
        return NULL;
    strcpy(s.model_id, "tiny-model");
    s.created = 1700000000;
    s.n_ctx = 96;
    s.max_tokens = 16;
    s.sampling = hx_sampling_default();
    s.opts.seed_set = true;
    state = 1;
    return &s;
}

/* Both error bodies for a failure must build (the message may quote any input). */
static void error_bodies(hx_status st, const hx_err *err, const hx_reply_opts *o)
{
    for (int api = 0; api < 2; api++) {
        hx_http_resp r = {0};
        hx_serve_error((hx_api)api, st, err->msg, o->param, &r);
        if (!r.body || r.status < 400) __builtin_trap();
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        if (!j) __builtin_trap(); /* always valid JSON */
        json_decref(j);
        hx_free(r.body);
    }
}

static void check(const hx_server *s, hx_status st, hx_completion *c, const hx_reply_opts *o,
                  const hx_err *err)
{
    if (st != HX_OK) {
        if (c != NULL || err->status != st || err->msg[0] == '\0') __builtin_trap();
        error_bodies(st, err, o);
        return;
    }
    if (!c || c->n_prompt <= 0 || c->n_prompt >= s->n_ctx || c->gp.n_stop > 16) __builtin_trap();
    const int32_t n_vocab = hx_tokenizer_n_vocab(s->tok);
    for (int32_t i = 0; i < c->n_prompt; i++)
        if (c->prompt[i] < 0 || c->prompt[i] >= n_vocab) __builtin_trap();
    for (int32_t i = 0; i < c->gp.n_stop; i++)
        if (!c->gp.stop[i] || !c->gp.stop[i][0]) __builtin_trap();
    for (int32_t i = 0; i < c->gp.sampling.n_bias; i++)
        if (c->gp.sampling.bias_ids[i] < 0 || c->gp.sampling.bias_ids[i] >= n_vocab)
            __builtin_trap();
    if (c->gp.sampling.n_logprobs < 0 || c->gp.sampling.n_logprobs > HX_MAX_LOGPROBS)
        __builtin_trap();
    hx_completion_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const hx_server *s = server();
    if (!s) __builtin_trap();
    const char *body = (const char *)data;
    hx_status (*const parse[])(const hx_server *, const char *, size_t, hx_completion **,
                               hx_reply_opts *, hx_err *) = {
        hx_openai_parse_chat, hx_openai_parse_completions, hx_anthropic_parse_messages};
    for (size_t k = 0; k < sizeof parse / sizeof parse[0]; k++) {
        hx_completion *c = NULL;
        hx_reply_opts o;
        hx_err err = {0};
        const hx_status st = parse[k](s, body, size, &c, &o, &err);
        check(s, st, c, &o, &err);
    }
    hx_reply_opts o;
    hx_err err = {0};
    int32_t n = -1;
    const hx_status st = hx_anthropic_parse_count_tokens(s, body, size, &n, &o, &err);
    if (st == HX_OK && n < 0) __builtin_trap();
    if (st != HX_OK) {
        if (n != -1 || err.msg[0] == '\0') __builtin_trap();
        error_bodies(st, &err, &o);
    }
    return 0;
}
