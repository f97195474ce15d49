// gemv.cu - the matrix-vector products of decode (kernels.h: hx_cuda_gemv, hx_cuda_gemv_routed,
// hx_cuda_quantize_x).
//
// Napkin math that shaped them. Decode is a GEMV over every weight once per step: at batch 1
// an 8B Q4_0 model reads ~4.7 GB per token, ~1 ms at the H200's ~4.5 TB/s, while its 16 GFLOP
// take ~0.2 ms on the CUDA cores even as plain FMAs; so the GEMV spends its effort on memory
// parallelism (a block of four warps per four output rows, its threads on adjacent 8-element
// slices of the rows' length, every row of the batch applied to each dequantized slice while
// it is in registers). Prefill is matrix bound: weights are dequantized to f16 in row chunks
// (kernels.cu) and multiplied by cuBLAS on the tensor cores (cuda_backend.c).
#include <limits.h>
#include <stdio.h>

#include "backend/cuda/kernels.cuh"

namespace {

// Before it waits for the kernel ahead (after_prior), a GEMV block asks L2 for its rows of the
// weight, which nothing in flight writes. Under programmatic dependent launch the block is
// resident while that kernel (an rmsnorm, the rope, attention, the GLU: short and latency
// bound, using little of the memory's bandwidth) runs, so a single-wave GEMV's weights stream
// in during it rather than after. Before sm_90 the block starts only once the kernel ahead has
// ended, and nothing is asked.
__device__ __forceinline__ void prefetch_span(const void *p, int64_t bytes)
{
    const char *c = (const char *)p;
    for (int64_t off = (int64_t)threadIdx.x * 128; off < bytes; off += (int64_t)blockDim.x * 128)
        prefetch_line(c + off);
    if (threadIdx.x == 0 && bytes > 0) prefetch_line(c + bytes - 1); // p not at a line's start
}

__device__ __forceinline__ void prefetch_rows(const hx_cuda_wmat &w, int64_t o0, int rows)
{
    const int64_t n = o0 + rows < w.n_out ? rows : w.n_out - o0;
    prefetch_span((const uint8_t *)w.q + o0 * w.row_bytes, n * w.row_bytes);
    if (w.scales) { // per-group scales (and offsets) of those rows
        const int64_t per_row = w.n_in / w.group_size * (w.sb_dtype == HX_DT_F32 ? 4 : 2);
        prefetch_span((const uint8_t *)w.scales + o0 * per_row, n * per_row);
        if (w.biases) prefetch_span((const uint8_t *)w.biases + o0 * per_row, n * per_row);
    }
}

// Elements [8 j, 8 j + 8) of row o of a float weight (16 or 32 bytes): the float GEMV's unit,
// so that the 32 lanes of a warp read 256 consecutive elements of a row (their weight bytes
// adjacent, their activations one contiguous kilobyte). Same values as sub32.
template <int DT>
__device__ __forceinline__ void sub8(const hx_cuda_wmat &w, int64_t o, int64_t j, float v[8])
{
    const uint8_t *row = (const uint8_t *)w.q + o * w.row_bytes;
    if (DT == HX_DT_F32) {
        const float4 *p = (const float4 *)(row + j * 32);
        const float4 a = p[0], b = p[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
        v[7] = b.w;
    } else if (DT == HX_DT_F16 || DT == HX_DT_BF16) {
        const uint4 a = *(const uint4 *)(row + j * 16);
        const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint16_t lo = (uint16_t)u[k], hi = (uint16_t)(u[k] >> 16);
            v[2 * k] = DT == HX_DT_F16 ? h2f(lo) : bf2f(lo);
            v[2 * k + 1] = DT == HX_DT_F16 ? h2f(hi) : bf2f(hi);
        }
    }
}

constexpr int GEMV_WARPS = 4;     // warps per block, splitting the length of its rows
constexpr int GEMV_ROWS = 4; // output rows per block, sharing each activation load
constexpr int POST_ROWS = 8; // the most output rows of a one-row GEMV's block (post_slots)

// A routed launch (hx_cuda_gemv_routed): pair p = blockIdx.y multiplies the weight
// table[ids[p]] by row p / x_div of x, into row p of job[0].out.
struct gemv_route {
    const int32_t      *ids;
    const hx_cuda_wmat *table;
    int                 x_div;
};

// The GEMVs of one launch (hx_cuda_gemv): job k's blocks start at block start[k].
struct gemv_set {
    hx_cuda_gemv_job  job[HX_CUDA_GEMV_SET];
    hx_cuda_gemv_post post[HX_CUDA_GEMV_SET]; // at one row (pos NULL: none)
    uint32_t          start[HX_CUDA_GEMV_SET];
    int              n;
    gemv_route        route; // ROUTED kernels only
};
static_assert(HX_CUDA_GEMV_SET == 3, "gemv_job picks among three");

// The job of group b of ROWS output rows (by default this block's), and its first output row.
__device__ __forceinline__ int gemv_index(const gemv_set &set, uint32_t b)
{
    int j = 0;
#pragma unroll
    for (int k = 1; k < HX_CUDA_GEMV_SET; k++)
        if (k < set.n && b >= set.start[k]) j = k;
    return j;
}

template <int ROWS = GEMV_ROWS>
__device__ __forceinline__ hx_cuda_gemv_job gemv_job(const gemv_set &set, int64_t *o0,
                                                     uint32_t b = blockIdx.x)
{
    const int j = gemv_index(set, b);
    *o0 = (int64_t)(b - set.start[j]) * ROWS;
    return j == 0 ? set.job[0] : j == 1 ? set.job[1] : set.job[2];
}

// Group b's post (no pos: none).
__device__ __forceinline__ const hx_cuda_gemv_post &gemv_post(const gemv_set &set,
                                                              uint32_t b = blockIdx.x)
{
    return set.post[gemv_index(set, b)];
}

// The block's job as gemv_job gives it or, ROUTED, as its pair's route says: the weight its
// expert's (read after the wait for the kernel ahead, which wrote the ids), the output and x
// moved to the pair's rows (one row of x: R is 1).
template <bool ROUTED, int ROWS, typename XQ, typename XD>
__device__ __forceinline__ hx_cuda_gemv_job gemv_job_of(const gemv_set &set, int64_t *o0, XQ *xq,
                                                        XD *xd)
{
    if constexpr (ROUTED) {
        after_prior();
        const int p = (int)blockIdx.y;
        hx_cuda_gemv_job job = set.job[0];
        job.w = set.route.table[set.route.ids[p]];
        job.out += (int64_t)p * job.w.n_out;
        *o0 = (int64_t)blockIdx.x * ROWS;
        const int64_t row = p / set.route.x_div;
        *xq += row * job.w.n_in;
        *xd += row * (job.w.n_in / 32);
        return job;
    } else {
        return gemv_job<ROWS>(set, o0);
    }
}

// ---- a one-row GEMV's post: the rope and the cache write (hx_cuda_gemv_post) ----
//
// The rope kernel after the q, k and v GEMV cost a launch a layer (~2.2 us of an 8B Q4_0
// layer's ~67 on an H100, its work mostly done before its wait). Joined here: 8B Q4_0 decode on
// an H100 +1.6-2.6% (the streamed GEMV; the wide one +0.3%), 1B +1-6%, 8B Q4_K no change.
// With (i, i + d/2) pairs (split posts, below): Qwen2.5-7B Q4_0 +1.2-1.3%, 8B MLX 4-bit -0.1 to
// -0.5% (within the runs' spread) on an H100.
// At one row the GEMV's block has both rows of a pair (2i, 2i + 1): every block's rows start at
// an even row, and thread k of the store holds row o0 + k while the warps' partial sums of row
// o0 + (k ^ 1) are beside it in shared memory.
// What a row's position decides (the angle, in double, and the cache element's address through
// the block table) is found before the wait for the kernel ahead, as the rope kernel finds it,
// and kept in shared memory (not in registers, which bound how many GEMV blocks an SM holds).
// The angle is read from the table the step's first rope kernel left where there is one
// (hx_cuda_gemv_post.tab): computed here, its double-precision chain held the q/k/v GEMV's
// first block from its wait ~1.2 us a layer (8B Q4_0, H100, bench/gpu/timeline.py).

// Row o0 + k's rotation and cache element, for thread k of the store.
struct row_post {
    float   cs, sn;
    int64_t at;  // the cache element (-1: none)
    int32_t rot; // whether the row is rotated
};

// The posts of a block's first POST_GROUPS groups of rows (a streamed GEMV's block takes several).
constexpr int POST_GROUPS = 4;

__device__ __forceinline__ row_post (&post_slots())[POST_GROUPS][POST_ROWS]
{
    __shared__ row_post slot[POST_GROUPS][POST_ROWS];
    return slot;
}

// Row k of the group of rows at o0 (a post's split: rows 4j..4j+3 and half + 4j.. of a head,
// the pairs (i, i + half) of a head's first 4 and last 4 rows).
__device__ __forceinline__ int64_t group_row(const hx_cuda_gemv_post &p, int64_t o0, int k)
{
    if (!p.pos || !p.split) return o0 + k;
    const int64_t h = o0 / p.d_head, c0 = o0 % p.d_head;
    return h * p.d_head + c0 / 2 + (k & 3) + (k >> 2) * p.half;
}

// Row k of the group of rows at o0 (group_row; o0 + k where !SPLIT: kernels other than the
// streamed one never get a split post), under post p of a one-row launch: its rotation and cache
// element into post_slots()[g][k]. Nothing where p has no post or the row is past n_out.
template <bool SPLIT>
__device__ __forceinline__ void post_find(const hx_cuda_gemv_post &p, int64_t n_out, int64_t o0,
                                          int k, int g)
{
    const bool split = SPLIT && p.split;
    const int64_t o = SPLIT ? group_row(p, o0, k) : o0 + k;
    if (!p.pos || o >= n_out) return;
    const int32_t pos = *p.pos, c = (int32_t)(o % p.d_head), h = (int32_t)(o / p.d_head);
    const int32_t i = split ? c % p.half : c / 2; // the pair's frequency
    row_post t = {1.0f, 0.0f, -1, 0};
    if (p.inv_freq && (split || i < p.half)) {
        if (p.tab) t.cs = p.tab[2 * i], t.sn = p.tab[2 * i + 1];
        else rope_angle(pos, p.inv_freq[i], p.mscale, &t.cs, &t.sn);
        t.rot = 1;
    }
    if (p.cache) t.at = (int64_t)kv_row_at(p.kv, p.layer, p.blocks, pos, h) + c;
    post_slots()[g][k] = t;
}

// Thread k < rows finds row o0 + k's post, for the block's only group.
__device__ __forceinline__ void post_before(const hx_cuda_gemv_post &p, int64_t n_out, int64_t o0,
                                            int rows)
{
    if ((int)threadIdx.x < rows) post_find<false>(p, n_out, o0, (int)threadIdx.x, 0);
}

// Output row o (thread k's) with sum s, its pair's row o2 summing to s2 (o the pair's first
// when first): rotated, written, and stored into the cache, as the rope and cache-write kernels
// would after a plain write.
__device__ __forceinline__ void post_put(const hx_cuda_gemv_job &job, const hx_cuda_gemv_post &p,
                                         int64_t o, int64_t o2, bool first, const row_post &r,
                                         float s, float s2)
{
    float y = s + (job.bias ? job.bias[o] : 0.0f);
    if (r.rot) {
        const float y2 = s2 + (job.bias ? job.bias[o2] : 0.0f);
        y = first ? rotated(y, y2, r.cs, r.sn, true) : rotated(y2, y, r.cs, r.sn, false);
    }
    job.out[o] = y;
    if (r.at >= 0) p.cache[r.at] = f16_bits(y);
}

// The start of a GEMV block of ROWS output rows over a block format: its job (gemv_job_of),
// then, unless ROUTED (whose wait came before it read the ids), its rows asked of L2, its post
// found (post_before) and the wait for the kernel ahead.
template <bool ROUTED, int ROWS = GEMV_ROWS, typename XQ, typename XD>
__device__ __forceinline__ hx_cuda_gemv_job gemv_begin(const gemv_set &set, int64_t *o0, XQ *xq,
                                                       XD *xd)
{
    const hx_cuda_gemv_job job = gemv_job_of<ROUTED, ROWS>(set, o0, xq, xd);
    if constexpr (!ROUTED) {
        prefetch_rows(job.w, *o0, ROWS);
        post_before(gemv_post(set), job.w.n_out, *o0, ROWS);
        after_prior();
    }
    return job;
}

// Output row o of batch row r, the sum s of its products: with the job's bias, into out (and
// added into acc).
__device__ __forceinline__ void gemv_put(const hx_cuda_gemv_job &job, int64_t o, int r, float s)
{
    const int64_t n_out = job.w.n_out;
    s += job.bias ? job.bias[o] : 0.0f;
    job.out[r * n_out + o] = s;
    if (job.acc) job.acc[r * n_out + o] += s;
}

// The end of every GEMV block: each thread holds partial sums acc[k][r] (output row o0 + k,
// batch row r); the warps' sums meet in shared memory and one thread per (k, r) writes (and
// adds into the job's acc; at one row, or does the job's post, found in post_slots()[g]).
template <int R, int ROWS = GEMV_ROWS>
__device__ __forceinline__ void gemv_store(const float (&acc)[ROWS][R], int64_t o0,
                                           int n_rows, const hx_cuda_gemv_job &job,
                                           const hx_cuda_gemv_post *post = nullptr, int g = 0)
{
    const int64_t n_out = job.w.n_out;
    __shared__ float part[GEMV_WARPS][ROWS][R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
    for (int k = 0; k < ROWS; k++) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[k][r]);
            if (lane == 0) part[warp][k][r] = s;
        }
    }
    __syncthreads();
    const int k = threadIdx.x / R, r = threadIdx.x % R;
    if (k < ROWS && r < n_rows && o0 + k < n_out) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < GEMV_WARPS; i++) s += part[i][k][r];
        if (R == 1 && post && post->pos) { // (ROWS is even: row k's pair is this block's)
            const int k2 = k ^ (post->split ? 4 : 1); // (split: the streamed GEMV's 8 rows)
            float s2 = 0.0f;
#pragma unroll
            for (int i = 0; i < GEMV_WARPS; i++) s2 += part[i][k2][r];
            const int64_t o = group_row(*post, o0, k), o2 = group_row(*post, o0, k2);
            post_put(job, *post, o, o2, o < o2, post_slots()[g][k], s, s2);
        } else {
            gemv_put(job, o0 + k, r, s);
        }
    }
}

