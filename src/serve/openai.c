/* openai.c - the OpenAI API: /v1/chat/completions, /v1/completions and /v1/models.
 *
 * Parses and validates a request into a prepared completion (messages rendered through the
 * model's chat template, or a raw prompt; sampling fields over the server's defaults, which are
 * over the model's), then formats what the exchange reads back in OpenAI's exact wire shapes:
 * chat.completion / text_completion bodies, or chat.completion.chunk / text_completion chunks as
 * `data: <json>\n\n` events ending in `data: [DONE]`. Chat requests may offer tools (calls come
 * back as message.tool_calls, streamed as delta.tool_calls: index, id and name first, then the
 * arguments), ask for structured output (response_format json_object / json_schema) and turn
 * thinking on or off (reasoning_effort, chat_template_kwargs); reasoning comes back as
 * reasoning_content (and reasoning, for mlx-lm clients). Field names and ranges follow the OpenAI
 * reference; unknown fields are ignored, features not built (n > 1, echo, suffix, images, the
 * legacy functions) are refused with a 400 that says so. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "format/discover.h"
#include "serve/adapter.h"

#define FINGERPRINT "hearth-" HX_VERSION_STRING

/* ---- request fields ---- */

static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* "logit_bias": {"<token id>": bias in -100..100, ...} into the sampling settings. */
static hx_status parse_logit_bias(hx_parse *p, hx_completion *c)
{
    json_t *v = field(p->root, "logit_bias");
    if (!v) return HX_OK;
    char got[48];
    if (!json_is_object(v)) {
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "logit_bias",
                             "logit_bias must be an object mapping token ids to numbers, got %s",
                             got);
    }
    const size_t n = json_object_size(v);
    if (n == 0) return HX_OK;
    int32_t *ids = hx_arena_alloc(&c->arena, n * sizeof *ids, 0);
    float *vals = hx_arena_alloc(&c->arena, n * sizeof *vals, 0);
    if (!ids || !vals) return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    const int32_t n_vocab = hx_tokenizer_n_vocab(p->s->tok);
    const char *key;
    json_t *b;
    size_t i = 0;
    json_object_foreach(v, key, b) {
        char *end = NULL;
        errno = 0;
        const long id = strtol(key, &end, 10);
        if (!*key || *end || errno || key[0] == ' ' || key[0] == '+')
            return hx_parse_fail(p, HX_E_INVALID, "logit_bias",
                                 "logit_bias keys must be token ids, got \"%.40s\"", key);
        if (id < 0 || id >= n_vocab)
            return hx_parse_fail(p, HX_E_INVALID, "logit_bias",
                                 "logit_bias names token %ld, outside the vocabulary (0..%d)", id,
                                 n_vocab - 1);
        const double d = json_number_value(b);
        if (!json_is_number(b) || !(d >= -100 && d <= 100)) {
            hx_parse_describe(b, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, "logit_bias",
                                 "logit_bias[\"%s\"] must be a number between -100 and 100, got %s",
                                 key, got);
        }
        ids[i] = (int32_t)id;
        vals[i] = (float)d;
        i++;
    }
    c->gp.sampling.bias_ids = ids;
    c->gp.sampling.bias_values = vals;
    c->gp.sampling.n_bias = (int32_t)i;
    return HX_OK;
}

/* Fields the two endpoints share: limits, sampling, stop, n, stream, and the features that are
 * refused. The request values override the server's (already in c). */
