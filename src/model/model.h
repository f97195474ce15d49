/* model.h - a model bound for inference, and the dimension vocabulary used everywhere.
 *
 * Dimension names (used in every shape comment of the project): n_tok rows of a flat batch,
 * d_model hidden size, d_ff MLP size, n_head query heads, n_kv_head key/value heads, d_head
 * per-head size, n_vocab vocabulary, n_ctx positions in a sequence's cache.
 *
 * hx_llm binds the weights of a hx_model_files description (borrowed: it must outlive the
 * hx_llm) to one backend, computes the RoPE table once, and owns the activation buffers of one
 * step, sized for max_tok rows. The forward pass takes a flat batch: rows of several sequences,
 * each row with its token, position and sequence; rows of one sequence are contiguous. */
#ifndef HX_MODEL_MODEL_H
#define HX_MODEL_MODEL_H
#include "backend/backend.h"
#include "format/model_files.h"

typedef struct {
    const hx_tensor *attn_norm, *wq, *wk, *wv, *wo; /* wq: [n_head*d_head, d_model] ... */
    const hx_tensor *bq, *bk, *bv;                  /* NULL unless the family has biases */
    const hx_tensor *q_norm, *k_norm;               /* [d_head]; NULL unless qk-norm */
    const hx_tensor *ffn_norm, *w_gate, *w_up, *w_down; /* NULL in a mixture-of-experts layer */
    /* Gemma 2/3: norms of the attention output and of the MLP output, before each is added to
     * the residual stream ([d_model]); NULL for the other families. */
    const hx_tensor *post_attn_norm, *post_ffn_norm;
    bool             qk_norm_full; /* q_norm/k_norm span the whole projection (OLMoE) */
    int32_t          window;   /* sliding window of this layer; 0: full causal attention */
    bool             kv_swa;   /* its KV lives in the sliding layers' pool when the caller gives
                                * one (hx_hparams_n_swa_layers), at index kv_layer */
    int32_t          kv_layer;
    /* Mixture of experts: the router ([n_expert, d_model]; NULL in a dense layer) and the
     * experts, whose weight arrays point into hx_llm.expert_w (family.c). */
    const hx_tensor *router;
    hx_moe           moe;
    /* Storage the pointers above may point into: row views of fused weights (Phi-3 attn_qkv
     * as q, k, v; ffn_up holding gate and up) and f32 (1 + w) copies of norms (Gemma in
     * Hugging Face files). */
    hx_tensor        split[5];
    hx_tensor        folded[6];
} hx_layer;

typedef struct {
    int64_t          n_tok;
    const int32_t   *tokens;     /* [n_tok] */
    const int32_t   *pos;        /* [n_tok] position of each row in its sequence */
    const int32_t   *seq;        /* [n_tok] index into seqs; rows of a sequence are contiguous */
    const hx_kv_seq *seqs;       /* block tables, n_ctx counting this batch's rows */
    const hx_kv_seq *seqs_swa;   /* the same in the sliding layers' pool; NULL without one */
    int32_t          n_seqs;
    const int32_t   *logit_rows; /* rows whose logits are wanted, ascending */
    int64_t          n_logits;
    /* Optional, only with a backend that has `sample` (NULL: every logit row is read): per logit
     * row, a draw the backend makes where draws[i].top_k > 0, its token (and log-probabilities)
     * written to drawn[i] instead of the row's logits to the host. */
    const hx_sample_row *draws;
    hx_sample_out       *drawn;
    /* With a backend that has sample_start: the step is started, not waited for; every logit
     * row is drawn (at most HX_SAMPLE_AHEAD_ROWS) and drawn[] is filled by hx_llm_finish. The
     * next batch's tokens may then be HX_TOKEN_DRAWN(i), the token drawn for logit row i. */
    bool ahead;
} hx_batch;

