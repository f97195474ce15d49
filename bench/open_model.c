/* open_model.c - times hx_model_files_open + close on one model (bench tool, not installed).
 *
 * usage: hx-bench-open MODEL [RUNS]
 * Prints the median, min and max wall time of opening (map, parse, validate, describe tensors)
 * and closing the model, in milliseconds, as one JSON line. The first run is included: with the
 * file in the page cache, opening costs page-table setup and header parsing, never a copy of the
 * weights, so there is no warm-up effect to hide. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/alloc.h"
#include "format/discover.h"
#include "format/model_files.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hx-bench-open MODEL [RUNS]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 20;
    if (runs < 1 || runs > 10000) runs = 20;
    hx_err err = {0};
    char *path = NULL;
    if (hx_discover_resolve(argv[1], &path, &err) != HX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double *t = calloc((size_t)runs, sizeof *t);
    int64_t n_tensors = 0;
    for (int i = 0; i < runs; i++) {
        hx_model_files *mf = NULL;
        double t0 = now_ms();
        if (hx_model_files_open(path, &mf, &err) != HX_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        n_tensors = mf->n_tensors;
        hx_model_files_close(mf);
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_d);
    printf("{\"model\": \"%s\", \"tensors\": %lld, \"runs\": %d, \"median_ms\": %.3f, "
           "\"min_ms\": %.3f, \"max_ms\": %.3f}\n",
           path, (long long)n_tensors, runs, t[runs / 2], t[0], t[runs - 1]);
    free(t);
    hx_free(path);
    return 0;
}
