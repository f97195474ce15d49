/* act_fn.c - the reference gated activation and the variant choice (act_fn.h). */
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
#endif
    (void)isa;
    return hx_swiglu_ref;
}
