/* describe.c - builds the JSON description of an opened model. */
#include "describe.h"

#include <ctype.h>
#include <string.h>

static const char *rope_scaling_name(hx_rope_scaling_type t)
{
    switch (t) {
    case HX_ROPE_SCALING_LINEAR: return "linear";
    case HX_ROPE_SCALING_LLAMA3: return "llama3";
    case HX_ROPE_SCALING_YARN: return "yarn";
    case HX_ROPE_SCALING_LONGROPE: return "longrope";
    default: return NULL;
    }
}

static json_t *hparams_json(const hx_hparams *hp)
{
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:i, s:b, s:b, "
                          "s:b}",
                          "n_layer", hp->n_layer, "d_model", hp->d_model, "n_head", hp->n_head,
                          "n_kv_head", hp->n_kv_head, "d_head", hp->d_head, "d_ff", hp->d_ff,
                          "n_vocab", hp->n_vocab, "n_ctx_train", hp->n_ctx_train,
                          "rope_theta", (double)hp->rope_theta, "norm_eps", (double)hp->norm_eps,
                          "rope_layout", hp->rope_layout == HX_ROPE_PAIRS ? "pairs" : "halves",
                          "sliding_window", hp->sliding_window,
                          "tie_embeddings", hp->tie_embeddings, "qk_norm", hp->qk_norm,
                          "attn_bias", hp->attn_bias);
    if (!o) return NULL;
    const char *rs = rope_scaling_name(hp->rope_scaling);
    json_object_set_new(o, "rope_scaling",
                        rs ? json_pack("{s:s, s:f, s:i, s:f, s:f}", "type", rs, "factor",
                                       (double)hp->rope_factor, "original_context",
                                       hp->rope_orig_ctx, "low_freq_factor",
                                       (double)hp->rope_low_freq_factor, "high_freq_factor",
                                       (double)hp->rope_high_freq_factor)
                           : json_null());
    if (hp->n_expert > 0) {
        json_object_set_new(o, "n_expert", json_integer(hp->n_expert));
        json_object_set_new(o, "n_expert_used", json_integer(hp->n_expert_used));
        json_object_set_new(o, "d_ff_exp", json_integer(hp->d_ff_exp));
        if (hp->d_ff_shexp > 0) json_object_set_new(o, "d_ff_shexp", json_integer(hp->d_ff_shexp));
        json_object_set_new(o, "moe_norm_topk", json_boolean(hp->moe_norm_topk));
    }
    /* Gemma 2/3 and Phi-3 (present only where they differ from the Llama defaults). */
    if (hp->n_rot > 0) json_object_set_new(o, "n_rot", json_integer(hp->n_rot));
    if (hp->attn_scale > 0) json_object_set_new(o, "attn_scale", json_real(hp->attn_scale));
    if (hp->attn_softcap > 0)
        json_object_set_new(o, "attn_softcap", json_real(hp->attn_softcap));
    if (hp->final_softcap > 0)
        json_object_set_new(o, "final_softcap", json_real(hp->final_softcap));
    if (hp->rope_theta_swa > 0)
        json_object_set_new(o, "rope_theta_swa", json_real(hp->rope_theta_swa));
    if (hp->norm_plus_one) json_object_set_new(o, "norm_plus_one", json_true());
    if (hp->sliding_window > 0) {
        json_t *full = json_array(); /* the global layers of a sliding/global pattern */
        for (int32_t i = 0; i < hp->n_layer && full; i++)
            if (hx_hparams_layer_window(hp, i) == 0) json_array_append_new(full, json_integer(i));
        if (full && json_array_size(full) > 0) json_object_set_new(o, "full_attn_layers", full);
        else json_decref(full);
    }
    return o;
}

