/* attn_avx2.c - attention over the f16 cache (attn.h) with AVX2, FMA and F16C: d_head is walked
 * 8 floats (one ymm, one vcvtph2ps of 16 bytes) at a time, so d_head % 8 == 0.
 *
 * Same plan as the AVX-512 variant (see there for the napkin math), at half the width: per chunk
 * of up to 16 keys and per head, 16 dot products into their own ymm chains, folded to two ymm of
 * 8 scores by hadd trees; one max, one scalar expf for the correction, a vector exp of the
 * scores, and the V update with four ymm accumulators per 32 elements.
 * exp: exp256 (exp_avx2.h). Soft-capped scores (Gemma 2) go through tanh256 right after the
 * scale, before the masked tail of a chunk is set to -inf; one always-inlined body serves both,
 * so the uncapped entry points carry no test of the cap. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/f16.h"
#include "exp_avx2.h"

/* Eight vectors to their eight sums, in order, in one ymm. */
static __m256 hsum8x8(const __m256 *v)
{
    const __m256 s01 = _mm256_hadd_ps(v[0], v[1]), s23 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 s45 = _mm256_hadd_ps(v[4], v[5]), s67 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 a = _mm256_hadd_ps(s01, s23), b = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

static float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* softcap * tanh(s / softcap) of 8 scores (Gemma 2's attention logit soft-capping). */
static inline __m256 cap8(__m256 s, float softcap)
{
    const __m256 c = _mm256_set1_ps(softcap);
    return _mm256_mul_ps(c, tanh256(_mm256_div_ps(s, c)));
}

/* The 16 scaled (and, softcap > 0, capped) scores q . k_j of a chunk of n keys into s[0..16);
 * entries j >= n are -inf. */
static inline __attribute__((always_inline)) void
chunk_scores(const float *q, const uint16_t *kc, int32_t rs, int32_t n, int32_t d, float scale,
             float softcap, float *s)
{
    __m256 acc[HX_ATTN_CHUNK];
    for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
        if (j >= n) {
            acc[j] = _mm256_setzero_ps();
            continue;
        }
        const uint16_t *kj = kc + (size_t)j * rs;
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(q), load_f16(kj));
        for (int32_t i = 8; i < d; i += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16(kj + i), a);
        acc[j] = a;
    }
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 s0 = _mm256_mul_ps(hsum8x8(acc), sc), s1 = _mm256_mul_ps(hsum8x8(acc + 8), sc);
    if (softcap > 0.0f) s0 = cap8(s0, softcap), s1 = cap8(s1, softcap);
    _mm256_storeu_ps(s, s0);
    _mm256_storeu_ps(s + 8, s1);
    for (int32_t j = n; j < HX_ATTN_CHUNK; j++) s[j] = -INFINITY; /* after capping: -inf stays */
}

/* og = og * corr + sum_j p[j] v_j over n keys. */
static void chunk_accumulate(float *og, const float *p, const uint16_t *vc, int32_t rs,
                             int32_t n, int32_t d, float corr)
{
    const __m256 c = _mm256_set1_ps(corr);
    int32_t i = 0;
    for (; i + 32 <= d; i += 32) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(og + i), c);
        __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(og + i + 8), c);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(og + i + 16), c);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(og + i + 24), c);
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *vj = vc + (size_t)j * rs + i;
            const __m256 w = _mm256_broadcast_ss(p + j);
            a0 = _mm256_fmadd_ps(w, load_f16(vj), a0);
            a1 = _mm256_fmadd_ps(w, load_f16(vj + 8), a1);
            a2 = _mm256_fmadd_ps(w, load_f16(vj + 16), a2);
            a3 = _mm256_fmadd_ps(w, load_f16(vj + 24), a3);
        }
        _mm256_storeu_ps(og + i, a0);
        _mm256_storeu_ps(og + i + 8, a1);
        _mm256_storeu_ps(og + i + 16, a2);
        _mm256_storeu_ps(og + i + 24, a3);
    }
    for (; i < d; i += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(og + i), c);
        for (int32_t j = 0; j < n; j++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), load_f16(vc + (size_t)j * rs + i), a);
        _mm256_storeu_ps(og + i, a);
    }
}

static inline __attribute__((always_inline)) void
attend(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
       float softcap, int32_t first, int32_t last, float *out)
{
    const int32_t d = d_head, rs = kv->row_stride;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q];
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < d; i += 8) _mm256_storeu_ps(out + g * d + i, _mm256_setzero_ps());
    }
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t base;
        n = hx_attn_chunk(kv, pos, last, &base);
        const uint16_t *kc = kv->k + base, *vc = kv->v + base;
        for (int32_t g = 0; g < n_q; g++) {
            float s[HX_ATTN_CHUNK];
            chunk_scores(q + g * d, kc, rs, n, d, scale, softcap, s);
            const __m256 s0 = _mm256_loadu_ps(s), s1 = _mm256_loadu_ps(s + 8);
            const float sm = hmax8(_mm256_max_ps(s0, s1));
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            const __m256 mv = _mm256_set1_ps(mc);
            const __m256 p0 = exp256(_mm256_sub_ps(s0, mv)), p1 = exp256(_mm256_sub_ps(s1, mv));
            _mm256_storeu_ps(s, p0);
            _mm256_storeu_ps(s + 8, p1);
            l[g] = l[g] * corr + hsum8(_mm256_add_ps(p0, p1));
            m[g] = mc;
            chunk_accumulate(out + g * d, s, vc, rs, n, d, corr);
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const __m256 lv = _mm256_set1_ps(l[g]);
        for (int32_t i = 0; i < d; i += 8)
            _mm256_storeu_ps(out + g * d + i, _mm256_div_ps(_mm256_loadu_ps(out + g * d + i), lv));
    }
}

