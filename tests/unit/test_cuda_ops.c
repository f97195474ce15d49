/* test_cuda_ops.c - every op of the CUDA backend against the CPU (backend/cuda/cuda_backend.h).
 *
 * Each case draws fresh random inputs in odd sizes, runs the op on the GPU and the same op on
 * the CPU backend (or a float64 loop over the reference dequantizer, for matmul and embed), and
 * compares by relative error ||gpu - ref|| / ||ref|| against a stated tolerance:
 *  - 1e-5: f32 arithmetic that differs only in summation order and FMA contraction (the GEMV,
 *    norms, rope, element-wise ops, decode attention over the same f16 cache);
 *  - the GEMV over block formats rounds x to 16-bit integers per 32 values first: against a
 *    float64 loop over x rounded the same way, 1e-5; against x itself, 2e-4 (the rounding's
 *    own error, ~2e-5 on uniform inputs);
 *  - 3e-3: matmuls of more than HX_CUDA_GEMV_ROWS rows, whose inputs cuBLAS takes in f16 (each
 *    rounded by up to 2^-11; the errors of a long dot product mostly cancel, ~1e-3 measured),
 *    and prefill attention on the tensor cores (q and the probabilities in f16);
 *  - exact: the embedding lookup, the cache write (f16, and the quantized caches' codes,
 *    scales and minimums) and block copies.
 * Outputs are poisoned with NaN first, so an element the GPU never writes fails. The backend
 * keeps what it uploaded keyed by host address (a backend serves one model, whose tensors live
 * as long as it does), so every tensor here stays allocated until its backend is gone.
 *
 * Without a GPU (or in a build without CUDA) every case prints "skip:" and passes: CI has no
 * GPU; the cases run on the lent H200 (docs/performance.md says how). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/device.h"
#include "backend/kv_quant.h"
#include "base/alloc.h"
#include "base/err.h"
#include "base/f16.h"
#include "check.h"
#include "sample/sampler.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

#ifdef HX_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

static hx_backend *gpu, *cpu;

/* Opens both backends once; false (with a printed reason) when there is no GPU to test. */
static bool open_backends(void)
{
    if (gpu) return true;
    hx_err err = {0};
    if (hx_backend_open("cuda", 0, 0, &gpu, &err) != HX_OK) {
        printf("skip: %s\n", err.msg);
        return false;
    }
    if (hx_cpu_backend_create(1, 0, &cpu, &err) != HX_OK ||
        cpu->reserve(cpu, 4096, 64, &err) != HX_OK) {
        printf("skip: CPU backend: %s\n", err.msg);
        return false;
    }
    return true;
}

#define NEED_GPU() do { if (!open_backends()) return 0; } while (0)

static uint32_t seed = 0x9e3779b9u;

static void fill(float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = check_rng_range(&seed, lo, hi);
}

/* Device copy of n floats (or, with x NULL, n floats of NaN). */
static float *dev(const float *x, int64_t n)
{
    float *d = gpu->alloc(gpu, (size_t)n * sizeof *d);
    if (x) cudaMemcpy(d, x, (size_t)n * sizeof *d, cudaMemcpyHostToDevice);
    else cudaMemset(d, 0xff, (size_t)n * sizeof *d); /* all-ones bits: NaN */
    return d;
}

static void back(float *h, const float *d, int64_t n)
{
    gpu->read(gpu, h, d, (size_t)n * sizeof *h);
}

/* ||a - b|| / ||b|| over n values; infinite when a has a NaN (an unwritten element). */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define CHECK_REL(a, b, n, tol) do { const double e_ = rel_err(a, b, n); \
    if (!(e_ <= (tol))) CHECK_FAIL("%s vs %s: relative error %.3g (tol %g)", #a, #b, e_, \
                                   (double)(tol)); } while (0)

/* ---- random weights in every format ---- */

/* A weight tensor of n_out x n_in in dtype dt: random bytes, with every scale field set to a
 * small random f16 so values stay finite and tame (the dequantizer defines the values). */
typedef struct {
    hx_tensor t;
    uint8_t  *q, *s, *b;
} weight;

static void put_f16(uint8_t *p, float v)
{
    const uint16_t h = hx_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static int weight_make(weight *w, hx_dtype dt, int64_t n_out, int64_t n_in)
{
    memset(w, 0, sizeof *w);
    const size_t row = hx_dtype_row_bytes(dt, n_in), bytes = row * (size_t)n_out;
    CHECK(row > 0);
    w->q = hx_alloc(bytes);
    CHECK(w->q);
    for (size_t i = 0; i < bytes; i++) w->q[i] = (uint8_t)check_rng(&seed);
    const int32_t bn = hx_dtypes[dt].block_n, bb = hx_dtypes[dt].block_bytes;
    for (size_t blk = 0; blk < bytes / (size_t)bb && dt != HX_DT_MLX4 && dt != HX_DT_MLX8; blk++) {
        uint8_t *p = w->q + blk * (size_t)bb;
        switch (dt) {
        case HX_DT_F32:
            for (int i = 0; i < bn; i++) {
                const float v = check_rng_range(&seed, -1, 1);
                memcpy(p + 4 * i, &v, 4);
            }
            break;
        case HX_DT_F16:
        case HX_DT_BF16:
            for (int i = 0; i < bn; i++) {
                const float v = check_rng_range(&seed, -1, 1);
                uint32_t u;
                memcpy(&u, &v, 4);
                const uint16_t h = dt == HX_DT_F16 ? hx_f32_to_f16(v) : (uint16_t)(u >> 16);
                memcpy(p + 2 * i, &h, 2);
            }
            break;
        case HX_DT_Q4_0: case HX_DT_Q8_0: put_f16(p, check_rng_range(&seed, 0.001f, 0.05f)); break;
        case HX_DT_Q4_1:
            put_f16(p, check_rng_range(&seed, 0.001f, 0.05f));
            put_f16(p + 2, check_rng_range(&seed, -0.3f, 0.0f));
            break;
        case HX_DT_Q4_K: case HX_DT_Q5_K:
            put_f16(p, check_rng_range(&seed, 0.0005f, 0.003f));
            put_f16(p + 2, check_rng_range(&seed, 0.0005f, 0.003f));
            break;
        case HX_DT_Q6_K: put_f16(p + 208, check_rng_range(&seed, 0.0005f, 0.003f)); break;
        default: break;
        }
    }
    w->t = (hx_tensor){.dtype = dt, .n_dims = 2, .shape = {n_out, n_in}, .data = w->q,
                       .n_bytes = bytes};
    if (dt == HX_DT_MLX4 || dt == HX_DT_MLX8) {
        const int32_t gs = 64;
        const int64_t n_sb = n_out * (n_in / gs);
        w->s = hx_alloc((size_t)n_sb * 2);
        w->b = hx_alloc((size_t)n_sb * 2);
        CHECK(w->s && w->b);
        for (int64_t i = 0; i < n_sb; i++) {
            put_f16(w->s + 2 * i, check_rng_range(&seed, 0.001f, 0.02f));
            put_f16(w->b + 2 * i, check_rng_range(&seed, -0.1f, 0.1f));
        }
        w->t.scales = w->s;
        w->t.biases = w->b;
        w->t.sb_dtype = HX_DT_F16;
        w->t.group_size = gs;
    }
    return 0;
}

static void weight_free(weight *w)
{
    hx_free(w->q);
    hx_free(w->s);
    hx_free(w->b);
}

static const hx_dtype all_formats[] = {HX_DT_F32,  HX_DT_F16,  HX_DT_BF16, HX_DT_Q4_0,
                                       HX_DT_Q4_1, HX_DT_Q8_0, HX_DT_Q4_K, HX_DT_Q5_K,
                                       HX_DT_Q6_K, HX_DT_MLX4, HX_DT_MLX8};

/* out[r][o] = w[o] . x[r] + bias[o] in double, from the reference dequantizer. */
static void matmul_ref(const hx_tensor *w, const float *bias, const float *x, int64_t n_rows,
                       float *out)
{
    const int64_t n_out = w->shape[0], n_in = w->shape[1];
    float *row = hx_alloc((size_t)n_in * sizeof *row);
    for (int64_t o = 0; o < n_out; o++) {
        hx_tensor_dequant_row(w, o, row);
        for (int64_t r = 0; r < n_rows; r++) {
            double s = bias ? bias[o] : 0.0;
            for (int64_t i = 0; i < n_in; i++) s += (double)row[i] * x[r * n_in + i];
            out[r * n_out + o] = (float)s;
        }
    }
    hx_free(row);
}

/* x as the GEMV over a block format reads it: each 32 values as 16-bit integers in two bytes
 * (kernels.h, hx_cuda_quantize_x), (256 hi + lo) d / 256. */
static void round_like_gemv(const float *x, int64_t n, float *out)
{
    for (int64_t b = 0; b < n; b += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        const float d = amax / 127.0f;
        for (int i = 0; i < 32; i++) {
            float hi = 0.0f, lo = 0.0f;
            if (d > 0.0f) {
                hi = rintf(x[b + i] / d);
                lo = fminf(fmaxf(rintf(fmaf(-hi, d, x[b + i]) * 256.0f / d), -127.0f), 127.0f);
            }
            out[b + i] = (float)((256.0 * hi + lo) * (double)(d / 256.0f));
        }
    }
}

static bool gemv_rounds_x(hx_dtype dt, int64_t n_rows)
{
    return n_rows <= HX_CUDA_GEMV_ROWS && dt != HX_DT_F32 && dt != HX_DT_F16 &&
           dt != HX_DT_BF16;
}

/* w through `weight` and `matmul` at each row count of rows (GEMV up to HX_CUDA_GEMV_ROWS, cuBLAS
 * above), every other one with a bias, against the float64 loop. */
static int check_matmul(const weight *w, const int64_t *rows, size_t n_cases)
{
    hx_err err = {0};
    const hx_dtype dt = w->t.dtype;
    const int64_t n_out = w->t.shape[0], n_in = w->t.shape[1];
    const hx_tensor *pw = gpu->weight(gpu, &w->t, &err);
    CHECK(pw != NULL);
    /* reserve again: the chunk buffer is sized from the weights seen */
    CHECK(gpu->reserve(gpu, n_in, 64, &err) == HX_OK);
    float *bias_v = hx_alloc((size_t)n_out * sizeof *bias_v); /* kept: see the file comment */
    CHECK(bias_v);
    fill(bias_v, n_out, -1, 1);
    const hx_tensor bias = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {n_out},
                            .data = bias_v, .n_bytes = (size_t)n_out * sizeof *bias_v};
    for (size_t k = 0; k < n_cases; k++) {
        const int64_t n = rows[k];
        float *x = hx_alloc((size_t)(n * n_in) * sizeof *x);
        float *got = hx_alloc((size_t)(n * n_out) * sizeof *got);
        float *want = hx_alloc((size_t)(n * n_out) * sizeof *want);
        fill(x, n * n_in, -1, 1);
        const bool with_bias = k % 2 == 1;
        float *dx = dev(x, n * n_in), *dout = dev(NULL, n * n_out);
        gpu->matmul(gpu, pw, with_bias ? &bias : NULL, dx, n, dout);
        back(got, dout, n * n_out);
        matmul_ref(&w->t, with_bias ? bias_v : NULL, x, n, want);
        const bool rounds = gemv_rounds_x(dt, n);
        const double tol = rounds ? 2e-4
                           : n <= HX_CUDA_GEMV_ROWS || dt == HX_DT_F32 ? 1e-5 : 3e-3;
        const double e = rel_err(got, want, n * n_out);
        if (!(e <= tol))
            CHECK_FAIL("format %s, %lld rows: relative error %.3g (tol %g)", hx_dtypes[dt].name,
                       (long long)n, e, tol);
        if (rounds) { /* exact up to summation order against the same rounding */
            float *xr = hx_alloc((size_t)(n * n_in) * sizeof *xr);
            round_like_gemv(x, n * n_in, xr);
            matmul_ref(&w->t, with_bias ? bias_v : NULL, xr, n, want);
            const double er = rel_err(got, want, n * n_out);
            if (!(er <= 1e-5))
                CHECK_FAIL("format %s, %lld rows, against rounded x: relative error %.3g",
                           hx_dtypes[dt].name, (long long)n, er);
            hx_free(xr);
        }
        gpu->free(gpu, dx);
        gpu->free(gpu, dout);
        hx_free(x);
        hx_free(got);
        hx_free(want);
    }
    gpu->weight_release(gpu, pw); /* the weight's memory stays: see the file comment */
    return 0;
}

