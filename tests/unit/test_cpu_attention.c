/* test_cpu_attention.c - the attention kernels (attn.h) against their reference, the reference
 * against a double-precision two-pass softmax, the f16 cache write bit for bit, and the CPU
 * backend's attention driver (runs of GQA heads, sliding window, thread counts); the same for
 * the quantized (Q8, Q4) cache, whose reference is attention over the dequantized cache.
 *
 * Tolerance: every output element within 2e-5 of the reference (absolute; V values and so the
 * outputs are within [-1, 1]). The variants differ from the reference only in summation order,
 * FMA contraction and a polynomial exp within 2 ulp, which measures about 1e-6 here. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/kv_quant.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/f16.h"
#include "check.h"

#define ATTN_TOL 2e-5
/* Soft caps the variants are checked with (0: none). Capped, a variant's tanh (AVX2: from exp256,
 * ~3e-7 absolute) moves a score capped at c by up to ~3e-7 c; within the same tolerance. */
static const float caps[] = { 0.0f, 3.0f, 30.0f };

static uint32_t rng_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static float rng_unit(uint32_t *s) /* uniform in [-1, 1) */
{
    return (float)rng_next(s) / 8388608.0f - 1.0f;
}

/* A synthetic cache: n_layer layers, n_kv heads, blocks of bt positions, the sequence's blocks
 * in shuffled order so that the block table is really followed. */
typedef struct {
    uint16_t *k, *v;
    int32_t  *blocks;
    int32_t   n_blocks, bt, n_layer, n_kv, d;
} cache;

static int cache_init(cache *c, int32_t n_ctx, int32_t n_kv, int32_t d, uint32_t *rng)
{
    c->bt = 16;
    c->n_layer = 2;
    c->n_kv = n_kv;
    c->d = d;
    c->n_blocks = (n_ctx + c->bt - 1) / c->bt + 3;
    const size_t n = (size_t)c->n_blocks * (size_t)(c->n_layer * c->bt * n_kv * d);
    c->k = hx_alloc(n * sizeof(uint16_t));
    c->v = hx_alloc(n * sizeof(uint16_t));
    c->blocks = hx_alloc((size_t)c->n_blocks * sizeof(int32_t));
    if (!c->k || !c->v || !c->blocks) return 1;
    for (size_t i = 0; i < n; i++) {
        c->k[i] = hx_f32_to_f16(rng_unit(rng));
        c->v[i] = hx_f32_to_f16(rng_unit(rng));
    }
    for (int32_t b = 0; b < c->n_blocks; b++) c->blocks[b] = b;
    for (int32_t b = c->n_blocks - 1; b > 0; b--) { /* Fisher-Yates */
        const int32_t o = (int32_t)(rng_next(rng) % (uint32_t)(b + 1)), x = c->blocks[b];
        c->blocks[b] = c->blocks[o];
        c->blocks[o] = x;
    }
    return 0;
}

static void cache_free(cache *c)
{
    hx_free(c->k);
    hx_free(c->v);
    hx_free(c->blocks);
}

/* The view of layer 1, kv head kvh. */
static hx_attn_kv cache_view(const cache *c, int32_t kvh)
{
    const int32_t kvd = c->n_kv * c->d;
    const size_t off = (size_t)1 * (size_t)(c->bt * kvd) + (size_t)kvh * (size_t)c->d;
    return (hx_attn_kv){ c->k + off, c->v + off, c->blocks, (size_t)(c->n_layer * c->bt * kvd),
                         kvd, c->bt };
}

/* Two-pass softmax in double, one head: the mathematical definition. */
static void naive_attention_capped(const hx_attn_kv *kv, const float *q, int32_t d, float scale,
                                   double cap, int32_t first, int32_t last, double *out)
{
    double mx = -INFINITY, sum = 0.0;
    double s[1100];
    for (int32_t j = first; j <= last; j++) {
        const uint16_t *kj = kv->k + (size_t)kv->blocks[j / kv->block_tokens] * kv->block_stride +
                             (size_t)(j % kv->block_tokens) * (size_t)kv->row_stride;
        double dot = 0.0;
        for (int32_t i = 0; i < d; i++) dot += (double)q[i] * hx_f16_to_f32(kj[i]);
        s[j - first] = dot * scale;
        if (cap > 0) s[j - first] = cap * tanh(s[j - first] / cap);
        if (s[j - first] > mx) mx = s[j - first];
    }
    for (int32_t i = 0; i < d; i++) out[i] = 0.0;
    for (int32_t j = first; j <= last; j++) {
        const double w = exp(s[j - first] - mx);
        const uint16_t *vj = kv->v + (size_t)kv->blocks[j / kv->block_tokens] * kv->block_stride +
                             (size_t)(j % kv->block_tokens) * (size_t)kv->row_stride;
        sum += w;
        for (int32_t i = 0; i < d; i++) out[i] += w * hx_f16_to_f32(vj[i]);
    }
    for (int32_t i = 0; i < d; i++) out[i] /= sum;
}

static void naive_attention(const hx_attn_kv *kv, const float *q, int32_t d, float scale,
                            int32_t first, int32_t last, double *out)
{
    naive_attention_capped(kv, q, d, scale, 0.0, first, last, out);
}

