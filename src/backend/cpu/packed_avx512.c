/* packed_avx512.c - the packed (16-row interleaved) matmul with AVX-512 VNNI (packed.h).
 *
 * Per 16-row group and tile of up to RT = 4 activation rows, per block column: the code chunks
 * are loaded once (64 bytes = 4 codes of each of 16 rows), split into low/high nibbles for the
 * 4-bit formats, and each feeds one vpdpbusd per row and term, with the row's 4 activation bytes
 * broadcast from memory. Low and high halves accumulate apart (shorter dependency chains), then
 * the block's integer sums become floats once: v = d1 * S1 + d2 * S2 + k * s, acc += dw * v.
 *
 * Napkin math (Zen 4, one zmm vpdpbusd per cycle): a Q4_0 block column of a group is 288 bytes,
 * 4 loads + 12 unpack ops + 16 vpdpbusd (two terms) + ~8 float ops for one row: ~40 ops, ~25
 * cycles, ~40 GB/s per core at 3.6 GHz, above what the memory gives two cores (~35 GB/s), so
 * decode is memory bound. With 4 rows the unpack is shared and the vpdpbusd dominate: 64 of
 * them per block column, i.e. half the VNNI peak per term (two terms) for prefill.
 *
 * The K-quants (tile_q4k, tile_q6k) take a super-block column at a time. Q4_K: 2368 bytes, 32
 * loads + 96 unpack ops + 128 vpdpbusd (two terms, one row) + ~80 float ops for its 8
 * sub-blocks: ~300 ops, measured ~40 GB/s per core hot (8192x2048, bench/kernels), 178 GOP/s
 * for 512 rows (Q4_0: 42 GB/s, 181 GOP/s). Q6_K: 3392 bytes; each 6-bit code zmm costs 2 loads
 * and ~3 ops to assemble from ql and qh, and its 16 sub-blocks of 16 cost twice Q4_K's float
 * work: ~460 ops, ~31 GB/s hot and 141 GOP/s. Both stay above a core's share of memory
 * bandwidth at decode (~17 GB/s with two cores busy). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels_int.h"
#include "packed.h"

#define AI static inline __attribute__((always_inline))

enum { RT = 4 };
/* Software prefetch distance: the codes 8 KiB ahead into L2. The hardware prefetcher alone
 * left decode at ~13 GB/s per core from DRAM; 8 KiB ahead gave ~20 (2-8 KiB and L1/L3 hints
 * measured, bench/kernels). */
enum { PF = 8192 };

/* The 4 activation bytes q[0..4) broadcast to every lane. */
AI __m512i bc4(const int8_t *q)
{
    int32_t v;
    memcpy(&v, q, 4);
    return _mm512_set1_epi32(v);
}

/* Prefetches a block column's worth of bytes PF ahead of col into L2; every tile calls it once
 * per column. The addresses are integers because they may pass the end of the data. */
AI void prefetch_col(const unsigned char *col, size_t col_bytes, uintptr_t end)
{
    for (uintptr_t a = (uintptr_t)col + PF; a < (uintptr_t)col + PF + col_bytes; a += 64)
        if (a < end) _mm_prefetch((const char *)a, _MM_HINT_T2);
}

