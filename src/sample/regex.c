/* regex.c - regular expression to grammar text.
 *
 * A recursive-descent reader of the regex that writes the grammar as it goes: the grammar's
 * groups, alternation and postfix quantifiers mirror the regex's, so each regex atom becomes one
 * grammar symbol (a literal, a class, or a parenthesised group) followed by its quantifier.
 * Character sets are built as sorted code-point ranges, so negation, shorthand classes inside
 * classes ([^\d_]) and the JSON-string escaping are set operations, not text rewriting. */
#include "sample/regex.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "sample/grammar.h"

#define MAX_GROUP_DEPTH 64
#define MAX_CP          0x10FFFFu

typedef struct {
    uint32_t lo, hi;
} crange;

typedef struct {
    crange *r;
    size_t  n, cap;
} cset;

typedef struct {
    const char *start, *p, *end;
    const char *rule;
    bool        json;
    hx_strbuf   out;
    int         depth;
    hx_err     *err;
    hx_status   st;
} rx;

static bool rx_fail(rx *x, hx_status st, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool rx_fail(rx *x, hx_status st, const char *at, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (x->st == HX_OK) {
        x->st = st;
        hx_err_set(x->err, st, "regex: %s (at offset %zu)", msg, (size_t)(at - x->start));
    }
    return false;
}

static bool nomem(rx *x)
{
    return rx_fail(x, HX_E_NOMEM, x->p, "out of memory");
}

/* ---- output ---- */

static bool put(rx *x, const char *s, size_t n)
{
    return hx_strbuf_put(&x->out, s, n) || nomem(x);
}

static bool puts_(rx *x, const char *s)
{
    return put(x, s, strlen(s));
}

/* One code point as grammar text, safe inside a literal and inside a class. */
static bool put_cp(rx *x, uint32_t cp)
{
    char tmp[16];
    if ((cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'))
        snprintf(tmp, sizeof tmp, "%c", (char)cp);
    else if (cp < 0x100) snprintf(tmp, sizeof tmp, "\\x%02X", cp);
    else if (cp < 0x10000) snprintf(tmp, sizeof tmp, "\\u%04X", cp);
    else snprintf(tmp, sizeof tmp, "\\U%08X", cp);
    return puts_(x, tmp);
}

/* A grammar literal for the bytes of s (ASCII). */
static bool put_lit(rx *x, const char *s)
{
    bool ok = put(x, "\"", 1);
    for (; ok && *s; s++) ok = put_cp(x, (uint8_t)*s);
    return ok && put(x, "\"", 1);
}

/* ---- character sets ---- */

static bool cs_add(rx *x, cset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        const size_t cap = s->cap ? s->cap * 2 : 8;
        crange *r = hx_realloc(s->r, cap * sizeof *r);
        if (!r) return nomem(x);
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (crange){ lo, hi };
    return true;
}

static int cmp_crange(const void *a, const void *b)
{
    const crange *p = a, *q = b;
    return p->lo < q->lo ? -1 : p->lo > q->lo;
}

/* Sorts and merges overlapping or touching ranges. */
static void cs_norm(cset *s)
{
    if (s->n == 0) return;
    qsort(s->r, s->n, sizeof *s->r, cmp_crange);
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (m > 0 && s->r[i].lo <= s->r[m - 1].hi + 1) {
            if (s->r[i].hi > s->r[m - 1].hi) s->r[m - 1].hi = s->r[i].hi;
        } else {
            s->r[m++] = s->r[i];
        }
    }
    s->n = m;
}

/* Removes [lo, hi] from s (normalized); s stays normalized. */
static bool cs_remove(rx *x, cset *s, uint32_t lo, uint32_t hi)
{
    const size_t n = s->n;
    for (size_t i = 0; i < n; i++) {
        crange *r = &s->r[i];
        if (r->hi < lo || r->lo > hi) continue;
        if (r->lo < lo && r->hi > hi) { /* split: the upper part goes to the end */
            const uint32_t top = r->hi;
            r->hi = lo - 1;
            if (!cs_add(x, s, hi + 1, top)) return false;
        } else if (r->lo < lo) {
            r->hi = lo - 1;
        } else if (r->hi > hi) {
            r->lo = hi + 1;
        } else {
            r->lo = 1, r->hi = 0; /* emptied */
        }
    }
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->r[i].lo <= s->r[i].hi) s->r[m++] = s->r[i];
    s->n = m;
    cs_norm(s);
    return true;
}

/* *out = [0, MAX_CP] minus s (normalized), less the surrogates when text is meant. */
static bool cs_complement(rx *x, const cset *s, bool no_surrogates, cset *out)
{
    out->n = 0;
    uint32_t next = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < s->n; i++) {
        if (s->r[i].lo > next) ok = cs_add(x, out, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (ok && next <= MAX_CP) ok = cs_add(x, out, next, MAX_CP);
    return ok && (!no_surrogates || cs_remove(x, out, 0xD800, 0xDFFF));
}

/* Replaces s (normalized) by its complement in text. */
static bool cs_negate(rx *x, cset *s)
{
    cset c = { 0 };
    if (!cs_complement(x, s, true, &c)) {
        hx_free(c.r);
        return false;
    }
    hx_free(s->r);
    *s = c;
    return true;
}

static bool cs_has(const cset *s, uint32_t cp)
{
    for (size_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi) return true;
    return false;
}

/* Keeps only the part of s (normalized) within [lo, hi]. */
static void cs_clip(cset *s, uint32_t lo, uint32_t hi)
{
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        crange r = s->r[i];
        if (r.hi < lo || r.lo > hi) continue;
        if (r.lo < lo) r.lo = lo;
        if (r.hi > hi) r.hi = hi;
        s->r[m++] = r;
    }
    s->n = m;
}

static const crange k_digit[] = { { '0', '9' } };
static const crange k_word[] = { { '0', '9' }, { 'A', 'Z' }, { '_', '_' }, { 'a', 'z' } };
static const crange k_space[] = { { '\t', '\r' }, { ' ', ' ' } };
/* What either dialect calls white space: \S excludes all of it. */
static const crange k_any_space[] = {
    { '\t', '\r' }, { 0x1C, ' ' }, { 0x85, 0x85 }, { 0xA0, 0xA0 }, { 0x1680, 0x1680 },
    { 0x2000, 0x200A }, { 0x2028, 0x2029 }, { 0x202F, 0x202F }, { 0x205F, 0x205F },
    { 0x3000, 0x3000 }, { 0xFEFF, 0xFEFF },
};
static const crange k_not_dot[] = { { '\n', '\n' }, { '\r', '\r' }, { 0x2028, 0x2029 } };

/* Adds the ranges of t (negated when neg) to into. */
static bool cs_add_table(rx *x, cset *into, const crange *t, size_t n, bool neg, bool ascii)
{
    cset s = { 0 };
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) ok = cs_add(x, &s, t[i].lo, t[i].hi);
    if (ok) cs_norm(&s);
    if (ok && neg) ok = cs_negate(x, &s);
    if (ok && ascii) cs_clip(&s, 0, 0x7F);
    for (size_t i = 0; ok && i < s.n; i++) ok = cs_add(x, into, s.r[i].lo, s.r[i].hi);
    hx_free(s.r);
    return ok;
}