// A block computes GEMV_ROWS output rows for up to R activation rows, its 128 threads
// taking 8-element slices lane + 32 w, + 128, ... of the row's length. Per slice a thread
// loads 8 activations of each batch row once (the block reads 4 KiB contiguous) and then, for
// each of the block's output rows, dequantizes the matching 8 weights and accumulates: the
// activations are read from L1 once per four weight rows, each thread has four independent
// weight loads in flight, and a 4,096-row matrix is 1,024 blocks (about 31 warps per SM)
// each chaining only n_in / 1,024 trips to memory. The four warps' sums meet in shared memory.
template <int DT, int R>
__global__ void __launch_bounds__(32 * GEMV_WARPS)
    gemv_kernel(const __grid_constant__ gemv_set set, const float *__restrict__ x, int n_rows)
{
    int64_t o0;
    const hx_cuda_gemv_job job = gemv_job(set, &o0);
    const hx_cuda_wmat &w = job.w;
    prefetch_rows(w, o0, GEMV_ROWS);
    post_before(gemv_post(set), w.n_out, o0, GEMV_ROWS);
    after_prior();
    const int64_t n8 = w.n_in / 8;
    float acc[GEMV_ROWS][R] = {};
#pragma unroll 2
    for (int64_t j = threadIdx.x; j < n8; j += 32 * GEMV_WARPS) {
        float xv[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r < n_rows) {
                const float4 *xr = (const float4 *)(x + r * w.n_in + j * 8);
                const float4 a = __ldg(xr), b = __ldg(xr + 1);
                xv[r][0] = a.x, xv[r][1] = a.y, xv[r][2] = a.z, xv[r][3] = a.w;
                xv[r][4] = b.x, xv[r][5] = b.y, xv[r][6] = b.z, xv[r][7] = b.w;
            }
        }
#pragma unroll
        for (int k = 0; k < GEMV_ROWS; k++) {
            const int64_t o = o0 + k < w.n_out ? o0 + k : w.n_out - 1;
            float v[8];
            sub8<DT>(w, o, j, v);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < n_rows) {
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[k][r] += v[e] * xv[r][e];
                }
            }
        }
    }
    gemv_store<R>(acc, o0, n_rows, job, &gemv_post(set));
}

// Elements [8 j, 8 j + 8) of row o of w as eight integers q (bytes of w0 then w1, in element
// order) with the value of element e being d * q_e + m: the int8 GEMV's unit for the K-quants
// and MLX. The 4-, 5- and 6-bit codes are non-negative bytes; MLX 8-bit codes are moved to
// signed by q - 128 (m absorbs 128 d). Same values as sub32.
template <int DT>
__device__ __forceinline__ void subi8(const hx_cuda_wmat &w, int64_t o, int64_t j, int *w0,
                                      int *w1, float *d, float *m)
{
    const uint8_t *row = (const uint8_t *)w.q + o * w.row_bytes;
    const int q = (int)(j & 3);
    constexpr uint32_t LO4 = 0x0F0F0F0Fu;
    if (DT == HX_DT_Q4_K || DT == HX_DT_Q5_K) {
        const int sb = (int)((j >> 2) & 7);
        const uint8_t *p = row + (j >> 5) * (DT == HX_DT_Q4_K ? 144 : 176);
        int sc, mn;
        k_scale_min(p + 4, sb, &sc, &mn);
        *d = h2f(ld_u16(p)) * (float)sc;
        *m = -h2f(ld_u16(p + 2)) * (float)mn;
        const uint2 b = *(const uint2 *)(p + (DT == HX_DT_Q4_K ? 16 : 48) + 32 * (sb >> 1) + 8 * q);
        const int sh = (sb & 1) * 4;
        uint32_t a0 = (b.x >> sh) & LO4, a1 = (b.y >> sh) & LO4;
        if (DT == HX_DT_Q5_K) {
            const uint2 hb = *(const uint2 *)(p + 16 + 8 * q);
            a0 |= ((hb.x >> sb) & 0x01010101u) << 4;
            a1 |= ((hb.y >> sb) & 0x01010101u) << 4;
        }
        *w0 = (int)a0;
        *w1 = (int)a1;
    } else if (DT == HX_DT_Q6_K) {
        const int sb = (int)((j >> 2) & 7), half = sb >> 2, t = sb & 3;
        const uint8_t *p = row + (j >> 5) * HX_CUDA_Q6_K_BYTES; // 16-byte aligned: one load each
        const uint2 ql = *(const uint2 *)(p + 64 * half + 32 * (t & 1) + 8 * q);
        const uint2 qh = *(const uint2 *)(p + 128 + 32 * half + 8 * q);
        *d = h2f(ld_u16(p + 208)) * (float)((const int8_t *)(p + 192 + 8 * half + 2 * t))[q >> 1];
        *m = -32.0f * *d;
        const uint32_t l0 = ql.x, l1 = ql.y, h0 = qh.x, h1 = qh.y;
        const int sl = (t >> 1) * 4;
        *w0 = (int)(((l0 >> sl) & LO4) | (((h0 >> (2 * t)) & 0x03030303u) << 4));
        *w1 = (int)(((l1 >> sl) & LO4) | (((h1 >> (2 * t)) & 0x03030303u) << 4));
    } else if (DT == HX_DT_MLX4 || DT == HX_DT_MLX8) {
        const int64_t g = o * (w.n_in / w.group_size) + j * 8 / w.group_size;
        const float sc = load_sb(w.scales, w.sb_dtype, g), bi = load_sb(w.biases, w.sb_dtype, g);
        *d = sc;
        if (DT == HX_DT_MLX4) {
            // nibble k of u is element k: evens in the low nibbles, odds in the high ones
            const uint32_t u = *(const uint32_t *)(row + j * 4);
            const uint32_t ev = u & LO4, od = (u >> 4) & LO4;
            *w0 = (int)__byte_perm(ev, od, 0x5140);
            *w1 = (int)__byte_perm(ev, od, 0x7362);
            *m = bi;
        } else {
            const uint2 u = *(const uint2 *)(row + j * 8);
            *w0 = (int)(u.x ^ 0x80808080u);
            *w1 = (int)(u.y ^ 0x80808080u);
            *m = bi + 128.0f * sc;
        }
    }
}

// The dot product of 8 weight codes (words a0, a1) with 8 values of x as the GEMV reads it
// (kernels.h): 256 times that of their high bytes (x0[0], x1[0]) plus that of their low
// bytes, in units of x's scale. |result| < 2^31 for codes of up to 8 bits.
__device__ __forceinline__ int x_dot(int a0, int a1, const int (&x0)[2], const int (&x1)[2])
{
    return __dp4a(a0, x0[1], __dp4a(a1, x1[1], 256 * __dp4a(a0, x0[0], __dp4a(a1, x1[0], 0))));
}

