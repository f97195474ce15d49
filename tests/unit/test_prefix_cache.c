/* test_prefix_cache.c - the prefix cache finds, shares, branches and evicts KV blocks by token ids,
 * and keeps every pool reference count exact: (1 per cached block) + (holds by callers).
 *
 * Each case builds a small CPU-backed pool, so the counts are checked against the real allocator,
 * and ends by freeing the cache and checking that every block came back to the free list. */
#include <stdbool.h>

#include "backend/cpu/cpu_backend.h"
#include "base/alloc.h"
#include "check.h"
#include "kv/kv_pool.h"
#include "kv/prefix_cache.h"

/* ---- fixture ---- */

typedef struct {
    hx_backend      *be;
    hx_kv_pool      *pool;
    hx_prefix_cache *c;
    int32_t          n_pool;
} fixture;

static int setup(fixture *f, int32_t block_tokens, int32_t n_pool, int32_t max_blocks)
{
    hx_err err = {0};
    *f = (fixture){.n_pool = n_pool};
    CHECK_EQ(hx_cpu_backend_create(1, 0, &f->be, &err), HX_OK);
    CHECK_EQ(hx_kv_pool_create(f->be, 1, 1, 4, block_tokens, n_pool, &f->pool, &err), HX_OK);
    CHECK_EQ(hx_prefix_cache_create(f->pool, block_tokens, max_blocks, &f->c, &err), HX_OK);
    return 0;
}

/* Frees the cache and checks that no block is left allocated: callers must have released theirs
 * before. */
static int teardown(fixture *f)
{
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(f->c, &err), HX_OK);
    hx_prefix_cache_free(f->c);
    CHECK_EQ(f->pool->n_free, f->n_pool);
    hx_kv_pool_free(f->pool);
    f->be->destroy(f->be);
    return 0;
}

/* Allocates n fresh blocks into ids (the caller then holds each once). */
static int alloc_blocks(hx_kv_pool *pool, int32_t *ids, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        ids[i] = hx_kv_pool_alloc(pool);
        CHECK(ids[i] >= 0);
    }
    return 0;
}

static void release_blocks(hx_kv_pool *pool, const int32_t *ids, int32_t n)
{
    for (int32_t i = 0; i < n; i++) hx_kv_pool_release(pool, ids[i]);
}

#define RC(f, id) ((f)->pool->refcount[(id)])

/* ---- cases ---- */

static int test_empty_cache_matches_nothing(void)
{
    fixture f;
    if (setup(&f, 4, 8, 8)) return 1;
    const int32_t tokens[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t got[3] = {-7, -7, -7};
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 12, got, NULL, 3), 0);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 0, got, NULL, 3), 0);
    CHECK_EQ(got[0], -7);                       /* nothing written */
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 0);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 5), 0);
    CHECK_EQ(f.pool->n_free, 8);
    hx_prefix_cache_free(NULL);                 /* accepted, like every free */
    return teardown(&f);
}

static int test_inserted_blocks_are_found_again_and_retained(void)
{
    fixture f;
    if (setup(&f, 4, 8, 8)) return 1;
    int32_t tokens[16];
    for (int i = 0; i < 16; i++) tokens[i] = 100 + i;
    int32_t ids[3], got[4];
    if (alloc_blocks(f.pool, ids, 3)) return 1;
    hx_prefix_cache_insert(f.c, 0, tokens, 12, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(RC(&f, ids[i]), 2);  /* the caller's and the cache's */

    release_blocks(f.pool, ids, 3);             /* the sequence ends; the cache keeps them */
    for (int i = 0; i < 3; i++) CHECK_EQ(RC(&f, ids[i]), 1);
    CHECK_EQ(f.pool->n_free, 5);

    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 12, got, NULL, 4), 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(got[i], ids[i]);
        CHECK_EQ(RC(&f, ids[i]), 2);            /* retained once for this caller */
    }
    release_blocks(f.pool, got, 3);

    /* A longer prompt with the same start matches the cached part; a small output array caps it. */
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 16, got, NULL, 4), 3);
    release_blocks(f.pool, got, 3);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 16, got, NULL, 2), 2);
    CHECK_EQ(got[0], ids[0]);
    CHECK_EQ(got[1], ids[1]);
    CHECK_EQ(RC(&f, ids[2]), 1);                /* not handed out, not retained */
    release_blocks(f.pool, got, 2);
    return teardown(&f);
}

static int test_match_stops_at_the_first_differing_block(void)
{
    fixture f;
    if (setup(&f, 4, 8, 8)) return 1;
    int32_t tokens[16], q[16], ids[4], got[4];
    for (int i = 0; i < 16; i++) tokens[i] = 7 * i + 3;
    if (alloc_blocks(f.pool, ids, 4)) return 1;
    hx_prefix_cache_insert(f.c, 0, tokens, 16, ids, NULL);
    release_blocks(f.pool, ids, 4);

    static const struct { int at, want; } diffs[] = {
        {0, 0}, {3, 0}, {4, 1}, {11, 2}, {8, 2}, {15, 3},
    };
    for (size_t d = 0; d < HX_COUNTOF(diffs); d++) {
        memcpy(q, tokens, sizeof q);
        q[diffs[d].at] += 1;                    /* one id differs; the rest of the block equals */
        const int32_t n = hx_prefix_cache_match(f.c, 0, q, 16, got, NULL, 4);
        CHECK_EQ(n, diffs[d].want);
        for (int32_t i = 0; i < n; i++) CHECK_EQ(got[i], ids[i]);
        release_blocks(f.pool, got, n);
    }
    /* The same ids in another order within a block are different tokens. */
    memcpy(q, tokens, sizeof q);
    q[4] = tokens[5];
    q[5] = tokens[4];
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, q, 16, got, NULL, 4), 1);
    release_blocks(f.pool, got, 1);
    return teardown(&f);
}

/* FNV-1a as prefix_cache.c folds ids, to build two blocks whose hashes collide. If the cache's
 * hash changes, this case still checks that distinct ids stay distinct, only less sharply. */
