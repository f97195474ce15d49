/* attn_neon.c - attention over the f16 cache (attn.h) with NEON (baseline ARMv8-A: fcvtl/fcvtn
 * convert f16 without any extension): d_head is walked 8 values (one 16-byte load, two q
 * registers of floats) at a time, so d_head % 8 == 0.
 *
 * Same plan as the AVX2 variant at half its width: per chunk of up to 16 keys and per head, 16
 * dot products into their own accumulators, folded to four vectors of 4 scores by addp trees;
 * one max, one scalar expf for the correction, a vector exp of the scores, and the V update with
 * four q accumulators per 16 elements. Napkin math (Neoverse N1 class, 2 NEON pipes, estimated,
 * not measured): a key of d_head 128 is 32 fcvtl + 32 FMAs for the score and as many for V, ~64
 * cycles per key and head (~21 ns at 3 GHz): 9 heads x 1,000 positions ~ 190 us per layer on one
 * core, several times faster than the reference's scalar f16 conversions.
 *
 * exp: the Cephes polynomial of attn_avx2.c, within 2 ulp of expf for x >= -87.3 and 0 below
 * (where the exact result is subnormal). */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "attn.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/f16.h"

static float32x4_t exp4(float32x4_t x)
{
    const float32x4_t lo = vdupq_n_f32(-87.33654f);
    const uint32x4_t tiny = vcltq_f32(x, lo); /* also -inf */
    x = vminq_f32(vmaxq_f32(x, lo), vdupq_n_f32(88.37626f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), tiny));
}

/* 8 halves as two vectors of 4 floats. */
static inline void load_f16x8(const uint16_t *p, float32x4_t *lo, float32x4_t *hi)
{
    const uint16x8_t v = vld1q_u16(p);
    *lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(v)));
    *hi = vcvt_high_f32_f16(vreinterpretq_f16_u16(v));
}

/* Four vectors to their four sums, in order, in one vector. */
static inline float32x4_t hsum4x4(const float32x4_t *v)
{
    return vpaddq_f32(vpaddq_f32(v[0], v[1]), vpaddq_f32(v[2], v[3]));
}

/* The 16 scaled scores q . k_j of a chunk of n keys into s[0..16); entries j >= n are -inf. */
static void chunk_scores(const float *q, const uint16_t *kc, int32_t rs, int32_t n, int32_t d,
                         float scale, float *s)
{
    float32x4_t acc[HX_ATTN_CHUNK];
    for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
        if (j >= n) {
            acc[j] = vdupq_n_f32(0.0f);
            continue;
        }
        const uint16_t *kj = kc + (size_t)j * rs;
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
        for (int32_t i = 0; i < d; i += 8) {
            float32x4_t k0, k1;
            load_f16x8(kj + i, &k0, &k1);
            a0 = vfmaq_f32(a0, vld1q_f32(q + i), k0);
            a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), k1);
        }
        acc[j] = vaddq_f32(a0, a1);
    }
    for (int32_t j = 0; j < HX_ATTN_CHUNK; j += 4)
        vst1q_f32(s + j, vmulq_n_f32(hsum4x4(acc + j), scale));
    for (int32_t j = n; j < HX_ATTN_CHUNK; j++) s[j] = -INFINITY;
}

