/* model_files.c - opens a model in any of the three formats into one hx_model_files.
 *
 * Order of work: decide the format from the path, parse the container(s) (gguf.c,
 * safetensors.c), read hyper-parameters (GGUF metadata or config.json), then build the tensor
 * list with normalised names and hearth dtypes, and finally derive what the tensors imply
 * (tied embeddings, qk-norm, attention biases) and check the embedding agrees with the
 * hyper-parameters. Everything points into the mappings; nothing is copied. */
#define _GNU_SOURCE
#include "model_files.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/path.h"
#include "format/hfconfig.h"
#include "format/hub.h"
#include "format/names.h"

/* ---- small helpers ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const hx_tensor_info *)a)->name, ((const hx_tensor_info *)b)->name);
}

const char *hx_file_format_name(hx_file_format f)
{
    return f == HX_FMT_GGUF ? "gguf" : f == HX_FMT_MLX ? "mlx" : "safetensors";
}

/* Appends one tensor; names are copied. */
static hx_status push_tensor(hx_model_files *mf, int64_t *cap, const char *name,
                             const char *src_name, const hx_tensor *t, int32_t file_index,
                             uint64_t offset, hx_err *err)
{
    if (mf->n_tensors == *cap) {
        int64_t ncap = *cap ? *cap * 2 : 64;
        hx_tensor_info *p = hx_realloc(mf->tensors, (size_t)ncap * sizeof *p);
        if (!p) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", mf->path);
        mf->tensors = p;
        *cap = ncap;
    }
    hx_tensor_info *ti = &mf->tensors[mf->n_tensors];
    memset(ti, 0, sizeof *ti);
    ti->name = hx_strdup(name);
    ti->src_name = hx_strdup(src_name);
    mf->n_tensors++;
    if (!ti->name || !ti->src_name) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", mf->path);
    ti->t = *t;
    ti->file_index = file_index;
    ti->offset = offset;
    return HX_OK;
}

/* ---- GGUF ---- */

/* ggml type id → hearth dtype; -1 for types hearth does not compute with. */
static int dtype_from_ggml(uint32_t id)
{
    switch (id) {
    case 0: return HX_DT_F32;
    case 1: return HX_DT_F16;
    case 2: return HX_DT_Q4_0;
    case 3: return HX_DT_Q4_1;
    case 8: return HX_DT_Q8_0;
    case 12: return HX_DT_Q4_K;
    case 13: return HX_DT_Q5_K;
    case 14: return HX_DT_Q6_K;
    case 30: return HX_DT_BF16;
    default: return -1;
    }
}

/* Reads "<arch>.<key>" as an unsigned integer into *out (unchanged when absent). */
static void gguf_arch_u32(const hx_gguf *g, const char *arch, const char *key, int32_t *out)
{
    char full[128];
    uint64_t v;
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (hx_gguf_get_u64(g, full, &v) && v <= INT32_MAX) *out = (int32_t)v;
}

static void gguf_arch_f32(const hx_gguf *g, const char *arch, const char *key, float *out)
{
    char full[128];
    double v;
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (hx_gguf_get_f64(g, full, &v)) *out = (float)v;
}

static void gguf_arch_bool(const hx_gguf *g, const char *arch, const char *key, bool *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    (void)hx_gguf_get_bool(g, full, out);
}

static char *gguf_strdup(const hx_gguf *g, const char *key)
{
    hx_gguf_str s;
    if (!hx_gguf_get_str(g, key, &s)) return NULL;
    return hx_strndup(s.ptr, (size_t)s.len);
}

/* What Gemma 2/3 and Phi-3 GGUFs add (llama.cpp's converter writes these keys):
 *  - partial rotary: rope.dimension_count below key_length;
 *  - LongRoPE: rope_factors_long/short.weight tensors, rope.scaling.attn_factor; the factor is
 *    context_length / rope.scaling.original_context_length, as transformers derives it;
 *  - soft-capping: attn_logit_softcapping, final_logit_softcapping;
 *  - Gemma's query scale: attention.scale when present, else llama.cpp's rule (the 27B models,
 *    46 layers for Gemma 2 and 62 for Gemma 3, scale by d_model / n_head; the others by d_head);
 *  - Gemma's sliding pattern: attention.sliding_window_pattern (a period, or one bool per layer,
 *    true = sliding), else 2 (Gemma 2) or 6 (Gemma 3); Gemma 3's local RoPE base
 *    rope.freq_base_swa, else 10000.
 * GGUF norm weights of Gemma already hold 1 + w (the converter adds 1), so norm_plus_one stays
 * false. */
