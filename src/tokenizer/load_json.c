/* load_json.c - builds a tokenizer from Hugging Face's tokenizer.json (and tokenizer_config.json).
 *
 * Reads model (BPE only: vocab, merges as "a b" strings or [a, b] pairs, byte_fallback,
 * ignore_merges, unk_token, fuse_unk, continuing_subword_prefix, end_of_word_suffix),
 * added_tokens, normalizer, pre_tokenizer, decoder and post_processor into the step lists of
 * tokenizer_int.h. Sequences are flattened. Anything the file asks for that hearth cannot do
 * exactly (another model type, an unknown normalizer) is HX_E_UNSUPPORTED naming the JSON path;
 * anything malformed is HX_E_FORMAT naming the path and what was expected. Defaults are those
 * of the tokenizers library when a key is absent. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

typedef struct {
    hx_tokenizer *t;
    hx_err       *err;
    bool          nul_fix; /* U+10FFFF in strings stands for U+0000 (see hx_tok_load_json) */
} loader;

/* jansson refuses NUL in object keys, and vocabularies may hold "\u0000". The loader parses a
 * copy in which each \u0000 escape is rewritten as U+10FFFF (\uDBFF\uDFFF), then turns that
 * code point (bytes F4 8F BF BF) back into a NUL byte in token texts, merges and added tokens. */
static size_t unfix_nul(char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 4 <= n && (unsigned char)s[i] == 0xF4 && (unsigned char)s[i + 1] == 0x8F &&
            (unsigned char)s[i + 2] == 0xBF && (unsigned char)s[i + 3] == 0xBF) {
            s[k++] = '\0';
            i += 3;
        } else {
            s[k++] = s[i];
        }
    }
    return k;
}

/* Copies a JSON string into buf (cap bytes) with the NUL fix applied; its length, or
 * SIZE_MAX when it does not fit. */
static size_t copy_str(const loader *L, const char *s, size_t n, char *buf, size_t cap)
{
    if (n > cap) return SIZE_MAX;
    memcpy(buf, s, n);
    return L->nul_fix ? unfix_nul(buf, n) : n;
}

/* ---- small JSON helpers ---- */

static hx_status fmt_err(loader *L, const char *path, const char *what)
{
    return hx_err_set(L->err, HX_E_FORMAT, "%s: %s: %s", L->t->name, path, what);
}

static hx_status nomem(loader *L)
{
    return hx_err_set(L->err, HX_E_NOMEM, "%s: out of memory", L->t->name);
}

/* Optional bool: absent or null gives def; anything else but a bool is an error. */
static hx_status get_bool(loader *L, json_t *o, const char *key, bool def, bool *out,
                          const char *path)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return HX_OK;
    }
    if (!json_is_boolean(v)) {
        char p[256];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return fmt_err(L, p, "expected true or false");
    }
    *out = json_is_true(v);
    return HX_OK;
}

/* Optional string into the pool: absent or null gives (0, 0) and *present false. */
static hx_status get_str(loader *L, json_t *o, const char *key, uint32_t *off, uint32_t *len,
                         bool *present, const char *path)
{
    json_t *v = json_object_get(o, key);
    *off = 0;
    *len = 0;
    if (present) *present = false;
    if (!v || json_is_null(v)) return HX_OK;
    if (!json_is_string(v)) {
        char p[256];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return fmt_err(L, p, "expected a string");
    }
    size_t n = json_string_length(v);
    uint32_t o2 = hx_tok_pool_add(L->t, json_string_value(v), n);
    if (o2 == UINT32_MAX) return nomem(L);
    *off = o2;
    *len = (uint32_t)n;
    if (present) *present = true;
    return HX_OK;
}

static const char *type_of(json_t *o) { return json_string_value(json_object_get(o, "type")); }

static hx_status unsupported(loader *L, const char *path, const char *type)
{
    return hx_err_set(L->err, HX_E_UNSUPPORTED, "%s: %s.type \"%s\" is not supported", L->t->name,
                      path, type ? type : "(missing)");
}