void hx_attn_avx2(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
                  int32_t first, int32_t last, float *out)
{
    attend(kv, q, n_q, d_head, scale, 0.0f, first, last, out);
}

void hx_attn_capped_avx2(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                         float scale, float softcap, int32_t first, int32_t last, float *out)
{
    attend(kv, q, n_q, d_head, scale, softcap, first, last, out);
}

/* vcvtps2ph rounds to nearest even (imm8), handles subnormals, overflow and inf exactly as
 * hx_f32_to_f16; a NaN keeps its top payload bits (the reference sets only the quiet bit). */
void hx_f16_store_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = hx_f32_to_f16(x[i]);
}

/* ---- quantized cache (kv_quant.h) ----
 *
 * The AVX-512 plan (attn_avx512.c) at 8 lanes: the affine form of attn.h, codes converted with
 * vpmovzxbd + vcvtdq2ps (Q4: and/shift of the zero-extended bytes first), scale per key and
 * group in the score, minimums as one FMA per group across the 16 keys, and for V the weights
 * p_j s_jg per group so that the inner loop is a conversion and an FMA per 8 elements, with four
 * accumulators per group of 32. */

#define QMAXG 8 /* groups of a head: d_head <= 256 */

static inline __m256 q8_load(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

/* The 32 codes of a group as four vectors of 8 floats, in element order. */
static inline __attribute__((always_inline)) void
group_load(const uint8_t *row, int32_t grp, int q4, __m256 *c)
{
    if (q4) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(row + grp * 16));
        const __m256i b0 = _mm256_cvtepu8_epi32(b);
        const __m256i b1 = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b));
        const __m256i lo4 = _mm256_set1_epi32(0x0F);
        c[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, lo4));
        c[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, lo4));
        c[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
        c[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
        return;
    }
    for (int k = 0; k < 4; k++) c[k] = q8_load(row + grp * 32 + k * 8);
}

/* A chunk's scales (or minimums) of one kind, [group][16 keys] as floats; entries >= n are 0
 * (AVX2 has no 16-bit masked load, so the n valid ones go through a zeroed buffer). */
static void load_params(const uint16_t *p, int32_t bt, int32_t off, int32_t n, int32_t ng,
                        float (*dst)[16])
{
    for (int32_t grp = 0; grp < ng; grp++) {
        uint16_t h[16] = {0};
        memcpy(h, p + (size_t)grp * (size_t)bt + (size_t)off, (size_t)n * sizeof(uint16_t));
        _mm256_storeu_ps(dst[grp], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(void *)h)));
        _mm256_storeu_ps(dst[grp] + 8,
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(void *)(h + 8))));
    }
}

