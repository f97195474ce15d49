/* kv_pool.c - block allocator (a stack of free ids) and per-sequence block tables, and the names
 * and sizes of the KV cache dtypes the pool can be created with. */
#include "kv/kv_pool.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

static const char *const dtype_names[HX_KV_DTYPE_COUNT] = {"f16", "q8", "q4"};

const char *hx_kv_dtype_name(hx_kv_dtype dtype)
{
    return (unsigned)dtype < HX_KV_DTYPE_COUNT ? dtype_names[dtype] : "?";
}

hx_status hx_kv_dtype_parse(const char *name, hx_kv_dtype *out, hx_err *err)
{
    for (int i = 0; name && i < HX_KV_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0) {
            *out = (hx_kv_dtype)i;
            return HX_OK;
        }
    return hx_err_set(err, HX_E_INVALID, "unknown KV cache type '%s' (expected f16, q8 or q4)",
                      name ? name : "(null)");
}

/* Per 32 elements: f16 64 bytes, q8 32 codes + 4 (scale, minimum), q4 16 + 4. */
size_t hx_kv_dtype_bytes_per_token(hx_kv_dtype dtype, int32_t n_layer, int32_t n_kv_head,
                                   int32_t d_head)
{
    static const size_t per32[HX_KV_DTYPE_COUNT] = {64, 36, 20};
    if ((unsigned)dtype >= HX_KV_DTYPE_COUNT || n_layer < 1 || n_kv_head < 1 || d_head < 1 ||
        (dtype != HX_KV_F16 && d_head % 32 != 0))
        return 0;
    const size_t elems = (size_t)n_layer * (size_t)n_kv_head * (size_t)d_head;
    return 2 * (dtype == HX_KV_F16 ? elems * 2 : elems / 32 * per32[dtype]);
}

hx_status hx_kv_pool_create(hx_backend *be, int32_t n_layer, int32_t n_kv_head, int32_t d_head,
                            int32_t block_tokens, int32_t n_blocks, hx_kv_pool **out,
                            hx_err *err)
{
    return hx_kv_pool_create_typed(be, n_layer, n_kv_head, d_head, block_tokens, n_blocks,
                                   HX_KV_F16, out, err);
}

hx_status hx_kv_pool_create_typed(hx_backend *be, int32_t n_layer, int32_t n_kv_head,
                                  int32_t d_head, int32_t block_tokens, int32_t n_blocks,
                                  hx_kv_dtype dtype, hx_kv_pool **out, hx_err *err)
{
    if (n_blocks < 1 || block_tokens < 1 || n_layer < 1 || n_kv_head < 1 || d_head < 1 ||
        n_kv_head > INT32_MAX / d_head)
        return hx_err_set(err, HX_E_INVALID, "KV pool of %d blocks x %d tokens is invalid",
                          n_blocks, block_tokens);
    if ((unsigned)dtype >= HX_KV_DTYPE_COUNT)
        return hx_err_set(err, HX_E_INVALID, "KV cache dtype %d is unknown", (int)dtype);
    if (dtype != HX_KV_F16 && d_head % 32 != 0)
        return hx_err_set(err, HX_E_INVALID,
                          "--kv %s needs d_head a multiple of 32 (32 elements share a scale); "
                          "this model has d_head %d: use --kv f16",
                          dtype_names[dtype], d_head);
    hx_kv_pool *p = hx_calloc(1, sizeof *p);
    if (!p) return hx_err_set(err, HX_E_NOMEM, "out of memory for the KV pool");
    p->be = be;
    p->store = (hx_kv_store){.n_blocks = n_blocks, .block_tokens = block_tokens,
                             .n_layer = n_layer, .n_kv_head = n_kv_head, .d_head = d_head,
                             .kv_dim = n_kv_head * d_head, .dtype = dtype};
    p->refcount = hx_calloc((size_t)n_blocks, sizeof(int32_t));
    p->free_ids = hx_calloc((size_t)n_blocks, sizeof(int32_t));
    hx_status st = p->refcount && p->free_ids
                       ? be->kv_alloc(be, &p->store, err)
                       : hx_err_set(err, HX_E_NOMEM, "out of memory for the KV pool");
    if (st != HX_OK) {
        hx_kv_pool_free(p);
        return st;
    }
    for (int32_t i = 0; i < n_blocks; i++) p->free_ids[i] = n_blocks - 1 - i; /* 0 on top */
    p->n_free = n_blocks;
    *out = p;
    return HX_OK;
}