/* \d \w \s \D \W \S added to into. */
static bool cs_add_shorthand(rx *x, cset *into, char c)
{
    switch (c) {
    case 'd': return cs_add_table(x, into, k_digit, HX_COUNTOF(k_digit), false, false);
    case 'D': return cs_add_table(x, into, k_digit, HX_COUNTOF(k_digit), true, false);
    case 'w': return cs_add_table(x, into, k_word, HX_COUNTOF(k_word), false, false);
    case 'W': return cs_add_table(x, into, k_word, HX_COUNTOF(k_word), true, true);
    case 's': return cs_add_table(x, into, k_space, HX_COUNTOF(k_space), false, false);
    default: return cs_add_table(x, into, k_any_space, HX_COUNTOF(k_any_space), true, false);
    }
}

/* ---- writing a set ---- */

/* s (normalized, non-empty) as one grammar symbol over code points. */
static bool put_set_text(rx *x, const cset *s)
{
    if (s->n == 1 && s->r[0].lo == s->r[0].hi)
        return put(x, "\"", 1) && put_cp(x, s->r[0].lo) && put(x, "\"", 1);
    cset c = { 0 };
    const cset *w = s;
    bool neg = false, ok = true;
    if (s->r[s->n - 1].hi == MAX_CP) { /* from a negation: the complement is shorter */
        ok = cs_complement(x, s, false, &c);
        w = &c;
        neg = true;
    }
    ok = ok && puts_(x, neg ? "[^" : "[");
    for (size_t i = 0; ok && i < w->n; i++) {
        ok = put_cp(x, w->r[i].lo);
        if (ok && w->r[i].hi != w->r[i].lo) ok = put(x, "-", 1) && put_cp(x, w->r[i].hi);
    }
    ok = ok && put(x, "]", 1);
    hx_free(c.r);
    return ok;
}

