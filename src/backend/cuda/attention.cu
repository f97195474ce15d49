// attention.cu - a layer's attention on the device (kernels.h): the rotary embedding with the
// KV cache's write, and attention over the paged cache (f16, or 8-/4-bit codes with an f16
// scale and minimum per 32 elements, read in the same loops and converted as loaded).
//
// Decode attention reads f16 K/V through the block table: four warps per (row, head) split the
// context, each lane scoring its own key of a 32-key chunk, then the warp accumulating V with
// lanes on dimensions (an online softmax over the chunks, as the CPU kernels do), and the
// partial states merged at the end; long contexts are also split over blocks. Prefill chunks
// take the flash kernel on the tensor cores.
#include "backend/cuda/kernels.cuh"

namespace {

// ---- the quantized cache (HX_KV_Q8, HX_KV_Q4) ----
//
// backend/kv_quant.h's layout: per (block, layer, kv head) a tile of codes
// [block_tokens][rb] (rb = d_head for Q8, d_head / 2 for Q4: byte i of a group's 16 holds
// element i in its low nibble, 16 + i in its high one), then scales [ng][block_tokens] and
// minimums [ng][block_tokens] in f16 (ng = d_head / 32); an element is m + s * code.
constexpr int32_t KV_F16 = 0, KV_Q8 = 1, KV_Q4 = 2;

struct kvq_row { // one position of one kv head: its codes, and its groups' scales and minimums
    const uint8_t *codes;
    const uint16_t *s, *m; // group g's at [g * stride]
    int32_t stride;
};

__device__ __forceinline__ int32_t kvq_row_bytes(const hx_cuda_kv &kv)
{
    return kv.dtype == KV_Q4 ? kv.d_head / 2 : kv.d_head;
}

__device__ __forceinline__ kvq_row kvq_at(const hx_cuda_kv &kv, const uint16_t *cache,
                                          int32_t block, int32_t layer, int32_t h, int32_t off)
{
    const int32_t bt = kv.block_tokens, rb = kvq_row_bytes(kv), ng = kv.d_head / 32;
    const size_t tile = (size_t)bt * (size_t)(rb + 4 * ng);
    const uint8_t *t =
        (const uint8_t *)cache + (((size_t)block * kv.n_layer + layer) * kv.n_kv_head + h) * tile;
    kvq_row r;
    r.codes = t + (size_t)off * rb;
    r.s = (const uint16_t *)(t + (size_t)bt * rb) + off;
    r.m = r.s + (size_t)ng * bt;
    r.stride = bt;
    return r;
}

// Codes of elements 4j .. 4j + 3 of group g (j < 8) of a KQ row as one word, a byte each.
template <int KQ>
__device__ __forceinline__ uint32_t kvq_codes4(const kvq_row &r, int g, int j)
{
    if (KQ == KV_Q8) return *(const uint32_t *)(r.codes + 32 * g + 4 * j);
    const uint32_t w = *(const uint32_t *)(r.codes + 16 * g + 4 * (j & 3));
    return (j < 4 ? w : w >> 4) & 0x0F0F0F0Fu;
}

// Byte k of w as a float: 2^23 + the byte (the byte in the low bits of the mantissa) less 2^23,
// exact; a byte permute and an add, where a conversion instruction runs at a quarter of their
// rate and the quantized cache's attention converts every code it reads.
__device__ __forceinline__ float byte_f(uint32_t w, int k)
{
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (uint32_t)k)) - 8388608.0f;
}

// Element i of a quantized row.
__device__ __forceinline__ float kvq_get(const hx_cuda_kv &kv, const kvq_row &r, int32_t i)
{
    const int g = i / 32, e = i % 32;
    const uint32_t c = kv.dtype == KV_Q8 ? r.codes[i]
                       : e < 16          ? r.codes[16 * g + e] & 0x0Fu
                                         : r.codes[16 * g + e - 16] >> 4;
    return h2f(r.m[g * r.stride]) + h2f(r.s[g * r.stride]) * (float)c;
}

// Stores element c of position p of head h, x, into a quantized cache: called by all 32 lanes
// of a warp at once with the 32 elements of one group (lane = c % 32), as the CPU's
// hx_kvq_quantize_row does it: m the group's minimum rounded down to f16, s the step to its
// maximum rounded up, codes rounded to nearest against those stored values.
__device__ __forceinline__ void kvq_store(const hx_cuda_kv &kv, uint16_t *cache, int32_t layer,
                                          const int32_t *blocks, int32_t p, int32_t h, int32_t c,
                                          float x)
{
    const int lane = threadIdx.x & 31, g = c / 32;
    const float qmax = kv.dtype == KV_Q8 ? 255.0f : 15.0f;
    float mn = x, mx = x;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float a = __shfl_xor_sync(0xffffffffu, mn, o);
        const float b = __shfl_xor_sync(0xffffffffu, mx, o);
        mn = a < mn ? a : mn;
        mx = b > mx ? b : mx;
    }
    uint16_t mh = __half_as_ushort(__float2half_rn(mn));
    if (h2f(mh) > mn) // the next f16 below
        mh = (uint16_t)(mh == 0 ? 0x8001 : (mh & 0x8000) ? mh + 1 : mh - 1);
    const float m = h2f(mh);
    uint16_t sh = __half_as_ushort(__float2half_rn(__fdiv_rn(mx - m, qmax)));
    if (__fmul_rn(h2f(sh), qmax) < mx - m) sh++;
    const float s = h2f(sh), inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
    float v = __fmul_rn(x - m, inv);
    if (!(v >= 0.0f)) v = 0.0f;
    if (v > qmax) v = qmax;
    const uint32_t code = (uint32_t)(v + 0.5f);
    const kvq_row r = kvq_at(kv, cache, blocks[p / kv.block_tokens], layer, h, p % kv.block_tokens);
    uint8_t *codes = (uint8_t *)r.codes;
    if (kv.dtype == KV_Q8) codes[c] = (uint8_t)code;
    else {
        const uint32_t hi = __shfl_down_sync(0xffffffffu, code, 16);
        if (lane < 16) codes[16 * g + lane] = (uint8_t)(code | hi << 4);
    }
    if (lane == 0) {
        ((uint16_t *)r.s)[g * r.stride] = sh;
        ((uint16_t *)r.m)[g * r.stride] = mh;
    }
}

