/* packed_k_avx2.c - the packed (16-row interleaved) matmul with AVX2 for Q4_K and Q6_K (packed.h);
 * packed_avx2.c takes Q4_0/Q4_1/Q8_0 and hands these two formats here.
 *
 * The same computation as packed_avx512.c's tile_q4k/tile_q6k and in the same float order as the
 * reference (packed.c dot_k), so the results are normally bit-identical to it. AVX2 has no
 * vpdpbusd: its integer dot is vpmaddubsw (unsigned code x signed activation, adjacent pairs
 * summed into int16, saturating) then vpmaddwd by ones (int16 pairs into int32). A 64-byte code
 * chunk is two ymm, rows 0-7 and rows 8-15 of the group ("halves"), and one vpmaddubsw against
 * a row's 4 activation bytes broadcast leaves each output's 4 products in two int16 lanes.
 * Saturation bounds the int16 sums: a Q4_K pair is at most 2 * 15 * 127 = 3810, so a sub-block's
 * 8 vpmaddubsw add up in int16 (<= 30480) before one vpmaddwd; a Q6_K pair is at most
 * 2 * 63 * 127 = 16002, so only 2 may be added (<= 32004) before each vpmaddwd.
 *
 * Registers: 16 ymm. Both formats run "stream" tiles (tile_streams in packed_avx2.c): a stream is one
 * row's term, and every stream runs against both halves in one pass over the codes, each sum in
 * its own variable so nothing spills: Q4_K up to six streams (three rows of two terms), taking
 * one nibble (one sub-block) at a time and loading each chunk twice from L1; Q6_K up to four,
 * since its four assembled code vectors stay live.
 *
 * Napkin math (one row, two terms, per super-block column of a group): Q4_K, 2368 bytes: 256
 * vpmaddubsw + 256 int16 adds + 32 vpmaddwd, 128 code loads + 192 unpack ops, 128 broadcasts,
 * ~100 float ops: ~1000 ops, ~300 cycles at 3-4 a cycle, ~8 bytes a cycle. Q6_K, 3392 bytes: the
 * same 256 vpmaddubsw but 128 int16 adds + 128 vpmaddwd + 128 int32 adds, 192 loads, ~256 ops to
 * assemble the 6-bit codes from ql and qh, ~200 float ops for its 16 sub-blocks: ~1300 ops,
 * ~10 bytes a cycle. Both are above a core's share of DRAM bandwidth with both cores busy. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels_int.h"
#include "packed.h"
#include "packed_avx2.h"

/* The 8 bytes at p (one half's unsigned Q4_K scales or mins) as floats. */
AI __m256 u8_ps(const unsigned char *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p)));
}

/* The 8 bytes at p (one half's signed Q6_K scales) as floats. */
AI __m256 i8_ps(const unsigned char *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const void *)p)));
}

/* The 8 f16 at p (one half's d or dmin) as floats. */
AI __m256 f16_ps(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_load_si128((const void *)p));
}

/* ---- Q4_K ---- */

/* Up to six activation streams against both halves of a group at once, as tile_streams in
 * packed_avx2.c (see there): streams 2t, 2t + 1 are row t's terms (two terms, ns <= 6) or stream
 * t is row t (one term, ns <= RT). Chunk k of chunk group c (8 chunks) holds sub-blocks 2c (low
 * nibbles) and 2c + 1 (high nibbles); one sub-block at a time (the low nibbles of the 8 chunks,
 * then the high ones, reloaded from L1): per chunk 2 loads, 2-4 unpack ops, then per stream a
 * broadcast, 2 vpmaddubsw and 2 adds into an int16 sum 8 vpmaddubsw deep; one vpmaddwd per
 * sub-block (256 S1 + S2 in int32) and one conversion. The min term needs no codes and is summed
 * after them, in packed.h's order. acc[t][h] lane l is output 8h + l of the group against row t. */