/* {"String": s} or {"Regex": r}: a literal into the pool, or a compiled regex. */
static hx_status get_pattern(loader *L, json_t *o, const char *path, uint32_t *off, uint32_t *len,
                             pcre2_code **re)
{
    char p[256];
    snprintf(p, sizeof p, "%s.pattern", path);
    json_t *pat = json_object_get(o, "pattern");
    json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
    *re = NULL;
    if (json_is_string(s)) {
        *len = (uint32_t)json_string_length(s);
        *off = hx_tok_pool_add(L->t, json_string_value(s), *len);
        return *off == UINT32_MAX ? nomem(L) : HX_OK;
    }
    if (json_is_string(r))
        return hx_tok_regex_compile(L->t, json_string_value(r), json_string_length(r), p, re,
                                    L->err);
    return fmt_err(L, p, "expected {\"String\": ...} or {\"Regex\": ...}");
}

/* One code point from a one-character string field (Metaspace replacement, Strip content). */
static hx_status get_char(loader *L, json_t *o, const char *key, const char *def, uint32_t *off,
                          uint32_t *len, const char *path)
{
    bool present;
    hx_status st = get_str(L, o, key, off, len, &present, path);
    if (st != HX_OK) return st;
    if (!present) {
        *len = (uint32_t)strlen(def);
        *off = hx_tok_pool_add(L->t, def, *len);
        if (*off == UINT32_MAX) return nomem(L);
    }
    size_t adv = 0;
    if (*len > 0) (void)hx_tok_utf8_next(L->t->pool + *off, *len, &adv);
    if (*len == 0 || adv != *len) {
        char p[256];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return fmt_err(L, p, "expected a one-character string");
    }
    return HX_OK;
}

static hx_status get_prepend(loader *L, json_t *o, hx_tok_prepend *out, const char *path)
{
    const char *s = json_string_value(json_object_get(o, "prepend_scheme"));
    if (s) {
        if (!strcmp(s, "always")) *out = HX_PREPEND_ALWAYS;
        else if (!strcmp(s, "first")) *out = HX_PREPEND_FIRST;
        else if (!strcmp(s, "never")) *out = HX_PREPEND_NEVER;
        else return fmt_err(L, path, "prepend_scheme is not always, first or never");
        return HX_OK;
    }
    /* Files older than prepend_scheme say add_prefix_space (default true). */
    bool aps;
    hx_status st = get_bool(L, o, "add_prefix_space", true, &aps, path);
    *out = aps ? HX_PREPEND_ALWAYS : HX_PREPEND_NEVER;
    return st;
}

/* ---- step lists ---- */

static hx_tok_norm *add_norm(loader *L)
{
    hx_tokenizer *t = L->t;
    hx_tok_norm *p = hx_realloc(t->norm, ((size_t)t->n_norm + 1) * sizeof *p);
    if (!p) return NULL;
    t->norm = p;
    p = &t->norm[t->n_norm++];
    memset(p, 0, sizeof *p);
    return p;
}

static hx_tok_pre *add_pre(loader *L)
{
    hx_tokenizer *t = L->t;
    hx_tok_pre *p = hx_realloc(t->pre, ((size_t)t->n_pre + 1) * sizeof *p);
    if (!p) return NULL;
    t->pre = p;
    p = &t->pre[t->n_pre++];
    memset(p, 0, sizeof *p);
    return p;
}

static hx_tok_dec *add_dec(loader *L)
{
    hx_tokenizer *t = L->t;
    hx_tok_dec *p = hx_realloc(t->dec, ((size_t)t->n_dec + 1) * sizeof *p);
    if (!p) return NULL;
    t->dec = p;
    p = &t->dec[t->n_dec++];
    memset(p, 0, sizeof *p);
    return p;
}

/* ---- normalizer ---- */

