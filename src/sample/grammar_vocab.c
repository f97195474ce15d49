/* grammar_vocab.c - a vocabulary's token bytes in a trie, and token masks over it.
 *
 * The vocab keeps every token's bytes twice: in one blob indexed by id (what the sampler checks a
 * drawn token against) and as a trie in pre-order (what a mask walks, so tokens sharing a prefix
 * share the work). A mask is a walk of the trie in which a node's stack set is its parent's
 * advanced by the node's byte (hx_gram_step_byte). Inside a JSON string almost every token is
 * allowed, so the walk would visit almost every node; but the sets it meets are few (the string's
 * own set, half-read UTF-8 characters, what follows a quote or a backslash), so they are interned
 * and each (set, byte) step is computed once per mask and looked up after that. And when a set
 * takes every plain byte (printable ASCII but '"' and '\', what a JSON string holds as itself)
 * back to itself, every subtree made of plain bytes only is allowed whole without visiting it.
 * See grammar.c for the recognizer itself. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "sample/grammar_int.h"

struct hx_grammar_vocab {
    int32_t   n_vocab;
    char     *tok_bytes;  /* the bytes each id matches: tok_bytes[tok_off[id] .. tok_off[id + 1]) */
    uint32_t *tok_off;    /* [n_vocab + 1] */
    uint32_t  n_nodes;
    uint8_t  *node_byte;  /* [n_nodes] trie in pre-order */
    uint32_t *node_depth; /* [n_nodes] 1 for children of the root */
    uint32_t *node_skip;  /* [n_nodes] first node after this one's subtree */
    uint8_t  *node_plain; /* [n_nodes] 1: the subtree (node included) has only plain bytes */
    uint32_t *node_ids;   /* [n_nodes + 1] ids ending at node i: ids[node_ids[i]..node_ids[i+1]) */
    int32_t  *ids;
    uint32_t  max_depth;
    int32_t  *end_ids;
    size_t    n_end;
};

/* ---- vocabulary trie ---- */

typedef struct {
    const uint8_t *p;
    size_t         len;
    int32_t        id;
} tok_ref;

static int cmp_tok(const void *x, const void *y)
{
    const tok_ref *a = x, *b = y;
    const size_t n = a->len < b->len ? a->len : b->len;
    const int c = n ? memcmp(a->p, b->p, n) : 0;
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void hx_grammar_vocab_free(hx_grammar_vocab *v)
{
    if (!v) return;
    hx_free(v->tok_bytes);
    hx_free(v->tok_off);
    hx_free(v->node_byte);
    hx_free(v->node_depth);
    hx_free(v->node_skip);
    hx_free(v->node_plain);
    hx_free(v->node_ids);
    hx_free(v->ids);
    hx_free(v->end_ids);
    hx_free(v);
}

int32_t hx_grammar_vocab_n_vocab(const hx_grammar_vocab *v)
{
    return v->n_vocab;
}

const char *hx_grammar_vocab_token(const hx_grammar_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_vocab) {
        *len = 0;
        return "";
    }
    *len = v->tok_off[id + 1] - v->tok_off[id];
    return v->tok_bytes + v->tok_off[id];
}

bool hx_grammar_vocab_is_end(const hx_grammar_vocab *v, int32_t id)
{
    for (size_t i = 0; i < v->n_end; i++)
        if (v->end_ids[i] == id) return true;
    return false;
}

/* Printable ASCII that a JSON string holds as itself: the bytes of the mask's subtree shortcut. */
static bool is_plain(uint8_t c)
{
    return c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
}

/* Sorting the tokens makes the trie fall out in pre-order: a token shares with the previous one
 * exactly their common prefix, the nodes past it are closed (their subtree ends here) and new
 * nodes are opened for the rest. A token that is a prefix of another sorts first, so the ids
 * ending at a node are contiguous. */
