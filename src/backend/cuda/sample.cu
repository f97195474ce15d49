// sample.cu - the sampler chain's draw on the device (kernels.h: hx_cuda_sample).
//
// Copying a row of logits back costs more than drawing from it: 128k floats are 512 KB over
// PCIe and then a selection over the whole vocabulary on one host core (~0.3-0.6 ms a step of
// an 8B model). Here a launch applies the row's edits (logit bias, penalties) in place, then each
// row's best logits are found in two launches: a block per 4,096-logit segment keeps that
// segment's top k (a radix select on the logits' order-preserving 32-bit keys, 8 bits a pass,
// the segment held in shared memory; with logprobs also the segment's max and sum of
// exponentials), and a block per row selects the row's top k from those candidates, sorts them
// (bitonic, by logit descending, the lower id first on ties) and runs the rest of the chain on
// them as the host's sampler does (sample/sampler.c: the same operations in the same order and
// precision, so the same u gives the same token), then the log-probabilities from the segments'
// sums. Ties at the k-th logit go to the lower ids, as on the host: every selection writes its
// picks in index order, and a row's candidates are in id order.
#include "backend/cuda/kernels.h"

#include <math.h>
#include <stdint.h>

namespace {

constexpr int SEG = 4096;          // logits a segment block selects from
constexpr int SEG_THREADS = 256;
constexpr int ROW_THREADS = 512;
constexpr int TOPK = HX_CUDA_DRAW_TOP_K;

// A float's key: unsigned order equals the floats' order (-0 as +0); NaN ranks below -inf.
__device__ __forceinline__ uint32_t float_key(float f)
{
    if (f != f) return 1u;
    const uint32_t b = f == 0.0f ? 0u : __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

__device__ __forceinline__ float key_float(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

__device__ __forceinline__ int row_k(const hx_cuda_draw &p, int64_t V)
{
    if (!(p.temperature > 0.0f)) return 1;
    int k = p.top_k < TOPK ? p.top_k : TOPK;
    return V < k ? (int)V : k;
}

// The K largest of keys[0, n) (1 <= K <= n, K <= TOPK), the ties at the K-th key going to the
// lower indices: writes their indices, ascending, to sel[0, K). Every thread of the block calls it.
__device__ void block_select(const uint32_t *keys, int n, int K, uint32_t *hist, int *sel)
{
    __shared__ uint32_t s_prefix, s_need;
    __shared__ bool s_all;
    __shared__ int s_cnt[2][32];
    const int tid = threadIdx.x, bd = blockDim.x, lane = tid & 31, w = tid >> 5, nw = bd >> 5;
    // Radix select, the most significant byte first: `prefix` (under `mask`) is the K-th key's
    // leading bytes found so far, `need` how many keys with that prefix are still wanted. It ends
    // early when every key with the prefix is wanted.
    uint32_t prefix = 0, mask = 0, need = (uint32_t)K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += bd) hist[i] = 0;
        __syncthreads();
        for (int c0 = 0; c0 < n; c0 += bd) {
            const int i = c0 + tid;
            const uint32_t k = i < n ? keys[i] : 0u;
            const bool in = i < n && (k & mask) == prefix;
            const uint32_t d = (k >> shift) & 255u;
            // Lanes with the same digit add once (logits crowd into few digits).
            const uint32_t peers = __match_any_sync(0xffffffffu, in ? d : 256u + lane);
            if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[d], (uint32_t)__popc(peers));
        }
        __syncthreads();
        if (w == 0) { // the digit where the count from the top reaches `need`: 8 digits a lane
            uint32_t c[8], sum = 0;
            for (int j = 0; j < 8; j++) sum += c[j] = hist[255 - 8 * lane - j];
            uint32_t incl = sum;
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += t;
            }
            const int at = __ffs(__ballot_sync(0xffffffffu, incl >= need)) - 1;
            if (lane == at) {
                uint32_t above = incl - sum;
                int j = 0;
                for (; j < 7 && above + c[j] < need; j++) above += c[j];
                s_prefix = prefix | ((uint32_t)(255 - 8 * lane - j) << shift);
                s_need = need - above;
                s_all = c[j] == need - above;
            }
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        mask |= 255u << shift;
        if (s_all) break;
    }
    // Every key whose leading bytes are above the K-th's, and the first `need` with the K-th's, in
    // index order: an element's place is the number of those before it.
    int base_gt = 0, base_eq = 0;
    for (int c0 = 0; c0 < n; c0 += bd) {
        const int i = c0 + tid;
        const uint32_t k = i < n ? keys[i] & mask : 0u;
        const bool gt = i < n && k > prefix, eq = i < n && k == prefix;
        const uint32_t bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) s_cnt[0][w] = __popc(bg), s_cnt[1][w] = __popc(be);
        __syncthreads();
        int pg = base_gt, pe = base_eq;
        for (int j = 0; j < nw; j++) {
            if (j < w) pg += s_cnt[0][j], pe += s_cnt[1][j];
            base_gt += s_cnt[0][j];
            base_eq += s_cnt[1][j];
        }
        const uint32_t before = (1u << lane) - 1u;
        pg += __popc(bg & before);
        pe += __popc(be & before);
        if (gt || (eq && pe < (int)need)) sel[pg + (pe < (int)need ? pe : (int)need)] = i;
        __syncthreads();
    }
}

