/* fmatmul_avx512.c - the f32-activation matmul with AVX-512 (F, BW, VL, DQ): weights are
 * dequantized in registers and multiplied with f32 activations by FMA. The exact default path.
 *
 * Data layout: W [n_out, n_in] in its file format (tensor/quant.h), x [n_rows, n_in] f32
 * row-major, out [n_rows, ld_out]. Every format is read 32 elements at a time into two zmm of f32
 * weights, w = a * u + c with u the unsigned code (vpmovzxbd + vcvtdq2ps) and a, c broadcast per
 * block (Q4_0: c = -8a, Q6_K: c = -32a, Q4_1/K-quants/MLX: the min or bias), one FMA each.
 * Q4_0/Q4_1 (deq_simple) instead build the 16-entry table a * k + c once per block and look the
 * codes up with vpermps, their f16 factors converted by integer ops from a broadcast load: the
 * same values bit for bit with fewer shuffles, ~40% more decode GB/s on Zen 4.
 * Then each of up to RB = 4 activation rows takes two FMAs against the dequantized weights, so
 * the dequantization is paid once per 4 rows. Per-block activation sums (d*sum(u*x) + m*sum(x))
 * would not save work here: folding the min into the dequant FMA costs the same one FMA.
 *
 * Blocking: outputs in strips of 16 weight rows (a strip of Q4_1 rows of 1536 is 16 x 960 B =
 * 15 KiB, L1/L2-resident while every group of 4 activation rows passes over it). Partial sums of
 * one (row, output) stay in two zmm accumulators and are reduced once per output.
 *
 * Napkin math (Zen 4, ~3.6 GHz, one core; a zmm op takes both 256-bit halves of a pipe pair).
 * Q4_1 decode, per block of 32 (20 bytes): load + 2 and/shift + 2 vpmovzxbd + 2 cvt + 2
 * dequant FMAs + 2 dot FMAs + the scalar scale conversions, ~12 ops ~ 6-7 cycles, i.e. ~11 GB/s
 * of weights per core: two cores reach ~20 GB/s, about the DRAM share this shared machine gives
 * a process, so decode stays memory bound (94 MiB model: ~200 tok/s of matmul at the roofline).
 * With 4 rows the same block feeds 8 dot FMAs, ~64 MAC per cycle-pair: prefill at ~50 GFLOP/s per
 * core, several hundred tokens per second on the 135M model. */
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

/* 16 unsigned bytes -> 16 floats. */
AI __m512 u8f(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }

/* acc[i] += w0 * x_i[e, e+16) + w1 * x_i[e+16, e+32) for the nr rows. */
AI void fma_rows(__m512 w0, __m512 w1, const float *const xr[RB], int64_t e, int nr,
                 __m512 acc[RB][2])
{
    for (int i = 0; i < nr; i++) {
        acc[i][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr[i] + e), acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr[i] + e + 16), acc[i][1]);
    }
}

/* Dequantizes the 32 codes in v (elements in order) with w = a * u + c and feeds the rows. */
AI void feed32(__m256i v, __m512 a, __m512 c, const float *const xr[RB], int64_t e, int nr,
               __m512 acc[RB][2])
{
    const __m512 w0 = _mm512_fmadd_ps(u8f(_mm256_castsi256_si128(v)), a, c);
    const __m512 w1 = _mm512_fmadd_ps(u8f(_mm256_extracti128_si256(v, 1)), a, c);
    fma_rows(w0, w1, xr, e, nr, acc);
}

/* ---- one weight row against nr activation rows, per format ---- */

/* Q4_0, Q4_1 and Q8_0, the decode formats: block b of the weight row at p as two zmm of f32
 * weights (elements 0-15 and 16-31). The 16 nibble bytes are widened once (vpmovzxbd) and split
 * by and/shift in 32-bit lanes; the values, and so every rounding, equal row_q4_* of old. */
AI void deq_simple(int fmt, const unsigned char *p, int64_t b, __m512 *w0, __m512 *w1)
{
    if (fmt == F_Q8_0) {
        const hx_block_q8_0 *q = (const hx_block_q8_0 *)(const void *)p + b;
        const __m512 d = _mm512_set1_ps(f16(q->d));
        const __m128i lo = _mm_loadu_si128((const void *)q->qs);
        const __m128i hi = _mm_loadu_si128((const void *)(q->qs + 16));
        *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d);
        *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d);
        return;
    }
    /* The 16 dequantized values of the block as a table, t[k] = a * k + c with the same
     * rounding as dequantizing each code, and vpermps picks t[u]: it reads only the low 4 bits
     * of each index, so the widened byte indexes its low nibble and the byte >> 4 its high one
     * with no mask. The f16 factors come in by a 32-bit broadcast load (no shuffle) and integer
     * ops: an f16 in the high half of a lane, shifted right by 3 with the sign kept and the
     * bits below cleared, is an f32 of the value * 2^-112 (subnormal f16 included), and the 2^112 rides in the constants
     * (every product here is exact, so the rounding is the one of the scalar conversion). */
    const __m512 k112 = _mm512_setr_ps(0x1p112f * 0, 0x1p112f * 1, 0x1p112f * 2, 0x1p112f * 3,
                                       0x1p112f * 4, 0x1p112f * 5, 0x1p112f * 6, 0x1p112f * 7,
                                       0x1p112f * 8, 0x1p112f * 9, 0x1p112f * 10, 0x1p112f * 11,
                                       0x1p112f * 12, 0x1p112f * 13, 0x1p112f * 14, 0x1p112f * 15);
    const __m512i keep = _mm512_set1_epi32((int)0x8FFFE000u);
    uint32_t dm;
    memcpy(&dm, p + (size_t)b * (fmt == F_Q4_0 ? sizeof(hx_block_q4_0) : sizeof(hx_block_q4_1)),
           sizeof dm);
    const __m512i bc = _mm512_set1_epi32((int)dm);
    const __m512 d = _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(bc, 16), 3), keep));
    const uint8_t *qs;
    __m512 t;
    if (fmt == F_Q4_0) {
        /* d * (k - 8): exact either way, so equal to fma(k, d, -8d). */
        const __m512 k8 = _mm512_sub_ps(k112, _mm512_set1_ps(0x1p112f * 8));
        t = _mm512_mul_ps(k8, d);
        qs = ((const hx_block_q4_0 *)(const void *)p + b)->qs;
    } else {
        const __m512 m = _mm512_mul_ps(
            _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(bc, 3), keep)),
            _mm512_set1_ps(0x1p112f));
        t = _mm512_fmadd_ps(k112, d, m);
        qs = ((const hx_block_q4_1 *)(const void *)p + b)->qs;
    }
    const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)qs));
    *w0 = _mm512_permutexvar_ps(u, t);
    *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(u, 4), t);
}

