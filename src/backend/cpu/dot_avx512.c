/* dot_avx512.c - the dot kernels with AVX-512 (F, BW, VL, DQ) and VNNI.
 *
 * Integer path. Every quantized format is turned into unsigned codes u (0..15, 0..31, 0..63 or
 * 0..255) laid out in the activations' element order, 64 per zmm, so one vpdpbusd multiplies
 * 64 codes by 64 int8 activations and leaves 16 int32 lanes, each the sum over 4 elements. Two
 * activation blocks share a zmm (lanes 0-7 and 8-15), so the lanes are converted to float and
 * multiplied by a per-lane factor (weight scale x activation scale of the lane's block, spread by
 * one vpermps from a vector of 16 block factors) into a float accumulator; the horizontal sum
 * happens once per row. Weight offsets (Q4_0's 8, Q8_0's 128 after flipping the sign bit, Q6_K's
 * 32) and the min/bias of the affine formats are applied once per 16 blocks with the activation
 * sums: sum_b f_b * S_b, a single vector FMA.
 *
 * Napkin math (Zen 4, one core, ~3.6 GHz; a zmm op occupies two of the four 256-bit pipes and
 * shuffles/shifts share FP1/FP2, so ~1.5 zmm ops per cycle in practice). Per 64 elements: load +
 * insert, shift, and, vpdpbusd, cvt, vpermps, fma = 7 ops ~ 5 cycles. Measured L2-resident:
 * ~0.9 ns per 32 elements for every format, i.e. Q4_0 (18 B/32) ~20 GB/s, Q8_0 (34 B) ~40 GB/s,
 * Q4_K (18 B) ~21 GB/s, Q6_K (26 B) ~26 GB/s, against ~29 GB/s of single-core DRAM streaming.
 * So Q8_0/Q6_K decode is memory bound and the 4.5-bit formats are compute bound at ~65-75% of
 * the roofline: the shuffle work per 64 elements, not bandwidth, is the limit (a weight layout
 * repacked at load would remove the permute and the shift). Blocks are scanned in chunks of 16
 * so the 16 weight scales (f16, strided in memory) are gathered by scalar loads into one
 * vcvtph2ps; row tails use masked loads (no read past the row). Built only with the AVX-512
 * flags and only called when hx_cpu_isa() says HX_ISA_AVX512|HX_ISA_AVX512VNNI (the F32/F16/BF16
 * ones need only HX_ISA_AVX512). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "kernels_int.h"

/* F16C scalar conversion (exact, as hx_f16_to_f32, without the branches). */
static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* ---- helpers ---- */

/* Lanes 0-7 take element 2p of f, lanes 8-15 element 2p+1: the factors of the block pair p. */
static inline __m512 pair_factor(__m512 f, int p)
{
    const __m512i base = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(_mm512_add_epi32(base, _mm512_set1_epi32(2 * p)), f);
}

/* acc += f * (float)(u . x per lane), the step shared by every format. */
static inline __m512 dot_step(__m512 acc, __m512i u, __m512i xv, __m512 f)
{
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, xv);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc);
}

/* Sums of activation blocks b .. b+nbk (nbk <= 16) from the half-block sums, as floats (zero
 * beyond nbk). */
static inline __m512 block_sums(const int16_t *bs, int nbk)
{
    const __mmask32 k = (__mmask32)(nbk >= 16 ? 0xFFFFFFFFu : (1u << (2 * nbk)) - 1);
    const __m512i h = _mm512_maskz_loadu_epi16(k, bs);
    return _mm512_cvtepi32_ps(_mm512_madd_epi16(h, _mm512_set1_epi16(1)));
}

static inline __m512 sum4(const __m512 a[4])
{
    return _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
}

static inline __mmask16 mask16(int nbk) { return (__mmask16)((1u << nbk) - 1); }

/* The first 4 bytes of each of nbk blocks of `stride` bytes from p (lanes past nbk are zero and
 * not read). Every block starts with its f16 scale (Q4_1: scale and min). Scalar loads into a
 * stack array and one vector load measured faster on Zen 4 than vpgatherdd (0.91 vs 1.07 ns per
 * block, L2-resident Q4_0), store-forwarding stall included. */
static inline __m512i gather_heads(const void *p, int stride, int nbk)
{
    uint32_t h[16] = { 0 };
    for (int i = 0; i < nbk; i++) memcpy(&h[i], (const unsigned char *)p + i * stride, 4);
    return _mm512_loadu_si512(h);
}