static hx_status parse_common(hx_parse *p, hx_completion *c, bool chat)
{
    json_t *r = p->root;
    hx_sampling *sp = &c->gp.sampling;
    hx_status st = HX_OK;
    int64_t i = 0;
    double d = 0;
    bool set = false;

    const char *max_key = chat && field(r, "max_completion_tokens") ? "max_completion_tokens"
                                                                    : "max_tokens";
    if ((st = hx_parse_int(p, r, max_key, 1, INT32_MAX, "an integer >= 1", &i, &set))) return st;
    if (set) c->gp.max_tokens = (int32_t)i;
#define NUM(key, lo, hi, open, what, dst)                                              \
    do {                                                                               \
        set = false;                                                                   \
        if ((st = hx_parse_number(p, r, key, lo, hi, open, what, &d, &set))) return st; \
        if (set) dst = (float)d;                                                       \
    } while (0)
    NUM("temperature", 0, 2, false, "a number between 0 and 2", sp->temperature);
    NUM("top_p", 0, 1, true, "a number greater than 0 and at most 1", sp->top_p);
    NUM("min_p", 0, 1, false, "a number between 0 and 1", sp->min_p);
    NUM("presence_penalty", -2, 2, false, "a number between -2 and 2", sp->presence_penalty);
    NUM("frequency_penalty", -2, 2, false, "a number between -2 and 2", sp->frequency_penalty);
    NUM("repeat_penalty", 0, 100, true, "a number greater than 0", sp->repeat_penalty);
    NUM("repetition_penalty", 0, 100, true, "a number greater than 0", sp->repeat_penalty);
#undef NUM
    set = false;
    if ((st = hx_parse_int(p, r, "top_k", 0, INT32_MAX, "an integer >= 0", &i, &set))) return st;
    if (set) sp->top_k = (int32_t)i;
    set = false;
    if ((st = hx_parse_int(p, r, "seed", INT64_MIN, INT64_MAX, "an integer", &i, &set)))
        return st;
    if (set) sp->seed = (uint64_t)i;
    if ((st = parse_logit_bias(p, c))) return st;
    if ((st = hx_parse_stop(p, json_object_get(r, "stop"), "stop", true, c))) return st;

    set = false;
    if ((st = hx_parse_int(p, r, "n", 1, INT32_MAX, "an integer >= 1", &i, &set))) return st;
    if (set && i > 1)
        return hx_parse_fail(p, HX_E_INVALID, "n", "n > 1 is not supported yet (got %lld)",
                             (long long)i);
    set = false;
    if ((st = hx_parse_int(p, r, "best_of", 1, INT32_MAX, "an integer >= 1", &i, &set)))
        return st;
    if (set && i > 1)
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "best_of", "best_of > 1 is not supported yet");

    if ((st = hx_parse_bool(p, r, "stream", &p->opts->stream))) return st;
    json_t *so = field(r, "stream_options");
    if (so && !json_is_object(so)) {
        char got[48];
        hx_parse_describe(so, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "stream_options",
                             "stream_options must be an object, got %s", got);
    }
    if (so && (st = hx_parse_bool(p, so, "include_usage", &p->opts->include_usage))) {
        snprintf(p->opts->param, sizeof p->opts->param, "stream_options.include_usage");
        return st;
    }
    if (!p->opts->stream) p->opts->include_usage = false;

    return HX_OK;
}

/* The chat extras: tools, tool_choice, parallel_tool_calls, structured output (response_format
 * and other servers' fields), reasoning_effort, chat_template_kwargs (and the legacy functions,
 * refused). Release cr with hx_chat_req_clear. */
static hx_status chat_extras(hx_parse *p, hx_chat_req *cr)
{
    json_t *r = p->root;
    hx_err terr = {0};
    hx_status st;
    char got[48];
    json_t *fns = field(r, "functions");
    if (json_is_array(fns) && json_array_size(fns) > 0)
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "functions",
                             "functions (the legacy form) are not supported: send tools");
    json_t *tools = field(r, "tools");
    if (tools) {
        st = hx_tools_normalize(tools, HX_TOOLS_OPENAI_CHAT, &cr->tools, p->opts->param,
                                sizeof p->opts->param, &terr);
        if (st != HX_OK) return hx_parse_fail(p, st, p->opts->param, "%s", terr.msg);
    }
    st = hx_tools_choice(field(r, "tool_choice"), HX_TOOLS_OPENAI_CHAT, cr->tools, &cr->choice,
                         p->opts->param, sizeof p->opts->param, &terr);
    if (st != HX_OK) return hx_parse_fail(p, st, p->opts->param, "%s", terr.msg);
    if ((st = hx_parse_bool(p, r, "parallel_tool_calls", &cr->parallel))) return st;

    if ((st = hx_parse_structured(p, cr))) return st;
    if ((st = hx_parse_effort(p, field(r, "reasoning_effort"), "reasoning_effort", cr)))
        return st;
    cr->kwargs = field(r, "chat_template_kwargs");
    if (cr->kwargs && !json_is_object(cr->kwargs)) {
        hx_parse_describe(cr->kwargs, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "chat_template_kwargs",
                             "chat_template_kwargs must be an object, got %s", got);
    }
    return HX_OK;
}

