// kernels.cu - the cuda backend's kernels and their launchers (kernels.h).
//
// Napkin math that shaped them. Decode is a GEMV over every weight once per step: at batch 1
// an 8B Q4_0 model reads ~4.7 GB per token, ~1 ms at the H200's ~4.5 TB/s, while its 16 GFLOP
// take ~0.2 ms on the CUDA cores even as plain FMAs; so the GEMV spends its effort on memory
// parallelism (a warp per four output rows, lanes on adjacent 8-element slices, every row of
// the batch applied to each dequantized slice while it is in registers). Prefill is
// matrix bound: weights are dequantized to f16 in row chunks and multiplied by cuBLAS on the
// tensor cores (cuda_backend.c). Attention reads f16 K/V through the block table: four warps
// per (row, head) split the context, each lane scoring its own key of a 32-key chunk, then the
// warp accumulating V with lanes on dimensions (an online softmax over the chunks, as the CPU
// kernels do), and the four partial states merged at the end.
#include "backend/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <math.h>
#include <stdint.h>

#include "tensor/dtype.h"

namespace {

__device__ __forceinline__ float h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

// Block formats keep their f16 scales at 2-byte alignment only (18-, 34-, 210-byte blocks).
__device__ __forceinline__ uint16_t ld_u16(const uint8_t *p)
{
    return *(const uint16_t *)p;
}

// 16 bytes from a 2-byte aligned address.
__device__ __forceinline__ void ld16_a2(const uint8_t *p, uint8_t b[16])
{
    const uint16_t *s = (const uint16_t *)p;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint16_t v = s[i];
        b[2 * i] = (uint8_t)v;
        b[2 * i + 1] = (uint8_t)(v >> 8);
    }
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
    } else if (DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1) {
        const uint8_t *p = row + j * (DT == HX_DT_Q4_0 ? 18 : 20);
        const float d = h2f(ld_u16(p));
        const float m = DT == HX_DT_Q4_1 ? h2f(ld_u16(p + 2)) : -8.0f * d;
        uint8_t b[16];
        if (DT == HX_DT_Q4_0) ld16_a2(p + 2, b);
        else {
            const uint32_t *s = (const uint32_t *)(p + 4);
#pragma unroll
            for (int i = 0; i < 16; i++) b[i] = (uint8_t)(s[i / 4] >> (8 * (i % 4)));
        }
#pragma unroll
        for (int i = 0; i < 16; i++) {
            v[i] = d * (float)(b[i] & 15) + m;
            v[i + 16] = d * (float)(b[i] >> 4) + m;
        }
    } else if (DT == HX_DT_Q8_0) {
        const uint8_t *p = row + j * 34;
        const float d = h2f(ld_u16(p));
        uint8_t b[16];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ld16_a2(p + 2 + 16 * h, b);
#pragma unroll
            for (int i = 0; i < 16; i++) v[16 * h + i] = d * (float)(int8_t)b[i];
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
        const uint8_t *p = row + (j >> 3) * 210;
        const float d = h2f(ld_u16(p + 208));
        const uint8_t *ql = p + 64 * half + 32 * (t & 1), *qh = p + 128 + 32 * half;
        const int8_t *sc = (const int8_t *)(p + 192 + 8 * half + 2 * t);
        uint8_t b[16], hb[16];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ld16_a2(ql + 16 * h, b);
            ld16_a2(qh + 16 * h, hb);
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

// Elements [8 j, 8 j + 8) of row o of w, dequantized: the GEMV's unit, so that the 32 lanes
// of a warp read 256 consecutive elements of a row (their weight bytes adjacent, their
// activations one contiguous kilobyte) and a lane keeps few registers. Same values as sub32.
template <int DT>
__device__ __forceinline__ void sub8(const hx_cuda_wmat &w, int64_t o, int64_t j, float v[8])
{
    const uint8_t *row = (const uint8_t *)w.q + o * w.row_bytes;
    const int q = (int)(j & 3); // which quarter of its 32-element sub-block
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
    } else if (DT == HX_DT_Q4_0 || DT == HX_DT_Q4_1) {
        // elements 8q..8q+7: the low (q < 2) or high nibbles of bytes 8(q&1)..8(q&1)+7
        const uint8_t *p = row + (j >> 2) * (DT == HX_DT_Q4_0 ? 18 : 20);
        const float d = h2f(ld_u16(p));
        const float m = DT == HX_DT_Q4_1 ? h2f(ld_u16(p + 2)) : -8.0f * d;
        const uint8_t *qs = p + (DT == HX_DT_Q4_0 ? 2 : 4) + 8 * (q & 1);
        uint32_t u0, u1;
        if (DT == HX_DT_Q4_0) {
            const uint16_t *s = (const uint16_t *)qs;
            u0 = s[0] | ((uint32_t)s[1] << 16);
            u1 = s[2] | ((uint32_t)s[3] << 16);
        } else {
            u0 = ((const uint32_t *)qs)[0];
            u1 = ((const uint32_t *)qs)[1];
        }
        const int sh = (q >> 1) * 4;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = d * (float)((u0 >> (8 * k + sh)) & 15) + m;
            v[4 + k] = d * (float)((u1 >> (8 * k + sh)) & 15) + m;
        }
    } else if (DT == HX_DT_Q8_0) {
        const uint8_t *p = row + (j >> 2) * 34;
        const float d = h2f(ld_u16(p));
        const uint16_t *s = (const uint16_t *)(p + 2 + 8 * q);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint16_t h = s[k];
            v[2 * k] = d * (float)(int8_t)(h & 0xff);
            v[2 * k + 1] = d * (float)(int8_t)(h >> 8);
        }
    } else if (DT == HX_DT_Q4_K || DT == HX_DT_Q5_K) {
        const int sb = (int)((j >> 2) & 7);
        const uint8_t *p = row + (j >> 5) * (DT == HX_DT_Q4_K ? 144 : 176);
        const float d = h2f(ld_u16(p)), dmin = h2f(ld_u16(p + 2));
        int sc, mn;
        k_scale_min(p + 4, sb, &sc, &mn);
        const float ds = d * (float)sc, dm = dmin * (float)mn;
        const uint8_t *qs = p + (DT == HX_DT_Q4_K ? 16 : 48) + 32 * (sb >> 1) + 8 * q;
        const uint2 b = *(const uint2 *)qs;
        uint2 hb = make_uint2(0, 0);
        if (DT == HX_DT_Q5_K) hb = *(const uint2 *)(p + 16 + 8 * q);
        const int sh = (sb & 1) * 4;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t word = k < 4 ? b.x : b.y, hw = k < 4 ? hb.x : hb.y;
            int qv = (int)((word >> (8 * (k & 3) + sh)) & 15);
            if (DT == HX_DT_Q5_K) qv |= (int)((hw >> (8 * (k & 3) + sb)) & 1) << 4;
            v[k] = ds * (float)qv - dm;
        }
    } else if (DT == HX_DT_Q6_K) {
        const int sb = (int)((j >> 2) & 7), half = sb >> 2, t = sb & 3;
        const uint8_t *p = row + (j >> 5) * 210;
        const float d = h2f(ld_u16(p + 208));
        const uint16_t *ql = (const uint16_t *)(p + 64 * half + 32 * (t & 1) + 8 * q);
        const uint16_t *qh = (const uint16_t *)(p + 128 + 32 * half + 8 * q);
        const float ds = d * (float)((const int8_t *)(p + 192 + 8 * half + 2 * t))[q >> 1];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint16_t l2 = ql[k], h2 = qh[k];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int lb = (l2 >> (8 * e)) & 0xff, hbits = (h2 >> (8 * e)) & 0xff;
                const int lo = (t >> 1) ? lb >> 4 : lb & 15;
                v[2 * k + e] = ds * (float)((lo | (((hbits >> (2 * t)) & 3) << 4)) - 32);
            }
        }
    } else if (DT == HX_DT_MLX4 || DT == HX_DT_MLX8) {
        const int64_t g = o * (w.n_in / w.group_size) + j * 8 / w.group_size;
        const float sc = load_sb(w.scales, w.sb_dtype, g), bi = load_sb(w.biases, w.sb_dtype, g);
        if (DT == HX_DT_MLX4) {
            const uint32_t u = *(const uint32_t *)(row + j * 4);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = sc * (float)((u >> (4 * k)) & 15) + bi;
        } else {
            const uint2 u = *(const uint2 *)(row + j * 8);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = sc * (float)(((k < 4 ? u.x : u.y) >> (8 * (k & 3))) & 0xff) + bi;
        }
    }
}