/* Rows of one tile against one group: acc[t] (lane r = output r of the group). */
AI void tile(const hx_packed *p, const unsigned char *grp, const int8_t *const q1[RT],
             const int8_t *const q2[RT], const float *const d1[RT], const float *const d2[RT],
             const float *const s[RT], const int nr, const hx_dtype fmt, const bool two,
             __m512 acc[RT])
{
    const int64_t nb = p->n_in / 32;
    const unsigned char *codes = grp + p->sc_bytes;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const float k = fmt == HX_DT_Q4_0 ? -8.0f : fmt == HX_DT_Q8_0 ? -128.0f : 0.0f;
    for (int t = 0; t < nr; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i a1[RT][2], a2[RT][2];
        for (int t = 0; t < nr; t++) {
            a1[t][0] = a1[t][1] = _mm512_setzero_si512();
            a2[t][0] = a2[t][1] = _mm512_setzero_si512();
        }
        const unsigned char *cb = codes + (size_t)b * p->col_bytes;
        const int64_t e = 32 * b;
        prefetch_col(cb, p->col_bytes, end);
        if (fmt == HX_DT_Q8_0) {
            for (int c = 0; c < 8; c++) {
                const __m512i v = _mm512_load_si512((const void *)(cb + 64 * c));
                for (int t = 0; t < nr; t++) {
                    a1[t][c & 1] = _mm512_dpbusd_epi32(a1[t][c & 1], v, bc4(q1[t] + e + 4 * c));
                    if (two)
                        a2[t][c & 1] =
                            _mm512_dpbusd_epi32(a2[t][c & 1], v, bc4(q2[t] + e + 4 * c));
                }
            }
        } else {
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_load_si512((const void *)(cb + 64 * c));
                const __m512i lo = _mm512_and_si512(v, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                for (int t = 0; t < nr; t++) {
                    a1[t][0] = _mm512_dpbusd_epi32(a1[t][0], lo, bc4(q1[t] + e + 4 * c));
                    a1[t][1] = _mm512_dpbusd_epi32(a1[t][1], hi, bc4(q1[t] + e + 16 + 4 * c));
                    if (two) {
                        a2[t][0] = _mm512_dpbusd_epi32(a2[t][0], lo, bc4(q2[t] + e + 4 * c));
                        a2[t][1] =
                            _mm512_dpbusd_epi32(a2[t][1], hi, bc4(q2[t] + e + 16 + 4 * c));
                    }
                }
            }
        }
        const unsigned char *sc = grp + (size_t)b * (fmt == HX_DT_Q4_1 ? 64 : 32);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)sc));
        const __m512 mw = fmt == HX_DT_Q4_1
                              ? _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(sc + 32)))
                              : _mm512_setzero_ps();
        for (int t = 0; t < nr; t++) {
            /* two terms: d2 = d1 / 256, so S = 256 S1 + S2 in integers, one conversion */
            __m512i si = _mm512_add_epi32(a1[t][0], a1[t][1]);
            if (two)
                si = _mm512_add_epi32(_mm512_slli_epi32(si, 8),
                                      _mm512_add_epi32(a2[t][0], a2[t][1]));
            const __m512 dx = _mm512_set1_ps(two ? d2[t][b] : d1[t][b]);
            const __m512 v = fmt == HX_DT_Q4_1
                                 ? _mm512_mul_ps(_mm512_cvtepi32_ps(si), dx)
                                 : _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), dx,
                                                   _mm512_set1_ps(k * s[t][b]));
            acc[t] = _mm512_fmadd_ps(v, dw, acc[t]);
            if (fmt == HX_DT_Q4_1) acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(s[t][b]), mw, acc[t]);
        }
    }
}

/* ---- K-quants ----
 * One block column is a super-block of 16 rows (packed.h). Its codes are loaded and unpacked
 * once per row tile; per sub-block, each row's integer sums (exact, packed.h) become a float
 * once, scaled by sc_j * dx, and the super-block's d (and Q4_K's dmin) scales at its end. The
 * loops that index the accumulator arrays are unrolled (pragmas: a variable index would put the
 * arrays in memory), so every accumulator stays in a register: at most 8 int32 sums (Q6_K) or
 * 16 (Q4_K), 4 partial sums fs and 4 results for 4 rows with two terms. */

/* The 16 lanes' bytes at p (unsigned Q4_K scales and mins) as floats. */
AI __m512 u8_ps(const unsigned char *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128((const void *)p)));
}


/* Q4_K: chunk c of 8 code zmms holds sub-blocks 2c (low nibbles) and 2c+1 (high nibbles) of
 * every row; per row and term one accumulator for each, 8 vpdpbusd deep. The min term needs no
 * codes and is summed after them, when the integer accumulators are dead. */