static uint64_t fnv_prefix(const int32_t *t, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * 0x100000001b3ull;
    return h;
}

typedef struct { uint32_t hi; int32_t a, b; } fnv_sample;

static int cmp_sample(const void *x, const void *y)
{
    const uint32_t p = ((const fnv_sample *)x)->hi, q = ((const fnv_sample *)y)->hi;
    return (p > q) - (p < q);
}

static int test_hash_collision_is_told_apart_by_comparing_ids(void)
{
    /* The last id of a 3-id block only xors the low 32 bits of the state, so two 2-id prefixes
     * whose states agree in the high 32 bits (a birthday search over 2^18 samples) give a
     * colliding pair once the third ids cancel the low bits. */
    enum { N = 1 << 18 };
    fnv_sample *smp = hx_alloc(N * sizeof *smp);
    CHECK(smp != NULL);
    uint32_t rng = 20240611u;
    for (int i = 0; i < N; i++) {
        const int32_t t[2] = {(int32_t)(check_rng(&rng) >> 1), (int32_t)(check_rng(&rng) >> 1)};
        smp[i] = (fnv_sample){(uint32_t)(fnv_prefix(t, 2) >> 32), t[0], t[1]};
    }
    qsort(smp, N, sizeof *smp, cmp_sample);
    int found = -1;
    for (int i = 1; i < N && found < 0; i++)
        if (smp[i].hi == smp[i - 1].hi && (smp[i].a != smp[i - 1].a || smp[i].b != smp[i - 1].b))
            found = i;
    CHECK(found > 0);
    int32_t x[3] = {smp[found].a, smp[found].b, 5}, y[3] = {smp[found - 1].a, smp[found - 1].b, 0};
    hx_free(smp);
    y[2] = (int32_t)((uint32_t)x[2] ^ (uint32_t)fnv_prefix(x, 2) ^ (uint32_t)fnv_prefix(y, 2));
    CHECK(fnv_prefix(x, 3) == fnv_prefix(y, 3));
    CHECK(memcmp(x, y, sizeof x) != 0);

    fixture f;
    if (setup(&f, 3, 4, 4)) return 1;
    int32_t ix, iy, got;
    if (alloc_blocks(f.pool, &ix, 1) || alloc_blocks(f.pool, &iy, 1)) return 1;
    hx_prefix_cache_insert(f.c, 0, x, 3, &ix, NULL);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, y, 3, &got, NULL, 1), 0);
    hx_prefix_cache_insert(f.c, 0, y, 3, &iy, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 2);
    CHECK_EQ(RC(&f, iy), 2);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, x, 3, &got, NULL, 1), 1);
    CHECK_EQ(got, ix);
    hx_kv_pool_release(f.pool, got);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, y, 3, &got, NULL, 1), 1);
    CHECK_EQ(got, iy);
    hx_kv_pool_release(f.pool, got);
    hx_kv_pool_release(f.pool, ix);
    hx_kv_pool_release(f.pool, iy);
    return teardown(&f);
}

static int test_partial_last_block_is_not_cached(void)
{
    fixture f;
    if (setup(&f, 4, 8, 8)) return 1;
    int32_t tokens[10], ids[3], got[3];
    for (int i = 0; i < 10; i++) tokens[i] = i + 1;
    if (alloc_blocks(f.pool, ids, 3)) return 1;   /* 2 full blocks and 2 tokens of a third */
    hx_prefix_cache_insert(f.c, 0, tokens, 10, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 2);
    CHECK_EQ(RC(&f, ids[2]), 1);                  /* only the caller holds the partial block */
    release_blocks(f.pool, ids, 3);
    CHECK_EQ(f.pool->n_free, 6);

    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 10, got, NULL, 3), 2);
    release_blocks(f.pool, got, 2);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 7, got, NULL, 3), 1);   /* 7 tokens: 1 full block */
    release_blocks(f.pool, got, 1);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 3, got, NULL, 3), 0);
    hx_prefix_cache_insert(f.c, 0, tokens, 3, ids, NULL);   /* no full block: nothing to record */
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 2);
    return teardown(&f);
}

static int test_partial_block_is_cached_as_a_tail_to_copy(void)
{
    fixture f;
    if (setup(&f, 4, 8, 8)) return 1;
    const int32_t a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; /* 2 full blocks and a tail of 2 */
    int32_t ids[3], got[3], n_tail = -1;
    if (alloc_blocks(f.pool, ids, 3)) return 1;
    hx_prefix_cache_insert_tail(f.c, 0, a, 10, ids, NULL); /* its path is not cached yet: nothing */
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 0);
    hx_prefix_cache_insert(f.c, 0, a, 10, ids, NULL);
    hx_prefix_cache_insert_tail(f.c, 0, a, 10, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(RC(&f, ids[2]), 2);
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);

    /* A prompt that agrees with a's tail for one id: the tail is handed out, retained, to copy. */
    const int32_t b[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 77, 78};
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, b, 10, got, NULL, 3), 2);
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, b, 10, 2, &n_tail, NULL), ids[2]);
    CHECK_EQ(n_tail, 1);
    CHECK_EQ(RC(&f, ids[2]), 3);
    hx_kv_pool_release(f.pool, ids[2]);
    release_blocks(f.pool, got, 2);
    /* n bounds it: with the prompt cut after the full blocks there is nothing left to agree. */
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, a, 8, 2, &n_tail, NULL), -1);
    CHECK_EQ(n_tail, 0);
    /* ... and a prompt that agrees with a full block's first ids copies those. */
    const int32_t c[7] = {1, 2, 3, 4, 5, 6, 99};
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, c, 7, 1, &n_tail, NULL), ids[1]);
    CHECK_EQ(n_tail, 2);
    hx_kv_pool_release(f.pool, ids[1]);
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, c, 7, 3, &n_tail, NULL), -1); /* no such path */

    /* The holder appends: the same tail grows, then becomes a full block when inserted whole. */
    const int32_t a2[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    hx_prefix_cache_insert_tail(f.c, 0, a2, 11, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, a2, 12, 2, &n_tail, NULL), ids[2]);
    CHECK_EQ(n_tail, 3);
    hx_kv_pool_release(f.pool, ids[2]);
    hx_prefix_cache_insert(f.c, 0, a2, 12, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, a2, 12, got, NULL, 3), 3);
    CHECK_EQ(got[2], ids[2]);
    release_blocks(f.pool, got, 3);
    /* A shorter tail that a cached block already covers adds nothing. */
    hx_prefix_cache_insert_tail(f.c, 0, a2, 9, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
    release_blocks(f.pool, ids, 3);
    return teardown(&f);
}

