/* fmatmul_avx2.c - the f32-activation matmul with AVX2 + FMA + F16C: the AVX2 port of
 * fmatmul_avx512.c (same data layout, blocking and formulas; read that header for the design).
 *
 * Data layout: W [n_out, n_in] in its file format, x [n_rows, n_in] f32 row-major, out
 * [n_rows, ld_out]. 32 weights are dequantized into four ymm (w = a * u + c, one FMA each) and
 * each of up to RB = 4 activation rows takes four FMAs against them.
 *
 * Napkin math (Zen 4 / Haswell-class, one core): per Q4_1 block of 32 (20 bytes) ~16 ymm ops
 * ~ 6-8 cycles, ~10 GB/s of weights per core, so two cores are at the DRAM share of a process
 * on a shared machine; decode stays memory bound as with AVX-512. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels.h"
#include "kernels_int.h"

#define AI static inline __attribute__((always_inline))

enum { RB = 4, STRIP = 16 };

enum { F_Q4_0, F_Q4_1, F_Q8_0, F_Q4_K, F_Q5_K, F_Q6_K, F_MLX4, F_MLX8 };

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* ---- helpers ---- */

/* The low 8 unsigned bytes of v -> 8 floats. */
AI __m256 u8f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

/* acc[i] += w[0..3] * x_i[e, e+32) for the nr rows (two accumulators per row). */
AI void fma_rows(const __m256 w[4], const float *const xr[RB], int64_t e, int nr,
                 __m256 acc[RB][2])
{
    for (int i = 0; i < nr; i++) {
        acc[i][0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xr[i] + e), acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xr[i] + e + 8), acc[i][1]);
        acc[i][0] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xr[i] + e + 16), acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xr[i] + e + 24), acc[i][1]);
    }
}

/* The 16 codes of h as two vectors of 8 dequantized weights, w = a * u + c. */
AI void deq16(__m128i h, __m256 a, __m256 c, __m256 w[2])
{
    w[0] = _mm256_fmadd_ps(u8f(h), a, c);
    w[1] = _mm256_fmadd_ps(u8f(_mm_unpackhi_epi64(h, h)), a, c);
}

/* Dequantizes the 32 codes in v (elements in order) with w = a * u + c and feeds the rows. */
AI void feed32(__m256i v, __m256 a, __m256 c, const float *const xr[RB], int64_t e, int nr,
               __m256 acc[RB][2])
{
    __m256 w[4];
    deq16(_mm256_castsi256_si128(v), a, c, w);
    deq16(_mm256_extracti128_si256(v, 1), a, c, w + 2);
    fma_rows(w, xr, e, nr, acc);
}

/* Low and high nibbles of 16 bytes: elements j and j + 16 of a Q4_0/Q4_1 block, as one ymm. */
AI __m256i nibbles16(const uint8_t *qs)
{
    const __m128i v = _mm_loadu_si128((const void *)qs), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* ---- one weight row against nr activation rows, per format ---- */

AI void row_q4_0(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m256 acc[RB][2])
{
    const hx_block_q4_0 *wb = kn_wrow(w, o);
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const float d = f16(wb[b].d);
        feed32(nibbles16(wb[b].qs), _mm256_set1_ps(d), _mm256_set1_ps(-8.0f * d), xr, 32 * b,
               nr, acc);
    }
}

AI void row_q4_1(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m256 acc[RB][2])
{
    const hx_block_q4_1 *wb = kn_wrow(w, o);
    for (int64_t b = 0; b < w->n_in / 32; b++)
        feed32(nibbles16(wb[b].qs), _mm256_set1_ps(f16(wb[b].d)), _mm256_set1_ps(f16(wb[b].m)),
               xr, 32 * b, nr, acc);
}

AI void row_q8_0(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m256 acc[RB][2])
{
    const hx_block_q8_0 *wb = kn_wrow(w, o);
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const __m256 d = _mm256_set1_ps(f16(wb[b].d));
        __m256 wv[4];
        for (int k = 0; k < 4; k++) {
            const __m128i q = _mm_loadl_epi64((const void *)(wb[b].qs + 8 * k));
            wv[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
        }
        fma_rows(wv, xr, 32 * b, nr, acc);
    }
}