AI void tile_q4k(const hx_packed *p, const unsigned char *grp, const int8_t *const q1[RT],
                 const int8_t *const q2[RT], const float *const dx[RT], const float *const s[RT],
                 const int nr, const bool two, __m512 acc[RT])
{
    const int64_t n_col = p->n_in / HX_K_N;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int t = 0; t < nr; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t col_i = 0; col_i < n_col; col_i++) {
        const unsigned char *col = grp + (size_t)col_i * HX_PACK_Q4K_COL;
        prefetch_col(col, HX_PACK_Q4K_COL, end);
        __m512 fs[RT], fm[RT];
        for (int t = 0; t < nr; t++) fs[t] = fm[t] = _mm512_setzero_ps();
        for (int c = 0; c < 4; c++) {
            __m512i a1[RT][2], a2[RT][2];
            for (int t = 0; t < nr; t++) {
                a1[t][0] = a1[t][1] = _mm512_setzero_si512();
                a2[t][0] = a2[t][1] = _mm512_setzero_si512();
            }
            const int64_t e = HX_K_N * col_i + 64 * c; /* first element of sub-block 2c */
            const unsigned char *cb = col + HX_PACK_K_CODES + 512 * c;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_load_si512((const void *)(cb + 64 * k));
                const __m512i lo = _mm512_and_si512(v, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                for (int t = 0; t < nr; t++) {
                    a1[t][0] = _mm512_dpbusd_epi32(a1[t][0], lo, bc4(q1[t] + e + 4 * k));
                    a1[t][1] = _mm512_dpbusd_epi32(a1[t][1], hi, bc4(q1[t] + e + 32 + 4 * k));
                    if (two) {
                        a2[t][0] = _mm512_dpbusd_epi32(a2[t][0], lo, bc4(q2[t] + e + 4 * k));
                        a2[t][1] =
                            _mm512_dpbusd_epi32(a2[t][1], hi, bc4(q2[t] + e + 32 + 4 * k));
                    }
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = 2 * c + h;
                const __m512 sc = u8_ps(col + HX_PACK_Q4K_SC + 16 * j);
                for (int t = 0; t < nr; t++) {
                    __m512i si = a1[t][h];
                    if (two) si = _mm512_add_epi32(_mm512_slli_epi32(si, 8), a2[t][h]);
                    const __m512 scx = _mm512_mul_ps(sc, _mm512_set1_ps(dx[t][8 * col_i + j]));
                    fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), scx, fs[t]);
                }
            }
        }
        for (int j = 0; j < 8; j++) {
            const __m512 m = u8_ps(col + HX_PACK_Q4K_M + 16 * j);
            for (int t = 0; t < nr; t++)
                fm[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(s[t][8 * col_i + j]), fm[t]);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const void *)col));
        const __m512 dmin =
            _mm512_cvtph_ps(_mm256_load_si256((const void *)(col + HX_PACK_Q4K_DMIN)));
        for (int t = 0; t < nr; t++) {
            acc[t] = _mm512_fmadd_ps(d, fs[t], acc[t]);
            acc[t] = _mm512_fnmadd_ps(dmin, fm[t], acc[t]);
        }
    }
}

/* The 6-bit Q6_K codes of quarter qt (a constant) from a ql chunk (low nibbles for quarters 0,
 * 1, high for 2, 3) and a qh chunk (bits 2 qt, 2 qt + 1): u = nibble | (those bits) << 4. */
AI __m512i q6k_codes(const __m512i vl, const __m512i vh, const int qt)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i lo = qt < 2 ? _mm512_and_si512(vl, m4)
                              : _mm512_and_si512(_mm512_srli_epi16(vl, 4), m4);
    const __m512i hb = qt == 0   ? _mm512_slli_epi16(vh, 4)
                       : qt == 1 ? _mm512_slli_epi16(vh, 2)
                       : qt == 2 ? vh
                                 : _mm512_srli_epi16(vh, 2);
    return _mm512_ternarylogic_epi32(lo, hb, m30, 0xF8); /* lo | (hb & 0x30) */
}