/* A message's content as one string: a string, null (assistant only: ""), or text parts joined
 * by newlines. *out is a new JSON string. */
static hx_status message_content(hx_parse *p, json_t *m, size_t im, const char *role, json_t **out)
{
    char name[64], got[48];
    json_t *content = json_object_get(m, "content");
    if (json_is_string(content)) {
        *out = json_copy(content);
        return *out ? HX_OK : hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    }
    if (!content || json_is_null(content)) {
        if (strcmp(role, "assistant") != 0)
            return hx_parse_fail(p, HX_E_INVALID, "messages",
                                 "messages[%zu].content is required for role \"%s\"", im, role);
        *out = json_string("");
        return *out ? HX_OK : hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    }
    if (!json_is_array(content)) {
        hx_parse_describe(content, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "messages",
                             "messages[%zu].content must be a string or an array of content "
                             "parts, got %s", im, got);
    }
    hx_http_buf b = {0};
    hx_status st = HX_OK;
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *part = json_array_get(content, i);
        snprintf(name, sizeof name, "messages[%zu].content[%zu]", im, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !type) {
            hx_parse_describe(part, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, "messages",
                               "%s must be an object with a \"type\", got %s", name, got);
            goto fail;
        }
        if (strcmp(type, "text") != 0) {
            const bool known = strcmp(type, "image_url") == 0 || strcmp(type, "input_audio") == 0 ||
                               strcmp(type, "file") == 0 || strcmp(type, "refusal") == 0;
            st = hx_parse_fail(p, known ? HX_E_UNSUPPORTED : HX_E_INVALID, "messages",
                               known ? "%s has type \"%s\", which is not supported yet (text "
                                       "parts only)"
                                     : "%s has an unknown type \"%.40s\" (expected \"text\")",
                               name, type);
            goto fail;
        }
        if (!json_is_string(text)) {
            hx_parse_describe(text, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, "messages", "%s.text must be a string, got %s",
                               name, text ? got : "nothing");
            goto fail;
        }
        if ((i > 0 && !hx_http_buf_append(&b, "\n", 1)) ||
            !hx_http_buf_append(&b, json_string_value(text), json_string_length(text))) {
            st = hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
            goto fail;
        }
    }
    *out = json_stringn_nocheck(b.data ? b.data : "", b.len); /* parts were valid UTF-8 */
    if (!*out) st = hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
fail:
    hx_free(b.data);
    return st;
}

/* The request's messages normalized for the template: {"role","content":string} (developer
 * becomes system), with name, tool_call_id, tool_calls and reasoning_content kept. *out is a new
 * array. */
static hx_status chat_messages(hx_parse *p, json_t **out)
{
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    char got[48];
    json_t *msgs = json_object_get(p->root, "messages");
    if (!msgs || json_is_null(msgs))
        return hx_parse_fail(p, HX_E_INVALID, "messages",
                             "messages is required: a non-empty array of messages");
    if (!json_is_array(msgs)) {
        hx_parse_describe(msgs, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "messages",
                             "messages must be a non-empty array of messages, got %s", got);
    }
    if (json_array_size(msgs) == 0)
        return hx_parse_fail(p, HX_E_INVALID, "messages",
                             "messages must be a non-empty array of messages, got []");
    json_t *norm = json_array();
    if (!norm) return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    hx_status st = HX_OK;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i), *content = NULL, *nm = NULL;
        if (!json_is_object(m)) {
            hx_parse_describe(m, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, "messages", "messages[%zu] must be an object, "
                               "got %s", i, got);
            goto fail;
        }
        json_t *rv = json_object_get(m, "role");
        const char *role = json_string_value(rv);
        size_t k = 0;
        while (role && k < HX_COUNTOF(roles) && strcmp(role, roles[k]) != 0) k++;
        if (!role || k == HX_COUNTOF(roles)) {
            hx_parse_describe(rv, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, "messages",
                               "messages[%zu].role must be one of system, developer, user, "
                               "assistant, tool; got %s", i, rv ? got : "nothing");
            goto fail;
        }
        if ((st = message_content(p, m, i, role, &content))) goto fail;
        nm = json_pack("{s:s, s:o}", "role", k == 1 ? "system" : role, "content", content);
        if (!nm || json_array_append_new(norm, nm) != 0) {
            st = hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
            goto fail;
        }
        static const char *const keep[] = {"name", "tool_call_id", "reasoning_content"};
        for (size_t j = 0; j < HX_COUNTOF(keep); j++) {
            json_t *v = json_object_get(m, keep[j]);
            if (json_is_string(v)) json_object_set(nm, keep[j], v);
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(calls)) json_object_set(nm, "tool_calls", calls);
    }
    *out = norm;
    return HX_OK;
