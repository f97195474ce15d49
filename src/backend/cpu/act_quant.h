/* act_quant.h - activations quantized on the fly to 8-bit blocks, the input of the dot kernels.
 *
 * Before a matmul, each f32 activation row is cut into blocks of 32 and stored as int8 with one
 * f32 scale per block (x ~= d * q) plus the int16 sum of q over each half block (16 values).
 * The sums let the kernels multiply *unsigned* weight codes with signed activations (the only
 * form VNNI's vpdpbusd and AVX2's vpmaddubsw take) and fix up the weight offset afterwards:
 *     sum_i (u_i - k) x_i = sum_i u_i x_i - k * sum_i x_i,
 * and they give the min/bias term of the affine formats (Q4_1, Q4_K, Q5_K, MLX) for free. Sums
 * are per 16 rather than per 32 because Q6_K carries one scale per 16 weights.
 *
 * Layout of a batch (hx_act), struct of arrays so SIMD code loads 16 scales or sums at once:
 *     qs   [n_rows][n]       int8   block b of row r is qs[r*n + 32b .. +32)
 *     d    [n_rows][n/32]    f32    scale: amax / 127, 0 for an all-zero block
 *     bsum [n_rows][n/16]    int16  sum of q over elements [16h, 16h+16) of the row
 *     f    [n_rows][n]       f32    the source rows themselves (borrowed; F32/F16/BF16 weights
 *                                   are dotted against these, not against the int8 copy)
 * Memory: n + 4n/32 + 2n/16 = 1.25 n bytes a row (plus the borrowed f32 rows).
 *
 * Quantization rule (every variant gives the same bits): amax = max |x_i| over the block,
 * d = amax / 127, q_i = nearest-even integer to x_i * (127 / amax), all in f32 with no fused
 * operations. */
#ifndef HX_BACKEND_CPU_ACT_QUANT_H
#define HX_BACKEND_CPU_ACT_QUANT_H
#include <stddef.h>
#include <stdint.h>

#define HX_ACT_BLOCK 32 /* elements per activation block (one scale) */
#define HX_ACT_SUB   16 /* elements per activation sum */

typedef struct {
    int64_t      n;      /* elements per row, a multiple of HX_ACT_BLOCK */
    int64_t      n_rows;
    int8_t      *qs;     /* [n_rows, n] */
    float       *d;      /* [n_rows, n / 32] */
    int16_t     *bsum;   /* [n_rows, n / 16] */
    const float *f;      /* [n_rows, n] f32 source rows, borrowed; set by hx_act_quantize */
} hx_act;

/* Quantizes one row of n floats (n a multiple of 32) into qs[n], d[n/32], bsum[n/16]. */
typedef void (*hx_act_quant_fn)(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n);

typedef struct {
    const char     *name;  /* "avx512", "avx2", "ref" */
    unsigned        isa;   /* HX_ISA_* bits it needs; 0 for the reference */
    hx_act_quant_fn fn;
} hx_act_quant_variant;

/* Bytes of buffer hx_act_init needs for n_rows rows of n elements (64-byte multiple). */
size_t hx_act_bytes(int64_t n_rows, int64_t n);

/* Carves a batch view out of buf (hx_act_bytes(n_rows, n) bytes, 64-byte aligned, owned by the
 * caller and outliving the view). n must be a multiple of 32. f is left NULL. */
void hx_act_init(hx_act *a, void *buf, int64_t n_rows, int64_t n);

/* Quantizes x [a->n_rows, a->n] into a with the given row quantizer and records x as a->f
 * (x is borrowed: keep it alive while a is used by F32/F16/BF16 kernels). */
void hx_act_quantize(hx_act *a, const float *x, hx_act_quant_fn quant);

/* The second term of two-term activations (kernels.h hx_matmul2_*, packed.h): given a row x
 * and its first term (q1, d1 from an act quantizer), quantizes the residual r = x - d1 q1 with
 * the scale d2 = d1 / 256 exactly: q2 = nearest-even of r * (256 * 127 / amax) (the first
 * term's inverse scale times 256), clamped to [-127, 127], and the half-block sums bsum2. Then
 * x ~= d1 q1 + d2 q2 within d1 / 512 (~1/65000 of the block maximum), and since d2 is d1 / 256
 * a kernel may combine the two integer sums exactly as 256 S1 + S2 before one conversion.
 * Every variant gives the same bits. */
typedef void (*hx_act_quant2_fn)(const float *x, const int8_t *q1, const float *d1, int8_t *q2,
                                 float *d2, int16_t *bsum2, int64_t n);
void hx_act_quant2_ref(const float *x, const int8_t *q1, const float *d1, int8_t *q2, float *d2,
                       int16_t *bsum2, int64_t n);
void hx_act_quant2_avx2(const float *x, const int8_t *q1, const float *d1, int8_t *q2, float *d2,
                        int16_t *bsum2, int64_t n);
void hx_act_quant2_avx512(const float *x, const int8_t *q1, const float *d1, int8_t *q2,
                          float *d2, int16_t *bsum2, int64_t n);

/* The best second-term quantizer for isa (the reference where no SIMD variant applies). */
hx_act_quant2_fn hx_act_quant2_select(unsigned isa);

/* The variants this CPU can run under isa mask `isa`, best first, the reference last; writes up
 * to max of them to out and returns how many there are. */
int hx_act_quant_variants(unsigned isa, hx_act_quant_variant *out, int max);

/* The variants themselves (tests and benchmarks; the backend picks one through
 * hx_kernels_select). The _avx2 and _avx512 ones exist only in x86-64 builds, _neon only in
 * AArch64 builds. */
void hx_act_quant_ref(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n);
void hx_act_quant_avx2(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n);
void hx_act_quant_avx512(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n);
void hx_act_quant_neon(const float *x, int8_t *qs, float *d, int16_t *bsum, int64_t n);

#endif
