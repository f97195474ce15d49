/* hfconfig.c - config.json reader (jansson).
 *
 * Multimodal wrappers (Gemma 3) nest the language model's fields under "text_config"; those
 * are read from there, with the top level as fallback. Gemma 3's text_config names only what
 * differs from Gemma3TextConfig, so that family's sizes have transformers' defaults. Newer
 * transformers write "rope_parameters" (flat, or per layer type for Gemma 3) instead of
 * rope_theta/rope_scaling; both forms are read. */
#include "hfconfig.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "format/names.h"

/* Reads key from the text config first, then the top level. */
static json_t *field(json_t *root, json_t *text, const char *key)
{
    json_t *v = text ? json_object_get(text, key) : NULL;
    if (!v || json_is_null(v)) v = json_object_get(root, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

/* Reads an integer field; required fields that are absent or not integers are errors. */
static hx_status get_int(json_t *root, json_t *text, const char *path, const char *key,
                         bool required, int32_t def, int32_t *out, hx_err *err)
{
    json_t *v = field(root, text, key);
    if (!v) {
        if (required)
            return hx_err_set(err, HX_E_FORMAT, "%s: missing required field '%s'", path, key);
        *out = def;
        return HX_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return hx_err_set(err, HX_E_FORMAT, "%s: field '%s' must be a non-negative integer", path,
                          key);
    *out = (int32_t)json_integer_value(v);
    return HX_OK;
}

static float get_num(json_t *obj, const char *key, float def)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    return (v && json_is_number(v)) ? (float)json_number_value(v) : def;
}

static hx_status read_rope_scaling(json_t *rs, const char *path, hx_hparams *hp, hx_err *err)
{
    if (!rs || json_is_null(rs)) return HX_OK;
    if (!json_is_object(rs))
        return hx_err_set(err, HX_E_FORMAT, "%s: rope_scaling must be an object", path);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (strcmp(type, "default") == 0) return HX_OK;
    if (strcmp(type, "linear") == 0) hp->rope_scaling = HX_ROPE_SCALING_LINEAR;
    else if (strcmp(type, "llama3") == 0) hp->rope_scaling = HX_ROPE_SCALING_LLAMA3;
    else if (strcmp(type, "yarn") == 0) hp->rope_scaling = HX_ROPE_SCALING_YARN;
    else if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0)
        hp->rope_scaling = HX_ROPE_SCALING_LONGROPE;
    else
        return hx_err_set(err, HX_E_UNSUPPORTED, "%s: unsupported rope_scaling type '%s'", path,
                          type);
    hp->rope_factor = get_num(rs, "factor", 1.0f);
    hp->rope_orig_ctx = (int32_t)get_num(rs, "original_max_position_embeddings", 0.0f);
    hp->rope_low_freq_factor = get_num(rs, "low_freq_factor", 0.0f);
    hp->rope_high_freq_factor = get_num(rs, "high_freq_factor", 0.0f);
    hp->yarn_beta_fast = get_num(rs, "beta_fast", 0.0f);
    hp->yarn_beta_slow = get_num(rs, "beta_slow", 0.0f);
    hp->rope_attn_factor = get_num(rs, "attention_factor", 0.0f);
    return HX_OK;
}

/* Reads a longrope factor list of n numbers into a new array (*out, owned by the caller). */
static hx_status read_factors(json_t *rs, const char *key, const char *path, int32_t n,
                              float **out, hx_err *err)
{
    json_t *a = json_object_get(rs, key);
    if (!json_is_array(a) || (int32_t)json_array_size(a) != n)
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: rope_scaling.%s must be a list of %d numbers (rotated dims / 2)",
                          path, key, n);
    if (!(*out = hx_alloc((size_t)n * sizeof(float))))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
    for (int32_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || json_number_value(v) <= 0)
            return hx_err_set(err, HX_E_FORMAT, "%s: rope_scaling.%s[%d] must be a positive "
                              "number", path, key, i);
        (*out)[i] = (float)json_number_value(v);
    }
    return HX_OK;
}

/* LongRoPE (Phi-3): the factor lists, the original context (inside rope_scaling or, as Phi-3
 * writes it, at the top level), and transformers' defaults: factor = max_position_embeddings /
 * original when absent (the magnitude factor follows from it in the model). */
