/* anthropic.c - the Anthropic Messages API: /v1/messages and /v1/messages/count_tokens.
 *
 * Parses a Messages request (system, alternating user/assistant turns of text blocks, a final
 * assistant turn as the start of the reply, stop_sequences, sampling) into a prepared completion
 * and formats the reply as a "message" object or as the SSE grammar the SDKs parse:
 *   message_start, content_block_start, ping, content_block_delta*, content_block_stop,
 *   message_delta (stop_reason, stop_sequence, cumulative usage), message_stop
 * each as `event: NAME\ndata: <json>\n\n`. Usage follows Anthropic's meaning: input_tokens are
 * the prompt tokens not read from the cache, cache_read_input_tokens the ones that were.
 * Images, documents, tools and extended thinking are refused with a 400 until they are built. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "serve/adapter.h"

/* ---- request ---- */

/* Appends the text of v (a string, or an array of text blocks) to b; name is its JSON path. */
static hx_status blocks_text(hx_parse *p, json_t *v, const char *name, const char *param,
                             hx_http_buf *b)
{
    char got[48], bname[96];
    if (json_is_string(v))
        return hx_http_buf_append(b, json_string_value(v), json_string_length(v))
                   ? HX_OK
                   : hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    if (!json_is_array(v)) {
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, param,
                             "%s: expected a string or an array of content blocks, got %s", name,
                             v ? got : "nothing");
    }
    static const char *const later[] = {"image", "document", "tool_use", "tool_result",
                                        "thinking", "redacted_thinking", "search_result",
                                        "server_tool_use", "web_search_tool_result"};
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *blk = json_array_get(v, i), *text = json_object_get(blk, "text");
        const char *type = json_string_value(json_object_get(blk, "type"));
        snprintf(bname, sizeof bname, "%s[%zu]", name, i);
        if (!json_is_object(blk) || !type) {
            hx_parse_describe(blk, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, param,
                                 "%s: expected a content block object with a \"type\", got %s",
                                 bname, got);
        }
        if (strcmp(type, "text") != 0) {
            bool known = false;
            for (size_t k = 0; k < HX_COUNTOF(later); k++) known |= strcmp(type, later[k]) == 0;
            return hx_parse_fail(p, known ? HX_E_UNSUPPORTED : HX_E_INVALID, param,
                                 known ? "%s: content blocks of type \"%s\" are not supported "
                                         "yet (text only)"
                                       : "%s: unknown content block type \"%.40s\" (expected "
                                         "\"text\")",
                                 bname, type);
        }
        if (!json_is_string(text)) {
            hx_parse_describe(text, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, param, "%s.text: expected a string, got %s",
                                 bname, text ? got : "nothing");
        }
        if ((b->len > 0 && i > 0 && !hx_http_buf_append(b, "\n", 1)) ||
            !hx_http_buf_append(b, json_string_value(text), json_string_length(text)))
            return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    }
    return HX_OK;
}

/* Appends {"role": role, "content": b's text} to msgs and empties b. */
static hx_status push_message(hx_parse *p, json_t *msgs, const char *role, hx_http_buf *b)
{
    json_t *m = json_pack("{s:s, s:s%}", "role", role, "content", b->data ? b->data : "",
                          b->len);
    b->len = 0;
    if (!m || json_array_append_new(msgs, m) != 0)
        return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    return HX_OK;
}

/* The conversation for the template: the system prompt first, then the turns, consecutive turns
 * of one role joined (as the API does). A final assistant turn is not rendered: its text is the
 * start of the reply (*prefill, a new hx_alloc'd string, or NULL). */
