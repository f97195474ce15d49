/* test_cpu_kernels.c - the CPU leaf kernels (src/backend/cpu/kernels.h, act_quant.h).
 *
 * Weights are random bytes with every scale field replaced by a small finite half, so every
 * block is a valid block of its format; activations are random floats of mixed magnitude with a
 * few all-zero blocks. Sizes are odd multiples of the block size (chunk tails, strip tails, a
 * panel chunk boundary) and rows 1, 3 and 17 (17 = two register tiles of 8 plus a lone row).
 * Tolerances:
 *  - activation quantizer variants: bit-identical to the reference;
 *  - dot and matmul variants: |got - ref| <= 2e-5 * sum_i |w_i x_i| (float summation order and
 *    where scale products are rounded are the only differences: integer sums are exact);
 *  - quantized dot vs the f32 dot of the dequantized weights: the rounding of each activation
 *    moves it by at most d_b / 2, so by Cauchy-Schwarz the error is at most
 *    ||w||_2 * sqrt(sum_b 32 (d_b/2)^2) (plus 1e-5 of the magnitude for float rounding). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/kernels.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/f16.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/tensor.h"

/* ---- helpers ---- */

static void put_f16(void *p, float v)
{
    const uint16_t h = hx_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* A random weight matrix of dt [n_out, n] with valid scales; MLX gets separate scales/biases
 * in sb_dtype with the given group size. Buffers come from malloc; free with free_wmat. */
static hx_wmat make_wmat(hx_dtype dt, int64_t n_out, int64_t n, int gs, hx_dtype sb_dt,
                         uint32_t seed)
{
    hx_wmat w = { .dtype = dt, .n_in = n, .n_out = n_out };
    w.row_bytes = hx_dtype_row_bytes(dt, n);
    unsigned char *p = malloc(w.row_bytes * (size_t)n_out + 64);
    for (size_t i = 0; i < w.row_bytes * (size_t)n_out; i++)
        p[i] = (unsigned char)(check_rng(&seed) >> 24);
    const int64_t n_blocks = n_out * (n / hx_dtypes[dt].block_n);
    for (int64_t b = 0; b < n_blocks; b++) {
        unsigned char *blk = p + b * hx_dtypes[dt].block_bytes;
        switch (dt) {
        case HX_DT_F32:  { const float v = check_rng_range(&seed, -1, 1); memcpy(blk, &v, 4); break; }
        case HX_DT_F16:  put_f16(blk, check_rng_range(&seed, -1, 1)); break;
        case HX_DT_BF16: { const float v = check_rng_range(&seed, -1, 1); uint32_t u; memcpy(&u, &v, 4);
                           const uint16_t h = (uint16_t)(u >> 16); memcpy(blk, &h, 2); break; }
        case HX_DT_Q4_0:
        case HX_DT_Q8_0: put_f16(blk, check_rng_range(&seed, 0.001f, 0.02f)); break;
        case HX_DT_Q4_1: put_f16(blk, check_rng_range(&seed, 0.001f, 0.02f));
                         put_f16(blk + 2, check_rng_range(&seed, -0.1f, 0.1f)); break;
        case HX_DT_Q4_K:
        case HX_DT_Q5_K: put_f16(blk, check_rng_range(&seed, 0.0001f, 0.002f));
                         put_f16(blk + 2, check_rng_range(&seed, 0.0001f, 0.002f)); break;
        case HX_DT_Q6_K: put_f16(blk + 208, check_rng_range(&seed, 0.0001f, 0.002f)); break;
        default: break; /* MLX: any code is valid */
        }
    }
    w.data = p;
    if (dt == HX_DT_MLX4 || dt == HX_DT_MLX8) {
        const int64_t n_sb = n_out * (n / gs);
        const size_t es = sb_dt == HX_DT_F32 ? 4 : 2;
        unsigned char *s = malloc((size_t)n_sb * es), *bi = malloc((size_t)n_sb * es);
        for (int64_t g = 0; g < n_sb; g++) {
            const float vs = check_rng_range(&seed, 0.001f, 0.02f), vb = check_rng_range(&seed, -0.1f, 0.1f);
            if (sb_dt == HX_DT_F32) {
                memcpy(s + 4 * g, &vs, 4);
                memcpy(bi + 4 * g, &vb, 4);
            } else if (sb_dt == HX_DT_F16) {
                put_f16(s + 2 * g, vs);
                put_f16(bi + 2 * g, vb);
            } else {
                uint32_t u;
                memcpy(&u, &vs, 4);
                const uint16_t hs = (uint16_t)(u >> 16);
                memcpy(&u, &vb, 4);
                const uint16_t hb = (uint16_t)(u >> 16);
                memcpy(s + 2 * g, &hs, 2);
                memcpy(bi + 2 * g, &hb, 2);
            }
        }
        w.scales = s, w.biases = bi, w.sb_dtype = sb_dt, w.group_size = gs;
    }
    return w;
}

static void free_wmat(hx_wmat *w)
{
    free((void *)w->data);
    free((void *)w->scales);
    free((void *)w->biases);
}

/* Row o of w dequantized by the reference (tensor/quant.h) into out[n]. */
static void dequant_row(const hx_wmat *w, int64_t o, float *out)
{
    hx_tensor t = { .dtype = w->dtype, .n_dims = 2, .shape = { w->n_out, w->n_in }, .data = w->data,
                    .scales = w->scales, .biases = w->biases, .sb_dtype = w->sb_dtype,
                    .group_size = w->group_size };
    hx_tensor_dequant_row(&t, o, out);
}

/* n_rows random activation rows [n_rows, n] (block 3 of each row all zero) and their
 * quantization by the reference. Free with free_act. */
static hx_act make_act(int64_t n_rows, int64_t n, uint32_t seed)
{
    float *f = malloc((size_t)(n_rows * n) * sizeof(float));
    for (int64_t i = 0; i < n_rows * n; i++) {
        const float mag = (i / 32) % 5 == 0 ? 20.0f : 1.0f; /* some blocks 20x larger */
        f[i] = (i % n) / 32 == 3 ? 0.0f : check_rng_range(&seed, -mag, mag);
    }
    hx_act a;
    void *buf = aligned_alloc(64, hx_act_bytes(n_rows, n));
    hx_act_init(&a, buf, n_rows, n);
    hx_act_quantize(&a, f, hx_act_quant_ref);
    return a;
}

static void free_act(hx_act *a)
{
    free((void *)a->f);
    free(a->qs); /* the start of the buffer */
}

/* sum_i |w_i x_i| of row o and activation row r: the scale of the float rounding error. */
static double magnitude(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    float *row = malloc((size_t)w->n_in * sizeof(float));
    dequant_row(w, o, row);
    double m = 0.0;
    for (int64_t i = 0; i < w->n_in; i++) m += fabs((double)row[i] * x->f[r * x->n + i]);
    free(row);
    return m;
}

/* One test shape per format: the sizes, and for MLX the group size and scale dtype. */
typedef struct {
    int64_t  n;
    int      gs;
    hx_dtype sb_dt;
} shape;

static int shapes_for(hx_dtype dt, shape *out)
{
    if (dt == HX_DT_Q4_K || dt == HX_DT_Q5_K || dt == HX_DT_Q6_K) {
        out[0] = (shape){ 256, 0, 0 }, out[1] = (shape){ 768, 0, 0 };
        out[2] = (shape){ 4352, 0, 0 };
        return 3;
    }
    if (dt == HX_DT_MLX4 || dt == HX_DT_MLX8) {
        out[0] = (shape){ 384, 32, HX_DT_F16 };
        out[1] = (shape){ 640, 64, HX_DT_BF16 };
        out[2] = (shape){ 4224, 128, HX_DT_F32 };
        out[3] = (shape){ 4224, 64, HX_DT_F16 };
        return 4;
    }
    out[0] = (shape){ 32, 0, 0 }, out[1] = (shape){ 544, 0, 0 }, out[2] = (shape){ 768, 0, 0 };
    out[3] = (shape){ 4128, 0, 0 };
    return 4;
}

/* ---- activation quantizer ---- */

static int test_act_quant_matches_definition_by_hand(void)
{
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.5f; /* -8 .. 7.5, amax 8 */
    int8_t qs[32];
    float d;
    int16_t bs[2];
    hx_act_quant_ref(x, qs, &d, bs, 32);
    CHECK(d == 8.0f / 127.0f);
    CHECK_EQ(qs[0], -127);                   /* -8 * 127/8 */
    CHECK_EQ(qs[16], 0);
    CHECK_EQ(qs[17], 8);                     /* 0.5 * 15.875 = 7.9375 -> 8 */
    CHECK_EQ(qs[31], 119);                   /* 7.5 * 15.875 = 119.0625 -> 119 */
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 16; i++) s0 += qs[i], s1 += qs[16 + i];
    CHECK_EQ(bs[0], s0);
    CHECK_EQ(bs[1], s1);
    float z[32] = { 0 };
    hx_act_quant_ref(z, qs, &d, bs, 32);     /* an all-zero block: scale 0, codes 0 */
    CHECK(d == 0.0f && qs[5] == 0 && bs[0] == 0 && bs[1] == 0);
    return 0;
}

