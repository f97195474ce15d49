/* sequence.c - the single-sequence generation loop (see sequence.h). */
#define _POSIX_C_SOURCE 200809L
#include "engine/sequence.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"

#define BLOCK_TOKENS 16

struct hx_sequence {
    hx_llm             *m;
    const hx_tokenizer *tok;
    hx_kv_pool         *pool;
    bool                own_pool;
    hx_kv_table         table;
    /* The sliding layers' KV when the model splits (hx_hparams_n_swa_layers): table_swa holds
     * only the blocks the next rows' windows reach, -1 before them. NULL pool otherwise. */
    hx_kv_pool         *pool_swa;
    hx_kv_table         table_swa;
    int32_t             window;
    int32_t             n_ctx;
    int32_t            *tokens;   /* [n_ctx] tokens known: those the cache holds, then pending */
    int32_t             n_tokens; /* how many of them the cache holds (positions with KV) */
    float              *logits;   /* [n_vocab] host: the last row's logits (generate alone) */
    int32_t            *pos, *seq, *rows, *ids; /* [max_tok] batch scratch (generate alone) */
};

struct hx_gen {
    hx_sequence         *s;
    const hx_gen_params *gp;
    hx_gen_cb            cb;
    void                *user;
    hx_sampler          *smp;
    hx_detok             dt;
    char                *text;    /* generated text not yet handed to the callback */
    size_t               text_len, text_cap;
    char                *after;   /* the generated text's last bytes, while a lazy grammar waits
                                   * for gp->grammar_after: fewer than after_len of them */
    size_t               after_len, after_n; /* strlen(gp->grammar_after); bytes in after[] */
    int32_t              n_known; /* s->tokens[0..n_known): prompt and tokens sampled so far */
    int32_t              n_prompt, limit;
    double               t0, t_first;
    bool                 done, stopped_by_string;
    hx_status            status;  /* a failure inside a step */
    hx_err               err;
    hx_gen_stats         stats;
};

/* ---- sequences ---- */

static hx_status sequence_new(hx_llm *m, const hx_tokenizer *tok, hx_kv_pool *pool,
                              hx_kv_pool *pool_swa, int32_t n_ctx, hx_kv_dtype kv,
                              hx_sequence **out, hx_err *err)
{
    if (n_ctx < 2) return hx_err_set(err, HX_E_INVALID, "context of %d positions is too small", n_ctx);
    hx_sequence *s = hx_calloc(1, sizeof *s);
    if (!s) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    s->m = m;
    s->tok = tok;
    s->n_ctx = n_ctx;
    s->pool = pool;
    s->pool_swa = pool_swa;
    s->window = m->hp.sliding_window;
    hx_status st = HX_OK;
    if (!pool) {
        const hx_hparams *hp = &m->hp;
        const int32_t n_swa = hx_hparams_n_swa_layers(hp);
        const int32_t blocks = (n_ctx + BLOCK_TOKENS - 1) / BLOCK_TOKENS;
        s->own_pool = true;
        st = hx_kv_pool_create_typed(m->be, hp->n_layer - n_swa, hp->n_kv_head, hp->d_head,
                                     BLOCK_TOKENS, blocks, kv, &s->pool, err);
        if (st == HX_OK && n_swa > 0)
            st = hx_kv_pool_create_typed(
                m->be, n_swa, hp->n_kv_head, hp->d_head, BLOCK_TOKENS,
                hx_kv_window_blocks(s->window, (int32_t)m->max_tok, n_ctx, BLOCK_TOKENS), kv,
                &s->pool_swa, err);
        if (st != HX_OK) goto fail;
    }
    s->tokens = hx_alloc((size_t)n_ctx * sizeof(int32_t));
    s->logits = hx_alloc((size_t)m->hp.n_vocab * sizeof(float));
    s->pos = hx_alloc((size_t)m->max_tok * sizeof(int32_t));
    s->seq = hx_calloc((size_t)m->max_tok, sizeof(int32_t));
    s->rows = hx_alloc((size_t)m->max_tok * sizeof(int32_t));
    s->ids = hx_alloc((size_t)m->max_tok * sizeof(int32_t));
    if (!s->tokens || !s->logits || !s->pos || !s->seq || !s->rows || !s->ids) {
        st = hx_err_set(err, HX_E_NOMEM, "out of memory for a sequence");
        goto fail;
    }
    *out = s;
    return HX_OK;
fail:
    hx_sequence_free(s);
    return st;
}