static const int32_t ctx_lens[] = { 1, 15, 16, 17, 100, 1000 };
static const int32_t groups[] = { 1, 3, 4 };
static const int32_t d_heads[] = { 64, 128 };

/* Every SIMD variant this CPU runs agrees with the reference on every shape, with full causal
 * attention and a sliding window of 37, with scores of ordinary and of very wide range, and with
 * soft-capped scores where the variant caps (the others leave capping to the next variant). */
static int test_variants_match_reference(void)
{
    hx_attn_variant vars[8];
    const int n_var = hx_attn_variants(hx_cpu_isa(), vars, 8);
    CHECK(n_var >= 1 && n_var <= 8);
    CHECK_STR(vars[n_var - 1].name, "ref");
    uint32_t rng = 7;
    double worst = 0.0;
    for (size_t di = 0; di < HX_COUNTOF(d_heads); di++)
    for (size_t gi = 0; gi < HX_COUNTOF(groups); gi++)
    for (size_t ci = 0; ci < HX_COUNTOF(ctx_lens); ci++) {
        const int32_t d = d_heads[di], grp = groups[gi], n_ctx = ctx_lens[ci];
        cache c;
        CHECK_EQ(cache_init(&c, n_ctx, 2, d, &rng), 0);
        float *q = hx_alloc((size_t)(grp * d) * sizeof(float));
        float *ref = hx_alloc((size_t)(grp * d) * sizeof(float));
        float *got = hx_alloc((size_t)(grp * d) * sizeof(float));
        CHECK(q && ref && got);
        const hx_attn_kv view = cache_view(&c, 1);
        for (int win = 0; win < 2; win++)
        for (int wide = 0; wide < 2; wide++)
        for (size_t ki = 0; ki < HX_COUNTOF(caps); ki++) {
            const float amp = wide ? 12.0f : 1.0f; /* wide: scores spread over ~100 */
            for (int32_t i = 0; i < grp * d; i++) q[i] = amp * rng_unit(&rng);
            const int32_t last = n_ctx - 1;
            const int32_t first = win && last - 36 > 0 ? last - 36 : 0;
            const float scale = 1.0f / sqrtf((float)d), cap = caps[ki];
            hx_attn_capped_ref(&view, q, grp, d, scale, cap, first, last, ref);
            for (int vi = 0; vi < n_var - 1; vi++) {
                CHECK(d % vars[vi].d_align == 0);
                if (cap > 0.0f && !vars[vi].attend_capped) continue;
                if (cap > 0.0f)
                    vars[vi].attend_capped(&view, q, grp, d, scale, cap, first, last, got);
                else
                    vars[vi].attend(&view, q, grp, d, scale, first, last, got);
                for (int32_t i = 0; i < grp * d; i++) {
                    const double e = fabs((double)got[i] - ref[i]);
                    if (e > worst) worst = e;
                    if (!(e <= ATTN_TOL))
                        CHECK_FAIL("%s d=%d group=%d n_ctx=%d win=%d wide=%d cap=%g [%d]: %.9g "
                                   "vs %.9g", vars[vi].name, d, grp, n_ctx, win, wide,
                                   (double)cap, i, (double)got[i], (double)ref[i]);
                }
            }
        }
        hx_free(q);
        hx_free(ref);
        hx_free(got);
        cache_free(&c);
    }
    printf("max |variant - ref| = %.3g over %d variant(s) (tolerance %g)\n", worst, n_var - 1,
           ATTN_TOL);
    return 0;
}

/* The reference equals the double-precision two-pass softmax within f32 rounding. */
static int test_reference_matches_double_softmax(void)
{
    uint32_t rng = 99;
    double worst = 0.0;
    for (size_t di = 0; di < HX_COUNTOF(d_heads); di++)
    for (size_t ci = 0; ci < HX_COUNTOF(ctx_lens); ci++) {
        const int32_t d = d_heads[di], n_ctx = ctx_lens[ci], grp = 3;
        cache c;
        CHECK_EQ(cache_init(&c, n_ctx, 2, d, &rng), 0);
        float q[3 * 128], out[3 * 128];
        double want[128];
        for (int32_t i = 0; i < grp * d; i++) q[i] = 4.0f * rng_unit(&rng);
        const hx_attn_kv view = cache_view(&c, 0);
        const float scale = 1.0f / sqrtf((float)d);
        const int32_t first = n_ctx > 20 ? n_ctx - 20 : 0;
        for (int win = 0; win < 2; win++) {
            const int32_t f = win ? first : 0;
            hx_attn_ref(&view, q, grp, d, scale, f, n_ctx - 1, out);
            for (int32_t g = 0; g < grp; g++) {
                naive_attention(&view, q + g * d, d, scale, f, n_ctx - 1, want);
                for (int32_t i = 0; i < d; i++) {
                    const double e = fabs(out[g * d + i] - want[i]);
                    if (e > worst) worst = e;
                    CHECK_NEAR(out[g * d + i], want[i], ATTN_TOL);
                }
            }
        }
        cache_free(&c);
    }
    printf("max |ref - double softmax| = %.3g (tolerance %g)\n", worst, ATTN_TOL);
    return 0;
}