/* The JSON escape of a character that must be escaped inside a string. */
static void json_escape(uint32_t cp, char out[8])
{
    static const char shorts[] = { ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f',
                                   ['\r'] = 'r' };
    if (cp == '"' || cp == '\\') snprintf(out, 8, "\\%c", (char)cp);
    else if (cp < sizeof shorts && shorts[cp]) snprintf(out, 8, "\\%c", shorts[cp]);
    else snprintf(out, 8, "\\u%04x", cp);
}

/* s (normalized) as one grammar symbol; in JSON mode the characters a string must escape are
 * written as their escapes. An empty set matches nothing: "[]". */
static bool put_set(rx *x, cset *s)
{
    if (!x->json) return s->n ? put_set_text(x, s) : puts_(x, "[]");
    cset plain = { 0 };
    bool ok = true;
    for (size_t i = 0; ok && i < s->n; i++) ok = cs_add(x, &plain, s->r[i].lo, s->r[i].hi);
    /* plain = s minus what a JSON string escapes: [0, 0x1F], '"' and '\\' */
    if (ok) {
        cs_clip(&plain, 0x20, MAX_CP);
        ok = cs_remove(x, &plain, '"', '"') && cs_remove(x, &plain, '\\', '\\');
    }
    int alts = plain.n ? 1 : 0;
    for (uint32_t cp = 0; cp <= '\\'; cp++)
        alts += (cp < 0x20 || cp == '"' || cp == '\\') && cs_has(s, cp);
    if (ok && alts != 1) ok = put(x, alts ? "(" : "[]", alts ? 1 : 2);
    int written = 0;
    if (ok && plain.n) ok = put_set_text(x, &plain), written++;
    for (uint32_t cp = 0; ok && cp <= '\\'; cp++) {
        if (!((cp < 0x20 || cp == '"' || cp == '\\') && cs_has(s, cp))) continue;
        char esc[8];
        json_escape(cp, esc);
        ok = (written++ == 0 || puts_(x, " | ")) && put_lit(x, esc);
    }
    if (ok && alts > 1) ok = put(x, ")", 1);
    hx_free(plain.r);
    return ok;
}

/* ---- reading ---- */