static hx_status parse_norm(loader *L, json_t *n, const char *path, int depth)
{
    if (!n || json_is_null(n)) return HX_OK;
    if (!json_is_object(n) || depth > 16) return fmt_err(L, path, "expected a normalizer object");
    const char *ty = type_of(n);
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers");
        if (!json_is_array(arr)) return fmt_err(L, path, "normalizers: expected an array");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.normalizers[%zu]", path, i);
            hx_status st = parse_norm(L, json_array_get(arr, i), p, depth + 1);
            if (st != HX_OK) return st;
        }
        return HX_OK;
    }
    static const struct { const char *name; hx_tok_norm_kind kind; } simple[] = {
        { "NFC", HX_NORM_NFC }, { "NFD", HX_NORM_NFD }, { "NFKC", HX_NORM_NFKC },
        { "NFKD", HX_NORM_NFKD }, { "Lowercase", HX_NORM_LOWERCASE },
        { "ByteLevel", HX_NORM_BYTELEVEL }, { "Prepend", HX_NORM_PREPEND },
        { "Replace", HX_NORM_REPLACE }, { "Strip", HX_NORM_STRIP },
    };
    for (size_t i = 0; ty && i < HX_COUNTOF(simple); i++) {
        if (strcmp(ty, simple[i].name)) continue;
        hx_tok_norm *nm = add_norm(L);
        if (!nm) return nomem(L);
        nm->kind = simple[i].kind;
        switch (nm->kind) {
        case HX_NORM_PREPEND: {
            bool present;
            hx_status st = get_str(L, n, "prepend", &nm->a_off, &nm->a_len, &present, path);
            if (st == HX_OK && !present) st = fmt_err(L, path, "Prepend without \"prepend\"");
            return st;
        }
        case HX_NORM_REPLACE: {
            hx_status st = get_pattern(L, n, path, &nm->a_off, &nm->a_len, &nm->re);
            if (st != HX_OK) return st;
            bool present;
            st = get_str(L, n, "content", &nm->b_off, &nm->b_len, &present, path);
            if (st == HX_OK && !present) st = fmt_err(L, path, "Replace without \"content\"");
            return st;
        }
        case HX_NORM_STRIP: {
            hx_status st = get_bool(L, n, "strip_left", true, &nm->left, path);
            if (st == HX_OK) st = get_bool(L, n, "strip_right", true, &nm->right, path);
            return st;
        }
        default: return HX_OK;
        }
    }
    return unsupported(L, path, ty);
}

/* ---- pre-tokenizer ---- */

static hx_status parse_behavior(loader *L, json_t *o, hx_tok_behavior def, hx_tok_behavior *out,
                                const char *path)
{
    static const struct { const char *name; hx_tok_behavior b; } tab[] = {
        { "Removed", HX_SPLIT_REMOVED }, { "Isolated", HX_SPLIT_ISOLATED },
        { "MergedWithPrevious", HX_SPLIT_MERGED_PREV }, { "MergedWithNext", HX_SPLIT_MERGED_NEXT },
        { "Contiguous", HX_SPLIT_CONTIGUOUS },
    };
    json_t *v = json_object_get(o, "behavior");
    *out = def;
    if (!v || json_is_null(v)) return HX_OK;
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < HX_COUNTOF(tab); i++)
        if (!strcmp(s, tab[i].name)) {
            *out = tab[i].b;
            return HX_OK;
        }
    return fmt_err(L, path, "behavior is not Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext or Contiguous");
}

static hx_status parse_pre(loader *L, json_t *n, const char *path, int depth)
{
    if (!n || json_is_null(n)) return HX_OK;
    if (!json_is_object(n) || depth > 16)
        return fmt_err(L, path, "expected a pre-tokenizer object");
    const char *ty = type_of(n);
    hx_status st = HX_OK;
    if (!ty) return unsupported(L, path, ty);
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "pretokenizers");
        if (!json_is_array(arr)) return fmt_err(L, path, "pretokenizers: expected an array");
        for (size_t i = 0; i < json_array_size(arr) && st == HX_OK; i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.pretokenizers[%zu]", path, i);
            st = parse_pre(L, json_array_get(arr, i), p, depth + 1);
        }
        return st;
    }
    if (!strcmp(ty, "BertPreTokenizer")) {
        hx_tok_pre *a = add_pre(L);
        if (!a) return nomem(L);
        a->kind = HX_PRE_WSSPLIT;
        a->behavior = HX_SPLIT_REMOVED;
        hx_tok_pre *b = add_pre(L);
        if (!b) return nomem(L);
        b->kind = HX_PRE_PUNCT;
        b->behavior = HX_SPLIT_ISOLATED;
        return HX_OK;
    }
    hx_tok_pre *p = add_pre(L);
    if (!p) return nomem(L);
    if (!strcmp(ty, "ByteLevel")) {
        p->kind = HX_PRE_BYTELEVEL;
        st = get_bool(L, n, "add_prefix_space", true, &p->add_prefix_space, path);
        if (st == HX_OK) st = get_bool(L, n, "use_regex", true, &p->use_regex, path);
        if (st == HX_OK && p->use_regex)
            st = hx_tok_regex_compile(L->t, hx_tok_gpt2_regex, strlen(hx_tok_gpt2_regex), path,
                                      &p->re, L->err);
        L->t->byte_level = true;
    } else if (!strcmp(ty, "Split")) {
        p->kind = HX_PRE_SPLIT;
        st = get_pattern(L, n, path, &p->lit_off, &p->lit_len, &p->re);
        if (st == HX_OK) st = parse_behavior(L, n, HX_SPLIT_ISOLATED, &p->behavior, path);
        if (st == HX_OK) st = get_bool(L, n, "invert", false, &p->invert, path);
    } else if (!strcmp(ty, "Digits")) {
        p->kind = HX_PRE_DIGITS;
        st = get_bool(L, n, "individual_digits", false, &p->individual_digits, path);
        p->behavior = p->individual_digits ? HX_SPLIT_ISOLATED : HX_SPLIT_CONTIGUOUS;
    } else if (!strcmp(ty, "Punctuation")) {
        p->kind = HX_PRE_PUNCT;
        st = parse_behavior(L, n, HX_SPLIT_ISOLATED, &p->behavior, path);
    } else if (!strcmp(ty, "Whitespace")) {
        static const char re[] = "\\w+|[^\\w\\s]+";
        p->kind = HX_PRE_WHITESPACE;
        p->behavior = HX_SPLIT_REMOVED;
        p->invert = true;
        st = hx_tok_regex_compile(L->t, re, strlen(re), path, &p->re, L->err);
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        p->kind = HX_PRE_WSSPLIT;
        p->behavior = HX_SPLIT_REMOVED;
    } else if (!strcmp(ty, "CharDelimiterSplit")) {
        p->kind = HX_PRE_CHARSPLIT;
        p->behavior = HX_SPLIT_REMOVED;
        st = get_char(L, n, "delimiter", " ", &p->lit_off, &p->lit_len, path);
    } else if (!strcmp(ty, "Metaspace")) {
        p->kind = HX_PRE_METASPACE;
        st = get_char(L, n, "replacement", "\xE2\x96\x81", &p->lit_off, &p->lit_len, path);
        if (st == HX_OK) st = get_prepend(L, n, &p->prepend, path);
        if (st == HX_OK) st = get_bool(L, n, "split", true, &p->split, path);
    } else {
        return unsupported(L, path, ty);
    }
    return st;
}