hx_status hx_grammar_vocab_init(const char *const *bytes, const size_t *lens, int32_t n_vocab,
                                const int32_t *end_ids, size_t n_end, hx_grammar_vocab **out,
                                hx_err *err)
{
    hx_status st = HX_E_NOMEM;
    tok_ref *toks = NULL;
    uint32_t *path = NULL, *impure = NULL;
    hx_grammar_vocab *v = hx_calloc(1, sizeof *v);
    if (!v) goto fail;
    if (n_vocab < 0) {
        st = hx_err_set(err, HX_E_INVALID, "grammar vocab: expected n_vocab >= 0, found %d",
                        (int)n_vocab);
        goto fail;
    }
    v->n_vocab = n_vocab;
    size_t n_tok = 0, n_bytes = 0, max_len = 0;
    toks = hx_alloc(((size_t)n_vocab + 1) * sizeof *toks);
    if (!toks) goto fail;
    for (size_t i = 0; i < n_end; i++) {
        if (end_ids[i] < 0 || end_ids[i] >= n_vocab) {
            st = hx_err_set(err, HX_E_INVALID, "grammar vocab: expected end token ids in [0, %d), "
                            "found %d", (int)n_vocab, (int)end_ids[i]);
            goto fail;
        }
    }
    v->tok_off = hx_alloc(((size_t)n_vocab + 1) * sizeof *v->tok_off);
    if (!v->tok_off) goto fail;
    v->tok_off[0] = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        bool is_end = false; /* an end token's own bytes are never matched: it ends, only */
        for (size_t i = 0; i < n_end; i++) is_end |= end_ids[i] == id;
        const size_t len = is_end ? 0 : lens[id];
        if (len > UINT32_MAX - 1 - n_bytes) {
            st = hx_err_set(err, HX_E_INVALID, "grammar vocab: expected at most 4 GiB of token "
                            "bytes, found more at token %d", (int)id);
            goto fail;
        }
        n_bytes += len;
        v->tok_off[id + 1] = (uint32_t)n_bytes;
        if (len > max_len) max_len = len;
    }
    v->tok_bytes = hx_alloc(n_bytes + 1);
    if (!v->tok_bytes) goto fail;
    for (int32_t id = 0; id < n_vocab; id++) {
        const size_t len = v->tok_off[id + 1] - v->tok_off[id];
        if (len == 0) continue;
        memcpy(v->tok_bytes + v->tok_off[id], bytes[id], len);
        toks[n_tok++] = (tok_ref){ (const uint8_t *)v->tok_bytes + v->tok_off[id], len, id };
    }
    qsort(toks, n_tok, sizeof *toks, cmp_tok);
    /* n_bytes bounds the node count; shared prefixes make the real count smaller. */
    v->node_byte = hx_alloc(n_bytes + 1);
    v->node_depth = hx_alloc((n_bytes + 1) * sizeof *v->node_depth);
    v->node_skip = hx_alloc((n_bytes + 1) * sizeof *v->node_skip);
    v->node_ids = hx_alloc((n_bytes + 2) * sizeof *v->node_ids);
    v->ids = hx_alloc((n_tok + 1) * sizeof *v->ids);
    v->end_ids = hx_alloc((n_end + 1) * sizeof *v->end_ids);
    path = hx_alloc((max_len + 1) * sizeof *path);
    if (!v->node_byte || !v->node_depth || !v->node_skip || !v->node_ids || !v->ids ||
        !v->end_ids || !path)
        goto fail;
    uint32_t n_nodes = 0, n_ids = 0;
    size_t prev_len = 0;
    const uint8_t *prev = NULL;
    for (size_t i = 0; i < n_tok; i++) {
        const tok_ref *t = &toks[i];
        size_t lcp = 0;
        while (lcp < prev_len && lcp < t->len && prev[lcp] == t->p[lcp]) lcp++;
        for (size_t d = prev_len; d > lcp; d--) v->node_skip[path[d]] = n_nodes;
        for (size_t d = lcp + 1; d <= t->len; d++) {
            v->node_byte[n_nodes] = t->p[d - 1];
            v->node_depth[n_nodes] = (uint32_t)d;
            v->node_ids[n_nodes] = n_ids;
            path[d] = n_nodes++;
        }
        /* ids of node k run to node_ids[k + 1]; a node that gets ids is always the newest one
         * (or equal to the previous token), so filling node_ids[n_nodes] keeps that true. */
        v->ids[n_ids++] = t->id;
        v->node_ids[n_nodes] = n_ids;
        prev = t->p;
        prev_len = t->len;
    }
    for (size_t d = prev_len; d > 0; d--) v->node_skip[path[d]] = n_nodes;
    v->node_ids[n_nodes] = n_ids;
    v->n_nodes = n_nodes;
    /* A subtree is nodes i .. node_skip[i] - 1, so a running count answers "all plain" per node:
     * impure[k] = nodes among 0 .. k - 1 whose byte is not plain. */
    v->node_plain = hx_alloc((size_t)n_nodes + 1);
    impure = hx_alloc(((size_t)n_nodes + 1) * sizeof *impure);
    if (!v->node_plain || !impure) goto fail;
    impure[0] = 0;
    for (uint32_t k = 0; k < n_nodes; k++) impure[k + 1] = impure[k] + !is_plain(v->node_byte[k]);
    for (uint32_t k = 0; k < n_nodes; k++)
        v->node_plain[k] = impure[v->node_skip[k]] == impure[k];
    v->max_depth = (uint32_t)max_len;
    for (size_t i = 0; i < n_end; i++) v->end_ids[i] = end_ids[i];
    v->n_end = n_end;
    hx_free(toks);
    hx_free(path);
    hx_free(impure);
    *out = v;
    return HX_OK;
