/* dot_neon.c - the dot kernels with NEON and the ARMv8.2 dot-product extension (sdot).
 *
 * This file alone is compiled with -march=armv8.2-a+dotprod (CMakeLists.txt), so the compiler
 * may use 8.2 instructions anywhere in it: every kernel here, the float ones included, is listed
 * in kernels.c as needing HX_ISA_NEON | HX_ISA_NEON_DOT. A core without the extension
 * (Cortex-A53/A72) takes the references for the int8 dots and the baseline fmatmul_neon.c.
 *
 * Integer path, one 32-element block = two q registers of int8 weights against two of int8
 * activations: sdot (vdotq_s32) multiplies 4 signed bytes per lane and adds them into an int32
 * lane, so a block is two sdot into one int32x4. Unlike AVX2's vpmaddubsw it takes signed
 * operands on both sides and cannot saturate, so weights go in as their signed values (Q4_0:
 * u - 8, Q6_K: u - 32, Q8_0 as stored) and only MLX8 (codes 0..255) needs an offset: u - 128
 * against x, with 128 * sum(x) returned through the block sums. Four blocks' int32x4 are folded
 * by two rounds of addp into one vector of four exact block sums, converted once and multiplied
 * with the four block factors (weight scale x activation scale) in one FMA. Min/bias terms use
 * the activation block sums (bsum) the same way, four blocks per FMA. Integer sums inside a
 * block are exact, so only float rounding separates these kernels from dot_ref.c.
 *
 * Napkin math (Neoverse N1 / Cortex-A76 class, 2 NEON pipes): a Q4_0 block is 1 load, 4 ops to
 * split and recentre the nibbles, 2 activation loads and 2 sdot, plus ~3 ops a block for the
 * folding and scales: ~6 cycles per 18 bytes, ~9 GB/s per core at 3 GHz, around a core's share of
 * DRAM bandwidth on a many-core server. Chunk tails (fewer than 4 blocks) go through
 * zero-padded copies of the scales and sums, never reading past a row. Layouts: tensor/quant.h. */
#if defined(__aarch64__)
#ifndef __ARM_FEATURE_DOTPROD
#error "dot_neon.c needs -march=armv8.2-a+dotprod (CMakeLists.txt sets it for this file)"
#endif
#include <arm_neon.h>
#include <stdbool.h>
#include <string.h>

#include "kernels.h"
#include "kernels_int.h"

#define AI static inline __attribute__((always_inline))

/* ---- helpers ---- */

/* One f16 value as a float (fcvt: exact, as hx_f16_to_f32). */
AI float f16(uint16_t h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* Four f16 values as floats. */
AI float32x4_t f16x4(const uint16_t h[4])
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* [sum of a's lanes, of b's, of c's, of e's]: two rounds of pairwise adds, exact in int32. */
AI int32x4_t hsum4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t e)
{
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, e));
}

/* sum_i w_i x_i of a 32-element block spread over 4 int32 lanes: w0 holds elements 0..15, w1
 * elements 16..31, x the block's 32 activations. */
AI int32x4_t dot32(int8x16_t w0, int8x16_t w1, const int8_t *x)
{
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16));
}

/* Activation scales of nbk <= 4 consecutive blocks, zero beyond nbk. */
AI float32x4_t load_dx(const float *dx, int nbk)
{
    if (nbk == 4) return vld1q_f32(dx);
    float d4[4] = { 0 };
    memcpy(d4, dx, (size_t)nbk * sizeof(float));
    return vld1q_f32(d4);
}

/* Activation sums S_b = bsum[2b] + bsum[2b+1] of nbk <= 4 consecutive blocks, zero beyond. */
AI float32x4_t load_sums(const int16_t *bs, int nbk)
{
    int16x8_t v;
    if (nbk == 4) {
        v = vld1q_s16(bs);
    } else {
        int16_t s8[8] = { 0 };
        memcpy(s8, bs, (size_t)nbk * 2 * sizeof(int16_t));
        v = vld1q_s16(s8);
    }
    return vcvtq_f32_s32(vpaddlq_s16(v));
}

