/* sampler.c - the sampler chain (see sampler.h for the order and its reasons).
 *
 * Truncation needs the best candidates in order. A full sort of a 150k vocabulary costs more
 * than a decode step of a small model, so candidates are first cut with a bounded selection
 * (the k best, k = top_k or 256) and sorted; only when top-p needs more mass than those hold
 * does it fall back to sorting everything. The generator is xoshiro256** seeded by splitmix64.
 *
 * A grammar's mask is applied by building the second pass's candidates from the allowed ids only,
 * which is the chain over logits with the others at -infinity without writing them: the logits
 * stay the model's, which the log-probabilities need. */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

_Static_assert(HX_MAX_LOGPROBS == HX_SAMPLE_N_TOP, "a backend's alternatives fit the record");

typedef struct {
    int32_t id;
    float   v;
} cand;

struct hx_sampler {
    hx_sampling p;
    int32_t     n_vocab;
    int32_t    *bias_ids;
    float      *bias_values;
    int32_t    *hist;     /* ring of the last `hist_cap` tokens */
    int32_t     hist_cap, hist_n, hist_pos;
    int32_t    *counts;   /* [n_vocab] occurrences in the window */
    cand       *cands;    /* [n_vocab] */
    uint64_t    rng[4];
    /* For a backend's draw (hx_sampler_device_row): */
    hx_sample_edit *edits;      /* the bias and penalties as edits, made at the first draw */
    bool            bias_repeats; /* an id twice in the bias: the host adds them one by one */
    /* With a grammar: */
    hx_grammar_state *gs;      /* its recognizer; NULL when restarting it ran out of memory */
    uint8_t          *allowed; /* [n_vocab] its mask (scratch) */
    bool              g_active; /* it constrains the next sample */
    bool              g_moved;  /* gs has advanced since it was started */
};

hx_sampling hx_sampling_default(void)
{
    return (hx_sampling){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                         .repeat_penalty = 1.0f, .penalty_last_n = 64};
}

void hx_sampling_apply_flags(hx_sampling *p, const hx_sampling_flags *f)
{
    if (f->temp_set) p->temperature = f->temp;
    if (f->top_k_set) p->top_k = f->top_k;
    if (f->top_p_set) p->top_p = f->top_p;
    if (f->min_p_set) p->min_p = f->min_p;
    if (f->seed_set) p->seed = f->seed;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s)
{
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

void hx_sampler_reset(hx_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&x);
    memset(s->counts, 0, (size_t)s->n_vocab * sizeof *s->counts);
    s->hist_n = s->hist_pos = 0;
    if (!s->p.grammar) return;
    if (s->g_moved || !s->gs) {
        hx_grammar_state_free(s->gs);
        s->gs = hx_grammar_start(s->p.grammar); /* NULL: nothing allowed, generation ends */
        s->g_moved = false;
    }
    s->g_active = !s->p.grammar_lazy;
}

void hx_sampler_grammar_begin(hx_sampler *s)
{
    if (s->p.grammar) s->g_active = true;
}

bool hx_sampler_grammar_active(const hx_sampler *s)
{
    return s->g_active;
}