/* og = og * corr + sum_j p[j] v_j over n keys. */
static void chunk_accumulate(float *og, const float *p, const uint16_t *vc, int32_t rs,
                             int32_t n, int32_t d, float corr)
{
    int32_t i = 0;
    for (; i + 16 <= d; i += 16) {
        float32x4_t a0 = vmulq_n_f32(vld1q_f32(og + i), corr);
        float32x4_t a1 = vmulq_n_f32(vld1q_f32(og + i + 4), corr);
        float32x4_t a2 = vmulq_n_f32(vld1q_f32(og + i + 8), corr);
        float32x4_t a3 = vmulq_n_f32(vld1q_f32(og + i + 12), corr);
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *vj = vc + (size_t)j * rs + i;
            float32x4_t v0, v1, v2, v3;
            load_f16x8(vj, &v0, &v1);
            load_f16x8(vj + 8, &v2, &v3);
            a0 = vfmaq_n_f32(a0, v0, p[j]);
            a1 = vfmaq_n_f32(a1, v1, p[j]);
            a2 = vfmaq_n_f32(a2, v2, p[j]);
            a3 = vfmaq_n_f32(a3, v3, p[j]);
        }
        vst1q_f32(og + i, a0);
        vst1q_f32(og + i + 4, a1);
        vst1q_f32(og + i + 8, a2);
        vst1q_f32(og + i + 12, a3);
    }
    for (; i < d; i += 8) {
        float32x4_t a0 = vmulq_n_f32(vld1q_f32(og + i), corr);
        float32x4_t a1 = vmulq_n_f32(vld1q_f32(og + i + 4), corr);
        for (int32_t j = 0; j < n; j++) {
            float32x4_t v0, v1;
            load_f16x8(vc + (size_t)j * rs + i, &v0, &v1);
            a0 = vfmaq_n_f32(a0, v0, p[j]);
            a1 = vfmaq_n_f32(a1, v1, p[j]);
        }
        vst1q_f32(og + i, a0);
        vst1q_f32(og + i + 4, a1);
    }
}

void hx_attn_neon(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
                  int32_t first, int32_t last, float *out)
{
    const int32_t d = d_head, rs = kv->row_stride;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q];
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < d; i += 4) vst1q_f32(out + g * d + i, vdupq_n_f32(0.0f));
    }
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t base;
        n = hx_attn_chunk(kv, pos, last, &base);
        const uint16_t *kc = kv->k + base, *vc = kv->v + base;
        for (int32_t g = 0; g < n_q; g++) {
            float s[HX_ATTN_CHUNK];
            chunk_scores(q + g * d, kc, rs, n, d, scale, s);
            float32x4_t sv[4];
            for (int k = 0; k < 4; k++) sv[k] = vld1q_f32(s + 4 * k);
            const float sm =
                vmaxvq_f32(vmaxq_f32(vmaxq_f32(sv[0], sv[1]), vmaxq_f32(sv[2], sv[3])));
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            float32x4_t sum = vdupq_n_f32(0.0f);
            for (int k = 0; k < 4; k++) {
                const float32x4_t p = exp4(vsubq_f32(sv[k], vdupq_n_f32(mc)));
                vst1q_f32(s + 4 * k, p);
                sum = vaddq_f32(sum, p);
            }
            l[g] = l[g] * corr + vaddvq_f32(sum);
            m[g] = mc;
            chunk_accumulate(out + g * d, s, vc, rs, n, d, corr);
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const float32x4_t lv = vdupq_n_f32(l[g]);
        for (int32_t i = 0; i < d; i += 4)
            vst1q_f32(out + g * d + i, vdivq_f32(vld1q_f32(out + g * d + i), lv));
    }
}

/* fcvtn rounds to nearest even under the default FPCR (Linux starts processes with FZ and DN
 * clear), keeps subnormals, and turns overflow into inf, as hx_f32_to_f16; a NaN stays a NaN
 * with its top payload bits (the reference sets only the quiet bit). */
void hx_f16_store_neon(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h =
            vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(x + i)), vld1q_f32(x + i + 4));
        vst1q_u16(y + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) y[i] = hx_f32_to_f16(x[i]);
}
/* ---- quantized cache (kv_quant.h) ----
 *
 * The AVX2 plan (attn_avx2.c) at 4 lanes: the affine form of attn.h, a group's 32 codes widened
 * u8 -> u16 -> u32 and converted (Q4: and/shift of the 16 bytes first), scale per key and group
 * in the score, minimums as one FMA per group across the 16 keys, and for V the weights
 * p_j s_jg per group, so the inner loop is a conversion and an FMA per 4 elements. */

