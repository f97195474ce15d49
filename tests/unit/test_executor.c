/* test_executor.c - the engine thread's FIFO of completions: events in order with DONE last, a
 * full queue refused, cancellation of queued and running jobs, shutdown, and grammar-constrained
 * completions. Runs the starter model (SmolLM2-135M) for a few tokens; skips with a message when
 * it is not installed. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "engine/executor.h"
#include "engine/model_load.h"
#include "sample/json_schema.h"

typedef struct {
    hx_loaded_model m;
    hx_executor    *ex;
} rig;

static void rig_free(rig *r)
{
    hx_executor_close(r->ex);
    hx_loaded_model_close(&r->m);
}

/* Opens the starter model with an executor of max_queue; false (after a skip line) when the
 * model is absent. */
static bool rig_open_with(rig *r, const hx_executor_params *p);

/* One job at a time, no prefix cache: what the queueing cases assert about. */
static bool rig_open(rig *r, int32_t max_queue)
{
    const hx_executor_params p = {.n_ctx = 256, .n_batch = 1, .max_queue = max_queue};
    return rig_open_with(r, &p);
}

static bool rig_open_with(rig *r, const hx_executor_params *p)
{
    memset(r, 0, sizeof *r);
    const char *path = check_starter_model();
    if (!path) return false;
    hx_err err = {0};
    hx_status st = hx_loaded_model_open(path, NULL, 2, 0, false, &r->m, &err);
    if (st == HX_OK) st = hx_executor_open(r->m.llm, r->m.tok, p, &r->ex, &err);
    if (st != HX_OK) {
        fprintf(stderr, "cannot open the starter model: %s\n", err.msg);
        abort();
    }
    return true;
}

/* A completion of text (tokenized with BOS) for max_tokens, greedy, end-of-turn ignored. */
static hx_completion *completion(const rig *r, const char *text, int32_t max_tokens)
{
    hx_completion *c = hx_completion_new();
    hx_tok_ids ids = {0};
    hx_err err = {0};
    HX_ASSERT(c && hx_tokenizer_encode(r->m.tok, text, strlen(text), HX_TOK_ADD_SPECIAL, &ids, &err) == HX_OK);
    c->prompt = hx_arena_alloc(&c->arena, ids.n * sizeof(int32_t), 0);
    memcpy(c->prompt, ids.ids, ids.n * sizeof(int32_t));
    c->n_prompt = (int32_t)ids.n;
    hx_tok_ids_free(&ids);
    c->gp.max_tokens = max_tokens;
    c->gp.sampling.temperature = 0;
    c->gp.ignore_eos = true;
    return c;
}

/* Reads events until DONE (at most 100 s: the sanitizer build is slow); returns DONE, with the
 * TEXT events counted. */
static hx_event read_all(hx_job *j, int *n_text, char *text, size_t cap)
{
    hx_event ev;
    size_t len = 0;
    *n_text = 0;
    for (int waited = 0; waited < 1000; waited++) {
        if (!hx_job_next(j, &ev, 100)) continue;
        if (ev.kind == HX_EVENT_DONE) return ev;
        (*n_text)++;
        if (text && len + ev.len < cap) memcpy(text + len, ev.text, ev.len), len += ev.len, text[len] = '\0';
        hx_event_clear(&ev);
    }
    return (hx_event){.kind = 0, .status = HX_E_INVALID};
}

/* Waits for the job's first TEXT event: from then on it is the running job. */
static bool first_text(hx_job *j)
{
    hx_event ev;
    for (int waited = 0; waited < 1000; waited++) {
        if (!hx_job_next(j, &ev, 100)) continue;
        const bool text = ev.kind == HX_EVENT_TEXT;
        hx_event_clear(&ev);
        return text;
    }
    return false;
}

static int test_events_arrive_in_order_and_done_is_last(void)
{
    rig r;
    if (!rig_open(&r, 4)) return 0;
    hx_job *j = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "The capital of France is", 6), &j, &err), HX_OK);
    char text[512] = "";
    int n_text;
    const hx_event done = read_all(j, &n_text, text, sizeof text);
    CHECK_EQ(done.kind, HX_EVENT_DONE);
    CHECK_EQ(done.status, HX_OK);
    CHECK_EQ(done.stats.n_gen, 6);
    CHECK_EQ(done.stats.finish, HX_FINISH_LENGTH);
    CHECK(n_text >= 1 && strstr(text, "Paris") != NULL);
    hx_event ev;
    CHECK(!hx_job_next(j, &ev, 0)); /* nothing after DONE */
    hx_job_release(j);
    hx_executor_stats s;
    hx_executor_stats_get(r.ex, &s);
    CHECK_EQ(s.n_served, 1);
    CHECK_EQ(s.n_gen_tokens, 6);
    CHECK(s.kv_blocks_total > 0);
    CHECK_EQ(s.kv_blocks_used, 0); /* no prefix cache here: every block went back */
    rig_free(&r);
    return 0;
}

