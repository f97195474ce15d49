/* serve_int.h - what the files of src/serve share: the server's state and the handlers' names.
 *
 * hx_server is built once at start (server.c) and read-only afterwards, so every connection
 * thread may read it without a lock; the mutable parts (the executor's queue and statistics) do
 * their own locking. Handlers follow hx_http_handler: ctx is the hx_server. */
#ifndef HX_SERVE_SERVE_INT_H
#define HX_SERVE_SERVE_INT_H
#include <stdint.h>

#include "engine/executor.h"
#include "engine/fit.h"
#include "format/model_files.h"
#include "sample/grammar.h"
#include "serve/http.h"
#include "serve/reasoning.h"
#include "serve/serve.h"
#include "serve/toolcall.h"
#include "template/jinja.h"

typedef struct hx_server {
    hx_serve_options    opts;
    hx_model_files     *mf;         /* borrowed from the loaded model (server.c) */
    hx_tokenizer       *tok;
    hx_template        *tpl;        /* NULL: the model has no chat template */
    hx_template        *own_tpl;    /* --chat-template-file's, owned (tpl points to it) */
    char               *tpl_text;   /* the template's source (the model's, or the file's) */
    hx_executor        *ex;
    hx_backend         *be;         /* borrowed from the loaded model: /stats reads mem_info */
    char                device[24]; /* "cpu" or "cuda:N" */
    char                model_id[256]; /* the id in /v1/models and in every response */
    int64_t             created;    /* unix seconds at load */
    int32_t             n_ctx;      /* context positions of the engine's sequence */
    int32_t             max_tokens; /* reply limit when a request gives none */
    hx_sampling         sampling;   /* built-in < model's generation_config < server flags */
    double              t_start_ms; /* monotonic, at process start */
    hx_fit_report       fit;        /* the memory contract the server started under */
    uint64_t            cache_bytes; /* the prefix cache's cap, within the budget */
    /* What the chat template does (chat.c, judged once at start from its text) */
    hx_toolcall_family  tool_family; /* the markup the model writes tool calls in */
    hx_reasoning_params reasoning;   /* its thinking tags (static strings) */
    bool                thinks;      /* the template knows a thinking block: split replies */
    bool                tpl_tools;   /* it renders the tools itself */
    bool                tpl_tool_calls; /* it renders assistant tool_calls */
    bool                tpl_tool_role;  /* it renders role "tool" messages */
    hx_grammar_vocab   *gvocab;      /* the tokenizer's bytes, for grammar masks */
    struct hx_grammar_cache *grammars; /* compiled grammars by text (its own lock) */
    struct hx_response_store *responses; /* stored Responses API replies (its own lock) */
} hx_server;

/* ---- chat.c: the chat side of the server ---- */
/* Judges the template text tpl (may be NULL) and the architecture arch, builds the grammar
 * vocabulary and cache and the Responses API's store. HX_E_NOMEM. Release with hx_server_chat_close (also after failure). */
hx_status hx_server_chat_open(hx_server *s, const char *tpl, const char *arch, hx_err *err);
void      hx_server_chat_close(hx_server *s);

/* ---- routes.c: operations and the chat page ---- */
void hx_route_health(void *ctx, hx_http_req *req, hx_http_resp *resp);
void hx_route_stats(void *ctx, hx_http_req *req, hx_http_resp *resp);
void hx_route_metrics(void *ctx, hx_http_req *req, hx_http_resp *resp);
void hx_route_page(void *ctx, hx_http_req *req, hx_http_resp *resp);

/* The chat page (web/index.html), embedded by cmake/embed.cmake. */
extern const unsigned char hx_web_index_html[];
extern const size_t        hx_web_index_html_len;

#endif
