/* sampler.h - turning one row of logits into one token: the sampler chain of a sequence.
 *
 * Order of the chain: logit bias, repetition / presence / frequency penalties over the last
 * penalty_last_n tokens of the sequence (prompt included), then either argmax (temperature 0)
 * or top-k, temperature, softmax, top-p, min-p and a draw from a seeded generator. The same
 * seed, logits and settings always give the same token. Log-probabilities are those of the
 * biased and penalized logits at temperature 1 (what the model assigns, before truncation and
 * before any grammar mask).
 *
 * Structured output: with a grammar (sample/grammar.h) the token returned is always one the
 * grammar allows: a token whose bytes it accepts, or an end token exactly when the text so far is
 * a complete sentence. Masking the whole vocabulary every step would cost more than a small
 * model's decode step, so the chain runs first as if unconstrained and only the drawn token is
 * checked; only when the grammar refuses it is the mask computed, and the chain runs again over
 * the allowed tokens A only (truncation included) with the generator's next number: rejection
 * with a fallback. What that gives, for x in A: at temperature 0, the argmax over A. Otherwise,
 * with q the chain's distribution over the whole vocabulary and q' the chain's over A,
 * P(x) = q(x) + (1 - q(A)) q'(x). With top-k, top-p and min-p off, q'(x) = q(x) / q(A), so P is
 * exactly the model's distribution renormalized over A. With truncation it is a mixture that
 * leans towards the allowed tokens the unconstrained truncation kept. When nothing at all is
 * allowed (a grammar that dead-ends, or out of memory), the vocab's first end token (lowest id)
 * is returned so that generation ends; a vocab without end tokens gets the refused draw.
 *
 * A sampler belongs to one sequence and one thread at a time. */
#ifndef HX_SAMPLE_SAMPLER_H
#define HX_SAMPLE_SAMPLER_H
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/err.h"
#include "sample/grammar.h"

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
    const hx_grammar       *grammar;       /* NULL: unconstrained; borrowed, must outlive the
                                            * sampler (an hx_completion holds a reference) */
    const hx_grammar_vocab *grammar_vocab; /* the tokenizer's, required with grammar; borrowed */
    bool                    grammar_lazy;  /* the grammar starts only at hx_sampler_grammar_begin */
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

/* Copies params (bias arrays included; the grammar and its vocab are borrowed). With a grammar
 * it starts its recognizer, active at once unless grammar_lazy. HX_E_INVALID names a setting out
 * of range, a grammar without grammar_vocab, or a grammar vocab larger than n_vocab (a smaller one
 * is fine: the model's padding ids past it are never allowed). HX_E_NOMEM. */
hx_status hx_sampler_init(const hx_sampling *params, int32_t n_vocab, hx_sampler **out,
                          hx_err *err);
void      hx_sampler_free(hx_sampler *s); /* accepts NULL */

/* Adds a token to the history the penalties see (prompt tokens and generated ones). */
void hx_sampler_accept(hx_sampler *s, int32_t token);
/* Forgets the history (a new sequence), re-seeds the generator and restarts the grammar at its
 * root (inactive again when lazy). Restarting a grammar that had advanced allocates; out of
 * memory there leaves it with nothing allowed, so the next constrained sample ends generation. */
void hx_sampler_reset(hx_sampler *s);

/* Makes a lazy grammar constrain the tokens from the next sample on, from its root (no-op when
 * already active or when there is no grammar). Allocates nothing: the recognizer was made at
 * init. */
void hx_sampler_grammar_begin(hx_sampler *s);
/* The grammar constrains the next sample. */
bool hx_sampler_grammar_active(const hx_sampler *s);

/* Picks the next token from logits[n_vocab] (bias and penalties are applied in place). When lp
 * is not NULL it receives the chosen token's log-probability and the n_logprobs best
 * alternatives (of the model, before the grammar's mask). Does not add the token to the penalty
 * history: call hx_sampler_accept once it is kept. With an active grammar, though, the token
 * returned is considered kept: its bytes advance the grammar here (an end token leaves the
 * grammar where it is). */
int32_t hx_sampler_sample(hx_sampler *s, float *logits, hx_token_logprobs *lp);

/* Whether a backend's `sample` op (backend/backend.h) can draw the next token instead of
 * hx_sampler_sample: unless an id appears twice in the logit bias, or top_k is off or above
 * HX_SAMPLE_TOP_K at a temperature above 0. Then it fills *row (the bias and penalties as its
 * edits, valid until the next call on s; with logprobs, the log-probabilities asked for too) and
 * takes the draw's number from the generator as hx_sampler_sample would have, so the op's token
 * is the one hx_sampler_sample would have drawn first and the generator stays in step. The
 * drawn token then goes to hx_sampler_device_takes. */
bool hx_sampler_device_row(hx_sampler *s, bool logprobs, hx_sample_row *row);
/* Whether the device row of the token after next may be asked for (hx_sampler_device_row)
 * before the next one is kept: no penalties (the row's edits would count the next token) and
 * no grammar (the next token could advance or start it, or be refused). Then a backend can draw
 * one step ahead of the host, and the generator's numbers come in the same order. */
bool hx_sampler_runs_ahead(const hx_sampler *s);
/* Whether the token a backend drew stands: always without an active grammar; with one, when
 * the grammar takes it (and then it advances over it, as in hx_sampler_sample). When it does
 * not, hx_sampler_device_refused goes on as hx_sampler_sample would have: the chain again over
 * the allowed tokens with the generator's next number, from the row's logits as the op left
 * them (its edits applied). Either way the token is kept as one from hx_sampler_sample. */
bool    hx_sampler_device_takes(hx_sampler *s, int32_t token);
int32_t hx_sampler_device_refused(hx_sampler *s, const float *logits, int32_t refused);
/* The op's result as hx_sampler_sample's log-probabilities record. */
void hx_sampler_device_logprobs(const hx_sampler *s, const hx_sample_out *o,
                                hx_token_logprobs *lp);

#endif
