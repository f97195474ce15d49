/* backend.h - the operations a transformer forward pass needs, as a table of functions.
 *
 * Model code (src/model) is written once against this table and never touches device memory:
 * activations live in buffers the backend allocates, weights are hx_tensor views the backend
 * prepared at load (it may repack or upload them), and the KV cache is a pool of fixed-size blocks whose
 * storage the backend owns. A backend (cpu/, cuda/) implements the table, nothing else;
 * device.h picks one by name.
 *
 * Shapes use the project vocabulary (src/model/model.h): n_tok rows of a flat batch, d_model,
 * n_head, n_kv_head, d_head. Every activation is row-major f32 unless stated. Ops are
 * synchronous from the caller's point of view; a backend may queue work internally as long as
 * results are visible to the next op and to `read`. Small host arrays an op takes
 * (ids, pos, block tables, rows) are read or copied before it returns, so the caller may reuse
 * them; hx_tensor arguments (norm weights, biases, the embedding table) live as long as the
 * model, so a device backend may upload each once and keep it. */
#ifndef HX_BACKEND_BACKEND_H
#define HX_BACKEND_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "tensor/tensor.h"

typedef struct hx_backend hx_backend;

/* Rotary embedding of one model: per-pair inverse frequencies (rope scaling already applied),
 * the attention magnitude factor (YaRN) and the layout of the rotated pairs. */
typedef struct {
    const float *inv_freq; /* [n_rot / 2], owned by the model */
    int32_t      n_rot;    /* leading dims of each head that rotate (d_head for Llama) */
    float        mscale;   /* multiplies cos and sin; 1 without YaRN */
    bool         pairs;    /* true: rotate (2i, 2i+1) (GGUF Llama); false: (i, i + n_rot/2) */
} hx_rope;

/* How the KV cache stores K and V, chosen once when the pool is created (DESIGN §3). Append
 * only. The quantized forms keep, per group of 32 consecutive elements of a head's row, an f16
 * scale s and an f16 minimum m, value = m + s * code: Q8 has 8-bit codes (36 bytes per 32
 * elements, 0.56x of F16), Q4 4-bit codes (20 bytes per 32, 0.31x). They need d_head % 32 == 0.
 * The byte layout is src/backend/kv_quant.h's, the same in every backend. */
typedef enum {
    HX_KV_F16 = 0,
    HX_KV_Q8  = 1,
    HX_KV_Q4  = 2,
    HX_KV_DTYPE_COUNT
} hx_kv_dtype;

/* KV storage: n_blocks blocks of block_tokens positions, each holding K and V of every layer.
 * Layout of K (and V alike): [n_blocks][n_layer][n_kv_head][block_tokens][d_head] f16, so one
 * kv head's positions of a block are contiguous (what attention reads, head by head). kv_dim =
 * n_kv_head * d_head. With a quantized dtype the order of blocks, layers and kv heads is the
 * same, and each (block, layer, kv head) holds one tile of its block_tokens positions in the
 * backend's quantized layout. Block ids come from the KV pool (src/kv), which owns allocation
 * and sharing; the backend owns the bytes. dtype is last so that older initializers leave it
 * zero (F16). */
typedef struct {
    void       *k, *v;
    int32_t     n_blocks, block_tokens, n_layer, n_kv_head, d_head, kv_dim;
    hx_kv_dtype dtype;
} hx_kv_store;

/* One sequence's view of the cache for attention: its block table and how many positions are
 * valid (after the new rows were stored). */
typedef struct {
    const int32_t *blocks;
    int32_t        n_ctx;
} hx_kv_seq;

/* Attention shape and options for one layer. Initializers written before softcap existed leave
 * it zero (no capping). */
typedef struct {
    int32_t n_head, n_kv_head, d_head;
    float   scale;          /* usually 1/sqrt(d_head) */
    int32_t sliding_window; /* 0: full causal attention */
    float   softcap;        /* 0: none; else each scaled score s becomes softcap*tanh(s/softcap)
                             * before the softmax (Gemma 2's attn_logit_softcapping) */
} hx_attn_shape;

