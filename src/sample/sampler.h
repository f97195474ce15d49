/* sampler.h - turning one row of logits into one token: the sampler chain of a sequence.
 *
 * Order of the chain: logit bias, repetition / presence / frequency penalties over the last
 * penalty_last_n tokens of the sequence (prompt included), then either argmax (temperature 0)
 * or top-k, temperature, softmax, top-p, min-p and a draw from a seeded generator. The same
 * seed, logits and settings always give the same token. Log-probabilities are those of the
 * biased and penalized logits at temperature 1 (what the model assigns, before truncation).
 * A sampler belongs to one sequence and one thread at a time. */
#ifndef HX_SAMPLE_SAMPLER_H
#define HX_SAMPLE_SAMPLER_H
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct {
    float          temperature;       /* 0: greedy */
    int32_t        top_k;             /* 0: off */
    float          top_p;             /* 1: off */
    float          min_p;             /* 0: off */
    float          repeat_penalty;    /* 1: off (divides positive logits, multiplies negative) */
    float          presence_penalty;  /* 0: off (subtracted once per seen token) */
    float          frequency_penalty; /* 0: off (subtracted per occurrence) */
    int32_t        penalty_last_n;    /* window of history the penalties look at; -1: all */
    uint64_t       seed;
    int32_t        n_logprobs;        /* alternatives to report, 0..20 */
    const int32_t *bias_ids;          /* logit bias: added to the logits of these ids */
    const float   *bias_values;
    int32_t        n_bias;
} hx_sampling;

/* temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off, window 64, seed 0. */
hx_sampling hx_sampling_default(void);

/* Sampling settings given as flags (command line, server start): each applies only when set,
 * over the defaults it is applied to. */
typedef struct {
    bool     temp_set, top_k_set, top_p_set, min_p_set, seed_set;
    float    temp, top_p, min_p;
    int32_t  top_k;
    uint64_t seed;
} hx_sampling_flags;

void hx_sampling_apply_flags(hx_sampling *p, const hx_sampling_flags *f);

#define HX_MAX_LOGPROBS 20

typedef struct {
    int32_t token;
    float   logprob;
    int32_t n_top;
    int32_t top_ids[HX_MAX_LOGPROBS];
    float   top_logprobs[HX_MAX_LOGPROBS];
} hx_token_logprobs;

typedef struct hx_sampler hx_sampler;

/* Copies params (bias arrays included). HX_E_INVALID names a setting out of range. */
hx_status hx_sampler_init(const hx_sampling *params, int32_t n_vocab, hx_sampler **out,
                          hx_err *err);
void      hx_sampler_free(hx_sampler *s); /* accepts NULL */

/* Adds a token to the history the penalties see (prompt tokens and generated ones). */
void hx_sampler_accept(hx_sampler *s, int32_t token);
/* Forgets the history (a new sequence) and re-seeds the generator. */
void hx_sampler_reset(hx_sampler *s);

/* Picks the next token from logits[n_vocab] (modified in place). When lp is not NULL it receives
 * the chosen token's log-probability and the n_logprobs best alternatives. Does not accept the
 * token: call hx_sampler_accept once it is kept. */
int32_t hx_sampler_sample(hx_sampler *s, float *logits, hx_token_logprobs *lp);

#endif