/* Every format through `weight` and `matmul`, at row counts on both paths (GEMV up to
 * HX_CUDA_GEMV_ROWS, cuBLAS above), with and without a bias. */
static int test_matmul_formats(void)
{
    NEED_GPU();
    hx_err err = {0};
    const int64_t n_out = 131, n_in = 768, rows[] = {1, 2, 3, 5, 8, 37};
    CHECK(gpu->reserve(gpu, n_in, 64, &err) == HX_OK);
    static weight ws[HX_COUNTOF(all_formats)];
    for (size_t f = 0; f < HX_COUNTOF(all_formats); f++) {
        if (weight_make(&ws[f], all_formats[f], n_out, n_in)) return 1;
        if (check_matmul(&ws[f], rows, HX_COUNTOF(rows))) return 1;
    }
    return 0;
}

/* keep_dequantized on a backend of its own, so that the weights it finds are these: a GEMM of
 * 37 rows of each format before (dequantized into the chunk buffer) and after (from the f16
 * copy) gives the same output, within 3e-3 of the reference; the bytes taken are every
 * quantized weight's n_out x n_in x 2 (the float ones keep none), none within a budget smaller
 * than each, none with HEARTH_CUDA_F16_WEIGHTS=0, and nothing a second time. */
static int test_keep_dequantized(void)
{
    NEED_GPU();
    static const hx_dtype fmts[] = {HX_DT_F16, HX_DT_Q4_0, HX_DT_Q4_1, HX_DT_Q8_0, HX_DT_Q4_K,
                                    HX_DT_Q5_K, HX_DT_Q6_K, HX_DT_MLX4, HX_DT_MLX8};
    enum { N = (int)HX_COUNTOF(fmts), ROWS = 37 };
    const int64_t n_out = 131, n_in = 768;
    hx_err err = {0};
    hx_backend *const main_gpu = gpu, *own = NULL;
    CHECK(hx_backend_open("cuda", 0, 0, &own, &err) == HX_OK);
    gpu = own; /* dev() and back() use it */
    static weight ws[N];
    const hx_tensor *pw[N];
    int64_t want_bytes = 0;
    for (int f = 0; f < N; f++) {
        if (weight_make(&ws[f], fmts[f], n_out, n_in)) return 1;
        CHECK((pw[f] = own->weight(own, &ws[f].t, &err)) != NULL);
        if (fmts[f] != HX_DT_F16) want_bytes += n_out * n_in * 2;
    }
    CHECK(own->reserve(own, n_in, 64, &err) == HX_OK);
    static float x[ROWS * 768], before[N][ROWS * 131], after[ROWS * 131], want[ROWS * 131];
    fill(x, ROWS * n_in, -1, 1);
    float *dx = dev(x, ROWS * n_in), *dout = dev(NULL, ROWS * n_out);
    for (int f = 0; f < N; f++) {
        own->matmul(own, pw[f], NULL, dx, ROWS, dout);
        back(before[f], dout, ROWS * n_out);
    }
    setenv("HEARTH_CUDA_F16_WEIGHTS", "0", 1);
    CHECK(own->keep_dequantized(own, want_bytes + 1000) == 0);
    unsetenv("HEARTH_CUDA_F16_WEIGHTS");
    CHECK(own->keep_dequantized(own, n_out * n_in * 2 - 1) == 0);
    CHECK(own->keep_dequantized(own, want_bytes + 1000) == want_bytes);
    CHECK(own->keep_dequantized(own, want_bytes) == 0);
    for (int f = 0; f < N; f++) {
        own->matmul(own, pw[f], NULL, dx, ROWS, dout);
        back(after, dout, ROWS * n_out);
        matmul_ref(&ws[f].t, NULL, x, ROWS, want);
        const double same = rel_err(after, before[f], ROWS * n_out),
                     ref = rel_err(after, want, ROWS * n_out);
        if (!(same <= 1e-5 && ref <= 3e-3)) /* summation order only (chunks of 128 + 3 rows) */
            CHECK_FAIL("format %s: against the chunked GEMM %.3g, against the reference %.3g",
                       hx_dtypes[fmts[f]].name, same, ref);
    }
    own->free(own, dx);
    own->free(own, dout);
    for (int f = 0; f < N; f++) own->weight_release(own, pw[f]);
    own->destroy(own);
    gpu = main_gpu;
    return 0;
}

/* One row of Q4_0, Q4_1 and Q4_K through the streamed GEMV (gemv.cu): rows of more than
 * one tile of 4,096 values with a short last one, more groups of 8 output rows than the launch
 * has blocks (so a block takes several, its copies running ahead across them) and a short last
 * group; 2 rows take another kernel over the same weight. */
static int test_gemv_stream(void)
{
    NEED_GPU();
    static const hx_dtype fmts[] = {HX_DT_Q4_0, HX_DT_Q4_1, HX_DT_Q4_K};
    const int64_t n_out = 4099, n_in = 4864, rows[] = {1, 2};
    static weight ws[HX_COUNTOF(fmts)];
    for (size_t f = 0; f < HX_COUNTOF(fmts); f++) {
        if (weight_make(&ws[f], fmts[f], n_out, n_in)) return 1;
        if (check_matmul(&ws[f], rows, HX_COUNTOF(rows))) return 1;
    }
    return 0;
}

/* MLX 4-bit goes up as Q4_1 when f16 holds its scales and biases exactly, and stays MLX
 * otherwise: f16 ones and bf16 ones in f16's normal range, groups of 64, 32 and 128 (a scale a
 * group, or a block for 32 or rows of an odd number of groups: 448 values of 64); bf16 ones
 * with a value outside it (1e-7); f32 ones. Each on the GEMV (1 row), the tensor-core
 * GEMV (5) and cuBLAS (37). */
static int test_mlx4_layouts(void)
{
    NEED_GPU();
    static const struct { hx_dtype sb; int32_t gs; bool outside_f16; int64_t n_in; } cases[] = {
        {HX_DT_F16, 64, false, 512},  {HX_DT_BF16, 32, false, 512}, {HX_DT_BF16, 128, true, 512},
        {HX_DT_F32, 64, false, 512},  {HX_DT_BF16, 128, false, 512}, {HX_DT_F16, 64, false, 448},
        {HX_DT_F16, 64, false, 4608}, /* two tiles of the streamed GEMV, the second short */
    };
    const int64_t n_out = 67, rows[] = {1, 5, 37};
    static weight ws[HX_COUNTOF(cases)];
    for (size_t c = 0; c < HX_COUNTOF(cases); c++) {
        weight *w = &ws[c];
        const int64_t n_in = cases[c].n_in;
        if (weight_make(w, HX_DT_MLX4, n_out, n_in)) return 1;
        const int32_t gs = cases[c].gs;
        const int64_t n_sb = n_out * (n_in / gs);
        const size_t eb = cases[c].sb == HX_DT_F32 ? 4 : 2;
        hx_free(w->s);
        hx_free(w->b);
        w->s = hx_alloc((size_t)n_sb * eb);
        w->b = hx_alloc((size_t)n_sb * eb);
        CHECK(w->s && w->b);
        for (int64_t i = 0; i < 2 * n_sb; i++) {
            float v = i < n_sb ? check_rng_range(&seed, 0.001f, 0.02f)  /* f16's normal range */
                               : check_rng_range(&seed, 0.01f, 0.1f) * (i % 2 ? -1.0f : 1.0f);
            if (cases[c].outside_f16 && i == n_sb / 2) v = 1e-7f;
            uint8_t *p = (i < n_sb ? w->s : w->b) + (size_t)(i % n_sb) * eb;
            uint32_t u;
            memcpy(&u, &v, 4);
            const uint16_t h = cases[c].sb == HX_DT_F16 ? hx_f32_to_f16(v) : (uint16_t)(u >> 16);
            if (eb == 4) memcpy(p, &v, 4);
            else memcpy(p, &h, 2);
        }
        w->t.scales = w->s;
        w->t.biases = w->b;
        w->t.sb_dtype = cases[c].sb;
        w->t.group_size = gs;
        if (check_matmul(w, rows, HX_COUNTOF(rows))) {
            printf("  (scales %s, groups of %d, rows of %lld)\n", hx_dtypes[cases[c].sb].name, gs,
                   (long long)n_in);
            return 1;
        }
    }
    return 0;
}

/* A large output dimension runs the cuBLAS path in several dequantized chunks. */
static int test_matmul_chunks(void)
{
    NEED_GPU();
    hx_err err = {0};
    const int64_t n_out = 40961, n_in = 1024, n = 19; /* 42M weights: two 32M-element chunks */
    weight w;
    if (weight_make(&w, HX_DT_Q4_0, n_out, n_in)) return 1;
    const hx_tensor *pw = gpu->weight(gpu, &w.t, &err);
    CHECK(pw != NULL);
    CHECK(gpu->reserve(gpu, n_in, 64, &err) == HX_OK);
    float *x = hx_alloc((size_t)(n * n_in) * sizeof *x);
    float *got = hx_alloc((size_t)(n * n_out) * sizeof *got);
    float *want = hx_alloc((size_t)(n * n_out) * sizeof *want);
    fill(x, n * n_in, -1, 1);
    float *dx = dev(x, n * n_in), *dout = dev(NULL, n * n_out);
    gpu->matmul(gpu, pw, NULL, dx, n, dout);
    back(got, dout, n * n_out);
    matmul_ref(&w.t, NULL, x, n, want);
    CHECK_REL(got, want, n * n_out, 3e-3);
    gpu->free(gpu, dx);
    gpu->free(gpu, dout);
    gpu->weight_release(gpu, pw);
    weight_free(&w);
    hx_free(x);
    hx_free(got);
    hx_free(want);
    return 0;
}

/* A Q4_0 weight a and a Q6_K weight b of n_out x n_in, made and given to the GPU (*pa, *pb): two
 * formats whose matmuls take different kernels. */
static int q4_0_and_q6_k(weight *a, weight *b, int64_t n_out, int64_t n_in, const hx_tensor **pa,
                         const hx_tensor **pb)
{
    hx_err err = {0};
    if (weight_make(a, HX_DT_Q4_0, n_out, n_in) || weight_make(b, HX_DT_Q6_K, n_out, n_in))
        return 1;
    *pa = gpu->weight(gpu, &a->t, &err);
    *pb = gpu->weight(gpu, &b->t, &err);
    CHECK(*pa && *pb);
    return 0;
}

/* GEMMs (more rows than the GEMV takes) in a row with the same input share its conversion to
 * f16; an op that changes the input in between, or another input, makes the next convert. */