/* Soft-capped attention (Gemma 2): the capped reference equals the double two-pass softmax of
 * cap * tanh(scaled score / cap), with caps that bite (scores spread over ~+-8 against caps of
 * 2 and 5), with and without a window; cap 0 is the plain reference, bit for bit. */
static int test_capped_reference_matches_double_softmax(void)
{
    uint32_t rng = 31;
    double worst = 0.0;
    for (size_t ci = 0; ci < HX_COUNTOF(ctx_lens); ci++) {
        const int32_t d = 64, n_ctx = ctx_lens[ci], grp = 2;
        cache c;
        CHECK_EQ(cache_init(&c, n_ctx, 2, d, &rng), 0);
        float q[2 * 64], out[2 * 64], plain[2 * 64];
        double want[64];
        for (int32_t i = 0; i < grp * d; i++) q[i] = 8.0f * rng_unit(&rng);
        const hx_attn_kv view = cache_view(&c, 1);
        const float scale = 1.0f / sqrtf((float)d), ref_caps[] = {2.0f, 5.0f};
        for (int win = 0; win < 2; win++)
        for (size_t k = 0; k < HX_COUNTOF(ref_caps); k++) {
            const int32_t f = win && n_ctx > 20 ? n_ctx - 20 : 0;
            hx_attn_capped_ref(&view, q, grp, d, scale, ref_caps[k], f, n_ctx - 1, out);
            for (int32_t g = 0; g < grp; g++) {
                naive_attention_capped(&view, q + g * d, d, scale, ref_caps[k], f, n_ctx - 1,
                                       want);
                for (int32_t i = 0; i < d; i++) {
                    const double e = fabs(out[g * d + i] - want[i]);
                    if (e > worst) worst = e;
                    CHECK_NEAR(out[g * d + i], want[i], ATTN_TOL);
                }
            }
            hx_attn_capped_ref(&view, q, grp, d, scale, 0.0f, f, n_ctx - 1, out);
            hx_attn_ref(&view, q, grp, d, scale, f, n_ctx - 1, plain);
            CHECK(memcmp(out, plain, sizeof out) == 0);
        }
        cache_free(&c);
    }
    printf("max |capped ref - double softmax| = %.3g (tolerance %g)\n", worst, ATTN_TOL);
    return 0;
}

/* Through the backend: a layer with softcap set gives, head by head, the capped reference over
 * the same cache (prefill rows, GQA 2, a sliding window of 25), quantized caches included. */
static int test_backend_attention_applies_softcap(void)
{
    const int32_t n_head = 4, n_kv = 2, d = 64, n_tok = 9;
    uint32_t rng = 77;
    hx_err err = {0};
    hx_backend *be = NULL;
    CHECK_EQ(hx_cpu_backend_create(2, 0, &be, &err), HX_OK);
    const hx_kv_dtype dts[] = {HX_KV_F16, HX_KV_Q8};
    for (size_t di = 0; di < HX_COUNTOF(dts); di++) {
        hx_kv_store kv = {.n_blocks = 4, .block_tokens = 16, .n_layer = 1, .n_kv_head = n_kv,
                          .d_head = d, .kv_dim = n_kv * d, .dtype = dts[di]};
        CHECK_EQ(be->kv_alloc(be, &kv, &err), HX_OK);
        int32_t blocks[4] = {2, 0, 3, 1}, pos[40];
        float kx[40 * 128], vx[40 * 128], q[9 * 256], out[9 * 256], one[4 * 64];
        for (int32_t i = 0; i < 40 * 128; i++) {
            kx[i] = rng_unit(&rng);
            vx[i] = rng_unit(&rng);
        }
        for (int32_t i = 0; i < 40; i++) pos[i] = i;
        for (int32_t i = 0; i < n_tok * n_head * d; i++) q[i] = 8.0f * rng_unit(&rng);
        const hx_kv_seq seq = {blocks, 40};
        be->kv_write(be, &kv, 0, &seq, pos, kx, vx, 40);
        const hx_attn_shape shape = {n_head, n_kv, d, 0.125f, 25, 3.0f};
        be->attention(be, &kv, 0, &seq, q, pos + 31, n_tok, &shape, out);
        double worst = 0.0;
        for (int32_t t = 0; t < n_tok; t++) {
            const int32_t last = 31 + t, first = last - 24;
            for (int32_t kvh = 0; kvh < n_kv; kvh++) {
                const float *qh = q + ((size_t)t * n_head + (size_t)kvh * 2) * d;
                if (dts[di] == HX_KV_F16) {
                    const size_t off = (size_t)kvh * 16 * d;
                    const hx_attn_kv view = {(const uint16_t *)kv.k + off,
                                             (const uint16_t *)kv.v + off, blocks,
                                             (size_t)16 * n_kv * d, d, 16};
                    hx_attn_capped_ref(&view, qh, 2, d, 0.125f, 3.0f, first, last, one);
                } else {
                    const size_t tb = hx_kv_tile_bytes(kv.dtype, 16, d);
                    const hx_attn_qkv view = {(const uint8_t *)kv.k + (size_t)kvh * tb,
                                              (const uint8_t *)kv.v + (size_t)kvh * tb, blocks,
                                              (size_t)n_kv * tb, 16, kv.dtype};
                    hx_attn_q_capped_ref(&view, qh, 2, d, 0.125f, 3.0f, first, last, one);
                }
                for (int32_t i = 0; i < 2 * d; i++) {
                    const double e = fabs((double)out[((size_t)t * n_head + (size_t)kvh * 2) * d +
                                                      (size_t)i] - one[i]);
                    if (e > worst) worst = e;
                    CHECK(e <= ATTN_TOL);
                }
            }
        }
        printf("kv %s: max |backend - capped ref| = %.3g (tolerance %g)\n",
               dts[di] == HX_KV_F16 ? "f16" : "q8", worst, ATTN_TOL);
        be->kv_free(be, &kv);
    }
    be->destroy(be);
    return 0;
}

