/* responses.c - OpenAI's Responses API: POST /v1/responses, GET and DELETE /v1/responses/<id>.
 *
 * A request's input (a string, or items: messages, function calls and their outputs, reasoning)
 * becomes a conversation in the chat shape the other adapters use, after the instructions (a
 * system message) and, with previous_response_id, the stored conversation it continues; then
 * it goes through hx_parse_chat and the shared exchange like any chat request. The reply is a
 * "response" object whose output is a list of items (reasoning, message, function_call), or, when
 * streamed, the event sequence the SDKs parse, each `event: TYPE\ndata: <json>\n\n` with a
 * sequence_number counting from 0:
 *   response.created, response.in_progress, then per output item
 *   response.output_item.added, its content (message: content_part.added, output_text.delta*,
 *   output_text.done, content_part.done; reasoning: the same with reasoning_text; function_call:
 *   function_call_arguments.delta*, .done), response.output_item.done; and last
 *   response.completed (or response.incomplete when max_output_tokens cut the reply) carrying
 *   the whole response.
 * Items open as the reply needs them, one at a time (x->block counts the items closed, which is
 * the open item's output_index; x->block_kind is the open item's kind).
 *
 * Unless store is false, the finished response and its conversation (the messages it was
 * generated from, instructions excluded as the API specifies, plus the reply as an assistant
 * message) go into the response store, which lives as long as the server. Images, files and the
 * built-in tools are refused with a 400 naming them. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "serve/adapter.h"
#include "serve/response_store.h"

/* ---- the reply's state ---- */

/* What the wire functions keep for one response (opts.wire_state, then x->wire_state). */
typedef struct {
    json_t     *echo;  /* the request's settings the response object repeats */
    json_t     *conv;  /* the conversation the reply continues, without the instructions */
    bool        store; /* keep the finished response */
    int64_t     seq;   /* stream: the next event's sequence_number */
    json_t     *items; /* stream: the output items finished so far */
    json_t     *item;  /* stream: the open item, or NULL */
    size_t      start; /* stream: where the open item's text begins in x->text or x->thinking */
    hx_http_buf args;  /* stream: the open call's arguments so far */
} resp_state;

void hx_responses_state_free(void *p)
{
    resp_state *rs = p;
    if (!rs) return;
    json_decref(rs->echo);
    json_decref(rs->conv);
    json_decref(rs->items);
    json_decref(rs->item);
    hx_free(rs->args.data);
    hx_free(rs);
}

/* ---- request fields ---- */

static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static hx_status nomem(hx_parse *p)
{
    return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
}

/* A sampling setting as the response shows it: the float rounded to 6 digits, so 0.7 reads 0.7
 * rather than 0.699999988. */
static json_t *json_setting(float v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", (double)v);
    return json_real(strtod(buf, NULL));
}

/* Limits, sampling, stream, store and metadata; refuses what is not built. */
static hx_status parse_fields(hx_parse *p, hx_completion *c, resp_state *rs)
{
    json_t *r = p->root;
    hx_sampling *sp = &c->gp.sampling;
    hx_status st;
    int64_t i = 0;
    double d = 0;
    bool set = false;
    char got[48];
    if ((st = hx_parse_int(p, r, "max_output_tokens", 1, INT32_MAX, "an integer >= 1", &i, &set)))
        return st;
    if (set) c->gp.max_tokens = (int32_t)i;
    json_object_set_new(rs->echo, "max_output_tokens", set ? json_integer(i) : json_null());
    set = false;
    if ((st = hx_parse_number(p, r, "temperature", 0, 2, false, "a number between 0 and 2", &d,
                              &set)))
        return st;
    if (set) sp->temperature = (float)d;
    set = false;
    if ((st = hx_parse_number(p, r, "top_p", 0, 1, true, "a number greater than 0 and at most 1",
                              &d, &set)))
        return st;
    if (set) sp->top_p = (float)d;
    json_object_set_new(rs->echo, "temperature", json_setting(sp->temperature));
    json_object_set_new(rs->echo, "top_p", json_setting(sp->top_p));
    if ((st = hx_parse_bool(p, r, "stream", &p->opts->stream))) return st;
    if ((st = hx_parse_bool(p, r, "store", &rs->store))) return st;
    json_object_set_new(rs->echo, "store", json_boolean(rs->store));
    bool background = false;
    if ((st = hx_parse_bool(p, r, "background", &background))) return st;
    if (background)
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "background",
                             "background responses are not supported: leave background false");
    if (field(r, "conversation"))
        return hx_parse_fail(p, HX_E_UNSUPPORTED, "conversation",
                             "conversation objects are not supported: continue a conversation "
                             "with previous_response_id");
    json_t *meta = field(r, "metadata");
    if (meta && !json_is_object(meta)) {
        hx_parse_describe(meta, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "metadata",
                             "metadata must be an object of strings, got %s", got);
    }
    json_object_set_new(rs->echo, "metadata", meta ? json_deep_copy(meta) : json_object());
    return HX_OK;
}

