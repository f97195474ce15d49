/* jinja_methods.c - Python methods templates call on values, the global functions, and the
 * string operations they share with filters.
 *
 * str: strip/lstrip/rstrip, split/rsplit, splitlines, startswith/endswith (str or tuple),
 * replace, find/rfind/index/rindex, count, join, upper/lower/title/capitalize/swapcase,
 * is* predicates, partition, removeprefix/suffix, center/ljust/rjust/zfill, format.
 * dict: get, items, keys, values, copy. list/tuple: index, count, copy. Methods that mutate
 * (list.append, dict.pop, ...) exist but are refused, as transformers' ImmutableSandboxed-
 * Environment refuses them. On a Markup string, string arguments are escaped and string results
 * stay Markup, as in markupsafe. Globals: range (at most 100000 items, the sandbox's cap),
 * namespace, dict, raise_exception, strftime_now and joiner. Positions and lengths count code
 * points, as Python does. */
#define _POSIX_C_SOURCE 200809L /* localtime_r */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "template/jinja_int.h"

/* ---- string helpers ---- */

static int new_str(hx_jrender *r, const char *s, size_t n, int flag, hx_jv *out)
{
    if (hx_jv_make_str(r, s, n, out) < 0) return -1;
    out->flag = (uint8_t)flag;
    return 0;
}

/* Does chars (a set of code points) contain cp? */
static bool in_chars(const hx_jstr *chars, uint32_t cp)
{
    size_t i = 0;
    while (i < chars->len)
        if (hx_ju_next(chars->s, chars->len, &i) == cp) return true;
    return false;
}

int hx_jstr_strip(hx_jrender *r, hx_jv sv, const hx_jstr *chars, int mode, hx_jv *out)
{
    const hx_jstr *s = sv.u.s;
    size_t b = 0, e = s->len;
    if (mode & 1) {
        while (b < e) {
            size_t j = b;
            uint32_t cp = hx_ju_next(s->s, e, &j);
            if (chars ? !in_chars(chars, cp) : !hx_ju_isspace(cp)) break;
            b = j;
        }
    }
    if (mode & 2) {
        size_t last = b, i = b;
        while (i < e) {
            uint32_t cp = hx_ju_next(s->s, e, &i);
            if (chars ? !in_chars(chars, cp) : !hx_ju_isspace(cp)) last = i;
        }
        e = last;
    }
    if (b == 0 && e == s->len) {
        *out = sv;
        return 0;
    }
    return new_str(r, s->s + b, e - b, sv.flag, out);
}

int hx_jstr_case(hx_jrender *r, hx_jv sv, int how, hx_jv *out)
{
    const hx_jstr *s = sv.u.s;
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, 0);
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s->len) {
        size_t start = i;
        uint32_t cp = hx_ju_next(s->s, s->len, &i), o = cp;
        if (i - start == 1 && (unsigned char)s->s[start] >= 0x80) { /* stray byte: keep */
            hx_jbuf_addc(&b, s->s[start]);
            first = false;
            continue;
        }
        switch (how) {
        case HX_JCASE_UPPER: o = hx_ju_upper(cp); break;
        case HX_JCASE_LOWER: o = hx_ju_lower(cp); break;
        case HX_JCASE_CAPITALIZE: o = first ? hx_ju_title(cp) : hx_ju_lower(cp); break;
        case HX_JCASE_TITLE:
            /* str.title: a cased character after a cased one is lowered, else titled */
            o = prev_cased ? hx_ju_lower(cp) : hx_ju_title(cp);
            prev_cased = hx_ju_iscased(cp);
            break;
        case HX_JCASE_SWAP:
            o = hx_ju_upper(cp) != cp ? hx_ju_upper(cp) : hx_ju_lower(cp);
            break;
        }
        if (o == 0xDF && how == HX_JCASE_UPPER) hx_jbuf_adds(&b, "SS"); /* full mapping of ß */
        else hx_jbuf_add_cp(&b, o);
        first = false;
    }
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return new_str(r, b.p ? b.p : "", b.len, sv.flag, out);
}

const char *hx_jfind(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0) return h;
    const char *end = h + hn;
    while ((size_t)(end - h) >= nn) {
        const char *p = memchr(h, n[0], (size_t)(end - h) - nn + 1);
        if (!p) return NULL;
        if (memcmp(p, n, nn) == 0) return p;
        h = p + 1;
    }
    return NULL;
}

