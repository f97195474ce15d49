/* act_fn_avx512.c - the gated activation with AVX-512: 16 elements per step through the
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
#endif