AI void tile_q4k_streams(const hx_packed *p, const unsigned char *grp, const int8_t *const q[6],
                         const float *const dx[RT], const float *const s[RT], const int ns,
                         const bool two, __m256 acc[RT][2])
{
    const int64_t n_col = p->n_in / HX_K_N;
    const int nr = two ? ns / 2 : ns;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int t = 0; t < nr; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t col_i = 0; col_i < n_col; col_i++) {
        const unsigned char *col = grp + (size_t)col_i * HX_PACK_Q4K_COL;
        prefetch_col(col, HX_PACK_Q4K_COL, end);
        __m256 fs[RT][2], fm[RT][2];
        for (int t = 0; t < nr; t++) fs[t][0] = fs[t][1] = fm[t][0] = fm[t][1] = _mm256_setzero_ps();
        for (int j = 0; j < 8; j++) {
            const unsigned char *cb = col + HX_PACK_K_CODES + 512 * (j / 2);
            const int64_t e = HX_K_N * col_i + 32 * j; /* first element of sub-block j */
            __m256i x00 = _mm256_setzero_si256(), x01 = x00, x10 = x00, x11 = x00, x20 = x00,
                    x21 = x00, x30 = x00, x31 = x00, x40 = x00, x41 = x00, x50 = x00, x51 = x00;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i v0 = _mm256_load_si256((const void *)(cb + 64 * k));
                const __m256i v1 = _mm256_load_si256((const void *)(cb + 64 * k + 32));
                __m256i w0 = j % 2 == 0 ? _mm256_and_si256(v0, m4)
                                        : _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
                __m256i w1 = j % 2 == 0 ? _mm256_and_si256(v1, m4)
                                        : _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
                STREAM_ACC(q[0] + e + 4 * k, x00, x01);
                if (ns > 1) STREAM_ACC(q[1] + e + 4 * k, x10, x11);
                if (ns > 2) STREAM_ACC(q[2] + e + 4 * k, x20, x21);
                if (ns > 3) STREAM_ACC(q[3] + e + 4 * k, x30, x31);
                if (ns > 4) STREAM_ACC(q[4] + e + 4 * k, x40, x41);
                if (ns > 5) STREAM_ACC(q[5] + e + 4 * k, x50, x51);
            }
            __m256i rs[RT][2];
            stream_row_sums((const __m256i[6][2]){{x00, x01}, {x10, x11}, {x20, x21},
                                                  {x30, x31}, {x40, x41}, {x50, x51}},
                            ns, two, rs);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256 sc = u8_ps(col + HX_PACK_Q4K_SC + 16 * j + 8 * h);
#pragma GCC unroll 4
                for (int t = 0; t < nr; t++) {
                    const __m256 scx = _mm256_mul_ps(sc, _mm256_set1_ps(dx[t][8 * col_i + j]));
                    fs[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rs[t][h]), scx, fs[t][h]);
                }
            }
        }
        for (int j = 0; j < 8; j++)
            for (int h = 0; h < 2; h++) {
                const __m256 m = u8_ps(col + HX_PACK_Q4K_M + 16 * j + 8 * h);
                for (int t = 0; t < nr; t++)
                    fm[t][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(s[t][8 * col_i + j]), fm[t][h]);
            }
        for (int h = 0; h < 2; h++) {
            const __m256 d = f16_ps(col + 16 * h);
            const __m256 dmin = f16_ps(col + HX_PACK_Q4K_DMIN + 16 * h);
            for (int t = 0; t < nr; t++) {
                acc[t][h] = _mm256_fmadd_ps(d, fs[t][h], acc[t][h]);
                acc[t][h] = _mm256_fnmadd_ps(dmin, fm[t][h], acc[t][h]); /* fma(-dmin, fm, acc) */
            }
        }
    }
}

/* ---- Q6_K ---- */

/* The 6-bit Q6_K codes of quarter qt (a constant) from a ql half chunk (low nibbles for quarters
 * 0, 1, high for 2, 3) and a qh half chunk (bits 2 qt, 2 qt + 1): u = nibble | (those bits) << 4. */
AI __m256i q6k_codes(const __m256i vl, const __m256i vh, const int qt)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i lo = qt < 2 ? _mm256_and_si256(vl, m4)
                              : _mm256_and_si256(_mm256_srli_epi16(vl, 4), m4);
    const __m256i hb = qt == 0   ? _mm256_slli_epi16(vh, 4)
                       : qt == 1 ? _mm256_slli_epi16(vh, 2)
                       : qt == 2 ? vh
                                 : _mm256_srli_epi16(vh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hb, m30));
}

/* Per super-block half sh, quarter qt (32 elements: chunks 16 sh + 8 (qt & 1) .. of ql and
 * 8 sh .. of qh) and sub-block i of the quarter (its chunks 4i .. 4i + 3, elements
 * 16 (8 sh + 2 qt + i) ..): the codes of chunks 2 by 2, whose two vpmaddubsw per row and term
 * add in int16, then a vpmaddwd into the int32 sum. The int32 sums start at -32 times the
 * activation sums, which folds the code offset out exactly, as packed_avx512.c does: single
 * term a1 = -32 bsum1 + sum(u q1); two terms a1 = sum(u q1), a2 = -32 (256 bsum1 + bsum2) +
 * sum(u q2), so that 256 a1 + a2 is packed.h's A_j. No int32 overflows on the way: |256 a1| <=
 * 256 * 16 * 63 * 127 < 2^25, |a2| <= 32 * 257 * 2032 + 16 * 63 * 127 < 2^25.
 * Up to four streams run against both halves at once (the stream tile of tile_q4k_streams; the
 * int16 sums hold only two products, so every chunk pair is widened to int32 and four codes are
 * live: 4 streams x 2 halves of sums fit, not 6). Streams 2t, 2t + 1 are row t's terms (two
 * terms) or stream t is row t (one term). */
