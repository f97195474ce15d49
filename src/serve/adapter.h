/* adapter.h - the protocol adapters: OpenAI and Anthropic requests in, their wire formats out.
 *
 * A handler parses and validates the request body into a prepared completion (openai.c,
 * anthropic.c), hands it to the shared exchange (exchange.c), which submits it to the executor,
 * reads the job's events and either streams them as Server-Sent Events or collects them into one
 * JSON body. What differs between the protocols is a small table of formatting functions
 * (hx_wire); the loop that waits for events, notices a departed client and cancels is written
 * once. Every error body comes from errors.c (STYLE 56), in the shape of the API asked.
 *
 * The parse functions need no engine: only s->tok, s->tpl, s->n_ctx, s->max_tokens, s->sampling,
 * s->opts.sampling.seed_set and s->model_id are read, so unit tests and the fuzz target call them over a
 * tiny tokenizer. They are thread-safe (the server is read-only). */
#ifndef HX_SERVE_ADAPTER_H
#define HX_SERVE_ADAPTER_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/serve_int.h"

typedef enum { HX_API_OPENAI = 0, HX_API_ANTHROPIC = 1 } hx_api;

/* What a request asks of the reply (not of the engine). Written by the parse functions, also on
 * failure, where param names the offending field for OpenAI's error "param". */
typedef struct {
    bool    stream;         /* Server-Sent Events instead of one JSON body */
    bool    include_usage;  /* OpenAI stream_options.include_usage: a last chunk with usage */
    bool    logprobs;       /* report each token's log-probability */
    int32_t n_top_logprobs; /* alternatives per token (chat 0..20, legacy completions 0..5) */
    bool    chat_logprobs;  /* chat shape {"content":[...]} rather than the legacy one */
    char    param[64];      /* on failure: the JSON path of the field at fault, or "" */
} hx_reply_opts;

/* ---- handlers (hx_http_handler; ctx is the hx_server) ---- */
void hx_openai_chat(void *ctx, hx_http_req *req, hx_http_resp *resp);          /* POST /v1/chat/completions */
void hx_openai_completions(void *ctx, hx_http_req *req, hx_http_resp *resp);   /* POST /v1/completions */
void hx_openai_models(void *ctx, hx_http_req *req, hx_http_resp *resp);        /* GET /v1/models */
void hx_openai_model(void *ctx, hx_http_req *req, hx_http_resp *resp);         /* GET /v1/models/<id> */
void hx_anthropic_messages(void *ctx, hx_http_req *req, hx_http_resp *resp);   /* POST /v1/messages */
void hx_anthropic_count_tokens(void *ctx, hx_http_req *req, hx_http_resp *resp); /* POST /v1/messages/count_tokens */

/* ---- parsing (no engine needed) ----
 * Each parses body[0..len) (need not be NUL-terminated). On success *out is a new completion the
 * caller owns (hx_completion_free, or hand it to hx_executor_submit) and *opts says how to reply.
 * On failure *out is untouched, err holds a message naming the field and what was expected versus
 * found, opts->param names the field, and the status is HX_E_INVALID (malformed JSON with its line
 * and column, wrong type or range, missing field), HX_E_UNSUPPORTED (a feature not implemented
 * yet), HX_E_CONTEXT (the prompt fills the context: both numbers) or HX_E_NOMEM. */
hx_status hx_openai_parse_chat(const hx_server *s, const char *body, size_t len,
                               hx_completion **out, hx_reply_opts *opts, hx_err *err);
hx_status hx_openai_parse_completions(const hx_server *s, const char *body, size_t len,
                                      hx_completion **out, hx_reply_opts *opts, hx_err *err);
hx_status hx_anthropic_parse_messages(const hx_server *s, const char *body, size_t len,
                                      hx_completion **out, hx_reply_opts *opts, hx_err *err);
/* The same body as /v1/messages without max_tokens; *n_tokens is the rendered prompt's length. */
hx_status hx_anthropic_parse_count_tokens(const hx_server *s, const char *body, size_t len,
                                          int32_t *n_tokens, hx_reply_opts *opts, hx_err *err);

/* ---- errors (errors.c: the only place error JSON is built) ----
 * HTTP status for a failure: INVALID/UNSUPPORTED/CONTEXT 400, NOTFOUND 404, BUSY and CANCELLED
 * (shutting down) 503, anything else 500. */
int hx_serve_error_status(hx_status st);
/* Fills resp with api's error body and status for st and msg; param (NULL or "": none) is the
 * field at fault. HX_E_BUSY also sets Retry-After: 1. */
void hx_serve_error(hx_api api, hx_status st, const char *msg, const char *param,
                    hx_http_resp *resp);
/* The same error as one Server-Sent Event (OpenAI `data: {...}`, Anthropic `event: error`),
 * appended to out, for failures after a stream began. false: out of memory. */
bool hx_serve_error_event(hx_api api, hx_status st, const char *msg, hx_http_buf *out);
/* The hx_http_config.error function: errors the HTTP layer raises itself (401, 404, 405, 413,
 * ...), in Anthropic's shape under /v1/messages and OpenAI's elsewhere. */
void hx_serve_http_error(void *ctx, const char *path, int status, const char *message,
                         hx_http_resp *resp);

/* ---- request readers shared by the adapters (exchange.c) ----
 * Each returns HX_OK or records the failure in p->err and p->opts->param. An optional field that
 * is absent or null leaves *out (and *set) untouched. */
typedef struct {
    const hx_server *s;
    hx_reply_opts   *opts;
    hx_err          *err;
    json_t          *root; /* the request object (owned: hx_parse_end) */
} hx_parse;