static int test_full_queue_is_busy(void)
{
    rig r;
    if (!rig_open(&r, 1)) return 0;
    hx_job *a = NULL, *b = NULL, *c = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Once upon a time", 200), &a, &err), HX_OK);
    CHECK(first_text(a));
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Hello", 2), &b, &err), HX_OK);
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Hello", 2), &c, &err), HX_E_BUSY);
    CHECK(strstr(err.msg, "max-queue") != NULL);
    hx_job_release(a); /* cancels a; b then runs */
    int n;
    const hx_event done = read_all(b, &n, NULL, 0);
    CHECK_EQ(done.status, HX_OK);
    CHECK_EQ(done.stats.n_gen, 2);
    hx_job_release(b);
    rig_free(&r);
    return 0;
}

static int test_cancelled_while_queued_never_runs(void)
{
    rig r;
    if (!rig_open(&r, 4)) return 0;
    hx_job *a = NULL, *b = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Once upon a time", 200), &a, &err), HX_OK);
    CHECK(first_text(a));
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Hello", 8), &b, &err), HX_OK);
    hx_job_cancel(b);
    hx_job_release(a);
    int n;
    const hx_event done = read_all(b, &n, NULL, 0);
    CHECK_EQ(done.status, HX_E_CANCELLED);
    CHECK_EQ(done.stats.n_gen, 0);
    CHECK_EQ(n, 0);
    CHECK(done.stats.prompt_ms == 0); /* not even prefilled */
    hx_job_release(b);
    rig_free(&r);
    return 0;
}

static int test_cancel_stops_a_running_job_within_a_step(void)
{
    rig r;
    if (!rig_open(&r, 4)) return 0;
    hx_job *a = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Once upon a time", 200), &a, &err), HX_OK);
    CHECK(first_text(a));
    hx_job_cancel(a);
    int n;
    const hx_event done = read_all(a, &n, NULL, 0);
    CHECK_EQ(done.status, HX_E_CANCELLED);
    CHECK_EQ(done.stats.finish, HX_FINISH_CANCELLED);
    /* Text events already queued when the flag was set may follow, but generation stops at
     * the next step: far short of the 200 tokens asked for. */
    CHECK(done.stats.n_gen < 20);
    hx_job_release(a);
    rig_free(&r);
    return 0;
}

static int test_shutdown_ends_running_and_queued_jobs(void)
{
    rig r;
    if (!rig_open(&r, 4)) return 0;
    hx_job *a = NULL, *b = NULL, *c = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Once upon a time", 200), &a, &err), HX_OK);
    CHECK(first_text(a));
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Hello", 100), &b, &err), HX_OK);
    hx_executor_shutdown(r.ex);
    int n;
    CHECK_EQ(read_all(a, &n, NULL, 0).status, HX_E_CANCELLED);
    CHECK_EQ(read_all(b, &n, NULL, 0).status, HX_E_CANCELLED);
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Hello", 2), &c, &err), HX_E_CANCELLED);
    hx_job_release(a);
    hx_job_release(b);
    rig_free(&r);
    return 0;
}

/* ---- the scheduler ---- */

#define N_JOBS 4
static const char *const prompts[N_JOBS] = {
    "Once upon a time", "The capital of France is", "def fibonacci(n):", "My favourite colour",
};

/* Runs the N_JOBS prompts on r, all submitted at once (together) or one after the other, and
 * writes each one's text to out[i]. seed 0: greedy; else sampled at temperature 0.9. */
static int run_jobs(rig *r, bool together, uint64_t seed, int32_t max_tokens,
                    char out[N_JOBS][1024])
{
    hx_job *jobs[N_JOBS] = {0};
    hx_err err = {0};
    for (int i = 0; i < N_JOBS; i++) {
        hx_completion *c = completion(r, prompts[i], max_tokens);
        if (seed) c->gp.sampling.temperature = 0.9f, c->gp.sampling.seed = seed + (uint64_t)i;
        CHECK_EQ(hx_executor_submit(r->ex, c, &jobs[i], &err), HX_OK);
        if (!together) {
            int n;
            out[i][0] = '\0';
            CHECK_EQ(read_all(jobs[i], &n, out[i], 1024).status, HX_OK);
            hx_job_release(jobs[i]);
        }
    }
    for (int i = 0; together && i < N_JOBS; i++) {
        int n;
        out[i][0] = '\0';
        const hx_event done = read_all(jobs[i], &n, out[i], 1024);
        CHECK_EQ(done.status, HX_OK);
        CHECK_EQ(done.stats.n_gen, max_tokens);
        hx_job_release(jobs[i]);
    }
    return 0;
}

/* A request's output is the same whether it ran alone or among others, greedy and seeded. */
static int test_batched_outputs_equal_alone_outputs(void)
{
    rig r;
    const hx_executor_params p = {.n_ctx = 256, .n_batch = N_JOBS, .max_queue = 8};
    if (!rig_open_with(&r, &p)) return 0;
    for (uint64_t seed = 0; seed <= 7; seed += 7) {
        static char alone[N_JOBS][1024], together[N_JOBS][1024];
        hx_executor_stats s0, s1;
        CHECK_EQ(run_jobs(&r, false, seed, 12, alone), 0);
        hx_executor_stats_get(r.ex, &s0);
        CHECK_EQ(run_jobs(&r, true, seed, 12, together), 0);
        hx_executor_stats_get(r.ex, &s1);
        /* Together, 4 jobs of 12 tokens share their steps: about 12, far from 4 x 12. */
        CHECK(s1.n_steps - s0.n_steps < 2 * 12);
        for (int i = 0; i < N_JOBS; i++) {
            if (strcmp(alone[i], together[i]) != 0)
                CHECK_FAIL("seed %llu, prompt %d: alone \"%s\" vs batched \"%s\"",
                           (unsigned long long)seed, i, alone[i], together[i]);
        }
    }
    rig_free(&r);
    return 0;
}

