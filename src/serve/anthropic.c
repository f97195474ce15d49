/* anthropic.c - the Anthropic Messages API: /v1/messages and /v1/messages/count_tokens.
 *
 * Parses a Messages request (system, user/assistant turns of text, tool_use, tool_result and
 * thinking blocks, a final assistant turn as the start of the reply, stop_sequences, sampling,
 * tools and tool_choice, thinking) into a prepared completion and formats the reply as a
 * "message" object (thinking, text and tool_use blocks) or as the SSE grammar the SDKs parse:
 *   message_start, ping, then per block content_block_start, content_block_delta* (text_delta,
 *   thinking_delta, input_json_delta), content_block_stop; then message_delta (stop_reason,
 *   stop_sequence, cumulative usage), message_stop
 * each as `event: NAME\ndata: <json>\n\n`. Usage follows Anthropic's meaning: input_tokens are
 * the prompt tokens not read from the cache, cache_read_input_tokens the ones that were.
 * Images and documents are refused with a 400 until they are built. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "serve/adapter.h"

/* ---- request ---- */

/* A turn being gathered: its text, and for the assistant its calls and thinking. */
typedef struct {
    const char *role; /* NULL: none yet */
    hx_http_buf text, think;
    json_t     *calls; /* OpenAI-shaped tool_calls, or NULL */
} turn;

static hx_status nomem(hx_parse *p)
{
    return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
}

/* Appends {"role": t->role, "content": its text, ...} to msgs and empties t. */
static hx_status push_turn(hx_parse *p, json_t *msgs, turn *t)
{
    json_t *m = json_pack("{s:s, s:s%}", "role", t->role, "content",
                          t->text.data ? t->text.data : "", t->text.len);
    if (m && t->think.len)
        json_object_set_new(m, "reasoning_content", json_stringn(t->think.data, t->think.len));
    if (m && t->calls) json_object_set(m, "tool_calls", t->calls);
    json_decref(t->calls);
    t->calls = NULL;
    t->text.len = t->think.len = 0;
    if (!m || json_array_append_new(msgs, m) != 0) return nomem(p);
    return HX_OK;
}

static hx_status add_text(hx_parse *p, hx_http_buf *b, const char *text, size_t len)
{
    if ((b->len > 0 && !hx_http_buf_append(b, "\n", 1)) || !hx_http_buf_append(b, text, len))
        return nomem(p);
    return HX_OK;
}

/* The text of a tool_result's content: a string, or text blocks joined by newlines. */
static hx_status result_text(hx_parse *p, json_t *v, const char *name, hx_http_buf *b)
{
    char got[48];
    if (!v || json_is_null(v)) return HX_OK;
    if (json_is_string(v)) return add_text(p, b, json_string_value(v), json_string_length(v));
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
        json_t *blk = json_array_get(v, i), *text = json_object_get(blk, "text");
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text))
            return hx_parse_fail(p, type && strcmp(type, "image") == 0 ? HX_E_UNSUPPORTED
                                                                       : HX_E_INVALID,
                                 "messages", "%s[%zu]: expected a text block (images are not "
                                 "supported yet)", name, i);
        hx_status st = add_text(p, b, json_string_value(text), json_string_length(text));
        if (st != HX_OK) return st;
    }
    if (json_is_array(v)) return HX_OK;
    hx_parse_describe(v, got, sizeof got);
    return hx_parse_fail(p, HX_E_INVALID, "messages",
                         "%s: expected a string or an array of text blocks, got %s", name, got);
}

/* One message's content (a string, or an array of blocks) into t; tool_result blocks become role
 * "tool" messages in msgs right away (whatever text t held first goes before them). */
