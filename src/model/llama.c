/* llama.c - the transformer forward pass shared by every family: Llama (Llama 2/3.x, SmolLM2,
 * Mistral, Qwen2, Qwen3), Gemma 1/2/3, Phi-3 and the mixtures of experts (Mixtral, Qwen2-MoE,
 * Qwen3-MoE, OLMoE).
 *
 * One block: h = rmsnorm(x); q,k,v = h Wq,Wk,Wv (+ biases for Qwen2); RMSNorm of q and k per
 * head (Qwen3, Gemma 3) or over the whole projection (OLMoE); rope(q, k) (partial for Phi-3;
 * Gemma 3's sliding layers have their own base); store k, v in the paged cache;
 * o = attention(q, cache) Wo (sliding window per layer, Gemma 2's score soft-capping); Gemma
 * 2/3: o = rmsnorm(o); x += o; h = rmsnorm(x); m = (act(h Wg) * h Wu) Wd with act silu, or
 * gelu_tanh for Gemma; Gemma 2/3: m = rmsnorm(m); x += m. A mixture-of-experts layer replaces
 * m by the backend's moe op over the router's logits (h Wr): each row through its top-k
 * experts, weighted. Gemma scales the embeddings by sqrt(d_model) and Gemma 2 soft-caps the
 * logits. After the last block, rmsnorm and the output projection (the token embedding when
 * tied) for the requested rows only. The per-family differences are data (hx_hparams, optional
 * tensors of hx_layer), switched on here; family.c binds what only some families have (fused
 * weights, (1 + w) norms, RoPE tables, experts). Everything goes through the backend table;
 * this file never touches activation memory. */
#include "model/model.h"
#include "model/model_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

#define HX_PI 3.14159265358979323846

static const char *const families[] = {"llama",  "mistral", "qwen2",   "qwen3",
                                       "gemma",  "gemma2",  "gemma3",  "phi3",
                                       "mixtral", "qwen2moe", "qwen3moe", "olmoe", NULL};

const char *const *hx_llm_architectures(void)
{
    return families;
}

const hx_tensor *hx_model_get(const hx_model_files *mf, const char *name)
{
    const hx_tensor_info *ti = hx_model_files_find(mf, name);
    return ti ? &ti->t : NULL;
}

/* Looks up "blk.<i>.<what>.weight" (or .bias); required ones are reported when missing. */
static hx_status bind(const hx_model_files *mf, int i, const char *what, const char *kind,
                      bool required, const hx_tensor **out, hx_err *err)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.%s", i, what, kind);
    *out = hx_model_get(mf, name);
    if (!*out && required)
        return hx_err_set(err, HX_E_FORMAT, "%s: missing tensor %s", mf->path, name);
    return HX_OK;
}

/* Checks a weight's shape is [rows, cols] (cols contiguous). */
static hx_status check2(const hx_model_files *mf, const hx_tensor *t, const char *what, int i,
                        int64_t rows, int64_t cols, hx_err *err)
{
    if (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols) return HX_OK;
    return hx_err_set(err, HX_E_FORMAT, "%s: blk.%d.%s has shape [%lld, %lld], expected [%lld, %lld]",
                      mf->path, i, what, (long long)t->shape[0],
                      (long long)(t->n_dims > 1 ? t->shape[1] : 0), (long long)rows,
                      (long long)cols);
}

