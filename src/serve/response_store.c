/* response_store.c - stored responses by id: a hash table of entries on one recency list.
 *
 * Each entry is one allocation: the bookkeeping, the id and both JSON texts. Entries sit in a
 * chained hash table (buckets double when the entries outnumber them) and on a doubly linked
 * list from the most to the least recently used. Because expiry counts from the last use, the
 * list's tail is always the entry to expire first as well as the one to evict first, so both
 * sweeps only ever look at the tail. Everything runs under one mutex; serializing a new entry
 * happens before taking it, parsing a read entry under it (the texts are not shared out). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "serve/response_store.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* ---- types ---- */

typedef struct entry {
    struct entry *chain;        /* the next entry in this hash bucket */
    struct entry *newer, *older; /* the recency list */
    uint64_t      hash;
    double        used_ms;      /* last stored or read */
    size_t        bytes;        /* the whole allocation, counted against the cap */
    size_t        response_len, conversation_len;
    char         *response, *conversation; /* NUL-terminated texts inside the allocation */
    char          id[];
} entry;

struct hx_response_store {
    pthread_mutex_t lock;     /* guards everything below */
    size_t          max_bytes;
    double          ttl_ms;
    entry         **buckets;  /* n_buckets chains, a power of two */
    size_t          n_buckets;
    size_t          n_entries, bytes;
    entry          *newest, *oldest;
};

/* ---- lifetime ---- */

hx_status hx_response_store_init(size_t max_bytes, double ttl_ms, hx_response_store **out,
                                 hx_err *err)
{
    if (max_bytes == 0 || !(ttl_ms > 0))
        return hx_err_set(err, HX_E_INVALID,
                          "response store: the byte cap and the expiry must be positive (got %zu "
                          "bytes, %g ms)", max_bytes, ttl_ms);
    hx_response_store *rs = hx_calloc(1, sizeof *rs);
    if (rs) rs->buckets = hx_calloc(64, sizeof *rs->buckets);
    if (!rs || !rs->buckets) {
        hx_free(rs);
        return hx_err_set(err, HX_E_NOMEM, "response store: out of memory");
    }
    pthread_mutex_init(&rs->lock, NULL);
    rs->n_buckets = 64;
    rs->max_bytes = max_bytes;
    rs->ttl_ms = ttl_ms;
    *out = rs;
    return HX_OK;
}

void hx_response_store_free(hx_response_store *rs)
{
    if (!rs) return;
    for (entry *e = rs->newest, *next; e; e = next) {
        next = e->older;
        hx_free(e);
    }
    hx_free(rs->buckets);
    pthread_mutex_destroy(&rs->lock);
    hx_free(rs);
}

/* ---- the table and the list (called with the lock held) ---- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

static entry *find(hx_response_store *rs, const char *id, uint64_t hash)
{
    for (entry *e = rs->buckets[hash & (rs->n_buckets - 1)]; e; e = e->chain)
        if (e->hash == hash && strcmp(e->id, id) == 0) return e;
    return NULL;
}

static void list_unlink(hx_response_store *rs, entry *e)
{
    if (e->newer) e->newer->older = e->older;
    else rs->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else rs->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void list_push_newest(hx_response_store *rs, entry *e)
{
    e->newer = NULL;
    e->older = rs->newest;
    if (rs->newest) rs->newest->newer = e;
    else rs->oldest = e;
    rs->newest = e;
}

/* Takes e out of the table and the list and frees it. */
static void remove_entry(hx_response_store *rs, entry *e)
{
    entry **pp = &rs->buckets[e->hash & (rs->n_buckets - 1)];
    while (*pp != e) pp = &(*pp)->chain;
    *pp = e->chain;
    list_unlink(rs, e);
    rs->n_entries--;
    rs->bytes -= e->bytes;
    hx_free(e);
}

/* Doubles the buckets when the entries outnumber them; a failed growth only makes chains
 * longer. */
static void maybe_grow(hx_response_store *rs)
{
    if (rs->n_entries < rs->n_buckets) return;
    const size_t n = rs->n_buckets * 2;
    entry **b = hx_calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < rs->n_buckets; i++)
        for (entry *e = rs->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    hx_free(rs->buckets);
    rs->buckets = b;
    rs->n_buckets = n;
}

static bool expired(const hx_response_store *rs, const entry *e, double now_ms)
{
    return now_ms - e->used_ms >= rs->ttl_ms;
}

/* Drops expired entries, then the least recently used until the bytes fit the cap. */
static void sweep(hx_response_store *rs, double now_ms)
{
    while (rs->oldest && expired(rs, rs->oldest, now_ms)) remove_entry(rs, rs->oldest);
    while (rs->oldest && rs->bytes > rs->max_bytes) remove_entry(rs, rs->oldest);
}

