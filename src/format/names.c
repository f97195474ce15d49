/* names.c - architecture table and Hugging Face → GGUF tensor names.
 *
 * The mapping is a table of suffixes per layer, plus a few whole names. Gemma 2/3 use
 * post_attention_layernorm for the norm *after* attention (a second norm per sub-layer), while
 * Llama uses the same name for the norm *before* the MLP; the table has a per-family column for
 * exactly that difference. */
#include "names.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *arch;       /* canonical */
    const char *hf_types;   /* config.json model_type values, space separated */
    const char *gguf_names; /* general.architecture values, space separated */
    bool        gguf_pairs; /* GGUF Q/K permuted for pairwise RoPE */
    bool        gemma_norms;
} arch_row;

static const arch_row arches[] = {
    {"llama",    "llama",                "llama",    true,  false},
    {"mistral",  "mistral",              "mistral",  true,  false},
    {"mixtral",  "mixtral",              "",         true,  false},
    {"qwen2",    "qwen2",                "qwen2",    false, false},
    {"qwen3",    "qwen3",                "qwen3",    false, false},
    {"qwen2moe", "qwen2_moe",            "qwen2moe", false, false},
    {"qwen3moe", "qwen3_moe",            "qwen3moe", false, false},
    {"olmoe",    "olmoe",                "olmoe",    false, false},
    {"gemma",    "gemma",                "gemma",    false, false},
    {"gemma2",   "gemma2",               "gemma2",   false, true},
    {"gemma3",   "gemma3 gemma3_text",   "gemma3",   false, true},
    {"phi3",     "phi3",                 "phi3",     false, false},
};