/* ---- a backend that draws tokens (the CPU one, given a `sample` op here) ---- */

static int64_t n_drawn, n_skipped;

/* What backend.h says `sample` does, written plainly (the best by insertion, the edits in f32,
 * log_z in double as the host's sampler has it): the oracle for a backend's op. */
static void ref_draw(float *x, int64_t n_vocab, const hx_sample_row *r, hx_sample_out *o)
{
    enum { K_MAX = HX_SAMPLE_TOP_K };
    for (int32_t j = 0; j < r->n_edits; j++) {
        const hx_sample_edit *e = &r->edits[j];
        float v = x[e->id] + e->bias;
        if (e->count > 0) {
            v = v > 0 ? v / r->repeat_penalty : v * r->repeat_penalty;
            v -= r->presence_penalty + r->frequency_penalty * (float)e->count;
        }
        x[e->id] = v;
    }
    int32_t id[K_MAX] = {0};
    float v[K_MAX] = {0};
    const int64_t k_want = r->temperature > 0 ? r->top_k : 1;
    const int64_t s_want = r->logprobs && r->n_top > k_want ? r->n_top : k_want;
    const int k = (int)(k_want < n_vocab ? k_want : n_vocab);
    const int sel = (int)(s_want < n_vocab ? s_want : n_vocab);
    int n = 0;
    for (int32_t i = 0; i < n_vocab; i++) { /* ties: the lower id stays ahead */
        if (n == sel && !(x[i] > v[sel - 1])) continue;
        int j = n < sel ? n++ : sel - 1;
        for (; j > 0 && x[i] > v[j - 1]; j--) v[j] = v[j - 1], id[j] = id[j - 1];
        v[j] = x[i], id[j] = i;
    }
    int chosen = 0;
    if (r->temperature > 0) {
        double w[K_MAX], total = 0.0, sum = 0.0;
        for (int i = 0; i < k; i++) total += w[i] = exp((double)(v[i] - v[0]) / r->temperature);
        int keep = k;
        double acc = 0.0;
        for (int i = 0; r->top_p < 1.0f && i < k; i++)
            if ((acc += (float)w[i] / total) >= r->top_p) {
                keep = i + 1;
                break;
            }
        int kept = 0;
        while (kept < keep && (float)w[kept] >= r->min_p) kept++;
        keep = kept > 0 ? kept : 1;
        for (int i = 0; i < keep; i++) sum += (float)w[i];
        double rem = r->u * sum;
        chosen = keep - 1;
        for (int i = 0; i < keep; i++)
            if ((rem -= (float)w[i]) < 0) {
                chosen = i;
                break;
            }
    }
    o->token = id[chosen];
    if (!r->logprobs) return;
    double z = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) z += exp((double)(x[i] - v[0]));
    const float log_z = v[0] + (float)log(z);
    o->logprob = v[chosen] - log_z;
    for (int j = 0; j < r->n_top && j < sel; j++)
        o->top_ids[j] = id[j], o->top_logprobs[j] = v[j] - log_z;
}

static void ref_sample(hx_backend *be, float *logits, int64_t n, int64_t n_vocab,
                       const hx_sample_row *rows, hx_sample_out *out)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) {
        if (rows[i].top_k <= 0) {
            n_skipped++;
            continue;
        }
        ref_draw(logits + i * n_vocab, n_vocab, &rows[i], &out[i]);
        n_drawn++;
    }
}

/* The tokens and log-probability records of one completion run alone. */
static int run_recorded(rig *r, hx_completion *c, int32_t *ids, float *lps, int32_t *n)
{
    hx_job *j = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r->ex, c, &j, &err), HX_OK);
    *n = 0;
    hx_event ev;
    for (int waited = 0; waited < 1000; waited++) {
        if (!hx_job_next(j, &ev, 100)) continue;
        if (ev.kind == HX_EVENT_DONE) break;
        if (ev.has_lp && *n < 64) {
            ids[*n] = ev.lp.token;
            lps[*n * 4] = ev.lp.logprob;
            for (int a = 0; a < 3; a++) lps[*n * 4 + 1 + a] = ev.lp.top_logprobs[a];
            (*n)++;
        }
        hx_event_clear(&ev);
    }
    CHECK_EQ(ev.kind, HX_EVENT_DONE);
    CHECK_EQ(ev.status, HX_OK);
    hx_job_release(j);
    return 0;
}

/* With a backend that draws tokens, every output is what the host's sampler gives (greedy and
 * seeded, alone and batched), and so are the tokens and log-probabilities of a job with a
 * logit bias and penalties. */
