// kernels.cu - the cuda backend's kernels and their launchers (kernels.h).
//
// Napkin math that shaped them. Decode is a GEMV over every weight once per step: at batch 1
// an 8B Q4_0 model reads ~4.7 GB per token, ~1 ms at the H200's ~4.5 TB/s, while its 16 GFLOP
// take ~0.2 ms on the CUDA cores even as plain FMAs; so the GEMV spends its effort on memory
// parallelism (a block of four warps per four output rows, its threads on adjacent 8-element
// slices of the rows' length, every row of the batch applied to each dequantized slice while
// it is in registers). Prefill is matrix bound: weights are dequantized to f16 in row chunks and multiplied by cuBLAS on the
// tensor cores (cuda_backend.c). Attention reads f16 K/V through the block table: four warps
// per (row, head) split the context, each lane scoring its own key of a 32-key chunk, then the
// warp accumulating V with lanes on dimensions (an online softmax over the chunks, as the CPU
// kernels do), and the four partial states merged at the end.
#include "backend/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "tensor/dtype.h"

namespace {

// ---- launches ----
//
// Programmatic dependent launch (sm_90 on): a decode step is some 300 small kernels in a row,
// each waiting for the one before. Every kernel is launched allowed to start before the one
// ahead of it on the stream has ended; its first act is to wait for that one
// (griddepcontrol.wait: the prior grid complete, its memory visible), then to let the next one
// launch, so a launch overlaps the kernel before it. Measured: +2% on an 8B decode step (the
// graph replay had already made launches cheap). Before sm_90 neither instruction is compiled
// in and the attribute is not set: plain stream order. HEARTH_CUDA_PDL=0 turns it off.
__device__ __forceinline__ void after_prior()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Attribute A of the current device, asked once per device (-1 when it cannot be had).
template <cudaDeviceAttr A>
int device_attr()
{
    static int v[64]; // per device: 0 until asked
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return -1;
    if (v[dev] == 0 && cudaDeviceGetAttribute(&v[dev], A, dev) != cudaSuccess) v[dev] = -1;
    return v[dev];
}

int device_major()
{
    return device_attr<cudaDevAttrComputeCapabilityMajor>();
}

bool dependent_launch()
{
    static const char *env = getenv("HEARTH_CUDA_PDL");
    static const bool off = env && strcmp(env, "0") == 0;
    return !off && device_major() >= 9;
}

// k<<<grid, block, smem, s>>>(a...) as a dependent launch where the device has them; a bad
// launch is left to cudaGetLastError, as with <<<>>>.
template <typename... P, typename... A>
void launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, hx_cuda_stream s, A... a)
{
    cudaLaunchAttribute at = {};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = (cudaStream_t)s;
    cfg.attrs = &at;
    cfg.numAttrs = dependent_launch() ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, ((P)a)...);
}

__device__ __forceinline__ float h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

// A K-quant super-block's f16 scales, 2 bytes at a time.
__device__ __forceinline__ uint16_t ld_u16(const uint8_t *p)
{
    return *(const uint16_t *)p;
}

// 16 bytes from a 16-byte aligned address.
__device__ __forceinline__ void ld16_a16(const uint8_t *p, uint8_t b[16])
{
    const uint4 v = *(const uint4 *)p;
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)(w[i / 4] >> (8 * (i % 4)));
}

__device__ __forceinline__ float load_sb(const void *p, int dt, int64_t g)
{
    if (dt == HX_DT_F32) return ((const float *)p)[g];
    const uint16_t h = ((const uint16_t *)p)[g];
    return dt == HX_DT_BF16 ? bf2f(h) : h2f(h);
}

// Before it waits for the kernel ahead (after_prior), a GEMV block asks L2 for its rows of the
// weight, which nothing in flight writes. Under programmatic dependent launch the block is
// resident while that kernel (an rmsnorm, the rope, attention, the GLU: short and latency
// bound, using little of the memory's bandwidth) runs, so a single-wave GEMV's weights stream
// in during it rather than after. Before sm_90 the block starts only once the kernel ahead has
// ended, and nothing is asked.
__device__ __forceinline__ void prefetch_span(const void *p, int64_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const char *c = (const char *)p;
    for (int64_t off = (int64_t)threadIdx.x * 128; off < bytes; off += (int64_t)blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
    if (threadIdx.x == 0 && bytes > 0) // the last line, when p was not at a line's start
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c + bytes - 1));
#endif
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

// Scale and min of sub-block j of a Q4_K/Q5_K super-block (the packing is in quant_ref.c).
__device__ __forceinline__ void k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Scale d and offset m of block j of row o of a Q4_0/Q4_1/Q8_0 weight, which the backend
// uploads split in two (kernels.h): value = d * q + m.
template <int DT>
__device__ __forceinline__ void b32_scale(const hx_cuda_wmat &w, int64_t o, int64_t j, float *d,
                                          float *m)
{
    const int64_t g = o * (w.n_in / 32) + j;
    *d = h2f(((const uint16_t *)w.scales)[g]);
    *m = DT == HX_DT_Q4_1 ? h2f(((const uint16_t *)w.biases)[g]) : DT == HX_DT_Q4_0 ? -8.0f * *d : 0.0f;
}

// Elements [32 j, 32 j + 32) of row `o` of w, dequantized (the same values as the CPU's
// reference dequantizers in src/tensor/quant_ref.c).
template <int DT>
__device__ __forceinline__ void sub32(const hx_cuda_wmat &w, int64_t o, int64_t j, float v[32])
{
    const uint8_t *row = (const uint8_t *)w.q + o * w.row_bytes;
    if (DT == HX_DT_F32) {
        const float4 *p = (const float4 *)(row + j * 128);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 a = p[i];
            v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
        }
    } else if (DT == HX_DT_F16 || DT == HX_DT_BF16) {
        const uint4 *p = (const uint4 *)(row + j * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = p[i];
            const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint16_t lo = (uint16_t)u[k], hi = (uint16_t)(u[k] >> 16);
                v[8 * i + 2 * k] = DT == HX_DT_F16 ? h2f(lo) : bf2f(lo);
                v[8 * i + 2 * k + 1] = DT == HX_DT_F16 ? h2f(hi) : bf2f(hi);
            }
        }
    } else if (DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1 || DT == HX_DT_Q8_0) {
        float d, m;
        b32_scale<DT>(w, o, j, &d, &m);
        uint8_t b[16];
        if (DT == HX_DT_Q8_0) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                ld16_a16(row + j * 32 + 16 * h, b);
#pragma unroll
                for (int i = 0; i < 16; i++) v[16 * h + i] = d * (float)(int8_t)b[i];
            }
        } else {
            ld16_a16(row + j * 16, b);
#pragma unroll
            for (int i = 0; i < 16; i++) {
                v[i] = d * (float)(b[i] & 15) + m;
                v[i + 16] = d * (float)(b[i] >> 4) + m;
            }
        }
    } else if (DT == HX_DT_Q4_K || DT == HX_DT_Q5_K) {
        const int s = (int)(j & 7);
        const uint8_t *p = row + (j >> 3) * (DT == HX_DT_Q4_K ? 144 : 176);
        const float d = h2f(ld_u16(p)), dmin = h2f(ld_u16(p + 2));
        int sc, mn;
        k_scale_min(p + 4, s, &sc, &mn);
        const float ds = d * (float)sc, dm = dmin * (float)mn;
        const uint8_t *qs = p + (DT == HX_DT_Q4_K ? 16 : 48) + 32 * (s >> 1);
        uint8_t b[16], hb[16];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ld16_a16(qs + 16 * h, b);
            if (DT == HX_DT_Q5_K) ld16_a16(p + 16 + 16 * h, hb);
#pragma unroll
            for (int i = 0; i < 16; i++) {
                int q = (s & 1) ? b[i] >> 4 : b[i] & 15;
                if (DT == HX_DT_Q5_K) q |= ((hb[i] >> s) & 1) << 4;
                v[16 * h + i] = ds * (float)q - dm;
            }
        }
    } else if (DT == HX_DT_Q6_K) {
        const int s = (int)(j & 7), half = s >> 2, t = s & 3;
        const uint8_t *p = row + (j >> 3) * HX_CUDA_Q6_K_BYTES;
        const float d = h2f(ld_u16(p + 208));
        const uint8_t *ql = p + 64 * half + 32 * (t & 1), *qh = p + 128 + 32 * half;
        const int8_t *sc = (const int8_t *)(p + 192 + 8 * half + 2 * t);
        uint8_t b[16], hb[16];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ld16_a16(ql + 16 * h, b);
            ld16_a16(qh + 16 * h, hb);
            const float ds = d * (float)sc[h];
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int lo = (t >> 1) ? b[i] >> 4 : b[i] & 15;
                const int q = (lo | (((hb[i] >> (2 * t)) & 3) << 4)) - 32;
                v[16 * h + i] = ds * (float)q;
            }
        }
    } else if (DT == HX_DT_MLX4 || DT == HX_DT_MLX8) {
        const int64_t g = o * (w.n_in / w.group_size) + j * 32 / w.group_size;
        const float sc = load_sb(w.scales, w.sb_dtype, g), bi = load_sb(w.biases, w.sb_dtype, g);
        uint8_t b[16];
        if (DT == HX_DT_MLX4) {
            ld16_a16(row + j * 16, b);
#pragma unroll
            for (int i = 0; i < 16; i++) {
                v[2 * i] = sc * (float)(b[i] & 15) + bi;
                v[2 * i + 1] = sc * (float)(b[i] >> 4) + bi;
            }
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                ld16_a16(row + j * 32 + 16 * h, b);
#pragma unroll
                for (int i = 0; i < 16; i++) v[16 * h + i] = sc * (float)b[i] + bi;
            }
        }
    }
}

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16 bytes from global to shared memory, asynchronously; zeros when !valid.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// 4 bytes from global to shared memory, asynchronously (through L1).
__device__ __forceinline__ void cp_async4(void *dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src)
                 : "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Value i of x (of n) rounded as hx_cuda_quantize_x does, by the 32 lanes of a warp holding
