/* attn_ref.c - the reference attention kernel and cache conversion (attn.h), the definitions
 * every SIMD variant is tested against, and the variant list.
 *
 * Plain C, one key and one element at a time, expf from libm, f16 through hx_f16_to_f32. It
 * follows the same chunked online softmax as the variants (chunks of up to 16 keys inside one
 * block), so only rounding separates them. Napkin math for the reference: per key and head
 * 2 * d_head scalar conversions and 2 * d_head multiply-adds, about 4 ns per key at d_head 64,
 * which is why the variants exist: at 1,000 positions and 9 heads that is 36 us per layer. */
#include "attn.h"

#include <math.h>

#include "backend/kv_quant.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/f16.h"

enum { MAX_D = 256 }; /* the largest d_head the references take */

/* The online-softmax step for one chunk of n keys, given as f32 rows kf and vf (only read),
 * for each of the n_q query heads: m and l are each head's running max and sum, out its running
 * weighted sum of V. Both references feed it (the caches differ only in how rows are read). */
static void chunk_update(const float *q, int32_t n_q, int32_t d, float scale, float softcap,
                         int32_t n, float kf[][MAX_D], float vf[][MAX_D], float *m, float *l,
                         float *out)
{
    for (int32_t g = 0; g < n_q; g++) {
        const float *qg = q + g * d;
        float *og = out + g * d;
        float s[HX_ATTN_CHUNK];
        float mc = m[g];
        for (int32_t j = 0; j < n; j++) {
            float dot = 0.0f;
            for (int32_t i = 0; i < d; i++) dot += qg[i] * kf[j][i];
            s[j] = dot * scale;
            if (softcap > 0.0f) s[j] = softcap * tanhf(s[j] / softcap);
            mc = s[j] > mc ? s[j] : mc;
        }
        const float corr = expf(m[g] - mc);
        float sum = 0.0f;
        for (int32_t j = 0; j < n; j++) {
            s[j] = expf(s[j] - mc);
            sum += s[j];
        }
        l[g] = l[g] * corr + sum;
        m[g] = mc;
        for (int32_t i = 0; i < d; i++) {
            float acc = og[i] * corr;
            for (int32_t j = 0; j < n; j++) acc += s[j] * vf[j][i];
            og[i] = acc;
        }
    }
}

static void state_init(int32_t n_q, int32_t d, float *m, float *l, float *out)
{
    for (int32_t g = 0; g < n_q; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < d; i++) out[g * d + i] = 0.0f;
    }
}

static void state_finish(int32_t n_q, int32_t d, const float *l, float *out)
{
    for (int32_t g = 0; g < n_q; g++)
        for (int32_t i = 0; i < d; i++) out[g * d + i] /= l[g];
}

/* State per head: running max m and sum l; the running weighted sum of V lives in out. Each
 * chunk's K and V rows are converted to f32 (exactly) into a stack buffer, then updated. */
void hx_attn_ref(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
                 int32_t first, int32_t last, float *out)
{
    hx_attn_capped_ref(kv, q, n_q, d_head, scale, 0.0f, first, last, out);
}

void hx_attn_capped_ref(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                        float scale, float softcap, int32_t first, int32_t last, float *out)
{
    const int32_t d = d_head, rs = kv->row_stride;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q];
    float kf[HX_ATTN_CHUNK][MAX_D], vf[HX_ATTN_CHUNK][MAX_D];
    HX_ASSERT(n_q >= 1 && n_q <= HX_ATTN_MAX_Q && first <= last && d <= MAX_D);
    state_init(n_q, d, m, l, out);
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t base;
        n = hx_attn_chunk(kv, pos, last, &base);
        for (int32_t j = 0; j < n; j++)
            for (int32_t i = 0; i < d; i++) {
                kf[j][i] = hx_f16_to_f32(kv->k[base + (size_t)j * rs + i]);
                vf[j][i] = hx_f16_to_f32(kv->v[base + (size_t)j * rs + i]);
            }
        chunk_update(q, n_q, d, scale, softcap, n, kf, vf, m, l, out);
    }
    state_finish(n_q, d, l, out);
}

/* Attention over the dequantized cache: each chunk's K and V rows are dequantized into a
 * stack buffer (16 rows, never the whole cache) and updated as in hx_attn_ref. */
void hx_attn_q_ref(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                   float scale, int32_t first, int32_t last, float *out)
{
    hx_attn_q_capped_ref(kv, q, n_q, d_head, scale, 0.0f, first, last, out);
}

void hx_attn_q_capped_ref(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                          float scale, float softcap, int32_t first, int32_t last, float *out)
{
    const int32_t d = d_head, bt = kv->block_tokens;
    const hx_kv_dtype dt = (hx_kv_dtype)kv->dtype;
    float m[HX_ATTN_MAX_Q], l[HX_ATTN_MAX_Q];
    float kf[HX_ATTN_CHUNK][MAX_D], vf[HX_ATTN_CHUNK][MAX_D];
    HX_ASSERT(n_q >= 1 && n_q <= HX_ATTN_MAX_Q && first <= last);
    HX_ASSERT(d % HX_KVQ_GROUP == 0 && d <= MAX_D && (dt == HX_KV_Q8 || dt == HX_KV_Q4));
    state_init(n_q, d, m, l, out);
    int32_t n = 0;
    for (int32_t pos = first; pos <= last; pos += n) {
        size_t tile;
        int32_t off;
        n = hx_attn_qchunk(kv, pos, last, &tile, &off);
        for (int32_t j = 0; j < n; j++) {
            hx_kvq_dequantize_row(dt, kv->k + tile, bt, off + j, d, kf[j]);
            hx_kvq_dequantize_row(dt, kv->v + tile, bt, off + j, d, vf[j]);
        }
        chunk_update(q, n_q, d, scale, softcap, n, kf, vf, m, l, out);
    }
    state_finish(n_q, d, l, out);
}

void hx_f16_store_ref(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = hx_f32_to_f16(x[i]);
}

/* ---- variant list ---- */

static const hx_attn_variant attn_impls[] = { /* best first; the reference last */
#if defined(__x86_64__)
    { "avx512", HX_ISA_AVX512 | HX_ISA_AVX2, 16, hx_attn_avx512, hx_f16_store_avx512,
      hx_attn_q_avx512, NULL, NULL },
    { "avx2",   HX_ISA_AVX2,                 8,  hx_attn_avx2,   hx_f16_store_avx2,
      hx_attn_q_avx2,   hx_attn_capped_avx2, hx_attn_q_capped_avx2 },
#elif defined(__aarch64__)
    { "neon",   HX_ISA_NEON,                 8,  hx_attn_neon,   hx_f16_store_neon,
      hx_attn_q_neon,   NULL, NULL },
#endif
    { "ref",    HX_ISA_NONE,                 1,  hx_attn_ref,    hx_f16_store_ref,
      hx_attn_q_ref,    hx_attn_capped_ref, hx_attn_q_capped_ref },
};

int hx_attn_variants(unsigned isa, hx_attn_variant *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < HX_COUNTOF(attn_impls); i++) {
        if ((attn_impls[i].isa & ~isa) != 0) continue;
        if (n < max) out[n] = attn_impls[i];
        n++;
    }
    return n;
}
