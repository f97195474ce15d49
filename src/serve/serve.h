/* serve.h - `hearth serve`: load a model, serve it over HTTP until SIGINT or SIGTERM.
 *
 * The one entry point the command line uses. The server answers OpenAI (/v1/chat/completions,
 * /v1/completions, /v1/models), Anthropic (/v1/messages, /v1/messages/count_tokens), operations
 * routes (/health, /stats, /metrics) and the chat page at /. See docs/server-api.md. */
#ifndef HX_SERVE_SERVE_H
#define HX_SERVE_SERVE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "sample/sampler.h"

typedef struct {
    const char *model;       /* path, HF repo id or name part (format/discover.h) */
    const char *device;      /* "cpu" (default, NULL), "cuda" or "cuda:N" (backend/device.h) */
    const char *host;        /* default "127.0.0.1" */
    int         port;        /* default 8080; 0: any free port */
    const char *api_key;     /* NULL: no authentication */
    size_t      max_body;    /* default 16 MiB */
    int         max_queue;   /* default 64 */
    int         timeout_s;   /* idle connection timeout, default 60 */
    int         n_threads;   /* 0: physical cores */
    int32_t     n_ctx;       /* 0: the model's, at most 8192 */
    int32_t     max_tokens;  /* default reply limit when a request gives none; default 512 */
    int32_t     n_batch;     /* requests generating together; default 8 */
    int32_t     step_tokens; /* rows per engine step (prefill chunk bound); 0: the model's */
    double      prompt_cache_gb; /* prefix cache cap in GB (default 2; 0: off) */
    double      memory_budget_gb; /* refuse to start beyond it; 0: 75% of RAM, or on a GPU
                                   * 95% of its free memory */
    hx_kv_dtype kv;          /* KV cache storage: f16 (default), q8, q4 */
    bool        int8;        /* single-term int8 activations (faster, less exact) */
    bool        quiet;       /* no per-request log lines */
    const char *chat_template_file; /* a Jinja chat template used instead of the model's */
    int         thinking;    /* enable_thinking for requests that do not say: 1 on, 0 off, -1
                              * (default) the template's own default */
    /* Sampling flags: they override the model's generation_config.json; requests override them */
    hx_sampling_flags sampling;
} hx_serve_options;

hx_serve_options hx_serve_options_default(void);

/* Serves until SIGINT/SIGTERM, then stops taking connections, cancels what is in flight (a
 * streamed reply ends with its finish reason), and returns 0. Returns 1 after printing a clear
 * message when the model cannot be opened or the port cannot be bound. */
int hx_serve_run(const hx_serve_options *o);

#endif
