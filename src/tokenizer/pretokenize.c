/* pretokenize.c - pre-tokenizers: cutting normalized text into the pieces BPE sees.
 *
 * Implements Hugging Face's Split (regex or literal, every SplitDelimiterBehavior, invert),
 * ByteLevel (prefix space, GPT-2 regex, byte → character mapping), Digits, Punctuation,
 * Whitespace, WhitespaceSplit, CharDelimiterSplit and Metaspace, chained as a Sequence.
 * Regexes are Oniguruma syntax in tokenizer.json; they run on PCRE2 (UTF + UCP, JIT) after
 * hx_tok_regex_compile rewrites the classes whose meaning differs (\s, \w, \h, \u).
 *
 * Invariants: pieces are byte ranges of w->store and are never empty; a step that rewrites
 * text appends the new text to the store, so pieces stay valid as it grows. When ByteLevel is
 * the last step its byte → character mapping is left to the BPE model (t->bl_deferred), which
 * maps through a table instead of building strings; an earlier ByteLevel maps here, because
 * later steps must see the mapped characters (Hugging Face's Digits after ByteLevel splits
 * the "²" that stands for byte 0xB2). */
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

#include <utf8proc.h>

const char hx_tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- UTF-8 and the byte-level alphabet ---- */

uint32_t hx_tok_utf8_next(const char *s, size_t n, size_t *adv)
{
    const uint8_t *u = (const uint8_t *)s;
    if (u[0] < 0x80 || n < 2) {
        *adv = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *adv = 2;
        return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0 || n < 4) {
        *adv = n < 3 ? n : 3;
        if (n < 3) return 0xFFFD;
        return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    }
    *adv = 4;
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
           (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

size_t hx_tok_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's alphabet: printable Latin-1 bytes stand for themselves; the other 68 bytes (controls,
 * space, DEL, NBSP, soft hyphen) take U+0100 onwards in byte order. */
static bool byte_is_self(uint8_t b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t hx_tok_byte_to_cp(uint8_t b)
{
    if (byte_is_self(b)) return b;
    uint32_t n = 0;
    for (uint32_t i = 0; i < b; i++) n += !byte_is_self((uint8_t)i);
    return 0x100 + n;
}

int32_t hx_tok_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100) return byte_is_self((uint8_t)cp) ? (int32_t)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (uint32_t b = 0; b < 256; b++)
        if (!byte_is_self((uint8_t)b) && n-- == 0) return (int32_t)b;
    return -1;
}

/* ---- character classes, as Rust's char methods define them ---- */