/* The cache write gives hx_f32_to_f16's bits for every non-NaN float, ties, subnormals and the
 * overflow edge included; a NaN stays a NaN. */
static int test_f16_store_matches_reference_bits(void)
{
    hx_attn_variant vars[8];
    const int n_var = hx_attn_variants(hx_cpu_isa(), vars, 8);
    enum { N = 4099 };
    static float x[N];
    static uint16_t want[N], got[N];
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x477FE000u, 0x477FEFFFu,
        0x477FF000u, 0x477FF001u, 0x38800000u, 0x387FFFFFu, 0x33800000u, 0x33800001u,
        0x33000000u, 0x33000001u, 0x337FFFFFu, 0x3F801000u, 0x3F803000u, 0x3F800FFFu,
        0x00000001u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu,
    };
    uint32_t rng = 3;
    for (int round = 0; round < 64; round++) {
        for (int i = 0; i < N; i++) {
            uint32_t u = rng_next(&rng) | (rng_next(&rng) << 24);
            if (i % 3 == 0) /* mostly the exponent range of f16 and its edges */
                u = (u & 0x807FFFFFu) | ((uint32_t)(100 + rng_next(&rng) % 45) << 23);
            if (i < (int)HX_COUNTOF(special)) u = special[i];
            x[i] = hx_bits_to_f32(u);
        }
        hx_f16_store_ref(x, want, N);
        for (int vi = 0; vi < n_var; vi++) {
            vars[vi].store(x, got, N);
            for (int i = 0; i < N; i++) {
                const int nan = (want[i] & 0x7C00) == 0x7C00 && (want[i] & 0x3FF) != 0;
                if (nan) {
                    CHECK((got[i] & 0x7C00) == 0x7C00 && (got[i] & 0x3FF) != 0);
                    continue;
                }
                if (got[i] != want[i])
                    CHECK_FAIL("%s: f16(%a) = 0x%04x, want 0x%04x", vars[vi].name, (double)x[i],
                               got[i], want[i]);
            }
        }
    }
    return 0;
}

/* Through the backend: kv_write then attention of a prefill of several rows (GQA 3, sliding
 * window) gives, for every (row, head), the bits of the chosen kernel run on that head alone, and
 * the same bits with 1 and 3 threads. */