void hx_kv_pool_free(hx_kv_pool *p)
{
    if (!p) return;
    if (p->store.k || p->store.v) p->be->kv_free(p->be, &p->store);
    hx_free(p->refcount);
    hx_free(p->free_ids);
    hx_free(p);
}

int32_t hx_kv_pool_alloc(hx_kv_pool *p)
{
    if (p->n_free == 0) return -1;
    const int32_t id = p->free_ids[--p->n_free];
    p->refcount[id] = 1;
    return id;
}

void hx_kv_pool_retain(hx_kv_pool *p, int32_t id)
{
    HX_ASSERT(id >= 0 && id < p->store.n_blocks && p->refcount[id] > 0);
    p->refcount[id]++;
}

void hx_kv_pool_release(hx_kv_pool *p, int32_t id)
{
    HX_ASSERT(id >= 0 && id < p->store.n_blocks && p->refcount[id] > 0);
    if (--p->refcount[id] == 0) p->free_ids[p->n_free++] = id;
}

int32_t hx_kv_pool_copy(hx_kv_pool *p, int32_t src)
{
    HX_ASSERT(src >= 0 && src < p->store.n_blocks && p->refcount[src] > 0);
    const int32_t id = hx_kv_pool_alloc(p);
    if (id >= 0) p->be->kv_copy(p->be, &p->store, src, id);
    return id;
}

hx_status hx_kv_table_reserve(hx_kv_pool *p, hx_kv_table *t, int32_t n_ctx, hx_err *err)
{
    const int32_t bt = p->store.block_tokens;
    const int32_t need = (n_ctx + bt - 1) / bt;
    if (need - t->n_blocks > p->n_free)
        return hx_err_set(err, HX_E_CONTEXT,
                          "the KV cache is full: %d positions need %d blocks, %d are free",
                          n_ctx, need - t->n_blocks, p->n_free);
    if (need > t->cap) {
        int32_t *b = hx_realloc(t->blocks, (size_t)need * sizeof(int32_t));
        if (!b) return hx_err_set(err, HX_E_NOMEM, "out of memory for a block table");
        t->blocks = b;
        t->cap = need;
    }
    while (t->n_blocks < need) t->blocks[t->n_blocks++] = hx_kv_pool_alloc(p);
    return HX_OK;
}

void hx_kv_table_truncate(hx_kv_pool *p, hx_kv_table *t, int32_t n_ctx)
{
    const int32_t bt = p->store.block_tokens;
    const int32_t keep = (n_ctx + bt - 1) / bt;
    while (t->n_blocks > keep) {
        const int32_t id = t->blocks[--t->n_blocks];
        if (id >= 0) hx_kv_pool_release(p, id);
    }
    if (t->n_ctx > n_ctx) t->n_ctx = n_ctx;
}

void hx_kv_table_drop_before(hx_kv_pool *p, hx_kv_table *t, int32_t n_pos)
{
    const int32_t n = n_pos / p->store.block_tokens < t->n_blocks ? n_pos / p->store.block_tokens
                                                                 : t->n_blocks;
    for (int32_t i = n - 1; i >= 0 && t->blocks[i] >= 0; i--) { /* older ones went before */
        hx_kv_pool_release(p, t->blocks[i]);
        t->blocks[i] = -1;
    }
}

bool hx_kv_table_holds(const hx_kv_pool *p, const hx_kv_table *t, int32_t from, int32_t to)
{
    const int32_t bt = p->store.block_tokens;
    if (from < 0) from = 0;
    if (from >= to) return true;
    if (to > t->n_blocks * bt) return false;
    for (int32_t i = from / bt; i < (to + bt - 1) / bt; i++)
        if (t->blocks[i] < 0) return false;
    return true;
}

void hx_kv_table_free(hx_kv_pool *p, hx_kv_table *t)
{
    hx_kv_table_truncate(p, t, 0);
    hx_free(t->blocks);
    *t = (hx_kv_table){0};
}