int hx_jstr_replace(hx_jrender *r, const hx_jstr *s, const hx_jstr *old, const hx_jstr *rep,
                    int64_t count, hx_jv *out)
{
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    if (hx_jstep_search(r, s->len, old->len) < 0) return -1;
    if (count < 0) count = INT64_MAX;
    if (old->len == 0) { /* Python inserts rep before every code point and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (i < s->len) {
            size_t start = i;
            if (done < count) {
                hx_jbuf_add(&b, rep->s, rep->len);
                done++;
            }
            hx_ju_next(s->s, s->len, &i);
            hx_jbuf_add(&b, s->s + start, i - start);
        }
        if (done < count) hx_jbuf_add(&b, rep->s, rep->len);
    } else {
        const char *p = s->s, *end = s->s + s->len;
        int64_t done = 0;
        while (done < count) {
            const char *hit = hx_jfind(p, (size_t)(end - p), old->s, old->len);
            if (!hit) break;
            hx_jbuf_add(&b, p, (size_t)(hit - p));
            hx_jbuf_add(&b, rep->s, rep->len);
            p = hit + old->len;
            done++;
        }
        hx_jbuf_add(&b, p, (size_t)(end - p));
    }
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

/* Line boundaries of str.splitlines. Returns the length of the boundary at s[i], or 0. */
static size_t line_break(const hx_jstr *s, size_t i)
{
    unsigned char c = (unsigned char)s->s[i];
    if (c == '\r') return i + 1 < s->len && s->s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) return 1;
    size_t j = i;
    uint32_t cp = hx_ju_next(s->s, s->len, &j);
    if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return j - i;
    return 0;
}

int hx_jstr_splitlines(hx_jrender *r, const hx_jstr *s, bool keepends, hx_jlist **out)
{
    hx_jlist *l = hx_jlist_new(r, 0);
    if (!l) return -1;
    size_t start = 0, i = 0;
    while (i < s->len) {
        size_t k = line_break(s, i);
        if (!k) {
            hx_ju_next(s->s, s->len, &i);
            continue;
        }
        hx_jv line;
        if (hx_jv_make_str(r, s->s + start, (keepends ? i + k : i) - start, &line) < 0 ||
            hx_jlist_push(r, l, line) < 0)
            return -1;
        i += k;
        start = i;
    }
    if (start < s->len) {
        hx_jv line;
        if (hx_jv_make_str(r, s->s + start, s->len - start, &line) < 0 ||
            hx_jlist_push(r, l, line) < 0)
            return -1;
    }
    *out = l;
    return 0;
}

/* str.split / str.rsplit. sep NULL: runs of whitespace, no empty strings. */
static int split(hx_jrender *r, hx_jv sv, const hx_jstr *sep, int64_t maxsplit, bool right,
                 hx_jv *out)
{
    const hx_jstr *s = sv.u.s;
    hx_jlist *l = hx_jlist_new(r, 0);
    if (!l) return -1;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep && sep->len == 0) return hx_jfail(r, "empty separator");
    if (hx_jstep_search(r, s->len, sep ? sep->len : 1) < 0) return -1;
    /* Collect [b, e) pieces, then add them in order (rsplit collects from the right). */
    size_t cap = 16, n = 0;
    size_t *pb = hx_jalloc(r, cap * sizeof *pb), *pe = hx_jalloc(r, cap * sizeof *pe);
    if (!pb || !pe) return -1;
#define PIECE(B, E)                                                                 \
    do {                                                                            \
        if (n == cap) {                                                             \
            size_t *nb = hx_jalloc(r, cap * 2 * sizeof *nb);                        \
            size_t *ne = hx_jalloc(r, cap * 2 * sizeof *ne);                        \
            if (!nb || !ne) return -1;                                              \
            memcpy(nb, pb, cap * sizeof *nb);                                       \
            memcpy(ne, pe, cap * sizeof *ne);                                       \
            pb = nb;                                                                \
            pe = ne;                                                                \
            cap *= 2;                                                               \
        }                                                                           \
        pb[n] = (B);                                                                \
        pe[n] = (E);                                                                \
        n++;                                                                        \
    } while (0)
    int64_t splits = 0;
    if (!sep) {
        /* whitespace split: work on code point boundaries */
        size_t *cpb = hx_jalloc(r, (s->len + 1) * sizeof *cpb);
        bool *sp = hx_jalloc(r, (s->len + 1) * sizeof *sp);
        if (!cpb || !sp) return -1;
        size_t m = 0, i = 0;
        while (i < s->len) {
            cpb[m] = i;
            sp[m] = hx_ju_isspace(hx_ju_next(s->s, s->len, &i));
            m++;
        }
        cpb[m] = s->len;
        if (!right) {
            size_t k = 0;
            while (k < m) {
                while (k < m && sp[k]) k++;
                if (k == m) break;
                if (splits == maxsplit) {
                    /* the rest, with trailing whitespace stripped */
                    size_t e = m;
                    while (e > k && sp[e - 1]) e--;
                    PIECE(cpb[k], cpb[e]);
                    break;
                }
                size_t st = k;
                while (k < m && !sp[k]) k++;
                PIECE(cpb[st], cpb[k]);
                splits++;
            }
        } else {
            size_t k = m;
            while (k > 0) {
                while (k > 0 && sp[k - 1]) k--;
                if (k == 0) break;
                if (splits == maxsplit) {
                    size_t b = 0;
                    while (b < k && sp[b]) b++;
                    PIECE(cpb[b], cpb[k]);
                    break;
                }
                size_t en = k;
                while (k > 0 && !sp[k - 1]) k--;
                PIECE(cpb[k], cpb[en]);
                splits++;
            }
        }
    } else if (!right) {
        size_t p = 0;
        for (;;) {
            const char *hit = splits < maxsplit
                                  ? hx_jfind(s->s + p, s->len - p, sep->s, sep->len) : NULL;
            if (!hit) {
                PIECE(p, s->len);
                break;
            }
            size_t h = (size_t)(hit - s->s);
            PIECE(p, h);
            p = h + sep->len;
            splits++;
        }
    } else {
        size_t e = s->len;
        for (;;) {
            size_t h = SIZE_MAX;
            if (splits < maxsplit && e >= sep->len)
                for (size_t q = e - sep->len + 1; q-- > 0;)
                    if (memcmp(s->s + q, sep->s, sep->len) == 0) {
                        h = q;
                        break;
                    }
            if (h == SIZE_MAX) {
                PIECE(0, e);
                break;
            }
            PIECE(h + sep->len, e);
            e = h;
            splits++;
        }
    }
#undef PIECE
    if (hx_jstep(r, (int64_t)n) < 0) return -1;
    for (size_t k = 0; k < n; k++) {
        size_t idx = right ? n - 1 - k : k;
        hx_jv piece;
        if (new_str(r, s->s + pb[idx], pe[idx] - pb[idx], sv.flag, &piece) < 0 ||
            hx_jlist_push(r, l, piece) < 0)
            return -1;
    }
    *out = hx_jv_of_list(l, HX_JV_LIST);
    return 0;
}

/* Python's find over code points: returns the code point index or -1. */
static int64_t find_cp(const hx_jstr *s, const hx_jstr *sub, int64_t start, int64_t end,
                       bool last)
{
    int64_t len = (int64_t)hx_ju_len(s->s, s->len);
    if (start < 0) start = start + len < 0 ? 0 : start + len;
    if (end < 0) end = end + len < 0 ? 0 : end + len;
    if (end > len) end = len;
    int64_t sublen = (int64_t)hx_ju_len(sub->s, sub->len);
    if (start > len || end - start < sublen) return -1;
    /* byte offsets of the window */
    size_t i = 0, bs = 0, be = s->len;
    int64_t c = 0;
    while (i < s->len && c < end) {
        if (c == start) bs = i;
        hx_ju_next(s->s, s->len, &i);
        c++;
    }
    if (c == start) bs = i;
    be = i;
    int64_t found = -1;
    for (size_t p = bs; p + sub->len <= be;) {
        if (memcmp(s->s + p, sub->s, sub->len) == 0) {
            found = (int64_t)hx_ju_len(s->s, p);
            if (!last) break;
        }
        hx_ju_next(s->s, be, &p);
        if (p > be) break;
    }
    return found;
}