static hx_status read_longrope(json_t *root, json_t *text, json_t *rs, const char *path,
                               hx_hfconfig *cfg, hx_err *err)
{
    hx_hparams *hp = &cfg->hp;
    if (hp->rope_orig_ctx <= 0) {
        json_t *o = field(root, text, "original_max_position_embeddings");
        hp->rope_orig_ctx = o && json_is_integer(o) ? (int32_t)json_integer_value(o) : 0;
    }
    if (hp->rope_orig_ctx <= 0)
        return hx_err_set(err, HX_E_FORMAT, "%s: longrope scaling needs "
                          "original_max_position_embeddings", path);
    if (!json_object_get(rs, "factor"))
        hp->rope_factor = hp->n_ctx_train > 0 ? (float)hp->n_ctx_train / (float)hp->rope_orig_ctx
                                              : 1.0f;
    const int32_t n = (hp->n_rot > 0 ? hp->n_rot : hp->d_head) / 2;
    cfg->n_rope_factors = n;
    hx_status st = read_factors(rs, "long_factor", path, n, &cfg->rope_long, err);
    if (st == HX_OK) st = read_factors(rs, "short_factor", path, n, &cfg->rope_short, err);
    return st;
}

/* The attention pattern of Gemma 2/3: which layers are global. Gemma 2 alternates (even layers
 * slide); Gemma 3 makes every sliding_window_pattern-th layer global ((i + 1) % pattern == 0).
 * layer_types, where given, says it layer by layer and wins. */
static hx_status read_layer_types(json_t *root, json_t *text, const char *path, hx_hparams *hp,
                                  hx_err *err)
{
    if (hp->n_layer > HX_MAX_LAYERS)
        return hx_err_set(err, HX_E_UNSUPPORTED, "%s: %d layers with a per-layer attention "
                          "pattern (at most %d)", path, hp->n_layer, HX_MAX_LAYERS);
    json_t *lt = field(root, text, "layer_types");
    if (lt && json_is_array(lt)) {
        if ((int32_t)json_array_size(lt) != hp->n_layer)
            return hx_err_set(err, HX_E_FORMAT, "%s: layer_types has %zu entries for %d layers",
                              path, json_array_size(lt), hp->n_layer);
        for (int32_t i = 0; i < hp->n_layer; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            if (t && strcmp(t, "full_attention") == 0) hx_hparams_set_full_attn(hp, i);
            else if (!t || strcmp(t, "sliding_attention") != 0)
                return hx_err_set(err, HX_E_UNSUPPORTED, "%s: layer_types[%d] is '%s' (expected "
                                  "sliding_attention or full_attention)", path, i, t ? t : "?");
        }
        return HX_OK;
    }
    int32_t pattern = 2;
    if (strcmp(hp->arch, "gemma3") == 0) {
        hx_status st = get_int(root, text, path, "sliding_window_pattern", false, 6, &pattern, err);
        if (st != HX_OK) return st;
    }
    for (int32_t i = 0; i < hp->n_layer; i++)
        if (pattern <= 1 || (i + 1) % pattern == 0) hx_hparams_set_full_attn(hp, i);
    return HX_OK;
}

/* A soft-capping value: absent gives the family default, null turns it off. */
static float get_cap(json_t *root, json_t *text, const char *key, float def)
{
    json_t *v = text ? json_object_get(text, key) : NULL;
    if (!v) v = json_object_get(root, key);
    if (!v) return def;
    return json_is_number(v) ? (float)json_number_value(v) : 0.0f;
}

/* Gemma 2/3: query scaling, soft-capping, the sliding pattern, Gemma 3's two RoPE bases (from
 * rope_local_base_freq, or from rope_parameters per layer type), and the (1 + w) norms. */
static hx_status read_gemma(json_t *root, json_t *text, const char *path, hx_hfconfig *cfg,
                            hx_err *err)
{
    hx_hparams *hp = &cfg->hp;
    const bool g3 = strcmp(hp->arch, "gemma3") == 0;
    hp->norm_plus_one = true;
    json_t *qs = field(root, text, "query_pre_attn_scalar");
    const double qpas = qs && json_is_number(qs) ? json_number_value(qs) : 256.0;
    if (qpas <= 0)
        return hx_err_set(err, HX_E_FORMAT, "%s: query_pre_attn_scalar must be positive", path);
    hp->attn_scale = (float)(1.0 / sqrt(qpas));
    hp->attn_softcap = get_cap(root, text, "attn_logit_softcapping", g3 ? 0.0f : 50.0f);
    hp->final_softcap = get_cap(root, text, "final_logit_softcapping", g3 ? 0.0f : 30.0f);
    if (!field(root, text, "sliding_window")) hp->sliding_window = 4096;
    hx_status st = read_layer_types(root, text, path, hp, err);
    if (st != HX_OK || !g3) return st;
    json_t *rp = field(root, text, "rope_parameters");
    json_t *full = rp ? json_object_get(rp, "full_attention") : NULL;
    json_t *slide = rp ? json_object_get(rp, "sliding_attention") : NULL;
    if (full && json_is_object(full)) {
        hp->rope_theta = get_num(full, "rope_theta", 1e6f);
        if ((st = read_rope_scaling(full, path, hp, err)) != HX_OK) return st;
    } else if (!field(root, text, "rope_theta")) {
        hp->rope_theta = 1e6f;
    }
    json_t *local = field(root, text, "rope_local_base_freq");
    hp->rope_theta_swa = slide && json_is_object(slide) ? get_num(slide, "rope_theta", 1e4f)
                         : local && json_is_number(local) ? (float)json_number_value(local)
                                                          : 1e4f;
    return HX_OK;
}