hx_status hx_sampler_init(const hx_sampling *p, int32_t n_vocab, hx_sampler **out, hx_err *err)
{
    if (!(p->temperature >= 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1) || !(p->repeat_penalty > 0) ||
        p->n_logprobs < 0 || p->n_logprobs > HX_MAX_LOGPROBS || p->n_bias < 0 || n_vocab < 1)
        return hx_err_set(err, HX_E_INVALID,
                          "sampling settings out of range (temperature >= 0, top_k >= 0, "
                          "0 < top_p <= 1, 0 <= min_p <= 1, repeat_penalty > 0, logprobs 0..%d)",
                          HX_MAX_LOGPROBS);
    for (int32_t i = 0; i < p->n_bias; i++)
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= n_vocab)
            return hx_err_set(err, HX_E_INVALID, "logit bias for token %d outside the vocabulary "
                              "(%d tokens)", p->bias_ids[i], n_vocab);
    if (p->grammar && !p->grammar_vocab)
        return hx_err_set(err, HX_E_INVALID, "a grammar needs the tokenizer's grammar vocab");
    if (p->grammar && hx_grammar_vocab_n_vocab(p->grammar_vocab) > n_vocab)
        return hx_err_set(err, HX_E_INVALID, "grammar vocab of %d tokens, expected at most the "
                          "model's %d", hx_grammar_vocab_n_vocab(p->grammar_vocab), n_vocab);
    hx_sampler *s = hx_calloc(1, sizeof *s);
    if (!s) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->penalty_last_n < 0 ? 1 << 20 : p->penalty_last_n > 0 ? p->penalty_last_n : 1;
    s->counts = hx_calloc((size_t)n_vocab, sizeof *s->counts);
    s->cands = hx_alloc((size_t)n_vocab * sizeof *s->cands);
    s->hist = hx_alloc((size_t)s->hist_cap * sizeof *s->hist);
    s->bias_ids = hx_alloc((size_t)(p->n_bias + 1) * sizeof *s->bias_ids);
    s->bias_values = hx_alloc((size_t)(p->n_bias + 1) * sizeof *s->bias_values);
    if (p->grammar) {
        s->allowed = hx_alloc((size_t)n_vocab);
        s->gs = hx_grammar_start(p->grammar); /* made now either way: begin allocates nothing */
    }
    if (!s->counts || !s->cands || !s->hist || !s->bias_ids || !s->bias_values ||
        (p->grammar && (!s->allowed || !s->gs))) {
        hx_sampler_free(s);
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    }
    if (p->n_bias) {
        memcpy(s->bias_ids, p->bias_ids, (size_t)p->n_bias * sizeof *s->bias_ids);
        memcpy(s->bias_values, p->bias_values, (size_t)p->n_bias * sizeof *s->bias_values);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias_values = s->bias_values;
    for (int32_t i = 0; i < p->n_bias && !s->bias_repeats; i++)
        for (int32_t j = 0; j < i && !s->bias_repeats; j++)
            s->bias_repeats = p->bias_ids[i] == p->bias_ids[j];
    hx_sampler_reset(s);
    *out = s;
    return HX_OK;
}

void hx_sampler_free(hx_sampler *s)
{
    if (!s) return;
    hx_free(s->counts);
    hx_free(s->cands);
    hx_free(s->hist);
    hx_free(s->bias_ids);
    hx_free(s->bias_values);
    hx_free(s->edits);
    hx_grammar_state_free(s->gs);
    hx_free(s->allowed);
    hx_free(s);
}

void hx_sampler_accept(hx_sampler *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab) return;
    if (s->hist_n == s->hist_cap) { /* the oldest token leaves the window */
        s->counts[s->hist[s->hist_pos]]--;
    } else {
        s->hist_n++;
    }
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
    s->counts[token]++;
}

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id); /* ties: lower id first, deterministically */
}