static int test_backend_draws_equal_host_samples(void)
{
    rig r;
    const hx_executor_params p = {.n_ctx = 256, .n_batch = N_JOBS, .max_queue = 8};
    if (!rig_open_with(&r, &p)) return 0;
    static char host[N_JOBS][1024], drawn[N_JOBS][1024];
    for (uint64_t seed = 0; seed <= 7; seed += 7)
        for (int together = 0; together < 2; together++) {
            r.m.be->sample = NULL;
            CHECK_EQ(run_jobs(&r, together, seed, 16, host), 0);
            r.m.be->sample = ref_sample;
            n_drawn = 0;
            CHECK_EQ(run_jobs(&r, together, seed, 16, drawn), 0);
            CHECK(n_drawn >= N_JOBS * 15);
            for (int i = 0; i < N_JOBS; i++)
                if (strcmp(host[i], drawn[i]) != 0)
                    CHECK_FAIL("seed %llu, prompt %d%s: host \"%s\" vs drawn \"%s\"",
                               (unsigned long long)seed, i, together ? " (batched)" : "",
                               host[i], drawn[i]);
        }
    int32_t ids[2][64], n[2];
    float lps[2][64 * 4];
    static const int32_t bias_ids[2] = {198, 30};
    static const float bias_values[2] = {2.5f, -1.0f};
    for (int side = 0; side < 2; side++) {
        r.m.be->sample = side ? ref_sample : NULL;
        n_drawn = 0;
        hx_completion *c = completion(&r, prompts[1], 12);
        c->logprobs = true;
        hx_sampling *sp = &c->gp.sampling;
        sp->temperature = 0.7f, sp->seed = 3, sp->n_logprobs = 3, sp->repeat_penalty = 1.3f;
        sp->presence_penalty = 0.4f, sp->frequency_penalty = 0.2f;
        sp->bias_ids = bias_ids, sp->bias_values = bias_values, sp->n_bias = 2;
        CHECK_EQ(run_recorded(&r, c, ids[side], lps[side], &n[side]), 0);
        CHECK(side == 0 || n_drawn == 12);
    }
    CHECK_EQ(n[0], 12);
    CHECK_EQ(n[1], 12);
    CHECK(memcmp(ids[0], ids[1], (size_t)n[0] * sizeof ids[0][0]) == 0);
    CHECK(memcmp(lps[0], lps[1], (size_t)n[0] * 4 * sizeof(float)) == 0);
    r.m.be->sample = NULL;
    rig_free(&r);
    return 0;
}

/* ---- a backend that starts steps ahead (sample_start) ----
 *
 * As a GPU does it: sample_start draws now (on the CPU the logits are final) but the draws reach
 * `out` only at sample_finish (until then it holds a poison token, so an engine that read it
 * early would fail), and the next step's embed resolves HX_TOKEN_DRAWN ids from the newest
 * start. */

static struct {
    hx_sample_out  got[2][HX_SAMPLE_AHEAD_ROWS];
    hx_sample_out *out[2];
    int64_t        n[2];
    int            head, count;
    int32_t        newest[HX_SAMPLE_AHEAD_ROWS];
} ahd;
static int64_t n_started, n_fed_ahead, n_misuse;
static void (*cpu_embed)(hx_backend *, const hx_tensor *, const int32_t *, int64_t, float *);

static void ref_sample_start(hx_backend *be, float *logits, int64_t n, int64_t n_vocab,
                             const hx_sample_row *rows, hx_sample_out *out)
{
    (void)be;
    if (ahd.count == 2 || n < 1 || n > HX_SAMPLE_AHEAD_ROWS) {
        n_misuse++;
        return;
    }
    const int k = (ahd.head + ahd.count++) % 2;
    for (int64_t i = 0; i < n; i++) {
        if (rows[i].top_k <= 0) n_misuse++;
        ref_draw(logits + i * n_vocab, n_vocab, &rows[i], &ahd.got[k][i]);
        ahd.newest[i] = ahd.got[k][i].token;
        out[i].token = -7; /* not yet */
        n_drawn++;
    }
    ahd.out[k] = out, ahd.n[k] = n;
    n_started++;
}

static void ref_sample_finish(hx_backend *be)
{
    (void)be;
    if (ahd.count == 0) {
        n_misuse++;
        return;
    }
    const int k = ahd.head;
    memcpy(ahd.out[k], ahd.got[k], (size_t)ahd.n[k] * sizeof ahd.got[k][0]);
    ahd.head = (k + 1) % 2, ahd.count--;
}

static void ref_embed(hx_backend *be, const hx_tensor *w, const int32_t *ids, int64_t n_tok,
                      float *out)
{
    static int32_t real[4096];
    HX_ASSERT(n_tok <= 4096);
    for (int64_t t = 0; t < n_tok; t++) {
        real[t] = ids[t];
        if (ids[t] < 0) real[t] = ahd.newest[-1 - ids[t]], n_fed_ahead++;
    }
    cpu_embed(be, w, real, n_tok, out);
}

/* The CPU backend of r drawing (ahead: starting steps ahead too), or not at all. */
static void set_draws(rig *r, bool draw, bool ahead)
{
    hx_backend *be = r->m.be;
    if (!cpu_embed) cpu_embed = be->embed;
    be->sample = draw ? ref_sample : NULL;
    be->sample_start = ahead ? ref_sample_start : NULL;
    be->sample_finish = ahead ? ref_sample_finish : NULL;
    be->embed = ahead ? ref_embed : cpu_embed;
    n_started = n_fed_ahead = n_misuse = n_drawn = 0;
}