fail:
    json_decref(norm);
    return st;
}

/* ---- parse entry points ---- */

hx_status hx_openai_parse_chat(const hx_server *s, const char *body, size_t len,
                               hx_completion **out, hx_reply_opts *opts, hx_err *err)
{
    hx_parse p;
    hx_completion *c = NULL;
    json_t *msgs = NULL;
    hx_chat_req cr = hx_chat_req_default();
    int64_t top = 0;
    hx_status st = hx_parse_begin(&p, s, body, len, opts, err);
    if (st == HX_OK) st = hx_parse_completion(&p, &c);
    if (st == HX_OK) st = parse_common(&p, c, true);
    if (st == HX_OK) st = hx_parse_bool(&p, p.root, "logprobs", &opts->logprobs);
    if (st == HX_OK)
        st = hx_parse_int(&p, p.root, "top_logprobs", 0, HX_MAX_LOGPROBS,
                          "an integer between 0 and 20", &top, NULL);
    if (st == HX_OK) st = chat_extras(&p, &cr);
    if (st == HX_OK) st = chat_messages(&p, &msgs);
    if (st == HX_OK)
        st = hx_parse_chat(&p, msgs, &cr, NULL, 0, "send a raw prompt to /v1/completions instead",
                           true, c);
    hx_chat_req_clear(&cr);
    if (st != HX_OK) goto fail;
    opts->chat_logprobs = true;
    opts->n_top_logprobs = opts->logprobs ? (int32_t)top : 0;
    c->logprobs = opts->logprobs;
    c->gp.sampling.n_logprobs = opts->n_top_logprobs;
    json_decref(msgs);
    hx_parse_end(&p);
    *out = c;
    return HX_OK;
fail:
    json_decref(msgs);
    hx_completion_free(c);
    hx_parse_end(&p);
    return st;
}

/* The prompt of /v1/completions: a string, [string], [ids] or [[ids]]. */
static hx_status completion_prompt(hx_parse *p, hx_completion *c)
{
    char got[48];
    json_t *v = json_object_get(p->root, "prompt");
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        hx_tok_ids ids = {0};
        hx_err terr = {0};
        hx_status st = hx_tokenizer_encode(p->s->tok, json_string_value(v), json_string_length(v),
                                           HX_TOK_ADD_SPECIAL | HX_TOK_PARSE_SPECIAL, &ids, &terr);
        st = st != HX_OK ? hx_parse_fail(p, st, NULL, "%s", terr.msg)
                         : hx_parse_prompt_ids(p, ids.ids, ids.n, "prompt", c);
        hx_tok_ids_free(&ids);
        return st;
    }
    if (json_is_array(v) && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0))) {
        const size_t n = json_array_size(v);
        int32_t *ids = hx_arena_alloc(&c->arena, n * sizeof *ids, 0);
        if (!ids) return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(v, i);
            const json_int_t id = json_integer_value(e);
            if (!json_is_integer(e) || id < INT32_MIN || id > INT32_MAX) {
                hx_parse_describe(e, got, sizeof got);
                return hx_parse_fail(p, HX_E_INVALID, "prompt",
                                     "prompt[%zu] must be a token id, got %s", i, got);
            }
            ids[i] = (int32_t)id;
        }
        return hx_parse_prompt_ids(p, ids, n, "prompt", c);
    }
    if (json_is_array(v) && json_array_size(v) > 1 && json_is_string(json_array_get(v, 0)))
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "prompt",
                             "several prompts in one request are not supported yet");
    if (!v || json_is_null(v))
        return hx_parse_fail(p, HX_E_INVALID, "prompt", "prompt is required: a string, or an "
                             "array of token ids");
    hx_parse_describe(v, got, sizeof got);
    return hx_parse_fail(p, HX_E_INVALID, "prompt",
                         "prompt must be a string, an array of one string, or an array of token "
                         "ids, got %s", got);
}