#define Q6_ACC(x, a0, a1)                                                                         \
    do {                                                                                         \
        const __m256i b0 = bc4(x), b1 = bc4((x) + 4);                                            \
        a0 = _mm256_add_epi32(                                                                   \
            a0, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u00, b0),               \
                                                   _mm256_maddubs_epi16(u10, b1)),              \
                                  ones));                                                        \
        a1 = _mm256_add_epi32(                                                                   \
            a1, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u01, b0),               \
                                                   _mm256_maddubs_epi16(u11, b1)),              \
                                  ones));                                                        \
        __asm__("" : "+x"(a0), "+x"(a1), "+x"(u00), "+x"(u10), "+x"(u01), "+x"(u11));            \
    } while (0)

AI void tile_q6k_streams(const hx_packed *p, const unsigned char *grp, const int8_t *const q[6],
                         const float *const dx[RT], const int16_t *const bs1[RT],
                         const int16_t *const bs2[RT], const int ns, const bool two,
                         __m256 acc[RT][2])
{
    const int64_t n_col = p->n_in / HX_K_N;
    const int nr = two ? ns / 2 : ns;
    const uintptr_t end = (uintptr_t)p->data + (size_t)p->n_groups * p->group_bytes;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < nr; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t col_i = 0; col_i < n_col; col_i++) {
        const unsigned char *col = grp + (size_t)col_i * HX_PACK_Q6K_COL;
        prefetch_col(col, HX_PACK_Q6K_COL, end);
        __m256 fs[RT][2];
        for (int t = 0; t < nr; t++) fs[t][0] = fs[t][1] = _mm256_setzero_ps();
        for (int sh = 0; sh < 2; sh++) {
#pragma GCC unroll 4
            for (int qt = 0; qt < 4; qt++) {
                const unsigned char *ql = col + HX_PACK_K_CODES + 64 * (16 * sh + 8 * (qt & 1));
                const unsigned char *qh = col + HX_PACK_Q6K_QH + 64 * (8 * sh);
                for (int i = 0; i < 2; i++) {
                    const int j = 8 * sh + 2 * qt + i;
                    const int64_t e = HX_K_N * col_i + 16 * j, hs = 16 * col_i + j;
                    /* the -32 code offset folded into the starting sums (above) */
                    __m256i init[4];
                    for (int t = 0; t < nr; t++) {
                        if (two) {
                            init[2 * t] = _mm256_setzero_si256();
                            init[2 * t + 1] =
                                _mm256_set1_epi32(-32 * (256 * bs1[t][hs] + bs2[t][hs]));
                        } else {
                            init[t] = _mm256_set1_epi32(-32 * bs1[t][hs]);
                        }
                    }
                    __m256i x00 = init[0], x01 = init[0], x10 = x00, x11 = x00, x20 = x00,
                            x21 = x00, x30 = x00, x31 = x00;
                    if (ns > 1) x10 = x11 = init[1];
                    if (ns > 2) x20 = x21 = init[2];
                    if (ns > 3) x30 = x31 = init[3];
#pragma GCC unroll 2
                    for (int kp = 0; kp < 2; kp++) {
                        const int k0 = 4 * i + 2 * kp; /* chunks k0, k0 + 1 of the quarter */
                        const unsigned char *l0 = ql + 64 * k0, *g0 = qh + 64 * k0;
                        __m256i u00 = q6k_codes(_mm256_load_si256((const void *)l0),
                                                _mm256_load_si256((const void *)g0), qt);
                        __m256i u10 = q6k_codes(_mm256_load_si256((const void *)(l0 + 64)),
                                                _mm256_load_si256((const void *)(g0 + 64)), qt);
                        __m256i u01 = q6k_codes(_mm256_load_si256((const void *)(l0 + 32)),
                                                _mm256_load_si256((const void *)(g0 + 32)), qt);
                        __m256i u11 = q6k_codes(_mm256_load_si256((const void *)(l0 + 96)),
                                                _mm256_load_si256((const void *)(g0 + 96)), qt);
                        Q6_ACC(q[0] + e + 8 * kp, x00, x01);
                        if (ns > 1) Q6_ACC(q[1] + e + 8 * kp, x10, x11);
                        if (ns > 2) Q6_ACC(q[2] + e + 8 * kp, x20, x21);
                        if (ns > 3) Q6_ACC(q[3] + e + 8 * kp, x30, x31);
                    }
                    const __m256i si[4][2] = {{x00, x01}, {x10, x11}, {x20, x21}, {x30, x31}};
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const __m256 sc = i8_ps(col + HX_PACK_Q6K_SC + 16 * j + 8 * h);
#pragma GCC unroll 4
                        for (int t = 0; t < nr; t++) {
                            const __m256i ai =
                                two ? _mm256_add_epi32(_mm256_slli_epi32(si[2 * t][h], 8),
                                                       si[2 * t + 1][h])
                                    : si[t][h];
                            const __m256 scx = _mm256_mul_ps(sc, _mm256_set1_ps(dx[t][hs / 2]));
                            fs[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai), scx, fs[t][h]);
                        }
                    }
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 d = f16_ps(col + 16 * h);
            for (int t = 0; t < nr; t++) acc[t][h] = _mm256_fmadd_ps(d, fs[t][h], acc[t][h]);
        }
    }
}
#undef Q6_ACC