/* The f16 in the low half of each lane, as floats. */
static inline __m512 low_halves(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }

/* 64 activation bytes of blocks b, b+1; the second one only if two are valid. */
static inline __m512i load_x_pair(const int8_t *q, int two)
{
    return two ? _mm512_loadu_si512(q)
               : _mm512_zextsi256_si512(_mm256_loadu_si256((const void *)q));
}

/* ---- float formats ---- */

float hx_dot_f32_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const float *wr = kn_wrow(w, o), *xr = x->f + r * x->n;
    const int64_t n = w->n_in;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + i), _mm512_loadu_ps(xr + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + i + 16), _mm512_loadu_ps(xr + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + i + 32), _mm512_loadu_ps(xr + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + i + 48), _mm512_loadu_ps(xr + i + 48), a3);
    }
    for (; i < n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + i), _mm512_loadu_ps(xr + i), a0);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* F16 and BF16: 16 halves -> 16 floats per step (vcvtph2ps, or a 16-bit shift for bf16). */
static inline __m512 load_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const void *)p));
}

static inline __m512 load_bf16(const uint16_t *p)
{
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

#define DOT_HALF(name, load)                                                                 \
    float name(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)                      \
    {                                                                                        \
        const uint16_t *wr = kn_wrow(w, o);                                                  \
        const float *xr = x->f + r * x->n;                                                   \
        const int64_t n = w->n_in;                                                           \
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();                           \
        int64_t i = 0;                                                                       \
        for (; i + 32 <= n; i += 32) {                                                       \
            a0 = _mm512_fmadd_ps(load(wr + i), _mm512_loadu_ps(xr + i), a0);                 \
            a1 = _mm512_fmadd_ps(load(wr + i + 16), _mm512_loadu_ps(xr + i + 16), a1);       \
        }                                                                                    \
        for (; i < n; i += 16) a0 = _mm512_fmadd_ps(load(wr + i), _mm512_loadu_ps(xr + i), a0); \
        return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));                                  \
    }
DOT_HALF(hx_dot_f16_avx512, load_f16)
DOT_HALF(hx_dot_bf16_avx512, load_bf16)
#undef DOT_HALF

/* ---- 32-element blocks ---- */

/* Q4_0 codes of blocks w0 (and w1 if `two`): each block's 16 bytes are broadcast to a 256-bit
 * half; the upper 128 bits of each half shift right by 4, so after the mask the half holds
 * elements 0..15 (low nibbles) then 16..31 (high nibbles), the activations' order. */
static inline __m512i q4_codes(const uint8_t *qs0, const uint8_t *qs1, int two)
{
    const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)qs0));
    const __m256i hi = two ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)qs1))
                           : _mm256_setzero_si256();
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(0x0F));
}

/* One chunk of nbk <= 16 blocks of a 32-element format: f holds the 16 block factors, codes(i)
 * the codes of blocks 2p, 2p+1. Inlined with nbk = 16 for whole chunks, so the pair loop unrolls
 * with constant permute indices; two accumulators hide the FMA latency. */
#define CHUNK_PAIRS(nbk, CODES)                                                              \
    for (int p = 0; 2 * p < (nbk); p++) {                                                    \
        const int two = 2 * p + 1 < (nbk);                                                  \
        const __m512i u = CODES;                                                             \
        acc[p & 1] = dot_step(acc[p & 1], u, load_x_pair(q + 32 * (b + 2 * p), two),        \
                              pair_factor(f, p));                                            \
    }

static inline __attribute__((always_inline)) void
q4_0_chunk(const hx_block_q4_0 *wb, const int8_t *q, const float *dx, const int16_t *bs,
           int64_t b, int nbk, __m512 acc[2], __m512 *off)
{
    const __m512 wd = low_halves(gather_heads(wb + b, sizeof *wb, nbk));
    const __m512 f = _mm512_mul_ps(wd, _mm512_maskz_loadu_ps(mask16(nbk), dx + b));
    *off = _mm512_fmadd_ps(f, block_sums(bs + 2 * b, nbk), *off);
    CHUNK_PAIRS(nbk, q4_codes(wb[b + 2 * p].qs, wb[b + 2 * p + two].qs, two))
}

float hx_dot_q4_0_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_0 *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const int64_t nb = w->n_in / HX_Q4_0_N;
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() }, off = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) q4_0_chunk(wb, q, dx, bs, b, 16, acc, &off);
    if (b < nb) q4_0_chunk(wb, q, dx, bs, b, (int)(nb - b), acc, &off);
    const __m512 sum = _mm512_add_ps(acc[0], acc[1]);
    return _mm512_reduce_add_ps(_mm512_fnmadd_ps(_mm512_set1_ps(8.0f), off, sum));
}