constexpr int GEMV_WARPS = 4;     // warps per block
constexpr int GEMV_ROWS_WARP = 4; // output rows per warp, sharing each activation load

// A warp computes GEMV_ROWS_WARP output rows for up to R activation rows. Per step a lane loads
// 8 activations of each batch row once (two float4: the warp reads 1 KiB contiguous), then for
// each of its output rows dequantizes the matching 8 weights and accumulates: the activations
// are read from L1 once per four weight rows, and each lane has GEMV_ROWS_WARP independent
// weight loads in flight.
template <int DT, int R>
__global__ void __launch_bounds__(32 * GEMV_WARPS)
    gemv_kernel(hx_cuda_wmat w, const float *__restrict__ x, int n_rows,
                const float *__restrict__ bias, float *__restrict__ out)
{
    const int64_t o0 = ((int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32) * GEMV_ROWS_WARP;
    const int lane = threadIdx.x & 31;
    if (o0 >= w.n_out) return;
    const int64_t n8 = w.n_in / 8;
    float acc[GEMV_ROWS_WARP][R];
#pragma unroll
    for (int k = 0; k < GEMV_ROWS_WARP; k++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[k][r] = 0.0f;
    for (int64_t j = lane; j < n8; j += 32) {
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
        for (int k = 0; k < GEMV_ROWS_WARP; k++) {
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
#pragma unroll
    for (int k = 0; k < GEMV_ROWS_WARP; k++) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) break;
            const float s = warp_sum(acc[k][r]);
            if (lane == 0 && o0 + k < w.n_out)
                out[r * w.n_out + o0 + k] = s + (bias ? bias[o0 + k] : 0.0f);
        }
    }
}

template <int DT>
__global__ void dequant_kernel(hx_cuda_wmat w, int64_t o0, int64_t n_sub_total, void *dst,
                               int bf16)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_sub_total) return;
    const int64_t n_sub = w.n_in / 32, o = o0 + i / n_sub, j = i % n_sub;
    float v[32];
    sub32<DT>(w, o, j, v);
    uint4 *d = (uint4 *)((uint16_t *)dst + i * 32);
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
        d[k] = make_uint4(u[0], u[1], u[2], u[3]);
    }
}

