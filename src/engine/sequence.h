/* sequence.h - one sequence's generation: prompt prefill, decode steps, stop conditions.
 *
 * A sequence holds a conversation's KV cache (a block table in a pool) and the tokens that cache
 * holds. A generation (hx_gen) on it first keeps the longest common prefix of what is cached (so
 * a chat re-runs only the new turn), then is fed in steps: prefill chunks of the prompt, then one
 * token per step, each sampled from the logits of the row before, until an end-of-turn token,
 * max_tokens, a stop string, the context limit, or cancellation. Text reaches the callback as
 * whole UTF-8 characters (hx_detok), with any text that could still become a stop string held
 * back.
 *
 * The steps are driven from outside: hx_sequence_generate runs one generation alone (a batch of
 * one), and the scheduler (executor.c) puts the rows of many generations into each forward
 * step. Either way a generation goes through the same functions, so a feature works the same
 * alone and batched. Owner: one thread at a time. */
#ifndef HX_ENGINE_SEQUENCE_H
#define HX_ENGINE_SEQUENCE_H
#include <stdbool.h>
#include <stddef.h>

#include "kv/kv_pool.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int32_t            max_tokens;  /* <= 0: until the context is full */
    hx_sampling        sampling;    /* with a grammar: structured output (sampler.h) */
    const char *const *stop;        /* stop strings (borrowed), matched on the decoded text */
    int32_t            n_stop;
    bool               ignore_eos;  /* an end token the grammar chose still ends the turn */
    bool               every_token; /* call cb for every token, with len 0 while its text is
                                     * not final yet (so logprobs cover each token) */
    bool               logprobs;    /* give cb the tokens' log-probabilities (else lp is NULL) */
    /* Polled between prefill chunks and before every decode step with the callback's user
     * pointer; returning true stops the generation (HX_FINISH_CANCELLED). NULL: never. */
    bool (*cancelled)(void *user);
    /* With sampling.grammar_lazy: the grammar begins right after the generated text (not the
     * prompt) first contains this string, e.g. "</think>" (special tokens count with their text;
     * the string may straddle tokens). It constrains from the next token on: whatever follows
     * the string in the token that completed it is not checked. NULL: a lazy grammar never
     * begins. "": it begins before the first token. Borrowed. */
    const char *grammar_after;
} hx_gen_params;

typedef enum { HX_FINISH_STOP, HX_FINISH_LENGTH, HX_FINISH_CANCELLED } hx_finish;

typedef struct {
    int32_t   n_prompt;   /* prompt tokens */
    int32_t   n_cached;   /* of which were already in the cache */
    int32_t   n_gen;      /* tokens generated */
    double    prompt_ms;  /* prefill time */
    double    gen_ms;     /* decode time after the first token */
    double    first_ms;   /* from the call to the first token */
    hx_finish finish;
    int32_t   stop_index; /* finish STOP by a stop string: its index in gp->stop; else -1 */
} hx_gen_stats;

/* Receives text as it becomes final. lp is the logprob record of the token that completed the
 * text (NULL for text flushed at the end). Return false to stop: generate then finishes with
 * HX_FINISH_CANCELLED. text is borrowed. */
typedef bool (*hx_gen_cb)(const char *text, size_t len, const hx_token_logprobs *lp, void *user);

typedef struct hx_sequence hx_sequence;

/* A sequence over a model (borrowed), its tokenizer (borrowed) and a KV pool of its own sized for
 * n_ctx positions, storing K and V as kv (HX_KV_F16, or 8-/4-bit: kv_pool.h). */
hx_status hx_sequence_init(hx_llm *m, const hx_tokenizer *tok, int32_t n_ctx, hx_kv_dtype kv,
                          hx_sequence **out, hx_err *err);
