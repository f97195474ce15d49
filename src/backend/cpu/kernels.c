/* kernels.c - the dispatch: per dtype, the best dot and matmul this CPU can run.
 *
 * Two tables list every implementation, best first per dtype, the reference last (it needs no
 * ISA bit, so it is always eligible). hx_kernels_select walks them once for an ISA mask and keeps
 * the first eligible entry of each dtype; the backend stores the result at start, so no kernel
 * call ever checks CPU features. Formats without a dedicated tile kernel get the generic tiling
 * of their best dot (hx_matmul_by_dot) through the small wrappers below. */
#include "kernels.h"

#include "base/cpu.h"
#include "base/err.h"

hx_wmat hx_wmat_from_tensor(const hx_tensor *t)
{
    const int64_t n_in = t->shape[t->n_dims - 1];
    return (hx_wmat){
        .dtype      = t->dtype,
        .n_in       = n_in,
        .n_out      = hx_tensor_n_rows(t),
        .data       = t->data,
        .row_bytes  = hx_dtype_row_bytes(t->dtype, n_in),
        .scales     = t->scales,
        .biases     = t->biases,
        .sb_dtype   = t->sb_dtype,
        .group_size = t->group_size,
    };
}

/* ---- matmul wrappers: generic tiling of a dot ---- */

