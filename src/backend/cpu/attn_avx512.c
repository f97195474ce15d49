/* attn_avx512.c - attention over the f16 cache (attn.h) with AVX-512 and F16C: d_head is
 * walked 16 floats (one zmm, one vcvtph2ps of 32 bytes) at a time, so d_head % 16 == 0.
 *
 * Per chunk of up to 16 keys and per head: 16 dot products, each d_head/16 FMAs into its own
 * zmm (independent chains, so the FMA latency overlaps across keys), folded to 16 scores in one
 * zmm by a transpose-add tree; then one max, one scalar expf of the correction, a vector exp of
 * the 16 scores and the V update, four zmm accumulators per 64 elements with one broadcast
 * weight per key. Napkin math at d_head 64: a key costs 2 x 4 loads+converts+FMAs (K and V),
 * ~4 cycles, against ~250 for the scalar reference; K/V of a chunk (2 x 2 KiB) come from memory
 * once and from L1 for the other heads of the group.
 * exp: exp_avx512.h. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "attn.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/f16.h"
#include "exp_avx512.h"

/* Eight vectors to their eight sums, in order, in one ymm. */
static __m256 hsum8x8(const __m256 *v)
{
    const __m256 s01 = _mm256_hadd_ps(v[0], v[1]), s23 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 s45 = _mm256_hadd_ps(v[4], v[5]), s67 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 a = _mm256_hadd_ps(s01, s23), b = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

static __m512 load_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* The 16 scaled scores q . k_j of a chunk of n keys; lanes j >= n are -inf. */
static inline __attribute__((always_inline)) __m512
chunk_scores(const float *q, const uint16_t *kc, int32_t rs, int32_t n, int32_t d, float scale)
{
    __m256 half[HX_ATTN_CHUNK];
    for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
        if (j >= n) {
            half[j] = _mm256_setzero_ps();
            continue;
        }
        const uint16_t *kj = kc + (size_t)j * rs;
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), load_f16(kj));
        for (int32_t i = 16; i < d; i += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load_f16(kj + i), acc);
        half[j] = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    }
    const __m512 s = _mm512_insertf32x8(_mm512_castps256_ps512(hsum8x8(half)), hsum8x8(half + 8),
                                        1);
    const __mmask16 valid = (__mmask16)((1u << n) - 1u);
    return _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), valid, s, _mm512_set1_ps(scale));
}

/* og = og * corr + sum_j p[j] v_j over n keys. */
static inline __attribute__((always_inline)) void
chunk_accumulate(float *og, const float *p, const uint16_t *vc, int32_t rs, int32_t n, int32_t d,
                 float corr)
{
    const __m512 c = _mm512_set1_ps(corr);
    int32_t i = 0;
    for (; i + 64 <= d; i += 64) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(og + i), c);
        __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(og + i + 16), c);
        __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(og + i + 32), c);
        __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(og + i + 48), c);
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *vj = vc + (size_t)j * rs + i;
            const __m512 w = _mm512_set1_ps(p[j]);
            a0 = _mm512_fmadd_ps(w, load_f16(vj), a0);
            a1 = _mm512_fmadd_ps(w, load_f16(vj + 16), a1);
            a2 = _mm512_fmadd_ps(w, load_f16(vj + 32), a2);
            a3 = _mm512_fmadd_ps(w, load_f16(vj + 48), a3);
        }
        _mm512_storeu_ps(og + i, a0);
        _mm512_storeu_ps(og + i + 16, a1);
        _mm512_storeu_ps(og + i + 32, a2);
        _mm512_storeu_ps(og + i + 48, a3);
    }
    for (; i < d; i += 16) {
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(og + i), c);
        for (int32_t j = 0; j < n; j++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load_f16(vc + (size_t)j * rs + i), a);
        _mm512_storeu_ps(og + i, a);
    }
}