// values i0..i0 + 31 (i0 a multiple of 32) in lane order: a high byte at the scale max |x| /
// 127 of the 32, and a low byte for what it left over at 1/256 of that scale.
__device__ __forceinline__ void round_x(float y, int64_t i, int64_t n, int8_t *__restrict__ q,
                                        float *__restrict__ d)
{
    const float d1 = warp_max(fabsf(y)) / 127.0f;
    int hi = 0, lo = 0;
    if (d1 > 0.0f) {
        hi = __float2int_rn(y / d1);
        lo = __float2int_rn(__fmaf_rn(-(float)hi, d1, y) * 256.0f / d1);
        lo = lo > 127 ? 127 : lo < -127 ? -127 : lo;
    }
    q[i] = (int8_t)hi;
    q[n + i] = (int8_t)lo;
    if ((threadIdx.x & 31) == 0) d[i / 32] = d1 / 256.0f;
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

// A routed launch (hx_cuda_gemv_routed): pair p = blockIdx.y multiplies the weight
// table[ids[p]] by row p / x_div of x, into row p of job[0].out.
struct gemv_route {
    const int32_t      *ids;
    const hx_cuda_wmat *table;
    int                 x_div;
};

// The GEMVs of one launch (hx_cuda_gemv): job k's blocks start at block start[k].
struct gemv_set {
    hx_cuda_gemv_job job[HX_CUDA_GEMV_SET];
    uint32_t         start[HX_CUDA_GEMV_SET];
    int              n;
    gemv_route       route; // ROUTED kernels only
};
static_assert(HX_CUDA_GEMV_SET == 3, "gemv_job picks among three");

// This block's job, and its first output row (blocks of ROWS output rows).
template <int ROWS = GEMV_ROWS>
__device__ __forceinline__ hx_cuda_gemv_job gemv_job(const gemv_set &set, int64_t *o0)
{
    int j = 0;
#pragma unroll
    for (int k = 1; k < HX_CUDA_GEMV_SET; k++)
        if (k < set.n && blockIdx.x >= set.start[k]) j = k;
    *o0 = (int64_t)(blockIdx.x - set.start[j]) * ROWS;
    return j == 0 ? set.job[0] : j == 1 ? set.job[1] : set.job[2];
}

// The block's job as gemv_job gives it or, ROUTED, as its pair's route says: the weight its
// expert's (read after the wait for the kernel ahead, which wrote the ids), the output and x
// moved to the pair's rows (one row of x: R is 1).
template <bool ROUTED, typename XQ, typename XD>
__device__ __forceinline__ hx_cuda_gemv_job gemv_job_of(const gemv_set &set, int64_t *o0, XQ *xq,
                                                        XD *xd)
{
    if constexpr (ROUTED) {
        after_prior();
        const int p = (int)blockIdx.y;
        hx_cuda_gemv_job job = set.job[0];
        job.w = set.route.table[set.route.ids[p]];
        job.out += (int64_t)p * job.w.n_out;
        *o0 = (int64_t)blockIdx.x * GEMV_ROWS;
        const int64_t row = p / set.route.x_div;
        *xq += row * job.w.n_in;
        *xd += row * (job.w.n_in / 32);
        return job;
    } else {
        return gemv_job(set, o0);
    }
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
// adds into the job's acc).
template <int R, int ROWS = GEMV_ROWS>
__device__ __forceinline__ void gemv_store(const float (&acc)[ROWS][R], int64_t o0,
                                           int n_rows, const hx_cuda_gemv_job &job)
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
        gemv_put(job, o0 + k, r, s);
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
    gemv_store<R>(acc, o0, n_rows, job);
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
    const hx_cuda_gemv_job job = gemv_job_of<ROUTED>(set, &o0, &xq, &xd);
    const hx_cuda_wmat &w = job.w;
    if constexpr (!ROUTED) {
        prefetch_rows(w, o0, GEMV_ROWS);
        after_prior();
    }
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
    gemv_store<R>(acc, o0, n_rows, job);
}

// The formats whose GEMV reads wide: a thread takes a unit of UNIT values of a row whose codes
// are one or two aligned 16-byte loads. Q4_0, Q4_1 and Q8_0 (uploaded with their codes apart
// from their scales, kernels.h): a 32-value block. MLX 4-bit: 32 values of a group. Q4_K: the
// 64 values of two sub-blocks sharing 32 bytes of codes (low nibbles, then high) in a 144-byte
// super-block.
template <int DT>
constexpr bool gemv_wide()
{
    return DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1 || DT == HX_DT_Q8_0 || DT == HX_DT_MLX4 ||
           DT == HX_DT_Q4_K;
}

template <int DT>
constexpr int wide_unit()
{
    return DT == HX_DT_Q4_K ? 64 : 32;
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

// A weight load: through the read-only cache from global memory, or a plain load from shared
// memory (SH).
template <bool SH, typename T>
__device__ __forceinline__ T ld_w(const T *p)
{
    if constexpr (SH) return *p;
    else return __ldg(p);
}

// sum over unit u of row o of (d q + m) x, with x given as words xw of 4 values each in order
// (xw[0] the high bytes, xw[1] the low ones), their sums xs and scales dx per 32 values: integer
// dot products (dp4a) per 32 values, then one multiply-add. MLX's nibbles are in a word's order
// (value e in bits 4e), so its x words come in even/odd order (words 0..3 the even values of
// each 8, 4..7 the odd ones). SH: w's arrays are in shared memory (the streamed GEMV's stages).
template <int DT, bool SH = false>
__device__ __forceinline__ float wide_dot(const hx_cuda_wmat &w, int64_t o, int64_t u,
                                          const int (&xw)[2][wide_unit<DT>() / 4],
                                          const int (&xs)[wide_unit<DT>() / 32],
                                          const float (&dx)[wide_unit<DT>() / 32])
{
    constexpr uint32_t LO4 = 0x0F0F0F0Fu;
    const uint8_t *row = (const uint8_t *)w.q + o * w.row_bytes;
    if constexpr (DT == HX_DT_Q4_K) {
        const uint8_t *p = row + (u >> 2) * 144;
        const int i = (int)(u & 3);
        const uint4 a = ld_w<SH>((const uint4 *)(p + 16 + 32 * i)),
                    b = ld_w<SH>((const uint4 *)(p + 32 + 32 * i));
        const uint32_t c[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        const uint32_t dd = ld_w<SH>((const uint32_t *)p);
        const uint32_t s0 = ld_w<SH>((const uint32_t *)(p + 4)),
                       s1 = ld_w<SH>((const uint32_t *)(p + 8)),
                       s2 = ld_w<SH>((const uint32_t *)(p + 12));
        uint8_t sc[12];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            sc[k] = (uint8_t)(s0 >> (8 * k));
            sc[4 + k] = (uint8_t)(s1 >> (8 * k));
            sc[8 + k] = (uint8_t)(s2 >> (8 * k));
        }
        uint32_t lo4[8], hi4[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            lo4[k] = c[k] & LO4;
            hi4[k] = (c[k] >> 4) & LO4;
        }
        const int lo = x_dot_words<8>(lo4, xw[0], xw[1]);
        const int hi = x_dot_words<8>(hi4, xw[0] + 8, xw[1] + 8);
        int sc0, mn0, sc1, mn1;
        k_scale_min(sc, 2 * i, &sc0, &mn0);
        k_scale_min(sc, 2 * i + 1, &sc1, &mn1);
        const float d = h2f((uint16_t)dd), dmin = h2f((uint16_t)(dd >> 16));
        return dx[0] * (d * (float)sc0 * (float)lo - dmin * (float)(mn0 * xs[0])) +
               dx[1] * (d * (float)sc1 * (float)hi - dmin * (float)(mn1 * xs[1]));
    } else {
        uint32_t c[8];
        float d, m;
        if constexpr (DT == HX_DT_MLX4) {
            const uint4 a = ld_w<SH>((const uint4 *)(row + 16 * u));
            const uint32_t a4[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                c[k] = a4[k] & LO4;
                c[4 + k] = (a4[k] >> 4) & LO4;
            }
            const int64_t g = o * (w.n_in / w.group_size) + 32 * u / w.group_size;
            d = load_sb(w.scales, w.sb_dtype, g);
            m = load_sb(w.biases, w.sb_dtype, g);
        } else {
            constexpr int QB = DT == HX_DT_Q8_0 ? 32 : 16; // code bytes per block
            const uint8_t *q = row + u * QB;
            const uint4 a = ld_w<SH>((const uint4 *)q);
            c[0] = a.x, c[1] = a.y, c[2] = a.z, c[3] = a.w;
            if constexpr (DT == HX_DT_Q8_0) {
                const uint4 b = ld_w<SH>((const uint4 *)q + 1);
                c[4] = b.x, c[5] = b.y, c[6] = b.z, c[7] = b.w;
            } else { // byte i holds value i (low nibble) and value i + 16 (high)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    c[4 + k] = (c[k] >> 4) & LO4;
                    c[k] &= LO4;
                }
            }
            b32_scale<DT>(w, o, u, &d, &m);
        }
        return dx[0] * (d * (float)x_dot_words<8>(c, xw[0], xw[1]) + m * (float)xs[0]);
    }
}

// Unit u of an activation row as wide_dot takes it: its words xw (high bytes, then low ones, n
// bytes apart in xq), their sums xs and the scales dx of its 32-value pieces.
template <int DT>
__device__ __forceinline__ void wide_x(const int8_t *xq, const float *xd, int64_t n, int64_t u,
                                       int (&xw)[2][wide_unit<DT>() / 4],
                                       int (&xs)[wide_unit<DT>() / 32],
                                       float (&dx)[wide_unit<DT>() / 32])
{
    constexpr int U = wide_unit<DT>(), NW = U / 4, NB = U / 32;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const uint4 *p = (const uint4 *)(xq + t * n + u * U);
#pragma unroll
        for (int k = 0; k < NW / 4; k++) {
            const uint4 a = __ldg(p + k);
            xw[t][4 * k] = (int)a.x, xw[t][4 * k + 1] = (int)a.y;
            xw[t][4 * k + 2] = (int)a.z, xw[t][4 * k + 3] = (int)a.w;
        }
        if constexpr (DT == HX_DT_MLX4) { // to even/odd order (see wide_dot)
            int e[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                e[k] = (int)__byte_perm(xw[t][2 * k], xw[t][2 * k + 1], 0x6420);
                e[4 + k] = (int)__byte_perm(xw[t][2 * k], xw[t][2 * k + 1], 0x7531);
            }
#pragma unroll
            for (int k = 0; k < 8; k++) xw[t][k] = e[k];
        }
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        dx[b] = __ldg(xd + u * NB + b);
        const uint32_t ones[8] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u,
                                  0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
        xs[b] = x_dot_words<8>(ones, xw[0] + 8 * b, xw[1] + 8 * b);
    }
}

