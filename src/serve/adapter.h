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

#include "serve/reasoning.h"
#include "serve/serve_int.h"
#include "serve/toolcall.h"
#include "serve/tools.h"

typedef enum { HX_API_OPENAI = 0, HX_API_ANTHROPIC = 1 } hx_api;

/* What a request asks of the reply (not of the engine). Written by the parse functions, also on
 * failure, where param names the offending field for OpenAI's error "param". */
typedef struct {
    bool    stream;         /* Server-Sent Events instead of one JSON body */
    bool    include_usage;  /* OpenAI stream_options.include_usage: a last chunk with usage */
    bool    logprobs;       /* report each token's log-probability */
    int32_t n_top_logprobs; /* alternatives per token (chat 0..20, legacy completions 0..5) */
    bool    chat_logprobs;  /* chat shape {"content":[...]} rather than the legacy one */
    bool    tools;          /* the reply may call tools: parse calls out of the text */
    bool    reasoning;      /* split the thinking block out of the text (the template thinks) */
    bool    in_reasoning;   /* the prompt opened the thinking block: the reply starts inside it */
    void   *wire_state;     /* the adapter's own state for its wire functions (x->wire_state);
                             * hx_exchange_run takes it and frees it with wire->release */
    char    param[64];      /* on failure: the JSON path of the field at fault, or "" */
} hx_reply_opts;

/* ---- handlers (hx_http_handler; ctx is the hx_server) ---- */
void hx_openai_chat(void *ctx, hx_http_req *req, hx_http_resp *resp);          /* POST /v1/chat/completions */
void hx_openai_completions(void *ctx, hx_http_req *req, hx_http_resp *resp);   /* POST /v1/completions */
void hx_openai_models(void *ctx, hx_http_req *req, hx_http_resp *resp);        /* GET /v1/models */
void hx_openai_model(void *ctx, hx_http_req *req, hx_http_resp *resp);         /* GET /v1/models/<id> */
void hx_anthropic_messages(void *ctx, hx_http_req *req, hx_http_resp *resp);   /* POST /v1/messages */
void hx_anthropic_count_tokens(void *ctx, hx_http_req *req, hx_http_resp *resp); /* POST /v1/messages/count_tokens */
void hx_responses_create(void *ctx, hx_http_req *req, hx_http_resp *resp);     /* POST /v1/responses */
void hx_responses_get(void *ctx, hx_http_req *req, hx_http_resp *resp);        /* GET /v1/responses/<id> */
void hx_responses_delete(void *ctx, hx_http_req *req, hx_http_resp *resp);     /* DELETE /v1/responses/<id> */

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
/* A Responses request (input items, instructions, previous_response_id from the server's store).
 * On success opts->wire_state holds the reply's state: pass it on with c to hx_exchange_run, or
 * free it with hx_responses_state_free. An unknown previous_response_id is HX_E_NOTFOUND. */
hx_status hx_responses_parse(const hx_server *s, const char *body, size_t len,
                             hx_completion **out, hx_reply_opts *opts, hx_err *err);
void      hx_responses_state_free(void *state); /* NULL: no-op */
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
/* What a chat request asks beyond its messages, in any API's terms (each adapter fills it from
 * its own fields; chat.c turns it into the prompt, the grammar and the reply options). */
typedef struct {
    json_t        *tools;       /* normalized tools (tools.h), owned; NULL: none offered */
    hx_tool_choice choice;      /* AUTO when the request says nothing */
    bool           parallel;    /* a forced call (tool_choice required or named) may be several:
                                 * only when the request says so (parallel_tool_calls: true), as
                                 * small models otherwise repeat the call until max_tokens; calls
                                 * the model makes unforced are never limited */
    json_t        *schema;      /* structured output: a JSON Schema (borrowed), or NULL */
    bool           json_object; /* structured output: any JSON object */
    const char    *regex;       /* structured output: a regular expression (sample/regex.h) */
    json_t        *choices;     /* structured output: one of these strings (an array) */
    const char    *grammar;     /* structured output: grammar text (sample/grammar.h) */
    const char    *format_param; /* the field that asked for structured output (for errors) */
    int            thinking;    /* -1: the server's default (--thinking); 0: off; 1: on */
    json_t        *kwargs;      /* chat_template_kwargs (an object, borrowed) or NULL */
    json_t        *owned;       /* what the request's fields were parsed into (a schema sent as
                                 * text); released by hx_chat_req_clear, as are the tools */
} hx_chat_req;

/* A request that asks nothing beyond messages: no tools, no format, default thinking. */
hx_chat_req hx_chat_req_default(void);
void        hx_chat_req_clear(hx_chat_req *cr); /* releases tools and owned */

/* Reads the structured-output fields of an OpenAI-style request into cr: response_format
 * (text, json_object, json_schema), and the extensions other servers take: json_schema and
 * grammar (llama-server), guided_json, guided_regex, guided_choice, guided_grammar and
 * structured_outputs {json, regex, choice, grammar} (vLLM). Two of them at once is HX_E_INVALID. */
hx_status hx_parse_structured(hx_parse *p, hx_chat_req *cr);
/* A reasoning effort v (absent, null, or "none" / "minimal" / ... ; param names the field):
 * "none" turns thinking off, any other level on. */