fail:
    if (st == HX_E_NOMEM) hx_err_set(err, HX_E_NOMEM, "grammar vocab: out of memory");
    hx_free(toks);
    hx_free(path);
    hx_free(impure);
    hx_grammar_vocab_free(v);
    return st;
}

/* GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest are numbered from
 * U+0100 in byte order. */
static bool gpt2_printable(int b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static uint32_t decode_utf8(const char *s, size_t n, size_t *i)
{
    const uint8_t c = (uint8_t)s[*i];
    int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t v = k ? (uint32_t)(c & (0x3F >> k)) : c;
    ++*i;
    for (; k > 0 && *i < n; k--) v = v << 6 | ((uint8_t)s[(*i)++] & 0x3F);
    return v;
}

/* The bytes a piece stands for, into out (capacity at least n). */
static size_t piece_bytes(const char *piece, size_t n, bool byte_level, const int16_t *inv,
                          char *out)
{
    size_t m = 0;
    if (byte_level) {
        for (size_t i = 0; i < n;) {
            const uint32_t cp = decode_utf8(piece, n, &i);
            if (cp >= 0x144 || inv[cp] < 0) { /* not in the alphabet: an added token's text */
                memcpy(out, piece, n);
                return n;
            }
            out[m++] = (char)inv[cp];
        }
        return m;
    }
    if (n == 6 && memcmp(piece, "<0x", 3) == 0 && piece[5] == '>' && gram_hexval(piece[3]) >= 0 &&
        gram_hexval(piece[4]) >= 0) {
        out[0] = (char)(gram_hexval(piece[3]) << 4 | gram_hexval(piece[4]));
        return 1;
    }
    for (size_t i = 0; i < n;) {
        if (n - i >= 3 && memcmp(piece + i, "\xE2\x96\x81", 3) == 0) { /* U+2581 ▁ */
            out[m++] = ' ';
            i += 3;
        } else {
            out[m++] = piece[i++];
        }
    }
    return m;
}

hx_status hx_grammar_vocab_from_tokenizer(const hx_tokenizer *t, hx_grammar_vocab **out,
                                          hx_err *err)
{
    hx_status st = HX_E_NOMEM;
    const int32_t n_vocab = hx_tokenizer_n_vocab(t);
    const bool byte_level = strcmp(hx_tokenizer_kind(t), "bpe") == 0;
    int16_t inv[0x144];
    for (int i = 0; i < 0x144; i++) inv[i] = -1;
    for (int b = 0, n = 0; b < 256; b++) inv[gpt2_printable(b) ? b : 0x100 + n++] = (int16_t)b;
    size_t total = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = 0;
        hx_tokenizer_piece(t, id, &len);
        total += len;
    }
    char *blob = hx_alloc(total + 1);
    const char **bytes = hx_alloc(((size_t)n_vocab + 1) * sizeof *bytes);
    size_t *lens = hx_alloc(((size_t)n_vocab + 1) * sizeof *lens);
    if (!blob || !bytes || !lens) {
        hx_err_set(err, HX_E_NOMEM, "grammar vocab: out of memory");
        goto done;
    }
    size_t at = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = 0;
        const char *piece = hx_tokenizer_piece(t, id, &len);
        bytes[id] = blob + at;
        lens[id] = hx_tokenizer_is_special(t, id) ? 0 : piece_bytes(piece, len, byte_level, inv,
                                                                    blob + at);
        at += lens[id];
    }
    size_t n_end = 0;
    const int32_t *end = hx_tokenizer_eot(t, &n_end);
    st = hx_grammar_vocab_init(bytes, lens, n_vocab, end, n_end, out, err);
done:
    hx_free(blob);
    hx_free(bytes);
    hx_free(lens);
    return st;
}


/* ---- token masks ---- */

#define MEMO_MAX_SETS  1024u      /* interned sets per mask (transitions take 1 KiB each) */
#define MEMO_MAX_WORDS (1u << 20) /* words of interned set data per mask */
#define WALK_REFUSED   (-2)

