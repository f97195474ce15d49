/* chat.c - a chat request's extras made concrete: tools, structured output and thinking.
 *
 * Every chat API (OpenAI chat, Anthropic messages, Responses) ends here after reading its own
 * fields into an hx_chat_req. This file renders the conversation through the model's template
 * with the tools and enable_thinking, rewrites what the template cannot show (tools.h), picks the
 * grammar a reply must follow (a JSON Schema, any JSON object, or a tool call that tool_choice
 * requires), and says how the exchange must split the reply (reasoning, tool calls).
 *
 * Grammars are compiled once per distinct text and kept in a small LRU cache shared by all
 * connection threads (a mutex guards it; a compiled grammar is immutable and reference-counted,
 * so a request keeps its own reference while the cache may drop the entry). What the template
 * can do is judged once, at start, from its text. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/chat_prompt.h"
#include "sample/json_schema.h"
#include "sample/regex.h"
#include "serve/adapter.h"
#include "serve/response_store.h"

#define CACHE_SLOTS 64 /* distinct grammars kept compiled */

/* ---- the grammar cache ---- */

typedef struct {
    uint64_t    hash;
    char       *text; /* NULL: slot free */
    size_t      len;
    hx_grammar *g;    /* the cache's reference */
    uint64_t    used; /* tick of the last hit, for LRU */
} cache_slot;

struct hx_grammar_cache {
    pthread_mutex_t lock;
    cache_slot      slot[CACHE_SLOTS];
    uint64_t        tick;
};

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001B3ull;
    return h;
}

static void cache_free(struct hx_grammar_cache *c)
{
    if (!c) return;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        hx_free(c->slot[i].text);
        hx_grammar_free(c->slot[i].g);
    }
    pthread_mutex_destroy(&c->lock);
    hx_free(c);
}

/* A reference to the compiled grammar of text[0..len) (release with hx_grammar_free): from the
 * cache, or compiled now and cached. Compile errors are the grammar's. */
static hx_status cache_get(struct hx_grammar_cache *c, const char *text, size_t len,
                           hx_grammar **out, hx_err *err)
{
    const uint64_t h = fnv1a(text, len);
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cache_slot *e = &c->slot[i];
        if (e->text && e->hash == h && e->len == len && memcmp(e->text, text, len) == 0) {
            e->used = ++c->tick;
            *out = hx_grammar_retain(e->g);
            pthread_mutex_unlock(&c->lock);
            return HX_OK;
        }
    }
    pthread_mutex_unlock(&c->lock);
    hx_grammar *g = NULL; /* compiled outside the lock: others need not wait for it */
    hx_status st = hx_grammar_compile(text, len, &g, err);
    if (st != HX_OK) return st;
    char *copy = hx_alloc(len + 1);
    if (copy) {
        memcpy(copy, text, len);
        copy[len] = '\0';
        pthread_mutex_lock(&c->lock);
        cache_slot *victim = &c->slot[0];
        for (int i = 0; i < CACHE_SLOTS && victim->text; i++)
            if (!c->slot[i].text || c->slot[i].used < victim->used) victim = &c->slot[i];
        hx_free(victim->text);
        hx_grammar_free(victim->g);
        *victim = (cache_slot){h, copy, len, hx_grammar_retain(g), ++c->tick};
        pthread_mutex_unlock(&c->lock);
    }
    *out = g; /* uncached when out of memory for the key: still usable */
    return HX_OK;
}

/* ---- the server's chat state ---- */

hx_status hx_server_chat_open(hx_server *s, const char *tpl, const char *arch, hx_err *err)
{
    s->tool_family = hx_toolcall_detect(tpl, arch);
    s->reasoning = hx_reasoning_params_default();
    s->thinks = hx_reasoning_tags_for_template(tpl, &s->reasoning);
    s->tpl_tools = tpl && hx_tools_template_renders_tools(tpl);
    s->tpl_tool_calls = tpl && hx_tools_template_has_tool_calls(tpl);
    s->tpl_tool_role = tpl && hx_tools_template_has_tool_role(tpl);
    s->grammars = hx_calloc(1, sizeof *s->grammars);
    if (!s->grammars) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    pthread_mutex_init(&s->grammars->lock, NULL);
    hx_status st = hx_response_store_init(HX_RESPONSE_STORE_MAX_BYTES, HX_RESPONSE_STORE_TTL_MS,
                                          &s->responses, err);
    if (st == HX_OK) st = hx_grammar_vocab_from_tokenizer(s->tok, &s->gvocab, err);
    return st;
}