static inline __attribute__((always_inline)) void
attend(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
       int32_t first, int32_t last, float *out)
{
    const int32_t d = d_head, rs = kv->row_stride;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q];
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < d; i += 16) _mm512_storeu_ps(out + g * d + i, _mm512_setzero_ps());
    }
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t base;
        n = hx_attn_chunk(kv, pos, last, &base);
        const uint16_t *kc = kv->k + base, *vc = kv->v + base;
        for (int32_t g = 0; g < n_q; g++) {
            const __m512 s = chunk_scores(q + g * d, kc, rs, n, d, scale);
            const float sm = _mm512_reduce_max_ps(s);
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            const __m512 p = exp512(_mm512_sub_ps(s, _mm512_set1_ps(mc)));
            float pw[HX_ATTN_CHUNK];
            _mm512_storeu_ps(pw, p);
            l[g] = l[g] * corr + _mm512_reduce_add_ps(p);
            m[g] = mc;
            chunk_accumulate(out + g * d, pw, vc, rs, n, d, corr);
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const __m512 lv = _mm512_set1_ps(l[g]);
        for (int32_t i = 0; i < d; i += 16)
            _mm512_storeu_ps(out + g * d + i, _mm512_div_ps(_mm512_loadu_ps(out + g * d + i), lv));
    }
}

/* The common head sizes get their own instance, so the loops over d_head unroll. */
void hx_attn_avx512(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out)
{
    if (d_head == 64) attend(kv, q, n_q, 64, scale, first, last, out);
    else if (d_head == 128) attend(kv, q, n_q, 128, scale, first, last, out);
    else attend(kv, q, n_q, d_head, scale, first, last, out);
}

/* vcvtps2ph rounds to nearest even (imm8), handles subnormals, overflow and inf exactly as
 * hx_f32_to_f16; a NaN keeps its top payload bits (the reference sets only the quiet bit). */
void hx_f16_store_avx512(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = hx_f32_to_f16(x[i]);
}

/* ---- quantized cache (kv_quant.h) ----
 *
 * The affine form of attn.h: per key and group, the dot of q with the codes converted to floats
 * (Q8: vpmovzxbd + vcvtdq2ps per 16; Q4: one vpmovzxbd per 32 and a vpermps per 16 that turns a
 * nibble into its float, since vpermps reads only the low 4 bits of each index and so needs no
 * mask), scaled by the key's group scale; the minimum terms are one FMA per group for all 16
 * keys. For V the chunk's weights p_j are folded into the group scales once per chunk and head
 * (16 lanes per group), so the inner loop is a conversion and an FMA per 16 elements, as for
 * f16, and the minimums add one constant per group at the end of the chunk. Napkin math at
 * d_head 64: a key moves 2 x 72 bytes (Q8) or 2 x 40 (Q4) against 2 x 128 for f16. */

#define QMAXG 8 /* groups of a head: d_head <= 256 */

static inline __m512 q8_load(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

/* The 32 codes of a Q4 group (16 bytes) as floats: elements 0..15, then 16..31. */
static inline void q4_load(const uint8_t *p, __m512 *lo, __m512 *hi)
{
    const __m512 ramp = _mm512_setr_ps(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f,
                                       9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f);
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    *lo = _mm512_permutexvar_ps(b, ramp);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), ramp);
}

/* q_g . c_g for group grp of one row of codes. */
static inline __attribute__((always_inline)) __m512
group_dot(const float *q, const uint8_t *row, int32_t grp, int q4)
{
    const float *qg = q + grp * 32;
    if (q4) {
        __m512 lo, hi;
        q4_load(row + grp * 16, &lo, &hi);
        return _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16), hi,
                               _mm512_mul_ps(_mm512_loadu_ps(qg), lo));
    }
    return _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16), q8_load(row + grp * 32 + 16),
                           _mm512_mul_ps(_mm512_loadu_ps(qg), q8_load(row + grp * 32)));
}

