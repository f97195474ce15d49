// kernels.cuh - what the cuda backend's kernel files (gemv.cu, attention.cu, kernels.cu) share:
// the launch with programmatic dependent launch, the device's attributes, the block formats'
// loads and dequantization (sub32), asynchronous copies to shared memory, warp reductions, the
// rounding of activations for the integer GEMVs, and where a KV cache row lies and how a rope
// pair turns (the rope kernel's and the one-row GEMV's post). Included by .cu files only;
// everything is in an anonymous namespace, each file compiling its own copy of what it uses.
#ifndef HX_BACKEND_CUDA_KERNELS_CUH
#define HX_BACKEND_CUDA_KERNELS_CUH
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

#ifdef HX_CUDA_TIMELINE
// The timeline of a dev build (cmake -DHEARTH_CUDA_TIMELINE=ON; kernels.h): block 0 of every
// launch notes, in this file's ring, when its wait for the kernel ahead ended and the launch's
// shape, so that the spans between launches in a replayed step say where its time goes without
// a profiler. One atomic a launch; never in a release build.
__device__ hx_cuda_tl_rec tl_ring[HX_CUDA_TL_CAP];
__device__ unsigned tl_next;

__device__ __forceinline__ void tl_mark()
{
    if (blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const unsigned i = atomicAdd(&tl_next, 1u) % HX_CUDA_TL_CAP;
    tl_ring[i] = {t, gridDim.x, gridDim.y, blockDim.x, 1u};
}

// This file's ring into out (HX_CUDA_TL_CAP records, in ring order): how many are written.
#define HX_CUDA_TIMELINE_READER(file)                                                          \
    extern "C" size_t hx_cuda_timeline_##file(hx_cuda_tl_rec *out)                             \
    {                                                                                          \
        unsigned n = 0;                                                                        \
        if (cudaMemcpyFromSymbol(&n, tl_next, sizeof n) != cudaSuccess ||                      \
            cudaMemcpyFromSymbol(out, tl_ring, sizeof tl_ring) != cudaSuccess)                 \
            return 0;                                                                          \
        return n < HX_CUDA_TL_CAP ? n : HX_CUDA_TL_CAP;                                        \
    }
#endif

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
#ifdef HX_CUDA_TIMELINE
    tl_mark();
#endif
}

// Asks L2 for the 128-byte line holding p (nothing before sm_90, where a kernel cannot run
// before the one ahead of it ends: there is nothing to overlap).
__device__ __forceinline__ void prefetch_line(const void *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

// prefetch_line for every line of [p, p + bytes), all by the calling thread.
__device__ __forceinline__ void prefetch_l2(const void *p, int64_t bytes)
{
    const uintptr_t end = (uintptr_t)p + (uintptr_t)bytes;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)127; a < end; a += 128)
        prefetch_line((const void *)a);
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

inline int device_major()
{
    return device_attr<cudaDevAttrComputeCapabilityMajor>();
}

inline bool dependent_launch()
{
    static const bool off = hx_cuda_switched_off("HEARTH_CUDA_PDL");
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

// log2 of the 32-value blocks one scale of a Q4_0/Q4_1/Q8_0 upload covers (kernels.h): 0, but 1
// or 2 for MLX 4-bit taken as Q4_1 with groups of 64 or 128 (so Q4_0 and Q8_0 know it is 0).
// Host code asks it too (gemv.cu's stream_fits).
template <int DT>
__host__ __device__ __forceinline__ int b32_shift(const hx_cuda_wmat &w)
{
#ifdef __CUDA_ARCH__
    return DT == HX_DT_Q4_1 ? __ffs(w.group_size) - 6 : 0;
#else
    return DT == HX_DT_Q4_1 ? __builtin_ffs(w.group_size) - 6 : 0;
#endif
}

// Scale d and offset m of block j of row o of a Q4_0/Q4_1/Q8_0 weight, which the backend
// uploads split in two (kernels.h): value = d * q + m. (Q4_1: its scale's index in 32 bits, one
// shift; the uploads keep a weight's blocks under 2^32.)
template <int DT>
__device__ __forceinline__ void b32_scale(const hx_cuda_wmat &w, int64_t o, int64_t j, float *d,
                                          float *m)
{
    int64_t g = o * (w.n_in / 32) + j; // the block's index
    if constexpr (DT == HX_DT_Q4_1) g = (int64_t)((uint32_t)g >> b32_shift<DT>(w));
    *d = h2f(__ldg((const unsigned short *)w.scales + g));
    *m = DT == HX_DT_Q4_1   ? h2f(__ldg((const unsigned short *)w.biases + g))
         : DT == HX_DT_Q4_0 ? -8.0f * *d
                            : 0.0f;
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

// Whether p allows 16-byte accesses.
inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
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

// ---- the rope and the KV cache (attention.cu; gemv.cu, whose one-row GEMV can do both) ----

// Where row `off` of block `block` of head h of a layer starts in the K (or V) cache.
__device__ __forceinline__ size_t kv_index(const hx_cuda_kv &kv, int32_t block, int32_t layer,
                                           int32_t h, int32_t off)
{
    return ((((size_t)block * kv.n_layer + layer) * kv.n_kv_head + h) * kv.block_tokens + off) *
           (size_t)kv.d_head;
}

// Where head h of position p's K (or V) row starts in the cache, through the block table.
__device__ __forceinline__ size_t kv_row_at(const hx_cuda_kv &kv, int32_t layer,
                                            const int32_t *blocks, int32_t p, int32_t h)
{
    return kv_index(kv, blocks[p / kv.block_tokens], layer, h, p % kv.block_tokens);
}

// v rounded to f16, as its bits (the cache's element).
__device__ __forceinline__ uint16_t f16_bits(float v)
{
    return __half_as_ushort(__float2half_rn(v));
}

// The rotation of a pair at position pos by frequency inv_freq: its cosine and sine, taken in
// double (a chain of some hundred dependent instructions: callers find them before they wait
// for the kernel ahead), times mscale.
__device__ __forceinline__ void rope_angle(int32_t pos, float inv_freq, float mscale, float *cs,
                                           float *sn)
{
    const double ang = (double)pos * (double)inv_freq;
    *cs = (float)cos(ang) * mscale;
    *sn = (float)sin(ang) * mscale;
}

// The first (first) or second element of pair (x0, x1) rotated by (cs, sn), rounded the same way
// wherever it is done (the rope kernel, a GEMV's post): x0 cs - x1 sn, x0 sn + x1 cs.
__device__ __forceinline__ float rotated(float x0, float x1, float cs, float sn, bool first)
{
    return first ? __fmaf_rn(x0, cs, -__fmul_rn(x1, sn)) : __fmaf_rn(x0, sn, __fmul_rn(x1, cs));
}

constexpr int THREADS = 256;

inline unsigned blocks_for(int64_t n, int per = THREADS)
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

} // namespace
#endif