static hx_status gguf_family_hparams(const hx_gguf *g, const char *ga, const char *path,
                                     hx_hparams *hp, hx_err *err)
{
    gguf_arch_u32(g, ga, "rope.dimension_count", &hp->n_rot);
    if (hp->n_rot >= hp->d_head) hp->n_rot = 0;
    if (hp->n_rot % 2 != 0)
        return hx_err_set(err, HX_E_FORMAT, "%s: %s.rope.dimension_count %d is odd", path, ga,
                          hp->n_rot);
    if (hx_gguf_find_tensor(g, "rope_factors_long.weight")) {
        hp->rope_scaling = HX_ROPE_SCALING_LONGROPE;
        gguf_arch_f32(g, ga, "rope.scaling.attn_factor", &hp->rope_attn_factor);
        if (hp->rope_orig_ctx <= 0)
            return hx_err_set(err, HX_E_FORMAT, "%s: LongRoPE factors without "
                              "%s.rope.scaling.original_context_length", path, ga);
        if (hp->rope_factor <= 0)
            hp->rope_factor = (float)hp->n_ctx_train / (float)hp->rope_orig_ctx;
    }
    gguf_arch_f32(g, ga, "attn_logit_softcapping", &hp->attn_softcap);
    gguf_arch_f32(g, ga, "final_logit_softcapping", &hp->final_softcap);
    const bool g2 = strcmp(hp->arch, "gemma2") == 0, g3 = strcmp(hp->arch, "gemma3") == 0;
    if (!g2 && !g3) return HX_OK;
    const bool big = hp->n_layer == (g2 ? 46 : 62);
    hp->attn_scale = 1.0f / sqrtf(big ? (float)hp->d_model / (float)hp->n_head : (float)hp->d_head);
    gguf_arch_f32(g, ga, "attention.scale", &hp->attn_scale);
    if (hp->n_layer > HX_MAX_LAYERS)
        return hx_err_set(err, HX_E_UNSUPPORTED, "%s: %d layers with a per-layer attention "
                          "pattern (at most %d)", path, hp->n_layer, HX_MAX_LAYERS);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ga);
    const hx_gguf_kv *pat = hx_gguf_find(g, key);
    if (pat && pat->type == HX_GGUF_ARRAY && pat->arr_type == HX_GGUF_BOOL) {
        if (pat->arr_n != (uint64_t)hp->n_layer)
            return hx_err_set(err, HX_E_FORMAT, "%s: %s has %llu entries for %d layers", path, key,
                              (unsigned long long)pat->arr_n, hp->n_layer);
        for (int32_t i = 0; i < hp->n_layer; i++)
            if (!pat->arr_data[i]) hx_hparams_set_full_attn(hp, i);
    } else {
        int32_t period = g2 ? 2 : 6;
        gguf_arch_u32(g, ga, "attention.sliding_window_pattern", &period);
        for (int32_t i = 0; i < hp->n_layer; i++)
            if (period <= 1 || (i + 1) % period == 0) hx_hparams_set_full_attn(hp, i);
    }
    if (g3) {
        hp->rope_theta_swa = 10000.0f;
        gguf_arch_f32(g, ga, "rope.freq_base_swa", &hp->rope_theta_swa);
    }
    return HX_OK;
}

/* Adds the tensors of g, which is file `file` of the model. */
static hx_status push_gguf_tensors(hx_model_files *mf, const hx_gguf *g, int32_t file,
                                   int64_t *cap, hx_err *err)
{
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *gt = &g->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(gt->name.len < 255 ? gt->name.len : 255),
                 gt->name.ptr);
        int dt = dtype_from_ggml(gt->ggml_type);
        if (dt < 0)
            return hx_err_set(err, HX_E_UNSUPPORTED,
                              "%s: unsupported quantization type %s in tensor %s (supported: F32, "
                              "F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                              g->path, hx_gguf_type_name(gt->ggml_type), name);
        hx_tensor t = {.dtype = (hx_dtype)dt, .n_dims = (int32_t)gt->n_dims,
                       .data = gt->data, .n_bytes = (size_t)gt->n_bytes};
        for (uint32_t d = 0; d < gt->n_dims; d++) t.shape[d] = (int64_t)gt->ne[gt->n_dims - 1 - d];
        hx_status st = push_tensor(mf, cap, name, name, &t, file, g->data_offset + gt->offset, err);
        if (st != HX_OK) return st;
    }
    return HX_OK;
}

/* A GGUF split by llama.cpp's gguf-split: NAME-0000k-of-0000n.gguf, part 1 holding the metadata
 * and each part some tensors, every part saying split.no (0-based) and split.count. Opens parts
 * 2..n beside path (part 1, already read) and adds their tensors. */
