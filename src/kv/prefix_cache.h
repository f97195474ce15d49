/* prefix_cache.h - KV blocks kept after their sequence ends, found again by the token ids they
 * hold, so a new prompt that starts like an old one reuses the old KV instead of recomputing:
 * full blocks shared by reference, and the partial block after them copied.
 *
 * A radix tree per adapter id whose edges are whole blocks of block_tokens token ids: the node at
 * depth d holds the block for tokens [d*bt, (d+1)*bt) after exactly the tokens on its path. Every
 * node holds one pool reference to its block; callers hold their own (match hands them out).
 * Invariant: pool refcount of a block = (1 if a node holds it) + (holds by callers).
 * It does not allocate blocks, write KV, or copy on write: what it records is immutable, and the
 * caller must never write into a block that a match returned, nor over positions it inserted
 * (a sequence whose partial block is cached as a tail goes on appending after them).
 * Owner: the engine thread (like the pool); not thread-safe. */
#ifndef HX_KV_PREFIX_CACHE_H
#define HX_KV_PREFIX_CACHE_H
#include <stdint.h>

#include "base/err.h"
#include "kv/kv_pool.h"

typedef struct hx_prefix_cache hx_prefix_cache;

/* A cache of full KV blocks keyed by the token ids they hold, over pool (borrowed; must outlive
 * the cache). block_tokens must equal the pool's. Holds at most max_blocks blocks (0: caching
 * disabled: match finds nothing, insert keeps nothing). HX_E_INVALID for a bad size or a
 * block_tokens that differs from the pool's, HX_E_NOMEM; *out is written only on success. */
hx_status hx_prefix_cache_create(hx_kv_pool *pool, int32_t block_tokens, int32_t max_blocks,
                                 hx_prefix_cache **out, hx_err *err);
/* Releases every block it holds (blocks callers still hold stay allocated); NULL ok. */
void      hx_prefix_cache_free(hx_prefix_cache *c);

/* Sliding layers (Gemma 2/3) keep their KV in pool_swa (borrowed), and a sequence holds only the
 * blocks its window reaches (sequence.h). Call before the first insert: from then on every node
 * may also hold the sliding block of its positions (-1 where the inserter had dropped it), the
 * blocks_swa arguments below are required (NULL without this call), a match ends where the
 * window before its end is no longer all held, and it hands out sliding blocks only for that
 * window (-1 before). */
void      hx_prefix_cache_use_swa(hx_prefix_cache *c, hx_kv_pool *pool_swa, int32_t window);

/* The longest cached prefix of tokens[0..n) in whole blocks, under adapter (0: none; a later LoRA
 * adapter id keys separate trees). Writes the block ids (each retained once for the caller, who
 * releases them when done) to blocks[0..max_blocks) and returns the number of blocks matched. Marks
 * the matched path most-recently used. Allocates nothing. To get logits for the last prompt token
 * the caller must still run it, so it usually passes n - 1 (see the note in prefix_cache.c). */
int32_t   hx_prefix_cache_match(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                                int32_t n, int32_t *blocks, int32_t *blocks_swa,
                                int32_t max_blocks);

/* Records that blocks[i] holds tokens[i*bt .. (i+1)*bt) for i < n / bt (full blocks only; a
 * trailing partial block is ignored). Blocks already cached for the same tokens are kept as they
 * are (the caller's duplicate is not added); new ones are retained by the cache. Then evicts
 * least-recently-used entries as needed to stay within max_blocks. The caller must hold every
 * blocks[i] (refcount > 0) during the call. At most max_blocks blocks of one path are recorded;
 * if memory for a node runs out, the rest of the path is skipped (the cache stays consistent).
 * To stay within max_blocks it first drops least-recently-used leaves that only the cache holds
 * (freeing them), then, if that is not enough, least-recently-used leaves that callers still hold
 * (only the cache's reference is dropped; the caller's block stays valid). */
void      hx_prefix_cache_insert(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                                 int32_t n, const int32_t *blocks, const int32_t *blocks_swa);

/* Records the partial block after the full blocks of tokens[0..n): blocks[n / bt] holds the
 * n % bt ids after them (a "tail"; nothing when n % bt == 0 or the full blocks' path is not
 * cached). Its holder may go on writing positions past those ids (KV is append-only), so a tail
 * is only ever copied (match_tail); when the holder inserts the block whole it becomes a full
 * node. A tail already covered by a cached block with the same first ids adds nothing. */
void      hx_prefix_cache_insert_tail(hx_prefix_cache *c, uint64_t adapter,
                                      const int32_t *tokens, int32_t n, const int32_t *blocks,
                                      const int32_t *blocks_swa);

/* After match found n_full blocks of tokens[0..n): the cached block (full or tail) after them
 * whose first ids agree longest with tokens[n_full * bt .. n), at most bt - 1 of them. Returns
 * its id, retained once for the caller, with *n_tail the ids that agree; -1 with *n_tail 0 when
 * none agrees. The caller copies it (hx_kv_pool_copy) into a block of its own, then releases it:
 * it must never write into it. With sliding layers only a block whose sliding block is cached
 * qualifies, and *tail_swa is that one, retained too (else -1; tail_swa may be NULL without). */
int32_t   hx_prefix_cache_match_tail(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                                     int32_t n, int32_t n_full, int32_t *n_tail,
                                     int32_t *tail_swa);

/* Frees up to want blocks back to the pool by evicting least-recently-used leaves that nobody but
 * the cache holds (pool refcount 1); returns how many were freed. Evicting a leaf may make its
 * parent an evictable leaf, which is then considered in the same call. The scheduler calls it
 * when the pool runs out. */
int32_t   hx_prefix_cache_evict(hx_prefix_cache *c, int32_t want);

int32_t   hx_prefix_cache_n_blocks(const hx_prefix_cache *c);  /* blocks held now */

/* ---- introspection, for tests and stats ---- */

/* Writes up to max ids of the blocks the cache holds (in no particular order) to ids and returns
 * how many it holds in all (which may exceed max). */
int32_t   hx_prefix_cache_list_blocks(const hx_prefix_cache *c, int32_t *ids, int32_t max);

/* Walks the whole tree and checks its invariants: parent and child links agree, no two siblings
 * hold the same tokens, no block is held by two nodes, every held block has pool refcount >= 1,
 * the LRU list holds every node once with each node after all its descendants, and the node count
 * matches. O(n); for tests. HX_E_INVALID with the first violation in err, or HX_E_NOMEM. */
hx_status hx_prefix_cache_check(const hx_prefix_cache *c, hx_err *err);

#endif