// The GEMV over a block format, with x rounded to 16-bit integers per 32 values
// (hx_cuda_quantize_x): the same blocks, threads and slices as gemv_kernel, but each 8-element
// slice is four dp4a (four byte products each) against the weight's integer codes, and the
// float work is one multiply-add per slice: sum_e (d q_e + m) x_e = dx (d sum q_e xq_e + m sum
// xq_e). A dequantize-then-FMA slice costs about six instructions per weight, which at ~1 ms
// of weights per token made the GEMV issue bound; this costs about three.
template <int DT, int R, bool ROUTED = false>
__global__ void __launch_bounds__(32 * GEMV_WARPS)
    gemv_i8_kernel(const __grid_constant__ gemv_set set, const int8_t *__restrict__ xq,
                   const float *__restrict__ xd, int n_rows)
{
    int64_t o0;
    const hx_cuda_gemv_job job = gemv_begin<ROUTED>(set, &o0, &xq, &xd);
    const hx_cuda_wmat &w = job.w;
    const int64_t n8 = w.n_in / 8;
    float acc[GEMV_ROWS][R] = {};
    const int64_t n = (int64_t)n_rows * w.n_in; // the low bytes' offset
#pragma unroll 2
    for (int64_t j = threadIdx.x; j < n8; j += 32 * GEMV_WARPS) {
        int x0[R][2], x1[R][2], xs[R];
        float dx[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r < n_rows) {
#pragma unroll
                for (int t = 0; t < 2; t++) {
                    const uint2 u = __ldg((const uint2 *)(xq + t * n + r * w.n_in + j * 8));
                    x0[r][t] = (int)u.x;
                    x1[r][t] = (int)u.y;
                }
                dx[r] = __ldg(xd + r * (w.n_in / 32) + (j >> 2));
                xs[r] = x_dot(0x01010101, 0x01010101, x0[r], x1[r]);
            }
        }
#pragma unroll
        for (int k = 0; k < GEMV_ROWS; k++) {
            const int64_t o = o0 + k < w.n_out ? o0 + k : w.n_out - 1;
            int a0, a1;
            float d, m;
            subi8<DT>(w, o, j, &a0, &a1, &d, &m);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r < n_rows) {
                    const int dot = x_dot(a0, a1, x0[r], x1[r]);
                    acc[k][r] += dx[r] * (d * (float)dot + m * (float)xs[r]);
                }
            }
        }
    }
    gemv_store<R>(acc, o0, n_rows, job, ROUTED ? nullptr : &gemv_post(set));
}

// The formats whose GEMV reads wide: a thread takes a unit of 32 values of a row whose codes
// are one or two aligned 16-byte loads. Q4_0, Q4_1 and Q8_0 (uploaded with their codes apart
// from their scales, kernels.h): a block. MLX 4-bit: 32 values of a group. Q4_K: a sub-block,
// whose codes are the low or the high nibbles of 32 bytes that it shares with its neighbour
// (the two threads load the same 32 bytes, in one request of their warp), with the 16 bytes
// opening its 144-byte super-block (scales and minimums). Q6_K: a quarter of a half
// super-block, its low 4 bits the low or high nibbles of 32 bytes and its high 2 bits a pair of
// bits of 32 more (shared with the half's other quarters), with two 16-value scales.
template <int DT>
constexpr bool gemv_wide()
{
    return DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1 || DT == HX_DT_Q8_0 || DT == HX_DT_MLX4 ||
           DT == HX_DT_Q4_K || DT == HX_DT_Q6_K;
}

// sum_k c[k] . x[k] over N words of 4 codes, with x as the GEMV reads it (kernels.h): 256 times
// the dot product with its high bytes xh plus that with its low bytes xl, in units of x's scale.
template <int N>
__device__ __forceinline__ int x_dot_words(const uint32_t *c, const int *xh, const int *xl)
{
    int h = 0;
#pragma unroll
    for (int k = 0; k < N; k++) h = __dp4a((int)c[k], xh[k], h);
    int v = 256 * h;
#pragma unroll
    for (int k = 0; k < N; k++) v = __dp4a((int)c[k], xl[k], v);
    return v;
}

// The sum of x's N words of 4 values (high bytes xh, low ones xl), in units of x's scale.
template <int N>
__device__ __forceinline__ int x_sum_words(const int *xh, const int *xl)
{
    uint32_t ones[N];
#pragma unroll
    for (int k = 0; k < N; k++) ones[k] = 0x01010101u;
    return x_dot_words<N>(ones, xh, xl);
}

// Unit u of an activation row as wide_dot takes it: its 32 values as words of 4 (w[0] their
// high bytes, w[1] their low ones; kernels.h), their sum s and their scale d.
struct wide_xu {
    int   w[2][8];
    int   s;
    float d;
};

// The 32 codes of a Q4_0/Q4_1 block (byte i holds value i in its low nibble, value i + 16 in its
// high one) as 8 words of 4, in value order (MLX's 32 values: evens, then odds).
__device__ __forceinline__ void nibble_words(const uint4 &a, uint32_t (&c)[8])
{
    constexpr uint32_t LO4 = 0x0F0F0F0Fu;
    const uint32_t a4[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        c[k] = a4[k] & LO4;
        c[4 + k] = (a4[k] >> 4) & LO4;
    }
}

// sum over 32 values of (d q + m) x, with the codes q as words c.
__device__ __forceinline__ float unit_sum(const uint32_t (&c)[8], float d, float m,
                                          const wide_xu &x)
{
    return x.d * (d * (float)x_dot_words<8>(c, x.w[0], x.w[1]) + m * (float)x.s);
}

// sum over a Q4_0/Q4_1 unit, codes c (16 bytes), of (d q + m) x: d and Q4_1's offset m as the
// f16 bits s and b (Q4_0: m = -8 d, b unused).
template <int DT>
__device__ __forceinline__ float b32_unit_sum(const uint4 &c, uint16_t s, uint16_t b,
                                              const wide_xu &x)
{
    const float d = h2f(s);
    const float m = DT == HX_DT_Q4_1 ? h2f(b) : -8.0f * d;
    uint32_t cw[8];
    nibble_words(c, cw);
    return unit_sum(cw, d, m, x);
}

// A K-quant unit's loads (k_load), then its sum (k_sum): apart, so that a lean loop issues
// every row's loads before any sum. Q4_K: the 16 bytes opening its super-block (d, dmin, then
// the 12 bytes of scales) and the 32 bytes of codes it shares with its neighbour sub-block.
// Q6_K: its low 4 bits (32 bytes), its high 2 bits (32 bytes shared by the half's four
// quarters), its two 16-value scales and the super-block's d.
template <int DT> struct k_unit;
template <> struct k_unit<HX_DT_Q4_K> {
    uint4 h, a, b;
};
template <> struct k_unit<HX_DT_Q6_K> {
    uint4    l0, l1, h0, h1;
    uint16_t sc2, d;
};

// A K-quant super-block's bytes on the device (16-byte aligned).
template <int DT>
constexpr int k_sb_bytes()
{
    return DT == HX_DT_Q4_K ? 144 : HX_CUDA_Q6_K_BYTES;
}

// *p, through the read-only cache, or a plain load (SHARED: p is in shared memory).
template <bool SHARED, typename T>
__device__ __forceinline__ T k_ld(const uint8_t *p)
{
    if constexpr (SHARED) return *(const T *)p;
    else return __ldg((const T *)p);
}

template <int DT, bool SHARED = false>
__device__ __forceinline__ k_unit<DT> k_load(const uint8_t *row, uint32_t u)
{
    const uint8_t *p = row + (u >> 3) * k_sb_bytes<DT>();
    if constexpr (DT == HX_DT_Q4_K) {
        const uint32_t pair = 32 * ((u & 7) >> 1);
        return {k_ld<SHARED, uint4>(p), k_ld<SHARED, uint4>(p + 16 + pair),
                k_ld<SHARED, uint4>(p + 32 + pair)};
    } else {
        const uint32_t sb = u & 7, half = sb >> 2, t = sb & 3;
        return {k_ld<SHARED, uint4>(p + 64 * half + 32 * (t & 1)),
                k_ld<SHARED, uint4>(p + 64 * half + 32 * (t & 1) + 16),
                k_ld<SHARED, uint4>(p + 128 + 32 * half),
                k_ld<SHARED, uint4>(p + 144 + 32 * half),
                k_ld<SHARED, uint16_t>(p + 192 + 8 * half + 2 * t),
                k_ld<SHARED, uint16_t>(p + 208)};
    }
}

// Sum over sub-block u % 8 of its super-block, loaded as l, of its weights times x.
template <int DT>
__device__ __forceinline__ float k_sum(const k_unit<DT> &l, uint32_t u, const wide_xu &x)
{
    constexpr uint32_t LO4 = 0x0F0F0F0Fu;
    const int sb = (int)(u & 7);
    if constexpr (DT == HX_DT_Q4_K) {
        const int sh = 8 * (sb & 3), nib = 4 * (sb & 1);
        const uint4 h = l.h, a = l.a, b = l.b;
        const uint32_t c[8] = {(a.x >> nib) & LO4, (a.y >> nib) & LO4, (a.z >> nib) & LO4,
                               (a.w >> nib) & LO4, (b.x >> nib) & LO4, (b.y >> nib) & LO4,
                               (b.z >> nib) & LO4, (b.w >> nib) & LO4};
        // k_scale_min of sub-block sb, from the words rather than an indexed byte array
        const uint32_t s0 = h.y >> sh, s1 = h.z >> sh, s2 = h.w >> sh;
        const int sc = sb < 4 ? (int)(s0 & 63) : (int)((s2 & 15) | ((s0 >> 2) & 48));
        const int mn = sb < 4 ? (int)(s1 & 63) : (int)(((s2 >> 4) & 15) | ((s1 >> 2) & 48));
        const float d = h2f((uint16_t)h.x), dmin = h2f((uint16_t)(h.x >> 16));
        return x.d * (d * (float)sc * (float)x_dot_words<8>(c, x.w[0], x.w[1]) -
                      dmin * (float)(mn * x.s));
    } else {
        const int t = sb & 3, ls = 4 * (t >> 1), hs = 2 * t;
        const uint32_t lw[8] = {l.l0.x, l.l0.y, l.l0.z, l.l0.w, l.l1.x, l.l1.y, l.l1.z, l.l1.w},
                       hw[8] = {l.h0.x, l.h0.y, l.h0.z, l.h0.w, l.h1.x, l.h1.y, l.h1.z, l.h1.w};
        uint32_t c[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            c[k] = ((lw[k] >> ls) & LO4) | (((hw[k] >> hs) & 0x03030303u) << 4);
        const int s0 = x_sum_words<4>(x.w[0], x.w[1]); // over values 0..15
        const int a = x_dot_words<4>(c, x.w[0], x.w[1]) - 32 * s0,
                  b = x_dot_words<4>(c + 4, x.w[0] + 4, x.w[1] + 4) - 32 * (x.s - s0);
        return x.d * h2f(l.d) *
               ((float)(int8_t)l.sc2 * (float)a + (float)(int8_t)(l.sc2 >> 8) * (float)b);
    }
}

// sum over unit u of row o of (d q + m) x: integer dot products (dp4a), then one multiply-add.
// MLX's nibbles are in a word's order (value e in bits 4e), so its x words come in even/odd
// order (words 0..3 the even values of each 8, 4..7 the odd ones).
template <int DT>
__device__ __forceinline__ float wide_dot(const hx_cuda_wmat &w, int64_t o, int64_t u,
                                          const wide_xu &x)
{
    const uint8_t *row = (const uint8_t *)w.q + o * w.row_bytes;
    if constexpr (DT == HX_DT_Q4_K || DT == HX_DT_Q6_K) {
        return k_sum<DT>(k_load<DT>(row, (uint32_t)u), (uint32_t)u, x);
    } else {
        uint32_t c[8];
        float d, m;
        if constexpr (DT == HX_DT_MLX4) {
            nibble_words(__ldg((const uint4 *)(row + 16 * u)), c); // (in even/odd order)
            const int64_t g = o * (w.n_in / w.group_size) + 32 * u / w.group_size;
            d = load_sb(w.scales, w.sb_dtype, g);
            m = load_sb(w.biases, w.sb_dtype, g);
        } else {
            constexpr int QB = DT == HX_DT_Q8_0 ? 32 : 16; // code bytes per block
            const uint8_t *q = row + u * QB;
            const uint4 a = __ldg((const uint4 *)q);
            c[0] = a.x, c[1] = a.y, c[2] = a.z, c[3] = a.w;
            if constexpr (DT == HX_DT_Q8_0) {
                const uint4 b = __ldg((const uint4 *)q + 1);
                c[4] = b.x, c[5] = b.y, c[6] = b.z, c[7] = b.w;
            } else {
                nibble_words(a, c);
            }
            b32_scale<DT>(w, o, u, &d, &m);
        }
        return unit_sum(c, d, m, x);
    }
}

// Unit u of an activation row (high bytes, then low ones, n bytes apart in xq) as wide_dot
// takes it.
template <int DT>
__device__ __forceinline__ wide_xu wide_x(const int8_t *xq, const float *xd, int64_t n, int64_t u)
{
    wide_xu x;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const uint4 *p = (const uint4 *)(xq + t * n + u * 32);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint4 a = __ldg(p + k);
            x.w[t][4 * k] = (int)a.x, x.w[t][4 * k + 1] = (int)a.y;
            x.w[t][4 * k + 2] = (int)a.z, x.w[t][4 * k + 3] = (int)a.w;
        }
        if constexpr (DT == HX_DT_MLX4) { // to even/odd order (see wide_dot)
            int e[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                e[k] = (int)__byte_perm(x.w[t][2 * k], x.w[t][2 * k + 1], 0x6420);
                e[4 + k] = (int)__byte_perm(x.w[t][2 * k], x.w[t][2 * k + 1], 0x7531);
            }
#pragma unroll
            for (int k = 0; k < 8; k++) x.w[t][k] = e[k];
        }
    }
    x.d = __ldg(xd + u);
    x.s = x_sum_words<8>(x.w[0], x.w[1]);
    return x;
}

