/* prefix_cache.c - radix tree of full KV blocks keyed by token ids, one tree per adapter, with
 * LRU eviction of leaves.
 *
 * Each edge is exactly one block of block_tokens ids, so a node is one cached block and a prompt
 * that diverges from a cached one mid-path simply branches at the last common block: no node is
 * ever split. A tail node holds the partial last block of a sequence (fewer ids, always a leaf);
 * its block may still be written past its ids by the sequence that owns it, so a tail is only
 * ever copied, never shared, and becomes a full node when that sequence inserts the block
 * whole. Children sit in a small array per node, looked up by a 64-bit hash of their ids and
 * confirmed by comparing the ids (a hash collision must never hand out the wrong KV).
 *
 * Recency is one doubly linked list of every node, least recently used at the head. A match or an
 * insert moves its whole path to the tail, deepest node first, so each node always sits after all
 * of its descendants (a descendant is either on the path, moved before it, or off the path and
 * already further ahead). Eviction walks the list from the head: the first leaf it can drop is
 * the least recently used one, and when dropping a leaf turns its parent into a leaf, the parent
 * lies further along the same walk, so one pass evicts whole idle branches in LRU order. The head
 * is always a leaf, so a walk only skips leaves that callers still hold and their ancestors.
 *
 * A note for the scheduler: match returns only full blocks, and a cached block must never be
 * written again. A prompt whose every block is cached still needs its last token run to get
 * logits, which would write KV into the last shared block; match n - 1 tokens to leave it out.
 * The positions after the full blocks come from match_tail as a block to copy, never to share. */
#include "kv/prefix_cache.h"

#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"

/* ---- types ---- */

typedef struct pc_node pc_node;
struct pc_node {
    pc_node  *parent;      /* NULL for an adapter root */
    pc_node **kids;        /* [cap_kids], the first n_kids used; NULL when none yet */
    int32_t   n_kids, cap_kids;
    pc_node  *prev, *next; /* in the LRU list; adapter roots are never in it */
    uint64_t  last_used;   /* tick of the last match or insert through this node */
    uint64_t  hash;        /* of tokens[0..n_tok); 0 for a root */
    int32_t   block;       /* pool block id, one reference held; -1 for a root */
    int32_t   block_swa;   /* the sliding layers' block of the same positions, one reference
                            * held; -1 when none (not in use, or dropped before insertion) */
    int32_t   n_tok;       /* ids held: block_tokens, or fewer for a tail; 0 for a root */
    int32_t   tokens[];    /* [block_tokens]; absent for a root */
};

typedef struct {
    uint64_t adapter;
    pc_node *root; /* holds no block; freed once its last child is evicted */
} pc_tree;

/* Owner: the engine thread, like the pool it borrows. */
struct hx_prefix_cache {
    hx_kv_pool *pool;         /* borrowed */
    hx_kv_pool *pool_swa;     /* borrowed; the sliding layers' pool, NULL when not in use */
    int32_t     window;       /* positions the sliding layers attend over */
    int32_t     block_tokens;
    int32_t     max_blocks;
    int32_t     n_nodes;      /* nodes holding a block (roots excluded) */
    uint64_t    tick;         /* bumped once per match or insert */
    pc_tree    *trees;        /* [cap_trees], the first n_trees used */
    int32_t     n_trees, cap_trees;
    pc_node    *lru_head;     /* least recently used; every node after all its descendants */
    pc_node    *lru_tail;     /* most recently used */
};

/* ---- helpers ---- */