static hx_completion *chat_completion(const rig *r, const char *text, int32_t max_tokens,
                                      hx_grammar *g, const hx_grammar_vocab *v);

/* A chat completion that ends by itself: at the end of its turn, at a stop string, or at
 * max_tokens, sampled with seed (0: greedy). */
static hx_completion *ending_completion(const rig *r, int i, uint64_t seed)
{
    static const char *const ask[4] = {
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nCount from one to ten in words.<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    };
    static const char *const stop[2] = {"five", " the "};
    hx_completion *c = chat_completion(r, ask[i], i == 3 ? 9 : 80, NULL, NULL);
    c->gp.sampling.temperature = seed ? 0.8f : 0.0f;
    c->gp.sampling.seed = seed + (uint64_t)i;
    c->logprobs = i == 2;
    c->gp.sampling.n_logprobs = 2;
    if (i == 1) c->gp.stop = stop, c->gp.n_stop = 2;
    return c;
}

/* The text, finish reason and token counts of ending completion i (its job j). */
static int read_ending(hx_job *j, char *out, hx_gen_stats *st)
{
    int n;
    out[0] = '\0';
    const hx_event done = read_all(j, &n, out, 1024);
    CHECK_EQ(done.status, HX_OK);
    *st = done.stats;
    hx_job_release(j);
    return 0;
}

/* The four ending completions, one after the other or all submitted at once. */
static int run_ending(rig *r, bool together, uint64_t seed, char out[N_JOBS][1024],
                      hx_gen_stats st[N_JOBS])
{
    hx_job *jobs[N_JOBS] = {0};
    hx_err err = {0};
    for (int i = 0; i < N_JOBS; i++) {
        CHECK_EQ(hx_executor_submit(r->ex, ending_completion(r, i, seed), &jobs[i], &err), HX_OK);
        if (!together) CHECK_EQ(read_ending(jobs[i], out[i], &st[i]), 0);
    }
    for (int i = 0; together && i < N_JOBS; i++) CHECK_EQ(read_ending(jobs[i], out[i], &st[i]), 0);
    return 0;
}

static hx_event run_one(rig *r, hx_completion *c, char *text, size_t cap);

/* Steps started ahead of the host give exactly the host sampler's output, greedy and seeded,
 * alone and batched, for jobs that end at their end of turn, at a stop string (the row started
 * ahead of it thrown away) and at max_tokens; the draws are read only after sample_finish; no
 * KV block is left held; and a job with penalties, whose next draw depends on the token in
 * flight, is never run ahead. */
static int test_steps_started_ahead_equal_host_samples(void)
{
    rig r;
    const hx_executor_params p = {.n_ctx = 256, .n_batch = N_JOBS, .max_queue = 8};
    if (!rig_open_with(&r, &p)) return 0;
    static char host[N_JOBS][1024], ahead[N_JOBS][1024];
    hx_gen_stats hs[N_JOBS], as[N_JOBS];
    for (uint64_t seed = 0; seed <= 5; seed += 5)
        for (int together = 0; together < 2; together++) {
            memset(host, 0, sizeof host), memset(ahead, 0, sizeof ahead);
            set_draws(&r, false, false);
            CHECK_EQ(run_ending(&r, together, seed, host, hs), 0);
            set_draws(&r, true, true);
            CHECK_EQ(run_ending(&r, together, seed, ahead, as), 0);
            CHECK_EQ(n_misuse, 0);
            CHECK(n_started > 0 && n_fed_ahead > 0);
            for (int i = 0; i < N_JOBS; i++) {
                if (strcmp(host[i], ahead[i]) != 0)
                    CHECK_FAIL("seed %llu, prompt %d%s: host \"%s\" vs ahead \"%s\"",
                               (unsigned long long)seed, i, together ? " (batched)" : "",
                               host[i], ahead[i]);
                CHECK_EQ(hs[i].finish, as[i].finish);
                CHECK_EQ(hs[i].n_gen, as[i].n_gen);
                CHECK_EQ(hs[i].stop_index, as[i].stop_index);
            }
            hx_executor_stats s;
            hx_executor_stats_get(r.ex, &s);
            CHECK_EQ(s.kv_blocks_used, 0);
        }
    CHECK(hs[1].stop_index >= 0); /* the cases above did end each way */
    CHECK_EQ(hs[3].finish, HX_FINISH_LENGTH);
    CHECK_EQ(hs[0].finish, HX_FINISH_STOP);
    /* Penalties: drawn on the device, never ahead. */
    set_draws(&r, true, true);
    hx_completion *c = completion(&r, prompts[1], 12);
    c->gp.sampling.repeat_penalty = 1.3f;
    static char text[1024];
    const hx_event done = run_one(&r, c, text, sizeof text);
    CHECK_EQ(done.status, HX_OK);
    CHECK_EQ(done.stats.n_gen, 12);
    CHECK(n_drawn == 12 && n_started == 0 && n_fed_ahead == 0);
    set_draws(&r, false, false);
    rig_free(&r);
    return 0;
}

static bool append_text(const char *text, size_t len, const hx_token_logprobs *lp, void *user)
{
    (void)lp;
    char *out = user;
    const size_t have = strlen(out);
    if (have + len < 1024) memcpy(out + have, text, len), out[have + len] = '\0';
    return true;
}

