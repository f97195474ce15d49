/* exchange.c - running one prepared completion for one HTTP request, whatever the protocol.
 *
 * Submits the completion, then reads the job's events: text as it becomes final, then DONE with
 * the finish reason and usage. A streamed reply formats each event as it comes (through the
 * protocol's hx_wire) from the HTTP layer's stream function; a plain reply collects the text and
 * logprob records and formats one body at DONE. Both wait in 50 ms slices and, between them, ask
 * the HTTP layer whether the client is still there: a departed client cancels the job (the
 * engine stops within one step) and the loop keeps reading until DONE, so the job is released
 * only once the engine is done with it. On the way to the wire the text is split: a thinking
 * block's text goes to the wire's reasoning function (serve/reasoning.h) and, when the request
 * offered tools, calls go to its tool function (serve/toolcall.h); the rest is content. Both
 * modes keep the content and reasoning text, which the non-streamed bodies and the Responses
 * store read. Also holds what the adapters share: the JSON helpers and the request readers
 * (typed fields with range checks, stop strings).
 *
 * Owns: the exchange (its arena, the collected text, the job handle). Knows no protocol's field
 * names or wire format beyond SSE framing. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/utf8.h"
#include "serve/adapter.h"

#define WAIT_MS 50 /* how long one wait for an event lasts before the client check */

/* ---- JSON helpers ---- */