template <int DT>
__global__ void embed_kernel(hx_cuda_wmat w, const int32_t *ids, int64_t n_total, float *out)
{
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

__global__ void rmsnorm_kernel(const float *x, const float *w, int64_t d, float eps, float *out)
{
    const float *xr = x + blockIdx.x * d;
    float *yr = out + blockIdx.x * d;
    double ss = 0.0; // in double, as the CPU does: d_model can be 8192
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += (double)xr[i] * xr[i];
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
    const float scale = (float)(1.0 / sqrt(part[0] / (double)d + (double)eps));
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

// One thread per (row, head, rotated pair); the angle in double, as on the CPU.
__global__ void rope_kernel(float *x, const int32_t *pos, int64_t n_total, int32_t n_head,
                            int32_t d_head, const float *inv_freq, int32_t half, float mscale,
                            int pairs)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int32_t p = (int32_t)(i % half);
    const int64_t th = i / half, t = th / n_head;
    const double ang = (double)pos[t] * (double)inv_freq[p];
    const float cs = (float)cos(ang) * mscale, sn = (float)sin(ang) * mscale;
    float *v = x + th * d_head;
    const int32_t i0 = pairs ? 2 * p : p, i1 = pairs ? 2 * p + 1 : p + half;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * cs - x1 * sn;
    v[i1] = x0 * sn + x1 * cs;
}

__device__ __forceinline__ size_t kv_index(const hx_cuda_kv &kv, int32_t block, int32_t layer,
                                           int32_t h, int32_t off)
{
    return ((((size_t)block * kv.n_layer + layer) * kv.n_kv_head + h) * kv.block_tokens + off) *
           (size_t)kv.d_head;
}

__global__ void kv_write_kernel(hx_cuda_kv kv, int32_t layer, const int32_t *blocks,
                                const int32_t *pos, const float *k, const float *v,
                                int64_t n_total)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int32_t kvd = kv.n_kv_head * kv.d_head;
    const int64_t t = i / kvd;
    const int32_t e = (int32_t)(i % kvd), h = e / kv.d_head, c = e % kv.d_head;
    const int32_t p = pos[t], block = blocks[p / kv.block_tokens];
    const size_t at = kv_index(kv, block, layer, h, p % kv.block_tokens) + c;
    kv.k[at] = __half_as_ushort(__float2half_rn(k[i]));
    kv.v[at] = __half_as_ushort(__float2half_rn(v[i]));
}