static hx_status blocks(hx_parse *p, json_t *v, const char *name, const char *param, turn *t,
                        json_t *msgs)
{
    char got[48], bname[96];
    if (json_is_string(v)) return add_text(p, &t->text, json_string_value(v), json_string_length(v));
    if (!json_is_array(v)) {
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, param,
                             "%s: expected a string or an array of content blocks, got %s", name,
                             v ? got : "nothing");
    }
    const bool assistant = t->role && strcmp(t->role, "assistant") == 0;
    static const char *const later[] = {"image", "document", "search_result", "server_tool_use",
                                        "web_search_tool_result", "redacted_thinking"};
    hx_status st = HX_OK;
    for (size_t i = 0; st == HX_OK && i < json_array_size(v); i++) {
        json_t *blk = json_array_get(v, i), *text = json_object_get(blk, "text");
        const char *type = json_string_value(json_object_get(blk, "type"));
        snprintf(bname, sizeof bname, "%s[%zu]", name, i);
        if (!json_is_object(blk) || !type) {
            hx_parse_describe(blk, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, param,
                                 "%s: expected a content block object with a \"type\", got %s",
                                 bname, got);
        }
        if (strcmp(type, "text") == 0) {
            if (!json_is_string(text)) {
                hx_parse_describe(text, got, sizeof got);
                return hx_parse_fail(p, HX_E_INVALID, param, "%s.text: expected a string, got %s",
                                     bname, text ? got : "nothing");
            }
            st = add_text(p, &t->text, json_string_value(text), json_string_length(text));
        } else if (strcmp(type, "thinking") == 0 && assistant) {
            json_t *th = json_object_get(blk, "thinking");
            if (json_is_string(th))
                st = add_text(p, &t->think, json_string_value(th), json_string_length(th));
        } else if (strcmp(type, "tool_use") == 0 && assistant) {
            const char *id = json_string_value(json_object_get(blk, "id"));
            const char *nm = json_string_value(json_object_get(blk, "name"));
            json_t *input = json_object_get(blk, "input");
            if (!id || !nm || !json_is_object(input))
                return hx_parse_fail(p, HX_E_INVALID, param, "%s: a tool_use block needs a string "
                                     "id and name and an object input", bname);
            if (!t->calls && !(t->calls = json_array())) return nomem(p);
            json_t *call = json_pack("{s:s, s:s, s:{s:s, s:O}}", "id", id, "type", "function",
                                     "function", "name", nm, "arguments", input);
            if (!call || json_array_append_new(t->calls, call) != 0) return nomem(p);
        } else if (strcmp(type, "tool_result") == 0 && !assistant) {
            const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
            if (!id)
                return hx_parse_fail(p, HX_E_INVALID, param,
                                     "%s.tool_use_id: expected a string", bname);
            if (t->text.len && (st = push_turn(p, msgs, t)) != HX_OK) return st;
            hx_http_buf r = {0};
            if (json_is_true(json_object_get(blk, "is_error")))
                st = add_text(p, &r, "Error:", 6);
            snprintf(bname + strlen(bname), sizeof bname - strlen(bname), ".content");
            if (st == HX_OK) st = result_text(p, json_object_get(blk, "content"), bname, &r);
            json_t *m = st == HX_OK ? json_pack("{s:s, s:s, s:s%}", "role", "tool", "tool_call_id",
                                                id, "content", r.data ? r.data : "", r.len)
                                    : NULL;
            hx_free(r.data);
            if (st == HX_OK && (!m || json_array_append_new(msgs, m) != 0)) st = nomem(p);
        } else {
            bool known = strcmp(type, "tool_use") == 0 || strcmp(type, "tool_result") == 0 ||
                         strcmp(type, "thinking") == 0;
            for (size_t k = 0; k < HX_COUNTOF(later); k++) known |= strcmp(type, later[k]) == 0;
            return hx_parse_fail(p, known ? HX_E_UNSUPPORTED : HX_E_INVALID, param,
                                 known ? "%s: content blocks of type \"%s\" are not supported "
                                         "here"
                                       : "%s: unknown content block type \"%.40s\"",
                                 bname, type);
        }
    }
    return st;
}

/* The conversation for the template, in OpenAI's chat shape: the system prompt first, then the
 * turns (consecutive turns of one role joined, as the API does; tool_use blocks as tool_calls,
 * tool_result blocks as role "tool" messages). A final assistant turn of text only is not
 * rendered: its text is the start of the reply (*prefill, a new hx_alloc'd string, or NULL). */
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
    turn t = {0};
    hx_status st = conv ? HX_OK : nomem(p);
    json_t *system = json_object_get(p->root, "system");
    if (st == HX_OK && system && !json_is_null(system)) {
        t.role = "system";
        st = blocks(p, system, "system", "system", &t, conv);
        if (st == HX_OK && t.text.len) st = push_turn(p, conv, &t);
        t.role = NULL;
    }
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
        if (t.role && strcmp(t.role, r) != 0 && (t.text.len || t.calls || t.think.len)) {
            if ((st = push_turn(p, conv, &t)) != HX_OK) break;
        } else if (t.role && strcmp(t.role, r) == 0 && t.text.len &&
                   !hx_http_buf_append(&t.text, "\n", 1)) {
            st = nomem(p);
            break;
        }
        t.role = r;
        snprintf(name, sizeof name, "messages.%zu.content", i);
        st = blocks(p, json_object_get(m, "content"), name, "messages", &t, conv);
    }
    if (st == HX_OK && t.role && strcmp(t.role, "assistant") == 0 && !t.calls && !t.think.len) {
        *prefill = t.text.data; /* the reply continues from here */
        *prefill_len = t.text.len;
        t.text.data = NULL;
    } else if (st == HX_OK && t.role && (t.text.len || t.calls || t.think.len)) {
        st = push_turn(p, conv, &t);
    }
    hx_free(t.text.data);
    hx_free(t.think.data);
    json_decref(t.calls);
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
    return HX_OK;
}

