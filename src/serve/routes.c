/* routes.c - the operations routes and the chat page: /health, /stats, /metrics and /.
 *
 * /stats (JSON) and /metrics (Prometheus text) report the same figures, read from one executor
 * snapshot: requests served/active/queued, tokens in and out, average prompt and decode speed,
 * KV blocks, and the process's memory; /stats also names the device and, on a GPU, its memory
 * free and in all now. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/procmem.h"
#include "serve/adapter.h"
#include "serve/serve_int.h"

typedef struct {
    hx_executor_stats ex;
    double            uptime_s, prompt_tok_s, decode_tok_s;
    int64_t           rss, peak_rss;
} figures;

static figures gather(hx_server *s)
{
    figures f;
    hx_executor_stats_get(s->ex, &f.ex);
    f.uptime_s = (hx_now_ms() - s->t_start_ms) / 1e3;
    const int64_t n_prefilled = f.ex.n_prompt_tokens - f.ex.n_cached_tokens;
    f.prompt_tok_s = f.ex.prompt_ms > 0 ? (double)n_prefilled / f.ex.prompt_ms * 1e3 : 0;
    f.decode_tok_s = f.ex.gen_ms > 0 ? (double)f.ex.n_gen_timed / f.ex.gen_ms * 1e3 : 0;
    hx_proc_memory(&f.rss, &f.peak_rss);
    return f;
}

void hx_route_health(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx, (void)req;
    hx_json_reply(HX_API_OPENAI, 200, json_pack("{s:s}", "status", "ok"), resp);
}

void hx_route_stats(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)req;
    hx_server *s = ctx;
    const figures f = gather(s);
    const hx_executor_stats *e = &f.ex;
    const hx_fit_report *fit = &s->fit;
    json_t *o = json_pack(
        "{s:s, s:f, s:i, s:i, s:{s:I, s:i, s:i}, s:{s:I, s:I, s:I}, s:f, s:f,"
        " s:{s:i, s:i, s:i, s:i}, s:I, s:I}",
        "model", s->model_id, "uptime_s", f.uptime_s, "n_ctx", (int)s->n_ctx,
        "batch", (int)fit->n_batch,
        "requests", "served", (json_int_t)e->n_served, "active", (int)e->n_active,
        "queued", (int)e->n_queued,
        "tokens", "in", (json_int_t)e->n_prompt_tokens, "cached", (json_int_t)e->n_cached_tokens,
        "out", (json_int_t)e->n_gen_tokens,
        "prompt_tok_s", f.prompt_tok_s, "decode_tok_s", f.decode_tok_s,
        "kv_blocks", "used", (int)e->kv_blocks_used,
        "free", (int)(e->kv_blocks_total - e->kv_blocks_used), "total", (int)e->kv_blocks_total,
        "cached", (int)e->kv_blocks_cached,
        "steps", (json_int_t)e->n_steps, "preempted", (json_int_t)e->n_preempted);
    /* The memory contract the server started under (hearth fit's terms) beside what is used. */
    json_t *mem = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i}",
        "rss_bytes", (json_int_t)f.rss, "peak_rss_bytes", (json_int_t)f.peak_rss,
        "budget_bytes", (json_int_t)fit->budget_bytes,
        "weights_bytes", (json_int_t)fit->weights_bytes, "kv_bytes", (json_int_t)fit->kv_bytes,
        "scratch_bytes", (json_int_t)fit->scratch_bytes, "embed_bytes", (json_int_t)fit->embed_bytes,
        "overhead_bytes", (json_int_t)fit->overhead_bytes,
        "total_bytes", (json_int_t)fit->total_bytes,
        "prompt_cache_bytes", (json_int_t)s->cache_bytes,
        "kv_bytes_per_token", (json_int_t)fit->kv_bytes_per_token, "max_ctx", (int)fit->max_ctx);
    json_t *last = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f}",
                             "prompt_tokens", (int)e->last.n_prompt,
                             "cached_tokens", (int)e->last.n_cached,
                             "generated_tokens", (int)e->last.n_gen,
                             "prompt_ms", e->last.prompt_ms, "first_token_ms", e->last.first_ms,
                             "decode_ms", e->last.gen_ms);
    if (o) json_object_set_new(o, "device", json_string(s->device));
    if (mem) /* weights kept dequantized in the budget's slack (executor.h dequant_bytes) */
        json_object_set_new(mem, "dequantized_weights_bytes", json_integer(e->dequant_bytes));
    /* A driver query that reads none of the backend's mutable state, so a connection thread may
     * ask it while the engine thread runs steps. */
    if (o && s->be && s->be->mem_info) {
        int64_t free_bytes = 0, total_bytes = 0;
        s->be->mem_info(s->be, &free_bytes, &total_bytes);
        json_object_set_new(o, "gpu_memory",
                            json_pack("{s:I, s:I}", "free_bytes", (json_int_t)free_bytes,
                                      "total_bytes", (json_int_t)total_bytes));
    }
    if (o && e->kv_window_total > 0) /* sliding layers' blocks (Gemma 2/3): window only */
        json_object_set_new(o, "kv_window_blocks",
                            json_pack("{s:i, s:i, s:i}", "used", (int)e->kv_window_used, "free",
                                      (int)(e->kv_window_total - e->kv_window_used), "total",
                                      (int)e->kv_window_total));
    if (o && mem && last) {
        json_object_set_new(o, "memory", mem);
        json_object_set_new(o, "last_request", last);
    } else {
        json_decref(o), json_decref(mem), json_decref(last);
        o = NULL;
    }
    hx_json_reply(HX_API_OPENAI, 200, o, resp);
}

