/* bpe.c - the BPE model: one pre-token in, token ids out.
 *
 * Two merge rules share the symbol list and heap here:
 *   ranked merges (tokenizer.json, GGUF "gpt2"): symbols start as the word's characters (or,
 *     for byte-level vocabularies, the characters standing for its bytes); the pair with the
 *     lowest merge rank, leftmost on ties, merges first, exactly Hugging Face's Word::merge_all;
 *   scores (GGUF "llama", SentencePiece): any adjacent pair whose concatenation is a token may
 *     merge; the highest score goes first, leftmost on ties; leftovers fall back to bytes.
 * Both are O(n log n) in the word length: a binary heap of candidate merges, with stale
 * entries dropped when popped. Results for short words are kept in a direct-mapped cache of
 * HX_TOK_CACHE_SLOTS entries, the only state a tokenizer mutates, behind cache_lock. */
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

/* ---- cache ---- */

hx_status hx_tok_cache_init(hx_tokenizer *t)
{
    t->cache = hx_calloc(HX_TOK_CACHE_SLOTS, sizeof *t->cache);
    if (!t->cache) return HX_E_NOMEM;
    if (pthread_mutex_init(&t->cache_lock, NULL) != 0) return HX_E_NOMEM;
    t->cache_lock_ok = true;
    return HX_OK;
}

void hx_tok_cache_free(hx_tokenizer *t)
{
    if (t->cache)
        for (size_t i = 0; i < HX_TOK_CACHE_SLOTS; i++) hx_free(t->cache[i].blob);
    hx_free(t->cache);
    t->cache = NULL;
    if (t->cache_lock_ok) pthread_mutex_destroy(&t->cache_lock);
    t->cache_lock_ok = false;
}

/* The lock is the one mutable member of a shared tokenizer: taking it through a const pointer
 * is the point of it. */
static pthread_mutex_t *cache_mutex(const hx_tokenizer *t)
{
    return (pthread_mutex_t *)&t->cache_lock;
}

static bool cache_get(const hx_tokenizer *t, uint64_t h, const char *s, size_t n, hx_tok_ids *out,
                      hx_status *st)
{
    int32_t ids[HX_TOK_CACHE_MAX_KEY * 2];
    size_t n_ids = 0;
    bool hit = false;
    hx_tok_cache_slot *sl = &t->cache[h & (HX_TOK_CACHE_SLOTS - 1)];
    pthread_mutex_lock(cache_mutex(t));
    if (sl->hash == h && sl->key_len == n && !memcmp(sl->blob, s, n)) {
        n_ids = sl->n_ids;
        memcpy(ids, sl->blob + n, n_ids * sizeof *ids);
        hit = true;
    }
    pthread_mutex_unlock(cache_mutex(t));
    *st = HX_OK;
    for (size_t i = 0; hit && i < n_ids && *st == HX_OK; i++) *st = hx_tok_ids_push(out, ids[i]);
    return hit;
}

/* Remembers ids for s; a failed allocation just skips the cache. */
static void cache_put(const hx_tokenizer *t, uint64_t h, const char *s, size_t n,
                      const int32_t *ids, size_t n_ids)
{
    if (n_ids > HX_TOK_CACHE_MAX_KEY * 2) return;
    char *blob = hx_alloc(n + n_ids * sizeof *ids + 1); /* + 1: never a zero-byte block */
    if (!blob) return;
    memcpy(blob, s, n);
    if (n_ids) memcpy(blob + n, ids, n_ids * sizeof *ids);
    hx_tok_cache_slot *sl = &t->cache[h & (HX_TOK_CACHE_SLOTS - 1)];
    pthread_mutex_lock(cache_mutex(t));
    char *old = sl->blob;
    sl->blob = blob;
    sl->hash = h;
    sl->key_len = (uint16_t)n;
    sl->n_ids = (uint16_t)n_ids;
    pthread_mutex_unlock(cache_mutex(t));
    hx_free(old);
}

/* ---- work buffers ---- */

typedef struct {
    uint32_t rank; /* merge rank, or the score's order key for SPM */
    uint32_t pos;  /* left symbol */
    uint32_t aux;  /* SPM: right symbol */
    uint32_t size; /* SPM: bytes of the pair when queued (staleness check) */
    int32_t  id;   /* the merged token */
    float    score;
} heap_item;