static int test_act_quant_variants_equal_reference_bits(void)
{
    enum { N = 4128 };
    static float x[N];
    static int8_t q_ref[N], q[N];
    static float d_ref[N / 32], d[N / 32];
    static int16_t s_ref[N / 16], s[N / 16];
    uint32_t seed = 11;
    for (int i = 0; i < N; i++)
        x[i] = (i / 32) % 7 == 2 ? 0.0f : check_rng_range(&seed, -3, 3) * (float)(1 + i % 13);
    x[100] = 1e-30f; /* subnormal-scale block */
    hx_act_quant_ref(x, q_ref, d_ref, s_ref, N);
    hx_act_quant_variant v[4];
    const int nv = hx_act_quant_variants(hx_cpu_isa(), v, 4);
    CHECK(nv >= 1 && strcmp(v[nv - 1].name, "ref") == 0);
    for (int k = 0; k < nv; k++) {
        memset(q, 0x55, sizeof q);
        v[k].fn(x, q, d, s, N);
        for (int i = 0; i < N; i++)
            if (q[i] != q_ref[i]) CHECK_FAIL("%s: qs[%d] %d vs %d", v[k].name, i, q[i], q_ref[i]);
        for (int b = 0; b < N / 32; b++)
            if (hx_f32_to_bits(d[b]) != hx_f32_to_bits(d_ref[b]))
                CHECK_FAIL("%s: d[%d] %.9g vs %.9g", v[k].name, b, (double)d[b], (double)d_ref[b]);
        for (int h = 0; h < N / 16; h++)
            if (s[h] != s_ref[h]) CHECK_FAIL("%s: bsum[%d] %d vs %d", v[k].name, h, s[h], s_ref[h]);
    }
    return 0;
}