static inline __attribute__((always_inline)) void
q4_1_chunk(const hx_block_q4_1 *wb, const int8_t *q, const float *dx, const int16_t *bs,
           int64_t b, int nbk, __m512 acc[2], __m512 *off)
{
    const __m512i v = gather_heads(wb + b, sizeof *wb, nbk); /* d low half, m high half */
    const __m512 vdx = _mm512_maskz_loadu_ps(mask16(nbk), dx + b);
    const __m512 f = _mm512_mul_ps(low_halves(v), vdx);
    const __m512 fm = _mm512_mul_ps(low_halves(_mm512_srli_epi32(v, 16)), vdx);
    *off = _mm512_fmadd_ps(fm, block_sums(bs + 2 * b, nbk), *off);
    CHUNK_PAIRS(nbk, q4_codes(wb[b + 2 * p].qs, wb[b + 2 * p + two].qs, two))
}

float hx_dot_q4_1_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_1 *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const int64_t nb = w->n_in / HX_Q4_1_N;
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() }, off = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) q4_1_chunk(wb, q, dx, bs, b, 16, acc, &off);
    if (b < nb) q4_1_chunk(wb, q, dx, bs, b, (int)(nb - b), acc, &off);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), off));
}

/* Q8_0: the signed codes become unsigned by flipping the sign bit (u = q + 128); the extra
 * 128 * sum(x) per block goes away with the activation sums. */
static inline __m512i q8_codes(const hx_block_q8_0 *w0, const hx_block_q8_0 *w1, int two)
{
    const __m256i lo = _mm256_loadu_si256((const void *)w0->qs);
    const __m256i hi = two ? _mm256_loadu_si256((const void *)w1->qs) : lo;
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                            _mm512_set1_epi8((char)0x80));
}

static inline __attribute__((always_inline)) void
q8_0_chunk(const hx_block_q8_0 *wb, const int8_t *q, const float *dx, const int16_t *bs,
           int64_t b, int nbk, __m512 acc[2], __m512 *off)
{
    const __m512 wd = low_halves(gather_heads(wb + b, sizeof *wb, nbk));
    const __m512 f = _mm512_mul_ps(wd, _mm512_maskz_loadu_ps(mask16(nbk), dx + b));
    *off = _mm512_fmadd_ps(f, block_sums(bs + 2 * b, nbk), *off);
    CHUNK_PAIRS(nbk, q8_codes(wb + b + 2 * p, wb + b + 2 * p + two, two))
}

float hx_dot_q8_0_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q8_0 *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const int64_t nb = w->n_in / HX_Q8_0_N;
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() }, off = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) q8_0_chunk(wb, q, dx, bs, b, 16, acc, &off);
    if (b < nb) q8_0_chunk(wb, q, dx, bs, b, (int)(nb - b), acc, &off);
    const __m512 sum = _mm512_add_ps(acc[0], acc[1]);
    return _mm512_reduce_add_ps(_mm512_fnmadd_ps(_mm512_set1_ps(128.0f), off, sum));
}

/* ---- K-quants: a super-block of 256 is 8 activation blocks ---- */

/* Codes of Q4_K/Q5_K chunk c: its 32 bytes broadcast to both halves, the upper half shifted
 * right by 4: low nibbles (sub-block 2c) then high nibbles (2c+1), the activations' order. */
static inline __m512i k4_codes(const uint8_t *qs)
{
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)qs));
    return _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(0x0F));
}

/* Eight sub-block factors d * sc_j * dx_j and mins dmin * m_j * dx_j of a Q4_K/Q5_K block. */
static inline void k_factors(const uint8_t scales[12], uint16_t d16, uint16_t dmin16,
                             const float *dx, __m256 *f, __m256 *fm)
{
    uint8_t sc[8], m[8];
    kn_k_scales(scales, sc, m);
    uint64_t sc64, m64;
    memcpy(&sc64, sc, 8);
    memcpy(&m64, m, 8);
    const __m256 vsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc64)));
    const __m256 vm  = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64)));
    const __m256 vdx = _mm256_loadu_ps(dx);
    *f  = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16(d16)), vsc), vdx);
    *fm = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16(dmin16)), vm), vdx);
}