/* A chunk's scales (or minimums) of one kind, [group][16 keys] as floats; lanes >= n are 0. */
static inline void load_params(const uint16_t *p, int32_t bt, int32_t off, int32_t ng,
                               __mmask16 valid, float (*dst)[16])
{
    for (int32_t grp = 0; grp < ng; grp++)
        _mm512_storeu_ps(dst[grp], _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                       valid, p + (size_t)grp * (size_t)bt + (size_t)off)));
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
        for (int32_t grp = 0; grp < ng; grp++)
            qsum[g][grp] = _mm512_reduce_add_ps(_mm512_add_ps(
                _mm512_loadu_ps(q + g * d + grp * 32), _mm512_loadu_ps(q + g * d + grp * 32 + 16)));
        for (int32_t i = 0; i < d; i += 16) _mm512_storeu_ps(out + g * d + i, _mm512_setzero_ps());
    }
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t tile;
        int32_t off;
        n = hx_attn_qchunk(kv, pos, last, &tile, &off);
        const __mmask16 valid = (__mmask16)((1u << n) - 1u);
        const uint8_t *kc = kv->k + tile + (size_t)off * (size_t)rb;
        const uint8_t *vc = kv->v + tile + (size_t)off * (size_t)rb;
        const uint16_t *kp = (const uint16_t *)(const void *)(kv->k + tile + (size_t)bt * rb);
        const uint16_t *vp = (const uint16_t *)(const void *)(kv->v + tile + (size_t)bt * rb);
        float ks[QMAXG][16], km[QMAXG][16], vs[QMAXG][16], vm[QMAXG][16];
        load_params(kp, bt, off, ng, valid, ks);
        load_params(kp + (size_t)ng * bt, bt, off, ng, valid, km);
        load_params(vp, bt, off, ng, valid, vs);
        load_params(vp + (size_t)ng * bt, bt, off, ng, valid, vm);
        for (int32_t g = 0; g < n_q; g++) {
            const float *qg = q + g * d;
            float *og = out + g * d;
            /* scores: sum_g s_jg (q_g . c_jg), folded across keys, plus sum_g m_jg sum(q_g) */
            __m256 half[HX_ATTN_CHUNK];
            for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
                if (j >= n) {
                    half[j] = _mm256_setzero_ps();
                    continue;
                }
                const uint8_t *cj = kc + (size_t)j * rb;
                __m512 acc = _mm512_mul_ps(_mm512_set1_ps(ks[0][j]), group_dot(qg, cj, 0, q4));
                for (int32_t grp = 1; grp < ng; grp++)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(ks[grp][j]), group_dot(qg, cj, grp, q4),
                                          acc);
                half[j] =
                    _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
            }
            __m512 sc = _mm512_insertf32x8(_mm512_castps256_ps512(hsum8x8(half)),
                                           hsum8x8(half + 8), 1);
            for (int32_t grp = 0; grp < ng; grp++)
                sc = _mm512_fmadd_ps(_mm512_loadu_ps(km[grp]), _mm512_set1_ps(qsum[g][grp]), sc);
            sc = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), valid, sc, _mm512_set1_ps(scale));
            const float sm = _mm512_reduce_max_ps(sc);
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            const __m512 p = exp512(_mm512_sub_ps(sc, _mm512_set1_ps(mc)));
            l[g] = l[g] * corr + _mm512_reduce_add_ps(p);
            m[g] = mc;
            /* V: weights p_j s_jg per group, and the minimums' share sum_j p_j m_jg */
            float w[QMAXG][16], bias[QMAXG];
            for (int32_t grp = 0; grp < ng; grp++) {
                _mm512_storeu_ps(w[grp], _mm512_mul_ps(p, _mm512_loadu_ps(vs[grp])));
                bias[grp] = _mm512_reduce_add_ps(_mm512_mul_ps(p, _mm512_loadu_ps(vm[grp])));
            }
            const __m512 c = _mm512_set1_ps(corr);
            int32_t grp = 0;
            for (; grp + 2 <= ng; grp += 2) { /* two groups: four independent FMA chains */
                float *o = og + grp * 32;
                __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(o), c);
                __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(o + 16), c);
                __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(o + 32), c);
                __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(o + 48), c);
                for (int32_t j = 0; j < n; j++) {
                    const __m512 w0 = _mm512_set1_ps(w[grp][j]), w1 = _mm512_set1_ps(w[grp + 1][j]);
                    const uint8_t *vj = vc + (size_t)j * rb;
                    __m512 c0, c1, c2, c3;
                    if (q4) {
                        q4_load(vj + grp * 16, &c0, &c1);
                        q4_load(vj + grp * 16 + 16, &c2, &c3);
                    } else {
                        c0 = q8_load(vj + grp * 32);
                        c1 = q8_load(vj + grp * 32 + 16);
                        c2 = q8_load(vj + grp * 32 + 32);
                        c3 = q8_load(vj + grp * 32 + 48);
                    }
                    a0 = _mm512_fmadd_ps(w0, c0, a0);
                    a1 = _mm512_fmadd_ps(w0, c1, a1);
                    a2 = _mm512_fmadd_ps(w1, c2, a2);
                    a3 = _mm512_fmadd_ps(w1, c3, a3);
                }
                const __m512 b0 = _mm512_set1_ps(bias[grp]), b1 = _mm512_set1_ps(bias[grp + 1]);
                _mm512_storeu_ps(o, _mm512_add_ps(a0, b0));
                _mm512_storeu_ps(o + 16, _mm512_add_ps(a1, b0));
                _mm512_storeu_ps(o + 32, _mm512_add_ps(a2, b1));
                _mm512_storeu_ps(o + 48, _mm512_add_ps(a3, b1));
            }
            if (grp < ng) { /* an odd last group (d_head 96, 160, ...) */
                float *o = og + grp * 32;
                __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(o), c);
                __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(o + 16), c);
                for (int32_t j = 0; j < n; j++) {
                    const __m512 w0 = _mm512_set1_ps(w[grp][j]);
                    const uint8_t *vj = vc + (size_t)j * rb;
                    __m512 c0, c1;
                    if (q4) {
                        q4_load(vj + grp * 16, &c0, &c1);
                    } else {
                        c0 = q8_load(vj + grp * 32);
                        c1 = q8_load(vj + grp * 32 + 16);
                    }
                    a0 = _mm512_fmadd_ps(w0, c0, a0);
                    a1 = _mm512_fmadd_ps(w0, c1, a1);
                }
                const __m512 b0 = _mm512_set1_ps(bias[grp]);
                _mm512_storeu_ps(o, _mm512_add_ps(a0, b0));
                _mm512_storeu_ps(o + 16, _mm512_add_ps(a1, b0));
            }
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const __m512 lv = _mm512_set1_ps(l[g]);
        for (int32_t i = 0; i < d; i += 16)
            _mm512_storeu_ps(out + g * d + i, _mm512_div_ps(_mm512_loadu_ps(out + g * d + i), lv));
    }
}

/* One instance per format and common head size, so the group loops unroll. */
void hx_attn_q_avx512(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                      float scale, int32_t first, int32_t last, float *out)
{
    HX_ASSERT(n_q >= 1 && n_q <= HX_ATTN_MAX_Q && first <= last);
    HX_ASSERT(d_head % 32 == 0 && d_head <= 32 * QMAXG);
    if (kv->dtype == HX_KV_Q4) {
        if (d_head == 64) attend_q(kv, q, n_q, 64, scale, first, last, out, 1);
        else if (d_head == 128) attend_q(kv, q, n_q, 128, scale, first, last, out, 1);
        else attend_q(kv, q, n_q, d_head, scale, first, last, out, 1);
    } else {
        if (d_head == 64) attend_q(kv, q, n_q, 64, scale, first, last, out, 0);
        else if (d_head == 128) attend_q(kv, q, n_q, 128, scale, first, last, out, 0);
        else attend_q(kv, q, n_q, d_head, scale, first, last, out, 0);
    }
}

#endif
