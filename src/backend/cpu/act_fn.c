/* act_fn.c - the reference gated activations, the tanh cap and the variant choice (act_fn.h). */
#include "act_fn.h"

#include <math.h>

#include "base/cpu.h"

void hx_swiglu_ref(const float *gate, const float *up, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

hx_swiglu_fn hx_swiglu_select(unsigned isa)
{
#if defined(__x86_64__)
    if (isa & HX_ISA_AVX512) return hx_swiglu_avx512;
    if (isa & HX_ISA_AVX2) return hx_swiglu_avx2;
#endif
    (void)isa;
    return hx_swiglu_ref;
}

void hx_geglu_ref(const float *gate, const float *up, int64_t n, float *out)
{
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * up[i];
    }
}

hx_swiglu_fn hx_geglu_select(unsigned isa)
{
#if defined(__x86_64__)
    if (isa & HX_ISA_AVX512) return hx_geglu_avx512;
    if (isa & HX_ISA_AVX2) return hx_geglu_avx2;
#endif
    (void)isa;
    return hx_geglu_ref;
}

void hx_softcap_ref(float *x, float cap, int64_t n)
{
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}