/* text.format: plain text, any JSON object, or a JSON Schema (borrowed from the request). */
static hx_status parse_text(hx_parse *p, hx_chat_req *cr, resp_state *rs)
{
    char got[48];
    json_t *text = field(p->root, "text");
    if (text && !json_is_object(text)) {
        hx_parse_describe(text, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "text", "text must be an object, got %s", got);
    }
    json_t *fmt = field(text, "format");
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (fmt && (!json_is_object(fmt) || !type)) {
        hx_parse_describe(fmt, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "text.format",
                             "text.format must be an object with a \"type\", got %s", got);
    }
    cr->format_param = "text.format";
    if (type && strcmp(type, "json_object") == 0) {
        cr->json_object = true;
    } else if (type && strcmp(type, "json_schema") == 0) {
        json_t *name = field(fmt, "name"), *strict = field(fmt, "strict");
        cr->schema = field(fmt, "schema");
        if (!json_is_object(cr->schema)) {
            hx_parse_describe(cr->schema, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, "text.format.schema",
                                 "text.format.schema must be a JSON Schema object, got %s",
                                 cr->schema ? got : "nothing");
        }
        if (name && !json_is_string(name))
            return hx_parse_fail(p, HX_E_INVALID, "text.format.name",
                                 "text.format.name must be a string");
        if (strict && !json_is_boolean(strict))
            return hx_parse_fail(p, HX_E_INVALID, "text.format.strict",
                                 "text.format.strict must be true or false");
    } else if (type && strcmp(type, "text") != 0) {
        return hx_parse_fail(p, HX_E_INVALID, "text.format.type",
                             "text.format.type must be \"text\", \"json_object\" or "
                             "\"json_schema\", got \"%.40s\"", type);
    }
    json_t *echo = text ? json_deep_copy(text) : json_object();
    if (echo && !fmt) json_object_set_new(echo, "format", json_pack("{s:s}", "type", "text"));
    if (!echo || json_object_set_new(rs->echo, "text", echo) != 0) return nomem(p);
    return HX_OK;
}

/* tools, tool_choice, parallel_tool_calls, text and reasoning into cr (cr->tools is a new
 * reference the caller releases). */
static hx_status parse_extras(hx_parse *p, hx_chat_req *cr, resp_state *rs)
{
    json_t *r = p->root;
    hx_err terr = {0};
    hx_status st;
    char got[48];
    char param[sizeof p->opts->param] = "";
    json_t *tools = field(r, "tools");
    if (tools) {
        st = hx_tools_normalize(tools, HX_TOOLS_RESPONSES, &cr->tools, param, sizeof param,
                                &terr);
        if (st != HX_OK) return hx_parse_fail(p, st, param, "%s", terr.msg);
    }
    json_t *choice = field(r, "tool_choice");
    st = hx_tools_choice(choice, HX_TOOLS_RESPONSES, cr->tools, &cr->choice, param, sizeof param,
                         &terr);
    if (st != HX_OK) return hx_parse_fail(p, st, param, "%s", terr.msg);
    if ((st = hx_parse_bool(p, r, "parallel_tool_calls", &cr->parallel))) return st;
    json_object_set_new(rs->echo, "tools", tools ? json_deep_copy(tools) : json_array());
    json_object_set_new(rs->echo, "tool_choice",
                        choice ? json_deep_copy(choice) : json_string("auto"));
    json_t *par = json_object_get(r, "parallel_tool_calls"); /* the API's default is true */
    json_object_set_new(rs->echo, "parallel_tool_calls", json_boolean(!json_is_false(par)));
    if ((st = parse_text(p, cr, rs))) return st;

    json_t *reasoning = field(r, "reasoning");
    if (reasoning && !json_is_object(reasoning)) {
        hx_parse_describe(reasoning, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "reasoning", "reasoning must be an object, got %s",
                             got);
    }
    json_t *effort = field(reasoning, "effort");
    if ((st = hx_parse_effort(p, effort, "reasoning.effort", cr))) return st;
    json_t *summary = field(reasoning, "summary");
    json_object_set_new(rs->echo, "reasoning",
                        json_pack("{s:O?, s:O?}", "effort", effort, "summary", summary));
    return HX_OK;
}

/* ---- input items ---- */

/* Parts and items of the API that are not built here: refused as unsupported, by name. */
static const char *const later_parts[] = {"input_image", "input_file", "input_audio"};
static const char *const later_items[] = {
    "file_search_call", "computer_call", "computer_call_output", "web_search_call",
    "image_generation_call", "code_interpreter_call", "local_shell_call",
    "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call",
    "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response",
    "mcp_call", "custom_tool_call", "custom_tool_call_output", "item_reference", "compaction"};