/* The second-term quantizer: its scale is d1 / 256 exactly, d1 q1 + d2 q2 is within d1 / 256
 * of x (d1 / 512 but at exact ties, where q2 = 128 clamps to 127), ties included (x[7] below
 * lands on one), and the selected variant gives the reference's bits. */
static int test_act_quant2_is_exact_residual_and_variant_bits(void)
{
    enum { N = 4128 };
    static float x[N], d1[N / 32], d2[N / 32], d2r[N / 32];
    static int8_t q1[N], q2[N], q2r[N];
    static int16_t s1[N / 16], s2[N / 16], s2r[N / 16];
    uint32_t seed = 12;
    for (int i = 0; i < N; i++)
        x[i] = (i / 32) % 7 == 2 ? 0.0f : check_rng_range(&seed, -3, 3) * (float)(1 + i % 13);
    x[0] = 127.0f; /* block 0: amax 127, d1 = 1, and x[7] = 2.5 is an exact tie */
    x[7] = 2.5f;
    hx_act_quant_ref(x, q1, d1, s1, N);
    hx_act_quant2_ref(x, q1, d1, q2r, d2r, s2r, N);
    for (int b = 0; b < N / 32; b++) {
        CHECK(d2r[b] == d1[b] / 256.0f);
        for (int i = 32 * b; i < 32 * b + 32; i++) {
            const double back = (double)d1[b] * q1[i] + (double)d2r[b] * q2r[i];
            if (!(fabs(back - x[i]) <= d1[b] / 256.0 * 1.0001))
                CHECK_FAIL("x[%d] = %.9g comes back as %.9g (d1 %.3g)", i, (double)x[i], back,
                           (double)d1[b]);
        }
        for (int h = 0; h < 2; h++) {
            int sum = 0;
            for (int i = 32 * b + 16 * h; i < 32 * b + 16 * h + 16; i++) sum += q2r[i];
            CHECK(s2r[2 * b + h] == sum);
        }
    }
    CHECK(q2r[7] == 127); /* the tie: 2.5 rounds to 2, residual 0.5 = 128 d2, clamped */
    const hx_kernels k = hx_kernels_select(hx_cpu_isa());
    memset(q2, 0x55, sizeof q2);
    k.act_quant2(x, q1, d1, q2, d2, s2, N);
    for (int i = 0; i < N; i++)
        if (q2[i] != q2r[i]) CHECK_FAIL("q2[%d] %d vs reference %d", i, q2[i], q2r[i]);
    for (int b = 0; b < N / 32; b++)
        CHECK(hx_f32_to_bits(d2[b]) == hx_f32_to_bits(d2r[b]));
    for (int h = 0; h < N / 16; h++) CHECK(s2[h] == s2r[h]);
    return 0;
}

