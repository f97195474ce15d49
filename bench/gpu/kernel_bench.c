/* kernel_bench.c - the cuda backend's decode kernels timed one by one, without a model.
 *
 * A decode step is a chain of small kernels: the GEMV over every weight, attention over the
 * cache, and the row ops between them. `hearth run --verbose` gives only the sum, and
 * HEARTH_CUDA_PROFILE=1 waits after every op, which adds the launch latency to each. This tool
 * times each launcher of kernels.h alone, the way a step replays it: 50 launches back to back
 * on one stream after 5 warm-up launches, timed with events, reported as microseconds per
 * launch and, for the GEMV, as the weight bytes it reads per second (compare with the HBM read
 * bandwidth of hx-gpu-roofline). A step reads each weight once, from HBM: the GEMV takes its
 * launches in turn over copies of the weight that together hold at least three times the L2
 * cache, so that no launch finds its weight there (an 8B model's 9 MB matrices otherwise do).
 * Weights are bytes of 0x11 (every f16 scale 0x1111, a small normal number), which costs the
 * same as real ones: no kernel branches on values.
 *
 * Shapes are Llama-3.1-8B's (d_model 4,096, FFN 14,336, 32 heads of 128, 8 KV heads, vocabulary
 * 128,256) unless --d/--ffn/--vocab say otherwise.
 *
 * Prefill attention is timed for a chunk of --chunk rows (1,024: a prompt step) ending at each
 * context length at least that long, in TFLOP/s of its causal multiply-adds.
 *
 * usage: hx-gpu-kernels [--device I] [--formats q4_0,q4_k,...] [--rows 1,8] [--ctx 64,4096]
 *                       [--chunk N]
 * A dev tool beside the library (STYLE rule 42): a failed CUDA call prints it and exits 1. */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels.h"
#include "tensor/dtype.h"

#define WARM  5
#define TIMED 50

#define CK(call)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "hx-gpu-kernels: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), \
                    __FILE__, __LINE__);                                                    \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static void *dev_bytes(size_t n, int fill)
{
    void *p;
    CK(cudaMalloc(&p, n ? n : 1));
    CK(cudaMemset(p, fill, n));
    return p;
}

#define MAX_COPIES 64

typedef struct {
    int            kind;
    hx_cuda_wmat   w;
    hx_cuda_wmat   copies[MAX_COPIES]; /* GEMV: w and more copies, taken in turn */
    int            n_copies, turn;
    const float   *x;
    int8_t        *xq;
    float         *xd;
    int64_t        rows;
    float         *out;
    hx_cuda_kv     kv;
    const int32_t *blocks, *pos;
    int32_t        splits; /* decode attention: hx_cuda_attention_splits of its context */
    int32_t        n_head;
} job;

enum { GEMV, QUANT, ATTN, NORM, DEQUANT, PREFILL };

static void launch(job *j, hx_cuda_stream s)
{
    if (j->kind == GEMV) {
        const hx_cuda_gemv_job g = {.w = j->copies[j->turn++ % j->n_copies], .out = j->out};
        hx_cuda_gemv(&g, NULL, 1, j->x, j->xq, j->xd, j->rows, s);
    }
    else if (j->kind == DEQUANT) hx_cuda_dequant_rows(&j->w, 0, j->w.n_out, j->out, 0, s);
    else if (j->kind == QUANT) hx_cuda_quantize_x(j->x, j->rows * j->w.n_in, j->xq, j->xd, s);
    else if (j->kind == ATTN)
        hx_cuda_attention(&j->kv, 0, j->blocks, j->x, j->pos, 1, j->n_head, 0.088f, 0, 0.0f,
                          j->xd, j->out, NULL, NULL, j->splits, s);
    else if (j->kind == PREFILL)
        hx_cuda_attention(&j->kv, 0, j->blocks, j->x, j->pos, j->rows, j->n_head, 0.088f, 0,
                          0.0f, NULL, j->out, NULL, NULL, 0, s);
    else hx_cuda_rmsnorm(j->x, j->x, j->rows, j->w.n_in, 1e-5f, j->out, NULL, NULL, s);
}

/* Microseconds per launch: WARM launches, then TIMED between two events. */
static double time_us(job *j, cudaStream_t s)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < WARM; i++) launch(j, (hx_cuda_stream)s);
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < TIMED; i++) launch(j, (hx_cuda_stream)s);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return 1000.0 * ms / TIMED;
}

/* A weight as the backend uploads it (kernels.h): MLX with f16 scales and biases per 64;
 * Q4_0/Q4_1/Q8_0 split into codes and f16 scales per 32. */