static int test_gemm_input_reuse(void)
{
    NEED_GPU();
    hx_err err = {0};
    enum { N_IN = 256, N_OUT = 96, ROWS = 19 };
    static weight a, b;
    const hx_tensor *pa, *pb;
    if (q4_0_and_q6_k(&a, &b, N_OUT, N_IN, &pa, &pb)) return 1;
    CHECK(gpu->reserve(gpu, N_IN, 64, &err) == HX_OK);
    static float x[ROWS * N_IN], y[ROWS * N_IN], xr[ROWS * N_IN], got[ROWS * N_OUT],
        want[ROWS * N_OUT];
    fill(x, ROWS * N_IN, -1, 1);
    fill(y, ROWS * N_IN, -2, 2);
    float *dx = dev(x, ROWS * N_IN), *dy = dev(y, ROWS * N_IN), *d1 = dev(NULL, ROWS * N_OUT),
          *d2 = dev(NULL, ROWS * N_OUT), *d3 = dev(NULL, ROWS * N_OUT);
    for (int step = 0; step < 2; step++) {
        gpu->matmul(gpu, pa, NULL, dx, ROWS, d1);
        gpu->matmul(gpu, pb, NULL, dx, ROWS, d2); /* reuses the conversion */
        gpu->scale(gpu, dx, 0.5f, ROWS * N_IN);
        gpu->matmul(gpu, pa, NULL, dx, ROWS, d1); /* must convert the halved x */
        gpu->matmul(gpu, pb, NULL, dy, ROWS, d3); /* and another input */
        const struct { float *out; const hx_tensor *w; const float *in; float f; } mm[] = {
            {d2, &b.t, x, powf(0.5f, (float)step)},
            {d1, &a.t, x, powf(0.5f, (float)step + 1)},
            {d3, &b.t, y, 1.0f}};
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < ROWS * N_IN; i++) xr[i] = mm[k].in[i] * mm[k].f;
            matmul_ref(mm[k].w, NULL, xr, ROWS, want);
            back(got, mm[k].out, ROWS * N_OUT);
            CHECK_REL(got, want, ROWS * N_OUT, 3e-3);
        }
    }
    float *bufs[] = {dx, dy, d1, d2, d3};
    for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
    gpu->weight_release(gpu, pa);
    gpu->weight_release(gpu, pb);
    return 0;
}

/* Matmuls in a row with the same input (q, k, v) share one rounding of it; an op that
 * changes the input in between makes the next GEMV round it again; rmsnorm and swiglu round
 * their output when a GEMV reads it next. */
static int test_gemv_input_reuse(void)
{
    NEED_GPU();
    enum { N_IN = 256, N_OUT = 96, ROWS = 2 };
    static weight a, b;
    const hx_tensor *pa, *pb;
    if (q4_0_and_q6_k(&a, &b, N_OUT, N_IN, &pa, &pb)) return 1;
    float x[ROWS * N_IN], xr[ROWS * N_IN], got[ROWS * N_OUT], want[ROWS * N_OUT];
    fill(x, ROWS * N_IN, -1, 1);
    float *dx = dev(x, ROWS * N_IN), *d1 = dev(NULL, ROWS * N_OUT), *d2 = dev(NULL, ROWS * N_OUT);
    for (int step = 0; step < 3; step++) { /* 3 steps: eager, captured, replayed */
        gpu->matmul(gpu, pa, NULL, dx, ROWS, d1);
        gpu->matmul(gpu, pb, NULL, dx, ROWS, d2); /* reuses the rounding */
        gpu->scale(gpu, dx, 0.5f, ROWS * N_IN);
        gpu->matmul(gpu, pa, NULL, dx, ROWS, d1); /* must round the halved x */
        back(got, d2, ROWS * N_OUT);
        for (int i = 0; i < ROWS * N_IN; i++) xr[i] = x[i] * powf(0.5f, (float)step);
        round_like_gemv(xr, ROWS * N_IN, xr);
        matmul_ref(&b.t, NULL, xr, ROWS, want);
        CHECK_REL(got, want, ROWS * N_OUT, 1e-5);
        back(got, d1, ROWS * N_OUT);
        for (int i = 0; i < ROWS * N_IN; i++) xr[i] = x[i] * powf(0.5f, (float)step + 1);
        round_like_gemv(xr, ROWS * N_IN, xr);
        matmul_ref(&a.t, NULL, xr, ROWS, want);
        CHECK_REL(got, want, ROWS * N_OUT, 1e-5);
    }
    /* rmsnorm and swiglu right before a GEMV round their output for it (no op of its own):
     * the same as rounding what they wrote */
    static float nw[N_IN];
    fill(nw, N_IN, 0.5f, 1.5f);
    const hx_tensor norm_w = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {N_IN}, .data = nw,
                              .n_bytes = sizeof nw};
    float *dn = dev(NULL, ROWS * N_IN), *dg = dev(NULL, ROWS * N_IN);
    for (int step = 0; step < 3; step++) {
        gpu->rmsnorm(gpu, dx, &norm_w, ROWS, N_IN, 1e-5f, dn);
        gpu->matmul(gpu, pa, NULL, dn, ROWS, d1);
        gpu->swiglu(gpu, dx, dn, ROWS * N_IN, dg);
        gpu->matmul(gpu, pb, NULL, dg, ROWS, d2);
        const struct { float *in, *out; const hx_tensor *w; } mm[] = {{dn, d1, &a.t},
                                                                      {dg, d2, &b.t}};
        for (int k = 0; k < 2; k++) {
            back(xr, mm[k].in, ROWS * N_IN);
            round_like_gemv(xr, ROWS * N_IN, xr);
            matmul_ref(mm[k].w, NULL, xr, ROWS, want);
            back(got, mm[k].out, ROWS * N_OUT);
            CHECK_REL(got, want, ROWS * N_OUT, 1e-5);
        }
    }
    gpu->free(gpu, dn);
    gpu->free(gpu, dg);
    gpu->free(gpu, dx);
    gpu->free(gpu, d1);
    gpu->free(gpu, d2);
    gpu->weight_release(gpu, pa);
    gpu->weight_release(gpu, pb);
    return 0;
}

/* The mixture-of-experts op against the CPU's on the same weights (Q4_0 experts, an f32 shared
 * expert and gate vector): a decode-sized step (the experts' matmuls are GEMVs) and a
 * prompt-sized one (cuBLAS), plain and renormalised routing. */
static int test_moe(void)
{
    NEED_GPU();
    hx_err err = {0};
    enum { E = 6, K = 2, D = 64, F = 96, FS = 64, T_MAX = 37 };
    static weight wg[E], wu[E], wd[E], sg, su, sd;
    const hx_tensor *gg[E], *gu[E], *gd[E], *cg[E], *cu[E], *cd[E];
    for (int e = 0; e < E; e++) {
        if (weight_make(&wg[e], HX_DT_Q4_0, F, D) || weight_make(&wu[e], HX_DT_Q4_0, F, D) ||
            weight_make(&wd[e], HX_DT_Q4_0, D, F))
            return 1;
        cg[e] = &wg[e].t, cu[e] = &wu[e].t, cd[e] = &wd[e].t;
        gg[e] = gpu->weight(gpu, cg[e], &err);
        gu[e] = gpu->weight(gpu, cu[e], &err);
        gd[e] = gpu->weight(gpu, cd[e], &err);
        CHECK(gg[e] && gu[e] && gd[e]);
    }
    if (weight_make(&sg, HX_DT_F32, FS, D) || weight_make(&su, HX_DT_F32, FS, D) ||
        weight_make(&sd, HX_DT_F32, D, FS))
        return 1;
    const hx_tensor *gsg = gpu->weight(gpu, &sg.t, &err), *gsu = gpu->weight(gpu, &su.t, &err),
                    *gsd = gpu->weight(gpu, &sd.t, &err);
    CHECK(gsg && gsu && gsd);
    static float sinp[D];
    fill(sinp, D, -0.3f, 0.3f);
    const hx_tensor tsi = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {D}, .data = sinp,
                           .n_bytes = sizeof sinp};
    CHECK(gpu->reserve(gpu, F, 64, &err) == HX_OK);
    static float x[T_MAX * D], router[T_MAX * E], a[T_MAX * D], b[T_MAX * D];
    fill(x, T_MAX * D, -1, 1);
    fill(router, T_MAX * E, -2, 2);
    const int64_t work_n = hx_moe_work_floats(T_MAX, D, F, K, E);
    float *cwork = hx_alloc((size_t)work_n * sizeof *cwork);
    float *dx = dev(x, T_MAX * D), *dr = dev(router, T_MAX * E), *dout = dev(NULL, T_MAX * D);
    float *dwork = dev(NULL, work_n);
    const int64_t steps[] = {5, T_MAX};
    for (int shared = 0; shared < 2; shared++)
        for (int norm = 0; norm < 2; norm++)
            for (size_t i = 0; i < HX_COUNTOF(steps); i++) {
                const int64_t T = steps[i];
                hx_moe mg = {.n_expert = E, .n_used = K, .d_ff = F, .gate = gg, .up = gu,
                             .down = gd, .norm_topk = norm};
                hx_moe mc = mg;
                mc.gate = cg, mc.up = cu, mc.down = cd;
                if (shared) {
                    mg.sh_gate = gsg, mg.sh_up = gsu, mg.sh_down = gsd, mg.sh_inp = &tsi;
                    mc.sh_gate = &sg.t, mc.sh_up = &su.t, mc.sh_down = &sd.t, mc.sh_inp = &tsi;
                    mg.d_ff_sh = mc.d_ff_sh = FS;
                }
                gpu->moe(gpu, &mg, dr, dx, T, D, dwork, dout);
                back(a, dout, T * D);
                cpu->moe(cpu, &mc, router, x, T, D, cwork, b);
                CHECK_REL(a, b, T * D, 3e-3);
            }
    float *bufs[] = {dx, dr, dout, dwork};
    for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
    for (int e = 0; e < E; e++) {
        gpu->weight_release(gpu, gg[e]);
        gpu->weight_release(gpu, gu[e]);
        gpu->weight_release(gpu, gd[e]);
    }
    gpu->weight_release(gpu, gsg);
    gpu->weight_release(gpu, gsu);
    gpu->weight_release(gpu, gsd);
    hx_free(cwork);
    return 0;
}

/* Decode-sized steps of a mixture without a shared expert are routed on the device (route,
 * GEMVs over every (row, choice) pair, weighted sum): against the CPU's op on the same weights
 * for experts in the wide-GEMV formats and the byte-slice ones (Q6_K), plain and renormalised
 * routing, 1, 3 and 8 rows, each three times with fresh inputs (eager, captured, replayed). The
 * routed launches must have run, except in the steps with HEARTH_CUDA_MOE_DEVICE=0 (the host
 * routes those: one of each row count). */
static int test_moe_routed(void)
{
    NEED_GPU();
    hx_err err = {0};
    static const hx_dtype fmts[] = {HX_DT_Q4_0, HX_DT_Q4_K, HX_DT_Q6_K, HX_DT_MLX4};
    enum { E = 6, K = 2, D = 256, F = 512, T_MAX = 8, NF = (int)HX_COUNTOF(fmts) };
    static weight wg[NF][E], wu[NF][E], wd[NF][E];
    static float x[T_MAX * D], router[T_MAX * E], a[T_MAX * D], b[T_MAX * D];
    const int64_t work_n = hx_moe_work_floats(T_MAX, D, F, K, E);
    float *cwork = hx_alloc((size_t)work_n * sizeof *cwork);
    float *dx = dev(NULL, T_MAX * D), *dr = dev(NULL, T_MAX * E), *dout = dev(NULL, T_MAX * D);
    float *dwork = dev(NULL, work_n);
    CHECK(cwork && gpu->reserve(gpu, F, 64, &err) == HX_OK);
    const uint64_t before = hx_cuda_gemv_routed_count();
    for (int f = 0; f < NF; f++) {
        const hx_tensor *gg[E], *gu[E], *gd[E], *cg[E], *cu[E], *cd[E];
        for (int e = 0; e < E; e++) {
            if (weight_make(&wg[f][e], fmts[f], F, D) || weight_make(&wu[f][e], fmts[f], F, D) ||
                weight_make(&wd[f][e], fmts[f], D, F))
                return 1;
            cg[e] = &wg[f][e].t, cu[e] = &wu[f][e].t, cd[e] = &wd[f][e].t;
            gg[e] = gpu->weight(gpu, cg[e], &err);
            gu[e] = gpu->weight(gpu, cu[e], &err);
            gd[e] = gpu->weight(gpu, cd[e], &err);
            CHECK(gg[e] && gu[e] && gd[e]);
        }
        static const int64_t steps[] = {1, 3, T_MAX};
        for (int norm = 0; norm < 2; norm++)
            for (size_t i = 0; i < HX_COUNTOF(steps); i++)
                for (int rep = 0; rep < 3; rep++) {
                    const int64_t T = steps[i];
                    fill(x, T * D, -1, 1);
                    fill(router, T * E, -2, 2);
                    cudaMemcpy(dx, x, (size_t)(T * D) * sizeof *x, cudaMemcpyHostToDevice);
                    cudaMemcpy(dr, router, (size_t)(T * E) * sizeof *router,
                               cudaMemcpyHostToDevice);
                    hx_moe mg = {.n_expert = E, .n_used = K, .d_ff = F, .gate = gg, .up = gu,
                                 .down = gd, .norm_topk = norm};
                    hx_moe mc = mg;
                    mc.gate = cg, mc.up = cu, mc.down = cd;
                    const bool host = norm == 1 && rep == 2;
                    if (host) setenv("HEARTH_CUDA_MOE_DEVICE", "0", 1);
                    const uint64_t n0 = hx_cuda_gemv_routed_count();
                    gpu->moe(gpu, &mg, dr, dx, T, D, dwork, dout);
                    back(a, dout, T * D);
                    if (host) {
                        CHECK(hx_cuda_gemv_routed_count() == n0);
                        unsetenv("HEARTH_CUDA_MOE_DEVICE");
                    }
                    cpu->moe(cpu, &mc, router, x, T, D, cwork, b);
                    if (!(rel_err(a, b, T * D) <= 3e-3))
                        CHECK_FAIL("%s experts, %lld rows, norm %d, pass %d: relative error %.3g",
                                   hx_dtypes[fmts[f]].name, (long long)T, norm, rep,
                                   rel_err(a, b, T * D));
                }
        for (int e = 0; e < E; e++) {
            gpu->weight_release(gpu, gg[e]);
            gpu->weight_release(gpu, gu[e]);
            gpu->weight_release(gpu, gd[e]);
        }
    }
    CHECK(hx_cuda_gemv_routed_count() > before);
    float *bufs[] = {dx, dr, dout, dwork};
    for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
    hx_free(cwork);
    return 0;
}