/* ---- dot variants against the reference ---- */

static int check_dot_variants(hx_dtype dt)
{
    shape sh[4];
    const int n_sh = shapes_for(dt, sh);
    hx_kernel_variant v[4];
    const int nv = hx_kernels_variants(dt, hx_cpu_isa(), v, 4);
    CHECK(nv >= 1 && strcmp(v[nv - 1].name, "ref") == 0);
    for (int si = 0; si < n_sh; si++) {
        enum { N_OUT = 5, N_ROWS = 3 };
        hx_wmat w = make_wmat(dt, N_OUT, sh[si].n, sh[si].gs, sh[si].sb_dt, 100 + si);
        hx_act x = make_act(N_ROWS, sh[si].n, 200 + si);
        double worst = 0.0;
        for (int64_t o = 0; o < N_OUT; o++)
            for (int64_t r = 0; r < N_ROWS; r++) {
                const double want = v[nv - 1].dot(&w, o, &x, r);
                const double mag = magnitude(&w, o, &x, r);
                for (int k = 0; k < nv - 1; k++) {
                    const double got = v[k].dot(&w, o, &x, r), err = fabs(got - want);
                    if (!(err <= 2e-5 * mag))
                        CHECK_FAIL("%s %s n=%lld o=%lld r=%lld: %.9g vs ref %.9g (|w.x| %.3g)",
                                   hx_dtypes[dt].name, v[k].name, (long long)sh[si].n,
                                   (long long)o, (long long)r, got, want, mag);
                    if (err / mag > worst) worst = err / mag;
                }
            }
        printf("  %s n=%lld: %d variants, max |err| / sum|w x| = %.2e\n", hx_dtypes[dt].name,
               (long long)sh[si].n, nv, worst);
        free_wmat(&w);
        free_act(&x);
    }
    return 0;
}

static int test_dot_f32_variants_match_reference(void)  { return check_dot_variants(HX_DT_F32); }
static int test_dot_f16_variants_match_reference(void)  { return check_dot_variants(HX_DT_F16); }
static int test_dot_bf16_variants_match_reference(void) { return check_dot_variants(HX_DT_BF16); }
static int test_dot_q4_0_variants_match_reference(void) { return check_dot_variants(HX_DT_Q4_0); }
static int test_dot_q4_1_variants_match_reference(void) { return check_dot_variants(HX_DT_Q4_1); }
static int test_dot_q8_0_variants_match_reference(void) { return check_dot_variants(HX_DT_Q8_0); }
static int test_dot_q4_k_variants_match_reference(void) { return check_dot_variants(HX_DT_Q4_K); }
static int test_dot_q5_k_variants_match_reference(void) { return check_dot_variants(HX_DT_Q5_K); }
static int test_dot_q6_k_variants_match_reference(void) { return check_dot_variants(HX_DT_Q6_K); }
static int test_dot_mlx4_variants_match_reference(void) { return check_dot_variants(HX_DT_MLX4); }
static int test_dot_mlx8_variants_match_reference(void) { return check_dot_variants(HX_DT_MLX8); }

/* ---- matmul variants against the reference ---- */

/* Every format, rows 1, 3, 17, a sub-range of outputs that is not a multiple of the strip, and
 * an output stride wider than the matrix: cells outside the range must stay untouched. */