static bool is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_numeric(uint32_t c)
{
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

static bool is_punct(uint32_t c)
{
    if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                         (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ---- regexes ---- */

/* White_Space, the set Oniguruma's \s matches; PCRE2's \s adds U+180E. */
#define WS_SET "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}" \
               "\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation. */
#define WORD_SET "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

static hx_status emit(hx_tok_text *o, const char *s) { return hx_tok_text_append(o, s, strlen(s)); }

static bool is_hex4(const char *p)
{
    for (int i = 0; i < 4; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f') ||
              (p[i] >= 'A' && p[i] <= 'F')))
            return false;
    return true;
}

/* Rewrites Oniguruma (Ruby syntax) into PCRE2 syntax with the same meaning. */
static hx_status translate(const char *p, size_t n, hx_tok_text *o)
{
    int depth = 0; /* inside a character class */
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            const char *rep = NULL;
            switch (d) {
            case 's': rep = depth ? WS_SET : "[" WS_SET "]"; break;
            case 'S': rep = depth ? "\\S" : "[^" WS_SET "]"; break;
            case 'w': rep = depth ? WORD_SET : "[" WORD_SET "]"; break;
            case 'W': rep = depth ? "\\W" : "[^" WORD_SET "]"; break;
            case 'h': rep = depth ? "0-9A-Fa-f" : "[0-9A-Fa-f]"; break; /* Ruby: hex digit */
            case 'H': rep = depth ? "\\H" : "[^0-9A-Fa-f]"; break;
            default: break;
            }
            if (rep) {
                if (emit(o, rep)) return HX_E_NOMEM;
                i += 2;
                continue;
            }
            if (d == 'u' && i + 6 <= n && is_hex4(p + i + 2)) { /* \uHHHH → \x{HHHH} */
                if (emit(o, "\\x{") || hx_tok_text_append(o, p + i + 2, 4) || emit(o, "}"))
                    return HX_E_NOMEM;
                i += 6;
                continue;
            }
            if (hx_tok_text_append(o, p + i, 2)) return HX_E_NOMEM;
            i += 2;
            continue;
        }
        if (c == '[') {
            if (depth && i + 1 < n && p[i + 1] == ':') { /* POSIX class inside a class */
                const char *end = NULL;
                for (size_t j = i + 2; j + 1 < n; j++)
                    if (p[j] == ':' && p[j + 1] == ']') {
                        end = p + j + 2;
                        break;
                    }
                if (end) {
                    if (hx_tok_text_append(o, p + i, (size_t)(end - (p + i)))) return HX_E_NOMEM;
                    i = (size_t)(end - p);
                    continue;
                }
            }
            if (!depth) {
                depth = 1;
                if (hx_tok_text_append(o, "[", 1)) return HX_E_NOMEM;
                i++;
                /* "[^]..." and "[]...": a leading ] is a literal */
                if (i < n && p[i] == '^') {
                    if (hx_tok_text_append(o, "^", 1)) return HX_E_NOMEM;
                    i++;
                }
                if (i < n && p[i] == ']') {
                    if (emit(o, "\\]")) return HX_E_NOMEM;
                    i++;
                }
                continue;
            }
            if (emit(o, "\\[")) return HX_E_NOMEM;
            i++;
            continue;
        }
        if (c == ']' && depth) depth = 0;
        if (hx_tok_text_append(o, p + i, 1)) return HX_E_NOMEM;
        i++;
    }
    return HX_OK;
}

hx_status hx_tok_regex_compile(hx_tokenizer *t, const char *pat, size_t len, const char *what,
                               pcre2_code **out, hx_err *err)
{
    hx_tok_text pcre = { 0 };
    if (translate(pat, len, &pcre) != HX_OK || hx_tok_text_reserve(&pcre, 1) != HX_OK) {
        hx_tok_text_free(&pcre);
        return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
    }
    int code;
    PCRE2_SIZE off;
    /* Ruby's ^ and $ match at line boundaries: MULTILINE gives PCRE2 the same meaning. */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pcre.data, pcre.len,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &code, &off, t->cctx);
    hx_tok_text_free(&pcre);
    if (!re) {
        if (code == PCRE2_ERROR_NOMEMORY || code == PCRE2_ERROR_HEAP_FAILED)
            return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", t->name);
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return hx_err_set(err, HX_E_FORMAT, "%s: %s: bad regex \"%.*s\" (%s at offset %zu)",
                          t->name, what, (int)(len > 120 ? 120 : len), pat, (char *)msg,
                          (size_t)off);
    }
    /* Without JIT (unsupported CPU, or no memory for it) the interpreter still runs. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return HX_OK;
}

bool hx_tok_regex_next(const pcre2_code *re, const char *s, size_t n, size_t pos,
                       hx_tok_prework *w, size_t *ms, size_t *me)
{
    if (pos > n) return false;
    int rc = pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, w->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !w->jit_stack && w->mctx) {
        /* Long inputs can outgrow the 32 KiB default stack; retry once with a large one. */
        w->jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, w->tok->gctx);
        if (w->jit_stack) {
            pcre2_jit_stack_assign(w->mctx, NULL, w->jit_stack);
            rc = pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, w->mctx);
        }
    }
    if (rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
    if (rc < 0) return false;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
    *ms = ov[0];
    *me = ov[1];
    return *me >= *ms && *me <= n;
}

/* ---- pieces and events ---- */

static hx_status ev_push(hx_tok_prework *w, size_t a, size_t b, bool m)
{
    if (w->n_ev == w->cap_ev) {
        size_t nc = w->cap_ev ? 2 * w->cap_ev : 64;
        hx_tok_event *p = hx_realloc(w->ev, nc * sizeof *p);
        if (!p) return HX_E_NOMEM;
        w->ev = p;
        w->cap_ev = nc;
    }
    w->ev[w->n_ev++] = (hx_tok_event){ (uint32_t)a, (uint32_t)b, m };
    return HX_OK;
}