constexpr int ATT_WARPS = 4;
constexpr int ATT_MAX_D = 256;

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
    constexpr int PER = ATT_MAX_D / 32;
    __shared__ float qs[ATT_MAX_D];
    __shared__ float part[ATT_WARPS][ATT_MAX_D];
    __shared__ float part_m[ATT_WARPS], part_l[ATT_WARPS];
    const int wid = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x; // (row, head)
    const int32_t d = kv.d_head, bt = kv.block_tokens;
    const int64_t t = r / n_head;
    const int32_t h = (int32_t)(r % n_head), kvh = h / (n_head / kv.n_kv_head);
    for (int i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[r * d + i];
    __syncthreads();
    const int32_t last = pos[t];
    const int32_t first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
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
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, part_m[w]);
    float sum = 0.0f, f[ATT_WARPS];
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = part_l[w] > 0.0f ? expf(part_m[w] - mx) : 0.0f;
        sum += part_l[w] * f[w];
    }
    const float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) o += part[w][i] * f[w];
        out[t * (int64_t)n_head * d + (int64_t)h * d + i] = o * inv;
    }
}

// ---- prefill attention on the tensor cores ----
//
// Many rows of one sequence (a prompt chunk): one block of FA_WARPS warps per (tile of FA_Q
// rows, head). Q is rounded to f16 once; per tile of FA_K keys the block stages K and V from
// the paged cache into shared memory, the warps compute S = Q K^T with 16x16x16 f16 MMAs (f32
// accumulation), each warp runs the online softmax over its 16 rows in f32 (scale, soft cap,
// causal and window masks per row's own position), rescales its rows of O (f32, in shared
// memory) and adds P V, again on the tensor cores with P in f16. Napkin math: at 2,048 rows,
// 32 heads and d_head 128 one layer is ~34 GFLOP of MMAs, ~0.1 ms at a tenth of the chip's
// dense f16 rate, against ~5 ms for the one-warp-per-row kernel's scalar FMAs.
constexpr int FA_Q = 64, FA_K = 64, FA_WARPS = 4;

template <int D>
constexpr size_t fa_smem()
{
    return (size_t)(3 * FA_Q * D) * 2 + (size_t)FA_Q * FA_K * 4 + (size_t)FA_Q * FA_K * 2 +
           (size_t)FA_Q * D * 4 + 3 * FA_Q * 4;
}

