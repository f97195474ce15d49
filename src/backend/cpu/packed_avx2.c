/* packed_avx2.c - the packed (16-row interleaved) matmul with AVX2 (packed.h), Q4_0/Q4_1/Q8_0;
 * the K-quants are in packed_k_avx2.c.
 *
 * AVX2 has no vpdpbusd. Its integer dot is vpmaddubsw (unsigned byte x signed byte, adjacent
 * pairs summed into int16, saturating) then vpmaddwd by ones (pairs of int16 into int32). A
 * 64-byte code chunk is two ymm: rows 0-7 and rows 8-15 of the group ("halves"), 4 codes a row,
 * so one vpmaddubsw against the row's 4 activation bytes broadcast leaves each row's 4 products
 * in two int16 lanes. For the 4-bit formats a pair is at most 2 * 15 * 127 = 3810, so the 8
 * products of a block (4 chunks, low and high nibbles) add up in int16 (<= 30480) and need one
 * vpmaddwd per block, half and term. Q8_0's codes would saturate (255 * 127 * 2), so its kernel
 * takes the signed codes w = u ^ 0x80 and multiplies |w| by the activations carrying w's sign
 * (pairs <= 2 * 127 * 127 = 32258, one vpmaddwd per chunk); k is then 0 instead of -128.
 *
 * Registers: 16 ymm. One activation row (decode) runs both halves in one pass over the codes:
 * 4 int16 sums (2 halves x 2 terms), 2 float accumulators, the broadcasts and the unpacked
 * chunk. Several rows (prefill, up to RT at once) run one half at a time, so RT rows x 2 terms
 * of sums and RT accumulators fit; the second half's pass finds the group's codes in L1/L2.
 *
 * Napkin math (one row, two terms, Q4_0): a block column of a group is 288 bytes; 8 loads, 24
 * unpack ops, 32 vpmaddubsw, 32 int16 adds, 4 vpmaddwd, ~12 float ops: ~110 ops, ~35 cycles at
 * 3-4 ops a cycle, ~8 bytes a cycle, above a core's share of DRAM bandwidth with both cores
 * busy. Prefill with 4 rows: ~330 ops per 32 x 16 x 4 = 2048 multiply-adds per term. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels_int.h"
#include "packed.h"

#define AI static inline __attribute__((always_inline))

enum { RT = 4 };
enum { PF = 8192 }; /* software prefetch distance, as packed_avx512.c measured */

AI __m256i bc4(const int8_t *q)
{
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

AI void prefetch_col(const unsigned char *col, size_t col_bytes, uintptr_t end)
{
    for (uintptr_t a = (uintptr_t)col + PF; a < (uintptr_t)col + PF + col_bytes; a += 64)
        if (a < end) _mm_prefetch((const char *)a, _MM_HINT_T2);
}

/* Rows [0, nr) of a tile against halves [h0, h0 + nh) of one group: acc[t][h] lane l = output
 * 8h + l of the group. nr, h0, nh, fmt and two are constants after inlining. */
AI void tile(const hx_packed *p, const unsigned char *grp, const int8_t *const q1[RT],
             const int8_t *const q2[RT], const float *const d1[RT], const float *const d2[RT],
             const float *const s[RT], const int nr, const int h0, const int nh,
             const hx_dtype fmt, const bool two, __m256 acc[RT][2])
{
    const int64_t nb = p->n_in / 32;
    const unsigned char *codes = grp + p->sc_bytes;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const float k = fmt == HX_DT_Q4_0 ? -8.0f : 0.0f;
    #pragma GCC unroll 8
    for (int t = 0; t < nr; t++)
        #pragma GCC unroll 8
        for (int h = h0; h < h0 + nh; h++) acc[t][h] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i a1[RT][2], a2[RT][2];
        #pragma GCC unroll 8
        for (int t = 0; t < nr; t++)
            #pragma GCC unroll 8
            for (int h = h0; h < h0 + nh; h++) a1[t][h] = a2[t][h] = _mm256_setzero_si256();
        const unsigned char *cb = codes + (size_t)b * p->col_bytes;
        const int64_t e = 32 * b;
        if (h0 == 0) prefetch_col(cb, p->col_bytes, end);
        if (fmt == HX_DT_Q8_0) {
            #pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                #pragma GCC unroll 8
                for (int h = h0; h < h0 + nh; h++) {
                    const __m256i w = _mm256_xor_si256(
                        _mm256_load_si256((const void *)(cb + 64 * c + 32 * h)), flip);
                    const __m256i aw = _mm256_abs_epi8(w);
                    #pragma GCC unroll 8
                    for (int t = 0; t < nr; t++) {
                        const __m256i p1 = _mm256_maddubs_epi16(
                            aw, _mm256_sign_epi8(bc4(q1[t] + e + 4 * c), w));
                        a1[t][h] = _mm256_add_epi32(a1[t][h], _mm256_madd_epi16(p1, ones));
                        if (two) {
                            const __m256i p2 = _mm256_maddubs_epi16(
                                aw, _mm256_sign_epi8(bc4(q2[t] + e + 4 * c), w));
                            a2[t][h] = _mm256_add_epi32(a2[t][h], _mm256_madd_epi16(p2, ones));
                        }
                    }
                }
        } else {
            #pragma GCC unroll 8
            for (int c = 0; c < 4; c++)
                #pragma GCC unroll 8
                for (int h = h0; h < h0 + nh; h++) {
                    const __m256i v = _mm256_load_si256((const void *)(cb + 64 * c + 32 * h));
                    const __m256i lo = _mm256_and_si256(v, m4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    #pragma GCC unroll 8
                    for (int t = 0; t < nr; t++) {
                        a1[t][h] = _mm256_add_epi16(
                            a1[t][h],
                            _mm256_add_epi16(_mm256_maddubs_epi16(lo, bc4(q1[t] + e + 4 * c)),
                                             _mm256_maddubs_epi16(hi, bc4(q1[t] + e + 16 + 4 * c))));
                        if (two)
                            a2[t][h] = _mm256_add_epi16(
                                a2[t][h],
                                _mm256_add_epi16(
                                    _mm256_maddubs_epi16(lo, bc4(q2[t] + e + 4 * c)),
                                    _mm256_maddubs_epi16(hi, bc4(q2[t] + e + 16 + 4 * c))));
                    }
                }
            #pragma GCC unroll 8
            for (int t = 0; t < nr; t++)
                #pragma GCC unroll 8
                for (int h = h0; h < h0 + nh; h++) {
                    a1[t][h] = _mm256_madd_epi16(a1[t][h], ones);
                    if (two) a2[t][h] = _mm256_madd_epi16(a2[t][h], ones);
                }
        }
        const unsigned char *sc = grp + (size_t)b * (fmt == HX_DT_Q4_1 ? 64 : 32);
        #pragma GCC unroll 8
        for (int h = h0; h < h0 + nh; h++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(sc + 16 * h)));
            const __m256 mw =
                fmt == HX_DT_Q4_1
                    ? _mm256_cvtph_ps(_mm_loadu_si128((const void *)(sc + 32 + 16 * h)))
                    : _mm256_setzero_ps();
            #pragma GCC unroll 8
            for (int t = 0; t < nr; t++) {
                /* two terms: d2 = d1 / 256, so S = 256 S1 + S2 in integers, one conversion */
                __m256i si = a1[t][h];
                if (two) si = _mm256_add_epi32(_mm256_slli_epi32(si, 8), a2[t][h]);
                const __m256 dx = _mm256_set1_ps(two ? d2[t][b] : d1[t][b]);
                const __m256 v = fmt == HX_DT_Q4_0
                                     ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), dx,
                                                       _mm256_set1_ps(k * s[t][b]))
                                     : _mm256_mul_ps(_mm256_cvtepi32_ps(si), dx);
                acc[t][h] = _mm256_fmadd_ps(v, dw, acc[t][h]);
                if (fmt == HX_DT_Q4_1)
                    acc[t][h] = _mm256_fmadd_ps(_mm256_set1_ps(s[t][b]), mw, acc[t][h]);
            }
        }
    }
}

