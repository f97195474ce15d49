/* kernels.h - the CPU leaf kernels: dot of one weight row with one activation row, and a tiled
 * matmul over a block of rows x a block of outputs, for every weight format and ISA.
 *
 * Weights stay in the format of the model file (mapped, not copied, DESIGN §3). Activations are
 * quantized on the fly to the 8-bit block format of act_quant.h, and the quantized formats are
 * dotted in integers (AVX2 vpmaddubsw/vpmaddwd, AVX-512 VNNI vpdpbusd, scalar reference) with one
 * float multiply-add per block. F32, F16 and BF16 weights are dotted in f32 against the f32
 * source rows (hx_act.f): there is no integer win for them and it keeps them exact.
 *
 * hx_kernels_select(isa) builds the table for an ISA mask once (the backend keeps it); nothing
 * re-checks CPU features inside a loop. Every function here is pure: no allocation, no state,
 * thread-safe. Threads (issue 4) split [o0, o1) and [r0, r1) among themselves. */
#ifndef HX_BACKEND_CPU_KERNELS_H
#define HX_BACKEND_CPU_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "act_quant.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

/* A weight matrix [n_out, n_in] as the kernels read it: row o starts at data + o * row_bytes.
 * For MLX formats, row o's group g has scale scales[o * n_in/group_size + g] (biases alike) in
 * sb_dtype (F16, BF16 or F32); other formats leave those fields zero. Borrowed pointers. */
typedef struct {
    hx_dtype    dtype;
    int64_t     n_in;       /* row length; a multiple of 32 (of 256 for K-quants) */
    int64_t     n_out;      /* rows */
    const void *data;       /* 2-byte aligned (4 for F32) */
    size_t      row_bytes;  /* hx_dtype_row_bytes(dtype, n_in) */
    const void *scales;     /* MLX only: [n_out, n_in / group_size] */
    const void *biases;     /* MLX only: same shape */
    hx_dtype    sb_dtype;   /* MLX only */
    int32_t     group_size; /* MLX only: 32, 64 or 128 */
} hx_wmat;

/* The view of a 2-D (or flattened) weight tensor: n_out = all rows, n_in = the last dim. */
hx_wmat hx_wmat_from_tensor(const hx_tensor *t);

/* Returns sum_i W[o][i] * X[r][i] over i < w->n_in (= x->n). */
typedef float (*hx_dot_fn)(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r);

/* out[r * ld_out + o] = dot(w, o, x, r) for r in [r0, r1), o in [o0, o1). Implementations tile
 * so that each weight block is read from memory once per call and reused across the rows. */
typedef void (*hx_matmul_fn)(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                             int64_t r0, int64_t r1, float *out, int64_t ld_out);

/* The f32-activation matmul (fmatmul_*.c): out[r * ld_out + o] = sum_i W[o][i] * x[r][i] for
 * r in [r0, r1), o in [o0, o1), with x [n_rows, w->n_in] f32 row-major (ld = n_in) and the
 * weights dequantized in registers, so the only error is f32 rounding (no activation
 * quantization). The exact path of the backend. */
typedef void (*hx_fmatmul_fn)(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,
                              int64_t r0, int64_t r1, float *out, int64_t ld_out);

/* The two-term int8 matmul: out = W x + W x2 (x2: the quantized residuals of x's rows). */
typedef void (*hx_matmul2_fn)(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                              const hx_act *x2, int64_t r0, int64_t r1, float *out,
                              int64_t ld_out);

/* The kernels the backend calls, one per dtype, chosen by hx_kernels_select. */
typedef struct {
    hx_dot_fn       dot[HX_DT_COUNT];
    hx_matmul_fn    matmul[HX_DT_COUNT];
    hx_fmatmul_fn   fmatmul[HX_DT_COUNT];
    hx_matmul2_fn   matmul2[HX_DT_COUNT];     /* NULL where this CPU has no VNNI tile */
    hx_act_quant_fn act_quant;
    hx_act_quant2_fn act_quant2;              /* the second (residual) term of two-term rows */
    const char     *dot_name[HX_DT_COUNT];    /* "avx512vnni", "avx2", "ref" */
    const char     *matmul_name[HX_DT_COUNT];
    const char     *fmatmul_name[HX_DT_COUNT];
} hx_kernels;

/* The best kernel of every dtype for ISA mask isa (hx_cpu_isa(); 0 — as under
 * HEARTH_CPU_ISA=ref — gives the references). Every entry is non-NULL. */