/* Q4_K and Q5_K: per super-block the 8 factors a_j = d * sc_j and c_j = -dmin * m_j; chunk cc of
 * qs holds sub-block 2cc in its low nibbles and 2cc + 1 in its high ones; Q5_K's fifth bit of
 * element l of sub-block j is bit j of qh[l]. */
AI void row_qk45(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m256 acc[RB][2], bool q5)
{
    const unsigned char *row = kn_wrow(w, o);
    const size_t bb = q5 ? sizeof(hx_block_q5_k) : sizeof(hx_block_q4_k);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b5 = _mm256_set1_epi8(0x10);
    for (int64_t s = 0; s < w->n_in / HX_K_N; s++) {
        const unsigned char *blk = row + (size_t)s * bb;
        const hx_block_q4_k *b4 = (const void *)blk;
        const hx_block_q5_k *b5k = (const void *)blk;
        uint8_t sc[8], m[8];
        kn_k_scales(q5 ? b5k->scales : b4->scales, sc, m);
        const float d = f16(q5 ? b5k->d : b4->d), dmin = f16(q5 ? b5k->dmin : b4->dmin);
        const uint8_t *qs = q5 ? b5k->qs : b4->qs;
        const __m256i qh = q5 ? _mm256_loadu_si256((const void *)b5k->qh) : _mm256_setzero_si256();
        for (int cc = 0; cc < 4; cc++) {
            const __m256i v = _mm256_loadu_si256((const void *)(qs + 32 * cc));
            __m256i u[2] = { _mm256_and_si256(v, m4),
                             _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) };
            for (int k = 0; k < 2; k++) {
                const int j = 2 * cc + k;
                if (q5) {
                    const __m256i t = _mm256_and_si256(qh, _mm256_set1_epi8((char)(1u << j)));
                    u[k] = _mm256_or_si256(
                        u[k], _mm256_andnot_si256(_mm256_cmpeq_epi8(t, _mm256_setzero_si256()), b5));
                }
                feed32(u[k], _mm256_set1_ps(d * (float)sc[j]), _mm256_set1_ps(-(dmin * (float)m[j])),
                       xr, HX_K_N * s + 32 * j, nr, acc);
            }
        }
    }
}

/* Q6_K: sub-block j = 4h + t takes ql[64h + 32(t % 2) + l] (low nibble for t < 2, high for
 * t >= 2) and bits 2t, 2t+1 of qh[32h + l] as bits 4, 5; w = d * sc * (u - 32), with one scale
 * for elements 0-15 and another for 16-31. */
AI void row_q6_k(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m256 acc[RB][2])
{
    const hx_block_q6_k *wb = kn_wrow(w, o);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    for (int64_t s = 0; s < w->n_in / HX_K_N; s++) {
        const float d = f16(wb[s].d);
        for (int h = 0; h < 2; h++) {
            const __m256i qh = _mm256_loadu_si256((const void *)(wb[s].qh + 32 * h));
            const __m256i l0 = _mm256_loadu_si256((const void *)(wb[s].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const void *)(wb[s].ql + 64 * h + 32));
            const __m256i lo[4] = { _mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4) };
            const __m256i hb[4] = { _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2),
                                    _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2),
                                    _mm256_and_si256(qh, m2),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2) };
            for (int t = 0; t < 4; t++) {
                const __m256i u = _mm256_or_si256(lo[t], hb[t]);
                const int k = 8 * h + 2 * t;
                const float a0 = d * (float)wb[s].scales[k], a1 = d * (float)wb[s].scales[k + 1];
                __m256 wv[4];
                deq16(_mm256_castsi256_si128(u), _mm256_set1_ps(a0), _mm256_set1_ps(-32.0f * a0),
                      wv);
                deq16(_mm256_extracti128_si256(u, 1), _mm256_set1_ps(a1),
                      _mm256_set1_ps(-32.0f * a1), wv + 2);
                fma_rows(wv, xr, HX_K_N * s + 128 * h + 32 * t, nr, acc);
            }
        }
    }
}

/* MLX: w = s_g * u + b_g; MLX4 packs element 2k in the low nibble of byte k and 2k + 1 in the
 * high one, so the nibbles are interleaved back with unpack; MLX8 is one byte per element. */