/* ---- decoder ---- */

static hx_status parse_dec(loader *L, json_t *n, const char *path, int depth)
{
    if (!n || json_is_null(n)) return HX_OK;
    if (!json_is_object(n) || depth > 16) return fmt_err(L, path, "expected a decoder object");
    const char *ty = type_of(n);
    hx_status st = HX_OK;
    if (!ty) return unsupported(L, path, ty);
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "decoders");
        if (!json_is_array(arr)) return fmt_err(L, path, "decoders: expected an array");
        for (size_t i = 0; i < json_array_size(arr) && st == HX_OK; i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.decoders[%zu]", path, i);
            st = parse_dec(L, json_array_get(arr, i), p, depth + 1);
        }
        return st;
    }
    hx_tok_dec *d = add_dec(L);
    if (!d) return nomem(L);
    if (!strcmp(ty, "ByteLevel")) {
        d->kind = HX_DEC_BYTELEVEL;
    } else if (!strcmp(ty, "ByteFallback")) {
        d->kind = HX_DEC_BYTEFALLBACK;
    } else if (!strcmp(ty, "Fuse")) {
        d->kind = HX_DEC_FUSE;
    } else if (!strcmp(ty, "Replace")) {
        pcre2_code *re = NULL;
        d->kind = HX_DEC_REPLACE;
        st = get_pattern(L, n, path, &d->a_off, &d->a_len, &re);
        if (re) {
            pcre2_code_free(re);
            return hx_err_set(L->err, HX_E_UNSUPPORTED, "%s: %s: a Replace decoder with a Regex "
                              "pattern is not supported", L->t->name, path);
        }
        bool present;
        if (st == HX_OK) st = get_str(L, n, "content", &d->b_off, &d->b_len, &present, path);
    } else if (!strcmp(ty, "Strip")) {
        uint32_t off, len;
        d->kind = HX_DEC_STRIP;
        st = get_char(L, n, "content", " ", &off, &len, path);
        size_t adv;
        if (st == HX_OK) d->ch = hx_tok_utf8_next(L->t->pool + off, len, &adv);
        json_t *a = json_object_get(n, "start"), *b = json_object_get(n, "stop");
        d->start = json_is_integer(a) ? (int32_t)json_integer_value(a) : 0;
        d->stop = json_is_integer(b) ? (int32_t)json_integer_value(b) : 0;
        if (d->start < 0 || d->stop < 0 || d->start > 1000 || d->stop > 1000)
            st = fmt_err(L, path, "Strip start/stop out of range");
    } else if (!strcmp(ty, "Metaspace")) {
        d->kind = HX_DEC_METASPACE;
        st = get_char(L, n, "replacement", "\xE2\x96\x81", &d->a_off, &d->a_len, path);
        if (st == HX_OK) st = get_prepend(L, n, &d->prepend, path);
    } else if (!strcmp(ty, "BPEDecoder")) {
        bool present;
        d->kind = HX_DEC_BPE_SUFFIX;
        st = get_str(L, n, "suffix", &d->a_off, &d->a_len, &present, path);
        if (st == HX_OK && !present) {
            d->a_len = 4;
            d->a_off = hx_tok_pool_add(L->t, "</w>", 4);
            if (d->a_off == UINT32_MAX) st = nomem(L);
        }
    } else {
        return unsupported(L, path, ty);
    }
    return st;
}