/* Loads body[0..len) as a JSON object into p->root. Malformed JSON is HX_E_INVALID with
 * jansson's line and column. */
hx_status hx_parse_begin(hx_parse *p, const hx_server *s, const char *body, size_t len,
                         hx_reply_opts *opts, hx_err *err);
void      hx_parse_end(hx_parse *p);
/* Records a failure of field param (NULL: none); the message is printf-formatted. */
hx_status hx_parse_fail(hx_parse *p, hx_status st, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A short description of v for messages: its JSON text, cut to about 40 bytes. */
void      hx_parse_describe(const json_t *v, char *dst, size_t cap);
/* obj[key] as a number in [lo, hi] (lo excluded when lo_open); what says so in words. */
hx_status hx_parse_number(hx_parse *p, json_t *obj, const char *key, double lo, double hi,
                          bool lo_open, const char *what, double *out, bool *set);
/* obj[key] as an integer in [lo, hi] (a real with an integral value is accepted). */
hx_status hx_parse_int(hx_parse *p, json_t *obj, const char *key, int64_t lo, int64_t hi,
                       const char *what, int64_t *out, bool *set);
hx_status hx_parse_bool(hx_parse *p, json_t *obj, const char *key, bool *out);
/* Stop strings from v (a string, or an array of at most 16 non-empty strings; null: none) into
 * c->gp.stop, copied into c's arena. param names the field ("stop", "stop_sequences"). */
hx_status hx_parse_stop(hx_parse *p, json_t *v, const char *param, bool allow_string,
                        hx_completion *c);
/* A new completion with the server's defaults: sampling (a fresh seed per request unless the
 * server was given one), max_tokens. */
hx_status hx_parse_completion(hx_parse *p, hx_completion **out);
/* Renders messages (an array of {"role","content":string} objects, borrowed) through the chat
 * template with the generation prompt, appends prefill (the start of the reply, may be NULL),
 * tokenizes and stores the prompt in c; with check_ctx, a prompt that fills the context is
 * HX_E_CONTEXT. No template: HX_E_INVALID naming alternative. */
hx_status hx_parse_chat_prompt(hx_parse *p, json_t *messages, const char *prefill,
                               size_t prefill_len, const char *alternative, bool check_ctx,
                               hx_completion *c);
/* Stores ids as c's prompt after checking them against the vocabulary and the context. */
hx_status hx_parse_prompt_ids(hx_parse *p, const int32_t *ids, size_t n, const char *param,
                              hx_completion *c);

/* ---- the exchange (exchange.c): run a completion, stream or collect its events ---- */
typedef struct hx_exchange hx_exchange;

/* One logprob record and where its text began in the reply (legacy text_offset). */
typedef struct {
    hx_token_logprobs lp;
    size_t            offset;
} hx_lp_rec;

/* How one protocol writes a reply. Stream functions append SSE bytes to out and return false
 * only when out of memory; body returns a new json_t (NULL: out of memory). */
typedef struct {
    hx_api      api;
    const char *id_prefix; /* "chatcmpl-", "cmpl-", "msg_" */
    bool (*open)(hx_exchange *x, hx_http_buf *out);   /* events before the first text */
    bool (*text)(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                 hx_http_buf *out);                   /* one text event (lp may be NULL) */
    bool (*finish)(hx_exchange *x, const hx_event *done, hx_http_buf *out); /* the ending */
    json_t *(*body)(hx_exchange *x, const hx_event *done); /* the non-streamed reply */
} hx_wire;

/* A running request: read by the formatting functions, owned by exchange.c. */
struct hx_exchange {
    const hx_server *s;
    const hx_wire   *wire;
    hx_http_req     *req;
    hx_job          *job;
    hx_reply_opts    opts;
    char             id[48];    /* "chatcmpl-<24 hex>" */
    int64_t          created;   /* unix seconds */
    int32_t          n_prompt;  /* prompt tokens, known before the engine runs */
    const char     **stop;      /* copies of the stop strings, to name the one matched */
    int32_t          n_stop;
    char            *text;      /* non-stream: the reply so far (NUL-terminated) */
    size_t           text_len, text_cap;
    hx_lp_rec       *lps;       /* non-stream: one record per text event that carried one */
    int32_t          n_lps, lps_cap;
    bool             opened, finished, cancelled;
    double           checked_ms; /* monotonic time the client was last checked */
    hx_arena         arena;     /* the exchange itself, id, stop copies */
};

/* Runs c (ownership passes here, also on failure) for req and fills resp: a JSON body, a stream,
 * or an error body (503 + Retry-After when the queue is full). */
void hx_exchange_run(const hx_server *s, const hx_wire *w, hx_http_req *req, hx_http_resp *resp,
                     hx_completion *c, const hx_reply_opts *opts);

/* ---- JSON helpers shared by the adapters (exchange.c) ---- */
/* resp gets status 200 (or status) and obj serialized as its body; steals obj. false: OOM
 * (resp then holds a 500 error in api's shape). */
bool hx_json_reply(hx_api api, int status, json_t *obj, hx_http_resp *resp);
/* Appends "event: NAME\n" (when event is not NULL) and "data: <obj>\n\n"; steals obj. */
bool hx_sse_json(hx_http_buf *out, const char *event, json_t *obj);
/* A JSON string of s[0..n), with any invalid UTF-8 replaced by U+FFFD. NULL: OOM. */
json_t *hx_json_text(const char *s, size_t n);
/* The text of one token as the reply shows it, as a JSON string; also its bytes as an array of
 * integers when bytes is not NULL. */
json_t *hx_json_token(const hx_tokenizer *tok, int32_t id, json_t **bytes);

#endif
