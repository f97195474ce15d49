/* model_int.h - declarations shared by the files of src/model (not part of model.h).
 *
 * llama.c holds the one forward pass and the binding every family shares; family.c holds what
 * only some families need at load: row views of fused weights (Phi-3), (1 + w) norm copies
 * (Gemma in Hugging Face files), the choice of RoPE tables (LongRoPE, Gemma 3's local base) and
 * the experts of mixture-of-experts layers. */
#ifndef HX_MODEL_MODEL_INT_H
#define HX_MODEL_MODEL_INT_H
#include "model/model.h"

/* The tensor of that normalised name in m's files, or NULL. */
const hx_tensor *hx_model_get(const hx_model_files *mf, const char *name);

/* Phi-3's fused weights of layer i as row views: blk.i.attn_qkv as wq, wk, wv (when the
 * separate ones are absent) and a blk.i.ffn_up of 2 * d_ff rows as w_gate (first half) and
 * w_up (second). The views live in L->split. HX_E_FORMAT when a fused weight has the wrong
 * shape. */
hx_status hx_model_split_fused(const hx_llm *m, int i, hx_layer *L, hx_err *err);

/* Binds the mixture-of-experts tensors of layer i, whose router L->router is bound: each
 * expert's gate, up and down weights, either stacked in one tensor per projection
 * (blk.i.ffn_gate_exps, [n_expert, rows, cols], as GGUF and mlx_lm store them; each expert a
 * row view) or one tensor per expert (blk.i.ffn_gate.E, Hugging Face), and the shared expert
 * where the family has one. The weight arrays live in m->expert_w (allocated here on the first
 * layer). HX_E_FORMAT naming a missing or misshapen tensor. */
hx_status hx_model_bind_experts(hx_llm *m, int i, hx_layer *L, hx_err *err);

/* Replaces every norm weight of m (layers and output) by an f32 copy holding 1 + w, for
 * hp.norm_plus_one; the copies live in m->folded. HX_E_NOMEM on allocation failure. */
hx_status hx_model_fold_norms(hx_llm *m, hx_err *err);

/* Builds m->rope (and m->rope_swa for a model with a local RoPE base): inverse frequencies,
 * rotated dims and magnitude factor. LongRoPE uses the long factors when the trained context
 * (what hearth serves, engine/sequence.c) exceeds the original one, as llama.cpp does with its
 * context size; transformers switches per sequence length instead, which would leave a KV cache
 * holding keys rotated two ways. HX_E_FORMAT when LongRoPE factors are missing or misshapen. */
hx_status hx_model_rope_setup(hx_llm *m, hx_err *err);

#endif