static hx_status open_gguf_parts(hx_model_files *mf, const char *path, uint64_t n_parts,
                                 int64_t *cap, hx_err *err)
{
    uint64_t no = 0, want_tensors = 0;
    int      part = 0, n_named = 0;
    size_t   stem = 0;
    (void)hx_gguf_get_u64(mf->gguf, "split.no", &no);
    if (!hx_hub_gguf_split(path, &part, &n_named, &stem) || (uint64_t)n_named != n_parts ||
        n_parts > 9999)
        return hx_err_set(err, HX_E_FORMAT, "%s: a split GGUF of %llu parts must be named "
                          "NAME-00001-of-%05llu.gguf so its other parts can be found", path,
                          (unsigned long long)n_parts, (unsigned long long)n_parts);
    if (no != 0 || part != 1)
        return hx_err_set(err, HX_E_FORMAT, "%s is part %d of a split GGUF: open its first part "
                          "(%.*s-00001-of-%05d.gguf)", path, part, (int)stem, path, n_named);
    mf->gguf_parts = hx_calloc((size_t)n_parts - 1, sizeof *mf->gguf_parts);
    char **paths = hx_realloc(mf->file_paths, (size_t)n_parts * sizeof *paths);
    if (!mf->gguf_parts || !paths) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
    mf->file_paths = paths;
    for (uint64_t k = 2; k <= n_parts; k++) {
        char  *pp = hx_alloc(stem + 32);
        if (!pp) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
        snprintf(pp, stem + 32, "%.*s-%05d-of-%05d.gguf", (int)stem, path, (int)k, (int)n_parts);
        mf->file_paths[mf->n_files++] = pp;
        if (!hx_path_is_file(pp)) /* the model was found; one of its files is not */
            return hx_err_set(err, HX_E_FORMAT, "%s: part %d of this split GGUF is missing (%s)",
                              path, (int)k, pp);
        hx_status st = hx_gguf_open(pp, &mf->gguf_parts[k - 2], err);
        if (st != HX_OK) return st;
        mf->n_gguf_parts++;
        const hx_gguf *g = mf->gguf_parts[k - 2];
        uint64_t gno = UINT64_MAX, gcount = 0;
        (void)hx_gguf_get_u64(g, "split.no", &gno);
        (void)hx_gguf_get_u64(g, "split.count", &gcount);
        if (gno != k - 1 || gcount != n_parts)
            return hx_err_set(err, HX_E_FORMAT, "%s: split.no %lld of split.count %lld, expected "
                              "part %llu of %llu", pp, gno == UINT64_MAX ? -1LL : (long long)gno,
                              (long long)gcount, (unsigned long long)k - 1,
                              (unsigned long long)n_parts);
        if ((st = push_gguf_tensors(mf, g, (int32_t)k - 1, cap, err)) != HX_OK) return st;
    }
    if (hx_gguf_get_u64(mf->gguf, "split.tensors.count", &want_tensors) &&
        want_tensors != (uint64_t)mf->n_tensors)
        return hx_err_set(err, HX_E_FORMAT, "%s: split.tensors.count is %llu but the %llu parts "
                          "hold %lld tensors", path, (unsigned long long)want_tensors,
                          (unsigned long long)n_parts, (long long)mf->n_tensors);
    return HX_OK;
}

static hx_status open_gguf(hx_model_files *mf, const char *path, hx_err *err)
{
    hx_status st = hx_gguf_open(path, &mf->gguf, err);
    if (st != HX_OK) return st;
    const hx_gguf *g = mf->gguf;
    mf->format = HX_FMT_GGUF;
    mf->format_version = (int32_t)g->version;
    mf->n_files = 1;
    mf->file_paths = hx_calloc(1, sizeof(char *));
    if (!mf->file_paths || !(mf->file_paths[0] = hx_strdup(path)))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);

    uint64_t split_no = 0;
    if (hx_gguf_get_u64(g, "split.no", &split_no) && split_no > 0)
        return hx_err_set(err, HX_E_FORMAT, "%s is part %llu of a split GGUF: open its first part "
                          "(NAME-00001-of-N.gguf), which holds the metadata", path,
                          (unsigned long long)split_no + 1);
    hx_gguf_str ga;
    if (!hx_gguf_get_str(g, "general.architecture", &ga))
        return hx_err_set(err, HX_E_FORMAT, "%s: missing metadata key general.architecture", path);
    char gguf_arch[64];
    snprintf(gguf_arch, sizeof gguf_arch, "%.*s", (int)(ga.len < 63 ? ga.len : 63), ga.ptr);
    const char *arch = hx_arch_from_gguf(gguf_arch);
    if (!arch)
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "%s: unknown architecture '%s' (general.architecture); supported: %s",
                          path, gguf_arch, hx_arch_list());

    hx_hparams *hp = &mf->hp;
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);
    gguf_arch_u32(g, gguf_arch, "block_count", &hp->n_layer);
    gguf_arch_u32(g, gguf_arch, "embedding_length", &hp->d_model);
    gguf_arch_u32(g, gguf_arch, "attention.head_count", &hp->n_head);
    hp->n_kv_head = hp->n_head;
    gguf_arch_u32(g, gguf_arch, "attention.head_count_kv", &hp->n_kv_head);
    gguf_arch_u32(g, gguf_arch, "feed_forward_length", &hp->d_ff);
    gguf_arch_u32(g, gguf_arch, "context_length", &hp->n_ctx_train);
    gguf_arch_u32(g, gguf_arch, "vocab_size", &hp->n_vocab);
    gguf_arch_u32(g, gguf_arch, "attention.sliding_window", &hp->sliding_window);
    gguf_arch_u32(g, gguf_arch, "expert_count", &hp->n_expert);
    gguf_arch_u32(g, gguf_arch, "expert_used_count", &hp->n_expert_used);
    gguf_arch_u32(g, gguf_arch, "expert_feed_forward_length", &hp->d_ff_exp);
    gguf_arch_u32(g, gguf_arch, "expert_shared_feed_forward_length", &hp->d_ff_shexp);
    if (hp->d_ff_exp <= 0) hp->d_ff_exp = hp->d_ff;
    /* llama.cpp renormalises the chosen experts' weights for Mixtral (stored as llama) and
     * Qwen3-MoE, not for OLMoE or Qwen2-MoE, unless the file says otherwise. */
    hp->moe_norm_topk = strcmp(arch, "llama") == 0 || strcmp(arch, "qwen3moe") == 0;
    if (strcmp(arch, "llama") == 0 && hp->n_expert > 0) /* how llama.cpp stores Mixtral */
        snprintf(hp->arch, sizeof hp->arch, "mixtral");
    gguf_arch_bool(g, gguf_arch, "expert_weights_norm", &hp->moe_norm_topk);
    hp->rope_theta = 10000.0f;
    gguf_arch_f32(g, gguf_arch, "rope.freq_base", &hp->rope_theta);
    hp->norm_eps = 1e-5f;
    gguf_arch_f32(g, gguf_arch, "attention.layer_norm_rms_epsilon", &hp->norm_eps);
    if (hp->n_layer <= 0 || hp->d_model <= 0 || hp->n_head <= 0 || hp->n_kv_head <= 0 ||
        hp->n_head % hp->n_kv_head != 0)
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: missing or inconsistent %s.block_count / embedding_length / "
                          "attention.head_count(_kv) (%d, %d, %d, %d)",
                          path, gguf_arch, hp->n_layer, hp->d_model, hp->n_head, hp->n_kv_head);
    hp->d_head = hp->d_model / hp->n_head;
    gguf_arch_u32(g, gguf_arch, "attention.key_length", &hp->d_head);
    hp->rope_layout = hx_arch_gguf_rope_pairs(arch) ? HX_ROPE_PAIRS : HX_ROPE_HALVES;

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", gguf_arch);
    char *scaling = gguf_strdup(g, key);
    if (scaling) {
        if (strcmp(scaling, "linear") == 0) hp->rope_scaling = HX_ROPE_SCALING_LINEAR;
        else if (strcmp(scaling, "yarn") == 0) hp->rope_scaling = HX_ROPE_SCALING_YARN;
        hx_free(scaling);
    }
    gguf_arch_f32(g, gguf_arch, "rope.scaling.factor", &hp->rope_factor);
    gguf_arch_u32(g, gguf_arch, "rope.scaling.original_context_length", &hp->rope_orig_ctx);
    /* Llama 3.1+ GGUFs carry the llama3 scaling as precomputed per-dimension factors. */
    if (hx_gguf_find_tensor(g, "rope_freqs.weight")) hp->rope_scaling = HX_ROPE_SCALING_LLAMA3;
    if ((st = gguf_family_hparams(g, gguf_arch, path, hp, err)) != HX_OK) return st;

    const hx_gguf_kv *toks = hx_gguf_find(g, "tokenizer.ggml.tokens");
    if (hp->n_vocab == 0 && toks && toks->type == HX_GGUF_ARRAY && toks->arr_n <= INT32_MAX)
        hp->n_vocab = (int32_t)toks->arr_n;
    mf->tokenizer_kind = gguf_strdup(g, "tokenizer.ggml.model");
    mf->chat_template = gguf_strdup(g, "tokenizer.chat_template");
    if (mf->chat_template && !(mf->chat_template_source = hx_strdup("gguf")))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);

    int64_t cap = 0;
    if ((st = push_gguf_tensors(mf, g, 0, &cap, err)) != HX_OK) return st;
    uint64_t n_parts = 0;
    if (hx_gguf_get_u64(g, "split.count", &n_parts) && n_parts > 1)
        return open_gguf_parts(mf, path, n_parts, &cap, err);
    return HX_OK;
}