/* hx_sequence_generate (a generation alone, as `hearth run` makes it) started ahead: the same
 * text, finish and counts as the host sampler's, for each way of ending. */
static int test_generation_alone_started_ahead_equals_host_samples(void)
{
    rig r;
    const hx_executor_params p = {.n_ctx = 256, .n_batch = 1, .max_queue = 8};
    if (!rig_open_with(&r, &p)) return 0;
    hx_sequence *seq = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sequence_init(r.m.llm, r.m.tok, 256, HX_KV_F16, &seq, &err), HX_OK);
    for (uint64_t seed = 0; seed <= 5; seed += 5)
        for (int i = 0; i < N_JOBS; i++) {
            static char text[2][1024];
            hx_gen_stats st[2];
            for (int side = 0; side < 2; side++) {
                set_draws(&r, side == 1, side == 1);
                hx_completion *c = ending_completion(&r, i, seed);
                text[side][0] = '\0';
                CHECK_EQ(hx_sequence_generate(seq, c->prompt, c->n_prompt, &c->gp, append_text,
                                              text[side], &st[side], &err),
                         HX_OK);
                hx_completion_free(c);
                CHECK_EQ(n_misuse, 0);
                CHECK(side == 0 || st[1].n_gen < 2 || n_fed_ahead > 0);
            }
            CHECK_STR(text[0], text[1]);
            CHECK_EQ(st[0].finish, st[1].finish);
            CHECK_EQ(st[0].n_gen, st[1].n_gen);
            CHECK_EQ(st[0].stop_index, st[1].stop_index);
        }
    set_draws(&r, false, false);
    hx_sequence_free(seq);
    rig_free(&r);
    return 0;
}

/* A pool too small for every job at once: the newest is preempted, its KV recomputed later,
 * and every job's text is still exactly what it is alone. */
static int test_preempted_jobs_lose_and_repeat_nothing(void)
{
    rig r;
    /* Each job needs ceil((~6 + 40) / 16) = 3 blocks; 4 of them need 12: give them 7. */
    const hx_executor_params p = {.n_ctx = 256, .n_batch = N_JOBS, .max_queue = 8, .kv_blocks = 7};
    if (!rig_open_with(&r, &p)) return 0;
    static char alone[N_JOBS][1024], together[N_JOBS][1024];
    CHECK_EQ(run_jobs(&r, false, 0, 40, alone), 0);
    CHECK_EQ(run_jobs(&r, true, 0, 40, together), 0);
    hx_executor_stats s;
    hx_executor_stats_get(r.ex, &s);
    CHECK(s.n_preempted > 0);
    for (int i = 0; i < N_JOBS; i++)
        if (strcmp(alone[i], together[i]) != 0)
            CHECK_FAIL("prompt %d: alone \"%s\" vs preempted \"%s\"", i, alone[i], together[i]);
    CHECK_EQ(s.kv_blocks_used, 0);
    rig_free(&r);
    return 0;
}

/* A long prompt is prefilled in step-sized chunks while a running job keeps decoding. */
static int test_long_prompt_does_not_stall_a_running_job(void)
{
    rig r;
    const hx_executor_params p = {.n_ctx = 512, .n_batch = 2, .step_tokens = 32, .max_queue = 8};
    if (!rig_open_with(&r, &p)) return 0;
    hx_job *a = NULL, *b = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, "Once upon a time", 200), &a, &err), HX_OK);
    CHECK(first_text(a));
    static char text[8192];
    text[0] = '\0';
    for (int i = 0; i < 12; i++) strcat(text, "The quick brown fox jumps over the lazy dog. ");
    CHECK_EQ(hx_executor_submit(r.ex, completion(&r, text, 4), &b, &err), HX_OK);
    /* Until b's first text, count a's: b's ~120-token prompt takes ~4 chunks of 32 rows, and a
     * gets a token in each of those steps. */
    int a_tokens = 0;
    hx_event ev;
    for (int waited = 0; waited < 2000; waited++) {
        if (hx_job_next(b, &ev, 0)) {
            const bool text_b = ev.kind == HX_EVENT_TEXT;
            hx_event_clear(&ev);
            if (text_b) break;
        }
        if (hx_job_next(a, &ev, 50)) {
            a_tokens += ev.kind == HX_EVENT_TEXT;
            hx_event_clear(&ev);
        }
    }
    CHECK(a_tokens >= 3);
    hx_job_release(a);
    hx_job_release(b);
    rig_free(&r);
    return 0;
}

/* A finished prompt's blocks stay in the prefix cache: the same prompt again starts after them. */
static int test_prefix_cache_serves_a_repeated_prompt(void)
{
    rig r;
    const hx_executor_params p = {.n_ctx = 512, .n_batch = 2, .cache_blocks = 64, .max_queue = 8};
    if (!rig_open_with(&r, &p)) return 0;
    static char text[4096];
    text[0] = '\0';
    for (int i = 0; i < 8; i++) strcat(text, "The quick brown fox jumps over the lazy dog. ");
    hx_err err = {0};
    hx_event first = {0}, second = {0};
    for (int k = 0; k < 2; k++) {
        hx_job *j = NULL;
        CHECK_EQ(hx_executor_submit(r.ex, completion(&r, text, 4), &j, &err), HX_OK);
        int n;
        *(k ? &second : &first) = read_all(j, &n, NULL, 0);
        hx_job_release(j);
    }
    CHECK_EQ(first.stats.n_cached, 0);
    /* All whole blocks but the one holding the last prompt token, which is always recomputed. */
    CHECK_EQ(second.stats.n_cached, (second.stats.n_prompt - 1) / 16 * 16);
    CHECK(second.stats.n_cached >= second.stats.n_prompt * 8 / 10);
    hx_executor_stats s;
    hx_executor_stats_get(r.ex, &s);
    CHECK(s.kv_blocks_cached > 0 && s.kv_blocks_used == s.kv_blocks_cached);
    rig_free(&r);
    return 0;
}