/* Sums of the 8 activation blocks of a super-block. */
static inline __m256 k_block_sums(const int16_t *bs)
{
    const __m256i h = _mm256_loadu_si256((const void *)bs);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(h, _mm256_set1_epi16(1)));
}

float hx_dot_q4_k_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_k *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps() };
    __m256 off = _mm256_setzero_ps();
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        __m256 f8, fm;
        k_factors(wb[b].scales, wb[b].d, wb[b].dmin, dx + 8 * b, &f8, &fm);
        off = _mm256_fmadd_ps(fm, k_block_sums(bs + 16 * b), off);
        const __m512 f = _mm512_castps256_ps512(f8);
        for (int c = 0; c < 4; c++) {
            const __m512i xv = _mm512_loadu_si512(q + HX_K_N * b + 64 * c);
            acc[c] = dot_step(acc[c], k4_codes(wb[b].qs + 32 * c), xv, pair_factor(f, c));
        }
    }
    return _mm512_reduce_add_ps(sum4(acc)) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(off));
}

/* Q5_K: Q4_K codes plus the fifth bit: bit 2c of qh[l] for the low half of chunk c, bit 2c+1
 * for the high half, moved to bit 4. */
float hx_dot_q5_k_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q5_k *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const __m512i one = _mm512_set1_epi8(1);
    __m512 acc = _mm512_setzero_ps();
    __m256 off = _mm256_setzero_ps();
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        __m256 f8, fm;
        k_factors(wb[b].scales, wb[b].d, wb[b].dmin, dx + 8 * b, &f8, &fm);
        off = _mm256_fmadd_ps(fm, k_block_sums(bs + 16 * b), off);
        const __m512 f = _mm512_castps256_ps512(f8);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)wb[b].qh));
        for (int c = 0; c < 4; c++) {
            const __m512i shift = _mm512_setr_epi64(2 * c, 2 * c, 2 * c, 2 * c,
                                                    2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1);
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi64(qh, shift), one);
            const __m512i u =
                _mm512_or_si512(k4_codes(wb[b].qs + 32 * c), _mm512_slli_epi64(hb, 4));
            const __m512i xv = _mm512_loadu_si512(q + HX_K_N * b + 64 * c);
            acc = dot_step(acc, u, xv, pair_factor(f, c));
        }
    }
    return _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(off));
}

/* Q6_K: half h of a super-block is two zmm of codes: the 64 bytes ql[64h..) give, masked, the
 * low 4 bits of quarters 0,1 (elements 0..63 of the half) and, shifted by 4, of quarters 2,3;
 * qh[32h..) broadcast and shifted by 2t gives the top 2 bits of quarter t. Lanes 4k..4k+3 of a
 * dpbusd then cover one 16-element sub-block, so the factor vector is d * sc_k * dx spread 4
 * lanes each; the 32 offset is taken off with the half-block activation sums. */
float hx_dot_q6_k_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q6_k *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    const __m512i spread2 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i spread4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc = _mm512_setzero_ps(), off = _mm512_setzero_ps();
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        /* g[k] = d * sc_k * dx of sub-block k (16 elements), k = 0..15 in element order */
        const __m128i sc8 = _mm_loadu_si128((const void *)wb[b].scales);
        const __m512 vsc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8));
        const __m256 dx8 = _mm256_loadu_ps(dx + 8 * b);
        const __m512 vdx = _mm512_permutexvar_ps(spread2, _mm512_castps256_ps512(dx8));
        const __m512 g = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(f16(wb[b].d)), vsc), vdx);
        const __m256i h16 = _mm256_loadu_si256((const void *)(bs + 16 * b));
        const __m512 s16 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(h16));
        off = _mm512_fmadd_ps(g, s16, off);
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(wb[b].ql + 64 * h);
            const __m256i qh32 = _mm256_loadu_si256((const void *)(wb[b].qh + 32 * h));
            const __m512i qh = _mm512_broadcast_i64x4(qh32);
            for (int t = 0; t < 4; t += 2) {
                const __m512i lo = t == 0 ? _mm512_and_si512(ql, m4)
                                          : _mm512_and_si512(_mm512_srli_epi64(ql, 4), m4);
                const __m512i shift = _mm512_setr_epi64(2 * t, 2 * t, 2 * t, 2 * t, 2 * t + 2,
                                                        2 * t + 2, 2 * t + 2, 2 * t + 2);
                const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(qh, shift), m2);
                const __m512i u = _mm512_or_si512(lo, _mm512_slli_epi64(hi, 4));
                const __m512i xv = _mm512_loadu_si512(q + HX_K_N * b + 128 * h + 32 * t);
                const int k0 = 8 * h + 2 * t; /* first of the 4 sub-blocks in this zmm */
                const __m512i fi = _mm512_add_epi32(spread4, _mm512_set1_epi32(k0));
                const __m512 f = _mm512_permutexvar_ps(fi, g);
                acc = dot_step(acc, u, xv, f);
            }
        }
    }
    return _mm512_reduce_add_ps(acc) - 32.0f * _mm512_reduce_add_ps(off);
}

