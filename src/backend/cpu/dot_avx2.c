/* dot_avx2.c - the dot kernels with AVX2, FMA and F16C (x86-64 without AVX-512).
 *
 * Integer path, one 32-element block per ymm: the weight codes u (unsigned, in the activations'
 * element order) meet the int8 activations in vpmaddubsw (u8 x s8 -> pairs summed to int16),
 * vpmaddwd with ones widens to 8 int32 lanes, and one cvt + FMA with the block's factor
 * (weight scale x activation scale, taken from a vector of 8 block factors by vpermps) adds the
 * block into a float accumulator. vpmaddubsw saturates above 32767, so codes must stay below
 * 129: Q8_0 and MLX8 use the sign trick instead (|w| against x carrying w's sign), everything
 * else is at most 63. Offsets and min/bias terms use the activation sums, once per 8 blocks.
 *
 * Napkin math (Zen 4 / recent Intel, ~4 ymm ops per cycle): Q4_0 is ~8 ops per 18-byte block =
 * ~2 cycles -> ~33 GB/s at 3.7 GHz, near one core's DRAM read rate; Q8_0 ~8 ops per 34 B; Q4_K
 * ~8 ops per 32 elements (18 B) plus ~25 per super-block. Chunk tails (fewer than 8 blocks) go
 * through zero-padded copies of the scales and sums, never reading past a row. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "kernels_int.h"

/* F16C scalar conversion (exact, as hx_f16_to_f32, without the branches). */
static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* ---- helpers ---- */

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* u (unsigned codes < 129) . x per lane pair-summed to 8 int32 lanes, as floats. */
static inline __m256 udot(__m256i u, __m256i x)
{
    const __m256i p = _mm256_maddubs_epi16(u, x);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* Signed w . x with the sign trick: |w| (unsigned, at most 128) against x with w's sign. */
static inline __m256 sdot(__m256i w, __m256i x)
{
    return udot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

static inline __m256 lane(__m256 f, int i)
{
    return _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(i));
}

/* Activation scales and block sums of blocks b .. b+nbk (nbk <= 8), zero beyond nbk. */
static inline void chunk_x(const float *dx, const int16_t *bs, int nbk, __m256 *vdx, __m256 *vs)
{
    if (nbk == 8) {
        *vdx = _mm256_loadu_ps(dx);
        *vs = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_loadu_si256((const void *)bs),
                                                   _mm256_set1_epi16(1)));
        return;
    }
    float d8[8] = { 0 };
    int16_t s16[16] = { 0 };
    memcpy(d8, dx, (size_t)nbk * sizeof(float));
    memcpy(s16, bs, (size_t)nbk * 2 * sizeof(int16_t));
    *vdx = _mm256_loadu_ps(d8);
    *vs = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_loadu_si256((const void *)s16),
                                               _mm256_set1_epi16(1)));
}

static inline __m256 load_f16x8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const void *)p));
}

/* Q4_0/Q4_1 codes of one block: 16 bytes -> low nibbles (elements 0..15), high (16..31). */
static inline __m256i q4_codes(const uint8_t *qs)
{
    const __m128i v = _mm_loadu_si128((const void *)qs);
    const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(t, _mm256_set1_epi8(0x0F));
}

/* ---- float formats ---- */

float hx_dot_f32_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const float *wr = kn_wrow(w, o), *xr = x->f + r * x->n;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t i = 0; i < w->n_in; i += 32) { /* n_in is a multiple of 32 */
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + i), _mm256_loadu_ps(xr + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + i + 8), _mm256_loadu_ps(xr + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + i + 16), _mm256_loadu_ps(xr + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + i + 24), _mm256_loadu_ps(xr + i + 24), a3);
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

static inline __m256 load_bf16x8(const uint16_t *p)
{
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

#define DOT_HALF(name, load)                                                                  \
    float name(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)                       \
    {                                                                                         \
        const uint16_t *wr = kn_wrow(w, o);                                                   \
        const float *xr = x->f + r * x->n;                                                    \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                            \
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();                            \
        for (int64_t i = 0; i < w->n_in; i += 32) {                                           \
            a0 = _mm256_fmadd_ps(load(wr + i), _mm256_loadu_ps(xr + i), a0);                  \
            a1 = _mm256_fmadd_ps(load(wr + i + 8), _mm256_loadu_ps(xr + i + 8), a1);          \
            a2 = _mm256_fmadd_ps(load(wr + i + 16), _mm256_loadu_ps(xr + i + 16), a2);        \
            a3 = _mm256_fmadd_ps(load(wr + i + 24), _mm256_loadu_ps(xr + i + 24), a3);        \
        }                                                                                     \
        return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));            \
    }
DOT_HALF(hx_dot_f16_avx2, load_f16x8)
DOT_HALF(hx_dot_bf16_avx2, load_bf16x8)
#undef DOT_HALF

/* ---- 32-element blocks ---- */