/* Ops the backend joins into one launch must give what they give apart: three GEMVs of one
 * input (q, k, v; the first with a bias), a residual add right after a GEMV (the GEMV adds as
 * it writes), the rope of k right after that of q (a partial rotation), and the cache write of
 * those rows of K and V right after (the rope stores them). Three steps: eager, captured,
 * replayed (the residual accumulates across them). Weights of format `fmt`, `rows` rows (at most
 * 5); `call` numbers the calls (each keeps its weights). */
static int joined_launches_of(hx_dtype fmt, int call, int rows)
{
    hx_err err = {0};
    enum { N_IN = 512, ROWS = 5, H = 4, KH = 2, DH = 64 };
    const int64_t n_out[3] = {H * DH, KH * DH, KH * DH};
    static weight wss[8][3];
    weight *ws = wss[call];
    const hx_tensor *pw[3];
    for (int k = 0; k < 3; k++) {
        if (weight_make(&ws[k], fmt, n_out[k], N_IN)) return 1;
        CHECK((pw[k] = gpu->weight(gpu, &ws[k].t, &err)) != NULL);
    }
    static float bias_vs[8][H * DH]; /* apart: the backend keeps a copy per host address */
    float *bias_v = bias_vs[call];
    fill(bias_v, H * DH, -1, 1);
    const hx_tensor bias = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {H * DH}, .data = bias_v,
                            .n_bytes = sizeof bias_vs[call]};
    static float x[ROWS * N_IN], xr[ROWS * N_IN], res0[ROWS * KH * DH], res[ROWS * KH * DH];
    static float got[ROWS * H * DH], want[3][ROWS * H * DH], q[ROWS * H * DH], kk[ROWS * KH * DH];
    fill(x, rows * N_IN, -1, 1);
    fill(res0, rows * KH * DH, -1, 1);
    memcpy(xr, x, sizeof xr);
    round_like_gemv(xr, rows * N_IN, xr);
    for (int k = 0; k < 3; k++) matmul_ref(&ws[k].t, k == 0 ? bias_v : NULL, xr, rows, want[k]);
    float inv_freq[DH / 2];
    for (int i = 0; i < DH / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / DH);
    const hx_rope rope = {inv_freq, DH / 2, 1.0f, false};
    const int32_t pos[ROWS] = {5, 6, 38, 39, 40};
    hx_kv_store kc = {.n_blocks = 6, .block_tokens = 16, .n_layer = 2, .n_kv_head = KH,
                      .d_head = DH, .kv_dim = KH * DH, .dtype = HX_KV_F16};
    hx_kv_store kg = kc;
    CHECK(cpu->kv_alloc(cpu, &kc, &err) == HX_OK);
    CHECK(gpu->kv_alloc(gpu, &kg, &err) == HX_OK);
    int32_t blocks[3] = {4, 1, 3};
    const hx_kv_seq seq = {blocks, 41};
    const size_t kv_bytes = (size_t)6 * 2 * 16 * KH * DH * 2;
    uint16_t *cache = hx_alloc(kv_bytes);
    static float vv[ROWS * KH * DH];
    float *dx = dev(x, rows * N_IN), *dres = dev(res0, rows * KH * DH), *d[3];
    for (int k = 0; k < 3; k++) d[k] = dev(NULL, rows * n_out[k]);
    memcpy(res, res0, sizeof res);
    for (int step = 0; step < 3; step++) {
        gpu->matmul(gpu, pw[0], &bias, dx, rows, d[0]);
        gpu->matmul(gpu, pw[1], NULL, dx, rows, d[1]);
        gpu->matmul(gpu, pw[2], NULL, dx, rows, d[2]);
        gpu->add(gpu, dres, d[2], rows * KH * DH);
        for (int k = 0; k < 3; k++) {
            back(got, d[k], rows * n_out[k]);
            CHECK_REL(got, want[k], rows * n_out[k], 1e-5);
        }
        for (int64_t i = 0; i < rows * KH * DH; i++) res[i] += want[2][i];
        back(got, dres, rows * KH * DH);
        CHECK_REL(got, res, rows * KH * DH, 1e-5);
        /* rope of q (d[0]) then k (d[1]), against the CPU on what the GEMVs wrote */
        back(q, d[0], rows * H * DH);
        back(kk, d[1], rows * KH * DH);
        back(vv, d[2], rows * KH * DH);
        gpu->rope(gpu, d[0], pos, rows, H, DH, &rope);
        gpu->rope(gpu, d[1], pos, rows, KH, DH, &rope);
        gpu->kv_write(gpu, &kg, 1, &seq, pos, d[1], d[2], rows);
        cpu->rope(cpu, q, pos, rows, H, DH, &rope);
        cpu->rope(cpu, kk, pos, rows, KH, DH, &rope);
        cpu->kv_write(cpu, &kc, 1, &seq, pos, kk, vv, rows);
        back(got, d[0], rows * H * DH);
        CHECK_REL(got, q, rows * H * DH, 1e-5);
        back(got, d[1], rows * KH * DH);
        CHECK_REL(got, kk, rows * KH * DH, 1e-5);
        /* the caches: V bit for bit; K to one f16 step (its rotation differs by ~1e-7) */
        for (int side = 0; side < 2; side++) {
            gpu->read(gpu, cache, side ? kg.v : kg.k, kv_bytes);
            const uint16_t *want_c = side ? kc.v : kc.k;
            for (size_t i = 0; i < kv_bytes / 2; i++) {
                const float g = hx_f16_to_f32(cache[i]), w = hx_f16_to_f32(want_c[i]);
                if (side ? cache[i] != want_c[i] : !(fabsf(g - w) <= 1e-3f * fmaxf(1.0f, fabsf(w))))
                    CHECK_FAIL("step %d %s cache element %zu: %g vs %g", step,
                               side ? "V" : "K", i, g, w);
            }
        }
    }
    hx_free(cache);
    cpu->kv_free(cpu, &kc);
    gpu->kv_free(gpu, &kg);
    gpu->free(gpu, dx);
    gpu->free(gpu, dres);
    for (int k = 0; k < 3; k++) {
        gpu->free(gpu, d[k]);
        gpu->weight_release(gpu, pw[k]);
    }
    return 0;
}

/* MLX 4-bit through the CUDA-core GEMV, Q4_K through the tensor-core one (5 rows). */
static int test_joined_launches(void)
{
    NEED_GPU();
    return joined_launches_of(HX_DT_MLX4, 0, 5) || joined_launches_of(HX_DT_Q4_K, 1, 5);
}

/* At one row, the rope of q and of k and the cache write of k and v right after the q/k/v GEMV
 * are done by that GEMV as it writes (hx_cuda_gemv_post): q and k rotated, the cache's K and V
 * rows stored, as the CPU does them to the same products (pairs as `pairs` says, n_rot of dh
 * rotated, YaRN's mscale, a bias on q), over four steps (eager, captured, replayed twice) at
 * positions in different blocks of the table. Two layers a step, as in a model: the first
 * layer's rope stages the step's positions (an op between the GEMV and it), the second's joins
 * the GEMV. h x dh query rows, kh x dh of k and v; q and k in format fmt, v in fmt_v (another:
 * a launch of its own between the q/k GEMV and the rope); `call` numbers the calls (each keeps
 * its weights); `joined`: whether the GEMV is to do it (else the rope kernel does). */
