/* boundary.cu - what one kernel boundary of a batch-1 decode step costs, and whether a counter
 * the kernel ahead counts up can stand in for the wait on that kernel's grid (docs/
 * performance.md, twenty-second session). It touches nothing of hearth and links only the
 * CUDA runtime.
 *
 * The step is hearth's at batch 1 in shape, not in arithmetic: 32 layers of eight kernels, a
 * GEMV-like kernel (5 blocks an SM of 128 threads, 40 KB of shared memory each, so that the next
 * GEMV-like kernel cannot become resident beside it, as in hearth) after each of four small
 * ones (16 blocks of 256 threads, as hearth's rmsnorm). A GEMV-like block reads the 4,096
 * values the small kernel before it wrote, streams its share of that layer's weight bytes (the
 * 8B shapes': 14.7, 8.4, 58.7 and 29.4 MB of Q4_0 a layer, each layer its own) in 16-byte
 * loads, and writes 8 values; a small block reads every value the GEMV-like kernel wrote and
 * writes its 256 of the next 4,096. Each kernel's output depends on its input, so the step's
 * last values say whether every kernel read what the one before it wrote.
 *
 * Four ways a kernel waits for the one before it, each a graph of the whole step replayed
 * (--runs times, the median step printed):
 *   grid: as hearth: programmatic dependent launch, griddepcontrol.wait (the grid ahead ended
 *         and its memory visible), then launch_dependents;
 *   flag: launch_dependents first, then thread 0 polls (ld.acquire, --sleep ns between polls)
 *         until the kernel ahead's counter reaches its number of blocks; each block, once its
 *         writes are done, adds one to its kernel's counter (a fence, then an atomic). The
 *         counters are zeroed by a memset at the step's start;
 *   plain: no programmatic launch: stream order (hearth's HEARTH_CUDA_PDL=0);
 *   none: no wait at all (the kernels' work and the weight stream alone; values then wrong).
 * It prints each way's step time, the boundary's cost (its excess over `none`, per boundary),
 * and whether `flag` and `plain` left the same values as `grid`.
 *
 * --small says what the small kernels do: `mean` (the above), `idle` (read nothing: what is left
 * is their launches and waits), `none` (left out: what they and their boundaries cost is the
 * difference), `norm` (hearth's rmsnorm in shape: the row's 4,096 values loaded by every block,
 * their squares summed in double, 1 / rms in double across the block, its 256 values scaled and
 * rounded to 16-bit integers per 32 as hearth's GEMV reads x, a float division a value) or
 * `normf` (the same in float, the rounding by a reciprocal).
 *
 * usage: hx-gpu-boundary [--runs N] [--sleep NS] [--layers N] [--small KIND]
 * A failed CUDA call prints where and exits 1 (a dev tool; STYLE rule 23). */
#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CUDA_CHECK(expr)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (expr);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "hx-gpu-boundary: %s failed at %s:%d: %s\n", #expr, __FILE__,      \
                    __LINE__, cudaGetErrorString(e_));                                         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

enum { MODE_GRID, MODE_FLAG, MODE_PLAIN, MODE_NONE, N_MODES };
enum { D = 4096, OUT_ROWS = 8, G_THREADS = 128, G_SMEM = 40 << 10, S_BLOCKS = 16,
       S_THREADS = 256 };

// What every kernel of the chain is told: the way of waiting, its counter and the one before.
struct Link {
    int mode;
    unsigned sleep_ns;
    unsigned *ctr;        // this kernel's counter (MODE_FLAG)
    const unsigned *prev; // the counter of the kernel before (NULL: the first kernel)
    unsigned prev_blocks;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The wait for the kernel before, as the mode says (every thread of the block calls it).
__device__ __forceinline__ void enter(const Link &l)
{
    if (l.mode == MODE_FLAG) {
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        if (threadIdx.x == 0 && l.prev)
            while (ld_acquire(l.prev) < l.prev_blocks)
                if (l.sleep_ns) __nanosleep(l.sleep_ns);
        __syncthreads();
    } else if (l.mode == MODE_GRID) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
}

// The block's writes are done: count it (MODE_FLAG).
__device__ __forceinline__ void leave(const Link &l)
{
    if (l.mode != MODE_FLAG) return;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(l.ctr, 1u);
    }
}

template <int N>
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[N / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < N / 32; w++) s += part[w]; // (the same order in every thread)
    return s;
}