static uint32_t next_cp(rx *x)
{
    const uint8_t c = (uint8_t)*x->p++;
    if (c < 0x80) return c;
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1; /* the input was validated as UTF-8 */
    uint32_t v = c & (0x3Fu >> n);
    for (int i = 0; i < n; i++) v = v << 6 | ((uint8_t)*x->p++ & 0x3F);
    return v;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

enum { ESC_CHAR, ESC_CLASS };

/* Reads the escape whose backslash is at x->p: a character (*cp) or a shorthand class (*cp is
 * its letter). Anchors are the caller's business; here they are errors. */
static bool read_escape(rx *x, bool in_class, int *kind, uint32_t *cp)
{
    const char *at = x->p++;
    if (x->p >= x->end) return rx_fail(x, HX_E_INVALID, at, "a pattern may not end with '\\'");
    const char e = *x->p;
    *kind = ESC_CHAR;
    int n_hex = 0;
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        x->p++;
        *kind = ESC_CLASS;
        *cp = (uint8_t)e;
        return true;
    case 'n': *cp = '\n'; break;
    case 't': *cp = '\t'; break;
    case 'r': *cp = '\r'; break;
    case 'f': *cp = '\f'; break;
    case 'v': *cp = '\v'; break;
    case '0':
        if (x->p + 1 < x->end && x->p[1] >= '0' && x->p[1] <= '7')
            return rx_fail(x, HX_E_UNSUPPORTED, at, "octal escapes are not supported (use "
                           "\\xHH)");
        *cp = 0;
        break;
    case 'x': n_hex = 2; break;
    case 'u': n_hex = 4; break;
    case 'U': n_hex = 8; break;
    case 'b':
        if (!in_class)
            return rx_fail(x, HX_E_UNSUPPORTED, at, "word boundaries (\\b) are not supported");
        *cp = '\b';
        break;
    default:
        if (e >= '1' && e <= '9')
            return rx_fail(x, HX_E_UNSUPPORTED, at, "backreferences (\\%c) are not supported",
                           e);
        if (e == 'B')
            return rx_fail(x, HX_E_UNSUPPORTED, at, "word boundaries (\\B) are not supported");
        if (e == 'A' || e == 'Z' || e == 'z')
            return rx_fail(x, HX_E_UNSUPPORTED, at, "the anchor \\%c is supported only at the "
                           "start (\\A) or end (\\Z) of a top-level alternative", e);
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_fail(x, HX_E_INVALID, at, "unknown escape '\\%c'", e);
        *cp = next_cp(x); /* escaped punctuation (or any other character) is itself */
        return true;
    }
    x->p++;
    if (n_hex) {
        uint32_t v = 0;
        for (int i = 0; i < n_hex; i++) {
            const int h = x->p < x->end ? hexval(*x->p) : -1;
            if (h < 0)
                return rx_fail(x, HX_E_INVALID, at, "expected %d hex digits after '\\%c'", n_hex,
                               e);
            v = v << 4 | (uint32_t)h;
            x->p++;
        }
        if (v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
            return rx_fail(x, HX_E_INVALID, at, "'\\%c' names U+%X, which is not a character",
                           e, v);
        *cp = v;
    }
    return true;
}

/* [...] into *s (normalized). x->p is at '['. */
static bool read_class(rx *x, cset *s)
{
    const char *open = x->p++;
    bool neg = false;
    if (x->p < x->end && *x->p == '^') neg = true, x->p++;
    bool first = true;
    for (;;) {
        if (x->p >= x->end)
            return rx_fail(x, HX_E_INVALID, open, "unterminated character class");
        if (*x->p == ']' && !first) break;
        first = false;
        const char *at = x->p;
        int kind = ESC_CHAR;
        uint32_t lo;
        if (*x->p == '\\') {
            if (!read_escape(x, true, &kind, &lo)) return false;
        } else {
            lo = next_cp(x);
        }
        if (kind == ESC_CLASS) {
            if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] != ']')
                return rx_fail(x, HX_E_INVALID, at, "a class shorthand cannot start a range");
            if (!cs_add_shorthand(x, s, (char)lo)) return false;
            continue;
        }
        uint32_t hi = lo;
        if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] != ']') {
            x->p++;
            if (*x->p == '\\') {
                if (!read_escape(x, true, &kind, &hi)) return false;
                if (kind == ESC_CLASS)
                    return rx_fail(x, HX_E_INVALID, at, "a class shorthand cannot end a range");
            } else {
                hi = next_cp(x);
            }
            if (hi < lo) return rx_fail(x, HX_E_INVALID, at, "bad range: end before start");
        }
        if (!cs_add(x, s, lo, hi)) return false;
    }
    x->p++;
    cs_norm(s);
    return !neg || cs_negate(x, s);
}

/* 0 no anchor at x->p, 1 a start anchor (^ \A), 2 an end anchor ($ \Z \z); *n its length. */
static int anchor_at(const rx *x, size_t *n)
{
    if (x->p >= x->end) return 0;
    *n = 1;
    if (*x->p == '^') return 1;
    if (*x->p == '$') return 2;
    if (*x->p != '\\' || x->p + 1 >= x->end) return 0;
    *n = 2;
    return x->p[1] == 'A' ? 1 : x->p[1] == 'Z' || x->p[1] == 'z' ? 2 : 0;
}

/* A counted quantifier at x->p: {m} {m,} {,n} {m,n}. Returns false (p untouched) for a brace
 * that is a literal. */