// Sorts TOPK (key, id) pairs by key descending, then id ascending (threads 0..TOPK-1 take part;
// every thread of the block calls it).
__device__ void sort_desc(uint32_t *key, int32_t *id)
{
    const int i = threadIdx.x;
    for (int size = 2; size <= TOPK; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const int l = i ^ stride;
            if (i < TOPK && l > i) {
                const uint32_t ki = key[i], kl = key[l];
                const int32_t ii = id[i], il = id[l];
                const bool i_first = ki > kl || (ki == kl && ii < il);
                if (((i & size) == 0) != i_first) {
                    key[i] = kl, key[l] = ki;
                    id[i] = il, id[l] = ii;
                }
            }
            __syncthreads();
        }
}

// A row's edits (backend.h, hx_sample_edit), with the host's f32 operations uncontracted.
__global__ void apply_edits(float *logits, int64_t V, const hx_cuda_draw *draws,
                            const hx_cuda_edit *edits, int64_t n_edits)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_edits || edits[i].row1 <= 0) return;
    const hx_cuda_edit e = edits[i];
    const hx_cuda_draw p = draws[e.row1 - 1];
    if (p.top_k <= 0 || e.id < 0 || e.id >= V) return;
    float *x = logits + (size_t)(e.row1 - 1) * V + e.id;
    float v = __fadd_rn(*x, e.bias);
    if (e.count > 0) {
        v = v > 0 ? __fdiv_rn(v, p.repeat) : __fmul_rn(v, p.repeat);
        v = __fsub_rn(v, __fadd_rn(p.presence, __fmul_rn(p.frequency, (float)e.count)));
    }
    *x = v;
}

// Candidates kept per segment: the chain's k, or more when more alternatives are wanted.
__device__ __forceinline__ int row_sel(const hx_cuda_draw &p, int64_t V)
{
    int k = row_k(p, V);
    if (p.logprobs && p.n_top > k) k = p.n_top < TOPK ? p.n_top : TOPK;
    return V < k ? (int)V : k;
}

// The block's largest key, the lowest index among equals (each thread offers its own best,
// idx INT32_MAX for none), into *at: what block_select gives for K = 1, in one pass over the
// keys instead of four radix passes (a greedy row). Every thread of the block calls it.
__device__ void block_best(uint32_t key, int idx, int *at)
{
    __shared__ uint32_t s_key[32];
    __shared__ int s_idx[32];
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t k = __shfl_xor_sync(0xffffffffu, key, o);
        const int i = __shfl_xor_sync(0xffffffffu, idx, o);
        if (k > key || (k == key && i < idx)) key = k, idx = i;
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) s_key[w] = key, s_idx[w] = idx;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int j = 1; j < nw; j++) {
            if (s_key[j] > key || (s_key[j] == key && s_idx[j] < idx)) {
                key = s_key[j];
                idx = s_idx[j];
            }
        }
        *at = idx;
    }
    __syncthreads();
}

