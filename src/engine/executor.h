/* executor.h - runs prepared completions on the engine thread, many at once, in steps.
 *
 * DESIGN §2: a protocol adapter turns a request into an hx_completion (prompt tokens, sampling,
 * stop strings, limits; immutable once submitted, owning its memory), submits it, and reads the
 * job's semantic events (text as it becomes final, then one DONE carrying the finish reason and
 * usage). Streaming and non-streaming responses read the same events; only the formatting
 * differs. HTTP threads only submit, read events and cancel, talking to the engine thread
 * through a mutex and condition variables.
 *
 * The engine thread owns the scheduler: up to n_batch jobs run at once, each on its own sequence
 * in one shared KV pool; every step is one forward pass over a flat batch holding one decode row
 * of each generating job and prefill chunks of new prompts up to step_tokens rows, so a long
 * prompt delays the others' next token by at most one chunk. More jobs wait FIFO, at most
 * max_queue of them (HX_E_BUSY beyond). A finished job's full KV blocks go to the prefix cache,
 * where a later prompt with the same beginning finds them and starts after them. Cancellation is
 * a flag the engine checks every step, so a cancelled job stops within one step, and a job
 * cancelled while queued never runs. */
#ifndef HX_ENGINE_EXECUTOR_H
#define HX_ENGINE_EXECUTOR_H
#include <stdbool.h>

#include "base/arena.h"
#include "engine/sequence.h"

/* A prepared completion. Fill it after hx_completion_new; everything it points to lives in its
 * arena (or is static), or is the grammar reference it owns, so hx_completion_free releases it
 * all. gp.sampling.grammar_vocab is borrowed (the tokenizer's; it outlives the executor). */
typedef struct {
    hx_arena      arena;    /* owns prompt, gp.stop and the strings they point to */
    int32_t      *prompt;   /* [n_prompt] token ids */
    int32_t       n_prompt;
    hx_gen_params gp;       /* sampling, max_tokens (<= 0: until the context is full), stops */
    bool          logprobs; /* attach the completing token's logprobs to text events */
    hx_grammar   *grammar;  /* an owned reference (released by hx_completion_free);
                             * gp.sampling.grammar points to it */
} hx_completion;

hx_completion *hx_completion_new(void); /* zeroed, gp.sampling = hx_sampling_default(); NULL: OOM */
void           hx_completion_free(hx_completion *c); /* accepts NULL */

typedef enum { HX_EVENT_TEXT = 1, HX_EVENT_DONE = 2 } hx_event_kind;

typedef struct {
    hx_event_kind     kind;
    char             *text;    /* TEXT: final UTF-8 text, owned by the event (hx_event_clear) */
    size_t            len;
    bool              has_lp;  /* TEXT: lp is set (logprobs asked for, and a token completed it) */
    hx_token_logprobs lp;
    hx_status         status;  /* DONE: HX_OK, HX_E_CANCELLED, or the failure described in msg */
    char              msg[512];
    hx_gen_stats      stats;   /* DONE: token counts (usage), timings, finish reason */
} hx_event;

void hx_event_clear(hx_event *ev); /* frees ev->text */

typedef struct hx_executor hx_executor;
typedef struct hx_job      hx_job;

typedef struct {
    int32_t n_ctx;        /* positions per sequence */
    int32_t n_batch;      /* jobs advanced together (0: 8) */
    int32_t step_tokens;  /* rows per step, at most the model's max_tok (0: max_tok) */
    int32_t cache_blocks; /* prefix cache capacity in KV blocks of 16 positions (0: none) */
    int32_t max_queue;    /* jobs allowed to wait */
    int32_t kv_blocks;    /* KV pool size in blocks (0: n_batch full contexts + cache_blocks);
                           * smaller pools preempt the newest job when they run out */
    hx_kv_dtype kv;       /* how the pool stores K and V (kv_pool.h); HX_KV_F16 is 0 */
    int64_t dequant_bytes; /* memory the backend may keep as dequantized weights for steps of
                            * many rows (backend.h keep_dequantized; 0: none) */
} hx_executor_params;

/* Starts the engine thread over a bound model (borrowed; must outlive the executor). The KV
 * pool holds n_batch full contexts plus the prefix cache; a model whose sliding layers have a
 * pool of their own (hx_hparams_n_swa_layers) gets there n_batch times hx_kv_window_blocks
 * (window, step_tokens, n_ctx) blocks, and at most as many again for the prefix cache. */
hx_status hx_executor_open(hx_llm *m, const hx_tokenizer *tok, const hx_executor_params *p,
                           hx_executor **out, hx_err *err);
/* Cancels every job, waits for the engine thread to end, frees. Jobs not yet released stay
 * valid (they end with HX_E_CANCELLED) until hx_job_release. Accepts NULL. */
void hx_executor_close(hx_executor *ex);

int32_t hx_executor_n_ctx(const hx_executor *ex); /* positions of the sequence */

/* Queues c (ownership passes to the executor, also on failure). On success *out is the job:
 * read its events with hx_job_next and release it with hx_job_release. HX_E_BUSY when max_queue
 * jobs already wait, HX_E_CANCELLED once hx_executor_shutdown was called. */
hx_status hx_executor_submit(hx_executor *ex, hx_completion *c, hx_job **out, hx_err *err);

/* Stops taking jobs and cancels every queued and running one (their DONE events follow).
 * For a clean shutdown: call it, let the HTTP side drain, then close. */
void hx_executor_shutdown(hx_executor *ex);

/* Waits up to timeout_ms (< 0: forever) for the job's next event. true: *ev holds it (release
 * with hx_event_clear); false: none arrived in time, or DONE was already read. Events arrive in
 * order, and DONE is always the last. One reader per job. */
bool hx_job_next(hx_job *j, hx_event *ev, int timeout_ms);

/* Asks the engine to stop the job (idempotent, any thread): a queued job never runs, a running
 * one stops before its next step. Its DONE event says HX_E_CANCELLED. */
void hx_job_cancel(hx_job *j);

/* The reader is done with the job: cancels it if it has not finished, and frees it once the
 * engine is done with it too. j is invalid afterwards. Accepts NULL. */
void hx_job_release(hx_job *j);

typedef struct {
    int64_t n_served;        /* jobs finished, whatever the reason */
    int32_t n_active;        /* jobs running now (at most n_batch) */
    int32_t n_queued;        /* jobs waiting */
    int64_t n_prompt_tokens; /* prompt tokens of finished jobs */
    int64_t n_cached_tokens; /* of which came from the KV cache */
    int64_t n_gen_tokens;    /* tokens generated */
    double  prompt_ms;       /* total prefill time */
    double  gen_ms;          /* total decode time (after each job's first token) */
    int64_t n_gen_timed;     /* tokens generated inside gen_ms (each job's first excluded) */
    int32_t kv_blocks_used, kv_blocks_total; /* in use (sequences and prefix cache) / all */
    int32_t kv_blocks_cached;  /* held by the prefix cache */
    int32_t kv_window_used, kv_window_total; /* the sliding layers' pool (0, 0 without one) */
    int64_t n_steps;           /* forward steps run */
    int64_t n_preempted;       /* jobs whose KV was taken back to make room (recomputed) */
    int64_t dequant_bytes;     /* what the backend kept of dequant_bytes */
    hx_gen_stats last;       /* the most recently finished job's (for server-overhead figures) */
} hx_executor_stats;

void hx_executor_stats_get(hx_executor *ex, hx_executor_stats *out); /* a consistent snapshot */

#endif
