/* hfconfig.c - config.json reader (jansson).
 *
 * Multimodal wrappers (Gemma 3) nest the language model's fields under "text_config"; those
 * are read from there, with the top level as fallback. */
#include "hfconfig.h"

#include <jansson.h>
#include <string.h>

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

    if ((st = get_int(root, text, path, "num_hidden_layers", true, 0, &hp->n_layer, err)) ||
        (st = get_int(root, text, path, "hidden_size", true, 0, &hp->d_model, err)) ||
        (st = get_int(root, text, path, "num_attention_heads", true, 0, &hp->n_head, err)) ||
        (st = get_int(root, text, path, "num_key_value_heads", false, hp->n_head, &hp->n_kv_head,
                      err)) ||
        (st = get_int(root, text, path, "intermediate_size", true, 0, &hp->d_ff, err)) ||
        (st = get_int(root, text, path, "vocab_size", true, 0, &hp->n_vocab, err)) ||
        (st = get_int(root, text, path, "max_position_embeddings", false, 0, &hp->n_ctx_train,
                      err)))
        goto fail;
    if (hp->n_layer == 0 || hp->d_model == 0 || hp->n_head == 0 || hp->n_kv_head == 0 ||
        hp->n_head % hp->n_kv_head != 0) {
        st = hx_err_set(err, HX_E_FORMAT,
                        "%s: inconsistent sizes (layers %d, hidden %d, heads %d, kv heads %d)",
                        path, hp->n_layer, hp->d_model, hp->n_head, hp->n_kv_head);
        goto fail;
    }
    if ((st = get_int(root, text, path, "head_dim", false, hp->d_model / hp->n_head, &hp->d_head,
                      err)))
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

    json_t *theta = field(root, text, "rope_theta");
    hp->rope_theta = theta && json_is_number(theta) ? (float)json_number_value(theta) : 10000.0f;
    json_t *eps = field(root, text, "rms_norm_eps");
    if (!eps) eps = field(root, text, "layer_norm_eps");
    hp->norm_eps = eps && json_is_number(eps) ? (float)json_number_value(eps) : 1e-6f;
    hp->rope_layout = HX_ROPE_HALVES; /* Hugging Face checkpoints rotate halves */
    json_t *ab = field(root, text, "attention_bias");
    hp->attn_bias = (ab && json_is_true(ab)) || strcmp(arch, "qwen2") == 0;
    if ((st = read_rope_scaling(field(root, text, "rope_scaling"), path, hp, err))) goto fail;

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
    memset(cfg, 0, sizeof *cfg);
    return st;
}

void hx_hfconfig_free(hx_hfconfig *cfg)
{
    if (!cfg) return;
    json_decref(cfg->quant);
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