static int post_case(hx_dtype fmt, hx_dtype fmt_v, int call, int32_t h, int32_t kh, int32_t dh,
                     bool pairs, int32_t n_rot, bool joined)
{
    hx_err err = {0};
    enum { N_IN = 512, MOST = 6144, STEPS = 4, BT = 16, NB = 10, L = 2 };
    const int64_t n_out[3] = {(int64_t)h * dh, (int64_t)kh * dh, (int64_t)kh * dh};
    HX_ASSERT(n_out[0] <= MOST && dh <= 256);
    static weight wss[14][3];
    weight *ws = wss[call];
    const hx_tensor *pw[3];
    for (int k = 0; k < 3; k++) {
        if (weight_make(&ws[k], k == 2 ? fmt_v : fmt, n_out[k], N_IN)) return 1;
        CHECK((pw[k] = gpu->weight(gpu, &ws[k].t, &err)) != NULL);
    }
    static float bias_vs[14][MOST]; /* apart: the backend keeps a copy per host address */
    float *bias_v = bias_vs[call];
    fill(bias_v, n_out[0], -1, 1);
    const hx_tensor bias = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {n_out[0]}, .data = bias_v,
                            .n_bytes = (size_t)n_out[0] * sizeof *bias_v};
    static float x[L][N_IN], xr[N_IN], got[MOST], want[L][3][MOST];
    static float inv_freqs[14][128]; /* apart, as the bias */
    float *inv_freq = inv_freqs[call];
    for (int i = 0; i < n_rot / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / n_rot);
    const hx_rope rope = {inv_freq, n_rot, 0.9f, pairs};
    hx_kv_store kc = {.n_blocks = NB, .block_tokens = BT, .n_layer = L, .n_kv_head = kh,
                      .d_head = dh, .kv_dim = kh * dh, .dtype = HX_KV_F16};
    hx_kv_store kg = kc;
    CHECK(cpu->kv_alloc(cpu, &kc, &err) == HX_OK);
    CHECK(gpu->kv_alloc(gpu, &kg, &err) == HX_OK);
    int32_t blocks[8] = {4, 1, 3, 9, 0, 7, 2, 8};
    const size_t kv_bytes = (size_t)NB * L * BT * kh * dh * 2;
    uint16_t *cache = hx_alloc(kv_bytes);
    float *dx[L], *d[L][3];
    for (int l = 0; l < L; l++) {
        dx[l] = dev(NULL, N_IN);
        for (int k = 0; k < 3; k++) d[l][k] = dev(NULL, n_out[k]);
    }
    const uint64_t launches = hx_cuda_gemv_post_count();
    static int32_t pos[1]; /* one address, new values: staged again each step */
    for (int step = 0; step < STEPS; step++) {
        pos[0] = 7 + 29 * step;
        const hx_kv_seq seq = {blocks, pos[0] + 1};
        for (int l = 0; l < L; l++) {
            fill(x[l], N_IN, -1, 1);
            cudaMemcpy(dx[l], x[l], sizeof x[l], cudaMemcpyHostToDevice);
            for (int k = 0; k < 3; k++) {
                if (hx_cuda_gemv_int8(ws[k].t.dtype)) round_like_gemv(x[l], N_IN, xr);
                else memcpy(xr, x[l], sizeof xr); /* float formats read x as it is */
                matmul_ref(&ws[k].t, k == 0 ? bias_v : NULL, xr, 1, want[l][k]);
            }
        }
        for (int l = 0; l < L; l++) {
            gpu->matmul(gpu, pw[0], &bias, dx[l], 1, d[l][0]);
            gpu->matmul(gpu, pw[1], NULL, dx[l], 1, d[l][1]);
            gpu->matmul(gpu, pw[2], NULL, dx[l], 1, d[l][2]);
            gpu->rope(gpu, d[l][0], pos, 1, h, dh, &rope);
            gpu->rope(gpu, d[l][1], pos, 1, kh, dh, &rope);
            gpu->kv_write(gpu, &kg, l, &seq, pos, d[l][1], d[l][2], 1);
            cpu->rope(cpu, want[l][0], pos, 1, h, dh, &rope);
            cpu->rope(cpu, want[l][1], pos, 1, kh, dh, &rope);
            cpu->kv_write(cpu, &kc, l, &seq, pos, want[l][1], want[l][2], 1);
        }
        for (int l = 0; l < L; l++)
            for (int k = 0; k < 3; k++) {
                back(got, d[l][k], n_out[k]);
                const double e = rel_err(got, want[l][k], n_out[k]);
                if (!(e <= 1e-5))
                    CHECK_FAIL("format %s, step %d, layer %d, output %d: relative error %.3g",
                               hx_dtypes[fmt].name, step, l, k, e);
            }
        /* the caches to one f16 step (the products differ from the CPU's by ~1e-6) */
        for (int side = 0; side < 2; side++) {
            gpu->read(gpu, cache, side ? kg.v : kg.k, kv_bytes);
            const uint16_t *want_c = side ? kc.v : kc.k;
            for (size_t i = 0; i < kv_bytes / 2; i++) {
                const float g = hx_f16_to_f32(cache[i]), w = hx_f16_to_f32(want_c[i]);
                if (!(fabsf(g - w) <= 1e-3f * fmaxf(1.0f, fabsf(w))))
                    CHECK_FAIL("format %s, step %d, %s cache element %zu: %g vs %g",
                               hx_dtypes[fmt].name, step, side ? "V" : "K", i, g, w);
            }
        }
    }
    /* the GEMV did it (launched with posts, on the steps not replayed), or the rope kernel */
    if ((hx_cuda_gemv_post_count() > launches) != joined)
        CHECK_FAIL("format %s, pairs %d, %d rotated of %d: joined %d, want %d",
                   hx_dtypes[fmt].name, pairs, n_rot, dh, !joined, joined);
    hx_free(cache);
    cpu->kv_free(cpu, &kc);
    gpu->kv_free(gpu, &kg);
    for (int l = 0; l < L; l++) {
        gpu->free(gpu, dx[l]);
        for (int k = 0; k < 3; k++) gpu->free(gpu, d[l][k]);
    }
    for (int k = 0; k < 3; k++) gpu->weight_release(gpu, pw[k]);
    return 0;
}

/* Whether the backend's one-row GEMV streams Q4_K q, k and v of `n_out` rows by N_IN values, as
 * the library decides it (hx_cuda_gemv_streams; HEARTH_CUDA_STREAM_Q4K): -1 where the weight
 * cannot be made. */
static int q4k_streams(int64_t n_out, int64_t n_in)
{
    static weight w;
    hx_err err = {0};
    const hx_tensor *t;
    if (weight_make(&w, HX_DT_Q4_K, n_out, n_in) || !(t = gpu->weight(gpu, &w.t, &err))) return -1;
    const hx_cuda_gemv_job job = {.w = *(const hx_cuda_wmat *)t->prepared};
    const int streams = hx_cuda_gemv_streams(&job, 1, 1) != 0;
    gpu->weight_release(gpu, t);
    weight_free(&w);
    return streams;
}

/* Pairs (2i, 2i + 1), a quarter of each head not rotated: the streamed GEMV (Q4_0, MLX 4-bit as
 * Q4_1; at 48 heads of 128 its blocks take a second group of rows), the wide one (Q8_0, Q6_K,
 * Q4_K), the float one (f16), and v apart (Q4_K_M). Pairs (i, i + d/2), whole heads rotated: the
 * streamed GEMV's blocks take rows of both halves (Q4_0, MLX 4-bit); the wide GEMV (Q8_0, and
 * Q4_K) and a partial rotation leave it to the rope kernel. Q4_K streams, and so joins (i, i +
 * d/2) pairs, only under HEARTH_CUDA_STREAM_Q4K=1 (gemv.cu, stream_k; q4k_streams asks the
 * library): run it both ways. */
static int test_gemv_post(void)
{
    NEED_GPU();
    hx_err err = {0};
    CHECK(gpu->reserve(gpu, 6144, 64, &err) == HX_OK);
    const int q4k = q4k_streams(48 * 128, 512); /* case 11's q (post_case's N_IN) */
    CHECK(q4k >= 0);
    const hx_dtype fmts[] = {HX_DT_Q4_0, HX_DT_Q4_K, HX_DT_MLX4, HX_DT_Q8_0, HX_DT_Q6_K,
                             HX_DT_F16};
    for (int f = 0; f < (int)HX_COUNTOF(fmts); f++)
        if (post_case(fmts[f], fmts[f], f, 4, 2, 64, true, 48, true)) return 1;
    return post_case(HX_DT_Q4_0, HX_DT_Q4_0, 6, 48, 8, 128, true, 96, true) ||
           post_case(HX_DT_Q4_K, HX_DT_Q4_K, 7, 48, 8, 128, true, 96, true) ||
           post_case(HX_DT_Q4_K, HX_DT_Q6_K, 8, 8, 2, 128, true, 96, true) ||
           post_case(HX_DT_Q4_0, HX_DT_Q4_0, 9, 4, 2, 64, false, 64, true) ||
           post_case(HX_DT_MLX4, HX_DT_MLX4, 10, 4, 2, 64, false, 64, true) ||
           post_case(HX_DT_Q4_K, HX_DT_Q4_K, 11, 48, 8, 128, false, 128, q4k == 1) ||
           post_case(HX_DT_Q8_0, HX_DT_Q8_0, 12, 4, 2, 64, false, 64, false) ||
           post_case(HX_DT_Q4_0, HX_DT_Q4_0, 13, 4, 2, 64, false, 48, false);
}

/* Rows of every format's table, exactly as the reference dequantizer gives them. */
static int test_embed_formats(void)
{
    NEED_GPU();
    const int64_t n_vocab = 45, d = 512, n_tok = 7;
    const int32_t ids[7] = {44, 0, 3, 3, 17, 29, 1};
    static weight ws[HX_COUNTOF(all_formats)];
    for (size_t f = 0; f < HX_COUNTOF(all_formats); f++) {
        weight w;
        if (weight_make(&ws[f], all_formats[f], n_vocab, d)) return 1;
        w = ws[f];
        float got[7 * 512], want[7 * 512];
        float *dout = dev(NULL, n_tok * d);
        gpu->embed(gpu, &w.t, ids, n_tok, dout);
        back(got, dout, n_tok * d);
        for (int64_t t = 0; t < n_tok; t++) hx_tensor_dequant_row(&w.t, ids[t], want + t * d);
        for (int64_t i = 0; i < n_tok * d; i++)
            if (!(fabsf(got[i] - want[i]) <= 1e-6f * fmaxf(1.0f, fabsf(want[i]))))
                CHECK_FAIL("format %s element %lld: %.9g vs %.9g", hx_dtypes[all_formats[f]].name,
                           (long long)i, got[i], want[i]);
        gpu->free(gpu, dout);
    }
    return 0;
}

/* rmsnorm, rope (both layouts, partial rotation, YaRN's mscale), the gated activations,
 * add/scale/softcap and gather_rows: the GPU against the CPU backend on the same inputs. */
static int test_row_ops(void)
{
    NEED_GPU();
    enum { T = 5, H = 3, DH = 96, D = H * DH };
    static float x[T * D], y[T * D], w_v[D], a[T * D], b[T * D];
    fill(x, T * D, -3, 3);
    fill(y, T * D, -3, 3);
    fill(w_v, D, 0.5f, 1.5f);
    const hx_tensor w = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {D}, .data = w_v,
                         .n_bytes = sizeof w_v};
    float *dx = dev(x, T * D), *dy = dev(y, T * D), *dout = dev(NULL, T * D);
    /* rmsnorm, rows of D and rows of DH (the per-head q/k norm) */
    gpu->rmsnorm(gpu, dx, &w, T, D, 1e-5f, dout);
    back(a, dout, T * D);
    cpu->rmsnorm(cpu, x, &w, T, D, 1e-5f, b);
    CHECK_REL(a, b, T * D, 1e-5);
    /* rope */
    const int32_t pos[T] = {0, 7, 8, 1000, 31999};
    float inv_freq[DH / 2];
    for (int i = 0; i < DH / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / 64.0f);
    const hx_rope ropes[] = {{inv_freq, DH, 1.0f, true}, {inv_freq, 64, 1.2f, false}};
    for (size_t r = 0; r < HX_COUNTOF(ropes); r++) {
        float *d = dev(x, T * D);
        gpu->rope(gpu, d, pos, T, H, DH, &ropes[r]);
        back(a, d, T * D);
        memcpy(b, x, sizeof b);
        cpu->rope(cpu, b, pos, T, H, DH, &ropes[r]);
        CHECK_REL(a, b, T * D, 1e-5);
        gpu->free(gpu, d);
    }
    /* gated activations and add: four values a thread where the arrays allow, one where
     * they start off 16 bytes or the count is not a multiple of 4 */
    for (int k = 0; k < 3; k++) {
        const int64_t off = k == 2, n = k == 1 ? T * D - 3 : T * D - off;
        gpu->swiglu(gpu, dx + off, dy + off, n, dout);
        back(a, dout, n);
        cpu->swiglu(cpu, x + off, y + off, n, b);
        CHECK_REL(a, b, n, 1e-5);
        gpu->geglu(gpu, dx + off, dy + off, n, dout);
        back(a, dout, n);
        cpu->geglu(cpu, x + off, y + off, n, b);
        CHECK_REL(a, b, n, 1e-5);
        float *dz = dev(x, T * D);
        memcpy(b, x, sizeof b);
        gpu->add(gpu, dz + off, dy + off, n);
        cpu->add(cpu, b + off, y + off, n);
        back(a, dz, T * D);
        CHECK(memcmp(a, b, sizeof b) == 0);
        gpu->free(gpu, dz);
    }
    /* add, scale, softcap in place */
    float *dz = dev(x, T * D);
    memcpy(b, x, sizeof b);
    gpu->add(gpu, dz, dy, T * D);
    cpu->add(cpu, b, y, T * D);
    gpu->scale(gpu, dz, 0.37f, T * D);
    cpu->scale(cpu, b, 0.37f, T * D);
    gpu->softcap(gpu, dz, 1.5f, T * D);
    cpu->softcap(cpu, b, 1.5f, T * D);
    back(a, dz, T * D);
    CHECK_REL(a, b, T * D, 1e-5);
    /* gather_rows: exact */
    const int32_t rows[3] = {4, 0, 4};
    float *dg = dev(NULL, 3 * D);
    gpu->gather_rows(gpu, dx, rows, 3, D, dg);
    back(a, dg, 3 * D);
    cpu->gather_rows(cpu, x, rows, 3, D, b);
    CHECK(memcmp(a, b, 3 * D * sizeof(float)) == 0);
    float *bufs[] = {dx, dy, dout, dz, dg};
    for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
    return 0;
}

/* The same KV pool on both backends: blocks in shuffled order, several sequences' worth of
 * rows written, then attention of a chunk of rows (prefill) and of single rows (decode), with a
 * sliding window and a soft cap, at head sizes on the vector path (64, 128) and off it (80),
 * with the cache in f16 or quantized (dt: the caches' bytes equal, the CPU's quantizer being
 * the definition; attention reads the same codes, so within the same tolerances). */