static bool listed(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0) return true;
    return false;
}

/* The conversation being extended by input items, and reasoning waiting for the assistant
 * message it belongs to. */
typedef struct {
    json_t     *msgs; /* borrowed */
    hx_http_buf think;
} items_ctx;

static hx_status add_text(hx_parse *p, hx_http_buf *b, const char *text, size_t len)
{
    if ((b->len > 0 && !hx_http_buf_append(b, "\n", 1)) || !hx_http_buf_append(b, text, len))
        return nomem(p);
    return HX_OK;
}

/* The text of v (a string, or an array of text parts joined by newlines) appended to b; name is
 * v's path ("input[2].content"). */
static hx_status content_text(hx_parse *p, json_t *v, const char *name, hx_http_buf *b)
{
    char got[48], pname[64];
    if (json_is_string(v)) return add_text(p, b, json_string_value(v), json_string_length(v));
    if (!json_is_array(v)) {
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, name,
                             "%s must be a string or an array of content parts, got %s", name,
                             v ? got : "nothing");
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *part = json_array_get(v, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        snprintf(pname, sizeof pname, "%s[%zu]", name, i);
        if (!json_is_object(part) || !type) {
            hx_parse_describe(part, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, pname,
                                 "%s must be an object with a \"type\", got %s", pname, got);
        }
        const char *key = strcmp(type, "input_text") == 0 || strcmp(type, "output_text") == 0
                              ? "text"
                          : strcmp(type, "refusal") == 0 ? "refusal"
                                                         : NULL;
        if (!key) {
            const bool later = listed(type, later_parts, HX_COUNTOF(later_parts));
            return hx_parse_fail(p, later ? HX_E_UNSUPPORTED : HX_E_INVALID, pname,
                                 later ? "%s has type \"%s\", which is not supported yet (text "
                                         "parts only)"
                                       : "%s has an unknown type \"%.40s\" (expected "
                                         "\"input_text\" or \"output_text\")",
                                 pname, type);
        }
        json_t *text = json_object_get(part, key);
        if (!json_is_string(text)) {
            hx_parse_describe(text, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, pname, "%s.%s must be a string, got %s", pname,
                                 key, text ? got : "nothing");
        }
        hx_status st = add_text(p, b, json_string_value(text), json_string_length(text));
        if (st != HX_OK) return st;
    }
    return HX_OK;
}

/* Appends m (stolen) to the conversation; an assistant message takes the reasoning waiting. */
static hx_status push(hx_parse *p, items_ctx *ic, json_t *m)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    if (m && ic->think.len && strcmp(role, "assistant") == 0) {
        json_object_set_new(m, "reasoning_content", json_stringn(ic->think.data, ic->think.len));
        ic->think.len = 0;
    }
    if (!m || json_array_append_new(ic->msgs, m) != 0) return nomem(p);
    return HX_OK;
}

/* {"role", "content"} (type "message", or no type). */
static hx_status message_item(hx_parse *p, items_ctx *ic, json_t *item, const char *name)
{
    static const char *const roles[] = {"user", "assistant", "system", "developer"};
    char got[48], cname[64];
    json_t *rv = json_object_get(item, "role");
    const char *role = json_string_value(rv);
    if (!role || !listed(role, roles, HX_COUNTOF(roles))) {
        hx_parse_describe(rv, got, sizeof got);
        snprintf(cname, sizeof cname, "%s.role", name);
        return hx_parse_fail(p, HX_E_INVALID, cname,
                             "%s must be one of user, assistant, system, developer; got %s",
                             cname, rv ? got : "nothing");
    }
    snprintf(cname, sizeof cname, "%s.content", name);
    hx_http_buf b = {0};
    hx_status st = content_text(p, json_object_get(item, "content"), cname, &b);
    if (st == HX_OK)
        st = push(p, ic, json_pack("{s:s, s:s%}", "role",
                                   strcmp(role, "developer") == 0 ? "system" : role, "content",
                                   b.data ? b.data : "", b.len));
    hx_free(b.data);
    return st;
}

/* item[key] as a non-empty string, or a failure naming name.key. */
static hx_status item_string(hx_parse *p, json_t *item, const char *name, const char *key,
                             bool empty_ok, json_t **out)
{
    char got[48], fname[64];
    json_t *v = json_object_get(item, key);
    if (json_is_string(v) && (empty_ok || json_string_length(v) > 0)) {
        *out = v;
        return HX_OK;
    }
    hx_parse_describe(v, got, sizeof got);
    snprintf(fname, sizeof fname, "%s.%s", name, key);
    return hx_parse_fail(p, HX_E_INVALID, fname, "%s must be a %sstring, got %s", fname,
                         empty_ok ? "" : "non-empty ", v ? got : "nothing");
}

/* {"call_id", "name", "arguments"}: a call joins the assistant message before it (a new one when
 * the last message is not the assistant's). */