static inline __attribute__((always_inline)) void
attend_q(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d, float scale,
         float softcap, int32_t first, int32_t last, float *out, const int q4)
{
    const int32_t bt = kv->block_tokens, ng = d / 32, rb = q4 ? d / 2 : d;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q], qsum[HX_ATTN_MAX_Q][QMAXG];
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t grp = 0; grp < ng; grp++) {
            const float *qg = q + g * d + grp * 32;
            qsum[g][grp] = hsum8(_mm256_add_ps(
                _mm256_add_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(qg + 8)),
                _mm256_add_ps(_mm256_loadu_ps(qg + 16), _mm256_loadu_ps(qg + 24))));
        }
        for (int32_t i = 0; i < d; i += 8) _mm256_storeu_ps(out + g * d + i, _mm256_setzero_ps());
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
            __m256 acc[HX_ATTN_CHUNK];
            for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
                if (j >= n) {
                    acc[j] = _mm256_setzero_ps();
                    continue;
                }
                const uint8_t *cj = kc + (size_t)j * rb;
                __m256 a = _mm256_setzero_ps();
                for (int32_t grp = 0; grp < ng; grp++) {
                    __m256 c[4];
                    group_load(cj, grp, q4, c);
                    const float *qq = qg + grp * 32;
                    __m256 p0 = _mm256_mul_ps(_mm256_loadu_ps(qq), c[0]);
                    __m256 p1 = _mm256_mul_ps(_mm256_loadu_ps(qq + 8), c[1]);
                    p0 = _mm256_fmadd_ps(_mm256_loadu_ps(qq + 16), c[2], p0);
                    p1 = _mm256_fmadd_ps(_mm256_loadu_ps(qq + 24), c[3], p1);
                    a = _mm256_fmadd_ps(_mm256_set1_ps(ks[grp][j]), _mm256_add_ps(p0, p1), a);
                }
                acc[j] = a;
            }
            __m256 s0 = hsum8x8(acc), s1 = hsum8x8(acc + 8);
            for (int32_t grp = 0; grp < ng; grp++) {
                const __m256 qs = _mm256_set1_ps(qsum[g][grp]);
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(km[grp]), qs, s0);
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(km[grp] + 8), qs, s1);
            }
            float sv[HX_ATTN_CHUNK];
            const __m256 scv = _mm256_set1_ps(scale);
            s0 = _mm256_mul_ps(s0, scv);
            s1 = _mm256_mul_ps(s1, scv);
            if (softcap > 0.0f) s0 = cap8(s0, softcap), s1 = cap8(s1, softcap);
            _mm256_storeu_ps(sv, s0);
            _mm256_storeu_ps(sv + 8, s1);
            for (int32_t j = n; j < HX_ATTN_CHUNK; j++) sv[j] = -INFINITY;
            s0 = _mm256_loadu_ps(sv);
            s1 = _mm256_loadu_ps(sv + 8);
            const float sm = hmax8(_mm256_max_ps(s0, s1));
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            const __m256 mv = _mm256_set1_ps(mc);
            const __m256 p0 = exp256(_mm256_sub_ps(s0, mv)), p1 = exp256(_mm256_sub_ps(s1, mv));
            l[g] = l[g] * corr + hsum8(_mm256_add_ps(p0, p1));
            m[g] = mc;
            const __m256 c = _mm256_set1_ps(corr);
            for (int32_t grp = 0; grp < ng; grp++) {
                float w[HX_ATTN_CHUNK];
                _mm256_storeu_ps(w, _mm256_mul_ps(p0, _mm256_loadu_ps(vs[grp])));
                _mm256_storeu_ps(w + 8, _mm256_mul_ps(p1, _mm256_loadu_ps(vs[grp] + 8)));
                const float bias = hsum8(_mm256_fmadd_ps(
                    p0, _mm256_loadu_ps(vm[grp]), _mm256_mul_ps(p1, _mm256_loadu_ps(vm[grp] + 8))));
                float *o = og + grp * 32;
                __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(o), c);
                __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(o + 8), c);
                __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(o + 16), c);
                __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(o + 24), c);
                for (int32_t j = 0; j < n; j++) {
                    const __m256 wj = _mm256_broadcast_ss(w + j);
                    __m256 cv[4];
                    group_load(vc + (size_t)j * rb, grp, q4, cv);
                    a0 = _mm256_fmadd_ps(wj, cv[0], a0);
                    a1 = _mm256_fmadd_ps(wj, cv[1], a1);
                    a2 = _mm256_fmadd_ps(wj, cv[2], a2);
                    a3 = _mm256_fmadd_ps(wj, cv[3], a3);
                }
                const __m256 b = _mm256_set1_ps(bias);
                _mm256_storeu_ps(o, _mm256_add_ps(a0, b));
                _mm256_storeu_ps(o + 8, _mm256_add_ps(a1, b));
                _mm256_storeu_ps(o + 16, _mm256_add_ps(a2, b));
                _mm256_storeu_ps(o + 24, _mm256_add_ps(a3, b));
            }
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const __m256 lv = _mm256_set1_ps(l[g]);
        for (int32_t i = 0; i < d; i += 8)
            _mm256_storeu_ps(out + g * d + i, _mm256_div_ps(_mm256_loadu_ps(out + g * d + i), lv));
    }
}

/* Instances with d_head and the cache's code width constant (the common sizes unroll fully). */
static inline __attribute__((always_inline)) void
attend_q_sized(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
               float softcap, int32_t first, int32_t last, float *out)
{
    HX_ASSERT(n_q >= 1 && n_q <= HX_ATTN_MAX_Q && first <= last);
    HX_ASSERT(d_head % 32 == 0 && d_head <= 32 * QMAXG);
    if (kv->dtype == HX_KV_Q4) {
        if (d_head == 64) attend_q(kv, q, n_q, 64, scale, softcap, first, last, out, 1);
        else if (d_head == 128) attend_q(kv, q, n_q, 128, scale, softcap, first, last, out, 1);
        else attend_q(kv, q, n_q, d_head, scale, softcap, first, last, out, 1);
    } else {
        if (d_head == 64) attend_q(kv, q, n_q, 64, scale, softcap, first, last, out, 0);
        else if (d_head == 128) attend_q(kv, q, n_q, 128, scale, softcap, first, last, out, 0);
        else attend_q(kv, q, n_q, d_head, scale, softcap, first, last, out, 0);
    }
}

void hx_attn_q_avx2(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out)
{
    attend_q_sized(kv, q, n_q, d_head, scale, 0.0f, first, last, out);
}

void hx_attn_q_capped_avx2(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                           float scale, float softcap, int32_t first, int32_t last, float *out)
{
    attend_q_sized(kv, q, n_q, d_head, scale, softcap, first, last, out);
}

#endif
