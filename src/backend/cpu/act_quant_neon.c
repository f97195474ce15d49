/* act_quant_neon.c - the activation quantizer (act_quant.h) with NEON (baseline ARMv8-A, no
 * extension needed): one block of 32 floats is eight q registers.
 *
 * Per block: 8 loads, abs + a max tree and one fmaxnmv across lanes (maxnm ignores a NaN as
 * fmaxf does), one true division for 127/amax (a reciprocal estimate would change bits),
 * 8 multiplies, 8 fcvtns (round to nearest, ties to even: nearbyintf under the default FPCR),
 * saturating narrows s32 -> s16 -> s8 (the codes are within [-127, 127], so nothing saturates)
 * and two addv for the half-block sums. Each product is its own intrinsic, so nothing is fused:
 * bit-identical to hx_act_quant_ref, which the unit test checks. */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "act_quant.h"

void hx_act_quant_neon(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n)
{
    for (int64_t b = 0; b < n / HX_ACT_BLOCK; b++) {
        const float *xb = x + 32 * b;
        float32x4_t v[8];
        for (int k = 0; k < 8; k++) v[k] = vld1q_f32(xb + 4 * k);
        float32x4_t a[4];
        for (int k = 0; k < 4; k++)
            a[k] = vmaxnmq_f32(vabsq_f32(v[2 * k]), vabsq_f32(v[2 * k + 1]));
        const float amax =
            vmaxnmvq_f32(vmaxnmq_f32(vmaxnmq_f32(a[0], a[1]), vmaxnmq_f32(a[2], a[3])));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d[b] = amax / 127.0f;
        int32x4_t q[8];
        for (int k = 0; k < 8; k++) q[k] = vcvtnq_s32_f32(vmulq_f32(v[k], vdupq_n_f32(id)));
        for (int h = 0; h < 2; h++) {
            const int32x4_t *qh = q + 4 * h; /* elements 16h .. 16h + 15 */
            bsum[2 * b + h] =
                (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(qh[0], qh[1]), vaddq_s32(qh[2], qh[3])));
            const int16x8_t w01 = vcombine_s16(vqmovn_s32(qh[0]), vqmovn_s32(qh[1]));
            const int16x8_t w23 = vcombine_s16(vqmovn_s32(qh[2]), vqmovn_s32(qh[3]));
            vst1q_s8(qs + 32 * b + 16 * h, vcombine_s8(vqmovn_s16(w01), vqmovn_s16(w23)));
        }
    }
}
#endif
