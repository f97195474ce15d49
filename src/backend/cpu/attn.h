/* attn.h - attention of query heads over the paged f16 KV cache, and the f32 -> f16 conversion
 * that fills the cache.
 *
 * Layout read (hx_kv_store, backend.h): K and V are [n_blocks][n_layer][n_kv_head][block_tokens]
 * [d_head] f16. Position p of a sequence lives in block blocks[p / block_tokens] at offset
 * p % block_tokens, and a kv head's positions of a block are contiguous (a chunk of 16 keys is
 * one run of 16 * d_head values). hx_attn_kv holds a layer's and kv head's view of that, by
 * strides, so the kernels do not depend on the layout.
 *
 * One call attends n_q query heads that share a kv head (a GQA group, or part of one) over the
 * positions [first, last]: out[g] = softmax(scale * q[g] K^T) V. Keys are taken a chunk of up to
 * 16 at a time (never across a block boundary) with an online softmax: 16 scores, one max, one
 * exp of the correction and a vector of exps, one rescale of the accumulator per chunk. Each
 * chunk of K and V (16 x d_head x 2 bytes = 4 KiB at d_head 128) is used for every head of the
 * call while it is in L1, so a group's K/V is streamed from memory once.
 *
 * The reference (attn_ref.c) is the definition; SIMD variants change only the summation order,
 * fused multiply-adds and exp (a polynomial within 2 ulp of expf), and are tested to agree within
 * 1e-5 relative to the largest |V| (tests/unit/test_cpu_attention.c). Everything here is pure:
 * no allocation, no state, thread-safe. Out must not overlap q (it is the accumulator).
 *
 * Quantized cache (HX_KV_Q8, HX_KV_Q4; layout in kv_quant.h): the same walk and online softmax,
 * reading the codes directly; nothing is dequantized to memory. With per-group scale s and
 * minimum m, the kernels use the affine form on both sides of a chunk:
 *   score_j = sum_g s_jg * (q_g . c_jg) + sum_g m_jg * sum(q_g)
 *   out_i  += sum_j (p_j s_jg) c_ji    + sum_j p_j m_jg          (g the group of element i)
 * so per key and element the work is one code conversion and one FMA, as for f16, and the scale
 * and minimum terms are vectors across the chunk's 16 keys (hence their key-major layout). The
 * reference (hx_attn_q_ref) dequantizes each row of the chunk with hx_kvq_dequantize_row and runs
 * the f16 reference's arithmetic on it: it is attention over the dequantized cache. */
#ifndef HX_BACKEND_CPU_ATTN_H
#define HX_BACKEND_CPU_ATTN_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define HX_ATTN_CHUNK 16 /* keys per online-softmax step */
#define HX_ATTN_MAX_Q 16 /* query heads per call (callers split larger groups) */

/* One layer's and one kv head's view of the cache. Borrowed pointers. */
typedef struct {
    const uint16_t *k, *v;        /* K, V of position 0 of block 0 for this layer and kv head */
    const int32_t  *blocks;       /* the sequence's block table */
    size_t          block_stride; /* elements from a block to the next (n_layer*bt*kv_dim) */
    int32_t         row_stride;   /* elements from a position to the next (d_head here) */
    int32_t         block_tokens;
} hx_attn_kv;

/* One layer's and kv head's view of a quantized cache (kv_quant.h). Borrowed pointers. */
typedef struct {
    const uint8_t *k, *v;         /* the tile of block 0 for this layer and kv head */
    const int32_t *blocks;        /* the sequence's block table */
    size_t         block_stride;  /* bytes from a block's tile to the next block's */
    int32_t        block_tokens;
    int32_t        dtype;         /* HX_KV_Q8 or HX_KV_Q4 */
} hx_attn_qkv;

/* The chunk of keys that starts at position pos (pos <= last): up to HX_ATTN_CHUNK keys, never
 * past last nor across the end of pos's block. Returns its length and sets *base to the offset,
 * in elements from kv->k (and kv->v), of its first key. Every variant walks the cache this way. */
static inline int32_t hx_attn_chunk(const hx_attn_kv *kv, int32_t pos, int32_t last, size_t *base)
{
    const int32_t bt = kv->block_tokens, off = pos % bt;
    int32_t n = bt - off < last + 1 - pos ? bt - off : last + 1 - pos;
    if (n > HX_ATTN_CHUNK) n = HX_ATTN_CHUNK;
    HX_ASSERT(kv->blocks[pos / bt] >= 0); /* a block a window pool dropped is never read */
    *base = (size_t)kv->blocks[pos / bt] * kv->block_stride + (size_t)off * (size_t)kv->row_stride;
    return n;
}

/* The same walk over a quantized cache: sets *tile to the byte offset (from kv->k and kv->v) of
 * the chunk's block tile and *off to the chunk's first position within it. */