// A thread per rotated pair: x's n_total pairs, then x2's n_total2 (n_head2 heads). With a
// cache (kv.k not NULL), x2 is K: its rotated pairs are also stored, and n_total3 more threads
// store V and K's unrotated elements (those from n_rot = 2 half on), as kv_write_kernel does.
// What a thread's position decides is found before the wait for the kernel ahead (at decode the
// GEMV of q, k and v): the positions and block tables are staged with the step, in memory
// before that kernel started, and inv_freq is the model's. So the angle's cosine and sine (in
// double, a chain of some hundred dependent instructions) and the cache element's address (the
// position, then its block-table entry: two trips) are ready when x is, and after the wait only
// x (or v) is a trip away (8B decode on an H100: Q4_0 +0.8%, Q4_K +1.5%).
__global__ void rope_kernel(float *x, int32_t n_head, float *x2, int32_t n_head2,
                            const int32_t *pos, int64_t n_total, int64_t n_total2,
                            int32_t d_head, const float *inv_freq, int32_t half, float mscale,
                            int pairs, hx_cuda_kv kv, int32_t layer, const int32_t *blocks,
                            const float *v, int64_t n_total3, float *tab)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total + n_total2 + n_total3) return; // (writes nothing: may end before the wait)
    if (i >= n_total + n_total2) { // V, and K past the rotation, into the cache
        i -= n_total + n_total2;
        const int32_t kvd = n_head2 * d_head, e = (int32_t)(i % kvd);
        const int32_t h = e / d_head, c = e % d_head;
        const size_t at = kv_row_at(kv, layer, blocks, pos[i / kvd], h) + c;
        after_prior();
        kv.v[at] = f16_bits(v[i]);
        if (c >= 2 * half) kv.k[at] = f16_bits(x2[i]);
        return;
    }
    const bool second = i >= n_total;
    if (second) {
        i -= n_total;
        x = x2;
        n_head = n_head2;
    }
    const int32_t p = (int32_t)(i % half);
    const int64_t th = i / half, t = th / n_head;
    float cs, sn;
    rope_angle(pos[t], inv_freq[p], mscale, &cs, &sn);
    if (tab && !second && th == 0) tab[2 * p] = cs, tab[2 * p + 1] = sn; // (row 0, head 0)
    const int32_t i0 = pairs ? 2 * p : p, i1 = pairs ? 2 * p + 1 : p + half;
    const int32_t h = (int32_t)(th % n_head);
    const size_t at = second && kv.k ? kv_row_at(kv, layer, blocks, pos[t], h) : 0;
    after_prior();
    float *r = x + th * d_head;
    const float x0 = r[i0], x1 = r[i1];
    const float y0 = rotated(x0, x1, cs, sn, true), y1 = rotated(x0, x1, cs, sn, false);
    r[i0] = y0;
    r[i1] = y1;
    if (second && kv.k) {
        kv.k[at + i0] = f16_bits(y0);
        kv.k[at + i1] = f16_bits(y1);
    }
}

// Element i of k and of v (element c of head h) into position p's row of the cache, after the
// wait for the kernel ahead, which wrote them; an f16 cache's address is found before it, as
// rope_kernel finds its own (a quantized group's store, a warp's, finds its own after).
__device__ __forceinline__ void kv_write_one(const hx_cuda_kv &kv, int32_t layer,
                                             const int32_t *blocks, int32_t p, int32_t h,
                                             int32_t c, const float *k, const float *v, int64_t i)
{
    if (kv.dtype == KV_F16) {
        const size_t at = kv_row_at(kv, layer, blocks, p, h) + c;
        after_prior();
        kv.k[at] = f16_bits(k[i]);
        kv.v[at] = f16_bits(v[i]);
        return;
    }
    after_prior();
    kvq_store(kv, kv.k, layer, blocks, p, h, c, k[i]);
    kvq_store(kv, kv.v, layer, blocks, p, h, c, v[i]);
}

// A thread per element of k and of v; in a quantized cache the 32 lanes of a warp are one
// group (kv_dim % 32 == 0, so whole warps run or return together).
__global__ void kv_write_kernel(hx_cuda_kv kv, int32_t layer, const int32_t *blocks,
                                const int32_t *pos, const float *k, const float *v,
                                int64_t n_total)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return; // (writes nothing: may end before the wait)
    const int32_t kvd = kv.n_kv_head * kv.d_head;
    const int32_t e = (int32_t)(i % kvd), h = e / kv.d_head, c = e % kv.d_head;
    kv_write_one(kv, layer, blocks, pos[i / kvd], h, c, k, v, i);
}

// kv_write_kernel for rows of several sequences (hx_cuda_rows).
__global__ void kv_write_rows_kernel(hx_cuda_kv kv, int32_t layer,
                                     const __grid_constant__ hx_cuda_rows rows, const float *k,
                                     const float *v, int64_t n_total)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int32_t kvd = kv.n_kv_head * kv.d_head;
    const int32_t e = (int32_t)(i % kvd), h = e / kv.d_head, c = e % kv.d_head;
    const int64_t t = i / kvd;
    kv_write_one(kv, layer, rows.tab[t], *rows.pos[t], h, c, k, v, i);
}

constexpr int ATT_WARPS = 4;
constexpr int ATT_MAX_D = 256;

// Weights f[k] = e^(m_k - M) (0 for an empty state, l_k = 0) that merge N online-softmax
// states (max m_k, sum l_k; stride apart) against their largest max M; returns the merged sum.
template <int N>
__device__ __forceinline__ float merge_weights(const float *m, const float *l, int stride,
                                               float (&f)[N], float *mx_out)
{
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < N; k++) mx = fmaxf(mx, m[k * stride]);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) {
        f[k] = l[k * stride] > 0.0f ? expf(m[k * stride] - mx) : 0.0f;
        sum += l[k * stride] * f[k];
    }
    *mx_out = mx;
    return sum;
}

// What a decode/scalar attention block works on: (row, head) r = blockIdx.x, its row t, the
// kv head, and the keys first..last its row sees; q of the row and head staged in qs.
struct att_row {
    int64_t r, t;
    int32_t h, kvh, first, last;
};

__device__ __forceinline__ att_row att_head(const hx_cuda_kv &kv, int32_t n_head)
{
    att_row a;
    a.r = blockIdx.x;
    a.t = a.r / n_head;
    a.h = (int32_t)(a.r % n_head);
    a.kvh = a.h / (n_head / kv.n_kv_head);
    return a;
}

__device__ __forceinline__ att_row att_begin(const hx_cuda_kv &kv, const float *__restrict__ q,
                                             int32_t n_head, float *qs)
{
    const att_row a = att_head(kv, n_head);
    for (int i = threadIdx.x; i < kv.d_head; i += blockDim.x) qs[i] = q[a.r * kv.d_head + i];
    __syncthreads();
    return a;
}

// The keys row a sees: up to its position `last`, from last - window + 1 when window > 0.
__device__ __forceinline__ void att_keys(att_row *a, int32_t last, int32_t window)
{
    a->last = last;
    a->first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
}