typedef struct hx_llm {
    const hx_model_files *mf;   /* borrowed */
    hx_hparams            hp;
    hx_backend           *be;   /* borrowed */
    hx_layer             *layers;
    const hx_tensor      *tok_embd, *out_norm, *output;
    hx_tensor             out_norm_folded; /* (1 + w) copy when hp.norm_plus_one */
    float                *folded;          /* owned: the data of every folded norm */
    float                *inv_freq;
    hx_rope               rope;            /* every layer, or the global layers of Gemma 3 */
    float                *inv_freq_swa;
    hx_rope               rope_swa;        /* Gemma 3's sliding layers (own base, unscaled) */
    float                 embed_scale;     /* embeddings *= this (Gemma: sqrt(d_model)); 0: none */
    bool                  geglu;           /* gelu_tanh gate (Gemma) instead of silu */
    const hx_tensor     **expert_w;        /* owned: every MoE layer's expert weights */
    hx_tensor            *expert_views;    /* owned: per-expert views of stacked tensors */
    int64_t               max_tok;
    /* one step's activations, backend memory */
    float *x;      /* [max_tok, d_model] residual stream */
    float *h;      /* [max_tok, max(d_model, n_head*d_head)] normed input / attention out */
    float *q, *k, *v; /* [max_tok, n_head*d_head], [max_tok, kv_dim] x2 */
    float *gate, *up; /* [max_tok, d_ff] */
    float *logits; /* [min(max_tok, HX_LLM_LOGIT_ROWS), n_vocab] */
    int64_t logits_from; /* the first logit row the last forward's last pass holds */
    float *router; /* [max_tok, n_expert] router logits; NULL for a dense model */
    float *moe_work; /* hx_moe_work_floats of max_tok rows; NULL for a dense model */
} hx_llm;

/* Rows of logits one pass of the output projection computes: a step asking for more (a tool
 * reading every row of a prompt) takes several passes. A serving step asks for one row per
 * sequence, and --batch is at most 64, so one pass; sizing the buffer by the step instead cost a
 * GPU ~0.5 GB at 1,024-row steps and a 128k vocabulary. */
#define HX_LLM_LOGIT_ROWS 64

/* The architectures with a forward pass, by the names hx_hparams.arch uses (GGUF
 * general.architecture; config.json model_type maps onto them): a NULL-terminated list. */
const char *const *hx_llm_architectures(void);

/* The widest input a matmul of a step takes (d_model, n_head * d_head, d_ff, and a mixture's
 * expert widths), and the width the moe op's work buffer is sized for (0 for a dense model).
 * hx_llm_open sizes its buffers by them; engine/fit.c predicts those buffers with them. */
int64_t hx_llm_widest_input(const hx_hparams *hp);
int64_t hx_llm_moe_width(const hx_hparams *hp);

/* Binds mf's weights for inference on be with steps of up to max_tok rows. Fails with
 * HX_E_UNSUPPORTED naming the architecture when the family has no forward pass, or
 * HX_E_FORMAT naming the missing tensor. */
hx_status hx_llm_open(const hx_model_files *mf, hx_backend *be, int64_t max_tok, hx_llm **out,
                      hx_err *err);
void      hx_llm_close(hx_llm *m);

/* Runs one step: stores the batch's K/V in the cache and writes the logits of
 * batch->logit_rows into logits ([n_logits, n_vocab], host memory; a row the backend drew from
 * is left alone). HX_E_INVALID for draws on a backend without `sample`. kv_swa NULL: kv holds every
 * layer (n_layer of them). Else (a model with hx_hparams_n_swa_layers > 0) the sliding layers'
 * K/V go to kv_swa through batch->seqs_swa, whose tables need only hold each row's window, and
 * the other layers' to kv. */
hx_status hx_llm_forward(hx_llm *m, hx_kv_store *kv, hx_kv_store *kv_swa, const hx_batch *batch,
                         float *logits, hx_err *err);

/* Waits for the oldest step started with batch->ahead and fills its drawn[]. */
void hx_llm_finish(hx_llm *m);

/* Whether the model's backend can start steps ahead (hx_batch.ahead). */
bool hx_llm_can_start_ahead(const hx_llm *m);

/* Copies logit row i (an index into the last hx_llm_forward's logit_rows) as the forward left it
 * on its backend (a drawn row with the draw's edits applied) into dst [n_vocab], host memory:
 * for a row drawn on the device that the host needs after all (a grammar refused the draw).
 * Valid until the next forward, for the rows of its last pass of HX_LLM_LOGIT_ROWS. */
void hx_llm_read_logits(hx_llm *m, int64_t i, float *dst);

/* Fills inv_freq[n_rot/2] and the magnitude factor for the model's RoPE scaling (exposed for
 * tests). freq_factors (llama3 GGUFs' rope_freqs.weight; for longrope, the long or the short
 * factors, required) may be NULL otherwise. */
void hx_rope_init(const hx_hparams *hp, int32_t n_rot, const hx_tensor *freq_factors,
                  float *inv_freq, float *mscale);

#endif