/* ---- float formats: f32 activations ---- */

float hx_dot_f32_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const float *wr = kn_wrow(w, o), *xr = x->f + r * x->n;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < w->n_in; i += 16) { /* n_in is a multiple of 32 */
        a0 = vfmaq_f32(a0, vld1q_f32(wr + i), vld1q_f32(xr + i));
        a1 = vfmaq_f32(a1, vld1q_f32(wr + i + 4), vld1q_f32(xr + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(wr + i + 8), vld1q_f32(xr + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(wr + i + 12), vld1q_f32(xr + i + 12));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
}

/* 8 halves (F16 or BF16) as two vectors of 4 floats. */
AI void load_half8(const uint16_t *p, bool bf16, float32x4_t *lo, float32x4_t *hi)
{
    const uint16x8_t v = vld1q_u16(p);
    if (bf16) {
        *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16));
        *hi = vreinterpretq_f32_u32(vshll_high_n_u16(v, 16));
    } else {
        *lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(v)));
        *hi = vcvt_high_f32_f16(vreinterpretq_f16_u16(v));
    }
}

AI float dot_half(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r, bool bf16)
{
    const uint16_t *wr = kn_wrow(w, o);
    const float *xr = x->f + r * x->n;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < w->n_in; i += 16) {
        float32x4_t w0, w1, w2, w3;
        load_half8(wr + i, bf16, &w0, &w1);
        load_half8(wr + i + 8, bf16, &w2, &w3);
        a0 = vfmaq_f32(a0, w0, vld1q_f32(xr + i));
        a1 = vfmaq_f32(a1, w1, vld1q_f32(xr + i + 4));
        a2 = vfmaq_f32(a2, w2, vld1q_f32(xr + i + 8));
        a3 = vfmaq_f32(a3, w3, vld1q_f32(xr + i + 12));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
}

float hx_dot_f16_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_half(w, o, x, r, false);
}

float hx_dot_bf16_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_half(w, o, x, r, true);
}

/* ---- 32-element blocks: Q4_0, Q4_1, Q8_0, MLX4, MLX8 share one loop ---- */

enum { F_Q4_0, F_Q4_1, F_Q8_0, F_MLX4, F_MLX8 };

/* Integer dot of weight block b of row `row` (format fmt) with the activation block xq. */
AI int32x4_t block_dot(int fmt, const unsigned char *row, int64_t b, const int8_t *xq)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    switch (fmt) {
    case F_Q4_0: { /* byte j: element j low, j + 16 high; recentred to u - 8 */
        const uint8x16_t v = vld1q_u8(((const hx_block_q4_0 *)(const void *)row)[b].qs);
        const int8x16_t k8 = vdupq_n_s8(8);
        return dot32(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m4)), k8),
                     vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), k8), xq);
    }
    case F_Q4_1: {
        const uint8x16_t v = vld1q_u8(((const hx_block_q4_1 *)(const void *)row)[b].qs);
        return dot32(vreinterpretq_s8_u8(vandq_u8(v, m4)), vreinterpretq_s8_u8(vshrq_n_u8(v, 4)),
                     xq);
    }
    case F_Q8_0: {
        const int8_t *qs = ((const hx_block_q8_0 *)(const void *)row)[b].qs;
        return dot32(vld1q_s8(qs), vld1q_s8(qs + 16), xq);
    }
    case F_MLX4: { /* element 2k in the low nibble of byte k, 2k + 1 in the high one */
        const uint8x16_t v = vld1q_u8(row + 16 * b);
        const uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
        return dot32(vreinterpretq_s8_u8(vzip1q_u8(lo, hi)),
                     vreinterpretq_s8_u8(vzip2q_u8(lo, hi)), xq);
    }
    default: { /* MLX8: u - 128 as int8 is u with its top bit flipped */
        const uint8x16_t flip = vdupq_n_u8(0x80);
        return dot32(vreinterpretq_s8_u8(veorq_u8(vld1q_u8(row + 32 * b), flip)),
                     vreinterpretq_s8_u8(veorq_u8(vld1q_u8(row + 32 * b + 16), flip)), xq);
    }
    }
}