/* Q6_K: per half h, quarter qt (32 elements: chunks 16h + 8 (qt & 1) .. of ql and 8h .. of qh)
 * and sub-block i of the quarter (its chunks 4i .. 4i + 3, elements 16 (8h + 2qt + i) ..), 4
 * code zmms per row and term into one accumulator. The accumulators start at -32 times the
 * activation sums, which folds the code offset out exactly: single term a1 = -32 bsum1 +
 * sum(u q1); two terms a1 = sum(u q1), a2 = -32 (256 bsum1 + bsum2) + sum(u q2), so that
 * 256 a1 + a2 is packed.h's A_j (one broadcast per sub-block and row instead of two). No int32
 * overflows on the way: |256 a1| <= 256 * 16 * 63 * 127 < 2^25, |a2| <= 32 * 257 * 2032 +
 * 16 * 63 * 127 < 2^25 (|bsum| <= 16 * 127). */
AI void tile_q6k(const hx_packed *p, const unsigned char *grp, const int8_t *const q1[RT],
                 const int8_t *const q2[RT], const float *const dx[RT],
                 const int16_t *const bs1[RT], const int16_t *const bs2[RT], const int nr,
                 const bool two, __m512 acc[RT])
{
    const int64_t n_col = p->n_in / HX_K_N;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    for (int t = 0; t < nr; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t col_i = 0; col_i < n_col; col_i++) {
        const unsigned char *col = grp + (size_t)col_i * HX_PACK_Q6K_COL;
        prefetch_col(col, HX_PACK_Q6K_COL, end);
        __m512 fs[RT];
        for (int t = 0; t < nr; t++) fs[t] = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
            for (int qt = 0; qt < 4; qt++) {
                const unsigned char *ql =
                    col + HX_PACK_K_CODES + 64 * (16 * h + 8 * (qt & 1));
                const unsigned char *qh = col + HX_PACK_Q6K_QH + 64 * (8 * h);
                for (int i = 0; i < 2; i++) {
                    const int j = 8 * h + 2 * qt + i;
                    const int64_t e = HX_K_N * col_i + 16 * j, hs = 16 * col_i + j;
                    __m512i a1[RT], a2[RT];
                    for (int t = 0; t < nr; t++) {
                        if (two) {
                            a1[t] = _mm512_setzero_si512();
                            a2[t] = _mm512_set1_epi32(-32 * (256 * bs1[t][hs] + bs2[t][hs]));
                        } else {
                            a1[t] = _mm512_set1_epi32(-32 * bs1[t][hs]);
                        }
                    }
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        const int kk = 4 * i + k;
                        const __m512i u = q6k_codes(
                            _mm512_load_si512((const void *)(ql + 64 * kk)),
                            _mm512_load_si512((const void *)(qh + 64 * kk)), qt);
                        for (int t = 0; t < nr; t++) {
                            a1[t] = _mm512_dpbusd_epi32(a1[t], u, bc4(q1[t] + e + 4 * k));
                            if (two)
                                a2[t] = _mm512_dpbusd_epi32(a2[t], u, bc4(q2[t] + e + 4 * k));
                        }
                    }
                    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_load_si128((const void *)(col + HX_PACK_Q6K_SC + 16 * j))));
                    for (int t = 0; t < nr; t++) {
                        __m512i ai = a1[t];
                        if (two) ai = _mm512_add_epi32(_mm512_slli_epi32(ai, 8), a2[t]);
                        const __m512 scx = _mm512_mul_ps(sc, _mm512_set1_ps(dx[t][hs / 2]));
                        fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), scx, fs[t]);
                    }
                }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const void *)col));
        for (int t = 0; t < nr; t++) acc[t] = _mm512_fmadd_ps(d, fs[t], acc[t]);
    }
}