static hx_status piece_push(hx_tok_piece **arr, size_t *n, size_t *cap, hx_tok_piece p)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        hx_tok_piece *q = hx_realloc(*arr, nc * sizeof *q);
        if (!q) return HX_E_NOMEM;
        *arr = q;
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return HX_OK;
}

/* Turns the events of piece p into output pieces following Hugging Face's fold for each
 * behavior, dropping empty results. */
static hx_status emit_splits(hx_tok_prework *w, hx_tok_piece p, hx_tok_behavior bh, bool invert)
{
    hx_tok_event *ev = w->ev;
    size_t n = w->n_ev, k = 0;
    if (invert)
        for (size_t i = 0; i < n; i++) ev[i].match = !ev[i].match;
    /* Fold in place: ev[0..k) are the results, .match marks ones to remove. */
    switch (bh) {
    case HX_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++) ev[k++] = ev[i];
        break;
    case HX_SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) ev[k++] = (hx_tok_event){ ev[i].start, ev[i].end, false };
        break;
    case HX_SPLIT_CONTIGUOUS:
    case HX_SPLIT_MERGED_PREV: {
        bool prev = false;
        for (size_t i = 0; i < n; i++) {
            bool m = ev[i].match;
            bool merge = bh == HX_SPLIT_CONTIGUOUS ? (m == prev) : (m && !prev);
            if (merge && k > 0) ev[k - 1].end = ev[i].end;
            else ev[k++] = (hx_tok_event){ ev[i].start, ev[i].end, false };
            prev = m;
        }
        break;
    }
    case HX_SPLIT_MERGED_NEXT: {
        /* Walk backwards, merging a match into the piece after it, then restore order. */
        bool prev = false;
        size_t out = n; /* results fill ev[out..n) from the back */
        for (size_t i = n; i-- > 0;) {
            hx_tok_event e = ev[i];
            if (e.match && !prev && out < n) ev[out].start = e.start;
            else ev[--out] = (hx_tok_event){ e.start, e.end, false };
            prev = e.match;
        }
        for (size_t i = out; i < n; i++) ev[k++] = ev[i];
        break;
    }
    }
    for (size_t i = 0; i < k; i++) {
        if (ev[i].match || ev[i].end <= ev[i].start) continue;
        hx_tok_piece q = { p.off + ev[i].start, ev[i].end - ev[i].start, p.mapped,
                           p.at_start && ev[i].start == 0 };
        if (piece_push(&w->b, &w->n_b, &w->cap_b, q)) return HX_E_NOMEM;
    }
    return HX_OK;
}

/* Events from a regex, a literal, or a per-character predicate, over s[0..n). */
static hx_status events_regex(hx_tok_prework *w, const pcre2_code *re, const char *s, size_t n)
{
    size_t prev = 0, pos = 0, ms, me;
    w->n_ev = 0;
    while (pos <= n && hx_tok_regex_next(re, s, n, pos, w, &ms, &me)) {
        if (ms > prev && ev_push(w, prev, ms, false)) return HX_E_NOMEM;
        if (ev_push(w, ms, me, true)) return HX_E_NOMEM;
        prev = me;
        if (me == ms) { /* empty match: step over one character, as Oniguruma's iterator does */
            if (me >= n) break;
            size_t adv;
            (void)hx_tok_utf8_next(s + me, n - me, &adv);
            pos = me + adv;
        } else {
            pos = me;
        }
    }
    if (prev < n && ev_push(w, prev, n, false)) return HX_E_NOMEM;
    return HX_OK;
}

static hx_status events_literal(hx_tok_prework *w, const char *lit, size_t ll, const char *s,
                                size_t n)
{
    size_t prev = 0;
    w->n_ev = 0;
    if (ll > 0)
        for (size_t i = 0; i + ll <= n;) {
            if (s[i] == lit[0] && !memcmp(s + i, lit, ll)) {
                if (i > prev && ev_push(w, prev, i, false)) return HX_E_NOMEM;
                if (ev_push(w, i, i + ll, true)) return HX_E_NOMEM;
                i += ll;
                prev = i;
            } else {
                i++;
            }
        }
    if (prev < n && ev_push(w, prev, n, false)) return HX_E_NOMEM;
    return HX_OK;
}

