/* cuda_backend.c - the ops table on one NVIDIA GPU (cuda_backend.h); kernels in kernels.cu.
 *
 * Memory: matmul weights are uploaded once by `weight` in their file formats (kernels.h reads
 * every format); the other tensors an op names (norm weights, biases, the embedding table, the
 * rope frequencies) are uploaded at their first use and kept, keyed by their host address: a
 * backend serves one model, whose tensors live as long as it does. Activations and the KV pool
 * are plain device allocations.
 *
 * Ordering: every op is queued on one stream and returns; `read` (the logits) is where the host
 * waits. The small host arrays ops take (token ids, positions, block tables) are copied into a
 * pinned staging arena and from there to its device twin on the same stream, so the caller may
 * reuse them at once; the arena restarts after each `read`, and a step that would overflow it
 * waits for the stream first. An array equal to one staged since the last restart (a step's
 * positions, passed to every layer) is staged once.
 *
 * Matmuls: up to HX_CUDA_GEMV_ROWS rows (decode) run the fused-dequant GEMV, one pass over the
 * weight. More rows (prefill, large batches) dequantize the weight to f16 in chunks of rows and
 * multiply on the tensor cores through cuBLAS (f16 inputs, f32 accumulation and output).
 *
 * Failures: allocation and start-up failures return errors; a kernel launch or CUDA call that
 * fails mid-step means a broken device or a bug, and aborts with the CUDA message (ops have no
 * error path, as on the CPU). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"

#define ARENA_BYTES  ((size_t)8 << 20)  /* staged host arrays between two reads */
#define RECENT       32                 /* staged arrays remembered for reuse */
#define HALF_W_ELEMS ((int64_t)32 << 20) /* f16 elements of one dequantized weight chunk */

/* A device copy of a host tensor or array: a weight in its format, or floats (dtype F32). */
typedef struct {
    const void  *key;   /* the host address it was uploaded from */
    hx_cuda_wmat w;
    bool         owned; /* freed with the backend; false for weights (weight_release frees) */
} cache_ent;

/* An array staged since the arena's last restart. */
typedef struct {
    const void *src;
    size_t      bytes, off;
} staged;

/* A matmul weight `weight` uploaded: the tensor handed to the model (its `prepared` points at
 * w) and the device allocations. */
typedef struct {
    hx_tensor    t;
    hx_cuda_wmat w;
} uploaded_weight;

typedef struct {
    int            device;
    cudaStream_t   stream;
    const hx_blas *blas;             /* cuBLAS, loaded at create */
    cublasHandle_t handle;
    unsigned char *arena_h, *arena_d; /* pinned host staging and its device twin */
    size_t         arena_used;
    staged         recent[RECENT];
    int            n_recent;
    cache_ent     *cache;             /* uploaded tensors, unsorted (a few hundred) */
    size_t         n_cache, cap_cache;
    void          *half_w;            /* one dequantized weight chunk */
    int64_t        half_w_elems;
    void          *half_x;            /* a matmul's input rows in f16 */
    int64_t        half_x_elems;
    int64_t        max_weight_elems;  /* the largest matmul weight seen by `weight` */
    size_t         uploaded;          /* weight bytes uploaded, for the progress line */
    /* HEARTH_CUDA_PROFILE=1: every op waits for the GPU and adds its time to a per-op total,
     * printed when the backend is destroyed (for finding where a step's time goes). */
    bool           profile;
    double         op_start;
    struct { const char *name; double ms; int64_t n; } prof[24];
    int            n_prof;
} cuda_impl;

static void cuda_die(const char *what, const char *msg, const char *file, int line)
{
    fprintf(stderr, "hearth: cuda: %s failed: %s (%s:%d)\n", what, msg, file, line);
    abort();
}

