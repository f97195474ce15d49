/* family.c - the load-time work only some families need (model_int.h).
 *
 * Phi-3 stores q, k and v as one matrix (attn_qkv) and gate and up as one (ffn_up of 2 * d_ff
 * rows, gate first). Rows are contiguous in every weight format, MLX scales and biases too, so
 * each part is a row view of the file's tensor: no copy, and the forward pass sees separate
 * weights as for Llama. Gemma's Hugging Face norms hold w and are applied as (1 + w) in f32;
 * the few norm vectors are copied once as f32 1 + w, which is the same arithmetic, so the
 * norm op stays one op for every family (GGUF files already store 1 + w). Mixture-of-experts
 * layers get their experts as an array of 2-D weights per projection, whatever the file's
 * form: row views of a stacked [n_expert, rows, cols] tensor, or the per-expert tensors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "model/model_int.h"

/* ---- fused weights ---- */

/* Rows [r0, r0 + n) of the weight t (all dims but the last counted as rows), as a 2-D view. */
static hx_tensor row_view(const hx_tensor *t, int64_t r0, int64_t n)
{
    hx_tensor     v = *t;
    const int64_t n_in = t->shape[t->n_dims - 1];
    const size_t  rb = hx_dtype_row_bytes(t->dtype, n_in);
    v.n_dims = 2;
    v.shape[0] = n;
    v.shape[1] = n_in;
    v.data = (const unsigned char *)t->data + (size_t)r0 * rb;
    v.n_bytes = (size_t)n * rb;
    if (t->scales) { /* MLX: [rows, n_in / group_size] scales and biases */
        const size_t sb = (size_t)(n_in / t->group_size) * (t->sb_dtype == HX_DT_F32 ? 4 : 2);
        v.scales = (const unsigned char *)t->scales + (size_t)r0 * sb;
        v.biases = (const unsigned char *)t->biases + (size_t)r0 * sb;
    }
    v.prepared = NULL;
    return v;
}

hx_status hx_model_split_fused(const hx_llm *m, int i, hx_layer *L, hx_err *err)
{
    const hx_hparams *hp = &m->hp;
    const int64_t     d = hp->d_model, qd = (int64_t)hp->n_head * hp->d_head,
                  kvd = (int64_t)hp->n_kv_head * hp->d_head;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", i);
    const hx_tensor *qkv = hx_model_get(m->mf, name);
    if (qkv && !L->wq && !L->wk && !L->wv) {
        if (qkv->n_dims != 2 || qkv->shape[0] != qd + 2 * kvd || qkv->shape[1] != d)
            return hx_err_set(err, HX_E_FORMAT,
                              "%s: %s has shape [%lld, %lld], expected "
                              "[%lld, %lld] (q, k and v rows)",
                              m->mf->path, name, (long long)qkv->shape[0], (long long)qkv->shape[1],
                              (long long)(qd + 2 * kvd), (long long)d);
        L->split[0] = row_view(qkv, 0, qd);
        L->split[1] = row_view(qkv, qd, kvd);
        L->split[2] = row_view(qkv, qd + kvd, kvd);
        L->wq = &L->split[0];
        L->wk = &L->split[1];
        L->wv = &L->split[2];
    }
    const hx_tensor *up = L->w_up;
    if (!L->w_gate && up && up->n_dims == 2 && up->shape[0] == 2 * (int64_t)hp->d_ff) {
        L->split[3] = row_view(up, 0, hp->d_ff);
        L->split[4] = row_view(up, hp->d_ff, hp->d_ff);
        L->w_gate = &L->split[3];
        L->w_up = &L->split[4];
    }
    return HX_OK;
}

/* ---- experts ---- */

