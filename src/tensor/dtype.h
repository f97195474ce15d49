/* dtype.h - the weight formats hearth reads, and their traits.
 *
 * Every format is a row of hx_dtypes[]: block size, bytes per block and the reference
 * dequantize. Rows of a tensor are whole blocks (a row length must be a multiple of block_n).
 * MLX affine formats are different in one way: their scales and biases live in separate
 * tensors, so their dequantize goes through hx_tensor (tensor.h) rather than the block function.
 * Values of hx_dtype are appended, never reordered. */
#ifndef HX_TENSOR_DTYPE_H
#define HX_TENSOR_DTYPE_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    HX_DT_F32  = 0,
    HX_DT_F16  = 1,
    HX_DT_BF16 = 2,
    HX_DT_Q4_0 = 3, /* GGUF blocks of 32: f16 d, 16 bytes of nibbles (value+8)   18 B */
    HX_DT_Q4_1 = 4, /* GGUF blocks of 32: f16 d, f16 m, 16 bytes of nibbles      20 B */
    HX_DT_Q8_0 = 5, /* GGUF blocks of 32: f16 d, 32 int8                         34 B */
    HX_DT_Q4_K = 6, /* GGUF super-blocks of 256, 8 sub-blocks with 6-bit scales  144 B */
    HX_DT_Q5_K = 7, /* GGUF super-blocks of 256, Q4_K + 1 high bit per weight    176 B */
    HX_DT_Q6_K = 8, /* GGUF super-blocks of 256, 16 sub-blocks with int8 scales   210 B */
    HX_DT_MLX4 = 9, /* MLX affine 4-bit: 8 values per little-endian uint32, w = s*q + b per group */
    HX_DT_MLX8 = 10, /* MLX affine 8-bit: 4 values per uint32 */
    HX_DT_COUNT
} hx_dtype;

/* Dequantizes n elements (a multiple of block_n) of a block format from src into dst. */
typedef void (*hx_dequant_fn)(const void *src, float *dst, int64_t n);

typedef struct {
    const char   *name;        /* "q4_0", "f16", "mlx4", ... */
    int32_t       block_n;     /* elements per block */
    int32_t       block_bytes; /* bytes per block (for MLX: of the packed weights only) */
    hx_dequant_fn dequant;     /* reference; NULL for MLX formats (see hx_tensor_dequant_row) */
} hx_dtype_traits;

extern const hx_dtype_traits hx_dtypes[HX_DT_COUNT];

/* Bytes of n elements of dt, or 0 when n is not a multiple of the block size. For MLX formats
 * counts the packed weights only. */
size_t hx_dtype_row_bytes(hx_dtype dt, int64_t n);

/* Looks a dtype up by its name ("q4_k", "F16", case-insensitive); -1 when unknown. */
int hx_dtype_from_name(const char *name);

#endif
