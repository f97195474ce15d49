/* added.c - added and special tokens: cut out of the text before anything else runs.
 *
 * Two byte tries hold the tokens' contents: one for tokens matched on the raw text
 * ("normalized": false, and every token from GGUF) and one for tokens matched on the normalized
 * text, whose patterns are their contents after the normalizer. Matching is leftmost-longest,
 * like the Aho-Corasick automaton Hugging Face builds, and the lstrip/rstrip/single_word rules
 * are applied to each match exactly as its AddedVocabulary does, quirks included (scanning
 * resumes after the match itself, not after the whitespace rstrip swallowed). */
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

#include <utf8proc.h>

/* ---- the trie ---- */

static uint32_t edge_hash(uint64_t key)
{
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 29);
}

static int64_t trie_child(const hx_tok_trie *tr, uint32_t node, uint8_t byte)
{
    if (!tr->ekeys) return -1;
    uint64_t key = ((uint64_t)node << 8 | byte) + 1;
    for (uint32_t h = edge_hash(key) & tr->emask;; h = (h + 1) & tr->emask) {
        if (tr->ekeys[h] == key) return tr->evals[h];
        if (!tr->ekeys[h]) return -1;
    }
}

static hx_status trie_grow_edges(hx_tok_trie *tr)
{
    uint32_t cap = tr->ekeys ? 2 * (tr->emask + 1) : 64;
    uint64_t *keys = hx_calloc(cap, sizeof *keys);
    uint32_t *vals = hx_alloc((size_t)cap * sizeof *vals);
    if (!keys || !vals) {
        hx_free(keys);
        hx_free(vals);
        return HX_E_NOMEM;
    }
    for (uint32_t i = 0; tr->ekeys && i <= tr->emask; i++) {
        if (!tr->ekeys[i]) continue;
        uint32_t h = edge_hash(tr->ekeys[i]) & (cap - 1);
        while (keys[h]) h = (h + 1) & (cap - 1);
        keys[h] = tr->ekeys[i];
        vals[h] = tr->evals[i];
    }
    hx_free(tr->ekeys);
    hx_free(tr->evals);
    tr->ekeys = keys;
    tr->evals = vals;
    tr->emask = cap - 1;
    return HX_OK;
}

static hx_status trie_new_node(hx_tok_trie *tr, uint32_t *out)
{
    if (tr->n_nodes == tr->cap_nodes) {
        uint32_t cap = tr->cap_nodes ? 2 * tr->cap_nodes : 64;
        int32_t *term = hx_realloc(tr->term, (size_t)cap * sizeof *term);
        if (!term) return HX_E_NOMEM;
        tr->term = term;
        tr->cap_nodes = cap;
    }
    tr->term[tr->n_nodes] = -1;
    *out = tr->n_nodes++;
    return HX_OK;
}

/* Inserts s[0..n) ending in added index idx; the first token with a given content keeps it. */
static hx_status trie_insert(hx_tok_trie *tr, const char *s, size_t n, int32_t idx)
{
    uint32_t node = 0;
    if (n == 0) return HX_OK; /* an empty token can never match */
    if (tr->n_nodes == 0 && trie_new_node(tr, &node) != HX_OK) return HX_E_NOMEM;
    tr->first[(uint8_t)s[0]] = 1;
    for (size_t i = 0; i < n; i++) {
        int64_t c = trie_child(tr, node, (uint8_t)s[i]);
        if (c < 0) {
            uint32_t child;
            if (trie_new_node(tr, &child) != HX_OK) return HX_E_NOMEM;
            if ((!tr->ekeys || 2 * (tr->n_edges + 1) > tr->emask + 1) &&
                trie_grow_edges(tr) != HX_OK)
                return HX_E_NOMEM;
            uint64_t key = ((uint64_t)node << 8 | (uint8_t)s[i]) + 1;
            uint32_t h = edge_hash(key) & tr->emask;
            while (tr->ekeys[h]) h = (h + 1) & tr->emask;
            tr->ekeys[h] = key;
            tr->evals[h] = child;
            tr->n_edges++;
            c = child;
        }
        node = (uint32_t)c;
    }
    if (tr->term[node] < 0) tr->term[node] = idx;
    return HX_OK;
}