static hx_status work_reserve(hx_tok_bpework *w, size_t n)
{
    if (n <= w->cap) return HX_OK;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *ids = hx_realloc(w->ids, cap * sizeof *ids);
    if (ids) w->ids = ids;
    int32_t *prev = hx_realloc(w->prev, cap * sizeof *prev);
    if (prev) w->prev = prev;
    int32_t *next = hx_realloc(w->next, cap * sizeof *next);
    if (next) w->next = next;
    uint32_t *start = hx_realloc(w->start, cap * sizeof *start);
    if (start) w->start = start;
    uint32_t *len = hx_realloc(w->len, cap * sizeof *len);
    if (len) w->len = len;
    if (!ids || !prev || !next || !start || !len) return HX_E_NOMEM;
    w->cap = cap;
    return HX_OK;
}

void hx_tok_bpework_free(hx_tok_bpework *w)
{
    hx_free(w->ids);
    hx_free(w->prev);
    hx_free(w->next);
    hx_free(w->start);
    hx_free(w->len);
    hx_free(w->heap);
    hx_tok_text_free(&w->word);
    memset(w, 0, sizeof *w);
}

/* ---- binary heap of merge candidates ---- */

/* a before b: ranked merges by (rank, pos); SPM by (higher score, pos). */
static bool heap_before(const heap_item *a, const heap_item *b, bool spm)
{
    if (spm) {
        if (a->score != b->score) return a->score > b->score;
        return a->pos < b->pos;
    }
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->pos < b->pos;
}

static hx_status heap_push(hx_tok_bpework *w, size_t *n, heap_item it, bool spm)
{
    if (*n == w->heap_cap) {
        size_t cap = w->heap_cap ? 2 * w->heap_cap : 64;
        heap_item *h = hx_realloc(w->heap, cap * sizeof *h);
        if (!h) return HX_E_NOMEM;
        w->heap = h;
        w->heap_cap = cap;
    }
    heap_item *h = w->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_before(&it, &h[p], spm)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
    return HX_OK;
}

static heap_item heap_pop(hx_tok_bpework *w, size_t *n, bool spm)
{
    heap_item *h = w->heap;
    heap_item top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_before(&h[c + 1], &h[c], spm)) c++;
        if (!heap_before(&h[c], &last, spm)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* ---- ranked merges (Hugging Face BPE) ---- */

/* Adds the token for one character the way Hugging Face's merge_word does, including its
 * handling of unknown characters: byte fallback first, else <unk> (fused when fuse_unk) kept
 * pending until the next known character. */
static hx_status add_char(const hx_tokenizer *t, hx_tok_bpework *w, size_t *n, const char *c,
                          size_t cl, bool *unk_pending)
{
    int32_t id = hx_tok_strmap_get(t, c, cl);
    if (id >= 0) {
        if (*unk_pending) {
            w->ids[(*n)++] = t->unk_id;
            *unk_pending = false;
        }
        w->ids[(*n)++] = id;
        return HX_OK;
    }
    if (t->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < cl && all; i++) all = t->byte_tok[(uint8_t)c[i]] >= 0;
        if (all) {
            /* Hugging Face leaves a pending <unk> pending here, so it lands after these. */
            for (size_t i = 0; i < cl; i++) w->ids[(*n)++] = t->byte_tok[(uint8_t)c[i]];
            return HX_OK;
        }
    }
    if (t->unk_id >= 0) {
        if (*unk_pending && !t->fuse_unk) w->ids[(*n)++] = t->unk_id;
        *unk_pending = true;
    }
    return HX_OK;
}

/* Initial symbols of word s[0..n) (already in the vocabulary's alphabet). */
static hx_status initial_symbols(const hx_tokenizer *t, hx_tok_bpework *w, const char *s, size_t n,
                                 size_t *n_sym)
{
    const char *pre = t->pool + t->cont_off, *suf = t->pool + t->eow_off;
    char buf[HX_TOK_MAX_TOKEN_BYTES + 8];
    bool unk_pending = false;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        (void)hx_tok_utf8_next(s + i, n - i, &adv);
        const char *c = s + i;
        size_t cl = adv;
        bool first = i == 0, last = i + adv == n;
        if ((t->cont_len && !first) || (t->eow_len && last)) {
            size_t bl = 0;
            if (t->cont_len && !first && t->cont_len + 8 < sizeof buf) {
                memcpy(buf, pre, t->cont_len);
                bl = t->cont_len;
            }
            memcpy(buf + bl, c, cl);
            bl += cl;
            if (t->eow_len && last && bl + t->eow_len <= sizeof buf) {
                memcpy(buf + bl, suf, t->eow_len);
                bl += t->eow_len;
            }
            c = buf;
            cl = bl;
        }
        /* Each character yields at most cl (≤ 4 + affixes) symbols; reserve for the worst. */
        if (work_reserve(w, k + cl + 2)) return HX_E_NOMEM;
        if (add_char(t, w, &k, c, cl, &unk_pending)) return HX_E_NOMEM;
        i += adv;
    }
    if (unk_pending) {
        if (work_reserve(w, k + 1)) return HX_E_NOMEM;
        w->ids[k++] = t->unk_id;
    }
    *n_sym = k;
    return HX_OK;
}