hx_status hx_openai_parse_completions(const hx_server *s, const char *body, size_t len,
                                      hx_completion **out, hx_reply_opts *opts, hx_err *err)
{
    hx_parse p;
    hx_completion *c = NULL;
    int64_t n_lp = 0;
    bool lp_set = false, echo = false;
    hx_status st = hx_parse_begin(&p, s, body, len, opts, err);
    if (st == HX_OK) st = hx_parse_completion(&p, &c);
    if (st == HX_OK) st = parse_common(&p, c, false);
    if (st == HX_OK)
        st = hx_parse_int(&p, p.root, "logprobs", 0, 5, "an integer between 0 and 5", &n_lp,
                          &lp_set);
    if (st == HX_OK) st = hx_parse_bool(&p, p.root, "echo", &echo);
    if (st == HX_OK && echo)
        st = hx_parse_fail(&p, HX_E_UNSUPPORTED, "echo", "echo is not supported yet");
    if (st == HX_OK) {
        json_t *suffix = field(p.root, "suffix");
        if (suffix && !(json_is_string(suffix) && json_string_length(suffix) == 0))
            st = hx_parse_fail(&p, HX_E_UNSUPPORTED, "suffix",
                               "suffix (fill-in-the-middle) is not supported yet");
    }
    if (st == HX_OK) st = completion_prompt(&p, c);
    hx_chat_req cr = hx_chat_req_default();
    if (st == HX_OK) st = hx_parse_structured(&p, &cr);
    if (st == HX_OK) st = hx_parse_format(&p, &cr, c);
    hx_chat_req_clear(&cr);
    if (st != HX_OK) {
        hx_completion_free(c);
        hx_parse_end(&p);
        return st;
    }
    opts->logprobs = lp_set;
    opts->n_top_logprobs = (int32_t)n_lp;
    c->logprobs = lp_set;
    c->gp.sampling.n_logprobs = (int32_t)n_lp;
    hx_parse_end(&p);
    *out = c;
    return HX_OK;
}

/* ---- formatting ---- */

static const char *finish_reason(const hx_exchange *x, const hx_event *done)
{
    if (hx_exchange_called_tools(x, done)) return "tool_calls";
    return done->stats.finish == HX_FINISH_LENGTH ? "length" : "stop"; /* cancelled: a stop */
}

/* jansson refuses non-finite reals; a -inf log-probability is shown as a very small number. */
static json_t *lp_real(float v)
{
    return json_real(isfinite(v) ? (double)v : -9999.0);
}

/* One chat logprobs entry: {"token","logprob","bytes","top_logprobs":[...]}. */
static json_t *chat_lp_entry(const hx_exchange *x, const hx_lp_rec *r)
{
    const hx_tokenizer *tok = x->s->tok;
    json_t *bytes = NULL, *token = hx_json_token(tok, r->lp.token, &bytes);
    json_t *top = json_array();
    const int32_t n_top = r->lp.n_top < x->opts.n_top_logprobs ? r->lp.n_top
                                                               : x->opts.n_top_logprobs;
    for (int32_t i = 0; top && i < n_top; i++) {
        json_t *b = NULL, *t = hx_json_token(tok, r->lp.top_ids[i], &b);
        json_t *alt = json_pack("{s:o, s:o, s:o}", "token", t, "logprob",
                                lp_real(r->lp.top_logprobs[i]), "bytes", b);
        if (json_array_append_new(top, alt) != 0) {
            json_decref(top);
            top = NULL;
        }
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "token", token, "logprob", lp_real(r->lp.logprob),
                     "bytes", bytes, "top_logprobs", top);
}

/* Legacy completions logprobs over records: {"tokens","token_logprobs","top_logprobs",
 * "text_offset"}. */
static json_t *legacy_lp(const hx_exchange *x, const hx_lp_rec *recs, int32_t n)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    for (int32_t i = 0; tokens && lps && tops && offs && i < n; i++) {
        const hx_lp_rec *r = &recs[i];
        json_t *top = json_object();
        const int32_t n_top = r->lp.n_top < x->opts.n_top_logprobs ? r->lp.n_top
                                                                   : x->opts.n_top_logprobs;
        for (int32_t k = 0; top && k < n_top; k++) {
            json_t *t = hx_json_token(x->s->tok, r->lp.top_ids[k], NULL);
            if (t) json_object_set_new(top, json_string_value(t), lp_real(r->lp.top_logprobs[k]));
            json_decref(t);
        }
        json_array_append_new(tokens, hx_json_token(x->s->tok, r->lp.token, NULL));
        json_array_append_new(lps, lp_real(r->lp.logprob));
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)r->offset));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *usage(const hx_gen_stats *st)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)st->n_prompt,
                     "completion_tokens", (json_int_t)st->n_gen, "total_tokens",
                     (json_int_t)st->n_prompt + st->n_gen, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)st->n_cached);
}