void hx_tok_trie_free(hx_tok_trie *tr)
{
    hx_free(tr->term);
    hx_free(tr->ekeys);
    hx_free(tr->evals);
    memset(tr, 0, sizeof *tr);
}

hx_status hx_tok_added_build(hx_tokenizer *t, hx_err *err)
{
    hx_tok_text norm = { 0 };
    hx_tok_prework w;
    hx_status st = hx_tok_prework_init(t, &w);
    for (int32_t i = 0; st == HX_OK && i < t->n_added; i++) {
        const hx_tok_added *a = &t->added[i];
        if (a->normalized) {
            /* The pattern is the content as the normalizer rewrites it. */
            st = hx_tok_normalize(t, t->pool + a->off, a->len, &norm, &w);
            if (st == HX_OK) st = trie_insert(&t->trie_norm, norm.data, norm.len, i);
        } else {
            st = trie_insert(&t->trie_raw, t->pool + a->off, a->len, i);
        }
    }
    hx_tok_prework_free(&w);
    hx_tok_text_free(&norm);
    if (st != HX_OK) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    return HX_OK;
}

int32_t hx_tok_added_find(const hx_tokenizer *t, const char *s, size_t n)
{
    for (int32_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->pool + t->added[i].off, s, n)) return i;
    return -1;
}

/* ---- splitting ---- */

static bool is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Rust's regex \w, which single_word tests against: alphabetic (letters, letter numbers),
 * marks, decimal digits, connector punctuation and the joiners. */
static bool is_word(uint32_t c)
{
    if (c == 0x200C || c == 0x200D) return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

/* The code point that ends s[0..end) (end > 0). */
static uint32_t last_cp(const char *s, size_t end, size_t *start)
{
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
    size_t adv;
    *start = i;
    return hx_tok_utf8_next(s + i, end - i, &adv);
}

static hx_status push_seg(hx_tok_seg **segs, size_t *n, size_t *cap, size_t a, size_t b, int32_t id)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        hx_tok_seg *p = hx_realloc(*segs, nc * sizeof *p);
        if (!p) return HX_E_NOMEM;
        *segs = p;
        *cap = nc;
    }
    (*segs)[(*n)++] = (hx_tok_seg){ .start = a, .end = b, .id = id };
    return HX_OK;
}

hx_status hx_tok_added_split(const hx_tokenizer *t, const hx_tok_trie *tr, const char *s,
                             size_t n, bool parse_special, hx_tok_seg **segs, size_t *n_segs,
                             size_t *cap_segs)
{
    size_t start_offset = 0, pos = 0;
    while (tr->n_nodes && pos < n) {
        if (!tr->first[(uint8_t)s[pos]]) {
            pos++;
            continue;
        }
        /* Longest token starting here. */
        uint32_t node = 0;
        int32_t best = -1;
        size_t best_end = 0;
        for (size_t j = pos; j < n; j++) {
            int64_t c = trie_child(tr, node, (uint8_t)s[j]);
            if (c < 0) break;
            node = (uint32_t)c;
            if (tr->term[node] >= 0) {
                best = tr->term[node];
                best_end = j + 1;
            }
        }
        if (best < 0) {
            pos++;
            continue;
        }
        const hx_tok_added *a = &t->added[best];
        size_t start = pos, stop = best_end;
        pos = best_end; /* the automaton resumes after the match, whatever is skipped below */
        if (a->special && !parse_special) continue;
        if (a->single_word) {
            size_t cs;
            bool start_space = start == 0 || !is_word(last_cp(s, start, &cs));
            size_t adv;
            bool stop_space = stop == n || !is_word(hx_tok_utf8_next(s + stop, n - stop, &adv));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t cs;
                if (!is_ws(last_cp(s, ns, &cs))) break;
                ns = cs;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                size_t adv;
                if (!is_ws(hx_tok_utf8_next(s + stop, n - stop, &adv))) break;
                stop += adv;
            }
        }
        if (start_offset < start && push_seg(segs, n_segs, cap_segs, start_offset, start, -1))
            return HX_E_NOMEM;
        if (push_seg(segs, n_segs, cap_segs, start, stop, a->id)) return HX_E_NOMEM;
        start_offset = stop;
    }
    if (start_offset < n && push_seg(segs, n_segs, cap_segs, start_offset, n, -1))
        return HX_E_NOMEM;
    return HX_OK;
}