json_t *hx_json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j || hx_utf8_valid(s, n)) return j; /* valid text that failed: out of memory */
    /* Invalid UTF-8: copy it with each bad byte as U+FFFD (at most 3 bytes per input byte). */
    char *buf = hx_alloc(n * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (k <= 4 && i + k <= n && !hx_utf8_valid(s + i, k)) k++;
        if (k <= 4 && i + k <= n) { /* s[i..i+k) is one whole character */
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    j = json_stringn(buf, o);
    hx_free(buf);
    return j;
}

json_t *hx_json_token(const hx_tokenizer *tok, int32_t id, json_t **bytes)
{
    hx_tok_text t = {0};
    hx_err err = {0};
    json_t *s = NULL;
    if (hx_tokenizer_decode(tok, &id, 1, 0, &t, &err) == HX_OK)
        s = hx_json_text(t.data ? t.data : "", t.len);
    if (s && bytes) {
        const char *p = json_string_value(s);
        const size_t n = json_string_length(s);
        *bytes = json_array();
        for (size_t i = 0; *bytes && i < n; i++)
            if (json_array_append_new(*bytes, json_integer((unsigned char)p[i])) != 0) {
                json_decref(*bytes);
                *bytes = NULL;
            }
        if (!*bytes) {
            json_decref(s);
            s = NULL;
        }
    }
    hx_tok_text_free(&t);
    return s;
}

/* obj serialized into a new hx_alloc'd string (the HTTP layer frees bodies with hx_free). */
static char *dump(json_t *obj, size_t *len)
{
    const size_t n = json_dumpb(obj, NULL, 0, JSON_COMPACT | JSON_REAL_PRECISION(9));
    char *p = n ? hx_alloc(n + 1) : NULL;
    if (!p) return NULL;
    if (json_dumpb(obj, p, n, JSON_COMPACT | JSON_REAL_PRECISION(9)) != n) {
        hx_free(p);
        return NULL;
    }
    p[n] = '\0';
    *len = n;
    return p;
}

bool hx_json_reply(hx_api api, int status, json_t *obj, hx_http_resp *resp)
{
    size_t n = 0;
    char *p = obj ? dump(obj, &n) : NULL;
    json_decref(obj);
    if (!p) {
        hx_serve_error(api, HX_E_NOMEM, "out of memory while formatting the reply", NULL, resp);
        return false;
    }
    resp->status = status;
    resp->content_type = NULL;
    resp->body = p;
    resp->body_len = n;
    return true;
}

bool hx_sse_json(hx_http_buf *out, const char *event, json_t *obj)
{
    size_t n = 0;
    char *p = obj ? dump(obj, &n) : NULL;
    json_decref(obj);
    bool ok = p != NULL;
    if (ok && event) ok = hx_http_buf_printf(out, "event: %s\n", event);
    ok = ok && hx_http_buf_append(out, "data: ", 6) && hx_http_buf_append(out, p, n) &&
         hx_http_buf_append(out, "\n\n", 2);
    hx_free(p);
    return ok;
}

/* ---- request readers ---- */

hx_status hx_parse_begin(hx_parse *p, const hx_server *s, const char *body, size_t len,
                         hx_reply_opts *opts, hx_err *err)
{
    *p = (hx_parse){.s = s, .opts = opts, .err = err};
    *opts = (hx_reply_opts){0};
    json_error_t je;
    /* JSON_ALLOW_NUL: "\u0000" inside a string is valid JSON; lengths are used throughout. */
    p->root = json_loadb(body ? body : "", len, JSON_ALLOW_NUL, &je);
    if (!p->root) {
        const bool utf8 = strstr(je.text, "UTF-8") || strstr(je.text, "unable to decode byte");
        return hx_parse_fail(p, HX_E_INVALID, NULL,
                             "the request body is not valid JSON: %s (line %d, column %d)%s",
                             je.text, je.line, je.column,
                             utf8 ? "; the body must be UTF-8" : "");
    }
    if (!json_is_object(p->root))
        return hx_parse_fail(p, HX_E_INVALID, NULL,
                             "the request body must be a JSON object, got %s",
                             json_is_array(p->root) ? "an array" : "a scalar");
    return HX_OK;
}

void hx_parse_end(hx_parse *p)
{
    json_decref(p->root);
    p->root = NULL;
}

hx_status hx_parse_fail(hx_parse *p, hx_status st, const char *param, const char *fmt, ...)
{
    if (p->err && p->err->status != HX_OK) return p->err->status; /* the first failure stays */
    char msg[sizeof p->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (param != p->opts->param) /* a reader may have written the path there already */
        snprintf(p->opts->param, sizeof p->opts->param, "%s", param ? param : "");
    return hx_err_set(p->err, st, "%s", msg);
}

void hx_parse_describe(const json_t *v, char *dst, size_t cap)
{
    const size_t n = json_dumpb(v, dst, cap > 0 ? cap - 1 : 0, JSON_ENCODE_ANY | JSON_COMPACT);
    if (cap == 0) return;
    if (n < cap) {
        dst[n] = '\0';
    } else if (cap > 4) { /* did not fit: the start and an ellipsis */
        memcpy(dst + cap - 4, "...", 4);
    } else {
        dst[0] = '\0';
    }
}

/* The field's value, or NULL when absent or null. */
static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

hx_status hx_parse_number(hx_parse *p, json_t *obj, const char *key, double lo, double hi,
                          bool lo_open, const char *what, double *out, bool *set)
{
    json_t *v = field(obj, key);
    if (!v) return HX_OK;
    const double d = json_number_value(v);
    if (!json_is_number(v) || !(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
        char got[48];
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, key, "%s must be %s, got %s", key, what, got);
    }
    *out = d;
    if (set) *set = true;
    return HX_OK;
}

hx_status hx_parse_int(hx_parse *p, json_t *obj, const char *key, int64_t lo, int64_t hi,
                       const char *what, int64_t *out, bool *set)
{
    json_t *v = field(obj, key);
    if (!v) return HX_OK;
    int64_t i = 0;
    bool ok = false;
    if (json_is_integer(v)) {
        i = json_integer_value(v);
        ok = true;
    } else if (json_is_real(v)) { /* 5.0 is 5, as Python's pydantic and OpenAI accept it */
        const double d = json_real_value(v);
        ok = d >= -9.2e18 && d <= 9.2e18 && d == (double)(int64_t)d;
        i = ok ? (int64_t)d : 0;
    }
    if (!ok || i < lo || i > hi) {
        char got[48];
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, key, "%s must be %s, got %s", key, what, got);
    }
    *out = i;
    if (set) *set = true;
    return HX_OK;
}

hx_status hx_parse_bool(hx_parse *p, json_t *obj, const char *key, bool *out)
{
    json_t *v = field(obj, key);
    if (!v) return HX_OK;
    if (!json_is_boolean(v)) {
        char got[48];
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, key, "%s must be true or false, got %s", key, got);
    }
    *out = json_is_true(v);
    return HX_OK;
}

#define MAX_STOP 16