static int test_copied_block_holds_the_sources_kv(void)
{
    fixture f;
    if (setup(&f, 4, 3, 3)) return 1;
    const hx_kv_store *kv = &f.pool->store; /* 1 layer, 1 kv head, d_head 4: 16 f16 a block */
    const int32_t src = hx_kv_pool_alloc(f.pool);
    CHECK(src >= 0);
    for (int i = 0; i < 16; i++) {
        ((uint16_t *)kv->k)[src * 16 + i] = (uint16_t)(1000 + i);
        ((uint16_t *)kv->v)[src * 16 + i] = (uint16_t)(2000 + i);
    }
    const int32_t dst = hx_kv_pool_copy(f.pool, src);
    CHECK(dst >= 0 && dst != src);
    CHECK_EQ(RC(&f, dst), 1);
    CHECK_EQ(RC(&f, src), 1);
    CHECK(memcmp((uint16_t *)kv->k + dst * 16, (uint16_t *)kv->k + src * 16, 32) == 0);
    CHECK(memcmp((uint16_t *)kv->v + dst * 16, (uint16_t *)kv->v + src * 16, 32) == 0);
    const int32_t last = hx_kv_pool_alloc(f.pool);
    CHECK(last >= 0);
    CHECK_EQ(hx_kv_pool_copy(f.pool, src), -1); /* the pool is empty */
    hx_kv_pool_release(f.pool, src);
    hx_kv_pool_release(f.pool, dst);
    hx_kv_pool_release(f.pool, last);
    return teardown(&f);
}

/* Sliding layers (a second pool): nodes keep the sliding block of their positions where the
 * inserter still had it, a match ends where the window before its end is all held and hands
 * out sliding blocks for that window only, another inserter fills the gaps, a tail qualifies
 * only with its sliding block, and eviction gives the sliding blocks back too. */
static int test_sliding_blocks_bound_the_match_to_a_held_window(void)
{
    fixture f;
    if (setup(&f, 4, 16, 16)) return 1;
    hx_kv_pool *sp = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_kv_pool_create(f.be, 1, 1, 4, 4, 16, &sp, &err), HX_OK);
    hx_prefix_cache_use_swa(f.c, sp, 6); /* a window of 6: a match ending at p needs p-5.. */
    int32_t a[24], fa[5], sa[5], got[6], gs[6], n_tail = 0, tail_swa = -7;
    for (int i = 0; i < 24; i++) a[i] = 100 + i;
    if (alloc_blocks(f.pool, fa, 5) || alloc_blocks(sp, sa + 2, 3)) return 1;
    sa[0] = sa[1] = -1; /* the sequence had dropped them: positions 0-7 are out of its window */
    hx_prefix_cache_insert(f.c, 0, a, 20, fa, sa);
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
    for (int i = 2; i < 5; i++) CHECK_EQ(sp->refcount[sa[i]], 2);

    /* Ending at 20 needs positions 15-19: blocks 3, 4; block 2's sliding block is not handed. */
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, a, 20, got, gs, 6), 5);
    CHECK(gs[0] == -1 && gs[1] == -1 && gs[2] == -1 && gs[3] == sa[3] && gs[4] == sa[4]);
    CHECK_EQ(sp->refcount[sa[2]], 2);
    CHECK_EQ(sp->refcount[sa[4]], 3);
    release_blocks(f.pool, got, 5);
    hx_kv_pool_release(sp, gs[3]);
    hx_kv_pool_release(sp, gs[4]);
    /* Ending at 16 needs 11-15: blocks 2, 3. Ending at 8 would need blocks 0, 1: not held, so a
     * prompt diverging at 10 reuses nothing, and takes no reference. */
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, a, 18, got, gs, 6), 4);
    CHECK(gs[1] == -1 && gs[2] == sa[2] && gs[3] == sa[3]);
    release_blocks(f.pool, got, 4);
    hx_kv_pool_release(sp, gs[2]);
    hx_kv_pool_release(sp, gs[3]);
    int32_t b[12];
    memcpy(b, a, 10 * sizeof *b);
    b[10] = b[11] = 7;
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, b, 12, got, gs, 6), 0);
    for (int i = 0; i < 5; i++) CHECK_EQ(RC(&f, fa[i]), 2);
    /* A tail: the block after 2 full ones agrees for 2 ids, but its sliding block... */
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, b, 12, 2, &n_tail, &tail_swa), fa[2]);
    CHECK_EQ(n_tail, 2);
    CHECK_EQ(tail_swa, sa[2]);
    hx_kv_pool_release(f.pool, fa[2]);
    hx_kv_pool_release(sp, sa[2]);
    /* ... and one without its sliding block does not qualify. */
    CHECK_EQ(hx_prefix_cache_match_tail(f.c, 0, b, 12, 1, &n_tail, &tail_swa), -1);
    CHECK_EQ(tail_swa, -1);

    /* Another sequence over the same tokens still holds blocks 0, 1 of the sliding layers: the
     * nodes take them, and the prompt diverging at 10 now reuses 2 blocks. */
    int32_t fb[3], sb[3];
    if (alloc_blocks(f.pool, fb, 3) || alloc_blocks(sp, sb, 3)) return 1;
    hx_prefix_cache_insert(f.c, 0, a, 12, fb, sb);
    CHECK_EQ(sp->refcount[sb[0]], 2);
    CHECK_EQ(sp->refcount[sb[2]], 1); /* node 2 had one already */
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, b, 12, got, gs, 6), 2);
    CHECK(got[0] == fa[0] && gs[0] == sb[0] && gs[1] == sb[1]);
    release_blocks(f.pool, got, 2);
    release_blocks(sp, gs, 2);
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);

    /* The sequences end; evicting everything gives every block of both pools back. */
    release_blocks(f.pool, fa, 5);
    release_blocks(sp, sa + 2, 3);
    release_blocks(f.pool, fb, 3);
    release_blocks(sp, sb, 3);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 100), 5);
    CHECK_EQ(sp->n_free, 16);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 0);
    hx_kv_pool_free(sp); /* before the fixture's backend goes */
    return teardown(&f);
}