static int test_backend_attention_matches_kernel_per_head(void)
{
    const int32_t n_head = 6, n_kv = 2, d = 64, kvd = n_kv * d, n_tok = 40, bt = 16;
    const int32_t n_layer = 2, layer = 1;
    hx_attn_variant vars[8];
    hx_attn_fn attend = hx_attn_ref;
    const int n_var = hx_attn_variants(hx_cpu_isa(), vars, 8);
    for (int i = 0; i < n_var; i++) {
        if (d % vars[i].d_align == 0) {
            attend = vars[i].attend;
            break;
        }
    }
    int32_t blocks[4] = { 2, 0, 3, 1 }, pos[40];
    float *q = hx_alloc((size_t)(n_tok * n_head * d) * sizeof(float));
    float *kx = hx_alloc((size_t)(n_tok * kvd) * sizeof(float));
    float *vx = hx_alloc((size_t)(n_tok * kvd) * sizeof(float));
    float *out[2], want[64];
    out[0] = hx_alloc((size_t)(n_tok * n_head * d) * sizeof(float));
    out[1] = hx_alloc((size_t)(n_tok * n_head * d) * sizeof(float));
    CHECK(q && kx && vx && out[0] && out[1]);
    uint32_t rng = 11;
    for (int32_t i = 0; i < n_tok * n_head * d; i++) q[i] = 2.0f * rng_unit(&rng);
    for (int32_t i = 0; i < n_tok * kvd; i++) {
        kx[i] = rng_unit(&rng);
        vx[i] = rng_unit(&rng);
    }
    for (int32_t t = 0; t < n_tok; t++) pos[t] = 20 + t; /* rows 20..59 of a 60-position cache */
    const hx_kv_seq seq = { blocks, 60 };
    const hx_attn_shape shape = { n_head, n_kv, d, 0.125f, 25, 0.0f };
    for (int run = 0; run < 2; run++) {
        hx_backend *be = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_cpu_backend_create(run ? 3 : 1, 0, &be, &err), HX_OK);
        hx_kv_store kv = { NULL, NULL, 4, bt, n_layer, n_kv, d, kvd, HX_KV_F16 };
        CHECK_EQ(be->kv_alloc(be, &kv, &err), HX_OK);
        int32_t pre[20];
        for (int32_t t = 0; t < 20; t++) pre[t] = t;
        be->kv_write(be, &kv, layer, &seq, pre, kx, vx, 20); /* positions 0..19 */
        be->kv_write(be, &kv, layer, &seq, pos, kx, vx, n_tok);
        be->attention(be, &kv, layer, &seq, q, pos, n_tok, &shape, out[run]);
        if (run == 0) {
            for (int32_t t = 0; t < n_tok; t++)
            for (int32_t h = 0; h < n_head; h++) {
                const int32_t kvh = h / (n_head / n_kv), last = pos[t];
                const int32_t first = last - 24 > 0 ? last - 24 : 0;
                /* layout [block][layer][kv head][position][d] (backend.h) */
                const size_t off = (size_t)layer * (size_t)(bt * kvd) + (size_t)kvh * bt * d;
                const hx_attn_kv view = { (const uint16_t *)kv.k + off,
                                          (const uint16_t *)kv.v + off, blocks,
                                          (size_t)(n_layer * bt * kvd), d, bt };
                attend(&view, q + (t * n_head + h) * d, 1, d, shape.scale, first, last, want);
                const float *o = out[0] + (t * n_head + h) * d;
                if (memcmp(o, want, sizeof want) != 0)
                    CHECK_FAIL("t=%d h=%d: %.9g vs %.9g", t, h, (double)o[0], (double)want[0]);
            }
            /* K of position 25 (block 1, offset 9) went through the cache write exactly, each
             * kv head's d values at their place in the layout. */
            for (int32_t h = 0; h < n_kv; h++) {
                const uint16_t *k25 = (const uint16_t *)kv.k +
                                      (((size_t)blocks[1] * n_layer + layer) * n_kv + h) *
                                          (size_t)(bt * d) + (size_t)9 * d;
                for (int32_t i = 0; i < d; i++)
                    CHECK_EQ(k25[i], hx_f32_to_f16(kx[5 * kvd + h * d + i]));
            }
        }
        be->kv_free(be, &kv);
        be->destroy(be);
    }
    CHECK(memcmp(out[0], out[1], (size_t)(n_tok * n_head * d) * sizeof(float)) == 0);
    hx_free(q);
    hx_free(kx);
    hx_free(vx);
    hx_free(out[0]);
    hx_free(out[1]);
    return 0;
}

/* ---- quantized cache (kv_quant.h) ----
 *
 * Tolerances: a variant against the quantized reference (attention over the dequantized cache)
 * within QATTN_TOL absolute: besides the f16 kernels' rounding differences, the variants use the
 * affine form (score = sum s (q . c) + sum m sum(q)), which rounds differently from the
 * reference's dot with dequantized rows; at |q| <= 12 and d_head 128 that measures ~2e-6. */

#define QATTN_TOL 3e-5

/* A synthetic quantized cache: tiles of [block][layer][kv head] (kv_quant.h), rows of values
 * uniform in [-1, 1] around a per-group offset (so the minimums matter), blocks shuffled. */
typedef struct {
    uint8_t    *k, *v;
    int32_t    *blocks;
    int32_t     n_blocks, bt, n_layer, n_kv, d;
    hx_kv_dtype dt;
    size_t      tile_bytes;
} qcache;

static int qcache_init(qcache *c, hx_kv_dtype dt, int32_t bt, int32_t n_ctx, int32_t n_kv,
                       int32_t d, uint32_t *rng)
{
    *c = (qcache){ .bt = bt, .n_layer = 2, .n_kv = n_kv, .d = d, .dt = dt };
    c->n_blocks = (n_ctx + bt - 1) / bt + 3;
    c->tile_bytes = hx_kv_tile_bytes(dt, bt, d);
    const size_t n_tiles = (size_t)c->n_blocks * (size_t)(c->n_layer * n_kv);
    c->k = hx_calloc(n_tiles, c->tile_bytes);
    c->v = hx_calloc(n_tiles, c->tile_bytes);
    c->blocks = hx_alloc((size_t)c->n_blocks * sizeof(int32_t));
    float row[256];
    if (!c->k || !c->v || !c->blocks || d > 256) return 1;
    for (size_t t = 0; t < n_tiles; t++)
        for (int32_t p = 0; p < bt; p++)
            for (int kv = 0; kv < 2; kv++) {
                for (int32_t i = 0; i < d; i++)
                    row[i] = 0.5f * (float)((i / 32) % 3 - 1) + rng_unit(rng);
                hx_kvq_quantize_row(dt, row, d, (kv ? c->v : c->k) + t * c->tile_bytes, bt, p);
            }
    for (int32_t b = 0; b < c->n_blocks; b++) c->blocks[b] = b;
    for (int32_t b = c->n_blocks - 1; b > 0; b--) {
        const int32_t o = (int32_t)(rng_next(rng) % (uint32_t)(b + 1)), x = c->blocks[b];
        c->blocks[b] = c->blocks[o];
        c->blocks[o] = x;
    }
    return 0;
}

static void qcache_free(qcache *c)
{
    hx_free(c->k);
    hx_free(c->v);
    hx_free(c->blocks);
}