/* The envelope every body and chunk shares. */
static json_t *envelope(const hx_exchange *x, const char *object, json_t *choices)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", x->id, "object", object, "created",
                     (json_int_t)x->created, "model", x->s->model_id, "system_fingerprint",
                     FINGERPRINT, "choices", choices);
}

/* A streamed chunk with one choice; usage null on it when the request asked for a usage chunk. */
static bool send_chunk(hx_exchange *x, const char *object, json_t *choice, hx_http_buf *out)
{
    json_t *chunk = envelope(x, object, json_pack("[o]", choice));
    if (chunk && x->opts.include_usage) json_object_set_new(chunk, "usage", json_null());
    return hx_sse_json(out, NULL, chunk);
}

/* The end of a stream: the finish chunk, the usage chunk when asked, [DONE]. */
static bool send_end(hx_exchange *x, const char *object, json_t *choice, const hx_event *done,
                     hx_http_buf *out)
{
    bool ok = send_chunk(x, object, choice, out);
    if (ok && x->opts.include_usage) {
        json_t *u = envelope(x, object, json_array());
        if (u) json_object_set_new(u, "usage", usage(&done->stats));
        ok = hx_sse_json(out, NULL, u);
    }
    return ok && hx_http_buf_append(out, "data: [DONE]\n\n", 14);
}

/* chat.completion */

static bool chat_open(hx_exchange *x, hx_http_buf *out)
{
    return send_chunk(x, "chat.completion.chunk",
                      json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", 0, "delta", "role",
                                "assistant", "content", "", "logprobs", "finish_reason"),
                      out);
}

static bool chat_text(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                      hx_http_buf *out)
{
    json_t *lps = lp ? json_pack("{s:[o]}", "content", chat_lp_entry(x, lp)) : json_null();
    return send_chunk(x, "chat.completion.chunk",
                      json_pack("{s:i, s:{s:o}, s:o, s:n}", "index", 0, "delta", "content",
                                hx_json_text(text, len), "logprobs", lps, "finish_reason"),
                      out);
}

/* Reasoning streams in both names clients read: reasoning_content (llama-server, DeepSeek,
 * vLLM) and reasoning (mlx-lm). */
static bool chat_reasoning(hx_exchange *x, const char *text, size_t len, hx_http_buf *out)
{
    return send_chunk(x, "chat.completion.chunk",
                      json_pack("{s:i, s:{s:o, s:o}, s:n, s:n}", "index", 0, "delta",
                                "reasoning_content", hx_json_text(text, len), "reasoning",
                                hx_json_text(text, len), "logprobs", "finish_reason"),
                      out);
}

/* A call's start carries its index, id, type and name with empty arguments; the arguments then
 * follow in fragments under the same index. */
static bool chat_tool(hx_exchange *x, const hx_toolcall_event *ev, hx_http_buf *out)
{
    json_t *call = NULL;
    if (ev->kind == HX_TOOLCALL_EV_CALL_START)
        call = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", ev->index, "id", ev->id, "type",
                         "function", "function", "name", ev->name, "arguments", "");
    else if (ev->kind == HX_TOOLCALL_EV_CALL_ARGS)
        call = json_pack("{s:i, s:{s:o}}", "index", ev->index, "function", "arguments",
                         hx_json_text(ev->text, ev->len));
    else
        return true; /* the end of a call has no chunk of its own */
    return send_chunk(x, "chat.completion.chunk",
                      json_pack("{s:i, s:{s:[o]}, s:n, s:n}", "index", 0, "delta", "tool_calls",
                                call, "logprobs", "finish_reason"),
                      out);
}

static bool chat_finish(hx_exchange *x, const hx_event *done, hx_http_buf *out)
{
    return send_end(x, "chat.completion.chunk",
                    json_pack("{s:i, s:{}, s:n, s:s}", "index", 0, "delta", "logprobs",
                              "finish_reason", finish_reason(x, done)),
                    done, out);
}