/* Blocks [b, b + nbk) of row o (nbk <= 4): acc += block sums * (a * dx) and, for the affine
 * formats, off += S * (c * dx), with a the block's weight scale and c its offset coefficient
 * (Q4_1: m; MLX: the bias, plus 128 * scale for MLX8's recentred codes). */
AI void chunk(int fmt, const hx_wmat *w, int64_t o, const hx_act *x, int64_t r, int64_t b,
              int nbk, float32x4_t *acc, float32x4_t *off)
{
    const unsigned char *row = kn_wrow(w, o);
    const int8_t *q = kn_xqs(x, r) + 32 * b;
    int32x4_t s[4];
    for (int i = 0; i < 4; i++)
        s[i] = i < nbk ? block_dot(fmt, row, b + i, q + 32 * i) : vdupq_n_s32(0);
    float32x4_t a, c = vdupq_n_f32(0.0f);
    if (fmt == F_MLX4 || fmt == F_MLX8) {
        const int64_t gs = w->group_size, n_groups = w->n_in / gs;
        float a4[4] = { 0 }, c4[4] = { 0 };
        for (int i = 0; i < nbk; i++) {
            const int64_t g = o * n_groups + (b + i) * 32 / gs;
            a4[i] = kn_mlx_sb(w->scales, w->sb_dtype, g);
            c4[i] = kn_mlx_sb(w->biases, w->sb_dtype, g);
        }
        a = vld1q_f32(a4);
        c = vld1q_f32(c4);
        if (fmt == F_MLX8) c = vfmaq_n_f32(c, a, 128.0f);
    } else {
        uint16_t d4[4] = { 0 }, m4[4] = { 0 };
        for (int i = 0; i < nbk; i++) {
            if (fmt == F_Q4_0) d4[i] = ((const hx_block_q4_0 *)(const void *)row)[b + i].d;
            if (fmt == F_Q8_0) d4[i] = ((const hx_block_q8_0 *)(const void *)row)[b + i].d;
            if (fmt == F_Q4_1) {
                d4[i] = ((const hx_block_q4_1 *)(const void *)row)[b + i].d;
                m4[i] = ((const hx_block_q4_1 *)(const void *)row)[b + i].m;
            }
        }
        a = f16x4(d4);
        if (fmt == F_Q4_1) c = f16x4(m4);
    }
    const float32x4_t dx = load_dx(kn_xd(x, r) + b, nbk);
    *acc = vfmaq_f32(*acc, vcvtq_f32_s32(hsum4(s[0], s[1], s[2], s[3])), vmulq_f32(a, dx));
    if (fmt != F_Q4_0 && fmt != F_Q8_0)
        *off = vfmaq_f32(*off, load_sums(kn_xbsum(x, r) + 2 * b, nbk), vmulq_f32(c, dx));
}

AI float dot_blocks(int fmt, const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const int64_t nb = w->n_in / 32;
    float32x4_t acc = vdupq_n_f32(0.0f), off = vdupq_n_f32(0.0f);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) chunk(fmt, w, o, x, r, b, 4, &acc, &off);
    if (b < nb) chunk(fmt, w, o, x, r, b, (int)(nb - b), &acc, &off);
    return vaddvq_f32(acc) + vaddvq_f32(off);
}

float hx_dot_q4_0_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_blocks(F_Q4_0, w, o, x, r);
}

float hx_dot_q4_1_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_blocks(F_Q4_1, w, o, x, r);
}

float hx_dot_q8_0_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_blocks(F_Q8_0, w, o, x, r);
}

float hx_dot_mlx4_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_blocks(F_MLX4, w, o, x, r);
}