void hx_server_chat_close(hx_server *s)
{
    cache_free(s->grammars);
    hx_grammar_vocab_free(s->gvocab);
    hx_response_store_free(s->responses);
    s->grammars = NULL;
    s->gvocab = NULL;
    s->responses = NULL;
}

/* ---- a request ---- */

hx_chat_req hx_chat_req_default(void)
{
    return (hx_chat_req){.choice = {.kind = HX_TOOL_CHOICE_AUTO}, .thinking = -1,
                         .format_param = "response_format"};
}

void hx_chat_req_clear(hx_chat_req *cr)
{
    json_decref(cr->tools);
    json_decref(cr->owned);
    cr->tools = cr->owned = NULL;
}

/* The template's extra variables: chat_template_kwargs, then enable_thinking when the request
 * or the server says (a kwarg of that name wins), then the tools when the template shows them. */
static json_t *template_vars(const hx_server *s, const hx_chat_req *cr, bool offer)
{
    json_t *v = json_is_object(cr->kwargs) ? json_copy(cr->kwargs) : json_object();
    const int thinking = cr->thinking >= 0 ? cr->thinking : s->opts.thinking;
    if (v && thinking >= 0 && !json_object_get(v, "enable_thinking"))
        json_object_set_new(v, "enable_thinking", json_boolean(thinking));
    if (v && offer && s->tpl_tools) json_object_set(v, "tools", cr->tools);
    return v;
}

/* For a template that does not show tools: their description joins the system message (a new
 * one first when there is none). msgs is modified. */
static hx_status tools_as_system(const hx_server *s, json_t *tools, json_t *msgs, hx_err *err)
{
    char *text = NULL;
    hx_status st = hx_tools_system_prompt(tools, s->tool_family, &text, err);
    if (st != HX_OK) return st;
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    const char *old = json_string_value(json_object_get(first, "content"));
    json_t *content = NULL;
    if (role && strcmp(role, "system") == 0 && old) {
        char *joined = hx_alloc(strlen(old) + strlen(text) + 3);
        if (joined) {
            sprintf(joined, "%s\n\n%s", old, text);
            content = json_string(joined);
            hx_free(joined);
        }
        if (content && json_object_set_new(first, "content", content) == 0) content = first;
    } else {
        json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", text);
        if (m && json_array_insert_new(msgs, 0, m) == 0) content = m;
    }
    hx_free(text);
    return content ? HX_OK : hx_err_set(err, HX_E_NOMEM, "out of memory");
}

/* Grammar text accepting exactly one of the strings in choices (a non-empty array of strings):
 * each a literal, with quote, backslash and control bytes escaped. */
static hx_status choice_grammar(json_t *choices, char **text, hx_err *err)
{
    hx_http_buf b = {0};
    bool ok = hx_http_buf_append(&b, "root ::= ", 9);
    for (size_t i = 0; ok && i < json_array_size(choices); i++) {
        json_t *v = json_array_get(choices, i);
        const unsigned char *p = (const unsigned char *)json_string_value(v);
        const size_t n = json_string_length(v);
        ok = hx_http_buf_append(&b, i ? " | \"" : "\"", i ? 4 : 1);
        for (size_t k = 0; ok && k < n; k++) {
            char esc[8];
            if (p[k] == '"' || p[k] == '\\' || p[k] < 0x20 || p[k] == 0x7F) {
                snprintf(esc, sizeof esc, "\\x%02X", p[k]);
                ok = hx_http_buf_append(&b, esc, 4);
            } else {
                ok = hx_http_buf_append(&b, (const char *)p + k, 1);
            }
        }
        ok = ok && hx_http_buf_append(&b, "\"", 1);
    }
    if (!ok || !hx_http_buf_append(&b, "", 1)) { /* the terminating NUL */
        hx_free(b.data);
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    }
    *text = b.data;
    return HX_OK;
}

