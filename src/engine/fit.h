/* fit.h - the memory contract: what a model will hold in RAM (or on a GPU) before it is loaded.
 *
 * hx_fit_compute reads only a model's description (hx_model_files: hyper-parameters, tensor
 * dtypes, shapes and offsets; no weight bytes) and predicts the peak resident memory of serving
 * it on the CPU backend of this machine with n_batch sequences of n_ctx positions, term by
 * term: weights (the CPU backend's repacked copies plus the mapped tensors it reads in place),
 * the KV pool, one step's activation scratch, the embedding rows in use, the extra held only
 * while loading, and a fixed runtime overhead; or, when the parameters give a GPU's memory,
 * what the CUDA backend holds on that GPU (below). From those it answers whether the model fits a
 * budget and the largest context per sequence that does, and, given a read bandwidth, the
 * decode speed the memory roofline allows. docs/memory.md explains every term and what is not
 * counted.
 *
 * Each term mirrors an allocation in the code that makes it (llama.c hx_llm_open, cpu_backend.c
 * cpu_reserve and cpu_weight, kv_pool.c, sequence.c); test_fit.c checks the mirror against the
 * allocator's live-byte count, so a change there that is not made here fails a test.
 *
 * On a GPU the same terms count device memory (cuda_backend.c): the weights as uploaded in
 * their file formats, the KV pool, the activations and matmul scratch, and a fixed runtime
 * overhead; the embedding rows and the load transient are 0 (the whole table is uploaded with
 * the weights; nothing is repacked), and the host's own memory is not counted.
 *
 * Deterministic: the same file and parameters give the same numbers on the same machine (the
 * machine enters through its ISA, which decides repacking, its page size and, for the default
 * budget, its RAM or the GPU's free memory given). Pure computation: no allocation beyond a
 * small sort buffer, no I/O. */
#ifndef HX_ENGINE_FIT_H
#define HX_ENGINE_FIT_H
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "backend/backend.h"
#include "format/model_files.h"

/* Element type of the KV cache. F16 is what the CPU backend stores today; Q8 and Q4 are the
 * per-block affine formats planned as a memory lever: 32 elements share an f16 scale and an f16
 * minimum, so 36 and 20 bytes per 32 elements. */
/* The KV element type is the pool's, hx_kv_dtype (backend/backend.h). */

/* Whether matmul weights are taken as repacked copies (anonymous memory) or read from the
 * mapping. AUTO decides as the CPU backend does on this machine (packed.h: AVX-512 VNNI). */
typedef enum { HX_FIT_REPACK_AUTO = 0, HX_FIT_REPACK_NEVER = 1, HX_FIT_REPACK_ALWAYS = 2 } hx_fit_repack;

typedef struct {
    int32_t        n_ctx;                 /* positions per sequence; 0: hx_sequence_default_ctx */
    int32_t        n_batch;               /* concurrent sequences; 0: 8 */
    hx_kv_dtype    kv_type;               /* HX_KV_F16 by default */
    uint64_t       budget_bytes;          /* 0: 75% of the RAM this process may use (physical
                                           * memory, or the cgroup limit when lower) */
    double         bandwidth_bytes_per_s; /* 0: no speed prediction */
    int32_t        n_threads;             /* CPU threads (per-thread scratch); 0: physical cores */
    hx_fit_repack  repack;                /* HX_FIT_REPACK_AUTO by default */
    /* A GPU's memory (its backend's mem_info, or hx_gpu_list before one is opened). When
     * device_total_bytes is set the fit is of that device's memory, not the host's; 0 (the
     * default): the CPU backend. */
    uint64_t       device_total_bytes;
    uint64_t       device_free_bytes;     /* free before the model is loaded; the default budget
                                           * on the device is 95% of it (of the total when 0) */
} hx_fit_params;

hx_fit_params hx_fit_params_default(void); /* n_batch 8, everything else 0 / AUTO / F16 */

/* The prediction. All sizes in bytes; total = weights + kv + scratch + embed + load + overhead. */
typedef struct {
    /* the parameters as resolved */
    int32_t        n_ctx, n_batch, n_threads;
    hx_kv_dtype    kv_type;
    bool           repacked;          /* the CPU backend repacks this model's quantized matmuls */
    int32_t        n_ctx_train;       /* the model's trained context (0: unknown) */
    /* the terms */
    uint64_t weights_bytes;           /* resident weights: repacked copies + mapped tensors */
    uint64_t weights_packed_bytes;    /*   of which repacked copies (anonymous memory) */
    uint64_t kv_bytes;                /* the KV pool: n_batch x n_ctx (rounded up to a block of
                                       * 16) positions x kv_bytes_per_token, except that sliding
                                       * layers (Gemma 2/3) keep only their window's blocks */
    uint64_t kv_bytes_per_token;      /* one position, K and V of every layer */
    int32_t  kv_window_layers;        /* layers whose KV is kept for their window only (Gemma
                                       * 2/3's sliding ones; 0: every layer keeps every position) */
    int32_t  kv_window;               /* that window in positions (0 when none) */
    uint64_t scratch_bytes;           /* activations and per-sequence buffers that get written */
    uint64_t scratch_reserved_bytes;  /* the same buffers as allocated (address space; untouched
                                       * pages of them are not resident) */
    uint64_t embed_bytes;             /* token-embedding rows the contexts use (pages of the file) */
    uint64_t load_bytes;              /* held only while loading, beyond what the others cover:
                                       * file pages of the largest tensor being repacked */
    uint64_t overhead_bytes;          /* process, libc, tokenizer, template, file metadata */
    uint64_t total_bytes;
    uint64_t budget_bytes;
    bool     fits;                    /* total <= budget */
    int32_t  max_ctx;                 /* largest n_ctx (multiple of 16, at most n_ctx_train) that
                                       * fits the budget at n_batch; 0 if none does */
    /* speed: decode of one sequence reads every weight once per token */
    uint64_t read_bytes_per_token;    /* matmul weights + output projection + norms + the KV of
                                       * n_ctx / 2 positions (the average over a full context) */
    double   bandwidth_bytes_per_s;   /* as given; 0: none */
    double   decode_tok_s;            /* bandwidth / read_bytes_per_token; 0 without bandwidth */
    double   decode_tok_s_batch;      /* n_batch sequences sharing each weight read: the total
                                       * tokens per second of a full batch; 0 without bandwidth */
    /* the device: the GPU's memory as given (both 0 on the CPU, whose budget is the host's) */
    uint64_t device_total_bytes;
    uint64_t device_free_bytes;
} hx_fit_report;

/* Predicts the memory of serving mf with p (NULL: hx_fit_params_default()). On success fills
 * *out (also when the model does not fit: out->fits says so) and returns HX_OK. Fails with
 * HX_E_INVALID for negative n_ctx or n_batch or an unknown kv_type, HX_E_FORMAT when a tensor
 * the forward pass needs is missing or the hyper-parameters are out of range, HX_E_NOMEM;
 * *out is untouched then. mf is borrowed. */
hx_status hx_fit_compute(const hx_model_files *mf, const hx_fit_params *p, hx_fit_report *out,
                         hx_err *err);

/* 75% of the memory this process may use: min(physical RAM, cgroup limit). 0 when unknown. */
uint64_t hx_fit_default_budget(void);

/* The default budget on a GPU with free_bytes free of total_bytes: 95% of the free memory (of
 * the total when the free is unknown, 0). */
uint64_t hx_fit_default_device_budget(uint64_t free_bytes, uint64_t total_bytes);


#endif
