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

static const check_case cases[] = {
    { "blocks_are_handed_out_once_and_come_back", test_blocks_are_handed_out_once_and_come_back },
    { "random_tables_never_leak", test_random_tables_never_leak },
    { "full_pool_is_a_context_error", test_full_pool_is_a_context_error },
};
CHECK_MAIN(cases)