// One block of ATT_WARPS warps per (row, head); warp w takes chunks w, w + ATT_WARPS, ... of 32
// keys (so a long decode context is read by four warps at once), and the warps' partial
// softmax states are merged at the end. Per chunk: lane l scores key c0 + l against q (in
// shared memory), the warp updates its running max and sum, then accumulates V with lane l on
// dimensions l, l + 32, ..., reading the chunk's 32 V rows eight at a time (loads in flight
// together; a key past the end reads the last row with weight 0).
__global__ void __launch_bounds__(32 * ATT_WARPS)
    attention_kernel(hx_cuda_kv kv, int32_t layer, const int32_t *__restrict__ blocks,
                     const float *__restrict__ q, const int32_t *__restrict__ pos,
                     int32_t n_head, float scale, int32_t window, float softcap,
                     float *__restrict__ out)
{
    after_prior();
    constexpr int PER = ATT_MAX_D / 32;
    __shared__ float qs[ATT_MAX_D];
    __shared__ float part[ATT_WARPS][ATT_MAX_D];
    __shared__ float part_m[ATT_WARPS], part_l[ATT_WARPS];
    const int wid = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int32_t d = kv.d_head, bt = kv.block_tokens;
    att_row ar = att_begin(kv, q, n_head, qs);
    att_keys(&ar, pos[ar.t], window);
    const int32_t kvh = ar.kvh, first = ar.first, last = ar.last;
    float acc[PER];
#pragma unroll
    for (int k = 0; k < PER; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const bool vec = (d % 8) == 0;
    for (int32_t c0 = first + 32 * wid; c0 <= last; c0 += 32 * ATT_WARPS) {
        const int32_t p = c0 + lane;
        float s = -INFINITY;
        if (p <= last) {
            const uint16_t *kr = kv.k + kv_index(kv, blocks[p / bt], layer, kvh, p % bt);
            float dot = 0.0f;
            if (kv.dtype != KV_F16) { // element by element: this kernel is the rare fallback
                const kvq_row r = kvq_at(kv, kv.k, blocks[p / bt], layer, kvh, p % bt);
                for (int i = 0; i < d; i++) dot += qs[i] * kvq_get(kv, r, i);
            } else if (vec) {
                for (int i = 0; i < d; i += 8) {
                    const uint4 a = *(const uint4 *)(kr + i);
                    const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        dot += qs[i + 2 * e] * h2f((uint16_t)u[e]) +
                               qs[i + 2 * e + 1] * h2f((uint16_t)(u[e] >> 16));
                }
            } else {
                for (int i = 0; i < d; i++) dot += qs[i] * h2f(kr[i]);
            }
            s = dot * scale;
            if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        }
        const float mc = fmaxf(m, warp_max(s));
        const float corr = expf(m - mc);
        const float e = p <= last ? expf(s - mc) : 0.0f;
        l = l * corr + warp_sum(e);
        m = mc;
#pragma unroll
        for (int k = 0; k < PER; k++) acc[k] *= corr;
#pragma unroll 8
        for (int jj = 0; jj < 32; jj++) {
            const float pj = __shfl_sync(0xffffffffu, e, jj);
            const int32_t pp = c0 + jj <= last ? c0 + jj : last;
            const uint16_t *vr = kv.v + kv_index(kv, blocks[pp / bt], layer, kvh, pp % bt);
            if (kv.dtype != KV_F16) {
                const kvq_row r = kvq_at(kv, kv.v, blocks[pp / bt], layer, kvh, pp % bt);
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    const int i = lane + 32 * k;
                    if (i < d) acc[k] += pj * kvq_get(kv, r, i);
                }
                continue;
            }
#pragma unroll
            for (int k = 0; k < PER; k++) {
                const int i = lane + 32 * k;
                if (i < d) acc[k] += pj * h2f(vr[i]);
            }
        }
    }
    // merge the warps' states: weights e^(m_w - M) against the largest max M
    if (lane == 0) {
        part_m[wid] = m;
        part_l[wid] = l;
    }
#pragma unroll
    for (int k = 0; k < PER; k++)
        if (lane + 32 * k < d) part[wid][lane + 32 * k] = acc[k];
    __syncthreads();
    float mx, f[ATT_WARPS];
    const float inv = 1.0f / merge_weights<ATT_WARPS>(part_m, part_l, 1, f, &mx);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) o += part[w][i] * f[w];
        out[ar.t * (int64_t)n_head * d + (int64_t)ar.h * d + i] = o * inv;
    }
}

// q . a quantized key (KQ): the sum over groups of s * (q . codes) + m * sum(q) (qsum: q's
// group sums), codes loaded 16 bytes at a time.
template <int KQ>
__device__ __forceinline__ float kvq_dot(const kvq_row &r, const float *qs, const float *qsum,
                                         int32_t d)
{
    float dot = 0.0f;
    for (int g = 0; g < d / 32; g++) {
        uint32_t w[8];
        if (KQ == KV_Q8) {
            const uint4 a = *(const uint4 *)(r.codes + 32 * g);
            const uint4 b = *(const uint4 *)(r.codes + 32 * g + 16);
            w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
            w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
        } else {
            const uint4 a = *(const uint4 *)(r.codes + 16 * g);
            const uint32_t lo[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                w[k] = lo[k] & 0x0F0F0F0Fu;
                w[4 + k] = lo[k] >> 4 & 0x0F0F0F0Fu;
            }
        }
        float qc = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float4 qv = *(const float4 *)(qs + 32 * g + 4 * k);
            qc += qv.x * byte_f(w[k], 0) + qv.y * byte_f(w[k], 1) +
                  qv.z * byte_f(w[k], 2) + qv.w * byte_f(w[k], 3);
        }
        dot += h2f(r.s[g * r.stride]) * qc + h2f(r.m[g * r.stride]) * qsum[g];
    }
    return dot;
}