// The GEMV over the wide formats with x as 16-bit integers (hx_cuda_quantize_x): thread t of the
// block takes units t, t + 128, ... of the rows' length (one pass for a 4,096-wide row of
// 32-value units), loads the unit's activations once for all batch rows and then, for each of
// the block's GEMV_ROWS output rows, its codes, with 16 bytes of codes per load.
template <int DT, int R, bool ROUTED = false>
__global__ void __launch_bounds__(32 * GEMV_WARPS)
    gemv_wide_kernel(const __grid_constant__ gemv_set set, const int8_t *__restrict__ xq,
                     const float *__restrict__ xd, int n_rows)
{
    int64_t o0;
    const hx_cuda_gemv_job job = gemv_job_of<ROUTED>(set, &o0, &xq, &xd);
    const hx_cuda_wmat &w = job.w;
    if constexpr (!ROUTED) {
        prefetch_rows(w, o0, GEMV_ROWS);
        after_prior();
    }
    constexpr int U = wide_unit<DT>(), NW = U / 4, NB = U / 32;
    const int64_t n_units = w.n_in / U;
    float acc[GEMV_ROWS][R] = {};
    const int64_t n = (int64_t)n_rows * w.n_in; // the low bytes' offset
    // Q4_K: two units' loads in flight (its rows are several trips a thread; measured +11% on
    // an 8B decode); the 32-value formats lost 10% so (registers, fewer blocks an SM)
#pragma unroll(DT == HX_DT_Q4_K ? 2 : 1)
    for (int64_t u = threadIdx.x; u < n_units; u += 32 * GEMV_WARPS) {
        int xw[R][2][NW], xs[R][NB];
        float dx[R][NB];
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < n_rows)
                wide_x<DT>(xq + r * w.n_in, xd + r * (w.n_in / 32), n, u, xw[r], xs[r], dx[r]);
#pragma unroll
        for (int k = 0; k < GEMV_ROWS; k++) {
            const int64_t o = o0 + k < w.n_out ? o0 + k : w.n_out - 1;
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < n_rows) acc[k][r] += wide_dot<DT>(w, o, u, xw[r], xs[r], dx[r]);
        }
    }
    gemv_store<R>(acc, o0, n_rows, job);
}

// ---- the streamed GEMV: one activation row, the weights brought by the bulk copy engine ----
//
// At one row the GEMV above reads 1.3-3.3 TB/s of an H200's 4.5 (hx-gpu-kernels, weights not in
// L2): each block loads its four rows once, then reduces and ends, and while its threads add up
// no load of theirs is in flight. Here a block stays for the whole launch and takes chunks of S
// rows in turn (chunk blockIdx.x, + gridDim.x, ...); one thread asks the copy engine
// (cp.async.bulk, sm_90) for each chunk's codes, scales and offsets into one of STREAM_STAGES
// shared buffers, STREAM_STAGES chunks ahead of the threads, which compute from shared memory
// (wide_dot, as above) and reduce while later chunks arrive. The first chunks are asked for
// before the wait for the kernel ahead (nothing in flight writes a weight).
// Opt-in (HEARTH_CUDA_STREAM_GEMV=1) until it is measured: it was written in a session with no
// GPU lent; test_cuda_ops's gemv_stream case checks it against the CPU, docs/performance.md
// says how to time it against the GEMV above.
constexpr int STREAM_THREADS = 128;
constexpr int STREAM_STAGES = 4;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

__device__ __forceinline__ void bar_init(uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
#endif
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) to shared memory, counted
// on bar (whose expected count of bytes the caller has set).
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes,
                                          uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}