/* ---- structured output ---- */

/* A chat prompt the starter model answers in prose when free. */
static const char k_capital[] =
    "<|im_start|>user\nWhat is the capital of France? Answer in one sentence, then give a JSON "
    "object with the key capital.<|im_end|>\n<|im_start|>assistant\n";

/* A greedy completion of the chat prompt (special tokens parsed), ending at the end of the turn;
 * with g (a reference handed to the completion) constrained by it over v. */
static hx_completion *chat_completion(const rig *r, const char *text, int32_t max_tokens,
                                      hx_grammar *g, const hx_grammar_vocab *v)
{
    hx_completion *c = hx_completion_new();
    hx_tok_ids ids = {0};
    hx_err err = {0};
    HX_ASSERT(c && hx_tokenizer_encode(r->m.tok, text, strlen(text), HX_TOK_PARSE_SPECIAL, &ids,
                                       &err) == HX_OK);
    c->prompt = hx_arena_alloc(&c->arena, ids.n * sizeof(int32_t), 0);
    memcpy(c->prompt, ids.ids, ids.n * sizeof(int32_t));
    c->n_prompt = (int32_t)ids.n;
    hx_tok_ids_free(&ids);
    c->gp.max_tokens = max_tokens;
    c->gp.sampling.temperature = 0;
    c->grammar = g;
    c->gp.sampling.grammar = g;
    c->gp.sampling.grammar_vocab = v;
    return c;
}

/* Runs c to the end; its DONE event, and the text in text[cap]. */
static hx_event run_one(rig *r, hx_completion *c, char *text, size_t cap)
{
    hx_job *j = NULL;
    hx_err err = {0};
    text[0] = '\0';
    if (hx_executor_submit(r->ex, c, &j, &err) != HX_OK) return (hx_event){.status = HX_E_INVALID};
    int n;
    const hx_event done = read_all(j, &n, text, cap);
    hx_job_release(j);
    return done;
}

static int check_json_object(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) CHECK_FAIL("not JSON (%s): %s", je.text, text);
    CHECK(json_is_object(j));
    json_decref(j);
    return 0;
}

/* An executor running two jobs at once, the JSON-object grammar and the starter model's vocab;
 * false (after a skip line) without the model. */
static bool json_rig(rig *r, hx_grammar **g, hx_grammar_vocab **v)
{
    const hx_executor_params p = {.n_ctx = 256, .n_batch = 2, .max_queue = 4};
    if (!rig_open_with(r, &p)) return false;
    hx_err err = {0};
    const char *text = hx_json_object_grammar();
    HX_ASSERT(hx_grammar_compile(text, strlen(text), g, &err) == HX_OK);
    HX_ASSERT(hx_grammar_vocab_from_tokenizer(r->m.tok, v, &err) == HX_OK);
    return true;
}

static int test_json_grammar_makes_greedy_output_a_json_object(void)
{
    rig r;
    hx_grammar *g;
    hx_grammar_vocab *v;
    if (!json_rig(&r, &g, &v)) return 0;
    static char free_text[8192], text[8192], both[2][8192];
    hx_event done = run_one(&r, chat_completion(&r, k_capital, 200, NULL, NULL), free_text,
                            sizeof free_text);
    CHECK_EQ(done.status, HX_OK);
    printf("free: %s\n", free_text);
    CHECK(json_loads(free_text, 0, NULL) == NULL); /* prose: the grammar is what makes it JSON */
    done = run_one(&r, chat_completion(&r, k_capital, 200, hx_grammar_retain(g), v), text,
                   sizeof text);
    printf("json: %s\n", text);
    CHECK_EQ(done.status, HX_OK);
    CHECK_EQ(done.stats.finish, HX_FINISH_STOP);
    CHECK_EQ(check_json_object(text), 0);
    /* A constrained and a free request in one batch: each as it is alone. */
    hx_executor_stats st;
    hx_executor_stats_get(r.ex, &st);
    const int64_t steps_alone = st.n_steps;
    hx_job *j[2] = {NULL, NULL};
    hx_err err = {0};
    CHECK_EQ(hx_executor_submit(r.ex, chat_completion(&r, k_capital, 200, g, v), &j[0], &err),
             HX_OK);
    CHECK_EQ(hx_executor_submit(r.ex, chat_completion(&r, k_capital, 200, NULL, NULL), &j[1],
                                &err), HX_OK);
    for (int k = 0; k < 2; k++) {
        int n;
        CHECK_EQ(read_all(j[k], &n, both[k], sizeof both[k]).status, HX_OK);
        hx_job_release(j[k]);
    }
    CHECK_STR(both[0], text);
    CHECK_STR(both[1], free_text);
    hx_executor_stats_get(r.ex, &st);
    CHECK(st.n_steps - steps_alone < steps_alone); /* they shared steps */
    rig_free(&r);
    hx_grammar_vocab_free(v);
    return 0;
}