static int64_t count_sub(const hx_jstr *s, const hx_jstr *sub)
{
    if (sub->len == 0) return (int64_t)hx_ju_len(s->s, s->len) + 1;
    int64_t n = 0;
    const char *p = s->s, *end = s->s + s->len;
    const char *hit;
    while ((hit = hx_jfind(p, (size_t)(end - p), sub->s, sub->len))) {
        n++;
        p = hit + sub->len;
    }
    return n;
}

/* ---- methods ---- */

enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH,
    M_REPLACE, M_FIND, M_RFIND, M_INDEX_S, M_RINDEX, M_COUNT_S, M_JOIN, M_UPPER, M_LOWER,
    M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER,
    M_ISLOWER, M_PARTITION, M_RPARTITION, M_REMOVEPREFIX, M_REMOVESUFFIX, M_CENTER, M_LJUST,
    M_RJUST, M_ZFILL, M_FORMAT, M_CASEFOLD, M_ISNUMERIC, M_ISDECIMAL,
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY_D,
    M_INDEX_L, M_COUNT_L, M_COPY_L,
    M_UNSAFE
};

typedef struct {
    const char *name;
    int         id;
} method_def;

static const method_def str_methods[] = {
    {"strip", M_STRIP}, {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT},
    {"rsplit", M_RSPLIT}, {"splitlines", M_SPLITLINES}, {"startswith", M_STARTSWITH},
    {"endswith", M_ENDSWITH}, {"replace", M_REPLACE}, {"find", M_FIND}, {"rfind", M_RFIND},
    {"index", M_INDEX_S}, {"rindex", M_RINDEX}, {"count", M_COUNT_S}, {"join", M_JOIN},
    {"upper", M_UPPER}, {"lower", M_LOWER}, {"title", M_TITLE}, {"capitalize", M_CAPITALIZE},
    {"swapcase", M_SWAPCASE}, {"isdigit", M_ISDIGIT}, {"isalpha", M_ISALPHA},
    {"isalnum", M_ISALNUM}, {"isspace", M_ISSPACE}, {"isupper", M_ISUPPER},
    {"islower", M_ISLOWER}, {"partition", M_PARTITION}, {"rpartition", M_RPARTITION},
    {"removeprefix", M_REMOVEPREFIX}, {"removesuffix", M_REMOVESUFFIX}, {"center", M_CENTER},
    {"ljust", M_LJUST}, {"rjust", M_RJUST}, {"zfill", M_ZFILL}, {"format", M_FORMAT},
    {"casefold", M_CASEFOLD}, {"isnumeric", M_ISNUMERIC}, {"isdecimal", M_ISDECIMAL},
};
static const method_def dict_methods[] = {
    {"get", M_GET}, {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES},
    {"copy", M_COPY_D}, {"clear", M_UNSAFE}, {"pop", M_UNSAFE}, {"popitem", M_UNSAFE},
    {"setdefault", M_UNSAFE}, {"update", M_UNSAFE},
};
static const method_def list_methods[] = {
    {"index", M_INDEX_L}, {"count", M_COUNT_L}, {"copy", M_COPY_L}, {"append", M_UNSAFE},
    {"extend", M_UNSAFE}, {"insert", M_UNSAFE}, {"pop", M_UNSAFE}, {"remove", M_UNSAFE},
    {"reverse", M_UNSAFE}, {"sort", M_UNSAFE}, {"clear", M_UNSAFE},
};
static const method_def tuple_methods[] = {{"index", M_INDEX_L}, {"count", M_COUNT_L}};

int hx_jmethod_find(hx_jv self, const char *name, size_t len, bool *unsafe)
{
    const method_def *t;
    size_t n;
    switch (self.type) {
    case HX_JV_STR: t = str_methods; n = HX_COUNTOF(str_methods); break;
    case HX_JV_DICT: t = dict_methods; n = HX_COUNTOF(dict_methods); break;
    case HX_JV_LIST:
        if (self.flag) return -1; /* iterators have no public methods */
        t = list_methods;
        n = HX_COUNTOF(list_methods);
        break;
    case HX_JV_TUPLE: t = tuple_methods; n = HX_COUNTOF(tuple_methods); break;
    default: return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].name) == len && memcmp(t[i].name, name, len) == 0) {
            *unsafe = t[i].id == M_UNSAFE;
            return t[i].id;
        }
    return -1;
}

static int need_str(hx_jrender *r, hx_jv v, const char *what, const hx_jstr **out)
{
    if (v.type != HX_JV_STR)
        return hx_jfail(r, "%s argument must be str, not %s", what, hx_jv_type_name(v));
    *out = v.u.s;
    return 0;
}

static int opt_int(hx_jrender *r, hx_jv v, int64_t dflt, int64_t *out)
{
    if (hx_jv_is_missing(v) || v.type == HX_JV_NONE) {
        *out = dflt;
        return 0;
    }
    if (v.type == HX_JV_INT || v.type == HX_JV_BOOL) {
        *out = v.type == HX_JV_BOOL ? v.u.b : v.u.i;
        return 0;
    }
    return hx_jfail(r, "'%s' object cannot be interpreted as an integer", hx_jv_type_name(v));
}

/* startswith/endswith with a str or a tuple of str. */
static int affix(hx_jrender *r, const hx_jstr *s, hx_jv arg, bool end, bool *out)
{
    const hx_jv *items = &arg;
    size_t n = 1;
    if (arg.type == HX_JV_TUPLE) {
        items = arg.u.l->v;
        n = arg.u.l->n;
    }
    *out = false;
    for (size_t i = 0; i < n; i++) {
        if (items[i].type != HX_JV_STR)
            return hx_jfail(r, "%s first arg must be str or a tuple of str, not %s",
                            end ? "endswith" : "startswith", hx_jv_type_name(items[i]));
        const hx_jstr *a = items[i].u.s;
        if (a->len <= s->len &&
            memcmp(end ? s->s + s->len - a->len : s->s, a->s, a->len) == 0) {
            *out = true;
            return 0;
        }
    }
    return 0;
}

