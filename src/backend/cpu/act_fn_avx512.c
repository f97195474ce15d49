/* act_fn_avx512.c - the gated activations with AVX-512: 16 elements per step through the
 * polynomial exp (exp_avx512.h), the tail through a masked load/store. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "act_fn.h"
#include "exp_avx512.h"

void hx_swiglu_avx512(const float *gate, const float *up, int64_t n, float *out)
{
    const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        const __m512 e = exp512(_mm512_xor_ps(g, sign)); /* exp(-g) */
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
    }
}

/* gelu_tanh(g) = g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3): for g far below zero
 * exp overflows to ~FLT_MAX (exp512 clamps) and the result is -0, as tanh gives. */
void hx_geglu_avx512(const float *gate, const float *up, int64_t n, float *out)
{
    const __m512 one = _mm512_set1_ps(1.0f), k = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
    const __m512 a = _mm512_set1_ps(0.044715f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(a, g), _mm512_mul_ps(g, g), g);
        const __m512 e = exp512(_mm512_mul_ps(k, inner)); /* exp(-2u) */
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
    }
}
#endif
