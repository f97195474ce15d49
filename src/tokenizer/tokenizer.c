/* tokenizer.c - the tokenizer's lifetime, the encode pipeline and the vocabulary accessors.
 *
 * Loading (load_json.c, load_gguf.c) fills the struct; hx_tok_finish derives the lookup
 * tables; after that the tokenizer never changes except for its locked BPE cache. encode runs
 * Hugging Face's order: raw-text added tokens → normalizer → normalized added tokens →
 * pre-tokenizer → BPE per piece → post-processor ids. All per-call state lives on the caller's
 * stack (hx_tok_prework, hx_tok_bpework), which is what makes concurrent encodes safe. */
#include <string.h>

#include "base/alloc.h"
#include "base/path.h"
#include "base/utf8.h"
#include "tokenizer/tokenizer_int.h"

/* ---- small buffers ---- */

void hx_tok_ids_free(hx_tok_ids *v)
{
    if (!v) return;
    hx_free(v->ids);
    *v = (hx_tok_ids){ 0 };
}

void hx_tok_text_free(hx_tok_text *b)
{
    if (!b) return;
    hx_free(b->data);
    *b = (hx_tok_text){ 0 };
}

hx_status hx_tok_ids_push(hx_tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        int32_t *p = hx_realloc(v->ids, cap * sizeof *p);
        if (!p) return HX_E_NOMEM;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return HX_OK;
}

/* Keeps room for extra bytes plus a NUL. */
hx_status hx_tok_text_reserve(hx_tok_text *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len) return HX_E_NOMEM;
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return HX_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = hx_realloc(b->data, cap);
    if (!p) return HX_E_NOMEM;
    b->data = p;
    b->cap = cap;
    return HX_OK;
}

hx_status hx_tok_text_append(hx_tok_text *b, const void *p, size_t n)
{
    if (hx_tok_text_reserve(b, n)) return HX_E_NOMEM;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return HX_OK;
}

/* ---- UTF-8 ---- */

int hx_tok_utf8_check(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) {
        *len = 1;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *len = 1;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return -1;
        }
        unsigned char a = i == 1 ? lo : 0x80, b = i == 1 ? hi : 0xBF;
        if (s[i] < a || s[i] > b) {
            *len = i;
            return 0;
        }
    }
    *len = need;
    return 1;
}

hx_status hx_tok_utf8_lossy(const char *s, size_t n, hx_tok_text *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t l;
        int r = hx_tok_utf8_check(u + i, n - i, &l);
        if (r == 1) {
            i += l;
            run += l;
            continue;
        }
        if (hx_tok_text_append(out, s + i - run, run) ||
            hx_tok_text_append(out, "\xEF\xBF\xBD", 3))
            return HX_E_NOMEM;
        run = 0;
        i += l;
    }
    return hx_tok_text_append(out, s + n - run, run);
}

/* ---- lifetime ---- */

/* PCRE2's heap traffic (compiled patterns, match data) goes through hearth's allocator so it
 * is counted and fault-injected like everything else. */
static void *pcre_alloc(PCRE2_SIZE n, void *ud)
{
    (void)ud;
    return hx_alloc(n);
}

static void pcre_free(void *p, void *ud)
{
    (void)ud;
    hx_free(p);
}

hx_tokenizer *hx_tok_new(const char *name)
{
    hx_tokenizer *t = hx_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->name = hx_strdup(name ? name : "tokenizer");
    t->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    if (t->gctx) t->cctx = pcre2_compile_context_create(t->gctx);
    if (!t->name || !t->gctx || !t->cctx) {
        hx_tokenizer_close(t);
        return NULL;
    }
    t->unk_id = t->bos = t->eos = t->pad = -1;
    for (int i = 0; i < 256; i++) t->byte_tok[i] = t->bl_tok[i] = -1;
    /* Offset 0 of the pool is the empty string, so a zeroed offset/length reads as "". */
    if (hx_tok_pool_add(t, "", 0) == UINT32_MAX) {
        hx_tokenizer_close(t);
        return NULL;
    }
    return t;
}

uint32_t hx_tok_pool_add(hx_tokenizer *t, const char *s, size_t len)
{
    if (len > UINT32_MAX / 2 || t->pool_len + len + 1 > UINT32_MAX / 2) return UINT32_MAX;
    if (t->pool_len + len + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 4096;
        while (cap < t->pool_len + len + 1) cap *= 2;
        char *p = hx_realloc(t->pool, cap);
        if (!p) return UINT32_MAX;
        t->pool = p;
        t->pool_cap = cap;
    }
    uint32_t off = (uint32_t)t->pool_len;
    if (len) memcpy(t->pool + off, s, len);
    t->pool[off + len] = '\0';
    t->pool_len += len + 1;
    return off;
}