/* ---- safetensors / MLX ---- */

/* Lists the shard files of a folder: from model.safetensors.index.json when present (checking
 * every file it names exists), else every *.safetensors file, sorted. */
static hx_status list_shards(hx_model_files *mf, const char *dir, json_t **weight_map_out,
                             hx_err *err)
{
    char *index_path = hx_path_join(dir, "model.safetensors.index.json");
    if (!index_path) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir);
    hx_status st = HX_OK;
    json_t *index = NULL;
    *weight_map_out = NULL;
    if (hx_path_is_file(index_path)) {
        json_error_t jerr;
        index = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
        if (!index) {
            st = hx_err_set(err, HX_E_FORMAT, "%s: line %d, column %d: %s", index_path, jerr.line,
                            jerr.column, jerr.text);
            goto done;
        }
        json_t *wm = json_object_get(index, "weight_map");
        if (!json_is_object(wm)) {
            st = hx_err_set(err, HX_E_FORMAT, "%s: missing object 'weight_map'", index_path);
            goto done;
        }
        const char *tname;
        json_t *file;
        json_object_foreach(wm, tname, file) {
            if (!json_is_string(file) || strchr(json_string_value(file), '/')) {
                st = hx_err_set(err, HX_E_FORMAT, "%s: weight_map['%s'] is not a file name",
                                index_path, tname);
                goto done;
            }
            bool seen = false;
            for (int32_t i = 0; i < mf->n_files && !seen; i++)
                seen = strcmp(strrchr(mf->file_paths[i], '/') + 1, json_string_value(file)) == 0;
            if (seen) continue;
            char **p = hx_realloc(mf->file_paths, (size_t)(mf->n_files + 1) * sizeof *p);
            if (!p) { st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir); goto done; }
            mf->file_paths = p;
            if (!(p[mf->n_files] = hx_path_join(dir, json_string_value(file)))) {
                st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir);
                goto done;
            }
            mf->n_files++;
        }
        *weight_map_out = json_incref(wm);
    } else {
        DIR *d = opendir(dir);
        if (!d) { st = hx_err_set(err, HX_E_IO, "%s: cannot list folder", dir); goto done; }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!hx_str_ends_with(e->d_name, ".safetensors")) continue;
            char **p = hx_realloc(mf->file_paths, (size_t)(mf->n_files + 1) * sizeof *p);
            if (!p || !(p[mf->n_files] = hx_path_join(dir, e->d_name))) {
                if (p) mf->file_paths = p;
                closedir(d);
                st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir);
                goto done;
            }
            mf->file_paths = p;
            mf->n_files++;
        }
        closedir(d);
    }
    if (mf->n_files == 0) {
        st = hx_err_set(err, HX_E_FORMAT, "%s: no *.safetensors files in the folder", dir);
        goto done;
    }
    qsort(mf->file_paths, (size_t)mf->n_files, sizeof(char *), cmp_str);
