/* act_fn_avx2.c - the gated activations with AVX2: 8 elements per step through the polynomial
 * exp (exp_avx2.h), the same formulas as act_fn_avx512.c; the tail of fewer than 8 runs through
 * a zero-padded copy. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "act_fn.h"
#include "exp_avx2.h"

/* silu(g) * u or gelu_tanh(g) * u of 8 elements (gelu: g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715
 * g^3))), as in act_fn_avx512.c). */
static inline __m256 gated8(__m256 g, __m256 u, int gelu)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 arg;
    if (gelu) {
        const __m256 inner =
            _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), _mm256_mul_ps(g, g), g);
        arg = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f), inner);
    } else {
        arg = _mm256_xor_ps(g, _mm256_set1_ps(-0.0f)); /* -g */
    }
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, exp256(arg))), u);
}

static void gated(const float *gate, const float *up, int64_t n, float *out, int gelu)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i,
                         gated8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i), gelu));
    if (i < n) {
        float g[8] = {0}, u[8] = {0}, o[8];
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(o, gated8(_mm256_loadu_ps(g), _mm256_loadu_ps(u), gelu));
        memcpy(out + i, o, (size_t)(n - i) * sizeof(float));
    }
}

void hx_swiglu_avx2(const float *gate, const float *up, int64_t n, float *out)
{
    gated(gate, up, n, out, 0);
}

void hx_geglu_avx2(const float *gate, const float *up, int64_t n, float *out)
{
    gated(gate, up, n, out, 1);
}
#endif