/* The view of layer 1, kv head kvh. */
static hx_attn_qkv qcache_view(const qcache *c, int32_t kvh)
{
    const size_t off = ((size_t)1 * (size_t)c->n_kv + (size_t)kvh) * c->tile_bytes;
    return (hx_attn_qkv){ c->k + off, c->v + off, c->blocks,
                          (size_t)(c->n_layer * c->n_kv) * c->tile_bytes, c->bt, c->dt };
}

/* Two-pass softmax in double over the dequantized rows of a quantized view, one head. */
static void naive_qattention(const hx_attn_qkv *kv, const float *q, int32_t d, float scale,
                             int32_t first, int32_t last, double *out)
{
    static double s[1100];
    double mx = -INFINITY, sum = 0.0;
    float row[256];
    const int32_t bt = kv->block_tokens;
    for (int32_t j = first; j <= last; j++) {
        hx_kvq_dequantize_row((hx_kv_dtype)kv->dtype,
                              kv->k + (size_t)kv->blocks[j / bt] * kv->block_stride, bt, j % bt,
                              d, row);
        double dot = 0.0;
        for (int32_t i = 0; i < d; i++) dot += (double)q[i] * row[i];
        s[j - first] = dot * scale;
        if (s[j - first] > mx) mx = s[j - first];
    }
    for (int32_t i = 0; i < d; i++) out[i] = 0.0;
    for (int32_t j = first; j <= last; j++) {
        const double w = exp(s[j - first] - mx);
        hx_kvq_dequantize_row((hx_kv_dtype)kv->dtype,
                              kv->v + (size_t)kv->blocks[j / bt] * kv->block_stride, bt, j % bt,
                              d, row);
        sum += w;
        for (int32_t i = 0; i < d; i++) out[i] += w * row[i];
    }
    for (int32_t i = 0; i < d; i++) out[i] /= sum;
}

static const hx_kv_dtype q_dtypes[] = { HX_KV_Q8, HX_KV_Q4 };
static const int32_t q_d_heads[] = { 64, 128, 96 }; /* 96: an odd number of groups */

/* Every variant's quantized attention agrees with the quantized reference on every format and
 * shape (blocks of 16 and of 8 positions, full causal and a window of 37, ordinary and wide
 * score ranges). */
static int test_quantized_variants_match_reference(void)
{
    hx_attn_variant vars[8];
    const int n_var = hx_attn_variants(hx_cpu_isa(), vars, 8);
    CHECK(n_var >= 1 && n_var <= 8);
    uint32_t rng = 17;
    double worst = 0.0;
    static const int32_t q_ctx[] = { 1, 15, 16, 17, 100, 700 };
    for (size_t ti = 0; ti < HX_COUNTOF(q_dtypes); ti++)
    for (size_t di = 0; di < HX_COUNTOF(q_d_heads); di++)
    for (size_t ci = 0; ci < HX_COUNTOF(q_ctx); ci++)
    for (int32_t bt = 16; bt >= 8; bt -= 8) {
        const int32_t d = q_d_heads[di], n_ctx = q_ctx[ci], grp = 1 + (int32_t)(ci % 4);
        qcache c;
        CHECK_EQ(qcache_init(&c, q_dtypes[ti], bt, n_ctx, 2, d, &rng), 0);
        float q[4 * 128], ref[4 * 128], got[4 * 128];
        const hx_attn_qkv view = qcache_view(&c, 1);
        for (int win = 0; win < 2; win++)
        for (int wide = 0; wide < 2; wide++)
        for (size_t ki = 0; ki < HX_COUNTOF(caps); ki++) {
            const float amp = wide ? 12.0f : 1.0f;
            for (int32_t i = 0; i < grp * d; i++) q[i] = amp * rng_unit(&rng);
            const int32_t last = n_ctx - 1, first = win && last - 36 > 0 ? last - 36 : 0;
            const float scale = 1.0f / sqrtf((float)d), cap = caps[ki];
            hx_attn_q_capped_ref(&view, q, grp, d, scale, cap, first, last, ref);
            for (int vi = 0; vi < n_var - 1; vi++) {
                if (cap > 0.0f && !vars[vi].attend_q_capped) continue;
                if (cap > 0.0f)
                    vars[vi].attend_q_capped(&view, q, grp, d, scale, cap, first, last, got);
                else
                    vars[vi].attend_q(&view, q, grp, d, scale, first, last, got);
                for (int32_t i = 0; i < grp * d; i++) {
                    const double e = fabs((double)got[i] - ref[i]);
                    if (e > worst) worst = e;
                    if (!(e <= QATTN_TOL))
                        CHECK_FAIL("%s %s d=%d bt=%d group=%d n_ctx=%d win=%d wide=%d cap=%g "
                                   "[%d]: %.9g vs %.9g", vars[vi].name,
                                   q_dtypes[ti] == HX_KV_Q8 ? "q8" : "q4", d, bt, grp, n_ctx,
                                   win, wide, (double)cap, i, (double)got[i], (double)ref[i]);
                }
            }
        }
        qcache_free(&c);
    }
    printf("max |quantized variant - quantized ref| = %.3g over %d variant(s) (tolerance %g)\n",
           worst, n_var - 1, QATTN_TOL);
    return 0;
}