typedef bool (*cp_pred)(uint32_t c, uint32_t arg);
static bool pred_ws(uint32_t c, uint32_t arg) { (void)arg; return is_ws(c); }
static bool pred_num(uint32_t c, uint32_t arg) { (void)arg; return is_numeric(c); }
static bool pred_punct(uint32_t c, uint32_t arg) { (void)arg; return is_punct(c); }
static bool pred_char(uint32_t c, uint32_t arg) { return c == arg; }

static hx_status events_pred(hx_tok_prework *w, cp_pred f, uint32_t arg, const char *s, size_t n)
{
    size_t prev = 0;
    w->n_ev = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t c = hx_tok_utf8_next(s + i, n - i, &adv);
        if (f(c, arg)) {
            if (i > prev && ev_push(w, prev, i, false)) return HX_E_NOMEM;
            if (ev_push(w, i, i + adv, true)) return HX_E_NOMEM;
            prev = i + adv;
        }
        i += adv;
    }
    if (prev < n && ev_push(w, prev, n, false)) return HX_E_NOMEM;
    return HX_OK;
}

/* ---- steps ---- */

/* Appends text to the store and returns the piece covering it. */
static hx_status store_piece(hx_tok_prework *w, const hx_tok_piece *src, const char *pre,
                             size_t pre_len, bool map, hx_tok_piece *out)
{
    size_t need = pre_len + (map ? 2 * (size_t)src->len : src->len) + 8;
    if (hx_tok_text_reserve(&w->store, need)) return HX_E_NOMEM;
    const char *s = w->store.data + src->off; /* after the reserve: the store may have moved */
    size_t off = w->store.len;
    char *d = w->store.data + off;
    size_t k = 0;
    memcpy(d, pre, pre_len);
    k += pre_len;
    if (map) {
        for (uint32_t i = 0; i < src->len; i++)
            k += hx_tok_utf8_put(hx_tok_byte_to_cp((uint8_t)s[i]), d + k);
    } else {
        memcpy(d + k, s, src->len);
        k += src->len;
    }
    w->store.len += k;
    *out = (hx_tok_piece){ (uint32_t)off, (uint32_t)k, src->mapped || map, src->at_start };
    return HX_OK;
}

static hx_status step_bytelevel(const hx_tokenizer *t, const hx_tok_pre *st, bool last,
                                hx_tok_prework *w, hx_tok_piece p)
{
    const bool map = !(last && t->bl_deferred);
    if (st->add_prefix_space && w->store.data[p.off] != ' ') {
        if (store_piece(w, &p, " ", 1, false, &p)) return HX_E_NOMEM;
    }
    size_t first_b = w->n_b;
    if (st->use_regex && st->re) {
        if (events_regex(w, st->re, w->store.data + p.off, p.len)) return HX_E_NOMEM;
        if (emit_splits(w, p, HX_SPLIT_ISOLATED, false)) return HX_E_NOMEM;
    } else if (piece_push(&w->b, &w->n_b, &w->cap_b, p)) {
        return HX_E_NOMEM;
    }
    if (map)
        for (size_t i = first_b; i < w->n_b; i++) {
            hx_tok_piece q = w->b[i];
            if (store_piece(w, &q, "", 0, true, &w->b[i])) return HX_E_NOMEM;
        }
    return HX_OK;
}

