/* packed_avx2.c - the packed (16-row interleaved) matmul with AVX2 (packed.h), Q4_0/Q4_1/Q8_0,
 * and the repacking of their columns at load; the K-quants are in packed_k_avx2.c.
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
 * Q4_0/Q4_1 run the stream tile (tile_streams): up to six activation "streams" (a stream is
 * one row's term: three rows of two terms, or one to four rows of one term) against both halves
 * of a group in one pass, every value in its own variable: 12 int16 sums, 2 unpacked code
 * vectors, a broadcast and a product fit the 16 ymm, and each broadcast feeds both halves. Q8_0
 * (whose sign trick widens every chunk to int32) runs tile_q8: one row both halves at once, more
 * rows one half per pass.
 *
 * Napkin math (stream tile, per 64-byte chunk, six streams): 2 loads + 6 unpack ops, 12
 * broadcasts, 24 vpmaddubsw + 24 int16 adds for 16 x 8 x 6 multiply-adds; then per block 12
 * vpmaddwd and ~40 float ops: ~262 vector ops per 1536 multiply-adds. Measured (hx-dot-bench,
 * one thread, W 8192x2048 Q4_0, 512 rows): two terms 99 GOP/s against 61 for the earlier
 * one-half-per-pass tile, one term 146 against 107; decode (one row, two terms) 22 GB/s hot
 * against 16. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels_int.h"
#include "packed.h"
#include "packed_avx2.h"

/* Q8_0: rows [0, nr) against halves [h0, h0 + nh) of one group (acc[t][h] lane l = output
 * 8h + l); nr, h0, nh and two are constants after inlining. Each chunk's pairs are widened to
 * int32 at once (the sign trick's products nearly fill int16), so the sums live in arrays of
 * int32 and one row runs both halves, more rows one half per pass. */
AI void tile_q8(const hx_packed *p, const unsigned char *grp, const int8_t *const q1[RT],
                const int8_t *const q2[RT], const float *const d1[RT],
                const float *const d2[RT], const int nr, const int h0, const int nh,
                const bool two, __m256 acc[RT][2])
{
    const int64_t nb = p->n_in / 32;
    const unsigned char *codes = grp + p->sc_bytes;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
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
        const unsigned char *sc = grp + (size_t)b * 32;
        #pragma GCC unroll 8
        for (int h = h0; h < h0 + nh; h++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(sc + 16 * h)));
            #pragma GCC unroll 8
            for (int t = 0; t < nr; t++) {
                /* two terms: d2 = d1 / 256, so S = 256 S1 + S2 in integers, one conversion */
                __m256i si = a1[t][h];
                if (two) si = _mm256_add_epi32(_mm256_slli_epi32(si, 8), a2[t][h]);
                const __m256 dx = _mm256_set1_ps(two ? d2[t][b] : d1[t][b]);
                acc[t][h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(si), dx), dw,
                                            acc[t][h]);
            }
        }
    }
}

/* The stream tile, Q4_0/Q4_1: ns activation streams (1..6, a constant after inlining; a stream
 * is one row's term) against both halves of a group at once. The generic tile above runs one
 * half per pass with arrays of sums the compiler keeps on the stack; here every value has its
 * own variable: 12 int16 sums, 2 unpacked code vectors, a broadcast and a product fit the 16
 * ymm, so nothing spills in the code loop and each broadcast feeds both halves. Per chunk and six
 * streams: 2 loads and 6 unpack ops, then 12 broadcasts, 24 vpmaddubsw and 24 adds
 * (STREAM_ACC, packed_avx2.h). Rows t < nr = ns / 2 (two terms, streams 2t and 2t + 1) or
 * nr = ns (one term, ns <= RT); acc[t][h] lane l = output 8h + l of the group. */