// ---- decode attention split over the context ----
//
// A decode step has a few rows, so one block per (row, head) keeps only n_head blocks busy
// (32 of 132 SMs) and each walks the whole context: at 4,096 keys that was ~0.7 ms a layer
// for 17 MB of cache, ~4 us at the roofline. Here each (row, head) gets DEC_SPLITS blocks of
// ATT_WARPS warps (a short context one block of 8: by_warps); warp g of the DEC_SPLITS *
// ATT_WARPS takes 32-key chunks g, g + 64, ...;
// a lane scores its own key in 16-byte loads, then the warp accumulates V with each lane on
// four adjacent dimensions (8-byte loads). A block merges its warps' softmax states and writes
// one partial state (d sums, max, sum) to scratch; the last of the (row, head)'s blocks to
// finish merges them. It knows by a counter per (row, head): DEC_COUNTERS of them open the
// scratch, the same words for every launch (each leaves them at zero, as it found them), and
// the partial states follow.
constexpr int DEC_SPLITS = 16;
constexpr int64_t DEC_COUNTERS = 4096;
// Warps a decode_split_kernel block: a launch whose rows see 5 to DEC_ONE_BLOCK chunks of 32
// keys (129 to 256 keys: two 4-warp blocks, splits 2 from hx_cuda_attention_splits) takes one
// block of 8 warps a (row, head), with no partial states to merge across blocks (a fence, an
// atomic and two trips to L2); a shorter context is one 4-warp block already (8 warps, half of
// them idle, were slower: 6.35 -> 6.49 us at 128 keys) and a longer one takes blocks of
// ATT_WARPS, up to DEC_SPLITS of them (8 warps at every length were faster over 1-257 keys but
// slower over ~2,000; tenth session). HEARTH_CUDA_ATT_ONE_BLOCK=0: always 4.
constexpr int DEC_ONE_BLOCK = 8;
template <typename F>
void by_warps(int32_t splits, F f)
{
    static const bool off = hx_cuda_switched_off("HEARTH_CUDA_ATT_ONE_BLOCK");
    if (!off && splits * ATT_WARPS == DEC_ONE_BLOCK)
        f(std::integral_constant<int, DEC_ONE_BLOCK>());
    else f(std::integral_constant<int, ATT_WARPS>());
}

// V rows a warp has in flight (divides 32): a quantized cache's, and an f16 cache's with heads
// over 128; an f16 cache's with heads of up to 128 has the chunk's 32 in flight at once (156
// registers, no spill): an 8B Q4_0 decode (H100) 450 -> 460 tok/s over 1-257 keys, 384 -> 386
// over 1,981-2,237. Quantized rows (3 words a row a lane) and wider heads spill at 32.
constexpr int DEC_V_BATCH = 16;
template <int NV, int KQ>
constexpr int dec_v_batch()
{
    return KQ == KV_F16 && NV == 1 ? 32 : DEC_V_BATCH;
}

// The keys' rows of the cache warp g of a decode_split_kernel block will read, asked of L2
// before the wait for the kernel ahead: that kernel (the rope) writes only this step's
// position, and L2 keeps that line coherent. Under programmatic dependent launch the rows
// then stream in while the rope runs, and the loads after the wait find them in L2 instead
// of a round trip to memory each (the K scores, then the V rows in two batches). The same
// chunks as the kernel's loop; only the first of the query heads that share a kv head asks
// (the others read the same rows: with 4 heads a kv head, asking 4 times flooded L2 with
// requests at long contexts, and a 3,121-token decode was 3% slower than not asking).
template <int KQ, int W>
__device__ __forceinline__ void decode_prefetch(const hx_cuda_kv &kv, int32_t layer,
                                                const att_row &ar, int32_t n_head,
                                                const int32_t *blocks, int32_t active, int32_t g)
{
    if (ar.h % (n_head / kv.n_kv_head) != 0) return;
    const int32_t bt = kv.block_tokens;
    for (int32_t p = ar.first + 32 * g + (threadIdx.x & 31); p <= ar.last;
         p += 32 * W * active) {
        const int32_t blk = blocks[p / bt];
        if constexpr (KQ == KV_F16) {
            prefetch_l2(kv.k + kv_index(kv, blk, layer, ar.kvh, p % bt), 2 * kv.d_head);
            prefetch_l2(kv.v + kv_index(kv, blk, layer, ar.kvh, p % bt), 2 * kv.d_head);
        } else {
            prefetch_l2(kvq_at(kv, kv.k, blk, layer, ar.kvh, p % bt).codes, kvq_row_bytes(kv));
            prefetch_l2(kvq_at(kv, kv.v, blk, layer, ar.kvh, p % bt).codes, kvq_row_bytes(kv));
        }
    }
}

