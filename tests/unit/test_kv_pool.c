/* test_kv_pool.c - block allocation, sharing and release in the paged KV pool. */
#include "backend/cpu/cpu_backend.h"
#include "base/alloc.h"
#include "check.h"
#include "kv/kv_pool.h"

static hx_backend *backend(void)
{
    hx_backend *be = NULL;
    hx_err err = {0};
    if (hx_cpu_backend_create(1, 0, &be, &err) != HX_OK) return NULL;
    return be;
}

static int test_blocks_are_handed_out_once_and_come_back(void)
{
    hx_backend *be = backend();
    hx_kv_pool *p = NULL;
    hx_err err = {0};
    CHECK(be != NULL);
    CHECK_EQ(hx_kv_pool_create(be, 2, 2, 4, 16, 10, &p, &err), HX_OK);
    int seen[10] = {0};
    int32_t ids[10];
    for (int i = 0; i < 10; i++) {
        ids[i] = hx_kv_pool_alloc(p);
        CHECK(ids[i] >= 0 && ids[i] < 10);
        CHECK_EQ(seen[ids[i]]++, 0);
    }
    CHECK_EQ(hx_kv_pool_alloc(p), -1);
    hx_kv_pool_retain(p, ids[3]);     /* shared by two owners */
    hx_kv_pool_release(p, ids[3]);
    CHECK_EQ(p->n_free, 0);           /* still held by the other */
    hx_kv_pool_release(p, ids[3]);
    CHECK_EQ(p->n_free, 1);
    CHECK_EQ(hx_kv_pool_alloc(p), ids[3]);
    for (int i = 0; i < 10; i++) hx_kv_pool_release(p, ids[i]);
    CHECK_EQ(p->n_free, 10);
    hx_kv_pool_free(p);
    be->destroy(be);
    return 0;
}

/* Random table growth, truncation and sharing never leak or double-free blocks: at the end every
 * block is free again. */
static int test_random_tables_never_leak(void)
{
    hx_backend *be = backend();
    hx_kv_pool *p = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_kv_pool_create(be, 1, 1, 4, 4, 64, &p, &err), HX_OK);
    hx_kv_table t[5] = {{0}};
    uint32_t rng = 12345;
    for (int step = 0; step < 5000; step++) {
        rng = rng * 1664525u + 1013904223u;
        hx_kv_table *tab = &t[(rng >> 8) % 5];
        const int32_t want = (int32_t)((rng >> 16) % 80);
        if ((rng >> 4) & 1) {
            hx_err e = {0};
            hx_status st = hx_kv_table_reserve(p, tab, want, &e);
            CHECK(st == HX_OK || st == HX_E_CONTEXT);
            if (st == HX_OK && tab->n_ctx < want) tab->n_ctx = want;
        } else {
            hx_kv_table_truncate(p, tab, want);
        }
        int32_t used = 0;
        for (int i = 0; i < 5; i++) used += t[i].n_blocks;
        CHECK_EQ(used + p->n_free, 64);
    }
    for (int i = 0; i < 5; i++) hx_kv_table_free(p, &t[i]);
    CHECK_EQ(p->n_free, 64);
    hx_kv_pool_free(p);
    be->destroy(be);
    return 0;
}

static int test_full_pool_is_a_context_error(void)
{
    hx_backend *be = backend();
    hx_kv_pool *p = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_kv_pool_create(be, 1, 1, 4, 16, 2, &p, &err), HX_OK);
    hx_kv_table t = {0};
    CHECK_EQ(hx_kv_table_reserve(p, &t, 32, &err), HX_OK);
    CHECK_EQ(hx_kv_table_reserve(p, &t, 33, &err), HX_E_CONTEXT);
    CHECK_CONTAINS(err.msg, "KV cache is full");
    CHECK_EQ(t.n_blocks, 2);
    hx_kv_table_free(p, &t);
    hx_kv_pool_free(p);
    be->destroy(be);
    return 0;
}

/* Random allocs, retains (a block shared by several owners) and releases keep every reference
 * count equal to the number of holds, the free list holds exactly the blocks nobody holds (each
 * once), and everything comes back at the end. */