AI void tile_streams(const hx_packed *p, const unsigned char *grp, const int8_t *const q[6],
                     const float *const d[RT], const float *const s[RT], const int ns,
                     const hx_dtype fmt, const bool two, __m256 acc[RT][2])
{
    const int64_t nb = p->n_in / 32;
    const int nr = two ? ns / 2 : ns;
    const unsigned char *codes = grp + p->sc_bytes;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const float k = fmt == HX_DT_Q4_0 ? -8.0f : 0.0f;
    for (int t = 0; t < nr; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *cb = codes + (size_t)b * p->col_bytes;
        const int64_t e = 32 * b;
        prefetch_col(cb, p->col_bytes, end);
        __m256i x00 = _mm256_setzero_si256(), x01 = x00, x10 = x00, x11 = x00, x20 = x00,
                x21 = x00, x30 = x00, x31 = x00, x40 = x00, x41 = x00, x50 = x00, x51 = x00;
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i v0 = _mm256_load_si256((const void *)(cb + 64 * c));
            const __m256i v1 = _mm256_load_si256((const void *)(cb + 64 * c + 32));
            __m256i w0 = _mm256_and_si256(v0, m4), w1 = _mm256_and_si256(v1, m4);
            STREAM_ACC(q[0] + e + 4 * c, x00, x01);
            if (ns > 1) STREAM_ACC(q[1] + e + 4 * c, x10, x11);
            if (ns > 2) STREAM_ACC(q[2] + e + 4 * c, x20, x21);
            if (ns > 3) STREAM_ACC(q[3] + e + 4 * c, x30, x31);
            if (ns > 4) STREAM_ACC(q[4] + e + 4 * c, x40, x41);
            if (ns > 5) STREAM_ACC(q[5] + e + 4 * c, x50, x51);
            w0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
            w1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
            STREAM_ACC(q[0] + e + 16 + 4 * c, x00, x01);
            if (ns > 1) STREAM_ACC(q[1] + e + 16 + 4 * c, x10, x11);
            if (ns > 2) STREAM_ACC(q[2] + e + 16 + 4 * c, x20, x21);
            if (ns > 3) STREAM_ACC(q[3] + e + 16 + 4 * c, x30, x31);
            if (ns > 4) STREAM_ACC(q[4] + e + 16 + 4 * c, x40, x41);
            if (ns > 5) STREAM_ACC(q[5] + e + 16 + 4 * c, x50, x51);
        }
        __m256i rs[RT][2];
        stream_row_sums((const __m256i[6][2]){{x00, x01}, {x10, x11}, {x20, x21}, {x30, x31},
                                              {x40, x41}, {x50, x51}},
                        ns, two, rs);
        const unsigned char *sc = grp + (size_t)b * (fmt == HX_DT_Q4_1 ? 64 : 32);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(sc + 16 * h)));
            const __m256 mw =
                fmt == HX_DT_Q4_1
                    ? _mm256_cvtph_ps(_mm_loadu_si128((const void *)(sc + 32 + 16 * h)))
                    : _mm256_setzero_ps();
            #pragma GCC unroll 4
            for (int t = 0; t < nr; t++) {
                const __m256i st = rs[t][h];
                const __m256 dx = _mm256_set1_ps(d[t][b]);
                const __m256 v = fmt == HX_DT_Q4_0
                                     ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(st), dx,
                                                       _mm256_set1_ps(k * s[t][b]))
                                     : _mm256_mul_ps(_mm256_cvtepi32_ps(st), dx);
                acc[t][h] = _mm256_fmadd_ps(v, dw, acc[t][h]);
                if (fmt == HX_DT_Q4_1)
                    acc[t][h] = _mm256_fmadd_ps(_mm256_set1_ps(s[t][b]), mw, acc[t][h]);
            }
        }
    }
}

/* Constant row counts, so every loop over rows unrolls. */
#define TILE_NR(nr_, h0_, nh_) tile_q8(p, grp, q1, q2, d1, d2, nr_, h0_, nh_, two, acc)

