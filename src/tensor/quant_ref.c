/* quant_ref.c - reference dequantize of every weight format: the definition of each format.
 *
 * Byte layouts are in quant.h; the comment above each function says how the bits map to
 * elements. Results equal ggml's dequantize_row_* and gguf-py's quants.py bit for bit, which
 * fixes the order of the float operations: the sub-block scale d*sc is rounded to float first,
 * then multiplied by q, then the min (or MLX bias) is subtracted (added). A fused multiply-add
 * would round once instead of twice and break that, so each product gets its own statement:
 * clang contracts only within one expression, and gcc does not contract at all in ISO C mode.
 * Plain loops, no intrinsics; speed belongs to the ISA files. */
#include "quant.h"

#include <string.h>

#include "base/err.h"
#include "base/f16.h"

/* ---- plain floats ---- */

void hx_dequant_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void hx_dequant_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = hx_f16_to_f32(h[i]);
}

void hx_dequant_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = hx_bf16_to_f32(h[i]);
}

/* ---- 32-element blocks ---- */

/* Q4_0: byte j of qs holds element j in its low nibble and element j+16 in its high nibble
 * (not j and j+1), each stored as value+8, so w = d * (nibble - 8) lies in [-8d, 7d]. */
void hx_dequant_q4_0(const void *src, float *dst, int64_t n)
{
    const hx_block_q4_0 *blk = src;
    for (int64_t ib = 0; ib < n / HX_Q4_0_N; ib++) {
        const float d = hx_f16_to_f32(blk[ib].d);
        float *y = dst + ib * HX_Q4_0_N;
        for (int j = 0; j < HX_Q4_0_N / 2; j++) {
            y[j]                 = d * (float)((blk[ib].qs[j] & 0x0F) - 8);
            y[j + HX_Q4_0_N / 2] = d * (float)((blk[ib].qs[j] >> 4) - 8);
        }
    }
}

/* Q4_1: nibbles placed as in Q4_0 but unsigned, w = d * nibble + m. */
void hx_dequant_q4_1(const void *src, float *dst, int64_t n)
{
    const hx_block_q4_1 *blk = src;
    for (int64_t ib = 0; ib < n / HX_Q4_1_N; ib++) {
        const float d = hx_f16_to_f32(blk[ib].d);
        const float m = hx_f16_to_f32(blk[ib].m);
        float *y = dst + ib * HX_Q4_1_N;
        for (int j = 0; j < HX_Q4_1_N / 2; j++) {
            const float lo = d * (float)(blk[ib].qs[j] & 0x0F);
            const float hi = d * (float)(blk[ib].qs[j] >> 4);
            y[j]                 = lo + m;
            y[j + HX_Q4_1_N / 2] = hi + m;
        }
    }
}

/* Q8_0: one signed byte per element, w = d * q. */
void hx_dequant_q8_0(const void *src, float *dst, int64_t n)
{
    const hx_block_q8_0 *blk = src;
    for (int64_t ib = 0; ib < n / HX_Q8_0_N; ib++) {
        const float d = hx_f16_to_f32(blk[ib].d);
        float *y = dst + ib * HX_Q8_0_N;
        for (int j = 0; j < HX_Q8_0_N; j++) y[j] = d * (float)blk[ib].qs[j];
    }
}

/* ---- 256-element K-quant super-blocks ---- */

/* Scale and min of sub-block j (0..7) of Q4_K / Q5_K. Twelve bytes hold 8 six-bit scales and 8
 * six-bit mins: sub-blocks 0..3 keep theirs whole in the low 6 bits of bytes 0..3 (scales) and
 * 4..7 (mins); sub-blocks 4..7 keep their low 4 bits in the nibbles of bytes 8..11 (scale low,
 * min high) and their top 2 bits in the otherwise unused top 2 bits of bytes 0..3 (scales) and
 * 4..7 (mins):
 *     byte 0..3:  SSssssss   s = scale of j, S = top of scale j+4
 *     byte 4..7:  MMmmmmmm   m = min of j,   M = top of min j+4
 *     byte 8..11: mmmmssss   low 4 bits of min and scale of j+4 */
static void k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m  = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m  = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K: 8 sub-blocks of 32 elements, w = (d * sc) * q - (dmin * m) with sc, m from k_scale_min.
 * qs is 4 chunks of 32 bytes; chunk c holds sub-block 2c in its low nibbles and sub-block 2c+1
 * in its high nibbles, so element 64c + l is lo(qs[32c + l]) and 64c + 32 + l is hi(...). */
void hx_dequant_q4_k(const void *src, float *dst, int64_t n)
{
    const hx_block_q4_k *blk = src;
    for (int64_t ib = 0; ib < n / HX_K_N; ib++) {
        const float d    = hx_f16_to_f32(blk[ib].d);
        const float dmin = hx_f16_to_f32(blk[ib].dmin);
        const uint8_t *q = blk[ib].qs;
        float *y = dst + ib * HX_K_N;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            int sc0, m0, sc1, m1;
            k_scale_min(blk[ib].scales, 2 * c, &sc0, &m0);
            k_scale_min(blk[ib].scales, 2 * c + 1, &sc1, &m1);
            const float d0 = d * (float)sc0, min0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, min1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                const float lo = d0 * (float)(q[l] & 0x0F);
                const float hi = d1 * (float)(q[l] >> 4);
                y[l]      = lo - min0;
                y[l + 32] = hi - min1;
            }
        }
    }
}

