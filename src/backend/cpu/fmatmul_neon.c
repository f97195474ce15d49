/* fmatmul_neon.c - the f32-activation matmul with NEON (baseline ARMv8-A: no extension, so it
 * runs on every AArch64 core): the NEON port of fmatmul_avx2.c (same data layout, blocking and
 * formulas; fmatmul_avx512.c's header has the design).
 *
 * Data layout: W [n_out, n_in] in its file format (tensor/quant.h), x [n_rows, n_in] f32
 * row-major, out [n_rows, ld_out]. 32 weights are dequantized into eight q registers of f32,
 * w = a * u + c with u the unsigned code (uxtl, uxtl, ucvtf) and one FMA each (Q4_0: c = -8a,
 * Q6_K: c = -32a, so a * u + c rounds exactly as the reference's a * (u - k); Q4_1, K-quants,
 * MLX: the min or bias); Q8_0 converts its signed bytes and multiplies by d. Each of up to
 * RB = 4 activation rows then takes eight FMAs against them, into four accumulators per row so
 * that even a single row keeps four independent FMA chains in flight. Registers: 16 accumulators
 * + 8 weights + loads fit the 32 q registers.
 *
 * Blocking: outputs in strips of 16 weight rows (16 Q4_0 rows of 2048 = 18 KiB stay in L1/L2
 * while every group of 4 activation rows passes over them).
 *
 * Napkin math (Neoverse N1 / Cortex-A76 class, 2 NEON pipes): a Q4_0 block is ~2 ops to split
 * nibbles, 8 widen + 8 convert + 8 dequant FMAs, then 8 FMAs per row: ~32 ops for one row, ~16
 * cycles per 18 bytes, ~3.5 GB/s per core at 3 GHz: decode of one row is compute bound per core
 * and scales with threads; at 4 rows the dequantization is shared and the FMAs dominate. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdbool.h>

#include "kernels.h"
#include "kernels_int.h"

#define AI static inline __attribute__((always_inline))

enum { RB = 4, STRIP = 16 };

enum { F_Q4_0, F_Q4_1, F_Q8_0, F_Q4_K, F_Q5_K, F_Q6_K, F_MLX4, F_MLX8 };

/* One f16 value as a float (fcvt: exact, as hx_f16_to_f32). */
AI float f16(uint16_t h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* ---- helpers ---- */

/* acc[i] += w[0..8) * x_i[e, e + 32) for the nr rows (four accumulators per row). */
AI void fma_rows(const float32x4_t w[8], const float *const xr[RB], int64_t e, int nr,
                 float32x4_t acc[RB][4])
{
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < 8; k++)
            acc[i][k % 4] = vfmaq_f32(acc[i][k % 4], w[k], vld1q_f32(xr[i] + e + 4 * k));
}

/* The 16 codes of u as four vectors of 4 dequantized weights, w = a * u + c. */
AI void deq16(uint8x16_t u, float32x4_t a, float32x4_t c, float32x4_t w[4])
{
    const uint16x8_t lo = vmovl_u8(vget_low_u8(u)), hi = vmovl_high_u8(u);
    w[0] = vfmaq_f32(c, vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), a);
    w[1] = vfmaq_f32(c, vcvtq_f32_u32(vmovl_high_u16(lo)), a);
    w[2] = vfmaq_f32(c, vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), a);
    w[3] = vfmaq_f32(c, vcvtq_f32_u32(vmovl_high_u16(hi)), a);
}

/* Dequantizes the 32 codes u0 (elements 0..15), u1 (16..31) with w = a * u + c and feeds the
 * rows at element e. */
AI void feed32(uint8x16_t u0, uint8x16_t u1, float a, float c, const float *const xr[RB],
               int64_t e, int nr, float32x4_t acc[RB][4])
{
    float32x4_t w[8];
    deq16(u0, vdupq_n_f32(a), vdupq_n_f32(c), w);
    deq16(u1, vdupq_n_f32(a), vdupq_n_f32(c), w + 4);
    fma_rows(w, xr, e, nr, acc);
}

/* ---- one weight row against nr activation rows, per format ---- */

/* Q4_0 and Q4_1: byte j holds element j in its low nibble and j + 16 in its high one. */
AI void row_q4(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
               float32x4_t acc[RB][4], bool q4_1)
{
    const unsigned char *row = kn_wrow(w, o);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const hx_block_q4_0 *b0 = (const hx_block_q4_0 *)(const void *)row + b;
        const hx_block_q4_1 *b1 = (const hx_block_q4_1 *)(const void *)row + b;
        const uint8x16_t v = vld1q_u8(q4_1 ? b1->qs : b0->qs);
        const float d = f16(q4_1 ? b1->d : b0->d);
        feed32(vandq_u8(v, m4), vshrq_n_u8(v, 4), d, q4_1 ? f16(b1->m) : -8.0f * d, xr, 32 * b,
               nr, acc);
    }
}

