/* names.h - architecture names and the one tensor naming scheme.
 *
 * hearth names tensors the way GGUF does ("token_embd.weight", "blk.3.attn_q.weight",
 * "output_norm.weight"), whatever file they came from, so model code binds weights by one name.
 * This module owns the table of known architectures and the Hugging Face → GGUF name mapping. */
#ifndef HX_FORMAT_NAMES_H
#define HX_FORMAT_NAMES_H
#include <stdbool.h>

/* Canonical architecture for a config.json model_type or a GGUF general.architecture; NULL when
 * the name is not one hearth knows. */
const char *hx_arch_from_hf(const char *model_type);
const char *hx_arch_from_gguf(const char *general_arch);

/* "llama, mistral, qwen2, ..." — the canonical names, for error messages and `ls --supported`. */
const char *hx_arch_list(void);

/* True when GGUF files of this (canonical) architecture store Q/K permuted for pairwise RoPE. */
bool hx_arch_gguf_rope_pairs(const char *arch);

/* Maps a Hugging Face tensor name ("model.layers.3.self_attn.q_proj.weight") to the GGUF scheme
 * ("blk.3.attn_q.weight") for the given canonical architecture, writing at most len bytes into
 * out. Names it does not know are copied unchanged. Returns false if out is too small. */
bool hx_tensor_name_from_hf(const char *arch, const char *hf_name, char *out, unsigned len);

#endif