static hx_status function_call_item(hx_parse *p, items_ctx *ic, json_t *item, const char *name)
{
    json_t *id = NULL, *fn = NULL, *args = NULL;
    hx_status st;
    if ((st = item_string(p, item, name, "call_id", false, &id)) ||
        (st = item_string(p, item, name, "name", false, &fn)) ||
        (st = item_string(p, item, name, "arguments", true, &args)))
        return st;
    json_t *last = json_array_get(ic->msgs, json_array_size(ic->msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!role || strcmp(role, "assistant") != 0) {
        if ((st = push(p, ic, json_pack("{s:s, s:s}", "role", "assistant", "content", ""))))
            return st;
        last = json_array_get(ic->msgs, json_array_size(ic->msgs) - 1);
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls && json_object_set_new(last, "tool_calls", calls = json_array()) != 0)
        return nomem(p);
    json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function",
                             "name", fn, "arguments", args);
    if (!call || json_array_append_new(calls, call) != 0) return nomem(p);
    return HX_OK;
}

/* {"call_id", "output"}: a role "tool" message. */
static hx_status function_output_item(hx_parse *p, items_ctx *ic, json_t *item, const char *name)
{
    char oname[64];
    json_t *id = NULL;
    hx_status st = item_string(p, item, name, "call_id", false, &id);
    if (st != HX_OK) return st;
    snprintf(oname, sizeof oname, "%s.output", name);
    hx_http_buf b = {0};
    st = content_text(p, json_object_get(item, "output"), oname, &b);
    if (st == HX_OK)
        st = push(p, ic, json_pack("{s:s, s:O, s:s%}", "role", "tool", "tool_call_id", id,
                                   "content", b.data ? b.data : "", b.len));
    hx_free(b.data);
    return st;
}

/* {"content": [{"text"}], "summary": [{"text"}]}: the text (content, else the summary) waits for
 * the next assistant message as its reasoning_content. */
static hx_status reasoning_item(hx_parse *p, items_ctx *ic, json_t *item)
{
    json_t *parts = json_object_get(item, "content");
    if (!json_is_array(parts) || json_array_size(parts) == 0)
        parts = json_object_get(item, "summary");
    for (size_t i = 0; json_is_array(parts) && i < json_array_size(parts); i++) {
        json_t *text = json_object_get(json_array_get(parts, i), "text");
        if (!json_is_string(text)) continue;
        hx_status st = add_text(p, &ic->think, json_string_value(text), json_string_length(text));
        if (st != HX_OK) return st;
    }
    return HX_OK;
}

/* The request's input appended to msgs as chat-shaped messages. */
static hx_status input_items(hx_parse *p, json_t *msgs)
{
    char got[48], name[32];
    json_t *input = field(p->root, "input");
    if (!input)
        return hx_parse_fail(p, HX_E_INVALID, "input",
                             "input is required: a string or an array of input items");
    if (json_is_string(input)) {
        json_t *m = json_pack("{s:s, s:O}", "role", "user", "content", input);
        if (!m || json_array_append_new(msgs, m) != 0) return nomem(p);
        return HX_OK;
    }
    if (!json_is_array(input)) {
        hx_parse_describe(input, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "input",
                             "input must be a string or an array of input items, got %s", got);
    }
    items_ctx ic = {.msgs = msgs};
    hx_status st = HX_OK;
    for (size_t i = 0; st == HX_OK && i < json_array_size(input); i++) {
        json_t *item = json_array_get(input, i);
        snprintf(name, sizeof name, "input[%zu]", i);
        const char *type = json_string_value(json_object_get(item, "type"));
        if (!json_is_object(item) || (!type && !json_object_get(item, "role"))) {
            hx_parse_describe(item, got, sizeof got);
            st = hx_parse_fail(p, HX_E_INVALID, name,
                               "%s must be an object with a \"type\" or a \"role\", got %s", name,
                               got);
        } else if (!type || strcmp(type, "message") == 0) {
            st = message_item(p, &ic, item, name);
        } else if (strcmp(type, "function_call") == 0) {
            st = function_call_item(p, &ic, item, name);
        } else if (strcmp(type, "function_call_output") == 0) {
            st = function_output_item(p, &ic, item, name);
        } else if (strcmp(type, "reasoning") == 0) {
            st = reasoning_item(p, &ic, item);
        } else {
            const bool later = listed(type, later_items, HX_COUNTOF(later_items));
            st = hx_parse_fail(p, later ? HX_E_UNSUPPORTED : HX_E_INVALID, name,
                               later ? "%s is a \"%s\" item, which is not supported (message, "
                                       "function_call, function_call_output and reasoning items "
                                       "are)"
                                     : "%s has an unknown type \"%.40s\" (expected message, "
                                       "function_call, function_call_output or reasoning)",
                               name, type);
        }
    }
    hx_free(ic.think.data);
    return st;
}

