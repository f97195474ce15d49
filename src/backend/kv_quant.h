/* kv_quant.h - the byte layout of the quantized KV cache (HX_KV_Q8, HX_KV_Q4) that both backends
 * keep (the CPU's attn_*.c, CUDA's attention.cu: so their caches compare byte for byte), and the
 * reference quantize/dequantize of one row, which define the formats.
 *
 * Format: a head's row of d_head values is cut into groups of 32 consecutive elements; each group
 * has an f16 scale s and an f16 minimum m, and element i is m + s * code[i], code in [0, 255]
 * (Q8) or [0, 15] (Q4). That is 32 + 4 = 36 bytes per 32 elements for Q8 and 16 + 4 = 20 for Q4.
 *
 * Layout: the cache keeps backend.h's order [block][layer][kv_head] and stores, for each of those,
 * one tile holding the block's block_tokens positions of that head (so a head's 16 positions are
 * one contiguous run, as attention reads them):
 *
 *     codes   [block_tokens][row_bytes]   row_bytes = d_head (Q8) or d_head / 2 (Q4)
 *     scales  [n_group][block_tokens] f16 n_group = d_head / 32
 *     mins    [n_group][block_tokens] f16
 *
 * Codes of a Q4 group take 16 bytes: byte i holds element i in its low nibble and element 16 + i
 * in its high nibble (as GGUF's Q4_0), so one 16-byte load and a shift give the group in order.
 * The scales and minimums are stored key-major ("transposed") so that one 32-byte load gives a
 * group's scales for 16 consecutive positions: the attention kernels apply them as vectors
 * across keys (attn.h) instead of one broadcast per key and group.
 *
 * Quantization: m is the group's minimum rounded down to f16, s = (max - m) / qmax rounded up to
 * f16, so m + s * [0, qmax] covers the group; codes round to nearest (ties up) against those
 * stored values. Error per element: at most s/2, where s exceeds range / qmax only by the f16
 * roundings (2^-11 of |min| and of s; subnormal s for ranges under ~0.015 (Q8) / 1e-3 (Q4) adds
 * at most 6e-8); tests/unit/test_kv_quant.c checks this bound. A NaN element gets code 0; values
 * beyond f16's range (|x| > 65504) are not representable (the model never writes either). Pure
 * functions, thread-safe. */
#ifndef HX_BACKEND_KV_QUANT_H
#define HX_BACKEND_KV_QUANT_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define HX_KVQ_GROUP 32 /* elements per scale/minimum pair */

/* Bytes of codes in one row of d elements (quantized dtypes only). */
static inline int32_t hx_kvq_row_bytes(hx_kv_dtype dt, int32_t d)
{
    return dt == HX_KV_Q4 ? d / 2 : d;
}

/* Bytes of one (block, layer, kv head) tile of bt positions of d elements, any dtype (F16: the
 * plain [bt][d] f16 run). */
static inline size_t hx_kv_tile_bytes(hx_kv_dtype dt, int32_t bt, int32_t d)
{
    if (dt == HX_KV_F16) return (size_t)bt * (size_t)d * 2u;
    return (size_t)bt * ((size_t)hx_kvq_row_bytes(dt, d) + 4u * (size_t)(d / HX_KVQ_GROUP));
}

/* The scales of a quantized tile, [n_group][bt] f16; the minimums follow at + n_group * bt. */
static inline const uint16_t *hx_kvq_scales(const uint8_t *tile, hx_kv_dtype dt, int32_t bt,
                                            int32_t d)
{
    return (const uint16_t *)(const void *)(tile + (size_t)bt * (size_t)hx_kvq_row_bytes(dt, d));
}

/* HX_OK when a cache of dtype can hold heads of d_head (names the dtype, HX_E_INVALID, when
 * not: an unknown dtype, or a quantized one with d_head % 32 != 0). */
hx_status hx_kv_dtype_check(hx_kv_dtype dt, int32_t d_head, hx_err *err);

/* Quantizes x [d] into position off (< bt) of tile (Q8 or Q4; d % 32 == 0). */
void hx_kvq_quantize_row(hx_kv_dtype dt, const float *x, int32_t d, uint8_t *tile, int32_t bt,
                         int32_t off);
/* y [d] = the values stored at position off of tile: m + s * code, in f32. */
void hx_kvq_dequantize_row(hx_kv_dtype dt, const uint8_t *tile, int32_t bt, int32_t off,
                           int32_t d, float *y);

#endif
