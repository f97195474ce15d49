/* act_fn.h - the MLP's gated activations, element-wise over rows, for the CPU backend, and the
 * element-wise tanh cap.
 *
 * SwiGLU: out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. The reference
 * uses libm's expf; the AVX2 and AVX-512 variants the polynomial exp of exp_avx2.h /
 * exp_avx512.h (within 2 ulp of expf), so the variants agree to a few ulp, not bit for bit
 * (the unit test bounds it).
 * GeGLU (Gemma): out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = 0.5 x (1 + tanh(u)) with
 * u = sqrt(2/pi) (x + 0.044715 x^3). The reference is that formula with libm's tanhf; the SIMD
 * variants use the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), so it is the SwiGLU kernel
 * on a transformed argument. out may alias gate or up. */
#ifndef HX_BACKEND_CPU_ACT_FN_H
#define HX_BACKEND_CPU_ACT_FN_H
#include <stdint.h>

typedef void (*hx_swiglu_fn)(const float *gate, const float *up, int64_t n, float *out);

void hx_swiglu_ref(const float *gate, const float *up, int64_t n, float *out);
void hx_swiglu_avx2(const float *gate, const float *up, int64_t n, float *out);   /* x86-64 */
void hx_swiglu_avx512(const float *gate, const float *up, int64_t n, float *out); /* x86-64 */

/* The best variant for ISA mask isa (the reference where no SIMD variant applies). */
hx_swiglu_fn hx_swiglu_select(unsigned isa);

/* GeGLU, same contract as hx_swiglu_fn. */
void hx_geglu_ref(const float *gate, const float *up, int64_t n, float *out);
void hx_geglu_avx2(const float *gate, const float *up, int64_t n, float *out);   /* x86-64 */
void hx_geglu_avx512(const float *gate, const float *up, int64_t n, float *out); /* x86-64 */
hx_swiglu_fn hx_geglu_select(unsigned isa);

/* x[i] = cap * tanh(x[i] / cap), n elements, cap > 0 (soft-capping, scalar: it runs on a few
 * rows of logits per step). */
void hx_softcap_ref(float *x, float cap, int64_t n);

#endif
