/* act_quant.c - the activation block format: buffer carving, the reference quantizer (the
 * definition every SIMD quantizer must equal bit for bit) and the variant list.
 *
 * Cost: quantizing is one pass over n floats (4n bytes read, 1.25n written) per row, tiny next
 * to the matmul that follows (n_out * n weight elements), so the reference would do; the SIMD
 * variants exist because at batch 512 the pass is repeated 512 times per matmul. */
#include "act_quant.h"

#include <math.h>

#include "base/cpu.h"
#include "base/err.h"

size_t hx_act_bytes(int64_t n_rows, int64_t n)
{
    const size_t per_row =
        (size_t)n + (size_t)(n / HX_ACT_BLOCK) * 4 + (size_t)(n / HX_ACT_SUB) * 2;
    return ((size_t)n_rows * per_row + 3 * 64 + 63) & ~(size_t)63;
}

/* Each array starts on a 64-byte boundary so a row-0 load of 64 values is aligned. */
void hx_act_init(hx_act *a, void *buf, int64_t n_rows, int64_t n)
{
    HX_ASSERT(n % HX_ACT_BLOCK == 0 && n_rows >= 0);
    unsigned char *p = buf;
    const size_t qs_bytes = (size_t)(n_rows * n);
    const size_t d_bytes  = (size_t)(n_rows * (n / HX_ACT_BLOCK)) * sizeof(float);
    a->n      = n;
    a->n_rows = n_rows;
    a->qs     = (int8_t *)p;
    p += (qs_bytes + 63) & ~(size_t)63;
    a->d = (float *)(void *)p;
    p += (d_bytes + 63) & ~(size_t)63;
    a->bsum = (int16_t *)(void *)p;
    a->f    = NULL;
}

void hx_act_quantize(hx_act *a, const float *x, hx_act_quant_fn quant)
{
    const int64_t n = a->n;
    for (int64_t r = 0; r < a->n_rows; r++)
        quant(x + r * n, a->qs + r * n, a->d + r * (n / HX_ACT_BLOCK),
              a->bsum + r * (n / HX_ACT_SUB), n);
    a->f = x;
}

/* The definition: per block of 32, d = amax/127 and q = rne(x * (127/amax)); the product is its
 * own statement so no compiler fuses it with anything. |x * id| <= 127 up to one rounding, and
 * rounding 127.00001 still gives 127, so no clamp is needed. */
void hx_act_quant_ref(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n)
{
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        const float *xb = x + b * HX_ACT_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < HX_ACT_BLOCK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d[b] = amax / 127.0f;
        for (int h = 0; h < 2; h++) {
            int s = 0;
            for (int i = 16 * h; i < 16 * h + 16; i++) {
                const float v = xb[i] * id;
                const int q = (int)nearbyintf(v);
                qs[b * HX_ACT_BLOCK + i] = (int8_t)q;
                s += q;
            }
            bsum[2 * b + h] = (int16_t)s;
        }
    }
}

/* The first term's inverse scale is recomputed from d1 as the quantizer computed it (127 /
 * amax with amax = 127 d1 would not round-trip): the caller passes d1 = amax / 127, so the
 * block maximum is recovered from the row itself. Each product is its own statement (no fused
 * operations), as in the first term. */
void hx_act_quant2_ref(const float *x, const int8_t *q1, const float *d1, int8_t *q2, float *d2,
                       int16_t *bsum2, int64_t n)
{
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        const float *xb = x + b * HX_ACT_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < HX_ACT_BLOCK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float id2 = id * 256.0f;
        d2[b] = d1[b] * 0x1p-8f;
        for (int h = 0; h < 2; h++) {
            int s = 0;
            for (int i = 16 * h; i < 16 * h + 16; i++) {
                const float dq = d1[b] * (float)q1[b * HX_ACT_BLOCK + i];
                const float r = xb[i] - dq;
                const float v = r * id2;
                int q = (int)nearbyintf(v);
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                q2[b * HX_ACT_BLOCK + i] = (int8_t)q;
                s += q;
            }
            bsum2[2 * b + h] = (int16_t)s;
        }
    }
}

hx_act_quant2_fn hx_act_quant2_select(unsigned isa)
{
#if defined(__x86_64__)
    if (isa & HX_ISA_AVX512) return hx_act_quant2_avx512;
    if (isa & HX_ISA_AVX2) return hx_act_quant2_avx2;
#endif
    (void)isa;
    return hx_act_quant2_ref;
}

typedef struct {
    unsigned        isa;
    const char     *name;
    hx_act_quant_fn fn;
} act_impl;

static const act_impl act_impls[] = { /* best first; the reference last, always eligible */
#if defined(__x86_64__)
    { HX_ISA_AVX512, "avx512", hx_act_quant_avx512 },
    { HX_ISA_AVX2,   "avx2",   hx_act_quant_avx2   },
#elif defined(__aarch64__)
    { HX_ISA_NEON,   "neon",   hx_act_quant_neon   },
#endif
    { HX_ISA_NONE,   "ref",    hx_act_quant_ref    },
};

int hx_act_quant_variants(unsigned isa, hx_act_quant_variant *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < HX_COUNTOF(act_impls); i++) {
        if ((act_impls[i].isa & ~isa) != 0) continue;
        if (n < max) out[n] = (hx_act_quant_variant){ act_impls[i].name, act_impls[i].isa,
                                                      act_impls[i].fn };
        n++;
    }
    return n;
}