template <int D>
__global__ void __launch_bounds__(32 * FA_WARPS)
    flash_prefill_kernel(hx_cuda_kv kv, int32_t layer, const int32_t *__restrict__ blocks,
                         const float *__restrict__ q, const int32_t *__restrict__ pos,
                         int32_t n_tok, int32_t n_head, float scale, int32_t window,
                         float softcap, float *__restrict__ out)
{
    using namespace nvcuda;
    extern __shared__ __align__(16) unsigned char fa_mem[];
    __half *qs = (__half *)fa_mem;        // [FA_Q][D]
    __half *ks = qs + FA_Q * D;           // [FA_K][D]
    __half *vs = ks + FA_K * D;           // [FA_K][D]
    float *ss = (float *)(vs + FA_K * D); // [FA_Q][FA_K] scores
    __half *ps = (__half *)(ss + FA_Q * FA_K); // [FA_Q][FA_K] probabilities
    float *os = (float *)(ps + FA_Q * FA_K);   // [FA_Q][D] output accumulator
    float *row_m = os + FA_Q * D, *row_l = row_m + FA_Q, *row_c = row_l + FA_Q;
    __shared__ int32_t key_lo, key_hi;
    const int tid = threadIdx.x, wid = tid / 32, lane = tid & 31;
    const int32_t h = blockIdx.y, kvh = h / (n_head / kv.n_kv_head), bt = kv.block_tokens;
    const int32_t t0 = blockIdx.x * FA_Q, n = n_tok - t0 < FA_Q ? n_tok - t0 : FA_Q;
    for (int i = tid; i < FA_Q * D; i += blockDim.x) {
        const int r = i / D, c = i % D;
        qs[i] = __float2half_rn(r < n ? q[((int64_t)(t0 + r) * n_head + h) * D + c] : 0.0f);
        os[i] = 0.0f;
    }
    if (tid < FA_Q) {
        row_m[tid] = -INFINITY;
        row_l[tid] = 0.0f;
    }
    if (tid == 0) {
        int32_t lo = INT32_MAX, hi = -1;
        for (int r = 0; r < n; r++) {
            const int32_t p = pos[t0 + r], f = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            lo = f < lo ? f : lo;
            hi = p > hi ? p : hi;
        }
        key_lo = lo / FA_K * FA_K;
        key_hi = hi;
    }
    __syncthreads();
    for (int32_t kb = key_lo; kb <= key_hi; kb += FA_K) {
        // stage this tile's K and V rows (16 bytes a thread at a time; past the end: zeros)
        for (int i = tid; i < FA_K * (D / 8); i += blockDim.x) {
            const int j = i / (D / 8), c = (i % (D / 8)) * 8;
            const int32_t p = kb + j;
            uint4 kx = make_uint4(0, 0, 0, 0), vx = kx;
            if (p <= key_hi) {
                const size_t at = kv_index(kv, blocks[p / bt], layer, kvh, p % bt) + c;
                kx = *(const uint4 *)(kv.k + at);
                vx = *(const uint4 *)(kv.v + at);
            }
            *(uint4 *)(ks + j * D + c) = kx;
            *(uint4 *)(vs + j * D + c) = vx;
        }
        __syncthreads();
        // S = Q K^T for this warp's 16 rows
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FA_K / 16];
#pragma unroll
            for (int c = 0; c < FA_K / 16; c++) wmma::fill_fragment(acc[c], 0.0f);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::load_matrix_sync(a, qs + wid * 16 * D + kk * 16, D);
#pragma unroll
                for (int c = 0; c < FA_K / 16; c++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                    wmma::load_matrix_sync(b, ks + c * 16 * D + kk * 16, D);
                    wmma::mma_sync(acc[c], a, b, acc[c]);
                }
            }
