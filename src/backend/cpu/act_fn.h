/* act_fn.h - the MLP's gated activation, element-wise over rows, for the CPU backend.
 *
 * out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. The reference uses
 * libm's expf; the AVX-512 variant the polynomial exp of exp_avx512.h (within 2 ulp of expf),
 * so the variants agree to a few ulp, not bit for bit (the unit test bounds it). out may alias
 * gate or up. */
#ifndef HX_BACKEND_CPU_ACT_FN_H
#define HX_BACKEND_CPU_ACT_FN_H
#include <stdint.h>

typedef void (*hx_swiglu_fn)(const float *gate, const float *up, int64_t n, float *out);

void hx_swiglu_ref(const float *gate, const float *up, int64_t n, float *out);
void hx_swiglu_avx512(const float *gate, const float *up, int64_t n, float *out); /* x86-64 */

/* The best variant for ISA mask isa (the reference where no SIMD variant applies). */
hx_swiglu_fn hx_swiglu_select(unsigned isa);

#endif