// Whether the wide GEMV of R rows takes its output rows without a branch around each (whether
// a batch row r < n_rows): at one row that branch is always taken, but it kept the compiler from
// issuing one output row's loads before the previous row's sums, so a thread had one trip to
// memory in flight at a time. Without it, an 8B decode (H100) went 358 -> 393 tok/s in Q4_1, 373
// -> 414 in MLX 4-bit (taken as Q4_1) and 404 -> 416 in Q4_0; but Q8_0 fell 268 -> 241 and Q4_K_M
// 371 -> 351 (Q8_0 and Q6_K then spill at 64 registers) and Q4_K did not move, so the other
// formats keep the branch.
template <int DT, int R>
constexpr bool rows_unbranched()
{
    return R == 1 && (DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1);
}

// Whether the GEMV takes lean_units: the unbranched rows (one row of Q4_0/Q4_1), not routed.
template <int DT, int R, bool ROUTED>
constexpr bool lean_row1()
{
    return rows_unbranched<DT, R>() && !ROUTED;
}

// Blocks an SM of the one-row Q4_K and Q6_K GEMVs (lean_k_units says why 5; -D for
// bench/gpu/sass_loads.py --define).
#ifndef HX_Q4K_BLOCKS
#define HX_Q4K_BLOCKS 5
#endif
#ifndef HX_Q6K_BLOCKS
#define HX_Q6K_BLOCKS 5
#endif

// Whether the one-row GEMV takes lean_k_units (Q4_K or Q6_K, not routed).
template <int DT, int R, bool ROUTED>
constexpr bool lean_k()
{
    return (DT == HX_DT_Q4_K || DT == HX_DT_Q6_K) && R == 1 && !ROUTED;
}

// Output rows a block of the wide GEMV takes: LEAN_ROWS for one row of Q4_0 (each of a
// thread's trips to memory brings twice the codes, and x's load and the sums' meeting serve
// twice the rows), else GEMV_ROWS. Alone (H100, hx-gpu-kernels, 4 -> 8 rows), Q4_0: 14,336 x
// 4,096 12.9 -> 12.4 us, 4,096 x 14,336 (3.5 trips a thread) 15.8 -> 12.7 us, 4,096 x 4,096
// 5.1 -> 4.8; an 8B Q4_0 decode 431 -> 442 tok/s, Qwen2.5-7B Q4_0 469 -> 477. Slower at 8 rows:
// Q4_1 (14,336 x 4,096 14.0 -> 14.8 us, the output matrix 106 -> 112; an 8B MLX 4-bit decode,
// taken as Q4_1, 424 -> 420 tok/s), Q8_0 and Q4_K (then on wide_dot's loop: 24.6 -> 26.9 us,
// 13.6 -> 16.6).
constexpr int LEAN_ROWS = 8;
static_assert(LEAN_ROWS <= POST_ROWS && GEMV_ROWS % 2 == 0, "post_put pairs rows");
template <int DT, int R, bool ROUTED>
constexpr int wide_rows()
{
    return DT == HX_DT_Q4_0 && lean_row1<DT, R, ROUTED>() ? LEAN_ROWS : GEMV_ROWS;
}

// Blocks an SM is to keep of the one-row wide GEMV, which sets the registers a thread may have
// (0: no bound). At one row a block's life is short (one trip to memory for its weights, then
// the sums meet), so the GEMV is bound by how many such trips overlap: by how many blocks an
// SM holds. Left to itself the compiler gave Q4_1 77 registers, Q8_0 72 and MLX 4-bit 70 (7
// blocks of 128 threads an SM), Q4_0 64 (8); a version of Q4_0 at 72, with more code after
// the sums, made an 8B decode 17% slower. Asked for 8 blocks, each fits in 64 (MLX spilling
// 12 bytes): an 8B MLX 4-bit decode went from 351 to 380 tok/s on an H100. Q4_K fits in 64
// too since its unit is a 32-value sub-block (it was two at once, in 115 registers). The
// routed experts' GEMV (blocks finding their weights through a table) is left alone: it would
// spill. Eight rows of Q4_0 (wide_rows) take 119 registers: 4 blocks; the K-quants' lean loop
// 90-96: 5.
template <int DT, int R, bool ROUTED>
constexpr int wide_blocks()
{
    return R != 1 || ROUTED                          ? 0
           : wide_rows<DT, R, ROUTED>() == LEAN_ROWS ? 4
           : lean_k<DT, R, ROUTED>()  ? (DT == HX_DT_Q4_K ? HX_Q4K_BLOCKS : HX_Q6K_BLOCKS)
                                                      : 8;
}

// A lean loop's view of a weight and of the block's first row, in 32 bits: offsets from one base
// each (an upload keeps a weight under 2^32 blocks: weights.c).
struct lean_view {
    uint32_t       n_units, rb, n, last, o0;
    const uint8_t *q;

    __device__ __forceinline__ lean_view(const hx_cuda_wmat &w, int64_t o0_64)
        : n_units((uint32_t)(w.n_in / 32)), rb((uint32_t)w.row_bytes), n((uint32_t)w.n_in),
          last((uint32_t)w.n_out - 1), o0((uint32_t)o0_64), q((const uint8_t *)w.q)
    {
    }
};

// The one-row GEMV's loop for Q4_0/Q4_1 in fewer registers, so that ptxas issues a unit's code
// loads for all ROWS rows together with x's (at 64 registers the general loop's SASS
// issues two rows' codes, sums them, then each further row's, then the scales: four trips to
// memory; bench/gpu/sass_loads.py): 32-bit offsets (lean_view), the rows' scales and x's scale
// after.
template <int DT, int ROWS>
__device__ __forceinline__ void lean_units(const hx_cuda_wmat &w, int64_t o0_64,
                                           const int8_t *__restrict__ xq,
                                           const float *__restrict__ xd,
                                           float (&acc)[ROWS][1])
{
    const lean_view v(w, o0_64);
    const uint32_t shift = (uint32_t)b32_shift<DT>(w); // scales per 32 values: 0 but MLX groups
    const uint16_t *sc = (const uint16_t *)w.scales, *bi = (const uint16_t *)w.biases;
#pragma unroll 1
    for (uint32_t u = threadIdx.x; u < v.n_units; u += 32 * GEMV_WARPS) {
        uint4 c[ROWS];
#pragma unroll
        for (int k = 0; k < ROWS; k++)
            c[k] = __ldg((const uint4 *)(v.q + ((uint64_t)min(v.o0 + k, v.last) * v.rb + u * 16)));
        const wide_xu x = wide_x<DT>(xq, xd, v.n, u);
#pragma unroll
        for (int k = 0; k < ROWS; k++) {
            const uint32_t g = (min(v.o0 + k, v.last) * v.n_units + u) >> shift;
            acc[k][0] += b32_unit_sum<DT>(c[k], __ldg(sc + g),
                                          DT == HX_DT_Q4_1 ? __ldg(bi + g) : (uint16_t)0, x);
        }
    }
}

// lean_units for Q4_K and Q6_K: a unit's loads for all ROWS rows (k_load: 3 a row for Q4_K, 6
// for Q6_K) issued with x's before any sum. wide_dot's loop, held to 64 registers, issued two
// rows' loads and then a row's a trip: four trips to memory a unit (bench/gpu/sass_loads.py);
// ptxas issues them all at once only from 5 blocks an SM down (Q4_K 90 registers, Q6_K 96; at
// 6 it splits them again), and there it is the faster. H100, hx-gpu-kernels, us: Q4_K 4,096 x
// 4,096 6.26 -> 5.00, 4,096 x 14,336 18.9 -> 16.7; Q6_K 7.9 -> 7.2, 27.1 -> 24.2, 14,336 x
// 4,096 21.6 -> 19.4; an 8B decode at batch 1, Q4_K 419 -> 427 tok/s, Q4_K_M (Q6_K in half
// the layers' ffn_down and attn_v) 395-397 -> 400-402. The same for Q4_1 (all 17 loads at once
// from 6 blocks, 74 registers) was slower: 4,096 x 14,336 16.2 -> 17.8 us, an 8B MLX 4-bit
// decode 444 -> 439.
template <int DT, int ROWS>
__device__ __forceinline__ void lean_k_units(const hx_cuda_wmat &w, int64_t o0_64,
                                             const int8_t *__restrict__ xq,
                                             const float *__restrict__ xd, float (&acc)[ROWS][1])
{
    const lean_view v(w, o0_64);
#pragma unroll 1
    for (uint32_t u = threadIdx.x; u < v.n_units; u += 32 * GEMV_WARPS) {
        k_unit<DT> l[ROWS];
#pragma unroll
        for (int k = 0; k < ROWS; k++)
            l[k] = k_load<DT>(v.q + (uint64_t)min(v.o0 + k, v.last) * v.rb, u);
        const wide_xu x = wide_x<DT>(xq, xd, v.n, u);
#pragma unroll
        for (int k = 0; k < ROWS; k++) acc[k][0] += k_sum<DT>(l[k], u, x);
    }
}

