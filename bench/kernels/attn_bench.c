/* attn_bench.c - dev harness for the CPU attention kernels (attn.h; not part of the library).
 *
 * Single thread. One query group (the GQA heads that share a kv head) attends over an f16 cache
 * of n positions in blocks of 16, as one decode step of one layer and kv head does; every
 * variant this CPU runs, uncapped and with Gemma 2's score soft-capping (50) where the variant
 * has it. Prints microseconds per call (best of 5 trials of 20 calls, thread CPU time: the
 * machine is shared) and keys per microsecond.
 * Run: hx-attn-bench [n_positions [d_head [heads]]]   (defaults: 2048 256 2, Gemma 2's heads) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/attn.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/f16.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float unit(uint32_t *s) /* uniform in [-1, 1) */
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

enum { BT = 16, TRIALS = 5, CALLS = 20 };

typedef struct {
    const hx_attn_variant *v;
    bool                   capped;
} job;

static double time_call(const job *j, const hx_attn_kv *kv, const float *q, int32_t grp,
                        int32_t d, int32_t n, float *out)
{
    double best = 1e30;
    for (int t = 0; t < TRIALS; t++) {
        const double t0 = now_s();
        for (int c = 0; c < CALLS; c++) {
            if (j->capped) j->v->attend_capped(kv, q, grp, d, 0.0625f, 50.0f, 0, n - 1, out);
            else j->v->attend(kv, q, grp, d, 0.0625f, 0, n - 1, out);
        }
        const double dt = (now_s() - t0) / CALLS;
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv)
{
    const int32_t n = argc > 1 ? atoi(argv[1]) : 2048, d = argc > 2 ? atoi(argv[2]) : 256;
    const int32_t grp = argc > 3 ? atoi(argv[3]) : 2;
    if (n < 1 || d < 8 || d > 256 || d % 8 != 0 || grp < 1 || grp > HX_ATTN_MAX_Q) {
        fprintf(stderr, "usage: hx-attn-bench [n >= 1 [d_head 8..256, a multiple of 8 "
                        "[heads 1..%d]]]\n", HX_ATTN_MAX_Q);
        return 2;
    }
    const int32_t nb = (n + BT - 1) / BT;
    uint16_t *k = hx_alloc((size_t)nb * BT * (size_t)d * sizeof *k);
    uint16_t *v = hx_alloc((size_t)nb * BT * (size_t)d * sizeof *v);
    int32_t *blocks = hx_alloc((size_t)nb * sizeof *blocks);
    float *q = hx_alloc((size_t)grp * (size_t)d * sizeof *q);
    float *out = hx_alloc((size_t)grp * (size_t)d * sizeof *out);
    if (!k || !v || !blocks || !q || !out) return 1;
    uint32_t rng = 1;
    for (size_t i = 0; i < (size_t)nb * BT * (size_t)d; i++) {
        k[i] = hx_f32_to_f16(unit(&rng));
        v[i] = hx_f32_to_f16(unit(&rng));
    }
    for (int32_t b = 0; b < nb; b++) blocks[b] = b;
    for (int32_t i = 0; i < grp * d; i++) q[i] = 10.0f * unit(&rng); /* scores of a few units */
    const hx_attn_kv kv = {k, v, blocks, (size_t)BT * (size_t)d, d, BT};

    hx_attn_variant vars[8];
    int n_var = hx_attn_variants(hx_cpu_isa(), vars, 8);
    if (n_var > 8) n_var = 8;
    printf("attention, one group of %d heads over %d positions, d_head %d, f16 cache, 1 thread\n",
           grp, n, d);
    for (int i = 0; i < n_var; i++)
        for (int capped = 0; capped < 2; capped++) {
            const job j = {&vars[i], capped};
            if (d % vars[i].d_align != 0 || (capped && !vars[i].attend_capped)) continue;
            const double t = time_call(&j, &kv, q, grp, d, n, out);
            printf("  %-7s %-8s %9.1f us  %7.1f keys/us\n", vars[i].name,
                   capped ? "capped" : "plain", t * 1e6, (double)n / (t * 1e6));
        }
    hx_free(k);
    hx_free(v);
    hx_free(blocks);
    hx_free(q);
    hx_free(out);
    return 0;
}