hx_status hx_parse_stop(hx_parse *p, json_t *v, const char *param, bool allow_string,
                        hx_completion *c)
{
    if (!v || json_is_null(v)) return HX_OK;
    const char *shape = allow_string ? "a string or an array of strings" : "an array of strings";
    json_t *one = NULL;
    size_t n = 0;
    if (allow_string && json_is_string(v)) {
        one = v;
        n = 1;
    } else if (json_is_array(v)) {
        n = json_array_size(v);
    } else {
        char got[48];
        hx_parse_describe(v, got, sizeof got);
        return hx_parse_fail(p, HX_E_INVALID, param, "%s must be %s, got %s", param, shape, got);
    }
    if (n > MAX_STOP)
        return hx_parse_fail(p, HX_E_INVALID, param, "%s holds %zu strings; at most %d are allowed",
                             param, n, MAX_STOP);
    if (n == 0) return HX_OK;
    const char **stop = hx_arena_calloc(&c->arena, n, sizeof *stop);
    if (!stop) return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        char name[48];
        if (one) snprintf(name, sizeof name, "%s", param);
        else snprintf(name, sizeof name, "%s[%zu]", param, i);
        if (!json_is_string(s)) {
            char got[48];
            hx_parse_describe(s, got, sizeof got);
            return hx_parse_fail(p, HX_E_INVALID, param, "%s must be a string, got %s", name, got);
        }
        const size_t len = json_string_length(s);
        if (len == 0)
            return hx_parse_fail(p, HX_E_INVALID, param, "%s must not be empty", name);
        if (memchr(json_string_value(s), '\0', len))
            return hx_parse_fail(p, HX_E_INVALID, param, "%s must not contain a NUL character",
                                 name);
        if (!(stop[i] = hx_arena_strndup(&c->arena, json_string_value(s), len)))
            return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    }
    c->gp.stop = stop;
    c->gp.n_stop = (int32_t)n;
    return HX_OK;
}