static int test_diverging_prompts_branch_and_share_their_common_blocks(void)
{
    fixture f;
    if (setup(&f, 2, 32, 32)) return 1;
    const int32_t a[10] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5};   /* a[8..10) is an extra block */
    const int32_t b[8] = {1, 1, 2, 2, 9, 9, 8, 8};          /* shares a's first two blocks */
    const int32_t c[4] = {6, 6, 2, 2};                      /* shares nothing from the start */
    int32_t ida[4], idb[4], idc[2], dup[5], got[5];

    if (alloc_blocks(f.pool, ida, 4)) return 1;
    hx_prefix_cache_insert(f.c, 0, a, 8, ida, NULL);
    release_blocks(f.pool, ida, 4);

    /* b as the scheduler runs it: match the shared start, compute the rest into new blocks. */
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, b, 8, idb, NULL, 4), 2);
    CHECK_EQ(idb[0], ida[0]);
    CHECK_EQ(idb[1], ida[1]);
    if (alloc_blocks(f.pool, idb + 2, 2)) return 1;
    hx_prefix_cache_insert(f.c, 0, b, 8, idb, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 6);             /* 4 of a + the 2 where b branches */
    release_blocks(f.pool, idb, 4);
    for (int i = 0; i < 4; i++) CHECK_EQ(RC(&f, ida[i]), 1);

    if (alloc_blocks(f.pool, idc, 2)) return 1;
    hx_prefix_cache_insert(f.c, 0, c, 4, idc, NULL);
    release_blocks(f.pool, idc, 2);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 8);

    CHECK_EQ(hx_prefix_cache_match(f.c, 0, a, 8, got, NULL, 5), 4);
    for (int i = 0; i < 4; i++) CHECK_EQ(got[i], ida[i]);
    release_blocks(f.pool, got, 4);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, b, 8, got, NULL, 5), 4);
    for (int i = 0; i < 4; i++) CHECK_EQ(got[i], idb[i]);
    release_blocks(f.pool, got, 4);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, c, 4, got, NULL, 5), 2);
    CHECK_EQ(got[0], idc[0]);
    release_blocks(f.pool, got, 2);

    /* A sequence that computed a's blocks again (it started before a was inserted) plus one more:
     * the cached copies stay, its duplicates are not taken, its new last block hangs under a's. */
    if (alloc_blocks(f.pool, dup, 5)) return 1;
    hx_prefix_cache_insert(f.c, 0, a, 10, dup, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 9);
    for (int i = 0; i < 4; i++) CHECK_EQ(RC(&f, dup[i]), 1);
    CHECK_EQ(RC(&f, dup[4]), 2);
    release_blocks(f.pool, dup, 5);
    for (int i = 0; i < 4; i++) CHECK_EQ(RC(&f, dup[i]), 0);   /* duplicates went back */
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, a, 10, got, NULL, 5), 5);
    for (int i = 0; i < 4; i++) CHECK_EQ(got[i], ida[i]);
    CHECK_EQ(got[4], dup[4]);
    release_blocks(f.pool, got, 5);

    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
    return teardown(&f);
}

static int test_adapters_do_not_see_each_others_blocks(void)
{
    fixture f;
    if (setup(&f, 2, 16, 16)) return 1;
    const int32_t t[6] = {4, 5, 6, 7, 8, 9};
    int32_t base[3], lora[3], got[3];
    if (alloc_blocks(f.pool, base, 3)) return 1;
    hx_prefix_cache_insert(f.c, 0, t, 6, base, NULL);
    release_blocks(f.pool, base, 3);
    CHECK_EQ(hx_prefix_cache_match(f.c, 7, t, 6, got, NULL, 3), 0);

    if (alloc_blocks(f.pool, lora, 3)) return 1;
    hx_prefix_cache_insert(f.c, 7, t, 6, lora, NULL);     /* same tokens, other KV: kept apart */
    release_blocks(f.pool, lora, 3);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 6);
    CHECK_EQ(hx_prefix_cache_match(f.c, 7, t, 6, got, NULL, 3), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(got[i], lora[i]);
    release_blocks(f.pool, got, 3);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, t, 6, got, NULL, 3), 3);  /* now the most recent tree */
    for (int i = 0; i < 3; i++) CHECK_EQ(got[i], base[i]);
    release_blocks(f.pool, got, 3);
    CHECK_EQ(hx_prefix_cache_match(f.c, 3, t, 6, got, NULL, 3), 0);

    /* Evicting adapter 7's whole (least recent) tree leaves adapter 0's intact. */
    CHECK_EQ(hx_prefix_cache_evict(f.c, 3), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(RC(&f, lora[i]), 0);
    CHECK_EQ(hx_prefix_cache_match(f.c, 7, t, 6, got, NULL, 3), 0);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, t, 6, got, NULL, 3), 3);
    release_blocks(f.pool, got, 3);
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
    return teardown(&f);
}