/* The same over pools shared with other sequences (borrowed; the scheduler's): up to n_ctx
 * positions, blocks taken from the pools as the sequence grows. pool_swa holds the sliding
 * layers when the model splits its cache (hx_hparams_n_swa_layers > 0; NULL otherwise), of
 * which a sequence keeps hx_kv_window_blocks(sliding_window, rows of a step, n_ctx) at most. */
hx_status hx_sequence_init_shared(hx_llm *m, const hx_tokenizer *tok, hx_kv_pool *pool,
                                  hx_kv_pool *pool_swa, int32_t n_ctx, hx_sequence **out,
                                  hx_err *err);
/* On a backend with memory of its own (a GPU, whose code loads at first use), generates two
 * tokens after a prompt of one full step and forgets them, so that a user's first request does
 * not pay for the loading (a fresh process's first 512-token prompt on an 8B model took ~60 ms
 * longer than the next). Nothing on the CPU. hx_sequence_init does it; the scheduler does it
 * once on one of its sequences. */
hx_status hx_sequence_warmup(hx_sequence *s, hx_err *err);
void      hx_sequence_free(hx_sequence *s); /* accepts NULL */

/* Forgets what the cache holds, releasing its blocks. */
void hx_sequence_clear(hx_sequence *s);
/* Makes an empty sequence hold tokens[0..n_tokens) in blocks[0..n_blocks) (references the
 * caller already holds pass to the sequence; n_tokens needs all n_blocks and fits in them): a
 * prefix found in the prefix cache. A partial last block must be the sequence's alone (a copy),
 * since the sequence writes its next positions into it. blocks_swa: the sliding layers' blocks
 * of the same positions (-1 where not held; those the next rows' windows reach must be there),
 * NULL exactly when the sequence has no sliding pool. */
void hx_sequence_adopt(hx_sequence *s, const int32_t *tokens, const int32_t *blocks,
                       const int32_t *blocks_swa, int32_t n_blocks, int32_t n_tokens);
/* The block table and its length (for the prefix cache); the sliding pool's table (same length,
 * -1 for blocks dropped) or NULL without one. */
const int32_t *hx_sequence_blocks(const hx_sequence *s, int32_t *n_blocks);
const int32_t *hx_sequence_blocks_swa(const hx_sequence *s);

/* ---- one generation, driven in steps ---- */

typedef struct hx_gen hx_gen;

/* Starts generating a continuation of prompt[0..n) on s (whose cache is kept up to the common
 * prefix). On success *out is the generation; HX_E_CONTEXT when the prompt leaves no room to
 * generate (message has both numbers), HX_E_INVALID for an empty prompt or bad sampling. gp
 * (with the stop strings it points to) and user must outlive the generation. */
hx_status hx_gen_begin(hx_sequence *s, const int32_t *prompt, int32_t n, const hx_gen_params *gp,
                       hx_gen_cb cb, void *user, hx_gen **out, hx_err *err);
/* Rows the generation wants fed next: the rest of the prompt, then 1 per step; 0 once done. */
int32_t hx_gen_pending(const hx_gen *g);
bool    hx_gen_prefilling(const hx_gen *g); /* still feeding its prompt */
/* Makes KV room for the next `rows` rows. HX_E_CONTEXT when the pool is out of blocks (nothing
 * changes then: free blocks and retry, or preempt). */
hx_status hx_gen_reserve(hx_gen *g, int32_t rows, hx_err *err);
/* Writes the next `rows` rows into a batch at its row r0 (tokens, positions, sequence index
 * seq), and the sequence's KV views counting them (kv_swa: the sliding pool's, unused without
 * one). */
void hx_gen_rows(const hx_gen *g, int32_t rows, int32_t seq, int32_t *tokens, int32_t *pos,
                 int32_t *seq_ids, hx_kv_seq *kv, hx_kv_seq *kv_swa);
/* After a forward step fed `rows` rows: when they were the last pending ones, logits is the last
 * row's [n_vocab] (modified: sampling works in place) and the next token is sampled, its text
 * handed to the callback, and stop conditions checked; otherwise logits is NULL. */