/* Q5_K: Q4_K plus a 5th bit per element. Bit k of qh[l] belongs to element l of sub-block k
 * (sub-block 2c uses bit 2c, sub-block 2c+1 bit 2c+1), so q = nibble + 16 * bit, 0..31. */
void hx_dequant_q5_k(const void *src, float *dst, int64_t n)
{
    const hx_block_q5_k *blk = src;
    for (int64_t ib = 0; ib < n / HX_K_N; ib++) {
        const float d    = hx_f16_to_f32(blk[ib].d);
        const float dmin = hx_f16_to_f32(blk[ib].dmin);
        const uint8_t *q  = blk[ib].qs;
        const uint8_t *qh = blk[ib].qh;
        float *y = dst + ib * HX_K_N;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            int sc0, m0, sc1, m1;
            k_scale_min(blk[ib].scales, 2 * c, &sc0, &m0);
            k_scale_min(blk[ib].scales, 2 * c + 1, &sc1, &m1);
            const float d0 = d * (float)sc0, min0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, min1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                const int q0 = (q[l] & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4);
                const int q1 = (q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
                const float lo = d0 * (float)q0;
                const float hi = d1 * (float)q1;
                y[l]      = lo - min0;
                y[l + 32] = hi - min1;
            }
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 elements with signed 8-bit scales, w = (d * sc) * (q - 32) where q
 * is 6 bits: 4 from ql and 2 from qh. The block is two halves of 128 elements; half h uses
 * ql[64h .. 64h+64), qh[32h .. 32h+32) and scales[8h .. 8h+8). Within a half, element
 * 32t + l (quarter t = 0..3, l = 0..31) takes
 *     low 4 bits: t=0 lo(ql[l]), t=1 lo(ql[l+32]), t=2 hi(ql[l]), t=3 hi(ql[l+32])
 *     high 2 bits: bits 2t, 2t+1 of qh[l]
 *     scale:       scales[2t + l/16]. */
void hx_dequant_q6_k(const void *src, float *dst, int64_t n)
{
    const hx_block_q6_k *blk = src;
    for (int64_t ib = 0; ib < n / HX_K_N; ib++) {
        const float d = hx_f16_to_f32(blk[ib].d);
        const uint8_t *ql = blk[ib].ql;
        const uint8_t *qh = blk[ib].qh;
        const int8_t  *sc = blk[ib].scales;
        float *y = dst + ib * HX_K_N;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q0 = ((ql[l] & 0x0F)      | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q2 = ((ql[l] >> 4)        | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 32] >> 4)   | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l]      = (d * (float)sc[is + 0]) * (float)q0;
                y[l + 32] = (d * (float)sc[is + 2]) * (float)q1;
                y[l + 64] = (d * (float)sc[is + 4]) * (float)q2;
                y[l + 96] = (d * (float)sc[is + 6]) * (float)q3;
            }
        }
    }
}

/* ---- MLX affine ---- */

/* Value g of a scale or bias array in dtype dt. Read bytewise: safetensors does not promise
 * any alignment for tensor data. */
static float load_sb(const unsigned char *p, hx_dtype dt, int64_t g)
{
    if (dt == HX_DT_F32) {
        float f;
        memcpy(&f, p + 4 * g, sizeof f);
        return f;
    }
    const uint16_t h = (uint16_t)(p[2 * g] | (p[2 * g + 1] << 8));
    return dt == HX_DT_BF16 ? hx_bf16_to_f32(h) : hx_f16_to_f32(h);
}

/* Element j of a little-endian word sits at bits [bits*j, bits*j + bits), so in byte order the
 * elements simply follow each other: with 8 bits, element i is byte i; with 4 bits, it is the
 * low nibble of byte i/2 when i is even and the high nibble when odd. */
void hx_dequant_mlx(const void *q, const void *scales, const void *biases, hx_dtype sb_dtype,
                    int bits, int group_size, float *dst, int64_t n)
{
    HX_ASSERT((bits == 4 || bits == 8) && group_size > 0 && group_size % 8 == 0);
    HX_ASSERT(sb_dtype == HX_DT_F16 || sb_dtype == HX_DT_BF16 || sb_dtype == HX_DT_F32);
    const unsigned char *qb = q;
    const unsigned char *sb = scales, *bb = biases;
    for (int64_t g = 0; g < n / group_size; g++) {
        const float s = load_sb(sb, sb_dtype, g);
        const float b = load_sb(bb, sb_dtype, g);
        float *y = dst + g * group_size;
        if (bits == 8) {
            const unsigned char *qg = qb + g * group_size;
            for (int i = 0; i < group_size; i++) {
                const float t = s * (float)qg[i];
                y[i] = t + b;
            }
        } else {
            const unsigned char *qg = qb + g * (group_size / 2);
            for (int i = 0; i < group_size / 2; i++) {
                const float t0 = s * (float)(qg[i] & 0x0F);
                const float t1 = s * (float)(qg[i] >> 4);
                y[2 * i]     = t0 + b;
                y[2 * i + 1] = t1 + b;
            }
        }
    }
}