static hx_status queue_pair(const hx_tokenizer *t, hx_tok_bpework *w, size_t *nh, int32_t left)
{
    int32_t right = w->next[left];
    if (left < 0 || right < 0) return HX_OK;
    uint32_t rank;
    int32_t merged;
    if (!hx_tok_merges_get(&t->merges, w->ids[left], w->ids[right], &rank, &merged)) return HX_OK;
    heap_item it = { .rank = rank, .pos = (uint32_t)left, .id = merged };
    return heap_push(w, nh, it, false);
}

static hx_status merge_ranked(const hx_tokenizer *t, hx_tok_bpework *w, size_t n_sym)
{
    size_t nh = 0;
    for (size_t i = 0; i < n_sym; i++) {
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n_sym ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n_sym; i++)
        if (queue_pair(t, w, &nh, (int32_t)i)) return HX_E_NOMEM;
    while (nh) {
        heap_item top = heap_pop(w, &nh, false);
        int32_t l = (int32_t)top.pos, r;
        if (w->ids[l] < 0 || (r = w->next[l]) < 0) continue;
        uint32_t rank;
        int32_t merged;
        /* Stale entry: the pair at this position changed since it was queued. */
        if (!hx_tok_merges_get(&t->merges, w->ids[l], w->ids[r], &rank, &merged) ||
            merged != top.id)
            continue;
        w->ids[l] = merged;
        w->ids[r] = -1;
        w->next[l] = w->next[r];
        if (w->next[r] >= 0) w->prev[w->next[r]] = l;
        if (w->prev[l] >= 0 && queue_pair(t, w, &nh, w->prev[l])) return HX_E_NOMEM;
        if (queue_pair(t, w, &nh, l)) return HX_E_NOMEM;
    }
    return HX_OK;
}

/* ---- scores (SentencePiece) ---- */

static hx_status queue_bigram(const hx_tokenizer *t, hx_tok_bpework *w, size_t *nh, const char *s,
                              int32_t left)
{
    if (left < 0) return HX_OK;
    int32_t right = w->next[left];
    if (right < 0) return HX_OK;
    uint32_t size = w->len[left] + w->len[right];
    int32_t id = hx_tok_strmap_get(t, s + w->start[left], size);
    if (id < 0 || !(t->tok[id].attr & HX_TOKA_MERGE)) return HX_OK;
    heap_item it = { .pos = (uint32_t)left, .aux = (uint32_t)right, .size = size, .id = id,
                     .score = t->scores[id] };
    return heap_push(w, nh, it, true);
}

