/* quant.h - block layouts of the quantized weight formats and their reference dequantize.
 *
 * Byte layouts (all little-endian; "f16" is an IEEE half, q values are unsigned unless noted):
 *   Q4_0  18 B / 32:  f16 d | u8 qs[16]                  w[j] = d*(lo(qs[j])-8), w[j+16] = hi(..)
 *   Q4_1  20 B / 32:  f16 d | f16 m | u8 qs[16]          w = d*q + m, nibbles placed as in Q4_0
 *   Q8_0  34 B / 32:  f16 d | i8 qs[32]                  w = d*q
 *   Q4_K 144 B / 256: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
 *   Q5_K 176 B / 256: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
 *   Q6_K 210 B / 256: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
 *   MLX affine: packed little-endian u32 words, element j of a word at bits [bits*j, bits*j+bits),
 *   plus separate scale and bias tensors [rows, row_len/group_size] in F16, BF16 or F32.
 * The K-quant details (sub-block order, the 6-bit scale packing, the Q6_K bit planes) are written
 * beside each function in quant_ref.c, which is the definition every faster kernel is tested
 * against. These functions are plain C and exact: they reproduce ggml and gguf-py bit for bit.
 * They do not quantize (hearth only reads these formats) and do not check their inputs. */
#ifndef HX_TENSOR_QUANT_H
#define HX_TENSOR_QUANT_H
#include <stdint.h>

#include "dtype.h"

/* ---- block layouts ----
 * Every block size is even and every f16 field sits at an even offset, so a block array needs
 * only 2-byte alignment; GGUF aligns tensor data to 32 bytes. */

#define HX_Q4_0_N 32  /* elements per Q4_0 block */
#define HX_Q4_1_N 32
#define HX_Q8_0_N 32
#define HX_K_N    256 /* elements per K-quant super-block */
#define HX_K_SCALE_BYTES 12 /* 8 six-bit scales + 8 six-bit mins of Q4_K / Q5_K */

typedef struct {
    uint16_t d;                 /* f16 scale */
    uint8_t  qs[HX_Q4_0_N / 2]; /* byte j: element j in the low nibble, element j+16 in the high */
} hx_block_q4_0;

typedef struct {
    uint16_t d;                 /* f16 scale */
    uint16_t m;                 /* f16 offset (the block minimum) */
    uint8_t  qs[HX_Q4_1_N / 2]; /* nibbles as in Q4_0, unsigned */
} hx_block_q4_1;

typedef struct {
    uint16_t d;             /* f16 scale */
    int8_t   qs[HX_Q8_0_N]; /* signed values */
} hx_block_q8_0;

typedef struct {
    uint16_t d;                        /* f16 scale of the 6-bit sub-block scales */
    uint16_t dmin;                     /* f16 scale of the 6-bit sub-block mins */
    uint8_t  scales[HX_K_SCALE_BYTES]; /* packed, see quant_ref.c */
    uint8_t  qs[HX_K_N / 2];           /* 4 chunks of 32 bytes: low nibbles, then high nibbles */
} hx_block_q4_k;

typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t  scales[HX_K_SCALE_BYTES];
    uint8_t  qh[HX_K_N / 8];  /* bit k of qh[l]: 5th bit of element 32*k + l */
    uint8_t  qs[HX_K_N / 2];  /* low 4 bits, laid out as in Q4_K */
} hx_block_q5_k;

typedef struct {
    uint8_t  ql[HX_K_N / 2];  /* low 4 bits */
    uint8_t  qh[HX_K_N / 4];  /* high 2 bits, four per byte */
    int8_t   scales[HX_K_N / 16]; /* one signed scale per 16 elements */
    uint16_t d;               /* f16 super-block scale, last */
} hx_block_q6_k;

_Static_assert(sizeof(hx_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(hx_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(hx_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(hx_block_q4_k) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(hx_block_q5_k) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(hx_block_q6_k) == 210, "Q6_K block is 210 bytes");

/* ---- reference dequantize (all of type hx_dequant_fn) ----
 * Each writes n floats to dst from src, where n is a multiple of the format's block_n and src
 * holds n / block_n whole blocks (2-byte aligned for every format except F32, which needs none:
 * it is copied bytewise). F16 and BF16 here are the scalar definitions; hx_tensor_dequant_row
 * uses the faster, bit-identical converters of convert.h. */
void hx_dequant_f32(const void *src, float *dst, int64_t n);
void hx_dequant_f16(const void *src, float *dst, int64_t n);
void hx_dequant_bf16(const void *src, float *dst, int64_t n);
void hx_dequant_q4_0(const void *src, float *dst, int64_t n);
void hx_dequant_q4_1(const void *src, float *dst, int64_t n);
void hx_dequant_q8_0(const void *src, float *dst, int64_t n);
void hx_dequant_q4_k(const void *src, float *dst, int64_t n);
void hx_dequant_q5_k(const void *src, float *dst, int64_t n);
void hx_dequant_q6_k(const void *src, float *dst, int64_t n);

/* MLX affine dequantize of n elements: one row, or a part of one that starts at a group
 * boundary. q points at the packed words of those elements (bits 4 or 8), scales and biases at
 * their n / group_size values in sb_dtype (HX_DT_F16, HX_DT_BF16 or HX_DT_F32). Element i is
 *   dst[i] = scale[i / group_size] * q_i + bias[i / group_size],
 * computed in float32 as a product rounded and then a sum rounded (no fused multiply-add); this
 * equals mx.dequantize with the scales and biases widened to float32, bit for bit. n must be a
 * multiple of group_size, and group_size a multiple of 8 (MLX uses 32, 64 or 128). No pointer
 * needs any alignment: the words are read bytewise, which also makes the code independent of
 * the host's byte order. */
void hx_dequant_mlx(const void *q, const void *scales, const void *biases, hx_dtype sb_dtype,
                    int bits, int group_size, float *dst, int64_t n);

#endif