#define QMAXG 8 /* groups of a head: d_head <= 256 */

/* 16 codes as four vectors of 4 floats. */
static inline void u8x16_to_f32(uint8x16_t b, float32x4_t *c)
{
    const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    c[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    c[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
    c[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    c[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* The 32 codes of a group as eight vectors of 4 floats, in element order. */
static inline void group_load(const uint8_t *row, int32_t grp, int q4, float32x4_t *c)
{
    if (q4) {
        const uint8x16_t b = vld1q_u8(row + grp * 16);
        u8x16_to_f32(vandq_u8(b, vdupq_n_u8(0x0F)), c);
        u8x16_to_f32(vshrq_n_u8(b, 4), c + 4);
        return;
    }
    u8x16_to_f32(vld1q_u8(row + grp * 32), c);
    u8x16_to_f32(vld1q_u8(row + grp * 32 + 16), c + 4);
}

/* A chunk's scales (or minimums) of one kind, [group][16 keys] as floats; entries >= n are 0. */
static void load_params(const uint16_t *p, int32_t bt, int32_t off, int32_t n, int32_t ng,
                        float (*dst)[16])
{
    for (int32_t grp = 0; grp < ng; grp++) {
        uint16_t h[16] = {0};
        memcpy(h, p + (size_t)grp * (size_t)bt + (size_t)off, (size_t)n * sizeof(uint16_t));
        for (int k = 0; k < 16; k += 8) {
            float32x4_t lo, hi;
            load_f16x8(h + k, &lo, &hi);
            vst1q_f32(dst[grp] + k, lo);
            vst1q_f32(dst[grp] + k + 4, hi);
        }
    }
}

static inline __attribute__((always_inline)) void
attend_q(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d, float scale,
         int32_t first, int32_t last, float *out, const int q4)
{
    const int32_t bt = kv->block_tokens, ng = d / 32, rb = q4 ? d / 2 : d;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q], qsum[HX_ATTN_MAX_Q][QMAXG];
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t grp = 0; grp < ng; grp++) {
            float32x4_t a = vdupq_n_f32(0.0f);
            for (int32_t i = 0; i < 32; i += 4)
                a = vaddq_f32(a, vld1q_f32(q + g * d + grp * 32 + i));
            qsum[g][grp] = vaddvq_f32(a);
        }
        for (int32_t i = 0; i < d; i += 4) vst1q_f32(out + g * d + i, vdupq_n_f32(0.0f));
    }
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t tile;
        int32_t off;
        n = hx_attn_qchunk(kv, pos, last, &tile, &off);
        const uint8_t *kc = kv->k + tile + (size_t)off * (size_t)rb;
        const uint8_t *vc = kv->v + tile + (size_t)off * (size_t)rb;
        const uint16_t *kp = (const uint16_t *)(const void *)(kv->k + tile + (size_t)bt * rb);
        const uint16_t *vp = (const uint16_t *)(const void *)(kv->v + tile + (size_t)bt * rb);
        float ks[QMAXG][16], km[QMAXG][16], vs[QMAXG][16], vm[QMAXG][16];
        load_params(kp, bt, off, n, ng, ks);
        load_params(kp + (size_t)ng * bt, bt, off, n, ng, km);
        load_params(vp, bt, off, n, ng, vs);
        load_params(vp + (size_t)ng * bt, bt, off, n, ng, vm);
        for (int32_t g = 0; g < n_q; g++) {
            const float *qg = q + g * d;
            float *og = out + g * d;
            float32x4_t acc[HX_ATTN_CHUNK];
            for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
                acc[j] = vdupq_n_f32(0.0f);
                if (j >= n) continue;
                const uint8_t *cj = kc + (size_t)j * rb;
                for (int32_t grp = 0; grp < ng; grp++) {
                    float32x4_t c[8];
                    group_load(cj, grp, q4, c);
                    const float *qq = qg + grp * 32;
                    float32x4_t p0 = vmulq_f32(vld1q_f32(qq), c[0]);
                    float32x4_t p1 = vmulq_f32(vld1q_f32(qq + 4), c[1]);
                    for (int k = 2; k < 8; k += 2) {
                        p0 = vfmaq_f32(p0, vld1q_f32(qq + 4 * k), c[k]);
                        p1 = vfmaq_f32(p1, vld1q_f32(qq + 4 * k + 4), c[k + 1]);
                    }
                    acc[j] = vfmaq_n_f32(acc[j], vaddq_f32(p0, p1), ks[grp][j]);
                }
            }
            float s[HX_ATTN_CHUNK];
            float32x4_t sv[4];
            for (int k = 0; k < 4; k++) {
                float32x4_t v = hsum4x4(acc + 4 * k);
                for (int32_t grp = 0; grp < ng; grp++)
                    v = vfmaq_n_f32(v, vld1q_f32(km[grp] + 4 * k), qsum[g][grp]);
                vst1q_f32(s + 4 * k, vmulq_n_f32(v, scale));
            }
            for (int32_t j = n; j < HX_ATTN_CHUNK; j++) s[j] = -INFINITY;
            for (int k = 0; k < 4; k++) sv[k] = vld1q_f32(s + 4 * k);
            const float sm =
                vmaxvq_f32(vmaxq_f32(vmaxq_f32(sv[0], sv[1]), vmaxq_f32(sv[2], sv[3])));
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            float32x4_t p[4], sum = vdupq_n_f32(0.0f);
            for (int k = 0; k < 4; k++) {
                p[k] = exp4(vsubq_f32(sv[k], vdupq_n_f32(mc)));
                sum = vaddq_f32(sum, p[k]);
            }
            l[g] = l[g] * corr + vaddvq_f32(sum);
            m[g] = mc;
            for (int32_t grp = 0; grp < ng; grp++) {
                float w[HX_ATTN_CHUNK];
                float32x4_t bv = vdupq_n_f32(0.0f);
                for (int k = 0; k < 4; k++) {
                    vst1q_f32(w + 4 * k, vmulq_f32(p[k], vld1q_f32(vs[grp] + 4 * k)));
                    bv = vfmaq_f32(bv, p[k], vld1q_f32(vm[grp] + 4 * k));
                }
                const float bias = vaddvq_f32(bv);
                float *o = og + grp * 32;
                float32x4_t a[8];
                for (int k = 0; k < 8; k++) a[k] = vmulq_n_f32(vld1q_f32(o + 4 * k), corr);
                for (int32_t j = 0; j < n; j++) {
                    float32x4_t cv[8];
                    group_load(vc + (size_t)j * rb, grp, q4, cv);
                    for (int k = 0; k < 8; k++) a[k] = vfmaq_n_f32(a[k], cv[k], w[j]);
                }
                const float32x4_t b = vdupq_n_f32(bias);
                for (int k = 0; k < 8; k++) vst1q_f32(o + 4 * k, vaddq_f32(a[k], b));
            }
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const float32x4_t lv = vdupq_n_f32(l[g]);
        for (int32_t i = 0; i < d; i += 4)
            vst1q_f32(out + g * d + i, vdivq_f32(vld1q_f32(out + g * d + i), lv));
    }
}

void hx_attn_q_neon(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out)
{
    HX_ASSERT(n_q >= 1 && n_q <= HX_ATTN_MAX_Q && first <= last);
    HX_ASSERT(d_head % 32 == 0 && d_head <= 32 * QMAXG);
    if (kv->dtype == HX_KV_Q4) {
        if (d_head == 64) attend_q(kv, q, n_q, 64, scale, first, last, out, 1);
        else attend_q(kv, q, n_q, d_head, scale, first, last, out, 1);
    } else {
        if (d_head == 64) attend_q(kv, q, n_q, 64, scale, first, last, out, 0);
        else attend_q(kv, q, n_q, d_head, scale, first, last, out, 0);
    }
}

#endif