static int attention_case(hx_kv_dtype dt, int32_t d_head, int32_t n_head, int32_t n_kv,
                          int32_t window, float softcap)
{
    enum { BT = 16, N_CTX = 600, LAYERS = 2, LAYER = 1 };
    hx_err err = {0};
    const int32_t kvd = n_kv * d_head, qd = n_head * d_head, n_blocks = N_CTX / BT + 4;
    hx_kv_store kc = {.n_blocks = n_blocks, .block_tokens = BT, .n_layer = LAYERS,
                      .n_kv_head = n_kv, .d_head = d_head, .kv_dim = kvd, .dtype = dt};
    hx_kv_store kg = kc;
    CHECK(cpu->kv_alloc(cpu, &kc, &err) == HX_OK);
    CHECK(gpu->kv_alloc(gpu, &kg, &err) == HX_OK);
    int32_t blocks[N_CTX / BT + 4];
    for (int32_t i = 0; i < n_blocks; i++) blocks[i] = (i * 7 + 3) % n_blocks; /* a permutation */
    const hx_kv_seq seq = {blocks, N_CTX};
    int32_t pos[N_CTX];
    for (int32_t i = 0; i < N_CTX; i++) pos[i] = i;
    float *k = hx_alloc((size_t)N_CTX * kvd * sizeof *k), *v = hx_alloc((size_t)N_CTX * kvd * sizeof *v);
    float *q = hx_alloc((size_t)N_CTX * qd * sizeof *q);
    float *a = hx_alloc((size_t)N_CTX * qd * sizeof *a), *b = hx_alloc((size_t)N_CTX * qd * sizeof *b);
    fill(k, (int64_t)N_CTX * kvd, -1, 1);
    fill(v, (int64_t)N_CTX * kvd, -1, 1);
    fill(q, (int64_t)N_CTX * qd, -1, 1);
    float *dk = dev(k, (int64_t)N_CTX * kvd), *dv = dev(v, (int64_t)N_CTX * kvd);
    float *dq = dev(q, (int64_t)N_CTX * qd), *dout = dev(NULL, (int64_t)N_CTX * qd);
    /* write in two calls (a prompt chunk, then the rest) like a prefill in steps */
    const int32_t split = 97;
    gpu->kv_write(gpu, &kg, LAYER, &seq, pos, dk, dv, split);
    gpu->kv_write(gpu, &kg, LAYER, &seq, pos + split, dk + (int64_t)split * kvd,
                  dv + (int64_t)split * kvd, N_CTX - split);
    cpu->kv_write(cpu, &kc, LAYER, &seq, pos, k, v, N_CTX);
    /* the caches hold the same bits */
    const size_t kv_bytes = (size_t)n_blocks * LAYERS * n_kv * hx_kv_tile_bytes(dt, BT, d_head);
    uint16_t *kcopy = hx_alloc(kv_bytes);
    gpu->read(gpu, kcopy, kg.k, kv_bytes);
    CHECK(memcmp(kcopy, kc.k, kv_bytes) == 0);
    gpu->read(gpu, kcopy, kg.v, kv_bytes);
    CHECK(memcmp(kcopy, kc.v, kv_bytes) == 0);
    const hx_attn_shape shape = {n_head, n_kv, d_head, 1.0f / sqrtf((float)d_head), window,
                                 softcap};
    /* prefill: every row at once (d_head 64 and 128 on the tensor cores: q and the
     * probabilities in f16) */
    gpu->attention(gpu, &kg, LAYER, &seq, dq, pos, N_CTX, &shape, dout);
    back(a, dout, (int64_t)N_CTX * qd);
    cpu->attention(cpu, &kc, LAYER, &seq, q, pos, N_CTX, &shape, b);
    CHECK_REL(a, b, (int64_t)N_CTX * qd, d_head == 64 || d_head == 128 ? 3e-3 : 1e-5);
    /* a chunk of rows in the middle (a later prompt step, tiles not starting at 0) */
    gpu->attention(gpu, &kg, LAYER, &seq, dq + 70 * qd, pos + 70, 41, &shape, dout);
    back(a, dout, 41 * qd);
    CHECK_REL(a, b + 70 * qd, 41 * qd, d_head == 64 || d_head == 128 ? 3e-3 : 1e-5);
    /* 12 rows: more than a GEMV's, fewer than the tensor cores take (the scalar kernel) */
    gpu->attention(gpu, &kg, LAYER, &seq, dq + 300 * qd, pos + 300, 12, &shape, dout);
    back(a, dout, 12 * qd);
    CHECK_REL(a, b + 300 * qd, 12 * qd, 1e-5);
    /* decode: the last row alone */
    gpu->attention(gpu, &kg, LAYER, &seq, dq + (int64_t)(N_CTX - 1) * qd, pos + N_CTX - 1, 1,
                   &shape, dout);
    back(a, dout, qd);
    CHECK_REL(a, b + (int64_t)(N_CTX - 1) * qd, qd, 1e-5);
    /* decode of a batch: rows at several positions, early ones with fewer chunks than the
     * context splits */
    const int32_t rows[] = {0, 5, 40, 333, 598};
    for (size_t i = 0; i < HX_COUNTOF(rows); i++) {
        gpu->attention(gpu, &kg, LAYER, &seq, dq + (int64_t)rows[i] * qd, pos + rows[i], 1,
                       &shape, dout);
        back(a, dout, qd);
        CHECK_REL(a, b + (int64_t)rows[i] * qd, qd, 1e-5);
    }
    gpu->attention(gpu, &kg, LAYER, &seq, dq + 592 * qd, pos + 592, 8, &shape, dout);
    back(a, dout, 8 * qd);
    CHECK_REL(a, b + 592 * qd, 8 * qd, 1e-5);
    /* a GEMV reading decode attention's output right after: with d_head a multiple of 32 the
     * attention rounds it as it writes (gemv_input); either way, the GEMV of what it wrote */
    {
        enum { N_OUT = 40 };
        static weight w;
        if (weight_make(&w, HX_DT_Q4_0, N_OUT, qd)) return 1;
        const hx_tensor *pw = gpu->weight(gpu, &w.t, &err);
        CHECK(pw != NULL);
        float *dm = dev(NULL, 8 * N_OUT), got[8 * N_OUT], want[8 * N_OUT];
        gpu->attention(gpu, &kg, LAYER, &seq, dq + 592 * qd, pos + 592, 8, &shape, dout);
        gpu->matmul(gpu, pw, NULL, dout, 8, dm);
        back(a, dout, 8 * qd);
        round_like_gemv(a, 8 * qd, a);
        matmul_ref(&w.t, NULL, a, 8, want);
        back(got, dm, 8 * N_OUT);
        CHECK_REL(got, want, 8 * N_OUT, 1e-5);
        gpu->free(gpu, dm);
        gpu->weight_release(gpu, pw);
    }
    /* kv_copy: block 0 over block n_blocks-1, byte for byte */
    gpu->kv_copy(gpu, &kg, blocks[0], blocks[n_blocks - 1]);
    cpu->kv_copy(cpu, &kc, blocks[0], blocks[n_blocks - 1]);
    gpu->read(gpu, kcopy, kg.k, kv_bytes);
    CHECK(memcmp(kcopy, kc.k, kv_bytes) == 0);
    hx_free(kcopy);
    float *bufs[] = {dk, dv, dq, dout};
    for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
    hx_free(k);
    hx_free(v);
    hx_free(q);
    hx_free(a);
    hx_free(b);
    cpu->kv_free(cpu, &kc);
    gpu->kv_free(gpu, &kg);
    return 0;
}

/* A decode step of many sequences as llama.c runs it: every sequence's cache write, then every
 * sequence's attention, the rows of all in one buffer. The GPU joins them into launches of up
 * to HX_CUDA_DEC_ROWS rows, each row with its own block table and position (70 rows here: two
 * launches of each). Against the CPU, over repeated steps (a captured graph replayed), the
 * caches bit for bit; then 8 rows of 3 sequences under a window with a GEMV reading the
 * joined attention's rounded output. */
static int attention_joined_case(hx_kv_dtype dt, int n_seq, const int32_t *rows_of,
                                 int32_t window, bool gemv)
{
    enum { BT = 16, DH = 128, NH = 8, NKV = 2, LAYERS = 2, LAYER = 1, MAX_SEQ = 70, PER = 6 };
    hx_err err = {0};
    const int32_t kvd = NKV * DH, qd = NH * DH, n_blocks = MAX_SEQ * PER + 3;
    hx_kv_store kc = {.n_blocks = n_blocks, .block_tokens = BT, .n_layer = LAYERS,
                      .n_kv_head = NKV, .d_head = DH, .kv_dim = kvd, .dtype = dt};
    hx_kv_store kg = kc;
    CHECK(cpu->kv_alloc(cpu, &kc, &err) == HX_OK);
    CHECK(gpu->kv_alloc(gpu, &kg, &err) == HX_OK);
    static int32_t tables[MAX_SEQ][PER], pos[MAX_SEQ * 3], first[MAX_SEQ + 1];
    hx_kv_seq seqs[MAX_SEQ];
    int32_t n_rows = 0;
    for (int i = 0; i < n_seq; i++) { /* disjoint tables, blocks scattered over the pool */
        for (int j = 0; j < PER; j++) tables[i][j] = ((i * PER + j) * 37 + 5) % n_blocks;
        const int32_t len = 1 + (i * 13) % (PER * BT - 3); /* positions before this step */
        seqs[i] = (hx_kv_seq){tables[i], len + rows_of[i]};
        first[i] = n_rows;
        for (int32_t r = 0; r < rows_of[i]; r++) pos[n_rows++] = len + r;
    }
    first[n_seq] = n_rows;
    /* the positions before, per sequence (each from its own part of one buffer: the GPU's
     * ops run at the next read) */
    int32_t before[PER * BT];
    for (int32_t i = 0; i < PER * BT; i++) before[i] = i;
    const int64_t n_before = (int64_t)MAX_SEQ * PER * BT * kvd;
    float *k = hx_alloc((size_t)n_before * 4), *v = hx_alloc((size_t)n_before * 4);
    fill(k, n_before, -1, 1);
    fill(v, n_before, -1, 1);
    float *dk = dev(k, n_before), *dv = dev(v, n_before);
    for (int i = 0; i < n_seq; i++) {
        const int32_t len = pos[first[i]];
        const int64_t at = (int64_t)i * PER * BT * kvd;
        gpu->kv_write(gpu, &kg, LAYER, &seqs[i], before, dk + at, dv + at, len);
        cpu->kv_write(cpu, &kc, LAYER, &seqs[i], before, k + at, v + at, len);
    }
    float one;
    back(&one, dk, 1); /* run the writes before freeing their inputs */
    gpu->free(gpu, dk);
    gpu->free(gpu, dv);
    hx_free(k);
    hx_free(v);
    /* this step's rows */
    float *sk = hx_alloc((size_t)n_rows * kvd * 4), *sv = hx_alloc((size_t)n_rows * kvd * 4);
    float *q = hx_alloc((size_t)n_rows * qd * 4), *a = hx_alloc((size_t)n_rows * qd * 4);
    float *b = hx_alloc((size_t)n_rows * qd * 4);
    fill(sk, (int64_t)n_rows * kvd, -1, 1);
    fill(sv, (int64_t)n_rows * kvd, -1, 1);
    fill(q, (int64_t)n_rows * qd, -1, 1);
    float *dsk = dev(sk, (int64_t)n_rows * kvd), *dsv = dev(sv, (int64_t)n_rows * kvd);
    float *dq = dev(q, (int64_t)n_rows * qd), *dout = dev(NULL, (int64_t)n_rows * qd);
    const hx_attn_shape shape = {NH, NKV, DH, 1.0f / sqrtf((float)DH), window, 0.0f};
    for (int i = 0; i < n_seq; i++) {
        const int32_t f = first[i], n = rows_of[i];
        cpu->kv_write(cpu, &kc, LAYER, &seqs[i], pos + f, sk + (int64_t)f * kvd,
                      sv + (int64_t)f * kvd, n);
    }
    for (int i = 0; i < n_seq; i++) {
        const int32_t f = first[i];
        cpu->attention(cpu, &kc, LAYER, &seqs[i], q + (int64_t)f * qd, pos + f, rows_of[i],
                       &shape, b + (int64_t)f * qd);
    }
    enum { N_OUT = 40 };
    static weight w;
    const hx_tensor *pw = NULL;
    float *dm = NULL;
    if (gemv) {
        if (weight_make(&w, HX_DT_Q4_0, N_OUT, qd)) return 1;
        CHECK((pw = gpu->weight(gpu, &w.t, &err)) != NULL);
        dm = dev(NULL, (int64_t)n_rows * N_OUT);
    }
    const size_t kv_bytes = (size_t)n_blocks * LAYERS * NKV * hx_kv_tile_bytes(dt, BT, DH);
    uint16_t *cache = hx_alloc(kv_bytes);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < n_seq; i++) {
            const int32_t f = first[i];
            gpu->kv_write(gpu, &kg, LAYER, &seqs[i], pos + f, dsk + (int64_t)f * kvd,
                          dsv + (int64_t)f * kvd, rows_of[i]);
        }
        for (int i = 0; i < n_seq; i++) {
            const int32_t f = first[i];
            gpu->attention(gpu, &kg, LAYER, &seqs[i], dq + (int64_t)f * qd, pos + f, rows_of[i],
                           &shape, dout + (int64_t)f * qd);
        }
        if (gemv) gpu->matmul(gpu, pw, NULL, dout, n_rows, dm);
        back(a, dout, (int64_t)n_rows * qd);
        CHECK_REL(a, b, (int64_t)n_rows * qd, 1e-5);
        for (int side = 0; side < 2; side++) {
            gpu->read(gpu, cache, side ? kg.v : kg.k, kv_bytes);
            CHECK(memcmp(cache, side ? kc.v : kc.k, kv_bytes) == 0);
        }
        if (gemv) {
            float got[8 * N_OUT], want[8 * N_OUT];
            round_like_gemv(a, (int64_t)n_rows * qd, a);
            matmul_ref(&w.t, NULL, a, n_rows, want);
            back(got, dm, (int64_t)n_rows * N_OUT);
            CHECK_REL(got, want, (int64_t)n_rows * N_OUT, 1e-5);
        }
    }
    if (gemv) {
        gpu->free(gpu, dm);
        gpu->weight_release(gpu, pw);
    }
    float *bufs[] = {dsk, dsv, dq, dout};
    for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
    float *hbufs[] = {sk, sv, q, a, b};
    for (size_t i = 0; i < HX_COUNTOF(hbufs); i++) hx_free(hbufs[i]);
    hx_free(cache);
    cpu->kv_free(cpu, &kc);
    gpu->kv_free(gpu, &kg);
    return 0;
}