float hx_dot_mlx8_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_blocks(F_MLX8, w, o, x, r);
}

/* ---- K-quants ---- */

/* The 8 unsigned bytes v as two vectors of 4 floats. */
AI void u8x8_f32(uint8x8_t v, float32x4_t *lo, float32x4_t *hi)
{
    const uint16x8_t h = vmovl_u8(v);
    *lo = vcvtq_f32_u32(vmovl_u16(vget_low_u16(h)));
    *hi = vcvtq_f32_u32(vmovl_high_u16(h));
}

/* Q4_K and Q5_K: sub-block j (activation block 8B + j) has w = d*sc_j*u - dmin*m_j; chunk c of
 * qs holds sub-block 2c in its low nibbles and 2c + 1 in its high ones; Q5_K adds bit j of
 * qh[l] as bit 4 of element l. Returns the min term of the super-block (to subtract). */
AI float dot_k45(const uint8_t *scales, uint16_t d16, uint16_t dmin16, const uint8_t *qs,
                 const uint8_t *qh, const int8_t *q, const float *dx, const int16_t *bs,
                 float32x4_t *acc)
{
    uint8_t sc[8], m[8];
    kn_k_scales(scales, sc, m);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b5 = vdupq_n_u8(0x10);
    const uint8x16_t h0 = qh ? vld1q_u8(qh) : vdupq_n_u8(0), h1 = qh ? vld1q_u8(qh + 16) : h0;
    int32x4_t s[8];
    for (int c = 0; c < 4; c++) {
        const uint8x16_t v0 = vld1q_u8(qs + 32 * c), v1 = vld1q_u8(qs + 32 * c + 16);
        uint8x16_t u[4] = { vandq_u8(v0, m4), vandq_u8(v1, m4), vshrq_n_u8(v0, 4),
                            vshrq_n_u8(v1, 4) };
        if (qh) {
            for (int k = 0; k < 2; k++) { /* sub-block j = 2c + k */
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (2 * c + k)));
                u[2 * k]     = vorrq_u8(u[2 * k], vandq_u8(vtstq_u8(h0, bit), b5));
                u[2 * k + 1] = vorrq_u8(u[2 * k + 1], vandq_u8(vtstq_u8(h1, bit), b5));
            }
        }
        s[2 * c]     = dot32(vreinterpretq_s8_u8(u[0]), vreinterpretq_s8_u8(u[1]), q + 64 * c);
        s[2 * c + 1] = dot32(vreinterpretq_s8_u8(u[2]), vreinterpretq_s8_u8(u[3]), q + 64 * c + 32);
    }
    float32x4_t sc_lo, sc_hi, m_lo, m_hi;
    u8x8_f32(vld1_u8(sc), &sc_lo, &sc_hi);
    u8x8_f32(vld1_u8(m), &m_lo, &m_hi);
    const float d = f16(d16), dmin = f16(dmin16);
    const float32x4_t dx_lo = vld1q_f32(dx), dx_hi = vld1q_f32(dx + 4);
    *acc = vfmaq_f32(*acc, vcvtq_f32_s32(hsum4(s[0], s[1], s[2], s[3])),
                     vmulq_f32(vmulq_n_f32(sc_lo, d), dx_lo));
    *acc = vfmaq_f32(*acc, vcvtq_f32_s32(hsum4(s[4], s[5], s[6], s[7])),
                     vmulq_f32(vmulq_n_f32(sc_hi, d), dx_hi));
    const float32x4_t s_lo = vcvtq_f32_s32(vpaddlq_s16(vld1q_s16(bs)));
    const float32x4_t s_hi = vcvtq_f32_s32(vpaddlq_s16(vld1q_s16(bs + 8)));
    const float32x4_t off = vfmaq_f32(vmulq_f32(vmulq_f32(vmulq_n_f32(m_lo, dmin), dx_lo), s_lo),
                                      vmulq_f32(vmulq_n_f32(m_hi, dmin), dx_hi), s_hi);
    return vaddvq_f32(off);
}