static int test_matmul_variants_match_reference(void)
{
    static const int rows[] = { 1, 3, 17 };
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        shape sh[4];
        const int n_sh = shapes_for((hx_dtype)dt, sh);
        hx_kernel_variant v[4];
        const int nv = hx_kernels_variants((hx_dtype)dt, hx_cpu_isa(), v, 4);
        for (int si = 0; si < n_sh; si++) {
            enum { N_OUT = 40, O0 = 3, O1 = 38, LD = 45 };
            hx_wmat w = make_wmat((hx_dtype)dt, N_OUT, sh[si].n, sh[si].gs, sh[si].sb_dt, 300 + si);
            for (size_t ri = 0; ri < HX_COUNTOF(rows); ri++) {
                const int n_rows = rows[ri];
                hx_act x = make_act(n_rows, sh[si].n, 400 + si);
                float *want = malloc(sizeof(float) * n_rows * LD);
                float *got = malloc(sizeof(float) * n_rows * LD);
                for (int i = 0; i < n_rows * LD; i++) want[i] = -7.0f;
                v[nv - 1].matmul(&w, O0, O1, &x, 0, n_rows, want, LD);
                for (int k = 0; k < nv; k++) {
                    for (int i = 0; i < n_rows * LD; i++) got[i] = -7.0f;
                    v[k].matmul(&w, O0, O1, &x, 0, n_rows, got, LD);
                    for (int r = 0; r < n_rows; r++)
                        for (int o = 0; o < LD; o++) {
                            const float g = got[r * LD + o], e = want[r * LD + o];
                            if (o < O0 || o >= O1) {
                                if (g != -7.0f)
                                    CHECK_FAIL("%s %s: wrote outside [%d,%d) at r=%d o=%d",
                                               hx_dtypes[dt].name, v[k].name, O0, O1, r, o);
                                continue;
                            }
                            const double mag = magnitude(&w, o, &x, r);
                            if (!(fabs((double)g - e) <= 2e-5 * mag))
                                CHECK_FAIL("%s %s n=%lld rows=%d r=%d o=%d: %.9g vs ref %.9g "
                                           "(|w.x| %.3g)",
                                           hx_dtypes[dt].name, v[k].name, (long long)sh[si].n,
                                           n_rows, r, o, (double)g, (double)e, mag);
                        }
                }
                free(want);
                free(got);
                free_act(&x);
            }
            free_wmat(&w);
        }
    }
    return 0;
}

/* ---- f32-activation matmul ---- */

/* Runs fn over outputs [O0, O1) of every row into a buffer of stride LD prefilled with -7. */
enum { FM_N_OUT = 40, FM_O0 = 3, FM_O1 = 38, FM_LD = 45 };

static float *run_fmatmul(hx_fmatmul_fn fn, const hx_wmat *w, const hx_act *x, int n_rows)
{
    float *y = malloc(sizeof(float) * n_rows * FM_LD);
    for (int i = 0; i < n_rows * FM_LD; i++) y[i] = -7.0f;
    fn(w, FM_O0, FM_O1, x->f, 0, n_rows, y, FM_LD);
    return y;
}

/* The reference f32-activation matmul equals the double-precision dot of the weights as the
 * tensor module dequantizes them (the definition of the exact path) within f32 rounding:
 * |got - exact| <= 1e-5 * sum_i |w_i x_i|; cells outside the output range stay untouched. */
static int test_fmatmul_ref_matches_dequantized_dot(void)
{
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        shape sh[4];
        const int n_sh = shapes_for((hx_dtype)dt, sh);
        for (int si = 0; si < n_sh; si++) {
            const int n_rows = 3;
            hx_wmat w = make_wmat((hx_dtype)dt, FM_N_OUT, sh[si].n, sh[si].gs, sh[si].sb_dt,
                                  500 + si);
            hx_act x = make_act(n_rows, sh[si].n, 600 + si);
            float *got = run_fmatmul(hx_fmatmul_ref, &w, &x, n_rows);
            float *row = malloc((size_t)w.n_in * sizeof(float));
            for (int o = 0; o < FM_LD; o++) {
                if (o < FM_N_OUT) dequant_row(&w, o, row);
                for (int r = 0; r < n_rows; r++) {
                    const float g = got[r * FM_LD + o];
                    if (o < FM_O0 || o >= FM_O1) {
                        if (g != -7.0f) CHECK_FAIL("%s: wrote outside at r=%d o=%d",
                                                   hx_dtypes[dt].name, r, o);
                        continue;
                    }
                    double e = 0.0, mag = 0.0;
                    for (int64_t i = 0; i < w.n_in; i++) {
                        e += (double)row[i] * x.f[r * x.n + i];
                        mag += fabs((double)row[i] * x.f[r * x.n + i]);
                    }
                    if (!(fabs((double)g - e) <= 1e-5 * mag))
                        CHECK_FAIL("%s n=%lld r=%d o=%d: %.9g vs exact %.9g (|w.x| %.3g)",
                                   hx_dtypes[dt].name, (long long)sh[si].n, r, o, (double)g, e,
                                   mag);
                }
            }
            free(row);
            free(got);
            free_act(&x);
            free_wmat(&w);
        }
    }
    return 0;
}