hx_status hx_tok_set_vocab_size(hx_tokenizer *t, int32_t n, hx_err *err)
{
    if (n < 0 || n > HX_TOK_MAX_VOCAB)
        return hx_err_set(err, HX_E_FORMAT, "%s: vocabulary of %ld tokens (at most %d supported)",
                          t->name, (long)n, HX_TOK_MAX_VOCAB);
    if (n <= t->n_vocab) return HX_OK;
    hx_tok_entry *e = hx_realloc(t->tok, (size_t)n * sizeof *e);
    if (!e) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    for (int32_t i = t->n_vocab; i < n; i++) e[i] = (hx_tok_entry){ 0, 0, HX_TOKA_UNUSED, 0 };
    t->tok = e;
    if (t->scores) {
        float *sc = hx_realloc(t->scores, (size_t)n * sizeof *sc);
        if (!sc) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
        for (int32_t i = t->n_vocab; i < n; i++) sc[i] = 0.0f;
        t->scores = sc;
    }
    t->n_vocab = n;
    return HX_OK;
}

/* Tokens that end a turn in the chat templates of the families hearth runs. */
static const char *const eot_names[] = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<|END_OF_TURN_TOKEN|>", "<|return|>", "<|call|>", "</s>",
    ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"), /* DeepSeek */
};

static hx_status add_eot(hx_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab) return HX_OK;
    for (int32_t i = 0; i < t->n_eot; i++)
        if (t->eot[i] == id) return HX_OK;
    int32_t *p = hx_realloc(t->eot, ((size_t)t->n_eot + 1) * sizeof *p);
    if (!p) return HX_E_NOMEM;
    t->eot = p;
    t->eot[t->n_eot++] = id;
    return HX_OK;
}

hx_status hx_tok_finish(hx_tokenizer *t, hx_err *err)
{
    hx_status st = t->vocab.slots ? HX_OK : hx_tok_strmap_build(t, err);
    if (st != HX_OK) return st;
    char name[8];
    for (int b = 0; b < 256; b++) {
        static const char hex[] = "0123456789ABCDEF";
        memcpy(name, "<0x", 3);
        name[3] = hex[b >> 4];
        name[4] = hex[b & 15];
        name[5] = '>';
        int32_t id = hx_tok_strmap_get(t, name, 6);
        if (id >= 0) {
            t->byte_tok[b] = id;
            t->tok[id].attr |= HX_TOKA_BYTE;
            t->tok[id].byte = (uint8_t)b;
        }
        char enc[4];
        size_t el = hx_tok_utf8_put(hx_tok_byte_to_cp((uint8_t)b), enc);
        t->bl_tok[b] = hx_tok_strmap_get(t, enc, el);
    }
    t->bl_deferred = t->n_pre > 0 && t->pre[t->n_pre - 1].kind == HX_PRE_BYTELEVEL;
    if ((st = hx_tok_added_build(t, err)) != HX_OK) return st;
    if (add_eot(t, t->eos)) goto nomem;
    for (size_t i = 0; i < HX_COUNTOF(eot_names); i++) {
        int32_t id = hx_tokenizer_token_id(t, eot_names[i], strlen(eot_names[i]));
        /* Only control tokens: a plain "</s>" in some vocabulary is just text. */
        if (id >= 0 && (t->tok[id].attr & HX_TOKA_SPECIAL) && add_eot(t, id)) goto nomem;
    }
    if (hx_tok_cache_init(t) != HX_OK) goto nomem;
    return HX_OK;
nomem:
    return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
}

void hx_tokenizer_close(hx_tokenizer *t)
{
    if (!t) return;
    hx_tok_cache_free(t);
    for (int32_t i = 0; t->norm && i < t->n_norm; i++) hx_tok_norm_free(&t->norm[i]);
    for (int32_t i = 0; t->pre && i < t->n_pre; i++) hx_tok_pre_free(&t->pre[i]);
    hx_free(t->norm);
    hx_free(t->pre);
    hx_free(t->dec);
    hx_tok_trie_free(&t->trie_raw);
    hx_tok_trie_free(&t->trie_norm);
    hx_free(t->added);
    hx_tok_strmap_free(&t->vocab);
    hx_tok_merges_free(&t->merges);
    hx_free(t->scores);
    hx_free(t->tok);
    hx_free(t->post_pre);
    hx_free(t->post_post);
    hx_free(t->eot);
    hx_free(t->pool);
    pcre2_compile_context_free(t->cctx);
    pcre2_general_context_free(t->gctx);
    hx_free(t->name);
    hx_free(t);
}

/* ---- opening ---- */

