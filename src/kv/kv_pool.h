/* kv_pool.h - the paged KV cache: fixed-size blocks from one allocation, reference counted.
 *
 * The pool hands out block ids; the backend owns the bytes (hx_kv_store). A block's reference
 * count says how many sequences (or, later, prefix-cache entries) use it; it returns to the free
 * list when the count drops to zero. Sized once at start (--ctx, and later the memory budget).
 * Owner: the engine thread; not thread-safe. */
#ifndef HX_KV_KV_POOL_H
#define HX_KV_KV_POOL_H
#include "backend/backend.h"

typedef struct hx_kv_pool {
    hx_backend  *be;       /* borrowed */
    hx_kv_store  store;
    int32_t     *refcount; /* [n_blocks] */
    int32_t     *free_ids; /* stack of free block ids */
    int32_t      n_free;
} hx_kv_pool;

/* Creates a pool of n_blocks blocks of block_tokens positions for n_layer layers of n_kv_head
 * heads of d_head, stored as f16. Same as hx_kv_pool_create_typed(..., HX_KV_F16, ...). */
hx_status hx_kv_pool_create(hx_backend *be, int32_t n_layer, int32_t n_kv_head, int32_t d_head,
                            int32_t block_tokens, int32_t n_blocks, hx_kv_pool **out,
                            hx_err *err);
/* The same with K and V stored as dtype (backend.h): HX_KV_F16, or HX_KV_Q8 / HX_KV_Q4 (8- or
 * 4-bit codes with an f16 scale and minimum per 32 elements; about 0.56x and 0.31x the bytes of
 * f16, so a memory budget holds 1.8x / 3.2x the positions). The dtype is fixed for the pool's
 * life; attention reads it directly. HX_E_INVALID with a message naming d_head when a quantized
 * dtype is asked for and d_head % 32 != 0, or for an unknown dtype; *out untouched on failure. */
hx_status hx_kv_pool_create_typed(hx_backend *be, int32_t n_layer, int32_t n_kv_head,
                                  int32_t d_head, int32_t block_tokens, int32_t n_blocks,
                                  hx_kv_dtype dtype, hx_kv_pool **out, hx_err *err);
void      hx_kv_pool_free(hx_kv_pool *pool); /* accepts NULL */

/* Bytes of K plus V per cached position (all layers) in dtype: what one token of context costs,
 * for sizing a pool from a memory budget. 0 when the dtype cannot store this shape. */
size_t hx_kv_dtype_bytes_per_token(hx_kv_dtype dtype, int32_t n_layer, int32_t n_kv_head,
                                   int32_t d_head);
/* "f16", "q8", "q4" (static text; "?" for an unknown value). */
const char *hx_kv_dtype_name(hx_kv_dtype dtype);
/* Parses "f16", "q8" or "q4" (the --kv option) into *out; HX_E_INVALID with a message naming the
 * accepted values otherwise (*out untouched). */
hx_status   hx_kv_dtype_parse(const char *name, hx_kv_dtype *out, hx_err *err);

/* A free block with reference count 1, or -1 when none is left. */
int32_t hx_kv_pool_alloc(hx_kv_pool *pool);
void    hx_kv_pool_retain(hx_kv_pool *pool, int32_t id);
void    hx_kv_pool_release(hx_kv_pool *pool, int32_t id);
/* A new block (reference count 1) holding a copy of block src's K and V, or -1 when none is
 * free. src is only read: it may be shared. */
int32_t hx_kv_pool_copy(hx_kv_pool *pool, int32_t src);

/* One sequence's block table; grows as positions are added. */
typedef struct {
    int32_t *blocks;
    int32_t  n_blocks, cap;
    int32_t  n_ctx; /* positions stored */
} hx_kv_table;

/* Blocks one sequence of up to n_ctx positions holds at most in a pool that keeps only the last
 * `window` positions, when a step adds up to `rows` rows: those rows and the window - 1
 * positions before the first, at any alignment to blocks of block_tokens, or its whole context
 * if that takes fewer. */
static inline int32_t hx_kv_window_blocks(int32_t window, int32_t rows, int32_t n_ctx,
                                          int32_t block_tokens)
{
    const int32_t win = (window - 1 + rows + block_tokens - 1) / block_tokens + 1;
    const int32_t ctx = (n_ctx + block_tokens - 1) / block_tokens;
    return win < ctx ? win : ctx;
}

/* Releases the blocks wholly before position n_pos, leaving -1 in their table entries (a pool
 * that keeps only a window of positions); n_ctx and the table's length do not change. */
void hx_kv_table_drop_before(hx_kv_pool *pool, hx_kv_table *t, int32_t n_pos);
/* Whether the table still holds every block that positions [from, to) live in. */
bool hx_kv_table_holds(const hx_kv_pool *pool, const hx_kv_table *t, int32_t from, int32_t to);

/* Makes room for n_ctx positions, allocating blocks as needed. HX_E_CONTEXT when the pool is
 * out of blocks (the table is unchanged then). */
hx_status hx_kv_table_reserve(hx_kv_pool *pool, hx_kv_table *t, int32_t n_ctx, hx_err *err);
/* Drops positions from n_ctx on (releasing blocks wholly past it; dropped entries, -1, are
 * skipped). */
void      hx_kv_table_truncate(hx_kv_pool *pool, hx_kv_table *t, int32_t n_ctx);
void      hx_kv_table_free(hx_kv_pool *pool, hx_kv_table *t);

#endif
