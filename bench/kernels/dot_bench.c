/* dot_bench.c - dev harness for the CPU leaf kernels (not part of the library; STYLE rule 42).
 *
 * Single thread. Measures, in one run:
 *  - the roofline: a plain streaming read of 512 MiB (far beyond L3), best of 5, in GB/s;
 *  - the VNNI peak: a loop of independent zmm vpdpbusd (inline asm, here only), in GOP/s
 *    (one MAC = 2 ops), when the CPU has AVX-512 VNNI;
 *  - decode (batch 1): every dot variant of every format over a whole weight matrix, on real
 *    shapes: W [1536, 576] (SmolLM2-135M FFN up) and W [8192, 2048] (Llama-3.2-1B FFN up).
 *    "hot" reuses one matrix (L2/L3 resident: compute speed); "cold" walks copies totalling
 *    >= 256 MiB so every call streams its weights from DRAM, the decode situation. Printed:
 *    ns per matmul, GB/s of weight bytes, and for cold the fraction of the streaming roofline;
 *  - prefill (batch 512): every matmul variant, in GOP/s and fraction of the VNNI peak;
 *  - the same for every f32-activation matmul variant (fmatmul_*.c, the exact path of formats
 *    without packing), labelled "f32act/<isa>": decode is one call over one row, prefill one
 *    call over 512 rows;
 *  - the packed matmul (packed.h, the default for Q4_0/Q4_1/Q8_0/Q4_K/Q6_K on VNNI CPUs),
 *    "packed/1term" and "packed/2term" (the exact default), decode hot/cold and prefill, on
 *    huge-page memory (every format hx_pack_supported takes at the shape).
 * K-quants need rows that are multiples of 256, so they skip the 576-wide shape.
 * Build by hand until CMake has hx-dot-bench:
 *   gcc -std=c11 -O3 -Iinclude -Isrc bench/kernels/dot_bench.c build/libhearth.a -lm -lpthread
 * Run: hx-dot-bench [filter]   (filter: a dtype name such as q4_0, to run only that format) */
#define _DEFAULT_SOURCE /* madvise */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/packed.h"
#include "base/cpu.h"
#include "base/f16.h"
#include "tensor/dtype.h"