/* The grammar text the reply must follow, if any (*text NULL: none). *owned tells whether the
 * caller frees it. *param names the field behind it, for errors. */
static hx_status reply_grammar(const hx_server *s, const hx_chat_req *cr, bool offer,
                               char **text, bool *owned, const char **param, hx_err *err)
{
    *text = NULL;
    *owned = true;
    if (offer && (cr->choice.kind == HX_TOOL_CHOICE_REQUIRED ||
                  cr->choice.kind == HX_TOOL_CHOICE_NAMED)) {
        *param = "tool_choice";
        return hx_tools_grammar(s->tool_family, cr->tools, &cr->choice, cr->parallel, text, err);
    }
    *param = cr->format_param;
    if (cr->schema) return hx_json_schema_to_grammar(cr->schema, text, err);
    if (cr->regex) return hx_regex_to_grammar(cr->regex, strlen(cr->regex), "root", 0, text, err);
    if (cr->choices) return choice_grammar(cr->choices, text, err);
    if (cr->grammar || cr->json_object) {
        *text = (char *)(cr->grammar ? cr->grammar : hx_json_object_grammar());
        *owned = false;
    }
    return HX_OK;
}

/* Compiles (or finds) the reply's grammar and puts it on c; lazy: it begins after the thinking
 * block's close tag. cr_grammar: the text is the request's own (its errors are the user's). */
static hx_status attach_grammar(hx_parse *p, const char *text, const char *param,
                                bool cr_grammar, bool lazy, hx_completion *c)
{
    const hx_server *s = p->s;
    hx_err terr = {0};
    hx_status st = cache_get(s->grammars, text, strlen(text), &c->grammar, &terr);
    if (st != HX_OK)
        return hx_parse_fail(p, st, param, "%s%s", cr_grammar ? "" : "the generated grammar: ",
                             terr.msg);
    hx_sampling *sp = &c->gp.sampling;
    sp->grammar = c->grammar;
    sp->grammar_vocab = s->gvocab;
    sp->grammar_lazy = lazy;
    c->gp.grammar_after = lazy ? s->reasoning.close : NULL;
    return HX_OK;
}

/* The one structured-output field a request may use: each is (name, what it holds). */
static const struct {
    const char *key;
    int         kind; /* 0 schema object, 1 regex string, 2 choices array, 3 grammar string */
} formats[] = {
    {"json_schema", 0},   /* llama-server */
    {"grammar", 3},       /* llama-server (GBNF) */
    {"guided_json", 0},   /* vLLM */
    {"guided_regex", 1},  /* vLLM */
    {"guided_choice", 2}, /* vLLM */
    {"guided_grammar", 3}, /* vLLM */
};

/* Records obj[key] (a format of kind) in cr; name is its path for messages. */
static hx_status take_format(hx_parse *p, hx_chat_req *cr, json_t *v, int kind, const char *name)
{
    char got[48];
    if (cr->format_param)
        return hx_parse_fail(p, HX_E_INVALID, name,
                             "%s and %s both ask for structured output; send one", name,
                             cr->format_param);
    bool ok = kind == 0 ? json_is_object(v) || json_is_string(v)
            : kind == 2 ? json_is_array(v) && json_array_size(v) > 0
                        : json_is_string(v) && json_string_length(v) > 0;
    for (size_t i = 0; ok && kind == 2 && i < json_array_size(v); i++)
        ok = json_is_string(json_array_get(v, i));
    if (!ok) {
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, name, "%s must be %s, got %s", name,
                             kind == 0 ? "a JSON Schema object"
                             : kind == 2 ? "a non-empty array of strings"
                                         : "a non-empty string", got);
    }
    cr->format_param = name;
    if (kind == 0 && json_is_string(v)) { /* a schema sent as JSON text */
        json_t *sch = json_loads(json_string_value(v), 0, NULL);
        if (!json_is_object(sch)) {
            json_decref(sch);
            return hx_parse_fail(p, HX_E_INVALID, name, "%s must be a JSON Schema object", name);
        }
        json_decref(cr->owned);
        cr->owned = v = sch;
    }
    if (kind == 0) cr->schema = v;
    if (kind == 1) cr->regex = json_string_value(v);
    if (kind == 2) cr->choices = v;
    if (kind == 3) cr->grammar = json_string_value(v);
    return HX_OK;
}