// NV: groups of 4 dimensions a lane takes of a V row (1 for heads of up to 128, else 2); KQ: the
// cache's dtype (a quantized key's score is sum over groups of s * (q . codes) + m * sum(q)); W:
// warps a block (by_warps).
template <int NV, int KQ, int W>
__global__ void __launch_bounds__(32 * W)
    decode_split_kernel(hx_cuda_kv kv, int32_t layer, const __grid_constant__ hx_cuda_rows rows,
                        const float *__restrict__ q, int32_t n_head, float scale, int32_t window,
                        float softcap,
                        float *__restrict__ part_out, unsigned *__restrict__ count,
                        float *__restrict__ out, int8_t *__restrict__ xq, float *__restrict__ xd,
                        int prefetch)
{
    static_assert(NV * 128 <= ATT_MAX_D, "a lane's V groups fit a head");
    __shared__ __align__(16) float qs[ATT_MAX_D];
    __shared__ float part[W][ATT_MAX_D];
    __shared__ float part_m[W], part_l[W];
    const int wid = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int32_t d = kv.d_head, bt = kv.block_tokens;
    __shared__ float qsum[ATT_MAX_D / 32]; // quantized K: q summed over each group
    // Everything but q is in memory before the kernel ahead (the rope) starts: the positions
    // and block tables, staged with the step, and the cache rows before this step's. So the
    // row's keys, the block's share of them and the cache block of the warp's first key are
    // found before the wait (with the rows asked of L2: decode_prefetch), and after it only q
    // is a trip to memory away; the wait came first, those were three trips one after another.
    att_row ar = att_head(kv, n_head);
    att_keys(&ar, *rows.pos[ar.t], window);
    const int32_t *__restrict__ blocks = rows.tab[ar.t]; // the row's sequence's block table
    const int32_t kvh = ar.kvh, first = ar.first, last = ar.last;
    // A short context takes fewer blocks: as many as give each warp a chunk, up to DEC_SPLITS
    // (the same count in every block of the row: all read the same position).
    const int32_t chunks = (last - first) / 32 + 1;
    const int32_t active = min(DEC_SPLITS, (chunks + W - 1) / W);
    if ((int32_t)blockIdx.y >= active) return; // (writes nothing: may end before the wait)
    const int32_t g = (int32_t)blockIdx.y * W + wid;
    const int32_t blk0 = first + 32 * g + lane <= last ? blocks[(first + 32 * g + lane) / bt] : 0;
    if (prefetch) decode_prefetch<KQ, W>(kv, layer, ar, n_head, blocks, active, g);
    after_prior();
    for (int i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[ar.r * d + i];
    __syncthreads();
    if constexpr (KQ != KV_F16) {
        for (int g = threadIdx.x; g < d / 32; g += blockDim.x) {
            float t = 0.0f;
            for (int i = 0; i < 32; i++) t += qs[32 * g + i];
            qsum[g] = t;
        }
        __syncthreads();
    }
    float acc[NV][4];
#pragma unroll
    for (int k = 0; k < NV; k++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[k][e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int32_t c0 = first + 32 * g; c0 <= last; c0 += 32 * W * active) {
        const int32_t p = c0 + lane;
        // Lane l's key's cache block; the V loop takes key jj's from lane jj.
        const int32_t blk = c0 == first + 32 * g ? blk0 : p <= last ? blocks[p / bt] : 0;
        float s = -INFINITY;
        if (p <= last) {
            float dot = 0.0f;
            if constexpr (KQ != KV_F16) {
                dot = kvq_dot<KQ>(kvq_at(kv, kv.k, blk, layer, kvh, p % bt), qs, qsum, d);
            } else {
                const uint16_t *kr = kv.k + kv_index(kv, blk, layer, kvh, p % bt);
#pragma unroll 16
                for (int i = 0; i < d; i += 8) { // a head of 128: every load of the key at once
                    const uint4 a = *(const uint4 *)(kr + i);
                    const float4 q0 = *(const float4 *)(qs + i),
                                 q1 = *(const float4 *)(qs + i + 4);
                    const float2 f0 = __half22float2(*(const __half2 *)&a.x);
                    const float2 f1 = __half22float2(*(const __half2 *)&a.y);
                    const float2 f2 = __half22float2(*(const __half2 *)&a.z);
                    const float2 f3 = __half22float2(*(const __half2 *)&a.w);
                    dot += q0.x * f0.x + q0.y * f0.y + q0.z * f1.x + q0.w * f1.y + q1.x * f2.x +
                           q1.y * f2.y + q1.z * f3.x + q1.w * f3.y;
                }
            }
            s = dot * scale;
            if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        }
        const float mc = fmaxf(m, warp_max(s));
        if (mc == -INFINITY) continue; // a chunk past the end (warp-uniform)
        const float corr = expf(m - mc);
        const float e = p <= last ? expf(s - mc) : 0.0f;
        l = l * corr + warp_sum(e);
        m = mc;
#pragma unroll
        for (int k = 0; k < NV; k++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[k][i] *= corr;
        // V rows dec_v_batch() keys at a time, every load issued before the first is used: a loop
        // that multiplied each row as it arrived waited one round trip per key. A key past the
        // end re-reads the chunk's last row with weight 0 (its lane's e).
        const int32_t n_keys = last - c0 + 1 < 32 ? last - c0 + 1 : 32;
        constexpr int VB = dec_v_batch<NV, KQ>();
        if constexpr (KQ != KV_F16) {
            // the same with quantized rows: a lane's 4 dimensions are in one group
            for (int j0 = 0; j0 < n_keys; j0 += VB) {
                uint32_t cb[VB][NV];
                float sb[VB][NV], mb[VB][NV], pb[VB];
#pragma unroll
                for (int u = 0; u < VB; u++) {
                    const int jj = j0 + u, src = jj < n_keys ? jj : n_keys - 1;
                    pb[u] = __shfl_sync(0xffffffffu, e, jj);
                    const int32_t bj = __shfl_sync(0xffffffffu, blk, src);
                    const kvq_row r = kvq_at(kv, kv.v, bj, layer, kvh, (c0 + src) % bt);
#pragma unroll
                    for (int k = 0; k < NV; k++) {
                        const int i = 4 * lane + 128 * k;
                        const bool in = i < d;
                        cb[u][k] = in ? kvq_codes4<KQ>(r, i / 32, (i % 32) / 4) : 0u;
                        sb[u][k] = in ? h2f(r.s[(i / 32) * r.stride]) : 0.0f;
                        mb[u][k] = in ? h2f(r.m[(i / 32) * r.stride]) : 0.0f;
                    }
                }
#pragma unroll
                for (int u = 0; u < VB; u++)
#pragma unroll
                    for (int k = 0; k < NV; k++)
#pragma unroll
                        for (int x = 0; x < 4; x++)
                            acc[k][x] += pb[u] * (mb[u][k] + sb[u][k] * byte_f(cb[u][k], x));
            }
        } else {
            for (int j0 = 0; j0 < n_keys; j0 += VB) {
                uint2 vb[VB][NV];
                float pb[VB];
#pragma unroll
                for (int u = 0; u < VB; u++) {
                    const int jj = j0 + u, src = jj < n_keys ? jj : n_keys - 1;
                    pb[u] = __shfl_sync(0xffffffffu, e, jj);
                    const int32_t bj = __shfl_sync(0xffffffffu, blk, src);
                    const uint16_t *vr = kv.v + kv_index(kv, bj, layer, kvh, (c0 + src) % bt);
#pragma unroll
                    for (int k = 0; k < NV; k++) {
                        const int i = 4 * lane + 128 * k;
                        vb[u][k] = i < d ? *(const uint2 *)(vr + i) : make_uint2(0, 0);
                    }
                }
#pragma unroll
                for (int u = 0; u < VB; u++) {
#pragma unroll
                    for (int k = 0; k < NV; k++) {
                        const float2 a = __half22float2(*(const __half2 *)&vb[u][k].x);
                        const float2 b = __half22float2(*(const __half2 *)&vb[u][k].y);
                        acc[k][0] += pb[u] * a.x, acc[k][1] += pb[u] * a.y;
                        acc[k][2] += pb[u] * b.x, acc[k][3] += pb[u] * b.y;
                    }
                }
            }
        }
    }
    if (lane == 0) {
        part_m[wid] = m;
        part_l[wid] = l;
    }
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int i = 4 * lane + 128 * k;
        if (i < d)
#pragma unroll
            for (int e = 0; e < 4; e++) part[wid][i + e] = acc[k][e];
    }
    __syncthreads();
    float mx, f[W];
    const float sum = merge_weights<W>(part_m, part_l, 1, f, &mx);
    if (active == 1) { // the only block of its (row, head) (a short context): no states to merge
        const float inv = 1.0f / sum;
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < W; w++) o += part[w][i] * f[w];
            out[ar.r * d + i] = o * inv;
            if (xq) round_x(o * inv, ar.r * d + i, (int64_t)gridDim.x * d, xq, xd);
        }
        return;
    }
    float *po = part_out + (ar.r * DEC_SPLITS + blockIdx.y) * (int64_t)(d + 2);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) o += part[w][i] * f[w];
        po[i] = o;
    }
    if (threadIdx.x == 0) {
        po[d] = mx;
        po[d + 1] = sum;
    }
    // Publish this partial; the block that counts last merges all (reading past L1, which
    // may not see the other blocks' writes).
    __threadfence();
    __syncthreads();
    __shared__ unsigned arrived;
    if (threadIdx.x == 0) arrived = atomicAdd(&count[ar.r], 1u);
    __syncthreads();
    if (arrived != (unsigned)active - 1) return;
    __threadfence();
    const float *p = part_out + ar.r * DEC_SPLITS * (int64_t)(d + 2);
    float pm[DEC_SPLITS], pl[DEC_SPLITS], fs[DEC_SPLITS];