static void shape_str(const hx_tensor *t, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int32_t d = 0; d < t->n_dims && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* Binds slots[e] (e < n_expert) to expert e's weight of projection `what` of layer i, which
 * must be [rows, cols]: a row view of the stacked blk.i.<what>_exps, or blk.i.<what>.e. */
static hx_status bind_expert_proj(hx_llm *m, int i, const char *what, int64_t rows, int64_t cols,
                                  const hx_tensor **slots, hx_tensor *views, hx_err *err)
{
    const int32_t E = m->hp.n_expert;
    char name[96], have[96];
    snprintf(name, sizeof name, "blk.%d.%s_exps.weight", i, what);
    const hx_tensor *stacked = hx_model_get(m->mf, name);
    if (stacked) {
        if (stacked->n_dims != 3 || stacked->shape[0] != E || stacked->shape[1] != rows ||
            stacked->shape[2] != cols) {
            shape_str(stacked, have, sizeof have);
            return hx_err_set(err, HX_E_FORMAT, "%s: %s has shape %s, expected [%d, %lld, %lld]",
                              m->mf->path, name, have, E, (long long)rows, (long long)cols);
        }
        for (int32_t e = 0; e < E; e++) {
            views[e] = row_view(stacked, (int64_t)e * rows, rows);
            slots[e] = &views[e];
        }
        return HX_OK;
    }
    for (int32_t e = 0; e < E; e++) {
        snprintf(name, sizeof name, "blk.%d.%s.%d.weight", i, what, e);
        const hx_tensor *t = hx_model_get(m->mf, name);
        if (!t)
            return hx_err_set(err, HX_E_FORMAT, "%s: missing tensor %s (nor is there a stacked "
                              "blk.%d.%s_exps.weight)", m->mf->path, name, i, what);
        if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols) {
            shape_str(t, have, sizeof have);
            return hx_err_set(err, HX_E_FORMAT, "%s: %s has shape %s, expected [%lld, %lld]",
                              m->mf->path, name, have, (long long)rows, (long long)cols);
        }
        slots[e] = t;
    }
    return HX_OK;
}

/* The shared expert of layer i (Qwen2-MoE): all four tensors or none. */
static hx_status bind_shared_expert(hx_llm *m, int i, hx_moe *moe, hx_err *err)
{
    const char *what[] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp_shexp"};
    const hx_tensor *t[4];
    char name[96];
    int found = 0;
    for (int j = 0; j < 4; j++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", i, what[j]);
        found += (t[j] = hx_model_get(m->mf, name)) != NULL;
    }
    if (found == 0) return HX_OK;
    const int64_t d = m->hp.d_model;
    if (m->hp.d_ff_shexp <= 0 && t[0] && t[0]->n_dims == 2) m->hp.d_ff_shexp = (int32_t)t[0]->shape[0];
    const int64_t f = m->hp.d_ff_shexp;
    const bool ok = found == 4 && t[0]->n_dims == 2 && t[0]->shape[0] == f && t[0]->shape[1] == d &&
                    t[1]->n_dims == 2 && t[1]->shape[0] == f && t[1]->shape[1] == d &&
                    t[2]->n_dims == 2 && t[2]->shape[0] == d && t[2]->shape[1] == f &&
                    hx_tensor_n_elems(t[3]) == d;
    if (!ok)
        return hx_err_set(err, HX_E_FORMAT, "%s: blk.%d's shared expert needs ffn_gate_shexp and "
                          "ffn_up_shexp of [%lld, %lld], ffn_down_shexp of [%lld, %lld] and "
                          "ffn_gate_inp_shexp of %lld", m->mf->path, i, (long long)f, (long long)d,
                          (long long)d, (long long)f, (long long)d);
    moe->sh_gate = t[0];
    moe->sh_up = t[1];
    moe->sh_down = t[2];
    moe->sh_inp = t[3];
    moe->d_ff_sh = f;
    return HX_OK;
}

hx_status hx_model_bind_experts(hx_llm *m, int i, hx_layer *L, hx_err *err)
{
    const hx_hparams *hp = &m->hp;
    const int32_t     E = hp->n_expert;
    const int64_t     d = hp->d_model, f = hp->d_ff_exp;
    const size_t      per_layer = 3 * (size_t)E;
    if (!m->expert_w) {
        m->expert_w = hx_calloc((size_t)hp->n_layer * per_layer, sizeof *m->expert_w);
        m->expert_views = hx_calloc((size_t)hp->n_layer * per_layer, sizeof *m->expert_views);
        if (!m->expert_w || !m->expert_views)
            return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", m->mf->path);
    }
    if (L->router->n_dims != 2 || L->router->shape[0] != E || L->router->shape[1] != d) {
        char have[96];
        shape_str(L->router, have, sizeof have);
        return hx_err_set(err, HX_E_FORMAT, "%s: blk.%d.ffn_gate_inp has shape %s, expected "
                          "[%d, %lld]", m->mf->path, i, have, E, (long long)d);
    }
    const hx_tensor **w = m->expert_w + (size_t)i * per_layer;
    hx_tensor        *v = m->expert_views + (size_t)i * per_layer;
    hx_moe           *moe = &L->moe;
    *moe = (hx_moe){.n_expert = E, .n_used = hp->n_expert_used, .d_ff = f,
                    .gate = w, .up = w + E, .down = w + 2 * E,
                    .norm_topk = hp->moe_norm_topk, .geglu = m->geglu};
    hx_status st;
    if ((st = bind_expert_proj(m, i, "ffn_gate", f, d, w, v, err)) ||
        (st = bind_expert_proj(m, i, "ffn_up", f, d, w + E, v + E, err)) ||
        (st = bind_expert_proj(m, i, "ffn_down", d, f, w + 2 * E, v + 2 * E, err)))
        return st;
    return bind_shared_expert(m, i, moe, err);
}