void hx_rope_init(const hx_hparams *hp, int32_t n_rot, const hx_tensor *freq_factors,
                  float *inv_freq, float *mscale)
{
    const int32_t half = n_rot / 2;
    float ff[1024];
    for (int32_t i = 0; i < 1024; i++) ff[i] = 1.0f;
    if (freq_factors && half <= 1024) hx_tensor_dequant_row(freq_factors, 0, ff);
    *mscale = 1.0f;
    for (int32_t i = 0; i < half; i++) {
        double f = 1.0 / pow((double)hp->rope_theta, 2.0 * i / (double)n_rot);
        switch (hp->rope_scaling) {
        case HX_ROPE_SCALING_LINEAR:
            f /= hp->rope_factor;
            break;
        case HX_ROPE_SCALING_LLAMA3:
            if (freq_factors) { /* GGUF: the per-dimension factors are given */
                f /= ff[i];
            } else { /* config.json: derive them from the wavelength bands */
                const double lo_wl = hp->rope_orig_ctx / hp->rope_low_freq_factor;
                const double hi_wl = hp->rope_orig_ctx / hp->rope_high_freq_factor;
                const double wl = 2.0 * HX_PI / f;
                if (wl > lo_wl) {
                    f /= hp->rope_factor;
                } else if (wl >= hi_wl) {
                    const double smooth = (hp->rope_orig_ctx / wl - hp->rope_low_freq_factor) /
                                          (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                    f = (1.0 - smooth) * f / hp->rope_factor + smooth * f;
                }
            }
            break;
        case HX_ROPE_SCALING_YARN: {
            const double fac = hp->rope_factor, orig = hp->rope_orig_ctx > 0 ? hp->rope_orig_ctx : 4096;
            const double bf = hp->yarn_beta_fast > 0 ? hp->yarn_beta_fast : 32.0;
            const double bs = hp->yarn_beta_slow > 0 ? hp->yarn_beta_slow : 1.0;
            const double lt = log((double)hp->rope_theta);
            double lo = floor(n_rot * log(orig / (bf * 2 * HX_PI)) / (2 * lt));
            double hi = ceil(n_rot * log(orig / (bs * 2 * HX_PI)) / (2 * lt));
            if (lo < 0) lo = 0;
            if (hi > n_rot - 1) hi = n_rot - 1;
            double ramp = (i - lo) / (hi - lo > 1e-3 ? hi - lo : 1e-3);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const double extrap = 1.0 - ramp;
            f = f / fac * (1.0 - extrap) + f * extrap;
            *mscale = (float)(0.1 * log(fac) + 1.0);
            break;
        }
        case HX_ROPE_SCALING_LONGROPE: { /* per-dimension factors (long or short list) */
            f /= ff[i];
            const double fac = hp->rope_factor, orig = hp->rope_orig_ctx;
            *mscale = hp->rope_attn_factor > 0 ? hp->rope_attn_factor
                      : fac <= 1.0 || orig <= 1 ? 1.0f
                                                : (float)sqrt(1.0 + log(fac) / log(orig));
            break;
        }
        default:
            break;
        }
        inv_freq[i] = (float)f;
    }
}

/* Calls fn on every matmul weight slot of m, stopping at the first failure: each layer's
 * attention and dense MLP (NULL in a mixture-of-experts layer), its router, shared expert and
 * experts (NULL in a dense layer), then the output projection. */
typedef hx_status (*slot_fn)(const hx_llm *m, const hx_tensor **slot, hx_err *err);

static hx_status each_matmul(hx_llm *m, slot_fn fn, hx_err *err)
{
    hx_status st = HX_OK;
    for (int i = 0; i < m->hp.n_layer && st == HX_OK; i++) {
        hx_layer         *L = &m->layers[i];
        const hx_tensor **ws[] = {&L->wq,     &L->wk,          &L->wv,         &L->wo,
                                  &L->w_gate, &L->w_up,        &L->w_down,     &L->router,
                                  &L->moe.sh_gate, &L->moe.sh_up, &L->moe.sh_down};
        for (size_t j = 0; j < HX_COUNTOF(ws) && st == HX_OK; j++) st = fn(m, ws[j], err);
        for (int32_t e = 0; e < L->moe.n_expert && st == HX_OK; e++)
            if ((st = fn(m, &L->moe.gate[e], err)) == HX_OK &&
                (st = fn(m, &L->moe.up[e], err)) == HX_OK)
                st = fn(m, &L->moe.down[e], err);
    }
    return st == HX_OK ? fn(m, &m->output, err) : st;
}

/* Hands a matmul weight to the backend once (it may repack it, backend.h `weight`); the
 * embedding lookup keeps the file's tensor even when the output projection shares it. */
static hx_status prepare(const hx_llm *m, const hx_tensor **slot, hx_err *err)
{
    if (!*slot) return HX_OK;
    const hx_tensor *t = m->be->weight(m->be, *slot, err);
    if (!t) return HX_E_NOMEM;
    if (t != *slot) hx_model_files_drop(m->mf, *slot); /* read once; the copy is used now */
    *slot = t;
    return HX_OK;
}

/* Gives back a prepared copy (one the backend made; file tensors have none). */
static hx_status release(const hx_llm *m, const hx_tensor **slot, hx_err *err)
{
    (void)err;
    if (*slot && (*slot)->prepared) m->be->weight_release(m->be, *slot);
    return HX_OK;
}

/* The family switches that are not in the files' tensors: Gemma's embedding scale and GeGLU
 * (every Gemma), and the norms after attention and after the MLP (Gemma 2 and 3). */
static bool is_gemma(const char *arch)
{
    return strncmp(arch, "gemma", 5) == 0;
}

static bool has_post_norms(const char *arch)
{
    return strcmp(arch, "gemma2") == 0 || strcmp(arch, "gemma3") == 0;
}

/* Binds layer i's tensors (names in the GGUF scheme, names.c), splits fused ones (family.c),
 * and checks what must be there and its shapes. */
static hx_status bind_layer(hx_llm *m, int i, hx_err *err)
{
    const hx_model_files *mf = m->mf;
    const hx_hparams *hp = &m->hp; /* bind_experts may complete hp->d_ff_shexp */
    hx_layer *L = &m->layers[i];
    const bool post_norms = has_post_norms(hp->arch);
    const int64_t d = hp->d_model, qd = (int64_t)hp->n_head * hp->d_head,
                  kvd = (int64_t)hp->n_kv_head * hp->d_head;
    hx_status st;
    if ((st = bind(mf, i, "attn_norm", "weight", true, &L->attn_norm, err)) ||
        (st = bind(mf, i, "attn_q", "weight", false, &L->wq, err)) ||
        (st = bind(mf, i, "attn_k", "weight", false, &L->wk, err)) ||
        (st = bind(mf, i, "attn_v", "weight", false, &L->wv, err)) ||
        (st = bind(mf, i, "attn_output", "weight", true, &L->wo, err)) ||
        (st = bind(mf, i, "attn_q", "bias", false, &L->bq, err)) ||
        (st = bind(mf, i, "attn_k", "bias", false, &L->bk, err)) ||
        (st = bind(mf, i, "attn_v", "bias", false, &L->bv, err)) ||
        (st = bind(mf, i, "attn_q_norm", "weight", false, &L->q_norm, err)) ||
        (st = bind(mf, i, "attn_k_norm", "weight", false, &L->k_norm, err)) ||
        (st = bind(mf, i, "ffn_norm", "weight", true, &L->ffn_norm, err)) ||
        (st = bind(mf, i, "ffn_gate_inp", "weight", false, &L->router, err)))
        return st;
    /* A mixture-of-experts layer has a router instead of the dense MLP (Qwen3-MoE may keep
     * some layers dense). */
    const bool dense = !(L->router && hp->n_expert > 0);
    if ((st = bind(mf, i, "ffn_gate", "weight", false, &L->w_gate, err)) ||
        (st = bind(mf, i, "ffn_up", "weight", dense, &L->w_up, err)) ||
        (st = bind(mf, i, "ffn_down", "weight", dense, &L->w_down, err)) ||
        (st = bind(mf, i, "post_attention_norm", "weight", post_norms, &L->post_attn_norm,
                   err)) ||
        (st = bind(mf, i, "post_ffw_norm", "weight", post_norms, &L->post_ffn_norm, err)) ||
        (st = hx_model_split_fused(m, i, L, err)))
        return st;
    const char *missing = !L->wq ? "attn_q" : !L->wk ? "attn_k" : !L->wv ? "attn_v"
                          : !L->w_gate && dense ? "ffn_gate" : NULL;
    if (missing)
        return hx_err_set(err, HX_E_FORMAT, "%s: missing tensor blk.%d.%s.weight", mf->path, i,
                          missing);
    if (!L->q_norm != !L->k_norm)
        return hx_err_set(err, HX_E_FORMAT, "%s: blk.%d has only one of attn_q_norm and "
                          "attn_k_norm", mf->path, i);
    if (L->q_norm) { /* per head, or over the whole projection (OLMoE) */
        const int64_t qn = hx_tensor_n_elems(L->q_norm), kn = hx_tensor_n_elems(L->k_norm);
        L->qk_norm_full = qn == qd && kn == kvd && qd != hp->d_head;
        if (!L->qk_norm_full && (qn != hp->d_head || kn != hp->d_head))
            return hx_err_set(err, HX_E_FORMAT, "%s: blk.%d's attn_q_norm and attn_k_norm have "
                              "%lld and %lld elements, expected %d each (per head) or %lld and "
                              "%lld", mf->path, i, (long long)qn, (long long)kn, hp->d_head,
                              (long long)qd, (long long)kvd);
    }
    if ((st = check2(mf, L->wq, "attn_q", i, qd, d, err)) ||
        (st = check2(mf, L->wk, "attn_k", i, kvd, d, err)) ||
        (st = check2(mf, L->wv, "attn_v", i, kvd, d, err)) ||
        (st = check2(mf, L->wo, "attn_output", i, d, qd, err)))
        return st;
    if (!dense) {
        L->w_gate = L->w_up = L->w_down = NULL; /* a stray dense MLP is not run */
        if ((st = hx_model_bind_experts(m, i, L, err))) return st;
    } else if ((st = check2(mf, L->w_gate, "ffn_gate", i, hp->d_ff, d, err)) ||
               (st = check2(mf, L->w_up, "ffn_up", i, hp->d_ff, d, err)) ||
               (st = check2(mf, L->w_down, "ffn_down", i, d, hp->d_ff, err))) {
        return st;
    }
    L->window = hx_hparams_layer_window(hp, i);
    L->kv_swa = L->window > 0 && hx_hparams_n_swa_layers(hp) > 0;
    L->kv_layer = hx_hparams_kv_layer(hp, i);
    return HX_OK;
}

int64_t hx_llm_moe_width(const hx_hparams *hp)
{
    if (hp->n_expert <= 0) return 0;
    return hp->d_ff_exp > hp->d_ff_shexp ? hp->d_ff_exp : hp->d_ff_shexp;
}

int64_t hx_llm_widest_input(const hx_hparams *hp)
{
    const int64_t qd = (int64_t)hp->n_head * hp->d_head, moe = hx_llm_moe_width(hp);
    int64_t       w = hp->d_model > qd ? hp->d_model : qd;
    if (hp->d_ff > w) w = hp->d_ff;
    return moe > w ? moe : w;
}

hx_status hx_llm_open(const hx_model_files *mf, hx_backend *be, int64_t max_tok, hx_llm **out,
                      hx_err *err)
{
    const hx_hparams *hp = &mf->hp;
    bool known = false;
    char list[256] = "";
    for (size_t i = 0; families[i]; i++) {
        known |= strcmp(hp->arch, families[i]) == 0;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 families[i]);
    }
    if (!known)
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "%s: architecture '%s' has no forward pass yet (supported: %s)",
                          mf->path, hp->arch, list);
    if (hp->n_expert < 0 || hp->n_expert > 4096 ||
        (hp->n_expert > 0 && (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert ||
                              hp->d_ff_exp < 1 || hp->d_ff_shexp < 0)))
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: inconsistent mixture of experts (%d experts, %d per token, "
                          "width %d)", mf->path, hp->n_expert, hp->n_expert_used, hp->d_ff_exp);
    if (max_tok < 1) return hx_err_set(err, HX_E_INVALID, "step size must be at least 1 row");
    if (hp->n_expert > 0 && !be->moe)
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "%s: the %s backend does not run mixture-of-experts models yet; use "
                          "--device cpu", mf->path, be->name);
    hx_llm *m = hx_calloc(1, sizeof *m);
    if (!m) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    hx_status st = HX_OK;
    m->mf = mf;
    m->hp = *hp;
    m->be = be;
    m->max_tok = max_tok;
    const int64_t d = hp->d_model, qd = (int64_t)hp->n_head * hp->d_head,
                  kvd = (int64_t)hp->n_kv_head * hp->d_head;
    m->tok_embd = hx_model_get(mf, "token_embd.weight");
    m->out_norm = hx_model_get(mf, "output_norm.weight");
    m->output = hx_model_get(mf, "output.weight");
    if (!m->output) m->output = m->tok_embd;
    if (!m->out_norm) {
        st = hx_err_set(err, HX_E_FORMAT, "%s: missing tensor output_norm.weight", mf->path);
        goto fail;
    }
    if (is_gemma(hp->arch)) {
        m->embed_scale = sqrtf((float)d); /* in the activation dtype, f32 */
        m->geglu = true;
    }
    if (!(m->layers = hx_calloc((size_t)hp->n_layer, sizeof *m->layers))) goto nomem;
    for (int i = 0; i < hp->n_layer; i++)
        if ((st = bind_layer(m, i, err)) != HX_OK) goto fail;
    if (hp->norm_plus_one && (st = hx_model_fold_norms(m, err)) != HX_OK) goto fail;
    if ((st = each_matmul(m, prepare, err)) != HX_OK) goto fail;
    if (m->be->table && (st = m->be->table(m->be, m->tok_embd, err)) != HX_OK) goto fail;
    if ((st = hx_model_rope_setup(m, err)) != HX_OK) goto fail;

    hp = &m->hp; /* binding the experts may have completed it */
    const int64_t d_ff_moe = hx_llm_moe_width(hp);
    int64_t widest = hx_llm_widest_input(hp);
    if (hp->n_vocab > widest) widest = hp->n_vocab;
    if ((st = be->reserve(be, widest, max_tok, err)) != HX_OK) goto fail;
    const size_t T = (size_t)max_tok, f = sizeof(float);
    m->x = be->alloc(be, T * (size_t)d * f);
    m->h = be->alloc(be, T * (size_t)(d > qd ? d : qd) * f);
    m->q = be->alloc(be, T * (size_t)(d > qd ? d : qd) * f);
    m->k = be->alloc(be, T * (size_t)kvd * f);
    m->v = be->alloc(be, T * (size_t)kvd * f);
    m->gate = be->alloc(be, T * (size_t)hp->d_ff * f);
    m->up = be->alloc(be, T * (size_t)hp->d_ff * f);
    const size_t logit_rows = T < HX_LLM_LOGIT_ROWS ? T : HX_LLM_LOGIT_ROWS;
    m->logits = be->alloc(be, logit_rows * (size_t)hp->n_vocab * f);
    if (!m->x || !m->h || !m->q || !m->k || !m->v || !m->gate || !m->up || !m->logits)
        goto nomem;
    if (m->expert_w) {
        m->router = be->alloc(be, T * (size_t)hp->n_expert * f);
        m->moe_work = be->alloc(be, (size_t)hx_moe_work_floats(max_tok, d, d_ff_moe,
                                                                hp->n_expert_used, hp->n_expert) * f);
        if (!m->router || !m->moe_work) goto nomem;
    }
    *out = m;
    return HX_OK;
