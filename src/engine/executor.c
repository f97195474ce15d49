/* executor.c - the engine thread and its FIFO of jobs (see executor.h).
 *
 * One mutex guards everything shared: the queue, every job's event list and reference count,
 * and the statistics. The engine thread holds it only to take a job and to append an event,
 * never while the model runs, so an HTTP thread waits at most for an append. Lock order: there
 * is only ex->mu. A job has two references, the reader's and the engine's (or the queue's); the
 * last one to let go frees it. */
#define _POSIX_C_SOURCE 200809L
#include "engine/executor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"

struct hx_job {
    hx_executor   *ex;
    hx_completion *c;
    hx_job        *next;      /* in the queue */
    hx_event      *events;    /* [cap] ring: events[head .. head + n) are unread */
    int32_t        head, n, cap;
    pthread_cond_t cv;        /* an event was appended */
    hx_event       done;      /* the last event, kept apart so that storing it cannot fail */
    bool           finished;  /* done is set */
    atomic_bool    cancelled;
    bool           done_read; /* the reader has taken DONE: nothing follows */
    bool           oom;       /* an event could not be stored: the job ends with HX_E_NOMEM */
    int32_t        refs;
};

struct hx_executor {
    pthread_mutex_t   mu;
    pthread_cond_t    work;    /* a job was queued, or shutdown */
    pthread_t         thread;
    bool              thread_started, stopping;
    hx_job           *q_head, *q_tail;
    hx_job           *running; /* the job the engine runs now, or NULL */
    int32_t           max_queue;
    hx_sequence      *seq;     /* owned by the engine thread */
    int32_t           n_ctx;
    hx_executor_stats stats;
};

/* ---- completions and events ---- */

hx_completion *hx_completion_new(void)
{
    hx_completion *c = hx_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->arena = hx_arena_make(4096);
    c->gp.sampling = hx_sampling_default();
    return c;
}

void hx_completion_free(hx_completion *c)
{
    if (!c) return;
    hx_arena_free(&c->arena);
    hx_free(c);
}

void hx_event_clear(hx_event *ev)
{
    hx_free(ev->text);
    ev->text = NULL;
    ev->len = 0;
}

/* ---- jobs (ex->mu held) ---- */

static void job_unref(hx_job *j)
{
    if (--j->refs > 0) return;
    for (int32_t i = 0; i < j->n; i++) hx_event_clear(&j->events[(j->head + i) % j->cap]);
    hx_free(j->events);
    pthread_cond_destroy(&j->cv);
    hx_completion_free(j->c);
    hx_free(j);
}

/* Appends ev (its text taken) and wakes the reader. false when there was no memory. */
static bool job_push(hx_job *j, hx_event *ev)
{
    if (j->n == j->cap) {
        const int32_t cap = j->cap ? j->cap * 2 : 16;
        hx_event *e = hx_alloc((size_t)cap * sizeof *e);
        if (!e) return false;
        for (int32_t i = 0; i < j->n; i++) e[i] = j->events[(j->head + i) % j->cap];
        hx_free(j->events);
        j->events = e, j->cap = cap, j->head = 0;
    }
    j->events[(j->head + j->n) % j->cap] = *ev;
    j->n++;
    pthread_cond_signal(&j->cv);
    return true;
}

static void job_finish(hx_job *j, hx_status st, const char *msg, const hx_gen_stats *stats)
{
    j->done = (hx_event){.kind = HX_EVENT_DONE, .status = st};
    if (msg) snprintf(j->done.msg, sizeof j->done.msg, "%s", msg);
    if (stats) j->done.stats = *stats;
    j->finished = true;
    pthread_cond_signal(&j->cv);
}

/* ---- the engine thread ---- */

static bool job_cancelled(void *user)
{
    const hx_job *j = user;
    return atomic_load_explicit(&j->cancelled, memory_order_relaxed);
}