/* ---- (1 + w) norms ---- */

static int64_t len_of(const hx_tensor *t)
{
    return t ? t->shape[t->n_dims - 1] : 0;
}

/* Points *slot at dst, an F32 tensor of 1 + w written at *next, which advances. */
static void fold(const hx_tensor **slot, hx_tensor *dst, float **next)
{
    if (!*slot) return;
    const int64_t n = len_of(*slot);
    float        *p = *next;
    hx_tensor_dequant_row(*slot, 0, p);
    for (int64_t i = 0; i < n; i++)
        p[i] += 1.0f;
    *dst = (hx_tensor){.dtype = HX_DT_F32,
                       .n_dims = 1,
                       .shape = {n},
                       .data = p,
                       .n_bytes = (size_t)n * sizeof(float)};
    *slot = dst;
    *next = p + n;
}

#define LAYER_NORMS(L)                                                                             \
    {                                                                                              \
        &(L)->attn_norm, &(L)->post_attn_norm, &(L)->ffn_norm, &(L)->post_ffn_norm, &(L)->q_norm,  \
            &(L)->k_norm                                                                           \
    }

hx_status hx_model_fold_norms(hx_llm *m, hx_err *err)
{
    int64_t total = len_of(m->out_norm);
    for (int i = 0; i < m->hp.n_layer; i++) {
        const hx_tensor **ns[] = LAYER_NORMS(&m->layers[i]);
        for (size_t j = 0; j < HX_COUNTOF(ns); j++)
            total += len_of(*ns[j]);
    }
    if (!(m->folded = hx_alloc((size_t)total * sizeof(float))))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory for the norm weights", m->mf->path);
    float *next = m->folded;
    fold(&m->out_norm, &m->out_norm_folded, &next);
    for (int i = 0; i < m->hp.n_layer; i++) {
        hx_layer         *L = &m->layers[i];
        const hx_tensor **ns[] = LAYER_NORMS(L);
        for (size_t j = 0; j < HX_COUNTOF(ns); j++)
            fold(ns[j], &L->folded[j], &next);
    }
    return HX_OK;
}

/* ---- RoPE tables ---- */

hx_status hx_model_rope_setup(hx_llm *m, hx_err *err)
{
    const hx_hparams *hp = &m->hp;
    const int32_t     n_rot = hp->n_rot > 0 ? hp->n_rot : hp->d_head;
    const hx_tensor  *factors = hx_model_get(m->mf, "rope_freqs.weight");
    if (hp->rope_scaling == HX_ROPE_SCALING_LONGROPE) {
        const bool  use_long = hp->n_ctx_train > hp->rope_orig_ctx;
        const char *name = use_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
        factors = hx_model_get(m->mf, name);
        if (!factors || hx_tensor_n_elems(factors) != n_rot / 2)
            return hx_err_set(err, HX_E_FORMAT, "%s: LongRoPE needs %s of %d factors", m->mf->path,
                              name, n_rot / 2);
    }
    if (!(m->inv_freq = hx_alloc((size_t)n_rot / 2 * sizeof(float))))
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", m->mf->path);
    hx_rope_init(hp, n_rot, factors, m->inv_freq, &m->rope.mscale);
    m->rope.inv_freq = m->inv_freq;
    m->rope.n_rot = n_rot;
    m->rope.pairs = hp->rope_layout == HX_ROPE_PAIRS;
    m->rope_swa = m->rope;
    if (hp->rope_theta_swa > 0) { /* Gemma 3: sliding layers have their own base, unscaled */
        hx_hparams local = *hp;
        local.rope_theta = hp->rope_theta_swa;
        local.rope_scaling = HX_ROPE_SCALING_NONE;
        if (!(m->inv_freq_swa = hx_alloc((size_t)n_rot / 2 * sizeof(float))))
            return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", m->mf->path);
        hx_rope_init(&local, n_rot, NULL, m->inv_freq_swa, &m->rope_swa.mscale);
        m->rope_swa.inv_freq = m->inv_freq_swa;
    }
    return HX_OK;
}
