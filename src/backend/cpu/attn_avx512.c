/* attn_avx512.c - attention over the f16 cache (attn.h) with AVX-512 and F16C: d_head is
 * walked 16 floats (one zmm, one vcvtph2ps of 32 bytes) at a time, so d_head % 16 == 0.
 *
 * Per chunk of up to 16 keys and per head: 16 dot products, each d_head/16 FMAs into its own
 * zmm (independent chains, so the FMA latency overlaps across keys), folded to 16 scores in one
 * zmm by a transpose-add tree; then one max, one scalar expf of the correction, a vector exp of
 * the 16 scores and the V update, four zmm accumulators per 64 elements with one broadcast
 * weight per key. Napkin math at d_head 64: a key costs 2 x 4 loads+converts+FMAs (K and V),
 * ~4 cycles, against ~250 for the scalar reference; K/V of a chunk (2 x 2 KiB) come from memory
 * once and from L1 for the other heads of the group.
 * exp: exp_avx512.h. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "attn.h"
#include "base/f16.h"
#include "exp_avx512.h"

/* Eight vectors to their eight sums, in order, in one ymm. */
static __m256 hsum8x8(const __m256 *v)
{
    const __m256 s01 = _mm256_hadd_ps(v[0], v[1]), s23 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 s45 = _mm256_hadd_ps(v[4], v[5]), s67 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 a = _mm256_hadd_ps(s01, s23), b = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

static __m512 load_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* The 16 scaled scores q . k_j of a chunk of n keys; lanes j >= n are -inf. */
static inline __attribute__((always_inline)) __m512
chunk_scores(const float *q, const uint16_t *kc, int32_t rs, int32_t n, int32_t d, float scale)
{
    __m256 half[HX_ATTN_CHUNK];
    for (int32_t j = 0; j < HX_ATTN_CHUNK; j++) {
        if (j >= n) {
            half[j] = _mm256_setzero_ps();
            continue;
        }
        const uint16_t *kj = kc + (size_t)j * rs;
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), load_f16(kj));
        for (int32_t i = 16; i < d; i += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load_f16(kj + i), acc);
        half[j] = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    }
    const __m512 s = _mm512_insertf32x8(_mm512_castps256_ps512(hsum8x8(half)), hsum8x8(half + 8),
                                        1);
    const __mmask16 valid = (__mmask16)((1u << n) - 1u);
    return _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), valid, s, _mm512_set1_ps(scale));
}

/* og = og * corr + sum_j p[j] v_j over n keys. */
static inline __attribute__((always_inline)) void
chunk_accumulate(float *og, const float *p, const uint16_t *vc, int32_t rs, int32_t n, int32_t d,
                 float corr)
{
    const __m512 c = _mm512_set1_ps(corr);
    int32_t i = 0;
    for (; i + 64 <= d; i += 64) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(og + i), c);
        __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(og + i + 16), c);
        __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(og + i + 32), c);
        __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(og + i + 48), c);
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *vj = vc + (size_t)j * rs + i;
            const __m512 w = _mm512_set1_ps(p[j]);
            a0 = _mm512_fmadd_ps(w, load_f16(vj), a0);
            a1 = _mm512_fmadd_ps(w, load_f16(vj + 16), a1);
            a2 = _mm512_fmadd_ps(w, load_f16(vj + 32), a2);
            a3 = _mm512_fmadd_ps(w, load_f16(vj + 48), a3);
        }
        _mm512_storeu_ps(og + i, a0);
        _mm512_storeu_ps(og + i + 16, a1);
        _mm512_storeu_ps(og + i + 32, a2);
        _mm512_storeu_ps(og + i + 48, a3);
    }
    for (; i < d; i += 16) {
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(og + i), c);
        for (int32_t j = 0; j < n; j++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load_f16(vc + (size_t)j * rs + i), a);
        _mm512_storeu_ps(og + i, a);
    }
}

static inline __attribute__((always_inline)) void
attend(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
       int32_t first, int32_t last, float *out)
{
    const int32_t d = d_head, rs = kv->row_stride;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q];
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < d; i += 16) _mm512_storeu_ps(out + g * d + i, _mm512_setzero_ps());
    }
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t base;
        n = hx_attn_chunk(kv, pos, last, &base);
        const uint16_t *kc = kv->k + base, *vc = kv->v + base;
        for (int32_t g = 0; g < n_q; g++) {
            const __m512 s = chunk_scores(q + g * d, kc, rs, n, d, scale);
            const float sm = _mm512_reduce_max_ps(s);
            const float mc = sm > m[g] ? sm : m[g];
            const float corr = expf(m[g] - mc);
            const __m512 p = exp512(_mm512_sub_ps(s, _mm512_set1_ps(mc)));
            float pw[HX_ATTN_CHUNK];
            _mm512_storeu_ps(pw, p);
            l[g] = l[g] * corr + _mm512_reduce_add_ps(p);
            m[g] = mc;
            chunk_accumulate(out + g * d, pw, vc, rs, n, d, corr);
        }
    }
    for (int32_t g = 0; g < n_q; g++) {
        const __m512 lv = _mm512_set1_ps(l[g]);
        for (int32_t i = 0; i < d; i += 16)
            _mm512_storeu_ps(out + g * d + i, _mm512_div_ps(_mm512_loadu_ps(out + g * d + i), lv));
    }
}

/* The common head sizes get their own instance, so the loops over d_head unroll. */
void hx_attn_avx512(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out)
{
    if (d_head == 64) attend(kv, q, n_q, 64, scale, first, last, out);
    else if (d_head == 128) attend(kv, q, n_q, 128, scale, first, last, out);
    else attend(kv, q, n_q, d_head, scale, first, last, out);
}

/* vcvtps2ph rounds to nearest even (imm8), handles subnormals, overflow and inf exactly as
 * hx_f32_to_f16; a NaN keeps its top payload bits (the reference sets only the quiet bit). */
void hx_f16_store_avx512(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = hx_f32_to_f16(x[i]);
}

#endif
