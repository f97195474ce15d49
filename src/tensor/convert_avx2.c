/* convert_avx2.c - F16 and BF16 rows to float32 with AVX2 and F16C, 8 values per step.
 *
 * Built only on x86-64 and only with -mavx2 -mfma -mf16c (the CMake build sets those flags for
 * this file alone), and only called when hx_cpu_isa() reports HX_ISA_AVX2, so the rest of the
 * binary stays baseline x86-64. Results equal the reference (convert.c) bit for bit:
 *  - bf16 → f32 is a 16-bit left shift of the bits, done in integer lanes, so NaNs pass as is;
 *  - vcvtph2ps is exact for every half, subnormals included, but it quiets signaling NaNs
 *    (sets float bit 22) where the reference keeps the payload unchanged, so lanes whose input
 *    is a NaN with the half's quiet bit (0x0200) clear get bit 22 cleared again.
 * Tails shorter than 8 go through the scalar definitions of f16.h. Loads and stores are
 * unaligned. This is a streaming conversion (2 bytes in, 4 out per value), so it is bound by
 * memory bandwidth, not by the few integer ops of the NaN fix-up. */
#if defined(__x86_64__)
#if !defined(__AVX2__) || !defined(__F16C__)
#error "convert_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include "base/f16.h"
#include "convert.h"

void hx_convert_f16_row_avx2(const uint16_t *src, float *dst, int64_t n)
{
    const __m256i mag_mask  = _mm256_set1_epi32(0x7FFF);
    const __m256i inf_bits  = _mm256_set1_epi32(0x7C00);
    const __m256i quiet_h   = _mm256_set1_epi32(0x0200);
    const __m256i quiet_f   = _mm256_set1_epi32(0x00400000);
    const __m256i zero      = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        const __m256i x = _mm256_cvtepu16_epi32(h);
        /* signaling NaN: magnitude above inf's bits and the quiet bit clear */
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, mag_mask), inf_bits);
        const __m256i no_quiet = _mm256_cmpeq_epi32(_mm256_and_si256(x, quiet_h), zero);
        const __m256i fix = _mm256_and_si256(_mm256_and_si256(is_nan, no_quiet), quiet_f);
        const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_xor_si256(f, fix)));
    }
    for (; i < n; i++) dst[i] = hx_f16_to_f32(src[i]);
}

void hx_convert_bf16_row_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) { /* two independent 8-lane steps per iteration */
        const __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 8));
        const __m256i wa = _mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16);
        const __m256i wb = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(wa));
        _mm256_storeu_ps(dst + i + 8, _mm256_castsi256_ps(wb));
    }
    for (; i + 8 <= n; i += 8) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        const __m256i wa = _mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(wa));
    }
    for (; i < n; i++) dst[i] = hx_bf16_to_f32(src[i]);
}

#else
/* Not x86-64: nothing to build (ISO C wants at least one declaration in a file). */
typedef int hx_convert_avx2_unused;
#endif
