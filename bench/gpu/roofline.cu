/* roofline.cu - the GPU's two ceilings, measured: HBM read bandwidth and the cuBLAS GEMM rate.
 *
 * Decode of one sequence reads every weight byte once per token, so its ceiling is (HBM read
 * bandwidth) / (weight bytes per token). Prefill is a chain of large matmuls, so its ceiling is
 * (tensor-core GEMM rate) / (2 * matmul parameters) tokens per second. This program measures
 * both on the GPU at hand, as a dev tool beside the library (STYLE rule 42); it touches nothing
 * of hearth and links only the CUDA runtime and cuBLAS. bench/gpu_bench.py runs it and reads
 * the JSON line it prints last.
 *
 *  (a) read bandwidth: a buffer of --gib GiB (default 4; at most a quarter of free memory),
 *      filled with random non-zero words by a kernel, is read by a grid-stride kernel in
 *      16-byte loads (uint4), READ_UNROLL loads in flight per thread; each thread folds what it
 *      read into one word and writes it, so no load can be optimised away. The grid is exactly
 *      as many blocks as fit on the GPU at once. 3 warm-up passes, then 20 timed with events;
 *      the median pass gives bytes read / time in GB/s (1e9 bytes).
 *  (b) bf16 GEMM: cublasGemmEx at M = N = K = 8192, bf16 A, B and C, fp32 accumulation
 *      (CUBLAS_COMPUTE_32F), in the layout of a linear layer (op(A) = W^T: "TN", weights [out,
 *      in] row-major, activations [tokens, in] row-major); inputs random in [-1, 1). 3 warm-up
 *      calls, median of 10 timed: 2*M*N*K / time in TFLOP/s (1e12).
 *  (c) the same with f16 inputs and output.
 *
 * usage: hx-gpu-roofline [--gib N] [--device I]
 * Every CUDA and cuBLAS call is checked; a failure prints the call, file:line and the error and
 * exits 1 (a dev tool may exit; STYLE rule 23). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <vector>

/* ---- checks ---- */

#define CUDA_CHECK(expr)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (expr);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "hx-gpu-roofline: %s failed at %s:%d: %s (%s)\n", #expr, __FILE__,  \
                    __LINE__, cudaGetErrorString(e_), cudaGetErrorName(e_));                   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define CUBLAS_CHECK(expr)                                                                     \
    do {                                                                                       \
        cublasStatus_t s_ = (expr);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "hx-gpu-roofline: %s failed at %s:%d: %s (%s)\n", #expr, __FILE__,  \
                    __LINE__, cublasGetStatusString(s_), cublasGetStatusName(s_));             \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* A kernel launch: the launch error now, then (in the caller's time) execution errors at the
 * next synchronising call. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

enum { READ_UNROLL = 8, READ_BLOCK = 256, FILL_BLOCK = 256 };
enum { READ_WARMUP = 3, READ_RUNS = 20, GEMM_WARMUP = 3, GEMM_RUNS = 10, GEMM_N = 8192 };

/* ---- kernels ---- */

/* A 32-bit hash of a 64-bit index (splitmix64's finaliser): random-looking words without
 * state, so the fill is one pass at full write bandwidth. */
__device__ __forceinline__ uint32_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(x ^ (x >> 31));
}

/* Fills n 16-byte words with random non-zero 32-bit lanes. */
__global__ void fill_words(uint4 *__restrict__ p, size_t n, uint64_t seed)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint64_t k = (seed + i) * 4;
        uint4 v = make_uint4(mix(k), mix(k + 1), mix(k + 2), mix(k + 3));
        v.x |= !v.x, v.y |= !v.y, v.z |= !v.z, v.w |= !v.w; /* never zero */
        p[i] = v;
    }
}

/* Reads p[0, n) once. Thread t of T takes words t, t + T, t + 2T, ... (each warp's loads are
 * 512 contiguous bytes), READ_UNROLL of them issued before any is used, so each thread keeps
 * 128 bytes in flight; with every SM full that is enough to cover HBM latency. The loads are
 * folded with XOR into one word per thread, written to out[t] (a few MiB at most against the
 * GiB read, and it keeps every load live). */
