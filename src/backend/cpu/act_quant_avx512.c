/* act_quant_avx512.c - the activation quantizer (act_quant.h) with AVX-512: one block of 32
 * floats is two zmm registers.
 *
 * Per block: 2 loads, abs + max, a horizontal max, one true division for 127/amax (as the
 * reference: a reciprocal estimate would change bits), 2 multiplies, 2 vcvtps2dq (round to
 * nearest even under the default MXCSR, the reference's nearbyintf), 2 saturating narrows to
 * int8 and 2 horizontal adds for the half-block sums. About 40 instructions per 128 bytes read:
 * well under the L2 bandwidth, and the matmul after it is 100x the work. Bit-identical to
 * hx_act_quant_ref; the unit test checks it. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "act_quant.h"

void hx_act_quant_avx512(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b);
        const __m512 v1 = _mm512_loadu_ps(x + 32 * b + 16);
        const __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        const float amax = _mm512_reduce_max_ps(a);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d[b] = amax / 127.0f;
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        _mm_storeu_si128((__m128i *)(void *)(qs + 32 * b), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(void *)(qs + 32 * b + 16), _mm512_cvtsepi32_epi8(q1));
        bsum[2 * b]     = (int16_t)_mm512_reduce_add_epi32(q0);
        bsum[2 * b + 1] = (int16_t)_mm512_reduce_add_epi32(q1);
    }
}

/* The second term (act_quant.h): the same amax and inverse scale as the first, the residual
 * x - d1 q1 and its product in separate roundings (no FMA: the reference has none), vcvtps2dq
 * for nearest-even, a clamp to +-127 and the narrowing. */
void hx_act_quant2_avx512(const float *x, const int8_t *q1, const float *d1, int8_t *q2,
                          float *d2, int16_t *bsum2, int64_t n)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b);
        const __m512 v1 = _mm512_loadu_ps(x + 32 * b + 16);
        const __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        const float amax = _mm512_reduce_max_ps(a);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d2[b] = d1[b] * 0x1p-8f;
        const __m512 vid2 = _mm512_set1_ps(id * 256.0f), vd1 = _mm512_set1_ps(d1[b]);
        __m512i q[2];
        for (int h = 0; h < 2; h++) {
            const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(q1 + 32 * b + 16 * h));
            const __m512 dq = _mm512_mul_ps(vd1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)));
            const __m512 r = _mm512_sub_ps(h ? v1 : v0, dq);
            q[h] = _mm512_cvtps_epi32(_mm512_mul_ps(r, vid2));
            q[h] = _mm512_max_epi32(_mm512_min_epi32(q[h], lim), nlim);
            _mm_storeu_si128((__m128i *)(void *)(q2 + 32 * b + 16 * h), _mm512_cvtsepi32_epi8(q[h]));
        }
        bsum2[2 * b]     = (int16_t)_mm512_reduce_add_epi32(q[0]);
        bsum2[2 * b + 1] = (int16_t)_mm512_reduce_add_epi32(q[1]);
    }
}
#endif