// A GEMV-like block: the mean of x, its share of w streamed, 8 values of y.
__global__ void __launch_bounds__(G_THREADS)
    gemv_like(Link l, const float *__restrict__ x, const uint4 *__restrict__ w, size_t per16,
              float *__restrict__ y)
{
    extern __shared__ uint4 hold[]; // (only to keep 5 blocks an SM, as hearth's GEMV has)
    enter(l);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 4 / G_THREADS; i++) {
        const float4 v = __ldcg((const float4 *)x + threadIdx.x + i * G_THREADS);
        s += v.x + v.y + v.z + v.w;
    }
    const uint4 *p = w + blockIdx.x * per16;
    uint32_t acc = 0;
    for (size_t j = threadIdx.x; j < per16; j += 8 * G_THREADS) {
        uint4 t[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const size_t k = j + (size_t)u * G_THREADS;
            t[u] = k < per16 ? __ldcs(p + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= t[u].x ^ t[u].y ^ t[u].z ^ t[u].w;
    }
    if (acc == 0x9e3779b9u) hold[threadIdx.x] = make_uint4(acc, 0, 0, 0); // (keeps the loads)
    const float m = block_sum<G_THREADS>(s) / (float)D;
    if (threadIdx.x < OUT_ROWS)
        y[blockIdx.x * OUT_ROWS + threadIdx.x] = 0.5f * m + 1e-3f * (float)threadIdx.x;
    leave(l);
}

// A small block: the mean of y (n values), its 256 values of the next x.
__global__ void __launch_bounds__(S_THREADS)
    small_like(Link l, const float *__restrict__ y, int n, float *__restrict__ x)
{
    enter(l);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += S_THREADS) s += __ldcg(y + i);
    const float m = n ? block_sum<S_THREADS>(s) / (float)n : 0.0f; // (the first: no y)
    const int i = blockIdx.x * S_THREADS + threadIdx.x;
    x[i] = 0.5f * m + 1e-4f * (float)(i % 7);
    leave(l);
}

// A norm-like small block (--small norm / normf): the row's first D values of y, normed; the
// block's 256 into x, rounded to two bytes (q: high, then low) and a scale per 32 (qd).
template <typename ACC>
__global__ void __launch_bounds__(S_THREADS)
    norm_like(Link l, const float *__restrict__ y, float *__restrict__ x, int8_t *__restrict__ q,
              float *__restrict__ qd)
{
    __shared__ ACC part[S_THREADS / 32];
    const int i = blockIdx.x * S_THREADS + threadIdx.x;
    const float wi = 1.0f + 1e-3f * (float)(i % 5); // (a weight: known before the wait)
    enter(l);
    const float xi = __ldcg(y + i);
    ACC ss = 0;
#pragma unroll
    for (int k = 0; k < D / 4 / S_THREADS; k++) {
        const float4 v = __ldcg((const float4 *)y + threadIdx.x + k * S_THREADS);
        ss += (ACC)v.x * v.x + (ACC)v.y * v.y + (ACC)v.z * v.z + (ACC)v.w * v.w;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        ACC v = threadIdx.x < S_THREADS / 32 ? part[threadIdx.x] : (ACC)0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float scale = sizeof(ACC) == 8 ? (float)(1.0 / sqrt((double)part[0] / D + 1e-5))
                                         : rsqrtf((float)part[0] / D + 1e-5f);
    const float v = xi * scale * wi;
    x[i] = v;
    float m = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float d = m / 127.0f;
    int hi = 0, lo = 0;
    if (d > 0.0f) {
        if (sizeof(ACC) == 8) {
            hi = __float2int_rn(v / d);
            lo = __float2int_rn(__fmaf_rn(-(float)hi, d, v) * 256.0f / d);
        } else {
            const float r = 1.0f / d;
            hi = __float2int_rn(v * r);
            lo = __float2int_rn(__fmaf_rn(-(float)hi, d, v) * 256.0f * r);
        }
    }
    q[i] = (int8_t)hi;
    q[D + i] = (int8_t)max(-127, min(127, lo));
    if ((threadIdx.x & 31) == 0) qd[i / 32] = d / 256.0f;
    leave(l);
}

template <typename... P, typename... A>
static void launch(bool dependent, void (*k)(P...), unsigned grid, unsigned block, size_t smem,
                   cudaStream_t s, A... a)
{
    cudaLaunchAttribute at = {};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &at;
    cfg.numAttrs = dependent ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, ((P)a)...));
}