__global__ void __launch_bounds__(READ_BLOCK) read_words(const uint4 *__restrict__ p, size_t n,
                                                        uint32_t *__restrict__ out)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    size_t i = t;
    for (; i + (READ_UNROLL - 1) * stride < n; i += READ_UNROLL * stride) {
        uint4 v[READ_UNROLL];
#pragma unroll
        for (int u = 0; u < READ_UNROLL; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < READ_UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    out[t] = acc;
}

/* Random values in [-1, 1) as bf16 or f16. */
template <typename T>
__global__ void fill_matrix(T *__restrict__ p, size_t n, uint64_t seed)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = (float)(mix(seed + i) >> 8) * (2.0f / 16777216.0f) - 1.0f;
        if constexpr (std::is_same<T, __nv_bfloat16>::value)
            p[i] = __float2bfloat16(x);
        else
            p[i] = __float2half(x);
    }
}

/* ---- helpers ---- */

static double median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

/* Times `runs` calls of fn (after `warmup` untimed ones) on stream s, each between its own pair
 * of events; returns the milliseconds of each timed call. */
template <typename F>
static std::vector<float> time_calls(cudaStream_t s, int warmup, int runs, F fn)
{
    for (int i = 0; i < warmup; i++) fn();
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<cudaEvent_t> ev(2 * (size_t)runs);
    for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
    for (int i = 0; i < runs; i++) {
        CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
        fn();
        CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<float> ms((size_t)runs);
    for (int i = 0; i < runs; i++)
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (auto &e : ev) CUDA_CHECK(cudaEventDestroy(e));
    return ms;
}

/* ---- (a) read bandwidth ---- */

/* Returns the median read bandwidth in GB/s over a buffer of `want` bytes (less when a quarter
 * of free memory is smaller); *used gets the bytes actually read per pass. */
static double measure_read(int dev, cudaStream_t s, size_t want, size_t *used)
{
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t bytes = std::min(want, free_b / 4);
    bytes &= ~(size_t)((1u << 20) - 1); /* whole MiB: whole 16-byte words, aligned passes */
    if (bytes < ((size_t)64 << 20)) {
        fprintf(stderr, "hx-gpu-roofline: only %zu MiB free; a quarter of it is under the 64 MiB "
                "minimum buffer\n", free_b >> 20);
        exit(1);
    }
    const size_t n = bytes / sizeof(uint4);

    int n_sm = 0, per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_words, READ_BLOCK, 0));
    const int grid = n_sm * std::max(per_sm, 1);

    uint4 *buf = nullptr;
    uint32_t *sink = nullptr;
    CUDA_CHECK(cudaMalloc(&buf, bytes));
    CUDA_CHECK(cudaMalloc(&sink, (size_t)grid * READ_BLOCK * sizeof(uint32_t)));
    fill_words<<<n_sm * 8, FILL_BLOCK, 0, s>>>(buf, n, 0x5eed);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaStreamSynchronize(s));

    std::vector<float> ms = time_calls(s, READ_WARMUP, READ_RUNS, [&] {
        read_words<<<grid, READ_BLOCK, 0, s>>>(buf, n, sink);
        LAUNCH_CHECK();
    });
    const double med = median(ms);
    printf("read: %zu MiB buffer, %d blocks of %d threads (%d per SM), %d in flight per thread; "
           "median of %d: %.3f ms (min %.3f, max %.3f)\n", bytes >> 20, grid, READ_BLOCK, per_sm,
           (int)READ_UNROLL, READ_RUNS, med, *std::min_element(ms.begin(), ms.end()),
           *std::max_element(ms.begin(), ms.end()));
    CUDA_CHECK(cudaFree(sink));
    CUDA_CHECK(cudaFree(buf));
    *used = bytes;
    return (double)bytes / (med * 1e-3) / 1e9;
}

/* ---- (b), (c) GEMM rate ---- */

/* Median TFLOP/s of C = A^T B (M = N = K = GEMM_N) with inputs and output of type T (dt), fp32
 * accumulation. */
