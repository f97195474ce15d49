/* fuzz_adapters.c - libFuzzer target for the protocol adapters' request parsing (src/serve).
 *
 * Each input is a request body handed to every production parse entry point: OpenAI chat and
 * completions, Anthropic messages and count_tokens, Responses. They run over a fake server: a tiny
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
#include "../tools/tiny_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fake server, built on the first input and kept (it is read-only, as in the server). */
static hx_server *server(void)
{
    static hx_server s;
    static int state; /* 0: not built, 1: built, -1: failed */
    if (state) return state > 0 ? &s : NULL;
    hx_err err = {0};
    state = tiny_server_open(&s, 96, 16, &err) ? 1 : -1;
    return state > 0 ? &s : NULL;
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
        hx_openai_parse_chat, hx_openai_parse_completions, hx_anthropic_parse_messages,
        hx_responses_parse};
    for (size_t k = 0; k < sizeof parse / sizeof parse[0]; k++) {
        hx_completion *c = NULL;
        hx_reply_opts o;
        hx_err err = {0};
        const hx_status st = parse[k](s, body, size, &c, &o, &err);
        if (st == HX_OK && parse[k] == hx_responses_parse) hx_responses_state_free(o.wire_state);
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