/* Tokenizer type and vocabulary size, from GGUF metadata or tokenizer.json. */
static json_t *tokenizer_json(const hx_model_files *mf)
{
    if (mf->gguf) {
        const hx_gguf_kv *toks = hx_gguf_find(mf->gguf, "tokenizer.ggml.tokens");
        if (!mf->tokenizer_kind && !toks) return json_null();
        return json_pack("{s:s, s:s?, s:I}", "source", "gguf", "type", mf->tokenizer_kind,
                         "vocab_size", (json_int_t)(toks ? toks->arr_n : 0));
    }
    if (!mf->tokenizer_json) return json_null();
    json_error_t jerr;
    json_t *root = json_load_file(mf->tokenizer_json, 0, &jerr);
    if (!root)
        return json_pack("{s:s, s:s}", "source", "tokenizer.json", "error", jerr.text);
    json_t *model = json_object_get(root, "model");
    json_t *type = json_object_get(model, "type"), *vocab = json_object_get(model, "vocab");
    json_int_t n = json_is_object(vocab) ? (json_int_t)json_object_size(vocab)
                   : json_is_array(vocab) ? (json_int_t)json_array_size(vocab) : 0;
    /* Added tokens that are not already in the vocabulary extend it. */
    json_t *added = json_object_get(root, "added_tokens");
    size_t i;
    json_t *tok;
    json_array_foreach(added, i, tok) {
        json_t *content = json_object_get(tok, "content");
        if (json_is_string(content) && json_is_object(vocab) &&
            !json_object_get(vocab, json_string_value(content)))
            n++;
    }
    char kind[32] = "unknown";
    if (json_is_string(type)) {
        snprintf(kind, sizeof kind, "%s", json_string_value(type));
        for (char *p = kind; *p; p++) *p = (char)tolower((unsigned char)*p);
    }
    json_t *o = json_pack("{s:s, s:s, s:I}", "source", "tokenizer.json", "type", kind,
                          "vocab_size", n);
    json_decref(root);
    return o;
}

json_t *hx_model_describe(const hx_model_files *mf)
{
    const hx_dtype main_dt = hx_model_files_main_dtype(mf);
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:o, s:I, s:I, s:s}", "path", mf->path, "format",
                          hx_file_format_name(mf->format), "format_version", mf->format_version,
                          "arch", mf->hp.arch, "hparams", hparams_json(&mf->hp), "n_params",
                          (json_int_t)hx_model_files_n_params(mf), "n_bytes",
                          (json_int_t)hx_model_files_n_bytes(mf), "quant",
                          hx_dtypes[main_dt].name);
    if (!o) return NULL;
    if (mf->format == HX_FMT_MLX)
        json_object_set_new(o, "mlx_quantization", json_pack("{s:i, s:i}", "bits", mf->mlx_bits,
                                                             "group_size", mf->mlx_group_size));
    json_t *files = json_array();
    for (int32_t f = 0; f < mf->n_files; f++) json_array_append_new(files, json_string(mf->file_paths[f]));
    json_object_set_new(o, "files", files);

    json_int_t by_dt[HX_DT_COUNT] = {0};
    json_t *tensors = json_array();
    for (int64_t i = 0; i < mf->n_tensors; i++) {
        const hx_tensor_info *ti = &mf->tensors[i];
        json_t *shape = json_array();
        for (int32_t d = 0; d < ti->t.n_dims; d++) json_array_append_new(shape, json_integer(ti->t.shape[d]));
        const json_int_t bytes = (json_int_t)hx_tensor_data_bytes(&ti->t);
        by_dt[ti->t.dtype] += bytes;
        json_array_append_new(tensors,
                              json_pack("{s:s, s:s, s:s, s:o, s:I, s:i, s:I}", "name", ti->name,
                                        "src_name", ti->src_name, "dtype",
                                        hx_dtypes[ti->t.dtype].name, "shape", shape, "bytes",
                                        bytes, "file", ti->file_index, "offset",
                                        (json_int_t)ti->offset));
    }
    json_t *bytes_by = json_object();
    for (int d = 0; d < HX_DT_COUNT; d++)
        if (by_dt[d]) json_object_set_new(bytes_by, hx_dtypes[d].name, json_integer(by_dt[d]));
    json_object_set_new(o, "bytes_by_dtype", bytes_by);
    json_object_set_new(o, "tokenizer", tokenizer_json(mf));
    json_object_set_new(o, "chat_template",
                        mf->chat_template
                            ? json_pack("{s:b, s:s, s:I}", "present", 1, "source",
                                        mf->chat_template_source, "bytes",
                                        (json_int_t)strlen(mf->chat_template))
                            : json_pack("{s:b}", "present", 0));
    json_object_set_new(o, "generation_config",
                        mf->generation_config ? json_string(mf->generation_config) : json_null());
    json_object_set_new(o, "tensors", tensors);
    return o;
}