AI void row_mlx(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                __m256 acc[RB][2], bool mlx8)
{
    const uint8_t *row = kn_wrow(w, o);
    const int64_t gs = w->group_size, n_groups = w->n_in / gs;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t g = 0; g < n_groups; g++) {
        const __m256 s = _mm256_set1_ps(kn_mlx_sb(w->scales, w->sb_dtype, o * n_groups + g));
        const __m256 bi = _mm256_set1_ps(kn_mlx_sb(w->biases, w->sb_dtype, o * n_groups + g));
        for (int64_t e = g * gs; e < (g + 1) * gs; e += 32) {
            __m256i u;
            if (mlx8) {
                u = _mm256_loadu_si256((const void *)(row + e));
            } else {
                const __m128i v = _mm_loadu_si128((const void *)(row + e / 2));
                const __m128i lo = _mm_and_si128(v, m4);
                const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
                u = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(lo, hi)),
                                            _mm_unpackhi_epi8(lo, hi), 1);
            }
            feed32(u, s, bi, xr, e, nr, acc);
        }
    }
}

/* ---- the driver ---- */

AI float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Outputs [os, oe) for activation rows [r, r + nr), format fmt (constant after inlining). */
AI void strip(int fmt, const hx_wmat *w, int64_t os, int64_t oe, const float *x, int64_t r,
              int nr, float *out, int64_t ld_out)
{
    const float *xr[RB];
    for (int i = 0; i < RB; i++) xr[i] = x + (r + (i < nr ? i : 0)) * w->n_in;
    for (int64_t o = os; o < oe; o++) {
        __m256 acc[RB][2];
        for (int i = 0; i < nr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        switch (fmt) {
        case F_Q4_0: row_q4_0(w, o, xr, nr, acc); break;
        case F_Q4_1: row_q4_1(w, o, xr, nr, acc); break;
        case F_Q8_0: row_q8_0(w, o, xr, nr, acc); break;
        case F_Q4_K: row_qk45(w, o, xr, nr, acc, false); break;
        case F_Q5_K: row_qk45(w, o, xr, nr, acc, true); break;
        case F_Q6_K: row_q6_k(w, o, xr, nr, acc); break;
        case F_MLX4: row_mlx(w, o, xr, nr, acc, false); break;
        default:     row_mlx(w, o, xr, nr, acc, true); break;
        }
        for (int i = 0; i < nr; i++)
            out[(r + i) * ld_out + o] = hsum(_mm256_add_ps(acc[i][0], acc[i][1]));
    }
}

AI void run(int fmt, const hx_wmat *w, int64_t o0, int64_t o1, const float *x, int64_t r0,
            int64_t r1, float *out, int64_t ld_out)
{
    for (int64_t os = o0; os < o1; os += STRIP) {
        const int64_t oe = os + STRIP < o1 ? os + STRIP : o1;
        for (int64_t r = r0; r < r1; r += RB) {
            switch (r1 - r < RB ? (int)(r1 - r) : RB) {
            case 1:  strip(fmt, w, os, oe, x, r, 1, out, ld_out); break;
            case 2:  strip(fmt, w, os, oe, x, r, 2, out, ld_out); break;
            case 3:  strip(fmt, w, os, oe, x, r, 3, out, ld_out); break;
            default: strip(fmt, w, os, oe, x, r, 4, out, ld_out); break;
            }
        }
    }
}

#define FMATMUL(name, fmt)                                                                   \
    void hx_fmatmul_##name##_avx2(const hx_wmat *w, int64_t o0, int64_t o1, const float *x,   \
                                  int64_t r0, int64_t r1, float *out, int64_t ld_out)       \
    {                                                                                        \
        run(fmt, w, o0, o1, x, r0, r1, out, ld_out);                                         \
    }
FMATMUL(q4_0, F_Q4_0)
FMATMUL(q4_1, F_Q4_1)
FMATMUL(q8_0, F_Q8_0)
FMATMUL(q4_k, F_Q4_K)
FMATMUL(q5_k, F_Q5_K)
FMATMUL(q6_k, F_Q6_K)
FMATMUL(mlx4, F_MLX4)
FMATMUL(mlx8, F_MLX8)
#undef FMATMUL
#endif