/* ---- model ---- */

static int32_t vocab_get(hx_tokenizer *t, const char *s, size_t n)
{
    return hx_tok_strmap_get(t, s, n);
}

static hx_status parse_vocab(loader *L, json_t *model, json_t *added)
{
    hx_tokenizer *t = L->t;
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return fmt_err(L, "model.vocab", "expected an object");
    /* The id space covers the vocabulary and the added tokens. */
    json_int_t max_id = -1;
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(vocab, key, klen, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= HX_TOK_MAX_VOCAB) {
            char msg[160];
            snprintf(msg, sizeof msg, "the id of \"%.40s\" is not an integer in [0, %d)", key,
                     HX_TOK_MAX_VOCAB);
            return fmt_err(L, "model.vocab", msg);
        }
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *id = json_object_get(json_array_get(added, i), "id");
        if (json_is_integer(id) && json_integer_value(id) > max_id &&
            json_integer_value(id) < HX_TOK_MAX_VOCAB)
            max_id = json_integer_value(id);
    }
    hx_status st = hx_tok_set_vocab_size(t, (int32_t)(max_id + 1), L->err);
    if (st != HX_OK) return st;
    json_object_keylen_foreach(vocab, key, klen, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (!(t->tok[id].attr & HX_TOKA_UNUSED)) continue; /* an id listed twice keeps one text */
        char buf[HX_TOK_MAX_TOKEN_BYTES];
        klen = copy_str(L, key, klen, buf, sizeof buf);
        if (klen == SIZE_MAX) return fmt_err(L, "model.vocab", "a token is too long");
        uint32_t off = hx_tok_pool_add(t, buf, klen);
        if (off == UINT32_MAX) return nomem(L);
        t->tok[id] = (hx_tok_entry){ off, (uint32_t)klen, HX_TOKA_MODEL, 0 };
    }
    return hx_tok_strmap_build(t, L->err);
}

/* One merge: "a b" or ["a", "b"] → the two parts. */
static bool merge_parts(json_t *m, const char **a, size_t *al, const char **b, size_t *bl)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (!sp) return false;
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = n - *al - 1;
        return true;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return true;
    }
    return false;
}

static hx_status parse_merges(loader *L, json_t *model)
{
    hx_tokenizer *t = L->t;
    json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_null(merges) && !json_is_array(merges))
        return fmt_err(L, "model.merges", "expected an array");
    size_t n = json_array_size(merges);
    if (hx_tok_merges_init(&t->merges, (uint32_t)(n > UINT32_MAX / 4 ? UINT32_MAX / 4 : n)))
        return nomem(L);
    char buf[2 * HX_TOK_MAX_TOKEN_BYTES + 1];
    const char *pre = t->pool + t->cont_off;
    for (size_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t al, bl;
        char p[64];
        snprintf(p, sizeof p, "model.merges[%zu]", i);
        if (!merge_parts(json_array_get(merges, i), &a, &al, &b, &bl))
            return fmt_err(L, p, "expected \"a b\" or [\"a\", \"b\"]");
        char pa[HX_TOK_MAX_TOKEN_BYTES], pb[HX_TOK_MAX_TOKEN_BYTES];
        if (L->nul_fix) {
            al = copy_str(L, a, al, pa, sizeof pa);
            bl = copy_str(L, b, bl, pb, sizeof pb);
            a = pa;
            b = pb;
        }
        int32_t ia = vocab_get(t, a, al), ib = vocab_get(t, b, bl);
        if (ia < 0 || ib < 0 || al > HX_TOK_MAX_TOKEN_BYTES || bl > HX_TOK_MAX_TOKEN_BYTES) {
            char msg[200];
            snprintf(msg, sizeof msg, "\"%.*s\" is not in the vocabulary",
                     (int)(ia < 0 ? (al > 60 ? 60 : al) : (bl > 60 ? 60 : bl)), ia < 0 ? a : b);
            return fmt_err(L, p, msg);
        }
        /* The merged token drops b's continuing-subword prefix. */
        if (t->cont_len && bl >= t->cont_len && !memcmp(b, pre, t->cont_len)) {
            b += t->cont_len;
            bl -= t->cont_len;
        }
        memcpy(buf, a, al);
        memcpy(buf + al, b, bl);
        int32_t im = vocab_get(t, buf, al + bl);
        if (im < 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "the merged token \"%.*s\" is not in the vocabulary",
                     (int)(al + bl > 60 ? 60 : al + bl), buf);
            return fmt_err(L, p, msg);
        }
        if (hx_tok_merges_put(&t->merges, ia, ib, (uint32_t)i, im)) return nomem(L);
    }
    return HX_OK;
}