hx_kernels hx_kernels_select(unsigned isa);

/* One implementation of a dtype's kernels, for tests and benchmarks. */
typedef struct {
    const char   *name; /* "avx512vnni", "avx2", "ref" */
    unsigned      isa;  /* HX_ISA_* bits it needs */
    hx_dot_fn     dot;
    hx_matmul_fn  matmul;
} hx_kernel_variant;

/* One implementation of a dtype's f32-activation matmul, for tests and benchmarks. */
typedef struct {
    const char   *name; /* "avx512", "avx2", "ref" */
    unsigned      isa;
    hx_fmatmul_fn fn;
} hx_fmatmul_variant;

/* Every f32-activation variant of dt that can run under isa, best first, the reference last.
 * Writes up to max of them to out and returns how many there are. */
int hx_fmatmul_variants(hx_dtype dt, unsigned isa, hx_fmatmul_variant *out, int max);

/* Every variant of dt that can run under isa, best first, the reference last. Writes up to max
 * of them to out and returns how many there are. */
int hx_kernels_variants(hx_dtype dt, unsigned isa, hx_kernel_variant *out, int max);

/* ---- the variants (declared for kernels.c, tests and benchmarks) ----
 * dot_ref.c: the definitions. matmul_tile.c: the reference tile (loops of the reference dot)
 * and the generic tiling of any dot. *_avx2 / *_avx512 exist only in x86-64 builds, *_neon only
 * in AArch64 builds. */
#define HX_KERNEL_DOTS(isa)                                                          \
    float hx_dot_f32_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r);  \
    float hx_dot_f16_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r);  \
    float hx_dot_bf16_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_q4_0_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_q4_1_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_q8_0_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_q4_k_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_q5_k_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_q6_k_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_mlx4_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r); \
    float hx_dot_mlx8_##isa(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r);
HX_KERNEL_DOTS(ref)
HX_KERNEL_DOTS(avx2)
HX_KERNEL_DOTS(avx512)
HX_KERNEL_DOTS(neon)
#undef HX_KERNEL_DOTS

/* The f32-activation variants (fmatmul_ref.c, fmatmul_avx2.c, fmatmul_avx512.c,
 * fmatmul_neon.c). The reference
 * handles every dtype (block by block: dequantize 32 weights, f32 dot, add); the ISA ones
 * handle the quantized formats (F32/F16/BF16 go through the f32 dots above). */
void hx_fmatmul_ref(const hx_wmat *w, int64_t o0, int64_t o1, const float *x, int64_t r0,
                    int64_t r1, float *out, int64_t ld_out);
#define HX_FMATMULS(isa)                                                                     \
    void hx_fmatmul_q4_0_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_q4_1_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_q8_0_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_q4_k_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_q5_k_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_q6_k_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_mlx4_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);           \
    void hx_fmatmul_mlx8_##isa(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,     \
                               int64_t r0, int64_t r1, float *out, int64_t ld_out);
HX_FMATMULS(avx2)
HX_FMATMULS(avx512)
HX_FMATMULS(neon)
#undef HX_FMATMULS

/* The reference tile: out = loops of w's reference dot. The definition of every matmul. */
void hx_matmul_ref(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x, int64_t r0,
                   int64_t r1, float *out, int64_t ld_out);

/* Tiles [o0,o1) x [r0,r1) so that a strip of weight rows stays in L1/L2 while every row of x
 * passes over it, calling dot per element. The matmul of formats without a dedicated kernel. */
void hx_matmul_by_dot(hx_dot_fn dot, const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                      int64_t r0, int64_t r1, float *out, int64_t ld_out);

/* AVX-512 VNNI tiled matmul (matmul_tile_avx512.c): weights of 16 outputs unpacked once into an
 * L1 panel of unsigned codes, then 16 outputs x 8 rows per register tile with vpdpbusd. Handles
 * every quantized format; F32/F16/BF16 go through hx_matmul_by_dot. */
void hx_matmul_avx512vnni(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                          int64_t r0, int64_t r1, float *out, int64_t ld_out);

/* Two-term ("residual") activations on the same tile: out = W x + W x2, where x holds the int8
 * blocks of the rows and x2 the int8 blocks of their residuals (hx_act_quant_residual), so the
 * activations carry ~14 bits per block instead of 7. Quantized formats only, any row count. */
void hx_matmul2_avx512vnni(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                           const hx_act *x2, int64_t r0, int64_t r1, float *out, int64_t ld_out);

#endif