/* The quantized reference is attention over the dequantized cache: it equals the double
 * two-pass softmax over the dequantized rows within f32 rounding. */
static int test_q_ref_is_double_softmax_over_dequantized(void)
{
    uint32_t rng = 5;
    double worst = 0.0;
    for (size_t ti = 0; ti < HX_COUNTOF(q_dtypes); ti++)
    for (size_t di = 0; di < 2; di++)
    for (size_t ci = 0; ci < HX_COUNTOF(ctx_lens); ci++) {
        const int32_t d = q_d_heads[di], n_ctx = ctx_lens[ci], grp = 3;
        qcache c;
        CHECK_EQ(qcache_init(&c, q_dtypes[ti], 16, n_ctx, 2, d, &rng), 0);
        float q[3 * 128], out[3 * 128];
        double want[128];
        for (int32_t i = 0; i < grp * d; i++) q[i] = 4.0f * rng_unit(&rng);
        const hx_attn_qkv view = qcache_view(&c, 0);
        const float scale = 1.0f / sqrtf((float)d);
        hx_attn_q_ref(&view, q, grp, d, scale, 0, n_ctx - 1, out);
        for (int32_t g = 0; g < grp; g++) {
            naive_qattention(&view, q + g * d, d, scale, 0, n_ctx - 1, want);
            for (int32_t i = 0; i < d; i++) {
                const double e = fabs(out[g * d + i] - want[i]);
                if (e > worst) worst = e;
                CHECK_NEAR(out[g * d + i], want[i], ATTN_TOL);
            }
        }
        qcache_free(&c);
    }
    printf("max |quantized ref - double softmax over dequantized| = %.3g (tolerance %g)\n", worst,
           ATTN_TOL);
    return 0;
}

/* Through the backend with a Q8 and a Q4 cache: kv_write then attention of a prefill (GQA 3,
 * sliding window) equals the double softmax over the dequantized cache within QATTN_TOL, gives
 * the same bits with 1 and 3 threads, stores each row exactly as hx_kvq_quantize_row at its
 * place in the layout, and stays within the stated tolerance of the F16 cache's result:
 * |q8 - f16| <= 0.01 and |q4 - f16| <= 0.12 on outputs of magnitude <= 1 (the quantization
 * step is 2/255 and 2/15 of the row's range; measured ~0.003 and ~0.04). */