static hx_status parse_model(loader *L, json_t *model, json_t *added)
{
    hx_tokenizer *t = L->t;
    if (!json_is_object(model)) return fmt_err(L, "model", "expected an object");
    const char *ty = type_of(model);
    /* The type tag may be missing in files saved by old versions; BPE is the one with merges. */
    if (ty ? strcmp(ty, "BPE") != 0 : !json_object_get(model, "merges")) {
        return hx_err_set(L->err, HX_E_UNSUPPORTED, "%s: model.type \"%s\" is not supported "
                          "(hearth reads BPE tokenizers)", t->name, ty ? ty : "(missing)");
    }
    t->kind = HX_TOK_KIND_BPE;
    hx_status st = parse_vocab(L, model, added);
    if (st == HX_OK) st = get_bool(L, model, "byte_fallback", false, &t->byte_fallback, "model");
    if (st == HX_OK) st = get_bool(L, model, "ignore_merges", false, &t->ignore_merges, "model");
    if (st == HX_OK) st = get_bool(L, model, "fuse_unk", false, &t->fuse_unk, "model");
    if (st == HX_OK)
        st = get_str(L, model, "continuing_subword_prefix", &t->cont_off, &t->cont_len, NULL,
                     "model");
    if (st == HX_OK)
        st = get_str(L, model, "end_of_word_suffix", &t->eow_off, &t->eow_len, NULL, "model");
    if (st != HX_OK) return st;
    if (t->cont_len > 64 || t->eow_len > 64)
        return fmt_err(L, "model", "continuing_subword_prefix/end_of_word_suffix too long");
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk))
        t->unk_id = vocab_get(t, json_string_value(unk), json_string_length(unk));
    return parse_merges(L, model);
}

/* ---- added tokens ---- */

static hx_status parse_added(loader *L, json_t *arr)
{
    hx_tokenizer *t = L->t;
    if (!arr || json_is_null(arr)) return HX_OK;
    if (!json_is_array(arr)) return fmt_err(L, "added_tokens", "expected an array");
    size_t n = json_array_size(arr);
    t->added = hx_calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return nomem(L);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        char p[64];
        snprintf(p, sizeof p, "added_tokens[%zu]", i);
        json_t *id = json_object_get(o, "id"), *content = json_object_get(o, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= t->n_vocab || !json_is_string(content))
            return fmt_err(L, p, "expected {\"id\": integer, \"content\": string, ...}");
        hx_tok_added *a = &t->added[t->n_added];
        a->id = (int32_t)json_integer_value(id);
        char buf[HX_TOK_MAX_TOKEN_BYTES];
        size_t cl = copy_str(L, json_string_value(content), json_string_length(content), buf,
                             sizeof buf);
        if (cl == SIZE_MAX) return fmt_err(L, p, "content is too long");
        a->off = hx_tok_pool_add(t, buf, cl);
        if (a->off == UINT32_MAX) return nomem(L);
        a->len = (uint32_t)cl;
        hx_status st = get_bool(L, o, "special", false, &a->special, p);
        if (st == HX_OK) st = get_bool(L, o, "lstrip", false, &a->lstrip, p);
        if (st == HX_OK) st = get_bool(L, o, "rstrip", false, &a->rstrip, p);
        if (st == HX_OK) st = get_bool(L, o, "single_word", false, &a->single_word, p);
        if (st == HX_OK) st = get_bool(L, o, "normalized", !a->special, &a->normalized, p);
        if (st != HX_OK) return st;
        hx_tok_entry *e = &t->tok[a->id];
        /* An id outside the model's vocabulary takes the content as its text. Inside it, the
         * model's text stays (they agree in every real file). */
        if (e->attr & HX_TOKA_UNUSED) *e = (hx_tok_entry){ a->off, a->len, 0, 0 };
        e->attr |= HX_TOKA_ADDED | (a->special ? HX_TOKA_SPECIAL : 0);
        t->n_added++;
    }
    return HX_OK;
}

