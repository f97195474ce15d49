/* exp_avx2.h - exp of 8 floats with AVX2 and FMA, for the *_avx2.c files (include only from
 * files compiled with AVX2 flags).
 *
 * The Cephes expf of exp_avx512.h at half the width: within 2 ulp of expf for x >= -87.3; below
 * that the exact result is subnormal and 0 is returned; above 88.38 the input is clamped (the
 * result is ~FLT_MAX rather than inf). */
#ifndef HX_BACKEND_CPU_EXP_AVX2_H
#define HX_BACKEND_CPU_EXP_AVX2_H
#include <immintrin.h>

static inline __m256 exp256(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* also -inf */
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.37626f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* tanh of 8 floats as sign(x) (1 - 2 / (exp(2|x|) + 1)): within ~3e-7 of tanhf absolutely (an
 * ulp or two of 1, so relatively worse near 0), exactly +-1 far out (exp256 clamps, no inf),
 * and -1 for -inf. */
static inline __m256 tanh256(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), ax = _mm256_andnot_ps(sign, x);
    const __m256 e = exp256(_mm256_add_ps(ax, ax));
    const __m256 t = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                                   _mm256_div_ps(_mm256_set1_ps(2.0f),
                                                 _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    return _mm256_or_ps(t, _mm256_and_ps(sign, x));
}

#endif