// The GEMV over the wide formats with x as 16-bit integers (hx_cuda_quantize_x): thread t of the
// block takes units t, t + 128, ... of the rows' length (one pass for a 4,096-wide row of
// 32-value units), loads the unit's activations once for all batch rows and then, for each of
// the block's output rows (wide_rows), its codes, with 16 bytes of codes per load.
template <int DT, int R, bool ROUTED = false>
__global__ void __launch_bounds__(32 * GEMV_WARPS, (wide_blocks<DT, R, ROUTED>()))
    gemv_wide_kernel(const __grid_constant__ gemv_set set, const int8_t *__restrict__ xq,
                     const float *__restrict__ xd, int n_rows)
{
    constexpr int ROWS = wide_rows<DT, R, ROUTED>();
    int64_t o0;
    const hx_cuda_gemv_job job = gemv_begin<ROUTED, ROWS>(set, &o0, &xq, &xd);
    const hx_cuda_wmat &w = job.w;
    const int64_t n_units = w.n_in / 32;
    float acc[ROWS][R] = {};
    const int64_t n = (int64_t)n_rows * w.n_in; // the low bytes' offset
    // one unit's loads in flight a thread: unrolled by two, every format was slower (Q4_0 by
    // 10%: registers, so fewer blocks an SM; Q4_K by 1-2%)
    if constexpr (lean_row1<DT, R, ROUTED>()) {
        lean_units<DT, ROWS>(w, o0, xq, xd, acc);
    } else if constexpr (lean_k<DT, R, ROUTED>()) {
        lean_k_units<DT, ROWS>(w, o0, xq, xd, acc);
    } else {
#pragma unroll 1
        for (int64_t u = threadIdx.x; u < n_units; u += 32 * GEMV_WARPS) {
            wide_xu x[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                if (rows_unbranched<DT, R>() || r < n_rows)
                    x[r] = wide_x<DT>(xq + r * w.n_in, xd + r * (w.n_in / 32), n, u);
#pragma unroll
            for (int k = 0; k < ROWS; k++) {
                const int64_t o = o0 + k < w.n_out ? o0 + k : w.n_out - 1;
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (rows_unbranched<DT, R>() || r < n_rows)
                        acc[k][r] += wide_dot<DT>(w, o, u, x[r]);
            }
        }
    }
    gemv_store<R, ROWS>(acc, o0, n_rows, job, ROUTED ? nullptr : &gemv_post(set));
}

// ---- the streamed one-row GEMV (Q4_0, Q4_1, Q4_K) ----
//
// A block of the wide kernel makes one trip to memory for its rows, sums them and ends, so at one
// row that GEMV goes as fast as such trips overlap: while a block's sums meet, while it is
// launched and while it waits for x, it asks memory for nothing (on an H200, whose bandwidth is
// 1.5 times an H100's, the wide kernel read an 8B model's gate and up at 3.0 of 4.6 TB/s alone).
// Here a block stays: it takes the groups of STREAM_ROWS output rows b, b + grid, ..., each in
// tiles of STREAM_UNITS units (a unit a thread), and copies the codes and scales of the tiles
// after the one it sums into shared memory with cp.async, in no registers. The first is asked
// for before the wait for the kernel ahead (a weight is written by nothing in flight): under
// programmatic dependent launch a GEMV after a short kernel (attention, an rmsnorm, the GLU)
// finds its first tile in shared memory when x is ready. The same sums in the same order as
// lean_units and lean_k_units (the same text out).
//
// Measured on an H100 (8B decode at batch 1, 256 tokens, three runs each, alternated): tiles a
// block x blocks an SM, 2 x 5 (the default) against the wide kernel: MLX 4-bit (taken as Q4_1)
// 444.7-448.3 -> 461.6-462.8 tok/s, Llama-3.2-1B Q4_0 1,537-1,547 -> 1,565-1,572, Qwen2.5-7B
// Q4_0 498-502 -> 500-504, Llama-3.1-8B Q4_0 463.7-465.4 -> 463.0-463.4. Deeper (4 x 2: 423 for
// 8B Q4_0; 3 x 3: 434; 3 x 4: 457-459) or fewer blocks (2 x 4: 461-462) were slower there, and
// so was the stream for rows of one tile only (8B Q4_0 460, MLX 442); Q4_K: stream_k. The H100's
// bandwidth is what the wide kernel already nearly fills. On an H200 (two runs each) the stream
// gains what it was built for: 8B Q4_0 526-528 -> 550-555 tok/s, Qwen2.5-7B Q4_0 561-565 ->
// 596-597, 8B Q4_K 462.5-462.7 -> 467.2-467.3, and 2 x 5 is the best there too (3 x 4: 539-540
// for 8B Q4_0; 4 x 3: 503; 5 x 2: 485). HEARTH_CUDA_STREAM_STAGES (2 to 5) and
// HEARTH_CUDA_STREAM_BLOCKS (1 to 5) set those two; HEARTH_CUDA_GEMV_STREAM=0: the wide kernel.
constexpr int STREAM_ROWS = 8;
static_assert(STREAM_ROWS <= POST_ROWS && STREAM_ROWS == 8, "group_row: a split group is 4 + 4");
constexpr int STREAM_UNITS = 32 * GEMV_WARPS;
constexpr int STREAM_MOST_BLOCKS = 5; // 83-90 registers a thread: 5 blocks of 128 an SM

// Whether DT's one-row GEMV streams a K-quant's super-blocks (else Q4_0/Q4_1's codes and scales).
// Q4_K only: Q6_K's tiles (28 KB) leave 3 blocks an SM, and on an H100 its GEMVs were slower
// streamed (hx-gpu-kernels: the output matrix 141 -> 187 us, 4,096 x 14,336 23.9 -> 24.9; an 8B
// Q4_K_M decode 401 -> 391 tok/s), where Q4_K's were as fast or faster (4,096 x 14,336 16.5 ->
// 14.3 us, 14,336 x 4,096 13.4 -> 12.8; 8B Q4_K decode 427.6-429.3 -> 428.5-430.8 tok/s).
// Since the posts came into the streamed kernel, streaming Q4_K has lost on the H100 (8B Q4_K
// decode, the lean loop against the stream: 425 / 413 tok/s in the sixteenth session, 429.1 /
// 380.8 and 429.4 / 383.2 in the nineteenth), so Q4_K streams only where
// HEARTH_CUDA_STREAM_Q4K=1 asks (stream_fits), until a GPU shows why and the stream wins again.
template <int DT>
constexpr bool stream_k()
{
    return DT == HX_DT_Q4_K;
}

// The formats whose one-row GEMV streams: Q4_0 and Q4_1 (MLX 4-bit) by their codes and scales,
// and the stream_k ones.
template <int DT>
constexpr bool streamed()
{
    return DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1 || stream_k<DT>();
}

// One tile in shared memory. Q4_0/Q4_1: its rows' codes, a thread's unit at [row][thread], and
// their scales (and Q4_1's offsets) at [row][unit >> b32_shift]. K-quants: its rows' 16
// super-blocks, as they lie in memory.
template <int DT, bool K = stream_k<DT>()>
struct stream_tile {
    uint4    codes[STREAM_ROWS][STREAM_UNITS];
    uint16_t sc[STREAM_ROWS][STREAM_UNITS];
    uint16_t bi[DT == HX_DT_Q4_1 ? STREAM_ROWS : 1][STREAM_UNITS];
};
template <int DT>
struct stream_tile<DT, true> {
    uint4 sb[STREAM_ROWS][STREAM_UNITS / 8 * k_sb_bytes<DT>() / 16];
};

// Copies tile `tile` of the group at row o0 of job's weight into t, asynchronously. Q4_0/Q4_1:
// 16 bytes of codes a row a thread, and the rows' scales (and offsets) in 16-byte pieces, a piece
// a thread (stream_fits: every row's scales of a tile are whole pieces, 16-byte aligned).
// K-quants: the rows' super-blocks of the tile in 16-byte pieces, the block's threads in turn.
template <int DT>
__device__ __forceinline__ void stream_copy(stream_tile<DT> &t, const hx_cuda_gemv_job &job,
                                            const hx_cuda_gemv_post &p, int64_t o0, uint32_t tile)
{
    const lean_view v(job.w, o0);
    auto row = [&](int k) { return min((uint32_t)group_row(p, v.o0, k), v.last); };
    const uint32_t u0 = tile * STREAM_UNITS, nu = min((uint32_t)STREAM_UNITS, v.n_units - u0);
    const uint32_t i = threadIdx.x;
    if constexpr (stream_k<DT>()) {
        constexpr uint32_t SB = k_sb_bytes<DT>() / 16; // pieces a super-block
        const uint32_t per_row = nu / 8 * SB;
        for (uint32_t c = i; c < STREAM_ROWS * per_row; c += STREAM_UNITS) {
            const uint32_t k = c / per_row, at = c % per_row;
            cp_async16(&t.sb[k][at], v.q + (uint64_t)row(k) * v.rb + (u0 / 8 * SB + at) * 16,
                       true);
        }
    } else {
        const uint32_t u = u0 + (i < nu ? i : 0);
#pragma unroll
        for (int k = 0; k < STREAM_ROWS; k++)
            cp_async16(&t.codes[k][i], v.q + (uint64_t)row(k) * v.rb + u * 16, i < nu);
        const uint32_t shift = (uint32_t)b32_shift<DT>(job.w), per_row = (nu >> shift) / 8;
        if (i < STREAM_ROWS * per_row) {
            const uint32_t k = i / per_row, c = 8 * (i % per_row);
            const uint32_t g = ((row(k) * v.n_units + u0) >> shift) + c;
            cp_async16(&t.sc[k][c], (const uint16_t *)job.w.scales + g, true);
            if constexpr (DT == HX_DT_Q4_1)
                cp_async16(&t.bi[k][c], (const uint16_t *)job.w.biases + g, true);
        }
    }
}

// Row k's sum over this thread's unit of tile t, times x.
template <int DT>
__device__ __forceinline__ float stream_sum(const stream_tile<DT> &t, int k, uint32_t shift,
                                            const wide_xu &x)
{
    const uint32_t i = threadIdx.x;
    if constexpr (stream_k<DT>()) {
        return k_sum<DT>(k_load<DT, true>((const uint8_t *)t.sb[k], i), i, x);
    } else {
        return b32_unit_sum<DT>(t.codes[k][i], t.sc[k][i >> shift],
                                DT == HX_DT_Q4_1 ? t.bi[k][i >> shift] : (uint16_t)0, x);
    }
}

template <int DT, int STAGES>
__global__ void __launch_bounds__(STREAM_UNITS, STREAM_MOST_BLOCKS)
    gemv_stream_kernel(const __grid_constant__ gemv_set set, const int8_t *__restrict__ xq,
                       const float *__restrict__ xd, uint32_t n_groups)
{
    extern __shared__ uint4 stream_smem[];
    stream_tile<DT> *tiles_at = (stream_tile<DT> *)stream_smem;
    const hx_cuda_wmat &w0 = set.job[0].w; // every job's n_in and group are one (join_gemv)
    const uint32_t n_units = (uint32_t)(w0.n_in / 32);
    const uint32_t tiles = (n_units + STREAM_UNITS - 1) / STREAM_UNITS;
    const uint32_t n_items = (n_groups - blockIdx.x + gridDim.x - 1) / gridDim.x * tiles;
    const uint32_t shift = (uint32_t)b32_shift<DT>(w0), i = threadIdx.x;
    // item j: tile j % tiles of this block's group j / tiles
    auto copy = [&](uint32_t j) {
        int64_t o0;
        const uint32_t b = blockIdx.x + j / tiles * gridDim.x;
        const hx_cuda_gemv_job job = gemv_job<STREAM_ROWS>(set, &o0, b);
        stream_copy<DT>(tiles_at[j % STAGES], job, gemv_post(set, b), o0, j % tiles);
    };
    for (uint32_t j = 0; j < STAGES - 1; j++) {
        if (j < n_items) copy(j);
        cp_async_commit();
    }
    { // the posts of its first groups (thread 8 g + k: row k of group g); a later group's is
      // found as its first tile is summed
        const uint32_t g = i / STREAM_ROWS, b = blockIdx.x + g * gridDim.x;
        int64_t o0;
        if (g < POST_GROUPS && b < n_groups) {
            const int64_t n_out = gemv_job<STREAM_ROWS>(set, &o0, b).w.n_out;
            post_find<true>(gemv_post(set, b), n_out, o0, (int)(i % STREAM_ROWS), (int)g);
        }
    }
    after_prior();
    float acc[STREAM_ROWS][1] = {};
    wide_xu x;
    uint32_t x_tile = UINT32_MAX;
    for (uint32_t j = 0; j < n_items; j++) {
        const uint32_t tile = j % tiles, u = tile * STREAM_UNITS + i;
        if (tile != x_tile && u < n_units) x = wide_x<DT>(xq, xd, w0.n_in, u), x_tile = tile;
        cp_async_wait<STAGES - 2>(); // this thread's copies of item j are in
        __syncthreads(); // and everyone's; and item j - 1's tile is free for item j + stages - 1
        if (j + STAGES - 1 < n_items) copy(j + STAGES - 1);
        cp_async_commit();
        const stream_tile<DT> &t = tiles_at[j % STAGES];
        if (tile == 0 && j / tiles >= POST_GROUPS && i < STREAM_ROWS) { // (the last slots)
            const uint32_t b = blockIdx.x + j / tiles * gridDim.x;
            int64_t o0;
            const int64_t n_out = gemv_job<STREAM_ROWS>(set, &o0, b).w.n_out;
            post_find<true>(gemv_post(set, b), n_out, o0, (int)i, POST_GROUPS - 1);
        }
        if (u < n_units) {
#pragma unroll
            for (int k = 0; k < STREAM_ROWS; k++) acc[k][0] += stream_sum<DT>(t, k, shift, x);
        }
        if (tile == tiles - 1) { // the group's sums meet
            const uint32_t b = blockIdx.x + j / tiles * gridDim.x;
            int64_t o0;
            const hx_cuda_gemv_job job = gemv_job<STREAM_ROWS>(set, &o0, b);
            gemv_store<1, STREAM_ROWS>(acc, o0, 1, job, &gemv_post(set, b),
                                       min(j / tiles, (uint32_t)POST_GROUPS - 1));
#pragma unroll
            for (int k = 0; k < STREAM_ROWS; k++) acc[k][0] = 0.0f;
        }
    }
}

// ---- the tensor-core GEMV, 3 or 5 to 8 rows ----
//
// Beyond one row the GEMVs above are bound by arithmetic, not by the weights they share: each
// batch row costs its own dp4a per weight word, so 8 rows took 8 times one row's time (14336 x
// 4096 Q4_0: 9.8 us at 1 row, 83 at 8). Here the weights are the A operand of int8 MMAs
// (mma.sync m16n8k32: 16 output rows by one 32-value block) and the batch rows are the 8
// columns of B, x's high bytes in one MMA and its low bytes in another, so that 8 rows cost
// little more than 2 (33 us at 8). For the formats with one scale (and offset) per row and
// 32-value block: Q4_0 (its codes moved to -8..7, no offset), Q4_1 and Q8_0 (uploaded as codes
// apart from scales), and Q4_K (scale and offset per 32 values in each super-block). At one
// row it is 2-3x slower than gemv_wide_kernel (ncu: DRAM 17% busy, the SMs 46%, so issue and
// not memory bound; not yet understood), hence mma_rows.
constexpr int MMA_WARPS = 8;
constexpr int MMA_ROWS = 16;
constexpr int MMA_KC = 32;    // blocks of 32 values per stage
constexpr int MMA_STAGES = 4; // shared buffers of a block (one in use, the rest in flight)

// 4 bytes from global to shared memory, asynchronously (through L1).
__device__ __forceinline__ void cp_async4(void *dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src)
                 : "memory");
}