/* FNV-1a taking whole 32-bit ids as its units; only a fast first filter before comparing ids. */
static uint64_t hash_tokens(const int32_t *t, int32_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The full child of parent holding tokens[0..block_tokens), or NULL. */
static pc_node *find_kid(const hx_prefix_cache *c, const pc_node *parent, const int32_t *tokens,
                         uint64_t hash)
{
    const size_t bytes = (size_t)c->block_tokens * sizeof(int32_t);
    for (int32_t i = 0; i < parent->n_kids; i++) {
        pc_node *k = parent->kids[i];
        if (k->n_tok == c->block_tokens && k->hash == hash &&
            memcmp(k->tokens, tokens, bytes) == 0)
            return k;
    }
    return NULL;
}

/* The child of parent that holds block, or NULL. */
static pc_node *find_kid_block(const pc_node *parent, int32_t block)
{
    for (int32_t i = 0; i < parent->n_kids; i++)
        if (parent->kids[i]->block == block) return parent->kids[i];
    return NULL;
}

/* How many leading ids of tokens[0..n) node k holds. */
static int32_t common_ids(const pc_node *k, const int32_t *tokens, int32_t n)
{
    int32_t i = 0;
    while (i < n && i < k->n_tok && k->tokens[i] == tokens[i]) i++;
    return i;
}

/* Makes node k hold tokens[0..n) (n ids, the block unchanged). */
static void set_ids(pc_node *k, const int32_t *tokens, int32_t n)
{
    memcpy(k->tokens, tokens, (size_t)n * sizeof(int32_t));
    k->n_tok = n;
    k->hash = hash_tokens(tokens, n);
}

static pc_tree *find_tree(const hx_prefix_cache *c, uint64_t adapter)
{
    for (int32_t i = 0; i < c->n_trees; i++)
        if (c->trees[i].adapter == adapter) return &c->trees[i];
    return NULL;
}

static void lru_unlink(hx_prefix_cache *c, pc_node *n)
{
    if (n->prev) n->prev->next = n->next;
    else c->lru_head = n->next;
    if (n->next) n->next->prev = n->prev;
    else c->lru_tail = n->prev;
    n->prev = n->next = NULL;
}

static void lru_append(hx_prefix_cache *c, pc_node *n)
{
    n->prev = c->lru_tail;
    n->next = NULL;
    if (c->lru_tail) c->lru_tail->next = n;
    else c->lru_head = n;
    c->lru_tail = n;
}

/* Marks leaf and all its ancestors used now, moving them to the tail deepest first so that every
 * node stays behind its descendants in the list (see the file comment). */
static void touch_path(hx_prefix_cache *c, pc_node *leaf)
{
    const uint64_t now = ++c->tick;
    for (pc_node *n = leaf; n && n->parent; n = n->parent) {
        n->last_used = now;
        if (c->lru_tail != n) {
            lru_unlink(c, n);
            lru_append(c, n);
        }
    }
}

static bool add_kid(pc_node *parent, pc_node *kid)
{
    if (parent->n_kids == parent->cap_kids) {
        const int32_t cap = parent->cap_kids ? parent->cap_kids * 2 : 2;
        pc_node **k = hx_realloc(parent->kids, (size_t)cap * sizeof *k);
        if (!k) return false;
        parent->kids = k;
        parent->cap_kids = cap;
    }
    parent->kids[parent->n_kids++] = kid;
    kid->parent = parent;
    return true;
}

static void free_node(pc_node *n)
{
    hx_free(n->kids);
    hx_free(n);
}

/* Removes the empty tree whose root is root and frees the root. */
static void drop_tree(hx_prefix_cache *c, pc_node *root)
{
    for (int32_t i = 0; i < c->n_trees; i++) {
        if (c->trees[i].root != root) continue;
        c->trees[i] = c->trees[--c->n_trees];
        free_node(root);
        return;
    }
    HX_ASSERT(!"adapter root missing from the tree list");
}

/* Releases the cache's references to node n's blocks. */
static void release_node(hx_prefix_cache *c, const pc_node *n)
{
    hx_kv_pool_release(c->pool, n->block);
    if (n->block_swa >= 0) hx_kv_pool_release(c->pool_swa, n->block_swa);
}

/* Drops leaf n: unlinks it from its parent and the LRU list, releases the cache's reference to its
 * block and frees it. A root left without children goes too, so adapters that stop being used
 * cost nothing. */
static void evict_leaf(hx_prefix_cache *c, pc_node *n)
{
    HX_ASSERT(n->n_kids == 0 && n->parent != NULL);
    pc_node *p = n->parent;
    for (int32_t i = 0; i < p->n_kids; i++) {
        if (p->kids[i] != n) continue;
        p->kids[i] = p->kids[--p->n_kids];   /* sibling order carries no meaning */
        break;
    }
    lru_unlink(c, n);
    release_node(c, n);
    free_node(n);
    c->n_nodes--;
    if (!p->parent && p->n_kids == 0) drop_tree(c, p);
}

/* Evicts least-recently-used leaves, only those no caller holds unless any_holder, until the
 * cache holds at most keep nodes or want have gone; returns how many went. One pass suffices
 * because a parent made a leaf lies later in the list than the child just evicted. */
static int32_t evict_lru(hx_prefix_cache *c, int32_t want, int32_t keep, bool any_holder)
{
    int32_t done = 0;
    pc_node *n = c->lru_head;
    while (n && done < want && c->n_nodes > keep) {
        pc_node *next = n->next;   /* evicting n frees only n (and maybe a root, not listed) */
        if (n->n_kids == 0 && (any_holder || c->pool->refcount[n->block] == 1)) {
            evict_leaf(c, n);
            done++;
        }
        n = next;
    }
    return done;
}

/* ---- lifetime ---- */

hx_status hx_prefix_cache_create(hx_kv_pool *pool, int32_t block_tokens, int32_t max_blocks,
                                 hx_prefix_cache **out, hx_err *err)
{
    if (!pool || block_tokens < 1 || block_tokens != pool->store.block_tokens || max_blocks < 0)
        return hx_err_set(err, HX_E_INVALID,
                          "prefix cache of %d blocks x %d tokens is invalid (pool blocks hold %d)",
                          max_blocks, block_tokens, pool ? pool->store.block_tokens : 0);
    hx_prefix_cache *c = hx_calloc(1, sizeof *c);
    if (!c) return hx_err_set(err, HX_E_NOMEM, "out of memory for the prefix cache");
    c->pool = pool;
    c->block_tokens = block_tokens;
    c->max_blocks = max_blocks;
    *out = c;
    return HX_OK;
}

void hx_prefix_cache_free(hx_prefix_cache *c)
{
    if (!c) return;
    for (pc_node *n = c->lru_head, *next; n; n = next) {
        next = n->next;
        release_node(c, n);
        free_node(n);
    }
    for (int32_t i = 0; i < c->n_trees; i++) free_node(c->trees[i].root);
    hx_free(c->trees);
    hx_free(c);
}

/* ---- core ---- */

void hx_prefix_cache_use_swa(hx_prefix_cache *c, hx_kv_pool *pool_swa, int32_t window)
{
    HX_ASSERT(c->n_nodes == 0 && window > 0);
    c->pool_swa = pool_swa;
    c->window = window;
}

/* The node of the full blocks of tokens[0..depth * bt), or NULL when the path is not cached. */
static pc_node *walk(const hx_prefix_cache *c, const pc_tree *t, const int32_t *tokens,
                     int32_t depth)
{
    pc_node *at = t->root;
    for (int32_t i = 0; i < depth && at; i++) {
        const int32_t *blk = tokens + (int64_t)i * c->block_tokens;
        at = find_kid(c, at, blk, hash_tokens(blk, c->block_tokens));
    }
    return at;
}

/* The first block the sliding layers' window reaches from position p on. */
static int32_t window_first(const hx_prefix_cache *c, int64_t p)
{
    return p - c->window + 1 > 0 ? (int32_t)((p - c->window + 1) / c->block_tokens) : 0;
}

/* Whether swa[0..d) holds every block the window before position d * bt reaches. */
static bool window_held(const hx_prefix_cache *c, const int32_t *swa, int32_t d)
{
    for (int32_t i = window_first(c, (int64_t)d * c->block_tokens); i < d; i++)
        if (swa[i] < 0) return false;
    return true;
}

int32_t hx_prefix_cache_match(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                              int32_t n, int32_t *blocks, int32_t *blocks_swa, int32_t max_blocks)
{
    const int32_t bt = c->block_tokens;
    HX_ASSERT(!c->pool_swa || blocks_swa);
    const pc_tree *t = find_tree(c, adapter);
    if (!t || n < bt || max_blocks < 1) return 0;
    pc_node *at = t->root;
    int32_t n_match = 0;
    for (int32_t i = 0; i < n / bt && n_match < max_blocks; i++) {
        const int32_t *blk = tokens + (int64_t)i * bt;
        pc_node *k = find_kid(c, at, blk, hash_tokens(blk, bt));
        if (!k) break;
        blocks[n_match] = k->block;
        if (c->pool_swa) blocks_swa[n_match] = k->block_swa;
        n_match++;
        at = k;
    }
    /* With sliding layers the prefix ends where their window before it is still all cached. */
    const int32_t walked = n_match;
    while (c->pool_swa && n_match > 0 && !window_held(c, blocks_swa, n_match)) n_match--;
    const int32_t first = window_first(c, (int64_t)n_match * bt);
    for (int32_t i = 0; i < n_match; i++) {
        hx_kv_pool_retain(c->pool, blocks[i]);
        if (!c->pool_swa) continue;
        if (i < first) blocks_swa[i] = -1; /* outside the window: not handed out */
        else hx_kv_pool_retain(c->pool_swa, blocks_swa[i]);
    }
    if (n_match > 0) touch_path(c, n_match == walked ? at : walk(c, t, tokens, n_match));
    return n_match;
}

/* The tree of adapter, created (empty) when it has none yet; NULL when out of memory. */
static pc_tree *tree_for(hx_prefix_cache *c, uint64_t adapter)
{
    pc_tree *t = find_tree(c, adapter);
    if (t) return t;
    if (c->n_trees == c->cap_trees) {
        const int32_t cap = c->cap_trees ? c->cap_trees * 2 : 4;
        pc_tree *tr = hx_realloc(c->trees, (size_t)cap * sizeof *tr);
        if (!tr) return NULL;
        c->trees = tr;
        c->cap_trees = cap;
    }
    pc_node *root = hx_calloc(1, sizeof *root);
    if (!root) return NULL;
    root->block = -1;
    t = &c->trees[c->n_trees++];
    *t = (pc_tree){.adapter = adapter, .root = root};
    return t;
}

/* Lets node k hold the sliding layers' block of its positions, when it has none and swa is one
 * (the caller's; the same tokens give the same KV whoever computed them). */
static void give_swa(hx_prefix_cache *c, pc_node *k, int32_t swa)
{
    if (!c->pool_swa || k->block_swa >= 0 || swa < 0) return;
    hx_kv_pool_retain(c->pool_swa, swa);
    k->block_swa = swa;
}

/* A new child of parent holding block (the cache's reference taken here) and tokens[0..n), or
 * NULL when out of memory. It joins the LRU list at the tail; the caller's touch_path orders it. */
static pc_node *new_kid(hx_prefix_cache *c, pc_node *parent, const int32_t *tokens, int32_t n,
                        int32_t block, int32_t block_swa)
{
    pc_node *k = hx_calloc(1, sizeof(pc_node) + (size_t)c->block_tokens * sizeof(int32_t));
    if (!k) return NULL;
    if (!add_kid(parent, k)) {
        hx_free(k);
        return NULL;
    }
    k->block = block;
    k->block_swa = -1;
    set_ids(k, tokens, n);
    hx_kv_pool_retain(c->pool, block); /* asserts the caller holds it */
    give_swa(c, k, block_swa);
    lru_append(c, k);
    c->n_nodes++;
    return k;
}

/* The end of an insert that stopped at node at: marks its path used, drops a new root that got
 * no node, and evicts down to max_blocks. */
static void insert_done(hx_prefix_cache *c, pc_node *at)
{
    if (at->parent) touch_path(c, at);
    else if (at->n_kids == 0) drop_tree(c, at);
    if (c->n_nodes > c->max_blocks) {
        evict_lru(c, INT32_MAX, c->max_blocks, false);
        evict_lru(c, INT32_MAX, c->max_blocks, true);
    }
}

void hx_prefix_cache_insert(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                            int32_t n, const int32_t *blocks, const int32_t *blocks_swa)
{
    const int32_t bt = c->block_tokens;
    /* Deeper blocks than max_blocks could never all stay: a node needs its whole path cached. */
    const int32_t n_full = n / bt < c->max_blocks ? n / bt : c->max_blocks;
    if (n_full < 1) return;
    pc_tree *t = tree_for(c, adapter);
    if (!t) return; /* best effort: nothing cached, nothing changed */
    pc_node *at = t->root;
    for (int32_t i = 0; i < n_full; i++) {
        const int32_t *blk = tokens + (int64_t)i * bt;
        pc_node *k = find_kid(c, at, blk, hash_tokens(blk, bt));
        /* This very block cached as a tail while it was being filled: now it is whole. */
        if (!k && (k = find_kid_block(at, blocks[i]))) set_ids(k, blk, bt);
        const int32_t swa = c->pool_swa ? blocks_swa[i] : -1;
        if (!k && !(k = new_kid(c, at, blk, bt, blocks[i], swa))) break;
        give_swa(c, k, swa);
        at = k;
    }
    insert_done(c, at);
}

void hx_prefix_cache_insert_tail(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                                 int32_t n, const int32_t *blocks, const int32_t *blocks_swa)
{
    const int32_t bt = c->block_tokens, n_full = n / bt, n_tail = n % bt;
    if (n_tail == 0 || n_full >= c->max_blocks) return;
    pc_tree *t = n_full > 0 ? find_tree(c, adapter) : tree_for(c, adapter);
    pc_node *at = t ? walk(c, t, tokens, n_full) : NULL;
    if (!at) return; /* the path is not cached (evicted): a tail alone is useless */
    const int32_t *tail = tokens + (int64_t)n_full * bt;
    const int32_t swa = c->pool_swa ? blocks_swa[n_full] : -1;
    pc_node *k = find_kid_block(at, blocks[n_full]);
    if (k && k->n_tok < n_tail) set_ids(k, tail, n_tail); /* the same tail, grown */
    for (int32_t i = 0; i < at->n_kids && !k; i++)
        if (common_ids(at->kids[i], tail, n_tail) == n_tail) k = at->kids[i]; /* covered */
    if (!k) k = new_kid(c, at, tail, n_tail, blocks[n_full], swa);
    /* Only to this sequence's own tail: swa holds just n_tail positions so far. */
    if (k && k->block == blocks[n_full]) give_swa(c, k, swa);
    insert_done(c, k ? k : at);
}

int32_t hx_prefix_cache_match_tail(hx_prefix_cache *c, uint64_t adapter, const int32_t *tokens,
                                   int32_t n, int32_t n_full, int32_t *n_tail, int32_t *tail_swa)
{
    const int32_t bt = c->block_tokens;
    HX_ASSERT(!c->pool_swa || tail_swa);
    *n_tail = 0;
    if (tail_swa) *tail_swa = -1;
    const pc_tree *t = find_tree(c, adapter);
    if (!t || n_full < 0 || n <= (int64_t)n_full * bt) return -1;
    const pc_node *at = walk(c, t, tokens, n_full);
    if (!at) return -1;
    const int32_t *rest = tokens + (int64_t)n_full * bt;
    const int32_t n_rest = n - n_full * bt < bt - 1 ? n - n_full * bt : bt - 1;
    pc_node *best = NULL;
    for (int32_t i = 0; i < at->n_kids; i++) {
        pc_node *k = at->kids[i];
        const int32_t m = common_ids(k, rest, n_rest);
        if (m > *n_tail && (!c->pool_swa || k->block_swa >= 0)) *n_tail = m, best = k;
    }
    if (!best) return -1;
    hx_kv_pool_retain(c->pool, best->block);
    if (c->pool_swa) {
        hx_kv_pool_retain(c->pool_swa, best->block_swa);
        *tail_swa = best->block_swa;
    }
    touch_path(c, best);
    return best->block;
}

int32_t hx_prefix_cache_evict(hx_prefix_cache *c, int32_t want)
{
    if (want < 1) return 0;
    return evict_lru(c, want, 0, false);
}

int32_t hx_prefix_cache_n_blocks(const hx_prefix_cache *c)
{
    return c->n_nodes;
}

/* ---- introspection ---- */

int32_t hx_prefix_cache_list_blocks(const hx_prefix_cache *c, int32_t *ids, int32_t max)
{
    int32_t i = 0;
    for (const pc_node *n = c->lru_head; n && i < max; n = n->next) ids[i++] = n->block;
    return c->n_nodes;
}

/* Checks the links and sibling uniqueness of one node's children and adds their number to
 * *n_kids; pos maps block id to LRU list position (-1: not listed). */
static hx_status check_node(const hx_prefix_cache *c, const pc_node *n, const int32_t *pos,
                            int32_t *n_kids, hx_err *err)
{
    *n_kids += n->n_kids;
    for (int32_t i = 0; i < n->n_kids; i++) {
        const pc_node *k = n->kids[i];
        if (k->block < 0 || k->block >= c->pool->store.n_blocks || pos[k->block] < 0)
            return hx_err_set(err, HX_E_INVALID, "block %d: in the tree, not in the LRU list",
                              k->block);
        if (k->parent != n)
            return hx_err_set(err, HX_E_INVALID, "block %d: child of %d has another parent",
                              k->block, n->block);
        if (n->parent && pos[k->block] >= pos[n->block])
            return hx_err_set(err, HX_E_INVALID,
                              "block %d: LRU position %d is not before its parent %d's (%d)",
                              k->block, pos[k->block], n->block, pos[n->block]);
        if (k->n_tok < 1 || k->n_tok > c->block_tokens ||
            (k->n_tok < c->block_tokens && k->n_kids > 0))
            return hx_err_set(err, HX_E_INVALID, "block %d: %d ids, %d children", k->block,
                              k->n_tok, k->n_kids);
        if (k->hash != hash_tokens(k->tokens, k->n_tok))
            return hx_err_set(err, HX_E_INVALID, "block %d: stale token hash", k->block);
        if (k->block_swa >= 0 && (!c->pool_swa || k->block_swa >= c->pool_swa->store.n_blocks ||
                                  c->pool_swa->refcount[k->block_swa] < 1))
            return hx_err_set(err, HX_E_INVALID, "block %d: sliding block %d is not held",
                              k->block, k->block_swa);
        for (int32_t j = 0; j < i; j++)
            if (n->kids[j]->n_tok == k->n_tok &&
                memcmp(n->kids[j]->tokens, k->tokens, (size_t)k->n_tok * sizeof(int32_t)) == 0)
                return hx_err_set(err, HX_E_INVALID, "blocks %d and %d: siblings, same tokens",
                                  n->kids[j]->block, k->block);
    }
    return HX_OK;
}

hx_status hx_prefix_cache_check(const hx_prefix_cache *c, hx_err *err)
{
    hx_status st = HX_OK;
    const int32_t n_pool = c->pool->store.n_blocks;
    int32_t *pos = hx_alloc((size_t)n_pool * sizeof *pos);   /* block id -> LRU position */
    if (!pos) return hx_err_set(err, HX_E_NOMEM, "out of memory for the prefix cache check");
    for (int32_t i = 0; i < n_pool; i++) pos[i] = -1;

    int32_t count = 0, n_kids = 0;
    uint64_t last_tick = 0;
    for (const pc_node *n = c->lru_head, *prev = NULL; n; prev = n, n = n->next, count++) {
        if (n->prev != prev || count > c->n_nodes) {
            st = hx_err_set(err, HX_E_INVALID, "LRU list broken at position %d", count);
            goto done;
        }
        if (n->block < 0 || n->block >= n_pool || !n->parent) {
            st = hx_err_set(err, HX_E_INVALID, "LRU node %d holds block %d of %d", count,
                            n->block, n_pool);
            goto done;
        }
        if (pos[n->block] >= 0) {
            st = hx_err_set(err, HX_E_INVALID, "block %d held by two nodes", n->block);
            goto done;
        }
        if (c->pool->refcount[n->block] < 1) {
            st = hx_err_set(err, HX_E_INVALID, "block %d cached with pool refcount %d",
                            n->block, c->pool->refcount[n->block]);
            goto done;
        }
        if (n->last_used < last_tick) {
            st = hx_err_set(err, HX_E_INVALID, "block %d: LRU list out of tick order",
                            n->block);
            goto done;
        }
        last_tick = n->last_used;
        pos[n->block] = count;
    }
    if (count != c->n_nodes || (c->lru_tail && c->lru_tail->next)) {
        st = hx_err_set(err, HX_E_INVALID, "LRU list holds %d nodes, the count says %d", count,
                        c->n_nodes);
        goto done;
    }
    for (int32_t i = 0; i < c->n_trees && st == HX_OK; i++) {
        const pc_node *r = c->trees[i].root;
        if (r->parent || r->n_kids == 0) {
            st = hx_err_set(err, HX_E_INVALID, "adapter %llu: root is empty or has a parent",
                            (unsigned long long)c->trees[i].adapter);
            goto done;
        }
        for (int32_t j = 0; j < i; j++)
            if (c->trees[j].adapter == c->trees[i].adapter) {
                st = hx_err_set(err, HX_E_INVALID, "adapter %llu has two trees",
                                (unsigned long long)c->trees[i].adapter);
                goto done;
            }
        st = check_node(c, r, pos, &n_kids, err);
    }
    for (const pc_node *n = c->lru_head; n && st == HX_OK; n = n->next)
        st = check_node(c, n, pos, &n_kids, err);
    /* Every listed node is some node's child exactly once, or a node is unreachable. */
    if (st == HX_OK && n_kids != c->n_nodes)
        st = hx_err_set(err, HX_E_INVALID, "the trees link %d nodes, the LRU list holds %d",
                        n_kids, c->n_nodes);
done:
    hx_free(pos);
    return st;
}