/* One format and term count: groups outer, row tiles inner (the file header). */
AI void run(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x, const hx_act *x2,
            const float *s, int64_t r0, int64_t r1, float *out, int64_t ld_out,
            const hx_dtype fmt, const bool two)
{
    const int64_t nb = p->n_in / 32;
    for (int64_t g = g0; g < g1; g++) {
        const unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        const int64_t o = g * HX_PACK_ROWS;
        const int64_t n_valid = p->n_out - o < HX_PACK_ROWS ? p->n_out - o : HX_PACK_ROWS;
        for (int64_t r = r0; r < r1;) {
            int nr = r1 - r < RT ? (int)(r1 - r) : RT;
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
            if (fmt != HX_DT_Q8_0) {
                /* up to six streams: rows in threes with two terms, in fours with one */
                if (two && nr > 3) nr = 3;
                const int8_t *q[6];
                stream_ptrs(q1, q2, two, q);
                if (two) {
                    switch (nr) {
                    case 1: tile_streams(p, grp, q, d2, sr, 2, fmt, true, acc); break;
                    case 2: tile_streams(p, grp, q, d2, sr, 4, fmt, true, acc); break;
                    default: tile_streams(p, grp, q, d2, sr, 6, fmt, true, acc); break;
                    }
                } else {
                    switch (nr) {
                    case 1: tile_streams(p, grp, q, d1, sr, 1, fmt, false, acc); break;
                    case 2: tile_streams(p, grp, q, d1, sr, 2, fmt, false, acc); break;
                    case 3: tile_streams(p, grp, q, d1, sr, 3, fmt, false, acc); break;
                    default: tile_streams(p, grp, q, d1, sr, 4, fmt, false, acc); break;
                    }
                }
            } else {
                switch (nr) {
                case 1: TILE_NR(1, 0, 2); break;
                case 2: TILE_NR(2, 0, 1); TILE_NR(2, 1, 1); break;
                case 3: TILE_NR(3, 0, 1); TILE_NR(3, 1, 1); break;
                default: TILE_NR(4, 0, 1); TILE_NR(4, 1, 1); break;
                }
            }
            for (int t = 0; t < nr; t++) {
                store_n(out + (r + t) * ld_out + o, acc[t][0], n_valid);
                store_n(out + (r + t) * ld_out + o + 8, acc[t][1], n_valid - 8);
            }
            r += nr;
        }
    }
}
#undef TILE_NR

/* Repacking (packed.h hx_pack_column_avx2): each 4 rows' 16-byte code runs are one 4 x 4
 * transpose of dwords (chunk k holds dword k of every row), not 64 small copies. Repacking was
 * a third of a 1-token run's CPU on SmolLM2-135M before. */
void hx_pack_column_avx2(const hx_packed *p, const hx_wmat *w, int64_t o0, int64_t b,
                         unsigned char *sc, unsigned char *cb)
{
    const bool q8 = p->dtype == HX_DT_Q8_0, q41 = p->dtype == HX_DT_Q4_1;
    const size_t bsz = q8 ? sizeof(hx_block_q8_0) : q41 ? sizeof(hx_block_q4_1)
                                                        : sizeof(hx_block_q4_0);
    const size_t qoff = q41 ? 4 : 2; /* the codes follow d (and Q4_1's m) */
    const unsigned char *blk[HX_PACK_ROWS];
    for (int r = 0; r < HX_PACK_ROWS; r++) {
        blk[r] = (const unsigned char *)kn_wrow(w, o0 + r) + (size_t)b * bsz;
        memcpy(sc + 2 * r, blk[r], 2);
        if (q41) memcpy(sc + 32 + 2 * r, blk[r] + 2, 2);
    }
    const __m128i flip = _mm_set1_epi8(q8 ? (char)0x80 : 0);
    for (int h = 0; h < (q8 ? 2 : 1); h++)
        for (int r = 0; r < HX_PACK_ROWS; r += 4) {
            __m128i x[4];
            for (int i = 0; i < 4; i++)
                x[i] = _mm_xor_si128(
                    _mm_loadu_si128((const __m128i *)(const void *)(blk[r + i] + qoff + 16 * h)),
                    flip);
            const __m128i t0 = _mm_unpacklo_epi32(x[0], x[1]), t1 = _mm_unpacklo_epi32(x[2], x[3]);
            const __m128i t2 = _mm_unpackhi_epi32(x[0], x[1]), t3 = _mm_unpackhi_epi32(x[2], x[3]);
            unsigned char *c = cb + 64 * 4 * h + 4 * r;
            _mm_storeu_si128((__m128i *)(void *)c, _mm_unpacklo_epi64(t0, t1));
            _mm_storeu_si128((__m128i *)(void *)(c + 64), _mm_unpackhi_epi64(t0, t1));
            _mm_storeu_si128((__m128i *)(void *)(c + 128), _mm_unpacklo_epi64(t2, t3));
            _mm_storeu_si128((__m128i *)(void *)(c + 192), _mm_unpackhi_epi64(t2, t3));
        }
}

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