/* Stores lanes [0, n) of v at dst (n <= 8). */
AI void store_n(float *dst, __m256 v, int64_t n)
{
    if (n >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(dst, tmp, (size_t)(n > 0 ? n : 0) * sizeof(float));
}

/* Constant row counts, so every loop over rows unrolls. */
#define TILE_NR(nr_, h0_, nh_)                                                                   \
    tile(p, grp, q1, q2, d1, d2, sr, nr_, h0_, nh_, fmt, two, acc)

/* One format and term count: groups outer, row tiles inner; one row runs both halves at once,
 * more rows one half at a time (the file header). */
AI void run(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x, const hx_act *x2,
            const float *s, int64_t r0, int64_t r1, float *out, int64_t ld_out,
            const hx_dtype fmt, const bool two)
{
    const int64_t nb = p->n_in / 32;
    for (int64_t g = g0; g < g1; g++) {
        const unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        const int64_t o = g * HX_PACK_ROWS;
        const int64_t n_valid = p->n_out - o < HX_PACK_ROWS ? p->n_out - o : HX_PACK_ROWS;
        for (int64_t r = r0; r < r1; r += RT) {
            const int nr = r1 - r < RT ? (int)(r1 - r) : RT;
            const int8_t *q1[RT], *q2[RT];
            const float *d1[RT], *d2[RT], *sr[RT];
            for (int t = 0; t < RT; t++) {
                const int64_t rr = r + (t < nr ? t : 0);
                q1[t] = kn_xqs(x, rr);
                d1[t] = kn_xd(x, rr);
                q2[t] = two ? kn_xqs(x2, rr) : q1[t];
                d2[t] = two ? kn_xd(x2, rr) : d1[t];
                sr[t] = s + rr * nb;
            }
            __m256 acc[RT][2];
            switch (nr) {
            case 1: TILE_NR(1, 0, 2); break;
            case 2: TILE_NR(2, 0, 1); TILE_NR(2, 1, 1); break;
            case 3: TILE_NR(3, 0, 1); TILE_NR(3, 1, 1); break;
            default: TILE_NR(4, 0, 1); TILE_NR(4, 1, 1); break;
            }
            for (int t = 0; t < nr; t++) {
                store_n(out + (r + t) * ld_out + o, acc[t][0], n_valid);
                store_n(out + (r + t) * ld_out + o + 8, acc[t][1], n_valid - 8);
            }
        }
    }
}
#undef TILE_NR

void hx_pmatmul_avx2(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                     const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                     int64_t ld_out)
{
    switch (p->dtype) {
    case HX_DT_Q4_K:
    case HX_DT_Q6_K: hx_pmatmul_k_avx2(p, g0, g1, x, x2, s, r0, r1, out, ld_out); break;
    case HX_DT_Q4_0:
        if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_0, true);
        else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_0, false);
        break;
    case HX_DT_Q4_1:
        if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_1, true);
        else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_1, false);
        break;
    default:
        HX_ASSERT(p->dtype == HX_DT_Q8_0);
        if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q8_0, true);
        else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q8_0, false);
        break;
    }
}
#endif