/* Moves the k largest of c[0..n) to the front, sorted descending; returns k. */
static int32_t select_top(cand *c, int32_t n, int32_t k)
{
    if (k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return n;
    }
    /* A min-heap of the best k seen so far, kept in c[0..k). */
    for (int32_t i = k / 2 - 1; i >= 0; i--) {
        for (int32_t j = i;;) {
            int32_t m = j, l = 2 * j + 1, r = l + 1;
            if (l < k && cmp_cand(&c[l], &c[m]) > 0) m = l;
            if (r < k && cmp_cand(&c[r], &c[m]) > 0) m = r;
            if (m == j) break;
            cand t = c[j]; c[j] = c[m]; c[m] = t; j = m;
        }
    }
    for (int32_t i = k; i < n; i++) {
        if (cmp_cand(&c[i], &c[0]) >= 0) continue; /* not better than the worst kept */
        cand t = c[0]; c[0] = c[i]; c[i] = t;
        for (int32_t j = 0;;) {
            int32_t m = j, l = 2 * j + 1, r = l + 1;
            if (l < k && cmp_cand(&c[l], &c[m]) > 0) m = l;
            if (r < k && cmp_cand(&c[r], &c[m]) > 0) m = r;
            if (m == j) break;
            cand u = c[j]; c[j] = c[m]; c[m] = u; j = m;
        }
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
    return k;
}

/* Top-k, temperature, top-p, min-p and a draw over the candidates cands[0..n_all) (id, logit),
 * mx being their largest logit (finite). */
static int32_t draw(hx_sampler *s, int32_t n_all, float mx)
{
    const hx_sampling *p = &s->p;
    cand *c = s->cands;
    /* Truncation: the top_k best (sorted); then top-p over the softmax of what top-k kept, as
     * llama.cpp, vLLM and transformers define it (`total`: that mass, relative to the best
     * logit). Without top-k, top-p needs the whole vocabulary's mass and the order of the best:
     * the best 256 (sorted) when they hold enough, else all sorted; with neither, all unsorted
     * (nothing needs the order). */
    int32_t n = p->top_k > 0 ? select_top(c, n_all, p->top_k) : n_all;
    double total = 0.0;
    if (p->top_p < 1.0f) {
        for (int32_t i = 0; i < n; i++) total += exp((double)(c[i].v - mx) / p->temperature);
        if (p->top_k == 0) {
            n = select_top(c, n_all, n_all < 256 ? n_all : 256);
            double kept = 0.0;
            for (int32_t i = 0; i < n; i++) kept += exp((double)(c[i].v - mx) / p->temperature);
            if (kept < p->top_p * total) n = select_top(c, n_all, n_all);
        }
    }
    for (int32_t i = 0; i < n; i++) c[i].v = (float)exp((double)(c[i].v - mx) / p->temperature);
    int32_t keep = n;
    if (p->top_p < 1.0f) {
        double acc = 0.0;
        for (int32_t i = 0; i < n; i++) {
            acc += c[i].v / total;
            if (acc >= p->top_p) { keep = i + 1; break; }
        }
    }
    if (p->min_p > 0.0f) { /* the best candidate has weight 1 */
        int32_t k = 0;
        for (int32_t i = 0; i < keep; i++)
            if (c[i].v >= p->min_p) c[k++] = c[i];
        keep = k > 0 ? k : 1;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < keep; i++) sum += c[i].v;
    double r = next_unit(s->rng) * sum;
    for (int32_t i = 0; i < keep; i++) {
        r -= c[i].v;
        if (r < 0) return c[i].id;
    }
    return c[keep - 1].id;
}

/* Whether the grammar allows token id now; when it does, the grammar advances over its bytes. */
static bool grammar_takes(hx_sampler *s, int32_t id)
{
    const hx_grammar_vocab *v = s->p.grammar_vocab;
    if (!s->gs || id >= hx_grammar_vocab_n_vocab(v)) return false;
    if (hx_grammar_vocab_is_end(v, id)) return hx_grammar_done(s->gs);
    size_t len;
    const char *bytes = hx_grammar_vocab_token(v, id, &len);
    if (len == 0 || !hx_grammar_accept_bytes(s->gs, bytes, len)) return false;
    s->g_moved = true;
    return true;
}

/* The grammar refused the drawn token: the chain again over the allowed tokens only (the argmax
 * at temperature 0, else a draw with the generator's next number), and the grammar advanced over
 * the result. Nothing allowed: the vocab's first end token (or, in a vocab without one, the
 * refused token: nothing can fit anyway). */
static int32_t constrained(hx_sampler *s, const float *logits, int32_t refused)
{
    const hx_grammar_vocab *v = s->p.grammar_vocab;
    const int32_t V = hx_grammar_vocab_n_vocab(v);
    int32_t n = 0, best = -1;
    float mx = -INFINITY;
    if (s->gs && hx_grammar_mask(s->gs, v, s->allowed) == HX_OK)
        for (int32_t i = 0; i < V; i++) {
            if (!s->allowed[i]) continue;
            s->cands[n++] = (cand){i, logits[i]};
            if (best < 0 || logits[i] > mx) mx = logits[i], best = i;
        }
    if (n == 0) {
        for (int32_t i = 0; i < V; i++)
            if (hx_grammar_vocab_is_end(v, i)) return i;
        return refused;
    }
    /* Allowed tokens whose logits are all -inf (a bias) have no distribution: take the first. */
    const int32_t chosen = s->p.temperature > 0.0f && mx > -INFINITY ? draw(s, n, mx) : best;
    if (!grammar_takes(s, chosen)) { /* the mask allowed it: only out of memory gets here */
        hx_grammar_state_free(s->gs);
        s->gs = NULL; /* nothing is allowed from now on, so generation ends */
    }
    return chosen;
}

static bool penalized(const hx_sampling *p)
{
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

int32_t hx_sampler_sample(hx_sampler *s, float *logits, hx_token_logprobs *lp)
{
    const hx_sampling *p = &s->p;
    const int32_t V = s->n_vocab;
    for (int32_t i = 0; i < p->n_bias; i++) logits[p->bias_ids[i]] += p->bias_values[i];
    if (penalized(p))
        for (int32_t i = 0; i < s->hist_n; i++) {
            const int32_t t = s->hist[i];
            if (s->counts[t] <= 0) continue; /* already penalized (counts is cleared below) */
            float v = logits[t];
            v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
            v -= p->presence_penalty + p->frequency_penalty * (float)s->counts[t];
            logits[t] = v;
            s->counts[t] = -s->counts[t]; /* mark as done for this step */
        }
    for (int32_t i = 0; i < s->hist_n; i++)
        if (s->counts[s->hist[i]] < 0) s->counts[s->hist[i]] = -s->counts[s->hist[i]];

    /* log-softmax normaliser of the adjusted logits, for log-probabilities */
    float mx = -INFINITY;
    int32_t best = 0;
    for (int32_t i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i], best = i;
    float log_z = 0.0f; /* only with lp: a pass of exp over the vocabulary costs ~1 ms */
    if (lp) {
        double z = 0.0;
        for (int32_t i = 0; i < V; i++) z += exp((double)(logits[i] - mx));
        log_z = mx + (float)log(z);
    }

    /* The alternatives first: the chain below reuses cands. */
    if (lp) {
        lp->n_top = p->n_logprobs;
        if (p->n_logprobs > 0) {
            for (int32_t i = 0; i < V; i++) s->cands[i] = (cand){i, logits[i]};
            select_top(s->cands, V, p->n_logprobs);
            for (int32_t i = 0; i < p->n_logprobs; i++) {
                lp->top_ids[i] = s->cands[i].id;
                lp->top_logprobs[i] = s->cands[i].v - log_z;
            }
        }
    }
    int32_t chosen = best;
    if (p->temperature > 0.0f) {
        for (int32_t i = 0; i < V; i++) s->cands[i] = (cand){i, logits[i]};
        chosen = draw(s, V, mx);
    }
    if (s->g_active && !grammar_takes(s, chosen)) chosen = constrained(s, logits, chosen);
    if (lp) {
        lp->token = chosen;
        lp->logprob = logits[chosen] - log_z;
    }
    return chosen;
}

bool hx_sampler_device_row(hx_sampler *s, bool logprobs, hx_sample_row *row)
{
    const hx_sampling *p = &s->p;
    const bool greedy = !(p->temperature > 0.0f);
    if (s->bias_repeats || (!greedy && (p->top_k < 1 || p->top_k > HX_SAMPLE_TOP_K)))
        return false;
    /* The bias, then the penalties of the distinct tokens in the window (an id in both: one
     * edit, the bias applied first, as hx_sampler_sample does). */
    int32_t n = 0;
    if (p->n_bias > 0 || (penalized(p) && s->hist_n > 0)) {
        if (!s->edits) {
            const int32_t distinct = s->hist_cap < s->n_vocab ? s->hist_cap : s->n_vocab;
            s->edits = hx_alloc((size_t)(p->n_bias + distinct) * sizeof *s->edits);
            if (!s->edits) return false; /* the host samples instead */
        }
        for (int32_t i = 0; i < p->n_bias; i++)
            s->edits[n++] = (hx_sample_edit){p->bias_ids[i], p->bias_values[i], 0};
        for (int32_t i = 0; penalized(p) && i < s->hist_n; i++) {
            const int32_t t = s->hist[i];
            if (s->counts[t] <= 0) continue; /* already taken (counts is restored below) */
            int32_t j = 0;
            while (j < p->n_bias && s->edits[j].id != t) j++;
            if (j == p->n_bias) s->edits[j = n++] = (hx_sample_edit){t, 0.0f, 0};
            s->edits[j].count = s->counts[t];
            s->counts[t] = -s->counts[t];
        }
        for (int32_t i = 0; i < s->hist_n; i++)
            if (s->counts[s->hist[i]] < 0) s->counts[s->hist[i]] = -s->counts[s->hist[i]];
    }
    *row = (hx_sample_row){.temperature = greedy ? 0.0f : p->temperature,
                           .top_k = greedy ? 1 : p->top_k, .top_p = p->top_p,
                           .min_p = p->min_p, .u = greedy ? 0.0 : next_unit(s->rng),
                           .logprobs = logprobs, .n_top = logprobs ? p->n_logprobs : 0,
                           .repeat_penalty = p->repeat_penalty,
                           .presence_penalty = p->presence_penalty,
                           .frequency_penalty = p->frequency_penalty, .edits = s->edits,
                           .n_edits = n};
    return true;
}

bool hx_sampler_runs_ahead(const hx_sampler *s)
{
    return !penalized(&s->p) && !s->p.grammar && !s->bias_repeats;
}

bool hx_sampler_device_takes(hx_sampler *s, int32_t token)
{
    return !s->g_active || grammar_takes(s, token);
}

int32_t hx_sampler_device_refused(hx_sampler *s, const float *logits, int32_t refused)
{
    return constrained(s, logits, refused);
}

void hx_sampler_device_logprobs(const hx_sampler *s, const hx_sample_out *o, hx_token_logprobs *lp)
{
    lp->token = o->token;
    lp->logprob = o->logprob;
    lp->n_top = s->p.n_logprobs;
    memcpy(lp->top_ids, o->top_ids, (size_t)lp->n_top * sizeof *lp->top_ids);
    memcpy(lp->top_logprobs, o->top_logprobs, (size_t)lp->n_top * sizeof *lp->top_logprobs);
}