static hx_status conversation(hx_parse *p, json_t **out, char **prefill, size_t *prefill_len)
{
    char got[48], name[48];
    json_t *msgs = json_object_get(p->root, "messages");
    if (!msgs || json_is_null(msgs))
        return hx_parse_fail(p, HX_E_INVALID, "messages", "messages: field required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        hx_parse_describe(msgs, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "messages",
                             "messages: expected a non-empty array of messages, got %s", got);
    }
    json_t *conv = json_array();
    hx_http_buf b = {0};
    hx_status st = conv ? HX_OK : hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    json_t *system = json_object_get(p->root, "system");
    if (st == HX_OK && system && !json_is_null(system)) {
        st = blocks_text(p, system, "system", "system", &b);
        if (st == HX_OK && b.len) st = push_message(p, conv, "system", &b);
    }
    const char *role = NULL; /* of the turn being gathered in b */
    const size_t n = json_array_size(msgs);
    for (size_t i = 0; st == HX_OK && i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        snprintf(name, sizeof name, "messages.%zu", i);
        if (!json_is_object(m)) {
            hx_parse_describe(m, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, "messages", "%s: expected an object, got %s",
                               name, got);
            break;
        }
        json_t *rv = json_object_get(m, "role");
        const char *r = json_string_value(rv);
        if (!r || (strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0)) {
            hx_parse_describe(rv, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, "messages",
                               "%s.role: expected \"user\" or \"assistant\", got %s", name,
                               rv ? got : "nothing");
            break;
        }
        r = strcmp(r, "user") == 0 ? "user" : "assistant"; /* static text */
        if (role && strcmp(role, r) != 0) {
            st = push_message(p, conv, role, &b);
            if (st != HX_OK) break;
        } else if (role && b.len && !hx_http_buf_append(&b, "\n\n", 2)) {
            st = hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
            break;
        }
        role = r;
        snprintf(name, sizeof name, "messages.%zu.content", i);
        st = blocks_text(p, json_object_get(m, "content"), name, "messages", &b);
    }
    if (st == HX_OK && role && strcmp(role, "assistant") == 0) {
        *prefill = b.data; /* the reply continues from here */
        *prefill_len = b.len;
        b.data = NULL;
    } else if (st == HX_OK && role) {
        st = push_message(p, conv, role, &b);
    }
    hx_free(b.data);
    if (st != HX_OK) {
        json_decref(conv);
        hx_free(*prefill);
        *prefill = NULL;
        return st;
    }
    *out = conv;
    return HX_OK;
}

/* Fields other than the conversation; refuses what is not built yet. */
static hx_status parse_fields(hx_parse *p, hx_completion *c, bool need_max_tokens)
{
    json_t *r = p->root;
    hx_sampling *sp = &c->gp.sampling;
    hx_status st;
    int64_t i = 0;
    double d = 0;
    bool set = false;
    if (need_max_tokens) {
        json_t *mt = json_object_get(r, "max_tokens");
        if (!mt || json_is_null(mt))
            return hx_parse_fail(p, HX_E_INVALID, "max_tokens", "max_tokens: field required");
        if ((st = hx_parse_int(p, r, "max_tokens", 1, INT32_MAX, "an integer >= 1", &i, NULL)))
            return st;
        c->gp.max_tokens = (int32_t)i;
    }
    if ((st = hx_parse_number(p, r, "temperature", 0, 1, false, "a number between 0 and 1", &d,
                              &set)))
        return st;
    if (set) sp->temperature = (float)d;
    set = false;
    if ((st = hx_parse_number(p, r, "top_p", 0, 1, true, "a number greater than 0 and at most 1",
                              &d, &set)))
        return st;
    if (set) sp->top_p = (float)d;
    set = false;
    if ((st = hx_parse_int(p, r, "top_k", 0, INT32_MAX, "an integer >= 0", &i, &set))) return st;
    if (set) sp->top_k = (int32_t)i;
    if ((st = hx_parse_stop(p, json_object_get(r, "stop_sequences"), "stop_sequences", false, c)))
        return st;
    if ((st = hx_parse_bool(p, r, "stream", &p->opts->stream))) return st;
    json_t *tools = json_object_get(r, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0)
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "tools", "tools: not supported yet");
    json_t *thinking = json_object_get(r, "thinking");
    const char *tt = json_string_value(json_object_get(thinking, "type"));
    if (tt && strcmp(tt, "disabled") != 0)
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "thinking",
                             "thinking: extended thinking is not supported yet");
    return HX_OK;
}

/* Both endpoints: fields, conversation, prompt. */
static hx_status parse_request(const hx_server *s, const char *body, size_t len, bool messages,
                               hx_completion **out, hx_reply_opts *opts, hx_err *err)
{
    hx_parse p;
    hx_completion *c = NULL;
    json_t *conv = NULL;
    char *prefill = NULL;
    size_t prefill_len = 0;
    hx_status st = hx_parse_begin(&p, s, body, len, opts, err);
    if (st == HX_OK) st = hx_parse_completion(&p, &c);
    if (st == HX_OK) st = parse_fields(&p, c, messages);
    if (st == HX_OK) st = conversation(&p, &conv, &prefill, &prefill_len);
    if (st == HX_OK)
        st = hx_parse_chat_prompt(&p, conv, prefill, prefill_len,
                                  "use a model with one, or OpenAI's /v1/completions with a raw "
                                  "prompt", messages, c);
    json_decref(conv);
    hx_free(prefill);
    hx_parse_end(&p);
    if (st != HX_OK) {
        hx_completion_free(c);
        return st;
    }
    *out = c;
    return HX_OK;
}

hx_status hx_anthropic_parse_messages(const hx_server *s, const char *body, size_t len,
                                      hx_completion **out, hx_reply_opts *opts, hx_err *err)
{
    return parse_request(s, body, len, true, out, opts, err);
}