float hx_dot_q4_0_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_0 *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const int64_t nb = w->n_in / HX_Q4_0_N;
    __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8) {
        const int nbk = nb - b < 8 ? (int)(nb - b) : 8;
        uint16_t dh[8] = { 0 };
        for (int i = 0; i < nbk; i++) dh[i] = wb[b + i].d;
        __m256 vdx, vs;
        chunk_x(kn_xd(x, r) + b, kn_xbsum(x, r) + 2 * b, nbk, &vdx, &vs);
        const __m256 f = _mm256_mul_ps(load_f16x8(dh), vdx);
        off = _mm256_fmadd_ps(f, vs, off);
        for (int i = 0; i < nbk; i++) {
            const __m256i xv = _mm256_loadu_si256((const void *)(q + 32 * (b + i)));
            acc = _mm256_fmadd_ps(udot(q4_codes(wb[b + i].qs), xv), lane(f, i), acc);
        }
    }
    return hsum8(acc) - 8.0f * hsum8(off);
}

float hx_dot_q4_1_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_1 *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const int64_t nb = w->n_in / HX_Q4_1_N;
    __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8) {
        const int nbk = nb - b < 8 ? (int)(nb - b) : 8;
        uint16_t dh[8] = { 0 }, mh[8] = { 0 };
        for (int i = 0; i < nbk; i++) dh[i] = wb[b + i].d, mh[i] = wb[b + i].m;
        __m256 vdx, vs;
        chunk_x(kn_xd(x, r) + b, kn_xbsum(x, r) + 2 * b, nbk, &vdx, &vs);
        const __m256 f = _mm256_mul_ps(load_f16x8(dh), vdx);
        off = _mm256_fmadd_ps(_mm256_mul_ps(load_f16x8(mh), vdx), vs, off);
        for (int i = 0; i < nbk; i++) {
            const __m256i xv = _mm256_loadu_si256((const void *)(q + 32 * (b + i)));
            acc = _mm256_fmadd_ps(udot(q4_codes(wb[b + i].qs), xv), lane(f, i), acc);
        }
    }
    return hsum8(acc) + hsum8(off);
}

float hx_dot_q8_0_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q8_0 *wb = kn_wrow(w, o);
    const int8_t *q = kn_xqs(x, r);
    const float  *dx = kn_xd(x, r);
    const int64_t nb = w->n_in / HX_Q8_0_N;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8) {
        const int nbk = nb - b < 8 ? (int)(nb - b) : 8;
        uint16_t dh[8] = { 0 };
        float d8[8] = { 0 };
        for (int i = 0; i < nbk; i++) dh[i] = wb[b + i].d, d8[i] = dx[b + i];
        const __m256 f = _mm256_mul_ps(load_f16x8(dh), _mm256_loadu_ps(d8));
        for (int i = 0; i < nbk; i++) {
            const __m256i wv = _mm256_loadu_si256((const void *)wb[b + i].qs);
            const __m256i xv = _mm256_loadu_si256((const void *)(q + 32 * (b + i)));
            acc = _mm256_fmadd_ps(sdot(wv, xv), lane(f, i), acc);
        }
    }
    return hsum8(acc);
}

/* ---- K-quants ---- */

/* Factors d*sc_j*dx_j and mins dmin*m_j*dx_j of the 8 sub-blocks of a Q4_K/Q5_K block. */
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

static inline __m256 k_block_sums(const int16_t *bs)
{
    const __m256i h = _mm256_loadu_si256((const void *)bs);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(h, _mm256_set1_epi16(1)));
}

/* Q4_K and Q5_K share the loop; hbits selects the fifth bit (Q5_K) or not. */
static inline float dot_k45(const uint8_t *scales, uint16_t d, uint16_t dmin, const uint8_t *qs,
                            const uint8_t *qh, const int8_t *q, const float *dx,
                            const int16_t *bs, __m256 *acc)
{
    __m256 f, fm;
    k_factors(scales, d, dmin, dx, &f, &fm);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i h = qh ? _mm256_loadu_si256((const void *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const void *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {
            const __m128i s0 = _mm_cvtsi32_si128(2 * c), s1 = _mm_cvtsi32_si128(2 * c + 1);
            const __m256i b0 = _mm256_and_si256(_mm256_srl_epi16(h, s0), one);
            const __m256i b1 = _mm256_and_si256(_mm256_srl_epi16(h, s1), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
        }
        const __m256i x0 = _mm256_loadu_si256((const void *)(q + 64 * c));
        const __m256i x1 = _mm256_loadu_si256((const void *)(q + 64 * c + 32));
        *acc = _mm256_fmadd_ps(udot(lo, x0), lane(f, 2 * c), *acc);
        *acc = _mm256_fmadd_ps(udot(hi, x1), lane(f, 2 * c + 1), *acc);
    }
    return hsum8(_mm256_mul_ps(fm, k_block_sums(bs)));
}

float hx_dot_q4_k_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_k *wb = kn_wrow(w, o);
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++)
        off += dot_k45(wb[b].scales, wb[b].d, wb[b].dmin, wb[b].qs, NULL, kn_xqs(x, r) + HX_K_N * b,
                       kn_xd(x, r) + 8 * b, kn_xbsum(x, r) + 16 * b, &acc);
    return hsum8(acc) - off;
}