template <int DT>
constexpr bool gemv_mma()
{
    return DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1 || DT == HX_DT_Q8_0 || DT == HX_DT_Q4_K;
}

// c += a . b for the int8 m16n8k32 fragments (PTX ISA, "mma.m16n8k32"): thread (g, t) = (lane /
// 4, lane % 4) holds a = A[g][4t..], A[g+8][4t..], A[g][16+4t..], A[g+8][16+4t..], b = B[4t..][g],
// B[16+4t..][g] and c = C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
__device__ __forceinline__ void mma_s8(int (&c)[4], const int (&a)[4], int b0, int b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else // never launched there (mma_rows)
    (void)a, (void)b0, (void)b1;
    c[0] = c[1] = c[2] = c[3] = 0;
#endif
}

// The A fragment's two words of block b of a staged row, for thread t of the quad: values
// 4t..4t+3 in *lo, 16+4t..16+4t+3 in *hi, as signed bytes. Q4_0/Q4_1: byte i of a block holds
// value i (low nibble) and i + 16 (high); Q8_0: byte i, value i; Q4_K: sub-block s of a
// super-block is the low (s even) or high nibbles of the 32 bytes at 16 + 32 (s / 2), byte i
// value i.
template <int DT>
__device__ __forceinline__ void mma_codes(const uint8_t *row, int b, int t, int *lo, int *hi)
{
    constexpr uint32_t LO4 = 0x0F0F0F0Fu, B3 = 0x08080808u;
    if constexpr (DT == HX_DT_Q8_0) {
        *lo = *(const int *)(row + 32 * b + 4 * t);
        *hi = *(const int *)(row + 32 * b + 16 + 4 * t);
    } else if constexpr (DT == HX_DT_Q4_K) {
        const int s = b & 7;
        const uint8_t *q = row + (b >> 3) * 144 + 16 + 32 * (s >> 1) + 4 * t;
        const int sh = 4 * (s & 1);
        *lo = (int)((*(const uint32_t *)q >> sh) & LO4);
        *hi = (int)((*(const uint32_t *)(q + 16) >> sh) & LO4);
    } else {
        const uint32_t w = *(const uint32_t *)(row + 16 * b + 4 * t);
        uint32_t l = w & LO4, h = (w >> 4) & LO4;
        if constexpr (DT == HX_DT_Q4_0) { // q - 8: bit 3 flipped, then sign-extended
            l ^= B3, h ^= B3;
            l |= (l & B3) * 0x1Eu, h |= (h & B3) * 0x1Eu;
        }
        *lo = (int)l;
        *hi = (int)h;
    }
}

// One stage of a block's staged inputs, MMA_KC blocks of 32 values: its 16 rows' codes, scales
// (and Q4_1 offsets; Q4_K: whole super-blocks), and x's n_rows rows (high bytes, low bytes,
// scales). Rows are padded by 16 bytes so that the 8 rows a fragment load reads fall in
// different banks. x's part is sized by n_rows, so that one row leaves room for more stages.
template <int DT>
struct mma_stage {
    // bytes per 32-value block of a row (Q4_K: a super-block's 144 bytes for 8, scales in them)
    static constexpr int QB = DT == HX_DT_Q8_0 ? 32 : DT == HX_DT_Q4_K ? 18 : 16;
    static constexpr int WR = MMA_KC * QB + 16, XR = MMA_KC * 32 + 16, SR = MMA_KC + 8;
    static constexpr int N_SB = DT == HX_DT_Q4_K ? 0 : DT == HX_DT_Q4_1 ? 2 : 1; // d, m arrays
    static constexpr int FIXED = MMA_ROWS * WR + MMA_ROWS * SR * 2 * N_SB;
    uint8_t        *w, *x;  // [MMA_ROWS][WR]; [2][n_rows][XR]
    uint16_t       *d, *m;  // [MMA_ROWS][SR] each: a scale per 1 << sh blocks (b32_shift)
    float          *xd;     // [n_rows][MMA_KC]
    int             n_rows, sh;
    __host__ __device__ static constexpr int bytes(int n_rows) // a multiple of 16
    {
        return FIXED + n_rows * (2 * XR + MMA_KC * 4);
    }
    __device__ mma_stage(uint8_t *p, int rows, int shift) : n_rows(rows), sh(shift)
    {
        w = p;
        d = (uint16_t *)(p + MMA_ROWS * WR);
        m = d + (N_SB == 2 ? MMA_ROWS * SR : 0);
        x = p + FIXED;
        xd = (float *)(x + 2 * rows * XR);
    }
};

// Scale d and offset m of block b of staged row `row` (value = d q + m).
template <int DT>
__device__ __forceinline__ void mma_scale(const mma_stage<DT> &s, int row, int b, float *d,
                                          float *m)
{
    if constexpr (DT == HX_DT_Q4_K) {
        const uint8_t *p = s.w + row * mma_stage<DT>::WR + (b >> 3) * 144;
        int sc, mn;
        k_scale_min(p + 4, b & 7, &sc, &mn);
        *d = h2f(*(const uint16_t *)p) * (float)sc;
        *m = -h2f(*(const uint16_t *)(p + 2)) * (float)mn;
    } else {
        const int i = row * mma_stage<DT>::SR + (b >> s.sh);
        *d = h2f(s.d[i]);
        *m = DT == HX_DT_Q4_1 ? h2f(s.m[i]) : 0.0f;
    }
}