/* The messages to render: the instructions, the stored conversation previous_response_id names,
 * the input. rs->conv receives all but the instructions (what a follow-up continues); *out is a
 * new array. */
static hx_status conversation(hx_parse *p, resp_state *rs, json_t **out)
{
    char got[48];
    json_t *r = p->root;
    json_t *instr = field(r, "instructions");
    if (instr && !json_is_string(instr)) {
        hx_parse_describe(instr, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "instructions",
                             "instructions must be a string, got %s", got);
    }
    json_object_set_new(rs->echo, "instructions", instr ? json_copy(instr) : json_null());
    json_t *prev = field(r, "previous_response_id");
    if (prev && !json_is_string(prev)) {
        hx_parse_describe(prev, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, "previous_response_id",
                             "previous_response_id must be a string, got %s", got);
    }
    json_object_set_new(rs->echo, "previous_response_id", prev ? json_copy(prev) : json_null());
    if (prev) {
        hx_response_store *st = p->s->responses;
        const hx_status s = st ? hx_response_store_get(st, json_string_value(prev), hx_now_ms(),
                                                       NULL, &rs->conv)
                               : HX_E_NOTFOUND;
        if (s == HX_E_NOMEM) return nomem(p);
        if (s != HX_OK)
            return hx_parse_fail(p, HX_E_NOTFOUND, "previous_response_id",
                                 "Previous response with id '%.100s' not found (responses are "
                                 "kept for an hour after their last use, and only with store: "
                                 "true)", json_string_value(prev));
    } else if (!(rs->conv = json_array())) {
        return nomem(p);
    }
    hx_status st = input_items(p, rs->conv);
    if (st != HX_OK) return st;
    if (json_array_size(rs->conv) == 0)
        return hx_parse_fail(p, HX_E_INVALID, "input",
                             "input is empty: there is nothing to respond to");
    json_t *msgs = instr ? json_pack("[{s:s, s:O}]", "role", "system", "content", instr)
                         : json_array();
    if (!msgs || json_array_extend(msgs, rs->conv) != 0) {
        json_decref(msgs);
        return nomem(p);
    }
    *out = msgs;
    return HX_OK;
}

hx_status hx_responses_parse(const hx_server *s, const char *body, size_t len,
                             hx_completion **out, hx_reply_opts *opts, hx_err *err)
{
    hx_parse p;
    hx_completion *c = NULL;
    json_t *msgs = NULL;
    hx_chat_req cr = hx_chat_req_default();
    resp_state *rs = NULL;
    hx_status st = hx_parse_begin(&p, s, body, len, opts, err);
    if (st == HX_OK) st = hx_parse_completion(&p, &c);
    if (st == HX_OK) {
        rs = hx_calloc(1, sizeof *rs);
        if (rs) *rs = (resp_state){.echo = json_object(), .items = json_array(), .store = true};
        if (!rs || !rs->echo || !rs->items) st = nomem(&p);
    }
    if (st == HX_OK) st = parse_fields(&p, c, rs);
    if (st == HX_OK) st = parse_extras(&p, &cr, rs);
    if (st == HX_OK) st = conversation(&p, rs, &msgs);
    if (st == HX_OK)
        st = hx_parse_chat(&p, msgs, &cr, NULL, 0, "send a raw prompt to /v1/completions instead",
                           true, c);
    hx_chat_req_clear(&cr);
    json_decref(msgs);
    hx_parse_end(&p);
    if (st != HX_OK) {
        hx_responses_state_free(rs);
        hx_completion_free(c);
        return st;
    }
    json_object_set_new(rs->echo, "truncation", json_string("disabled"));
    opts->wire_state = rs;
    *out = c;
    return HX_OK;
}

/* ---- formatting ---- */

enum { ITEM_NONE, ITEM_MESSAGE, ITEM_REASONING, ITEM_CALL };

/* An output item's id: the kind's prefix, the response's hex digits and the item's index. */
static void item_id(const hx_exchange *x, const char *prefix, int32_t index, char *dst, size_t cap)
{
    snprintf(dst, cap, "%s%s%02x", prefix, x->id + strlen("resp_"), (unsigned)index & 0xFF);
}

static json_t *usage(const hx_gen_stats *st)
{
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:i}, s:I}", "input_tokens",
                     (json_int_t)st->n_prompt, "input_tokens_details", "cached_tokens",
                     (json_int_t)st->n_cached, "output_tokens", (json_int_t)st->n_gen,
                     "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                     (json_int_t)st->n_prompt + st->n_gen);
}

/* The response object: status "in_progress", "completed" or "incomplete", output (stolen), usage
 * (stolen; json_null() while in progress), and the request's settings. */