static inline int32_t hx_attn_qchunk(const hx_attn_qkv *kv, int32_t pos, int32_t last,
                                     size_t *tile, int32_t *off)
{
    const int32_t bt = kv->block_tokens, o = pos % bt;
    int32_t n = bt - o < last + 1 - pos ? bt - o : last + 1 - pos;
    if (n > HX_ATTN_CHUNK) n = HX_ATTN_CHUNK;
    HX_ASSERT(kv->blocks[pos / bt] >= 0);
    *tile = (size_t)kv->blocks[pos / bt] * kv->block_stride;
    *off = o;
    return n;
}

/* out[g][i] = sum_j softmax_j(scale * q[g] . k_j) v_j[i] over positions first <= j <= last.
 * q, out: [n_q, d_head] (out is also the running accumulator: it must not overlap q).
 * Requires 1 <= n_q <= HX_ATTN_MAX_Q, first <= last, and d_head a multiple of the variant's
 * d_align. */
typedef void (*hx_attn_fn)(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                           float scale, int32_t first, int32_t last, float *out);

/* The same over a quantized cache: d_head % 32 == 0 (every variant), kv->dtype Q8 or Q4. */
typedef void (*hx_attn_q_fn)(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                             float scale, int32_t first, int32_t last, float *out);

/* The same with attention logit soft-capping (Gemma 2): each scaled score s becomes
 * softcap * tanh(s / softcap) before the softmax (softcap > 0). */
typedef void (*hx_attn_capped_fn)(const hx_attn_kv *kv, const float *q, int32_t n_q,
                                  int32_t d_head, float scale, float softcap, int32_t first,
                                  int32_t last, float *out);
typedef void (*hx_attn_q_capped_fn)(const hx_attn_qkv *kv, const float *q, int32_t n_q,
                                    int32_t d_head, float scale, float softcap, int32_t first,
                                    int32_t last, float *out);

/* y[i] = f16(x[i]) with round to nearest even, n elements (the cache write). Every variant gives
 * the bits of hx_f32_to_f16 for every non-NaN input; a NaN stays a NaN (payload may differ). */
typedef void (*hx_f16_store_fn)(const float *x, uint16_t *y, int64_t n);

typedef struct {
    const char     *name;    /* "avx512", "avx2", "ref" */
    unsigned        isa;     /* HX_ISA_* bits it needs; 0 for the reference */
    int32_t         d_align; /* d_head must be a multiple of this for attend */
    hx_attn_fn      attend;
    hx_f16_store_fn store;
    hx_attn_q_fn    attend_q; /* quantized cache (Q8 and Q4), any d_head % 32 == 0 */
    /* Soft-capped scores (Gemma 2), f16 and quantized caches; NULL where the variant has no
     * tanh (a capped model then takes the next variant that has one). */
    hx_attn_capped_fn   attend_capped;
    hx_attn_q_capped_fn attend_q_capped;
} hx_attn_variant;

/* The variants this CPU can run under isa mask `isa`, best first, the reference last; writes up
 * to max of them to out and returns how many there are. */
int hx_attn_variants(unsigned isa, hx_attn_variant *out, int max);

/* The variants themselves (tests, benchmarks). The _avx2 and _avx512 ones exist only in x86-64
 * builds, the _neon ones only in AArch64 builds. */
void hx_attn_ref(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
                 int32_t first, int32_t last, float *out);
void hx_attn_avx2(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
                  int32_t first, int32_t last, float *out);
void hx_attn_avx512(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out);
void hx_attn_neon(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head, float scale,
                  int32_t first, int32_t last, float *out);
void hx_attn_q_ref(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                   float scale, int32_t first, int32_t last, float *out);
void hx_attn_q_avx2(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out);
void hx_attn_q_avx512(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                      float scale, int32_t first, int32_t last, float *out);
void hx_attn_q_neon(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                    float scale, int32_t first, int32_t last, float *out);
/* With attention logit soft-capping (Gemma 2): each scaled score s becomes
 * softcap * tanh(s / softcap) before the softmax; softcap 0 is hx_attn_ref / hx_attn_q_ref. The
 * AVX2 ones take tanh from exp256 (exp_avx2.h, ~3e-7 absolute) and agree with the references
 * within the same tolerance as the uncapped ones (measured ~2e-6 of the largest |V|); AVX-512
 * and NEON have none yet (an AVX-512 machine runs the AVX2 ones). */
void hx_attn_capped_ref(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                        float scale, float softcap, int32_t first, int32_t last, float *out);
void hx_attn_q_capped_ref(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                          float scale, float softcap, int32_t first, int32_t last, float *out);
void hx_attn_capped_avx2(const hx_attn_kv *kv, const float *q, int32_t n_q, int32_t d_head,
                         float scale, float softcap, int32_t first, int32_t last, float *out);
void hx_attn_q_capped_avx2(const hx_attn_qkv *kv, const float *q, int32_t n_q, int32_t d_head,
                           float scale, float softcap, int32_t first, int32_t last, float *out);
void hx_f16_store_ref(const float *x, uint16_t *y, int64_t n);
void hx_f16_store_avx2(const float *x, uint16_t *y, int64_t n);
void hx_f16_store_avx512(const float *x, uint16_t *y, int64_t n);
void hx_f16_store_neon(const float *x, uint16_t *y, int64_t n);

#endif