// Copies blocks [b0, b0 + kc) of the block's rows (from o0; past n_out the last row) and of
// x's rows into st, asynchronously: 16-byte pieces for codes and x, 4 for scales (kc and the
// row's block count are multiples of two scales' blocks). Pieces are counted over a whole
// stage, so that every division is by a power of two; those past kc are skipped.
template <int DT>
__device__ __forceinline__ void mma_load(const mma_stage<DT> &st, const hx_cuda_wmat &w,
                                         int64_t o0, int64_t b0, int kc, const int8_t *xq,
                                         const float *xd)
{
    using S = mma_stage<DT>;
    constexpr int T = 32 * MMA_WARPS, WP = MMA_KC * S::QB / 16, XP = MMA_KC * 2, SP = MMA_KC / 2;
    const int64_t nb = w.n_in / 32;
    const int n_rows = st.n_rows;
    const uint8_t *wq = (const uint8_t *)w.q + b0 * S::QB;
    for (int i = threadIdx.x; i < MMA_ROWS * WP; i += T) {
        const int r = i / WP, k = i % WP;
        const int64_t o = o0 + r < w.n_out ? o0 + r : w.n_out - 1;
        if (k < kc * S::QB / 16)
            cp_async16(st.w + r * S::WR + 16 * k, wq + o * w.row_bytes + 16 * k, true);
    }
    for (int i = threadIdx.x; i < 2 * n_rows * XP; i += T) {
        const int hr = i / XP, k = i % XP; // plane hr / n_rows, row hr % n_rows
        if (k < kc * 2)
            cp_async16(st.x + hr * S::XR + 16 * k, xq + (int64_t)hr * w.n_in + b0 * 32 + 16 * k,
                       true);
    }
    for (int i = threadIdx.x; i < n_rows * MMA_KC; i += T) {
        const int r = i / MMA_KC, k = i % MMA_KC;
        if (k < kc) cp_async4(st.xd + r * MMA_KC + k, xd + r * nb + b0 + k);
    }
    if constexpr (S::N_SB > 0) { // Q4_K: the scales came with the codes
        const int64_t ng = nb >> st.sh, g0 = b0 >> st.sh; // scales a row; the stage's first
        for (int i = threadIdx.x; i < MMA_ROWS * SP; i += T) {
            const int r = i / SP, k = i % SP;
            const int64_t o = o0 + r < w.n_out ? o0 + r : w.n_out - 1;
            if (2 * k < kc >> st.sh) {
                cp_async4(st.d + r * S::SR + 2 * k,
                          (const uint16_t *)w.scales + o * ng + g0 + 2 * k);
                if constexpr (DT == HX_DT_Q4_1)
                    cp_async4(st.m + r * S::SR + 2 * k,
                              (const uint16_t *)w.biases + o * ng + g0 + 2 * k);
            }
        }
    }
}

// A block takes 16 output rows. Its threads copy the rows' codes and scales, and x, through
// shared memory in stages of MMA_KC blocks, MMA_STAGES - 1 stages in flight while one is used
// (cp.async: every global load of the kernel is a run of whole 16-byte pieces, each warp's
// adjacent); its warps take the stage's blocks in turn, reading fragments from shared memory
// without bank conflicts, and their sums meet in shared memory at the end.
template <int DT>
__global__ void __launch_bounds__(32 * MMA_WARPS)
    gemv_mma_kernel(const __grid_constant__ gemv_set set, const int8_t *__restrict__ xq,
                    const float *__restrict__ xd, int n_rows)
{
    extern __shared__ uint4 mma_smem[];
    using S = mma_stage<DT>;
    int64_t o0;
    const hx_cuda_gemv_job job = gemv_job<MMA_ROWS>(set, &o0);
    const hx_cuda_wmat &w = job.w;
    prefetch_rows(w, o0, MMA_ROWS);
    after_prior();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int64_t nb = w.n_in / 32;
    const int n_stage = (int)((nb + MMA_KC - 1) / MMA_KC);
    const int stage_bytes = S::bytes(n_rows);
    const int sh = b32_shift<DT>(w);
    auto stage = [&](int c) { // stage c's buffer
        return S((uint8_t *)mma_smem + (c % MMA_STAGES) * stage_bytes, n_rows, sh);
    };
    auto kc_of = [&](int c) { // stage c's blocks
        const int64_t left = nb - (int64_t)c * MMA_KC;
        return (int)(left < MMA_KC ? left : MMA_KC);
    };
    // B's column g is batch row g (zero past n_rows); C's columns 2t, 2t + 1 are batch rows
    // 2t, 2t + 1, whose scales this thread applies.
    const bool has_x = g < n_rows;
    const int r0 = 2 * t < n_rows ? 2 * t : 0, r1 = 2 * t + 1 < n_rows ? 2 * t + 1 : 0;
    float acc[4] = {};
    for (int c = 0; c < MMA_STAGES - 1; c++) {
        if (c < n_stage) mma_load<DT>(stage(c), w, o0, (int64_t)c * MMA_KC, kc_of(c), xq, xd);
        cp_async_commit();
    }
    for (int c = 0; c < n_stage; c++) {
        const int ahead = c + MMA_STAGES - 1;
        if (ahead < n_stage)
            mma_load<DT>(stage(ahead), w, o0, (int64_t)ahead * MMA_KC, kc_of(ahead), xq, xd);
        cp_async_commit();
        cp_async_wait<MMA_STAGES - 1>();
        __syncthreads();
        const S s = stage(c);
        const int kc = kc_of(c);
        for (int b = warp; b < kc; b += MMA_WARPS) {
            int a[4], x[4] = {};
            mma_codes<DT>(s.w + g * S::WR, b, t, &a[0], &a[2]);
            mma_codes<DT>(s.w + (g + 8) * S::WR, b, t, &a[1], &a[3]);
            if (has_x) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint8_t *xr = s.x + (h * n_rows + g) * S::XR + 32 * b + 4 * t;
                    x[2 * h] = *(const int *)xr;
                    x[2 * h + 1] = *(const int *)(xr + 16);
                }
            }
            int hi[4] = {}, lo[4] = {};
            mma_s8(hi, a, x[0], x[1]);
            mma_s8(lo, a, x[2], x[3]);
            float xs[2] = {}, d[2], m[2]; // the offset's terms (Q4_1, Q4_K)
            mma_scale<DT>(s, g, b, &d[0], &m[0]);
            mma_scale<DT>(s, g + 8, b, &d[1], &m[1]);
            if constexpr (DT == HX_DT_Q4_1 || DT == HX_DT_Q4_K) {
                const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
                int sh[4] = {}, sl[4] = {};
                mma_s8(sh, ones, x[0], x[1]);
                mma_s8(sl, ones, x[2], x[3]);
                xs[0] = (float)(256 * sh[0] + sl[0]);
                xs[1] = (float)(256 * sh[1] + sl[1]);
            }
            const float dx[2] = {s.xd[r0 * MMA_KC + b], s.xd[r1 * MMA_KC + b]};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e / 2, r = e % 2; // output row g + 8i, batch row 2t + r
                acc[e] += dx[r] * (d[i] * (float)(256 * hi[e] + lo[e]) + m[i] * xs[r]);
            }
        }
        __syncthreads(); // a later stage's copies go into this buffer
    }
    cp_async_wait<0>();
    float(*part)[MMA_ROWS][8] = (float(*)[MMA_ROWS][8])mma_smem;
#pragma unroll
    for (int e = 0; e < 4; e++) part[warp][g + 8 * (e / 2)][2 * t + e % 2] = acc[e];
    __syncthreads();
    const int k = threadIdx.x / 8, r = threadIdx.x % 8;
    if (k < MMA_ROWS && r < n_rows && o0 + k < w.n_out) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < MMA_WARPS; i++) s += part[i][k][r];
        gemv_put(job, o0 + k, r, s);
    }
}

// x rounded per 32 values to a high and a low byte: a warp per 32, lane i on value i.
__global__ void quantize_x_kernel(const float *__restrict__ x, int64_t n,
                                  int8_t *__restrict__ q, float *__restrict__ d)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return; // n is a multiple of 32: whole warps leave
    round_x(x[i], i, n, q, d);
}

// Calls f with std::integral_constant<int, R> for the smallest batch size R in {1, 2, 4, 8}
// that holds n rows: every GEMV kernel is compiled for those four.
template <typename F>
void by_rows(int n, F f)
{
    if (n <= 1) f(std::integral_constant<int, 1>{});
    else if (n <= 2) f(std::integral_constant<int, 2>{});
    else if (n <= 4) f(std::integral_constant<int, 4>{});
    else f(std::integral_constant<int, 8>{});
}

// The shared memory a block of the current device may opt in to (0 when it cannot be had).
int smem_optin()
{
    const int b = device_attr<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
    return b > 0 ? b : 0;
}

// The integer in environment variable name, def where it is unset or outside [lo, hi] (the
// GEMVs' tuning knobs).
int env_int(const char *name, int lo, int hi, int def)
{
    const char *e = getenv(name);
    const int v = e ? atoi(e) : def;
    return v < lo || v > hi ? def : v;
}

// The fewest rows of a dtype the tensor-core GEMV takes: from where it is the faster, measured
// (Q4_K 3, whose dp4a kernel slows the most with rows; the others 5), or HEARTH_CUDA_MMA_ROWS
// (1 to 9; 9: never); never before sm_80.
int mma_rows(int dtype)
{
    static const int rows = env_int("HEARTH_CUDA_MMA_ROWS", 1, INT_MAX, 0);
    if (device_major() < 8) return HX_CUDA_GEMV_ROWS + 1;
    return rows ? rows : dtype == HX_DT_Q4_K ? 3 : 5;
}

static uint64_t n_routed;   // routed GEMV launches (hx_cuda_gemv_routed_count)
static uint64_t n_post;     // launches with a post (hx_cuda_gemv_post_count)

// Whether DT is a float format (its GEMV reads x as it is, not rounded).
template <int DT>
constexpr bool float_dt()
{
    return DT == HX_DT_F32 || DT == HX_DT_F16 || DT == HX_DT_BF16;
}

// The GEMV of R rows over a block format, x rounded (xq, xd): the wide kernel where the format
// has one and its units do not straddle MLX groups, else the byte-slice one (Q6_K's wide one is
// measured at one row only). ROUTED: the launch hx_cuda_gemv_routed makes (R is 1).
template <int DT, int R, bool ROUTED>
void launch_int8_gemv(dim3 g, const gemv_set &set, const int8_t *xq, const float *xd, int n,
                      bool narrow, hx_cuda_stream s)
{
    static_assert(!float_dt<DT>(), "float formats take gemv_kernel");
    const unsigned t = 32 * GEMV_WARPS;
    if constexpr (!gemv_wide<DT>() || (DT == HX_DT_Q6_K && R > 1))
        launch(gemv_i8_kernel<DT, R, ROUTED>, g, t, 0, s, set, xq, xd, n);
    else if (!narrow)
        launch(gemv_wide_kernel<DT, R, ROUTED>, g, t, 0, s, set, xq, xd, n);
    else if constexpr (DT == HX_DT_MLX4)
        launch(gemv_i8_kernel<DT, R, ROUTED>, g, t, 0, s, set, xq, xd, n);
}