/* Every f32-activation variant against the reference: |got - ref| <= 2e-5 * sum_i |w_i x_i|
 * (summation order and fused multiply-adds are the only differences), rows 1 to 7 and 17 so
 * every remainder of the 4-row register group is hit. */
static int test_fmatmul_variants_match_reference(void)
{
    static const int rows[] = { 1, 2, 3, 4, 5, 6, 7, 17 };
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        shape sh[4];
        const int n_sh = shapes_for((hx_dtype)dt, sh);
        hx_fmatmul_variant v[4];
        const int nv = hx_fmatmul_variants((hx_dtype)dt, hx_cpu_isa(), v, 4);
        CHECK(nv >= 1 && v[nv - 1].fn == hx_fmatmul_ref);
        for (int si = 0; si < n_sh; si++) {
            hx_wmat w = make_wmat((hx_dtype)dt, FM_N_OUT, sh[si].n, sh[si].gs, sh[si].sb_dt,
                                  700 + si);
            for (size_t ri = 0; ri < HX_COUNTOF(rows); ri++) {
                const int n_rows = rows[ri];
                hx_act x = make_act(n_rows, sh[si].n, 800 + si);
                float *want = run_fmatmul(hx_fmatmul_ref, &w, &x, n_rows);
                for (int k = 0; k < nv - 1; k++) {
                    float *got = run_fmatmul(v[k].fn, &w, &x, n_rows);
                    for (int r = 0; r < n_rows; r++)
                        for (int o = 0; o < FM_LD; o++) {
                            const float g = got[r * FM_LD + o], e = want[r * FM_LD + o];
                            if (o < FM_O0 || o >= FM_O1) {
                                if (g != -7.0f)
                                    CHECK_FAIL("%s %s: wrote outside at r=%d o=%d",
                                               hx_dtypes[dt].name, v[k].name, r, o);
                                continue;
                            }
                            const double mag = magnitude(&w, o, &x, r);
                            if (!(fabs((double)g - e) <= 2e-5 * mag))
                                CHECK_FAIL("%s %s n=%lld rows=%d r=%d o=%d: %.9g vs ref %.9g "
                                           "(|w.x| %.3g)",
                                           hx_dtypes[dt].name, v[k].name, (long long)sh[si].n,
                                           n_rows, r, o, (double)g, (double)e, mag);
                        }
                    free(got);
                }
                free(want);
                free_act(&x);
            }
            free_wmat(&w);
        }
    }
    return 0;
}

/* The two-term int8 matmul (where this CPU has one) against exact f32 arithmetic. The second
 * term quantizes r = x - d1 q1 at scale d1 / 256, moving each activation by at most d1 / 512
 * (d1 / 256 when an exact tie clamps q2 to 127): |got - exact| <= sum_i |w_i| amax_b(i) / 32512
 * + 2e-5 |w.x|. */