static int pad(hx_jrender *r, hx_jv sv, int64_t width, hx_jv fill, int how, hx_jv *out)
{
    const hx_jstr *s = sv.u.s;
    uint32_t fc = ' ';
    if (!hx_jv_is_missing(fill)) {
        if (fill.type != HX_JV_STR || hx_ju_len(fill.u.s->s, fill.u.s->len) != 1)
            return hx_jfail(r, "the fill character must be exactly one character long");
        size_t i = 0;
        fc = hx_ju_next(fill.u.s->s, fill.u.s->len, &i);
    }
    int64_t len = (int64_t)hx_ju_len(s->s, s->len);
    if (width <= len) {
        *out = sv;
        return 0;
    }
    if (width > (int64_t)r->lim.max_output_bytes) return hx_jfail(r, "padding too wide");
    int64_t total = width - len, left;
    if (how == 0) left = total / 2 + (total & width & 1); /* CPython's centering rule */
    else if (how == 1) left = 0;
    else left = total;
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, 0);
    for (int64_t k = 0; k < left; k++) hx_jbuf_add_cp(&b, fc);
    hx_jbuf_add(&b, s->s, s->len);
    for (int64_t k = 0; k < total - left; k++) hx_jbuf_add_cp(&b, fc);
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return new_str(r, b.p, b.len, sv.flag, out);
}

/* str.format with automatic ({}) and numbered ({0}) or named ({name}) fields, no format
 * specs beyond none: what chat templates use. */