static int test_attention_joined(void)
{
    NEED_GPU();
    static int32_t ones[70];
    for (int i = 0; i < 70; i++) ones[i] = i % 9 == 4 ? 2 : 1; /* 70 sequences, 77 rows */
    const int32_t three[3] = {3, 1, 4};
    return attention_joined_case(HX_KV_F16, 70, ones, 0, false) ||
           attention_joined_case(HX_KV_F16, 3, three, 24, true) ||
           attention_joined_case(HX_KV_Q8, 70, ones, 0, false) ||
           attention_joined_case(HX_KV_Q4, 3, three, 24, true);
}

/* attention_case's shapes: cache type, d_head, heads, kv heads, window, soft cap. The f16 ones
 * cover heads on the vector paths (64, 128, 256) and off them (80); the quantized ones the
 * head sizes of the fast paths, with a window and a soft cap. */
static const struct {
    hx_kv_dtype dt;
    int32_t     d_head, n_head, n_kv, window;
    float       softcap;
} attention_shapes[] = {
    {HX_KV_F16, 64, 9, 3, 0, 0.0f},   {HX_KV_F16, 128, 8, 8, 0, 0.0f},
    {HX_KV_F16, 80, 4, 2, 0, 0.0f},   {HX_KV_F16, 64, 4, 1, 40, 0.0f},
    {HX_KV_F16, 128, 4, 2, 0, 30.0f}, {HX_KV_F16, 256, 4, 2, 20, 50.0f},
    {HX_KV_Q8, 64, 9, 3, 0, 0.0f},    {HX_KV_Q4, 64, 9, 3, 0, 0.0f},
    {HX_KV_Q8, 128, 8, 8, 0, 0.0f},   {HX_KV_Q4, 128, 4, 2, 40, 30.0f},
    {HX_KV_Q8, 256, 4, 2, 20, 50.0f}, {HX_KV_Q4, 256, 4, 2, 0, 0.0f},
};

/* Decode attention past 2,048 keys (16 blocks of 4 warps, 32 keys a warp), where each warp of
 * the split kernel takes more than one 32-key chunk: rows alone at positions around that edge
 * and far past it, and 4 rows at once, against the CPU; f16 cache, heads of 128 and of 64, 4
 * query heads a kv head. */
static int test_attention_long(void)
{
    NEED_GPU();
    enum { BT = 16, N_CTX = 4700, NB = N_CTX / BT + 2 };
    static const int32_t d_heads[] = {128, 64}, rows[] = {2047, 2048, 2080, 4699};
    hx_err err = {0};
    for (size_t h = 0; h < HX_COUNTOF(d_heads); h++) {
        const int32_t dh = d_heads[h], n_kv = 2, n_head = 8, kvd = n_kv * dh, qd = n_head * dh;
        hx_kv_store kc = {.n_blocks = NB, .block_tokens = BT, .n_layer = 1, .n_kv_head = n_kv,
                          .d_head = dh, .kv_dim = kvd, .dtype = HX_KV_F16};
        hx_kv_store kg = kc;
        CHECK(cpu->kv_alloc(cpu, &kc, &err) == HX_OK);
        CHECK(gpu->kv_alloc(gpu, &kg, &err) == HX_OK);
        static int32_t blocks[NB], pos[N_CTX];
        for (int32_t i = 0; i < NB; i++) blocks[i] = (i * 11 + 5) % NB; /* a permutation */
        for (int32_t i = 0; i < N_CTX; i++) pos[i] = i;
        const hx_kv_seq seq = {blocks, N_CTX};
        float *k = hx_alloc((size_t)N_CTX * kvd * sizeof *k);
        float *v = hx_alloc((size_t)N_CTX * kvd * sizeof *v);
        float *q = hx_alloc((size_t)4 * qd * sizeof *q), a[4 * 1024], b[4 * 1024];
        CHECK(k && v && q);
        fill(k, (int64_t)N_CTX * kvd, -1, 1);
        fill(v, (int64_t)N_CTX * kvd, -1, 1);
        fill(q, 4 * qd, -1, 1);
        float *dk = dev(k, (int64_t)N_CTX * kvd), *dv = dev(v, (int64_t)N_CTX * kvd);
        float *dq = dev(q, 4 * qd), *dout = dev(NULL, 4 * qd);
        gpu->kv_write(gpu, &kg, 0, &seq, pos, dk, dv, N_CTX);
        cpu->kv_write(cpu, &kc, 0, &seq, pos, k, v, N_CTX);
        const hx_attn_shape shape = {n_head, n_kv, dh, 1.0f / sqrtf((float)dh), 0, 0.0f};
        for (size_t r = 0; r < HX_COUNTOF(rows); r++) {
            gpu->attention(gpu, &kg, 0, &seq, dq, &rows[r], 1, &shape, dout);
            back(a, dout, qd);
            cpu->attention(cpu, &kc, 0, &seq, q, &rows[r], 1, &shape, b);
            const double e = rel_err(a, b, qd);
            if (!(e <= 1e-5))
                CHECK_FAIL("heads of %d, position %d: relative error %.3g", dh, rows[r], e);
        }
        const int32_t last4[] = {4696, 4697, 4698, 4699};
        gpu->attention(gpu, &kg, 0, &seq, dq, last4, 4, &shape, dout);
        back(a, dout, 4 * qd);
        cpu->attention(cpu, &kc, 0, &seq, q, last4, 4, &shape, b);
        CHECK_REL(a, b, 4 * qd, 1e-5);
        float *bufs[] = {dk, dv, dq, dout};
        for (size_t i = 0; i < HX_COUNTOF(bufs); i++) gpu->free(gpu, bufs[i]);
        gpu->kv_free(gpu, &kg);
        cpu->kv_free(cpu, &kc);
        hx_free(k);
        hx_free(v);
        hx_free(q);
    }
    return 0;
}

/* attention_case for every shape whose cache is f16 (quantized: false) or quantized. */
static int attention_cases(bool quantized)
{
    for (size_t i = 0; i < HX_COUNTOF(attention_shapes); i++) {
        const hx_kv_dtype dt = attention_shapes[i].dt;
        if ((dt != HX_KV_F16) == quantized &&
            attention_case(dt, attention_shapes[i].d_head, attention_shapes[i].n_head,
                           attention_shapes[i].n_kv, attention_shapes[i].window,
                           attention_shapes[i].softcap))
            return 1;
    }
    return 0;
}

static int test_attention(void)
{
    NEED_GPU();
    return attention_cases(false);
}

/* The quantized caches (HX_KV_Q8, HX_KV_Q4) over attention_shapes; a head the groups do not
 * divide (80) is refused alike. */
static int test_attention_kvq(void)
{
    NEED_GPU();
    hx_err err = {0};
    hx_kv_store bad = {.n_blocks = 4, .block_tokens = 16, .n_layer = 1, .n_kv_head = 2,
                       .d_head = 80, .kv_dim = 160, .dtype = HX_KV_Q8};
    CHECK(gpu->kv_alloc(gpu, &bad, &err) == HX_E_INVALID);
    CHECK(strstr(err.msg, "multiple of 32") != NULL);
    return attention_cases(true);
}

/* rmsnorm at the widths its launches differ by (values a thread holds in registers: up to 4, 8
 * and 16; wider rows loop), against the CPU: the decode step's few rows (over blocks of a
 * slice each where d is a multiple of 32, rmsnorm_split_kernel), more rows than those (a block
 * a row), and in place (a block a row: the slices' blocks would read what others wrote). */
static int test_rmsnorm_widths(void)
{
    NEED_GPU();
    static const int64_t widths[] = {128, 288, 4096, 5003, 12288, 20000};
    enum { T = 11 };
    static const struct {
        int64_t n;
        bool    in_place;
    } runs[] = {{3, false}, {T, false}, {3, true}};
    hx_err err = {0};
    CHECK(cpu->reserve(cpu, 20000, 64, &err) == HX_OK);
    for (size_t k = 0; k < HX_COUNTOF(widths); k++) {
        const int64_t d = widths[k];
        float *x = hx_alloc((size_t)(T * d) * sizeof *x);
        float *a = hx_alloc((size_t)(T * d) * sizeof *a);
        float *b = hx_alloc((size_t)(T * d) * sizeof *b);
        float *w_v = hx_alloc((size_t)d * sizeof *w_v);
        CHECK(x && a && b && w_v);
        fill(w_v, d, 0.5f, 1.5f);
        const hx_tensor w = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {d}, .data = w_v,
                             .n_bytes = (size_t)d * sizeof *w_v}; /* kept: see the file comment */
        for (size_t c = 0; c < HX_COUNTOF(runs); c++) {
            const int64_t n = runs[c].n;
            const bool in_place = runs[c].in_place;
            fill(x, n * d, -3, 3);
            float *dx = dev(x, n * d), *dout = in_place ? dx : dev(NULL, n * d);
            gpu->rmsnorm(gpu, dx, &w, n, d, 1e-5f, dout);
            back(a, dout, n * d);
            cpu->rmsnorm(cpu, x, &w, n, d, 1e-5f, b);
            const double e = rel_err(a, b, n * d);
            if (!(e <= 1e-5))
                CHECK_FAIL("%lld rows of %lld%s: relative error %.3g", (long long)n, (long long)d,
                           in_place ? ", in place" : "", e);
            gpu->free(gpu, dx);
            if (!in_place) gpu->free(gpu, dout);
        }
        hx_free(x);
        hx_free(a);
        hx_free(b);
    }
    return 0;
}

