/* cuda_backend.c - the ops table on one NVIDIA GPU (cuda_backend.h); kernels behind kernels.h,
 * the op log in op_log.c, uploads in weights.c (cuda_int.h).
 *
 * Memory: matmul weights are uploaded once by `weight` in their file formats (kernels.h reads
 * every format); the other tensors an op names (norm weights, biases, the embedding table, the
 * rope frequencies) are uploaded at their first use and kept, keyed by their host address: a
 * backend serves one model, whose tensors live as long as it does. Activations and the KV pool
 * are plain device allocations.
 *
 * Ordering: every op is recorded and returns; `read` (the logits) runs the step's ops on one
 * stream, as a CUDA graph when the same step was seen before (op_log.c), and waits.
 * The small host arrays ops take (token ids, positions, block tables) are copied at once into a
 * pinned staging arena, which the step copies to its device twin, so the caller may reuse them;
 * the arena restarts after each `read`, and a step that would overflow it runs what it has and
 * waits first. An array equal to one staged since the last restart (a step's positions, passed
 * to every layer) is staged once.
 *
 * Decode's cache writes and attention are recorded per sequence (llama.c: every sequence's
 * writes, then every sequence's attention); the op of each next sequence joins the launch of the
 * one before, each row with its own block table (hx_cuda_rows), so a step of 64 streams is one
 * launch of each a layer rather than 64.
 *
 * Matmuls: up to HX_CUDA_GEMV_ROWS rows (decode) run the fused-dequant GEMV, one pass over the
 * weight. More rows (prefill, large batches) dequantize the weight to f16 in chunks of rows and
 * multiply on the tensor cores through cuBLAS (f16 inputs, f32 accumulation and output).
 *
 * Failures: allocation and start-up failures return errors; a kernel launch or CUDA call that
 * fails mid-step means a broken device or a bug, and aborts with the CUDA message (ops have no
 * error path, as on the CPU). */
#include "backend/cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "backend/kv_quant.h"
#include "backend/moe_route.h"
#include "base/alloc.h"
#include "base/clock.h"

#define HALF_W_ELEMS ((int64_t)32 << 20) /* f16 elements of one dequantized weight chunk */
#define BLOCKS_PAD   64                 /* block tables are staged in multiples of this */
#define BLAS_WS      ((size_t)32 << 20) /* cuBLAS workspace bytes */

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

/* ---- memory ---- */

static void *cuda_alloc(hx_backend *be, size_t bytes)
{
    hx_cuda_enter(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free allocation error */
        return NULL;
    }
    return p;
}

static void cuda_free(hx_backend *be, void *p)
{
    hx_cuda_flush(hx_cuda_enter(be)); /* recorded ops may still use p */
    cudaFree(p);
}

static void cuda_read(hx_backend *be, void *dst, const void *src, size_t n)
{
    cuda_impl *c = hx_cuda_enter(be);
    const double t0 = hx_now_ms();
    if (c->step_prof) CK(cudaEventRecord(c->ev_a, c->stream));
    hx_cuda_flush(c);
    const double t1 = hx_now_ms(); /* launched (a copy to pageable memory would wait) */
    if (c->step_prof) CK(cudaEventRecord(c->ev_b, c->stream));
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    if (c->step_prof) {
        const double t2 = hx_now_ms();
        float gpu = 0.0f;
        CK(cudaEventElapsedTime(&gpu, c->ev_a, c->ev_b));
        if (c->last_read > 0) c->st_host += t0 - c->last_read;
        c->st_launch += t1 - t0;
        c->st_gpu += gpu;
        c->st_wait += t2 - t1;
        c->st_n++;
        c->last_read = t2;
    }
    c->arena_used = 0; /* everything staged has been consumed */
    hx_cuda_forget_staged(c);
    hx_cuda_op_done(c, "read");
}

static void cuda_mem_info(hx_backend *be, int64_t *free_bytes, int64_t *total_bytes)
{
    hx_cuda_enter(be);
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) (void)cudaGetLastError();
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
}

/* Device buffer *p of at least n 2-byte elements (grown, never shrunk). Captured graphs have
 * the old address baked in (it is not part of a step's signature), so growing drops them. */
static hx_status ensure_half(cuda_impl *c, void **p, int64_t *have, int64_t n, hx_err *err)
{
    if (n <= *have) return HX_OK;
    hx_cuda_drop_graphs(c);
    cudaFree(*p);
    *p = NULL;
    *have = 0;
    cudaError_t e = cudaMalloc(p, (size_t)n * 2);
    if (e == cudaSuccess) e = cudaMemset(*p, 0, (size_t)n * 2); /* attention's counters */
    if (e != cudaSuccess) return cuda_err(err, HX_E_NOMEM, "matmul scratch", e);
    *have = n;
    return HX_OK;
}

static hx_status cuda_reserve(hx_backend *be, int64_t max_row, int64_t max_tok, hx_err *err)
{
    cuda_impl *c = hx_cuda_enter(be);
    c->max_tok = max_tok;
    if (max_tok <= HX_CUDA_GEMV_ROWS) return HX_OK; /* every matmul takes the GEMV */
    /* half_x holds a matmul's input: as wide as the widest weight input seen, not max_row (which
     * counts the vocabulary: 256 MiB of f16 at 1,024 rows and 128k entries, for nothing). A
     * wider input met later grows it (cuda_matmul). */
    const int64_t row = c->max_n_in > 0 && c->max_n_in < max_row ? c->max_n_in : max_row;
    hx_status st = ensure_half(c, &c->half_x, &c->half_x_elems, row * max_tok, err);
    const int64_t w = c->max_weight_elems < HALF_W_ELEMS ? c->max_weight_elems : HALF_W_ELEMS;
    return st == HX_OK ? ensure_half(c, &c->half_w, &c->half_w_elems, w, err) : st;
}

/* ---- KV storage ---- */

/* Bytes of K (or V): a tile per (block, layer, kv head) in kv_quant.h's layout. */
static size_t kv_bytes(const hx_kv_store *kv)
{
    return (size_t)kv->n_blocks * (size_t)kv->n_layer * (size_t)kv->n_kv_head *
           hx_kv_tile_bytes(kv->dtype, kv->block_tokens, kv->d_head);
}

static hx_status cuda_kv_alloc(hx_backend *be, hx_kv_store *kv, hx_err *err)
{
    cuda_impl *c = hx_cuda_enter(be);
    const hx_status ok = hx_kv_dtype_check(kv->dtype, kv->d_head, err);
    if (ok != HX_OK) return ok;
    if (kv->n_blocks <= 0 || kv->n_layer <= 0 || kv->n_kv_head <= 0 || kv->block_tokens <= 0 ||
        kv->d_head <= 0 || kv->d_head > 256)
        return hx_err_set(err, HX_E_INVALID, "KV cache of %d blocks (d_head %d) is out of range",
                          kv->n_blocks, kv->d_head);
    if (kv->dtype != HX_KV_F16 && kv->block_tokens % 4 != 0) /* tiles 16-byte aligned */
        return hx_err_set(err, HX_E_INVALID, "a quantized KV cache of %d-token blocks",
                          kv->block_tokens);
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
    hx_cuda_flush(hx_cuda_enter(be));
    cudaFree(kv->k);
    cudaFree(kv->v);
    kv->k = kv->v = NULL;
}

static void cuda_kv_copy(hx_backend *be, const hx_kv_store *kv, int32_t src, int32_t dst);

static hx_cuda_kv kv_view(const hx_kv_store *kv)
{
    return (hx_cuda_kv){.k = kv->k, .v = kv->v, .n_layer = kv->n_layer,
                        .n_kv_head = kv->n_kv_head, .d_head = kv->d_head,
                        .block_tokens = kv->block_tokens, .dtype = (int32_t)kv->dtype};
}

