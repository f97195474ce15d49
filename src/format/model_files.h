/* model_files.h - the loader's front door: one description of a model, whatever its format.
 *
 * hx_model_files_open accepts a .gguf file, a Hugging Face folder (config.json plus one
 * *.safetensors file or shards listed in model.safetensors.index.json) or an MLX-community
 * quantized folder (the same, with config.json "quantization": {group_size, bits}). It maps the
 * files (no copy), validates them, and produces:
 *   - the architecture and hyper-parameters, normalised across GGUF metadata keys and
 *     config.json names (hfconfig.c);
 *   - the tensor list with names normalised to one scheme (names.c: the GGUF scheme,
 *     "blk.N.attn_q.weight"), shapes outermost-first, dtypes and byte offsets; MLX weights are
 *     joined with their scales and biases into one tensor of dtype MLX4/MLX8;
 *   - where the tokenizer and chat template come from.
 * It does not build the tokenizer or bind weights to a forward pass; later stages do. */
#ifndef HX_FORMAT_MODEL_FILES_H
#define HX_FORMAT_MODEL_FILES_H
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "tensor/tensor.h"

typedef enum { HX_FMT_GGUF, HX_FMT_SAFETENSORS, HX_FMT_MLX } hx_file_format;

/* How Q and K rows are laid out for rotary embeddings. Hugging Face checkpoints rotate the two
 * halves of each head (NeoX style); llama.cpp's converter permutes Llama-family Q/K weights so
 * that GGUF files rotate adjacent pairs. The forward pass picks its RoPE kernel from this. */
typedef enum { HX_ROPE_PAIRS, HX_ROPE_HALVES } hx_rope_layout;

/* Layers a per-layer attention pattern can describe (hx_hparams.full_attn_layers). */
#define HX_MAX_LAYERS 256

typedef enum {
    HX_ROPE_SCALING_NONE, HX_ROPE_SCALING_LINEAR, HX_ROPE_SCALING_LLAMA3, HX_ROPE_SCALING_YARN,
    HX_ROPE_SCALING_LONGROPE
} hx_rope_scaling_type;

typedef struct {
    char                 arch[32];     /* normalised family: "llama", "qwen2", "qwen3", ... */
    int32_t              n_layer;
    int32_t              d_model;
    int32_t              n_head;
    int32_t              n_kv_head;
    int32_t              d_head;
    int32_t              d_ff;
    int32_t              n_vocab;
    int32_t              n_ctx_train;
    float                rope_theta;
    float                norm_eps;
    hx_rope_layout       rope_layout;
    hx_rope_scaling_type rope_scaling;
    float                rope_factor;           /* linear / llama3 / yarn factor */
    int32_t              rope_orig_ctx;         /* original_max_position_embeddings */
    float                rope_low_freq_factor;  /* llama3 */
    float                rope_high_freq_factor; /* llama3 */
    float                yarn_beta_fast, yarn_beta_slow; /* yarn; 0 = family default */
    int32_t              sliding_window;        /* 0: none */
    int32_t              n_expert, n_expert_used; /* MoE; 0 for dense models */
    int32_t              d_ff_exp;              /* MoE: each expert's MLP width (d_ff: the
                                                   dense layers', where a family has both) */
    int32_t              d_ff_shexp;            /* MoE: the shared expert's width; 0: none */
    bool                 moe_norm_topk;         /* MoE: chosen experts' weights renormalised */
    bool                 tie_embeddings;        /* no output.weight: logits use token_embd */
    bool                 qk_norm;               /* per-head RMSNorm on q and k (Qwen3) */
    bool                 attn_bias;             /* q/k/v projections carry biases (Qwen2) */
    /* Gemma 2/3 and Phi-3 (issue 8); zero for the Llama family. */
    int32_t              n_rot;                 /* rotated dims per head; 0: d_head (Phi-3
                                                   partial_rotary_factor, GGUF rope.dimension_count) */
    float                attn_scale;            /* query scaling; 0: 1/sqrt(d_head) (Gemma:
                                                   query_pre_attn_scalar^-0.5) */
    float                attn_softcap;          /* 0: none; scores = c * tanh(scores / c) */
    float                final_softcap;         /* 0: none; logits = c * tanh(logits / c) */
    float                rope_theta_swa;        /* RoPE base of sliding layers, unscaled; 0: the
                                                   one rope of every layer (Gemma 3: 10000) */
    float                rope_attn_factor;      /* longrope magnitude factor; 0: derived */
    bool                 norm_plus_one;         /* norm weights stored w, applied (1 + w) (Gemma
                                                   in Hugging Face files; GGUF stores 1 + w) */
    /* Bit i set: layer i attends to the whole context although sliding_window is set (Gemma
     * 2/3 alternate sliding and global layers). All clear: every layer slides (Mistral, Phi-3). */
    uint8_t              full_attn_layers[HX_MAX_LAYERS / 8];
} hx_hparams;

/* The window layer i attends over: 0 (everything) or hp->sliding_window. */
static inline int32_t hx_hparams_layer_window(const hx_hparams *hp, int32_t i)
{
    if (hp->sliding_window <= 0 || i < 0 || i >= HX_MAX_LAYERS) return hp->sliding_window;
    return (hp->full_attn_layers[i / 8] >> (i % 8)) & 1 ? 0 : hp->sliding_window;
}