/* tools, tool_choice and thinking into cr (cr->tools is a new reference the caller releases). */
static hx_status parse_extras(hx_parse *p, hx_chat_req *cr)
{
    json_t *r = p->root;
    hx_err terr = {0};
    hx_status st;
    json_t *tools = json_object_get(r, "tools");
    if (tools && !json_is_null(tools)) {
        st = hx_tools_normalize(tools, HX_TOOLS_ANTHROPIC, &cr->tools, p->opts->param,
                                sizeof p->opts->param, &terr);
        if (st != HX_OK) return hx_parse_fail(p, st, p->opts->param, "%s", terr.msg);
    }
    json_t *choice = json_object_get(r, "tool_choice");
    st = hx_tools_choice(json_is_null(choice) ? NULL : choice, HX_TOOLS_ANTHROPIC, cr->tools,
                         &cr->choice, p->opts->param, sizeof p->opts->param, &terr);
    if (st != HX_OK) return hx_parse_fail(p, st, p->opts->param, "%s", terr.msg);
    json_t *thinking = json_object_get(r, "thinking");
    if (thinking && !json_is_null(thinking)) {
        const char *tt = json_string_value(json_object_get(thinking, "type"));
        if (!json_is_object(thinking) || !tt ||
            (strcmp(tt, "enabled") != 0 && strcmp(tt, "disabled") != 0 &&
             strcmp(tt, "adaptive") != 0))
            return hx_parse_fail(p, HX_E_INVALID, "thinking",
                                 "thinking.type: expected \"enabled\", \"adaptive\" or "
                                 "\"disabled\"");
        cr->thinking = strcmp(tt, "disabled") != 0;
    }
    return HX_OK;
}

/* Both endpoints: fields, conversation, prompt. */
static hx_status parse_request(const hx_server *s, const char *body, size_t len, bool messages,
                               hx_completion **out, hx_reply_opts *opts, hx_err *err)
{
    hx_parse p;
    hx_completion *c = NULL;
    json_t *conv = NULL;
    hx_chat_req cr = hx_chat_req_default();
    char *prefill = NULL;
    size_t prefill_len = 0;
    hx_status st = hx_parse_begin(&p, s, body, len, opts, err);
    if (st == HX_OK) st = hx_parse_completion(&p, &c);
    if (st == HX_OK) st = parse_fields(&p, c, messages);
    if (st == HX_OK) st = parse_extras(&p, &cr);
    if (st == HX_OK) st = conversation(&p, &conv, &prefill, &prefill_len);
    if (st == HX_OK)
        st = hx_parse_chat(&p, conv, &cr, prefill, prefill_len,
                           "use a model with one, or OpenAI's /v1/completions with a raw prompt",
                           messages, c);
    hx_chat_req_clear(&cr);
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
static const char *stop_reason(const hx_exchange *x, const hx_event *done, json_t **sequence)
{
    const hx_gen_stats *st = &done->stats;
    *sequence = json_null();
    if (hx_exchange_called_tools(x, done)) return "tool_use";
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

/* Content blocks open as the reply needs them, one at a time: x->block counts those opened,
 * x->block_kind says which is open now. */
enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING, BLOCK_TOOL };

/* The API's id of a call: "toolu_" and the parser's hex digits. */
static void tool_id(const char *call_id, char *dst, size_t cap)
{
    const char *hex = strncmp(call_id, "call_", 5) == 0 ? call_id + 5 : call_id;
    snprintf(dst, cap, "toolu_%s", hex);
}

static bool close_block(hx_exchange *x, hx_http_buf *out)
{
    if (x->block_kind == BLOCK_NONE) return true;
    x->block_kind = BLOCK_NONE;
    return hx_sse_json(out, "content_block_stop", json_pack("{s:s, s:i}", "type",
                                                            "content_block_stop", "index",
                                                            x->block - 1));
}

/* Opens a block of kind described by content (stolen), closing the open one first. */
static bool open_block(hx_exchange *x, int kind, json_t *content, hx_http_buf *out)
{
    if (!close_block(x, out)) {
        json_decref(content);
        return false;
    }
    x->block_kind = kind;
    return hx_sse_json(out, "content_block_start",
                       json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index",
                                 x->block++, "content_block", content));
}