// Tiles in shared memory a streamed GEMV block keeps (HEARTH_CUDA_STREAM_STAGES, 2 to 5).
int stream_stages()
{
    static const int stages = env_int("HEARTH_CUDA_STREAM_STAGES", 2, 5, 2);
    return stages;
}

// Whether the streamed GEMV takes these jobs at one row: from sm_80 (cp.async), unless
// HEARTH_CUDA_GEMV_STREAM=0, where a tile's scales are whole 16-byte pieces a row and every copy's
// source is 16-byte aligned.
template <int DT>
bool stream_fits(const hx_cuda_gemv_job *jobs, int n_jobs, int stages)
{
    static const bool off = hx_cuda_switched_off("HEARTH_CUDA_GEMV_STREAM");
    static const bool q4k = env_int("HEARTH_CUDA_STREAM_Q4K", 0, 1, 0) != 0; // (stream_k)
    if (off || (stream_k<DT>() && !q4k) || device_major() < 8 ||
        (int)sizeof(stream_tile<DT>) * stages > smem_optin())
        return false;
    for (int k = 0; k < n_jobs; k++) {
        const hx_cuda_wmat &w = jobs[k].w;
        const int shift = b32_shift<DT>(w);
        if (shift < 0 || w.n_in % (256 << shift) != 0 || !aligned16(w.q) ||
            w.group_size != jobs[0].w.group_size) // (the kernel takes job 0's)
            return false;
        if (!stream_k<DT>() &&
            (!aligned16(w.scales) || (DT == HX_DT_Q4_1 && !aligned16(w.biases))))
            return false;
    }
    return true;
}

// The streamed GEMV over n_groups groups of output rows (set.start in groups), STAGES tiles in
// shared memory a block: per_sm blocks an SM, or a block a group where there are fewer.
template <int DT, int STAGES>
void launch_stream_at(unsigned n_groups, const gemv_set &set, const int8_t *xq, const float *xd,
                      hx_cuda_stream s, int per_sm)
{
    const int smem = (int)sizeof(stream_tile<DT>) * STAGES;
    static bool sized = false; // the opt-in above 48 KiB, once per process
    if (!sized) {
        cudaFuncSetAttribute(gemv_stream_kernel<DT, STAGES>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        sized = true;
    }
    // no more blocks an SM than its shared memory holds (fewer with deeper tiles), so that none
    // waits for another to end
    const int sms = device_attr<cudaDevAttrMultiProcessorCount>();
    const int fit = device_attr<cudaDevAttrMaxSharedMemoryPerMultiprocessor>() / (smem + 1024);
    const unsigned most = (unsigned)(sms > 0 ? sms : 1) * (unsigned)max(1, min(per_sm, fit));
    launch(gemv_stream_kernel<DT, STAGES>, n_groups < most ? n_groups : most, STREAM_UNITS,
           (size_t)smem, s, set, xq, xd, n_groups);
}

// launch_stream_at for the run-time tiles a block.
template <int DT>
void launch_stream(unsigned n_groups, const gemv_set &set, const int8_t *xq, const float *xd,
                   hx_cuda_stream s, int stages)
{
    static const int per_sm = env_int("HEARTH_CUDA_STREAM_BLOCKS", 1, STREAM_MOST_BLOCKS, 5);
    switch (stages) {
    case 3: launch_stream_at<DT, 3>(n_groups, set, xq, xd, s, per_sm); break;
    case 4: launch_stream_at<DT, 4>(n_groups, set, xq, xd, s, per_sm); break;
    case 5: launch_stream_at<DT, 5>(n_groups, set, xq, xd, s, per_sm); break;
    default: launch_stream_at<DT, 2>(n_groups, set, xq, xd, s, per_sm); break;
    }
}

template <int DT> struct GemvLaunch {
    // Whether a job has MLX groups under 32 values (wide units would straddle them).
    static bool narrow_groups(const hx_cuda_gemv_job *jobs, int n_jobs)
    {
        for (int k = 0; k < n_jobs; k++)
            if (DT == HX_DT_MLX4 && jobs[k].w.group_size % 32 != 0) return true;
        return false;
    }

    // Whether the streamed one-row GEMV takes these jobs at n rows (hx_cuda_gemv_streams).
    static bool streams(const hx_cuda_gemv_job *jobs, int n_jobs, int64_t n)
    {
        if constexpr (streamed<DT>())
            return n == 1 && !narrow_groups(jobs, n_jobs) &&
                   stream_fits<DT>(jobs, n_jobs, stream_stages());
        return false;
    }

    static void query(const hx_cuda_gemv_job *jobs, int n_jobs, int64_t n, int *out)
    {
        *out = streams(jobs, n_jobs, n);
    }

    static void run(const hx_cuda_gemv_job *jobs, const hx_cuda_gemv_post *posts, int n_jobs,
                    const float *x, const int8_t *xq, const float *xd, int64_t n_rows,
                    hx_cuda_stream s)
    {
        gemv_set set = {};
        const bool narrow = narrow_groups(jobs, n_jobs);
        bool post = false;  // (the tensor-core GEMV has none: it takes several rows)
        bool split = false; // (the streamed GEMV's only)
        for (int k = 0; k < n_jobs; k++) {
            set.job[k] = jobs[k];
            if (posts && posts[k].pos && n_rows == 1) {
                set.post[k] = posts[k];
                post = true;
                split = split || posts[k].split;
            }
        }
        set.n = n_jobs;
        if (post) n_post++;
        if (split && !streams(jobs, n_jobs, n_rows)) {
            fprintf(stderr, "hearth: internal error: a split post off the streamed GEMV\n");
            abort();
        }
        // the jobs' first blocks, for blocks of `per` output rows; the number of blocks
        auto blocks = [&](int per) {
            unsigned g = 0;
            for (int k = 0; k < n_jobs; k++) {
                set.start[k] = g;
                g += blocks_for(jobs[k].w.n_out, per);
            }
            return g;
        };
        const int n = (int)n_rows;
        if constexpr (gemv_mma<DT>()) {
            // rows of an even number of blocks and of scales (4-byte scale pieces: a group is
            // 32, 64 or 128 values, so pairs of groups are whole pairs of blocks); every job's
            // n_in and group are one
            const int64_t per = DT == HX_DT_Q4_K ? 64 : 2 * (int64_t)jobs[0].w.group_size;
            const bool even = jobs[0].w.n_in % per == 0;
            const int smem = MMA_STAGES * mma_stage<DT>::bytes(n);
            // 8 rows of Q8_0 take 142 KB: more than an sm_89 block may have (99 KB)
            if (n >= mma_rows(DT) && even && smem <= smem_optin() && !post) {
                static bool sized = false; // the opt-in above 48 KiB, once per process
                if (!sized) {
                    const int most = MMA_STAGES * mma_stage<DT>::bytes(HX_CUDA_GEMV_ROWS);
                    cudaFuncSetAttribute(gemv_mma_kernel<DT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         most < smem_optin() ? most : smem_optin());
                    sized = true;
                }
                launch(gemv_mma_kernel<DT>, blocks(MMA_ROWS), 32 * MMA_WARPS, (size_t)smem, s, set,
                       xq, xd, n);
                return;
            }
        }
        if constexpr (streamed<DT>()) {
            if (streams(jobs, n_jobs, n)) {
                launch_stream<DT>(blocks(STREAM_ROWS), set, xq, xd, s, stream_stages());
                return;
            }
        }
        const unsigned g = blocks(GEMV_ROWS), t = 32 * GEMV_WARPS;
        by_rows(n, [&](auto rows) {
            constexpr int R = decltype(rows)::value;
            // the wide kernel's blocks take wide_rows rows (narrow MLX groups take the byte-slice
            // kernel, of GEMV_ROWS)
            const int per = narrow ? GEMV_ROWS : wide_rows<DT, R, false>();
            if constexpr (float_dt<DT>()) launch(gemv_kernel<DT, R>, g, t, 0, s, set, x, n);
            else launch_int8_gemv<DT, R, false>(blocks(per), set, xq, xd, n, narrow, s);
        });
    }
};

template <int DT> struct GemvQuery {
    static void run(const hx_cuda_gemv_job *jobs, int n_jobs, int64_t n, int *out)
    {
        GemvLaunch<DT>::query(jobs, n_jobs, n, out);
    }
};

template <int DT> struct RoutedLaunch {
    static void run(const hx_cuda_wmat *table, const hx_cuda_wmat *like, const int32_t *ids,
                    int64_t n_pairs, int32_t x_div, const int8_t *xq, const float *xd,
                    int64_t n_x, float *out, hx_cuda_stream s)
    {
        gemv_set set = {};
        set.job[0].w = *like;
        set.job[0].out = out;
        set.n = 1;
        set.route = {ids, table, x_div};
        const dim3 g(blocks_for(like->n_out, GEMV_ROWS), (unsigned)n_pairs);
        const bool narrow = DT == HX_DT_MLX4 && like->group_size % 32 != 0;
        if constexpr (!float_dt<DT>()) { // (the caller asked hx_cuda_gemv_int8 first)
            launch_int8_gemv<DT, 1, true>(g, set, xq, xd, (int)n_x, narrow, s);
            n_routed++;
        }
    }
};

} // namespace

extern "C" {

int hx_cuda_gemv_int8(int32_t dtype)
{
    return dtype != HX_DT_F32 && dtype != HX_DT_F16 && dtype != HX_DT_BF16;
}

void hx_cuda_quantize_x(const float *x, int64_t n, int8_t *q, float *d, hx_cuda_stream s)
{
    launch(quantize_x_kernel, blocks_for(n), THREADS, 0, s, x, n, q, d);
}

void hx_cuda_gemv(const hx_cuda_gemv_job *jobs, const hx_cuda_gemv_post *posts, int n_jobs,
                  const float *x, const int8_t *xq, const float *xd, int64_t n_rows,
                  hx_cuda_stream s)
{
    by_dtype<GemvLaunch>(jobs[0].w.dtype, jobs, posts, n_jobs, x, xq, xd, n_rows, s);
}

void hx_cuda_gemv_routed(const hx_cuda_wmat *table, const hx_cuda_wmat *like,
                         const int32_t *ids, int64_t n_pairs, int32_t x_div, const int8_t *xq,
                         const float *xd, int64_t n_x, float *out, hx_cuda_stream s)
{
    by_dtype<RoutedLaunch>(like->dtype, table, like, ids, n_pairs, x_div, xq, xd, n_x, out, s);
}

uint64_t hx_cuda_gemv_routed_count(void)
{
    return n_routed;
}

uint64_t hx_cuda_gemv_post_count(void)
{
    return n_post;
}

int hx_cuda_gemv_streams(const hx_cuda_gemv_job *jobs, int n_jobs, int64_t n_rows)
{
    int out = 0;
    by_dtype<GemvQuery>(jobs[0].w.dtype, jobs, n_jobs, n_rows, &out);
    return out;
}

} // extern "C"

#ifdef HX_CUDA_TIMELINE
HX_CUDA_TIMELINE_READER(gemv)
#endif