static hx_status spm_word(const hx_tokenizer *t, const char *s, size_t n, hx_tok_bpework *w,
                          hx_tok_ids *out)
{
    size_t k = 0, nh = 0;
    if (work_reserve(w, n + 1)) return HX_E_NOMEM;
    for (size_t i = 0; i < n;) {
        size_t adv;
        (void)hx_tok_utf8_next(s + i, n - i, &adv);
        w->start[k] = (uint32_t)i;
        w->len[k] = (uint32_t)adv;
        w->prev[k] = (int32_t)k - 1;
        w->next[k] = -1;
        if (k) w->next[k - 1] = (int32_t)k;
        k++;
        i += adv;
    }
    for (size_t i = 0; i + 1 < k; i++)
        if (queue_bigram(t, w, &nh, s, (int32_t)i)) return HX_E_NOMEM;
    while (nh) {
        heap_item top = heap_pop(w, &nh, true);
        int32_t l = (int32_t)top.pos, r = (int32_t)top.aux;
        if (w->len[l] == 0 || w->len[r] == 0 || w->next[l] != r ||
            w->len[l] + w->len[r] != top.size)
            continue;
        w->len[l] += w->len[r];
        w->len[r] = 0;
        w->next[l] = w->next[r];
        if (w->next[r] >= 0) w->prev[w->next[r]] = l;
        if (queue_bigram(t, w, &nh, s, w->prev[l]) || queue_bigram(t, w, &nh, s, l))
            return HX_E_NOMEM;
    }
    for (int32_t i = k ? 0 : -1; i >= 0; i = w->next[i]) {
        const char *p = s + w->start[i];
        int32_t id = hx_tok_strmap_get(t, p, w->len[i]);
        if (id >= 0) {
            if (hx_tok_ids_push(out, id)) return HX_E_NOMEM;
            continue;
        }
        bool all = t->byte_fallback;
        for (uint32_t j = 0; j < w->len[i] && all; j++) all = t->byte_tok[(uint8_t)p[j]] >= 0;
        if (all) {
            for (uint32_t j = 0; j < w->len[i]; j++)
                if (hx_tok_ids_push(out, t->byte_tok[(uint8_t)p[j]])) return HX_E_NOMEM;
        } else if (t->unk_id >= 0 && hx_tok_ids_push(out, t->unk_id)) {
            return HX_E_NOMEM;
        }
    }
    return HX_OK;
}

/* ---- entry point ---- */

/* Maps raw bytes into the byte-level alphabet in w->word. */
static hx_status map_word(const char *s, size_t n, hx_tok_bpework *w)
{
    w->word.len = 0;
    if (hx_tok_text_reserve(&w->word, 2 * n + 1)) return HX_E_NOMEM;
    for (size_t i = 0; i < n; i++)
        w->word.len +=
            hx_tok_utf8_put(hx_tok_byte_to_cp((uint8_t)s[i]), w->word.data + w->word.len);
    return HX_OK;
}

hx_status hx_tok_bpe_word(const hx_tokenizer *t, const char *s, size_t n, bool need_map,
                          hx_tok_bpework *w, hx_tok_ids *out)
{
    if (n == 0) return HX_OK;
    uint64_t h = 0;
    hx_status st;
    const bool cached = t->cache && n <= HX_TOK_CACHE_MAX_KEY;
    if (cached) {
        h = (hx_tok_hash(s, n) ^ (need_map ? 0x9E3779B97F4A7C15ull : 0)) | 1;
        if (cache_get(t, h, s, n, out, &st)) return st;
    }
    size_t first = out->n;
    if (t->kind == HX_TOK_KIND_SPM) {
        st = spm_word(t, s, n, w, out);
        if (st == HX_OK && cached) cache_put(t, h, s, n, out->n > first ? out->ids + first : NULL,
                                           out->n - first);
        return st;
    }
    const char *word = s;
    size_t wl = n;
    size_t n_sym = 0;
    const bool fast = need_map && !t->cont_len && !t->eow_len && !t->ignore_merges;
    if (fast) {
        /* One symbol per byte: its byte-level character's token. */
        bool all = true;
        if (work_reserve(w, n)) return HX_E_NOMEM;
        for (size_t i = 0; i < n && all; i++) all = (w->ids[i] = t->bl_tok[(uint8_t)s[i]]) >= 0;
        n_sym = n;
        if (!all) {
            if (map_word(s, n, w)) return HX_E_NOMEM;
            word = w->word.data;
            wl = w->word.len;
            if (initial_symbols(t, w, word, wl, &n_sym)) return HX_E_NOMEM;
        }
    } else {
        if (need_map) {
            if (map_word(s, n, w)) return HX_E_NOMEM;
            word = w->word.data;
            wl = w->word.len;
        }
        int32_t whole;
        if (t->ignore_merges && (whole = hx_tok_strmap_get(t, word, wl)) >= 0) {
            if (hx_tok_ids_push(out, whole)) return HX_E_NOMEM;
            if (cached) cache_put(t, h, s, n, &whole, 1);
            return HX_OK;
        }
        if (initial_symbols(t, w, word, wl, &n_sym)) return HX_E_NOMEM;
    }
    if (merge_ranked(t, w, n_sym)) return HX_E_NOMEM;
    for (size_t i = 0; i < n_sym; i = w->next[i] < 0 ? n_sym : (size_t)w->next[i])
        if (hx_tok_ids_push(out, w->ids[i])) return HX_E_NOMEM;
    if (cached) cache_put(t, h, s, n, out->n > first ? out->ids + first : NULL, out->n - first);
    return HX_OK;
}