#pragma unroll
    for (int k = 0; k < DEC_SPLITS; k++) {
        pm[k] = k < active ? __ldcg(p + k * (d + 2) + d) : -INFINITY;
        pl[k] = k < active ? __ldcg(p + k * (d + 2) + d + 1) : 0.0f;
    }
    const float inv = 1.0f / merge_weights<DEC_SPLITS>(pm, pl, 1, fs, &mx);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int k = 0; k < DEC_SPLITS; k++)
            if (k < active) o += __ldcg(p + k * (d + 2) + i) * fs[k];
        out[ar.r * d + i] = o * inv;
        if (xq) round_x(o * inv, ar.r * d + i, (int64_t)gridDim.x * d, xq, xd); // d % 32 == 0
    }
    if (threadIdx.x == 0) count[ar.r] = 0; // ready for the next launch
}

// ---- prefill attention on the tensor cores ----
//
// Many rows of one sequence (a prompt chunk), flash-attention style: one block of FA_WARPS
// warps per (tile of FA_Q rows, head), each warp owning 16 rows. Q is rounded to f16 straight
// into the warp's MMA operand registers; per tile of FA_K keys the block copies K and V from
// the paged cache into shared memory asynchronously (cp.async, two buffers: the next tile is in
// flight while this one is computed). The scores S = Q K^T (m16n8k16 f16 MMAs, f32
// accumulation) stay in registers, where each thread runs the online softmax of its two rows
// (base-2 exponent, the scale folded in; the row's maximum over the four threads that share
// it; its sum kept per thread and added up once at the end), rescales its part of O and turns
// the probabilities, rounded to f16, into the A operand of O += P V with no trip through
// shared memory (the accumulator's layout of two 8-key tiles is the operand's layout of one
// 16-key step). K is read with ldmatrix, V with ldmatrix.trans. Rows of shared memory are
// padded by 16 bytes so that the eight rows one ldmatrix phase reads fall in distinct banks.
// A 1,024-row chunk at 2,048 keys with 32 heads of 128 (~26 GFLOP of causal multiply-adds):
// 236 us on an H200 (109 TFLOP/s; hx-gpu-kernels), where the first version of this kernel
// (wmma, S, P and O through shared memory, the softmax a row at a time) took 1,744 us.
constexpr int FA_Q = 64, FA_K = 64, FA_WARPS = FA_Q / 16;

template <int D>
constexpr int fa_row() // halves a staged row takes, padded
{
    return D + 8;
}

template <int D>
constexpr size_t fa_smem() // two buffers of a K tile and a V tile
{
    return (size_t)2 * 2 * FA_K * fa_row<D>() * 2;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// c += a b for one 16x8x16 tile (a: 16x16 row-major f16, b: 16x8 column-major f16, c: f32).
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&h;
}

// Eight elements c .. c + 7 (c % 8 == 0) of a KQ row, in f16, as a 16-byte word.
template <int KQ>
__device__ __forceinline__ uint4 kvq_half8(const kvq_row &r, int c)
{
    const int g = c / 32;
    const uint32_t c0 = kvq_codes4<KQ>(r, g, (c % 32) / 4);
    const uint32_t c1 = kvq_codes4<KQ>(r, g, (c % 32) / 4 + 1);
    const float sc = h2f(r.s[g * r.stride]), mn = h2f(r.m[g * r.stride]);
    uint4 o;
    uint32_t *w = &o.x;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t cw = k < 2 ? c0 : c1;
        const int b = 2 * (k & 1);
        w[k] = pack_half2(mn + sc * byte_f(cw, b), mn + sc * byte_f(cw, b + 1));
    }
    return o;
}

// Copies keys [kb, kb + FA_K) of K and V (kv head kvh) into ks/vs, rows of fa_row<D>() halves;
// keys past key_hi become zeros (a zero V row times a zero probability stays zero). A quantized
// cache (KQ) is read and converted by the threads themselves, not copied asynchronously.
template <int D, int KQ>
__device__ __forceinline__ void fa_stage(const hx_cuda_kv &kv, int32_t layer,
                                         const int32_t *blocks, int32_t kvh, int32_t kb,
                                         int32_t key_hi, __half *ks, __half *vs)
{
    constexpr int CH = D / 8; // 16-byte chunks a row
    if constexpr (KQ != KV_F16) {
        for (int i = threadIdx.x; i < FA_K * CH; i += 32 * FA_WARPS) {
            const int j = i / CH, c = (i % CH) * 8;
            const int32_t p = kb + j;
            uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
            if (p <= key_hi) {
                const int32_t blk = blocks[p / kv.block_tokens], off = p % kv.block_tokens;
                kw = kvq_half8<KQ>(kvq_at(kv, kv.k, blk, layer, kvh, off), c);
                vw = kvq_half8<KQ>(kvq_at(kv, kv.v, blk, layer, kvh, off), c);
            }
            *(uint4 *)(ks + j * fa_row<D>() + c) = kw;
            *(uint4 *)(vs + j * fa_row<D>() + c) = vw;
        }
    } else {
        for (int i = threadIdx.x; i < FA_K * CH; i += 32 * FA_WARPS) {
            const int j = i / CH, c = (i % CH) * 8;
            const int32_t p = kb + j;
            const bool ok = p <= key_hi;
            const size_t at =
                ok ? kv_index(kv, blocks[p / kv.block_tokens], layer, kvh, p % kv.block_tokens) + c
                   : 0;
            cp_async16(ks + j * fa_row<D>() + c, kv.k + at, ok);
            cp_async16(vs + j * fa_row<D>() + c, kv.v + at, ok);
        }
    }
}

