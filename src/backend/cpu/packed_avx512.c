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
 * them per block column, i.e. half the VNNI peak per term (two terms) for prefill. */
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
        const unsigned char *cb = codes + (size_t)b * p->code_bytes;
        const int64_t e = 32 * b;
        for (uintptr_t a = (uintptr_t)cb + PF; a < (uintptr_t)cb + PF + p->code_bytes; a += 64)
            if (a < end) _mm_prefetch((const char *)a, _MM_HINT_T2); /* integers: may pass end */
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
            for (int t = 0; t < RT; t++) {
                const int64_t rr = r + (t < nr ? t : 0);
                q1[t] = kn_xqs(x, rr);
                d1[t] = kn_xd(x, rr);
                q2[t] = two ? kn_xqs(x2, rr) : q1[t];
                d2[t] = two ? kn_xd(x2, rr) : d1[t];
                sr[t] = s + rr * nb;
            }
            __m512 acc[RT];
            switch (nr) { /* constant row counts, so every loop over rows unrolls */
            case 1: tile(p, grp, q1, q2, d1, d2, sr, 1, fmt, two, acc); break;
            case 2: tile(p, grp, q1, q2, d1, d2, sr, 2, fmt, two, acc); break;
            case 3: tile(p, grp, q1, q2, d1, d2, sr, 3, fmt, two, acc); break;
            default: tile(p, grp, q1, q2, d1, d2, sr, 4, fmt, two, acc); break;
            }
            for (int t = 0; t < nr; t++)
                _mm512_mask_storeu_ps(out + (r + t) * ld_out + o, keep, acc[t]);
        }
    }
}

void hx_pmatmul_avx512vnni(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                           const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                           int64_t ld_out)
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
#endif