static bool read_count(rx *x, uint32_t *lo, uint32_t *hi, bool *unbounded)
{
    const char *p = x->p + 1;
    uint64_t a = 0, b = 0;
    bool have_a = false, have_b = false, comma = false;
    while (p < x->end && *p >= '0' && *p <= '9') a = a * 10 + (uint64_t)(*p++ - '0'), have_a = 1;
    if (p < x->end && *p == ',') {
        comma = true;
        p++;
        while (p < x->end && *p >= '0' && *p <= '9')
            b = b * 10 + (uint64_t)(*p++ - '0'), have_b = true;
        if (b > UINT32_MAX) b = UINT32_MAX;
    }
    if (a > UINT32_MAX) a = UINT32_MAX;
    if (p >= x->end || *p != '}' || (!have_a && !have_b)) return false;
    x->p = p + 1;
    *lo = (uint32_t)a;
    *hi = comma ? (uint32_t)b : (uint32_t)a;
    *unbounded = comma && !have_b;
    return true;
}

static bool is_quant(const rx *x)
{
    if (x->p >= x->end) return false;
    if (*x->p == '*' || *x->p == '+' || *x->p == '?') return true;
    if (*x->p != '{') return false;
    rx probe = *x;
    uint32_t lo, hi;
    bool unb;
    return read_count(&probe, &lo, &hi, &unb);
}

/* The quantifier after an atom, if any, written after it. */
static bool read_quant(rx *x)
{
    if (!is_quant(x)) {
        if (x->p < x->end && *x->p == '{' && x->p + 1 < x->end &&
            (x->p[1] == '}' || (x->p[1] == ',' && x->p + 2 < x->end && x->p[2] == '}')))
            return rx_fail(x, HX_E_UNSUPPORTED, x->p, "'{}' and '{,}' mean different things to "
                           "Python and JavaScript; escape the brace");
        return true;
    }
    const char *at = x->p;
    char buf[48];
    if (*x->p != '{') {
        buf[0] = *x->p++;
        buf[1] = '\0';
    } else {
        uint32_t lo, hi;
        bool unbounded;
        read_count(x, &lo, &hi, &unbounded);
        if (lo > HX_GRAMMAR_MAX_REPEAT || (!unbounded && hi > HX_GRAMMAR_MAX_REPEAT))
            return rx_fail(x, HX_E_UNSUPPORTED, at, "repetition counts above %d are not "
                           "supported", HX_GRAMMAR_MAX_REPEAT);
        if (!unbounded && hi < lo)
            return rx_fail(x, HX_E_INVALID, at, "{%u,%u}: the minimum exceeds the maximum", lo,
                           hi);
        if (unbounded) snprintf(buf, sizeof buf, "{%u,}", lo);
        else snprintf(buf, sizeof buf, "{%u,%u}", lo, hi);
    }
    if (x->p < x->end && *x->p == '?') x->p++; /* lazy: the same texts match */
    if (x->p < x->end && *x->p == '+')
        return rx_fail(x, HX_E_UNSUPPORTED, x->p, "possessive quantifiers are not supported");
    if (is_quant(x)) return rx_fail(x, HX_E_INVALID, x->p, "multiple repeat");
    return puts_(x, buf);
}

static bool read_alternatives(rx *x, bool top);

/* (...) with x->p at '('. */
static bool read_group(rx *x)
{
    const char *open = x->p++;
    if (x->end - x->p >= 1 && *x->p == '?') {
        const char *q = x->p + 1;
        if (q < x->end && *q == ':') {
            x->p = q + 1;
        } else if (q < x->end && (*q == '<' || (*q == 'P' && q + 1 < x->end && q[1] == '<')) &&
                   (*q == 'P' || (q + 1 < x->end && q[1] != '=' && q[1] != '!'))) {
            q += *q == 'P' ? 2 : 1; /* a named group: only the name to skip */
            const char *name = q;
            while (q < x->end && (*q == '_' || (*q >= '0' && *q <= '9') ||
                                  ((*q | 0x20) >= 'a' && (*q | 0x20) <= 'z')))
                q++;
            if (q == name || q >= x->end || *q != '>')
                return rx_fail(x, HX_E_INVALID, open, "bad group name");
            x->p = q + 1;
        } else if (q < x->end && (*q == '=' || *q == '!' || *q == '<')) {
            return rx_fail(x, HX_E_UNSUPPORTED, open, "lookaround assertions are not supported");
        } else if (q < x->end && *q == 'P' && q + 1 < x->end && q[1] == '=') {
            return rx_fail(x, HX_E_UNSUPPORTED, open, "backreferences are not supported");
        } else {
            return rx_fail(x, HX_E_UNSUPPORTED, open, "inline flags and other (?...) groups "
                           "are not supported");
        }
    }
    if (++x->depth > MAX_GROUP_DEPTH)
        return rx_fail(x, HX_E_UNSUPPORTED, open, "groups nested deeper than %d are not "
                       "supported", MAX_GROUP_DEPTH);
    if (!put(x, "(", 1) || !read_alternatives(x, false)) return false;
    x->depth--;
    if (x->p >= x->end || *x->p != ')')
        return rx_fail(x, HX_E_INVALID, open, "missing ')' for this group");
    x->p++;
    return put(x, ")", 1);
}

