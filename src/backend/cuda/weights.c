/* weights.c - the cuda backend's uploads (cuda_int.h): matmul weights uploaded once at load
 * (Q4_0/Q4_1/Q8_0 split into codes and scales, MLX 4-bit as Q4_1 where exact, rearranged on
 * the load pool's threads), their optional f16 copies (keep_dequantized), the expert tables of
 * the routed moe op, and the small tensors and arrays ops read, uploaded at first use and kept.
 * Owns every device allocation of these; ops never upload a weight. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/f16.h"

/* ---- uploads ---- */

static size_t sb_bytes(hx_dtype dt)
{
    return dt == HX_DT_F32 ? 4 : 2;
}

static void *upload(const void *src, size_t bytes, cudaError_t *e)
{
    void *d = NULL;
    if ((*e = cudaMalloc(&d, bytes ? bytes : 1)) != cudaSuccess) return NULL;
    if (bytes && (*e = cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static void wmat_free(hx_cuda_wmat *w)
{
    cudaFree((void *)w->q);
    cudaFree((void *)w->scales);
    cudaFree((void *)w->biases);
    memset(w, 0, sizeof *w);
}

static bool is_b32(hx_dtype dt)
{
    return dt == HX_DT_Q4_0 || dt == HX_DT_Q4_1 || dt == HX_DT_Q8_0;
}

/* A bf16 value f16 holds exactly: zero, or in f16's normal range (its 7 mantissa bits fit). */
static bool bf16_fits_f16(uint16_t h)
{
    const int e = (h >> 7) & 0xFF;
    return (e == 0 && (h & 0x7F) == 0) || (e >= 113 && e <= 142);
}

static uint16_t bf16_as_f16(uint16_t h) /* h: bf16_fits_f16, so exact */
{
    return hx_f32_to_f16(hx_bf16_to_f32(h));
}

/* MLX 4-bit is Q4_1 with each group's scale and bias repeated for every 32 values of it (value
 * = s q + b either way): with groups of a multiple of 32 and scales and biases that f16 holds
 * exactly (f16 ones, or bf16 ones in f16's normal range), it is uploaded as Q4_1, whose kernels
 * are faster (the tensor-core GEMV among them); keeping a scale a group where grouped_q4_1
 * allows. HEARTH_CUDA_MLX_Q4_1=0 keeps MLX's own kernels (to compare). */
static bool mlx4_as_q4_1(const hx_tensor *t)
{
    if (t->dtype != HX_DT_MLX4 || t->group_size % 32 != 0 || t->sb_dtype == HX_DT_F32 ||
        hx_cuda_switched_off("HEARTH_CUDA_MLX_Q4_1"))
        return false;
    if (t->sb_dtype == HX_DT_F16) return true;
    const int64_t n = hx_tensor_n_rows(t) * (t->shape[t->n_dims - 1] / t->group_size);
    const uint16_t *sc = t->scales, *bi = t->biases;
    bool fits = true;
    for (int64_t i = 0; i < n; i++) fits &= bf16_fits_f16(sc[i]) & bf16_fits_f16(bi[i]);
    return fits;
}

/* Whether MLX 4-bit tensor t, taken as Q4_1, keeps one scale and offset a group, not a block:
 * 18 bytes per 32 values as in the file, not 20. Groups of 64 or 128 values (b32_shift), in
 * rows of an even number of groups (the tensor-core GEMV copies scales in pairs). */
static bool grouped_q4_1(const hx_tensor *t)
{
    const int64_t g = t->group_size, n_in = t->shape[t->n_dims - 1];
    return t->dtype == HX_DT_MLX4 && (g == 64 || g == 128) && n_in % (2 * g) == 0 &&
           !hx_cuda_switched_off("HEARTH_CUDA_MLX_GROUPS");
}

/* Rows [o0, o0 + n) of t as the device keeps them (kernels.h), n_blk blocks a row: a 32-value
 * block format (or MLX 4-bit taken as Q4_1) split, codes into hq (qb bytes a block), f16 scales
 * into hs, Q4_1's offsets into hm (n_g of each a row); Q6_K super-blocks padded to qb bytes. */
static void split_rows(const hx_tensor *t, int64_t o0, int64_t n, int64_t n_blk, int64_t n_g,
                       int qb, unsigned char *hq, uint16_t *hs, uint16_t *hm)
{
    if (t->dtype == HX_DT_Q6_K) {
        for (int64_t b = 0; b < n * n_blk; b++) {
            memcpy(hq + b * qb, (const unsigned char *)t->data + (o0 * n_blk + b) * 210, 210);
            memset(hq + b * qb + 210, 0, (size_t)qb - 210);
        }
        return;
    }
    if (t->dtype == HX_DT_MLX4) {
        /* MLX: element i of a block is nibble i % 2 of byte i / 2; Q4_1: byte k holds elements
         * k (low nibble) and k + 16 (high). */
        const int64_t per_g = t->group_size / 32, src_g = n_blk / per_g;
        const int64_t rep = n_blk / n_g; /* blocks an uploaded scale covers: 1 or per_g */
        const bool bf16 = t->sb_dtype == HX_DT_BF16;
        for (int64_t r = 0; r < n; r++) {
            const unsigned char *src = (const unsigned char *)t->data + (o0 + r) * n_blk * 16;
            const uint16_t *sc = (const uint16_t *)t->scales + (o0 + r) * src_g;
            const uint16_t *bi = (const uint16_t *)t->biases + (o0 + r) * src_g;
            for (int64_t j = 0; j < n_blk; j++) {
                const unsigned char *s8 = src + j * 16;
                unsigned char *d = hq + (r * n_blk + j) * 16;
                for (int k = 0; k < 8; k++) {
                    d[2 * k] = (unsigned char)((s8[k] & 15) | s8[8 + k] << 4);
                    d[2 * k + 1] = (unsigned char)((s8[k] >> 4) | (s8[8 + k] & 0xF0));
                }
                if (j % rep != 0) continue;
                const uint16_t sv = sc[j / per_g], bv = bi[j / per_g];
                hs[r * n_g + j / rep] = bf16 ? bf16_as_f16(sv) : sv;
                hm[r * n_g + j / rep] = bf16 ? bf16_as_f16(bv) : bv;
            }
        }
        return;
    }
    const int64_t src_row = (int64_t)hx_dtype_row_bytes(t->dtype, n_blk * 32);
    const int lead = t->dtype == HX_DT_Q4_1 ? 4 : 2;
    for (int64_t b = 0; b < n * n_blk; b++) {
        const unsigned char *p = (const unsigned char *)t->data + o0 * src_row +
                                 b / n_blk * src_row + b % n_blk * (qb + lead);
        memcpy(hs + b, p, 2);
        if (lead == 4) memcpy(hm + b, p + 2, 2);
        memcpy(hq + b * qb, p + lead, (size_t)qb);
    }
}

typedef struct {
    const hx_tensor *t;
    int64_t          o0, n, n_blk, n_g;
    int              qb;
    unsigned char   *hq;
    uint16_t        *hs, *hm;
} split_task;

static void run_split(void *p, int ith, int nth)
{
    const split_task *a = p;
    int64_t lo, hi;
    hx_split_range(a->n, ith, nth, 1, &lo, &hi);
    if (hi > lo)
        split_rows(a->t, a->o0 + lo, hi - lo, a->n_blk, a->n_g, a->qb,
                   a->hq + lo * a->n_blk * a->qb, a->hs ? a->hs + lo * a->n_g : NULL,
                   a->hm ? a->hm + lo * a->n_g : NULL);
}

/* Runs task over the backend's load threads (made at the first use; the caller alone when
 * they cannot be had). */
static void load_run(cuda_impl *c, hx_task_fn fn, void *task)
{
    if (!c->load_pool) {
        const int cores = hx_cpu_physical_cores();
        if (hx_pool_init(cores < 1 ? 1 : cores > 8 ? 8 : cores, &c->load_pool, NULL) != HX_OK)
            c->load_pool = NULL;
    }
    if (c->load_pool) hx_pool_run(c->load_pool, fn, task);
    else fn(task, 0, 1);
}

/* A tensor the device keeps rearranged (split_rows): a Q4_0/Q4_1/Q8_0 one (w->dtype; t may be
 * MLX 4-bit as Q4_1) as rows of codes into w->q and the f16 scales (and Q4_1's offsets) of its
 * blocks into w->scales (w->biases); a Q6_K one padded. Rearranged on the host a few MiB of rows
 * at a time by the backend's load threads (an 8B model's 234M blocks took 2.6 s on one). */
static cudaError_t upload_split(cuda_impl *c, const hx_tensor *t, hx_cuda_wmat *w)
{
    const bool q6 = w->dtype == HX_DT_Q6_K, offsets = w->dtype == HX_DT_Q4_1;
    const int64_t n_blk = w->n_in / (q6 ? 256 : 32), n_g = q6 ? 0 : w->n_in / w->group_size;
    const int qb = q6 ? HX_CUDA_Q6_K_BYTES : (int)(w->row_bytes / n_blk);
    const int64_t chunk = (8 << 20) / w->row_bytes + 1;
    unsigned char *hq = hx_alloc((size_t)(chunk * w->row_bytes));
    uint16_t *hs = q6 ? NULL : hx_alloc((size_t)(chunk * n_g) * 2);
    uint16_t *hm = offsets ? hx_alloc((size_t)(chunk * n_g) * 2) : NULL;
    const size_t sb = (size_t)(w->n_out * n_g) * 2;
    cudaError_t e = !hq || (!q6 && !hs) || (offsets && !hm) ? cudaErrorMemoryAllocation
                                                            : cudaSuccess;
    if (e == cudaSuccess) e = cudaMalloc((void **)&w->q, (size_t)(w->n_out * w->row_bytes));
    if (e == cudaSuccess && !q6) e = cudaMalloc((void **)&w->scales, sb);
    if (e == cudaSuccess && offsets) e = cudaMalloc((void **)&w->biases, sb);
    for (int64_t o0 = 0; e == cudaSuccess && o0 < w->n_out; o0 += chunk) {
        const int64_t n = o0 + chunk < w->n_out ? chunk : w->n_out - o0;
        split_task task = {t, o0, n, n_blk, n_g, qb, hq, hs, hm};
        load_run(c, run_split, &task);
        e = cudaMemcpy((unsigned char *)(uintptr_t)w->q + o0 * w->row_bytes, hq,
                       (size_t)(n * w->row_bytes), cudaMemcpyHostToDevice);
        if (e == cudaSuccess && hs)
            e = cudaMemcpy((uint16_t *)(uintptr_t)w->scales + o0 * n_g, hs,
                           (size_t)(n * n_g) * 2, cudaMemcpyHostToDevice);
        if (e == cudaSuccess && hm)
            e = cudaMemcpy((uint16_t *)(uintptr_t)w->biases + o0 * n_g, hm,
                           (size_t)(n * n_g) * 2, cudaMemcpyHostToDevice);
    }
    hx_free(hq);
    hx_free(hs);
    hx_free(hm);
    return e;
}

/* Uploads tensor t's rows (and an MLX tensor's scales and biases): unchanged, except the
 * 32-value block formats and Q6_K, rearranged by upload_split. */
static hx_status upload_wmat(cuda_impl *c, const hx_tensor *t, hx_cuda_wmat *w, hx_err *err)
{
    const int64_t n_in = t->shape[t->n_dims - 1], n_out = hx_tensor_n_rows(t);
    if (!hx_cuda_format_ok(t->dtype, n_in))
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "cuda: a %s tensor with rows of %lld values (the GPU kernels read "
                          "rows in multiples of 32)", hx_dtypes[t->dtype].name, (long long)n_in);
    *w = (hx_cuda_wmat){.dtype = t->dtype, .sb_dtype = t->sb_dtype,
                        .group_size = t->group_size, .n_out = n_out, .n_in = n_in,
                        .row_bytes = (int64_t)hx_dtype_row_bytes(t->dtype, n_in)};
    cudaError_t e = cudaSuccess;
    const size_t q_bytes = (size_t)w->row_bytes * (size_t)n_out;
    bool ok;
    if (mlx4_as_q4_1(t)) w->dtype = HX_DT_Q4_1;
    if ((w->dtype == HX_DT_Q4_0 || w->dtype == HX_DT_Q4_1) && /* b32_scale, lean_units */
        n_out * (n_in / 32) > (int64_t)UINT32_MAX)
        return hx_err_set(err, HX_E_UNSUPPORTED, "cuda: a %s tensor of more than 2^32 blocks",
                          hx_dtypes[w->dtype].name);
    if (is_b32(w->dtype)) {
        w->row_bytes = w->dtype == HX_DT_Q8_0 ? n_in : n_in / 2;
        w->sb_dtype = HX_DT_F16;
        w->group_size = grouped_q4_1(t) ? t->group_size : 32;
        ok = (e = upload_split(c, t, w)) == cudaSuccess;
    } else if (t->dtype == HX_DT_Q6_K) {
        w->row_bytes = n_in / 256 * HX_CUDA_Q6_K_BYTES;
        ok = (e = upload_split(c, t, w)) == cudaSuccess;
    } else {
        ok = (w->q = upload(t->data, q_bytes, &e)) != NULL;
    }
    if (ok && (w->dtype == HX_DT_MLX4 || w->dtype == HX_DT_MLX8)) {
        const size_t sb = (size_t)n_out * (size_t)(n_in / t->group_size) * sb_bytes(t->sb_dtype);
        ok = (w->scales = upload(t->scales, sb, &e)) != NULL &&
             (w->biases = upload(t->biases, sb, &e)) != NULL;
    }
    if (!ok) {
        wmat_free(w);
        return hx_err_set(err, e == cudaErrorMemoryAllocation ? HX_E_NOMEM : HX_E_IO,
                          "cuda: uploading a %zu MiB weight: %s", q_bytes >> 20,
                          cudaGetErrorString(e));
    }
    return HX_OK;
}

static cache_ent *cache_find(cuda_impl *c, const void *key)
{
    for (size_t i = 0; i < c->n_cache; i++)
        if (c->cache[i].key == key) return &c->cache[i];
    return NULL;
}

static void cache_add(cuda_impl *c, const void *key, const hx_cuda_wmat *w, bool owned)
{
    if (c->n_cache == c->cap_cache) {
        const size_t cap = c->cap_cache ? 2 * c->cap_cache : 256;
        cache_ent *p = hx_realloc(c->cache, cap * sizeof *p);
        if (!p) hx_cuda_die("host allocation", "out of memory", __FILE__, __LINE__);
        c->cache = p;
        c->cap_cache = cap;
    }
    c->cache[c->n_cache++] = (cache_ent){key, *w, owned};
}

/* The device copy of t as floats (norm weights, biases: small, read by every row). */
const float *hx_cuda_dev_floats(cuda_impl *c, const hx_tensor *t)
{
    const cache_ent *e = cache_find(c, t->data);
    if (e) return e->w.q;
    const int64_t rows = hx_tensor_n_rows(t), n = t->shape[t->n_dims - 1];
    float *h = hx_alloc((size_t)(rows * n) * sizeof *h);
    if (!h) hx_cuda_die("host allocation", "out of memory", __FILE__, __LINE__);
    for (int64_t r = 0; r < rows; r++) hx_tensor_dequant_row(t, r, h + r * n);
    cudaError_t err;
    void *d = upload(h, (size_t)(rows * n) * sizeof *h, &err);
    hx_free(h);
    if (!d) hx_cuda_die("uploading a small tensor", cudaGetErrorString(err), __FILE__, __LINE__);
    const hx_cuda_wmat w = {.q = d, .dtype = HX_DT_F32, .n_out = rows, .n_in = n,
                            .row_bytes = n * 4};
    cache_add(c, t->data, &w, true);
    return d;
}

/* The device copy of n host floats at p (the rope frequencies). */
const float *hx_cuda_dev_array(cuda_impl *c, const float *p, int64_t n)
{
    const cache_ent *e = cache_find(c, p);
    if (e) return e->w.q;
    cudaError_t err;
    void *d = upload(p, (size_t)n * sizeof *p, &err);
    if (!d) hx_cuda_die("uploading an array", cudaGetErrorString(err), __FILE__, __LINE__);
    const hx_cuda_wmat w = {.q = d, .dtype = HX_DT_F32, .n_out = 1, .n_in = n,
                            .row_bytes = n * 4};
    cache_add(c, p, &w, true);
    return d;
}

/* The device copy of a table read in its format (the embeddings): the one `weight` uploaded
 * when the output projection shares it, else uploaded now. */
const hx_cuda_wmat *hx_cuda_dev_wmat(cuda_impl *c, const hx_tensor *t)
{
    const cache_ent *e = cache_find(c, t->data);
    if (e) return &e->w;
    hx_cuda_wmat w;
    hx_err err = {0};
    if (upload_wmat(c, t, &w, &err) != HX_OK)
        hx_cuda_die("uploading a table", err.msg, __FILE__, __LINE__);
    cache_add(c, t->data, &w, true);
    return &c->cache[c->n_cache - 1].w;
}

/* backend.h `table`: the embedding table uploaded at load (once: a tied table is the output
 * weight `weight` uploaded). */
static hx_status cuda_table(hx_backend *be, const hx_tensor *w, hx_err *err)
{
    cuda_impl *c = hx_cuda_enter(be);
    if (cache_find(c, w->data)) return HX_OK;
    hx_cuda_wmat cw;
    const hx_status st = upload_wmat(c, w, &cw, err);
    if (st == HX_OK) cache_add(c, w->data, &cw, true);
    return st;
}

/* ---- weights ---- */

static const hx_tensor *cuda_weight(hx_backend *be, const hx_tensor *w, hx_err *err)
{
    cuda_impl *c = hx_cuda_enter(be);
    uploaded_weight *cw = hx_calloc(1, sizeof *cw);
    if (!cw) {
        hx_err_set(err, HX_E_NOMEM, "out of memory");
        return NULL;
    }
    if (upload_wmat(c, w, &cw->w, err) != HX_OK) {
        hx_free(cw);
        return NULL;
    }
    if (c->n_weights == c->cap_weights) {
        const size_t cap = c->cap_weights ? 2 * c->cap_weights : 256;
        uploaded_weight **p = hx_realloc(c->weights, cap * sizeof *p);
        if (!p) {
            wmat_free(&cw->w);
            hx_free(cw);
            hx_err_set(err, HX_E_NOMEM, "out of memory");
            return NULL;
        }
        c->weights = p;
        c->cap_weights = cap;
    }
    c->weights[c->n_weights++] = cw;
    cw->t = *w;
    cw->t.prepared = &cw->w;
    /* The embedding lookup of a tied table finds this copy instead of uploading its own. */
    if (!cache_find(c, w->data)) cache_add(c, w->data, &cw->w, false);
    const int64_t elems = cw->w.n_out * cw->w.n_in;
    if (elems > c->max_weight_elems) c->max_weight_elems = elems;
    if (cw->w.n_in > c->max_n_in) c->max_n_in = cw->w.n_in;
    const size_t gib = (size_t)1 << 30, before = c->uploaded;
    c->uploaded += (size_t)cw->w.row_bytes * (size_t)cw->w.n_out;
    if (c->uploaded / gib > before / gib)
        fprintf(stderr, "hearth: cuda:%d: %zu GiB of weights uploaded\n", c->device,
                c->uploaded / gib);
    return &cw->t;
}

/* The upload behind a tensor `weight` returned. */
uploaded_weight *hx_cuda_uploaded_of(const hx_tensor *w)
{
    return (uploaded_weight *)(void *)((char *)(void *)(uintptr_t)w->prepared -
                                       offsetof(uploaded_weight, w));
}

/* Drops every layer's expert tables (they copy weights' descriptions: a released weight makes
 * them stale). */
static void drop_moe_tables(cuda_impl *c)
{
    if (!c->n_moe_tabs) return;
    hx_cuda_settle(c);
    for (int i = 0; i < c->n_moe_tabs; i++)
        for (int k = 0; k < 3; k++) cudaFree(c->moe_tabs[i].tab[k]);
    c->n_moe_tabs = 0;
}

static void cuda_weight_release(hx_backend *be, const hx_tensor *w)
{
    cuda_impl *c = hx_cuda_enter(be);
    if (!w || !w->prepared) return;
    drop_moe_tables(c);
    uploaded_weight *cw = hx_cuda_uploaded_of(w);
    cache_ent *e = cache_find(c, w->data);
    if (e && !e->owned && e->w.q == cw->w.q) *e = c->cache[--c->n_cache]; /* gone with it */
    for (size_t i = 0; i < c->n_weights; i++)
        if (c->weights[i] == cw) {
            c->weights[i] = c->weights[--c->n_weights];
            break;
        }
    if (cw->half) { /* a graph may still read it: let the GPU finish first */
        hx_cuda_settle(c);
        cudaFree(cw->half);
    }
    wmat_free(&cw->w);
    hx_free(cw);
}

/* Memory keep_dequantized leaves free on the device whatever its budget (cuBLAS's and the
 * driver's allocations that no fit counts). */
#define DEQUANT_MARGIN ((size_t)512 << 20)

/* keep_dequantized: f16 copies of the quantized weights, in upload order (layer by layer, the
 * output projection last) while they fit, each made once by the dequantizer that otherwise runs
 * before every GEMM of more than HX_CUDA_GEMV_ROWS rows (run_matmul): 1.46x the aggregate decode
 * of 32 streams of an 8B model on an H100 (docs/performance.md). HEARTH_CUDA_F16_WEIGHTS=0 turns
 * it off (read at each call: the tests flip it on a live backend). */
static int64_t cuda_keep_dequantized(hx_backend *be, int64_t bytes)
{
    cuda_impl *c = hx_cuda_enter(be);
    if (hx_cuda_switched_off("HEARTH_CUDA_F16_WEIGHTS") || bytes <= 0 ||
        c->max_tok <= HX_CUDA_GEMV_ROWS)
        return 0; /* (no step of so few rows reaches a GEMM) */
    /* the graphs so far dequantize before their GEMMs: the next steps capture anew */
    hx_cuda_drop_graphs(c);
    int64_t kept = 0;
    for (size_t i = 0; i < c->n_weights; i++) {
        uploaded_weight *cw = c->weights[i];
        const size_t need = (size_t)cw->w.n_out * (size_t)cw->w.n_in * 2;
        if (cw->half || !hx_cuda_gemv_int8(cw->w.dtype) || kept + (int64_t)need > bytes)
            continue; /* a float weight needs none; a smaller one may still fit */
        size_t f = 0, t = 0;
        if (cudaMemGetInfo(&f, &t) != cudaSuccess || f < need + DEQUANT_MARGIN ||
            cudaMalloc(&cw->half, need) != cudaSuccess) {
            (void)cudaGetLastError();
            cw->half = NULL;
            break;
        }
        hx_cuda_dequant_rows(&cw->w, 0, cw->w.n_out, cw->half, 0, c->stream);
        kept += (int64_t)need;
    }
    CK(cudaStreamSynchronize(c->stream));
    return kept;
}

/* The layer's expert tables, made at its first routed step; NULL when its experts cannot go
 * routed (a float format, or experts of mixed formats or shapes: hx_cuda_gemv_routed takes one
 * of each a launch). */
const moe_tables *hx_cuda_moe_tables(cuda_impl *c, const hx_moe *m)
{
    for (int i = 0; i < c->n_moe_tabs; i++)
        if (c->moe_tabs[i].key == (const void *)m->gate) return &c->moe_tabs[i];
    const hx_tensor **sets[3] = {m->gate, m->up, m->down};
    hx_cuda_wmat *host = hx_alloc((size_t)m->n_expert * sizeof *host);
    if (!host) return NULL;
    moe_tables t = {.key = m->gate};
    bool ok = true;
    for (int k = 0; k < 3 && ok; k++) {
        for (int32_t e = 0; e < m->n_expert; e++)
            host[e] = *(const hx_cuda_wmat *)sets[k][e]->prepared;
        const hx_cuda_wmat *w0 = &host[0];
        ok = hx_cuda_gemv_int8(w0->dtype) != 0;
        for (int32_t e = 1; e < m->n_expert && ok; e++)
            ok = host[e].dtype == w0->dtype && host[e].n_in == w0->n_in &&
                 host[e].n_out == w0->n_out && host[e].group_size == w0->group_size &&
                 host[e].sb_dtype == w0->sb_dtype;
        t.like[k] = *w0;
        const size_t bytes = (size_t)m->n_expert * sizeof *host;
        ok = ok && cudaMalloc((void **)&t.tab[k], bytes) == cudaSuccess &&
             cudaMemcpy(t.tab[k], host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    hx_free(host);
    if (ok && c->n_moe_tabs == c->cap_moe_tabs) {
        const int cap = c->cap_moe_tabs ? 2 * c->cap_moe_tabs : 64;
        moe_tables *p = hx_realloc(c->moe_tabs, (size_t)cap * sizeof *p);
        if (p) c->moe_tabs = p, c->cap_moe_tabs = cap;
        ok = p != NULL;
    }
    if (!ok) {
        (void)cudaGetLastError();
        for (int k = 0; k < 3; k++) cudaFree(t.tab[k]);
        return NULL;
    }
    c->moe_tabs[c->n_moe_tabs] = t;
    return &c->moe_tabs[c->n_moe_tabs++];
}

/* ---- life cycle ---- */

void hx_cuda_weight_ops(hx_backend *be)
{
    be->weight = cuda_weight;
    be->keep_dequantized = cuda_keep_dequantized;
    be->weight_release = cuda_weight_release;
    be->table = cuda_table;
}

void hx_cuda_weights_free(cuda_impl *c)
{
    drop_moe_tables(c);
    hx_free(c->moe_tabs);
    for (size_t i = 0; i < c->n_cache; i++)
        if (c->cache[i].owned) wmat_free(&c->cache[i].w);
    hx_free(c->cache);
    for (size_t i = 0; i < c->n_weights; i++) cudaFree(c->weights[i]->half);
    hx_free(c->weights); /* (the weights themselves are their releasers') */
    hx_pool_free(c->load_pool);
}