static int str_format(hx_jrender *r, const hx_jstr *f, const hx_jargs *a, hx_jv *out)
{
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    int32_t next = 0;
    for (size_t i = 0; i < f->len; i++) {
        char c = f->s[i];
        if (c == '}' ) {
            if (i + 1 < f->len && f->s[i + 1] == '}') i++;
            else return hx_jfail(r, "single '}' encountered in format string");
            hx_jbuf_addc(&b, '}');
            continue;
        }
        if (c != '{') {
            hx_jbuf_addc(&b, c);
            continue;
        }
        if (i + 1 < f->len && f->s[i + 1] == '{') {
            hx_jbuf_addc(&b, '{');
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < f->len && f->s[j] != '}') j++;
        if (j == f->len) return hx_jfail(r, "single '{' encountered in format string");
        const char *field = f->s + i + 1;
        size_t flen = j - i - 1;
        hx_jv v;
        if (flen == 0) {
            if (next >= a->n_pos) return hx_jfail(r, "format: not enough positional arguments");
            v = a->pos[next++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            int32_t k = 0;
            for (size_t q = 0; q < flen; q++) {
                if (field[q] < '0' || field[q] > '9' || k > 100000)
                    return hx_jfail(r, "format: unsupported field");
                k = k * 10 + (field[q] - '0');
            }
            if (k >= a->n_pos) return hx_jfail(r, "format: index %d out of range", (int)k);
            v = a->pos[k];
        } else {
            int32_t k;
            for (k = 0; k < a->n_kw; k++)
                if (hx_jstr_eq(a->kw_names[k], field, flen)) break;
            if (k == a->n_kw) return hx_jfail(r, "format: missing key '%.*s'", (int)flen, field);
            v = a->kw[k];
        }
        if (hx_jv_str_append(r, &b, v) < 0) return -1;
        i = j;
    }
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

static int str_pred(hx_jrender *r, const hx_jstr *s, int id, hx_jv *out)
{
    size_t i = 0;
    bool ok = s->len > 0, any_cased = false;
    while (i < s->len && ok) {
        uint32_t cp = hx_ju_next(s->s, s->len, &i);
        switch (id) {
        case M_ISDIGIT: case M_ISNUMERIC: case M_ISDECIMAL: ok = hx_ju_isdigit(cp); break;
        case M_ISALPHA: ok = hx_ju_isalpha(cp); break;
        case M_ISALNUM: ok = hx_ju_isalnum(cp); break;
        case M_ISSPACE: ok = hx_ju_isspace(cp); break;
        case M_ISUPPER:
        case M_ISLOWER:
            if (hx_ju_iscased(cp)) {
                any_cased = true;
                if (id == M_ISUPPER ? hx_ju_lower(cp) == cp && hx_ju_upper(cp) != cp
                                    : hx_ju_upper(cp) == cp && hx_ju_lower(cp) != cp)
                    ok = false;
            }
            break;
        }
    }
    if (id == M_ISUPPER || id == M_ISLOWER) ok = ok && any_cased;
    (void)r;
    *out = hx_jv_bool(ok);
    return 0;
}

static int partition(hx_jrender *r, hx_jv sv, const hx_jstr *sep, bool right, hx_jv *out)
{
    const hx_jstr *s = sv.u.s;
    if (sep->len == 0) return hx_jfail(r, "empty separator");
    if (hx_jstep_search(r, s->len, sep->len) < 0) return -1;
    size_t h = SIZE_MAX;
    if (!right) {
        const char *hit = hx_jfind(s->s, s->len, sep->s, sep->len);
        if (hit) h = (size_t)(hit - s->s);
    } else if (s->len >= sep->len) {
        for (size_t q = s->len - sep->len + 1; q-- > 0;)
            if (memcmp(s->s + q, sep->s, sep->len) == 0) {
                h = q;
                break;
            }
    }
    hx_jlist *l = hx_jlist_new(r, 3);
    if (!l) return -1;
    l->n = 3;
    int rc;
    if (h == SIZE_MAX) {
        rc = right ? new_str(r, "", 0, sv.flag, &l->v[0]) | new_str(r, "", 0, sv.flag, &l->v[1])
                   : new_str(r, "", 0, sv.flag, &l->v[1]) | new_str(r, "", 0, sv.flag, &l->v[2]);
        l->v[right ? 2 : 0] = sv;
    } else {
        rc = new_str(r, s->s, h, sv.flag, &l->v[0]) |
             new_str(r, sep->s, sep->len, sv.flag, &l->v[1]) |
             new_str(r, s->s + h + sep->len, s->len - h - sep->len, sv.flag, &l->v[2]);
    }
    if (rc) return -1;
    *out = hx_jv_of_list(l, HX_JV_TUPLE);
    return 0;
}

static int str_method(hx_jrender *r, hx_jv self, int id, const hx_jargs *a, hx_jv *out)
{
    static const char *const p_chars[] = {"chars"};
    static const char *const p_split[] = {"sep", "maxsplit"};
    static const char *const p_keep[] = {"keepends"};
    static const char *const p_affix[] = {"prefix", "start", "end"};
    static const char *const p_replace[] = {"old", "new", "count"};
    static const char *const p_find[] = {"sub", "start", "end"};
    static const char *const p_one[] = {"value"};
    static const char *const p_pad[] = {"width", "fillchar"};
    const hx_jstr *s = self.u.s;
    hx_jv v[3];
    const hx_jstr *x = NULL;
    int64_t n1 = 0, n2 = 0;
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        if (hx_jargs_bind(r, "strip", a, p_chars, 1, 0, v) < 0) return -1;
        if (!hx_jv_is_missing(v[0]) && v[0].type != HX_JV_NONE &&
            need_str(r, v[0], "strip", &x) < 0)
            return -1;
        return hx_jstr_strip(r, self, x, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, out);
    case M_SPLIT:
    case M_RSPLIT:
        if (hx_jargs_bind(r, "split", a, p_split, 2, 0, v) < 0) return -1;
        if (!hx_jv_is_missing(v[0]) && v[0].type != HX_JV_NONE &&
            need_str(r, v[0], "split", &x) < 0)
            return -1;
        if (opt_int(r, v[1], -1, &n1) < 0) return -1;
        return split(r, self, x, n1, id == M_RSPLIT, out);
    case M_SPLITLINES: {
        hx_jlist *l;
        if (hx_jargs_bind(r, "splitlines", a, p_keep, 1, 0, v) < 0) return -1;
        if (hx_jstr_splitlines(r, s, !hx_jv_is_missing(v[0]) && hx_jv_truthy(v[0]), &l) < 0)
            return -1;
        for (size_t i = 0; i < l->n; i++) l->v[i].flag = self.flag;
        *out = hx_jv_of_list(l, HX_JV_LIST);
        return 0;
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        bool res;
        if (hx_jargs_bind(r, id == M_STARTSWITH ? "startswith" : "endswith", a, p_affix, 3, 1,
                          v) < 0)
            return -1;
        if (!hx_jv_is_missing(v[1]) || !hx_jv_is_missing(v[2])) {
            /* with start/end: slice by code points first */
            int64_t len = (int64_t)hx_ju_len(s->s, s->len);
            if (opt_int(r, v[1], 0, &n1) < 0 || opt_int(r, v[2], len, &n2) < 0) return -1;
            if (n1 < 0) n1 = n1 + len < 0 ? 0 : n1 + len;
            if (n2 < 0) n2 = n2 + len < 0 ? 0 : n2 + len;
            if (n2 > len) n2 = len;
            if (n1 > len) {
                *out = hx_jv_bool(false);
                return 0;
            }
            size_t b = 0, e = 0, i = 0;
            for (int64_t c = 0; c <= len; c++) {
                if (c == n1) b = i;
                if (c == n2) e = i;
                if (i < s->len) hx_ju_next(s->s, s->len, &i);
            }
            if (e < b) e = b;
            hx_jstr *sub = hx_jstr_make(r, s->s + b, e - b);
            if (!sub || affix(r, sub, v[0], id == M_ENDSWITH, &res) < 0) return -1;
        } else if (affix(r, s, v[0], id == M_ENDSWITH, &res) < 0) {
            return -1;
        }
        *out = hx_jv_bool(res);
        return 0;
    }
    case M_REPLACE: {
        const hx_jstr *o = NULL, *nw = NULL;
        if (hx_jargs_bind(r, "replace", a, p_replace, 3, 2, v) < 0) return -1;
        if (need_str(r, v[0], "replace", &o) < 0 || need_str(r, v[1], "replace", &nw) < 0 ||
            opt_int(r, v[2], -1, &n1) < 0)
            return -1;
        if (hx_jstr_replace(r, s, o, nw, n1, out) < 0) return -1;
        out->flag = self.flag;
        return 0;
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX_S:
    case M_RINDEX: {
        if (hx_jargs_bind(r, "find", a, p_find, 3, 1, v) < 0) return -1;
        if (need_str(r, v[0], "find", &x) < 0 || opt_int(r, v[1], 0, &n1) < 0 ||
            opt_int(r, v[2], INT64_MAX / 2, &n2) < 0)
            return -1;
        if (hx_jstep_search(r, s->len, x->len) < 0) return -1;
        int64_t pos = find_cp(s, x, n1, n2, id == M_RFIND || id == M_RINDEX);
        if (pos < 0 && (id == M_INDEX_S || id == M_RINDEX))
            return hx_jfail(r, "substring not found");
        *out = hx_jv_int(pos);
        return 0;
    }
    case M_COUNT_S:
        if (hx_jargs_bind(r, "count", a, p_one, 1, 1, v) < 0 || need_str(r, v[0], "count", &x) < 0)
            return -1;
        if (hx_jstep_search(r, s->len, x->len) < 0) return -1;
        *out = hx_jv_int(count_sub(s, x));
        return 0;
    case M_JOIN: {
        const hx_jlist *items;
        if (hx_jargs_bind(r, "join", a, p_one, 1, 1, v) < 0) return -1;
        if (v[0].type == HX_JV_UNDEF) return hx_jv_undef_fail(r, v[0]);
        if (hx_jv_iter(r, v[0], &items) < 0) return -1;
        hx_jbuf b;
        hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].type != HX_JV_STR)
                return hx_jfail(r, "sequence item %zu: expected str instance, %s found", i,
                                hx_jv_type_name(items->v[i]));
            if (i) hx_jbuf_add(&b, s->s, s->len);
            const hx_jstr *it = items->v[i].u.s;
            if (self.flag && !items->v[i].flag) hx_jhtml_escape(&b, it->s, it->len);
            else hx_jbuf_add(&b, it->s, it->len);
        }
        if (hx_jbuf_check(r, &b) < 0) return -1;
        return new_str(r, b.p ? b.p : "", b.len, self.flag, out);
    }
    case M_UPPER: return hx_jstr_case(r, self, HX_JCASE_UPPER, out);
    case M_LOWER:
    case M_CASEFOLD: return hx_jstr_case(r, self, HX_JCASE_LOWER, out);
    case M_TITLE: return hx_jstr_case(r, self, HX_JCASE_TITLE, out);
    case M_CAPITALIZE: return hx_jstr_case(r, self, HX_JCASE_CAPITALIZE, out);
    case M_SWAPCASE: return hx_jstr_case(r, self, HX_JCASE_SWAP, out);
    case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER:
    case M_ISLOWER: case M_ISNUMERIC: case M_ISDECIMAL:
        if (a->n_pos || a->n_kw) return hx_jfail(r, "str predicates take no arguments");
        return str_pred(r, s, id, out);
    case M_PARTITION:
    case M_RPARTITION:
        if (hx_jargs_bind(r, "partition", a, p_one, 1, 1, v) < 0 ||
            need_str(r, v[0], "partition", &x) < 0)
            return -1;
        return partition(r, self, x, id == M_RPARTITION, out);
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX:
        if (hx_jargs_bind(r, "removeprefix", a, p_one, 1, 1, v) < 0 ||
            need_str(r, v[0], "removeprefix", &x) < 0)
            return -1;
        if (x->len <= s->len && x->len &&
            memcmp(id == M_REMOVEPREFIX ? s->s : s->s + s->len - x->len, x->s, x->len) == 0)
            return new_str(r, id == M_REMOVEPREFIX ? s->s + x->len : s->s, s->len - x->len,
                           self.flag, out);
        *out = self;
        return 0;
    case M_CENTER:
    case M_LJUST:
    case M_RJUST:
        if (hx_jargs_bind(r, "center", a, p_pad, 2, 1, v) < 0 || opt_int(r, v[0], 0, &n1) < 0)
            return -1;
        return pad(r, self, n1, v[1], id == M_CENTER ? 0 : id == M_LJUST ? 1 : 2, out);
    case M_ZFILL: {
        if (hx_jargs_bind(r, "zfill", a, p_pad, 1, 1, v) < 0 || opt_int(r, v[0], 0, &n1) < 0)
            return -1;
        int64_t len = (int64_t)hx_ju_len(s->s, s->len);
        if (n1 <= len) {
            *out = self;
            return 0;
        }
        if (n1 > (int64_t)r->lim.max_output_bytes) return hx_jfail(r, "zfill too wide");
        hx_jbuf b;
        hx_jbuf_init(&b, &r->arena, 0);
        size_t start = 0;
        if (s->len && (s->s[0] == '-' || s->s[0] == '+')) {
            hx_jbuf_addc(&b, s->s[0]);
            start = 1;
        }
        for (int64_t k = 0; k < n1 - len; k++) hx_jbuf_addc(&b, '0');
        hx_jbuf_add(&b, s->s + start, s->len - start);
        if (hx_jbuf_check(r, &b) < 0) return -1;
        return new_str(r, b.p, b.len, self.flag, out);
    }
    case M_FORMAT:
        return str_format(r, s, a, out);
    default:
        return hx_jfail(r, "unsupported str method");
    }
}