/* ---- post-processor ---- */

static hx_status push_id(loader *L, int32_t **arr, int32_t *n, int32_t id)
{
    int32_t *p = hx_realloc(*arr, ((size_t)*n + 1) * sizeof *p);
    if (!p) return nomem(L);
    *arr = p;
    p[(*n)++] = id;
    return HX_OK;
}

static hx_status parse_post(loader *L, json_t *n, const char *path, int depth)
{
    hx_tokenizer *t = L->t;
    if (!n || json_is_null(n)) return HX_OK;
    if (!json_is_object(n) || depth > 8)
        return fmt_err(L, path, "expected a post-processor object");
    const char *ty = type_of(n);
    if (!ty) return HX_OK;
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "processors");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.processors[%zu]", path, i);
            hx_status st = parse_post(L, json_array_get(arr, i), p, depth + 1);
            if (st != HX_OK) return st;
        }
        return HX_OK;
    }
    if (!strcmp(ty, "TemplateProcessing")) {
        json_t *single = json_object_get(n, "single"), *sp = json_object_get(n, "special_tokens");
        bool after = false;
        for (size_t i = 0; i < json_array_size(single); i++) {
            json_t *it = json_array_get(single, i);
            if (json_object_get(it, "Sequence")) {
                after = true;
                continue;
            }
            json_t *st = json_object_get(it, "SpecialToken");
            const char *name = json_string_value(json_object_get(st, "id"));
            json_t *ids = json_object_get(json_object_get(sp, name ? name : ""), "ids");
            if (!name || !json_is_array(ids))
                return fmt_err(L, path, "single: a SpecialToken missing from special_tokens");
            for (size_t k = 0; k < json_array_size(ids); k++) {
                json_int_t id = json_integer_value(json_array_get(ids, k));
                if (id < 0 || id >= t->n_vocab)
                    return fmt_err(L, path, "special_tokens: id outside the vocabulary");
                hx_status r = after ? push_id(L, &t->post_post, &t->n_post_post, (int32_t)id)
                                    : push_id(L, &t->post_pre, &t->n_post_pre, (int32_t)id);
                if (r != HX_OK) return r;
            }
        }
        return HX_OK;
    }
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        json_int_t cls = json_integer_value(json_array_get(json_object_get(n, "cls"), 1));
        json_int_t sep = json_integer_value(json_array_get(json_object_get(n, "sep"), 1));
        if (cls < 0 || cls >= t->n_vocab || sep < 0 || sep >= t->n_vocab)
            return fmt_err(L, path, "cls/sep id outside the vocabulary");
        hx_status r = push_id(L, &t->post_pre, &t->n_post_pre, (int32_t)cls);
        return r != HX_OK ? r : push_id(L, &t->post_post, &t->n_post_post, (int32_t)sep);
    }
    return HX_OK; /* ByteLevel and others add no tokens to a single sequence */
}

/* ---- tokenizer_config.json and special ids ---- */

/* "bos_token": "<s>" or {"content": "<s>", ...}. */
static int32_t config_token(hx_tokenizer *t, json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return -1;
    return hx_tokenizer_token_id(t, json_string_value(v), json_string_length(v));
}

static int32_t first_named(hx_tokenizer *t, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = hx_tokenizer_token_id(t, names[i], strlen(names[i]));
        if (id >= 0) return id;
    }
    return -1;
}