hx_status hx_parse_structured(hx_parse *p, hx_chat_req *cr)
{
    json_t *r = p->root;
    char got[48];
    hx_status st;
    cr->format_param = NULL;
    json_t *rf = json_object_get(r, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !type)
            return hx_parse_fail(p, HX_E_INVALID, "response_format",
                                 "response_format must be an object with a \"type\"");
        if (strcmp(type, "json_object") == 0) {
            cr->json_object = true;
            cr->format_param = "response_format";
            json_t *sch = json_object_get(rf, "schema"); /* llama-server's extension */
            if (json_is_object(sch)) cr->schema = sch;
        } else if (strcmp(type, "json_schema") == 0) {
            json_t *js = json_object_get(rf, "json_schema");
            json_t *sch = json_object_get(js, "schema");
            if (!json_is_object(js) || !json_is_object(sch)) {
                hx_parse_describe(sch, got, sizeof got);
                return hx_parse_fail(p, HX_E_INVALID, "response_format",
                                     "response_format.json_schema.schema must be a JSON Schema "
                                     "object, got %s", sch ? got : "nothing");
            }
            cr->schema = sch;
            cr->format_param = "response_format";
        } else if (strcmp(type, "text") != 0) {
            return hx_parse_fail(p, HX_E_INVALID, "response_format",
                                 "response_format type must be \"text\", \"json_object\" or "
                                 "\"json_schema\", got \"%.40s\"", type);
        }
    }
    for (size_t i = 0; i < HX_COUNTOF(formats); i++) {
        json_t *v = json_object_get(r, formats[i].key);
        if (v && !json_is_null(v) &&
            (st = take_format(p, cr, v, formats[i].kind, formats[i].key)) != HX_OK)
            return st;
    }
    json_t *so = json_object_get(r, "structured_outputs"); /* vLLM's newer form */
    if (so && !json_is_null(so)) {
        static const char *const so_keys[] = {"json", "regex", "choice", "grammar"};
        static const char *const so_names[] = {"structured_outputs.json",
                                               "structured_outputs.regex",
                                               "structured_outputs.choice",
                                               "structured_outputs.grammar"};
        if (!json_is_object(so))
            return hx_parse_fail(p, HX_E_INVALID, "structured_outputs",
                                 "structured_outputs must be an object");
        for (int k = 0; k < 4; k++) {
            json_t *v = json_object_get(so, so_keys[k]);
            if (v && !json_is_null(v) && (st = take_format(p, cr, v, k, so_names[k])) != HX_OK)
                return st;
        }
    }
    if (!cr->format_param) cr->format_param = "response_format";
    return HX_OK;
}

hx_status hx_parse_effort(hx_parse *p, json_t *v, const char *param, hx_chat_req *cr)
{
    char got[48];
    if (!v || json_is_null(v)) return HX_OK;
    if (!json_is_string(v)) {
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, param,
                             "%s must be a string (none, minimal, low, medium, high), got %s",
                             param, got);
    }
    cr->thinking = strcmp(json_string_value(v), "none") != 0;
    return HX_OK;
}

hx_status hx_parse_format(hx_parse *p, const hx_chat_req *cr, hx_completion *c)
{
    hx_err terr = {0};
    char *text = NULL;
    bool owned = true;
    const char *param = NULL;
    hx_status st = reply_grammar(p->s, cr, false, &text, &owned, &param, &terr);
    if (st != HX_OK) return hx_parse_fail(p, st, param, "%s", terr.msg);
    if (text) st = attach_grammar(p, text, param, text == cr->grammar, false, c);
    if (owned) hx_free(text);
    return st;
}