hx_status hx_anthropic_parse_count_tokens(const hx_server *s, const char *body, size_t len,
                                          int32_t *n_tokens, hx_reply_opts *opts, hx_err *err)
{
    hx_completion *c = NULL;
    const hx_status st = parse_request(s, body, len, false, &c, opts, err);
    if (st != HX_OK) return st;
    *n_tokens = c->n_prompt;
    hx_completion_free(c);
    return HX_OK;
}

/* ---- formatting ---- */

/* stop_reason and stop_sequence of a finished reply. */
static const char *stop_reason(const hx_exchange *x, const hx_gen_stats *st, json_t **sequence)
{
    *sequence = json_null();
    if (st->finish == HX_FINISH_LENGTH) return "max_tokens";
    if (st->finish == HX_FINISH_STOP && st->stop_index >= 0 && st->stop_index < x->n_stop) {
        json_decref(*sequence);
        *sequence = hx_json_text(x->stop[st->stop_index], strlen(x->stop[st->stop_index]));
        return "stop_sequence";
    }
    return "end_turn"; /* also a cancelled reply: it ends cleanly */
}

static json_t *usage(const hx_gen_stats *st)
{
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens",
                     (json_int_t)(st->n_prompt - st->n_cached), "cache_creation_input_tokens",
                     (json_int_t)0, "cache_read_input_tokens", (json_int_t)st->n_cached,
                     "output_tokens", (json_int_t)st->n_gen);
}

static bool msg_open(hx_exchange *x, hx_http_buf *out)
{
    json_t *start = json_pack(
        "{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:I, s:I, s:I}}}", "type",
        "message_start", "message", "id", x->id, "type", "message", "role", "assistant", "model",
        x->s->model_id, "content", "stop_reason", "stop_sequence", "usage", "input_tokens",
        (json_int_t)x->n_prompt, "cache_creation_input_tokens", (json_int_t)0,
        "cache_read_input_tokens", (json_int_t)0, "output_tokens", (json_int_t)0);
    return hx_sse_json(out, "message_start", start) &&
           hx_sse_json(out, "content_block_start",
                       json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_start",
                                 "index", 0, "content_block", "type", "text", "text", "")) &&
           hx_sse_json(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static bool msg_text(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                     hx_http_buf *out)
{
    (void)x, (void)lp;
    if (len == 0) return true;
    return hx_sse_json(out, "content_block_delta",
                       json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta",
                                 "index", 0, "delta", "type", "text_delta", "text",
                                 hx_json_text(text, len)));
}

static bool msg_finish(hx_exchange *x, const hx_event *done, hx_http_buf *out)
{
    json_t *seq;
    const char *reason = stop_reason(x, &done->stats, &seq);
    return hx_sse_json(out, "content_block_stop",
                       json_pack("{s:s, s:i}", "type", "content_block_stop", "index", 0)) &&
           hx_sse_json(out, "message_delta",
                       json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta",
                                 "stop_reason", reason, "stop_sequence", seq, "usage",
                                 usage(&done->stats))) &&
           hx_sse_json(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static json_t *msg_body(hx_exchange *x, const hx_event *done)
{
    json_t *seq;
    const char *reason = stop_reason(x, &done->stats, &seq);
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o}], s:s, s:o, s:o}", "id", x->id, "type",
                     "message", "role", "assistant", "model", x->s->model_id, "content", "type",
                     "text", "text", hx_json_text(x->text ? x->text : "", x->text_len),
                     "stop_reason", reason, "stop_sequence", seq, "usage", usage(&done->stats));
}

static const hx_wire messages_wire = {HX_API_ANTHROPIC, "msg_", msg_open, msg_text, msg_finish,
                                      msg_body};

/* ---- handlers ---- */

void hx_anthropic_messages(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    const hx_server *s = ctx;
    size_t len = 0;
    const char *body = hx_http_req_body(req, &len);
    hx_completion *c = NULL;
    hx_reply_opts opts;
    hx_err err = {0};
    const hx_status st = hx_anthropic_parse_messages(s, body, len, &c, &opts, &err);
    if (st != HX_OK) {
        hx_serve_error(HX_API_ANTHROPIC, st, err.msg, opts.param, resp);
        return;
    }
    hx_exchange_run(s, &messages_wire, req, resp, c, &opts);
}

void hx_anthropic_count_tokens(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    const hx_server *s = ctx;
    size_t len = 0;
    const char *body = hx_http_req_body(req, &len);
    hx_reply_opts opts;
    hx_err err = {0};
    int32_t n = 0;
    const hx_status st = hx_anthropic_parse_count_tokens(s, body, len, &n, &opts, &err);
    if (st != HX_OK) {
        hx_serve_error(HX_API_ANTHROPIC, st, err.msg, opts.param, resp);
        return;
    }
    hx_json_reply(HX_API_ANTHROPIC, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n), resp);
}