static hx_status step_metaspace(const hx_tokenizer *t, const hx_tok_pre *st, hx_tok_prework *w,
                                hx_tok_piece p)
{
    const char *rep = t->pool + st->lit_off;
    const size_t rl = st->lit_len;
    /* Replace spaces, then prepend the replacement as the scheme says. */
    size_t n_sp = 0;
    for (uint32_t i = 0; i < p.len; i++) n_sp += w->store.data[p.off + i] == ' ';
    if (hx_tok_text_reserve(&w->store, p.len + (n_sp + 1) * rl + 8)) return HX_E_NOMEM;
    const char *s = w->store.data + p.off;
    size_t off = w->store.len, k = 0;
    char *d = w->store.data + off;
    bool starts = p.len >= rl && !memcmp(s, rep, rl);
    bool pre = false;
    if (st->prepend == HX_PREPEND_ALWAYS) pre = !starts && !(p.len > 0 && s[0] == ' ');
    if (st->prepend == HX_PREPEND_FIRST) pre = !starts && !(p.len > 0 && s[0] == ' ') && p.at_start;
    if (pre) {
        memcpy(d, rep, rl);
        k += rl;
    }
    for (uint32_t i = 0; i < p.len; i++) {
        if (s[i] == ' ') {
            memcpy(d + k, rep, rl);
            k += rl;
        } else {
            d[k++] = s[i];
        }
    }
    w->store.len += k;
    hx_tok_piece q = { (uint32_t)off, (uint32_t)k, p.mapped, p.at_start };
    if (!st->split || rl == 0) return piece_push(&w->b, &w->n_b, &w->cap_b, q);
    if (events_literal(w, rep, rl, w->store.data + q.off, q.len)) return HX_E_NOMEM;
    return emit_splits(w, q, HX_SPLIT_MERGED_NEXT, false);
}

static hx_status run_step(const hx_tokenizer *t, const hx_tok_pre *st, bool last,
                          hx_tok_prework *w, hx_tok_piece p)
{
    const char *s = w->store.data + p.off;
    hx_status r = HX_OK;
    switch (st->kind) {
    case HX_PRE_BYTELEVEL: return step_bytelevel(t, st, last, w, p);
    case HX_PRE_METASPACE: return step_metaspace(t, st, w, p);
    case HX_PRE_SPLIT:
        r = st->re ? events_regex(w, st->re, s, p.len)
                   : events_literal(w, t->pool + st->lit_off, st->lit_len, s, p.len);
        break;
    case HX_PRE_WHITESPACE: r = events_regex(w, st->re, s, p.len); break;
    case HX_PRE_DIGITS: r = events_pred(w, pred_num, 0, s, p.len); break;
    case HX_PRE_PUNCT: r = events_pred(w, pred_punct, 0, s, p.len); break;
    case HX_PRE_WSSPLIT: r = events_pred(w, pred_ws, 0, s, p.len); break;
    case HX_PRE_CHARSPLIT: {
        size_t adv;
        uint32_t c = st->lit_len ? hx_tok_utf8_next(t->pool + st->lit_off, st->lit_len, &adv) : 0;
        r = events_pred(w, pred_char, c, s, p.len);
        break;
    }
    }
    if (r != HX_OK) return r;
    return emit_splits(w, p, st->behavior, st->invert);
}

hx_status hx_tok_pretokenize(const hx_tokenizer *t, const char *s, size_t n, bool at_start,
                             hx_tok_prework *w)
{
    w->store.len = 0;
    w->n_a = 0;
    if (n == 0) return HX_OK;
    if (hx_tok_text_append(&w->store, s, n)) return HX_E_NOMEM;
    hx_tok_piece p0 = { 0, (uint32_t)n, false, at_start };
    if (piece_push(&w->a, &w->n_a, &w->cap_a, p0)) return HX_E_NOMEM;
    for (int32_t i = 0; i < t->n_pre; i++) {
        w->n_b = 0;
        for (size_t j = 0; j < w->n_a; j++)
            if (run_step(t, &t->pre[i], i == t->n_pre - 1, w, w->a[j])) return HX_E_NOMEM;
        hx_tok_piece *tp = w->a;
        size_t tc = w->cap_a;
        w->a = w->b;
        w->n_a = w->n_b;
        w->cap_a = w->cap_b;
        w->b = tp;
        w->cap_b = tc;
        w->n_b = 0;
    }
    return HX_OK;
}

void hx_tok_prework_free(hx_tok_prework *w)
{
    hx_tok_text_free(&w->store);
    hx_tok_text_free(&w->tmp);
    hx_free(w->a);
    hx_free(w->b);
    hx_free(w->ev);
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit_stack);
    memset(w, 0, sizeof *w);
}

void hx_tok_pre_free(hx_tok_pre *p)
{
    if (p && p->re) pcre2_code_free(p->re);
}