static int test_lru_leaf_is_evicted_first_and_shared_blocks_never(void)
{
    fixture f;
    if (setup(&f, 2, 16, 16)) return 1;
    const int32_t p[4] = {1, 1, 2, 2}, q[4] = {3, 3, 4, 4}, r[4] = {5, 5, 6, 6};
    const int32_t s[4] = {5, 5, 7, 7};   /* branches off r's first block */
    int32_t ip[2], iq[2], ir[2], is[2], got[2];
    if (alloc_blocks(f.pool, ip, 2) || alloc_blocks(f.pool, iq, 2) ||
        alloc_blocks(f.pool, ir, 2))
        return 1;
    hx_prefix_cache_insert(f.c, 0, p, 4, ip, NULL);
    hx_prefix_cache_insert(f.c, 0, q, 4, iq, NULL);
    hx_prefix_cache_insert(f.c, 0, r, 4, ir, NULL);
    release_blocks(f.pool, ip, 2);
    release_blocks(f.pool, iq, 2);
    release_blocks(f.pool, ir, 2);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, p, 4, got, NULL, 2), 2);   /* p is now the most recent */
    release_blocks(f.pool, got, 2);

    /* Recency is q, r, p: q's leaf goes first, its interior block stays. */
    CHECK_EQ(hx_prefix_cache_evict(f.c, 1), 1);
    CHECK_EQ(RC(&f, iq[1]), 0);
    CHECK_EQ(RC(&f, iq[0]), 1);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 5);

    /* A running sequence holds r: everything else goes, r's blocks never. */
    int32_t held[2];
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, r, 4, held, NULL, 2), 2);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 100), 3);                /* q's first block, then p */
    CHECK_EQ(RC(&f, iq[0]), 0);
    CHECK_EQ(RC(&f, ip[0]), 0);
    CHECK_EQ(RC(&f, ip[1]), 0);
    CHECK_EQ(RC(&f, ir[0]), 2);
    CHECK_EQ(RC(&f, ir[1]), 2);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 100), 0);
    release_blocks(f.pool, held, 2);

    /* Idle again: the leaf goes before the interior block of the same age. */
    CHECK_EQ(hx_prefix_cache_evict(f.c, 1), 1);
    CHECK_EQ(RC(&f, ir[1]), 0);
    CHECK_EQ(RC(&f, ir[0]), 1);

    /* s computed its own copy of r's first block, then its second: the copy is not cached, the
     * second hangs under r's block. While s holds its second block, r's block is an interior
     * node nobody holds, and still not evictable: it is not a leaf. */
    if (alloc_blocks(f.pool, is, 2)) return 1;
    hx_prefix_cache_insert(f.c, 0, s, 4, is, NULL);
    hx_kv_pool_release(f.pool, is[0]);
    CHECK_EQ(RC(&f, ir[0]), 1);
    CHECK_EQ(RC(&f, is[1]), 2);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 100), 0);
    hx_kv_pool_release(f.pool, is[1]);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 100), 2);                /* the leaf, then its parent */
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 0);
    return teardown(&f);
}

static int test_evict_frees_blocks_back_to_the_pool(void)
{
    fixture f;
    if (setup(&f, 2, 8, 8)) return 1;
    int32_t ids[8];
    for (int k = 0; k < 4; k++) {                /* four idle 2-block prompts fill the pool */
        const int32_t t[4] = {k, k, k + 10, k + 10};
        if (alloc_blocks(f.pool, ids + 2 * k, 2)) return 1;
        hx_prefix_cache_insert(f.c, 0, t, 4, ids + 2 * k, NULL);
        release_blocks(f.pool, ids + 2 * k, 2);
    }
    CHECK_EQ(f.pool->n_free, 0);
    CHECK_EQ(hx_kv_pool_alloc(f.pool), -1);

    /* What the scheduler does when the pool runs out. */
    CHECK_EQ(hx_prefix_cache_evict(f.c, 3), 3);
    CHECK_EQ(f.pool->n_free, 3);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 5);
    int32_t fresh[3];
    if (alloc_blocks(f.pool, fresh, 3)) return 1;
    release_blocks(f.pool, fresh, 3);

    CHECK_EQ(hx_prefix_cache_evict(f.c, 0), 0);
    CHECK_EQ(hx_prefix_cache_evict(f.c, -4), 0);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 100), 5);   /* asks for more than there is */
    CHECK_EQ(f.pool->n_free, 8);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 0);
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
    return teardown(&f);
}

static int test_insert_evicts_lru_entries_to_stay_within_max_blocks(void)
{
    fixture f;
    if (setup(&f, 2, 16, 3)) return 1;
    const int32_t p[4] = {1, 1, 2, 2}, q[4] = {3, 3, 4, 4}, r[4] = {5, 5, 6, 6};
    const int32_t long_prompt[10] = {7, 7, 8, 8, 9, 9, 10, 10, 11, 11};
    int32_t ip[2], iq[2], ir[2], il[5], got[5];
    if (alloc_blocks(f.pool, ip, 2) || alloc_blocks(f.pool, iq, 2)) return 1;
    hx_prefix_cache_insert(f.c, 0, p, 4, ip, NULL);
    release_blocks(f.pool, ip, 2);
    hx_prefix_cache_insert(f.c, 0, q, 4, iq, NULL);        /* 4 > 3: p's idle leaf goes */
    release_blocks(f.pool, iq, 2);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(RC(&f, ip[1]), 0);
    CHECK_EQ(RC(&f, ip[0]), 1);

    /* With q held by a running sequence and r being inserted, idle p[0] goes first; then, still
     * over the cap, the least recent leaf goes even though q's sequence holds it (only the cache's
     * reference is dropped). */
    int32_t held[2];
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, q, 4, held, NULL, 2), 2);
    if (alloc_blocks(f.pool, ir, 2)) return 1;
    hx_prefix_cache_insert(f.c, 0, r, 4, ir, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(RC(&f, ip[0]), 0);
    CHECK_EQ(RC(&f, iq[1]), 1);                      /* the sequence's hold only */
    CHECK_EQ(RC(&f, iq[0]), 2);
    CHECK_EQ(RC(&f, ir[0]), 2);
    CHECK_EQ(RC(&f, ir[1]), 2);
    release_blocks(f.pool, held, 2);
    release_blocks(f.pool, ir, 2);
    CHECK_EQ(RC(&f, iq[1]), 0);

    /* A path longer than the cap: only its first max_blocks blocks are recorded. */
    if (alloc_blocks(f.pool, il, 5)) return 1;
    hx_prefix_cache_insert(f.c, 0, long_prompt, 10, il, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 3);
    CHECK_EQ(RC(&f, il[2]), 2);
    CHECK_EQ(RC(&f, il[3]), 1);
    release_blocks(f.pool, il, 5);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, long_prompt, 10, got, NULL, 5), 3);
    release_blocks(f.pool, got, 3);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, r, 4, got, NULL, 5), 0);
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
    return teardown(&f);
}