/* The live entry of id, or NULL; an expired one found on the way is dropped. */
static entry *lookup(hx_response_store *rs, const char *id, double now_ms)
{
    entry *e = find(rs, id, fnv1a(id));
    if (e && expired(rs, e, now_ms)) {
        remove_entry(rs, e);
        e = NULL;
    }
    return e;
}

/* ---- operations ---- */

/* A new entry holding id and both texts, serialized into one allocation. NULL: out of memory or
 * not serializable. */
static entry *entry_new(const char *id, json_t *response, json_t *conversation)
{
    const size_t id_len = strlen(id);
    const size_t n_resp = json_dumpb(response, NULL, 0, DUMP_FLAGS);
    const size_t n_conv = json_dumpb(conversation, NULL, 0, DUMP_FLAGS);
    if (n_resp == 0 || n_conv == 0) return NULL;
    const size_t bytes = sizeof(entry) + id_len + 1 + n_resp + 1 + n_conv + 1;
    entry *e = hx_alloc(bytes);
    if (!e) return NULL;
    *e = (entry){.hash = fnv1a(id), .bytes = bytes, .response_len = n_resp,
                 .conversation_len = n_conv};
    memcpy(e->id, id, id_len + 1);
    e->response = e->id + id_len + 1;
    e->conversation = e->response + n_resp + 1;
    json_dumpb(response, e->response, n_resp, DUMP_FLAGS);
    json_dumpb(conversation, e->conversation, n_conv, DUMP_FLAGS);
    e->response[n_resp] = e->conversation[n_conv] = '\0';
    return e;
}

hx_status hx_response_store_put(hx_response_store *rs, const char *id, json_t *response,
                                json_t *conversation, double now_ms, hx_err *err)
{
    entry *e = entry_new(id, response, conversation);
    if (!e) return hx_err_set(err, HX_E_NOMEM, "response store: out of memory storing %.64s", id);
    pthread_mutex_lock(&rs->lock);
    entry *old = find(rs, id, e->hash);
    if (old) remove_entry(rs, old);
    if (e->bytes > rs->max_bytes) {
        pthread_mutex_unlock(&rs->lock);
        const size_t bytes = e->bytes;
        hx_free(e);
        return hx_err_set(err, HX_E_INVALID,
                          "response store: %.64s takes %zu bytes, more than the store's cap of "
                          "%zu bytes", id, bytes, rs->max_bytes);
    }
    e->used_ms = now_ms;
    e->chain = rs->buckets[e->hash & (rs->n_buckets - 1)];
    rs->buckets[e->hash & (rs->n_buckets - 1)] = e;
    list_push_newest(rs, e);
    rs->n_entries++;
    rs->bytes += e->bytes;
    sweep(rs, now_ms); /* e is the newest and fits: it stays */
    maybe_grow(rs);
    pthread_mutex_unlock(&rs->lock);
    return HX_OK;
}

hx_status hx_response_store_get(hx_response_store *rs, const char *id, double now_ms,
                                json_t **response, json_t **conversation)
{
    pthread_mutex_lock(&rs->lock);
    entry *e = lookup(rs, id, now_ms);
    if (!e) {
        pthread_mutex_unlock(&rs->lock);
        return HX_E_NOTFOUND;
    }
    e->used_ms = now_ms;
    list_unlink(rs, e);
    list_push_newest(rs, e);
    /* JSON_ALLOW_NUL: the texts came from requests loaded with it, so "\u0000" may be inside. */
    json_t *r = response ? json_loadb(e->response, e->response_len, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *c = conversation
                    ? json_loadb(e->conversation, e->conversation_len, JSON_ALLOW_NUL, NULL)
                    : NULL;
    pthread_mutex_unlock(&rs->lock);
    if ((response && !r) || (conversation && !c)) { /* the texts are ours: only memory fails */
        json_decref(r);
        json_decref(c);
        return HX_E_NOMEM;
    }
    if (response) *response = r;
    if (conversation) *conversation = c;
    return HX_OK;
}

hx_status hx_response_store_delete(hx_response_store *rs, const char *id, double now_ms)
{
    pthread_mutex_lock(&rs->lock);
    entry *e = lookup(rs, id, now_ms);
    const bool found = e != NULL;
    if (found) remove_entry(rs, e);
    pthread_mutex_unlock(&rs->lock);
    return found ? HX_OK : HX_E_NOTFOUND;
}

void hx_response_store_usage(hx_response_store *rs, size_t *n_entries, size_t *n_bytes)
{
    pthread_mutex_lock(&rs->lock);
    if (n_entries) *n_entries = rs->n_entries;
    if (n_bytes) *n_bytes = rs->bytes;
    pthread_mutex_unlock(&rs->lock);
}