/* splitmix64's finalizer: spreads every input bit over the whole word. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A number that differs between calls and between server runs: the clock and a counter, mixed. */
static uint64_t unique64(void)
{
    static atomic_ullong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t c = atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed) + 1;
    return mix64(((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                 (c * 0x9E3779B97F4A7C15ull));
}

hx_status hx_parse_completion(hx_parse *p, hx_completion **out)
{
    hx_completion *c = hx_completion_new();
    if (!c) return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    c->gp.sampling = p->s->sampling;
    if (!p->s->opts.sampling.seed_set) c->gp.sampling.seed = unique64(); /* a fresh one */
    c->gp.max_tokens = p->s->max_tokens;
    *out = c;
    return HX_OK;
}

hx_status hx_parse_prompt_ids(hx_parse *p, const int32_t *ids, size_t n, const char *param,
                              hx_completion *c)
{
    const int32_t n_vocab = hx_tokenizer_n_vocab(p->s->tok);
    if (n == 0) return hx_parse_fail(p, HX_E_INVALID, param, "%s is empty: there is nothing to "
                                     "continue", param);
    if (n >= (size_t)p->s->n_ctx)
        return hx_parse_fail(p, HX_E_CONTEXT, param,
                             "the prompt has %zu tokens but the context holds %d; shorten the "
                             "prompt", n, p->s->n_ctx);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return hx_parse_fail(p, HX_E_INVALID, param,
                                 "%s[%zu] is token %d, outside the vocabulary (0..%d)", param, i,
                                 ids[i], n_vocab - 1);
    c->prompt = hx_arena_alloc(&c->arena, n * sizeof *c->prompt, 0);
    if (!c->prompt) return hx_parse_fail(p, HX_E_NOMEM, NULL, "out of memory");
    memcpy(c->prompt, ids, n * sizeof *ids);
    c->n_prompt = (int32_t)n;
    return HX_OK;
}

/* ---- the exchange ---- */

/* 24 hex digits that differ between requests and between server runs (ids need not be
 * unpredictable, only unique). */
static void make_id(char *dst, size_t cap, const char *prefix)
{
    const uint64_t a = unique64(), b = mix64(a ^ 0x632BE59BD9B4E019ull);
    snprintf(dst, cap, "%s%016llx%08llx", prefix, (unsigned long long)a,
             (unsigned long long)(b & 0xFFFFFFFFull));
}

static void exchange_free(hx_exchange *x)
{
    if (!x) return;
    hx_job_release(x->job);
    if (x->wire->release && x->wire_state) x->wire->release(x->wire_state);
    hx_reasoning_free(x->rsn);
    hx_toolcall_free(x->calls);
    hx_free(x->text.data);
    hx_free(x->thinking.data);
    hx_free(x->lps);
    hx_arena a = x->arena; /* x lives in its own arena */
    hx_arena_free(&a);
}

/* A new exchange for c (borrowed: copies what the reply needs). NULL: out of memory. */
static hx_exchange *exchange_new(const hx_server *s, const hx_wire *w, hx_http_req *req,
                                 const hx_completion *c, const hx_reply_opts *opts)
{
    hx_arena a = hx_arena_make(1024);
    hx_exchange *x = hx_arena_calloc(&a, 1, sizeof *x);
    if (!x) return NULL;
    x->arena = a;
    x->s = s;
    x->wire = w;
    x->req = req;
    x->opts = *opts;
    x->opts.wire_state = NULL; /* x->wire_state takes it once x is complete */
    x->created = (int64_t)time(NULL);
    x->n_prompt = c->n_prompt;
    make_id(x->id, sizeof x->id, w->id_prefix);
    if (c->gp.n_stop > 0) {
        x->stop = hx_arena_calloc(&x->arena, (size_t)c->gp.n_stop, sizeof *x->stop);
        if (!x->stop) goto fail;
        for (int32_t i = 0; i < c->gp.n_stop; i++)
            if (!(x->stop[i] = hx_arena_strdup(&x->arena, c->gp.stop[i]))) goto fail;
        x->n_stop = c->gp.n_stop;
    }
    hx_err err = {0};
    if (opts->reasoning) {
        hx_reasoning_params rp = s->reasoning;
        rp.in_reasoning = opts->in_reasoning;
        if (hx_reasoning_init(&rp, &x->rsn, &err) != HX_OK) goto fail;
    }
    if (opts->tools) {
        hx_toolcall_params tp = {.family = s->tool_family, .seed = c->gp.sampling.seed};
        if (hx_toolcall_init(&tp, &x->calls, &err) != HX_OK) goto fail;
    }
    x->wire_state = opts->wire_state;
    return x;
fail:
    exchange_free(x);
    return NULL;
}

bool hx_exchange_called_tools(const hx_exchange *x, const hx_event *done)
{
    return x->n_calls > 0 && done->stats.finish == HX_FINISH_STOP;
}

static bool text_append(hx_text *t, const char *p, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        const size_t cap = (t->len + n + 1) * 2;
        char *d = hx_realloc(t->data, cap);
        if (!d) return false;
        t->data = d;
        t->cap = cap;
    }
    if (n) memcpy(t->data + t->len, p, n);
    t->len += n;
    t->data[t->len] = '\0';
    return true;
}

/* Where the parts of one engine event go: out (a stream) or nowhere but the exchange's texts
 * (a plain reply), with the event's logprob record for the first content it yields. */
typedef struct {
    hx_exchange     *x;
    hx_http_buf     *out; /* NULL: collecting */
    const hx_lp_rec *lp;  /* not yet sent */
    bool             ok;  /* false: out of memory */
} sink;

static bool on_content(sink *k, const char *text, size_t len)
{
    hx_exchange *x = k->x;
    const hx_lp_rec *lp = k->lp;
    k->lp = NULL;
    if (k->out && !x->wire->text(x, text, len, lp, k->out)) return k->ok = false;
    return k->ok = text_append(&x->text, text, len);
}

static bool on_call(void *user, const hx_toolcall_event *ev)
{
    sink *k = user;
    if (ev->kind == HX_TOOLCALL_EV_CONTENT) return on_content(k, ev->text, ev->len);
    if (ev->kind == HX_TOOLCALL_EV_CALL_START) k->x->n_calls++;
    return k->ok = !k->out || k->x->wire->tool(k->x, ev, k->out);
}

/* Content goes through the call parser when the reply may call tools. */
static bool on_run(void *user, hx_reasoning_kind kind, const char *text, size_t len)
{
    sink *k = user;
    hx_exchange *x = k->x;
    if (kind == HX_REASONING_REASONING) {
        if (k->out && !x->wire->reasoning(x, text, len, k->out)) return k->ok = false;
        return k->ok = text_append(&x->thinking, text, len);
    }
    if (x->calls) return hx_toolcall_feed(x->calls, text, len, on_call, k) == HX_OK && k->ok;
    return on_content(k, text, len);
}