hx_status hx_parse_effort(hx_parse *p, json_t *v, const char *param, hx_chat_req *cr);
/* Puts the grammar cr asks for (if any) on c, for a raw prompt: /v1/completions. Unsupported
 * schema or regex features are HX_E_UNSUPPORTED naming them; a malformed grammar HX_E_INVALID. */
hx_status hx_parse_format(hx_parse *p, const hx_chat_req *cr, hx_completion *c);

/* Renders messages (an array of {"role","content",...} objects in OpenAI's chat shape, borrowed;
 * assistant tool_calls and role "tool" messages are rewritten for templates that cannot show
 * them) through the chat template, with the tools (in the template's own way, or as a system
 * text when it has none) and enable_thinking; appends prefill (the start of the reply, may be
 * NULL); tokenizes and stores the prompt in c. Sets up the reply: opts->tools, ->reasoning and
 * ->in_reasoning, and a grammar on c (from the cache) when the request asks for structured
 * output or a tool call must be made; a thinking reply is constrained only after its thinking
 * block. With check_ctx, a prompt that fills the context is HX_E_CONTEXT. No template:
 * HX_E_INVALID naming alternative; a schema or tool grammar beyond what is supported:
 * HX_E_UNSUPPORTED naming the feature. */
hx_status hx_parse_chat(hx_parse *p, json_t *messages, const hx_chat_req *cr,
                        const char *prefill, size_t prefill_len, const char *alternative,
                        bool check_ctx, hx_completion *c);
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

/* How one protocol writes a reply. The exchange splits the engine's text into content,
 * reasoning (opts.reasoning) and tool calls (opts.tools) before these see it. Stream functions
 * append SSE bytes to out and return false only when out of memory; body returns a new json_t
 * (NULL: out of memory). */
typedef struct {
    hx_api      api;
    const char *id_prefix; /* "chatcmpl-", "cmpl-", "msg_", "resp_" */
    bool (*open)(hx_exchange *x, hx_http_buf *out);   /* events before the first text */
    bool (*text)(hx_exchange *x, const char *text, size_t len, const hx_lp_rec *lp,
                 hx_http_buf *out);                   /* content (len may be 0 with an lp) */
    bool (*reasoning)(hx_exchange *x, const char *text, size_t len, hx_http_buf *out);
    bool (*tool)(hx_exchange *x, const hx_toolcall_event *ev, hx_http_buf *out); /* a call's
                                                       * start, argument fragment or end */
    bool (*finish)(hx_exchange *x, const hx_event *done, hx_http_buf *out); /* the ending */
    json_t *(*body)(hx_exchange *x, const hx_event *done); /* the non-streamed reply */
    void (*release)(void *wire_state); /* frees opts.wire_state (NULL: nothing to free) */
} hx_wire;

/* A growing text. */
typedef struct {
    char  *data; /* NUL-terminated once anything was appended */
    size_t len, cap;
} hx_text;

/* A running request: read by the formatting functions, owned by exchange.c. */
struct hx_exchange {
    const hx_server    *s;
    const hx_wire      *wire;
    hx_http_req        *req;
    hx_job             *job;
    hx_reply_opts       opts;
    char                id[48];    /* "chatcmpl-<24 hex>" */
    int64_t             created;   /* unix seconds */
    int32_t             n_prompt;  /* prompt tokens, known before the engine runs */
    const char        **stop;      /* copies of the stop strings, to name the one matched */
    int32_t             n_stop;
    hx_text             text;      /* the reply's content so far */
    hx_text             thinking;  /* its reasoning so far */
    hx_reasoning       *rsn;       /* opts.reasoning: the splitter */
    hx_toolcall_parser *calls;     /* opts.tools: the call parser (its calls, once parsed) */
    int32_t             n_calls;   /* calls started */
    hx_lp_rec          *lps;       /* non-stream: one record per text event that carried one */
    int32_t             n_lps, lps_cap;
    bool                opened, finished, cancelled;
    double              checked_ms; /* monotonic time the client was last checked */
    int32_t             block;     /* a wire's own counters (Anthropic content block index, */
    int32_t             block_kind; /* the kind of the open block: 0 none, else wire-defined) */
    void               *wire_state; /* opts.wire_state: what the wire keeps for the reply */
    hx_arena            arena;     /* the exchange itself, id, stop copies */
};

/* The finish as a reply states it: STOP with calls made is a tool-call stop. */
bool hx_exchange_called_tools(const hx_exchange *x, const hx_event *done);

/* Runs c (ownership passes here, also on failure) for req and fills resp: a JSON body, a stream,
 * or an error body (503 + Retry-After when the queue is full). */
void hx_exchange_run(const hx_server *s, const hx_wire *w, hx_http_req *req, hx_http_resp *resp,
                     hx_completion *c, const hx_reply_opts *opts);

/* A request parser: the hx_*_parse_* functions above. */
typedef hx_status (*hx_parse_fn)(const hx_server *s, const char *body, size_t len,
                                 hx_completion **out, hx_reply_opts *opts, hx_err *err);

/* A whole POST handler: parses req's body with parse (a failure becomes w's API's error reply)
 * and runs the completion with hx_exchange_run. ctx is the hx_server. */
void hx_exchange_serve(void *ctx, hx_http_req *req, hx_http_resp *resp, hx_parse_fn parse,
                       const hx_wire *w);

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