static json_t *response_object(const hx_exchange *x, const char *status, json_t *output,
                               json_t *use)
{
    const resp_state *rs = x->wire_state;
    const bool incomplete = strcmp(status, "incomplete") == 0;
    const bool completed = strcmp(status, "completed") == 0;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:n, s:o, s:s, s:o, s:o}", "id", x->id,
                          "object", "response", "created_at", (json_int_t)x->created, "status",
                          status, "completed_at",
                          completed ? json_integer((json_int_t)time(NULL)) : json_null(), "error",
                          "incomplete_details",
                          incomplete ? json_pack("{s:s}", "reason", "max_output_tokens")
                                     : json_null(),
                          "model", x->s->model_id, "output", output, "usage", use);
    if (o && json_object_update(o, rs->echo) != 0) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static const char *final_status(const hx_event *done)
{
    return done->stats.finish == HX_FINISH_LENGTH ? "incomplete" : "completed";
}

static json_t *output_text(const char *text, size_t len)
{
    return json_pack("{s:s, s:o, s:[]}", "type", "output_text", "text",
                     hx_json_text(text ? text : "", len), "annotations");
}

static json_t *message(const char *id, const char *status, json_t *content)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "status", status,
                     "role", "assistant", "content", content);
}

static json_t *reasoning(const char *id, json_t *content)
{
    return json_pack("{s:s, s:s, s:[], s:o}", "type", "reasoning", "id", id, "summary", "content",
                     content);
}

static json_t *function_call(const char *id, const char *status, const char *call_id,
                             const char *name, const char *args, size_t args_len)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "type", "function_call", "id", id,
                     "call_id", call_id, "name", name, "arguments",
                     hx_json_text(args ? args : "", args_len), "status", status);
}

/* The reply as the assistant message a follow-up's conversation holds. */
static json_t *reply_message(const hx_exchange *x)
{
    const int32_t n_calls = x->calls ? hx_toolcall_count(x->calls) : 0;
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          hx_json_text(x->text.data ? x->text.data : "", x->text.len));
    if (m && x->thinking.len)
        json_object_set_new(m, "reasoning_content", hx_json_text(x->thinking.data,
                                                                 x->thinking.len));
    json_t *calls = n_calls && m ? json_array() : NULL;
    for (int32_t i = 0; calls && i < n_calls; i++) {
        const hx_toolcall *tc = hx_toolcall_get(x->calls, i);
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", tc->id, "type",
                                               "function", "function", "name", tc->name,
                                               "arguments", tc->arguments, tc->arguments_len));
    }
    if (calls) json_object_set_new(m, "tool_calls", calls);
    return m;
}

/* Stores the finished response (borrowed) with its conversation, unless the request said
 * store: false. A response that cannot be stored (larger than the store, out of memory) is still
 * sent; only a later GET or follow-up finds nothing. */
static void keep(hx_exchange *x, json_t *resp)
{
    resp_state *rs = x->wire_state;
    hx_response_store *st = rs->store ? x->s->responses : NULL;
    if (!st || !resp || json_array_append_new(rs->conv, reply_message(x)) != 0) return;
    hx_response_store_put(st, x->id, resp, rs->conv, hx_now_ms(), NULL);
}

/* ---- streaming ---- */

/* Sends one event of type with obj's fields (obj stolen) after its type and sequence_number. */
static bool emit(hx_exchange *x, const char *type, json_t *obj, hx_http_buf *out)
{
    resp_state *rs = x->wire_state;
    json_t *ev = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)rs->seq++);
    if (ev && (!obj || json_object_update(ev, obj) != 0)) {
        json_decref(ev);
        ev = NULL;
    }
    json_decref(obj);
    return hx_sse_json(out, type, ev);
}

/* obj with obj[key] = v (both stolen); NULL when either is NULL or memory runs out, so a
 * chain of these ends in NULL (which emit turns into false) without leaking. */