template <int D, int KQ>
__global__ void __launch_bounds__(32 * FA_WARPS)
    flash_prefill_kernel(hx_cuda_kv kv, int32_t layer, const int32_t *__restrict__ blocks,
                         const float *__restrict__ q, const int32_t *__restrict__ pos,
                         int32_t n_tok, int32_t n_head, float scale, int32_t window,
                         float softcap, float *__restrict__ out)
{
    constexpr int R = fa_row<D>(), NT = FA_K / 8, ND = D / 8; // key tiles, d tiles of 8
    constexpr float LOG2E = 1.4426950408889634f;
    after_prior();
    extern __shared__ __align__(16) unsigned char fa_mem[];
    __half *stage = (__half *)fa_mem; // [2][K, V][FA_K][R]
    __shared__ int32_t range[4];      // lowest first key, highest key, lowest row position, highest first key
    const int tid = threadIdx.x, wid = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // the longest rows first: the last tiles of a causal chunk see the most keys
    const int32_t h = blockIdx.y, kvh = h / (n_head / kv.n_kv_head);
    const int32_t t0 = (int32_t)(gridDim.x - 1 - blockIdx.x) * FA_Q;
    const int32_t n = n_tok - t0 < FA_Q ? n_tok - t0 : FA_Q;
    if (tid == 0) {
        int32_t lo = INT32_MAX, hi = -1, pmin = INT32_MAX, lomax = 0;
        for (int r = 0; r < n; r++) {
            const int32_t p = pos[t0 + r], f = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            lo = f < lo ? f : lo;
            hi = p > hi ? p : hi;
            pmin = p < pmin ? p : pmin;
            lomax = f > lomax ? f : lomax;
        }
        range[0] = lo / FA_K * FA_K;
        range[1] = hi;
        range[2] = pmin;
        range[3] = lomax;
    }
    __syncthreads();
    const int32_t key_lo = range[0], key_hi = range[1], pmin = range[2], lomax = range[3];
    if (key_lo <= key_hi)
        fa_stage<D, KQ>(kv, layer, blocks, kvh, key_lo, key_hi, stage, stage + FA_K * R);
    cp_async_commit();

    // this thread's two rows (g and g + 8 of the warp's 16): positions and first keys
    int32_t rp[2], rlo[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = wid * 16 + g + 8 * i;
        rp[i] = r < n ? pos[t0 + r] : -1;
        rlo[i] = window > 0 && rp[i] - window + 1 > 0 ? rp[i] - window + 1 : 0;
    }
    // Q as A operands, one per 16 columns (rows past the chunk: zeros)
    uint32_t qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = wid * 16 + g + 8 * (i & 1), c = kk * 16 + 2 * t + 8 * (i >> 1);
            float2 v = make_float2(0.0f, 0.0f);
            if (r < n) v = *(const float2 *)(q + ((int64_t)(t0 + r) * n_head + h) * D + c);
            qa[kk][i] = pack_half2(v.x, v.y);
        }
    float o[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl = scale * LOG2E;

    for (int32_t kb = key_lo, it = 0; kb <= key_hi; kb += FA_K, it++) {
        const __half *ks = stage + (it & 1) * 2 * FA_K * R, *vs = ks + FA_K * R;
        if (kb + FA_K <= key_hi) { // the next tile into the other buffer, in flight meanwhile
            __half *nk = stage + ((it + 1) & 1) * 2 * FA_K * R;
            fa_stage<D, KQ>(kv, layer, blocks, kvh, kb + FA_K, key_hi, nk, nk + FA_K * R);
            cp_async_commit();
            cp_async_wait<1>();
        }
        else cp_async_wait<0>();
        __syncthreads();

        // S = Q K^T: s[j] is keys kb + 8j .. + 7 of the warp's 16 rows
        float s[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                // matrices: keys 8j.. at columns 16kk and 16kk + 8, then keys 8j + 8..
                uint32_t b[4];
                ldmatrix_x4(b, ks + (8 * j + (lane & 7) + (lane >> 4) * 8) * R + kk * 16 +
                                   ((lane >> 3) & 1) * 8);
                mma16816(s[j], qa[kk], b[0], b[1]);
                mma16816(s[j + 1], qa[kk], b[2], b[3]);
            }

        // online softmax of the thread's two rows (elements 0, 1: row g; 2, 3: row g + 8)
        const bool open = kb >= lomax && kb + FA_K - 1 <= pmin; // every row sees every key
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[j][e];
                if (softcap > 0.0f) x = softcap * tanhf(x * scale / softcap) * LOG2E;
                else x *= sl;
                if (!open) {
                    const int32_t key = kb + 8 * j + 2 * t + (e & 1);
                    if (key > rp[e >> 1] || key < rlo[e >> 1]) x = -INFINITY;
                }
                s[j][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float corr[2], base[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            base[i] = mx[i] == -INFINITY ? 0.0f : mx[i]; // no key of this row in range yet
            corr[i] = exp2f(m[i] - base[i]);
            m[i] = mx[i];
            l[i] *= corr[i];
        }
        uint32_t pa[FA_K / 16][4];
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] = exp2f(s[j][e] - base[e >> 1]);
                l[e >> 1] += s[j][e];
            }
            pa[j / 2][(j & 1) * 2] = pack_half2(s[j][0], s[j][1]);
            pa[j / 2][(j & 1) * 2 + 1] = pack_half2(s[j][2], s[j][3]);
        }
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[j][0] *= corr[0];
            o[j][1] *= corr[0];
            o[j][2] *= corr[1];
            o[j][3] *= corr[1];
        }
        // O += P V: matrices keys 16kk.. and 16kk + 8.. at columns 8j, then at 8j + 8
#pragma unroll
        for (int kk = 0; kk < FA_K / 16; kk++)
#pragma unroll
            for (int j = 0; j < ND; j += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, vs + (16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8) * R +
                                         8 * j + (lane >> 4) * 8);
                mma16816(o[j], pa[kk], b[0], b[1]);
                mma16816(o[j + 1], pa[kk], b[2], b[3]);
            }
        __syncthreads(); // before the next iteration's copy reuses this buffer
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        const int r = wid * 16 + g + 8 * i;
        if (r >= n) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *dst = out + ((int64_t)(t0 + r) * n_head + h) * D + 2 * t;
#pragma unroll
        for (int j = 0; j < ND; j++)
            *(float2 *)(dst + 8 * j) = make_float2(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
}

template <int D, int KQ>
void flash_prefill_as(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks, const float *q,
                      const int32_t *pos, int64_t n_tok, int32_t n_head, float scale,
                      int32_t window, float softcap, float *out, hx_cuda_stream s)
{
    static bool sized = false; // the opt-in above 48 KiB of shared memory, once per process
    if (!sized) {
        cudaFuncSetAttribute(flash_prefill_kernel<D, KQ>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa_smem<D>());
        sized = true;
    }
    const dim3 grid((unsigned)((n_tok + FA_Q - 1) / FA_Q), (unsigned)n_head);
    launch(flash_prefill_kernel<D, KQ>, grid, 32 * FA_WARPS, fa_smem<D>(), s, *kv, layer, blocks,
           q, pos, (int32_t)n_tok, n_head, scale, window, softcap, out);
}