float hx_dot_q4_k_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_k *wb = kn_wrow(w, o);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float off = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++)
        off += dot_k45(wb[b].scales, wb[b].d, wb[b].dmin, wb[b].qs, NULL,
                       kn_xqs(x, r) + HX_K_N * b, kn_xd(x, r) + 8 * b, kn_xbsum(x, r) + 16 * b,
                       &acc);
    return vaddvq_f32(acc) - off;
}

float hx_dot_q5_k_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q5_k *wb = kn_wrow(w, o);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float off = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++)
        off += dot_k45(wb[b].scales, wb[b].d, wb[b].dmin, wb[b].qs, wb[b].qh,
                       kn_xqs(x, r) + HX_K_N * b, kn_xd(x, r) + 8 * b, kn_xbsum(x, r) + 16 * b,
                       &acc);
    return vaddvq_f32(acc) - off;
}

/* Q6_K: element 128h + 32t + l is the low (t < 2) or high (t >= 2) nibble of
 * ql[64h + 32(t % 2) + l] plus bits 2t, 2t+1 of qh[32h + l] as bits 4, 5, recentred to u - 32
 * (a signed byte: sdot takes it as is). Each 16 elements have their own signed scale
 * scales[8h + 2t + l/16], so one sdot pair per 16 gives one int32x4 per scale; the factor of
 * sub-block k is d * sc_k * dx of its activation block (two sub-blocks per block). */
float hx_dot_q6_k_neon(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q6_k *wb = kn_wrow(w, o);
    const int8_t *q = kn_xqs(x, r);
    const float  *dx = kn_xd(x, r);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
    const int8x16_t k32 = vdupq_n_s8(32);
    const int32x4_t zero = vdupq_n_s32(0);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        const float d = f16(wb[b].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = wb[b].ql + 64 * h, *qhp = wb[b].qh + 32 * h;
            const uint8x16_t l[4] = { vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32),
                                      vld1q_u8(ql + 48) };
            const uint8x16_t qh[2] = { vld1q_u8(qhp), vld1q_u8(qhp + 16) };
            const int8_t *xh = q + HX_K_N * b + 128 * h;
            int32x4_t s[8]; /* sub-blocks 8h + 0 .. 8h + 7 */
            for (int t = 0; t < 4; t++) {
                for (int k = 0; k < 2; k++) { /* elements 16k .. 16k + 15 of quarter t */
                    const uint8x16_t lq = l[2 * (t % 2) + k];
                    const uint8x16_t lo = t < 2 ? vandq_u8(lq, m4) : vshrq_n_u8(lq, 4);
                    const uint8x16_t hi =
                        vandq_u8(vshlq_u8(qh[k], vdupq_n_s8((int8_t)(-2 * t))), m3);
                    const int8x16_t u = vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4)));
                    const int8x16_t xv = vld1q_s8(xh + 32 * t + 16 * k);
                    s[2 * t + k] = vdotq_s32(zero, vsubq_s8(u, k32), xv);
                }
            }
            const int16x8_t sc = vmovl_s8(vld1_s8(wb[b].scales + 8 * h));
            const float32x4_t sc_lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(sc)));
            const float32x4_t sc_hi = vcvtq_f32_s32(vmovl_high_s16(sc));
            const float32x4_t dx4 = vld1q_f32(dx + 8 * b + 4 * h); /* blocks t = 0..3 */
            const float32x4_t g_lo = vmulq_f32(vmulq_n_f32(sc_lo, d), vzip1q_f32(dx4, dx4));
            const float32x4_t g_hi = vmulq_f32(vmulq_n_f32(sc_hi, d), vzip2q_f32(dx4, dx4));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(hsum4(s[0], s[1], s[2], s[3])), g_lo);
            acc = vfmaq_f32(acc, vcvtq_f32_s32(hsum4(s[4], s[5], s[6], s[7])), g_hi);
        }
    }
    return vaddvq_f32(acc);
}
#endif
