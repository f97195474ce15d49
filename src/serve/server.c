/* server.c - `hearth serve`: loads the model, starts the engine and the HTTP layer, waits for
 * SIGINT or SIGTERM, and takes everything down in order.
 *
 * Start-up order matters for signals: SIGINT and SIGTERM are blocked before any thread starts
 * (the backend's pool, the engine, libmicrohttpd's), so every thread inherits the mask and only
 * the main thread, in sigwait, ever sees them. Shutdown: stop accepting connections, cancel
 * every queued and running completion (streams end with their finish reason), close the HTTP
 * layer (joins the connection threads), then the engine, then the model. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/mapfile.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/model_load.h"
#include "serve/adapter.h"
#include "serve/serve_int.h"

hx_serve_options hx_serve_options_default(void)
{
    return (hx_serve_options){.host = "127.0.0.1", .port = 8080, .max_body = 16u << 20,
                              .max_queue = 64, .timeout_s = 60, .max_tokens = 512,
                              .n_batch = 8, .prompt_cache_gb = 2.0, .thinking = -1};
}

/* Every route of the server (STYLE 55). /v1 routes need the API key when one is set; the page,
 * health and statistics stay open so a browser and a load balancer can reach them. The
 * un-prefixed aliases are the ones llama-server also answers. */
static const hx_http_route routes[] = {
    {"GET",  "/",                          hx_route_page,             false},
    {"GET",  "/index.html",                hx_route_page,             false},
    {"GET",  "/health",                    hx_route_health,           false},
    {"GET",  "/stats",                     hx_route_stats,            false},
    {"GET",  "/metrics",                   hx_route_metrics,          false},
    {"GET",  "/v1/models",                 hx_openai_models,          true},
    {"GET",  "/v1/models/*",               hx_openai_model,           true},
    {"POST", "/v1/chat/completions",       hx_openai_chat,            true},
    {"POST", "/v1/completions",            hx_openai_completions,     true},
    {"POST", "/v1/messages",               hx_anthropic_messages,     true},
    {"POST", "/v1/messages/count_tokens",  hx_anthropic_count_tokens, true},
    {"POST", "/v1/responses",              hx_responses_create,       true},
    {"GET",  "/v1/responses/*",            hx_responses_get,          true},
    {"DELETE", "/v1/responses/*",          hx_responses_delete,       true},
    {"GET",  "/models",                    hx_openai_models,          true},
    {"POST", "/chat/completions",          hx_openai_chat,            true},
    {"POST", "/completions",               hx_openai_completions,     true},
};

/* The model's id in the API: the file name without .gguf, or the folder's name (for a Hugging
 * Face snapshot folder, the repo's name rather than the commit hash). */
static void model_id(const char *path, char *out, size_t cap)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    const char *hub = strstr(buf, "/models--");
    if (hub && strstr(hub, "/snapshots/")) {
        const char *name = hub + strlen("/models--");
        const char *end = strstr(name, "/snapshots/");
        snprintf(out, cap, "%.*s", (int)(end - name), name);
        for (char *p = strstr(out, "--"); p; p = strstr(p, "--")) {
            *p = '/';
            memmove(p + 1, p + 2, strlen(p + 2) + 1);
        }
        return;
    }
    const char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    snprintf(out, cap, "%s", base);
    n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".gguf") == 0) out[n - 5] = '\0';
}

static void server_free(hx_server *s, hx_loaded_model *m)
{
    hx_executor_close(s->ex);
    hx_server_chat_close(s);
    hx_template_free(s->own_tpl);
    hx_free(s->tpl_text);
    hx_loaded_model_close(m);
}

/* The memory contract (engine/fit.h): the weights, n_batch full contexts of KV and the scratch
 * must fit the budget, or the server refuses to start with every term in the message; the
 * prefix cache then gets at most what is left of the budget. On a GPU the terms and the budget
 * are the device's: its free memory as the backend found it before the weights went up. */