void hx_gen_fed(hx_gen *g, int32_t rows, float *logits);
/* Before a step whose last row of g is its last pending one, on a backend with `sample`: true
 * when the backend may draw g's next token (hx_sampler_device_row), with *row filled (valid
 * until the step); then hx_gen_fed_drawn takes what the backend drew. */
bool hx_gen_device_row(hx_gen *g, hx_sample_row *row);
/* hx_gen_fed for what the backend drew from logit row logit_row of the step. When a grammar
 * refuses the token, the row's logits are read into scratch [n_vocab] (host memory) and the
 * host samples from them (hx_sampler_device_refused). */
void hx_gen_fed_drawn(hx_gen *g, int32_t rows, const hx_sample_out *o, int64_t logit_row,
                      float *scratch);
/* Running ahead (hx_batch.ahead): while a step that feeds g's last known token is in flight,
 * the step after it may be started before this one's draw is read, feeding that draw as
 * HX_TOKEN_DRAWN. hx_gen_can_run_ahead says whether that is sound: the draw in flight cannot
 * end the generation by length, and the sampler runs ahead (hx_sampler_runs_ahead); a stop
 * token or string, or a cancellation, can still end it, and then the row started ahead is
 * thrown away (never fed). hx_gen_reserve_ahead makes KV room for that row and
 * hx_gen_rows_ahead writes it (its token is the caller's to set); after the step in flight's
 * hx_gen_fed_drawn, the row is fed as any other (rows 1), unless g is done. */
bool      hx_gen_can_run_ahead(const hx_gen *g);
hx_status hx_gen_reserve_ahead(hx_gen *g, hx_err *err);
void      hx_gen_rows_ahead(const hx_gen *g, int32_t seq, int32_t *pos, int32_t *seq_ids,
                            hx_kv_seq *kv, hx_kv_seq *kv_swa);
/* Gives back the generation's KV blocks; it re-feeds everything it holds later (preemption). */
void hx_gen_preempt(hx_gen *g);
bool hx_gen_done(const hx_gen *g);
/* Stops a generation that has not finished (as cancelled). */
void hx_gen_cancel(hx_gen *g);
/* Ends the generation: flushes text still held back (unless cancelled or stopped by a stop
 * string), fills stats, frees it. Returns its status (a failure inside a step, else HX_OK). */
hx_status hx_gen_end(hx_gen *g, hx_gen_stats *stats, hx_err *err);

/* Generates a continuation of prompt[0..n) alone: hx_gen_begin, then steps of one sequence
 * until done. HX_E_CONTEXT when the prompt leaves no room to generate (message has both
 * numbers). */
hx_status hx_sequence_generate(hx_sequence *s, const int32_t *prompt, int32_t n,
                              const hx_gen_params *gp, hx_gen_cb cb, void *user,
                              hx_gen_stats *stats, hx_err *err);

/* The tokens the cache holds (prompt + generated text of the last call), borrowed. */
const int32_t *hx_sequence_tokens(const hx_sequence *s, int32_t *n);

/* Rows per forward step when prefilling (the model's max_tok for sequences). A GPU takes four
 * times more: its prefill multiplies dequantized f16 weights on the tensor cores, and each step
 * dequantizes every weight once, a cost that 1,024 rows amortise four times better (decode rows
 * of other sequences wait at most one such step: a few milliseconds there). */
#define HX_SEQUENCE_STEP_TOKENS     256
#define HX_SEQUENCE_STEP_TOKENS_GPU 1024

/* The default context of a sequence: the model's trained context, at most 8192 on the CPU. */
int32_t hx_sequence_default_ctx(const hx_hparams *hp);

/* Sampling defaults of a model: hx_sampling_default() overridden by generation_config.json
 * (temperature, top_k, top_p, min_p, repetition_penalty) when the model has one. */
hx_sampling hx_model_sampling_defaults(const hx_model_files *mf);

#endif
