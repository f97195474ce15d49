/* test_threadpool.c - the persistent pool: every thread runs, barriers order phases, work splits
 * cover ranges exactly, and sleeping workers wake and shut down. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <time.h>

#include "base/threadpool.h"
#include "check.h"

typedef struct {
    atomic_int ran[8];
    int64_t    n;
    int64_t   *data;
    int64_t    partial[8];
} sum_args;

static void sum_task(void *p, int ith, int nth)
{
    sum_args *a = p;
    atomic_fetch_add(&a->ran[ith], 1);
    int64_t lo, hi, s = 0;
    hx_split_range(a->n, ith, nth, 16, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) s += a->data[i];
    a->partial[ith] = s;
}

static int test_every_thread_runs_its_share(void)
{
    static int64_t data[10007];
    for (int i = 0; i < 10007; i++) data[i] = i;
    for (int nt = 1; nt <= 4; nt++) {
        hx_pool *pool = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_pool_init(nt, &pool, &err), HX_OK);
        CHECK_EQ(hx_pool_n_threads(pool), nt);
        for (int rep = 0; rep < 1000; rep++) {
            sum_args a = {.n = 10007, .data = data};
            hx_pool_run(pool, sum_task, &a);
            int64_t s = 0;
            for (int t = 0; t < nt; t++) {
                CHECK_EQ(atomic_load(&a.ran[t]), 1);
                s += a.partial[t];
            }
            CHECK_EQ(s, (int64_t)10007 * 10006 / 2);
        }
        hx_pool_free(pool);
    }
    return 0;
}

typedef struct {
    hx_pool   *pool;
    atomic_int stage[4];
    int        bad;
} barrier_args;

/* Each phase every thread bumps its own counter; after the barrier, all counters must agree. */
static void barrier_task(void *p, int ith, int nth)
{
    barrier_args *a = p;
    for (int phase = 1; phase <= 200; phase++) {
        atomic_store(&a->stage[ith], phase);
        hx_pool_barrier(a->pool);
        for (int t = 0; t < nth; t++)
            if (atomic_load(&a->stage[t]) < phase) a->bad = 1;
        hx_pool_barrier(a->pool);
    }
}

static int test_barrier_orders_phases(void)
{
    for (int nt = 1; nt <= 4; nt++) {
        hx_pool *pool = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_pool_init(nt, &pool, &err), HX_OK);
        barrier_args a = {.pool = pool};
        hx_pool_run(pool, barrier_task, &a);
        CHECK_EQ(a.bad, 0);
        hx_pool_free(pool);
    }
    return 0;
}

static int test_split_range_covers_exactly(void)
{
    const int64_t sizes[] = {0, 1, 15, 16, 17, 1000, 1024, 49152};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int nth = 1; nth <= 7; nth++)
            for (int64_t align = 1; align <= 32; align *= 4) {
                int64_t expect = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t lo, hi;
                    hx_split_range(sizes[s], ith, nth, align, &lo, &hi);
                    CHECK_EQ(lo, expect);
                    CHECK(hi >= lo);
                    CHECK(lo == sizes[s] || lo % align == 0);
                    expect = hi;
                }
                CHECK_EQ(expect, sizes[s]);
            }
    return 0;
}

static void noop(void *p, int ith, int nth)
{
    (void)ith, (void)nth;
    atomic_fetch_add((atomic_int *)p, 1);
}

static int test_sleeping_workers_wake_and_stop(void)
{
    hx_pool *pool = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_pool_init(3, &pool, &err), HX_OK);
    atomic_int count = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct timespec ts = {0, 30 * 1000 * 1000}; /* long enough for workers to sleep */
        nanosleep(&ts, NULL);
        hx_pool_run(pool, noop, &count);
    }
    CHECK_EQ(atomic_load(&count), 9);
    hx_pool_free(pool);
    hx_pool_free(NULL);
    return 0;
}

static int test_bad_thread_count_is_invalid(void)
{
    hx_pool *pool = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_pool_init(0, &pool, &err), HX_E_INVALID);
    CHECK(pool == NULL);
    CHECK_CONTAINS(err.msg, "thread count");
    return 0;
}

static const check_case cases[] = {
    { "every_thread_runs_its_share", test_every_thread_runs_its_share },
    { "barrier_orders_phases", test_barrier_orders_phases },
    { "split_range_covers_exactly", test_split_range_covers_exactly },
    { "sleeping_workers_wake_and_stop", test_sleeping_workers_wake_and_stop },
    { "bad_thread_count_is_invalid", test_bad_thread_count_is_invalid },
};
CHECK_MAIN(cases)