/* Weight row o against nr activation rows for a simple format. One weight row at a time: two
 * or four rows interleaved measured faster from cache but slower from DRAM (the case of
 * decode) on Zen 4, the hardware prefetcher doing worse on the parallel streams. */
AI void row_simple(int fmt, const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                   __m512 acc[RB][2])
{
    const unsigned char *p = kn_wrow(w, o);
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        __m512 w0, w1;
        deq_simple(fmt, p, b, &w0, &w1);
        fma_rows(w0, w1, xr, 32 * b, nr, acc);
    }
}

/* Q4_K and Q5_K: per super-block the 8 factors a_j = d * sc_j and c_j = -dmin * m_j; chunk cc of
 * qs holds sub-block 2cc in its low nibbles and 2cc + 1 in its high ones; Q5_K's fifth bit of
 * element l of sub-block j is bit j of qh[l]. */
AI void row_qk45(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m512 acc[RB][2], bool q5)
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
                feed32(u[k], _mm512_set1_ps(d * (float)sc[j]), _mm512_set1_ps(-(dmin * (float)m[j])),
                       xr, HX_K_N * s + 32 * j, nr, acc);
            }
        }
    }
}

/* Q6_K: sub-block j = 4h + t takes ql[64h + 32(t % 2) + l] (low nibble for t < 2, high for
 * t >= 2) and bits 2t, 2t+1 of qh[32h + l] as bits 4, 5; w = d * sc * (u - 32), with one scale
 * for elements 0-15 and another for 16-31. */
AI void row_q6_k(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                 __m512 acc[RB][2])
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
                const __m512 w0 = _mm512_fmadd_ps(u8f(_mm256_castsi256_si128(u)),
                                                  _mm512_set1_ps(a0), _mm512_set1_ps(-32.0f * a0));
                const __m512 w1 = _mm512_fmadd_ps(u8f(_mm256_extracti128_si256(u, 1)),
                                                  _mm512_set1_ps(a1), _mm512_set1_ps(-32.0f * a1));
                fma_rows(w0, w1, xr, HX_K_N * s + 128 * h + 32 * t, nr, acc);
            }
        }
    }
}

/* MLX: w = s_g * u + b_g; MLX4 packs element 2k in the low nibble of byte k and 2k + 1 in the
 * high one, so the nibbles are interleaved back with unpack; MLX8 is one byte per element. */
AI void row_mlx(const hx_wmat *w, int64_t o, const float *const xr[RB], int nr,
                __m512 acc[RB][2], bool mlx8)
{
    const uint8_t *row = kn_wrow(w, o);
    const int64_t gs = w->group_size, n_groups = w->n_in / gs;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t g = 0; g < n_groups; g++) {
        const __m512 s = _mm512_set1_ps(kn_mlx_sb(w->scales, w->sb_dtype, o * n_groups + g));
        const __m512 bi = _mm512_set1_ps(kn_mlx_sb(w->biases, w->sb_dtype, o * n_groups + g));
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

/* Outputs [os, oe) for activation rows [r, r + nr), format fmt (constant after inlining). */
AI void strip(int fmt, const hx_wmat *w, int64_t os, int64_t oe, const float *x, int64_t r,
              int nr, float *out, int64_t ld_out)
{
    const float *xr[RB];
    for (int i = 0; i < RB; i++) xr[i] = x + (r + (i < nr ? i : 0)) * w->n_in;
    for (int64_t o = os; o < oe; o++) {
        __m512 acc[RB][2];
        for (int i = 0; i < nr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        switch (fmt) {
        case F_Q4_0:
        case F_Q4_1:
        case F_Q8_0: row_simple(fmt, w, o, xr, nr, acc); break;
        case F_Q4_K: row_qk45(w, o, xr, nr, acc, false); break;
        case F_Q5_K: row_qk45(w, o, xr, nr, acc, true); break;
        case F_Q6_K: row_q6_k(w, o, xr, nr, acc); break;
        case F_MLX4: row_mlx(w, o, xr, nr, acc, false); break;
        default:     row_mlx(w, o, xr, nr, acc, true); break;
        }
        for (int i = 0; i < nr; i++)
            out[(r + i) * ld_out + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
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
    void hx_fmatmul_##name##_avx512(const hx_wmat *w, int64_t o0, int64_t o1, const float *x, \
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