static int test_cap_zero_disables_caching(void)
{
    fixture f;
    if (setup(&f, 4, 8, 0)) return 1;
    int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ids[2], got[2];
    if (alloc_blocks(f.pool, ids, 2)) return 1;
    hx_prefix_cache_insert(f.c, 0, tokens, 8, ids, NULL);
    CHECK_EQ(hx_prefix_cache_n_blocks(f.c), 0);
    CHECK_EQ(RC(&f, ids[0]), 1);
    CHECK_EQ(RC(&f, ids[1]), 1);
    CHECK_EQ(hx_prefix_cache_match(f.c, 0, tokens, 8, got, NULL, 2), 0);
    CHECK_EQ(hx_prefix_cache_evict(f.c, 2), 0);
    release_blocks(f.pool, ids, 2);
    return teardown(&f);
}

static int test_create_rejects_a_block_size_unlike_the_pools(void)
{
    fixture f;
    if (setup(&f, 4, 8, 8)) return 1;
    hx_prefix_cache *c = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_create(f.pool, 8, 8, &c, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "pool blocks hold 4");
    CHECK(c == NULL);
    err = (hx_err){0};
    CHECK_EQ(hx_prefix_cache_create(f.pool, 4, -1, &c, &err), HX_E_INVALID);
    CHECK_EQ(hx_prefix_cache_create(NULL, 4, 8, &c, &err), HX_E_INVALID);
    CHECK(c == NULL);
    hx_alloc_fail_after(0);
    err = (hx_err){0};
    const hx_status st = hx_prefix_cache_create(f.pool, 4, 8, &c, &err);
    hx_alloc_fail_after(-1);
    CHECK_EQ(st, HX_E_NOMEM);
    CHECK(c == NULL);
    return teardown(&f);
}

/* Allocation fails at every point of an insert that creates a tree, branches and grows children
 * arrays: the cache stays consistent, keeps a prefix of the path, and counts stay exact. */
static int test_out_of_memory_during_insert_keeps_the_cache_consistent(void)
{
    for (int64_t fail_at = 0;; fail_at++) {
        fixture f;
        if (setup(&f, 2, 32, 32)) return 1;
        const int32_t a[8] = {1, 1, 2, 2, 3, 3, 4, 4};
        const int32_t b[8] = {1, 1, 2, 2, 5, 5, 6, 6};
        int32_t ia[4], ib[4], ic[4], got[4];
        if (alloc_blocks(f.pool, ia, 4) || alloc_blocks(f.pool, ib, 4) ||
            alloc_blocks(f.pool, ic, 4))
            return 1;
        hx_prefix_cache_insert(f.c, 0, a, 8, ia, NULL);
        hx_alloc_fail_after(fail_at);
        hx_prefix_cache_insert(f.c, 0, b, 8, ib, NULL);     /* branches at block 2 */
        hx_prefix_cache_insert(f.c, 9, a, 8, ic, NULL);     /* a new adapter's tree */
        hx_alloc_fail_after(-1);

        hx_err err = {0};
        CHECK_EQ(hx_prefix_cache_check(f.c, &err), HX_OK);
        const int32_t n = hx_prefix_cache_n_blocks(f.c);
        CHECK(n >= 4 && n <= 10);
        const int32_t nb = hx_prefix_cache_match(f.c, 0, b, 8, got, NULL, 4);
        release_blocks(f.pool, got, nb);
        const int32_t n9 = hx_prefix_cache_match(f.c, 9, a, 8, got, NULL, 4);
        release_blocks(f.pool, got, n9);
        CHECK(nb >= 2);
        CHECK_EQ(n, 4 + (nb - 2) + n9);
        /* The caller's hold, plus the cache's for the blocks it kept. */
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(RC(&f, ia[i]), 2);
            CHECK_EQ(RC(&f, ib[i]), 1 + (i >= 2 && i < nb));
            CHECK_EQ(RC(&f, ic[i]), 1 + (i < n9));
        }
        release_blocks(f.pool, ia, 4);
        release_blocks(f.pool, ib, 4);
        release_blocks(f.pool, ic, 4);
        if (teardown(&f)) return 1;
        if (n == 10) break;                           /* the inserts ran out of failure points */
        CHECK(fail_at < 64);
    }
    return 0;
}

/* ---- random operations against a model of every hold ---- */

enum { R_BT = 4, R_POOL = 64, R_CAP = 40, R_MAX_TOK = 48, R_MAX_BLK = R_MAX_TOK / R_BT,
       R_SEQS = 6, R_BASES = 4 };

typedef struct {
    uint64_t adapter;
    int32_t  tokens[R_MAX_TOK];
    int32_t  n;
    int32_t  blocks[R_MAX_BLK];   /* the sequence holds each once */
    int32_t  n_blocks;
} r_seq;

/* What the test wrote into each block: the adapter and all tokens up to the block's end. A
 * match is correct only if each block it returns was written for exactly that prefix. */
typedef struct {
    uint64_t adapter;
    int32_t  prefix[R_MAX_TOK];
    int32_t  n;
} r_written;

typedef struct {
    fixture   f;
    r_seq     seq[R_SEQS];
    int32_t   n_seq;
    r_written written[R_POOL];
    int32_t   bases[R_BASES][R_MAX_TOK];
    uint32_t  rng;
    int32_t   hits, tails, evicted, refused, ran_out, max_cached;
} r_world;

static uint32_t r_below(r_world *w, uint32_t n)
{
    return check_rng(&w->rng) % n;
}

/* A prompt that often shares a start with others: a base prompt cut anywhere, then a short tail
 * of ids from a tiny vocabulary, so tails coincide too. */