void hx_route_metrics(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)req;
    hx_server *s = ctx;
    const figures f = gather(s);
    const hx_executor_stats *e = &f.ex;
    const struct {
        const char *name, *type, *help;
        double      value;
    } m[] = {
        {"hearth_uptime_seconds", "gauge", "Seconds since the server started", f.uptime_s},
        {"hearth_requests_served_total", "counter", "Completions finished", (double)e->n_served},
        {"hearth_requests_active", "gauge", "Completions running", e->n_active},
        {"hearth_requests_queued", "gauge", "Completions waiting", e->n_queued},
        {"hearth_prompt_tokens_total", "counter", "Prompt tokens of finished completions",
         (double)e->n_prompt_tokens},
        {"hearth_cached_tokens_total", "counter", "Prompt tokens served from the KV cache",
         (double)e->n_cached_tokens},
        {"hearth_generated_tokens_total", "counter", "Tokens generated", (double)e->n_gen_tokens},
        {"hearth_prompt_tokens_per_second", "gauge", "Average prefill speed", f.prompt_tok_s},
        {"hearth_decode_tokens_per_second", "gauge", "Average decode speed", f.decode_tok_s},
        {"hearth_kv_blocks_used", "gauge", "KV cache blocks in use", e->kv_blocks_used},
        {"hearth_kv_blocks_free", "gauge", "KV cache blocks free",
         e->kv_blocks_total - e->kv_blocks_used},
        {"hearth_memory_rss_bytes", "gauge", "Resident memory of the process", (double)f.rss},
        {"hearth_memory_peak_rss_bytes", "gauge", "Peak resident memory", (double)f.peak_rss},
    };
    hx_http_buf b = {0};
    bool ok = true;
    for (size_t i = 0; i < HX_COUNTOF(m); i++)
        ok = ok && hx_http_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", m[i].name,
                                      m[i].help, m[i].name, m[i].type, m[i].name, m[i].value);
    resp->status = ok ? 200 : 500;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = b.data;
    resp->body_len = b.len;
}

void hx_route_page(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx, (void)req;
    resp->body = hx_alloc(hx_web_index_html_len);
    resp->status = resp->body ? 200 : 500;
    if (!resp->body) return;
    memcpy(resp->body, hx_web_index_html, hx_web_index_html_len);
    resp->body_len = hx_web_index_html_len;
    resp->content_type = "text/html; charset=utf-8";
}