#pragma unroll
            for (int c = 0; c < FA_K / 16; c++)
                wmma::store_matrix_sync(ss + wid * 16 * FA_K + c * 16, acc[c], FA_K,
                                        wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax over the warp's rows; lane l takes keys l and l + 32 of the tile
        for (int rr = 0; rr < 16; rr++) {
            const int r = wid * 16 + rr;
            const int32_t p = r < n ? pos[t0 + r] : -1;
            const int32_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            float sv[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int32_t key = kb + lane + 32 * e;
                float sc = ss[r * FA_K + lane + 32 * e] * scale;
                if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
                sv[e] = key <= p && key >= lo ? sc : -INFINITY;
            }
            const float m_old = row_m[r], m_new = fmaxf(m_old, warp_max(fmaxf(sv[0], sv[1])));
            const bool none = m_new == -INFINITY; // no key of this row in range yet
            const float corr = none ? 1.0f : expf(m_old - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float pr = none ? 0.0f : expf(sv[e] - m_new);
                sum += pr;
                ps[r * FA_K + lane + 32 * e] = __float2half_rn(pr);
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                row_m[r] = m_new;
                row_l[r] = row_l[r] * corr + sum;
                row_c[r] = corr;
            }
        }
        __syncwarp();
        for (int i = lane; i < 16 * D; i += 32) os[wid * 16 * D + i] *= row_c[wid * 16 + i / D];
        __syncwarp();
        // O += P V for the warp's rows
#pragma unroll
        for (int c = 0; c < D / 16; c++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
            wmma::load_matrix_sync(o, os + wid * 16 * D + c * 16, D, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < FA_K / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(a, ps + wid * 16 * FA_K + kk * 16, FA_K);
                wmma::load_matrix_sync(b, vs + kk * 16 * D + c * 16, D);
                wmma::mma_sync(o, a, b, o);
            }
            wmma::store_matrix_sync(os + wid * 16 * D + c * 16, o, D, wmma::mem_row_major);
        }
        __syncthreads(); // before the next tile overwrites K and V
    }
    for (int i = tid; i < n * D; i += blockDim.x) {
        const int r = i / D, c = i % D;
        out[((int64_t)(t0 + r) * n_head + h) * D + c] = os[i] / row_l[r];
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
    flash_prefill_kernel<D><<<grid, 32 * FA_WARPS, fa_smem<D>(), s>>>(
        *kv, layer, blocks, q, pos, (int32_t)n_tok, n_head, scale, window, softcap, out);
}

__global__ void gather_kernel(const float *src, const int32_t *rows, int64_t n_total, int64_t d,
                              float *dst)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_total) dst[i] = src[(int64_t)rows[i / d] * d + i % d];
}

__global__ void glu_kernel(const float *gate, const float *up, int64_t n, int act, float *out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = gate[i];
    if (act == 0) {
        out[i] = x / (1.0f + expf(-x)) * up[i];
    } else {
        const float c = 0.7978845608028654f; // sqrt(2/pi)
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * up[i];
    }
}

__global__ void to_half_kernel(const float *x, int64_t n, void *dst, int bf16)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (bf16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x[i]);
    else ((__half *)dst)[i] = __float2half_rn(x[i]);
}

__global__ void add_bias_kernel(float *out, const float *bias, int64_t n, int64_t n_out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += bias[i % n_out];
}