/* Ops run at the next read, and a step seen twice is captured and then replayed as a CUDA
 * graph: the replays must read each step's own staged inputs (token ids, positions), not the
 * captured ones. The same step (embed, rope, add) five times with new ids and positions. */
static int test_replay_new_inputs(void)
{
    NEED_GPU();
    enum { T = 3, D = 64 };
    weight w;
    static weight keep;
    if (weight_make(&keep, HX_DT_Q8_0, 50, D)) return 1;
    w = keep;
    float inv_freq[D / 2];
    for (int i = 0; i < D / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / D);
    const hx_rope rope = {inv_freq, D, 1.0f, true};
    float *dx = dev(NULL, T * D), *dy = dev(NULL, T * D);
    for (int step = 0; step < 5; step++) {
        int32_t ids[T], pos[T];
        for (int t = 0; t < T; t++) {
            ids[t] = (step * 7 + t * 13) % 50;
            pos[t] = step * 5 + t;
        }
        gpu->embed(gpu, &w.t, ids, T, dx);
        gpu->embed(gpu, &w.t, ids, T, dy);
        gpu->rope(gpu, dx, pos, T, 1, D, &rope);
        gpu->add(gpu, dx, dy, T * D);
        float got[T * D], want[T * D], e[D];
        back(got, dx, T * D);
        for (int t = 0; t < T; t++) {
            hx_tensor_dequant_row(&w.t, ids[t], want + t * D);
            memcpy(e, want + t * D, sizeof e);
            cpu->rope(cpu, want + t * D, &pos[t], 1, 1, D, &rope);
            for (int i = 0; i < D; i++) want[t * D + i] += e[i];
        }
        const double err = rel_err(got, want, T * D);
        if (!(err <= 1e-5)) CHECK_FAIL("step %d: relative error %.3g", step, err);
    }
    gpu->free(gpu, dx);
    gpu->free(gpu, dy);
    return 0;
}

/* The sample op draws what the host's sampler draws from the same logits with the same seed and
 * history: greedy and truncated settings, logit bias and penalties, vocabularies shorter than
 * top_k, of one segment and of many, and ties (logits rounded to integers: the lower id goes
 * first, as on the host). Tokens exactly (the chain runs the host's operations in the host's
 * order); log-probabilities within 1e-4 (the device sums the vocabulary by segments). A row with
 * top_k 0 is left alone. */
static int test_sample(void)
{
    NEED_GPU();
    static const int64_t vocabs[] = {7, 4096, 50257, 131077};
    static const struct {
        float   t;
        int32_t k;
        float   p, mp;
        int     n_top; /* -1: no logprobs */
        float   rep, pres, freq;
        bool    bias;
    } sets[] = {
        {0.0f, 0, 1.0f, 0.0f, -1, 1.0f, 0.0f, 0.0f, false},
        {0.8f, 40, 0.95f, 0.05f, -1, 1.0f, 0.0f, 0.0f, false},
        {1.5f, 256, 1.0f, 0.0f, 5, 1.0f, 0.0f, 0.0f, false},
        {0.3f, 7, 0.5f, 0.2f, 0, 1.3f, 0.5f, 0.25f, true},
        {1.0f, 1, 1.0f, 0.0f, -1, 1.0f, 0.0f, 0.0f, false},
        {2.0f, 100, 0.99f, 0.0f, 20, 1.1f, 0.0f, 0.0f, true},
        {0.0f, 0, 1.0f, 0.0f, 20, 1.0f, 0.0f, 1.0f, false},
    };
    enum { ROWS = HX_COUNTOF(sets) + 1 };
    for (size_t vi = 0; vi < HX_COUNTOF(vocabs); vi++)
        for (int ties = 0; ties < 2; ties++)
            for (int rep = 0; rep < 4; rep++) {
                const int64_t V = vocabs[vi];
                float *h = hx_alloc((size_t)(ROWS * V) * sizeof *h);
                float *tmp = hx_alloc((size_t)V * sizeof *tmp);
                CHECK(h && tmp);
                fill(h, ROWS * V, -8.0f, 8.0f);
                for (int64_t i = 0; ties && i < ROWS * V; i++) h[i] = roundf(h[i]);
                float *d = dev(h, ROWS * V);
                hx_sample_row rows[ROWS];
                hx_sample_out got[ROWS];
                hx_token_logprobs want[ROWS];
                hx_sampler *a[ROWS] = {0}, *b = NULL; /* a[r] holds rows[r].edits */
                const int32_t bias_ids[3] = {1, 5, (int32_t)(V / 2)};
                const float bias_values[3] = {3.0f, -2.0f, 5.0f};
                for (int r = 0; r < ROWS - 1; r++) {
                    hx_sampling p = hx_sampling_default();
                    p.temperature = sets[r].t, p.top_k = sets[r].k, p.top_p = sets[r].p;
                    p.min_p = sets[r].mp, p.seed = (uint64_t)(rep * 100 + r + 1);
                    p.n_logprobs = sets[r].n_top > 0 ? sets[r].n_top : 0;
                    p.repeat_penalty = sets[r].rep, p.presence_penalty = sets[r].pres;
                    p.frequency_penalty = sets[r].freq;
                    if (sets[r].bias) p.bias_ids = bias_ids, p.bias_values = bias_values;
                    if (sets[r].bias) p.n_bias = V > 5 ? 3 : 2;
                    hx_err err = {0};
                    CHECK(hx_sampler_init(&p, (int32_t)V, &a[r], &err) == HX_OK &&
                          hx_sampler_init(&p, (int32_t)V, &b, &err) == HX_OK);
                    for (int j = 0; j < 30; j++) { /* a history for the penalties */
                        const int32_t t = (int32_t)((j * 7919 + r * 31) % V);
                        hx_sampler_accept(a[r], t);
                        hx_sampler_accept(b, t);
                    }
                    const bool lp = sets[r].n_top >= 0;
                    CHECK(hx_sampler_device_row(a[r], lp, &rows[r]));
                    memcpy(tmp, h + r * V, (size_t)V * sizeof *tmp);
                    want[r].token = hx_sampler_sample(b, tmp, lp ? &want[r] : NULL);
                    hx_sampler_free(b);
                }
                rows[ROWS - 1] = (hx_sample_row){.top_k = 0};
                for (int r = 0; r < ROWS; r++) got[r].token = -7;
                gpu->sample(gpu, d, ROWS, V, rows, got);
                for (int r = 0; r < ROWS - 1; r++) {
                    if (got[r].token != want[r].token)
                        CHECK_FAIL("vocab %lld%s, settings %d: token %d, the host draws %d",
                                   (long long)V, ties ? " (ties)" : "", r, got[r].token,
                                   want[r].token);
                    if (sets[r].n_top < 0) continue;
                    if (!(fabsf(got[r].logprob - want[r].logprob) <= 1e-4f))
                        CHECK_FAIL("vocab %lld, settings %d: logprob %g, the host %g",
                                   (long long)V, r, got[r].logprob, want[r].logprob);
                    for (int j = 0; j < sets[r].n_top && j < V; j++)
                        if (got[r].top_ids[j] != want[r].top_ids[j] ||
                            !(fabsf(got[r].top_logprobs[j] - want[r].top_logprobs[j]) <= 1e-4f))
                            CHECK_FAIL("vocab %lld, settings %d, alternative %d: %d (%g), the "
                                       "host %d (%g)", (long long)V, r, j, got[r].top_ids[j],
                                       got[r].top_logprobs[j], want[r].top_ids[j],
                                       want[r].top_logprobs[j]);
                }
                CHECK_EQ(got[ROWS - 1].token, -7);
                for (int r = 0; r < ROWS; r++) hx_sampler_free(a[r]);
                gpu->free(gpu, d);
                hx_free(h);
                hx_free(tmp);
            }
    return 0;
}

/* Device memory is reported and sane. */
static int test_mem_info(void)
{
    NEED_GPU();
    int64_t f = -1, t = -1;
    gpu->mem_info(gpu, &f, &t);
    CHECK(t > 0 && f > 0 && f <= t);
    hx_gpu_info g[8];
    const char *why = NULL;
    CHECK(hx_gpu_list(g, 8, &why) >= 1);
    CHECK(g[0].total_bytes == t && g[0].cc_major >= 7 && g[0].n_sm > 0);
    return 0;
}
#else
static int skip_no_cuda(void)
{
    printf("skip: this build has no CUDA backend (nvcc was not found)\n");
    return 0;
}
#define test_matmul_formats  skip_no_cuda
#define test_matmul_chunks   skip_no_cuda
#define test_mlx4_layouts    skip_no_cuda
#define test_gemv_stream     skip_no_cuda
#define test_gemv_input_reuse skip_no_cuda
#define test_gemm_input_reuse skip_no_cuda
#define test_joined_launches skip_no_cuda
#define test_moe             skip_no_cuda
#define test_embed_formats   skip_no_cuda
#define test_row_ops         skip_no_cuda
#define test_rmsnorm_widths  skip_no_cuda
#define test_attention       skip_no_cuda
#define test_attention_kvq   skip_no_cuda
#define test_attention_long  skip_no_cuda
#define test_attention_joined skip_no_cuda
#define test_sample          skip_no_cuda
#define test_replay_new_inputs skip_no_cuda
#define test_mem_info        skip_no_cuda
#define test_keep_dequantized skip_no_cuda
#define test_moe_routed      skip_no_cuda
#define test_gemv_post       skip_no_cuda
#endif

/* Without CUDA in the build (or a GPU on the machine), asking for it is a clear error. */
static int test_device_names(void)
{
    hx_backend *be = NULL;
    hx_err err = {0};
    CHECK(hx_backend_open("tpu", 0, 0, &be, &err) == HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "unknown device");
    CHECK(!hx_device_is_gpu("cpu") && hx_device_is_gpu("cuda") && hx_device_is_gpu("cuda:1"));
    CHECK(!hx_device_is_gpu("cuda:") && !hx_device_is_gpu("cuda:x") && !hx_device_is_gpu("cudax"));
    CHECK(hx_backend_open("cpu", 1, 0, &be, &err) == HX_OK);
    be->destroy(be);
    hx_err e2 = {0};
    const hx_status st = hx_backend_open("cuda:999", 0, 0, &be, &e2);
    CHECK(st == HX_E_UNSUPPORTED || st == HX_E_NOTFOUND);
    CHECK(be == NULL);
    CHECK(strstr(e2.msg, "CUDA") || strstr(e2.msg, "cuda"));
    return 0;
}

static const check_case cases[] = {
    { "device_names", test_device_names },
    { "matmul_formats", test_matmul_formats },
    { "mlx4_layouts", test_mlx4_layouts },
    { "gemv_stream", test_gemv_stream },
    { "matmul_chunks", test_matmul_chunks },
    { "gemm_input_reuse", test_gemm_input_reuse },
    { "gemv_input_reuse", test_gemv_input_reuse },
    { "joined_launches", test_joined_launches },
    { "gemv_post", test_gemv_post },
    { "keep_dequantized", test_keep_dequantized },
    { "moe", test_moe },
    { "moe_routed", test_moe_routed },
    { "embed_formats", test_embed_formats },
    { "row_ops", test_row_ops },
    { "rmsnorm_widths", test_rmsnorm_widths },
    { "attention", test_attention },
    { "attention_kvq", test_attention_kvq },
    { "attention_long", test_attention_long },
    { "attention_joined", test_attention_joined },
    { "replay_new_inputs", test_replay_new_inputs },
    { "sample", test_sample },
    { "mem_info", test_mem_info },
};

int main(int argc, char **argv)
{
    const int r = check_run(cases, HX_COUNTOF(cases), argc, argv);
#ifdef HX_HAVE_CUDA
    if (gpu) gpu->destroy(gpu);
    if (cpu) cpu->destroy(cpu);
#endif
    return r;
}