static int test_backend_q8_q4_match_dequantized_and_f16(void)
{
    const int32_t n_head = 6, n_kv = 2, d = 64, kvd = n_kv * d, n_tok = 40, bt = 16;
    const int32_t n_layer = 2, layer = 1;
    int32_t blocks[4] = { 2, 0, 3, 1 }, pos[40], pre[20];
    const size_t n_out = (size_t)(n_tok * n_head * d);
    float *q = hx_alloc(n_out * sizeof(float));
    float *kx = hx_alloc((size_t)(n_tok * kvd) * sizeof(float));
    float *vx = hx_alloc((size_t)(n_tok * kvd) * sizeof(float));
    float *out[3];
    for (int i = 0; i < 3; i++) out[i] = hx_alloc(n_out * sizeof(float));
    CHECK(q && kx && vx && out[0] && out[1] && out[2]);
    uint32_t rng = 23;
    for (size_t i = 0; i < n_out; i++) q[i] = 2.0f * rng_unit(&rng);
    for (int32_t i = 0; i < n_tok * kvd; i++) {
        kx[i] = rng_unit(&rng) + 0.25f * (float)((i / 32) % 3);
        vx[i] = rng_unit(&rng);
    }
    for (int32_t t = 0; t < n_tok; t++) pos[t] = 20 + t;
    for (int32_t t = 0; t < 20; t++) pre[t] = t;
    const hx_kv_seq seq = { blocks, 60 };
    const hx_attn_shape shape = { n_head, n_kv, d, 0.125f, 25, 0.0f };
    static const double vs_f16_tol[HX_KV_DTYPE_COUNT] = { 0.0, 0.01, 0.12 };
    for (hx_kv_dtype dt = HX_KV_F16; dt < HX_KV_DTYPE_COUNT; dt++)
    for (int run = 0; run < (dt == HX_KV_F16 ? 1 : 2); run++) {
        hx_backend *be = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_cpu_backend_create(run ? 3 : 1, 0, &be, &err), HX_OK);
        hx_kv_store kv = { NULL, NULL, 4, bt, n_layer, n_kv, d, kvd, dt };
        CHECK_EQ(be->kv_alloc(be, &kv, &err), HX_OK);
        be->kv_write(be, &kv, layer, &seq, pre, kx, vx, 20);
        be->kv_write(be, &kv, layer, &seq, pos, kx, vx, n_tok);
        float *o = dt == HX_KV_F16 ? out[0] : out[1 + run];
        be->attention(be, &kv, layer, &seq, q, pos, n_tok, &shape, o);
        if (dt != HX_KV_F16 && run == 0) {
            const size_t tb = hx_kv_tile_bytes(dt, bt, d);
            double worst = 0.0, worst_f16 = 0.0;
            for (int32_t t = 0; t < n_tok; t++)
            for (int32_t h = 0; h < n_head; h++) {
                const int32_t kvh = h / (n_head / n_kv), last = pos[t];
                const int32_t first = last - 24 > 0 ? last - 24 : 0;
                const hx_attn_qkv view = {
                    (const uint8_t *)kv.k + ((size_t)layer * n_kv + (size_t)kvh) * tb,
                    (const uint8_t *)kv.v + ((size_t)layer * n_kv + (size_t)kvh) * tb, blocks,
                    (size_t)(n_layer * n_kv) * tb, bt, dt };
                double want[64];
                naive_qattention(&view, q + (t * n_head + h) * d, d, shape.scale, first, last,
                                 want);
                for (int32_t i = 0; i < d; i++) {
                    const size_t at = (size_t)(t * n_head + h) * (size_t)d + (size_t)i;
                    const double e = fabs(o[at] - want[i]), ef = fabs(o[at] - out[0][at]);
                    worst = e > worst ? e : worst;
                    worst_f16 = ef > worst_f16 ? ef : worst_f16;
                    if (!(e <= QATTN_TOL))
                        CHECK_FAIL("%s t=%d h=%d [%d]: %.9g vs dequantized %.9g",
                                   dt == HX_KV_Q8 ? "q8" : "q4", t, h, i, (double)o[at], want[i]);
                    if (!(ef <= vs_f16_tol[dt]))
                        CHECK_FAIL("%s t=%d h=%d [%d]: %.9g vs f16 %.9g (tol %g)",
                                   dt == HX_KV_Q8 ? "q8" : "q4", t, h, i, (double)o[at],
                                   (double)out[0][at], vs_f16_tol[dt]);
                }
            }
            printf("%s: max |backend - dequantized double| = %.3g (tol %g), max |%s - f16| = "
                   "%.3g (tol %g)\n", dt == HX_KV_Q8 ? "q8" : "q4", worst, QATTN_TOL,
                   dt == HX_KV_Q8 ? "q8" : "q4", worst_f16, vs_f16_tol[dt]);
            /* K of position 25 (block 1, offset 9), every kv head, went through the quantizer
             * into its tile: same bytes as quantizing the row directly. */
            for (int32_t h = 0; h < n_kv; h++) {
                uint8_t *want_tile = hx_calloc(1, tb);
                CHECK(want_tile != NULL);
                hx_kvq_quantize_row(dt, kx + 5 * kvd + h * d, d, want_tile, bt, 9);
                const uint8_t *tile = (const uint8_t *)kv.k +
                                      (((size_t)blocks[1] * n_layer + layer) * n_kv + h) * tb;
                float a[64], b[64];
                hx_kvq_dequantize_row(dt, tile, bt, 9, d, a);
                hx_kvq_dequantize_row(dt, want_tile, bt, 9, d, b);
                hx_free(want_tile);
                CHECK(memcmp(a, b, sizeof a) == 0);
            }
        }
        be->kv_free(be, &kv);
        be->destroy(be);
        if (dt != HX_KV_F16 && run == 1)
            CHECK(memcmp(out[1], out[2], n_out * sizeof(float)) == 0);
    }
    hx_free(q);
    hx_free(kx);
    hx_free(vx);
    for (int i = 0; i < 3; i++) hx_free(out[i]);
    return 0;
}

/* A quantized cache for a d_head that is not a multiple of 32 is refused with a message naming
 * the d_head; F16 takes it. */
static int test_q_cache_refuses_d_head_not_multiple_of_32(void)
{
    hx_backend *be = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_cpu_backend_create(1, 0, &be, &err), HX_OK);
    for (hx_kv_dtype dt = HX_KV_Q8; dt <= HX_KV_Q4; dt++) {
        hx_kv_store kv = { NULL, NULL, 2, 16, 1, 2, 48, 96, dt };
        err = (hx_err){0};
        CHECK_EQ(be->kv_alloc(be, &kv, &err), HX_E_INVALID);
        CHECK(kv.k == NULL && kv.v == NULL);
        CHECK_CONTAINS(err.msg, "d_head 48");
    }
    hx_kv_store kv = { NULL, NULL, 2, 16, 1, 2, 48, 96, HX_KV_F16 };
    CHECK_EQ(be->kv_alloc(be, &kv, &err), HX_OK);
    be->kv_free(be, &kv);
    be->destroy(be);
    return 0;
}

static const check_case cases[] = {
    { "variants_match_reference", test_variants_match_reference },
    { "reference_matches_double_softmax", test_reference_matches_double_softmax },
    { "f16_store_matches_reference_bits", test_f16_store_matches_reference_bits },
    { "backend_attention_matches_kernel_per_head", test_backend_attention_matches_kernel_per_head },
    { "quantized_variants_match_reference", test_quantized_variants_match_reference },
    { "q_ref_is_double_softmax_over_dequantized", test_q_ref_is_double_softmax_over_dequantized },
    { "backend_q8_q4_match_dequantized_and_f16", test_backend_q8_q4_match_dequantized_and_f16 },
    { "q_cache_refuses_d_head_not_multiple_of_32", test_q_cache_refuses_d_head_not_multiple_of_32 },
    { "capped_reference_matches_double_softmax", test_capped_reference_matches_double_softmax },
    { "backend_attention_applies_softcap", test_backend_attention_applies_softcap },
};

CHECK_MAIN(cases)