static int test_two_term_matmul_near_f32(void)
{
    const hx_kernels k = hx_kernels_select(hx_cpu_isa());
    for (int dt = HX_DT_Q4_0; dt < HX_DT_COUNT; dt++) {
        if (!k.matmul2[dt]) continue;
        shape sh[4];
        shapes_for((hx_dtype)dt, sh);
        enum { ROWS = 9 };
        hx_wmat w = make_wmat((hx_dtype)dt, FM_N_OUT, sh[1].n, sh[1].gs, sh[1].sb_dt, 900);
        hx_act x = make_act(ROWS, sh[1].n, 901), x2;
        void *buf2 = aligned_alloc(64, hx_act_bytes(ROWS, x.n));
        float *row = malloc((size_t)x.n * sizeof(float));
        hx_act_init(&x2, buf2, ROWS, x.n);
        for (int r = 0; r < ROWS; r++)
            hx_act_quant2_ref(x.f + r * x.n, x.qs + r * x.n, x.d + r * (x.n / 32), x2.qs + r * x.n,
                              x2.d + r * (x.n / 32), x2.bsum + r * (x.n / 16), x.n);
        float *got = malloc(sizeof(float) * ROWS * FM_LD);
        k.matmul2[dt](&w, FM_O0, FM_O1, &x, &x2, 0, ROWS, got, FM_LD);
        for (int o = FM_O0; o < FM_O1; o++) {
            dequant_row(&w, o, row);
            for (int r = 0; r < ROWS; r++) {
                double e = 0.0, mag = 0.0, bound = 0.0;
                for (int64_t i = 0; i < x.n; i++) {
                    const double wx = (double)row[i] * x.f[r * x.n + i];
                    e += wx;
                    mag += fabs(wx);
                    bound += fabs((double)row[i]) * 127.0 * x.d[r * (x.n / 32) + i / 32] / 32512.0;
                }
                const double g = got[r * FM_LD + o];
                if (!(fabs(g - e) <= bound + 2e-5 * mag))
                    CHECK_FAIL("%s r=%d o=%d: %.9g vs exact %.9g (bound %.3g, |w.x| %.3g)",
                               hx_dtypes[dt].name, r, o, g, e, bound, mag);
            }
        }
        free(got);
        free(row);
        free(buf2);
        free_act(&x);
        free_wmat(&w);
    }
    return 0;
}

/* ---- quantized dot against float arithmetic ---- */

/* The quantized dot of each format against the f32 dot of its dequantized weights. */
static int test_quantized_dot_near_f32_dot(void)
{
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        shape sh[4];
        const int n_sh = shapes_for((hx_dtype)dt, sh);
        const int is_float = dt == HX_DT_F32 || dt == HX_DT_F16 || dt == HX_DT_BF16;
        double worst = 0.0;
        for (int si = 0; si < n_sh; si++) {
            const int64_t n = sh[si].n;
            hx_wmat w = make_wmat((hx_dtype)dt, 4, n, sh[si].gs, sh[si].sb_dt, 500 + si);
            hx_act x = make_act(2, n, 600 + si);
            float *row = malloc((size_t)n * sizeof(float));
            for (int64_t o = 0; o < 4; o++) {
                dequant_row(&w, o, row);
                for (int64_t r = 0; r < 2; r++) {
                    double exact = 0.0, w2 = 0.0, e2 = 0.0, x2 = 0.0, mag = 0.0;
                    for (int64_t i = 0; i < n; i++) {
                        const double xi = x.f[r * n + i];
                        exact += row[i] * xi;
                        mag += fabs(row[i] * xi);
                        w2 += (double)row[i] * row[i];
                        x2 += xi * xi;
                    }
                    for (int64_t b = 0; b < n / 32; b++) {
                        const double half_step = x.d[r * (n / 32) + b] / 2;
                        e2 += 32 * half_step * half_step;
                    }
                    const double got = hx_kernels_select(0).dot[dt](&w, o, &x, r);
                    const double bound = (is_float ? 0.0 : sqrt(w2) * sqrt(e2)) + 1e-5 * mag;
                    if (!(fabs(got - exact) <= bound))
                        CHECK_FAIL("%s n=%lld o=%lld r=%lld: quantized %.9g vs f32 %.9g, "
                                   "bound %.3g",
                                   hx_dtypes[dt].name, (long long)n, (long long)o, (long long)r,
                                   got, exact, bound);
                    const double rel = fabs(got - exact) / (sqrt(w2) * sqrt(x2));
                    if (rel > worst) worst = rel;
                }
            }
            free(row);
            free_wmat(&w);
            free_act(&x);
        }
        printf("  %s: max |q.x - w.x| / (||w|| ||x||) = %.2e\n", hx_dtypes[dt].name, worst);
    }
    return 0;
}

/* ---- selection ---- */