AI void row_q8_0(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 float32x4_t acc[RB][4])
{
    const hx_block_q8_0 *wb = kn_wrow(w, o);
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const float d = f16(wb[b].d);
        float32x4_t wv[8];
        for (int k = 0; k < 2; k++) {
            const int8x16_t q = vld1q_s8(wb[b].qs + 16 * k);
            const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
            wv[4 * k]     = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d);
            wv[4 * k + 1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d);
            wv[4 * k + 2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d);
            wv[4 * k + 3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d);
        }
        fma_rows(wv, xr, 32 * b, nr, acc);
    }
}

/* Q4_K and Q5_K: per super-block the 8 factors a_j = d * sc_j and c_j = -dmin * m_j; chunk cc of
 * qs holds sub-block 2cc in its low nibbles and 2cc + 1 in its high ones; Q5_K's fifth bit of
 * element l of sub-block j is bit j of qh[l]. */
AI void row_qk45(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 float32x4_t acc[RB][4], bool q5)
{
    const unsigned char *row = kn_wrow(w, o);
    const size_t bb = q5 ? sizeof(hx_block_q5_k) : sizeof(hx_block_q4_k);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b5 = vdupq_n_u8(0x10);
    for (int64_t s = 0; s < w->n_in / HX_K_N; s++) {
        const unsigned char *blk = row + (size_t)s * bb;
        const hx_block_q4_k *b4 = (const void *)blk;
        const hx_block_q5_k *b5k = (const void *)blk;
        uint8_t sc[8], m[8];
        kn_k_scales(q5 ? b5k->scales : b4->scales, sc, m);
        const float d = f16(q5 ? b5k->d : b4->d), dmin = f16(q5 ? b5k->dmin : b4->dmin);
        const uint8_t *qs = q5 ? b5k->qs : b4->qs;
        const uint8x16_t h0 = q5 ? vld1q_u8(b5k->qh) : vdupq_n_u8(0);
        const uint8x16_t h1 = q5 ? vld1q_u8(b5k->qh + 16) : vdupq_n_u8(0);
        for (int cc = 0; cc < 4; cc++) {
            const uint8x16_t v0 = vld1q_u8(qs + 32 * cc), v1 = vld1q_u8(qs + 32 * cc + 16);
            for (int k = 0; k < 2; k++) {
                const int j = 2 * cc + k;
                uint8x16_t u0 = k ? vshrq_n_u8(v0, 4) : vandq_u8(v0, m4);
                uint8x16_t u1 = k ? vshrq_n_u8(v1, 4) : vandq_u8(v1, m4);
                if (q5) {
                    const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << j));
                    u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(h0, bit), b5));
                    u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(h1, bit), b5));
                }
                feed32(u0, u1, d * (float)sc[j], -(dmin * (float)m[j]), xr,
                       HX_K_N * s + 32 * j, nr, acc);
            }
        }
    }
}

/* Q6_K: sub-block j = 4h + t takes ql[64h + 32(t % 2) + l] (low nibble for t < 2, high for
 * t >= 2) and bits 2t, 2t+1 of qh[32h + l] as bits 4, 5; w = d * sc * (u - 32), with one scale
 * for elements 0-15 and another for 16-31. */
AI void row_q6_k(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 float32x4_t acc[RB][4])
{
    const hx_block_q6_k *wb = kn_wrow(w, o);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
    for (int64_t s = 0; s < w->n_in / HX_K_N; s++) {
        const float d = f16(wb[s].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = wb[s].ql + 64 * h, *qhp = wb[s].qh + 32 * h;
            const uint8x16_t qh[2] = { vld1q_u8(qhp), vld1q_u8(qhp + 16) };
            for (int t = 0; t < 4; t++) {
                uint8x16_t u[2];
                for (int k = 0; k < 2; k++) {
                    const uint8x16_t lq = vld1q_u8(ql + 32 * (t % 2) + 16 * k);
                    const uint8x16_t lo = t < 2 ? vandq_u8(lq, m4) : vshrq_n_u8(lq, 4);
                    const uint8x16_t hi =
                        vandq_u8(vshlq_u8(qh[k], vdupq_n_s8((int8_t)(-2 * t))), m3);
                    u[k] = vorrq_u8(lo, vshlq_n_u8(hi, 4));
                }
                const int k0 = 8 * h + 2 * t;
                const float a0 = d * (float)wb[s].scales[k0], a1 = d * (float)wb[s].scales[k0 + 1];
                float32x4_t wv[8];
                deq16(u[0], vdupq_n_f32(a0), vdupq_n_f32(-32.0f * a0), wv);
                deq16(u[1], vdupq_n_f32(a1), vdupq_n_f32(-32.0f * a1), wv + 4);
                fma_rows(wv, xr, HX_K_N * s + 128 * h + 32 * t, nr, acc);
            }
        }
    }
}

