/* vocab.c - the tokenizer's hash tables: token text → id and (id, id) → merge.
 *
 * Both are open-addressing tables with linear probing, sized to a power of two at least twice
 * the number of keys, so probes stay short and a lookup never loops. The text map stores only
 * ids and compares against the tokens' pool texts, so it holds no copies. Built once while
 * loading; read-only afterwards (safe to share across threads). */
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

/* A fast 64-bit hash for short strings: 8 bytes at a time, then a final avalanche. */
uint64_t hx_tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x2545F4914F6CDD1Dull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    if (n) memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    return h;
}

static uint32_t table_size(uint32_t n)
{
    uint32_t cap = 16;
    while (cap < 2u * n + 1u) cap <<= 1;
    return cap;
}

/* ---- text → id ---- */

hx_status hx_tok_strmap_build(hx_tokenizer *t, hx_err *err)
{
    uint32_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) n += (t->tok[i].attr & HX_TOKA_MODEL) != 0;
    uint32_t cap = table_size(n);
    hx_tok_strmap *m = &t->vocab;
    hx_tok_strmap_free(m);
    m->slots = hx_alloc((size_t)cap * sizeof *m->slots);
    if (!m->slots) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    memset(m->slots, 0xFF, (size_t)cap * sizeof *m->slots);
    m->mask = cap - 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const hx_tok_entry *e = &t->tok[i];
        if (!(e->attr & HX_TOKA_MODEL)) continue;
        uint32_t h = (uint32_t)hx_tok_hash(t->pool + e->off, e->len) & m->mask;
        for (;; h = (h + 1) & m->mask) {
            int32_t id = m->slots[h];
            if (id < 0) {
                m->slots[h] = i;
                break;
            }
            /* A text listed twice keeps its first id; loaders reject duplicates earlier. */
            if (t->tok[id].len == e->len && !memcmp(t->pool + t->tok[id].off, t->pool + e->off,
                                                    e->len))
                break;
        }
    }
    return HX_OK;
}

int32_t hx_tok_strmap_get(const hx_tokenizer *t, const char *s, size_t n)
{
    const hx_tok_strmap *m = &t->vocab;
    if (!m->slots) return -1;
    uint32_t h = (uint32_t)hx_tok_hash(s, n) & m->mask;
    for (;; h = (h + 1) & m->mask) {
        int32_t id = m->slots[h];
        if (id < 0) return -1;
        const hx_tok_entry *e = &t->tok[id];
        if (e->len == n && !memcmp(t->pool + e->off, s, n)) return id;
    }
}

void hx_tok_strmap_free(hx_tok_strmap *m)
{
    hx_free(m->slots);
    m->slots = NULL;
}

/* ---- (id, id) → (rank, merged id) ---- */

static uint32_t pair_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    key ^= key >> 33;
    return (uint32_t)key;
}

hx_status hx_tok_merges_init(hx_tok_mergemap *m, uint32_t n_expected)
{
    uint32_t cap = table_size(n_expected);
    m->keys = hx_calloc(cap, sizeof *m->keys);
    m->rank = hx_alloc((size_t)cap * sizeof *m->rank);
    m->merged = hx_alloc((size_t)cap * sizeof *m->merged);
    m->mask = cap - 1;
    m->n = 0;
    if (!m->keys || !m->rank || !m->merged) {
        hx_tok_merges_free(m);
        return HX_E_NOMEM;
    }
    return HX_OK;
}

static hx_status merges_grow(hx_tok_mergemap *m)
{
    hx_tok_mergemap bigger;
    if (hx_tok_merges_init(&bigger, (m->mask + 1)) != HX_OK) return HX_E_NOMEM;
    for (uint32_t i = 0; i <= m->mask; i++) {
        if (!m->keys[i]) continue;
        uint64_t key = m->keys[i] - 1;
        (void)hx_tok_merges_put(&bigger, (int32_t)(key >> 32), (int32_t)(uint32_t)key, m->rank[i],
                                m->merged[i]);
    }
    hx_tok_merges_free(m);
    *m = bigger;
    return HX_OK;
}

hx_status hx_tok_merges_put(hx_tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t merged)
{
    if (2u * (m->n + 1) > m->mask + 1 && merges_grow(m) != HX_OK) return HX_E_NOMEM;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint32_t h = pair_hash(key) & m->mask;
    while (m->keys[h] && m->keys[h] != key) h = (h + 1) & m->mask;
    if (!m->keys[h]) m->n++;
    m->keys[h] = key;
    m->rank[h] = rank;
    m->merged[h] = merged;
    return HX_OK;
}

bool hx_tok_merges_get(const hx_tok_mergemap *m, int32_t a, int32_t b, uint32_t *rank,
                       int32_t *merged)
{
    if (!m->keys) return false;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t h = pair_hash(key) & m->mask;; h = (h + 1) & m->mask) {
        if (m->keys[h] == key) {
            *rank = m->rank[h];
            *merged = m->merged[h];
            return true;
        }
        if (!m->keys[h]) return false;
    }
}

void hx_tok_merges_free(hx_tok_mergemap *m)
{
    hx_free(m->keys);
    hx_free(m->rank);
    hx_free(m->merged);
    m->keys = NULL;
    m->rank = NULL;
    m->merged = NULL;
}
