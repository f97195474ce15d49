/* membw.c - the memory roofline of decode: streaming read bandwidth with T threads.
 *
 * Decode of one sequence reads every weight byte once per token, so its ceiling is
 * (read bandwidth) / (weight bytes per token). This measures that bandwidth the way decode
 * reads: T threads (hearth's --threads), each streaming its own contiguous share of a buffer
 * far larger than the last-level cache, 64-byte vector loads summed so the compiler keeps them.
 * Two buffers are measured: anonymous memory (advised to transparent huge pages, as hearth's
 * repacked weights are) and, with FILE, a read-only private mapping of that file (4 KiB page
 * cache pages, as hearth's mapped weights are; the file is read once before timing).
 * Prints one line per buffer: "membw anon T threads: X GB/s" (best of 5 passes, wall time).
 *
 * usage: hx-membw [THREADS] [FILE]          (dev tool; bench/engine_bench.py runs it) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const unsigned char *p;
    size_t               n;
    uint64_t             sum;
    pthread_barrier_t   *bar;
} share;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Sums the share as 64-bit words, eight independent accumulators per 64-byte line (the
 * compiler vectorizes this into full-width loads at -O3). */
static uint64_t stream(const unsigned char *p, size_t n)
{
    uint64_t acc[8] = {0};
    const uint64_t *w = (const uint64_t *)(const void *)p;
    for (size_t i = 0; i + 8 <= n / 8; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += w[i + j];
    uint64_t s = 0;
    for (int j = 0; j < 8; j++) s += acc[j];
    return s;
}

static void *worker(void *arg)
{
    share *s = arg;
    pthread_barrier_wait(s->bar);
    s->sum += stream(s->p, s->n);
    pthread_barrier_wait(s->bar);
    return NULL;
}

/* Best of 5 passes of T threads over buf[0, n), in GB/s. */
static double measure(const unsigned char *buf, size_t n, int threads)
{
    double best = 0.0;
    uint64_t sink = 0;
    for (int pass = 0; pass < 5; pass++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
        pthread_t th[64];
        share sh[64];
        const size_t per = (n / (size_t)threads) & ~(size_t)63;
        for (int t = 0; t < threads; t++) {
            sh[t] = (share){buf + (size_t)t * per, per, 0, &bar};
            pthread_create(&th[t], NULL, worker, &sh[t]);
        }
        pthread_barrier_wait(&bar);
        const double t0 = now_s();
        pthread_barrier_wait(&bar);
        const double dt = now_s() - t0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            sink += sh[t].sum;
        }
        pthread_barrier_destroy(&bar);
        const double gbs = (double)(per * (size_t)threads) / dt * 1e-9;
        if (gbs > best) best = gbs;
    }
    if (sink == 42) fputc(' ', stderr); /* keeps the sums alive */
    return best;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "usage: hx-membw [THREADS 1-64] [FILE]\n");
        return 2;
    }
    const size_t n = (size_t)1 << 30;
    unsigned char *anon = aligned_alloc((size_t)2 << 20, n);
    if (!anon) {
        fprintf(stderr, "hx-membw: out of memory\n");
        return 1;
    }
    madvise(anon, n, MADV_HUGEPAGE);
    memset(anon, 1, n);
    printf("membw anon %d threads: %.1f GB/s\n", threads, measure(anon, n, threads));
    free(anon);
    if (argc > 2) {
        const int fd = open(argv[2], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            perror(argv[2]);
            return 1;
        }
        const size_t fn = (size_t)st.st_size;
        void *m = mmap(NULL, fn, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (m == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        (void)stream(m, fn); /* faults every page in first */
        printf("membw file %d threads: %.1f GB/s\n", threads, measure(m, fn, threads));
        munmap(m, fn);
    }
    return 0;
}