float hx_dot_q5_k_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q5_k *wb = kn_wrow(w, o);
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++)
        off += dot_k45(wb[b].scales, wb[b].d, wb[b].dmin, wb[b].qs, wb[b].qh,
                       kn_xqs(x, r) + HX_K_N * b, kn_xd(x, r) + 8 * b, kn_xbsum(x, r) + 16 * b,
                       &acc);
    return hsum8(acc) - off;
}

/* Q6_K: quarter t of half h is one ymm of codes (see dot_ref.c for the bit layout); its 8 lanes
 * are two 16-element sub-blocks, 4 lanes each, so the factor vector holds d * sc_k * dx for
 * sub-blocks k0, k0+1 spread 4 lanes each. The 32 offset goes with the half-block sums. */
float hx_dot_q6_k_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q6_k *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        const float d = f16(wb[b].d);
        for (int h = 0; h < 2; h++) {
            /* g[k] for the 8 sub-blocks of this half: d * sc * dx, dx repeated for each pair */
            const __m256 vsc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                _mm_loadl_epi64((const void *)(wb[b].scales + 8 * h))));
            const __m128 dx4 = _mm_loadu_ps(dx + 8 * b + 4 * h);
            const __m256 vdx = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dx4),
                                                        _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
            const __m256 g = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), vsc), vdx);
            const __m256 s16 = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(
                _mm_loadu_si128((const void *)(bs + 16 * b + 8 * h))));
            off = _mm256_fmadd_ps(g, s16, off);
            const __m256i qh = _mm256_loadu_si256((const void *)(wb[b].qh + 32 * h));
            for (int t = 0; t < 4; t++) {
                const uint8_t *qlt = wb[b].ql + 64 * h + 32 * (t % 2);
                const __m256i ql = _mm256_loadu_si256((const void *)qlt);
                const __m256i lo = t < 2 ? _mm256_and_si256(ql, m4)
                                         : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
                const __m256i hi =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * t)), m2);
                const __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                const int8_t *xt = q + HX_K_N * b + 128 * h + 32 * t;
                const __m256i xv = _mm256_loadu_si256((const void *)xt);
                const __m256i fi = _mm256_add_epi32(spread, _mm256_set1_epi32(2 * t));
                const __m256 f = _mm256_permutevar8x32_ps(g, fi);
                acc = _mm256_fmadd_ps(udot(u, xv), f, acc);
            }
        }
    }
    return hsum8(acc) - 32.0f * hsum8(off);
}

/* ---- MLX affine ---- */

/* MLX8 codes go through the sign trick as u - 128 (the +128 returns with the block sums);
 * MLX4 codes are widened so each byte's two nibbles land in element order. */
static float dot_mlx_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r, int bits)
{
    const uint8_t *wq = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const int64_t nb = w->n_in / 32, gs = w->group_size, n_groups = w->n_in / gs;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i lo4 = _mm256_set1_epi16(0x000F), hi4 = _mm256_set1_epi16(0x00F0);
    __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8) {
        const int nbk = nb - b < 8 ? (int)(nb - b) : 8;
        float s8[8] = { 0 }, b8[8] = { 0 };
        for (int i = 0; i < nbk; i++) {
            const int64_t g = o * n_groups + (b + i) * 32 / gs;
            s8[i] = kn_mlx_sb(w->scales, w->sb_dtype, g);
            b8[i] = kn_mlx_sb(w->biases, w->sb_dtype, g);
        }
        __m256 vdx, vs;
        chunk_x(kn_xd(x, r) + b, kn_xbsum(x, r) + 2 * b, nbk, &vdx, &vs);
        const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(s8), vdx);
        __m256 fb = _mm256_mul_ps(_mm256_loadu_ps(b8), vdx);
        if (bits == 8) fb = _mm256_fmadd_ps(f, _mm256_set1_ps(128.0f), fb);
        off = _mm256_fmadd_ps(fb, vs, off);
        for (int i = 0; i < nbk; i++) {
            const int64_t e = 32 * (b + i);
            const __m256i xv = _mm256_loadu_si256((const void *)(q + e));
            __m256 s;
            if (bits == 8) {
                s = sdot(_mm256_xor_si256(_mm256_loadu_si256((const void *)(wq + e)), flip), xv);
            } else {
                const __m256i t = _mm256_cvtepu8_epi16(_mm_loadu_si128((const void *)(wq + e / 2)));
                const __m256i u = _mm256_or_si256(_mm256_and_si256(t, lo4),
                                                  _mm256_slli_epi16(_mm256_and_si256(t, hi4), 4));
                s = udot(u, xv);
            }
            acc = _mm256_fmadd_ps(s, lane(f, i), acc);
        }
    }
    return hsum8(acc) + hsum8(off);
}

float hx_dot_mlx4_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_mlx_avx2(w, o, x, r, 4);
}

float hx_dot_mlx8_avx2(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_mlx_avx2(w, o, x, r, 8);
}
#endif