static void r_prompt(r_world *w, r_seq *s)
{
    const int32_t *base = w->bases[r_below(w, R_BASES)];
    s->adapter = r_below(w, 4) == 0 ? 1 : 0;
    s->n = (int32_t)r_below(w, 8 * R_BT + 1);
    memcpy(s->tokens, base, (size_t)s->n * sizeof(int32_t));
    const int32_t tail = (int32_t)r_below(w, 3 * R_BT);
    for (int32_t i = 0; i < tail; i++) s->tokens[s->n++] = (int32_t)r_below(w, 3);
    s->n_blocks = 0;
}

/* Records that positions [from, s->n) of s were written, in the blocks that hold them. */
static void r_write(r_world *w, const r_seq *s, int32_t from)
{
    for (int32_t i = from / R_BT; i < s->n_blocks; i++) {
        r_written *wr = &w->written[s->blocks[i]];
        const int32_t end = (i + 1) * R_BT < s->n ? (i + 1) * R_BT : s->n;
        wr->adapter = s->adapter;
        wr->n = end;
        memcpy(wr->prefix, s->tokens, (size_t)end * sizeof(int32_t));
    }
}

static int r_check_match(const r_world *w, const r_seq *s, const int32_t *got, int32_t n_got)
{
    for (int32_t i = 0; i < n_got; i++) {
        const r_written *wr = &w->written[got[i]];
        CHECK_EQ(wr->adapter, s->adapter);
        CHECK_EQ(wr->n, (i + 1) * R_BT);
        CHECK(memcmp(wr->prefix, s->tokens, (size_t)wr->n * sizeof(int32_t)) == 0);
    }
    return 0;
}

/* Allocates blocks until s holds ceil(n / bt), evicting from the cache when the pool is empty.
 * Returns 1 on a failed check, and sets *ok to false when the pool cannot supply them. */
static int r_fill(r_world *w, r_seq *s, bool *ok)
{
    const int32_t need = (s->n + R_BT - 1) / R_BT;
    *ok = true;
    while (s->n_blocks < need) {
        int32_t id = hx_kv_pool_alloc(w->f.pool);
        if (id < 0) {
            w->ran_out++;
            const int32_t freed = hx_prefix_cache_evict(w->f.c, need - s->n_blocks);
            w->evicted += freed;
            if (freed == 0) {
                *ok = false;
                return 0;
            }
            id = hx_kv_pool_alloc(w->f.pool);
            CHECK(id >= 0);
        }
        s->blocks[s->n_blocks++] = id;
    }
    return 0;
}

static void r_drop(r_world *w, int32_t k)
{
    release_blocks(w->f.pool, w->seq[k].blocks, w->seq[k].n_blocks);
    w->seq[k] = w->seq[--w->n_seq];
}

/* Every block's pool count equals its cache hold plus the sequences' holds, and the free list
 * holds exactly the blocks counted zero, each once. */
static int r_check_counts(r_world *w)
{
    int32_t want[R_POOL] = {0}, ids[R_POOL];
    hx_err err = {0};
    CHECK_EQ(hx_prefix_cache_check(w->f.c, &err), HX_OK);
    const int32_t n_cached = hx_prefix_cache_list_blocks(w->f.c, ids, R_POOL);
    CHECK(n_cached <= R_CAP);
    if (n_cached > w->max_cached) w->max_cached = n_cached;
    CHECK_EQ(n_cached, hx_prefix_cache_n_blocks(w->f.c));
    for (int32_t i = 0; i < n_cached; i++) want[ids[i]]++;
    for (int32_t k = 0; k < w->n_seq; k++)
        for (int32_t i = 0; i < w->seq[k].n_blocks; i++) want[w->seq[k].blocks[i]]++;
    int32_t n_zero = 0;
    for (int32_t b = 0; b < R_POOL; b++) {
        if (w->f.pool->refcount[b] != want[b])
            CHECK_FAIL("block %d: pool refcount %d, holds %d", b, w->f.pool->refcount[b],
                       want[b]);
        n_zero += want[b] == 0;
    }
    CHECK_EQ(w->f.pool->n_free, n_zero);
    bool seen[R_POOL] = {false};
    for (int32_t i = 0; i < w->f.pool->n_free; i++) {
        const int32_t b = w->f.pool->free_ids[i];
        CHECK(b >= 0 && b < R_POOL && !seen[b]);
        CHECK_EQ(w->f.pool->refcount[b], 0);
        seen[b] = true;
    }
    return 0;
}