/* ---- driver ---- */

/* One format and term count: groups outer (a group's codes stay in L1/L2 while every row tile
 * passes over them), row tiles of the format's stream count inner. */
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
            const float *dx[RT], *sr[RT];
            const int16_t *bs1[RT], *bs2[RT];
            for (int t = 0; t < RT; t++) {
                const int64_t rr = r + (t < nr ? t : 0);
                q1[t] = kn_xqs(x, rr);
                q2[t] = two ? kn_xqs(x2, rr) : q1[t];
                dx[t] = two ? kn_xd(x2, rr) : kn_xd(x, rr);
                sr[t] = s + rr * nb;
                bs1[t] = kn_xbsum(x, rr);
                bs2[t] = two ? kn_xbsum(x2, rr) : bs1[t];
            }
            __m256 acc[RT][2];
            const int8_t *q[6];
            stream_ptrs(q1, q2, two, q);
            if (fmt == HX_DT_Q4_K) {
                /* up to six streams: rows in threes with two terms, in fours with one */
                if (two && nr > 3) nr = 3;
                switch (two ? 2 * nr : nr) { /* constant stream counts */
                case 1: tile_q4k_streams(p, grp, q, dx, sr, 1, false, acc); break;
                case 2: tile_q4k_streams(p, grp, q, dx, sr, 2, two, acc); break;
                case 3: tile_q4k_streams(p, grp, q, dx, sr, 3, false, acc); break;
                case 4: tile_q4k_streams(p, grp, q, dx, sr, 4, two, acc); break;
                default: tile_q4k_streams(p, grp, q, dx, sr, 6, true, acc); break;
                }
            } else {
                /* up to four streams: rows in pairs with two terms, in fours with one */
                if (two && nr > 2) nr = 2;
                switch (two ? 2 * nr : nr) { /* constant stream counts */
                case 1: tile_q6k_streams(p, grp, q, dx, bs1, bs2, 1, false, acc); break;
                case 2: tile_q6k_streams(p, grp, q, dx, bs1, bs2, 2, two, acc); break;
                case 3: tile_q6k_streams(p, grp, q, dx, bs1, bs2, 3, false, acc); break;
                default: tile_q6k_streams(p, grp, q, dx, bs1, bs2, 4, two, acc); break;
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

/* One function per format, so each gets its own register allocation. */
static __attribute__((noinline)) void run_q4k(const hx_packed *p, int64_t g0, int64_t g1,
                                              const hx_act *x, const hx_act *x2, const float *s,
                                              int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_K, true);
    else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q4_K, false);
}

static __attribute__((noinline)) void run_q6k(const hx_packed *p, int64_t g0, int64_t g1,
                                              const hx_act *x, const hx_act *x2, const float *s,
                                              int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    if (x2) run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q6_K, true);
    else run(p, g0, g1, x, x2, s, r0, r1, out, ld_out, HX_DT_Q6_K, false);
}

void hx_pmatmul_k_avx2(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                       const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                       int64_t ld_out)
{
    if (p->dtype == HX_DT_Q4_K) {
        run_q4k(p, g0, g1, x, x2, s, r0, r1, out, ld_out);
    } else {
        HX_ASSERT(p->dtype == HX_DT_Q6_K);
        run_q6k(p, g0, g1, x, x2, s, r0, r1, out, ld_out);
    }
}
#endif