/* The assistant message: content (null when the reply is only calls), reasoning, tool_calls. */
static json_t *chat_message(hx_exchange *x)
{
    const int32_t n_calls = x->calls ? hx_toolcall_count(x->calls) : 0;
    json_t *content = x->text.len || !n_calls ? hx_json_text(x->text.data ? x->text.data : "",
                                                             x->text.len)
                                              : json_null();
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
    if (m && x->thinking.len) {
        json_object_set_new(m, "reasoning_content", hx_json_text(x->thinking.data,
                                                                 x->thinking.len));
        json_object_set_new(m, "reasoning", hx_json_text(x->thinking.data, x->thinking.len));
    }
    json_t *calls = n_calls ? json_array() : NULL;
    for (int32_t i = 0; calls && i < n_calls; i++) {
        const hx_toolcall *tc = hx_toolcall_get(x->calls, i);
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", tc->id, "type",
                                               "function", "function", "name", tc->name,
                                               "arguments", tc->arguments, tc->arguments_len));
    }
    if (m && calls) json_object_set_new(m, "tool_calls", calls);
    return m;
}

static json_t *chat_body(hx_exchange *x, const hx_event *done)
{
    json_t *lps = json_null();
    if (x->opts.logprobs) {
        json_t *content = json_array();
        for (int32_t i = 0; content && i < x->n_lps; i++)
            if (json_array_append_new(content, chat_lp_entry(x, &x->lps[i])) != 0) {
                json_decref(content);
                content = NULL;
            }
        lps = json_pack("{s:o}", "content", content);
    }
    json_t *choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", chat_message(x),
                               "logprobs", lps, "finish_reason", finish_reason(x, done));
    json_t *body = envelope(x, "chat.completion", json_pack("[o]", choice));
    if (body && json_object_set_new(body, "usage", usage(&done->stats)) != 0) {
        json_decref(body);
        body = NULL;
    }
    return body;
}

static const hx_wire chat_wire = {HX_API_OPENAI, "chatcmpl-", chat_open, chat_text,
                                  chat_reasoning, chat_tool, chat_finish, chat_body, NULL};

/* text_completion */

static bool text_open(hx_exchange *x, hx_http_buf *out)
{
    (void)x, (void)out;
    return true; /* the first chunk already carries text */
}

static bool text_text(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                      hx_http_buf *out)
{
    return send_chunk(x, "text_completion",
                      json_pack("{s:o, s:i, s:o, s:n}", "text", hx_json_text(text, len), "index",
                                0, "logprobs", lp ? legacy_lp(x, lp, 1) : json_null(),
                                "finish_reason"),
                      out);
}

static bool text_finish(hx_exchange *x, const hx_event *done, hx_http_buf *out)
{
    return send_end(x, "text_completion",
                    json_pack("{s:s, s:i, s:n, s:s}", "text", "", "index", 0, "logprobs",
                              "finish_reason", finish_reason(x, done)),
                    done, out);
}

static json_t *text_body(hx_exchange *x, const hx_event *done)
{
    json_t *choice = json_pack(
        "{s:o, s:i, s:o, s:s}", "text", hx_json_text(x->text.data ? x->text.data : "", x->text.len),
        "index", 0, "logprobs", x->opts.logprobs ? legacy_lp(x, x->lps, x->n_lps) : json_null(),
        "finish_reason", finish_reason(x, done));
    json_t *body = envelope(x, "text_completion", json_pack("[o]", choice));
    if (body && json_object_set_new(body, "usage", usage(&done->stats)) != 0) {
        json_decref(body);
        body = NULL;
    }
    return body;
}

static const hx_wire text_wire = {HX_API_OPENAI, "cmpl-", text_open, text_text, NULL, NULL,
                                  text_finish, text_body, NULL};

/* ---- handlers ---- */

void hx_openai_chat(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    hx_exchange_serve(ctx, req, resp, hx_openai_parse_chat, &chat_wire);
}

void hx_openai_completions(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    hx_exchange_serve(ctx, req, resp, hx_openai_parse_completions, &text_wire);
}

/* The served model: OpenAI's fields, the context as vLLM (max_model_len) and LM Studio
 * (context_length) name it, what requests may ask of it, and llama-server's "meta". */