static int test_random_share_and_release_keeps_refcounts_exact(void)
{
    enum { N = 32, MAX_HOLDS = 256 };
    hx_backend *be = backend();
    hx_kv_pool *p = NULL;
    hx_err err = {0};
    CHECK(be != NULL);
    CHECK_EQ(hx_kv_pool_create(be, 1, 1, 4, 8, N, &p, &err), HX_OK);
    int32_t holds[MAX_HOLDS];   /* one entry per reference held; a block may appear many times */
    int32_t n_holds = 0;
    uint32_t rng = 777;
    for (int step = 0; step < 20000; step++) {
        const uint32_t op = check_rng(&rng) % 3;
        if (op == 0 && n_holds < MAX_HOLDS) {
            int32_t want[N] = {0};
            for (int32_t i = 0; i < n_holds; i++) want[holds[i]]++;
            const int32_t id = hx_kv_pool_alloc(p);
            if (id < 0) {
                for (int32_t b = 0; b < N; b++) CHECK(want[b] > 0);  /* truly none was free */
            } else {
                CHECK(id < N);
                CHECK_EQ(want[id], 0);                                /* never handed out twice */
                holds[n_holds++] = id;
            }
        } else if (op == 1 && n_holds > 0 && n_holds < MAX_HOLDS) {
            const int32_t id = holds[check_rng(&rng) % (uint32_t)n_holds];
            hx_kv_pool_retain(p, id);
            holds[n_holds++] = id;
        } else if (n_holds > 0) {
            const int32_t k = (int32_t)(check_rng(&rng) % (uint32_t)n_holds);
            hx_kv_pool_release(p, holds[k]);
            holds[k] = holds[--n_holds];
        }
        int32_t want[N] = {0}, n_zero = 0;
        for (int32_t i = 0; i < n_holds; i++) want[holds[i]]++;
        for (int32_t b = 0; b < N; b++) {
            CHECK_EQ(p->refcount[b], want[b]);
            n_zero += want[b] == 0;
        }
        CHECK_EQ(p->n_free, n_zero);
        int seen[N] = {0};
        for (int32_t i = 0; i < p->n_free; i++) {
            const int32_t b = p->free_ids[i];
            CHECK(b >= 0 && b < N);
            CHECK_EQ(seen[b]++, 0);
            CHECK_EQ(p->refcount[b], 0);
        }
    }
    while (n_holds > 0) hx_kv_pool_release(p, holds[--n_holds]);
    CHECK_EQ(p->n_free, N);
    int seen[N] = {0};
    for (int32_t i = 0; i < N; i++) {
        const int32_t id = hx_kv_pool_alloc(p);
        CHECK(id >= 0 && id < N);
        CHECK_EQ(seen[id]++, 0);
    }
    CHECK_EQ(hx_kv_pool_alloc(p), -1);
    hx_kv_pool_free(p);
    be->destroy(be);
    return 0;
}

/* A pool that keeps a window: blocks wholly before a position go back and leave -1 in the
 * table, holds() tells whether a range of positions is still there, truncation and free skip the
 * dropped entries, and the window_blocks bound is what a sequence walking a long context holds. */
static int test_dropped_blocks_go_back_and_the_window_stays(void)
{
    hx_backend *be = backend();
    hx_kv_pool *p = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_kv_pool_create(be, 1, 1, 4, 4, 8, &p, &err), HX_OK);
    hx_kv_table t = {0};
    CHECK_EQ(hx_kv_table_reserve(p, &t, 14, &err), HX_OK); /* 4 blocks of 4 positions */
    hx_kv_table_drop_before(p, &t, 9);                     /* blocks 0, 1 end before 9 */
    CHECK_EQ(t.blocks[0], -1);
    CHECK_EQ(t.blocks[1], -1);
    CHECK(t.blocks[2] >= 0 && t.blocks[3] >= 0);
    CHECK_EQ(t.n_blocks, 4);
    CHECK_EQ(p->n_free, 6);
    CHECK(hx_kv_table_holds(p, &t, 8, 14));
    CHECK(!hx_kv_table_holds(p, &t, 7, 14));
    CHECK(hx_kv_table_holds(p, &t, 3, 3));   /* an empty range */
    CHECK(!hx_kv_table_holds(p, &t, 8, 17)); /* past the table */
    hx_kv_table_drop_before(p, &t, 9);       /* again: nothing more goes */
    CHECK_EQ(p->n_free, 6);
    hx_kv_table_truncate(p, &t, 5);          /* keeps blocks 0, 1: both dropped already */
    CHECK_EQ(t.n_blocks, 2);
    CHECK_EQ(p->n_free, 8);
    hx_kv_table_free(p, &t);
    CHECK_EQ(p->n_free, 8);

    /* Walking 200 positions in steps of up to 5 rows with a window of 7, the table never holds
     * more than hx_kv_window_blocks(7, 5, 200, 4) blocks, and always the window of the next
     * row; a context shorter than the window caps the bound. */
    const int32_t most = hx_kv_window_blocks(7, 5, 200, 4);
    CHECK_EQ(hx_kv_window_blocks(7, 5, 6, 4), 2);
    int32_t n = 0, peak = 0;
    while (n < 200) {
        const int32_t rows = 1 + n % 5;
        hx_kv_table_drop_before(p, &t, n - 7 + 1);
        CHECK_EQ(hx_kv_table_reserve(p, &t, n + rows, &err), HX_OK);
        CHECK(hx_kv_table_holds(p, &t, n - 7 + 1, n + rows));
        if (8 - p->n_free > peak) peak = 8 - p->n_free;
        n += rows;
    }
    CHECK(peak <= most && most <= 8);
    hx_kv_table_free(p, &t);
    CHECK_EQ(p->n_free, 8);
    hx_kv_pool_free(p);
    be->destroy(be);
    return 0;
}

static const check_case cases[] = {
    { "dropped_blocks_go_back_and_the_window_stays", test_dropped_blocks_go_back_and_the_window_stays },
    { "blocks_are_handed_out_once_and_come_back", test_blocks_are_handed_out_once_and_come_back },
    { "random_tables_never_leak", test_random_tables_never_leak },
    { "full_pool_is_a_context_error", test_full_pool_is_a_context_error },
    { "random_share_and_release_keeps_refcounts_exact", test_random_share_and_release_keeps_refcounts_exact },
};
CHECK_MAIN(cases)