hx_status hx_sequence_init(hx_llm *m, const hx_tokenizer *tok, int32_t n_ctx, hx_kv_dtype kv,
                          hx_sequence **out, hx_err *err)
{
    hx_status st = sequence_new(m, tok, NULL, NULL, n_ctx, kv, out, err);
    if (st == HX_OK && (st = hx_sequence_warmup(*out, err)) != HX_OK) {
        hx_sequence_free(*out);
        *out = NULL;
    }
    return st;
}

hx_status hx_sequence_init_shared(hx_llm *m, const hx_tokenizer *tok, hx_kv_pool *pool,
                                  hx_kv_pool *pool_swa, int32_t n_ctx, hx_sequence **out,
                                  hx_err *err)
{
    HX_ASSERT((pool_swa != NULL) == (hx_hparams_n_swa_layers(&m->hp) > 0));
    return sequence_new(m, tok, pool, pool_swa, n_ctx, pool->store.dtype, out, err);
}

void hx_sequence_free(hx_sequence *s)
{
    if (!s) return;
    if (s->pool) hx_kv_table_free(s->pool, &s->table);
    if (s->pool_swa) hx_kv_table_free(s->pool_swa, &s->table_swa);
    if (s->own_pool) {
        hx_kv_pool_free(s->pool);
        hx_kv_pool_free(s->pool_swa);
    }
    hx_free(s->tokens);
    hx_free(s->logits);
    hx_free(s->pos);
    hx_free(s->seq);
    hx_free(s->rows);
    hx_free(s->ids);
    hx_free(s);
}

/* Keeps positions [0, n) of the cache (both pools). */
static void sequence_truncate(hx_sequence *s, int32_t n)
{
    hx_kv_table_truncate(s->pool, &s->table, n);
    if (s->pool_swa) hx_kv_table_truncate(s->pool_swa, &s->table_swa, n);
    s->n_tokens = n;
}

void hx_sequence_clear(hx_sequence *s)
{
    sequence_truncate(s, 0);
}

/* Places blocks[0..n_blocks) in the empty table t, covering n positions, growing its array
 * without taking blocks from the pool; false (nothing placed) when out of memory. */
static bool table_adopt(hx_kv_table *t, const int32_t *blocks, int32_t n_blocks, int32_t n)
{
    if (n_blocks > t->cap) {
        int32_t *b = hx_realloc(t->blocks, (size_t)n_blocks * sizeof *b);
        if (!b) return false;
        t->blocks = b;
        t->cap = n_blocks;
    }
    memcpy(t->blocks, blocks, (size_t)n_blocks * sizeof *blocks);
    t->n_blocks = n_blocks;
    t->n_ctx = n;
    return true;
}

static void release_blocks(hx_kv_pool *pool, const int32_t *blocks, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (blocks[i] >= 0) hx_kv_pool_release(pool, blocks[i]);
}