/* One mixture-of-experts MLP (`moe` below). The expert arrays are the model's; each entry is
 * a matmul weight as `weight` returned it. */
typedef struct {
    int32_t           n_expert, n_used; /* experts, and how many each row runs */
    int64_t           d_ff;             /* each expert's MLP width */
    const hx_tensor **gate, **up;       /* [n_expert] each [d_ff, d_model] */
    const hx_tensor **down;             /* [n_expert] each [d_model, d_ff] */
    bool              norm_topk; /* the chosen experts' weights renormalised to sum to 1 */
    bool              geglu;     /* gelu_tanh gate instead of silu */
    /* A shared expert every row runs, scaled by sigmoid(x . sh_inp) (Qwen2-MoE); sh_gate NULL
     * when the family has none. sh_inp: [d_model] or [1, d_model]. */
    const hx_tensor *sh_gate, *sh_up, *sh_down, *sh_inp;
    int64_t          d_ff_sh;
} hx_moe;

/* Floats of the work buffer `moe` needs for n_tok rows (d_ff: the wider of the experts' and the
 * shared expert's widths). */
static inline int64_t hx_moe_work_floats(int64_t n_tok, int64_t d_model, int64_t d_ff,
                                         int32_t n_used, int32_t n_expert)
{
    return n_tok * (2 * d_model + 2 * d_ff + 3 * (int64_t)n_used + 1) + n_expert + 1;
}

/* A change the `sample` op makes to one logit before drawing (the sampler chain's logit bias and
 * penalties, sample/sampler.h): v += bias; then, when count > 0, v = v > 0 ? v / repeat : v *
 * repeat, and v -= presence + frequency * count (the row's penalties; f32, in that order). */
typedef struct {
    int32_t id;
    float   bias;
    int32_t count;
} hx_sample_edit;

/* One row's draw for the optional `sample` op: the sampler chain (sample/sampler.h) after its
 * edits: the top_k best logits (ties: the lower id), softmax at `temperature`, top-p over the
 * mass of those k, min-p relative to the best, then the candidate, walking from the best, at
 * which u times the kept weights' sum is used up. u is taken on the host from the sequence's
 * own generator, so the token is the one the host sampler would draw from the same logits (up
 * to the last bit of a sum). */
typedef struct {
    float                 temperature; /* 0: the argmax (ties: the lower id) */
    int32_t               top_k;       /* 1..HX_SAMPLE_TOP_K; 0: the row is not drawn here */
    float                 top_p, min_p;
    double                u;           /* in [0, 1) */
    bool                  logprobs;    /* also the log-probabilities (hx_sample_out) */
    int32_t               n_top;       /* alternatives wanted with them, 0..HX_SAMPLE_N_TOP */
    float                 repeat_penalty, presence_penalty, frequency_penalty;
    const hx_sample_edit *edits;       /* n_edits of them, distinct ids */
    int32_t               n_edits;
} hx_sample_row;
#define HX_SAMPLE_TOP_K 256
#define HX_SAMPLE_N_TOP 20
/* Rows one sample_start draws at most, and the token id that names one of them in the next
 * step's embed (see sample_start). */
#define HX_SAMPLE_AHEAD_ROWS 64
#define HX_TOKEN_DRAWN(i)    (-1 - (int32_t)(i))

/* What `sample` returns for a row. With logprobs, those of the edited logits at temperature 1
 * over the whole vocabulary: the token's, and the n_top best tokens' (best first, ties: the
 * lower id). */
typedef struct {
    int32_t token;
    float   logprob;
    int32_t top_ids[HX_SAMPLE_N_TOP];
    float   top_logprobs[HX_SAMPLE_N_TOP];
} hx_sample_out;

struct hx_backend {
    const char *name;
    void       *impl; /* the backend's own state */