static hx_status append(char **text, size_t *len, const char *more, size_t n)
{
    char *t = hx_realloc(*text, *len + n + 1);
    if (!t) return HX_E_NOMEM;
    memcpy(t + *len, more, n);
    *len += n;
    t[*len] = '\0';
    *text = t;
    return HX_OK;
}

hx_status hx_parse_chat(hx_parse *p, json_t *messages, const hx_chat_req *cr,
                        const char *prefill, size_t prefill_len, const char *alternative,
                        bool check_ctx, hx_completion *c)
{
    const hx_server *s = p->s;
    hx_reply_opts *o = p->opts;
    if (!s->tpl)
        return hx_parse_fail(p, HX_E_INVALID, "messages",
                             "the model %s has no chat template; %s", s->model_id, alternative);
    const bool offer = cr->tools && json_array_size(cr->tools) > 0 &&
                       cr->choice.kind != HX_TOOL_CHOICE_NONE;
    hx_err terr = {0};
    char *text = NULL, *gtext = NULL;
    bool gowned = true;
    const char *gparam = NULL;
    size_t len = 0;
    hx_tok_ids ids = {0};
    json_t *msgs = NULL, *vars = template_vars(s, cr, offer);
    hx_status st = vars ? HX_OK : HX_E_NOMEM;
    if (st == HX_OK)
        st = hx_tools_fold_messages(messages, s->tool_family, s->tpl_tool_calls,
                                    s->tpl_tool_role, &msgs, &terr);
    if (st == HX_OK && offer && !s->tpl_tools) st = tools_as_system(s, cr->tools, msgs, &terr);
    if (st != HX_OK) {
        st = hx_parse_fail(p, st, "messages", "%s", st == HX_E_NOMEM ? "out of memory" : terr.msg);
        goto done;
    }
    st = hx_chat_render(s->tpl, s->tok, msgs, vars, true, &text, &len, &terr);
    if (st != HX_OK) {
        st = hx_parse_fail(p, st == HX_E_NOMEM ? st : HX_E_INVALID, "messages",
                           "the model's chat template rejected the messages: %s", terr.msg);
        goto done;
    }
    if ((st = reply_grammar(s, cr, offer, &gtext, &gowned, &gparam, &terr)) != HX_OK) {
        st = hx_parse_fail(p, st, gparam, "%s", terr.msg);
        goto done;
    }
    o->tools = offer;
    o->reasoning = s->thinks;
    o->in_reasoning = s->thinks && hx_reasoning_prompt_opens(text, len, &s->reasoning);
    /* A constrained reply of a thinking model thinks first: the block is opened here (unless
     * thinking was turned off, which such templates show by closing it in the prompt) and the
     * grammar starts after it closes. */
    const json_t *et = json_object_get(vars, "enable_thinking");
    if (gtext && s->thinks && !o->in_reasoning && !prefill_len && !json_is_false(et)) {
        const char *open = s->reasoning.open;
        if ((st = append(&text, &len, open, strlen(open))) || (st = append(&text, &len, "\n", 1)))
            goto nomem;
        o->in_reasoning = true;
    }
    if (prefill_len && (st = append(&text, &len, prefill, prefill_len))) goto nomem;
    st = hx_tokenizer_encode(s->tok, text, len, HX_TOK_PARSE_SPECIAL, &ids, &terr);
    if (st != HX_OK) {
        st = hx_parse_fail(p, st, NULL, "%s", terr.msg);
        goto done;
    }
    if (!check_ctx) {
        c->n_prompt = (int32_t)ids.n; /* counting only: the ids are not kept */
        goto done;
    }
    if ((st = hx_parse_prompt_ids(p, ids.ids, ids.n, "messages", c)) != HX_OK) goto done;
    if (gtext) st = attach_grammar(p, gtext, gparam, gtext == cr->grammar, o->in_reasoning, c);
    goto done;
nomem:
    st = hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
done:
    if (gowned) hx_free(gtext);
    hx_tok_ids_free(&ids);
    hx_free(text);
    json_decref(msgs);
    json_decref(vars);
    return st;
}
