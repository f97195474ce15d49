/* exp_avx512.h - exp of 16 floats with AVX-512F, for the *_avx512.c files (include only from
 * files compiled with AVX-512 flags).
 *
 * Cephes expf: round x/ln2 to n, reduce with a two-constant ln2, degree-6 polynomial, scale by
 * 2^n. Within 2 ulp of expf for x >= -87.3; below that the exact result is subnormal and 0 is
 * returned (absolute error under 1.2e-38); above 88.38 the input is clamped (the result is
 * ~FLT_MAX rather than inf). */
#ifndef HX_BACKEND_CPU_EXP_AVX512_H
#define HX_BACKEND_CPU_EXP_AVX512_H
#include <immintrin.h>

static inline __m512 exp512(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ); /* also -inf */
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.37626f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~tiny, p, _mm512_castsi512_ps(e));
}

#endif