static hx_cuda_wmat weight(int dt, int64_t n_out, int64_t n_in)
{
    const bool mlx = dt == HX_DT_MLX4 || dt == HX_DT_MLX8;
    const bool b32 = dt == HX_DT_Q4_0 || dt == HX_DT_Q4_1 || dt == HX_DT_Q8_0;
    hx_cuda_wmat w = {.dtype = dt, .n_out = n_out, .n_in = n_in, .group_size = b32 ? 32 : 64,
                      .sb_dtype = HX_DT_F16};
    w.row_bytes = b32 ? (dt == HX_DT_Q8_0 ? n_in : n_in / 2)
                      : (int64_t)hx_dtype_row_bytes((hx_dtype)dt, n_in);
    w.q = dev_bytes((size_t)(w.row_bytes * n_out), 0x11);
    if (mlx || b32) {
        const size_t sb = (size_t)(n_out * (n_in / w.group_size)) * 2;
        w.scales = dev_bytes(sb, 0x11);
        if (mlx || dt == HX_DT_Q4_1) w.biases = dev_bytes(sb, 0x11);
    }
    return w;
}

/* Bytes a pass over w reads. */
static double weight_bytes(const hx_cuda_wmat *w)
{
    const double groups = (double)(w->n_out * (w->n_in / (w->group_size ? w->group_size : 1)));
    return (double)w->row_bytes * (double)w->n_out + (w->scales ? 2 * groups : 0) +
           (w->biases ? 2 * groups : 0);
}

static void free_weight(hx_cuda_wmat *w)
{
    cudaFree((void *)w->q);
    cudaFree((void *)w->scales);
    cudaFree((void *)w->biases);
}

/* Parses "a,b,c" into at most max ints. */
static int int_list(const char *s, int64_t *v, int max)
{
    int n = 0;
    for (char *e; *s && n < max; s = *e ? e + 1 : e) v[n++] = strtoll(s, &e, 10);
    return n;
}