static bool read_atom(rx *x)
{
    const char c = *x->p;
    if (c == '(') return read_group(x);
    cset s = { 0 };
    bool ok;
    if (c == '[') {
        ok = read_class(x, &s);
    } else if (c == '.') {
        x->p++;
        ok = cs_add_table(x, &s, k_not_dot, HX_COUNTOF(k_not_dot), true, false);
    } else if (c == '\\') {
        int kind;
        uint32_t cp;
        ok = read_escape(x, false, &kind, &cp);
        if (ok) ok = kind == ESC_CLASS ? cs_add_shorthand(x, &s, (char)cp) : cs_add(x, &s, cp, cp);
    } else {
        const uint32_t cp = next_cp(x);
        ok = cs_add(x, &s, cp, cp);
    }
    if (ok) cs_norm(&s);
    ok = ok && put_set(x, &s);
    hx_free(s.r);
    return ok;
}

/* One alternative: atoms with their quantifiers, up to '|', ')' or the end. At the top level it
 * may open with ^ and close with $; in JSON mode an open side takes any characters. */
static bool read_sequence(rx *x, bool top)
{
    size_t n;
    bool open_start = true, open_end = true, any = false;
    if (top && anchor_at(x, &n) == 1) x->p += n, open_start = false;
    if (top && x->json && open_start) {
        if (!puts_(x, x->rule) || !puts_(x, "-any*")) return false;
        any = true;
    }
    while (x->p < x->end && *x->p != '|' && *x->p != ')') {
        const int a = anchor_at(x, &n);
        if (a == 2 && top && (x->p + n == x->end || x->p[n] == '|')) {
            x->p += n;
            open_end = false;
            break;
        }
        if (a)
            return rx_fail(x, HX_E_UNSUPPORTED, x->p, "'%.*s' is supported only at the %s of "
                           "the pattern or of a top-level alternative", (int)n, x->p,
                           a == 1 ? "start" : "end");
        if (is_quant(x)) return rx_fail(x, HX_E_INVALID, x->p, "nothing to repeat");
        if ((any && !put(x, " ", 1)) || !read_atom(x) || !read_quant(x)) return false;
        any = true;
    }
    if (top && x->json && open_end)
        return (!any || put(x, " ", 1)) && puts_(x, x->rule) && puts_(x, "-any*");
    return true;
}

static bool read_alternatives(rx *x, bool top)
{
    for (;;) {
        if (!read_sequence(x, top)) return false;
        if (x->p >= x->end || *x->p != '|') return true;
        x->p++;
        if (!puts_(x, " | ")) return false;
    }
}

hx_status hx_regex_to_grammar(const char *re, size_t len, const char *rule, unsigned flags,
                              char **out, hx_err *err)
{
    if (!hx_utf8_valid(re, len))
        return hx_err_set(err, HX_E_INVALID, "regex: expected UTF-8 text");
    rx x = { .start = re, .p = re, .end = re + len, .rule = rule,
             .json = (flags & HX_REGEX_JSON_STRING) != 0, .err = err, .st = HX_OK };
    bool ok = puts_(&x, rule) && puts_(&x, " ::= ") && read_alternatives(&x, true);
    if (ok && x.p < x.end) ok = rx_fail(&x, HX_E_INVALID, x.p, "unbalanced ')'");
    ok = ok && put(&x, "\n", 1);
    if (ok && x.json) /* any character of a JSON string, as written (no lone surrogates) */
        ok = puts_(&x, rule) &&
             puts_(&x, "-any ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
                   "([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n");
    if (!ok) {
        hx_free(x.out.data);
        return x.st == HX_OK ? HX_E_INVALID : x.st;
    }
    *out = x.out.data;
    return HX_OK;
}
