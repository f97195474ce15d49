/* executor.c - the engine thread: the FIFO of jobs and the batching scheduler (see executor.h).
 *
 * One mutex guards everything HTTP threads share with the engine: the queue, every job's event
 * list and reference count, and the statistics. The engine holds it only to take jobs, to append
 * an event and to publish figures, never while the model runs. Lock order: there is only ex->mu.
 * A job has two references, the reader's and the engine's (or the queue's); the last one to let
 * go frees it. Slots, sequences, the KV pool and the prefix cache belong to the engine thread
 * alone and need no lock. */
#define _POSIX_C_SOURCE 200809L
#include "engine/executor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "kv/prefix_cache.h"

#define MAX_BATCH 64 /* sequences a step holds (its fixed arrays); at most HX_LLM_LOGIT_ROWS */
_Static_assert(MAX_BATCH <= HX_LLM_LOGIT_ROWS, "a step's logit rows are one pass of the model's");

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

/* One running job: its sequence (in the shared pool) and its generation. */
typedef struct {
    hx_job       *job;   /* NULL: the slot is free */
    hx_sequence  *seq;
    hx_gen       *gen;
    hx_gen_params gp;    /* the job's, with the engine's hooks; outlives gen */
    int64_t       order; /* admission number: the newest is preempted first */
    int32_t       rows;  /* rows in the current step, and where its logits are (-1: none) */
    int32_t       i_logit;
    bool          prompt_cached; /* its prompt's blocks are in the prefix cache already */
} slot;