static int dict_method(hx_jrender *r, hx_jv self, int id, const hx_jargs *a, hx_jv *out)
{
    static const char *const p_get[] = {"key", "default"};
    const hx_jdict *d = self.u.d;
    hx_jv v[2];
    if (id == M_GET) {
        if (hx_jargs_bind(r, "get", a, p_get, 2, 1, v) < 0) return -1;
        if (!hx_jv_hashable(v[0], 0))
            return hx_jfail(r, "unhashable type: '%s'", hx_jv_type_name(v[0]));
        hx_jv *hit = hx_jdict_get(d, v[0]);
        *out = hit ? *hit : hx_jv_is_missing(v[1]) ? hx_jv_none() : v[1];
        return 0;
    }
    if (a->n_pos || a->n_kw) return hx_jfail(r, "dict method takes no arguments");
    if (hx_jstep(r, (int64_t)d->n / 4) < 0) return -1;
    if (id == M_COPY_D) {
        hx_jdict *c = hx_jdict_new(r, d->n);
        if (!c) return -1;
        if (d->n) {
            memcpy(c->k, d->k, d->n * sizeof(hx_jv));
            memcpy(c->v, d->v, d->n * sizeof(hx_jv));
        }
        c->n = d->n;
        *out = hx_jv_of_dict(c, HX_JV_DICT);
        return 0;
    }
    hx_jlist *l = hx_jlist_new(r, d->n);
    if (!l) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (id == M_ITEMS) {
            hx_jlist *pair = hx_jlist_new(r, 2);
            if (!pair) return -1;
            pair->v[0] = d->k[i];
            pair->v[1] = d->v[i];
            pair->n = 2;
            l->v[l->n++] = hx_jv_of_list(pair, HX_JV_TUPLE);
        } else {
            l->v[l->n++] = id == M_KEYS ? d->k[i] : d->v[i];
        }
    }
    *out = hx_jv_of_list(l, HX_JV_LIST);
    return 0;
}

static int list_method(hx_jrender *r, hx_jv self, int id, const hx_jargs *a, hx_jv *out)
{
    const hx_jlist *l = self.u.l;
    if (hx_jstep(r, (int64_t)l->n / 4) < 0) return -1;
    if (id == M_COPY_L) {
        hx_jlist *c = hx_jlist_new(r, l->n);
        if (!c) return -1;
        if (l->n) memcpy(c->v, l->v, l->n * sizeof(hx_jv));
        c->n = l->n;
        *out = hx_jv_of_list(c, HX_JV_LIST);
        return 0;
    }
    if (a->n_pos < 1 || a->n_kw) return hx_jfail(r, "list method needs one argument");
    int64_t count = 0;
    for (size_t i = 0; i < l->n; i++)
        if (hx_jv_eq(l->v[i], a->pos[0], &r->steps)) {
            if (id == M_INDEX_L) {
                *out = hx_jv_int((int64_t)i);
                return 0;
            }
            count++;
        }
    if (hx_jstep(r, 0) < 0) return -1;
    if (id == M_INDEX_L) return hx_jfail(r, "value is not in list");
    *out = hx_jv_int(count);
    return 0;
}

int hx_jmethod_call(hx_jrender *r, const hx_jfunc *fn, const hx_jargs *a, hx_jv *out)
{
    hx_jv self = fn->self;
    switch (self.type) {
    case HX_JV_STR: {
        if (!self.flag) return str_method(r, self, fn->id, a, out);
        /* Markup: escape plain string arguments; string results stay Markup. */
        hx_jv *pos = a->n_pos ? hx_jalloc(r, (size_t)a->n_pos * sizeof *pos) : NULL;
        if (a->n_pos && !pos) return -1;
        for (int32_t i = 0; i < a->n_pos; i++) {
            pos[i] = a->pos[i];
            if (pos[i].type == HX_JV_STR && !pos[i].flag && fn->id != M_JOIN &&
                hx_jmarkup_of(r, pos[i], &pos[i]) < 0)
                return -1;
        }
        hx_jargs b = *a;
        b.pos = pos;
        if (str_method(r, self, fn->id, &b, out) < 0) return -1;
        if (out->type == HX_JV_STR) out->flag = 1;
        return 0;
    }
    case HX_JV_DICT: return dict_method(r, self, fn->id, a, out);
    case HX_JV_LIST:
    case HX_JV_TUPLE: return list_method(r, self, fn->id, a, out);
    default: return hx_jfail(r, "unsupported method call");
    }
}