/* Layers whose KV the cache keeps for their window only: the sliding ones when the model also has
 * full-attention layers (Gemma 2/3); they get a KV pool of their own, holding the last
 * sliding_window positions of each sequence. 0 when there is no such split: every layer in one
 * pool holding every position (also when every layer slides, as in Mistral and Phi-3). */
static inline int32_t hx_hparams_n_swa_layers(const hx_hparams *hp)
{
    int32_t n = 0;
    for (int32_t i = 0; i < hp->n_layer; i++) n += hx_hparams_layer_window(hp, i) > 0;
    return n < hp->n_layer ? n : 0;
}

/* Layer i's index in its KV pool: among the sliding layers or among the others when the cache
 * splits (hx_hparams_n_swa_layers > 0), else i. */
static inline int32_t hx_hparams_kv_layer(const hx_hparams *hp, int32_t i)
{
    if (hx_hparams_n_swa_layers(hp) == 0) return i;
    const bool swa = hx_hparams_layer_window(hp, i) > 0;
    int32_t k = 0;
    for (int32_t j = 0; j < i; j++) k += (hx_hparams_layer_window(hp, j) > 0) == swa;
    return k;
}

/* Marks layer i as global (full attention). */
static inline void hx_hparams_set_full_attn(hx_hparams *hp, int32_t i)
{
    if (i >= 0 && i < HX_MAX_LAYERS) hp->full_attn_layers[i / 8] |= (uint8_t)(1u << (i % 8));
}

typedef struct {
    char     *name;       /* normalised; owned */
    char     *src_name;   /* as written in the file; owned */
    hx_tensor t;          /* shape, dtype and pointers into the mapping */
    int32_t   file_index; /* which file (0 for GGUF; the shard for safetensors) */
    uint64_t  offset;     /* byte offset of the data in that file */
} hx_tensor_info;

typedef struct hx_model_files {
    char           *path;          /* what was opened (file or folder), owned */
    hx_file_format  format;
    int32_t         format_version; /* GGUF version; 0 otherwise */
    hx_hparams      hp;
    int64_t         n_tensors;
    hx_tensor_info *tensors;        /* sorted by normalised name */
    int32_t         n_files;
    char          **file_paths;     /* the data files, owned */
    /* Format-specific parses, kept for their mappings and metadata. */
    hx_gguf        *gguf;           /* GGUF only (the first part of a split file) */
    hx_gguf       **gguf_parts;     /* a split GGUF's parts 2..n (file_index 1..n-1), owned */
    int32_t         n_gguf_parts;
    hx_safetensors **shards;        /* safetensors/MLX: n_files entries */
    /* Tokenizer and chat template sources. */
    char           *tokenizer_kind; /* GGUF tokenizer.ggml.model ("gpt2", "llama") or NULL */
    char           *tokenizer_json; /* path of tokenizer.json, or NULL */
    char           *chat_template;  /* the default template text, owned, or NULL */
    char           *chat_template_source; /* "gguf", "tokenizer_config.json", "chat_template.jinja" */
    char           *generation_config; /* path of generation_config.json, or NULL */
    int32_t         mlx_bits, mlx_group_size; /* MLX only: the default quantization */
    float          *rope_factors;   /* owned: config.json's LongRoPE lists, the data of the
                                       rope_factors_long/short tensors (file_index -1); or NULL */
} hx_model_files;

/* Opens and validates the model at path (see the top of this file). On success *out owns the
 * description (hx_model_files_close). On failure returns HX_E_FORMAT, HX_E_IO, HX_E_NOTFOUND,
 * HX_E_UNSUPPORTED or HX_E_NOMEM with err naming the file and the problem; *out is untouched. */
hx_status hx_model_files_open(const char *path, hx_model_files **out, hx_err *err);
void      hx_model_files_close(hx_model_files *mf); /* accepts NULL and partly built objects */

/* The tensor with this normalised name, or NULL. */
const hx_tensor_info *hx_model_files_find(const hx_model_files *mf, const char *name);

/* Tells the mapping that t's bytes were copied elsewhere (a backend repacked them): their pages
 * leave this process's resident memory and come back from the page cache if read again. */
void hx_model_files_drop(const hx_model_files *mf, const hx_tensor *t);

/* Sum of the elements of all tensors (MLX weights counted unpacked). */
int64_t hx_model_files_n_params(const hx_model_files *mf);

/* The dtype holding most bytes among 2-D weights: what users call the model's quantization. */
hx_dtype hx_model_files_main_dtype(const hx_model_files *mf);

/* Total bytes of tensor data (MLX: weights, scales and biases). */
uint64_t hx_model_files_n_bytes(const hx_model_files *mf);

/* Bytes a tensor occupies in its files, MLX scales and biases included. */
uint64_t hx_tensor_data_bytes(const hx_tensor *t);

const char *hx_file_format_name(hx_file_format f); /* "gguf", "safetensors", "mlx" */

#endif