// The block's largest v (op 0) or sum (op 1); every thread gets it.
__device__ float block_reduce(float v, int op, float *red)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float t = __shfl_xor_sync(0xffffffffu, v, o);
        v = op == 0 ? fmaxf(v, t) : v + t;
    }
    __syncthreads(); // red may still be read from a previous call
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = red[0];
    for (int j = 1; j < nw; j++) v = op == 0 ? fmaxf(v, red[j]) : v + red[j];
    return v;
}

// Block (segment, row): the segment's best as (key, id), in id order, into the row's candidates
// at [seg * n, seg * n + n), n = row_sel (a short segment pads with key 0, which no logit has);
// with logprobs also the segment's largest logit and its sum of exp(logit - that).
__global__ void __launch_bounds__(SEG_THREADS)
select_segments(const float *logits, int64_t V, const hx_cuda_draw *draws, int nseg,
                uint32_t *ck, int32_t *cid, float *seg_mx, float *seg_sum)
{
    const int seg = blockIdx.x, r = blockIdx.y, tid = threadIdx.x;
    const hx_cuda_draw p = draws[r];
    if (p.top_k <= 0) return;
    const int K = row_sel(p, V);
    const int64_t lo = (int64_t)seg * SEG;
    const int n = (int)(V - lo < SEG ? V - lo : SEG);
    __shared__ uint32_t keys[SEG], hist[256];
    __shared__ int sel[TOPK];
    __shared__ float red[32];
    const float *x = logits + (size_t)r * V + lo;
    uint32_t best = 0; // (every key is at least 1)
    int best_i = INT32_MAX;
    for (int i = tid; i < n; i += SEG_THREADS) {
        keys[i] = float_key(x[i]);
        if (keys[i] > best) best = keys[i], best_i = i;
    }
    __syncthreads();
    if (p.logprobs) { // NaN (key 1) and -inf add nothing
        const float m = block_reduce(best > 1u ? key_float(best) : -INFINITY, 0, red);
        float sum = 0.0f;
        for (int i = tid; m > -INFINITY && i < n; i += SEG_THREADS)
            if (keys[i] > 1u) sum += expf(key_float(keys[i]) - m);
        sum = block_reduce(sum, 1, red);
        if (tid == 0) {
            seg_mx[(size_t)r * nseg + seg] = m;
            seg_sum[(size_t)r * nseg + seg] = sum;
        }
    }
    const int m = n < K ? n : K;
    if (n <= K) {
        for (int i = tid; i < n; i += SEG_THREADS) sel[i] = i;
    } else if (K == 1) {
        block_best(best, best_i, sel);
    } else {
        block_select(keys, n, K, hist, sel);
    }
    __syncthreads();
    const size_t at = (size_t)r * nseg * TOPK + (size_t)seg * K;
    for (int j = tid; j < K; j += SEG_THREADS) {
        ck[at + j] = j < m ? keys[sel[j]] : 0u;
        cid[at + j] = j < m ? (int32_t)(lo + sel[j]) : INT32_MAX;
    }
}

