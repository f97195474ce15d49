/* sequence.c - the single-sequence generation loop (see sequence.h). */
#define _POSIX_C_SOURCE 200809L
#include "engine/sequence.h"

#include <jansson.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"

#define BLOCK_TOKENS 16

struct hx_sequence {
    hx_llm             *m;
    const hx_tokenizer *tok;
    hx_kv_pool         *pool;
    hx_kv_table         table;
    int32_t             n_ctx;
    int32_t            *tokens; /* [n_ctx] what the cache holds, in order */
    int32_t             n_tokens;
    float              *logits; /* [n_vocab] host: the last row's logits */
    int32_t            *pos, *seq, *rows; /* [max_tok] batch scratch */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

hx_status hx_sequence_init(hx_llm *m, const hx_tokenizer *tok, int32_t n_ctx, hx_sequence **out,
                          hx_err *err)
{
    if (n_ctx < 2) return hx_err_set(err, HX_E_INVALID, "context of %d positions is too small", n_ctx);
    hx_sequence *s = hx_calloc(1, sizeof *s);
    if (!s) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    s->m = m;
    s->tok = tok;
    s->n_ctx = n_ctx;
    const hx_hparams *hp = &m->hp;
    hx_status st = hx_kv_pool_create(m->be, hp->n_layer, hp->n_kv_head, hp->d_head, BLOCK_TOKENS,
                                     (n_ctx + BLOCK_TOKENS - 1) / BLOCK_TOKENS, &s->pool, err);
    if (st != HX_OK) goto fail;
    s->tokens = hx_alloc((size_t)n_ctx * sizeof(int32_t));
    s->logits = hx_alloc((size_t)hp->n_vocab * sizeof(float));
    s->pos = hx_alloc((size_t)m->max_tok * sizeof(int32_t));
    s->seq = hx_calloc((size_t)m->max_tok, sizeof(int32_t));
    s->rows = hx_alloc((size_t)m->max_tok * sizeof(int32_t));
    if (!s->tokens || !s->logits || !s->pos || !s->seq || !s->rows) {
        st = hx_err_set(err, HX_E_NOMEM, "out of memory for a sequence");
        goto fail;
    }
    *out = s;
    return HX_OK;
fail:
    hx_sequence_free(s);
    return st;
}

void hx_sequence_free(hx_sequence *s)
{
    if (!s) return;
    if (s->pool) hx_kv_table_free(s->pool, &s->table);
    hx_kv_pool_free(s->pool);
    hx_free(s->tokens);
    hx_free(s->logits);
    hx_free(s->pos);
    hx_free(s->seq);
    hx_free(s->rows);
    hx_free(s);
}

const int32_t *hx_sequence_tokens(const hx_sequence *s, int32_t *n)
{
    *n = s->n_tokens;
    return s->tokens;
}

/* Runs ids[0..n) at the end of the cache; the logits of the last row land in s->logits.
 * HX_E_CANCELLED when gp->cancelled says so between two chunks. */
static hx_status feed(hx_sequence *s, const int32_t *ids, int32_t n, const hx_gen_params *gp,
                      void *user, hx_err *err)
{
    for (int32_t done = 0; done < n;) {
        if (gp->cancelled && gp->cancelled(user)) return HX_E_CANCELLED;
        const int32_t c = n - done < s->m->max_tok ? n - done : (int32_t)s->m->max_tok;
        const int32_t p0 = s->n_tokens;
        hx_status st = hx_kv_table_reserve(s->pool, &s->table, p0 + c, err);
        if (st != HX_OK) return st;
        for (int32_t i = 0; i < c; i++) {
            s->pos[i] = p0 + i;
            s->tokens[p0 + i] = ids[done + i];
        }
        s->table.n_ctx = p0 + c;
        s->rows[0] = c - 1;
        hx_kv_seq kvs = {s->table.blocks, s->table.n_ctx};
        hx_batch b = {.n_tok = c, .tokens = ids + done, .pos = s->pos, .seq = s->seq,
                      .seqs = &kvs, .n_seqs = 1, .logit_rows = s->rows, .n_logits = 1};
        if ((st = hx_llm_forward(s->m, &s->pool->store, &b, s->logits, err)) != HX_OK) return st;
        s->n_tokens = p0 + c;
        done += c;
    }
    return HX_OK;
}

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

hx_status hx_sequence_generate(hx_sequence *s, const int32_t *prompt, int32_t n,
                              const hx_gen_params *gp, hx_gen_cb cb, void *user,
                              hx_gen_stats *stats, hx_err *err)
{
    const double t0 = now_ms();
    hx_gen_stats st_ = {0};
    hx_gen_stats *stt = stats ? stats : &st_;
    memset(stt, 0, sizeof *stt);
    stt->n_prompt = n;
    stt->stop_index = -1;
    if (n < 1) return hx_err_set(err, HX_E_INVALID, "empty prompt");
    if (n >= s->n_ctx)
        return hx_err_set(err, HX_E_CONTEXT,
                          "the prompt has %d tokens but the context holds %d: no room to generate",
                          n, s->n_ctx);
    /* Keep the common prefix with the cache, but always re-run at least the last prompt token:
     * its logits are needed to sample the first new token. */
    int32_t keep = 0;
    while (keep < s->n_tokens && keep < n - 1 && s->tokens[keep] == prompt[keep]) keep++;
    hx_kv_table_truncate(s->pool, &s->table, keep);
    s->n_tokens = keep;
    stt->n_cached = keep;

    hx_sampler *smp = NULL;
    hx_detok dt;
    hx_detok_init(&dt, s->tok, 0);
    char *text = NULL; /* generated text not yet handed to the callback */
    size_t text_len = 0, text_cap = 0;
    hx_status st = hx_sampler_init(&gp->sampling, s->m->hp.n_vocab, &smp, err);
    if (st != HX_OK) goto done;
    for (int32_t i = 0; i < n; i++) hx_sampler_accept(smp, prompt[i]);
    if ((st = feed(s, prompt + keep, n - keep, gp, user, err)) != HX_OK) {
        if (st == HX_E_CANCELLED) st = HX_OK, stt->finish = HX_FINISH_CANCELLED;
        goto done;
    }
    stt->prompt_ms = now_ms() - t0;

    const int32_t limit = gp->max_tokens > 0 ? gp->max_tokens : s->n_ctx - n;
    stt->finish = HX_FINISH_LENGTH;
    double t_first = 0;
    bool stopped_by_string = false;
    for (;;) {
        hx_token_logprobs lp;
        const int32_t tok = hx_sampler_sample(smp, s->logits, &lp);
        if (stt->n_gen == 0) t_first = now_ms(), stt->first_ms = t_first - t0;
        if (!gp->ignore_eos && (hx_tokenizer_is_eot(s->tok, tok) || tok == hx_tokenizer_eos(s->tok))) {
            stt->finish = HX_FINISH_STOP;
            break;
        }
        hx_sampler_accept(smp, tok);
        stt->n_gen++;
        const char *piece;
        size_t plen;
        if ((st = hx_detok_push(&dt, tok, &piece, &plen, err)) != HX_OK) goto done;
        if (text_len + plen + 1 > text_cap) {
            size_t cap = (text_len + plen + 1) * 2;
            char *p = hx_realloc(text, cap);
            if (!p) { st = hx_err_set(err, HX_E_NOMEM, "out of memory"); goto done; }
            text = p, text_cap = cap;
        }
        memcpy(text + text_len, piece, plen);
        text_len += plen;
        const long at = find_stop(text, text_len, gp, &stt->stop_index);
        if (at >= 0) { /* hand over what precedes the stop string, drop the rest */
            if (at > 0 && cb && !cb(text, (size_t)at, &lp, user)) stt->finish = HX_FINISH_CANCELLED;
            else stt->finish = HX_FINISH_STOP;
            stopped_by_string = true;
            break;
        }
        const size_t ready = text_len - pending_stop_prefix(text, text_len, gp);
        if (ready > 0 || gp->every_token) {
            if (cb && !cb(text, ready, &lp, user)) {
                stt->finish = HX_FINISH_CANCELLED;
                text_len = 0;
                break;
            }
            memmove(text, text + ready, text_len - ready);
            text_len -= ready;
        }
        if (stt->n_gen >= limit || s->n_tokens + 1 >= s->n_ctx) break;
        if ((st = feed(s, &tok, 1, gp, user, err)) != HX_OK) {
            if (st != HX_E_CANCELLED) goto done;
            st = HX_OK;
            stt->finish = HX_FINISH_CANCELLED;
            break;
        }
    }
    if (stt->finish != HX_FINISH_CANCELLED && !stopped_by_string) {
        /* The end: what the detokenizer still holds, and text held back for a stop string that
         * never completed, are final now. */
        const char *rest;
        size_t rlen;
        if ((st = hx_detok_flush(&dt, &rest, &rlen, err)) != HX_OK) goto done;
        if (text_len > 0 && cb) cb(text, text_len, NULL, user);
        if (rlen > 0 && cb) cb(rest, rlen, NULL, user);
    }
    stt->gen_ms = stt->n_gen > 0 ? now_ms() - t_first : 0;
done:
    hx_free(text);
    hx_detok_free(&dt);
    hx_sampler_free(smp);
    return st;
}

void hx_sequence_kv_blocks(const hx_sequence *s, int32_t *used, int32_t *total)
{
    *used = s->table.n_blocks;
    *total = s->pool->store.n_blocks;
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
