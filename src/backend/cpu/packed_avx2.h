/* packed_avx2.h - helpers shared by the AVX2 packed matmul files (packed_avx2.c for
 * Q4_0/Q4_1/Q8_0, packed_k_avx2.c for the K-quants). Include only from files compiled with
 * AVX2 flags; everything here is static inline. */
#ifndef HX_BACKEND_CPU_PACKED_AVX2_H
#define HX_BACKEND_CPU_PACKED_AVX2_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

enum { RT = 4 };    /* activation rows a tile takes at most */
enum { PF = 8192 }; /* software prefetch distance, as packed_avx512.c measured */

/* The 4 activation bytes q[0..4) broadcast to every lane. */
AI __m256i bc4(const int8_t *q)
{
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

/* Prefetches a block column's worth of bytes PF ahead of col into L2. The addresses are integers
 * because they may pass the end of the data. */
AI void prefetch_col(const unsigned char *col, size_t col_bytes, uintptr_t end)
{
    for (uintptr_t a = (uintptr_t)col + PF; a < (uintptr_t)col + PF + col_bytes; a += 64)
        if (a < end) _mm_prefetch((const char *)a, _MM_HINT_T2);
}

/* Stores lanes [0, n) of v at dst; nothing for n <= 0. */
AI void store_n(float *dst, __m256 v, int64_t n)
{
    if (n >= 8) {
        _mm256_storeu_ps(dst, v);
    } else if (n > 0) {
        const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(dst, keep, v);
    }
}

/* One stream of a stream tile (packed_avx2.c tile4): the 4 activation bytes at q against the two
 * halves' unpacked codes w0, w1 (variables of the caller), added to the int16 sums x0, x1. The
 * empty asm pins the sums and codes to registers at this point: without it GCC hoists all of a
 * block's products ahead of their adds and spills them (2.3x slower). */
#define STREAM_ACC(q, x0, x1)                                                                     \
    do {                                                                                         \
        const __m256i bq = bc4(q);                                                               \
        x0 = _mm256_add_epi16(x0, _mm256_maddubs_epi16(w0, bq));                                 \
        x1 = _mm256_add_epi16(x1, _mm256_maddubs_epi16(w1, bq));                                 \
        __asm__("" : "+x"(x0), "+x"(x1), "+x"(w0), "+x"(w1));                                    \
    } while (0)

/* The activation rows of a stream tile's six streams: streams 2t, 2t + 1 are row t's two terms
 * (two), or stream t is row t (one term); the entries a tile does not use point at row 0. */
AI void stream_ptrs(const int8_t *const q1[RT], const int8_t *const q2[RT], const bool two,
                    const int8_t *q[6])
{
    for (int k = 0; k < 6; k++) q[k] = q1[0];
    for (int t = 0; t < (two ? 3 : RT); t++) {
        if (two) {
            q[2 * t]     = q1[t];
            q[2 * t + 1] = q2[t];
        } else {
            q[t] = q1[t];
        }
    }
}

/* A block's int16 stream sums x[k][h] as row sums in int32, rows t < nr of ns streams: one
 * vpmaddwd per stream and half; with two terms the first term's is by 256, so row t's sum is
 * 256 S1 + S2 exactly (d2 = d1 / 256), one conversion later. */
AI void stream_row_sums(const __m256i x[6][2], const int ns, const bool two, __m256i rs[RT][2])
{
    const __m256i ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    for (int t = 0; t < (two ? ns / 2 : ns); t++)
        for (int h = 0; h < 2; h++)
            rs[t][h] = two ? _mm256_add_epi32(_mm256_madd_epi16(x[2 * t][h], c256),
                                              _mm256_madd_epi16(x[2 * t + 1][h], ones))
                           : _mm256_madd_epi16(x[t][h], ones);
}

#endif