int hx_jmarkup_of(hx_jrender *r, hx_jv v, hx_jv *out)
{
    if (v.type == HX_JV_STR && v.flag) {
        *out = v;
        return 0;
    }
    hx_jstr *s;
    if (hx_jv_to_str(r, v, &s) < 0) return -1;
    if (v.type == HX_JV_STR) { /* an escape of the plain string, marked safe */
        hx_jbuf b;
        hx_jbuf_init(&b, &r->arena, 0);
        hx_jhtml_escape(&b, s->s, s->len);
        if (hx_jbuf_check(r, &b) < 0) return -1;
        return new_str(r, b.p ? b.p : "", b.len, 1, out);
    }
    return new_str(r, s->s, s->len, 1, out);
}

/* ---- printf-style formatting ---- */

int hx_jpercent_format(hx_jrender *r, const hx_jstr *fmt, hx_jv args, hx_jv *out)
{
    const hx_jv *items = &args;
    size_t n_items = 1, used = 0;
    const hx_jdict *map = NULL;
    if (args.type == HX_JV_TUPLE) {
        items = args.u.l->v;
        n_items = args.u.l->n;
    } else if (args.type == HX_JV_DICT) {
        map = args.u.d;
    }
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    const char *s = fmt->s, *end = fmt->s + fmt->len;
    while (s < end) {
        if (*s != '%') {
            hx_jbuf_addc(&b, *s++);
            continue;
        }
        s++;
        if (s < end && *s == '%') {
            hx_jbuf_addc(&b, '%');
            s++;
            continue;
        }
        hx_jv v;
        if (s < end && *s == '(') {
            const char *k = ++s;
            while (s < end && *s != ')') s++;
            if (s == end || !map) return hx_jfail(r, "format requires a mapping");
            hx_jv *hit = hx_jdict_get_str(map, k, (size_t)(s - k));
            if (!hit) return hx_jfail(r, "format: missing key '%.*s'", (int)(s - k), k);
            v = *hit;
            s++;
        } else {
            v = hx_jv_none();
        }
        char flags[8];
        int nf = 0;
        while (s < end && strchr("-+ #0", *s) && nf < 6) flags[nf++] = *s++;
        flags[nf] = '\0';
        long width = -1, prec = -1;
        if (s < end && *s == '*') {
            if (used >= n_items || items[used].type != HX_JV_INT)
                return hx_jfail(r, "* wants int");
            width = (long)items[used++].u.i;
            s++;
        }
        while (s < end && *s >= '0' && *s <= '9' && width < 100000)
            width = (width < 0 ? 0 : width * 10) + (*s++ - '0');
        if (s < end && *s == '.') {
            s++;
            prec = 0;
            while (s < end && *s >= '0' && *s <= '9' && prec < 100000)
                prec = prec * 10 + (*s++ - '0');
        }
        while (s < end && (*s == 'l' || *s == 'h' || *s == 'L')) s++;
        if (s == end) return hx_jfail(r, "incomplete format");
        char conv = *s++;
        if (!map) {
            if (used >= n_items) return hx_jfail(r, "not enough arguments for format string");
            v = items[used++];
        }
        if (width > 100000 || prec > 100000) return hx_jfail(r, "format width too large");
        char spec[32];
        hx_jstr *text = NULL;
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            if (conv == 's') {
                if (hx_jv_to_str(r, v, &text) < 0) return -1;
            } else {
                hx_jbuf rb;
                hx_jbuf_init(&rb, &r->arena, 0);
                if (hx_jv_repr_append(r, &rb, v, 0) < 0 || hx_jbuf_check(r, &rb) < 0) return -1;
                if (!(text = hx_jstr_make(r, rb.p ? rb.p : "", rb.len))) return -1;
            }
            size_t len = text->len, cps = hx_ju_len(text->s, text->len);
            if (prec >= 0 && (size_t)prec < cps) {
                size_t i = 0;
                for (long c = 0; c < prec; c++) hx_ju_next(text->s, text->len, &i);
                len = i;
                cps = (size_t)prec;
            }
            bool left = strchr(flags, '-') != NULL;
            if (!left)
                for (long k = (long)cps; k < width; k++) hx_jbuf_addc(&b, ' ');
            hx_jbuf_add(&b, text->s, len);
            if (left)
                for (long k = (long)cps; k < width; k++) hx_jbuf_addc(&b, ' ');
            continue;
        }
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
            int64_t iv;
            if (v.type == HX_JV_INT || v.type == HX_JV_BOOL)
                iv = v.type == HX_JV_BOOL ? v.u.b : v.u.i;
            else if (v.type == HX_JV_FLOAT && conv != 'c' && conv != 'x' && conv != 'X' &&
                     conv != 'o' && v.u.f == v.u.f && v.u.f < 9.2e18 && v.u.f > -9.2e18)
                iv = (int64_t)v.u.f;
            else return hx_jfail(r, "%%%c format: a number is required, not %s", conv,
                                 hx_jv_type_name(v));
            if (conv == 'c') {
                hx_jbuf_add_cp(&b, (uint32_t)iv);
                continue;
            }
            char c2 = conv == 'i' || conv == 'u' ? 'd' : conv;
            snprintf(spec, sizeof spec, "%%%s*.*ll%c", flags, c2);
            /* width 0 and precision -1 mean "none" to printf, as the flags alone would */
            int w = (int)(width >= 0 ? width : 0), pr = (int)(prec >= 0 ? prec : -1);
            int need = snprintf(NULL, 0, spec, w, pr, (long long)iv);
            char *num = need >= 0 ? hx_jalloc(r, (size_t)need + 1) : NULL;
            if (!num) return need >= 0 ? -1 : hx_jfail(r, "format failed");
            snprintf(num, (size_t)need + 1, spec, w, pr, (long long)iv);
            hx_jbuf_adds(&b, num);
            continue;
        }
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
            double dv;
            if (v.type == HX_JV_FLOAT) dv = v.u.f;
            else if (v.type == HX_JV_INT) dv = (double)v.u.i;
            else if (v.type == HX_JV_BOOL) dv = v.u.b;
            else return hx_jfail(r, "must be real number, not %s", hx_jv_type_name(v));
            snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
            int w = (int)(width >= 0 ? width : 0), pr = (int)(prec >= 0 ? prec : 6);
            int need = snprintf(NULL, 0, spec, w, pr, dv);
            char *num = need >= 0 ? hx_jalloc(r, (size_t)need + 1) : NULL;
            if (!num) return need >= 0 ? -1 : hx_jfail(r, "format failed");
            snprintf(num, (size_t)need + 1, spec, w, pr, dv);
            hx_jbuf_adds(&b, num);
            continue;
        }
        default:
            return hx_jfail(r, "unsupported format character '%c'", conv);
        }
    }
    /* Python only complains about unused arguments for a tuple or a plain value: a list or a
     * dict passes its mapping check and may go unused. */
    if (!map && used < n_items && args.type != HX_JV_LIST)
        return hx_jfail(r, "not all arguments converted during string formatting");
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