int main(int argc, char **argv)
{
    const char *formats = "q4_0,q4_k,mlx4,q8_0,q6_k,f16";
    int64_t rows[8] = {1, 8}, ctx[8] = {64, 1024, 4096};
    int n_rows = 2, n_ctx = 3, dev = 0;
    int64_t d = 4096, ffn = 14336, vocab = 128256, chunk = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--device")) dev = atoi(v);
        else if (!strcmp(a, "--formats")) formats = v;
        else if (!strcmp(a, "--rows")) n_rows = int_list(v, rows, 8);
        else if (!strcmp(a, "--ctx")) n_ctx = int_list(v, ctx, 8);
        else if (!strcmp(a, "--d")) d = atoll(v);
        else if (!strcmp(a, "--ffn")) ffn = atoll(v);
        else if (!strcmp(a, "--vocab")) vocab = atoll(v);
        else if (!strcmp(a, "--chunk")) chunk = atoll(v);
        else goto usage;
        i++;
    }
    CK(cudaSetDevice(dev));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    const int64_t big = (ffn > vocab ? ffn : vocab) > ffn * d / 16 ? (ffn > vocab ? ffn : vocab)
                                                                : ffn * d / 16;
    const size_t x_bytes = (size_t)(8 * (ffn > d ? ffn : d)) * 4;
    float *x = dev_bytes(x_bytes, 0x3c), *out = dev_bytes((size_t)(8 * big) * 4, 0); /* ~0.011 */
    int8_t *xq = dev_bytes(x_bytes / 2, 0x11); /* two bytes a value */
    float *xd = dev_bytes(x_bytes / 32, 0x3c);

    printf("%-6s %-14s %4s %10s %10s\n", "format", "matrix", "rows", "us/launch", "GB/s");
    const int64_t shapes[4][2] = {{d, d}, {ffn, d}, {d, ffn}, {vocab, d}};
    const char *names[4] = {"d x d", "ffn x d", "d x ffn", "vocab x d"};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", formats);
    for (char *f = strtok(buf, ","); f; f = strtok(NULL, ",")) {
        const int dt = hx_dtype_from_name(f);
        if (dt < 0) {
            fprintf(stderr, "hx-gpu-kernels: unknown format %s\n", f);
            return 2;
        }
        for (int k = 0; k < 4; k++) {
            job j = {.kind = GEMV, .w = weight(dt, shapes[k][0], shapes[k][1]), .x = x, .xq = xq,
                     .xd = xd, .out = out};
            const double bytes = weight_bytes(&j.w);
            j.copies[j.n_copies++] = j.w;
            while (j.n_copies < MAX_COPIES && (double)j.n_copies * bytes < 3.0 * l2)
                j.copies[j.n_copies++] = weight(dt, shapes[k][0], shapes[k][1]);
            for (int r = 0; r < n_rows; r++) {
                j.rows = rows[r];
                const double us = time_us(&j, s);
                printf("%-6s %-14s %4lld %10.2f %10.0f\n", f, names[k], (long long)rows[r], us,
                       bytes / us / 1e3);
            }
            if (k == 1) { /* the prefill's dequantize-to-f16 pass over ffn x d */
                j.kind = DEQUANT;
                const double us = time_us(&j, s);
                printf("%-6s %-14s %4s %10.2f %10.0f  (dequantize to f16)\n", f, names[k], "-",
                       us, (bytes + 2.0 * (double)(j.w.n_out * j.w.n_in)) / us / 1e3);
            }
            for (int c = 0; c < j.n_copies; c++) free_weight(&j.copies[c]);
        }
    }

    /* Decode attention: one row, 32 heads over 8 KV heads of 128, blocks of 16 in order. */
    const int32_t n_head = 32, n_kv = 8, dh = 128, bt = 16;
    int64_t max_ctx = 0;
    for (int i = 0; i < n_ctx; i++) max_ctx = ctx[i] > max_ctx ? ctx[i] : max_ctx;
    const int32_t n_blocks = (int32_t)((max_ctx + bt - 1) / bt);
    const size_t kv_elems = (size_t)n_blocks * n_kv * bt * dh;
    hx_cuda_kv kv = {.k = dev_bytes(kv_elems * 2, 0x11), .v = dev_bytes(kv_elems * 2, 0x11),
                     .n_layer = 1, .n_kv_head = n_kv, .d_head = dh, .block_tokens = bt};
    int32_t *h_blocks = malloc((size_t)n_blocks * sizeof *h_blocks), *d_blocks, *d_pos;
    for (int32_t i = 0; i < n_blocks; i++) h_blocks[i] = i;
    d_blocks = dev_bytes((size_t)n_blocks * 4, 0);
    d_pos = dev_bytes(4, 0);
    CK(cudaMemcpy(d_blocks, h_blocks, (size_t)n_blocks * 4, cudaMemcpyHostToDevice));
    free(h_blocks);
    float *scratch = dev_bytes((size_t)hx_cuda_attention_scratch(1, n_head, dh) * 4 + 4, 0);
    printf("\n%-30s %10s\n", "decode attention (32 x 128)", "us/launch");
    for (int i = 0; i < n_ctx; i++) {
        const int32_t p = (int32_t)ctx[i] - 1;
        CK(cudaMemcpy(d_pos, &p, 4, cudaMemcpyHostToDevice));
        job j = {.kind = ATTN, .kv = kv, .blocks = d_blocks, .pos = d_pos, .x = x, .out = out,
                 .n_head = n_head, .xd = scratch, .splits = hx_cuda_attention_splits(ctx[i])};
        printf("context %-22lld %10.2f\n", (long long)ctx[i], time_us(&j, s));
    }
    /* Prefill attention: chunk rows at positions [ctx - chunk, ctx) of 32 heads of 128. */
    float *qc = dev_bytes((size_t)(chunk * n_head * dh) * 4, 0x3c);
    float *oc = dev_bytes((size_t)(chunk * n_head * dh) * 4, 0);
    int32_t *h_pos = malloc((size_t)chunk * sizeof *h_pos), *d_cpos = dev_bytes((size_t)chunk * 4, 0);
    printf("\n%-30s %10s %10s\n", "prefill attention (32 x 128)", "us/launch", "TFLOP/s");
    for (int i = 0; i < n_ctx; i++) {
        if (ctx[i] < chunk) continue;
        double pairs = 0; /* (row, key) pairs the causal mask leaves */
        for (int64_t r = 0; r < chunk; r++) {
            h_pos[r] = (int32_t)(ctx[i] - chunk + r);
            pairs += (double)h_pos[r] + 1;
        }
        CK(cudaMemcpy(d_cpos, h_pos, (size_t)chunk * 4, cudaMemcpyHostToDevice));
        job j = {.kind = PREFILL, .kv = kv, .blocks = d_blocks, .pos = d_cpos, .x = qc,
                 .out = oc, .n_head = n_head, .rows = chunk};
        const double us = time_us(&j, s);
        printf("%lld rows to context %-10lld %10.2f %10.1f\n", (long long)chunk,
               (long long)ctx[i], us, 4.0 * pairs * n_head * dh / us / 1e6);
    }
    free(h_pos);
    for (int r = 0; r < n_rows; r++) {
        job j = {.kind = QUANT, .x = x, .xq = xq, .xd = xd, .rows = rows[r], .w = {.n_in = d}};
        printf("quantize_x %lld x %-13lld %10.2f\n", (long long)rows[r], (long long)d,
               time_us(&j, s));
    }
    for (int r = 0; r < n_rows; r++) {
        job j = {.kind = NORM, .x = x, .out = out, .rows = rows[r], .w = {.n_in = d}};
        printf("rmsnorm %lld x %-16lld %10.2f\n", (long long)rows[r], (long long)d, time_us(&j, s));
    }
    return 0;
usage:
    fprintf(stderr, "usage: hx-gpu-kernels [--device I] [--formats q4_0,...] [--rows 1,8] "
                    "[--ctx 64,4096] [--d N] [--ffn N] [--vocab N] [--chunk N]\n");
    return 2;
}