done:
    json_decref(index);
    hx_free(index_path);
    return st;
}

static int dtype_from_st(hx_st_dtype dt)
{
    switch (dt) {
    case HX_ST_F32: return HX_DT_F32;
    case HX_ST_F16: return HX_DT_F16;
    case HX_ST_BF16: return HX_DT_BF16;
    default: return -1;
    }
}

/* Builds an MLX affine tensor from its packed weight and the scales/biases beside it. */
static hx_status mlx_tensor(const hx_model_files *mf, const hx_hfconfig *cfg,
                            const hx_safetensors *sf, const hx_st_tensor *w, const char *stem,
                            hx_tensor *t, hx_err *err)
{
    const char *path = sf->path;
    char sname[300], bname[300];
    if (!hx_fmt(sname, sizeof sname, "%s.scales", stem) ||
        !hx_fmt(bname, sizeof bname, "%s.biases", stem))
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor name too long: %.80s...", path, w->name);
    const hx_st_tensor *s = hx_safetensors_find(sf, sname), *b = hx_safetensors_find(sf, bname);
    int32_t bits = 0, group = 0;
    if (!hx_hfconfig_quant_for(cfg, stem, &bits, &group))
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: tensor %s is packed uint32 but config.json has no quantization for it",
                          path, w->name);
    if (!s || !b)
        return hx_err_set(err, HX_E_FORMAT, "%s: MLX tensor %s lacks %s or %s (in the same file)",
                          path, w->name, sname, bname);
    if (bits != 4 && bits != 8)
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "%s: unsupported quantization type MLX %d-bit in tensor %s (supported: "
                          "4, 8)", path, bits, w->name);
    if (group != 32 && group != 64 && group != 128)
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "%s: unsupported MLX group size %d in tensor %s (supported: 32, 64, 128)",
                          path, group, w->name);
    if (w->n_dims < 1 || w->n_dims > HX_MAX_DIMS || s->n_dims != w->n_dims ||
        b->n_dims != w->n_dims || s->dtype != b->dtype ||
        (s->dtype != HX_ST_F16 && s->dtype != HX_ST_BF16 && s->dtype != HX_ST_F32))
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: MLX tensor %s: scales/biases must match the weight's rank and be "
                          "F16, BF16 or F32", path, w->name);
    const int64_t packed = w->shape[w->n_dims - 1];
    if (packed > INT64_MAX / 32)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor %s: absurd row length", path, w->name);
    const int64_t cols = packed * 32 / bits;
    for (int32_t d = 0; d < w->n_dims; d++) {
        int64_t want = d == w->n_dims - 1 ? cols / group : w->shape[d];
        if (s->shape[d] != want || b->shape[d] != want || cols % group != 0)
            return hx_err_set(err, HX_E_FORMAT,
                              "%s: MLX tensor %s: scales/biases shape does not match %d-bit "
                              "weights of row length %lld in groups of %d",
                              path, w->name, bits, (long long)cols, group);
    }
    *t = (hx_tensor){.dtype = bits == 4 ? HX_DT_MLX4 : HX_DT_MLX8, .n_dims = w->n_dims,
                     .data = w->data, .n_bytes = (size_t)(w->end - w->begin),
                     .scales = s->data, .biases = b->data,
                     .sb_dtype = s->dtype == HX_ST_F16 ? HX_DT_F16
                                 : s->dtype == HX_ST_BF16 ? HX_DT_BF16 : HX_DT_F32,
                     .group_size = group};
    for (int32_t d = 0; d < w->n_dims; d++) t->shape[d] = w->shape[d];
    t->shape[w->n_dims - 1] = cols;
    (void)mf;
    return HX_OK;
}

/* Reads the chat template from chat_template.jinja or tokenizer_config.json. */
static hx_status read_chat_template(hx_model_files *mf, const char *dir, hx_err *err)
{
    char *jinja = hx_path_join(dir, "chat_template.jinja");
    char *tc = hx_path_join(dir, "tokenizer_config.json");
    hx_status st = HX_OK;
    if (!jinja || !tc) { st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir); goto done; }
    if (hx_path_is_file(jinja)) {
        hx_mapped m;
        if ((st = hx_map_file(jinja, &m, err)) != HX_OK) goto done;
        mf->chat_template = hx_strndup((const char *)m.data, m.size);
        mf->chat_template_source = hx_strdup("chat_template.jinja");
        hx_unmap(&m);
    } else if (hx_path_is_file(tc)) {
        json_error_t jerr;
        json_t *root = json_load_file(tc, 0, &jerr);
        if (!root) {
            st = hx_err_set(err, HX_E_FORMAT, "%s: line %d, column %d: %s", tc, jerr.line,
                            jerr.column, jerr.text);
            goto done;
        }
        json_t *ct = json_object_get(root, "chat_template");
        const char *text = NULL;
        if (json_is_string(ct)) {
            text = json_string_value(ct);
        } else if (json_is_array(ct)) { /* [{"name": "default", "template": "..."}, ...] */
            size_t i;
            json_t *item;
            json_array_foreach(ct, i, item) {
                json_t *name = json_object_get(item, "name"), *tpl = json_object_get(item, "template");
                if (json_is_string(tpl) && json_is_string(name) &&
                    strcmp(json_string_value(name), "default") == 0)
                    text = json_string_value(tpl);
            }
        }
        if (text) {
            mf->chat_template = hx_strdup(text);
            mf->chat_template_source = hx_strdup("tokenizer_config.json");
        }
        json_decref(root);
    }
    if (mf->chat_template_source && !mf->chat_template)
        st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir);