__global__ void add_kernel(float *x, const float *y, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void scale_kernel(float *x, float f, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}

__global__ void softcap_kernel(float *x, float cap, int64_t n)
{
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

template <int DT> struct GemvLaunch {
    static void run(const hx_cuda_wmat *w, const float *x, int64_t n_rows, const float *bias,
                    float *out, hx_cuda_stream s)
    {
        const unsigned g = blocks_for(w->n_out, GEMV_WARPS * GEMV_ROWS_WARP);
        const unsigned t = 32 * GEMV_WARPS;
        const int n = (int)n_rows;
        if (n <= 1) gemv_kernel<DT, 1><<<g, t, 0, s>>>(*w, x, n, bias, out);
        else if (n <= 2) gemv_kernel<DT, 2><<<g, t, 0, s>>>(*w, x, n, bias, out);
        else if (n <= 4) gemv_kernel<DT, 4><<<g, t, 0, s>>>(*w, x, n, bias, out);
        else gemv_kernel<DT, 8><<<g, t, 0, s>>>(*w, x, n, bias, out);
    }
};

template <int DT> struct DequantLaunch {
    static void run(const hx_cuda_wmat *w, int64_t o0, int64_t o1, void *dst, int bf16,
                    hx_cuda_stream s)
    {
        const int64_t n = (o1 - o0) * (w->n_in / 32);
        dequant_kernel<DT><<<blocks_for(n), THREADS, 0, s>>>(*w, o0, n, dst, bf16);
    }
};

template <int DT> struct EmbedLaunch {
    static void run(const hx_cuda_wmat *w, const int32_t *ids, int64_t n_tok, float *out,
                    hx_cuda_stream s)
    {
        const int64_t n = n_tok * (w->n_in / 32);
        embed_kernel<DT><<<blocks_for(n), THREADS, 0, s>>>(*w, ids, n, out);
    }
};

} // namespace

extern "C" {

int hx_cuda_format_ok(int32_t dtype, int64_t n_in)
{
    return dtype >= 0 && dtype < HX_DT_COUNT && n_in > 0 && n_in % 32 == 0;
}

void hx_cuda_gemv(const hx_cuda_wmat *w, const float *x, int64_t n_rows, const float *bias,
                  float *out, hx_cuda_stream s)
{
    by_dtype<GemvLaunch>(w->dtype, w, x, n_rows, bias, out, s);
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
    to_half_kernel<<<blocks_for(n), THREADS, 0, s>>>(x, n, dst, bf16);
}

void hx_cuda_add_bias(float *out, const float *bias, int64_t n_rows, int64_t n_out,
                      hx_cuda_stream s)
{
    add_bias_kernel<<<blocks_for(n_rows * n_out), THREADS, 0, s>>>(out, bias, n_rows * n_out,
                                                                   n_out);
}

void hx_cuda_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t d, float eps,
                     float *out, hx_cuda_stream s)
{
    rmsnorm_kernel<<<(unsigned)n_rows, THREADS, 0, s>>>(x, w, d, eps, out);
}

void hx_cuda_rope(float *x, const int32_t *pos, int64_t n_tok, int32_t n_head, int32_t d_head,
                  const float *inv_freq, int32_t n_rot, float mscale, int pairs,
                  hx_cuda_stream s)
{
    const int64_t n = n_tok * n_head * (n_rot / 2);
    rope_kernel<<<blocks_for(n), THREADS, 0, s>>>(x, pos, n, n_head, d_head, inv_freq, n_rot / 2,
                                                  mscale, pairs);
}

void hx_cuda_kv_write(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks,
                      const int32_t *pos, const float *k, const float *v, int64_t n_tok,
                      hx_cuda_stream s)
{
    const int64_t n = n_tok * kv->n_kv_head * kv->d_head;
    kv_write_kernel<<<blocks_for(n), THREADS, 0, s>>>(*kv, layer, blocks, pos, k, v, n);
}

void hx_cuda_attention(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks,
                       const float *q, const int32_t *pos, int64_t n_tok, int32_t n_head,
                       float scale, int32_t window, float softcap, float *out, hx_cuda_stream s)
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
    attention_kernel<<<(unsigned)(n_tok * n_head), 32 * ATT_WARPS, 0, s>>>(
        *kv, layer, blocks, q, pos, n_head, scale, window, softcap, out);
}

void hx_cuda_gather_rows(const float *src, const int32_t *rows, int64_t n, int64_t d,
                         float *dst, hx_cuda_stream s)
{
    gather_kernel<<<blocks_for(n * d), THREADS, 0, s>>>(src, rows, n * d, d, dst);
}

void hx_cuda_glu(const float *gate, const float *up, int64_t n, int act, float *out,
                 hx_cuda_stream s)
{
    glu_kernel<<<blocks_for(n), THREADS, 0, s>>>(gate, up, n, act, out);
}

void hx_cuda_add(float *x, const float *y, int64_t n, hx_cuda_stream s)
{
    add_kernel<<<blocks_for(n), THREADS, 0, s>>>(x, y, n);
}

void hx_cuda_scale(float *x, float f, int64_t n, hx_cuda_stream s)
{
    scale_kernel<<<blocks_for(n), THREADS, 0, s>>>(x, f, n);
}

void hx_cuda_softcap(float *x, float cap, int64_t n, hx_cuda_stream s)
{
    softcap_kernel<<<blocks_for(n), THREADS, 0, s>>>(x, cap, n);
}

} // extern "C"