hx_status hx_hfconfig_load(const char *path, hx_hfconfig *cfg, hx_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return hx_err_set(err, HX_E_FORMAT, "%s: line %d, column %d: %s", path, jerr.line,
                          jerr.column, jerr.text);
    hx_status st = HX_OK;
    hx_hparams *hp = &cfg->hp;
    if (!json_is_object(root)) {
        st = hx_err_set(err, HX_E_FORMAT, "%s: not a JSON object", path);
        goto fail;
    }
    json_t *text = json_object_get(root, "text_config");
    if (text && !json_is_object(text)) text = NULL;

    json_t *mt = field(root, text, "model_type");
    if (!mt || !json_is_string(mt)) {
        st = hx_err_set(err, HX_E_FORMAT, "%s: missing required field 'model_type'", path);
        goto fail;
    }
    const char *arch = hx_arch_from_hf(json_string_value(mt));
    if (!arch) {
        st = hx_err_set(err, HX_E_UNSUPPORTED,
                        "%s: unknown architecture '%s' (model_type); supported: %s", path,
                        json_string_value(mt), hx_arch_list());
        goto fail;
    }
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);

    /* Gemma 3's text_config relies on Gemma3TextConfig's defaults (the 4B config gives only
     * hidden_size, intermediate_size, num_hidden_layers, rope_scaling and sliding_window). */
    const bool g3 = strcmp(arch, "gemma3") == 0, req = !g3;
    if ((st = get_int(root, text, path, "num_hidden_layers", req, 26, &hp->n_layer, err)) ||
        (st = get_int(root, text, path, "hidden_size", req, 2304, &hp->d_model, err)) ||
        (st = get_int(root, text, path, "num_attention_heads", req, 8, &hp->n_head, err)) ||
        (st = get_int(root, text, path, "num_key_value_heads", false, g3 ? 4 : hp->n_head,
                      &hp->n_kv_head, err)) ||
        (st = get_int(root, text, path, "intermediate_size", req, 9216, &hp->d_ff, err)) ||
        (st = get_int(root, text, path, "vocab_size", req, 262208, &hp->n_vocab, err)) ||
        (st = get_int(root, text, path, "max_position_embeddings", false, g3 ? 131072 : 0,
                      &hp->n_ctx_train, err)))
        goto fail;
    if (hp->n_layer == 0 || hp->d_model == 0 || hp->n_head == 0 || hp->n_kv_head == 0 ||
        hp->n_head % hp->n_kv_head != 0) {
        st = hx_err_set(err, HX_E_FORMAT,
                        "%s: inconsistent sizes (layers %d, hidden %d, heads %d, kv heads %d)",
                        path, hp->n_layer, hp->d_model, hp->n_head, hp->n_kv_head);
        goto fail;
    }
    if ((st = get_int(root, text, path, "head_dim", false, g3 ? 256 : hp->d_model / hp->n_head,
                      &hp->d_head, err)))
        goto fail;
    json_t *sw = field(root, text, "sliding_window");
    json_t *use_sw = field(root, text, "use_sliding_window");
    if (sw && json_is_integer(sw) && !(use_sw && json_is_false(use_sw)))
        hp->sliding_window = (int32_t)json_integer_value(sw);
    if ((st = get_int(root, text, path, "num_local_experts", false, 0, &hp->n_expert, err)))
        goto fail;
    if (hp->n_expert == 0 &&
        (st = get_int(root, text, path, "num_experts", false, 0, &hp->n_expert, err)))
        goto fail;
    if ((st = get_int(root, text, path, "num_experts_per_tok", false, 0, &hp->n_expert_used,
                      err)))
        goto fail;
    /* Mixtral and OLMoE give the experts' width as intermediate_size; the Qwen MoE families
     * as moe_intermediate_size (intermediate_size is then their dense layers'). */
    if ((st = get_int(root, text, path, "moe_intermediate_size", false, hp->d_ff, &hp->d_ff_exp,
                      err)) ||
        (st = get_int(root, text, path, "shared_expert_intermediate_size", false, 0,
                      &hp->d_ff_shexp, err)))
        goto fail;
    json_t *ntp = field(root, text, "norm_topk_prob");
    hp->moe_norm_topk = strcmp(arch, "mixtral") == 0 || (ntp && json_is_true(ntp));

    json_t *theta = field(root, text, "rope_theta");
    hp->rope_theta = theta && json_is_number(theta) ? (float)json_number_value(theta) : 10000.0f;
    json_t *eps = field(root, text, "rms_norm_eps");
    if (!eps) eps = field(root, text, "layer_norm_eps");
    hp->norm_eps = eps && json_is_number(eps) ? (float)json_number_value(eps) : 1e-6f;
    hp->rope_layout = HX_ROPE_HALVES; /* Hugging Face checkpoints rotate halves */
    json_t *ab = field(root, text, "attention_bias");
    hp->attn_bias = (ab && json_is_true(ab)) || strcmp(arch, "qwen2") == 0 ||
                    strcmp(arch, "qwen2moe") == 0;
    /* Newer transformers write rope_parameters: {rope_type, rope_theta, partial_rotary_factor,
     * and the scaling's fields} (Gemma 3: one such object per layer type, read_gemma). */
    json_t *rs = field(root, text, "rope_scaling");
    json_t *rp = field(root, text, "rope_parameters");
    if (rp && json_is_object(rp) && !json_object_get(rp, "full_attention")) {
        if (!theta) hp->rope_theta = get_num(rp, "rope_theta", hp->rope_theta);
        if (!rs) rs = rp;
    }
    json_t *prf = field(root, text, "partial_rotary_factor");
    if (!prf && rp) prf = json_object_get(rp, "partial_rotary_factor");
    if (prf && json_is_number(prf) && json_number_value(prf) > 0 && json_number_value(prf) < 1) {
        hp->n_rot = (int32_t)(hp->d_head * json_number_value(prf));
        if (hp->n_rot < 2 || hp->n_rot % 2 != 0) {
            st = hx_err_set(err, HX_E_FORMAT, "%s: partial_rotary_factor %g of head_dim %d does "
                            "not give an even number of rotated dims", path,
                            json_number_value(prf), hp->d_head);
            goto fail;
        }
    }
    if ((st = read_rope_scaling(rs, path, hp, err))) goto fail;
    if (hp->rope_scaling == HX_ROPE_SCALING_LONGROPE &&
        (st = read_longrope(root, text, rs, path, cfg, err)))
        goto fail;
    if ((strcmp(arch, "gemma2") == 0 || g3) && (st = read_gemma(root, text, path, cfg, err)))
        goto fail;
    if (strcmp(arch, "gemma") == 0) hp->norm_plus_one = true; /* Gemma 1: only the (1 + w) */

    json_t *q = json_object_get(root, "quantization");
    if (!q) q = json_object_get(root, "quantization_config");
    if (q && json_is_object(q) && json_object_get(q, "bits")) {
        json_t *bits = json_object_get(q, "bits"), *group = json_object_get(q, "group_size");
        if (!json_is_integer(bits) || !json_is_integer(group)) {
            st = hx_err_set(err, HX_E_FORMAT,
                            "%s: quantization needs integer 'bits' and 'group_size'", path);
            goto fail;
        }
        cfg->has_quant = true;
        cfg->quant_bits = (int32_t)json_integer_value(bits);
        cfg->quant_group = (int32_t)json_integer_value(group);
        cfg->quant = json_incref(q);
    }
    json_decref(root);
    return HX_OK;
fail:
    json_decref(root);
    hx_hfconfig_free(cfg);
    return st;
}

void hx_hfconfig_free(hx_hfconfig *cfg)
{
    if (!cfg) return;
    json_decref(cfg->quant);
    hx_free(cfg->rope_long);
    hx_free(cfg->rope_short);
    memset(cfg, 0, sizeof *cfg);
}

bool hx_hfconfig_quant_for(const hx_hfconfig *cfg, const char *module, int32_t *bits,
                           int32_t *group)
{
    *bits = cfg->quant_bits;
    *group = cfg->quant_group;
    json_t *o = cfg->quant ? json_object_get(cfg->quant, module) : NULL;
    if (!o) return cfg->has_quant;
    if (json_is_false(o)) return false;
    if (json_is_object(o)) {
        json_t *b = json_object_get(o, "bits"), *g = json_object_get(o, "group_size");
        if (json_is_integer(b)) *bits = (int32_t)json_integer_value(b);
        if (json_is_integer(g)) *group = (int32_t)json_integer_value(g);
    }
    return true;
}
