// kernels.cu - the cuda backend's other kernels (kernels.h): weights dequantized to f16 for
// cuBLAS and for the embedding lookup, rmsnorm, the mixture of experts' routing and combining,
// the GLU, and the element-wise ops. The GEMVs are in gemv.cu, attention in attention.cu, the
// sampler in sample.cu; what they share in kernels.cuh.
#include "backend/cuda/kernels.cuh"

namespace {

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

// An id below 0 names a draw of the step before (backend.h HX_TOKEN_DRAWN): its token.
template <int DT>
__global__ void embed_kernel(hx_cuda_wmat w, const int32_t *ids, const hx_cuda_drawn *drawn,
                             int64_t n_total, float *out)
{
    after_prior();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_total) return;
    const int64_t n_sub = w.n_in / 32, t = i / n_sub, j = i % n_sub;
    const int32_t id = ids[t] >= 0 ? ids[t] : drawn[-1 - ids[t]].token;
    float v[32];
    sub32<DT>(w, id, j, v);
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

// The decode step's rows, each over RMS_SLICE-value slices, a block a slice: every block sums
// the whole row's squares (its threads' float4 loads, with the thread's own value in the same
// trip) and writes its slice. One block of up to 1,024 threads a row (rmsnorm_kernel) waited,
// under programmatic launch, for an SM to empty of the GEMV ahead before it could start, then
// reduced over 32 warps and rounded four values a thread; here 16 blocks of 256 threads start
// in any SM's gaps. Not in place: a block's writes are rows the others read.
constexpr int RMS_SLICE = 256;
__global__ void __launch_bounds__(RMS_SLICE)
    rmsnorm_split_kernel(const float *__restrict__ x, const float *__restrict__ w, int64_t d,
                         float eps, float *__restrict__ out, int8_t *xq, float *xd)
{
    const int64_t i = (int64_t)blockIdx.x * RMS_SLICE + threadIdx.x, r = blockIdx.y;
    const float wi = i < d ? w[i] : 0.0f;
    after_prior();
    const float *xr = x + r * d;
    const float xi = i < d ? xr[i] : 0.0f;
    double ss = 0.0;
    for (int64_t j = 4 * (int64_t)threadIdx.x; j < d; j += 4 * RMS_SLICE) {
        const float4 v = *(const float4 *)(xr + j);
        ss += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
    }
    const float scale = rms_scale(ss, d, eps);
    if (i >= d) return; // whole warps (d % 32 == 0), as the rounding needs
    const float y = xi * scale * wi;
    out[r * d + i] = y;
    if (xq) round_x(y, r * d + i, (int64_t)gridDim.y * d, xq, xd);
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
    static void run(const hx_cuda_wmat *w, const int32_t *ids, const hx_cuda_drawn *drawn,
                    int64_t n_tok, float *out, hx_cuda_stream s)
    {
        const int64_t n = n_tok * (w->n_in / 32);
        launch(embed_kernel<DT>, blocks_for(n), THREADS, 0, s, *w, ids, drawn, n, out);
    }
};

} // namespace

extern "C" {

int hx_cuda_format_ok(int32_t dtype, int64_t n_in)
{
    return dtype >= 0 && dtype < HX_DT_COUNT && n_in > 0 && n_in % 32 == 0;
}

void hx_cuda_moe_route(const float *router, int64_t n_tok, int32_t n_expert, int32_t n_used,
                       int norm, int32_t *ids, float *w, hx_cuda_stream s)
{
    launch(moe_route_kernel, (unsigned)n_tok, 32, 0, s, router, (int)n_expert, (int)n_used, norm,
           ids, w);
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

int hx_cuda_switched_off(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

void hx_cuda_embed(const hx_cuda_wmat *w, const int32_t *ids, const hx_cuda_drawn *drawn,
                   int64_t n_tok, float *out, hx_cuda_stream s)
{
    by_dtype<EmbedLaunch>(w->dtype, w, ids, drawn, n_tok, out, s);
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
    static const bool split_on = !hx_cuda_switched_off("HEARTH_CUDA_RMS_SPLIT");
    const bool apart = out + n_rows * d <= x || x + n_rows * d <= out;
    if (split_on && n_rows <= HX_CUDA_GEMV_ROWS && d % 32 == 0 && aligned16(x) && apart) {
        launch(rmsnorm_split_kernel, dim3((unsigned)((d + RMS_SLICE - 1) / RMS_SLICE),
                                          (unsigned)n_rows),
               RMS_SLICE, 0, s, x, w, d, eps, out, xq, xd);
        return;
    }
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

#ifdef HX_CUDA_TIMELINE
HX_CUDA_TIMELINE_READER(kernels)
#endif