/* Under a grammar, a backend's draw stands when the grammar takes it and the host goes on from
 * the row's logits when it refuses it: the same JSON as the host's sampler alone, greedy and
 * seeded (the model's prose is refused at once, so both ways are taken). */
static int test_json_grammar_drawn_by_the_backend(void)
{
    rig r;
    hx_grammar *g;
    hx_grammar_vocab *v;
    if (!json_rig(&r, &g, &v)) return 0;
    static char host[8192], drawn[8192];
    for (int seeded = 0; seeded < 2; seeded++) {
        for (int side = 0; side < 2; side++) {
            r.m.be->sample = side ? ref_sample : NULL;
            n_drawn = 0;
            hx_completion *c = chat_completion(&r, k_capital, 60, hx_grammar_retain(g), v);
            if (seeded) c->gp.sampling.temperature = 0.9f, c->gp.sampling.seed = 11;
            const hx_event done = run_one(&r, c, side ? drawn : host, sizeof host);
            CHECK_EQ(done.status, HX_OK);
            CHECK(side == 0 || n_drawn >= done.stats.n_gen);
        }
        if (strcmp(host, drawn) != 0)
            CHECK_FAIL("%s: host \"%s\" vs drawn \"%s\"", seeded ? "seeded" : "greedy", host,
                       drawn);
    }
    r.m.be->sample = NULL;
    rig_free(&r);
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    return 0;
}

static int test_grammar_after_begins_the_grammar_after_the_trigger(void)
{
    rig r;
    hx_grammar *g;
    hx_grammar_vocab *v;
    if (!json_rig(&r, &g, &v)) return 0;
    /* The trigger: the free answer's first three tokens, so it straddles tokens and ends where
     * a token ends. */
    static char trigger[256], free_text[8192], text[8192];
    hx_event done = run_one(&r, chat_completion(&r, k_capital, 3, NULL, NULL), trigger,
                            sizeof trigger);
    CHECK(done.status == HX_OK && strlen(trigger) > 3);
    done = run_one(&r, chat_completion(&r, k_capital, 60, NULL, NULL), free_text,
                   sizeof free_text);
    CHECK_EQ(done.status, HX_OK);
    /* Lazy without a trigger: the grammar never begins. */
    hx_completion *c = chat_completion(&r, k_capital, 60, hx_grammar_retain(g), v);
    c->gp.sampling.grammar_lazy = true;
    done = run_one(&r, c, text, sizeof text);
    CHECK_EQ(done.status, HX_OK);
    CHECK_STR(text, free_text);
    /* Lazy after the trigger: the same text up to it, then a JSON object. */
    c = chat_completion(&r, k_capital, 200, g, v);
    c->gp.sampling.grammar_lazy = true;
    c->gp.grammar_after = trigger; /* outlives the job */
    done = run_one(&r, c, text, sizeof text);
    printf("trigger '%s', output: %s\n", trigger, text);
    CHECK_EQ(done.status, HX_OK);
    CHECK_EQ(done.stats.finish, HX_FINISH_STOP);
    CHECK(strncmp(text, trigger, strlen(trigger)) == 0);
    CHECK_EQ(check_json_object(text + strlen(trigger)), 0);
    rig_free(&r);
    hx_grammar_vocab_free(v);
    return 0;
}

static const check_case cases[] = {
    {"events_arrive_in_order_and_done_is_last", test_events_arrive_in_order_and_done_is_last},
    {"full_queue_is_busy", test_full_queue_is_busy},
    {"cancelled_while_queued_never_runs", test_cancelled_while_queued_never_runs},
    {"cancel_stops_a_running_job_within_a_step", test_cancel_stops_a_running_job_within_a_step},
    {"shutdown_ends_running_and_queued_jobs", test_shutdown_ends_running_and_queued_jobs},
    {"batched_outputs_equal_alone_outputs", test_batched_outputs_equal_alone_outputs},
    {"preempted_jobs_lose_and_repeat_nothing", test_preempted_jobs_lose_and_repeat_nothing},
    {"backend_draws_equal_host_samples", test_backend_draws_equal_host_samples},
    {"long_prompt_does_not_stall_a_running_job", test_long_prompt_does_not_stall_a_running_job},
    {"prefix_cache_serves_a_repeated_prompt", test_prefix_cache_serves_a_repeated_prompt},
    {"json_grammar_makes_greedy_output_a_json_object", test_json_grammar_makes_greedy_output_a_json_object},
    {"grammar_after_begins_the_grammar_after_the_trigger", test_grammar_after_begins_the_grammar_after_the_trigger},
    {"json_grammar_drawn_by_the_backend", test_json_grammar_drawn_by_the_backend},
    {"steps_started_ahead_equal_host_samples", test_steps_started_ahead_equal_host_samples},
    {"generation_alone_started_ahead_equals_host_samples", test_generation_alone_started_ahead_equals_host_samples},
};
CHECK_MAIN(cases)