static hx_status admit_memory(hx_server *s, const hx_loaded_model *m, hx_err *err)
{
    const hx_serve_options *o = &s->opts;
    hx_fit_params fp = hx_fit_params_default();
    fp.n_ctx = s->n_ctx;
    fp.n_batch = o->n_batch > 0 ? o->n_batch : 8;
    fp.n_threads = o->n_threads;
    fp.kv_type = o->kv;
    fp.budget_bytes = o->memory_budget_gb > 0 ? (uint64_t)(o->memory_budget_gb * 1e9) : 0;
    fp.device_total_bytes = m->device_total_bytes > 0 ? (uint64_t)m->device_total_bytes : 0;
    fp.device_free_bytes = m->device_free_bytes > 0 ? (uint64_t)m->device_free_bytes : 0;
    hx_status st = hx_fit_compute(s->mf, &fp, &s->fit, err);
    if (st != HX_OK) return st;
    const hx_fit_report *f = &s->fit;
    const double mib = 1024.0 * 1024.0;
    const bool gpu = f->device_total_bytes > 0;
    char where[96] = "";
    if (gpu)
        snprintf(where, sizeof where, " on %s (%.0f MiB free of %.0f)", s->device,
                 f->device_free_bytes / mib, f->device_total_bytes / mib);
    if (!f->fits)
        return hx_err_set(err, HX_E_NOMEM,
                          "%s does not fit the memory budget of %.0f MiB%s: weights %.0f + "
                          "KV cache %.0f (%d positions x %d sequences) + scratch %.0f + embedding "
                          "rows %.0f + load %.0f + overhead %.0f = %.0f MiB. %s",
                          s->model_id, f->budget_bytes / mib, where, f->weights_bytes / mib,
                          f->kv_bytes / mib, f->n_ctx, f->n_batch, f->scratch_bytes / mib,
                          f->embed_bytes / mib, f->load_bytes / mib, f->overhead_bytes / mib,
                          f->total_bytes / mib,
                          f->max_ctx > 0 ? "A smaller --ctx or --batch fits (see hearth fit)"
                          : gpu          ? "Not even the weights fit this GPU's free memory"
                                         : "Not even the weights fit: raise --memory-budget");
    const uint64_t room = f->budget_bytes - f->total_bytes;
    const uint64_t want = (uint64_t)(o->prompt_cache_gb * 1e9);
    s->cache_bytes = want < room ? want : room;
    if (s->cache_bytes < want)
        fprintf(stderr, "hearth serve: the prompt cache gets %.0f MiB of the %.0f asked: the rest "
                        "of the memory budget\n", s->cache_bytes / mib, want / mib);
    return HX_OK;
}

/* --chat-template-file: the file's template replaces the model's. */
static hx_status own_template(hx_server *s, const char *path, hx_err *err)
{
    hx_mapped f = {0};
    hx_status st = hx_map_file(path, &f, err);
    if (st != HX_OK) return st;
    s->tpl_text = hx_alloc(f.size + 1);
    if (!s->tpl_text) {
        hx_unmap(&f);
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    }
    memcpy(s->tpl_text, f.data, f.size);
    s->tpl_text[f.size] = '\0';
    hx_unmap(&f);
    hx_err terr = {0};
    st = hx_template_compile(s->tpl_text, strlen(s->tpl_text), &s->own_tpl, &terr);
    if (st != HX_OK)
        return hx_err_set(err, st, "--chat-template-file %s: %s", path, terr.msg);
    s->tpl = s->own_tpl;
    return HX_OK;
}

