/* tensor.h - a view of one weight tensor in memory (usually inside a file mapping).
 *
 * hx_tensor owns nothing: data (and, for MLX, scales/biases) point into mapped model files.
 * Shapes are written outermost first, as PyTorch and safetensors do: a linear layer's weight is
 * [n_out, n_in] and its rows (the last dimension) are contiguous. */
#ifndef HX_TENSOR_TENSOR_H
#define HX_TENSOR_TENSOR_H
#include <stdint.h>

#include "dtype.h"

#define HX_MAX_DIMS 4

typedef struct {
    hx_dtype    dtype;
    int32_t     n_dims;
    int64_t     shape[HX_MAX_DIMS]; /* shape[n_dims-1] is the contiguous row length */
    const void *data;               /* borrowed */
    size_t      n_bytes;
    /* MLX affine formats only: per-group scale and bias, [rows, row_len/group_size] */
    const void *scales;
    const void *biases;
    hx_dtype    sb_dtype;   /* F16, BF16 or F32 */
    int32_t     group_size; /* 32, 64 or 128 */
    /* A backend's copy of the weights in the layout its kernels want (backend.h, `weight`),
     * owned by that backend; NULL for tensors as the file has them. data stays valid. */
    const void *prepared;
} hx_tensor;

/* Elements in the tensor (product of its shape) and its number of rows (all but the last dim). */
int64_t hx_tensor_n_elems(const hx_tensor *t);
int64_t hx_tensor_n_rows(const hx_tensor *t);

/* Writes row `row` of t as floats into out[0 .. shape[n_dims-1]). Works for every dtype. The
 * caller guarantees 0 <= row < hx_tensor_n_rows(t). */
void hx_tensor_dequant_row(const hx_tensor *t, int64_t row, float *out);

#endif