    /* Activation memory. alloc returns NULL when out of memory. */
    void *(*alloc)(hx_backend *be, size_t bytes);
    void (*free)(hx_backend *be, void *p);
    /* Sizes scratch for steps of up to max_tok rows of up to max_row floats, once at model load,
     * so that no op allocates afterwards (a decode step allocates nothing). */
    hx_status (*reserve)(hx_backend *be, int64_t max_row, int64_t max_tok, hx_err *err);
    /* Copies n bytes of backend memory to the host (for logits). */
    void (*read)(hx_backend *be, void *dst, const void *src, size_t n);
    /* Device memory free and in all, for backends with memory of their own (NULL on the CPU,
     * whose memory is the host's): what KV sizing and `hearth fit` measure against. */
    void (*mem_info)(hx_backend *be, int64_t *free_bytes, int64_t *total_bytes);

    /* Prepares matmul weight w once at load and returns the tensor to pass to matmul in its
     * place: w itself, or a backend-owned copy whose `prepared` holds the weights repacked for
     * its kernels (same values). NULL with err set when out of memory. Release each returned
     * tensor with weight_release before the backend is destroyed; w must outlive the copy. */
    const hx_tensor *(*weight)(hx_backend *be, const hx_tensor *w, hx_err *err);
    void (*weight_release)(hx_backend *be, const hx_tensor *w);
    /* Optional (NULL on the CPU): called once at load with the embedding table, so that a
     * backend with memory of its own copies it then rather than at the first embed (a GPU's
     * first request would wait for it). HX_E_NOMEM when it does not fit. */
    hx_status (*table)(hx_backend *be, const hx_tensor *w, hx_err *err);
    /* Optional (NULL on the CPU): the backend may keep up to `bytes` of its memory as copies of
     * quantized matmul weights in the form its matmuls of many rows read (CUDA: f16 for cuBLAS),
     * so that a prefill or batched step stops converting every weight anew. Called once, after
     * the weights are prepared and the KV pool is allocated; returns the bytes it took. */
    int64_t (*keep_dequantized)(hx_backend *be, int64_t bytes);

    /* KV storage for n_blocks blocks in kv->dtype; freed by kv_free. HX_E_INVALID when the
     * backend cannot store that dtype for this shape (quantized with d_head % 32 != 0). */
    hx_status (*kv_alloc)(hx_backend *be, hx_kv_store *kv, hx_err *err);
    void (*kv_free)(hx_backend *be, hx_kv_store *kv);
    /* Copies block src's K and V (every layer and kv head, all block_tokens positions) over block
     * dst (src != dst): the partial last block of a cached prefix, taken by a new sequence that
     * then writes its own positions after the shared ones. */
    void (*kv_copy)(hx_backend *be, const hx_kv_store *kv, int32_t src, int32_t dst);

