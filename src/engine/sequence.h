/* sequence.h - one sequence's generation: prompt prefill, decode loop, stop conditions.
 *
 * A sequence holds a conversation's KV cache (a block table in the pool) and the tokens that
 * cache holds. Generating from a new prompt first keeps the longest common prefix of what is
 * cached (so a chat re-runs only the new turn), prefills the rest in chunks of the model's step
 * size, then decodes one token per step until an end-of-turn token, max_tokens, a stop string,
 * the context limit, or the callback asking to stop. Text reaches the callback as whole UTF-8
 * characters (hx_detok), with any text that could still become a stop string held back.
 *
 * This is the single-sequence engine (issue 4); the batching scheduler (issue 6) will drive the
 * same model forward with rows of many sequences. Owner: one thread at a time. */
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
    hx_sampling        sampling;
    const char *const *stop;        /* stop strings (borrowed), matched on the decoded text */
    int32_t            n_stop;
    bool               ignore_eos;
    bool               every_token; /* call cb for every token, with len 0 while its text is
                                     * not final yet (so logprobs cover each token) */
    /* Polled between prefill chunks and before every decode step with the callback's user
     * pointer; returning true stops the generation (HX_FINISH_CANCELLED). NULL: never. */
    bool (*cancelled)(void *user);
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
 * n_ctx positions. */
hx_status hx_sequence_init(hx_llm *m, const hx_tokenizer *tok, int32_t n_ctx, hx_sequence **out,
                          hx_err *err);
void      hx_sequence_free(hx_sequence *s); /* accepts NULL */

/* Generates a continuation of prompt[0..n). HX_E_CONTEXT when the prompt leaves no room to
 * generate (message has both numbers). */
hx_status hx_sequence_generate(hx_sequence *s, const int32_t *prompt, int32_t n,
                              const hx_gen_params *gp, hx_gen_cb cb, void *user,
                              hx_gen_stats *stats, hx_err *err);

/* The tokens the cache holds (prompt + generated text of the last call), borrowed. */
const int32_t *hx_sequence_tokens(const hx_sequence *s, int32_t *n);

/* KV blocks the sequence holds, and the blocks of its pool. */
void hx_sequence_kv_blocks(const hx_sequence *s, int32_t *used, int32_t *total);

/* Rows per forward step when prefilling (the model's max_tok for sequences). */
#define HX_SEQUENCE_STEP_TOKENS 256

/* The default context of a sequence: the model's trained context, at most 8192 on the CPU. */
int32_t hx_sequence_default_ctx(const hx_hparams *hp);

/* Sampling defaults of a model: hx_sampling_default() overridden by generation_config.json
 * (temperature, top_k, top_p, min_p, repetition_penalty) when the model has one. */
hx_sampling hx_model_sampling_defaults(const hx_model_files *mf);

#endif