void hx_gram_mask_free(gmask *m)
{
    for (uint32_t i = 0; i < m->n_depth; i++) hx_gram_sset_free(&m->depth[i]);
    hx_free(m->depth);
    hx_free(m->at);
    hx_free(m->pool);
    hx_free(m->sets);
    hx_free(m->next);
    hx_free(m->slots);
    memset(m, 0, sizeof *m);
}

static uint32_t set_hash(const sset *s)
{
    uint32_t h = 2166136261u ^ s->cp ^ (uint32_t)s->left << 24 ^ (uint32_t)s->seq_len << 28;
    for (size_t i = 0; i < s->n_data; i++) h = (h ^ s->data[i]) * 16777619u;
    return h;
}

/* Interned set id as an sset that hx_gram_step_byte can read (valid until the pool grows). */
static sset memo_view(const gmask *m, int32_t id)
{
    const gset *e = &m->sets[id];
    return (sset){ .data = m->pool + e->off, .n_data = e->n_data, .n_stacks = e->n_stacks,
                   .cp = e->cp, .left = e->left, .seq_len = e->seq_len };
}

static void memo_clear(gmask *m)
{
    if (m->cap_slots) memset(m->slots, 0, m->cap_slots * sizeof *m->slots);
    m->n_sets = 0;
    m->n_pool = 0;
}

/* Makes room for one more set: the set table, its transitions, the hash (kept at most half
 * full) and n_data more pool words. False when out of memory. */
static bool memo_reserve(gmask *m, size_t n_data)
{
    if (m->n_sets == m->cap_sets) {
        const uint32_t cap = m->cap_sets ? m->cap_sets * 2 : 16;
        gset *sets = hx_realloc(m->sets, cap * sizeof *sets);
        if (!sets) return false;
        m->sets = sets;
        uint32_t *next = hx_realloc(m->next, (size_t)cap * 256 * sizeof *next);
        if (!next) return false;
        m->next = next;
        m->cap_sets = cap;
    }
    if (2 * (m->n_sets + 1) > m->cap_slots) {
        const uint32_t cap = m->cap_slots ? m->cap_slots * 2 : 32;
        uint32_t *slots = hx_calloc(cap, sizeof *slots);
        if (!slots) return false;
        for (uint32_t k = 0; k < m->n_sets; k++) {
            uint32_t i = m->sets[k].hash & (cap - 1);
            while (slots[i]) i = (i + 1) & (cap - 1);
            slots[i] = k + 1;
        }
        hx_free(m->slots);
        m->slots = slots;
        m->cap_slots = cap;
    }
    if (m->n_pool + n_data > m->cap_pool) {
        size_t cap = m->cap_pool ? m->cap_pool * 2 : 4096;
        while (cap < m->n_pool + n_data) cap *= 2;
        uint32_t *pool = hx_realloc(m->pool, cap * sizeof *pool);
        if (!pool) return false;
        m->pool = pool;
        m->cap_pool = cap;
    }
    return true;
}

/* The id of the interned set equal to s, interning a copy when there is none; -1 when the memo
 * is full or out of memory (the walk then keeps s in its depth scratch, uninterned). Equal means
 * the same stacks in the same order; the same set reached in another order is only interned
 * twice, which costs a little memory, never a wrong answer. */
static int32_t memo_intern(gmask *m, const sset *s)
{
    const uint32_t h = set_hash(s);
    const uint32_t mask = m->cap_slots - 1;
    if (m->cap_slots) {
        for (uint32_t i = h & mask; m->slots[i]; i = (i + 1) & mask) {
            const gset *e = &m->sets[m->slots[i] - 1];
            if (e->hash == h && e->n_data == s->n_data && e->cp == s->cp &&
                e->left == s->left && e->seq_len == s->seq_len &&
                memcmp(m->pool + e->off, s->data, s->n_data * sizeof *s->data) == 0)
                return (int32_t)m->slots[i] - 1;
        }
    }
    if (m->n_sets == MEMO_MAX_SETS || m->n_pool + s->n_data > MEMO_MAX_WORDS ||
        !memo_reserve(m, s->n_data))
        return -1;
    const uint32_t id = m->n_sets++;
    m->sets[id] = (gset){ .off = m->n_pool, .n_data = s->n_data, .n_stacks = s->n_stacks,
                          .cp = s->cp, .hash = h, .left = s->left, .seq_len = s->seq_len,
                          .plain_loop = 0 };
    memcpy(m->pool + m->n_pool, s->data, s->n_data * sizeof *s->data);
    m->n_pool += s->n_data;
    memset(m->next + (size_t)id * 256, 0, 256 * sizeof *m->next);
    uint32_t i = h & (m->cap_slots - 1);
    while (m->slots[i]) i = (i + 1) & (m->cap_slots - 1);
    m->slots[i] = id + 1;
    return (int32_t)id;
}