/* ---- globals ---- */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_JOINER };

static const char *const globals[] = {
    "range", "namespace", "dict", "raise_exception", "strftime_now", "joiner",
};

int hx_jglobal_find(const char *name, size_t len)
{
    for (size_t i = 0; i < HX_COUNTOF(globals); i++)
        if (strlen(globals[i]) == len && memcmp(globals[i], name, len) == 0) return (int)i;
    return -1;
}

/* dict(*args, **kwargs) as Python builds it: a mapping or (key, value) pairs, then keywords. */
static int build_dict(hx_jrender *r, const hx_jargs *a, hx_jdict **out)
{
    hx_jdict *d = hx_jdict_new(r, 0);
    if (!d) return -1;
    if (a->n_pos > 1)
        return hx_jfail(r, "dict expected at most 1 argument, got %d", (int)a->n_pos);
    if (a->n_pos == 1) {
        hx_jv src = a->pos[0];
        if (src.type == HX_JV_DICT || src.type == HX_JV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (hx_jdict_set(r, d, src.u.d->k[i], src.u.d->v[i]) < 0) return -1;
        } else {
            const hx_jlist *items;
            if (src.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, src);
            if (hx_jv_iter(r, src, &items) < 0) return -1;
            for (size_t i = 0; i < items->n; i++) {
                hx_jv p = items->v[i];
                if (!hx_jv_is_list(p) || p.u.l->n != 2)
                    return hx_jfail(r, "dictionary update sequence element #%zu has the wrong "
                                       "length", i);
                if (hx_jdict_set(r, d, p.u.l->v[0], p.u.l->v[1]) < 0) return -1;
            }
        }
    }
    for (int32_t k = 0; k < a->n_kw; k++)
        if (hx_jdict_set(r, d, hx_jv_of_str(a->kw_names[k]), a->kw[k]) < 0) return -1;
    *out = d;
    return 0;
}

int hx_jglobal_call(hx_jrender *r, int id, const hx_jargs *a, hx_jv *out)
{
    switch (id) {
    case G_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->n_kw || a->n_pos < 1 || a->n_pos > 3)
            return hx_jfail(r, "range expected 1 to 3 integer arguments");
        for (int32_t i = 0; i < a->n_pos; i++) {
            hx_jv x = a->pos[i];
            if (x.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, x);
            if (x.type != HX_JV_INT && x.type != HX_JV_BOOL)
                return hx_jfail(r, "'%s' object cannot be interpreted as an integer",
                                hx_jv_type_name(x));
        }
        int64_t p0 = a->pos[0].type == HX_JV_BOOL ? a->pos[0].u.b : a->pos[0].u.i;
        if (a->n_pos == 1) {
            v[1] = p0;
        } else {
            v[0] = p0;
            v[1] = a->pos[1].type == HX_JV_BOOL ? a->pos[1].u.b : a->pos[1].u.i;
            if (a->n_pos == 3)
                v[2] = a->pos[2].type == HX_JV_BOOL ? a->pos[2].u.b : a->pos[2].u.i;
        }
        if (v[2] == 0) return hx_jfail(r, "range() arg 3 must not be zero");
        /* the sandbox refuses ranges longer than 100000 (MAX_RANGE) */
        double count = v[2] > 0 ? ((double)v[1] - (double)v[0]) / (double)v[2]
                                : ((double)v[0] - (double)v[1]) / (double)-v[2];
        if (count > 100000)
            return hx_jfail(r, "range too big, maximum size for range is 100000");
        hx_jlist *l = hx_jlist_new(r, count > 0 ? (size_t)count + 1 : 0);
        if (!l) return -1;
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2])
            if (hx_jlist_push(r, l, hx_jv_int(x)) < 0) return -1;
        if (hx_jstep(r, (int64_t)l->n) < 0) return -1;
        *out = hx_jv_of_list(l, HX_JV_LIST);
        return 0;
    }
    case G_NAMESPACE:
    case G_DICT: {
        hx_jdict *d = NULL;
        if (build_dict(r, a, &d) < 0) return -1;
        if (id == G_NAMESPACE)
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].type == HX_JV_STR && d->k[i].u.s->len && d->k[i].u.s->s[0] == '_')
                    return hx_jfail(r, "chat templates cannot store underscore-prefixed "
                                       "attributes on a namespace, but got '%s'",
                                    d->k[i].u.s->s);
        *out = hx_jv_of_dict(d, id == G_NAMESPACE ? HX_JV_NS : HX_JV_DICT);
        return 0;
    }
    case G_RAISE: {
        hx_jstr *msg;
        if (a->n_pos != 1 || a->n_kw) return hx_jfail(r, "raise_exception takes one argument");
        if (hx_jv_to_str(r, a->pos[0], &msg) < 0) return -1;
        return hx_jfail(r, "%s", msg->s);
    }
    case G_STRFTIME: {
        hx_jstr *fmt;
        if (a->n_pos != 1 || a->n_kw) return hx_jfail(r, "strftime_now takes one argument");
        if (a->pos[0].type != HX_JV_STR) return hx_jfail(r, "strftime_now wants a format string");
        fmt = a->pos[0].u.s;
        time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm)) return hx_jfail(r, "localtime failed");
        size_t cap = fmt->len * 8 + 64;
        if (cap > 65536) return hx_jfail(r, "strftime format too long");
        char *buf = hx_jalloc(r, cap);
        if (!buf) return -1;
        size_t n = fmt->len ? strftime(buf, cap, fmt->s, &tm) : 0;
        return hx_jv_make_str(r, buf, n, out);
    }
    case G_JOINER: {
        return hx_jfail(r, "joiner() is not supported");
    }
    default:
        return hx_jfail(r, "unknown global function");
    }
}
