/* dtype.c - the table of weight formats (hx_dtypes[]) and lookups on it.
 *
 * One row per hx_dtype, indexed by the enum value: name, elements and bytes per block, and the
 * reference dequantize of quant_ref.c. For the MLX formats a "block" is one packed uint32 word
 * (8 four-bit or 4 eight-bit values) and dequant is NULL, because their scales and biases live
 * in separate tensors (see hx_tensor_dequant_row). The table is constant: faster kernels are
 * chosen elsewhere, per ISA, and never written into it. */
#include "dtype.h"

#include <ctype.h>
#include <stdint.h>

#include "quant.h"

const hx_dtype_traits hx_dtypes[HX_DT_COUNT] = {
    [HX_DT_F32]  = { "f32",  1,         4,   hx_dequant_f32  },
    [HX_DT_F16]  = { "f16",  1,         2,   hx_dequant_f16  },
    [HX_DT_BF16] = { "bf16", 1,         2,   hx_dequant_bf16 },
    [HX_DT_Q4_0] = { "q4_0", HX_Q4_0_N, 18,  hx_dequant_q4_0 },
    [HX_DT_Q4_1] = { "q4_1", HX_Q4_1_N, 20,  hx_dequant_q4_1 },
    [HX_DT_Q8_0] = { "q8_0", HX_Q8_0_N, 34,  hx_dequant_q8_0 },
    [HX_DT_Q4_K] = { "q4_k", HX_K_N,    144, hx_dequant_q4_k },
    [HX_DT_Q5_K] = { "q5_k", HX_K_N,    176, hx_dequant_q5_k },
    [HX_DT_Q6_K] = { "q6_k", HX_K_N,    210, hx_dequant_q6_k },
    [HX_DT_MLX4] = { "mlx4", 8,         4,   NULL            },
    [HX_DT_MLX8] = { "mlx8", 4,         4,   NULL            },
};

/* Row sizes come from shapes read out of model files, so a huge n must give 0 rather than a
 * wrapped size_t. */
size_t hx_dtype_row_bytes(hx_dtype dt, int64_t n)
{
    if ((unsigned)dt >= HX_DT_COUNT || n < 0) return 0;
    const hx_dtype_traits *t = &hx_dtypes[dt];
    if (n % t->block_n != 0) return 0;
    const uint64_t n_blocks = (uint64_t)(n / t->block_n);
    if (n_blocks > SIZE_MAX / (uint64_t)t->block_bytes) return 0;
    return (size_t)n_blocks * (size_t)t->block_bytes;
}

int hx_dtype_from_name(const char *name)
{
    if (!name) return -1;
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        const char *a = hx_dtypes[dt].name, *b = name;
        while (*a && tolower((unsigned char)*b) == *a) a++, b++;
        if (*a == '\0' && *b == '\0') return dt;
    }
    return -1;
}