/* For calls inside ops, which cannot fail gracefully (see the file comment). */
#define CK(call)                                                                         \
    do {                                                                                 \
        const cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) cuda_die(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define CK_BLAS(call)                                                                    \
    do {                                                                                 \
        const cublasStatus_t s_ = (call);                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            cuda_die(#call, c->blas->status_string(s_), __FILE__, __LINE__);              \
    } while (0)
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* After each op's launches: a bad launch configuration is reported here, not by the launch;
 * when profiling, the op's time (launch and GPU) is added to its name's total. */
static void op_done(cuda_impl *c, const char *name)
{
    CK(cudaGetLastError());
    if (!c->profile) return;
    CK(cudaStreamSynchronize(c->stream));
    int i = 0;
    while (i < c->n_prof && strcmp(c->prof[i].name, name) != 0) i++;
    if (i == c->n_prof) {
        if (i == (int)HX_COUNTOF(c->prof)) return;
        c->prof[c->n_prof++].name = name;
    }
    c->prof[i].ms += now_ms() - c->op_start;
    c->prof[i].n++;
}

/* The impl, with this thread's current device set to ours (ops may run on another thread than
 * the one that created the backend, and the current device is per thread). */
static cuda_impl *cx(hx_backend *be)
{
    cuda_impl *c = be->impl;
    CK(cudaSetDevice(c->device));
    if (c->profile) {
        CK(cudaStreamSynchronize(c->stream));
        c->op_start = now_ms();
    }
    return c;
}

/* Why no GPU is usable, in the words a user needs (the runtime's own for the rarer cases). */
static const char *no_gpu_reason(cudaError_t e)
{
    if (e == cudaErrorInsufficientDriver)
        return "no NVIDIA driver, or one older than this build's CUDA runtime";
    if (e == cudaErrorNoDevice) return "no CUDA GPU found";
    return cudaGetErrorString(e);
}

static hx_status cuda_err(hx_err *err, hx_status st, const char *what, cudaError_t e)
{
    return hx_err_set(err, st, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* ---- staging of small host arrays ---- */

static const void *stage(cuda_impl *c, const void *src, size_t bytes)
{
    for (int i = 0; i < c->n_recent; i++)
        if (c->recent[i].src == src && c->recent[i].bytes == bytes &&
            memcmp(c->arena_h + c->recent[i].off, src, bytes) == 0)
            return c->arena_d + c->recent[i].off;
    HX_ASSERT(bytes <= ARENA_BYTES);
    if (c->arena_used + bytes > ARENA_BYTES) { /* the staged bytes may still be in flight */
        CK(cudaStreamSynchronize(c->stream));
        c->arena_used = 0;
        c->n_recent = 0;
    }
    const size_t off = c->arena_used;
    memcpy(c->arena_h + off, src, bytes);
    CK(cudaMemcpyAsync(c->arena_d + off, c->arena_h + off, bytes, cudaMemcpyHostToDevice,
                       c->stream));
    c->arena_used = (off + bytes + 15) & ~(size_t)15;
    if (c->n_recent == RECENT) c->n_recent = 0; /* forget the oldest generation wholesale */
    c->recent[c->n_recent++] = (staged){src, bytes, off};
    return c->arena_d + off;
}

static const int32_t *stage_ints(cuda_impl *c, const int32_t *src, int64_t n)
{
    return stage(c, src, (size_t)n * sizeof *src);
}

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

/* Uploads tensor t's rows unchanged (and an MLX tensor's scales and biases). */
static hx_status upload_wmat(const hx_tensor *t, hx_cuda_wmat *w, hx_err *err)
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
    bool ok = (w->q = upload(t->data, q_bytes, &e)) != NULL;
    if (ok && (t->dtype == HX_DT_MLX4 || t->dtype == HX_DT_MLX8)) {
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
        if (!p) cuda_die("host allocation", "out of memory", __FILE__, __LINE__);
        c->cache = p;
        c->cap_cache = cap;
    }
    c->cache[c->n_cache++] = (cache_ent){key, *w, owned};
}

/* The device copy of t as floats (norm weights, biases: small, read by every row). */
static const float *dev_floats_of(cuda_impl *c, const hx_tensor *t)
{
    const cache_ent *e = cache_find(c, t->data);
    if (e) return e->w.q;
    const int64_t rows = hx_tensor_n_rows(t), n = t->shape[t->n_dims - 1];
    float *h = hx_alloc((size_t)(rows * n) * sizeof *h);
    if (!h) cuda_die("host allocation", "out of memory", __FILE__, __LINE__);
    for (int64_t r = 0; r < rows; r++) hx_tensor_dequant_row(t, r, h + r * n);
    cudaError_t err;
    void *d = upload(h, (size_t)(rows * n) * sizeof *h, &err);
    hx_free(h);
    if (!d) cuda_die("uploading a small tensor", cudaGetErrorString(err), __FILE__, __LINE__);
    const hx_cuda_wmat w = {.q = d, .dtype = HX_DT_F32, .n_out = rows, .n_in = n,
                            .row_bytes = n * 4};
    cache_add(c, t->data, &w, true);
    return d;
}

/* The device copy of n host floats at p (the rope frequencies). */
static const float *dev_array(cuda_impl *c, const float *p, int64_t n)
{
    const cache_ent *e = cache_find(c, p);
    if (e) return e->w.q;
    cudaError_t err;
    void *d = upload(p, (size_t)n * sizeof *p, &err);
    if (!d) cuda_die("uploading an array", cudaGetErrorString(err), __FILE__, __LINE__);
    const hx_cuda_wmat w = {.q = d, .dtype = HX_DT_F32, .n_out = 1, .n_in = n,
                            .row_bytes = n * 4};
    cache_add(c, p, &w, true);
    return d;
}

/* The device copy of a table read in its format (the embeddings): the one `weight` uploaded
 * when the output projection shares it, else uploaded now. */
static const hx_cuda_wmat *dev_wmat_of(cuda_impl *c, const hx_tensor *t)
{
    const cache_ent *e = cache_find(c, t->data);
    if (e) return &e->w;
    hx_cuda_wmat w;
    hx_err err = {0};
    if (upload_wmat(t, &w, &err) != HX_OK) cuda_die("uploading a table", err.msg, __FILE__, __LINE__);
    cache_add(c, t->data, &w, true);
    return &c->cache[c->n_cache - 1].w;
}

/* ---- memory ---- */

static void *cuda_alloc(hx_backend *be, size_t bytes)
{
    cx(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free allocation error */
        return NULL;
    }
    return p;
}

static void cuda_free(hx_backend *be, void *p)
{
    cx(be);
    cudaFree(p);
}

static void cuda_read(hx_backend *be, void *dst, const void *src, size_t n)
{
    cuda_impl *c = cx(be);
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    c->arena_used = 0; /* everything staged has been consumed */
    c->n_recent = 0;
    op_done(c, "read");
}

static void cuda_mem_info(hx_backend *be, int64_t *free_bytes, int64_t *total_bytes)
{
    cx(be);
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) (void)cudaGetLastError();
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
}

/* Device buffer *p of at least n 2-byte elements (grown, never shrunk). */
static hx_status ensure_half(void **p, int64_t *have, int64_t n, hx_err *err)
{
    if (n <= *have) return HX_OK;
    cudaFree(*p);
    *p = NULL;
    *have = 0;
    const cudaError_t e = cudaMalloc(p, (size_t)n * 2);
    if (e != cudaSuccess) return cuda_err(err, HX_E_NOMEM, "matmul scratch", e);
    *have = n;
    return HX_OK;
}

static hx_status cuda_reserve(hx_backend *be, int64_t max_row, int64_t max_tok, hx_err *err)
{
    cuda_impl *c = cx(be);
    if (max_tok <= HX_CUDA_GEMV_ROWS) return HX_OK; /* every matmul takes the GEMV */
    hx_status st = ensure_half(&c->half_x, &c->half_x_elems, max_row * max_tok, err);
    const int64_t w = c->max_weight_elems < HALF_W_ELEMS ? c->max_weight_elems : HALF_W_ELEMS;
    return st == HX_OK ? ensure_half(&c->half_w, &c->half_w_elems, w, err) : st;
}

/* ---- weights ---- */

static const hx_tensor *cuda_weight(hx_backend *be, const hx_tensor *w, hx_err *err)
{
    cuda_impl *c = cx(be);
    uploaded_weight *cw = hx_calloc(1, sizeof *cw);
    if (!cw) {
        hx_err_set(err, HX_E_NOMEM, "out of memory");
        return NULL;
    }
    if (upload_wmat(w, &cw->w, err) != HX_OK) {
        hx_free(cw);
        return NULL;
    }
    cw->t = *w;
    cw->t.prepared = &cw->w;
    /* The embedding lookup of a tied table finds this copy instead of uploading its own. */
    if (!cache_find(c, w->data)) cache_add(c, w->data, &cw->w, false);
    const int64_t elems = cw->w.n_out * cw->w.n_in;
    if (elems > c->max_weight_elems) c->max_weight_elems = elems;
    const size_t gib = (size_t)1 << 30, before = c->uploaded;
    c->uploaded += (size_t)cw->w.row_bytes * (size_t)cw->w.n_out;
    if (c->uploaded / gib > before / gib)
        fprintf(stderr, "hearth: cuda:%d: %zu GiB of weights uploaded\n", c->device,
                c->uploaded / gib);
    return &cw->t;
}

static void cuda_weight_release(hx_backend *be, const hx_tensor *w)
{
    cuda_impl *c = cx(be);
    if (!w || !w->prepared) return;
    uploaded_weight *cw = (uploaded_weight *)(void *)((char *)(void *)(uintptr_t)w->prepared -
                                              offsetof(uploaded_weight, w));
    cache_ent *e = cache_find(c, w->data);
    if (e && !e->owned && e->w.q == cw->w.q) *e = c->cache[--c->n_cache]; /* gone with it */
    wmat_free(&cw->w);
    hx_free(cw);
}

/* ---- KV storage ---- */

static size_t kv_bytes(const hx_kv_store *kv)
{
    return (size_t)kv->n_blocks * (size_t)kv->n_layer * (size_t)kv->n_kv_head *
           (size_t)kv->block_tokens * (size_t)kv->d_head * 2;
}

static hx_status cuda_kv_alloc(hx_backend *be, hx_kv_store *kv, hx_err *err)
{
    cuda_impl *c = cx(be);
    if (kv->dtype != HX_KV_F16)
        return hx_err_set(err, HX_E_UNSUPPORTED,
                          "the cuda backend keeps the KV cache in f16 only (a quantized KV "
                          "cache runs on the CPU)");
    if (kv->n_blocks <= 0 || kv->n_layer <= 0 || kv->n_kv_head <= 0 || kv->block_tokens <= 0 ||
        kv->d_head <= 0 || kv->d_head > 256)
        return hx_err_set(err, HX_E_INVALID, "KV cache of %d blocks (d_head %d) is out of range",
                          kv->n_blocks, kv->d_head);
    const size_t bytes = kv_bytes(kv);
    cudaError_t e = cudaMalloc(&kv->k, bytes);
    if (e == cudaSuccess && (e = cudaMalloc(&kv->v, bytes)) == cudaSuccess &&
        (e = cudaMemsetAsync(kv->k, 0, bytes, c->stream)) == cudaSuccess)
        e = cudaMemsetAsync(kv->v, 0, bytes, c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(kv->k);
        cudaFree(kv->v);
        kv->k = kv->v = NULL;
        return hx_err_set(err, HX_E_NOMEM, "cuda: a %zu MiB KV cache: %s", 2 * bytes >> 20,
                          cudaGetErrorString(e));
    }
    return HX_OK;
}

static void cuda_kv_free(hx_backend *be, hx_kv_store *kv)
{
    cx(be);
    cudaFree(kv->k);
    cudaFree(kv->v);
    kv->k = kv->v = NULL;
}

static void cuda_kv_copy(hx_backend *be, const hx_kv_store *kv, int32_t src, int32_t dst)
{
    cuda_impl *c = cx(be);
    HX_ASSERT(src != dst && src >= 0 && dst >= 0 && src < kv->n_blocks && dst < kv->n_blocks);
    const size_t per = kv_bytes(kv) / (size_t)kv->n_blocks;
    const void *bases[2] = {kv->k, kv->v};
    for (int i = 0; i < 2; i++)
        CK(cudaMemcpyAsync((unsigned char *)(uintptr_t)bases[i] + (size_t)dst * per,
                           (const unsigned char *)bases[i] + (size_t)src * per, per,
                           cudaMemcpyDeviceToDevice, c->stream));
}

static hx_cuda_kv kv_view(const hx_kv_store *kv)
{
    return (hx_cuda_kv){kv->k, kv->v, kv->n_layer, kv->n_kv_head, kv->d_head, kv->block_tokens};
}

/* The entries of the sequence's block table that positions below n_ctx use. */
static const int32_t *stage_blocks(cuda_impl *c, const hx_kv_store *kv, const hx_kv_seq *seq)
{
    return stage_ints(c, seq->blocks, (seq->n_ctx + kv->block_tokens - 1) / kv->block_tokens);
}

static void cuda_kv_write(hx_backend *be, hx_kv_store *kv, int32_t layer, const hx_kv_seq *seq,
                          const int32_t *pos, const float *k, const float *v, int64_t n_tok)
{
    cuda_impl *c = cx(be);
    const hx_cuda_kv view = kv_view(kv);
    hx_cuda_kv_write(&view, layer, stage_blocks(c, kv, seq), stage_ints(c, pos, n_tok), k, v,
                     n_tok, c->stream);
    op_done(c, "kv_write");
}

static void cuda_attention(hx_backend *be, const hx_kv_store *kv, int32_t layer,
                           const hx_kv_seq *seq, const float *q, const int32_t *pos,
                           int64_t n_tok, const hx_attn_shape *s, float *out)
{
    cuda_impl *c = cx(be);
    HX_ASSERT(s->n_kv_head == kv->n_kv_head && s->d_head == kv->d_head &&
              s->n_head % s->n_kv_head == 0);
    const hx_cuda_kv view = kv_view(kv);
    hx_cuda_attention(&view, layer, stage_blocks(c, kv, seq), q, stage_ints(c, pos, n_tok),
                      n_tok, s->n_head, s->scale, s->sliding_window, s->softcap, out, c->stream);
    op_done(c, "attention");
}

/* ---- matmul and the other ops ---- */

static void cuda_embed(hx_backend *be, const hx_tensor *w, const int32_t *ids, int64_t n_tok,
                       float *out)
{
    cuda_impl *c = cx(be);
    hx_cuda_embed(dev_wmat_of(c, w), stage_ints(c, ids, n_tok), n_tok, out, c->stream);
    op_done(c, "embed");
}

/* out[rows, o0:o1] = a[o0:o1] . x for a in 2-byte dtype `type` ([o1 - o0, n_in] row-major)
 * and x [n_rows, n_in] in the same type; f32 accumulation and output (row stride n_out). */
static void gemm_half(cuda_impl *c, const void *a, const void *x, cudaDataType type,
                      int64_t o0, int64_t o1, int64_t n_in, int64_t n_rows, int64_t n_out,
                      float *out)
{
    const float one = 1.0f, zero = 0.0f;
    CK_BLAS(c->blas->gemm_ex(c->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)(o1 - o0), (int)n_rows,
                         (int)n_in, &one, a, type, (int)n_in, x, type, (int)n_in, &zero,
                         out + o0, CUDA_R_32F, (int)n_out, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
}

static void cuda_matmul(hx_backend *be, const hx_tensor *w, const hx_tensor *bias, const float *x,
                        int64_t n_rows, float *out)
{
    cuda_impl *c = cx(be);
    HX_ASSERT(w->prepared); /* every matmul weight went through `weight` */
    const hx_cuda_wmat *wm = w->prepared;
    const float *b = bias ? dev_floats_of(c, bias) : NULL;
    if (n_rows <= HX_CUDA_GEMV_ROWS) {
        hx_cuda_gemv(wm, x, n_rows, b, out, c->stream);
        op_done(c, "matmul gemv");
        return;
    }
    const int64_t n_in = wm->n_in, n_out = wm->n_out;
    if (wm->dtype == HX_DT_F32) { /* no conversion: single precision, exact */
        const float one = 1.0f, zero = 0.0f;
        CK_BLAS(c->blas->sgemm(c->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_rows,
                            (int)n_in, &one, wm->q, (int)n_in, x, (int)n_in, &zero, out,
                            (int)n_out));
    } else {
        const bool bf16 = wm->dtype == HX_DT_BF16;
        const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
        HX_ASSERT(n_rows * n_in <= c->half_x_elems); /* reserve sized it */
        hx_cuda_to_half(x, n_rows * n_in, c->half_x, bf16, c->stream);
        if (wm->dtype == HX_DT_F16 || bf16) {
            gemm_half(c, wm->q, c->half_x, type, 0, n_out, n_in, n_rows, n_out, out);
        } else {
            const int64_t chunk = c->half_w_elems / n_in;
            HX_ASSERT(chunk >= 1);
            for (int64_t o0 = 0; o0 < n_out; o0 += chunk) {
                const int64_t o1 = o0 + chunk < n_out ? o0 + chunk : n_out;
                hx_cuda_dequant_rows(wm, o0, o1, c->half_w, 0, c->stream);
                gemm_half(c, c->half_w, c->half_x, type, o0, o1, n_in, n_rows, n_out, out);
            }
        }
    }
    if (b) hx_cuda_add_bias(out, b, n_rows, n_out, c->stream);
    op_done(c, "matmul gemm");
}

static void cuda_rmsnorm(hx_backend *be, const float *x, const hx_tensor *w, int64_t n_rows,
                         int64_t d, float eps, float *out)
{
    cuda_impl *c = cx(be);
    hx_cuda_rmsnorm(x, dev_floats_of(c, w), n_rows, d, eps, out, c->stream);
    op_done(c, "rmsnorm");
}

static void cuda_rope(hx_backend *be, float *x, const int32_t *pos, int64_t n_tok, int32_t n_head,
                      int32_t d_head, const hx_rope *rope)
{
    cuda_impl *c = cx(be);
    hx_cuda_rope(x, stage_ints(c, pos, n_tok), n_tok, n_head, d_head,
                 dev_array(c, rope->inv_freq, rope->n_rot / 2), rope->n_rot, rope->mscale,
                 rope->pairs, c->stream);
    op_done(c, "rope");
}

static void cuda_gather_rows(hx_backend *be, const float *src, const int32_t *rows, int64_t n,
                             int64_t d, float *dst)
{
    cuda_impl *c = cx(be);
    hx_cuda_gather_rows(src, stage_ints(c, rows, n), n, d, dst, c->stream);
    op_done(c, "gather_rows");
}

static void cuda_swiglu(hx_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    cuda_impl *c = cx(be);
    hx_cuda_glu(gate, up, n, 0, out, c->stream);
    op_done(c, "swiglu");
}

static void cuda_geglu(hx_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    cuda_impl *c = cx(be);
    hx_cuda_glu(gate, up, n, 1, out, c->stream);
    op_done(c, "geglu");
}

static void cuda_add(hx_backend *be, float *x, const float *y, int64_t n)
{
    cuda_impl *c = cx(be);
    hx_cuda_add(x, y, n, c->stream);
    op_done(c, "add");
}

static void cuda_scale(hx_backend *be, float *x, float s, int64_t n)
{
    cuda_impl *c = cx(be);
    hx_cuda_scale(x, s, n, c->stream);
    op_done(c, "scale");
}

static void cuda_softcap(hx_backend *be, float *x, float cap, int64_t n)
{
    cuda_impl *c = cx(be);
    hx_cuda_softcap(x, cap, n, c->stream);
    op_done(c, "softcap");
}

/* ---- life cycle ---- */

static void cuda_destroy(hx_backend *be)
{
    if (!be) return;
    cuda_impl *c = be->impl;
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream) cudaStreamSynchronize(c->stream);
        double total = 0;
        for (int i = 0; i < c->n_prof; i++) total += c->prof[i].ms;
        for (int i = 0; i < c->n_prof; i++)
            fprintf(stderr, "hearth: cuda profile: %-12s %8lld calls %10.2f ms %5.1f%%\n",
                    c->prof[i].name, (long long)c->prof[i].n, c->prof[i].ms,
                    100.0 * c->prof[i].ms / total);
        for (size_t i = 0; i < c->n_cache; i++)
            if (c->cache[i].owned) wmat_free(&c->cache[i].w);
        hx_free(c->cache);
        cudaFree(c->half_w);
        cudaFree(c->half_x);
        cudaFree(c->arena_d);
        cudaFreeHost(c->arena_h);
        if (c->handle) c->blas->destroy(c->handle);
        if (c->stream) cudaStreamDestroy(c->stream);
        hx_free(c);
    }
    hx_free(be);
}

int hx_cuda_list(hx_gpu_info *out, int max, const char **why)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = no_gpu_reason(e);
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA GPU found";
    for (int i = 0; i < n && i < max; i++) {
        struct cudaDeviceProp p;
        hx_gpu_info *g = &out[i];
        memset(g, 0, sizeof *g);
        g->index = i;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof g->name - 1, p.name);
        g->cc_major = p.major;
        g->cc_minor = p.minor;
        g->n_sm = p.multiProcessorCount;
        size_t f = 0, t = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&f, &t) == cudaSuccess) {
            g->free_bytes = (int64_t)f;
            g->total_bytes = (int64_t)t;
        } else {
            (void)cudaGetLastError();
            g->total_bytes = (int64_t)p.totalGlobalMem;
        }
    }
    return n;
}

