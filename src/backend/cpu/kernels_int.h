/* kernels_int.h - small helpers shared by the kernel files of src/backend/cpu (no intrinsics).
 *
 * Row addressing of hx_wmat and hx_act, the K-quant 6-bit scale unpacking and the MLX scale
 * reads, written once so that the reference and every ISA file read the formats the same way. */
#ifndef HX_BACKEND_CPU_KERNELS_INT_H
#define HX_BACKEND_CPU_KERNELS_INT_H
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "base/f16.h"
#include "kernels.h"
#include "tensor/quant.h"

/* Start of weight row o. */
static inline const void *kn_wrow(const hx_wmat *w, int64_t o)
{
    return (const unsigned char *)w->data + (size_t)o * w->row_bytes;
}

/* Row r of the activation arrays. */
static inline const int8_t *kn_xqs(const hx_act *x, int64_t r) { return x->qs + r * x->n; }
static inline const float *kn_xd(const hx_act *x, int64_t r)
{
    return x->d + r * (x->n / HX_ACT_BLOCK);
}
static inline const int16_t *kn_xbsum(const hx_act *x, int64_t r)
{
    return x->bsum + r * (x->n / HX_ACT_SUB);
}

/* The 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block, unpacked to bytes
 * sc[0..8) and m[0..8) with three 32-bit words (layout in quant_ref.c): with a = bytes 0..3,
 * b = 4..7, c = 8..11, sub-blocks 0..3 are the low 6 bits of a (scales) and b (mins); sub-blocks
 * 4..7 take their low 4 bits from the nibbles of c and their top 2 bits from the top 2 bits of
 * a (scales) and b (mins). */
static inline void kn_k_scales(const uint8_t s[12], uint8_t sc[8], uint8_t m[8])
{
    uint32_t a, b, c;
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t m_hi  = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

/* Value g of an MLX scale or bias array in dt (F16, BF16 or F32); unaligned reads. */
static inline float kn_mlx_sb(const void *p, hx_dtype dt, int64_t g)
{
    const unsigned char *b = p;
    if (dt == HX_DT_F32) {
        float f;
        memcpy(&f, b + 4 * g, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, b + 2 * g, 2);
    return dt == HX_DT_BF16 ? hx_bf16_to_f32(h) : hx_f16_to_f32(h);
}

/* Bytes of one MLX scale or bias value. */
static inline int64_t kn_mlx_sb_bytes(hx_dtype dt) { return dt == HX_DT_F32 ? 4 : 2; }

#endif