static int r_step(r_world *w)
{
    const uint32_t op = r_below(w, 100);
    if (op < 30 && w->n_seq < R_SEQS) {                      /* a request arrives */
        r_seq *s = &w->seq[w->n_seq];
        r_prompt(w, s);
        /* Like the scheduler: leave the last token out so it is run for its logits. */
        const int32_t m = s->n > 0 ? s->n - (int32_t)r_below(w, 2) : 0;
        s->n_blocks = hx_prefix_cache_match(w->f.c, s->adapter, s->tokens, m, s->blocks, NULL,
                                            R_MAX_BLK);
        const int32_t matched = s->n_blocks;
        w->hits += matched;
        if (r_check_match(w, s, s->blocks, s->n_blocks)) return 1;
        /* The positions after the full blocks: a copy of the cached block that agrees longest. */
        int32_t n_tail = 0;
        const int32_t tail = hx_prefix_cache_match_tail(w->f.c, s->adapter, s->tokens, m,
                                                        matched, &n_tail, NULL);
        if (tail >= 0) {
            const r_written *wr = &w->written[tail];
            const int32_t upto = matched * R_BT + n_tail;
            CHECK(n_tail > 0 && n_tail < R_BT && upto <= m);
            CHECK_EQ(wr->adapter, s->adapter);
            CHECK(wr->n >= upto);
            CHECK(memcmp(wr->prefix, s->tokens, (size_t)upto * sizeof(int32_t)) == 0);
            const int32_t copy = hx_kv_pool_copy(w->f.pool, tail);
            hx_kv_pool_release(w->f.pool, tail);
            if (copy >= 0) {
                w->written[copy] = *wr;
                s->blocks[s->n_blocks++] = copy;
                w->tails++;
            } else {
                n_tail = 0;
            }
        }
        w->n_seq++;
        bool ok;
        if (r_fill(w, s, &ok)) return 1;
        if (!ok) {
            w->refused++;
            r_drop(w, w->n_seq - 1);
            return 0;
        }
        r_write(w, s, matched * R_BT + n_tail); /* the rest was written by someone else */
        return 0;
    }
    if (op < 50 && w->n_seq > 0) {                            /* a sequence decodes a few tokens */
        r_seq *s = &w->seq[r_below(w, (uint32_t)w->n_seq)];
        const int32_t from = s->n;
        const int32_t add = 1 + (int32_t)r_below(w, 6);
        for (int32_t i = 0; i < add && s->n < R_MAX_TOK; i++)
            s->tokens[s->n++] = (int32_t)r_below(w, 3);
        bool ok;
        if (r_fill(w, s, &ok)) return 1;
        if (!ok) {
            s->n = from;                                      /* it waits; no new positions */
            return 0;
        }
        r_write(w, s, from);
        return 0;
    }
    if (op < 65 && w->n_seq > 0) {                            /* a sequence's KV is published */
        const r_seq *s = &w->seq[r_below(w, (uint32_t)w->n_seq)];
        hx_prefix_cache_insert(w->f.c, s->adapter, s->tokens, s->n, s->blocks, NULL);
        hx_prefix_cache_insert_tail(w->f.c, s->adapter, s->tokens, s->n, s->blocks, NULL);
        return 0;
    }
    if (op < 80 && w->n_seq > 0) {                            /* a sequence ends */
        const int32_t k = (int32_t)r_below(w, (uint32_t)w->n_seq);
        const r_seq *s = &w->seq[k];
        if (r_below(w, 4) != 0)
            hx_prefix_cache_insert(w->f.c, s->adapter, s->tokens, s->n, s->blocks, NULL);
        if (r_below(w, 2) != 0)
            hx_prefix_cache_insert_tail(w->f.c, s->adapter, s->tokens, s->n, s->blocks, NULL);
        r_drop(w, k);
        return 0;
    }
    if (op < 88) {                                            /* the scheduler needs room */
        w->evicted += hx_prefix_cache_evict(w->f.c, (int32_t)r_below(w, 9));
        return 0;
    }
    r_seq probe;                                              /* a lookup that is let go */
    r_prompt(w, &probe);
    int32_t got[R_MAX_BLK];
    const int32_t n = hx_prefix_cache_match(w->f.c, probe.adapter, probe.tokens, probe.n, got, NULL,
                                            R_MAX_BLK);
    if (r_check_match(w, &probe, got, n)) return 1;
    w->hits += n;
    release_blocks(w->f.pool, got, n);
    return 0;
}

static int test_random_operations_never_leak_or_double_free(void)
{
    static r_world w;
    memset(&w, 0, sizeof w);
    if (setup(&w.f, R_BT, R_POOL, R_CAP)) return 1;
    w.rng = 0x9e3779b9u;
    for (int b = 0; b < R_BASES; b++)
        for (int i = 0; i < R_MAX_TOK; i++) w.bases[b][i] = 10 + (int32_t)r_below(&w, 50);
    for (int step = 0; step < 5000; step++) {
        if (r_step(&w)) CHECK_FAIL("at step %d", step);
        if (r_check_counts(&w)) CHECK_FAIL("at step %d", step);
    }
    /* The run must have exercised sharing, eviction and a full pool, or it proves little. */
    printf("hits %d blocks and %d tails, evicted %d, pool ran out %d times, refused %d, cached "
           "at most %d\n", w.hits, w.tails, w.evicted, w.ran_out, w.refused, w.max_cached);
    CHECK(w.hits > 500);
    CHECK(w.tails > 100);
    CHECK(w.evicted > 50);
    CHECK(w.ran_out > 10);
    CHECK_EQ(w.max_cached, R_CAP);
    while (w.n_seq > 0) r_drop(&w, w.n_seq - 1);
    return teardown(&w.f);
}

static const check_case cases[] = {
    { "empty_cache_matches_nothing", test_empty_cache_matches_nothing },
    { "inserted_blocks_are_found_again_and_retained", test_inserted_blocks_are_found_again_and_retained },
    { "match_stops_at_the_first_differing_block", test_match_stops_at_the_first_differing_block },
    { "hash_collision_is_told_apart_by_comparing_ids", test_hash_collision_is_told_apart_by_comparing_ids },
    { "partial_last_block_is_not_cached", test_partial_last_block_is_not_cached },
    { "partial_block_is_cached_as_a_tail_to_copy", test_partial_block_is_cached_as_a_tail_to_copy },
    { "copied_block_holds_the_sources_kv", test_copied_block_holds_the_sources_kv },
    { "sliding_blocks_bound_the_match_to_a_held_window", test_sliding_blocks_bound_the_match_to_a_held_window },
    { "diverging_prompts_branch_and_share_their_common_blocks", test_diverging_prompts_branch_and_share_their_common_blocks },
    { "adapters_do_not_see_each_others_blocks", test_adapters_do_not_see_each_others_blocks },
    { "lru_leaf_is_evicted_first_and_shared_blocks_never", test_lru_leaf_is_evicted_first_and_shared_blocks_never },
    { "evict_frees_blocks_back_to_the_pool", test_evict_frees_blocks_back_to_the_pool },
    { "insert_evicts_lru_entries_to_stay_within_max_blocks", test_insert_evicts_lru_entries_to_stay_within_max_blocks },
    { "cap_zero_disables_caching", test_cap_zero_disables_caching },
    { "create_rejects_a_block_size_unlike_the_pools", test_create_rejects_a_block_size_unlike_the_pools },
    { "out_of_memory_during_insert_keeps_the_cache_consistent", test_out_of_memory_during_insert_keeps_the_cache_consistent },
    { "random_operations_never_leak_or_double_free", test_random_operations_never_leak_or_double_free },
};
CHECK_MAIN(cases)
