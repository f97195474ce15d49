/* tensor.c - shape queries and row dequantize for hx_tensor views.
 *
 * A tensor's rows are contiguous runs of shape[n_dims-1] elements, row r starting at byte
 * r * hx_dtype_row_bytes(dtype, row_len) of data. For the MLX formats row r's scales and biases
 * are values [r * n_groups, (r + 1) * n_groups) of their own arrays, n_groups being
 * row_len / group_size. Nothing here validates the view: the format parsers check shapes, sizes
 * and group sizes when they build it, so a bad view is a bug and trips an HX_ASSERT. */
#include "tensor.h"

#include "base/err.h"
#include "convert.h"
#include "quant.h"

int64_t hx_tensor_n_elems(const hx_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->shape[d];
    return n;
}

int64_t hx_tensor_n_rows(const hx_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d + 1 < t->n_dims; d++) n *= t->shape[d];
    return n;
}

/* Bytes of one scale or bias value. */
static size_t sb_size(hx_dtype dt)
{
    return dt == HX_DT_F32 ? 4 : 2;
}

void hx_tensor_dequant_row(const hx_tensor *t, int64_t row, float *out)
{
    HX_ASSERT(t->n_dims >= 1 && t->n_dims <= HX_MAX_DIMS);
    const hx_dtype dt = t->dtype;
    const int64_t row_len = t->shape[t->n_dims - 1];
    const size_t row_bytes = hx_dtype_row_bytes(dt, row_len);
    HX_ASSERT(row_bytes > 0 || row_len == 0);
    const unsigned char *src = (const unsigned char *)t->data + (size_t)row * row_bytes;

    switch (dt) {
    case HX_DT_F16:
        hx_convert_f16_row((const uint16_t *)(const void *)src, out, row_len);
        return;
    case HX_DT_BF16:
        hx_convert_bf16_row((const uint16_t *)(const void *)src, out, row_len);
        return;
    case HX_DT_MLX4:
    case HX_DT_MLX8: {
        HX_ASSERT(t->group_size > 0 && row_len % t->group_size == 0);
        const size_t n_groups = (size_t)(row_len / t->group_size);
        const size_t sb_off = (size_t)row * n_groups * sb_size(t->sb_dtype);
        hx_dequant_mlx(src, (const unsigned char *)t->scales + sb_off,
                       (const unsigned char *)t->biases + sb_off, t->sb_dtype,
                       dt == HX_DT_MLX4 ? 4 : 8, t->group_size, out, row_len);
        return;
    }
    default:
        HX_ASSERT((unsigned)dt < HX_DT_COUNT && hx_dtypes[dt].dequant != NULL);
        hx_dtypes[dt].dequant(src, out, row_len);
        return;
    }
}