template <typename T>
static double measure_gemm(cublasHandle_t h, cudaStream_t s, cudaDataType_t dt, const char *label)
{
    const int m = GEMM_N, n = GEMM_N, k = GEMM_N;
    const size_t elems = (size_t)m * k;
    T *a = nullptr, *b = nullptr, *c = nullptr;
    CUDA_CHECK(cudaMalloc(&a, elems * sizeof(T)));
    CUDA_CHECK(cudaMalloc(&b, elems * sizeof(T)));
    CUDA_CHECK(cudaMalloc(&c, elems * sizeof(T)));
    fill_matrix<T><<<1024, FILL_BLOCK, 0, s>>>(a, elems, 1);
    LAUNCH_CHECK();
    fill_matrix<T><<<1024, FILL_BLOCK, 0, s>>>(b, elems, 1ull << 40);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemsetAsync(c, 0, elems * sizeof(T), s));
    CUDA_CHECK(cudaStreamSynchronize(s));

    const float alpha = 1.0f, beta = 0.0f;
    std::vector<float> ms = time_calls(s, GEMM_WARMUP, GEMM_RUNS, [&] {
        /* column-major: C [m, n] = op(A) [m, k] * B [k, n], A stored [k, m] (ld k) and
         * transposed, B stored [k, n] (ld k): the linear layer's Y^T = W X^T */
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, dt, k, b, dt,
                                  k, &beta, c, dt, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    const double med = median(ms);
    const double tflops = 2.0 * m * n * (double)k / (med * 1e-3) / 1e12;
    printf("%s GEMM %dx%dx%d (TN, fp32 accumulate): median of %d: %.3f ms (min %.3f) = "
           "%.1f TFLOP/s\n", label, m, n, k, GEMM_RUNS, med,
           *std::min_element(ms.begin(), ms.end()), tflops);
    CUDA_CHECK(cudaFree(c));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(a));
    return tflops;
}

/* ---- main ---- */

/* s as a JSON string body (quotes and backslashes escaped, control characters dropped). */
static void json_escape(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    for (; *s && k + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') out[k++] = '\\';
        if ((unsigned char)*s >= 0x20) out[k++] = *s;
    }
    out[k] = '\0';
}

static void usage(void)
{
    fprintf(stderr, "usage: hx-gpu-roofline [--gib N] [--device I]\n"
                    "  --gib N      read-bandwidth buffer in GiB (default 4; at most 1/4 of free "
                    "memory)\n"
                    "  --device I   the GPU to measure (default 0)\n");
}

int main(int argc, char **argv)
{
    double gib = 4.0;
    int dev = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gib") == 0 && i + 1 < argc) gib = atof(argv[++i]);
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) dev = atoi(argv[++i]);
        else {
            usage();
            return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2;
        }
    }
    if (!(gib > 0 && gib <= 1024)) {
        fprintf(stderr, "hx-gpu-roofline: --gib must be in (0, 1024]\n");
        return 2;
    }
    int n_dev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n_dev));
    if (dev < 0 || dev >= n_dev) {
        fprintf(stderr, "hx-gpu-roofline: no GPU %d (%d found)\n", dev, n_dev);
        return 1;
    }
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    int mem_khz = 0, bus_bits = 0;
    /* Peak memory clock and bus width, for the datasheet figure only; some drivers report 0. */
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        mem_khz = bus_bits = 0;
    }
    const double spec_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9; /* DDR: 2 per clock */
    printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB", dev, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, (double)prop.totalGlobalMem / (1u << 30));
    if (spec_gbs > 0)
        printf(", memory %d-bit at %.0f MHz (%.0f GB/s peak)", bus_bits, mem_khz / 1e3, spec_gbs);
    printf("\n");

    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t used = 0;
    const double gbs = measure_read(dev, s, (size_t)(gib * (double)(1ull << 30)), &used);
    printf("HBM read bandwidth: %.1f GB/s", gbs);
    if (spec_gbs > 0) printf(" (%.0f%% of the %.0f GB/s peak)", 100.0 * gbs / spec_gbs, spec_gbs);
    printf("\n");

    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, s));
    const double bf16 = measure_gemm<__nv_bfloat16>(h, s, CUDA_R_16BF, "bf16");
    const double f16 = measure_gemm<__half>(h, s, CUDA_R_16F, "f16");
    CUBLAS_CHECK(cublasDestroy(h));
    CUDA_CHECK(cudaStreamDestroy(s));

    char name[256];
    json_escape(prop.name, name, sizeof name);
    printf("{\"gpu\":\"%s\",\"sm\":\"%d%d\",\"n_sm\":%d,\"hbm_read_gbs\":%.1f,"
           "\"hbm_spec_gbs\":%.1f,\"read_buffer_bytes\":%zu,\"bf16_tflops\":%.1f,"
           "\"f16_tflops\":%.1f,\"gemm_mnk\":%d}\n",
           name, prop.major, prop.minor, prop.multiProcessorCount, gbs, spec_gbs, used, bf16, f16,
           (int)GEMM_N);
    return 0;
}