/* True when word appears in the space-separated list. */
static bool in_list(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, word, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static const arch_row *find_arch(const char *canonical)
{
    for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
        if (strcmp(arches[i].arch, canonical) == 0) return &arches[i];
    return NULL;
}

const char *hx_arch_from_hf(const char *model_type)
{
    for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
        if (in_list(arches[i].hf_types, model_type)) return arches[i].arch;
    return NULL;
}

const char *hx_arch_from_gguf(const char *general_arch)
{
    for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
        if (in_list(arches[i].gguf_names, general_arch)) return arches[i].arch;
    return NULL;
}

const char *hx_arch_list(void)
{
    return "llama, mistral, mixtral, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gemma, gemma2, "
           "gemma3, phi3";
}

bool hx_arch_gguf_rope_pairs(const char *arch)
{
    const arch_row *a = find_arch(arch);
    return a && a->gguf_pairs;
}

/* Per-layer suffixes: Hugging Face (after "model.layers.N.") → GGUF (after "blk.N."). */
typedef struct {
    const char *hf, *gguf;
} name_pair;

static const name_pair layer_names[] = {
    {"input_layernorm",                   "attn_norm"},
    {"self_attn.q_proj",                  "attn_q"},
    {"self_attn.k_proj",                  "attn_k"},
    {"self_attn.v_proj",                  "attn_v"},
    {"self_attn.o_proj",                  "attn_output"},
    {"self_attn.qkv_proj",                "attn_qkv"},
    {"self_attn.q_norm",                  "attn_q_norm"},
    {"self_attn.k_norm",                  "attn_k_norm"},
    {"mlp.gate_proj",                     "ffn_gate"},
    {"mlp.up_proj",                       "ffn_up"},
    {"mlp.down_proj",                     "ffn_down"},
    {"mlp.gate_up_proj",                  "ffn_up"},     /* Phi-3 fused gate+up, as GGUF has it */
    {"mlp.gate",                          "ffn_gate_inp"}, /* MoE router (Qwen MoE, OLMoE) */
    {"block_sparse_moe.gate",             "ffn_gate_inp"}, /* MoE router (Mixtral) */
    {"mlp.shared_expert.gate_proj",       "ffn_gate_shexp"},
    {"mlp.shared_expert.up_proj",         "ffn_up_shexp"},
    {"mlp.shared_expert.down_proj",       "ffn_down_shexp"},
    {"mlp.shared_expert_gate",            "ffn_gate_inp_shexp"},
    /* MoE experts stacked in one tensor, as mlx_lm saves them (and GGUF stores them) */
    {"block_sparse_moe.switch_mlp.gate_proj", "ffn_gate_exps"},
    {"block_sparse_moe.switch_mlp.up_proj",   "ffn_up_exps"},
    {"block_sparse_moe.switch_mlp.down_proj", "ffn_down_exps"},
    {"mlp.switch_mlp.gate_proj",          "ffn_gate_exps"},
    {"mlp.switch_mlp.up_proj",            "ffn_up_exps"},
    {"mlp.switch_mlp.down_proj",          "ffn_down_exps"},
    {"pre_feedforward_layernorm",         "ffn_norm"},
    {"post_feedforward_layernorm",        "post_ffw_norm"},
};

/* Expert tensors keep their expert index: "blk.N.ffn_gate.E" (GGUF stacks them in one tensor;
 * the forward pass handles either form). */
static const name_pair expert_names[] = {
    {"mlp.experts.%d.gate_proj",        "ffn_gate.%d"},
    {"mlp.experts.%d.up_proj",          "ffn_up.%d"},
    {"mlp.experts.%d.down_proj",        "ffn_down.%d"},
    {"block_sparse_moe.experts.%d.w1",  "ffn_gate.%d"},
    {"block_sparse_moe.experts.%d.w3",  "ffn_up.%d"},
    {"block_sparse_moe.experts.%d.w2",  "ffn_down.%d"},
};

static const name_pair whole_names[] = {
    {"model.embed_tokens", "token_embd"},
    {"model.norm",         "output_norm"},
    {"lm_head",            "output"},
    {"language_model.model.embed_tokens", "token_embd"},
    {"language_model.model.norm",         "output_norm"},
    {"language_model.lm_head",            "output"},
    /* Gemma 3 multimodal checkpoints as transformers >= 4.52 saves them */
    {"model.language_model.embed_tokens", "token_embd"},
    {"model.language_model.norm",         "output_norm"},
};

/* Splits "stem.kind" where kind is the last component (weight, bias, scales, biases). */
static const char *last_dot(const char *s)
{
    const char *d = strrchr(s, '.');
    return d ? d : s + strlen(s);
}

bool hx_tensor_name_from_hf(const char *arch, const char *hf_name, char *out, unsigned len)
{
    const arch_row *a = find_arch(arch);
    const bool gemma = a && a->gemma_norms;
    const char *kind = last_dot(hf_name); /* ".weight" etc, or "" */
    const size_t stem_len = (size_t)(kind - hf_name);
    char stem[200];
    if (stem_len >= sizeof stem) goto copy;
    memcpy(stem, hf_name, stem_len);
    stem[stem_len] = '\0';

    for (size_t i = 0; i < sizeof whole_names / sizeof whole_names[0]; i++)
        if (strcmp(stem, whole_names[i].hf) == 0) {
            int k = snprintf(out, len, "%s%s", whole_names[i].gguf, kind);
            return k >= 0 && (unsigned)k < len;
        }

    int layer, used = 0;
    const char *prefixes[] = {"model.layers.%d.%n", "language_model.model.layers.%d.%n",
                              "model.language_model.layers.%d.%n"};
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0] && !used; p++)
        if (sscanf(stem, prefixes[p], &layer, &used) != 1) used = 0;
    if (used > 0 && layer >= 0) {
        const char *rest = stem + used;
        if (strcmp(rest, "post_attention_layernorm") == 0) {
            int k = snprintf(out, len, "blk.%d.%s%s", layer,
                             gemma ? "post_attention_norm" : "ffn_norm", kind);
            return k >= 0 && (unsigned)k < len;
        }
        for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
            if (strcmp(rest, layer_names[i].hf) == 0) {
                int k = snprintf(out, len, "blk.%d.%s%s", layer, layer_names[i].gguf, kind);
                return k >= 0 && (unsigned)k < len;
            }
        for (size_t i = 0; i < sizeof expert_names / sizeof expert_names[0]; i++) {
            int e, n = 0;
            char probe[200];
            /* Build "<hf pattern>%n" so sscanf reports how far it matched. */
            snprintf(probe, sizeof probe, "%s%%n", expert_names[i].hf);
            if (sscanf(rest, probe, &e, &n) == 1 && n > 0 && rest[n] == '\0' && e >= 0) {
                char tail[64];
                snprintf(tail, sizeof tail, expert_names[i].gguf, e);
                int k = snprintf(out, len, "blk.%d.%s%s", layer, tail, kind);
                return k >= 0 && (unsigned)k < len;
            }
        }
    }
copy:;
    int k = snprintf(out, len, "%s", hf_name);
    return k >= 0 && (unsigned)k < len;
}