struct hx_executor {
    pthread_mutex_t   mu;
    pthread_cond_t    work;    /* a job was queued, or shutdown */
    pthread_t         thread;
    bool              thread_started, stopping;
    hx_job           *q_head, *q_tail;
    hx_executor_params p;
    hx_executor_stats stats;
    /* the engine thread's own */
    hx_llm           *m;
    hx_kv_pool       *pool;
    hx_kv_pool       *pool_swa; /* the sliding layers' (hx_hparams_n_swa_layers), or NULL */
    hx_prefix_cache  *cache;   /* NULL when p.cache_blocks is 0 */
    slot             *slots;   /* [p.n_batch] */
    int64_t           n_admitted;
    /* one step's batch: [step_tokens] rows, [n_batch] sequences and logit rows */
    int32_t          *ids, *pos, *seq, *logit_rows;
    hx_kv_seq        *kvs, *kvs_swa;
    float            *logits;  /* [n_batch, n_vocab] */
    /* per logit row: drawn by the backend when top_k > 0; two sets, one for a step in flight
     * and one for the step being prepared */
    hx_sample_row     draws[2][MAX_BATCH];
    hx_sample_out     drawn[2][MAX_BATCH];
    int               side;    /* the set the next step uses */
    /* A step started ahead (hx_batch.ahead) and not yet read: its sequences in logit-row order,
     * each slot's admission number then (a slot whose job has since ended, or been replaced,
     * is not fed) and rows; n_seqs 0: none. */
    struct {
        slot   *sl[MAX_BATCH];
        int64_t order[MAX_BATCH];
        int32_t rows[MAX_BATCH];
        int32_t n_seqs;
        int     side;
    } flight;
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
    hx_grammar_free(c->grammar);
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

/* Publishes the KV figures (ex->mu held). */
static void kv_figures(hx_executor *ex)
{
    ex->stats.kv_blocks_total = ex->pool->store.n_blocks;
    ex->stats.kv_blocks_used = ex->pool->store.n_blocks - ex->pool->n_free;
    ex->stats.kv_blocks_cached = ex->cache ? hx_prefix_cache_n_blocks(ex->cache) : 0;
    if (ex->pool_swa) {
        ex->stats.kv_window_total = ex->pool_swa->store.n_blocks;
        ex->stats.kv_window_used = ex->pool_swa->store.n_blocks - ex->pool_swa->n_free;
    }
}

/* Ends a job: DONE with its status and figures, statistics, the engine's reference dropped. */
static void job_done(hx_executor *ex, hx_job *j, hx_status st, const char *msg,
                     const hx_gen_stats *gs)
{
    pthread_mutex_lock(&ex->mu);
    /* no longer active before its client hears of it (a /stats right after the reply must not
     * count it; engine_main recounts the slots after the step) */
    if (ex->stats.n_active > 0) ex->stats.n_active--;
    if (st == HX_OK && j->oom) st = HX_E_NOMEM, msg = "out of memory for the reply";
    else if (st == HX_OK && gs->finish == HX_FINISH_CANCELLED) st = HX_E_CANCELLED;
    job_finish(j, st, st == HX_OK || st == HX_E_CANCELLED ? NULL : msg, gs);
    hx_executor_stats *s = &ex->stats;
    s->n_served++;
    s->n_prompt_tokens += gs->n_prompt;
    s->n_cached_tokens += gs->n_cached;
    s->n_gen_tokens += gs->n_gen;
    s->prompt_ms += gs->prompt_ms;
    s->gen_ms += gs->gen_ms;
    s->n_gen_timed += gs->n_gen > 1 ? gs->n_gen - 1 : 0;
    s->last = *gs;
    kv_figures(ex);
    job_unref(j);
    pthread_mutex_unlock(&ex->mu);
}

/* Copies a cached tail block (and, with sliding layers, its sliding block) into blocks of the
 * caller's own, *dst and *dst_swa, releasing the references match_tail handed out. false, with
 * nothing taken, when a pool has no free block. */
static bool copy_tail(hx_executor *ex, int32_t tail, int32_t tail_swa, int32_t *dst,
                      int32_t *dst_swa)
{
    *dst = hx_kv_pool_copy(ex->pool, tail);
    hx_kv_pool_release(ex->pool, tail);
    if (!ex->pool_swa) return *dst >= 0;
    *dst_swa = *dst >= 0 ? hx_kv_pool_copy(ex->pool_swa, tail_swa) : -1;
    hx_kv_pool_release(ex->pool_swa, tail_swa);
    if (*dst_swa >= 0) return true;
    if (*dst >= 0) hx_kv_pool_release(ex->pool, *dst);
    *dst = -1;
    return false;
}

/* Starts job j in slot sl: the longest cached prefix of its prompt first, then the generation. */
static void slot_start(hx_executor *ex, slot *sl, hx_job *j)
{
    const hx_completion *c = j->c;
    sl->job = j;
    sl->order = ex->n_admitted++;
    sl->prompt_cached = false;
    sl->gp = c->gp;
    sl->gp.cancelled = job_cancelled;
    sl->gp.every_token = c->logprobs; /* one logprob record per token, text or not */
    sl->gp.logprobs = c->logprobs;
    hx_sequence_clear(sl->seq);
    if (ex->cache && c->n_prompt > 1) {
        /* Never the last prompt token: its logits must be computed. Whole blocks are shared; the
         * cached block that agrees longest with the positions after them is copied. */
        int32_t blocks[512], swa[512], tail_swa = -1;
        int32_t *bswa = ex->pool_swa ? swa : NULL;
        const int32_t n = c->n_prompt - 1;
        int32_t max = n / 16, n_tail = 0;
        if (max > (int32_t)HX_COUNTOF(blocks) - 1) max = (int32_t)HX_COUNTOF(blocks) - 1;
        const int32_t got = hx_prefix_cache_match(ex->cache, 0, c->prompt, n, blocks, bswa, max);
        const int32_t tail = hx_prefix_cache_match_tail(ex->cache, 0, c->prompt, n, got, &n_tail,
                                                        &tail_swa);
        if (tail >= 0 && !copy_tail(ex, tail, tail_swa, &blocks[got], &swa[got]))
            n_tail = 0; /* no free block: those positions are recomputed */
        if (got > 0 || n_tail > 0)
            hx_sequence_adopt(sl->seq, c->prompt, blocks, bswa, got + (n_tail > 0),
                              got * 16 + n_tail);
    }
    hx_err err = {0};
    const hx_status st = hx_gen_begin(sl->seq, c->prompt, c->n_prompt, &sl->gp, on_text, j,
                                      &sl->gen, &err);
    if (st != HX_OK) {
        const hx_gen_stats gs = {.n_prompt = c->n_prompt, .stop_index = -1};
        hx_sequence_clear(sl->seq);
        sl->job = NULL;
        job_done(ex, j, st, err.msg, &gs);
    }
}

/* Puts slot sl's sequence (the positions that hold KV) in the prefix cache: its full blocks,
 * then its partial last block as a tail; blocks already cached for the same tokens are kept as
 * they are. */
static void cache_sequence(hx_executor *ex, const slot *sl)
{
    if (!ex->cache) return;
    int32_t n_blocks, n_tokens;
    const int32_t *blocks = hx_sequence_blocks(sl->seq, &n_blocks);
    const int32_t *tokens = hx_sequence_tokens(sl->seq, &n_tokens);
    const int32_t *swa = hx_sequence_blocks_swa(sl->seq);
    hx_prefix_cache_insert(ex->cache, 0, tokens, n_tokens, blocks, swa);
    hx_prefix_cache_insert_tail(ex->cache, 0, tokens, n_tokens, blocks, swa);
}

/* Ends the job of slot sl; its sequence's full blocks go to the prefix cache. */
static void slot_finish(hx_executor *ex, slot *sl, hx_status failed, const char *msg)
{
    hx_gen_stats gs = {0};
    hx_err err = {0};
    hx_status st = hx_gen_end(sl->gen, &gs, &err);
    if (failed != HX_OK) st = failed, snprintf(err.msg, sizeof err.msg, "%s", msg);
    if (st == HX_OK) cache_sequence(ex, sl);
    hx_sequence_clear(sl->seq);
    hx_job *j = sl->job;
    sl->job = NULL;
    sl->gen = NULL;
    job_done(ex, j, st, err.msg, &gs);
}

/* Makes `rows` rows of KV room for slot sl: from the free list, else by evicting cached
 * prefixes, else by preempting the newest other running slot not already in this step (its KV
 * is recomputed when it runs again; what it generated so far stays). false: no room now. */
static bool make_room(hx_executor *ex, slot *sl, int32_t rows)
{
    hx_err err = {0};
    for (;;) {
        if (hx_gen_reserve(sl->gen, rows, &err) == HX_OK) return true;
        if (ex->cache && hx_prefix_cache_evict(ex->cache, rows / 16 + 1) > 0) continue;
        slot *victim = NULL;
        for (int32_t i = 0; i < ex->p.n_batch; i++) {
            slot *o = &ex->slots[i];
            int32_t held;
            hx_sequence_blocks(o->seq, &held);
            if (o != sl && o->job && o->rows == 0 && held > 0 && !hx_gen_done(o->gen) &&
                (!victim || o->order > victim->order))
                victim = o;
        }
        if (!victim || victim->order < sl->order) return false; /* sl itself is the newest */
        hx_gen_preempt(victim->gen);
        pthread_mutex_lock(&ex->mu);
        ex->stats.n_preempted++;
        pthread_mutex_unlock(&ex->mu);
    }
}

/* Adds up to `budget` rows of slot sl to the step's batch; returns the rows added. */
static int32_t batch_add(hx_executor *ex, slot *sl, int32_t n_rows, int32_t n_seqs,
                         int32_t *n_logits, int32_t budget)
{
    const int32_t pending = hx_gen_pending(sl->gen);
    const int32_t rows = pending < budget ? pending : budget;
    if (rows <= 0 || !make_room(ex, sl, rows)) return 0;
    hx_gen_rows(sl->gen, rows, n_seqs, ex->ids + n_rows, ex->pos + n_rows, ex->seq + n_rows,
                &ex->kvs[n_seqs], &ex->kvs_swa[n_seqs]);
    sl->rows = rows;
    sl->i_logit = -1;
    if (rows == pending) { /* its last known token: the next one is sampled from this row */
        sl->i_logit = *n_logits;
        ex->logit_rows[(*n_logits)++] = n_rows + rows - 1;
    }
    return rows;
}

/* One forward step of batch b over the executor's pools. */
static hx_status forward(hx_executor *ex, const hx_batch *b, hx_err *err)
{
    hx_kv_store *swa = ex->pool_swa ? &ex->pool_swa->store : NULL;
    return hx_llm_forward(ex->m, &ex->pool->store, swa, b, ex->logits, err);
}

/* The step just started ahead, over n sequences whose draws are set `side`, is in flight; the
 * next step prepares the other set. (flight.sl, order and rows are the caller's to fill.) */
static void take_off(hx_executor *ex, int32_t n, int side)
{
    ex->flight.n_seqs = n;
    ex->flight.side = side;
    ex->side = 1 - side;
}

/* Whether slot sl still runs the job it ran in the step in flight as its k-th sequence. */
static bool in_flight(const hx_executor *ex, int32_t k)
{
    const slot *sl = ex->flight.sl[k];
    return sl->job && sl->order == ex->flight.order[k];
}

/* Ends the slots whose generation is done or whose job was cancelled. */
static void finish_slots(hx_executor *ex)
{
    for (int32_t i = 0; i < ex->p.n_batch; i++) {
        slot *sl = &ex->slots[i];
        if (!sl->job) continue;
        if (!hx_gen_done(sl->gen) && job_cancelled(sl->job)) hx_gen_cancel(sl->gen);
        if (hx_gen_done(sl->gen)) slot_finish(ex, sl, HX_OK, NULL);
    }
}

/* After a step: feeds slot sl the rows it had in it, with its draw or logit row i (-1: none). */
static void absorb(hx_executor *ex, slot *sl, int32_t rows, int32_t i, int side, bool drawn)
{
    const int32_t n_vocab = ex->m->hp.n_vocab;
    float *logits = i >= 0 ? ex->logits + (size_t)i * n_vocab : NULL;
    if (drawn) hx_gen_fed_drawn(sl->gen, rows, &ex->drawn[side][i], i, logits);
    else hx_gen_fed(sl->gen, rows, logits);
    if (!sl->prompt_cached && i >= 0) {
        /* The prompt is in the cache now: a request with the same beginning that arrives while
         * this one still generates starts after it. Its full blocks are final; only the partial
         * last one is still written, and that one is not shared. */
        cache_sequence(ex, sl);
        sl->prompt_cached = true;
    }
}

static void count_step(hx_executor *ex)
{
    pthread_mutex_lock(&ex->mu);
    ex->stats.n_steps++;
    kv_figures(ex);
    pthread_mutex_unlock(&ex->mu);
}

/* Whether the step after the one in flight can start before that one is read: the same
 * sequences, nothing else running, each one's next row certain (hx_gen_can_run_ahead) with
 * KV room for it. */
static bool can_chain(hx_executor *ex)
{
    int32_t running = 0;
    for (int32_t i = 0; i < ex->p.n_batch; i++) running += ex->slots[i].job != NULL;
    if (running != ex->flight.n_seqs) return false;
    for (int32_t k = 0; k < ex->flight.n_seqs; k++) {
        slot *sl = ex->flight.sl[k];
        if (!in_flight(ex, k) || job_cancelled(sl->job) || !hx_gen_can_run_ahead(sl->gen))
            return false;
    }
    for (int32_t k = 0; k < ex->flight.n_seqs; k++) {
        hx_err err = {0};
        while (hx_gen_reserve_ahead(ex->flight.sl[k]->gen, &err) != HX_OK)
            if (!ex->cache || hx_prefix_cache_evict(ex->cache, 1) == 0) return false;
    }
    return true;
}

/* Waits out the step in flight when no job it feeds runs any more (each ended or was
 * cancelled after it started), so that nothing is left in flight while the engine idles. */
static void drain_if_unwanted(hx_executor *ex)
{
    for (int32_t k = 0; k < ex->flight.n_seqs; k++)
        if (in_flight(ex, k)) return;
    if (ex->flight.n_seqs > 0) hx_llm_finish(ex->m);
    ex->flight.n_seqs = 0;
}

/* With a step in flight: starts the next one over the same sequences when it can (each row's
 * token the draw in flight), then reads the one in flight and feeds its draws. Returns true
 * when a step is in flight again; false when the caller should build a step as usual. */
static bool step_ahead(hx_executor *ex)
{
    const int fs = ex->flight.side, ns = ex->side;
    const int32_t n = ex->flight.n_seqs;
    bool chained = can_chain(ex);
    for (int32_t k = 0; chained && k < n; k++)
        chained = hx_gen_device_row(ex->flight.sl[k]->gen, &ex->draws[ns][k]);
    if (chained) {
        for (int32_t k = 0; k < n; k++) {
            ex->ids[k] = HX_TOKEN_DRAWN(k);
            ex->logit_rows[k] = k;
            hx_gen_rows_ahead(ex->flight.sl[k]->gen, k, &ex->pos[k], &ex->seq[k], &ex->kvs[k],
                              &ex->kvs_swa[k]);
        }
        const hx_batch b = {.n_tok = n, .tokens = ex->ids, .pos = ex->pos, .seq = ex->seq,
                            .seqs = ex->kvs, .seqs_swa = ex->kvs_swa, .n_seqs = n,
                            .logit_rows = ex->logit_rows, .n_logits = n,
                            .draws = ex->draws[ns], .drawn = ex->drawn[ns], .ahead = true};
        hx_err err = {0};
        chained = forward(ex, &b, &err) == HX_OK;
    }
    hx_llm_finish(ex->m);
    for (int32_t k = 0; k < n; k++)
        if (in_flight(ex, k)) absorb(ex, ex->flight.sl[k], ex->flight.rows[k], k, fs, true);
    count_step(ex);
    ex->flight.n_seqs = 0;
    if (chained) {
        for (int32_t k = 0; k < n; k++) ex->flight.rows[k] = 1;
        take_off(ex, n, ns);
    }
    finish_slots(ex);
    drain_if_unwanted(ex);
    return ex->flight.n_seqs > 0;
}

/* One forward step over every running slot: a decode row for each generating one, then prefill
 * chunks in admission order while the step has room. A step whose every sequence draws its next
 * token on the device, certain to need the row after it, is started ahead: the engine comes
 * back to it (step_ahead) after starting the next, so the host's work between two steps (the
 * draws' text, stop strings, events, the next batch) overlaps the device's. */
static void step(hx_executor *ex)
{
    if (ex->flight.n_seqs > 0 && step_ahead(ex)) return;
    const int32_t n_batch = ex->p.n_batch, budget = ex->p.step_tokens;
    slot *order[64];
    int32_t n_order = 0;
    for (int32_t i = 0; i < n_batch; i++) {
        ex->slots[i].rows = 0;
        if (ex->slots[i].job) order[n_order++] = &ex->slots[i];
    }
    for (int32_t a = 1; a < n_order; a++) /* admission order: the oldest prefill goes first */
        for (int32_t b = a; b > 0 && order[b]->order < order[b - 1]->order; b--) {
            slot *t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    int32_t n_rows = 0, n_seqs = 0, n_logits = 0;
    slot *in_batch[MAX_BATCH];
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < n_order && n_rows < budget; i++) {
            slot *sl = order[i];
            const bool decoding = !hx_gen_prefilling(sl->gen);
            if (sl->rows > 0 || hx_gen_done(sl->gen) || decoding != (pass == 0)) continue;
            const int32_t got = batch_add(ex, sl, n_rows, n_seqs, &n_logits, budget - n_rows);
            if (got > 0) in_batch[n_seqs++] = sl, n_rows += got;
        }
    if (n_rows == 0) {
        /* Nobody could get KV room, and nothing else holds blocks to wait for: the pool is too
         * small for what remains. The oldest unfinished job ends rather than spinning. */
        for (int32_t i = 0; i < n_order; i++)
            if (!hx_gen_done(order[i]->gen)) {
                hx_gen_cancel(order[i]->gen);
                slot_finish(ex, order[i], HX_E_CONTEXT, "the KV cache is full: no room to go on");
                break;
            }
        finish_slots(ex);
        return;
    }
    hx_err err = {0};
    /* The backend draws the tokens it can (only ids come back); a prefill middle chunk's row,
     * whose logits nobody uses, it "draws" greedily rather than copy it back. */
    const int side = ex->side;
    hx_sample_row *draws = ex->draws[side];
    const bool draw = ex->m->be->sample != NULL;
    bool ahead = draw && hx_llm_can_start_ahead(ex->m) && n_logits == n_seqs;
    if (n_logits == 0) {
        ex->logit_rows[n_logits++] = n_rows - 1;
        draws[0] = (hx_sample_row){.top_k = 1};
    }
    for (int32_t i = 0; i < n_seqs && draw; i++) {
        slot *sl = in_batch[i];
        if (sl->i_logit >= 0 && !hx_gen_device_row(sl->gen, &draws[sl->i_logit]))
            draws[sl->i_logit].top_k = 0;
        ahead = ahead && sl->i_logit >= 0 && draws[sl->i_logit].top_k > 0 &&
                hx_gen_can_run_ahead(sl->gen);
    }
    const hx_batch b = {.n_tok = n_rows, .tokens = ex->ids, .pos = ex->pos, .seq = ex->seq,
                        .seqs = ex->kvs, .seqs_swa = ex->kvs_swa, .n_seqs = n_seqs,
                        .logit_rows = ex->logit_rows, .n_logits = n_logits,
                        .draws = draw ? draws : NULL, .drawn = ex->drawn[side], .ahead = ahead};
    const hx_status st = forward(ex, &b, &err);
    if (st == HX_OK && ahead) { /* in logit-row order: i_logit is the slot's index here */
        for (int32_t i = 0; i < n_seqs; i++) {
            ex->flight.sl[i] = in_batch[i];
            ex->flight.order[i] = in_batch[i]->order;
            ex->flight.rows[i] = in_batch[i]->rows;
        }
        take_off(ex, n_seqs, side);
        finish_slots(ex); /* a job cancelled meanwhile ends now; its row is not fed */
        drain_if_unwanted(ex);
        return;
    }
    for (int32_t i = 0; i < n_seqs; i++) {
        slot *sl = in_batch[i];
        if (st != HX_OK) {
            hx_gen_cancel(sl->gen);
            slot_finish(ex, sl, st, err.msg);
            continue;
        }
        absorb(ex, sl, sl->rows, sl->i_logit, side,
               draw && sl->i_logit >= 0 && draws[sl->i_logit].top_k > 0);
    }
    count_step(ex);
    finish_slots(ex);
}

/* Common leading tokens of two prompts. */
static int32_t common_prefix(const hx_completion *a, const hx_completion *b)
{
    int32_t n = 0;
    while (n < a->n_prompt && n < b->n_prompt && a->prompt[n] == b->prompt[n]) n++;
    return n;
}

/* true when completion c should stay queued for now: a running job still prefilling (or one just
 * admitted) shares at least a full block of c's prompt, so a step or two later c finds those
 * blocks in the prefix cache instead of computing them again beside it (two agents with one
 * system prompt arriving together). FIFO order holds: jobs behind c wait too. */
static bool wait_for_shared_prefix(const hx_executor *ex, const hx_completion *c,
                                   hx_job *const *admitted, int32_t n_admitted)
{
    if (!ex->cache || c->n_prompt <= 2 * 16) return false;
    for (int32_t i = 0; i < ex->p.n_batch; i++) {
        const slot *sl = &ex->slots[i];
        if (sl->job && !sl->prompt_cached && !hx_gen_done(sl->gen) &&
            common_prefix(sl->job->c, c) >= 2 * 16)
            return true;
    }
    for (int32_t k = 0; k < n_admitted; k++)
        if (common_prefix(admitted[k]->c, c) >= 2 * 16) return true;
    return false;
}

static void *engine_main(void *arg)
{
    hx_executor *ex = arg;
    for (;;) {
        /* Take queued jobs into free slots (under the lock), then start them (outside it). */
        hx_job *admit[64];
        int32_t n_admit = 0, n_running = 0;
        pthread_mutex_lock(&ex->mu);
        for (int32_t i = 0; i < ex->p.n_batch; i++) n_running += ex->slots[i].job != NULL;
        while (!ex->q_head && n_running == 0 && !ex->stopping) pthread_cond_wait(&ex->work, &ex->mu);
        if (!ex->q_head && n_running == 0 && ex->stopping) {
            pthread_mutex_unlock(&ex->mu);
            break;
        }
        while (ex->q_head && n_running + n_admit < ex->p.n_batch &&
               !wait_for_shared_prefix(ex, ex->q_head->c, admit, n_admit)) {
            hx_job *j = ex->q_head;
            ex->q_head = j->next;
            if (!ex->q_head) ex->q_tail = NULL;
            ex->stats.n_queued--;
            admit[n_admit++] = j;
        }
        ex->stats.n_active = n_running + n_admit;
        if (ex->stopping) /* cancel what runs; admitted jobs were cancelled by shutdown */
            for (int32_t i = 0; i < ex->p.n_batch; i++)
                if (ex->slots[i].job)
                    atomic_store_explicit(&ex->slots[i].job->cancelled, true, memory_order_relaxed);
        pthread_mutex_unlock(&ex->mu);

        for (int32_t k = 0; k < n_admit; k++) {
            hx_job *j = admit[k];
            if (job_cancelled(j)) { /* the client left, or shutdown: never runs */
                const hx_gen_stats gs = {.n_prompt = j->c->n_prompt, .finish = HX_FINISH_CANCELLED,
                                         .stop_index = -1};
                job_done(ex, j, HX_OK, NULL, &gs);
                continue;
            }
            for (int32_t i = 0; i < ex->p.n_batch; i++)
                if (!ex->slots[i].job) {
                    slot_start(ex, &ex->slots[i], j);
                    break;
                }
        }
        step(ex);
        pthread_mutex_lock(&ex->mu);
        int32_t n_now = 0;
        for (int32_t i = 0; i < ex->p.n_batch; i++) n_now += ex->slots[i].job != NULL;
        ex->stats.n_active = n_now;
        pthread_mutex_unlock(&ex->mu);
    }
    return NULL;
}

/* ---- the executor ---- */

/* Blocks of the sliding layers' pool for the executor's (normalised) parameters p: each of
 * n_batch sequences holds at most its window before a step's rows and those rows, and the prefix
 * cache as much again at most (within its cache_blocks). */
static int32_t swa_pool_blocks(const hx_hparams *hp, const hx_executor_params *p)
{
    const int32_t seqs =
        p->n_batch * hx_kv_window_blocks(hp->sliding_window, p->step_tokens, p->n_ctx, 16);
    return seqs + (p->cache_blocks < seqs ? p->cache_blocks : seqs);
}

hx_status hx_executor_open(hx_llm *m, const hx_tokenizer *tok, const hx_executor_params *p,
                           hx_executor **out, hx_err *err)
{
    hx_executor *ex = hx_calloc(1, sizeof *ex);
    if (!ex) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    pthread_mutex_init(&ex->mu, NULL);
    pthread_cond_init(&ex->work, NULL);
    ex->m = m;
    ex->p = *p;
    if (ex->p.n_batch <= 0) ex->p.n_batch = 8;
    if (ex->p.n_batch > MAX_BATCH) ex->p.n_batch = MAX_BATCH;
    if (ex->p.step_tokens <= 0 || ex->p.step_tokens > m->max_tok) ex->p.step_tokens = (int32_t)m->max_tok;
    const hx_hparams *hp = &m->hp;
    const int32_t ctx_blocks = (p->n_ctx + 15) / 16;
    hx_status st;
    if ((int64_t)ctx_blocks * ex->p.n_batch + p->cache_blocks > INT32_MAX / 2) {
        st = hx_err_set(err, HX_E_INVALID, "the KV pool for %d sequences of %d positions is too large",
                        ex->p.n_batch, p->n_ctx);
        goto fail;
    }
    const int32_t n_blocks = p->kv_blocks > 0 ? p->kv_blocks : ctx_blocks * ex->p.n_batch + p->cache_blocks;
    const int32_t n_swa = hx_hparams_n_swa_layers(hp);
    st = hx_kv_pool_create_typed(m->be, hp->n_layer - n_swa, hp->n_kv_head, hp->d_head, 16,
                                 n_blocks, p->kv, &ex->pool, err);
    if (st != HX_OK) goto fail;
    if (n_swa > 0) {
        st = hx_kv_pool_create_typed(m->be, n_swa, hp->n_kv_head, hp->d_head, 16,
                                     swa_pool_blocks(hp, &ex->p), p->kv, &ex->pool_swa, err);
        if (st != HX_OK) goto fail;
    }
    if (p->cache_blocks > 0 &&
        (st = hx_prefix_cache_create(ex->pool, 16, p->cache_blocks, &ex->cache, err)) != HX_OK)
        goto fail;
    if (ex->cache && ex->pool_swa) hx_prefix_cache_use_swa(ex->cache, ex->pool_swa, hp->sliding_window);
    ex->slots = hx_calloc((size_t)ex->p.n_batch, sizeof *ex->slots);
    ex->ids = hx_alloc((size_t)ex->p.step_tokens * sizeof(int32_t));
    ex->pos = hx_alloc((size_t)ex->p.step_tokens * sizeof(int32_t));
    ex->seq = hx_alloc((size_t)ex->p.step_tokens * sizeof(int32_t));
    ex->logit_rows = hx_alloc((size_t)ex->p.n_batch * sizeof(int32_t));
    ex->kvs = hx_alloc((size_t)ex->p.n_batch * sizeof *ex->kvs);
    ex->kvs_swa = hx_alloc((size_t)ex->p.n_batch * sizeof *ex->kvs_swa);
    ex->logits = hx_alloc((size_t)ex->p.n_batch * (size_t)hp->n_vocab * sizeof(float));
    if (!ex->slots || !ex->ids || !ex->pos || !ex->seq || !ex->logit_rows || !ex->kvs ||
        !ex->kvs_swa || !ex->logits) {
        st = hx_err_set(err, HX_E_NOMEM, "out of memory for the scheduler");
        goto fail;
    }
    for (int32_t i = 0; i < ex->p.n_batch; i++)
        if ((st = hx_sequence_init_shared(m, tok, ex->pool, ex->pool_swa, p->n_ctx,
                                          &ex->slots[i].seq, err)) != HX_OK)
            goto fail;
    /* before the warm-up, which then meets the matmuls that read the copies */
    if (p->dequant_bytes > 0 && m->be->keep_dequantized)
        ex->stats.dequant_bytes = m->be->keep_dequantized(m->be, p->dequant_bytes);
    if ((st = hx_sequence_warmup(ex->slots[0].seq, err)) != HX_OK) goto fail;
    kv_figures(ex);
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
    /* Running jobs are the engine's: it cancels them when it sees stopping. */
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
    for (int32_t i = 0; ex->slots && i < ex->p.n_batch; i++) hx_sequence_free(ex->slots[i].seq);
    hx_prefix_cache_free(ex->cache);
    hx_kv_pool_free(ex->pool);
    hx_kv_pool_free(ex->pool_swa);
    hx_free(ex->slots);
    hx_free(ex->ids);
    hx_free(ex->pos);
    hx_free(ex->seq);
    hx_free(ex->logit_rows);
    hx_free(ex->kvs);
    hx_free(ex->kvs_swa);
    hx_free(ex->logits);
    pthread_cond_destroy(&ex->work);
    pthread_mutex_destroy(&ex->mu);
    hx_free(ex);
}

int32_t hx_executor_n_ctx(const hx_executor *ex) { return ex->p.n_ctx; }

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
    else if (ex->stats.n_queued >= ex->p.max_queue)
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