int main(int argc, char **argv)
{
    int runs = 20, layers = 32;
    const char *small = "mean";
    unsigned sleep_ns = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sleep") && i + 1 < argc) sleep_ns = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--small") && i + 1 < argc) small = argv[++i];
        else {
            fprintf(stderr, "usage: hx-gpu-boundary [--runs N] [--sleep NS] [--layers N] "
                            "[--small mean|idle|none|norm|normf]\n");
            return 2;
        }
    }
    static const char *kinds[] = {"mean", "idle", "none", "norm", "normf"};
    int kind = -1;
    for (int k = 0; k < 5; k++)
        if (!strcmp(small, kinds[k])) kind = k;
    if (runs < 1 || layers < 1 || layers > 64 || kind < 0) return 2;
    const bool has_small = kind != 2;
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const unsigned g_blocks = 5u * (unsigned)sms;
    const double mb[4] = {14.68, 8.39, 58.72, 29.36}; // q/k/v, o, gate/up, down (Q4_0, 8B)
    size_t per16[4], layer_bytes = 0;
    for (int k = 0; k < 4; k++) {
        per16[k] = (size_t)(mb[k] * 1e6 / 16.0 / g_blocks);
        layer_bytes += per16[k] * 16 * g_blocks;
    }
    const size_t w_bytes = layer_bytes * (size_t)layers;
    uint4 *w;
    float *x, *y;
    unsigned *ctr;
    const int n_k = 8 * layers;
    CUDA_CHECK(cudaMalloc(&w, w_bytes));
    CUDA_CHECK(cudaMalloc(&x, D * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&y, g_blocks * OUT_ROWS * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ctr, n_k * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(w, 0x5a, w_bytes));
    CUDA_CHECK(cudaFuncSetAttribute(gemv_like, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    G_SMEM));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const int n_launched = has_small ? n_k : n_k / 2;
    int8_t *q;
    float *qd;
    CUDA_CHECK(cudaMalloc(&q, 2 * D));
    CUDA_CHECK(cudaMalloc(&qd, D / 32 * sizeof(float)));
    printf("%s, %d SMs; %d layers, %d kernels a step, %.3f GB of weights; --sleep %u, "
           "--small %s\n", prop.name, sms, layers, n_launched, w_bytes / 1e9, sleep_ns, small);

    static const char *names[N_MODES] = {"grid", "flag", "plain", "none"};
    double step_us[N_MODES] = {0};
    std::vector<float> last[N_MODES];
    for (int mode = 0; mode < N_MODES; mode++) {
        const bool dep = mode != MODE_PLAIN;
        cudaGraph_t graph;
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CUDA_CHECK(cudaMemsetAsync(x, 0, D * sizeof(float), s));
        CUDA_CHECK(cudaMemsetAsync(y, 0, g_blocks * OUT_ROWS * sizeof(float), s));
        CUDA_CHECK(cudaMemsetAsync(ctr, 0, n_k * sizeof(unsigned), s));
        size_t off16 = 0;
        const unsigned *prev = nullptr; // the counter of the kernel launched last, its blocks
        unsigned prev_blocks = 0;
        for (int k = 0; k < n_k; k++) {
            if (k % 2 == 0 && !has_small) continue;
            const Link l = {mode, sleep_ns, ctr + k, prev, prev_blocks};
            prev = ctr + k;
            prev_blocks = k % 2 ? g_blocks : S_BLOCKS;
            if (k % 2 == 0) {
                if (kind == 3)
                    launch(dep, norm_like<double>, S_BLOCKS, S_THREADS, 0, s, l, y, x, q, qd);
                else if (kind == 4)
                    launch(dep, norm_like<float>, S_BLOCKS, S_THREADS, 0, s, l, y, x, q, qd);
                else
                    launch(dep, small_like, S_BLOCKS, S_THREADS, 0, s, l, y,
                           k && kind == 0 ? (int)(g_blocks * OUT_ROWS) : 0, x);
            } else {
                const int m = (k / 2) % 4;
                launch(dep, gemv_like, g_blocks, G_THREADS, G_SMEM, s, l, x, w + off16, per16[m],
                       y);
                off16 += per16[m] * g_blocks;
            }
        }
        CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        cudaGraphExec_t exec;
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        std::vector<float> t;
        for (int r = 0; r < runs + 3; r++) {
            CUDA_CHECK(cudaEventRecord(e0, s));
            CUDA_CHECK(cudaGraphLaunch(exec, s));
            CUDA_CHECK(cudaEventRecord(e1, s));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 3) t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        step_us[mode] = 1000.0 * t[t.size() / 2];
        last[mode].resize(D);
        CUDA_CHECK(cudaMemcpy(last[mode].data(), x, D * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        CUDA_CHECK(cudaGraphDestroy(graph));
    }
    const double bytes_us = w_bytes / 1e3 / (double)(step_us[MODE_NONE]);
    for (int mode = 0; mode < N_MODES; mode++)
        printf("%-5s: step %8.1f us (median of %d), %.3f us a boundary over none\n",
               names[mode], step_us[mode], runs,
               (step_us[mode] - step_us[MODE_NONE]) / (double)(n_launched - 1));
    const size_t n = D * sizeof(float);
    printf("none streams the weights at %.0f GB/s; flag's values %s grid's, plain's %s\n",
           bytes_us,
           memcmp(last[MODE_FLAG].data(), last[MODE_GRID].data(), n) ? "differ from" : "equal",
           memcmp(last[MODE_PLAIN].data(), last[MODE_GRID].data(), n) ? "differ" : "equal");
    return 0;
}