done:
    hx_free(jinja);
    hx_free(tc);
    return st;
}

/* config.json's LongRoPE lists become the tensors a GGUF has for them (rope_factors_long and
 * rope_factors_short, F32 [n_rot / 2]), so the model binds one name whatever the format. Their
 * floats live in mf->rope_factors. */
static hx_status push_rope_factors(hx_model_files *mf, int64_t *cap, const hx_hfconfig *cfg,
                                   hx_err *err)
{
    const int32_t n = cfg->n_rope_factors;
    if (!(mf->rope_factors = hx_alloc(2 * (size_t)n * sizeof(float))))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", mf->path);
    memcpy(mf->rope_factors, cfg->rope_long, (size_t)n * sizeof(float));
    memcpy(mf->rope_factors + n, cfg->rope_short, (size_t)n * sizeof(float));
    for (int k = 0; k < 2; k++) {
        const hx_tensor t = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {n},
                             .data = mf->rope_factors + k * n, .n_bytes = (size_t)n * 4};
        hx_status st = push_tensor(mf, cap, k ? "rope_factors_short.weight"
                                              : "rope_factors_long.weight",
                                   k ? "config.json rope_scaling.short_factor"
                                     : "config.json rope_scaling.long_factor", &t, -1, 0, err);
        if (st != HX_OK) return st;
    }
    return HX_OK;
}

static hx_status open_folder(hx_model_files *mf, const char *dir, hx_err *err)
{
    hx_hfconfig cfg;
    json_t *weight_map = NULL;
    char *config_path = hx_path_join(dir, "config.json");
    if (!config_path) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir);
    hx_status st = hx_hfconfig_load(config_path, &cfg, err);
    hx_free(config_path);
    if (st != HX_OK) return st;
    mf->hp = cfg.hp;
    mf->format = cfg.has_quant ? HX_FMT_MLX : HX_FMT_SAFETENSORS;
    mf->mlx_bits = cfg.quant_bits;
    mf->mlx_group_size = cfg.quant_group;

    if ((st = list_shards(mf, dir, &weight_map, err)) != HX_OK) goto done;
    mf->shards = hx_calloc((size_t)mf->n_files, sizeof *mf->shards);
    if (!mf->shards) { st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir); goto done; }
    int64_t cap = 0;
    for (int32_t f = 0; f < mf->n_files; f++) {
        if ((st = hx_safetensors_open(mf->file_paths[f], &mf->shards[f], err)) != HX_OK) goto done;
        const hx_safetensors *sf = mf->shards[f];
        for (int64_t i = 0; i < sf->n_tensors; i++) {
            const hx_st_tensor *w = &sf->tensors[i];
            char stem[300], name[300];
            if (hx_str_ends_with(w->name, ".scales") || hx_str_ends_with(w->name, ".biases")) {
                /* Companions of an MLX weight are folded into it below. */
                snprintf(stem, sizeof stem, "%.*s.weight", (int)strlen(w->name) - 7, w->name);
                if (hx_safetensors_find(sf, stem)) continue;
            }
            if (weight_map) {
                json_t *want = json_object_get(weight_map, w->name);
                const char *base = strrchr(sf->path, '/') + 1;
                if (!json_is_string(want) || strcmp(json_string_value(want), base) != 0) {
                    st = hx_err_set(err, HX_E_FORMAT,
                                    "%s: tensor %s is not listed for this file in "
                                    "model.safetensors.index.json", sf->path, w->name);
                    goto done;
                }
            }
            hx_tensor t;
            const size_t nlen = strlen(w->name);
            if (w->dtype == HX_ST_U32 && hx_str_ends_with(w->name, ".weight") && nlen - 7 < sizeof stem) {
                snprintf(stem, sizeof stem, "%.*s", (int)(nlen - 7), w->name);
                if ((st = mlx_tensor(mf, &cfg, sf, w, stem, &t, err)) != HX_OK) goto done;
                mf->format = HX_FMT_MLX;
            } else {
                int dt = dtype_from_st(w->dtype);
                if (dt < 0 || w->n_dims > HX_MAX_DIMS) {
                    st = hx_err_set(err, HX_E_UNSUPPORTED,
                                    "%s: unsupported %s %s in tensor %s (supported: F32, F16, "
                                    "BF16 and MLX 4/8-bit, up to %d dimensions)", sf->path,
                                    dt < 0 ? "dtype" : "rank of", dt < 0
                                    ? hx_st_dtype_name(w->dtype) : "more than 4", w->name,
                                    HX_MAX_DIMS);
                    goto done;
                }
                t = (hx_tensor){.dtype = (hx_dtype)dt, .n_dims = w->n_dims, .data = w->data,
                                .n_bytes = (size_t)(w->end - w->begin)};
                for (int32_t d = 0; d < w->n_dims; d++) t.shape[d] = w->shape[d];
                if (t.n_dims == 0) { t.n_dims = 1; t.shape[0] = 1; } /* scalars as [1] */
            }
            if (!hx_tensor_name_from_hf(mf->hp.arch, w->name, name, sizeof name)) {
                st = hx_err_set(err, HX_E_FORMAT, "%s: tensor name too long: %.80s...", sf->path,
                                w->name);
                goto done;
            }
            st = push_tensor(mf, &cap, name, w->name, &t, f,
                             8 + sf->header_len + w->begin, err);
            if (st != HX_OK) goto done;
        }
    }
    if (cfg.rope_long && (st = push_rope_factors(mf, &cap, &cfg, err)) != HX_OK) goto done;
    if (weight_map && (int64_t)json_object_size(weight_map) > 0) {
        /* Every tensor the index promises must be somewhere. */
        const char *tname;
        json_t *file;
        json_object_foreach(weight_map, tname, file) {
            bool found = false;
            for (int32_t f = 0; f < mf->n_files && !found; f++)
                found = hx_safetensors_find(mf->shards[f], tname) != NULL;
            if (!found) {
                st = hx_err_set(err, HX_E_FORMAT,
                                "%s/model.safetensors.index.json: tensor %s is listed in %s but "
                                "not present there", dir, tname, json_string_value(file));
                goto done;
            }
        }
    }

    char *tok = hx_path_join(dir, "tokenizer.json"), *gen = hx_path_join(dir, "generation_config.json");
    if (!tok || !gen) {
        hx_free(tok);
        hx_free(gen);
        st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    if (hx_path_is_file(tok)) mf->tokenizer_json = tok; else hx_free(tok);
    if (hx_path_is_file(gen)) mf->generation_config = gen; else hx_free(gen);
    st = read_chat_template(mf, dir, err);
done:
    json_decref(weight_map);
    hx_hfconfig_free(&cfg);
    return st;
}

