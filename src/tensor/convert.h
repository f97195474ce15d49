/* convert.h - F16 and BF16 rows to float32: a portable reference and per-ISA variants.
 *
 * hx_convert_f16_row / hx_convert_bf16_row call the best variant this CPU can run, chosen once
 * on first use from hx_cpu_isa() (HEARTH_CPU_ISA=ref forces the reference). Every variant gives
 * the same bits as the reference for every input, NaN payloads and signaling NaNs included, so
 * callers never need to know which one ran. Variants live in their own files (convert_avx2.c,
 * compiled with -mavx2 -mfma -mf16c on x86-64 only); convert.c holds the reference and the
 * dispatch. Nothing here allocates; every function is thread-safe. */
#ifndef HX_TENSOR_CONVERT_H
#define HX_TENSOR_CONVERT_H
#include <stdint.h>

/* Converts n values of src to dst. src needs 2-byte alignment, dst 4; they must not overlap. */
typedef void (*hx_convert_fn)(const uint16_t *src, float *dst, int64_t n);

typedef struct {
    const char   *name; /* "avx2", "ref" */
    unsigned      isa;  /* HX_ISA_* bits the variant needs (cpu.h); 0 for the reference */
    hx_convert_fn f16;  /* IEEE half → float */
    hx_convert_fn bf16; /* bfloat16 → float */
} hx_convert_variant;

/* The dispatched converters: what hx_tensor_dequant_row uses. */
void hx_convert_f16_row(const uint16_t *src, float *dst, int64_t n);
void hx_convert_bf16_row(const uint16_t *src, float *dst, int64_t n);

/* Sets *out to the variants this CPU can run (honouring HEARTH_CPU_ISA), best first; the last
 * one is always the reference. Returns how many. The array is static and never changes. */
int hx_convert_variants(const hx_convert_variant **out);

/* The variants themselves, for tests and benchmarks; call the dispatched ones above instead.
 * The _ref functions are the definition (f16.h's scalar conversions in a loop). */
void hx_convert_f16_row_ref(const uint16_t *src, float *dst, int64_t n);
void hx_convert_bf16_row_ref(const uint16_t *src, float *dst, int64_t n);
/* Defined only in x86-64 builds (convert_avx2.c); convert.c refers to them only there. */
void hx_convert_f16_row_avx2(const uint16_t *src, float *dst, int64_t n);  /* needs AVX2+F16C */
void hx_convert_bf16_row_avx2(const uint16_t *src, float *dst, int64_t n); /* needs AVX2 */

#endif