static json_t *model_object(const hx_server *s)
{
    const hx_hparams *hp = &s->mf->hp;
    const char *format = s->mf->format == HX_FMT_GGUF  ? "gguf"
                         : s->mf->format == HX_FMT_MLX ? "mlx"
                                                       : "safetensors";
    return json_pack(
        "{s:s, s:s, s:I, s:s, s:i, s:i, s:{s:s}, s:{s:b, s:b, s:b, s:b}, "
        "s:{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:I}}",
        "id", s->model_id, "object", "model", "created", (json_int_t)s->created, "owned_by",
        "hearth", "context_length", (int)s->n_ctx, "max_model_len", (int)s->n_ctx, "status",
        "value", "loaded", "capabilities", "chat", s->tpl != NULL, "tools", s->tpl != NULL,
        "reasoning", s->thinks, "structured_output", true, "meta", "architecture", hp->arch,
        "format", format, "quant",
        hx_dtypes[hx_model_files_main_dtype(s->mf)].name, "n_ctx_train", (int)hp->n_ctx_train,
        "n_vocab", (int)hp->n_vocab, "n_embd", (int)hp->d_model, "n_params",
        (json_int_t)hx_model_files_n_params(s->mf), "size",
        (json_int_t)hx_model_files_n_bytes(s->mf));
}

/* Adds the fields Anthropic's model list has (type, display_name, created_at) to o. */
static json_t *anthropic_fields(json_t *o, const char *id, int64_t created)
{
    char when[32];
    const time_t t = (time_t)created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(o, "type", json_string("model"));
    json_object_set_new(o, "display_name", json_string(id));
    json_object_set_new(o, "created_at", json_string(when));
    return o;
}

/* The served model first, then the other models on this machine (hearth serve runs one; they
 * are listed, unloaded, so a client sees what `hearth serve NAME` could start). One list for
 * both SDKs: OpenAI's fields and Anthropic's (type, display_name, created_at, has_more). */
void hx_openai_models(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)req;
    const hx_server *s = ctx;
    json_t *data = json_array();
    json_array_append_new(data, anthropic_fields(model_object(s), s->model_id, s->created));
    hx_local_models local = {0};
    hx_err err = {0};
    if (hx_discover_list(&local, &err) == HX_OK) {
        for (int i = 0; i < local.n; i++) {
            if (strcmp(local.items[i].name, s->model_id) == 0) continue;
            const char *id = local.items[i].name;
            json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:{s:s}, s:s}", "id", id, "object",
                                  "model", "created", (json_int_t)0, "owned_by", "hearth",
                                  "status", "value", "unloaded", "where", local.items[i].where);
            if (o) json_array_append_new(data, anthropic_fields(o, id, 0));
        }
        hx_discover_free(&local);
    }
    const size_t n = json_array_size(data);
    json_t *first = json_object_get(json_array_get(data, 0), "id");
    json_t *last = json_object_get(json_array_get(data, n - 1), "id");
    hx_json_reply(HX_API_OPENAI, 200,
                  json_pack("{s:s, s:o, s:b, s:O, s:O}", "object", "list", "data", data,
                            "has_more", false, "first_id", first, "last_id", last),
                  resp);
}

/* Percent-decodes src into dst (cap bytes); false when it does not fit. */
static bool url_decode(const char *src, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; src[i]; i++) {
        char ch = src[i];
        unsigned v;
        if (ch == '%' && src[i + 1] && src[i + 2] && sscanf(src + i + 1, "%2x", &v) == 1) {
            ch = (char)v;
            i += 2;
        }
        if (o + 1 >= cap) return false;
        dst[o++] = ch;
    }
    dst[o] = '\0';
    return true;
}

void hx_openai_model(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    const hx_server *s = ctx;
    const char *path = hx_http_req_path(req), *prefix = "/v1/models/";
    const char *id = strncmp(path, prefix, strlen(prefix)) == 0 ? path + strlen(prefix) : "";
    char decoded[512];
    if (strcmp(id, s->model_id) == 0 ||
        (url_decode(id, decoded, sizeof decoded) && strcmp(decoded, s->model_id) == 0)) {
        hx_json_reply(HX_API_OPENAI, 200, model_object(s), resp);
        return;
    }
    char msg[400];
    snprintf(msg, sizeof msg, "The model '%.200s' does not exist; this server serves '%.150s'",
             id, s->model_id);
    hx_serve_error(HX_API_OPENAI, HX_E_NOTFOUND, msg, "model", resp);
}