/* ---- derived facts and checks common to all formats ---- */

static hx_status finish(hx_model_files *mf, hx_err *err)
{
    qsort(mf->tensors, (size_t)mf->n_tensors, sizeof *mf->tensors, cmp_tensor);
    for (int64_t i = 1; i < mf->n_tensors; i++)
        if (strcmp(mf->tensors[i].name, mf->tensors[i - 1].name) == 0)
            return hx_err_set(err, HX_E_FORMAT, "%s: two tensors are named %s (%s and %s)",
                              mf->path, mf->tensors[i].name, mf->tensors[i - 1].src_name,
                              mf->tensors[i].src_name);
    hx_hparams *hp = &mf->hp;
    const hx_tensor_info *emb = hx_model_files_find(mf, "token_embd.weight");
    if (!emb)
        return hx_err_set(err, HX_E_FORMAT, "%s: no token embedding tensor (token_embd.weight)",
                          mf->path);
    if (hp->n_vocab == 0) hp->n_vocab = (int32_t)emb->t.shape[0];
    if (emb->t.n_dims != 2 || emb->t.shape[1] != hp->d_model || emb->t.shape[0] != hp->n_vocab)
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: token embedding %s has shape [%lld, %lld], expected [%d, %d] "
                          "(vocab, hidden size)", mf->path, emb->src_name,
                          (long long)emb->t.shape[0],
                          (long long)(emb->t.n_dims > 1 ? emb->t.shape[1] : 0), hp->n_vocab,
                          hp->d_model);
    hp->tie_embeddings = hx_model_files_find(mf, "output.weight") == NULL;
    hp->qk_norm = hx_model_files_find(mf, "blk.0.attn_q_norm.weight") != NULL;
    hp->attn_bias = hx_model_files_find(mf, "blk.0.attn_q.bias") != NULL;
    for (int64_t i = 0; i < mf->n_tensors; i++) {
        const hx_tensor *t = &mf->tensors[i].t;
        const int64_t row = t->shape[t->n_dims - 1];
        if (hx_dtype_row_bytes(t->dtype, row) == 0 && row != 0)
            return hx_err_set(err, HX_E_FORMAT,
                              "%s: tensor %s: row length %lld is not a multiple of the %s block "
                              "size", mf->path, mf->tensors[i].src_name, (long long)row,
                              hx_dtypes[t->dtype].name);
    }
    return HX_OK;
}

/* ---- front door ---- */

/* A folder with no config.json but exactly one .gguf file, or only the parts of one split GGUF,
 * opens that file (the first part). */
static char *single_gguf_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *found = NULL, *first = NULL;
    int n = 0, n_same = 0;
    size_t stem = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!hx_str_ends_with(e->d_name, ".gguf")) continue;
        int part, count;
        if (n++ == 0) found = hx_path_join(dir, e->d_name);
        if (!first && hx_hub_gguf_split(e->d_name, &part, &count, &stem) && part == 1)
            first = hx_path_join(dir, e->d_name);
    }
    if (first) { /* every .gguf here a part of first's split (opening it finds a missing one) */
        const char *fb = strrchr(first, '/') + 1;
        rewinddir(d);
        while ((e = readdir(d))) {
            int part, count;
            size_t st;
            n_same += hx_hub_gguf_split(e->d_name, &part, &count, &st) && st == stem &&
                      strncmp(e->d_name, fb, stem) == 0;
        }
    }
    closedir(d);
    if (n > 1 && first && n_same == n) {
        hx_free(found);
        return first;
    }
    hx_free(first);
    if (n != 1 || !found) { /* none, several, or out of memory: not opened as a GGUF */
        hx_free(found);
        return NULL;
    }
    return found;
}