/* The tile of format fmt (a constant after inlining). */
AI void tile_any(const hx_packed *p, const unsigned char *grp, const int8_t *const q1[RT],
                 const int8_t *const q2[RT], const float *const d1[RT],
                 const float *const d2[RT], const float *const s[RT],
                 const int16_t *const bs1[RT], const int16_t *const bs2[RT], const int nr,
                 const hx_dtype fmt, const bool two, __m512 acc[RT])
{
    if (fmt == HX_DT_Q4_K) tile_q4k(p, grp, q1, q2, two ? d2 : d1, s, nr, two, acc);
    else if (fmt == HX_DT_Q6_K) tile_q6k(p, grp, q1, q2, two ? d2 : d1, bs1, bs2, nr, two, acc);
    else tile(p, grp, q1, q2, d1, d2, s, nr, fmt, two, acc);
}

/* One format and term count: groups outer (a group's codes stay in L1/L2 while every row tile
 * passes over them), row tiles inner. */
AI void run(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x, const hx_act *x2,
            const float *s, int64_t r0, int64_t r1, float *out, int64_t ld_out,
            const hx_dtype fmt, const bool two)
{
    const int64_t nb = p->n_in / 32;
    for (int64_t g = g0; g < g1; g++) {
        const unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        const int64_t o = g * HX_PACK_ROWS;
        const int64_t n_valid = p->n_out - o < HX_PACK_ROWS ? p->n_out - o : HX_PACK_ROWS;
        const __mmask16 keep = (__mmask16)((1u << n_valid) - 1u);
        for (int64_t r = r0; r < r1; r += RT) {
            const int nr = r1 - r < RT ? (int)(r1 - r) : RT;
            const int8_t *q1[RT], *q2[RT];
            const float *d1[RT], *d2[RT], *sr[RT];
            const int16_t *bs1[RT], *bs2[RT];
            for (int t = 0; t < RT; t++) {
                const int64_t rr = r + (t < nr ? t : 0);
                q1[t] = kn_xqs(x, rr);
                d1[t] = kn_xd(x, rr);
                q2[t] = two ? kn_xqs(x2, rr) : q1[t];
                d2[t] = two ? kn_xd(x2, rr) : d1[t];
                sr[t] = s + rr * nb;
                bs1[t] = kn_xbsum(x, rr);
                bs2[t] = two ? kn_xbsum(x2, rr) : bs1[t];
            }
            __m512 acc[RT];
            switch (nr) { /* constant row counts, so every loop over rows unrolls */
            case 1: tile_any(p, grp, q1, q2, d1, d2, sr, bs1, bs2, 1, fmt, two, acc); break;
            case 2: tile_any(p, grp, q1, q2, d1, d2, sr, bs1, bs2, 2, fmt, two, acc); break;
            case 3: tile_any(p, grp, q1, q2, d1, d2, sr, bs1, bs2, 3, fmt, two, acc); break;
            default: tile_any(p, grp, q1, q2, d1, d2, sr, bs1, bs2, 4, fmt, two, acc); break;
            }
            for (int t = 0; t < nr; t++)
                _mm512_mask_storeu_ps(out + (r + t) * ld_out + o, keep, acc[t]);
        }
    }
}

/* One function per format family: register allocation is per function, so this way adding the
 * K-quant instances left the code of the others as it was (a 2% slower hot decode otherwise). */
static __attribute__((noinline)) void run_q32(const hx_packed *p, int64_t g0, int64_t g1,
                                              const hx_act *x, const hx_act *x2, const float *s,
                                              int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    switch (p->dtype) {
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

static __attribute__((noinline)) void run_k(const hx_packed *p, int64_t g0, int64_t g1,
                                            const hx_act *x, const hx_act *x2, const float *s,
                                            int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    if (p->dtype == HX_DT_Q4_K) {
        if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_K, true);
        else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_K, false);
    } else {
        HX_ASSERT(p->dtype == HX_DT_Q6_K);
        if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q6_K, true);
        else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q6_K, false);
    }
}

void hx_pmatmul_avx512vnni(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                           const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                           int64_t ld_out)
{
    if (p->dtype == HX_DT_Q4_K || p->dtype == HX_DT_Q6_K)
        run_k(p, g0, g1, x, x2, s, r0, r1, out, ld_out);
    else
        run_q32(p, g0, g1, x, x2, s, r0, r1, out, ld_out);
}
#endif