static int test_select_picks_first_variant_of_this_cpu(void)
{
    const hx_kernels k = hx_kernels_select(hx_cpu_isa());
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        hx_kernel_variant v[4];
        const int nv = hx_kernels_variants((hx_dtype)dt, hx_cpu_isa(), v, 4);
        CHECK(nv >= 1 && nv <= 4);
        CHECK(k.dot[dt] == v[0].dot && k.matmul[dt] == v[0].matmul);
        CHECK_STR(k.dot_name[dt], v[0].name);
        hx_fmatmul_variant f[4];
        CHECK(hx_fmatmul_variants((hx_dtype)dt, hx_cpu_isa(), f, 4) >= 1);
        CHECK(k.fmatmul[dt] == f[0].fn);
        CHECK_STR(k.fmatmul_name[dt], f[0].name);
    }
    hx_act_quant_variant a;
    hx_act_quant_variants(hx_cpu_isa(), &a, 1);
    CHECK(k.act_quant == a.fn);
    return 0;
}

/* HEARTH_CPU_ISA=ref must give the references everywhere. hx_cpu_isa() caches its first answer,
 * so the case re-runs itself in a fresh process (/proc/self/exe) with the variable set; there,
 * seeing the variable, it checks the selection. */
static int test_ref_isa_env_selects_reference_kernels(void)
{
    const char *env = getenv("HEARTH_CPU_ISA");
    if (env && strcmp(env, "ref") == 0) {
        const hx_kernels k = hx_kernels_select(hx_cpu_isa());
        CHECK_EQ(hx_cpu_isa(), 0);
        CHECK(k.act_quant == hx_act_quant_ref);
        for (int dt = 0; dt < HX_DT_COUNT; dt++) {
            CHECK_STR(k.dot_name[dt], "ref");
            CHECK(k.matmul[dt] == hx_matmul_ref);
            CHECK(k.fmatmul[dt] == hx_fmatmul_ref);
        }
        return 0;
    }
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("HEARTH_CPU_ISA", "ref", 1);
        if (!freopen("/dev/null", "w", stdout)) _exit(126); /* the child's "ok" line is noise */
        execl("/proc/self/exe", "test_cpu_kernels", "ref_isa_env_selects_reference_kernels",
              (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    const hx_kernels k0 = hx_kernels_select(0); /* and the mask 0 itself */
    CHECK(k0.dot[HX_DT_Q4_0] == hx_dot_q4_0_ref && k0.dot[HX_DT_MLX8] == hx_dot_mlx8_ref);
    return 0;
}

static const check_case cases[] = {
    { "act_quant_matches_definition_by_hand", test_act_quant_matches_definition_by_hand },
    { "act_quant_variants_equal_reference_bits", test_act_quant_variants_equal_reference_bits },
    { "act_quant2_is_exact_residual_and_variant_bits", test_act_quant2_is_exact_residual_and_variant_bits },
    { "dot_f32_variants_match_reference", test_dot_f32_variants_match_reference },
    { "dot_f16_variants_match_reference", test_dot_f16_variants_match_reference },
    { "dot_bf16_variants_match_reference", test_dot_bf16_variants_match_reference },
    { "dot_q4_0_variants_match_reference", test_dot_q4_0_variants_match_reference },
    { "dot_q4_1_variants_match_reference", test_dot_q4_1_variants_match_reference },
    { "dot_q8_0_variants_match_reference", test_dot_q8_0_variants_match_reference },
    { "dot_q4_k_variants_match_reference", test_dot_q4_k_variants_match_reference },
    { "dot_q5_k_variants_match_reference", test_dot_q5_k_variants_match_reference },
    { "dot_q6_k_variants_match_reference", test_dot_q6_k_variants_match_reference },
    { "dot_mlx4_variants_match_reference", test_dot_mlx4_variants_match_reference },
    { "dot_mlx8_variants_match_reference", test_dot_mlx8_variants_match_reference },
    { "matmul_variants_match_reference", test_matmul_variants_match_reference },
    { "fmatmul_ref_matches_dequantized_dot", test_fmatmul_ref_matches_dequantized_dot },
    { "fmatmul_variants_match_reference", test_fmatmul_variants_match_reference },
    { "two_term_matmul_near_f32", test_two_term_matmul_near_f32 },
    { "quantized_dot_near_f32_dot", test_quantized_dot_near_f32_dot },
    { "select_picks_first_variant_of_this_cpu", test_select_picks_first_variant_of_this_cpu },
    { "ref_isa_env_selects_reference_kernels", test_ref_isa_env_selects_reference_kernels },
};
CHECK_MAIN(cases)