hx_status hx_model_files_open(const char *path, hx_model_files **out, hx_err *err)
{
    hx_model_files *mf = hx_calloc(1, sizeof *mf);
    if (!mf) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
    hx_status st;
    char *inner = NULL;
    if (!(mf->path = hx_strdup(path))) {
        st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (hx_path_is_dir(path)) {
        char *config = hx_path_join(path, "config.json");
        bool has_config = config && hx_path_is_file(config);
        hx_free(config);
        if (!config) st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
        else if (has_config) st = open_folder(mf, path, err);
        else if ((inner = single_gguf_in(path))) st = open_gguf(mf, inner, err);
        else st = hx_err_set(err, HX_E_FORMAT,
                             "%s: not a model folder (no config.json, and not exactly one .gguf "
                             "file)", path);
    } else if (hx_path_is_file(path)) {
        st = open_gguf(mf, path, err); /* the parser rejects non-GGUF files by their magic */
    } else {
        st = hx_err_set(err, HX_E_NOTFOUND, "%s: no such file or folder", path);
    }
    if (st == HX_OK) st = finish(mf, err);
    if (st != HX_OK) goto fail;
    hx_free(inner);
    *out = mf;
    return HX_OK;
fail:
    hx_free(inner);
    hx_model_files_close(mf);
    return st;
}

void hx_model_files_close(hx_model_files *mf)
{
    if (!mf) return;
    for (int64_t i = 0; i < mf->n_tensors; i++) {
        hx_free(mf->tensors[i].name);
        hx_free(mf->tensors[i].src_name);
    }
    hx_free(mf->tensors);
    for (int32_t f = 0; f < mf->n_files; f++) {
        if (mf->shards) hx_safetensors_close(mf->shards[f]);
        if (mf->file_paths) hx_free(mf->file_paths[f]);
    }
    hx_free(mf->shards);
    hx_free(mf->file_paths);
    hx_gguf_close(mf->gguf);
    for (int32_t i = 0; i < mf->n_gguf_parts; i++) hx_gguf_close(mf->gguf_parts[i]);
    hx_free(mf->gguf_parts);
    hx_free(mf->tokenizer_kind);
    hx_free(mf->tokenizer_json);
    hx_free(mf->chat_template);
    hx_free(mf->chat_template_source);
    hx_free(mf->generation_config);
    hx_free(mf->rope_factors);
    hx_free(mf->path);
    hx_free(mf);
}

void hx_model_files_drop(const hx_model_files *mf, const hx_tensor *t)
{
    if (mf->gguf) hx_map_drop(&mf->gguf->map, t->data, t->n_bytes);
    for (int32_t i = 0; i < mf->n_gguf_parts; i++)
        hx_map_drop(&mf->gguf_parts[i]->map, t->data, t->n_bytes);
    for (int32_t f = 0; mf->shards && f < mf->n_files; f++)
        if (mf->shards[f]) hx_map_drop(&mf->shards[f]->map, t->data, t->n_bytes);
}

const hx_tensor_info *hx_model_files_find(const hx_model_files *mf, const char *name)
{
    int64_t lo = 0, hi = mf->n_tensors - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(mf->tensors[mid].name, name);
        if (c == 0) return &mf->tensors[mid];
        if (c < 0) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}

int64_t hx_model_files_n_params(const hx_model_files *mf)
{
    int64_t n = 0;
    for (int64_t i = 0; i < mf->n_tensors; i++) n += hx_tensor_n_elems(&mf->tensors[i].t);
    return n;
}

/* group_size elements of an MLX tensor share one scale and one bias. */
uint64_t hx_tensor_data_bytes(const hx_tensor *t)
{
    uint64_t n = t->n_bytes;
    if (t->dtype == HX_DT_MLX4 || t->dtype == HX_DT_MLX8) {
        uint64_t groups = (uint64_t)hx_tensor_n_elems(t) / (uint64_t)t->group_size;
        uint64_t sb = t->sb_dtype == HX_DT_F32 ? 4 : 2;
        n += 2 * groups * sb;
    }
    return n;
}

uint64_t hx_model_files_n_bytes(const hx_model_files *mf)
{
    uint64_t n = 0;
    for (int64_t i = 0; i < mf->n_tensors; i++) n += hx_tensor_data_bytes(&mf->tensors[i].t);
    return n;
}

hx_dtype hx_model_files_main_dtype(const hx_model_files *mf)
{
    uint64_t by[HX_DT_COUNT] = {0};
    for (int64_t i = 0; i < mf->n_tensors; i++)
        if (mf->tensors[i].t.n_dims == 2) by[mf->tensors[i].t.dtype] += hx_tensor_data_bytes(&mf->tensors[i].t);
    int best = HX_DT_F32;
    for (int d = 0; d < HX_DT_COUNT; d++)
        if (by[d] > by[best]) best = d;
    return (hx_dtype)best;
}