/* Text from the sequence, on the engine thread: becomes a TEXT event. */
static bool on_text(const char *text, size_t len, const hx_token_logprobs *lp, void *user)
{
    hx_job *j = user;
    hx_executor *ex = j->ex;
    hx_event ev = {.kind = HX_EVENT_TEXT, .text = hx_alloc(len + 1), .len = len};
    if (ev.text) {
        memcpy(ev.text, text, len);
        ev.text[len] = '\0';
        if (lp && j->c->logprobs) ev.has_lp = true, ev.lp = *lp;
    }
    pthread_mutex_lock(&ex->mu);
    if (!ev.text || !job_push(j, &ev)) {
        hx_free(ev.text);
        j->oom = true;
        atomic_store_explicit(&j->cancelled, true, memory_order_relaxed);
    }
    pthread_mutex_unlock(&ex->mu);
    return !job_cancelled(j);
}

static void run_job(hx_executor *ex, hx_job *j)
{
    hx_gen_params gp = j->c->gp;
    gp.cancelled = job_cancelled;
    gp.every_token = j->c->logprobs; /* one logprob record per token, text or not */
    hx_gen_stats gs = {0};
    hx_err err = {0};
    hx_status st = HX_OK;
    if (!job_cancelled(j))
        st = hx_sequence_generate(ex->seq, j->c->prompt, j->c->n_prompt, &gp, on_text, j, &gs, &err);
    else
        gs.finish = HX_FINISH_CANCELLED, gs.n_prompt = j->c->n_prompt, gs.stop_index = -1;

    int32_t used, total;
    hx_sequence_kv_blocks(ex->seq, &used, &total);
    pthread_mutex_lock(&ex->mu);
    if (st == HX_OK && j->oom) st = hx_err_set(&err, HX_E_NOMEM, "out of memory for the reply");
    else if (st == HX_OK && gs.finish == HX_FINISH_CANCELLED) st = HX_E_CANCELLED;
    job_finish(j, st, st == HX_OK || st == HX_E_CANCELLED ? NULL : err.msg, &gs);
    ex->running = NULL;
    hx_executor_stats *s = &ex->stats;
    s->n_served++;
    s->n_active = 0;
    s->n_prompt_tokens += gs.n_prompt;
    s->n_cached_tokens += gs.n_cached;
    s->n_gen_tokens += gs.n_gen;
    s->prompt_ms += gs.prompt_ms;
    s->gen_ms += gs.gen_ms;
    s->n_gen_timed += gs.n_gen > 1 ? gs.n_gen - 1 : 0;
    s->last = gs;
    s->kv_blocks_used = used;
    s->kv_blocks_total = total;
    job_unref(j);
    pthread_mutex_unlock(&ex->mu);
}

static void *engine_main(void *arg)
{
    hx_executor *ex = arg;
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        while (!ex->q_head && !ex->stopping) pthread_cond_wait(&ex->work, &ex->mu);
        hx_job *j = ex->q_head;
        if (!j) break; /* stopping, and the queue is drained */
        ex->q_head = j->next;
        if (!ex->q_head) ex->q_tail = NULL;
        ex->stats.n_queued--;
        ex->stats.n_active = 1;
        ex->running = j;
        pthread_mutex_unlock(&ex->mu);
        run_job(ex, j); /* a cancelled job (client gone, or shutdown) ends at once */
        pthread_mutex_lock(&ex->mu);
    }
    pthread_mutex_unlock(&ex->mu);
    return NULL;
}

/* ---- the executor ---- */

hx_status hx_executor_open(hx_llm *m, const hx_tokenizer *tok, int32_t n_ctx, int32_t max_queue,
                           hx_executor **out, hx_err *err)
{
    hx_executor *ex = hx_calloc(1, sizeof *ex);
    if (!ex) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    pthread_mutex_init(&ex->mu, NULL);
    pthread_cond_init(&ex->work, NULL);
    ex->max_queue = max_queue;
    ex->n_ctx = n_ctx;
    hx_status st = hx_sequence_init(m, tok, n_ctx, &ex->seq, err);
    if (st != HX_OK) goto fail;
    hx_sequence_kv_blocks(ex->seq, &ex->stats.kv_blocks_used, &ex->stats.kv_blocks_total);
    if (pthread_create(&ex->thread, NULL, engine_main, ex) != 0) {
        st = hx_err_set(err, HX_E_NOMEM, "cannot start the engine thread");
        goto fail;
    }
    ex->thread_started = true;
    *out = ex;
    return HX_OK;
fail:
    hx_executor_close(ex);
    return st;
}