static json_t *with(json_t *obj, const char *key, json_t *v)
{
    if (!obj) {
        json_decref(v);
        return NULL;
    }
    if (json_object_set_new(obj, key, v) != 0) { /* steals v, also on failure */
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* Fields every event about the open item carries. */
static json_t *about_item(const hx_exchange *x)
{
    const resp_state *rs = x->wire_state;
    return json_pack("{s:O, s:i}", "item_id", json_object_get(rs->item, "id"), "output_index",
                     x->block);
}

/* ... and, for its content part, the part's index. */
static json_t *about_part(const hx_exchange *x)
{
    return with(about_item(x), "content_index", json_integer(0));
}

/* Ends the open item: its final text or arguments, its done events; it joins rs->items, with
 * status when a message or a call. */
static bool close_item(hx_exchange *x, const char *status, hx_http_buf *out)
{
    resp_state *rs = x->wire_state;
    const int kind = x->block_kind;
    if (kind == ITEM_NONE) return true;
    bool ok;
    if (kind == ITEM_CALL) {
        json_t *args = hx_json_text(rs->args.data ? rs->args.data : "", rs->args.len);
        json_t *done = with(with(about_item(x), "name",
                                 json_incref(json_object_get(rs->item, "name"))),
                            "arguments", json_incref(args));
        ok = emit(x, "response.function_call_arguments.done", done, out) &&
             json_object_set(rs->item, "arguments", args) == 0;
        json_decref(args);
    } else {
        const bool msg = kind == ITEM_MESSAGE;
        const hx_text *t = msg ? &x->text : &x->thinking;
        const char *text = t->data ? t->data + rs->start : "";
        const size_t len = t->len - rs->start;
        json_t *part = msg ? output_text(text, len)
                           : json_pack("{s:s, s:o}", "type", "reasoning_text", "text",
                                       hx_json_text(text, len));
        json_t *done = with(about_part(x), "text", json_incref(json_object_get(part, "text")));
        if (msg) done = with(done, "logprobs", json_array());
        ok = emit(x, msg ? "response.output_text.done" : "response.reasoning_text.done", done,
                  out) &&
             emit(x, "response.content_part.done", with(about_part(x), "part", json_incref(part)),
                  out) &&
             json_object_set_new(rs->item, "content", json_pack("[O]", part)) == 0;
        json_decref(part);
    }
    if (ok && kind != ITEM_REASONING)
        ok = json_object_set_new(rs->item, "status", json_string(status)) == 0;
    ok = ok && emit(x, "response.output_item.done",
                    json_pack("{s:i, s:O}", "output_index", x->block, "item", rs->item), out) &&
         json_array_append(rs->items, rs->item) == 0;
    json_decref(rs->item);
    rs->item = NULL;
    x->block_kind = ITEM_NONE;
    x->block++;
    return ok;
}

/* Opens the next item (item stolen) of kind, closing the open one first; start is where its
 * text begins in x->text or x->thinking. A message or reasoning item announces its one content
 * part. */
static bool open_item(hx_exchange *x, int kind, json_t *item, size_t start, hx_http_buf *out)
{
    resp_state *rs = x->wire_state;
    if (!item || !close_item(x, "completed", out)) {
        json_decref(item);
        return false;
    }
    rs->item = item;
    rs->start = start;
    rs->args.len = 0;
    x->block_kind = kind;
    if (!emit(x, "response.output_item.added",
              json_pack("{s:i, s:O}", "output_index", x->block, "item", item), out))
        return false;
    if (kind == ITEM_CALL) return true;
    json_t *part = kind == ITEM_MESSAGE
                       ? output_text("", 0)
                       : json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    return emit(x, "response.content_part.added", with(about_part(x), "part", part), out);
}

/* The id the next item gets: the open one closes first. */
static void next_id(const hx_exchange *x, const char *prefix, char *dst, size_t cap)
{
    item_id(x, prefix, x->block + (x->block_kind != ITEM_NONE), dst, cap);
}

static bool resp_open(hx_exchange *x, hx_http_buf *out)
{
    return emit(x, "response.created",
                json_pack("{s:o}", "response", response_object(x, "in_progress", json_array(),
                                                               json_null())),
                out) &&
           emit(x, "response.in_progress",
                json_pack("{s:o}", "response", response_object(x, "in_progress", json_array(),
                                                               json_null())),
                out);
}

static bool resp_text(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                      hx_http_buf *out)
{
    (void)lp;
    char id[64];
    if (len == 0) return true;
    if (x->block_kind != ITEM_MESSAGE) {
        next_id(x, "msg_", id, sizeof id);
        if (!open_item(x, ITEM_MESSAGE, message(id, "in_progress", json_array()), x->text.len,
                       out))
            return false;
    }
    return emit(x, "response.output_text.delta",
                with(with(about_part(x), "delta", hx_json_text(text, len)), "logprobs",
                     json_array()),
                out);
}

static bool resp_reasoning(hx_exchange *x, const char *text, size_t len, hx_http_buf *out)
{
    char id[64];
    if (len == 0) return true;
    if (x->block_kind != ITEM_REASONING) {
        next_id(x, "rs_", id, sizeof id);
        if (!open_item(x, ITEM_REASONING, reasoning(id, json_array()), x->thinking.len, out))
            return false;
    }
    return emit(x, "response.reasoning_text.delta",
                with(about_part(x), "delta", hx_json_text(text, len)), out);
}

static bool resp_tool(hx_exchange *x, const hx_toolcall_event *ev, hx_http_buf *out)
{
    resp_state *rs = x->wire_state;
    char id[64];
    switch (ev->kind) {
    case HX_TOOLCALL_EV_CALL_START:
        next_id(x, "fc_", id, sizeof id);
        return open_item(x, ITEM_CALL, function_call(id, "in_progress", ev->id, ev->name, "", 0),
                         0, out);
    case HX_TOOLCALL_EV_CALL_ARGS:
        return hx_http_buf_append(&rs->args, ev->text, ev->len) &&
               emit(x, "response.function_call_arguments.delta",
                    with(about_item(x), "delta", hx_json_text(ev->text, ev->len)), out);
    case HX_TOOLCALL_EV_CALL_END:
        return close_item(x, "completed", out);
    default:
        return true; /* content arrives through resp_text */
    }
}

static bool resp_finish(hx_exchange *x, const hx_event *done, hx_http_buf *out)
{
    resp_state *rs = x->wire_state;
    const char *status = final_status(done);
    char id[64];
    /* A reply with no output at all still has one (empty) message, as the API's have. */
    if (x->text.len == 0 && x->n_calls == 0) {
        next_id(x, "msg_", id, sizeof id);
        if (!open_item(x, ITEM_MESSAGE, message(id, "in_progress", json_array()), x->text.len,
                       out))
            return false;
    }
    if (!close_item(x, status, out)) return false;
    json_t *resp = response_object(x, status, json_incref(rs->items), usage(&done->stats));
    keep(x, resp);
    return emit(x, strcmp(status, "incomplete") == 0 ? "response.incomplete"
                                                     : "response.completed",
                json_pack("{s:o}", "response", resp), out);
}

/* ---- the whole reply ---- */

/* The output items of a finished reply: reasoning, the message (when there is text, or no
 * calls), then the calls. */
static json_t *output_items(const hx_exchange *x, const char *status)
{
    const int32_t n_calls = x->calls ? hx_toolcall_count(x->calls) : 0;
    json_t *items = json_array();
    int32_t n = 0;
    char id[64];
    if (items && x->thinking.len) {
        item_id(x, "rs_", n++, id, sizeof id);
        json_array_append_new(
            items, reasoning(id, json_pack("[{s:s, s:o}]", "type", "reasoning_text", "text",
                                           hx_json_text(x->thinking.data, x->thinking.len))));
    }
    if (items && (x->text.len || !n_calls)) {
        item_id(x, "msg_", n++, id, sizeof id);
        json_array_append_new(items, message(id, status, json_pack("[o]", output_text(
                                                                        x->text.data,
                                                                        x->text.len))));
    }
    for (int32_t i = 0; items && i < n_calls; i++) {
        const hx_toolcall *tc = hx_toolcall_get(x->calls, i);
        item_id(x, "fc_", n++, id, sizeof id);
        json_array_append_new(items, function_call(id, "completed", tc->id, tc->name,
                                                   tc->arguments, tc->arguments_len));
    }
    return items;
}

static json_t *resp_body(hx_exchange *x, const hx_event *done)
{
    const char *status = final_status(done);
    json_t *resp = response_object(x, status, output_items(x, status), usage(&done->stats));
    keep(x, resp);
    return resp;
}

static const hx_wire responses_wire = {HX_API_OPENAI, "resp_",   resp_open,   resp_text,
                                       resp_reasoning, resp_tool, resp_finish, resp_body,
                                       hx_responses_state_free};

/* ---- handlers ---- */

void hx_responses_create(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    hx_exchange_serve(ctx, req, resp, hx_responses_parse, &responses_wire);
}

/* The id in /v1/responses/<id>, or "". */
static const char *path_id(const hx_http_req *req)
{
    const char *path = hx_http_req_path(req), *prefix = "/v1/responses/";
    return strncmp(path, prefix, strlen(prefix)) == 0 ? path + strlen(prefix) : "";
}

static void not_found(const char *id, hx_status st, hx_http_resp *resp)
{
    char msg[300];
    if (st == HX_E_NOMEM) {
        hx_serve_error(HX_API_OPENAI, st, "out of memory reading the stored response", NULL, resp);
        return;
    }
    snprintf(msg, sizeof msg, "Response with id '%.100s' not found (responses are kept for an hour "
             "after their last use, and only with store: true)", id);
    hx_serve_error(HX_API_OPENAI, HX_E_NOTFOUND, msg, NULL, resp);
}

void hx_responses_get(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    const char *id = path_id(req);
    hx_response_store *st = ((const hx_server *)ctx)->responses;
    json_t *r = NULL;
    const hx_status s = st ? hx_response_store_get(st, id, hx_now_ms(), &r, NULL) : HX_E_NOTFOUND;
    if (s != HX_OK) {
        not_found(id, s, resp);
        return;
    }
    hx_json_reply(HX_API_OPENAI, 200, r, resp);
}

void hx_responses_delete(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    const char *id = path_id(req);
    hx_response_store *st = ((const hx_server *)ctx)->responses;
    const hx_status s = st ? hx_response_store_delete(st, id, hx_now_ms()) : HX_E_NOTFOUND;
    if (s != HX_OK) {
        not_found(id, s, resp);
        return;
    }
    hx_json_reply(HX_API_OPENAI, 200,
                  json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1), resp);
}