static hx_status finish_open(hx_tokenizer *t, hx_status st, hx_tokenizer **out, hx_err *err)
{
    if (st == HX_OK) st = hx_tok_finish(t, err);
    if (st != HX_OK) {
        hx_tokenizer_close(t);
        return st;
    }
    *out = t;
    return HX_OK;
}

hx_status hx_tokenizer_open_json_memory(const char *data, size_t len, const char *name,
                                        hx_tokenizer **out, hx_err *err)
{
    hx_tokenizer *t = hx_tok_new(name);
    if (!t) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", name ? name : "tokenizer");
    return finish_open(t, hx_tok_load_json(t, data, len, NULL, err), out, err);
}

hx_status hx_tokenizer_open_json(const char *path, hx_tokenizer **out, hx_err *err)
{
    hx_mapped m = { 0 };
    char *dir = NULL, *cfg = NULL;
    hx_status st = hx_map_file(path, &m, err);
    if (st != HX_OK) return st;
    hx_tokenizer *t = hx_tok_new(path);
    if (!t) {
        hx_unmap(&m);
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
    }
    /* tokenizer_config.json beside the file, when there is one. */
    const char *slash = strrchr(path, '/');
    dir = slash ? hx_strndup(path, (size_t)(slash - path)) : hx_strdup(".");
    cfg = dir ? hx_path_join(dir, "tokenizer_config.json") : NULL;
    if (!cfg) {
        st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
    } else {
        st = hx_tok_load_json(t, (const char *)m.data, m.size, hx_path_is_file(cfg) ? cfg : NULL,
                              err);
    }
    hx_free(dir);
    hx_free(cfg);
    hx_unmap(&m);
    return finish_open(t, st, out, err);
}

hx_status hx_tokenizer_from_gguf(const hx_gguf *g, hx_tokenizer **out, hx_err *err)
{
    hx_tokenizer *t = hx_tok_new(g->path ? g->path : "gguf");
    if (!t) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", g->path ? g->path : "gguf");
    return finish_open(t, hx_tok_load_gguf(t, g, err), out, err);
}

hx_status hx_tokenizer_open_gguf(const char *path, hx_tokenizer **out, hx_err *err)
{
    hx_gguf *g = NULL;
    hx_status st = hx_gguf_open(path, &g, err);
    if (st != HX_OK) return st;
    st = hx_tokenizer_from_gguf(g, out, err);
    hx_gguf_close(g);
    return st;
}

hx_status hx_tokenizer_open(const hx_model_files *mf, hx_tokenizer **out, hx_err *err)
{
    if (mf->gguf && hx_gguf_find(mf->gguf, "tokenizer.ggml.model"))
        return hx_tokenizer_from_gguf(mf->gguf, out, err);
    if (mf->tokenizer_json) return hx_tokenizer_open_json(mf->tokenizer_json, out, err);
    return hx_err_set(err, HX_E_NOTFOUND, "%s: no tokenizer (neither tokenizer.ggml.* metadata "
                      "nor tokenizer.json)", mf->path);
}

hx_status hx_tokenizer_open_path(const char *path, hx_tokenizer **out, hx_err *err)
{
    if (hx_path_is_dir(path)) {
        char *p = hx_path_join(path, "tokenizer.json");
        if (!p) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
        hx_status st;
        if (hx_path_is_file(p))
            st = hx_tokenizer_open_json(p, out, err);
        else
            st = hx_err_set(err, HX_E_NOTFOUND, "%s: no tokenizer.json in this folder", path);
        hx_free(p);
        return st;
    }
    if (hx_str_ends_with(path, ".gguf")) return hx_tokenizer_open_gguf(path, out, err);
    return hx_tokenizer_open_json(path, out, err);
}

/* ---- encoding ---- */

hx_status hx_tok_prework_init(const hx_tokenizer *t, hx_tok_prework *w)
{
    memset(w, 0, sizeof *w);
    w->tok = t;
    w->md = pcre2_match_data_create(1, t->gctx);
    w->mctx = pcre2_match_context_create(t->gctx);
    return w->md && w->mctx ? HX_OK : HX_E_NOMEM;
}

typedef struct {
    const hx_tokenizer *t;
    hx_tok_prework      pw;
    hx_tok_bpework      bw;
    hx_tok_text         norm;
    hx_tok_seg         *segs2;
    size_t              n_segs2, cap_segs2;
} encoder;