/* One node of the walk, at depth d with byte c, whose parent's set is `from` (an interned id, or
 * -1: the parent's set is s->cur at depth 0, else the depth scratch of depth d - 1). Returns the
 * node's set: an interned id, -1 when it stays in the scratch of depth d, or WALK_REFUSED. */
static int32_t walk_step(hx_grammar_state *s, int32_t from, uint32_t d, uint8_t c)
{
    gmask *m = &s->mask;
    sset *out = &m->depth[d - 1];
    if (from < 0) {
        const sset *in = d == 1 ? &s->cur : &m->depth[d - 2];
        return hx_gram_step_byte(s->g, in, c, out, s->buf) ? memo_intern(m, out) : WALK_REFUSED;
    }
    const uint32_t known = m->next[(size_t)from * 256 + c];
    if (known) return known == 1 ? WALK_REFUSED : (int32_t)known - 2;
    const sset in = memo_view(m, from);
    const int32_t to = hx_gram_step_byte(s->g, &in, c, out, s->buf) ? memo_intern(m, out)
                                                                    : WALK_REFUSED;
    if (to != -1) m->next[(size_t)from * 256 + c] = to == WALK_REFUSED ? 1 : (uint32_t)to + 2;
    return to;
}

/* Whether every plain byte takes interned set id back to itself, so that any token of plain bytes
 * is accepted from it; worked out once per set (and given up at the first byte that does not).
 * d is the depth of the node being visited, whose scratch is free. */
static bool loops_on_plain(hx_grammar_state *s, int32_t id, uint32_t d)
{
    gmask *m = &s->mask;
    if (m->sets[id].plain_loop == 0) {
        int8_t loop = 1;
        for (int c = 0x20; c < 0x7F && loop > 0; c++)
            if (is_plain((uint8_t)c) && walk_step(s, id, d, (uint8_t)c) != id) loop = -1;
        m->sets[id].plain_loop = loop; /* indexed again: interning may have moved sets */
    }
    return m->sets[id].plain_loop > 0;
}

/* One pre-order pass over the trie: a node's set is its parent's advanced by the node's byte; a
 * refused node skips its whole subtree (most tokens die on their first byte). Sets are interned
 * and steps remembered per (set, byte), so a node costs one table look-up, and a plain subtree
 * under a set that loops on plain bytes is allowed whole (its ids are contiguous in ids[]). */
hx_status hx_grammar_mask(hx_grammar_state *s, const hx_grammar_vocab *v, uint8_t *allowed)
{
    memset(allowed, 0, (size_t)v->n_vocab);
    gmask *m = &s->mask;
    if (!m->at || m->n_depth < v->max_depth) {
        int32_t *at = hx_realloc(m->at, ((size_t)v->max_depth + 1) * sizeof *at);
        if (!at) return HX_E_NOMEM;
        m->at = at;
        if (m->n_depth < v->max_depth) {
            sset *d = hx_realloc(m->depth, v->max_depth * sizeof *d);
            if (!d) return HX_E_NOMEM;
            memset(d + m->n_depth, 0, (v->max_depth - m->n_depth) * sizeof *d);
            m->depth = d;
            m->n_depth = v->max_depth;
        }
    }
    memo_clear(m);
    m->at[0] = memo_intern(m, &s->cur);
    for (uint32_t i = 0; i < v->n_nodes;) {
        const uint32_t d = v->node_depth[i];
        const int32_t from = m->at[d - 1];
        if (v->node_plain[i] && from >= 0 && loops_on_plain(s, from, d)) {
            const uint32_t end = v->node_ids[v->node_skip[i]];
            for (uint32_t k = v->node_ids[i]; k < end; k++) allowed[v->ids[k]] = 1;
            i = v->node_skip[i];
            continue;
        }
        const int32_t to = walk_step(s, from, d, v->node_byte[i]);
        if (to == WALK_REFUSED) {
            i = v->node_skip[i];
            continue;
        }
        m->at[d] = to;
        for (uint32_t k = v->node_ids[i]; k < v->node_ids[i + 1]; k++) allowed[v->ids[k]] = 1;
        i++;
    }
    if (hx_grammar_done(s))
        for (size_t i = 0; i < v->n_end; i++) allowed[v->end_ids[i]] = 1;
    return HX_OK;
}