nomem:
    st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory binding the model", mf->path);
fail:
    hx_llm_close(m);
    return st;
}

void hx_llm_close(hx_llm *m)
{
    if (!m) return;
    hx_backend *be = m->be;
    float *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->gate, m->up, m->logits, m->router,
                     m->moe_work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    if (m->layers) (void)each_matmul(m, release, NULL);
    hx_free(m->inv_freq);
    hx_free(m->inv_freq_swa);
    hx_free(m->folded);
    hx_free(m->expert_w);
    hx_free(m->expert_views);
    hx_free(m->layers);
    hx_free(m);
}

hx_status hx_llm_forward(hx_llm *m, hx_kv_store *kv, hx_kv_store *kv_swa, const hx_batch *b,
                         float *logits, hx_err *err)
{
    const hx_hparams *hp = &m->hp;
    hx_backend *be = m->be;
    const int64_t T = b->n_tok, d = hp->d_model, qd = (int64_t)hp->n_head * hp->d_head,
                  kvd = (int64_t)hp->n_kv_head * hp->d_head;
    if (T < 1 || T > m->max_tok)
        return hx_err_set(err, HX_E_INVALID, "batch of %lld rows (step size %lld)", (long long)T,
                          (long long)m->max_tok);
    const int32_t lowest = be->sample_start ? HX_TOKEN_DRAWN(HX_SAMPLE_AHEAD_ROWS - 1) : 0;
    for (int64_t t = 0; t < T; t++)
        if (b->tokens[t] < lowest || b->tokens[t] >= hp->n_vocab)
            return hx_err_set(err, HX_E_INVALID, "token id %d outside the vocabulary (%d)",
                              b->tokens[t], hp->n_vocab);
    for (int64_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= T)
            return hx_err_set(err, HX_E_INVALID, "logit row %d outside the batch",
                              b->logit_rows[i]);
    if (b->draws && !be->sample)
        return hx_err_set(err, HX_E_INVALID, "the %s backend does not draw tokens", be->name);
    if (b->ahead) {
        bool all = b->draws && be->sample_start && b->n_logits <= HX_SAMPLE_AHEAD_ROWS;
        for (int64_t i = 0; all && i < b->n_logits; i++) all = b->draws[i].top_k > 0;
        if (!all)
            return hx_err_set(err, HX_E_INVALID, "a step started ahead draws every logit row "
                              "(at most %d) on a backend that starts steps", HX_SAMPLE_AHEAD_ROWS);
    }
    const float scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->d_head);
    be->embed(be, m->tok_embd, b->tokens, T, m->x);
    if (m->embed_scale > 0) be->scale(be, m->x, m->embed_scale, T * d);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const hx_layer *L = &m->layers[l];
        const hx_attn_shape shape = {hp->n_head, hp->n_kv_head, hp->d_head, scale, L->window,
                                     hp->attn_softcap};
        /* Gemma 3: the sliding layers rotate with their own base (rope_swa == rope otherwise). */
        const hx_rope *rope = L->window > 0 ? &m->rope_swa : &m->rope;
        be->rmsnorm(be, m->x, L->attn_norm, T, d, hp->norm_eps, m->h);
        be->matmul(be, L->wq, L->bq, m->h, T, m->q);
        be->matmul(be, L->wk, L->bk, m->h, T, m->k);
        be->matmul(be, L->wv, L->bv, m->h, T, m->v);
        if (L->qk_norm_full) {
            be->rmsnorm(be, m->q, L->q_norm, T, qd, hp->norm_eps, m->q);
            be->rmsnorm(be, m->k, L->k_norm, T, kvd, hp->norm_eps, m->k);
        } else if (L->q_norm) {
            be->rmsnorm(be, m->q, L->q_norm, T * hp->n_head, hp->d_head, hp->norm_eps, m->q);
            be->rmsnorm(be, m->k, L->k_norm, T * hp->n_kv_head, hp->d_head, hp->norm_eps, m->k);
        }
        be->rope(be, m->q, b->pos, T, hp->n_head, hp->d_head, rope);
        be->rope(be, m->k, b->pos, T, hp->n_kv_head, hp->d_head, rope);
        /* Every sequence's rows' K/V into its cache, then every sequence's attention over its
         * cache (a sequence writes only blocks of its own, which no other reads): a backend
         * may run each pass for all the step's sequences in one launch. */
        const bool swa = kv_swa && L->kv_swa;
        hx_kv_store *store = swa ? kv_swa : kv;
        const int32_t kl = kv_swa ? L->kv_layer : l;
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t t0 = 0; t0 < T;) {
                int64_t t1 = t0 + 1;
                while (t1 < T && b->seq[t1] == b->seq[t0]) t1++;
                const hx_kv_seq *s = swa ? &b->seqs_swa[b->seq[t0]] : &b->seqs[b->seq[t0]];
                if (pass == 0)
                    be->kv_write(be, store, kl, s, b->pos + t0, m->k + t0 * kvd,
                                 m->v + t0 * kvd, t1 - t0);
                else be->attention(be, store, kl, s, m->q + t0 * qd, b->pos + t0, t1 - t0,
                                   &shape, m->h + t0 * qd);
                t0 = t1;
            }
        }
        be->matmul(be, L->wo, NULL, m->h, T, m->q); /* q is free now: reuse for o */
        if (L->post_attn_norm)
            be->rmsnorm(be, m->q, L->post_attn_norm, T, d, hp->norm_eps, m->q);
        be->add(be, m->x, m->q, T * d);
        be->rmsnorm(be, m->x, L->ffn_norm, T, d, hp->norm_eps, m->h);
        if (L->router) {
            be->matmul(be, L->router, NULL, m->h, T, m->router);
            be->moe(be, &L->moe, m->router, m->h, T, d, m->moe_work, m->q);
        } else {
            be->matmul(be, L->w_gate, NULL, m->h, T, m->gate);
            be->matmul(be, L->w_up, NULL, m->h, T, m->up);
            if (m->geglu) be->geglu(be, m->gate, m->up, T * hp->d_ff, m->gate);
            else be->swiglu(be, m->gate, m->up, T * hp->d_ff, m->gate);
            be->matmul(be, L->w_down, NULL, m->gate, T, m->q);
        }
        if (L->post_ffn_norm)
            be->rmsnorm(be, m->q, L->post_ffn_norm, T, d, hp->norm_eps, m->q);
        be->add(be, m->x, m->q, T * d);
    }
    /* Only the requested rows go through the final norm and the vocabulary projection, up to
     * HX_LLM_LOGIT_ROWS of them a pass. */
    const int64_t V = hp->n_vocab;
    for (int64_t i0 = 0; i0 < b->n_logits; i0 += HX_LLM_LOGIT_ROWS) {
        const int64_t n = b->n_logits - i0 < HX_LLM_LOGIT_ROWS ? b->n_logits - i0
                                                               : HX_LLM_LOGIT_ROWS;
        m->logits_from = i0;
        be->gather_rows(be, m->x, b->logit_rows + i0, n, d, m->h);
        be->rmsnorm(be, m->h, m->out_norm, n, d, hp->norm_eps, m->h);
        be->matmul(be, m->output, NULL, m->h, n, m->logits);
        if (hp->final_softcap > 0) be->softcap(be, m->logits, hp->final_softcap, n * V);
        if (!b->draws) {
            be->read(be, logits + i0 * V, m->logits, (size_t)(n * V) * sizeof(float));
            continue;
        }
        if (b->ahead) { /* one pass: n_logits <= HX_SAMPLE_AHEAD_ROWS <= HX_LLM_LOGIT_ROWS */
            be->sample_start(be, m->logits, n, V, b->draws, b->drawn);
            continue;
        }
        be->sample(be, m->logits, n, V, b->draws + i0, b->drawn + i0);
        for (int64_t i = 0; i < n;) { /* the rows the host samples from, a run at a time */
            int64_t e = i;
            while (e < n && b->draws[i0 + e].top_k <= 0) e++;
            if (e > i)
                be->read(be, logits + (i0 + i) * V, m->logits + i * V,
                         (size_t)((e - i) * V) * sizeof(float));
            i = e + 1;
        }
    }
    return HX_OK;
}

_Static_assert(HX_SAMPLE_AHEAD_ROWS <= HX_LLM_LOGIT_ROWS, "a started step's draws are one pass");

void hx_llm_finish(hx_llm *m)
{
    m->be->sample_finish(m->be);
}

bool hx_llm_can_start_ahead(const hx_llm *m)
{
    return m->be->sample_start != NULL;
}

void hx_llm_read_logits(hx_llm *m, int64_t i, float *dst)
{
    const int64_t V = m->hp.n_vocab;
    HX_ASSERT(i >= m->logits_from && i - m->logits_from < HX_LLM_LOGIT_ROWS);
    m->be->read(m->be, dst, m->logits + (i - m->logits_from) * V, (size_t)V * sizeof(float));
}