/* Normalizes, splits on normalized added tokens, pre-tokenizes and merges one plain segment. */
static hx_status encode_plain(encoder *e, const char *s, size_t n, bool at_start,
                              bool parse_special, hx_tok_ids *out)
{
    const hx_tokenizer *t = e->t;
    if (hx_tok_normalize(t, s, n, &e->norm, &e->pw)) return HX_E_NOMEM;
    e->n_segs2 = 0;
    if (hx_tok_added_split(t, &t->trie_norm, e->norm.data, e->norm.len, parse_special, &e->segs2,
                           &e->n_segs2, &e->cap_segs2))
        return HX_E_NOMEM;
    for (size_t i = 0; i < e->n_segs2; i++) {
        const hx_tok_seg *g = &e->segs2[i];
        if (g->id >= 0) {
            if (hx_tok_ids_push(out, g->id)) return HX_E_NOMEM;
            continue;
        }
        if (hx_tok_pretokenize(t, e->norm.data + g->start, g->end - g->start,
                               at_start && g->start == 0, &e->pw))
            return HX_E_NOMEM;
        for (size_t j = 0; j < e->pw.n_a; j++) {
            const hx_tok_piece *p = &e->pw.a[j];
            if (hx_tok_bpe_word(t, e->pw.store.data + p->off, p->len, t->bl_deferred, &e->bw, out))
                return HX_E_NOMEM;
        }
    }
    return HX_OK;
}

hx_status hx_tokenizer_encode(const hx_tokenizer *t, const char *text, size_t len, unsigned flags,
                              hx_tok_ids *out, hx_err *err)
{
    encoder e = { .t = t };
    hx_tok_text fixed = { 0 };
    hx_tok_seg *segs = NULL;
    size_t n_segs = 0, cap_segs = 0;
    const bool parse_special = (flags & HX_TOK_PARSE_SPECIAL) != 0;
    hx_status st = HX_E_NOMEM;
    if (len && !hx_utf8_valid(text, len)) {
        if (hx_tok_utf8_lossy(text, len, &fixed)) goto fail;
        text = fixed.data;
        len = fixed.len;
    }
    if (hx_tok_prework_init(t, &e.pw)) goto fail;
    if (flags & HX_TOK_ADD_SPECIAL)
        for (int32_t i = 0; i < t->n_post_pre; i++)
            if (hx_tok_ids_push(out, t->post_pre[i])) goto fail;
    if (hx_tok_added_split(t, &t->trie_raw, text, len, parse_special, &segs, &n_segs, &cap_segs))
        goto fail;
    for (size_t i = 0; i < n_segs; i++) {
        if (segs[i].id >= 0) {
            if (hx_tok_ids_push(out, segs[i].id)) goto fail;
            continue;
        }
        if (encode_plain(&e, text + segs[i].start, segs[i].end - segs[i].start,
                         segs[i].start == 0, parse_special, out))
            goto fail;
    }
    if (flags & HX_TOK_ADD_SPECIAL)
        for (int32_t i = 0; i < t->n_post_post; i++)
            if (hx_tok_ids_push(out, t->post_post[i])) goto fail;
    st = HX_OK;
fail:
    hx_free(segs);
    hx_free(e.segs2);
    hx_tok_text_free(&e.norm);
    hx_tok_bpework_free(&e.bw);
    hx_tok_prework_free(&e.pw);
    hx_tok_text_free(&fixed);
    if (st != HX_OK) return hx_err_set(err, st, "%s: out of memory while encoding", t->name);
    return HX_OK;
}

/* ---- vocabulary ---- */

int32_t hx_tokenizer_n_vocab(const hx_tokenizer *t) { return t->n_vocab; }

const char *hx_tokenizer_piece(const hx_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return "";
    }
    if (len) *len = t->tok[id].len;
    return t->pool + t->tok[id].off;
}

int32_t hx_tokenizer_token_id(const hx_tokenizer *t, const char *text, size_t len)
{
    int32_t a = hx_tok_added_find(t, text, len);
    if (a >= 0) return t->added[a].id;
    return hx_tok_strmap_get(t, text, len);
}

bool hx_tokenizer_is_special(const hx_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->tok[id].attr & HX_TOKA_SPECIAL);
}

int32_t hx_tokenizer_bos(const hx_tokenizer *t) { return t->bos; }
int32_t hx_tokenizer_eos(const hx_tokenizer *t) { return t->eos; }

const int32_t *hx_tokenizer_eot(const hx_tokenizer *t, size_t *n)
{
    *n = (size_t)t->n_eot;
    return t->eot;
}

bool hx_tokenizer_is_eot(const hx_tokenizer *t, int32_t id)
{
    for (int32_t i = 0; i < t->n_eot; i++)
        if (t->eot[i] == id) return true;
    return false;
}

const char *hx_tokenizer_kind(const hx_tokenizer *t)
{
    return t->byte_level ? "bpe" : "spm-bpe";
}