#define BY_DOT(dot)                                                                          \
    static void mm_##dot(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,         \
                         int64_t r0, int64_t r1, float *out, int64_t ld_out)                \
    {                                                                                        \
        hx_matmul_by_dot(hx_dot_##dot, w, o0, o1, x, r0, r1, out, ld_out);                   \
    }
#if defined(__x86_64__)
BY_DOT(f32_avx512)  BY_DOT(f16_avx512)  BY_DOT(bf16_avx512)
BY_DOT(f32_avx2)    BY_DOT(f16_avx2)    BY_DOT(bf16_avx2)
BY_DOT(q4_0_avx2)   BY_DOT(q4_1_avx2)   BY_DOT(q8_0_avx2)
BY_DOT(q4_k_avx2)   BY_DOT(q5_k_avx2)   BY_DOT(q6_k_avx2)
BY_DOT(mlx4_avx2)   BY_DOT(mlx8_avx2)
#elif defined(__aarch64__)
BY_DOT(f32_neon)    BY_DOT(f16_neon)    BY_DOT(bf16_neon)
BY_DOT(q4_0_neon)   BY_DOT(q4_1_neon)   BY_DOT(q8_0_neon)
BY_DOT(q4_k_neon)   BY_DOT(q5_k_neon)   BY_DOT(q6_k_neon)
BY_DOT(mlx4_neon)   BY_DOT(mlx8_neon)
#endif
#undef BY_DOT

/* ---- f32-activation matmul of the float formats: their f32 dots over an hx_act holding only
 * the f32 rows (the dots read nothing else) ---- */

#define BY_FDOT(dot)                                                                         \
    static void fm_##dot(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,           \
                         int64_t r0, int64_t r1, float *out, int64_t ld_out)                \
    {                                                                                        \
        const hx_act a = { .n = w->n_in, .n_rows = r1, .f = x };                             \
        hx_matmul_by_dot(hx_dot_##dot, w, o0, o1, &a, r0, r1, out, ld_out);                  \
    }
#if defined(__x86_64__)
BY_FDOT(f32_avx512) BY_FDOT(f16_avx512) BY_FDOT(bf16_avx512)
BY_FDOT(f32_avx2)   BY_FDOT(f16_avx2)   BY_FDOT(bf16_avx2)
#elif defined(__aarch64__)
BY_FDOT(f32_neon)   BY_FDOT(f16_neon)   BY_FDOT(bf16_neon)
#endif
#undef BY_FDOT

/* ---- the tables ---- */

typedef struct {
    hx_dtype     dt;
    unsigned     isa;
    const char  *name;
    hx_dot_fn    dot;
    hx_matmul_fn matmul;
} kernel_impl;

#define VNNI (HX_ISA_AVX512 | HX_ISA_AVX512VNNI)
#define MM_VNNI hx_matmul_avx512vnni
/* dot_neon.c is compiled for ARMv8.2-A + dotprod as a whole, so even its float dots need it. */
#define NDOT (HX_ISA_NEON | HX_ISA_NEON_DOT)

static const kernel_impl kernel_impls[] = { /* per dtype best first; ref last, always eligible */
#if defined(__x86_64__)
    { HX_DT_F32,  HX_ISA_AVX512, "avx512",     hx_dot_f32_avx512,  mm_f32_avx512  },
    { HX_DT_F32,  HX_ISA_AVX2,   "avx2",       hx_dot_f32_avx2,    mm_f32_avx2    },
    { HX_DT_F16,  HX_ISA_AVX512, "avx512",     hx_dot_f16_avx512,  mm_f16_avx512  },
    { HX_DT_F16,  HX_ISA_AVX2,   "avx2",       hx_dot_f16_avx2,    mm_f16_avx2    },
    { HX_DT_BF16, HX_ISA_AVX512, "avx512",     hx_dot_bf16_avx512, mm_bf16_avx512 },
    { HX_DT_BF16, HX_ISA_AVX2,   "avx2",       hx_dot_bf16_avx2,   mm_bf16_avx2   },
    { HX_DT_Q4_0, VNNI,          "avx512vnni", hx_dot_q4_0_avx512, MM_VNNI        },
    { HX_DT_Q4_0, HX_ISA_AVX2,   "avx2",       hx_dot_q4_0_avx2,   mm_q4_0_avx2   },
    { HX_DT_Q4_1, VNNI,          "avx512vnni", hx_dot_q4_1_avx512, MM_VNNI        },
    { HX_DT_Q4_1, HX_ISA_AVX2,   "avx2",       hx_dot_q4_1_avx2,   mm_q4_1_avx2   },
    { HX_DT_Q8_0, VNNI,          "avx512vnni", hx_dot_q8_0_avx512, MM_VNNI        },
    { HX_DT_Q8_0, HX_ISA_AVX2,   "avx2",       hx_dot_q8_0_avx2,   mm_q8_0_avx2   },
    { HX_DT_Q4_K, VNNI,          "avx512vnni", hx_dot_q4_k_avx512, MM_VNNI        },
    { HX_DT_Q4_K, HX_ISA_AVX2,   "avx2",       hx_dot_q4_k_avx2,   mm_q4_k_avx2   },
    { HX_DT_Q5_K, VNNI,          "avx512vnni", hx_dot_q5_k_avx512, MM_VNNI        },
    { HX_DT_Q5_K, HX_ISA_AVX2,   "avx2",       hx_dot_q5_k_avx2,   mm_q5_k_avx2   },
    { HX_DT_Q6_K, VNNI,          "avx512vnni", hx_dot_q6_k_avx512, MM_VNNI        },
    { HX_DT_Q6_K, HX_ISA_AVX2,   "avx2",       hx_dot_q6_k_avx2,   mm_q6_k_avx2   },
    { HX_DT_MLX4, VNNI,          "avx512vnni", hx_dot_mlx4_avx512, MM_VNNI        },
    { HX_DT_MLX4, HX_ISA_AVX2,   "avx2",       hx_dot_mlx4_avx2,   mm_mlx4_avx2   },
    { HX_DT_MLX8, VNNI,          "avx512vnni", hx_dot_mlx8_avx512, MM_VNNI        },
    { HX_DT_MLX8, HX_ISA_AVX2,   "avx2",       hx_dot_mlx8_avx2,   mm_mlx8_avx2   },
#elif defined(__aarch64__)
    { HX_DT_F32,  NDOT,          "neon",       hx_dot_f32_neon,    mm_f32_neon    },
    { HX_DT_F16,  NDOT,          "neon",       hx_dot_f16_neon,    mm_f16_neon    },
    { HX_DT_BF16, NDOT,          "neon",       hx_dot_bf16_neon,   mm_bf16_neon   },
    { HX_DT_Q4_0, NDOT,          "neon",       hx_dot_q4_0_neon,   mm_q4_0_neon   },
    { HX_DT_Q4_1, NDOT,          "neon",       hx_dot_q4_1_neon,   mm_q4_1_neon   },
    { HX_DT_Q8_0, NDOT,          "neon",       hx_dot_q8_0_neon,   mm_q8_0_neon   },
    { HX_DT_Q4_K, NDOT,          "neon",       hx_dot_q4_k_neon,   mm_q4_k_neon   },
    { HX_DT_Q5_K, NDOT,          "neon",       hx_dot_q5_k_neon,   mm_q5_k_neon   },
    { HX_DT_Q6_K, NDOT,          "neon",       hx_dot_q6_k_neon,   mm_q6_k_neon   },
    { HX_DT_MLX4, NDOT,          "neon",       hx_dot_mlx4_neon,   mm_mlx4_neon   },
    { HX_DT_MLX8, NDOT,          "neon",       hx_dot_mlx8_neon,   mm_mlx8_neon   },
#endif
    { HX_DT_F32,  HX_ISA_NONE,   "ref",        hx_dot_f32_ref,     hx_matmul_ref  },
    { HX_DT_F16,  HX_ISA_NONE,   "ref",        hx_dot_f16_ref,     hx_matmul_ref  },
    { HX_DT_BF16, HX_ISA_NONE,   "ref",        hx_dot_bf16_ref,    hx_matmul_ref  },
    { HX_DT_Q4_0, HX_ISA_NONE,   "ref",        hx_dot_q4_0_ref,    hx_matmul_ref  },
    { HX_DT_Q4_1, HX_ISA_NONE,   "ref",        hx_dot_q4_1_ref,    hx_matmul_ref  },
    { HX_DT_Q8_0, HX_ISA_NONE,   "ref",        hx_dot_q8_0_ref,    hx_matmul_ref  },
    { HX_DT_Q4_K, HX_ISA_NONE,   "ref",        hx_dot_q4_k_ref,    hx_matmul_ref  },
    { HX_DT_Q5_K, HX_ISA_NONE,   "ref",        hx_dot_q5_k_ref,    hx_matmul_ref  },
    { HX_DT_Q6_K, HX_ISA_NONE,   "ref",        hx_dot_q6_k_ref,    hx_matmul_ref  },
    { HX_DT_MLX4, HX_ISA_NONE,   "ref",        hx_dot_mlx4_ref,    hx_matmul_ref  },
    { HX_DT_MLX8, HX_ISA_NONE,   "ref",        hx_dot_mlx8_ref,    hx_matmul_ref  },
};

#undef VNNI

typedef struct {
    hx_dtype      dt;
    unsigned      isa;
    const char   *name;
    hx_fmatmul_fn fn;
} fmatmul_impl;

#define A512 HX_ISA_AVX512
#define A2   HX_ISA_AVX2
#define NEON HX_ISA_NEON

static const fmatmul_impl fmatmul_impls[] = { /* per dtype best first; ref last */
#if defined(__x86_64__)
    { HX_DT_F32,  A512, "avx512", fm_f32_avx512          },
    { HX_DT_F32,  A2,   "avx2",   fm_f32_avx2            },
    { HX_DT_F16,  A512, "avx512", fm_f16_avx512          },
    { HX_DT_F16,  A2,   "avx2",   fm_f16_avx2            },
    { HX_DT_BF16, A512, "avx512", fm_bf16_avx512         },
    { HX_DT_BF16, A2,   "avx2",   fm_bf16_avx2           },
    { HX_DT_Q4_0, A512, "avx512", hx_fmatmul_q4_0_avx512 },
    { HX_DT_Q4_0, A2,   "avx2",   hx_fmatmul_q4_0_avx2   },
    { HX_DT_Q4_1, A512, "avx512", hx_fmatmul_q4_1_avx512 },
    { HX_DT_Q4_1, A2,   "avx2",   hx_fmatmul_q4_1_avx2   },
    { HX_DT_Q8_0, A512, "avx512", hx_fmatmul_q8_0_avx512 },
    { HX_DT_Q8_0, A2,   "avx2",   hx_fmatmul_q8_0_avx2   },
    { HX_DT_Q4_K, A512, "avx512", hx_fmatmul_q4_k_avx512 },
    { HX_DT_Q4_K, A2,   "avx2",   hx_fmatmul_q4_k_avx2   },
    { HX_DT_Q5_K, A512, "avx512", hx_fmatmul_q5_k_avx512 },
    { HX_DT_Q5_K, A2,   "avx2",   hx_fmatmul_q5_k_avx2   },
    { HX_DT_Q6_K, A512, "avx512", hx_fmatmul_q6_k_avx512 },
    { HX_DT_Q6_K, A2,   "avx2",   hx_fmatmul_q6_k_avx2   },
    { HX_DT_MLX4, A512, "avx512", hx_fmatmul_mlx4_avx512 },
    { HX_DT_MLX4, A2,   "avx2",   hx_fmatmul_mlx4_avx2   },
    { HX_DT_MLX8, A512, "avx512", hx_fmatmul_mlx8_avx512 },
    { HX_DT_MLX8, A2,   "avx2",   hx_fmatmul_mlx8_avx2   },
#elif defined(__aarch64__)
    { HX_DT_F32,  NDOT, "neon",   fm_f32_neon            },
    { HX_DT_F16,  NDOT, "neon",   fm_f16_neon            },
    { HX_DT_BF16, NDOT, "neon",   fm_bf16_neon           },
    { HX_DT_Q4_0, NEON, "neon",   hx_fmatmul_q4_0_neon   },
    { HX_DT_Q4_1, NEON, "neon",   hx_fmatmul_q4_1_neon   },
    { HX_DT_Q8_0, NEON, "neon",   hx_fmatmul_q8_0_neon   },
    { HX_DT_Q4_K, NEON, "neon",   hx_fmatmul_q4_k_neon   },
    { HX_DT_Q5_K, NEON, "neon",   hx_fmatmul_q5_k_neon   },
    { HX_DT_Q6_K, NEON, "neon",   hx_fmatmul_q6_k_neon   },
    { HX_DT_MLX4, NEON, "neon",   hx_fmatmul_mlx4_neon   },
    { HX_DT_MLX8, NEON, "neon",   hx_fmatmul_mlx8_neon   },
#endif
    { HX_DT_F32,  HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_F16,  HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_BF16, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_Q4_0, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_Q4_1, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_Q8_0, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_Q4_K, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_Q5_K, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_Q6_K, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_MLX4, HX_ISA_NONE, "ref", hx_fmatmul_ref },
    { HX_DT_MLX8, HX_ISA_NONE, "ref", hx_fmatmul_ref },
};

#undef A512
#undef A2
#undef NEON
#undef NDOT

hx_kernels hx_kernels_select(unsigned isa)
{
    hx_kernels k = { 0 };
    for (size_t i = 0; i < HX_COUNTOF(kernel_impls); i++) {
        const kernel_impl *e = &kernel_impls[i];
        if ((e->isa & ~isa) != 0 || k.dot[e->dt] != NULL) continue;
        k.dot[e->dt]         = e->dot;
        k.matmul[e->dt]      = e->matmul;
        k.dot_name[e->dt]    = e->name;
        k.matmul_name[e->dt] = e->name;
    }
    for (size_t i = 0; i < HX_COUNTOF(fmatmul_impls); i++) {
        const fmatmul_impl *e = &fmatmul_impls[i];
        if ((e->isa & ~isa) != 0 || k.fmatmul[e->dt] != NULL) continue;
        k.fmatmul[e->dt]      = e->fn;
        k.fmatmul_name[e->dt] = e->name;
    }
#if defined(__x86_64__)
    /* Two-term int8: wherever the VNNI tile is this dtype's matmul (the quantized formats). */
    for (int dt = 0; dt < HX_DT_COUNT; dt++)
        if (k.matmul[dt] == hx_matmul_avx512vnni) k.matmul2[dt] = hx_matmul2_avx512vnni;
#endif
    hx_act_quant_variant best;
    hx_act_quant_variants(isa, &best, 1);
    k.act_quant = best.fn;
    k.act_quant2 = hx_act_quant2_select(isa);
    for (int dt = 0; dt < HX_DT_COUNT; dt++)
        HX_ASSERT(k.dot[dt] != NULL && k.matmul[dt] != NULL && k.fmatmul[dt] != NULL);
    return k;
}

int hx_kernels_variants(hx_dtype dt, unsigned isa, hx_kernel_variant *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < HX_COUNTOF(kernel_impls); i++) {
        const kernel_impl *e = &kernel_impls[i];
        if (e->dt != dt || (e->isa & ~isa) != 0) continue;
        if (n < max) out[n] = (hx_kernel_variant){ e->name, e->isa, e->dot, e->matmul };
        n++;
    }
    return n;
}

int hx_fmatmul_variants(hx_dtype dt, unsigned isa, hx_fmatmul_variant *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < HX_COUNTOF(fmatmul_impls); i++) {
        const fmatmul_impl *e = &fmatmul_impls[i];
        if (e->dt != dt || (e->isa & ~isa) != 0) continue;
        if (n < max) out[n] = (hx_fmatmul_variant){ e->name, e->isa, e->fn };
        n++;
    }
    return n;
}