void hx_sequence_adopt(hx_sequence *s, const int32_t *tokens, const int32_t *blocks,
                       const int32_t *blocks_swa, int32_t n_blocks, int32_t n_tokens)
{
    HX_ASSERT(s->n_tokens == 0 && s->table.n_blocks == 0);
    HX_ASSERT(n_tokens > (n_blocks - 1) * BLOCK_TOKENS && n_tokens <= n_blocks * BLOCK_TOKENS);
    HX_ASSERT((blocks_swa != NULL) == (s->pool_swa != NULL));
    if (!table_adopt(&s->table, blocks, n_blocks, n_tokens) ||
        (s->pool_swa && !table_adopt(&s->table_swa, blocks_swa, n_blocks, n_tokens))) {
        /* no memory: give the blocks back, the prefix is recomputed instead */
        s->table.n_blocks = s->table.n_ctx = 0;
        release_blocks(s->pool, blocks, n_blocks);
        if (s->pool_swa) release_blocks(s->pool_swa, blocks_swa, n_blocks);
        return;
    }
    memcpy(s->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    s->n_tokens = n_tokens;
}

const int32_t *hx_sequence_blocks(const hx_sequence *s, int32_t *n_blocks)
{
    *n_blocks = s->table.n_blocks;
    return s->table.blocks;
}

const int32_t *hx_sequence_blocks_swa(const hx_sequence *s)
{
    return s->pool_swa ? s->table_swa.blocks : NULL;
}

const int32_t *hx_sequence_tokens(const hx_sequence *s, int32_t *n)
{
    *n = s->n_tokens;
    return s->tokens;
}

/* ---- stop strings ---- */

/* Length of the longest suffix of text[0..n) that is a proper prefix of a stop string: that
 * much must be held back, since the next token may complete the stop string. */
static size_t pending_stop_prefix(const char *text, size_t n, const hx_gen_params *gp)
{
    size_t hold = 0;
    for (int32_t k = 0; k < gp->n_stop; k++) {
        const size_t L = strlen(gp->stop[k]);
        for (size_t m = L > 1 ? L - 1 : 0; m > hold; m--)
            if (m <= n && memcmp(text + n - m, gp->stop[k], m) == 0) {
                hold = m;
                break;
            }
    }
    return hold;
}

/* First occurrence of any stop string in text[0..n): its offset, or -1; *which is the index
 * of the stop string found. */
static long find_stop(const char *text, size_t n, const hx_gen_params *gp, int32_t *which)
{
    long best = -1;
    for (int32_t k = 0; k < gp->n_stop; k++) {
        const size_t L = strlen(gp->stop[k]);
        if (L == 0 || L > n) continue;
        for (size_t i = 0; i + L <= n; i++)
            if (memcmp(text + i, gp->stop[k], L) == 0) {
                if (best < 0 || (long)i < best) best = (long)i, *which = k;
                break;
            }
    }
    return best;
}

/* ---- a lazy grammar's trigger ---- */

/* Whether the trigger occurs in the text tail[0..nt) followed by piece[0..np), where the tail
 * (the end of the text before) is shorter than the trigger: it may straddle the two. */
static bool trigger_found(const char *tail, size_t nt, const char *piece, size_t np,
                          const char *trig, size_t L)
{
    for (size_t k = 0; k < nt; k++) { /* starting in the tail, ending in the piece */
        const size_t m = nt - k;
        if (m + np >= L && memcmp(tail + k, trig, m) == 0 && memcmp(piece, trig + m, L - m) == 0)
            return true;
    }
    for (size_t i = 0; i + L <= np; i++)
        if (memcmp(piece + i, trig, L) == 0) return true;
    return false;
}

/* Watches the generated text for gp->grammar_after and begins the grammar once it appears. */
static void watch_trigger(hx_gen *g, const char *piece, size_t np)
{
    const size_t L = g->after_len;
    if (trigger_found(g->after, g->after_n, piece, np, g->gp->grammar_after, L)) {
        hx_sampler_grammar_begin(g->smp);
        return;
    }
    /* Keep the last L - 1 bytes of the text: a longer tail holds no new straddling start. */
    const size_t keep = L - 1;
    if (np >= keep) {
        memcpy(g->after, piece + np - keep, keep);
        g->after_n = keep;
        return;
    }
    const size_t old = g->after_n + np > keep ? keep - np : g->after_n;
    memmove(g->after, g->after + g->after_n - old, old);
    memcpy(g->after + old, piece, np);
    g->after_n = old + np;
}

/* ---- one generation ---- */

hx_status hx_gen_begin(hx_sequence *s, const int32_t *prompt, int32_t n, const hx_gen_params *gp,
                       hx_gen_cb cb, void *user, hx_gen **out, hx_err *err)
{
    if (n < 1) return hx_err_set(err, HX_E_INVALID, "empty prompt");
    if (n >= s->n_ctx)
        return hx_err_set(err, HX_E_CONTEXT,
                          "the prompt has %d tokens but the context holds %d: no room to generate",
                          n, s->n_ctx);
    hx_gen *g = hx_calloc(1, sizeof *g);
    if (!g) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    g->t0 = hx_now_ms();
    g->s = s, g->gp = gp, g->cb = cb, g->user = user;
    g->n_prompt = n;
    g->stats.n_prompt = n;
    g->stats.stop_index = -1;
    g->stats.finish = HX_FINISH_LENGTH;
    g->limit = gp->max_tokens > 0 ? gp->max_tokens : s->n_ctx - n;
    hx_detok_init(&g->dt, s->tok, 0);
    hx_status st = hx_sampler_init(&gp->sampling, s->m->hp.n_vocab, &g->smp, err);
    if (st == HX_OK && gp->sampling.grammar && gp->sampling.grammar_lazy && gp->grammar_after) {
        g->after_len = strlen(gp->grammar_after);
        if (g->after_len == 0) hx_sampler_grammar_begin(g->smp);
        else if (!(g->after = hx_alloc(g->after_len)))
            st = hx_err_set(err, HX_E_NOMEM, "out of memory");
    }
    if (st != HX_OK) {
        hx_sampler_free(g->smp);
        hx_detok_free(&g->dt);
        hx_free(g);
        return st;
    }
    for (int32_t i = 0; i < n; i++) hx_sampler_accept(g->smp, prompt[i]);
    /* Keep the common prefix with the cache, but always re-run at least the last prompt token:
     * its logits are needed to sample the first new token. */
    int32_t keep = 0;
    while (keep < s->n_tokens && keep < n - 1 && s->tokens[keep] == prompt[keep]) keep++;
    /* The sliding layers must still hold the window before the first new row; else start over. */
    if (s->pool_swa && !hx_kv_table_holds(s->pool_swa, &s->table_swa, keep - s->window + 1, keep))
        keep = 0;
    sequence_truncate(s, keep);
    memcpy(s->tokens + keep, prompt + keep, (size_t)(n - keep) * sizeof *prompt);
    g->n_known = n;
    g->stats.n_cached = keep;
    *out = g;
    return HX_OK;
}

int32_t hx_gen_pending(const hx_gen *g) { return g->done ? 0 : g->n_known - g->s->n_tokens; }

bool hx_gen_prefilling(const hx_gen *g) { return !g->done && g->s->n_tokens < g->n_prompt - 1; }

bool hx_gen_done(const hx_gen *g) { return g->done; }

hx_status hx_gen_reserve(hx_gen *g, int32_t rows, hx_err *err)
{
    hx_sequence *s = g->s;
    const int32_t n = s->n_tokens;
    hx_status st = hx_kv_table_reserve(s->pool, &s->table, n + rows, err);
    if (st != HX_OK || !s->pool_swa) return st;
    /* The sliding layers keep what the new rows' windows reach: from n - window + 1 on. */
    hx_kv_table_drop_before(s->pool_swa, &s->table_swa, n - s->window + 1);
    if ((st = hx_kv_table_reserve(s->pool_swa, &s->table_swa, n + rows, err)) != HX_OK)
        hx_kv_table_truncate(s->pool, &s->table, n); /* nothing taken, as documented */
    return st;
}

void hx_gen_rows(const hx_gen *g, int32_t rows, int32_t seq, int32_t *tokens, int32_t *pos,
                 int32_t *seq_ids, hx_kv_seq *kv, hx_kv_seq *kv_swa)
{
    const hx_sequence *s = g->s;
    for (int32_t i = 0; i < rows; i++) {
        tokens[i] = s->tokens[s->n_tokens + i];
        pos[i] = s->n_tokens + i;
        seq_ids[i] = seq;
    }
    *kv = (hx_kv_seq){s->table.blocks, s->n_tokens + rows};
    *kv_swa = (hx_kv_seq){s->table_swa.blocks, s->n_tokens + rows};
}

bool hx_gen_can_run_ahead(const hx_gen *g)
{
    return !g->done && hx_sampler_runs_ahead(g->smp) && g->stats.n_gen + 1 < g->limit &&
           g->n_known + 1 < g->s->n_ctx;
}

hx_status hx_gen_reserve_ahead(hx_gen *g, hx_err *err)
{
    return hx_gen_reserve(g, g->n_known + 1 - g->s->n_tokens, err);
}

void hx_gen_rows_ahead(const hx_gen *g, int32_t seq, int32_t *pos, int32_t *seq_ids,
                       hx_kv_seq *kv, hx_kv_seq *kv_swa)
{
    const hx_sequence *s = g->s;
    *pos = g->n_known; /* where the token in flight goes */
    *seq_ids = seq;
    *kv = (hx_kv_seq){s->table.blocks, g->n_known + 1};
    *kv_swa = (hx_kv_seq){s->table_swa.blocks, g->n_known + 1};
}

void hx_gen_preempt(hx_gen *g)
{
    sequence_truncate(g->s, 0);
}

void hx_gen_cancel(hx_gen *g)
{
    if (g->done) return;
    g->stats.finish = HX_FINISH_CANCELLED;
    g->done = true;
}

/* Hands text to the callback; a callback asking to stop cancels the generation. */
static void emit(hx_gen *g, const char *text, size_t len, const hx_token_logprobs *lp)
{
    if (g->cb && !g->cb(text, len, lp, g->user)) hx_gen_cancel(g);
}

/* Handles what the next token means: the end of the turn, text (held back while a stop string
 * may be forming), a stop string, the length limits. lp: its log-probabilities, when wanted. */
static void take_token(hx_gen *g, int32_t tok, const hx_token_logprobs *lp)
{
    hx_sequence *s = g->s;
    hx_gen_stats *st = &g->stats;
    if (st->n_gen == 0) {
        g->t_first = hx_now_ms();
        st->first_ms = g->t_first - g->t0;
        st->prompt_ms = st->first_ms;
    }
    const bool grammar_end = hx_sampler_grammar_active(g->smp) &&
                             hx_grammar_vocab_is_end(g->gp->sampling.grammar_vocab, tok);
    if (grammar_end || (!g->gp->ignore_eos &&
                        (hx_tokenizer_is_eot(s->tok, tok) || tok == hx_tokenizer_eos(s->tok)))) {
        st->finish = HX_FINISH_STOP;
        g->done = true;
        return;
    }
    hx_sampler_accept(g->smp, tok);
    st->n_gen++;
    s->tokens[g->n_known++] = tok; /* fed in the next step */
    const char *piece;
    size_t plen;
    hx_status rc = hx_detok_push(&g->dt, tok, &piece, &plen, &g->err);
    if (rc == HX_OK && g->text_len + plen + 1 > g->text_cap) {
        const size_t cap = (g->text_len + plen + 1) * 2;
        char *p = hx_realloc(g->text, cap);
        if (p) g->text = p, g->text_cap = cap;
        else rc = hx_err_set(&g->err, HX_E_NOMEM, "out of memory");
    }
    if (rc != HX_OK) {
        g->status = rc;
        g->done = true;
        return;
    }
    memcpy(g->text + g->text_len, piece, plen);
    g->text_len += plen;
    if (g->after && !hx_sampler_grammar_active(g->smp)) watch_trigger(g, piece, plen);
    const long at = find_stop(g->text, g->text_len, g->gp, &st->stop_index);
    if (at >= 0) { /* hand over what precedes the stop string, drop the rest */
        st->finish = HX_FINISH_STOP;
        if (at > 0) emit(g, g->text, (size_t)at, lp);
        g->stopped_by_string = true;
        g->done = true;
        return;
    }
    const size_t ready = g->text_len - pending_stop_prefix(g->text, g->text_len, g->gp);
    if (ready > 0 || g->gp->every_token) {
        emit(g, g->text, ready, lp);
        if (g->done) {
            g->text_len = 0;
            return;
        }
        memmove(g->text, g->text + ready, g->text_len - ready);
        g->text_len -= ready;
    }
    if (st->n_gen >= g->limit || g->n_known >= s->n_ctx) g->done = true; /* finish: LENGTH */
}

/* Counts the rows a step fed; false when there is nothing to sample (done, or cancelled now). */
static bool fed(hx_gen *g, int32_t rows)
{
    g->s->n_tokens += rows;
    if (g->done) return false;
    if (g->gp->cancelled && g->gp->cancelled(g->user)) {
        hx_gen_cancel(g);
        return false;
    }
    return true;
}

void hx_gen_fed(hx_gen *g, int32_t rows, float *logits)
{
    if (!fed(g, rows) || !logits) return;
    hx_token_logprobs lp_rec, *lp = g->gp->logprobs ? &lp_rec : NULL;
    const int32_t tok = hx_sampler_sample(g->smp, logits, lp);
    take_token(g, tok, lp);
}

bool hx_gen_device_row(hx_gen *g, hx_sample_row *row)
{
    return !g->done && hx_sampler_device_row(g->smp, g->gp->logprobs, row);
}

void hx_gen_fed_drawn(hx_gen *g, int32_t rows, const hx_sample_out *o, int64_t logit_row,
                      float *scratch)
{
    if (!fed(g, rows)) return;
    hx_token_logprobs lp;
    if (g->gp->logprobs) hx_sampler_device_logprobs(g->smp, o, &lp);
    int32_t tok = o->token;
    if (!hx_sampler_device_takes(g->smp, tok)) { /* a grammar refused it: the host goes on */
        hx_llm_read_logits(g->s->m, logit_row, scratch);
        tok = hx_sampler_device_refused(g->smp, scratch, o->token);
        if (g->gp->logprobs) { /* log_z: the drawn token's logit less its log-probability */
            lp.token = tok;
            lp.logprob = scratch[tok] - (scratch[o->token] - o->logprob);
        }
    }
    take_token(g, tok, g->gp->logprobs ? &lp : NULL);
}

hx_status hx_gen_end(hx_gen *g, hx_gen_stats *stats, hx_err *err)
{
    hx_gen_stats *st = &g->stats;
    hx_status rc = g->status;
    if (rc == HX_OK && st->finish != HX_FINISH_CANCELLED && !g->stopped_by_string) {
        /* The end: what the detokenizer still holds, and text held back for a stop string that
         * never completed, are final now. */
        const char *rest;
        size_t rlen;
        rc = hx_detok_flush(&g->dt, &rest, &rlen, &g->err);
        if (rc == HX_OK) {
            if (g->text_len > 0 && g->cb) g->cb(g->text, g->text_len, NULL, g->user);
            if (rlen > 0 && g->cb) g->cb(rest, rlen, NULL, g->user);
        }
    }
    if (st->n_gen == 0 && st->prompt_ms == 0) st->prompt_ms = hx_now_ms() - g->t0;
    st->gen_ms = st->n_gen > 0 ? hx_now_ms() - g->t_first : 0;
    if (rc != HX_OK) hx_err_set(err, rc, "%s", g->err.msg);
    if (stats) *stats = *st;
    hx_free(g->text);
    hx_free(g->after);
    hx_detok_free(&g->dt);
    hx_sampler_free(g->smp);
    hx_free(g);
    return rc;
}

/* ---- a generation alone ---- */

/* One forward step of batch b over the sequence's own pools. */
static hx_status sequence_forward(hx_sequence *s, const hx_batch *b, hx_err *err)
{
    hx_kv_store *swa = s->pool_swa ? &s->pool_swa->store : NULL;
    return hx_llm_forward(s->m, &s->pool->store, swa, b, s->logits, err);
}

/* hx_sequence_generate's step that runs ahead: while the step of draw slot `cur` is in flight,
 * starts the next one (draw slot 1 - cur) when g's row is certain; then reads the one in flight
 * and feeds its draw. Returns whether a step is still in flight (then in slot 1 - cur). */
static bool generate_ahead(hx_sequence *s, hx_gen *g, int32_t rows, hx_sample_row *draw,
                           hx_sample_out *drawn, int cur, hx_status *st, hx_err *err)
{
    const hx_gen_params *gp = g->gp;
    const int nx = 1 - cur;
    hx_err e2 = {0};
    bool next = hx_gen_can_run_ahead(g) && !(gp->cancelled && gp->cancelled(g->user)) &&
                hx_gen_reserve_ahead(g, &e2) == HX_OK && hx_gen_device_row(g, &draw[nx]);
    if (next) {
        hx_kv_seq kvs, kvs_swa;
        hx_gen_rows_ahead(g, 0, s->pos, s->seq, &kvs, &kvs_swa);
        s->ids[0] = HX_TOKEN_DRAWN(0);
        s->rows[0] = 0;
        const hx_batch b = {.n_tok = 1, .tokens = s->ids, .pos = s->pos, .seq = s->seq,
                            .seqs = &kvs, .seqs_swa = &kvs_swa, .n_seqs = 1,
                            .logit_rows = s->rows, .n_logits = 1, .draws = &draw[nx],
                            .drawn = &drawn[nx], .ahead = true};
        *st = sequence_forward(s, &b, err);
        next = *st == HX_OK;
    }
    hx_llm_finish(s->m);
    hx_gen_fed_drawn(g, rows, &drawn[cur], 0, s->logits);
    if (next && hx_gen_done(g)) { /* the row started ahead is not wanted: wait it out */
        hx_llm_finish(s->m);
        next = false;
    }
    return next;
}

hx_status hx_sequence_generate(hx_sequence *s, const int32_t *prompt, int32_t n,
                              const hx_gen_params *gp, hx_gen_cb cb, void *user,
                              hx_gen_stats *stats, hx_err *err)
{
    if (stats) memset(stats, 0, sizeof *stats);
    hx_gen *g = NULL;
    hx_status st = hx_gen_begin(s, prompt, n, gp, cb, user, &g, err);
    if (st != HX_OK) return st;
    /* A step started ahead (the backend draws, and the next row is certain) is read only after
     * the step after it has been started: the host's work between steps overlaps the device's. */
    hx_sample_row draw[2] = {{.top_k = 1}, {.top_k = 1}};
    hx_sample_out drawn[2];
    int cur = 0;
    int32_t in_flight = 0; /* rows of the step started ahead, not yet fed */
    while (!hx_gen_done(g) && st == HX_OK) {
        if (in_flight > 0) {
            const bool more = generate_ahead(s, g, in_flight, draw, drawn, cur, &st, err);
            in_flight = more ? 1 : 0;
            cur = more ? 1 - cur : cur;
            continue;
        }
        const int32_t pending = hx_gen_pending(g);
        const int32_t rows = pending < s->m->max_tok ? pending : (int32_t)s->m->max_tok;
        if (gp->cancelled && gp->cancelled(user)) {
            hx_gen_cancel(g);
            break;
        }
        if ((st = hx_gen_reserve(g, rows, err)) != HX_OK) break;
        hx_kv_seq kvs, kvs_swa;
        hx_gen_rows(g, rows, 0, s->ids, s->pos, s->seq, &kvs, &kvs_swa);
        s->rows[0] = rows - 1; /* a middle chunk's logits are not used, but cost one row */
        const bool last = rows == pending;
        /* The backend draws the token where it can; a middle chunk's row it "draws" greedily,
         * which is cheaper than copying the row back for nothing. */
        draw[cur] = (hx_sample_row){.top_k = 1};
        const bool on_device = s->m->be->sample && (!last || hx_gen_device_row(g, &draw[cur]));
        const bool ahead = on_device && last && hx_llm_can_start_ahead(s->m) &&
                           hx_gen_can_run_ahead(g);
        hx_batch b = {.n_tok = rows, .tokens = s->ids, .pos = s->pos, .seq = s->seq,
                      .seqs = &kvs, .seqs_swa = &kvs_swa, .n_seqs = 1, .logit_rows = s->rows,
                      .n_logits = 1, .draws = on_device ? &draw[cur] : NULL,
                      .drawn = &drawn[cur], .ahead = ahead};
        if ((st = sequence_forward(s, &b, err)) != HX_OK) break;
        if (ahead) in_flight = rows;
        else if (on_device && last) hx_gen_fed_drawn(g, rows, &drawn[cur], 0, s->logits);
        else hx_gen_fed(g, rows, last ? s->logits : NULL);
    }
    const hx_status end = hx_gen_end(g, stats, err);
    return st != HX_OK ? st : end;
}

int32_t hx_sequence_default_ctx(const hx_hparams *hp)
{
    const int32_t ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096;
    return ctx > 8192 ? 8192 : ctx;
}

hx_sampling hx_model_sampling_defaults(const hx_model_files *mf)
{
    hx_sampling p = hx_sampling_default();
    if (!mf->generation_config) return p;
    json_t *g = json_load_file(mf->generation_config, 0, NULL);
    if (!g) return p;
    json_t *v;
    if ((v = json_object_get(g, "temperature")) && json_is_number(v)) p.temperature = (float)json_number_value(v);
    if ((v = json_object_get(g, "top_k")) && json_is_integer(v)) p.top_k = (int32_t)json_integer_value(v);
    if ((v = json_object_get(g, "top_p")) && json_is_number(v)) p.top_p = (float)json_number_value(v);
    if ((v = json_object_get(g, "min_p")) && json_is_number(v)) p.min_p = (float)json_number_value(v);
    if ((v = json_object_get(g, "repetition_penalty")) && json_is_number(v))
        p.repeat_penalty = (float)json_number_value(v);
    if ((v = json_object_get(g, "do_sample")) && json_is_false(v)) p.temperature = 0.0f;
    json_decref(g);
    return p;
}

hx_status hx_sequence_warmup(hx_sequence *s, hx_err *err)
{
    const int64_t rows = s->m->max_tok < s->n_ctx - 2 ? s->m->max_tok : s->n_ctx - 2;
    const char *env = getenv("HEARTH_WARMUP"); /* =0: none (to compare) */
    if (!s->m->be->mem_info || rows < 1 || (env && strcmp(env, "0") == 0)) return HX_OK;
    int32_t *prompt = hx_calloc((size_t)rows, sizeof *prompt); /* token 0, whatever it is */
    if (!prompt) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    hx_gen_params gp = {.max_tokens = 2, .sampling = hx_sampling_default(), .ignore_eos = true};
    const hx_status st = hx_sequence_generate(s, prompt, (int32_t)rows, &gp, NULL, NULL, NULL, err);
    hx_sequence_clear(s);
    hx_free(prompt);
    return st;
}