template <int D>
void flash_prefill(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks, const float *q,
                   const int32_t *pos, int64_t n_tok, int32_t n_head, float scale,
                   int32_t window, float softcap, float *out, hx_cuda_stream s)
{
    auto *run = kv->dtype == KV_Q8   ? flash_prefill_as<D, KV_Q8>
                : kv->dtype == KV_Q4 ? flash_prefill_as<D, KV_Q4>
                                     : flash_prefill_as<D, KV_F16>;
    run(kv, layer, blocks, q, pos, n_tok, n_head, scale, window, softcap, out, s);
}

} // namespace

extern "C" {

void hx_cuda_rope(float *x, int32_t n_head, float *x2, int32_t n_head2, const int32_t *pos,
                  int64_t n_tok, int32_t d_head, const float *inv_freq, int32_t n_rot,
                  float mscale, int pairs, const hx_cuda_kv *kv, int32_t layer,
                  const int32_t *blocks, const float *v, float *tab, hx_cuda_stream s)
{
    const int64_t n = n_tok * n_head * (n_rot / 2), n2 = x2 ? n_tok * n_head2 * (n_rot / 2) : 0;
    const int64_t n3 = kv ? n_tok * n_head2 * d_head : 0;
    const hx_cuda_kv none = {};
    launch(rope_kernel, blocks_for(n + n2 + n3), THREADS, 0, s, x, n_head, x2, n_head2, pos, n,
           n2, d_head, inv_freq, n_rot / 2, mscale, pairs, kv ? *kv : none, layer, blocks, v,
           n3, tab);
}

void hx_cuda_kv_write(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks,
                      const int32_t *pos, const float *k, const float *v, int64_t n_tok,
                      hx_cuda_stream s)
{
    const int64_t n = n_tok * kv->n_kv_head * kv->d_head;
    launch(kv_write_kernel, blocks_for(n), THREADS, 0, s, *kv, layer, blocks, pos, k, v, n);
}

void hx_cuda_kv_write_rows(const hx_cuda_kv *kv, int32_t layer, const hx_cuda_rows *rows,
                           const float *k, const float *v, int64_t n_tok, hx_cuda_stream s)
{
    const int64_t n = n_tok * kv->n_kv_head * kv->d_head;
    launch(kv_write_rows_kernel, blocks_for(n), THREADS, 0, s, *kv, layer, *rows, k, v, n);
}

int hx_cuda_attention_rows_ok(int64_t n_tok, int32_t n_head, int32_t d_head)
{
    return n_tok >= 1 && n_tok <= HX_CUDA_DEC_ROWS && n_tok * n_head <= DEC_COUNTERS &&
           d_head % 8 == 0 && d_head <= ATT_MAX_D;
}

static bool decode_split(int64_t n_tok, int32_t n_head, int32_t d_head)
{
    return n_tok <= HX_CUDA_GEMV_ROWS && hx_cuda_attention_rows_ok(n_tok, n_head, d_head);
}

int64_t hx_cuda_attention_rows_scratch(int64_t n_tok, int32_t n_head, int32_t d_head)
{
    return hx_cuda_attention_rows_ok(n_tok, n_head, d_head)
               ? DEC_COUNTERS + n_tok * n_head * DEC_SPLITS * (int64_t)(d_head + 2)
               : 0;
}

int64_t hx_cuda_attention_scratch(int64_t n_tok, int32_t n_head, int32_t d_head)
{
    return decode_split(n_tok, n_head, d_head)
               ? hx_cuda_attention_rows_scratch(n_tok, n_head, d_head)
               : 0;
}

void hx_cuda_attention_rows(const hx_cuda_kv *kv, int32_t layer, const hx_cuda_rows *rows,
                            const float *q, int64_t n_tok, int32_t n_head, float scale,
                            int32_t window, float softcap, float *scratch, float *out,
                            int8_t *xq, float *xd, int32_t splits, hx_cuda_stream s)
{
    static const int prefetch = !hx_cuda_switched_off("HEARTH_CUDA_ATT_PREFETCH");
    const bool wide = kv->d_head > 128;
    by_warps(splits, [&](auto warps) {
        constexpr int W = decltype(warps)::value;
        const dim3 grid((unsigned)(n_tok * n_head),
                        W != ATT_WARPS ? 1 : splits > 0 && splits < DEC_SPLITS ? splits
                                                                              : DEC_SPLITS);
        auto *kernel = kv->dtype == KV_Q8 ? (wide ? decode_split_kernel<2, KV_Q8, W>
                                                 : decode_split_kernel<1, KV_Q8, W>)
                       : kv->dtype == KV_Q4 ? (wide ? decode_split_kernel<2, KV_Q4, W>
                                                    : decode_split_kernel<1, KV_Q4, W>)
                       : wide ? decode_split_kernel<2, KV_F16, W>
                              : decode_split_kernel<1, KV_F16, W>;
        launch(kernel, grid, 32 * W, 0, s, *kv, layer, *rows, q, n_head, scale, window, softcap,
               scratch + DEC_COUNTERS, (unsigned *)scratch, out, xq, xd, prefetch);
    });
}

void hx_cuda_attention(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks,
                       const float *q, const int32_t *pos, int64_t n_tok, int32_t n_head,
                       float scale, int32_t window, float softcap, float *scratch, float *out,
                       int8_t *xq, float *xd, int32_t splits, hx_cuda_stream s)
{
    if (n_tok >= HX_CUDA_FLASH_ROWS && kv->d_head == 64) {
        flash_prefill<64>(kv, layer, blocks, q, pos, n_tok, n_head, scale, window, softcap, out, s);
        return;
    }
    if (n_tok >= HX_CUDA_FLASH_ROWS && kv->d_head == 128) {
        flash_prefill<128>(kv, layer, blocks, q, pos, n_tok, n_head, scale, window, softcap, out,
                           s);
        return;
    }
    if (decode_split(n_tok, n_head, kv->d_head)) { // the rows of one sequence
        hx_cuda_rows rows;
        for (int64_t t = 0; t < n_tok; t++) {
            rows.tab[t] = blocks;
            rows.pos[t] = pos + t;
        }
        hx_cuda_attention_rows(kv, layer, &rows, q, n_tok, n_head, scale, window, softcap,
                               scratch, out, xq, xd, splits, s);
        return;
    }
    launch(attention_kernel, (unsigned)(n_tok * n_head), 32 * ATT_WARPS, 0, s, *kv, layer,
           blocks, q, pos, n_head, scale, window, softcap, out);
}

int32_t hx_cuda_attention_splits(int64_t n_keys)
{
    const int64_t chunks = (n_keys - 1) / 32 + 1, active = (chunks + ATT_WARPS - 1) / ATT_WARPS;
    return (int32_t)(active < 1 ? 1 : active < DEC_SPLITS ? active : DEC_SPLITS);
}

} // extern "C"

#ifdef HX_CUDA_TIMELINE
HX_CUDA_TIMELINE_READER(attention)
#endif