static bool delta(hx_exchange *x, json_t *d, hx_http_buf *out)
{
    return hx_sse_json(out, "content_block_delta",
                       json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index",
                                 x->block - 1, "delta", d));
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
           hx_sse_json(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static bool msg_text(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                     hx_http_buf *out)
{
    (void)lp;
    if (len == 0) return true;
    if (x->block_kind != BLOCK_TEXT &&
        !open_block(x, BLOCK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""), out))
        return false;
    return delta(x, json_pack("{s:s, s:o}", "type", "text_delta", "text", hx_json_text(text, len)),
                 out);
}

static bool msg_reasoning(hx_exchange *x, const char *text, size_t len, hx_http_buf *out)
{
    if (x->block_kind != BLOCK_THINKING &&
        !open_block(x, BLOCK_THINKING,
                    json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature",
                              ""),
                    out))
        return false;
    return delta(x, json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking",
                              hx_json_text(text, len)),
                 out);
}

static bool msg_tool(hx_exchange *x, const hx_toolcall_event *ev, hx_http_buf *out)
{
    char id[48];
    switch (ev->kind) {
    case HX_TOOLCALL_EV_CALL_START:
        tool_id(ev->id, id, sizeof id);
        return open_block(x, BLOCK_TOOL,
                          json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id, "name",
                                    ev->name, "input"),
                          out);
    case HX_TOOLCALL_EV_CALL_ARGS:
        return delta(x, json_pack("{s:s, s:o}", "type", "input_json_delta", "partial_json",
                                  hx_json_text(ev->text, ev->len)),
                     out);
    case HX_TOOLCALL_EV_CALL_END:
        return close_block(x, out);
    default:
        return true; /* content arrives through msg_text */
    }
}

static bool msg_finish(hx_exchange *x, const hx_event *done, hx_http_buf *out)
{
    json_t *seq;
    const char *reason = stop_reason(x, done, &seq);
    /* A reply with no content at all still has one (empty) text block, as the API's have. */
    const bool ok = (x->block > 0 || open_block(x, BLOCK_TEXT,
                                                json_pack("{s:s, s:s}", "type", "text", "text",
                                                          ""),
                                                out)) &&
                    close_block(x, out);
    if (!ok) {
        json_decref(seq);
        return false;
    }
    return hx_sse_json(out, "message_delta",
                       json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta",
                                 "stop_reason", reason, "stop_sequence", seq, "usage",
                                 usage(&done->stats))) &&
           hx_sse_json(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

/* The content blocks of the whole reply: thinking, text, then the calls. */
static json_t *msg_content(hx_exchange *x)
{
    const int32_t n_calls = x->calls ? hx_toolcall_count(x->calls) : 0;
    json_t *content = json_array();
    if (content && x->thinking.len)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking",
                                                 "thinking", hx_json_text(x->thinking.data,
                                                                          x->thinking.len),
                                                 "signature", ""));
    if (content && (x->text.len || !n_calls))
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 hx_json_text(x->text.data ? x->text.data : "",
                                                              x->text.len)));
    for (int32_t i = 0; content && i < n_calls; i++) {
        const hx_toolcall *tc = hx_toolcall_get(x->calls, i);
        char id[48];
        tool_id(tc->id, id, sizeof id);
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:O}", "type", "tool_use", "id",
                                                 id, "name", tc->name, "input", tc->input));
    }
    return content;
}

static json_t *msg_body(hx_exchange *x, const hx_event *done)
{
    json_t *seq;
    const char *reason = stop_reason(x, done, &seq);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", x->id, "type", "message",
                     "role", "assistant", "model", x->s->model_id, "content", msg_content(x),
                     "stop_reason", reason, "stop_sequence", seq, "usage", usage(&done->stats));
}

static const hx_wire messages_wire = {HX_API_ANTHROPIC, "msg_", msg_open, msg_text,
                                      msg_reasoning, msg_tool, msg_finish, msg_body, NULL};

/* ---- handlers ---- */

void hx_anthropic_messages(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    hx_exchange_serve(ctx, req, resp, hx_anthropic_parse_messages, &messages_wire);
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