static hx_status server_load(hx_server *s, hx_loaded_model *m, hx_err *err)
{
    const hx_serve_options *o = &s->opts;
    hx_status st = hx_loaded_model_open(o->model, o->device, o->n_threads,
                                        o->int8 ? HX_CPU_INT8_ACT : 0, true, m, err);
    if (st != HX_OK) return st;
    s->mf = m->mf, s->tok = m->tok, s->tpl = m->tpl, s->be = m->be;
    snprintf(s->device, sizeof s->device, "%s", m->device);
    model_id(m->path, s->model_id, sizeof s->model_id);
    s->n_ctx = o->n_ctx > 0 ? o->n_ctx : hx_sequence_default_ctx(&s->mf->hp);
    if ((st = admit_memory(s, m, err)) != HX_OK) return st;
    if (o->chat_template_file && (st = own_template(s, o->chat_template_file, err)) != HX_OK)
        return st;
    if (!s->own_tpl && s->tpl && s->mf->chat_template &&
        !(s->tpl_text = hx_strdup(s->mf->chat_template)))
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    st = hx_server_chat_open(s, s->tpl_text, s->mf->hp.arch, err);
    if (st != HX_OK) return st;
    const uint64_t block_bytes = 16 * s->fit.kv_bytes_per_token;
    /* what the budget has left after the prompt cache may hold dequantized weights (a GPU's) */
    const uint64_t slack = s->fit.budget_bytes - s->fit.total_bytes - s->cache_bytes;
    const hx_executor_params ep = {.n_ctx = s->n_ctx, .n_batch = o->n_batch,
                                   .step_tokens = o->step_tokens,
                                   .cache_blocks = (int32_t)(s->cache_bytes / block_bytes),
                                   .max_queue = o->max_queue, .kv = o->kv,
                                   .dequant_bytes = slack > INT64_MAX ? INT64_MAX : (int64_t)slack};
    if ((st = hx_executor_open(m->llm, s->tok, &ep, &s->ex, err)) != HX_OK) return st;
    hx_executor_stats es;
    hx_executor_stats_get(s->ex, &es);
    if (es.dequant_bytes > 0)
        fprintf(stderr, "hearth serve: %.0f MiB of the memory budget hold f16 copies of the "
                        "weights (steps of many rows read them instead of converting)\n",
                es.dequant_bytes / (1024.0 * 1024.0));
    s->created = (int64_t)time(NULL);
    s->max_tokens = o->max_tokens > 0 ? o->max_tokens : 512;
    hx_sampling *p = &s->sampling;
    *p = hx_model_sampling_defaults(s->mf);
    hx_sampling_apply_flags(p, &o->sampling);
    return HX_OK;
}

int hx_serve_run(const hx_serve_options *o)
{
    hx_server s = {.opts = *o, .t_start_ms = hx_now_ms()};
    hx_loaded_model m = {0};
    hx_err err = {0};
    hx_http *http = NULL;
    hx_http_config cfg = {0}; /* read by the HTTP threads until hx_http_close */

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a signal */

    hx_status st = server_load(&s, &m, &err);
    if (st == HX_OK) {
        cfg = (hx_http_config){
            .host = o->host ? o->host : "127.0.0.1", .port = o->port, .max_body = o->max_body,
            .timeout_s = o->timeout_s, .max_connections = 1024, .api_key = o->api_key,
            .routes = routes, .n_routes = (int)HX_COUNTOF(routes), .error = hx_serve_http_error,
            .ctx = &s, .log = !o->quiet};
        st = hx_http_open(&cfg, &http, &err);
    }
    if (st != HX_OK) {
        fprintf(stderr, "hearth serve: %s\n", err.msg);
        server_free(&s, &m);
        return 1;
    }
    const char *host = o->host ? o->host : "127.0.0.1";
    const bool v6 = strchr(host, ':') != NULL;
    printf("hearth serve: %s (context %d, %s%s%s) ready in %.0f ms\n", s.model_id, s.n_ctx,
           s.tpl ? "chat template" : "no chat template", s.be->mem_info ? ", " : "",
           s.be->mem_info ? s.device : "", hx_now_ms() - s.t_start_ms);
    printf("chat page and API at http://%s%s%s:%d/\n", v6 ? "[" : "",
           strcmp(host, "0.0.0.0") == 0 ? "127.0.0.1" : host, v6 ? "]" : "", hx_http_port(http));
    fflush(stdout);

    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "hearth serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    hx_http_quiesce(http);
    hx_executor_shutdown(s.ex);
    hx_http_drain(http, 5000); /* cancelled streams still send their ending and [DONE] */
    hx_http_close(http);
    server_free(&s, &m);
    return 0;
}