__device__ __forceinline__ void bar_expect(uint64_t *bar, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

// Waits for phase `parity` of bar to complete (its bytes arrived).
__device__ __forceinline__ void bar_wait(uint64_t *bar, uint32_t parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n"
                 "}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
#endif
}

// Bytes per row of a weight's codes, scales and offsets (the pieces a stage holds S rows of).
struct stream_row {
    uint32_t q, sb, bi;
};

__host__ __device__ inline stream_row stream_bytes(const hx_cuda_wmat &w)
{
    const uint32_t sb = w.scales ? (uint32_t)(w.n_in / w.group_size *
                                              (w.sb_dtype == HX_DT_F32 ? 4 : 2))
                                 : 0;
    return {(uint32_t)w.row_bytes, sb, w.biases ? sb : 0};
}

// Chunk c of the set: its job, first row and rows (set.start counts chunks of S rows).
template <int S>
__device__ __forceinline__ int stream_chunk(const gemv_set &set, uint32_t c, int64_t *o0,
                                            int *rows)
{
    int j = 0;
#pragma unroll
    for (int k = 1; k < HX_CUDA_GEMV_SET; k++)
        if (k < set.n && c >= set.start[k]) j = k;
    *o0 = (int64_t)(c - set.start[j]) * S;
    const int64_t n_out = set.job[j].w.n_out;
    *rows = (int)(n_out - *o0 < S ? n_out - *o0 : S);
    return j;
}

template <int DT, int S>
__global__ void __launch_bounds__(STREAM_THREADS)
    gemv_stream_kernel(const __grid_constant__ gemv_set set, const int8_t *__restrict__ xq,
                       const float *__restrict__ xd, uint32_t n_chunks)
{
    extern __shared__ __align__(128) uint8_t stage[];
    __shared__ uint64_t full[STREAM_STAGES];
    const stream_row rb = stream_bytes(set.job[0].w); // every job of a set has the same n_in
    const uint32_t per = rb.q + rb.sb + rb.bi, stage_bytes = S * per;
    // thread 0 asks for chunk c into buffer b
    auto ask = [&](uint32_t c, int b) {
        int64_t o0;
        int rows;
        const hx_cuda_wmat &w = set.job[stream_chunk<S>(set, c, &o0, &rows)].w;
        uint8_t *dst = stage + (size_t)b * stage_bytes;
        bar_expect(&full[b], rows * per);
        bulk_load(dst, (const uint8_t *)w.q + o0 * rb.q, rows * rb.q, &full[b]);
        if (rb.sb)
            bulk_load(dst + S * rb.q, (const uint8_t *)w.scales + o0 * rb.sb, rows * rb.sb,
                      &full[b]);
        if (rb.bi)
            bulk_load(dst + S * (rb.q + rb.sb), (const uint8_t *)w.biases + o0 * rb.bi,
                      rows * rb.bi, &full[b]);
    };
    if (threadIdx.x == 0) {
        for (int b = 0; b < STREAM_STAGES; b++) bar_init(&full[b]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
        for (int b = 0; b < STREAM_STAGES; b++)
            if (blockIdx.x + b * gridDim.x < n_chunks) ask(blockIdx.x + b * gridDim.x, b);
    }
    __syncthreads();
    after_prior();
    constexpr int U = wide_unit<DT>(), NW = U / 4, NB = U / 32;
    const int64_t n_in = set.job[0].w.n_in, n_units = n_in / U;
    int it = 0;
    for (uint32_t c = blockIdx.x; c < n_chunks; c += gridDim.x, it++) {
        const int b = it % STREAM_STAGES;
        int64_t o0;
        int rows;
        const hx_cuda_gemv_job &job = set.job[stream_chunk<S>(set, c, &o0, &rows)];
        // the stage as a weight of S rows (row k of the chunk is its row k)
        hx_cuda_wmat w = job.w;
        uint8_t *base = stage + (size_t)b * stage_bytes;
        w.q = base;
        w.scales = rb.sb ? base + S * rb.q : NULL;
        w.biases = rb.bi ? base + S * (rb.q + rb.sb) : NULL;
        bar_wait(&full[b], (uint32_t)(it / STREAM_STAGES) & 1);
        float acc[S][1] = {};
        for (int64_t u = threadIdx.x; u < n_units; u += STREAM_THREADS) {
            int xw[2][NW], xs[NB];
            float dx[NB];
            wide_x<DT>(xq, xd, n_in, u, xw, xs, dx);
#pragma unroll
            for (int k = 0; k < S; k++)
                acc[k][0] += wide_dot<DT, true>(w, k < rows ? k : rows - 1, u, xw, xs, dx);
        }
        __syncthreads(); // every thread is done with buffer b: it takes the chunk STAGES on
        const uint32_t next = c + STREAM_STAGES * gridDim.x;
        if (threadIdx.x == 0 && next < n_chunks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
            ask(next, b);
        }
        gemv_store<1, S>(acc, o0, 1, job);
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
    uint16_t       *d, *m;  // [MMA_ROWS][SR] each
    float          *xd;     // [n_rows][MMA_KC]
    int             n_rows;
    __host__ __device__ static constexpr int bytes(int n_rows) // a multiple of 16
    {
        return FIXED + n_rows * (2 * XR + MMA_KC * 4);
    }
    __device__ mma_stage(uint8_t *p, int rows) : n_rows(rows)
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
        *d = h2f(s.d[row * mma_stage<DT>::SR + b]);
        *m = DT == HX_DT_Q4_1 ? h2f(s.m[row * mma_stage<DT>::SR + b]) : 0.0f;
    }
}

// Copies blocks [b0, b0 + kc) of the block's rows (from o0; past n_out the last row) and of
// x's rows into st, asynchronously: 16-byte pieces for codes and x, 4 for scales (kc and the
// row's block count are even). Pieces are counted over a whole stage, so that every division
// is by a power of two; those past kc are skipped.
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
        for (int i = threadIdx.x; i < MMA_ROWS * SP; i += T) {
            const int r = i / SP, k = i % SP;
            const int64_t o = o0 + r < w.n_out ? o0 + r : w.n_out - 1;
            if (2 * k < kc) {
                cp_async4(st.d + r * S::SR + 2 * k,
                          (const uint16_t *)w.scales + o * nb + b0 + 2 * k);
                if constexpr (DT == HX_DT_Q4_1)
                    cp_async4(st.m + r * S::SR + 2 * k,
                              (const uint16_t *)w.biases + o * nb + b0 + 2 * k);
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
    auto stage = [&](int c) { // stage c's buffer
        return S((uint8_t *)mma_smem + (c % MMA_STAGES) * stage_bytes, n_rows);
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

// A thread per 32 values (its 64 bytes of output staged in shared memory, then written by the
// block as whole 512-byte runs a warp instead of 16 bytes every 64).
constexpr int DEQUANT_THREADS = 256;

template <int DT>
__global__ void __launch_bounds__(DEQUANT_THREADS)
    dequant_kernel(hx_cuda_wmat w, int64_t o0, int64_t n_sub_total, void *dst, int bf16)
{
    after_prior();
    __shared__ uint4 tile[DEQUANT_THREADS * 4];
    const int64_t i = (int64_t)blockIdx.x * DEQUANT_THREADS + threadIdx.x;
    if (i < n_sub_total) {
        const int64_t n_sub = w.n_in / 32, o = o0 + i / n_sub, j = i % n_sub;
        float v[32];
        sub32<DT>(w, o, j, v);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t u[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float a = v[8 * k + 2 * e], b = v[8 * k + 2 * e + 1];
                uint16_t ha, hb;
                if (bf16) {
                    ha = __bfloat16_as_ushort(__float2bfloat16_rn(a));
                    hb = __bfloat16_as_ushort(__float2bfloat16_rn(b));
                } else {
                    ha = __half_as_ushort(__float2half_rn(a));
                    hb = __half_as_ushort(__float2half_rn(b));
                }
                u[e] = (uint32_t)ha | ((uint32_t)hb << 16);
            }
            tile[threadIdx.x * 4 + k] = make_uint4(u[0], u[1], u[2], u[3]);
        }
    }
    __syncthreads();
    const int64_t base = (int64_t)blockIdx.x * DEQUANT_THREADS * 4, n4 = n_sub_total * 4;
    uint4 *d = (uint4 *)dst;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int j = k * DEQUANT_THREADS + threadIdx.x;
        if (base + j < n4) d[base + j] = tile[j];
    }
}

template <int DT>
__global__ void embed_kernel(hx_cuda_wmat w, const int32_t *ids, int64_t n_total, float *out)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int64_t n_sub = w.n_in / 32, t = i / n_sub, j = i % n_sub;
    float v[32];
    sub32<DT>(w, ids[t], j, v);
    float4 *d = (float4 *)(out + t * w.n_in + j * 32);
#pragma unroll
    for (int k = 0; k < 8; k++) d[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

// ---- row and element-wise ops ----

// With xq, the output is also rounded for the GEMV that reads it (d a multiple of 32).
// 1 / rms of a row from each thread's part ss of its sum of squares (the block's threads all
// call it; in double, as the CPU does: d_model can be 8192).
__device__ float rms_scale(double ss, int64_t d, float eps)
{
    __shared__ double part[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        double v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    return (float)(1.0 / sqrt(part[0] / (double)d + (double)eps));
}

// A row per block; thread t holds elements t, t + blockDim, ... (E of them) in registers, so x is
// read once, and loads w before waiting for the kernel ahead (w is a weight: nothing in flight
// writes it), so that load overlaps that kernel's end.
template <int E>
__global__ void __launch_bounds__(1024)
    rmsnorm_kernel(const float *x, const float *w, int64_t d, float eps, float *out, int8_t *xq,
                   float *xd)
{
    float wv[E], xv[E];
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        wv[k] = i < d ? w[i] : 0.0f;
    }
    after_prior();
    const float *xr = x + blockIdx.x * d;
    float *yr = out + blockIdx.x * d;
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        xv[k] = i < d ? xr[i] : 0.0f;
        ss += (double)xv[k] * xv[k];
    }
    const float scale = rms_scale(ss, d, eps);
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        if (i >= d) continue; // warp-uniform when d % 32 == 0, as the rounding needs
        const float y = xv[k] * scale * wv[k];
        yr[i] = y;
        if (xq) round_x(y, blockIdx.x * d + i, (int64_t)gridDim.x * d, xq, xd);
    }
}

// Rows wider than 16 values a thread (d > 16,384): the same, reading x twice.
__global__ void __launch_bounds__(1024)
    rmsnorm_wide_kernel(const float *x, const float *w, int64_t d, float eps, float *out,
                        int8_t *xq, float *xd)
{
    after_prior();
    const float *xr = x + blockIdx.x * d;
    float *yr = out + blockIdx.x * d;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += (double)xr[i] * xr[i];
    const float scale = rms_scale(ss, d, eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        const float y = xr[i] * scale * w[i];
        yr[i] = y;
        if (xq) round_x(y, blockIdx.x * d + i, (int64_t)gridDim.x * d, xq, xd);
    }
}

// One thread per (row, head, rotated pair); the angle in double, as on the CPU.
__device__ __forceinline__ size_t kv_index(const hx_cuda_kv &kv, int32_t block, int32_t layer,
                                           int32_t h, int32_t off)
{
    return ((((size_t)block * kv.n_layer + layer) * kv.n_kv_head + h) * kv.block_tokens + off) *
           (size_t)kv.d_head;
}

// Element c of head h of row t's K (or V) stored at its position in the cache, in f16.
__device__ __forceinline__ void kv_store(const hx_cuda_kv &kv, uint16_t *cache, int32_t layer,
                                         const int32_t *blocks, int32_t p, int32_t h, int32_t c,
                                         float v)
{
    const size_t at = kv_index(kv, blocks[p / kv.block_tokens], layer, h, p % kv.block_tokens);
    cache[at + c] = __half_as_ushort(__float2half_rn(v));
}

// A thread per rotated pair: x's n_total pairs, then x2's n_total2 (n_head2 heads). With a
// cache (kv.k not NULL), x2 is K: its rotated pairs are also stored, and n_total3 more threads
// store V and K's unrotated elements (those from n_rot = 2 half on), as kv_write_kernel does.
__global__ void rope_kernel(float *x, int32_t n_head, float *x2, int32_t n_head2,
                            const int32_t *pos, int64_t n_total, int64_t n_total2,
                            int32_t d_head, const float *inv_freq, int32_t half, float mscale,
                            int pairs, hx_cuda_kv kv, int32_t layer, const int32_t *blocks,
                            const float *v, int64_t n_total3)
{
    after_prior();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total + n_total2 + n_total3) return;
    if (i >= n_total + n_total2) { // V, and K past the rotation, into the cache
        i -= n_total + n_total2;
        const int32_t kvd = n_head2 * d_head, e = (int32_t)(i % kvd);
        const int32_t p = pos[i / kvd], h = e / d_head, c = e % d_head;
        kv_store(kv, kv.v, layer, blocks, p, h, c, v[i]);
        if (c >= 2 * half) kv_store(kv, kv.k, layer, blocks, p, h, c, x2[i]);
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
    const double ang = (double)pos[t] * (double)inv_freq[p];
    const float cs = (float)cos(ang) * mscale, sn = (float)sin(ang) * mscale;
    float *r = x + th * d_head;
    const int32_t i0 = pairs ? 2 * p : p, i1 = pairs ? 2 * p + 1 : p + half;
    const float x0 = r[i0], x1 = r[i1];
    const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
    r[i0] = y0;
    r[i1] = y1;
    if (second && kv.k) {
        const int32_t h = (int32_t)(th % n_head);
        kv_store(kv, kv.k, layer, blocks, pos[t], h, i0, y0);
        kv_store(kv, kv.k, layer, blocks, pos[t], h, i1, y1);
    }
}

__global__ void kv_write_kernel(hx_cuda_kv kv, int32_t layer, const int32_t *blocks,
                                const int32_t *pos, const float *k, const float *v,
                                int64_t n_total)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int32_t kvd = kv.n_kv_head * kv.d_head;
    const int32_t e = (int32_t)(i % kvd), h = e / kv.d_head, c = e % kv.d_head;
    kv_store(kv, kv.k, layer, blocks, pos[i / kvd], h, c, k[i]);
    kv_store(kv, kv.v, layer, blocks, pos[i / kvd], h, c, v[i]);
}

// kv_write_kernel for rows of several sequences (hx_cuda_rows).
__global__ void kv_write_rows_kernel(hx_cuda_kv kv, int32_t layer,
                                     const __grid_constant__ hx_cuda_rows rows, const float *k,
                                     const float *v, int64_t n_total)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int32_t kvd = kv.n_kv_head * kv.d_head;
    const int32_t e = (int32_t)(i % kvd), h = e / kv.d_head, c = e % kv.d_head;
    const int64_t t = i / kvd;
    kv_store(kv, kv.k, layer, rows.tab[t], *rows.pos[t], h, c, k[i]);
    kv_store(kv, kv.v, layer, rows.tab[t], *rows.pos[t], h, c, v[i]);
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

__device__ __forceinline__ att_row att_begin(const hx_cuda_kv &kv, const float *__restrict__ q,
                                             int32_t n_head, float *qs)
{
    att_row a;
    a.r = blockIdx.x;
    a.t = a.r / n_head;
    a.h = (int32_t)(a.r % n_head);
    a.kvh = a.h / (n_head / kv.n_kv_head);
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
            if (vec) {
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

// ---- decode attention split over the context ----
//
// A decode step has a few rows, so one block per (row, head) keeps only n_head blocks busy
// (32 of 132 SMs) and each walks the whole context: at 4,096 keys that was ~0.7 ms a layer
// for 17 MB of cache, ~4 us at the roofline. Here each (row, head) gets DEC_SPLITS blocks of
// ATT_WARPS warps; warp g of the DEC_SPLITS * ATT_WARPS takes 32-key chunks g, g + 64, ...;
// a lane scores its own key in 16-byte loads, then the warp accumulates V with each lane on
// four adjacent dimensions (8-byte loads). A block merges its warps' softmax states and writes
// one partial state (d sums, max, sum) to scratch; the last of the (row, head)'s blocks to
// finish merges them. It knows by a counter per (row, head): DEC_COUNTERS of them open the
// scratch, the same words for every launch (each leaves them at zero, as it found them), and
// the partial states follow.
constexpr int DEC_SPLITS = 16;
constexpr int64_t DEC_COUNTERS = 4096;
constexpr int DEC_V_BATCH = 16; // V rows a warp has in flight (divides 32)

// NV: groups of 4 dimensions a lane takes of a V row (1 for heads of up to 128, else 2).
template <int NV>
__global__ void __launch_bounds__(32 * ATT_WARPS)
    decode_split_kernel(hx_cuda_kv kv, int32_t layer, const __grid_constant__ hx_cuda_rows rows,
                        const float *__restrict__ q, int32_t n_head, float scale, int32_t window,
                        float softcap,
                        float *__restrict__ part_out, unsigned *__restrict__ count,
                        float *__restrict__ out, int8_t *__restrict__ xq, float *__restrict__ xd)
{
    after_prior();
    static_assert(NV * 128 <= ATT_MAX_D, "a lane's V groups fit a head");
    __shared__ __align__(16) float qs[ATT_MAX_D];
    __shared__ float part[ATT_WARPS][ATT_MAX_D];
    __shared__ float part_m[ATT_WARPS], part_l[ATT_WARPS];
    const int wid = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int32_t d = kv.d_head, bt = kv.block_tokens;
    att_row ar = att_begin(kv, q, n_head, qs);
    att_keys(&ar, *rows.pos[ar.t], window);
    const int32_t *__restrict__ blocks = rows.tab[ar.t]; // the row's sequence's block table
    const int32_t kvh = ar.kvh, first = ar.first, last = ar.last;
    float acc[NV][4];
#pragma unroll
    for (int k = 0; k < NV; k++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[k][e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    // A short context takes fewer blocks: as many as give each warp a chunk, up to DEC_SPLITS
    // (the same count in every block of the row: all read the same position).
    const int32_t chunks = (last - first) / 32 + 1;
    const int32_t active = min(DEC_SPLITS, (chunks + ATT_WARPS - 1) / ATT_WARPS);
    if ((int32_t)blockIdx.y >= active) return;
    const int32_t g = (int32_t)blockIdx.y * ATT_WARPS + wid;
    for (int32_t c0 = first + 32 * g; c0 <= last; c0 += 32 * ATT_WARPS * active) {
        const int32_t p = c0 + lane;
        // Lane l's key's cache block; the V loop takes key jj's from lane jj.
        const int32_t blk = p <= last ? blocks[p / bt] : 0;
        float s = -INFINITY;
        if (p <= last) {
            const uint16_t *kr = kv.k + kv_index(kv, blk, layer, kvh, p % bt);
            float dot = 0.0f;
#pragma unroll 16
            for (int i = 0; i < d; i += 8) { // a head of 128: every load of the key at once
                const uint4 a = *(const uint4 *)(kr + i);
                const float4 q0 = *(const float4 *)(qs + i), q1 = *(const float4 *)(qs + i + 4);
                const float2 f0 = __half22float2(*(const __half2 *)&a.x);
                const float2 f1 = __half22float2(*(const __half2 *)&a.y);
                const float2 f2 = __half22float2(*(const __half2 *)&a.z);
                const float2 f3 = __half22float2(*(const __half2 *)&a.w);
                dot += q0.x * f0.x + q0.y * f0.y + q0.z * f1.x + q0.w * f1.y + q1.x * f2.x +
                       q1.y * f2.y + q1.z * f3.x + q1.w * f3.y;
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
        // V rows DEC_V_BATCH keys at a time, every load issued before the first is used: a loop
        // that multiplied each row as it arrived waited one round trip per key. A key past the
        // end re-reads the chunk's last row with weight 0 (its lane's e).
        const int32_t n_keys = last - c0 + 1 < 32 ? last - c0 + 1 : 32;
        for (int j0 = 0; j0 < n_keys; j0 += DEC_V_BATCH) {
            uint2 vb[DEC_V_BATCH][NV];
            float pb[DEC_V_BATCH];
#pragma unroll
            for (int u = 0; u < DEC_V_BATCH; u++) {
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
            for (int u = 0; u < DEC_V_BATCH; u++) {
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
    float mx, f[ATT_WARPS];
    const float sum = merge_weights<ATT_WARPS>(part_m, part_l, 1, f, &mx);
    if (active == 1) { // the only block of its (row, head) (a short context): no states to merge
        const float inv = 1.0f / sum;
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < ATT_WARPS; w++) o += part[w][i] * f[w];
            out[ar.r * d + i] = o * inv;
            if (xq) round_x(o * inv, ar.r * d + i, (int64_t)gridDim.x * d, xq, xd);
        }
        return;
    }
    float *po = part_out + (ar.r * DEC_SPLITS + blockIdx.y) * (int64_t)(d + 2);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) o += part[w][i] * f[w];
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

// Copies keys [kb, kb + FA_K) of K and V (kv head kvh) into ks/vs, rows of fa_row<D>() halves;
// keys past key_hi become zeros (a zero V row times a zero probability stays zero).
template <int D>
__device__ __forceinline__ void fa_stage(const hx_cuda_kv &kv, int32_t layer,
                                         const int32_t *blocks, int32_t kvh, int32_t kb,
                                         int32_t key_hi, __half *ks, __half *vs)
{
    constexpr int CH = D / 8; // 16-byte chunks a row
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

template <int D>
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
        fa_stage<D>(kv, layer, blocks, kvh, key_lo, key_hi, stage, stage + FA_K * R);
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
            fa_stage<D>(kv, layer, blocks, kvh, kb + FA_K, key_hi, nk, nk + FA_K * R);
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

template <int D>
void flash_prefill(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks, const float *q,
                   const int32_t *pos, int64_t n_tok, int32_t n_head, float scale,
                   int32_t window, float softcap, float *out, hx_cuda_stream s)
{
    static bool sized = false; // the opt-in above 48 KiB of shared memory, once per process
    if (!sized) {
        cudaFuncSetAttribute(flash_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)fa_smem<D>());
        sized = true;
    }
    const dim3 grid((unsigned)((n_tok + FA_Q - 1) / FA_Q), (unsigned)n_head);
    launch(flash_prefill_kernel<D>, grid, 32 * FA_WARPS, fa_smem<D>(), s, *kv, layer, blocks, q,
           pos, (int32_t)n_tok, n_head, scale, window, softcap, out);
}

// A thread per element: out[rows[i]] += w[i] * y[i] (the rows distinct within a launch).
__global__ void scatter_add_kernel(float *out, const float *y, const int32_t *rows,
                                   const float *w, int64_t n_total, int64_t d)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int64_t r = i / d;
    out[(int64_t)rows[r] * d + i % d] += w[r] * y[i];
}

// A warp per row of router [n_tok, n_expert]: the softmax's n_used largest (hx_moe_route, with
// the sums in float): lane l keeps the experts l, l + 32, ... (a bit each of `taken`) and the
// warp takes the largest logit not yet taken, the lower id on a tie, n_used times; lane j keeps
// choice j.
__global__ void moe_route_kernel(const float *router, int n_expert, int n_used, int norm,
                                 int32_t *ids, float *w)
{
    after_prior();
    const int lane = (int)threadIdx.x;
    const float *l = router + (int64_t)blockIdx.x * n_expert;
    float mx = -INFINITY;
    for (int e = lane; e < n_expert; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < n_expert; e += 32) sum += expf(l[e] - mx);
    sum = warp_sum(sum);
    uint32_t taken = 0;
    int mine = 0;
    float my_p = 0.0f, chosen = 0.0f;
    for (int j = 0; j < n_used; j++) {
        float bv = 0.0f;
        int bi = -1;
        for (int i = 0, e = lane; e < n_expert; i++, e += 32)
            if (!((taken >> i) & 1u) && (bi < 0 || l[e] > bv)) bv = l[e], bi = e;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        const float p = expf(bv - mx) / sum;
        chosen += p;
        if (lane == j) mine = bi, my_p = p;
    }
    if (lane < n_used) {
        const int64_t at = (int64_t)blockIdx.x * n_used + lane;
        ids[at] = mine;
        w[at] = norm && chosen > 0.0f ? my_p / chosen : my_p;
    }
}

// out[t] = sum_j w[t k + j] y[t k + j], rows of d.
__global__ void moe_combine_kernel(const float *y, const float *w, int k, int64_t d,
                                   int64_t n_total, float *out)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int64_t t = i / d, c = i % d;
    float s = 0.0f;
    for (int j = 0; j < k; j++) s += w[t * k + j] * y[(t * k + j) * d + c];
    out[i] = s;
}

__global__ void gather_kernel(const float *src, const int32_t *rows, int64_t n_total, int64_t d,
                              float *dst)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_total) dst[i] = src[(int64_t)rows[i / d] * d + i % d];
}

// With xq, the output is also rounded for the GEMV that reads it (n a multiple of 32).
__device__ __forceinline__ float glu(float x, float u, int act)
{
    if (act == 0) return x / (1.0f + expf(-x)) * u;
    const float c = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u;
}

__global__ void glu_kernel(const float *gate, const float *up, int64_t n, int act, float *out,
                           int8_t *xq, float *xd)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float y = glu(gate[i], up[i], act);
    out[i] = y;
    if (xq) round_x(y, i, n, xq, xd);
}

// The element-wise kernels four values a thread where the arrays allow 16-byte accesses (the
// prefill's rows: 16 to 60 MB an op, which one float a thread moves at a third of the HBM rate).
inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

__global__ void glu4_kernel(const float4 *gate, const float4 *up, int64_t n4, int act, float4 *out)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 g = gate[i], u = up[i];
    out[i] = make_float4(glu(g.x, u.x, act), glu(g.y, u.y, act), glu(g.z, u.z, act),
                         glu(g.w, u.w, act));
}

__global__ void to_half_kernel(const float *x, int64_t n, void *dst, int bf16)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (bf16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x[i]);
    else ((__half *)dst)[i] = __float2half_rn(x[i]);
}

__global__ void to_half4_kernel(const float4 *x, int64_t n4, uint2 *dst, int bf16)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 v = x[i];
    uint32_t lo, hi;
    if (bf16) {
        const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        lo = *(const uint32_t *)&a;
        hi = *(const uint32_t *)&b;
    } else {
        const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
        lo = *(const uint32_t *)&a;
        hi = *(const uint32_t *)&b;
    }
    dst[i] = make_uint2(lo, hi);
}

__global__ void add_bias_kernel(float *out, const float *bias, int64_t n, int64_t n_out)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += bias[i % n_out];
}