/* One engine event's text through the splitters (or, at DONE with text NULL, what they still
 * hold). A logprob record that yielded no content goes out with empty content. */
static bool deliver(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                    hx_http_buf *out)
{
    sink k = {x, out, lp, true};
    hx_status st = HX_OK;
    if (text) {
        st = x->rsn ? hx_reasoning_feed(x->rsn, text, len, on_run, &k)
                    : (on_run(&k, HX_REASONING_CONTENT, text, len) ? HX_OK : HX_E_NOMEM);
    } else {
        if (x->rsn) st = hx_reasoning_finish(x->rsn, on_run, &k);
        if (st == HX_OK && k.ok && x->calls) st = hx_toolcall_finish(x->calls, on_call, &k);
    }
    if (st == HX_OK && k.ok && k.lp && out) return x->wire->text(x, "", 0, k.lp, out);
    return st == HX_OK && k.ok;
}

/* Non-stream: keeps a text event's parts and logprob record. false: out of memory. */
static bool collect(hx_exchange *x, const hx_event *ev)
{
    if (ev->has_lp && x->opts.logprobs) {
        if (x->n_lps == x->lps_cap) {
            int32_t cap = x->lps_cap ? x->lps_cap * 2 : 64;
            hx_lp_rec *p = hx_realloc(x->lps, (size_t)cap * sizeof *p);
            if (!p) return false;
            x->lps = p;
            x->lps_cap = cap;
        }
        x->lps[x->n_lps++] = (hx_lp_rec){.lp = ev->lp, .offset = x->text.len};
    }
    return deliver(x, ev->text ? ev->text : "", ev->len, NULL, NULL);
}

/* Waits for the job's next event, cancelling the job once the client is gone. The client is
 * checked after every wait that timed out and, while events keep coming, every WAIT_MS: a reply
 * that is generated quickly must still notice a departed client (a plain reply writes nothing
 * until the end, so nothing else would). */
static void next_event(hx_exchange *x, hx_event *ev)
{
    for (;;) {
        const bool got = hx_job_next(x->job, ev, WAIT_MS);
        if (!x->cancelled && (!got || hx_now_ms() - x->checked_ms >= WAIT_MS)) {
            x->checked_ms = hx_now_ms();
            if (hx_http_req_client_gone(x->req)) {
                hx_job_cancel(x->job);
                x->cancelled = true;
            }
        }
        if (got) return;
    }
}

/* DONE arrived: the log line's token counts. */
static void note_done(hx_exchange *x, const hx_event *ev)
{
    x->finished = true;
    hx_http_req_set_tokens(x->req, ev->stats.n_prompt, ev->stats.n_gen);
}

/* The HTTP layer's stream function: the opening events on the first call, then one event's
 * worth of bytes per call, the ending (or an error event) at DONE. */
static bool stream_next(void *state, hx_http_buf *out)
{
    hx_exchange *x = state;
    if (x->finished) return false;
    if (!x->opened) {
        const size_t before = out->len;
        x->opened = true;
        if (!x->wire->open(x, out)) goto oom;
        if (out->len > before) return true; /* the opening goes out before the engine's first text */
    }
    for (;;) {
        hx_event ev;
        next_event(x, &ev);
        bool ok = true, more = true;
        const size_t before = out->len;
        if (ev.kind == HX_EVENT_TEXT) {
            const bool lp = ev.has_lp && x->opts.logprobs;
            if (ev.len > 0 || lp) {
                hx_lp_rec rec = {.lp = ev.lp, .offset = x->text.len};
                ok = deliver(x, ev.text ? ev.text : "", ev.len, lp ? &rec : NULL, out);
            }
            hx_event_clear(&ev);
            if (!ok) goto oom;
            if (out->len == before) continue; /* nothing to send yet: wait for more */
            return true;
        }
        note_done(x, &ev);
        more = false;
        if (ev.status == HX_OK || ev.status == HX_E_CANCELLED)
            ok = deliver(x, NULL, 0, NULL, out) && x->wire->finish(x, &ev, out);
        else
            ok = hx_serve_error_event(x->wire->api, ev.status, ev.msg, out);
        hx_event_clear(&ev);
        if (!ok) goto oom;
        return more;
    }
oom:
    /* Formatting failed for lack of memory: say so if possible and end the stream. */
    hx_serve_error_event(x->wire->api, HX_E_NOMEM, "out of memory while formatting the reply",
                         out);
    if (!x->finished) hx_job_cancel(x->job);
    x->finished = true;
    return false;
}