void hx_executor_shutdown(hx_executor *ex)
{
    pthread_mutex_lock(&ex->mu);
    ex->stopping = true;
    for (hx_job *j = ex->q_head; j; j = j->next)
        atomic_store_explicit(&j->cancelled, true, memory_order_relaxed);
    if (ex->running) atomic_store_explicit(&ex->running->cancelled, true, memory_order_relaxed);
    pthread_cond_signal(&ex->work);
    pthread_mutex_unlock(&ex->mu);
}

void hx_executor_close(hx_executor *ex)
{
    if (!ex) return;
    if (ex->thread_started) {
        hx_executor_shutdown(ex);
        pthread_join(ex->thread, NULL);
    }
    hx_sequence_free(ex->seq);
    pthread_cond_destroy(&ex->work);
    pthread_mutex_destroy(&ex->mu);
    hx_free(ex);
}

int32_t hx_executor_n_ctx(const hx_executor *ex) { return ex->n_ctx; }

hx_status hx_executor_submit(hx_executor *ex, hx_completion *c, hx_job **out, hx_err *err)
{
    hx_job *j = hx_calloc(1, sizeof *j);
    if (!j) {
        hx_completion_free(c);
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->ex = ex;
    j->c = c;
    j->refs = 2; /* the reader's and the engine's */
    hx_status st = HX_OK;
    pthread_mutex_lock(&ex->mu);
    if (ex->stopping)
        st = hx_err_set(err, HX_E_CANCELLED, "the server is shutting down");
    else if (ex->stats.n_queued >= ex->max_queue)
        st = hx_err_set(err, HX_E_BUSY, "%d requests are already waiting (--max-queue); retry later",
                        ex->stats.n_queued);
    if (st != HX_OK) {
        j->refs = 1;
        job_unref(j);
        pthread_mutex_unlock(&ex->mu);
        return st;
    }
    if (ex->q_tail) ex->q_tail->next = j;
    else ex->q_head = j;
    ex->q_tail = j;
    ex->stats.n_queued++;
    pthread_cond_signal(&ex->work);
    pthread_mutex_unlock(&ex->mu);
    *out = j;
    return HX_OK;
}

bool hx_job_next(hx_job *j, hx_event *ev, int timeout_ms)
{
    hx_executor *ex = j->ex;
    struct timespec until;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    bool got = false;
    pthread_mutex_lock(&ex->mu);
    while (!j->done_read && j->n == 0 && !j->finished) {
        if (timeout_ms < 0) pthread_cond_wait(&j->cv, &ex->mu);
        else if (pthread_cond_timedwait(&j->cv, &ex->mu, &until) != 0) break;
    }
    if (j->n > 0) {
        *ev = j->events[j->head];
        j->head = (j->head + 1) % j->cap;
        j->n--;
        got = true;
    } else if (j->finished && !j->done_read) {
        *ev = j->done;
        j->done_read = true;
        got = true;
    }
    pthread_mutex_unlock(&ex->mu);
    return got;
}

void hx_job_cancel(hx_job *j) { atomic_store_explicit(&j->cancelled, true, memory_order_relaxed); }

void hx_job_release(hx_job *j)
{
    if (!j) return;
    hx_executor *ex = j->ex;
    pthread_mutex_lock(&ex->mu);
    atomic_store_explicit(&j->cancelled, true, memory_order_relaxed); /* no-op once finished */
    job_unref(j);
    pthread_mutex_unlock(&ex->mu);
}

void hx_executor_stats_get(hx_executor *ex, hx_executor_stats *out)
{
    pthread_mutex_lock(&ex->mu);
    *out = ex->stats;
    pthread_mutex_unlock(&ex->mu);
}
