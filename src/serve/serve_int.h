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
#include "serve/http.h"
#include "serve/serve.h"
#include "template/jinja.h"

typedef struct hx_server {
    hx_serve_options    opts;
    hx_model_files     *mf;         /* borrowed from the loaded model (server.c) */
    hx_tokenizer       *tok;
    hx_template        *tpl;        /* NULL: the model has no chat template */
    hx_executor        *ex;
    char                model_id[256]; /* the id in /v1/models and in every response */
    int64_t             created;    /* unix seconds at load */
    int32_t             n_ctx;      /* context positions of the engine's sequence */
    int32_t             max_tokens; /* reply limit when a request gives none */
    hx_sampling         sampling;   /* built-in < model's generation_config < server flags */
    double              t_start_ms; /* monotonic, at process start */
    hx_fit_report       fit;        /* the memory contract the server started under */
    uint64_t            cache_bytes; /* the prefix cache's cap, within the budget */
} hx_server;

/* ---- routes.c: operations and the chat page ---- */
void hx_route_health(void *ctx, hx_http_req *req, hx_http_resp *resp);
void hx_route_stats(void *ctx, hx_http_req *req, hx_http_resp *resp);
void hx_route_metrics(void *ctx, hx_http_req *req, hx_http_resp *resp);
void hx_route_page(void *ctx, hx_http_req *req, hx_http_resp *resp);

/* The chat page (web/index.html), embedded by cmake/embed.cmake. */
extern const unsigned char hx_web_index_html[];
extern const size_t        hx_web_index_html_len;

#endif