#define DRAIN_MS 5000 /* the longest stream_free waits for a cancelled job's DONE */

/* The response ended. When it ended early (the client left, the server is closing) the job is
 * cancelled and its DONE awaited, briefly: the engine stops within one step, and DONE carries
 * the token counts the request's log line reports. Then the job is released. */
static void stream_free(void *state, bool completed)
{
    (void)completed;
    hx_exchange *x = state;
    if (!x->finished && x->job) {
        hx_job_cancel(x->job);
        for (double t0 = hx_now_ms(); !x->finished && hx_now_ms() - t0 < DRAIN_MS;) {
            hx_event ev;
            if (!hx_job_next(x->job, &ev, WAIT_MS)) continue;
            if (ev.kind == HX_EVENT_DONE) note_done(x, &ev);
            hx_event_clear(&ev);
        }
    }
    exchange_free(x); /* releasing an unfinished job cancels it */
}

/* Non-stream: reads every event, then answers with the body or the failure. */
static void run_collect(hx_exchange *x, hx_http_resp *resp)
{
    bool oom = false;
    for (;;) {
        hx_event ev;
        next_event(x, &ev);
        if (ev.kind == HX_EVENT_TEXT) {
            if (!oom && !collect(x, &ev)) {
                oom = true;
                hx_job_cancel(x->job);
            }
            hx_event_clear(&ev);
            continue;
        }
        note_done(x, &ev);
        if (!oom && (ev.status == HX_OK || ev.status == HX_E_CANCELLED))
            oom = !deliver(x, NULL, 0, NULL, NULL);
        if (oom)
            hx_serve_error(x->wire->api, HX_E_NOMEM, "out of memory while collecting the reply",
                           NULL, resp);
        else if (ev.status == HX_OK)
            hx_json_reply(x->wire->api, 200, x->wire->body(x, &ev), resp);
        else if (ev.status == HX_E_CANCELLED) /* the client left (nobody reads this) or shutdown */
            hx_serve_error(x->wire->api, HX_E_CANCELLED,
                           "the server is shutting down: the request was cancelled", NULL, resp);
        else
            hx_serve_error(x->wire->api, ev.status, ev.msg, NULL, resp);
        hx_event_clear(&ev);
        return;
    }
}

void hx_exchange_run(const hx_server *s, const hx_wire *w, hx_http_req *req, hx_http_resp *resp,
                     hx_completion *c, const hx_reply_opts *opts)
{
    hx_err err = {0};
    hx_exchange *x = exchange_new(s, w, req, c, opts);
    if (!x) {
        if (w->release) w->release(opts->wire_state);
        hx_completion_free(c);
        hx_serve_error(w->api, HX_E_NOMEM, "out of memory", NULL, resp);
        return;
    }
    hx_status st = hx_executor_submit(s->ex, c, &x->job, &err); /* takes c, also on failure */
    if (st != HX_OK) {
        if (st == HX_E_CANCELLED)
            hx_err_set(&err, st, "the server is shutting down");
        hx_serve_error(w->api, st, err.msg[0] ? err.msg : hx_status_str(st), NULL, resp);
        exchange_free(x);
        return;
    }
    if (!x->opts.stream) {
        run_collect(x, resp);
        exchange_free(x);
        return;
    }
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->stream = stream_next;
    resp->stream_state = x;
    resp->stream_free = stream_free;
    hx_http_resp_header(resp, "Cache-Control", "no-cache");
}

void hx_exchange_serve(void *ctx, hx_http_req *req, hx_http_resp *resp, hx_parse_fn parse,
                       const hx_wire *w)
{
    const hx_server *s = ctx;
    size_t len = 0;
    const char *body = hx_http_req_body(req, &len);
    hx_completion *c = NULL;
    hx_reply_opts opts;
    hx_err err = {0};
    const hx_status st = parse(s, body, len, &c, &opts, &err);
    if (st != HX_OK) {
        hx_serve_error(w->api, st, err.msg, opts.param, resp);
        return;
    }
    hx_exchange_run(s, w, req, resp, c, &opts);
}