/* The entries of the sequence's block table that positions below n_ctx use, padded. */
static const int32_t *stage_blocks(cuda_impl *c, const hx_kv_store *kv, const hx_kv_seq *seq)
{
    const int64_t n = (seq->n_ctx + kv->block_tokens - 1) / kv->block_tokens;
    const int64_t padded = (n + BLOCKS_PAD - 1) / BLOCKS_PAD * BLOCKS_PAD;
    return hx_cuda_stage(c, seq->blocks, (size_t)n * 4, (size_t)padded * 4);
}

typedef struct {
    void  *dst[2];
    const void *src[2];
    size_t bytes;
} copy_args;

static void run_copy(cuda_impl *c, const void *p)
{
    const copy_args *a = p;
    for (int i = 0; i < 2; i++)
        CK(cudaMemcpyAsync(a->dst[i], a->src[i], a->bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static void cuda_kv_copy(hx_backend *be, const hx_kv_store *kv, int32_t src, int32_t dst)
{
    cuda_impl *c = hx_cuda_enter(be);
    HX_ASSERT(src != dst && src >= 0 && dst >= 0 && src < kv->n_blocks && dst < kv->n_blocks);
    const size_t per = kv_bytes(kv) / (size_t)kv->n_blocks;
    copy_args a;
    memset(&a, 0, sizeof a);
    a.dst[0] = (unsigned char *)kv->k + (size_t)dst * per;
    a.dst[1] = (unsigned char *)kv->v + (size_t)dst * per;
    a.src[0] = (const unsigned char *)kv->k + (size_t)src * per;
    a.src[1] = (const unsigned char *)kv->v + (size_t)src * per;
    a.bytes = per;
    hx_cuda_record(c, "kv_copy", run_copy, &a, sizeof a);
}

typedef struct {
    hx_cuda_kv     kv;
    const int32_t *blocks, *pos;
    const float   *q, *k, *v;
    float         *out, *scratch;
    int8_t        *xq; /* attention: also round the output for the GEMV after (gemv_input) */
    float         *xd;
    int64_t        n_tok;
    int32_t        layer, n_head, window, splits;
    float          scale, softcap;
    /* Decode rows (up to HX_CUDA_GEMV_ROWS of a sequence): each row's table and position, so
     * that the same op of the next sequences joins this launch (kernels.h) */
    bool           use_rows;
    hx_cuda_rows   rows;
} attn_args;

/* The fields cache writes and attention share: the store, the layer, the sequence's staged
 * block table and the rows' staged positions. */
static void attn_common(cuda_impl *c, attn_args *a, const hx_kv_store *kv, int32_t layer,
                        const hx_kv_seq *seq, const int32_t *pos, int64_t n_tok)
{
    memset(a, 0, sizeof *a);
    a->kv = kv_view(kv);
    a->layer = layer;
    a->blocks = stage_blocks(c, kv, seq);
    a->pos = hx_cuda_stage_ints(c, pos, n_tok);
    a->n_tok = n_tok;
}

/* Takes a's rows (its sequence's table, its staged positions) as rows at..at + n_tok of dst. */
static void put_rows(hx_cuda_rows *dst, int64_t at, const attn_args *a)
{
    HX_ASSERT(at + a->n_tok <= HX_CUDA_DEC_ROWS);
    for (int64_t t = 0; t < a->n_tok; t++) {
        dst->tab[at + t] = a->blocks;
        dst->pos[at + t] = a->pos + t;
    }
}

static void *last_op(cuda_impl *c, op_fn fn);
static void *join_last(cuda_impl *c, op_fn fn);

/* The same op of the sequence before in a step's loop (llama.c: every sequence's cache write,
 * then every sequence's attention), when it is the log's last op, takes rows and its rows
 * follow: rows the launch holds in one block of k, v, q and out each, as llama.c lays them. */
static attn_args *rows_before(cuda_impl *c, op_fn fn, const attn_args *a)
{
    attn_args *p = last_op(c, fn);
    return p && p->use_rows && p->n_tok + a->n_tok <= HX_CUDA_DEC_ROWS &&
                   p->kv.k == a->kv.k && p->kv.v == a->kv.v && p->layer == a->layer
               ? p
               : NULL;
}

static void run_kv_write(cuda_impl *c, const void *p)
{
    const attn_args *a = p;
    if (a->use_rows)
        hx_cuda_kv_write_rows(&a->kv, a->layer, &a->rows, a->k, a->v, a->n_tok, c->stream);
    else hx_cuda_kv_write(&a->kv, a->layer, a->blocks, a->pos, a->k, a->v, a->n_tok, c->stream);
}

static void run_attention(cuda_impl *c, const void *p)
{
    const attn_args *a = p;
    if (a->use_rows)
        hx_cuda_attention_rows(&a->kv, a->layer, &a->rows, a->q, a->n_tok, a->n_head, a->scale,
                               a->window, a->softcap, a->scratch, a->out, a->xq, a->xd,
                               a->splits, c->stream);
    else hx_cuda_attention(&a->kv, a->layer, a->blocks, a->q, a->pos, a->n_tok, a->n_head,
                           a->scale, a->window, a->softcap, a->scratch, a->out, a->xq, a->xd,
                           a->splits, c->stream);
}

static void cuda_attention(hx_backend *be, const hx_kv_store *kv, int32_t layer,
                           const hx_kv_seq *seq, const float *q, const int32_t *pos,
                           int64_t n_tok, const hx_attn_shape *s, float *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    HX_ASSERT(s->n_kv_head == kv->n_kv_head && s->d_head == kv->d_head &&
              s->n_head % s->n_kv_head == 0);
    attn_args a;
    attn_common(c, &a, kv, layer, seq, pos, n_tok);
    a.use_rows = n_tok <= HX_CUDA_GEMV_ROWS &&
                 hx_cuda_attention_rows_ok(n_tok, s->n_head, s->d_head);
    const int64_t row = (int64_t)s->n_head * s->d_head;
    const attn_args *p = a.use_rows ? rows_before(c, run_attention, &a) : NULL;
    if (p && !(p->q + p->n_tok * row == q && p->out + p->n_tok * row == out && !p->xq &&
               p->n_head == s->n_head && p->scale == s->scale &&
               p->window == s->sliding_window && p->softcap == s->softcap &&
               hx_cuda_attention_rows_ok(p->n_tok + n_tok, s->n_head, s->d_head)))
        p = NULL;
    const int64_t rows = n_tok + (p ? p->n_tok : 0);
    /* (only decode rows take the split kernel and its scratch) */
    const int64_t need = a.use_rows ? hx_cuda_attention_rows_scratch(rows, s->n_head, s->d_head)
                                    : 0;
    hx_err err = {0};
    const int64_t had = c->att_scratch_elems;
    if (ensure_half(c, &c->att_scratch, &c->att_scratch_elems, 2 * need, &err) != HX_OK)
        hx_cuda_die("attention scratch", err.msg, __FILE__, __LINE__);
    if (c->att_scratch_elems != had) p = NULL; /* growing ran the log: nothing to join */
    a.q = q;
    a.out = out;
    a.scratch = c->att_scratch;
    a.n_head = s->n_head;
    a.window = s->sliding_window;
    a.scale = s->scale;
    a.softcap = s->softcap;
    int64_t keys = 1; /* the most any row attends (a step's signature changes with the split) */
    for (int64_t t = 0; t < n_tok; t++) {
        const int64_t k = s->sliding_window > 0 && pos[t] + 1 > s->sliding_window
                              ? s->sliding_window : pos[t] + 1;
        if (k > keys) keys = k;
    }
    a.splits = hx_cuda_attention_splits(keys);
    attn_args *j = p ? join_last(c, run_attention) : NULL;
    if (j) { /* the sequence before's attention takes these rows */
        put_rows(&j->rows, j->n_tok, &a);
        j->n_tok += n_tok;
        if (a.splits > j->splits) j->splits = a.splits;
        return;
    }
    if (a.use_rows) put_rows(&a.rows, 0, &a);
    hx_cuda_record(c, "attention", run_attention, &a, sizeof a);
}

#define SAMPLE_ROWS HX_SAMPLE_AHEAD_ROWS /* rows one launch draws */

/* ---- matmul and the other ops ---- */

typedef struct {
    hx_cuda_gemv_job job[HX_CUDA_GEMV_SET]; /* the matmul (embed: the table, out), then those
                                               joined to its launch (join_gemv) */
    int64_t          n_jobs;
    const int32_t   *ids;
    const float     *x;
    int64_t          n;
    int8_t          *xq; /* the GEMV over a block format: x rounded (hx_cuda_quantize_x) */
    float           *xd;
    int64_t          x_half; /* GEMM: the half_x the matmul before made still holds x (q, k and
                                v; gate and up), no conversion */
    const void      *w_half; /* GEMM: the weight's f16 copy (keep_dequantized), or NULL */
    const void      *drawn;  /* embed: the draws its HX_TOKEN_DRAWN ids name, or NULL */
    hx_cuda_gemv_post post[HX_CUDA_GEMV_SET]; /* one-row GEMV: the rope and cache write joined
                                                 to it (gemv_post_of) */
} mat_args;

static void run_embed(cuda_impl *c, const void *p)
{
    const mat_args *a = p;
    hx_cuda_embed(&a->job[0].w, a->ids, a->drawn, a->n, a->job[0].out, c->stream);
}

static void cuda_embed(hx_backend *be, const hx_tensor *w, const int32_t *ids, int64_t n_tok,
                       float *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    mat_args a;
    memset(&a, 0, sizeof a);
    a.job[0].w = *hx_cuda_dev_wmat(c, w);
    a.job[0].out = out;
    a.n_jobs = 1;
    a.ids = hx_cuda_stage_ints(c, ids, n_tok);
    a.n = n_tok;
    for (int64_t t = 0; t < n_tok && !a.drawn; t++)
        if (ids[t] < 0) {
            if (!c->drawn_dev || ids[t] < HX_TOKEN_DRAWN(SAMPLE_ROWS - 1))
                hx_cuda_die("embed", "a drawn token id without a draw to name", __FILE__,
                            __LINE__);
            a.drawn = c->drawn_dev;
        }
    hx_cuda_record(c, "embed", run_embed, &a, sizeof a);
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

static void run_matmul(cuda_impl *c, const void *p)
{
    const mat_args *a = p;
    if (a->n <= HX_CUDA_GEMV_ROWS) {
        hx_cuda_gemv(a->job, a->post, (int)a->n_jobs, a->x, a->xq, a->xd, a->n, c->stream);
        return;
    }
    const hx_cuda_wmat *wm = &a->job[0].w;
    float *out = a->job[0].out;
    const int64_t n_rows = a->n, n_in = wm->n_in, n_out = wm->n_out;
    if (wm->dtype == HX_DT_F32) { /* no conversion: single precision, exact */
        const float one = 1.0f, zero = 0.0f;
        CK_BLAS(c->blas->sgemm(c->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_rows,
                               (int)n_in, &one, wm->q, (int)n_in, a->x, (int)n_in, &zero, out,
                               (int)n_out));
    } else {
        const bool bf16 = wm->dtype == HX_DT_BF16;
        const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
        HX_ASSERT(n_rows * n_in <= c->half_x_elems); /* reserve or cuda_matmul sized it */
        if (!a->x_half) hx_cuda_to_half(a->x, n_rows * n_in, c->half_x, bf16, c->stream);
        if (wm->dtype == HX_DT_F16 || bf16 || a->w_half) {
            const void *w16 = a->w_half ? a->w_half : wm->q;
            gemm_half(c, w16, c->half_x, type, 0, n_out, n_in, n_rows, n_out, out);
        } else {
            /* equal chunks, in rows a multiple of 64 where they fit: cuBLAS takes slower
             * kernels for a matrix of, say, 2,340 rows (measured: 4096 x 14336 in chunks of
             * 2,340 and 1,756 rows ran at ~240 TFLOP/s, its neighbours at ~500) */
            const int64_t most = c->half_w_elems / n_in, parts = (n_out + most - 1) / most;
            int64_t chunk = ((n_out + parts - 1) / parts + 63) / 64 * 64;
            if (chunk > most) chunk = most >= 64 ? most / 64 * 64 : most;
            HX_ASSERT(chunk >= 1);
            for (int64_t o0 = 0; o0 < n_out; o0 += chunk) {
                const int64_t o1 = o0 + chunk < n_out ? o0 + chunk : n_out;
                hx_cuda_dequant_rows(wm, o0, o1, c->half_w, 0, c->stream);
                gemm_half(c, c->half_w, c->half_x, type, o0, o1, n_in, n_rows, n_out, out);
            }
        }
    }
    if (a->job[0].bias) hx_cuda_add_bias(out, a->job[0].bias, n_rows, n_out, c->stream);
}

/* The row and element-wise ops share one argument record. */
typedef struct {
    const float   *x, *y, *w;
    float         *out;
    const int32_t *idx;
    int64_t        n, d;
    float          f;
    int32_t        i0, i1, i2, i3, i4, layer;
    float         *out2; /* rope: a second tensor (i4 heads) rotated in the same launch */
    hx_cuda_kv     kv;   /* rope: with kv.k set, out2 is K, stored with v2 in the cache */
    const int32_t *blocks;
    const float   *v2;
    int8_t        *xq; /* rmsnorm, glu: also round the output for the GEMV after (gemv_input) */
    float         *xd;
    float         *tab; /* rope: row 0's rotation left for the GEMVs' posts (rope_tab) */
} row_args;

static void run_rmsnorm(cuda_impl *c, const void *p);
static void run_glu(cuda_impl *c, const void *p);

static void run_quantize_x(cuda_impl *c, const void *p)
{
    const mat_args *a = p;
    hx_cuda_quantize_x(a->x, a->n, a->xq, a->xd, c->stream);
}

/* The GEMV over a block format reads x rounded to 16-bit integers (kernels.h): the rows are
 * rounded by an op of their own, which the matmuls right after with the same input (q, k and
 * v; gate and up) skip, as long as none of them wrote over it. */
static void gemv_input(cuda_impl *c, mat_args *a)
{
    const int64_t n = a->n * a->job[0].w.n_in;
    const int64_t q_bytes = (2 * n + 15) & ~(int64_t)15; /* two bytes a value */
    hx_err err = {0};
    const void *had = c->xq;
    if (ensure_half(c, &c->xq, &c->xq_elems, (q_bytes + n / 32 * 4) / 2, &err) != HX_OK)
        hx_cuda_die("GEMV scratch", err.msg, __FILE__, __LINE__);
    if (c->xq != had) c->xq_of = NULL;
    a->xq = c->xq;
    a->xd = (float *)(void *)((char *)c->xq + q_bytes);
    if (c->xq_of == a->x && c->xq_n == n) return;
    if (c->n_ops > 0) { /* the op just before wrote x: it rounds it too */
        const op_rec *last = &c->ops[c->n_ops - 1];
        void *args = c->op_args + last->off;
        row_args *r = args;
        attn_args *t = args;
        if ((last->fn == run_rmsnorm || last->fn == run_glu) && r->out == a->x &&
            (last->fn == run_rmsnorm ? r->n * r->d : r->n) == n) {
            r->xq = a->xq;
            r->xd = a->xd;
            return;
        }
        /* decode attention rounds as it merges its partial states (kernels.h) */
        if (last->fn == run_attention && t->out == a->x && t->kv.d_head % 32 == 0 &&
            t->n_tok * t->n_head * t->kv.d_head == n && t->use_rows) {
            t->xq = a->xq;
            t->xd = a->xd;
            return;
        }
    }
    mat_args q = *a;
    q.n = n;
    hx_cuda_record(c, "quantize_x", run_quantize_x, &q, sizeof q);
}

static bool overlap(const float *a, int64_t na, const float *b, int64_t nb)
{
    return a < b + nb && b < a + na;
}

/* The argument record of the log's last op when that op is fn's; else NULL. */
static void *last_op(cuda_impl *c, op_fn fn)
{
    return c->n_ops > 0 && c->ops[c->n_ops - 1].fn == fn ? c->op_args + c->ops[c->n_ops - 1].off
                                                         : NULL;
}

/* last_op, for an op about to join that op's launch. The caller then either joins (the launch
 * writes more) or records an op of its own, so as hx_cuda_record() does, xq stops counting as a
 * copy of any rows (cuda_matmul re-sets it after a GEMV). */
static void *join_last(cuda_impl *c, op_fn fn)
{
    void *p = last_op(c, fn);
    if (p) c->xq_of = NULL;
    return p;
}

/* Whether x [n] overlaps the output of any job of the launch p. */
static bool hits_outputs(const mat_args *p, const float *x, int64_t n)
{
    for (int64_t k = 0; k < p->n_jobs; k++)
        if (overlap(x, n, p->job[k].out, p->n * p->job[k].w.n_out)) return true;
    return false;
}

/* The GEMV just before in the log, when it is the last op (join_last). */
static mat_args *last_gemv(cuda_impl *c)
{
    mat_args *p = join_last(c, run_matmul);
    return p && p->n <= HX_CUDA_GEMV_ROWS ? p : NULL;
}

/* Joins a GEMV to the launch of the op just before when that is a GEMV of the same rows of x,
 * weights of the same dtype and n_in (q, k and v; gate and up) and room for another job, and no
 * output overlaps x or another's output: one launch instead of three, whose small matrices
 * (k and v) no longer leave most of the GPU idle alone. */
static bool join_gemv(cuda_impl *c, const mat_args *a)
{
    mat_args *p = last_gemv(c);
    const hx_cuda_gemv_job *j = &a->job[0];
    if (!p || p->n != a->n || p->x != a->x || p->xq != a->xq || p->xd != a->xd ||
        p->n_jobs == HX_CUDA_GEMV_SET || p->job[0].w.dtype != j->w.dtype ||
        p->job[0].w.n_in != j->w.n_in ||
        overlap(j->out, a->n * j->w.n_out, a->x, a->n * j->w.n_in) ||
        hits_outputs(p, j->out, a->n * j->w.n_out))
        return false;
    for (int64_t k = 0; k < p->n_jobs; k++) /* (a post chose its launch's kernel too) */
        if (p->job[k].acc || p->post[k].pos) return false;
    p->job[p->n_jobs++] = *j;
    return true;
}

/* The post of the job writing out [n] in a one-row GEMV launch just before: the log's last op,
 * or the one before it when the last is a one-row GEMV that neither reads nor writes out (v of
 * another dtype than q and k, as in Q4_K_M files). The rope and the cache write after it join it
 * (hx_cuda_gemv_post: a launch fewer a decode layer). NULL where there is none, or that job adds
 * into a residual; HEARTH_CUDA_GEMV_POST=0: never. *launch (when not NULL): that launch. */
static hx_cuda_gemv_post *gemv_post_of(cuda_impl *c, const float *out, int64_t n,
                                       mat_args **launch)
{
    for (size_t back = 1; c->gemv_post && back <= 2 && back <= c->n_ops; back++) {
        const op_rec *r = &c->ops[c->n_ops - back];
        mat_args *p = (mat_args *)(void *)(c->op_args + r->off);
        if (r->fn != run_matmul || p->n != 1) return NULL;
        for (int64_t k = 0; k < p->n_jobs; k++) {
            if (p->job[k].out == out && p->job[k].w.n_out == n && !p->job[k].acc) {
                c->xq_of = NULL; /* as join_last: the launch writes more */
                if (launch) *launch = p;
                return &p->post[k];
            }
        }
        if (overlap(out, n, p->x, p->job[0].w.n_in) || hits_outputs(p, out, n)) return NULL;
    }
    return NULL;
}

static void cuda_matmul(hx_backend *be, const hx_tensor *w, const hx_tensor *bias, const float *x,
                        int64_t n_rows, float *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    HX_ASSERT(w->prepared); /* every matmul weight went through `weight` */
    mat_args a;
    memset(&a, 0, sizeof a);
    const hx_cuda_wmat *wm = w->prepared;
    a.job[0].w = *wm;
    a.job[0].bias = bias ? hx_cuda_dev_floats(c, bias) : NULL;
    a.job[0].out = out;
    a.n_jobs = 1;
    a.x = x;
    a.n = n_rows;
    const bool gemv = n_rows <= HX_CUDA_GEMV_ROWS, int8 = gemv && hx_cuda_gemv_int8(wm->dtype);
    if (!gemv) a.w_half = hx_cuda_uploaded_of(w)->half;
    hx_err err = {0}; /* (grown before last_op: growing runs the log, so no GEMM is before) */
    if (!gemv && wm->dtype != HX_DT_F32 &&
        ensure_half(c, &c->half_x, &c->half_x_elems, n_rows * wm->n_in, &err) != HX_OK)
        hx_cuda_die("matmul scratch", err.msg, __FILE__, __LINE__);
    if (int8) gemv_input(c, &a);
    const mat_args *p = gemv || wm->dtype == HX_DT_F32 ? NULL : last_op(c, run_matmul);
    if (p) { /* a GEMM right before: of the same x? */
        const int32_t dt = p->job[0].w.dtype;
        a.x_half = p->n == n_rows && p->x == x && p->job[0].w.n_in == wm->n_in &&
                   dt != HX_DT_F32 && (dt == HX_DT_BF16) == (wm->dtype == HX_DT_BF16) &&
                   !overlap(p->job[0].out, n_rows * p->job[0].w.n_out, x, n_rows * wm->n_in);
    }
    if (!gemv || !join_gemv(c, &a))
        hx_cuda_record(c, gemv ? "matmul gemv" : "matmul gemm", run_matmul, &a, sizeof a);
    if (int8 && !overlap(out, n_rows * wm->n_out, x, n_rows * wm->n_in)) {
        c->xq_of = x; /* still what xq holds after this op */
        c->xq_n = n_rows * wm->n_in;
    }
}

static void run_rmsnorm(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    hx_cuda_rmsnorm(a->x, a->w, a->n, a->d, a->f, a->out, a->xq, a->xd, c->stream);
}

static void cuda_rmsnorm(hx_backend *be, const float *x, const hx_tensor *w, int64_t n_rows,
                         int64_t d, float eps, float *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    row_args a;
    memset(&a, 0, sizeof a);
    a.x = x;
    a.w = hx_cuda_dev_floats(c, w);
    a.n = n_rows;
    a.d = d;
    a.f = eps;
    a.out = out;
    hx_cuda_record(c, "rmsnorm", run_rmsnorm, &a, sizeof a);
}

static void run_rope(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    hx_cuda_rope(a->out, a->i0, a->out2, a->i4, a->idx, a->n, a->i1, a->w, a->i2, a->f, a->i3,
                 a->kv.k ? &a->kv : NULL, a->layer, a->blocks, a->v2, a->tab, c->stream);
}

static void cuda_rope(hx_backend *be, float *x, const int32_t *pos, int64_t n_tok, int32_t n_head,
                      int32_t d_head, const hx_rope *rope)
{
    cuda_impl *c = hx_cuda_enter(be);
    row_args a;
    memset(&a, 0, sizeof a);
    a.out = x;
    a.idx = hx_cuda_stage_ints(c, pos, n_tok);
    a.n = n_tok;
    a.i0 = n_head;
    a.i1 = d_head;
    a.w = hx_cuda_dev_array(c, rope->inv_freq, rope->n_rot / 2);
    a.i2 = rope->n_rot;
    a.f = rope->mscale;
    a.i3 = rope->pairs;
    /* Right after the one-row GEMV that wrote x (q or k, in the q/k/v launch): that GEMV
     * rotates its rows as it writes them, with pairs (2i, 2i + 1), or (i, i + d_head / 2) over
     * whole heads where the streamed GEMV takes the launch (its blocks' rows then pair up). */
    mat_args *m = NULL;
    const bool split = !a.i3;
    hx_cuda_gemv_post *g = n_tok == 1 && d_head % (split ? 8 : 2) == 0 && a.i2 % 2 == 0
                               ? gemv_post_of(c, x, n_head * d_head, &m)
                               : NULL;
    if (g && !g->inv_freq && !g->cache &&
        (!split || (a.i2 == d_head && hx_cuda_gemv_streams(m->job, (int)m->n_jobs, 1)))) {
        g->pos = a.idx;
        g->inv_freq = a.w;
        g->mscale = a.f;
        g->half = a.i2 / 2;
        g->d_head = d_head;
        g->split = split;
        /* the step's first rope kernel left this rotation's angles (rope_tab) */
        if (c->tab_pos == a.idx && c->tab_w == a.w && c->tab_f == a.f && c->tab_half == g->half)
            g->tab = c->rope_tab;
        return;
    }
    /* Right after the rope of q with the same positions and rotation: k joins its launch. */
    row_args *p = join_last(c, run_rope);
    if (p && !p->out2 && p->idx == a.idx && p->n == a.n && p->i1 == a.i1 && p->w == a.w &&
        p->i2 == a.i2 && p->f == a.f && p->i3 == a.i3 &&
        !overlap(x, n_tok * n_head * d_head, p->out, p->n * p->i0 * p->i1)) {
        p->out2 = x;
        p->i4 = n_head;
        return;
    }
    /* The step's first rope kernel of one row leaves its angles for the GEMVs' posts of the
     * layers after it (each would compute them again in double before its wait, ~1.2 us on the
     * path to a layer's q/k/v GEMV on an H100: bench/gpu/timeline.py). */
    if (n_tok == 1 && !c->tab_pos && !c->profile && a.i2 / 2 <= ROPE_TAB_PAIRS) {
        a.tab = c->rope_tab;
        c->tab_pos = a.idx;
        c->tab_w = a.w;
        c->tab_f = a.f;
        c->tab_half = a.i2 / 2;
    }
    hx_cuda_record(c, "rope", run_rope, &a, sizeof a);
}

static void cuda_kv_write(hx_backend *be, hx_kv_store *kv, int32_t layer, const hx_kv_seq *seq,
                          const int32_t *pos, const float *k, const float *v, int64_t n_tok)
{
    cuda_impl *c = hx_cuda_enter(be);
    attn_args a;
    attn_common(c, &a, kv, layer, seq, pos, n_tok);
    a.k = k;
    a.v = v;
    /* Right after the one-row GEMV that wrote k and v (and rotated k): it stores them. */
    hx_cuda_gemv_post *gk =
        kv->dtype == HX_KV_F16 && n_tok == 1 ? gemv_post_of(c, k, kv->kv_dim, NULL) : NULL;
    hx_cuda_gemv_post *gv = gk ? gemv_post_of(c, v, kv->kv_dim, NULL) : NULL;
    if (gv && gv != gk && !gk->cache && !gv->cache && !gv->inv_freq &&
        (!gk->pos || gk->pos == a.pos)) {
        for (int side = 0; side < 2; side++) {
            hx_cuda_gemv_post *g = side ? gv : gk;
            g->pos = a.pos;
            g->d_head = kv->d_head;
            g->cache = side ? a.kv.v : a.kv.k;
            g->kv = a.kv;
            g->layer = layer;
            g->blocks = a.blocks;
        }
        return;
    }
    /* Right after the rope that rotated these rows of K (joined to q's): it stores them (f16:
     * the rope's threads are one a pair, and a quantized group needs a warp of its own). */
    row_args *p = kv->dtype == HX_KV_F16 ? join_last(c, run_rope) : NULL;
    const int64_t kvd = n_tok * kv->kv_dim;
    if (p && p->out2 == k && !p->kv.k && p->idx == a.pos && p->n == n_tok &&
        p->i4 == kv->n_kv_head && p->i1 == kv->d_head && !overlap(v, kvd, k, kvd) &&
        !overlap(v, kvd, p->out, n_tok * p->i0 * p->i1)) {
        p->kv = a.kv;
        p->layer = layer;
        p->blocks = a.blocks;
        p->v2 = v;
        return;
    }
    a.use_rows = n_tok <= HX_CUDA_GEMV_ROWS;
    attn_args *j = a.use_rows ? rows_before(c, run_kv_write, &a) : NULL;
    if (j && j->k + j->n_tok * kv->kv_dim == k && j->v + j->n_tok * kv->kv_dim == v) {
        c->xq_of = NULL; /* as hx_cuda_record() would */
        put_rows(&j->rows, j->n_tok, &a);
        j->n_tok += n_tok;
        return;
    }
    if (a.use_rows) put_rows(&a.rows, 0, &a);
    hx_cuda_record(c, "kv_write", run_kv_write, &a, sizeof a);
}

static void run_gather(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    hx_cuda_gather_rows(a->x, a->idx, a->n, a->d, a->out, c->stream);
}

static void cuda_gather_rows(hx_backend *be, const float *src, const int32_t *rows, int64_t n,
                             int64_t d, float *dst)
{
    cuda_impl *c = hx_cuda_enter(be);
    row_args a;
    memset(&a, 0, sizeof a);
    a.x = src;
    a.idx = hx_cuda_stage_ints(c, rows, n);
    a.n = n;
    a.d = d;
    a.out = dst;
    hx_cuda_record(c, "gather_rows", run_gather, &a, sizeof a);
}

/* ---- mixture of experts ----
 *
 * Routing needs the router's logits on the host: the log runs up to them and they come back (a
 * few dozen floats a row), the rows are routed and sorted by expert as on the CPU (moe_route.h),
 * and each chosen expert runs over its rows with this backend's own ops: the rows gathered, the
 * expert's gate, up and down matmuls (GEMVs for a decode step's rows, cuBLAS for a prompt's),
 * its output added, weighted, into the rows (experts in ascending id, as on the CPU). So a step
 * of such a model waits for the GPU once a layer, and as its experts change from step to step
 * it is not replayed as a graph. moe_routed routes a decode step's rows on the device instead,
 * with no wait, where the mixture has no shared expert. */

static void run_zero(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    CK(cudaMemsetAsync(a->out, 0, (size_t)a->n * sizeof(float), c->stream));
}

static void run_scatter_add(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    hx_cuda_scatter_add(a->out, a->x, a->idx, a->w, a->n, a->d, c->stream);
}

/* out[rows[i]] += w[i] * y[i] for n rows of d; rows (distinct) and w are host arrays. */
static void scatter_add(cuda_impl *c, float *out, const float *y, const int32_t *rows,
                        const float *w, int64_t n, int64_t d)
{
    row_args a;
    memset(&a, 0, sizeof a);
    a.out = out;
    a.x = y;
    a.idx = hx_cuda_stage_ints(c, rows, n);
    a.w = hx_cuda_stage(c, w, (size_t)n * sizeof *w, (size_t)n * sizeof *w);
    a.n = n;
    a.d = d;
    hx_cuda_record(c, "scatter_add", run_scatter_add, &a, sizeof a);
}

/* The routed moe op's arguments: routing, the experts' GEMVs and their sum, all on the device. */
typedef struct {
    const float  *router, *x;
    float        *out;
    hx_cuda_wmat *tab[3];
    hx_cuda_wmat  like[3];
    int32_t       n_expert, k, norm, act;
    int64_t       n_tok, d, d_ff;
    /* device scratch (moe_dev): ids, w [P = n_tok k]; x rounded; g, u [P, d_ff]; g rounded;
     * y [P, d] */
    int32_t      *ids;
    float        *w, *xd, *g, *u, *hd, *y;
    int8_t       *xq, *hq;
} moe_args;

static void run_moe_routed(cuda_impl *c, const void *p)
{
    const moe_args *a = p;
    const int64_t P = a->n_tok * a->k;
    hx_cuda_moe_route(a->router, a->n_tok, a->n_expert, a->k, a->norm, a->ids, a->w, c->stream);
    hx_cuda_quantize_x(a->x, a->n_tok * a->d, a->xq, a->xd, c->stream);
    hx_cuda_gemv_routed(a->tab[0], &a->like[0], a->ids, P, a->k, a->xq, a->xd, a->n_tok, a->g,
                        c->stream);
    hx_cuda_gemv_routed(a->tab[1], &a->like[1], a->ids, P, a->k, a->xq, a->xd, a->n_tok, a->u,
                        c->stream);
    hx_cuda_glu(a->g, a->u, P * a->d_ff, a->act, a->g, a->hq, a->hd, c->stream);
    hx_cuda_gemv_routed(a->tab[2], &a->like[2], a->ids, P, 1, a->hq, a->hd, P, a->y, c->stream);
    hx_cuda_moe_combine(a->y, a->w, a->n_tok, a->k, a->d, a->out, c->stream);
}

/* The next 16-byte aligned piece of `bytes` of a scratch buffer at offset *off of base (NULL:
 * only counting). */
static void *take(unsigned char *base, size_t *off, size_t bytes)
{
    void *p = base ? base + *off : NULL;
    *off += (bytes + 15) & ~(size_t)15;
    return p;
}

/* Places a's device arrays for its n_tok rows from base on; returns the bytes they span (from
 * a NULL base: the size to allocate). */
static size_t moe_layout(moe_args *a, unsigned char *base)
{
    const int64_t P = a->n_tok * a->k, F = a->d_ff, n_x = a->n_tok * a->d;
    size_t off = 0;
    a->ids = take(base, &off, (size_t)P * 4);
    a->w = take(base, &off, (size_t)P * 4);
    a->xq = take(base, &off, (size_t)n_x * 2);
    a->xd = take(base, &off, (size_t)(n_x / 32) * 4);
    a->g = take(base, &off, (size_t)(P * F) * 4);
    a->u = take(base, &off, (size_t)(P * F) * 4);
    a->hq = take(base, &off, (size_t)(P * F) * 2);
    a->hd = take(base, &off, (size_t)(P * F / 32) * 4);
    a->y = take(base, &off, (size_t)(P * a->d) * 4);
    return off;
}

/* A decode-sized step of a mixture without a shared expert, routed on the device: the route,
 * then each (row, choice) pair's expert as one GEMV launch over all pairs for gate, up and down,
 * then the weighted sum, with no wait for the host, so the step stays one graph (OLMoE-1B-7B's
 * decode 4x the host-routed one's on an H100). false when it does not apply (the host routes
 * then); HEARTH_CUDA_MOE_DEVICE=0 turns it off (read at each call, as the tests flip it). */
static bool moe_routed(cuda_impl *c, const hx_moe *m, const float *router, const float *x,
                       int64_t n_tok, int64_t d, float *out)
{
    if (hx_cuda_switched_off("HEARTH_CUDA_MOE_DEVICE") || n_tok > HX_CUDA_GEMV_ROWS ||
        m->sh_gate || m->n_used > 32 || m->n_expert > HX_CUDA_MOE_EXPERTS || d % 32 ||
        m->d_ff % 32)
        return false;
    const moe_tables *t = hx_cuda_moe_tables(c, m);
    if (!t || t->like[0].n_in != d || t->like[0].n_out != m->d_ff || t->like[2].n_in != m->d_ff ||
        t->like[2].n_out != d)
        return false;
    moe_args a;
    memset(&a, 0, sizeof a);
    a.router = router, a.x = x, a.out = out;
    for (int k = 0; k < 3; k++) a.tab[k] = t->tab[k], a.like[k] = t->like[k];
    a.n_expert = m->n_expert, a.k = m->n_used, a.norm = m->norm_topk, a.act = m->geglu;
    a.d = d, a.d_ff = m->d_ff;
    /* sized for the most rows at once: growing drops the captured graphs */
    a.n_tok = HX_CUDA_GEMV_ROWS;
    const size_t bytes = moe_layout(&a, NULL);
    hx_err err = {0};
    if (ensure_half(c, &c->moe_dev, &c->moe_dev_elems, (int64_t)(bytes + 1) / 2, &err) != HX_OK)
        hx_cuda_die("moe scratch", err.msg, __FILE__, __LINE__);
    a.n_tok = n_tok;
    moe_layout(&a, c->moe_dev);
    hx_cuda_record(c, "moe routed", run_moe_routed, &a, sizeof a);
    return true;
}

static void cuda_moe(hx_backend *be, const hx_moe *m, const float *router, const float *x,
                     int64_t n_tok, int64_t d_model, float *work, float *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    if (moe_routed(c, m, router, x, n_tok, d_model, out)) return;
    const int64_t T = n_tok, d = d_model, k = m->n_used, E = m->n_expert;
    const int64_t d_ff = m->d_ff > m->d_ff_sh ? m->d_ff : m->d_ff_sh;
    /* device work: xs [T, d] | g, u [T, d_ff] | y [T, d] */
    float *xs = work, *g = xs + T * d, *u = g + T * d_ff, *y = u + T * d_ff;
    /* host: logits [T, E] | ids, w, list [T, k] | off [E + 1] | rows, ws [T] | with a shared
     * expert: x [T, d] and its gate's vector [d] */
    const size_t need = (size_t)(T * E + 3 * T * k + E + 1 + 2 * T) * 4 +
                        (m->sh_gate ? (size_t)(T * d + d) * 4 : 0);
    if (need > c->moe_host_bytes) {
        void *p = hx_realloc(c->moe_host, need);
        if (!p)
            hx_cuda_die("host allocation", "out of memory for expert routing", __FILE__, __LINE__);
        c->moe_host = p;
        c->moe_host_bytes = need;
    }
    float *lg = c->moe_host, *w = lg + T * E;
    int32_t *ids = (int32_t *)(w + T * k), *list = ids + T * k, *off = list + T * k;
    int32_t *rows = off + E + 1;
    float *ws = (float *)(rows + T), *xh = ws + T, *sh = xh + T * d;
    cuda_read(be, lg, router, (size_t)(T * E) * sizeof *lg);
    hx_moe_plan(m, lg, T, ids, w, off, list);
    row_args z;
    memset(&z, 0, sizeof z);
    z.out = out;
    z.n = T * d;
    hx_cuda_record(c, "moe zero", run_zero, &z, sizeof z);
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = off[e + 1] - off[e];
        if (n == 0) continue;
        for (int64_t i = 0; i < n; i++) {
            const int32_t slot = list[off[e] + i];
            rows[i] = (int32_t)(slot / k);
            ws[i] = w[slot];
        }
        cuda_gather_rows(be, x, rows, n, d, xs);
        hx_moe_expert(be, m->gate[e], m->up[e], m->down[e], m->geglu, m->d_ff, xs, n, g, u, y);
        scatter_add(c, out, y, rows, ws, n, d);
    }
    if (!m->sh_gate) return;
    /* the shared expert, scaled per row by sigmoid(x . sh_inp), a dot product on the host */
    cuda_read(be, xh, x, (size_t)(T * d) * sizeof *xh);
    hx_moe_shared_gate(m, xh, T, d, sh, ws);
    for (int64_t t = 0; t < T; t++) rows[t] = (int32_t)t;
    hx_moe_expert(be, m->sh_gate, m->sh_up, m->sh_down, m->geglu, m->d_ff_sh, x, T, g, u, y);
    scatter_add(c, out, y, rows, ws, T, d);
}

static void run_glu(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    hx_cuda_glu(a->x, a->y, a->n, a->i0, a->out, a->xq, a->xd, c->stream);
}

static void glu(hx_backend *be, const float *gate, const float *up, int64_t n, int act, float *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    row_args a;
    memset(&a, 0, sizeof a);
    a.x = gate;
    a.y = up;
    a.n = n;
    a.i0 = act;
    a.out = out;
    hx_cuda_record(c, act ? "geglu" : "swiglu", run_glu, &a, sizeof a);
}

static void cuda_swiglu(hx_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    glu(be, gate, up, n, 0, out);
}

static void cuda_geglu(hx_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    glu(be, gate, up, n, 1, out);
}

/* add (i0 0), scale (1) and softcap (2) of n elements of x in place. */
static void run_elementwise(cuda_impl *c, const void *p)
{
    const row_args *a = p;
    if (a->i0 == 0) hx_cuda_add(a->out, a->y, a->n, c->stream);
    else if (a->i0 == 1) hx_cuda_scale(a->out, a->f, a->n, c->stream);
    else hx_cuda_softcap(a->out, a->f, a->n, c->stream);
}

static void elementwise(hx_backend *be, const char *name, int kind, float *x, const float *y,
                        float f, int64_t n)
{
    cuda_impl *c = hx_cuda_enter(be);
    row_args a;
    memset(&a, 0, sizeof a);
    a.out = x;
    a.y = y;
    a.f = f;
    a.n = n;
    a.i0 = kind;
    hx_cuda_record(c, name, run_elementwise, &a, sizeof a);
}

/* x += y. Right after the GEMV that wrote y (the attention output and MLP projections), the
 * GEMV adds it as it writes (its job's acc) when x is none of its inputs or outputs. */
static void cuda_add(hx_backend *be, float *x, const float *y, int64_t n)
{
    cuda_impl *c = hx_cuda_enter(be);
    mat_args *p = last_gemv(c);
    hx_cuda_gemv_job *j = p ? &p->job[p->n_jobs - 1] : NULL;
    if (j && j->out == y && !j->acc && !p->post[p->n_jobs - 1].pos && p->n * j->w.n_out == n &&
        !overlap(x, n, p->x, p->n * j->w.n_in) && !hits_outputs(p, x, n)) {
        j->acc = x;
        return;
    }
    elementwise(be, "add", 0, x, y, 0.0f, n);
}

static void cuda_scale(hx_backend *be, float *x, float s, int64_t n)
{
    elementwise(be, "scale", 1, x, NULL, s, n);
}

static void cuda_softcap(hx_backend *be, float *x, float cap, int64_t n)
{
    elementwise(be, "softcap", 2, x, NULL, cap, n);
}

/* ---- sampling ---- */

_Static_assert(HX_CUDA_DRAW_TOP_K == HX_SAMPLE_TOP_K && HX_CUDA_DRAW_N_TOP == HX_SAMPLE_N_TOP,
               "the kernels draw what backend.h promises");
#define EDITS_PAD    64 /* edits are staged in multiples of this (a stable step signature) */

typedef struct {
    float               *logits;
    const hx_cuda_draw  *draws;
    const hx_cuda_edit  *edits;
    void                *scratch;
    hx_cuda_drawn       *out;
    int64_t              n, n_vocab, n_edits;
} sample_args;

static void run_sample(cuda_impl *c, const void *p)
{
    const sample_args *a = p;
    hx_cuda_sample(a->logits, a->n, a->n_vocab, a->draws, a->edits, a->n_edits, a->scratch, a->out,
                   c->stream);
}

/* The rows' edits as one array staged padded (NULL when there are none), gathered in a host
 * buffer that grows to the most a step has had (a decode step allocates nothing after). */
static const hx_cuda_edit *stage_edits(cuda_impl *c, const hx_sample_row *rows, int64_t m,
                                       int64_t *n_padded)
{
    int64_t n = 0;
    for (int64_t i = 0; i < m; i++) n += rows[i].top_k > 0 ? rows[i].n_edits : 0;
    *n_padded = (n + EDITS_PAD - 1) / EDITS_PAD * EDITS_PAD;
    if (n == 0) return NULL;
    if (n > c->smp_edits_cap) {
        hx_cuda_edit *e = hx_realloc(c->smp_edits, (size_t)*n_padded * sizeof *e);
        if (!e) hx_cuda_die("host allocation", "out of memory for the sampling edits", __FILE__,
                         __LINE__);
        c->smp_edits = e;
        c->smp_edits_cap = *n_padded;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < m; i++)
        for (int32_t j = 0; rows[i].top_k > 0 && j < rows[i].n_edits; j++) {
            const hx_sample_edit *x = &rows[i].edits[j];
            c->smp_edits[k++] = (hx_cuda_edit){(int32_t)i + 1, x->id, x->bias, x->count};
        }
    return hx_cuda_stage(c, c->smp_edits, (size_t)n * sizeof *c->smp_edits,
                 (size_t)*n_padded * sizeof *c->smp_edits);
}

/* Records the draws of rows[0..m) (m <= SAMPLE_ROWS) of logits: their settings, numbers and
 * edits staged like any host array, so a replayed step draws with the new ones. Returns where
 * the draws will be (device memory), or NULL when no row is drawn. */
static hx_cuda_drawn *record_draws(cuda_impl *c, float *logits, int64_t m, int64_t n_vocab,
                                   const hx_sample_row *rows)
{
    hx_cuda_draw d[SAMPLE_ROWS];
    memset(d, 0, sizeof d);
    bool any = false;
    for (int64_t i = 0; i < m; i++) {
        const hx_sample_row *r = &rows[i];
        if (r->top_k <= 0) continue;
        d[i] = (hx_cuda_draw){r->temperature, r->top_k, r->top_p, r->min_p, r->u, r->logprobs,
                              r->n_top, r->repeat_penalty, r->presence_penalty,
                              r->frequency_penalty, 0};
        any = true;
    }
    if (!any) return NULL;
    const size_t cand = hx_cuda_sample_scratch(SAMPLE_ROWS, n_vocab);
    hx_err err = {0};
    if (ensure_half(c, &c->smp_scratch, &c->smp_scratch_elems,
                    (int64_t)(cand + sizeof(hx_cuda_drawn[SAMPLE_ROWS]) + 1) / 2,
                    &err) != HX_OK)
        hx_cuda_die("sampling scratch", err.msg, __FILE__, __LINE__);
    sample_args a;
    memset(&a, 0, sizeof a);
    a.logits = logits;
    a.draws = hx_cuda_stage(c, d, (size_t)m * sizeof *d, (size_t)m * sizeof *d);
    a.edits = stage_edits(c, rows, m, &a.n_edits);
    a.scratch = c->smp_scratch;
    a.out = (hx_cuda_drawn *)((unsigned char *)c->smp_scratch + cand);
    a.n = m;
    a.n_vocab = n_vocab;
    hx_cuda_record(c, "sample", run_sample, &a, sizeof a);
    return a.out;
}

/* The drawn rows of got[0..m) as backend.h's results. */
static void put_draws(const hx_cuda_drawn *got, const hx_sample_row *rows, int64_t m,
                      hx_sample_out *out)
{
    for (int64_t i = 0; i < m; i++) {
        if (rows && rows[i].top_k <= 0) continue;
        out[i].token = got[i].token;
        out[i].logprob = got[i].logprob;
        memcpy(out[i].top_ids, got[i].top_ids, sizeof out[i].top_ids);
        memcpy(out[i].top_logprobs, got[i].top_logprobs, sizeof out[i].top_logprobs);
    }
}

/* The step runs at the read of the draws. */
static void cuda_sample(hx_backend *be, float *logits, int64_t n, int64_t n_vocab,
                        const hx_sample_row *rows, hx_sample_out *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    for (int64_t i0 = 0; i0 < n; i0 += SAMPLE_ROWS) {
        const int64_t m = n - i0 < SAMPLE_ROWS ? n - i0 : SAMPLE_ROWS;
        const hx_cuda_drawn *dev = record_draws(c, logits + i0 * n_vocab, m, n_vocab, rows + i0);
        if (!dev) continue;
        hx_cuda_drawn got[SAMPLE_ROWS];
        cuda_read(be, got, dev, (size_t)m * sizeof *got);
        put_draws(got, rows + i0, m, out + i0);
    }
}

/* The step runs now, and its draws are copied back behind it (into the pinned half of this
 * arena side) without a wait; the next step stages into the other side of the arena, since
 * this one's staged arrays are copied only when its graph starts. */
static void cuda_sample_start(hx_backend *be, float *logits, int64_t n, int64_t n_vocab,
                              const hx_sample_row *rows, hx_sample_out *out)
{
    cuda_impl *c = hx_cuda_enter(be);
    HX_ASSERT(n >= 1 && n <= SAMPLE_ROWS && c->n_ahead < 2);
    const hx_cuda_drawn *dev = record_draws(c, logits, n, n_vocab, rows);
    HX_ASSERT(dev); /* every row is drawn */
    hx_cuda_flush(c);
    const int side = c->arena_side;
    hx_cuda_drawn *h = (hx_cuda_drawn *)c->ahead_h + side * SAMPLE_ROWS;
    CK(cudaMemcpyAsync(h, dev, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaEventRecord(c->ahead_ev[side], c->stream));
    c->ahead[c->n_ahead++] = (ahead_step){out, n, side};
    c->drawn_dev = dev;
    c->arena_side = 1 - side;
    c->arena_used = 0;
    hx_cuda_forget_staged(c);
    hx_cuda_op_done(c, "sample");
}

static void cuda_sample_finish(hx_backend *be)
{
    cuda_impl *c = hx_cuda_enter(be);
    HX_ASSERT(c->n_ahead > 0);
    const int side = c->ahead[0].side;
    CK(cudaEventSynchronize(c->ahead_ev[side]));
    put_draws((const hx_cuda_drawn *)c->ahead_h + side * SAMPLE_ROWS, NULL, c->ahead[0].n,
              c->ahead[0].out);
    c->ahead[0] = c->ahead[1];
    c->n_ahead--;
}

/* ---- life cycle ---- */

#ifdef HX_CUDA_TIMELINE
/* A dev build's timeline (kernels.h), every kernel file's ring, into the file
 * $HEARTH_CUDA_TIMELINE as raw records (bench/gpu/timeline.py reads them). */
static void timeline_dump(void)
{
    const char *path = getenv("HEARTH_CUDA_TIMELINE");
    if (!path || !*path) return;
    size_t (*const readers[])(hx_cuda_tl_rec *) = {hx_cuda_timeline_gemv,
                                                   hx_cuda_timeline_attention,
                                                   hx_cuda_timeline_kernels};
    hx_cuda_tl_rec *r = hx_alloc(HX_CUDA_TL_CAP * sizeof *r);
    FILE *f = r ? fopen(path, "wb") : NULL;
    size_t n_all = 0;
    for (size_t k = 0; f && k < HX_COUNTOF(readers); k++)
        n_all += fwrite(r, sizeof *r, readers[k](r), f);
    if (f) fclose(f);
    hx_free(r);
    fprintf(stderr, "hearth: cuda timeline: %zu launches into %s\n", n_all, path);
}
#endif

static void cuda_destroy(hx_backend *be)
{
    if (!be) return;
    cuda_impl *c = be->impl;
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream) {
            hx_cuda_flush(c);
            cudaStreamSynchronize(c->stream);
        }
#ifdef HX_CUDA_TIMELINE
        timeline_dump();
#endif
        for (int i = 0; i < c->n_graph; i++) cudaGraphExecDestroy(c->graph[i].exec);
        hx_free(c->ops);
        hx_free(c->op_args);
        cudaFree(c->blas_ws);
        double total = 0;
        for (int i = 0; i < c->n_prof; i++) total += c->prof[i].ms;
        for (int i = 0; i < c->n_prof; i++)
            fprintf(stderr, "hearth: cuda profile: %-12s %8lld calls %10.2f ms %5.1f%%\n",
                    c->prof[i].name, (long long)c->prof[i].n, c->prof[i].ms,
                    100.0 * c->prof[i].ms / total);
        if (c->st_n)
            fprintf(stderr, "hearth: cuda steps: %lld reads; per read: host %.3f ms, launch "
                    "%.3f ms, GPU %.3f ms, wait %.3f ms\n", (long long)c->st_n,
                    c->st_host / (double)c->st_n, c->st_launch / (double)c->st_n,
                    c->st_gpu / (double)c->st_n, c->st_wait / (double)c->st_n);
        if (c->step_prof) {
            cudaEventDestroy(c->ev_a);
            cudaEventDestroy(c->ev_b);
        }
        hx_cuda_weights_free(c);
        cudaFree(c->half_w);
        cudaFree(c->half_x);
        hx_free(c->moe_host);
        cudaFree(c->moe_dev);
        cudaFree(c->xq);
        cudaFree(c->att_scratch);
        cudaFree(c->smp_scratch);
        hx_free(c->smp_edits);
        cudaFree(c->arena_d);
        cudaFree(c->rope_tab);
        cudaFreeHost(c->arena_h);
        cudaFreeHost(c->ahead_h);
        for (int i = 0; i < 2; i++)
            if (c->ahead_ev[i]) cudaEventDestroy(c->ahead_ev[i]);
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
    c->step_prof = prof && strcmp(prof, "steps") == 0;
    c->profile = prof && *prof && strcmp(prof, "0") != 0 && !c->step_prof;
    c->use_graphs = !hx_cuda_switched_off("HEARTH_CUDA_GRAPHS");
    c->gemv_post = !hx_cuda_switched_off("HEARTH_CUDA_GEMV_POST");
    hx_status st = HX_OK;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        st = cuda_err(err, HX_E_NOTFOUND, "starting the GPU", e);
    else if (c->step_prof && ((e = cudaEventCreate(&c->ev_a)) != cudaSuccess ||
                              (e = cudaEventCreate(&c->ev_b)) != cudaSuccess))
        st = cuda_err(err, HX_E_NOTFOUND, "starting the GPU", e);
    else if ((e = cudaHostAlloc((void **)&c->arena_h, 2 * ARENA_BYTES,
                                cudaHostAllocDefault)) != cudaSuccess ||
             (e = cudaMalloc((void **)&c->arena_d, ARENA_BYTES)) != cudaSuccess ||
             (e = cudaMalloc((void **)&c->rope_tab, 2 * ROPE_TAB_PAIRS * sizeof(float))) !=
                 cudaSuccess ||
             (e = cudaHostAlloc(&c->ahead_h, 2 * SAMPLE_ROWS * sizeof(hx_cuda_drawn),
                                cudaHostAllocDefault)) != cudaSuccess ||
             (e = cudaEventCreateWithFlags(&c->ahead_ev[0], cudaEventDisableTiming)) !=
                 cudaSuccess ||
             (e = cudaEventCreateWithFlags(&c->ahead_ev[1], cudaEventDisableTiming)) !=
                 cudaSuccess)
        st = cuda_err(err, HX_E_NOMEM, "staging memory", e);
    else if (!(c->blas = hx_blas_load(err)))
        st = HX_E_NOTFOUND;
    else if ((e = cudaMalloc(&c->blas_ws, BLAS_WS)) != cudaSuccess)
        st = cuda_err(err, HX_E_NOMEM, "cuBLAS workspace", e);
    else if (c->blas->create(&c->handle) != CUBLAS_STATUS_SUCCESS ||
             c->blas->set_stream(c->handle, c->stream) != CUBLAS_STATUS_SUCCESS ||
             c->blas->set_workspace(c->handle, c->blas_ws, BLAS_WS) != CUBLAS_STATUS_SUCCESS)
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
    hx_cuda_weight_ops(be);
    be->rmsnorm = cuda_rmsnorm;
    be->rope = cuda_rope;
    be->kv_write = cuda_kv_write;
    be->attention = cuda_attention;
    be->gather_rows = cuda_gather_rows;
    be->swiglu = cuda_swiglu;
    be->geglu = cuda_geglu;
    be->moe = cuda_moe;
    be->add = cuda_add;
    be->scale = cuda_scale;
    be->softcap = cuda_softcap;
    /* HEARTH_CUDA_SAMPLE=0: logits go to the host's sampler; HEARTH_CUDA_AHEAD=0: every step is
     * waited for before the next is prepared (no host/device overlap) */
    if (!hx_cuda_switched_off("HEARTH_CUDA_SAMPLE")) be->sample = cuda_sample;
    if (be->sample && !hx_cuda_switched_off("HEARTH_CUDA_AHEAD")) {
        be->sample_start = cuda_sample_start;
        be->sample_finish = cuda_sample_finish;
    }
    be->destroy = cuda_destroy;
    *out = be;
    return HX_OK;
}