__global__ void add_kernel(float *x, const float *y, int64_t n)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void add4_kernel(float4 *x, const float4 *y, int64_t n4)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 a = x[i], b = y[i];
    x[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__global__ void scale_kernel(float *x, float f, int64_t n)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}

__global__ void softcap_kernel(float *x, float cap, int64_t n)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] * (1.0f / cap));
}

constexpr int THREADS = 256;

unsigned blocks_for(int64_t n, int per = THREADS)
{
    return (unsigned)((n + per - 1) / per);
}

// Calls F<DT>() for the run-time dtype: one switch shared by every format-generic launcher.
template <template <int> class F, typename... A>
void by_dtype(int32_t dt, A... a)
{
    switch (dt) {
    case HX_DT_F32: F<HX_DT_F32>::run(a...); break;
    case HX_DT_F16: F<HX_DT_F16>::run(a...); break;
    case HX_DT_BF16: F<HX_DT_BF16>::run(a...); break;
    case HX_DT_Q4_0: F<HX_DT_Q4_0>::run(a...); break;
    case HX_DT_Q4_1: F<HX_DT_Q4_1>::run(a...); break;
    case HX_DT_Q8_0: F<HX_DT_Q8_0>::run(a...); break;
    case HX_DT_Q4_K: F<HX_DT_Q4_K>::run(a...); break;
    case HX_DT_Q5_K: F<HX_DT_Q5_K>::run(a...); break;
    case HX_DT_Q6_K: F<HX_DT_Q6_K>::run(a...); break;
    case HX_DT_MLX4: F<HX_DT_MLX4>::run(a...); break;
    case HX_DT_MLX8: F<HX_DT_MLX8>::run(a...); break;
    default: break; // hx_cuda_format_ok refused it before any launch
    }
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

// The fewest rows of a dtype the tensor-core GEMV takes: from where it is the faster, measured
// (Q4_K 3, whose dp4a kernel slows the most with rows; the others 5), or HEARTH_CUDA_MMA_ROWS
// (1 to 9; 9: never); never before sm_80.
int mma_rows(int dtype)
{
    static const char *env = getenv("HEARTH_CUDA_MMA_ROWS");
    static const int rows = env && atoi(env) >= 1 ? atoi(env) : 0;
    if (device_major() < 8) return HX_CUDA_GEMV_ROWS + 1;
    return rows ? rows : dtype == HX_DT_Q4_K ? 3 : 5;
}

static uint64_t n_streamed; // launches of gemv_stream_kernel (hx_cuda_gemv_streamed)
static uint64_t n_routed;   // routed GEMV launches (hx_cuda_gemv_routed_count)

// Whether DT is a float format (its GEMV reads x as it is, not rounded).
template <int DT>
constexpr bool float_dt()
{
    return DT == HX_DT_F32 || DT == HX_DT_F16 || DT == HX_DT_BF16;
}

// The GEMV of R rows over a block format, x rounded (xq, xd): the wide kernel where the format
// has one and its units do not straddle MLX groups, else the byte-slice one. ROUTED: the
// launch hx_cuda_gemv_routed makes (R is 1).
template <int DT, int R, bool ROUTED>
void launch_int8_gemv(dim3 g, const gemv_set &set, const int8_t *xq, const float *xd, int n,
                      bool narrow, hx_cuda_stream s)
{
    static_assert(!float_dt<DT>(), "float formats take gemv_kernel");
    const unsigned t = 32 * GEMV_WARPS;
    if constexpr (!gemv_wide<DT>())
        launch(gemv_i8_kernel<DT, R, ROUTED>, g, t, 0, s, set, xq, xd, n);
    else if (!narrow)
        launch(gemv_wide_kernel<DT, R, ROUTED>, g, t, 0, s, set, xq, xd, n);
    else if constexpr (DT == HX_DT_MLX4)
        launch(gemv_i8_kernel<DT, R, ROUTED>, g, t, 0, s, set, xq, xd, n);
}

template <int DT> struct GemvLaunch {
    // One activation row by gemv_stream_kernel, where it applies (sm_90, every piece of a row a
    // multiple of 16 bytes, at 16-byte aligned addresses, of at most 16 KiB): false when not.
    static bool stream_gemv(gemv_set &set, const int8_t *xq, const float *xd, hx_cuda_stream s)
    {
        const char *on = getenv("HEARTH_CUDA_STREAM_GEMV"); // opt-in: see the kernel's note
        if (!on || strcmp(on, "1") != 0 || device_major() < 9) return false;
        const stream_row rb = stream_bytes(set.job[0].w);
        const uint32_t per = rb.q + rb.sb + rb.bi;
        if (rb.q % 16 || rb.sb % 16 || per > 16384) return false;
        for (int k = 0; k < set.n; k++) {
            const hx_cuda_wmat &w = set.job[k].w;
            const uintptr_t a = (uintptr_t)w.q | (uintptr_t)w.scales | (uintptr_t)w.biases;
            if (a % 16 || w.n_in != set.job[0].w.n_in || !w.scales != !set.job[0].w.scales ||
                !w.biases != !set.job[0].w.biases)
                return false;
        }
        if (per <= 4096) return stream<8>(set, per, xq, xd, s);
        if (per <= 8192) return stream<4>(set, per, xq, xd, s);
        return stream<2>(set, per, xq, xd, s);
    }

    template <int S>
    static bool stream(gemv_set &set, uint32_t per, const int8_t *xq, const float *xd,
                       hx_cuda_stream s)
    {
        void (*k)(gemv_set, const int8_t *, const float *, uint32_t) = gemv_stream_kernel<DT, S>;
        const int smem = STREAM_STAGES * S * (int)per;
        static int sized = 0, fit_smem = -1, fit = 0; // the opt-in, and the last occupancy asked
        if (smem > smem_optin()) return false;
        if (smem > sized) {
            if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
                cudaSuccess)
                return false;
            sized = smem;
        }
        if (smem != fit_smem) {
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, STREAM_THREADS, smem) !=
                    cudaSuccess ||
                fit < 1)
                return false;
            fit_smem = smem;
        }
        uint32_t n_chunks = 0;
        for (int j = 0; j < set.n; j++) {
            set.start[j] = n_chunks;
            n_chunks += blocks_for(set.job[j].w.n_out, S);
        }
        // HEARTH_CUDA_STREAM_BLOCKS caps the blocks (a test's, so that each takes many chunks)
        const char *cap = getenv("HEARTH_CUDA_STREAM_BLOCKS");
        uint32_t most = (uint32_t)(fit * device_attr<cudaDevAttrMultiProcessorCount>());
        if (cap && atoi(cap) > 0 && (uint32_t)atoi(cap) < most) most = (uint32_t)atoi(cap);
        launch(k, n_chunks < most ? n_chunks : most, STREAM_THREADS, (size_t)smem, s, set, xq,
               xd, n_chunks);
        n_streamed++;
        return true;
    }

    static void run(const hx_cuda_gemv_job *jobs, int n_jobs, const float *x, const int8_t *xq,
                    const float *xd, int64_t n_rows, hx_cuda_stream s)
    {
        gemv_set set = {};
        bool narrow = false; // MLX groups under 32 values: wide units would straddle them
        for (int k = 0; k < n_jobs; k++) {
            set.job[k] = jobs[k];
            narrow = narrow || (DT == HX_DT_MLX4 && jobs[k].w.group_size % 32 != 0);
        }
        set.n = n_jobs;
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
            // rows of an even number of blocks (4-byte scale pieces); every job's n_in is one
            const bool even = jobs[0].w.n_in % 64 == 0;
            const int smem = MMA_STAGES * mma_stage<DT>::bytes(n);
            // 8 rows of Q8_0 take 142 KB: more than an sm_89 block may have (99 KB)
            if (n >= mma_rows(DT) && even && smem <= smem_optin()) {
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
        if constexpr (gemv_wide<DT>())
            if (n == 1 && !narrow && stream_gemv(set, xq, xd, s)) return;
        const unsigned g = blocks(GEMV_ROWS), t = 32 * GEMV_WARPS;
        by_rows(n, [&](auto rows) {
            constexpr int R = decltype(rows)::value;
            if constexpr (float_dt<DT>()) launch(gemv_kernel<DT, R>, g, t, 0, s, set, x, n);
            else launch_int8_gemv<DT, R, false>(g, set, xq, xd, n, narrow, s);
        });
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

template <int DT> struct DequantLaunch {
    static void run(const hx_cuda_wmat *w, int64_t o0, int64_t o1, void *dst, int bf16,
                    hx_cuda_stream s)
    {
        const int64_t n = (o1 - o0) * (w->n_in / 32);
        launch(dequant_kernel<DT>, blocks_for(n, DEQUANT_THREADS), DEQUANT_THREADS, 0, s, *w, o0, n,
               dst, bf16);
    }
};

template <int DT> struct EmbedLaunch {
    static void run(const hx_cuda_wmat *w, const int32_t *ids, int64_t n_tok, float *out,
                    hx_cuda_stream s)
    {
        const int64_t n = n_tok * (w->n_in / 32);
        launch(embed_kernel<DT>, blocks_for(n), THREADS, 0, s, *w, ids, n, out);
    }
};

} // namespace

extern "C" {

int hx_cuda_format_ok(int32_t dtype, int64_t n_in)
{
    return dtype >= 0 && dtype < HX_DT_COUNT && n_in > 0 && n_in % 32 == 0;
}

int hx_cuda_gemv_int8(int32_t dtype)
{
    return dtype != HX_DT_F32 && dtype != HX_DT_F16 && dtype != HX_DT_BF16;
}

void hx_cuda_quantize_x(const float *x, int64_t n, int8_t *q, float *d, hx_cuda_stream s)
{
    launch(quantize_x_kernel, blocks_for(n), THREADS, 0, s, x, n, q, d);
}

void hx_cuda_gemv(const hx_cuda_gemv_job *jobs, int n_jobs, const float *x, const int8_t *xq,
                  const float *xd, int64_t n_rows, hx_cuda_stream s)
{
    by_dtype<GemvLaunch>(jobs[0].w.dtype, jobs, n_jobs, x, xq, xd, n_rows, s);
}

uint64_t hx_cuda_gemv_streamed(void)
{
    return n_streamed;
}

void hx_cuda_moe_route(const float *router, int64_t n_tok, int32_t n_expert, int32_t n_used,
                       int norm, int32_t *ids, float *w, hx_cuda_stream s)
{
    launch(moe_route_kernel, (unsigned)n_tok, 32, 0, s, router, (int)n_expert, (int)n_used, norm,
           ids, w);
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

void hx_cuda_moe_combine(const float *y, const float *w, int64_t n_tok, int32_t k, int64_t d,
                         float *out, hx_cuda_stream s)
{
    launch(moe_combine_kernel, blocks_for(n_tok * d), THREADS, 0, s, y, w, (int)k, d, n_tok * d,
           out);
}

void hx_cuda_dequant_rows(const hx_cuda_wmat *w, int64_t o0, int64_t o1, void *dst, int bf16,
                          hx_cuda_stream s)
{
    by_dtype<DequantLaunch>(w->dtype, w, o0, o1, dst, bf16, s);
}

void hx_cuda_embed(const hx_cuda_wmat *w, const int32_t *ids, int64_t n_tok, float *out,
                   hx_cuda_stream s)
{
    by_dtype<EmbedLaunch>(w->dtype, w, ids, n_tok, out, s);
}

void hx_cuda_to_half(const float *x, int64_t n, void *dst, int bf16, hx_cuda_stream s)
{
    if (n % 4 == 0 && aligned16(x) && ((uintptr_t)dst & 7) == 0)
        launch(to_half4_kernel, blocks_for(n / 4), THREADS, 0, s, (const float4 *)x, n / 4,
               (uint2 *)dst, bf16);
    else launch(to_half_kernel, blocks_for(n), THREADS, 0, s, x, n, dst, bf16);
}

void hx_cuda_add_bias(float *out, const float *bias, int64_t n_rows, int64_t n_out,
                      hx_cuda_stream s)
{
    launch(add_bias_kernel, blocks_for(n_rows * n_out), THREADS, 0, s, out, bias,
           n_rows * n_out, n_out);
}

void hx_cuda_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t d, float eps,
                     float *out, int8_t *xq, float *xd, hx_cuda_stream s)
{
    // A row per block, a thread per ~4 values: its loop carries a warp reduction per trip
    // (the rounding), so trips are latency, and a decode step's few rows are a few blocks.
    const int64_t t = ((d / 4 + 31) / 32) * 32;
    const unsigned threads = (unsigned)(t < 32 ? 32 : t > 1024 ? 1024 : t);
    const int64_t e = (d + threads - 1) / threads; // elements a thread holds
    void (*k)(const float *, const float *, int64_t, float, float *, int8_t *, float *) =
        e <= 4 ? rmsnorm_kernel<4> : e <= 8 ? rmsnorm_kernel<8> : e <= 16 ? rmsnorm_kernel<16>
                                                                           : rmsnorm_wide_kernel;
    launch(k, (unsigned)n_rows, threads, 0, s, x, w, d, eps, out, xq, xd);
}

void hx_cuda_rope(float *x, int32_t n_head, float *x2, int32_t n_head2, const int32_t *pos,
                  int64_t n_tok, int32_t d_head, const float *inv_freq, int32_t n_rot,
                  float mscale, int pairs, const hx_cuda_kv *kv, int32_t layer,
                  const int32_t *blocks, const float *v, hx_cuda_stream s)
{
    const int64_t n = n_tok * n_head * (n_rot / 2), n2 = x2 ? n_tok * n_head2 * (n_rot / 2) : 0;
    const int64_t n3 = kv ? n_tok * n_head2 * d_head : 0;
    const hx_cuda_kv none = {};
    launch(rope_kernel, blocks_for(n + n2 + n3), THREADS, 0, s, x, n_head, x2, n_head2, pos, n,
           n2, d_head, inv_freq, n_rot / 2, mscale, pairs, kv ? *kv : none, layer, blocks, v,
           n3);
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
    const dim3 grid((unsigned)(n_tok * n_head),
                    splits > 0 && splits < DEC_SPLITS ? splits : DEC_SPLITS);
    launch(kv->d_head <= 128 ? decode_split_kernel<1> : decode_split_kernel<2>, grid,
           32 * ATT_WARPS, 0, s, *kv, layer, *rows, q, n_head, scale, window, softcap,
           scratch + DEC_COUNTERS, (unsigned *)scratch, out, xq, xd);
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

void hx_cuda_scatter_add(float *out, const float *y, const int32_t *rows, const float *w,
                         int64_t n, int64_t d, hx_cuda_stream s)
{
    launch(scatter_add_kernel, blocks_for(n * d), THREADS, 0, s, out, y, rows, w, n * d, d);
}

void hx_cuda_gather_rows(const float *src, const int32_t *rows, int64_t n, int64_t d,
                         float *dst, hx_cuda_stream s)
{
    launch(gather_kernel, blocks_for(n * d), THREADS, 0, s, src, rows, n * d, d, dst);
}

void hx_cuda_glu(const float *gate, const float *up, int64_t n, int act, float *out,
                 int8_t *xq, float *xd, hx_cuda_stream s)
{
    if (!xq && n % 4 == 0 && aligned16(gate) && aligned16(up) && aligned16(out))
        launch(glu4_kernel, blocks_for(n / 4), THREADS, 0, s, (const float4 *)gate,
               (const float4 *)up, n / 4, act, (float4 *)out);
    else launch(glu_kernel, blocks_for(n), THREADS, 0, s, gate, up, n, act, out, xq, xd);
}

void hx_cuda_add(float *x, const float *y, int64_t n, hx_cuda_stream s)
{
    if (n % 4 == 0 && aligned16(x) && aligned16(y))
        launch(add4_kernel, blocks_for(n / 4), THREADS, 0, s, (float4 *)x, (const float4 *)y,
               n / 4);
    else launch(add_kernel, blocks_for(n), THREADS, 0, s, x, y, n);
}

void hx_cuda_scale(float *x, float f, int64_t n, hx_cuda_stream s)
{
    launch(scale_kernel, blocks_for(n), THREADS, 0, s, x, f, n);
}

void hx_cuda_softcap(float *x, float cap, int64_t n, hx_cuda_stream s)
{
    launch(softcap_kernel, blocks_for(n), THREADS, 0, s, x, cap, n);
}

} // extern "C"