static hx_status apply_config(loader *L, const char *cfg_path, bool have_post)
{
    hx_tokenizer *t = L->t;
    json_t *cfg = NULL;
    if (cfg_path) {
        json_error_t je;
        /* model_max_length is often 1e30 written as an integer: read numbers as reals. */
        cfg = json_load_file(cfg_path, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        if (!cfg || !json_is_object(cfg)) {
            json_decref(cfg);
            return hx_err_set(L->err, HX_E_FORMAT, "%s: not valid JSON (line %d, column %d: %s)",
                              cfg_path, je.line, je.column, je.text);
        }
    }
    t->bos = config_token(t, cfg, "bos_token");
    t->eos = config_token(t, cfg, "eos_token");
    t->pad = config_token(t, cfg, "pad_token");
    static const char *const bos_names[] = { "<s>", "<|begin_of_text|>", "<bos>",
                                             "<|startoftext|>", "<|endoftext|>" };
    static const char *const eos_names[] = { "</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>",
                                             "<|im_end|>" };
    if (t->bos < 0 && t->n_post_pre > 0) t->bos = t->post_pre[0];
    if (t->bos < 0 && !cfg) t->bos = first_named(t, bos_names, HX_COUNTOF(bos_names));
    if (t->eos < 0 && !cfg) t->eos = first_named(t, eos_names, HX_COUNTOF(eos_names));
    hx_status st = HX_OK;
    if (!have_post && cfg) {
        /* No post-processor: transformers' add_bos_token / add_eos_token decide. */
        if (json_is_true(json_object_get(cfg, "add_bos_token")) && t->bos >= 0)
            st = push_id(L, &t->post_pre, &t->n_post_pre, t->bos);
        if (st == HX_OK && json_is_true(json_object_get(cfg, "add_eos_token")) && t->eos >= 0)
            st = push_id(L, &t->post_post, &t->n_post_post, t->eos);
    }
    json_decref(cfg);
    return st;
}

/* ---- entry ---- */

/* True when s holds a \u0000 escape (an even run of backslashes before it means the
 * backslash is escaped, but over-reporting only costs a copy). */
static bool memmem_nul_escape(const char *s, size_t n)
{
    for (size_t i = 0; i + 6 <= n; i++)
        if (s[i] == '\\' && s[i + 1] == 'u' && s[i + 2] == '0' && s[i + 3] == '0' &&
            s[i + 4] == '0' && s[i + 5] == '0')
            return true;
    return false;
}

/* A copy of s with every unescaped \u0000 written as \uDBFF\uDFFF (hx_alloc'd). */
static char *rewrite_nul_escapes(const char *s, size_t n, size_t *out_len)
{
    if (n > SIZE_MAX / 2 - 1) return NULL;
    char *d = hx_alloc(2 * n + 1);
    if (!d) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] == '\\' && i + 1 < n) {
            if (i + 6 <= n && !memcmp(s + i + 1, "u0000", 5)) {
                memcpy(d + k, "\\uDBFF\\uDFFF", 12);
                k += 12;
                i += 6;
            } else { /* any other escape: copy both characters so \\ is never misread */
                d[k++] = s[i++];
                d[k++] = s[i++];
            }
            continue;
        }
        d[k++] = s[i++];
    }
    *out_len = k;
    return d;
}

hx_status hx_tok_load_json(hx_tokenizer *t, const char *data, size_t len, const char *cfg_path,
                           hx_err *err)
{
    loader L = { t, err, false };
    json_error_t je;
    char *copy = NULL;
    if (memmem_nul_escape(data, len)) {
        if (!(copy = rewrite_nul_escapes(data, len, &len)))
            return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
        data = copy;
        L.nul_fix = true;
    }
    json_t *root = json_loadb(data, len, JSON_ALLOW_NUL, &je);
    hx_free(copy);
    hx_status st;
    if (!root) {
        return hx_err_set(err, HX_E_FORMAT, "%s: not valid JSON (line %d, column %d: %s)", t->name,
                          je.line, je.column, je.text);
    }
    if (!json_is_object(root)) {
        st = fmt_err(&L, "(top level)", "expected an object");
        goto done;
    }
    json_t *added = json_object_get(root, "added_tokens");
    if ((st = parse_model(&L, json_object_get(root, "model"), added)) != HX_OK) goto done;
    if ((st = parse_added(&L, added)) != HX_OK) goto done;
    if ((st = parse_norm(&L, json_object_get(root, "normalizer"), "normalizer", 0))) goto done;
    if ((st = parse_pre(&L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", 0))) goto done;
    if ((st = parse_dec(&L, json_object_get(root, "decoder"), "decoder", 0))) goto done;
    json_t *post = json_object_get(root, "post_processor");
    if ((st = parse_post(&L, post, "post_processor", 0))) goto done;
    st = apply_config(&L, cfg_path, post && !json_is_null(post));
done:
    json_decref(root);
    return st;
}