/* ---- MLX affine: w = s_g * u + b_g, groups of 32, 64 or 128 ---- */

/* Scales (or biases) of the groups holding activation blocks b .. b+nbk of row o, one per
 * block: group values are loaded once and spread by vpermps (a group covers gs/32 blocks). */
static inline __m512 mlx_per_block(const void *sb, hx_dtype dt, int64_t g0, int gs, int nbk)
{
    const int per = gs / 32; /* blocks per group: 1, 2 or 4 */
    const int n_g = (nbk + per - 1) / per;
    const __mmask16 k = mask16(n_g);
    __m512 v;
    if (dt == HX_DT_F32) {
        v = _mm512_maskz_loadu_ps(k, (const float *)sb + g0);
    } else {
        const __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)sb + g0);
        v = dt == HX_DT_F16 ? _mm512_cvtph_ps(h)
                            : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (per == 1) return v;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = per == 2 ? _mm512_srli_epi32(lane, 1) : _mm512_srli_epi32(lane, 2);
    return _mm512_permutexvar_ps(idx, v);
}

/* MLX4 codes of 64 elements (32 bytes): element 2i is the low nibble of byte i and 2i+1 the
 * high one, so widening each byte to 16 bits and moving its high nibble to bits 8..11 puts the
 * codes in element order. */
static inline __m512i mlx4_codes(const uint8_t *p, int two)
{
    const __m256i raw = two ? _mm256_loadu_si256((const void *)p)
                            : _mm256_zextsi128_si256(_mm_loadu_si128((const void *)p));
    const __m512i t = _mm512_cvtepu8_epi16(raw);
    return _mm512_or_si512(_mm512_and_si512(t, _mm512_set1_epi16(0x000F)),
                           _mm512_slli_epi16(_mm512_and_si512(t, _mm512_set1_epi16(0x00F0)), 4));
}

static inline __m512i mlx8_codes(const uint8_t *p, int two)
{
    return two ? _mm512_loadu_si512(p)
               : _mm512_zextsi256_si512(_mm256_loadu_si256((const void *)p));
}

static float dot_mlx_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r, int bits)
{
    const uint8_t *wq = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const int64_t nb = w->n_in / 32, gs = w->group_size, n_groups = w->n_in / gs;
    const int64_t sb_bytes = kn_mlx_sb_bytes(w->sb_dtype);
    const void *srow = (const uint8_t *)w->scales + o * n_groups * sb_bytes;
    const void *brow = (const uint8_t *)w->biases + o * n_groups * sb_bytes;
    __m512 acc = _mm512_setzero_ps(), off = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 16) {
        const int nbk = nb - b < 16 ? (int)(nb - b) : 16;
        const int64_t g0 = b * 32 / gs;
        const __m512 vdx = _mm512_maskz_loadu_ps(mask16(nbk), dx + b);
        const __m512 f = _mm512_mul_ps(mlx_per_block(srow, w->sb_dtype, g0, (int)gs, nbk), vdx);
        const __m512 fb = _mm512_mul_ps(mlx_per_block(brow, w->sb_dtype, g0, (int)gs, nbk), vdx);
        off = _mm512_fmadd_ps(fb, block_sums(bs + 2 * b, nbk), off);
        for (int p = 0; 2 * p < nbk; p++) {
            const int two = 2 * p + 1 < nbk;
            const int64_t e = 32 * (b + 2 * p); /* first element */
            const __m512i u = bits == 4 ? mlx4_codes(wq + e / 2, two) : mlx8_codes(wq + e, two);
            acc = dot_step(acc, u, load_x_pair(q + e, two), pair_factor(f, p));
        }
    }
    return _mm512_reduce_add_ps(acc) + _mm512_reduce_add_ps(off);
}

float hx_dot_mlx4_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_mlx_avx512(w, o, x, r, 4);
}

float hx_dot_mlx8_avx512(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_mlx_avx512(w, o, x, r, 8);
}
#endif