// Block per row: the row's best of its candidates, sorted, then the chain of sampler.c's draw()
// over the first k, and the log-probabilities when asked.
__global__ void __launch_bounds__(ROW_THREADS)
draw_rows(const hx_cuda_draw *draws, int64_t V, int nseg, const uint32_t *ck, const int32_t *cid,
          const float *seg_mx, const float *seg_sum, hx_cuda_drawn *out)
{
    const int r = blockIdx.x, tid = threadIdx.x;
    const hx_cuda_draw p = draws[r];
    if (p.top_k <= 0) return;
    const int K = row_k(p, V), S = row_sel(p, V);
    __shared__ uint32_t hist[256], key[TOPK];
    __shared__ int32_t id[TOPK];
    __shared__ int sel[TOPK];
    __shared__ double e[TOPK];
    const size_t at = (size_t)r * nseg * TOPK;
    if (S == 1) { // the best of the segments' bests (in id order), and nothing to sort
        uint32_t best = 0;
        int best_j = INT32_MAX;
        for (int j = tid; j < nseg; j += ROW_THREADS)
            if (ck[at + j] > best) best = ck[at + j], best_j = j;
        block_best(best, best_j, sel);
    } else {
        block_select(ck + at, nseg * S, S, hist, sel);
    }
    __syncthreads();
    for (int j = tid; j < TOPK; j += ROW_THREADS) {
        key[j] = j < S ? ck[at + sel[j]] : 0u;
        id[j] = j < S ? cid[at + sel[j]] : INT32_MAX;
    }
    __syncthreads();
    if (S > 1) sort_desc(key, id);
    const bool greedy = !(p.temperature > 0.0f);
    const float mx = key_float(key[0]);
    for (int j = tid; j < K && !greedy; j += ROW_THREADS)
        e[j] = exp((double)(key_float(key[j]) - mx) / (double)p.temperature);
    __syncthreads();
    if (tid != 0) return;
    int chosen = 0; // index into the sorted candidates
    if (!greedy) {
        // The weights are sorted descending (the best is 1), so top-p and min-p keep a prefix.
        double total = 0.0;
        if (p.top_p < 1.0f)
            for (int i = 0; i < K; i++) total += e[i];
        int keep = K;
        if (p.top_p < 1.0f) {
            double acc = 0.0;
            for (int i = 0; i < K; i++) {
                acc += (double)(float)e[i] / total;
                if (acc >= (double)p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if (p.min_p > 0.0f) {
            int k = 0;
            while (k < keep && (float)e[k] >= p.min_p) k++;
            keep = k > 0 ? k : 1;
        }
        double sum = 0.0;
        for (int i = 0; i < keep; i++) sum += (double)(float)e[i];
        double rem = p.u * sum;
        chosen = keep - 1;
        for (int i = 0; i < keep; i++) {
            rem -= (double)(float)e[i];
            if (rem < 0) {
                chosen = i;
                break;
            }
        }
    }
    hx_cuda_drawn *o = &out[r];
    o->token = id[chosen];
    if (!p.logprobs) return;
    double z = 0.0; // the whole row's sum of exp(logit - mx), from the segments' sums
    for (int s = 0; s < nseg; s++) {
        const float sm = seg_mx[(size_t)r * nseg + s];
        if (sm > -INFINITY) z += (double)seg_sum[(size_t)r * nseg + s] * exp((double)sm - mx);
    }
    const float log_z = mx + (float)log(z);
    o->logprob = key_float(key[chosen]) - log_z;
    for (int j = 0; j < p.n_top && j < S && j < HX_CUDA_DRAW_N_TOP; j++) {
        o->top_ids[j] = id[j];
        o->top_logprobs[j] = key_float(key[j]) - log_z;
    }
}

int segments(int64_t V)
{
    return (int)((V + SEG - 1) / SEG);
}

} // namespace

extern "C" {

size_t hx_cuda_sample_scratch(int64_t n, int64_t n_vocab)
{
    const size_t nseg = (size_t)segments(n_vocab);
    return (size_t)n * nseg * (TOPK * (sizeof(uint32_t) + sizeof(int32_t)) + 2 * sizeof(float));
}

void hx_cuda_sample(float *logits, int64_t n, int64_t n_vocab, const hx_cuda_draw *draws,
                    const hx_cuda_edit *edits, int64_t n_edits, void *scratch,
                    hx_cuda_drawn *out, hx_cuda_stream s)
{
    if (n <= 0 || n_vocab <= 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    const int nseg = segments(n_vocab);
    uint32_t *ck = (uint32_t *)scratch;
    int32_t *cid = (int32_t *)(ck + (size_t)n * nseg * TOPK);
    float *seg_mx = (float *)(cid + (size_t)n * nseg * TOPK);
    float *seg_sum = seg_mx + (size_t)n * nseg;
    if (n_edits > 0)
        apply_edits<<<(unsigned)((n_edits + 255) / 256), 256, 0, st>>>(logits, n_vocab, draws,
                                                                        edits, n_edits);
    select_segments<<<dim3((unsigned)nseg, (unsigned)n), SEG_THREADS, 0, st>>>(
        logits, n_vocab, draws, nseg, ck, cid, seg_mx, seg_sum);
    draw_rows<<<(unsigned)n, ROW_THREADS, 0, st>>>(draws, n_vocab, nseg, ck, cid, seg_mx, seg_sum,
                                                   out);
}

} // extern "C"