hx_status hx_cuda_backend_create(int device, hx_backend **out, hx_err *err)
{
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hx_err_set(err, HX_E_NOTFOUND, "device 'cuda:%d': %s", device,
                          no_gpu_reason(e));
    }
    if (device < 0 || device >= n)
        return hx_err_set(err, HX_E_NOTFOUND, "device 'cuda:%d': this machine has %d CUDA GPU%s",
                          device, n, n == 1 ? "" : "s");
    hx_backend *be = hx_calloc(1, sizeof *be);
    cuda_impl *c = hx_calloc(1, sizeof *c);
    if (!be || !c) {
        hx_free(be);
        hx_free(c);
        return hx_err_set(err, HX_E_NOMEM, "out of memory creating the CUDA backend");
    }
    be->impl = c;
    c->device = device;
    const char *prof = getenv("HEARTH_CUDA_PROFILE");
    c->profile = prof && *prof && strcmp(prof, "0") != 0;
    hx_status st = HX_OK;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        st = cuda_err(err, HX_E_NOTFOUND, "starting the GPU", e);
    else if ((e = cudaHostAlloc((void **)&c->arena_h, ARENA_BYTES, cudaHostAllocDefault)) !=
                 cudaSuccess ||
             (e = cudaMalloc((void **)&c->arena_d, ARENA_BYTES)) != cudaSuccess)
        st = cuda_err(err, HX_E_NOMEM, "staging memory", e);
    else if (!(c->blas = hx_blas_load(err)))
        st = HX_E_NOTFOUND;
    else if (c->blas->create(&c->handle) != CUBLAS_STATUS_SUCCESS ||
             c->blas->set_stream(c->handle, c->stream) != CUBLAS_STATUS_SUCCESS)
        st = hx_err_set(err, HX_E_NOTFOUND, "cuda: cuBLAS could not start");
    if (st != HX_OK) {
        (void)cudaGetLastError();
        cuda_destroy(be);
        return st;
    }
    be->name = "cuda";
    be->reserve = cuda_reserve;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->read = cuda_read;
    be->mem_info = cuda_mem_info;
    be->kv_alloc = cuda_kv_alloc;
    be->kv_free = cuda_kv_free;
    be->kv_copy = cuda_kv_copy;
    be->embed = cuda_embed;
    be->matmul = cuda_matmul;
    be->weight = cuda_weight;
    be->weight_release = cuda_weight_release;
    be->rmsnorm = cuda_rmsnorm;
    be->rope = cuda_rope;
    be->kv_write = cuda_kv_write;
    be->attention = cuda_attention;
    be->gather_rows = cuda_gather_rows;
    be->swiglu = cuda_swiglu;
    be->geglu = cuda_geglu;
    be->moe = NULL; /* mixtures of experts run on the CPU for now (hx_llm_open says so) */
    be->add = cuda_add;
    be->scale = cuda_scale;
    be->softcap = cuda_softcap;
    be->destroy = cuda_destroy;
    *out = be;
    return HX_OK;
}