    /* out[t] = row ids[t] of w (any dtype), as f32.  out: [n_tok, d]. An id below 0 is
     * HX_TOKEN_DRAWN(i) (only on a backend with sample_start, after one). */
    void (*embed)(hx_backend *be, const hx_tensor *w, const int32_t *ids, int64_t n_tok,
                  float *out);
    /* out[r][o] = sum_i w[o][i] * x[r][i].  w: [n_out, n_in] any dtype; x: [n_rows, n_in];
     * out: [n_rows, n_out]. bias (optional, [n_out]) is added when not NULL. */
    void (*matmul)(hx_backend *be, const hx_tensor *w, const hx_tensor *bias, const float *x,
                   int64_t n_rows, float *out);
    /* out = x / rms(x) * w per row of d.  w: [d]; x, out: [n_rows, d] (may alias). */
    void (*rmsnorm)(hx_backend *be, const float *x, const hx_tensor *w, int64_t n_rows,
                    int64_t d, float eps, float *out);
    /* Rotates x [n_tok, n_head, d_head] in place by position pos[t]. */
    void (*rope)(hx_backend *be, float *x, const int32_t *pos, int64_t n_tok, int32_t n_head,
                 int32_t d_head, const hx_rope *rope);
    /* Writes k, v [n_tok, kv_dim] of layer `layer` at positions pos[t] of sequence seq. */
    void (*kv_write)(hx_backend *be, hx_kv_store *kv, int32_t layer, const hx_kv_seq *seq,
                     const int32_t *pos, const float *k, const float *v, int64_t n_tok);
    /* Causal attention of q [n_tok, n_head, d_head] (row t at position pos[t]) over the first
     * pos[t]+1 positions of the sequence's cache; out: [n_tok, n_head * d_head]. */
    void (*attention)(hx_backend *be, const hx_kv_store *kv, int32_t layer, const hx_kv_seq *seq,
                      const float *q, const int32_t *pos, int64_t n_tok, const hx_attn_shape *s,
                      float *out);
    /* dst[i] = src[rows[i]] for rows of d floats (dst and src do not overlap). */
    void (*gather_rows)(hx_backend *be, const float *src, const int32_t *rows, int64_t n,
                        int64_t d, float *dst);
    /* out = silu(gate) * up, n elements. */
    void (*swiglu)(hx_backend *be, const float *gate, const float *up, int64_t n, float *out);
    /* out = gelu_tanh(gate) * up, n elements, with gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi)
     * (x + 0.044715 x^3))) (Gemma's GeGLU, PyTorch's approximate="tanh"). out may alias. */
    void (*geglu)(hx_backend *be, const float *gate, const float *up, int64_t n, float *out);
    /* Mixture of experts. router: [n_tok, n_expert] logits; each row's probabilities are their
     * softmax, the row runs its n_used most probable experts (ties: the lower id) weighted by
     * their probabilities (renormalised when m->norm_topk), plus the shared expert:
     * out[t] = sum_j w_j * down_e(act(gate_e x[t]) * up_e x[t]) + shared. x: [n_tok, d_model];
     * out: [n_tok, d_model], overwritten (must not alias x); work: hx_moe_work_floats floats of
     * backend memory. Rows that chose the same expert go through its weights together. NULL in
     * a backend that cannot run mixtures of experts; hx_llm_open refuses such models there. */
    void (*moe)(hx_backend *be, const hx_moe *m, const float *router, const float *x,
                int64_t n_tok, int64_t d_model, float *work, float *out);
    /* x += y, n elements. */
    void (*add)(hx_backend *be, float *x, const float *y, int64_t n);
    /* x *= s, n elements (Gemma's embedding scale). */
    void (*scale)(hx_backend *be, float *x, float s, int64_t n);
    /* x = cap * tanh(x / cap), n elements (final logit soft-capping; cap > 0). */
    void (*softcap)(hx_backend *be, float *x, float cap, int64_t n);
    /* Optional (NULL on the CPU, whose sampler reads the logits where they are): draws a token
     * from each row i of logits [n, n_vocab] whose rows[i].top_k > 0 and writes it to out[i]
     * (host memory; the other rows' entries are left alone), so that a step copies back token
     * ids instead of whole rows of logits. The edits change the logits in place. */
    void (*sample)(hx_backend *be, float *logits, int64_t n, int64_t n_vocab,
                   const hx_sample_row *rows, hx_sample_out *out);
    /* Optional, with `sample` (NULL otherwise): `sample` in two halves, so that the host prepares
     * and starts the next step while the device computes this one. sample_start draws every
     * row (each top_k > 0; n <= HX_SAMPLE_AHEAD_ROWS) and starts the step without waiting for
     * it; out (host memory, left alone until then) holds the draws when the matching
     * sample_finish returns. Meanwhile the caller may record the next step, whose embed ids
     * may then be HX_TOKEN_DRAWN(i): the token this start draws for row i. At most two starts
     * are pending; sample_finish waits for the older one. */
    void (*sample_start)(hx_backend *be, float *logits, int64_t n, int64_t n_vocab,
                         const hx_sample_row *rows, hx_sample_out *out);
    void (*sample_finish)(hx_backend *be);

    void (*destroy)(hx_backend *be);
};

#endif