/* MLX: w = s_g * u + b_g; MLX4 packs element 2k in the low nibble of byte k and 2k + 1 in the
 * high one, so the nibbles are interleaved back with zip; MLX8 is one byte per element. */
AI void row_mlx(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                float32x4_t acc[RB][4], bool mlx8)
{
    const uint8_t *row = kn_wrow(w, o);
    const int64_t gs = w->group_size, n_groups = w->n_in / gs;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t g = 0; g < n_groups; g++) {
        const float s = kn_mlx_sb(w->scales, w->sb_dtype, o * n_groups + g);
        const float bi = kn_mlx_sb(w->biases, w->sb_dtype, o * n_groups + g);
        for (int64_t e = g * gs; e < (g + 1) * gs; e += 32) {
            uint8x16_t u0, u1;
            if (mlx8) {
                u0 = vld1q_u8(row + e);
                u1 = vld1q_u8(row + e + 16);
            } else {
                const uint8x16_t v = vld1q_u8(row + e / 2);
                const uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
                u0 = vzip1q_u8(lo, hi);
                u1 = vzip2q_u8(lo, hi);
            }
            feed32(u0, u1, s, bi, xr, e, nr, acc);
        }
    }
}

/* ---- the driver ---- */

/* Outputs [os, oe) for activation rows [r, r + nr), format fmt (constant after inlining). */
AI void strip(int fmt, const hx_wmat *w, int64_t os, int64_t oe, const float *x, int64_t r,
              int nr, float *out, int64_t ld_out)
{
    const float *xr[RB];
    for (int i = 0; i < RB; i++) xr[i] = x + (r + (i < nr ? i : 0)) * w->n_in;
    for (int64_t o = os; o < oe; o++) {
        float32x4_t acc[RB][4];
        for (int i = 0; i < nr; i++)
            for (int k = 0; k < 4; k++) acc[i][k] = vdupq_n_f32(0.0f);
        switch (fmt) {
        case F_Q4_0: row_q4(w, o, xr, nr, acc, false); break;
        case F_Q4_1: row_q4(w, o, xr, nr, acc, true); break;
        case F_Q8_0: row_q8_0(w, o, xr, nr, acc); break;
        case F_Q4_K: row_qk45(w, o, xr, nr, acc, false); break;
        case F_Q5_K: row_qk45(w, o, xr, nr, acc, true); break;
        case F_Q6_K: row_q6_k(w, o, xr, nr, acc); break;
        case F_MLX4: row_mlx(w, o, xr, nr, acc, false); break;
        default:     row_mlx(w, o, xr, nr, acc, true); break;
        }
        for (int i = 0; i < nr; i++)
            out[(r + i) * ld_out + o] = vaddvq_f32(
                vaddq_f32(vaddq_f32(acc[i][0], acc[i][1]), vaddq_f32(acc[i][2], acc[i][3])));
    }
}

AI void run(int fmt, const hx_wmat *w, int64_t o0, int64_t o1, const float *x, int64_t r0,
            int64_t r1, float *out, int64_t ld_out)
{
    for (int64_t os = o0; os < o1; os += STRIP) {
        const int64_t oe = os + STRIP < o1 ? os + STRIP : o1;
        for (int64_t r = r0; r < r1; r += RB) {
            switch (r1 - r < RB ? (int)(r1 - r) : RB) {
            case 1:  strip(fmt, w, os, oe, x, r, 1, out, ld_out); break;
            case 2:  strip(fmt, w, os, oe, x, r, 2, out, ld_out); break;
            case 3:  strip(fmt, w, os, oe, x, r, 3, out, ld_out); break;
            default: strip(fmt, w, os, oe, x, r, 4, out, ld_out); break;
            }
        }
    }
}

#define FMATMUL(name, fmt)                                                                   \
    void hx_fmatmul_##name##_neon(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,   \
                                  int64_t r0, int64_t r1, float *out, int64_t ld_out)       \
    {                                                                                        \
        run(fmt, w, o0, o1, x, r0, r1, out, ld_out);                                         \
    }
FMATMUL(q4_0, F_Q4_0)
FMATMUL(q4_1, F_Q4_1)
FMATMUL(q8_0, F_Q8_0)
FMATMUL(q4_k, F_Q4_K)
FMATMUL(q5_k, F_Q5_K)
FMATMUL(q6_k, F_Q6_K)
FMATMUL(mlx4, F_MLX4)
FMATMUL(mlx8, F_MLX8)
#undef FMATMUL
#endif
