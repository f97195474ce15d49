/* act_quant_avx2.c - the activation quantizers (act_quant.h: the first term and the residual
 * second term) with AVX2: one block of 32 floats is four ymm registers.
 *
 * Same steps as the AVX-512 variant (see there for the cost): abs-max, one true division,
 * multiply, vcvtps2dq (nearest even), then packs to int8 — vpackssdw/vpacksswb work within
 * 128-bit lanes, so a final vpermd puts the 32 bytes back in order. Bit-identical to
 * hx_act_quant_ref. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "act_quant.h"

static float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static int hsum8_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Loads block xb (32 floats) into v and returns its largest magnitude. */
static inline float load_block_amax(const float *xb, __m256 v[4])
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(xb + 8 * k);
    const __m256 a01 = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1]));
    const __m256 a23 = _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3]));
    return hmax8(_mm256_max_ps(a01, a23));
}

/* Stores a block's 32 int32 codes q (each within int8) as bytes at qs, their half-block sums at
 * bsum[0], bsum[1]. */
static inline void store_block(const __m256i q[4], int8_t *qs, int16_t *bsum)
{
    bsum[0] = (int16_t)hsum8_epi32(_mm256_add_epi32(q[0], q[1]));
    bsum[1] = (int16_t)hsum8_epi32(_mm256_add_epi32(q[2], q[3]));
    /* packs work per 128-bit lane: the dwords come out as x0-3, x8-11, x16-19, x24-27,
     * x4-7, x12-15, x20-23, x28-31, and vpermd puts them back in order */
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b8 = _mm256_packs_epi16(w01, w23);
    _mm256_storeu_si256((__m256i *)(void *)qs,
                        _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

void hx_act_quant_avx2(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n)
{
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        __m256 v[4];
        const float amax = load_block_amax(x + 32 * b, v);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d[b] = amax / 127.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
        store_block(q, qs + 32 * b, bsum + 2 * b);
    }
}

/* The second term (act_quant.h): the first term's amax and inverse scale, the residual
 * x - d1 q1 and its product in separate roundings (no FMA: the reference has none), vcvtps2dq
 * for nearest-even, a clamp to +-127, and the packs and vpermd of the first term. Bit-identical
 * to hx_act_quant2_ref. */
void hx_act_quant2_avx2(const float *x, const int8_t *q1, const float *d1, int8_t *q2, float *d2,
                        int16_t *bsum2, int64_t n)
{
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        __m256 v[4];
        const float amax = load_block_amax(x + 32 * b, v);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d2[b] = d1[b] * 0x1p-8f;
        const __m256 vid2 = _mm256_set1_ps(id * 256.0f), vd1 = _mm256_set1_ps(d1[b]);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m128i c = _mm_loadl_epi64((const __m128i *)(const void *)(q1 + 32 * b + 8 * k));
            const __m256 dq = _mm256_mul_ps(vd1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)));
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(v[k], dq), vid2));
            q[k] = _mm256_max_epi32(_mm256_min_epi32(q[k], lim), nlim);
        }
        store_block(q, q2 + 32 * b, bsum2 + 2 * b);
    }
}
#endif
