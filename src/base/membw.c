/* membw.c - streaming read bandwidth (membw.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "base/membw.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/alloc.h"
#include "base/threadpool.h"

#define PROBE_BYTES ((size_t)256 << 20)
#define HUGE_BYTES  ((size_t)2 << 20)
#define LINE        64

typedef struct {
    const unsigned char *buf;
    size_t               n_lines;
    uint64_t             sums[256]; /* one per thread, so the loads cannot be optimised away */
} probe_args;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Sums thread ith's share as 64-bit words, eight independent accumulators per 64-byte line (the
 * compiler turns this into full-width vector loads). */
static void probe_task(void *p, int ith, int nth)
{
    probe_args *a = p;
    int64_t l0, l1;
    hx_split_range((int64_t)a->n_lines, ith, nth, 1, &l0, &l1);
    const uint64_t *w = (const uint64_t *)(const void *)(a->buf + (size_t)l0 * LINE);
    const size_t n = (size_t)(l1 - l0) * (LINE / 8);
    uint64_t acc[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += w[i + j];
    uint64_t s = 0;
    for (int j = 0; j < 8; j++) s += acc[j];
    a->sums[ith & 255] += s;
}

double hx_membw_read(int n_threads, int ms)
{
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256;
    unsigned char *mem = hx_alloc(PROBE_BYTES + HUGE_BYTES);
    if (!mem) return 0.0;
    probe_args a = {0};
    unsigned char *buf = (unsigned char *)(((uintptr_t)mem + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, PROBE_BYTES, MADV_HUGEPAGE);
#endif
    memset(buf, 1, PROBE_BYTES); /* fault every page in before timing */
    a.buf = buf;
    a.n_lines = PROBE_BYTES / LINE;
    hx_pool *pool = NULL;
    double best = 0.0;
    if (hx_pool_init(n_threads, &pool, NULL) == HX_OK) {
        const double start = now_s(), limit = (ms > 0 ? ms : 1) * 1e-3;
        for (int pass = 0; pass < 2 || now_s() - start < limit; pass++) {
            const double t0 = now_s();
            hx_pool_run(pool, probe_task, &a);
            const double dt = now_s() - t0;
            if (dt > 0 && (double)PROBE_BYTES / dt > best) best = (double)PROBE_BYTES / dt;
        }
        hx_pool_free(pool);
    }
    volatile uint64_t sink = 0;
    for (int t = 0; t < 256; t++) sink += a.sums[t];
    (void)sink;
    hx_free(mem);
    return best;
}