/* Thread CPU time, not wall time: this machine is shared (2 vCPUs, other jobs), and time spent
 * descheduled must not count. Each figure is the best of several trials. */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint32_t rng(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ---- roofline ---- */

/* Sums 64-bit words with 8 independent chains: the compiler vectorizes it, and one core's
 * load rate is far above DRAM's, so this measures the memory system. */
static uint64_t read_all(const uint64_t *p, size_t n)
{
    uint64_t s[8] = { 0 };
    for (size_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += p[i + k];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static double stream_read_gbs(void)
{
    const size_t bytes = (size_t)512 << 20;
    uint64_t *p = xalloc(bytes);
    for (size_t i = 0; i < bytes / 8; i++) p[i] = i;
    double best = 0.0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 8; rep++) {
        const double t0 = now_s();
        sink += read_all(p, bytes / 8);
        const double gbs = (double)bytes / (now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(p);
    return best;
}

/* ---- VNNI peak ---- */

#if defined(__x86_64__)
/* 12 independent accumulators so latency never limits; each iteration is 12 x 64 MACs. */
static double vnni_peak_gops(void)
{
    if (!(hx_cpu_isa() & HX_ISA_AVX512VNNI)) return 0.0;
    const long iters = 20 * 1000 * 1000;
    const double t0 = now_s();
    __asm__ volatile(
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
        "vpternlogd $0xff, %%zmm14, %%zmm14, %%zmm14\n\t"
        "vpxord %%zmm15, %%zmm15, %%zmm15\n\t"
        "mov %0, %%rcx\n\t"
        "1:\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm0\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm1\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm2\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm3\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm4\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm5\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm6\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm7\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm8\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm9\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm10\n\t"
        "vpdpbusd %%zmm14, %%zmm15, %%zmm11\n\t"
        "dec %%rcx\n\t"
        "jnz 1b\n\t"
        :
        : "r"(iters)
        : "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
          "xmm9", "xmm10", "xmm11", "xmm14", "xmm15", "cc");
    const double t = now_s() - t0;
    return (double)iters * 12 * 64 * 2 / t / 1e9;
}
#else
static double vnni_peak_gops(void) { return 0.0; }
#endif

/* ---- weights and activations ---- */

/* Random bytes with every scale field set to a small half (see tests for the block layouts). */
static void fill_weights(hx_wmat *w, uint32_t seed)
{
    const hx_dtype dt = w->dtype;
    const size_t bytes = w->row_bytes * (size_t)w->n_out;
    unsigned char *p = (unsigned char *)w->data;
    for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)(rng(&seed) >> 24);
    const uint16_t h = hx_f32_to_f16(0.01f);
    const int64_t bb = hx_dtypes[dt].block_bytes, n_blocks = (int64_t)(bytes / (size_t)bb);
    for (int64_t b = 0; b < n_blocks; b++) {
        unsigned char *blk = p + b * bb;
        switch (dt) {
        case HX_DT_F32: { const float v = 0.01f; memcpy(blk, &v, 4); break; }
        case HX_DT_F16: case HX_DT_BF16: memcpy(blk, &h, 2); break;
        case HX_DT_Q4_0: case HX_DT_Q8_0: memcpy(blk, &h, 2); break;
        case HX_DT_Q4_1: case HX_DT_Q4_K: case HX_DT_Q5_K:
            memcpy(blk, &h, 2);
            memcpy(blk + 2, &h, 2);
            break;
        case HX_DT_Q6_K: memcpy(blk + 208, &h, 2); break;
        default: break;
        }
    }
}

/* A matrix of dt [n_out, n_in]; MLX formats get f16 scales/biases with group 64. */
static hx_wmat make_w(hx_dtype dt, int64_t n_out, int64_t n_in, uint32_t seed)
{
    hx_wmat w = { .dtype = dt, .n_in = n_in, .n_out = n_out };
    w.row_bytes = hx_dtype_row_bytes(dt, n_in);
    w.data = xalloc(w.row_bytes * (size_t)n_out);
    fill_weights(&w, seed);
    if (dt == HX_DT_MLX4 || dt == HX_DT_MLX8) {
        const size_t n_sb = (size_t)(n_out * (n_in / 64));
        uint16_t *s = xalloc(2 * n_sb), *b = xalloc(2 * n_sb);
        for (size_t i = 0; i < n_sb; i++) s[i] = hx_f32_to_f16(0.01f), b[i] = hx_f32_to_f16(-0.05f);
        w.scales = s, w.biases = b, w.sb_dtype = HX_DT_F16, w.group_size = 64;
    }
    return w;
}

/* Bytes a matmul over w reads from the weights (MLX: scales and biases too). */
static double w_bytes(const hx_wmat *w)
{
    double b = (double)w->row_bytes * (double)w->n_out;
    if (w->group_size) b += 2.0 * 2.0 * (double)(w->n_out * (w->n_in / w->group_size));
    return b;
}

static void free_w(hx_wmat *w)
{
    free((void *)w->data);
    free((void *)w->scales);
    free((void *)w->biases);
}

static hx_act make_x(int64_t n_rows, int64_t n, float **f_out)
{
    float *f = xalloc(sizeof(float) * (size_t)(n_rows * n));
    uint32_t seed = 99;
    for (int64_t i = 0; i < n_rows * n; i++)
        f[i] = (float)((int)(rng(&seed) >> 20) - 2048) / 2048.0f;
    hx_act x;
    hx_act_init(&x, xalloc(hx_act_bytes(n_rows, n)), n_rows, n);
    hx_act_quantize(&x, f, hx_act_quant_ref);
    *f_out = f;
    return x;
}

/* ---- runs ---- */

/* Decode: all n_out dots of one activation row, repeated for at least ~0.2 s; returns the best
 * ns per matmul over 3 trials. ws[] holds n_w copies of the matrix, visited in turn. */
static double time_decode(hx_dot_fn dot, const hx_wmat *ws, int n_w, const hx_act *x, float *y)
{
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
        int reps = 0;
        const double t0 = now_s();
        double t;
        do {
            const hx_wmat *w = &ws[reps % n_w];
            for (int64_t o = 0; o < w->n_out; o++) y[o] = dot(w, o, x, 0);
            reps++;
        } while ((t = now_s() - t0) < 0.1 || reps < n_w);
        if (t / reps < best) best = t / reps;
    }
    return best * 1e9;
}

/* time_decode for an f32-activation matmul: one call over all outputs of one row. */
static double time_fdecode(hx_fmatmul_fn fn, const hx_wmat *ws, int n_w, const float *x, float *y)
{
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
        int reps = 0;
        const double t0 = now_s();
        double t;
        do {
            const hx_wmat *w = &ws[reps % n_w];
            fn(w, 0, w->n_out, x, 0, 1, y, w->n_out);
            reps++;
        } while ((t = now_s() - t0) < 0.1 || reps < n_w);
        if (t / reps < best) best = t / reps;
    }
    return best * 1e9;
}

static void bench_decode(hx_dtype dt, int64_t n_out, int64_t n_in, double roof)
{
    hx_kernel_variant v[4];
    const int nv = hx_kernels_variants(dt, hx_cpu_isa(), v, 4);
    hx_wmat hot = make_w(dt, n_out, n_in, 1);
    const double wb = w_bytes(&hot);
    const int n_cold = (int)(256e6 / wb) + 1;
    hx_wmat *cold = xalloc(sizeof(hx_wmat) * (size_t)n_cold);
    for (int i = 0; i < n_cold; i++) cold[i] = make_w(dt, n_out, n_in, 2 + i);
    float *f;
    hx_act x = make_x(1, n_in, &f);
    float *y = xalloc(sizeof(float) * (size_t)n_out);
    for (int k = 0; k < nv; k++) {
        const double ns_hot = time_decode(v[k].dot, &hot, 1, &x, y);
        const double ns_cold = time_decode(v[k].dot, cold, n_cold, &x, y);
        const double gbs_cold = wb / ns_cold;
        printf("decode %-5s %5lldx%-5lld %-10s  hot %9.0f ns %6.1f GB/s | cold %9.0f ns %6.1f GB/s"
               "  %3.0f%% of roofline\n", hx_dtypes[dt].name, (long long)n_out, (long long)n_in,
               v[k].name, ns_hot, wb / ns_hot, ns_cold, gbs_cold, 100.0 * gbs_cold / roof);
    }
    hx_fmatmul_variant fv[4];
    const int nf = hx_fmatmul_variants(dt, hx_cpu_isa(), fv, 4);
    for (int k = 0; k < nf; k++) {
        char name[32];
        snprintf(name, sizeof name, "f32act/%s", fv[k].name);
        const double ns_hot = time_fdecode(fv[k].fn, &hot, 1, f, y);
        const double ns_cold = time_fdecode(fv[k].fn, cold, n_cold, f, y);
        const double gbs_cold = wb / ns_cold;
        printf("decode %-5s %5lldx%-5lld %-10s  hot %9.0f ns %6.1f GB/s | cold %9.0f ns %6.1f GB/s"
               "  %3.0f%% of roofline\n", hx_dtypes[dt].name, (long long)n_out, (long long)n_in,
               name, ns_hot, wb / ns_hot, ns_cold, gbs_cold, 100.0 * gbs_cold / roof);
    }
    free(x.qs);
    free(f);
    free(y);
    free_w(&hot);
    for (int i = 0; i < n_cold; i++) free_w(&cold[i]);
    free(cold);
}

static void bench_prefill(hx_dtype dt, int64_t n_out, int64_t n_in, int64_t n_rows, double peak)
{
    hx_kernel_variant v[4];
    const int nv = hx_kernels_variants(dt, hx_cpu_isa(), v, 4);
    hx_wmat w = make_w(dt, n_out, n_in, 1);
    float *f;
    hx_act x = make_x(n_rows, n_in, &f);
    float *y = xalloc(sizeof(float) * (size_t)(n_rows * n_out));
    const double ops = 2.0 * (double)n_in * (double)n_out * (double)n_rows;
    for (int k = 0; k < nv; k++) {
        /* the reference is slow: time it on an output slice and scale */
        const int64_t o1 = strcmp(v[k].name, "ref") == 0 ? (n_out < 64 ? n_out : 64) : n_out;
        double best = 1e30;
        for (int trial = 0; trial < 3; trial++) {
            const double t0 = now_s();
            v[k].matmul(&w, 0, o1, &x, 0, n_rows, y, n_out);
            const double t = (now_s() - t0) * (double)n_out / (double)o1;
            if (t < best) best = t;
        }
        const double gops = ops / best / 1e9;
        printf("prefill %-5s %5lldx%-5lld x%lld %-10s %9.2f ms %7.1f GOP/s", hx_dtypes[dt].name,
               (long long)n_out, (long long)n_in, (long long)n_rows, v[k].name, best * 1e3, gops);
        if (peak > 0) printf("  %3.0f%% of VNNI peak", 100.0 * gops / peak);
        printf("\n");
    }
    hx_fmatmul_variant fv[4];
    const int nf = hx_fmatmul_variants(dt, hx_cpu_isa(), fv, 4);
    for (int k = 0; k < nf; k++) {
        const int64_t o1 = strcmp(fv[k].name, "ref") == 0 ? (n_out < 64 ? n_out : 64) : n_out;
        double best = 1e30;
        for (int trial = 0; trial < 3; trial++) {
            const double t0 = now_s();
            fv[k].fn(&w, 0, o1, f, 0, n_rows, y, n_out);
            const double t = (now_s() - t0) * (double)n_out / (double)o1;
            if (t < best) best = t;
        }
        printf("prefill %-5s %5lldx%-5lld x%lld f32act/%-6s %8.2f ms %7.1f GOP/s\n",
               hx_dtypes[dt].name, (long long)n_out, (long long)n_in, (long long)n_rows,
               fv[k].name, best * 1e3, ops / best / 1e9);
    }
    free(x.qs);
    free(f);
    free(y);
    free_w(&w);
}

/* ---- packed weights (packed.h): the default for Q4_0/Q4_1/Q8_0/Q4_K/Q6_K on VNNI CPUs ---- */

/* A packed copy of w in 2 MiB-aligned, huge-page-advised memory, as the backend makes. */
static hx_packed make_packed(const hx_wmat *w)
{
    hx_packed p;
    const size_t bytes = hx_pack_layout(&p, w), al = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    p.data = aligned_alloc((size_t)2 << 20, al);
    if (!p.data) {
        fprintf(stderr, "out of memory (%zu bytes)\n", al);
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    madvise(p.data, al, MADV_HUGEPAGE);
#endif
    hx_pack_groups(&p, w, 0, p.n_groups);
    return p;
}

/* Best ns per call of the packed matmul over rows [0, n_rows), cycling through n_p copies. */
static double time_packed(hx_pmatmul_fn fn, const hx_packed *ps, int n_p, const hx_act *x,
                          const hx_act *x2, const float *s, int64_t n_rows, float *y)
{
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
        int reps = 0;
        const double t0 = now_s();
        double t;
        do {
            const hx_packed *p = &ps[reps % n_p];
            fn(p, 0, p->n_groups, x, x2, s, 0, n_rows, y, p->n_out);
            reps++;
        } while ((t = now_s() - t0) < 0.1 || reps < n_p);
        if (t / reps < best) best = t / reps;
    }
    return best * 1e9;
}

/* Decode (one row, hot and from DRAM) and prefill (n_rows rows) of the packed matmul, with one
 * and with two activation terms. Prefill GOP/s count 2 ops per weight-activation product, not
 * per term, so two terms show their cost against the single-term VNNI peak. */
static void bench_packed(hx_dtype dt, int64_t n_out, int64_t n_in, int64_t n_rows, double roof,
                         double peak)
{
    const hx_pmatmul_fn fn = hx_pmatmul_select(hx_cpu_isa());
    if (!fn || !hx_pack_supported(dt, n_in)) return;
    hx_wmat w = make_w(dt, n_out, n_in, 1);
    hx_packed hot = make_packed(&w);
    const double wb = (double)hot.n_groups * (double)hot.group_bytes;
    const int n_cold = (int)(256e6 / wb) + 1;
    hx_packed *cold = xalloc(sizeof(hx_packed) * (size_t)n_cold);
    for (int i = 0; i < n_cold; i++) cold[i] = make_packed(&w);
    float *f;
    hx_act x = make_x(n_rows, n_in, &f), x2;
    hx_act_init(&x2, xalloc(hx_act_bytes(n_rows, n_in)), n_rows, n_in);
    for (int64_t r = 0; r < n_rows; r++)
        hx_act_quant2_ref(f + r * n_in, x.qs + r * n_in, x.d + r * (n_in / 32), x2.qs + r * n_in,
                          x2.d + r * (n_in / 32), x2.bsum + r * (n_in / 16), n_in);
    float *s1 = xalloc(sizeof(float) * (size_t)(n_rows * (n_in / 32)));
    float *s2 = xalloc(sizeof(float) * (size_t)(n_rows * (n_in / 32)));
    hx_packed_act_sums(&x, NULL, 0, n_rows, s1);
    hx_packed_act_sums(&x, &x2, 0, n_rows, s2);
    float *y = xalloc(sizeof(float) * (size_t)(n_rows * n_out));
    for (int two = 0; two < 2; two++) {
        const hx_act *xx2 = two ? &x2 : NULL;
        const float *ss = two ? s2 : s1;
        const double ns_hot = time_packed(fn, &hot, 1, &x, xx2, ss, 1, y);
        const double ns_cold = time_packed(fn, cold, n_cold, &x, xx2, ss, 1, y);
        printf("decode %-5s %5lldx%-5lld packed/%s  hot %9.0f ns %6.1f GB/s | cold %9.0f ns "
               "%6.1f GB/s  %3.0f%% of roofline\n", hx_dtypes[dt].name, (long long)n_out,
               (long long)n_in, two ? "2term" : "1term", ns_hot, wb / ns_hot, ns_cold,
               wb / ns_cold, 100.0 * wb / ns_cold / roof);
        const double ns_pre = time_packed(fn, &hot, 1, &x, xx2, ss, n_rows, y);
        const double gops = 2.0 * (double)n_in * (double)n_out * (double)n_rows / ns_pre;
        printf("prefill %-5s %5lldx%-5lld x%lld packed/%s %8.2f ms %7.1f GOP/s", hx_dtypes[dt].name,
               (long long)n_out, (long long)n_in, (long long)n_rows, two ? "2term" : "1term",
               ns_pre * 1e-6, gops);
        if (peak > 0) printf("  %3.0f%% of VNNI peak", 100.0 * gops / peak);
        printf("\n");
    }
    free(y);
    free(s1);
    free(s2);
    free(x.qs);
    free(x2.qs);
    free(f);
    free(hot.data);
    for (int i = 0; i < n_cold; i++) free(cold[i].data);
    free(cold);
    free_w(&w);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    char isa[128];
    hx_cpu_isa_names(hx_cpu_isa(), isa, sizeof isa);
    const double roof = stream_read_gbs(), peak = vnni_peak_gops();
    printf("isa: %s\nroofline: streaming read %.1f GB/s (1 thread, 512 MiB)\n", isa, roof);
    if (peak > 0) printf("VNNI peak: %.0f GOP/s (zmm vpdpbusd, 1 thread)\n", peak);
    static const struct { int64_t n_out, n_in; } shapes[] = { { 1536, 576 }, { 8192, 2048 } };
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        if (only && strcmp(only, hx_dtypes[dt].name) != 0) continue;
        for (int s = 0; s < 2; s++) {
            if (dt >= HX_DT_Q4_K && dt <= HX_DT_Q6_K && shapes[s].n_in % 256 != 0) continue;
            bench_decode((hx_dtype)dt, shapes[s].n_out, shapes[s].n_in, roof);
        }
    }
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        if (only && strcmp(only, hx_dtypes[dt].name) != 0) continue;
        for (int s = 0; s < 2; s++) {
            if (dt >= HX_DT_Q4_K && dt <= HX_DT_Q6_K && shapes[s].n_in % 256 != 0) continue;
            bench_prefill((hx_dtype)dt, shapes[s].n_out, shapes[s].n_in, 512, peak);
        }
    }
    for (int dt = 0; dt < HX_DT_COUNT; dt++) {
        if (only && strcmp(only, hx_dtypes[dt].name) != 0) continue;
        for (int s = 0; s < 2; s++)
            bench_packed((hx_dtype)dt, shapes[s].n_out, shapes[s].n_in, 512, roof, peak);
    }
    return 0;
}
