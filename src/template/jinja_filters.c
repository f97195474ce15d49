/* jinja_filters.c - the filters and tests of jinja2 that chat templates use, with jinja2's
 * semantics (filters.py, tests.py) under autoescape=False, plus transformers' tojson.
 *
 * Each filter takes the piped value and the call's arguments, binds them by name like the
 * Python function would, and returns a new value. Filters that return generators in jinja2
 * (map, select, reject, selectattr, rejectattr, unique, items, reverse of a list, batch) return
 * iterator-flagged lists, so truthiness, len() and printing behave as they do there. Attribute
 * paths ("function.name", "0") go through hx_jgetitem, as make_attrgetter does. The tables at
 * the bottom map names (and aliases) to functions; an unknown name is a compile error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_int.h"

typedef int (*filter_fn)(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out);
typedef int (*test_fn)(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out);

/* ---- helpers ---- */

static int iter_of(hx_jrender *r, hx_jv v, const hx_jlist **out)
{
    return hx_jv_iter(r, v, out);
}

static int new_list(hx_jrender *r, hx_jlist *l, bool iterator, hx_jv *out)
{
    (void)r;
    *out = hx_jv_of_list(l, HX_JV_LIST);
    out->flag = iterator;
    return 0;
}

/* soft_str: strings (Markup included) as they are, anything else through str(). */
static int soft_str(hx_jrender *r, hx_jv v, hx_jv *out)
{
    if (v.type == HX_JV_STR) {
        *out = v;
        return 0;
    }
    hx_jstr *s;
    if (hx_jv_to_str(r, v, &s) < 0) return -1;
    *out = hx_jv_of_str(s);
    return 0;
}

static bool given(hx_jv v) { return !hx_jv_is_missing(v); }

static int want_int(hx_jrender *r, hx_jv v, const char *what, int64_t *out)
{
    if (v.type == HX_JV_INT) *out = v.u.i;
    else if (v.type == HX_JV_BOOL) *out = v.u.b;
    else if (v.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, v);
    else return hx_jfail(r, "%s: expected an integer, got %s", what, hx_jv_type_name(v));
    return 0;
}

/* The attribute path of make_attrgetter: parts split on '.', digit-only parts as ints. */
typedef struct {
    hx_jv  *parts;
    int32_t n;
} attr_path;

static int attr_path_of(hx_jrender *r, hx_jv attr, attr_path *p)
{
    p->n = 0;
    p->parts = NULL;
    if (!given(attr) || attr.type == HX_JV_NONE) return 0;
    if (attr.type != HX_JV_STR) {
        if (!(p->parts = hx_jalloc(r, sizeof(hx_jv)))) return -1;
        p->parts[0] = attr;
        p->n = 1;
        return 0;
    }
    const hx_jstr *s = attr.u.s;
    int32_t count = 1;
    for (size_t i = 0; i < s->len; i++) count += s->s[i] == '.';
    if (!(p->parts = hx_jalloc(r, (size_t)count * sizeof(hx_jv)))) return -1;
    size_t b = 0;
    for (size_t i = 0; i <= s->len; i++) {
        if (i < s->len && s->s[i] != '.') continue;
        bool digits = i > b;
        int64_t v = 0;
        for (size_t k = b; k < i && digits; k++) {
            if (s->s[k] < '0' || s->s[k] > '9' || v > INT64_MAX / 10 - 9) digits = false;
            else v = v * 10 + (s->s[k] - '0');
        }
        if (digits) p->parts[p->n++] = hx_jv_int(v);
        else if (hx_jv_make_str(r, s->s + b, i - b, &p->parts[p->n++]) < 0) return -1;
        b = i + 1;
    }
    return 0;
}

static int attr_get(hx_jrender *r, const attr_path *p, hx_jv item, hx_jv *out)
{
    for (int32_t i = 0; i < p->n; i++)
        if (hx_jgetitem(r, item, p->parts[i], &item) < 0) return -1;
    *out = item;
    return 0;
}

/* ignore_case: lowercases strings for comparisons that are not case sensitive. */
static int fold(hx_jrender *r, hx_jv v, bool case_sensitive, hx_jv *out)
{
    if (case_sensitive || v.type != HX_JV_STR) {
        *out = v;
        return 0;
    }
    return hx_jstr_case(r, v, HX_JCASE_LOWER, out);
}

/* Stable merge sort of idx[0..n) by keys, stopping at the first comparison error. */
static int sort_keys(hx_jrender *r, const hx_jv *keys, size_t *idx, size_t n, bool reverse)
{
    if (n < 2) return 0;
    size_t *tmp = hx_jalloc(r, n * sizeof *tmp);
    if (!tmp) return -1;
    if (hx_jstep(r, (int64_t)n * 4) < 0) return -1;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                if (hx_jv_cmp(r, keys[idx[j]], keys[idx[i]], &c) < 0) return -1;
                /* Python's reverse sort keeps equal items in their original order too */
                bool take_right = reverse ? c > 0 : c < 0;
                tmp[k++] = take_right ? idx[j++] : idx[i++];
            }
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
    }
    return 0;
}

/* ---- string filters ---- */

static int f_trim(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"chars"};
    hx_jv v[1], s;
    if (hx_jargs_bind(r, "trim", a, p, 1, 0, v) < 0 || soft_str(r, in, &s) < 0) return -1;
    const hx_jstr *chars = NULL;
    if (given(v[0]) && v[0].type != HX_JV_NONE) {
        hx_jv c = v[0];
        if (c.type != HX_JV_STR) return hx_jfail(r, "strip arg must be None or str");
        if (s.flag && !c.flag && hx_jmarkup_of(r, c, &c) < 0) return -1;
        chars = c.u.s;
    }
    return hx_jstr_strip(r, s, chars, 3, out);
}

static int case_filter(hx_jrender *r, hx_jv in, const hx_jargs *a, int how, hx_jv *out)
{
    hx_jv s;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "this filter takes no arguments");
    if (soft_str(r, in, &s) < 0) return -1;
    return hx_jstr_case(r, s, how, out);
}

static int f_lower(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return case_filter(r, in, a, HX_JCASE_LOWER, out);
}

static int f_upper(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return case_filter(r, in, a, HX_JCASE_UPPER, out);
}

static int f_capitalize(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return case_filter(r, in, a, HX_JCASE_CAPITALIZE, out);
}

/* jinja2's title: split before runs of [-\s({\[<], upper the first character of each piece
 * and lower the rest; the result is a plain str. */
static int f_title(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    hx_jv s;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "title takes no arguments");
    if (soft_str(r, in, &s) < 0) return -1;
    const hx_jstr *str = s.u.s;
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, 0);
    size_t i = 0;
    bool piece_start = true, in_sep = false;
    while (i < str->len) {
        size_t st = i;
        uint32_t cp = hx_ju_next(str->s, str->len, &i);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                   hx_ju_isspace(cp);
        if (sep != in_sep) piece_start = true;
        in_sep = sep;
        if (i - st == 1 && (unsigned char)str->s[st] >= 0x80) hx_jbuf_addc(&b, str->s[st]);
        else hx_jbuf_add_cp(&b, piece_start ? hx_ju_upper(cp) : hx_ju_lower(cp));
        piece_start = false;
    }
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

static int f_replace(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"old", "new", "count"};
    hx_jv v[3];
    hx_jstr *s, *o, *n;
    int64_t count = -1;
    if (hx_jargs_bind(r, "replace", a, p, 3, 2, v) < 0) return -1;
    if (hx_jv_to_str(r, in, &s) < 0 || hx_jv_to_str(r, v[0], &o) < 0 ||
        hx_jv_to_str(r, v[1], &n) < 0)
        return -1;
    if (given(v[2]) && v[2].type != HX_JV_NONE && want_int(r, v[2], "replace", &count) < 0)
        return -1;
    return hx_jstr_replace(r, s, o, n, count, out);
}

static int f_string(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (a->n_pos || a->n_kw) return hx_jfail(r, "string takes no arguments");
    return soft_str(r, in, out);
}

static int f_safe(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (a->n_pos || a->n_kw) return hx_jfail(r, "safe takes no arguments");
    if (in.type == HX_JV_STR) {
        *out = in;
        out->flag = 1;
        return 0;
    }
    hx_jstr *s;
    if (hx_jv_to_str(r, in, &s) < 0) return -1;
    *out = hx_jv_of_str(s);
    out->flag = 1;
    return 0;
}

static int f_escape(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (a->n_pos || a->n_kw) return hx_jfail(r, "escape takes no arguments");
    if (in.type == HX_JV_STR && in.flag) {
        *out = in;
        return 0;
    }
    hx_jv s;
    if (soft_str(r, in, &s) < 0) return -1;
    s.flag = 0;
    return hx_jmarkup_of(r, s, out);
}

static int f_forceescape(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    hx_jv s;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "forceescape takes no arguments");
    if (soft_str(r, in, &s) < 0) return -1;
    s.flag = 0;
    return hx_jmarkup_of(r, s, out);
}

static int f_center(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"width"};
    hx_jv v[1], s;
    int64_t w = 80;
    if (hx_jargs_bind(r, "center", a, p, 1, 0, v) < 0 || soft_str(r, in, &s) < 0) return -1;
    if (given(v[0]) && want_int(r, v[0], "center", &w) < 0) return -1;
    int64_t len = (int64_t)hx_ju_len(s.u.s->s, s.u.s->len);
    if (w <= len) {
        *out = s;
        return 0;
    }
    if (w > (int64_t)r->lim.max_output_bytes) return hx_jfail(r, "center: width too large");
    int64_t total = w - len, left = total / 2 + (total & w & 1);
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, 0);
    for (int64_t k = 0; k < left; k++) hx_jbuf_addc(&b, ' ');
    hx_jbuf_add(&b, s.u.s->s, s.u.s->len);
    for (int64_t k = 0; k < total - left; k++) hx_jbuf_addc(&b, ' ');
    if (hx_jbuf_check(r, &b) < 0 || hx_jv_make_str(r, b.p, b.len, out) < 0) return -1;
    out->flag = s.flag;
    return 0;
}

static int f_indent(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"width", "first", "blank"};
    hx_jv v[3], s;
    if (hx_jargs_bind(r, "indent", a, p, 3, 0, v) < 0) return -1;
    if (in.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, in);
    /* jinja2 appends "\n" to the value itself, which only strings accept */
    if (in.type != HX_JV_STR)
        return hx_jfail(r, "indent needs a string, not %s", hx_jv_type_name(in));
    s = in;
    hx_jbuf ind;
    hx_jbuf_init(&ind, &r->arena, 0);
    if (given(v[0]) && v[0].type == HX_JV_STR) {
        hx_jbuf_add(&ind, v[0].u.s->s, v[0].u.s->len);
    } else {
        int64_t w = 4;
        if (given(v[0]) && want_int(r, v[0], "indent", &w) < 0) return -1;
        if (w > 10000) return hx_jfail(r, "indent: width too large");
        for (int64_t k = 0; k < w; k++) hx_jbuf_addc(&ind, ' ');
    }
    if (hx_jbuf_check(r, &ind) < 0) return -1;
    bool first = given(v[1]) && hx_jv_truthy(v[1]), blank = given(v[2]) && hx_jv_truthy(v[2]);
    /* s + "\n", split into lines (the quirk makes a trailing newline produce a last line) */
    hx_jbuf tmp;
    hx_jbuf_init(&tmp, &r->arena, 0);
    hx_jbuf_add(&tmp, s.u.s->s, s.u.s->len);
    hx_jbuf_addc(&tmp, '\n');
    if (hx_jbuf_check(r, &tmp) < 0) return -1;
    hx_jstr *sn = hx_jstr_make(r, tmp.p, tmp.len);
    hx_jlist *lines;
    if (!sn || hx_jstr_splitlines(r, sn, false, &lines) < 0) return -1;
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    if (first) hx_jbuf_add(&b, ind.p, ind.len);
    for (size_t i = 0; i < lines->n; i++) {
        const hx_jstr *line = lines->v[i].u.s;
        if (i) {
            hx_jbuf_addc(&b, '\n');
            if (blank || line->len) hx_jbuf_add(&b, ind.p, ind.len);
        }
        hx_jbuf_add(&b, line->s, line->len);
    }
    if (hx_jbuf_check(r, &b) < 0 || hx_jv_make_str(r, b.p ? b.p : "", b.len, out) < 0) return -1;
    out->flag = s.flag;
    return 0;
}

static int f_truncate(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"length", "killwords", "end", "leeway"};
    hx_jv v[4], s;
    int64_t length = 255, leeway = 5;
    if (hx_jargs_bind(r, "truncate", a, p, 4, 0, v) < 0) return -1;
    /* jinja2 takes len() of the value itself: strings only, in practice */
    if (in.type == HX_JV_UNDEF) {
        *out = in;
        return 0;
    }
    s = in;
    if (given(v[0]) && want_int(r, v[0], "truncate", &length) < 0) return -1;
    if (given(v[3]) && v[3].type != HX_JV_NONE && want_int(r, v[3], "truncate", &leeway) < 0)
        return -1;
    hx_jstr *end;
    if (given(v[2])) {
        if (hx_jv_to_str(r, v[2], &end) < 0) return -1;
    } else if (!(end = hx_jstr_make(r, "...", 3))) {
        return -1;
    }
    int64_t end_len = (int64_t)hx_ju_len(end->s, end->len);
    if (length < end_len || leeway < 0) return hx_jfail(r, "truncate: bad length or leeway");
    if (in.type != HX_JV_STR) { /* short enough containers come back as they are */
        int64_t n;
        if (hx_jv_len(r, in, &n) < 0) return -1;
        if (n <= length + leeway) {
            *out = in;
            return 0;
        }
        return hx_jfail(r, "truncate needs a string, not %s", hx_jv_type_name(in));
    }
    const hx_jstr *str = s.u.s;
    int64_t len = (int64_t)hx_ju_len(str->s, str->len);
    if (len <= length + leeway) {
        *out = s;
        return 0;
    }
    size_t cut = 0;
    for (int64_t c = 0; c < length - end_len; c++) hx_ju_next(str->s, str->len, &cut);
    if (!(given(v[1]) && hx_jv_truthy(v[1]))) {
        /* rsplit(" ", 1)[0] */
        size_t k = cut;
        while (k > 0 && str->s[k - 1] != ' ') k--;
        if (k > 0) cut = k - 1;
    }
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, 0);
    hx_jbuf_add(&b, str->s, cut);
    hx_jbuf_add(&b, end->s, end->len);
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p, b.len, out);
}

static int f_wordcount(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    hx_jv s;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "wordcount takes no arguments");
    if (soft_str(r, in, &s) < 0) return -1;
    int64_t n = 0;
    bool in_word = false;
    size_t i = 0;
    while (i < s.u.s->len) {
        uint32_t cp = hx_ju_next(s.u.s->s, s.u.s->len, &i);
        bool w = hx_ju_isalnum(cp) || cp == '_';
        if (w && !in_word) n++;
        in_word = w;
    }
    *out = hx_jv_int(n);
    return 0;
}

static int f_format(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    hx_jv s, args;
    if (a->n_pos && a->n_kw)
        return hx_jfail(r, "can't handle positional and keyword arguments at the same time");
    if (soft_str(r, in, &s) < 0) return -1;
    if (a->n_kw) {
        hx_jdict *d = hx_jdict_new(r, (size_t)a->n_kw);
        if (!d) return -1;
        for (int32_t k = 0; k < a->n_kw; k++)
            if (hx_jdict_set(r, d, hx_jv_of_str(a->kw_names[k]), a->kw[k]) < 0) return -1;
        args = hx_jv_of_dict(d, HX_JV_DICT);
    } else {
        hx_jlist *l = hx_jlist_new(r, (size_t)a->n_pos);
        if (!l) return -1;
        for (int32_t i = 0; i < a->n_pos; i++) l->v[l->n++] = a->pos[i];
        args = hx_jv_of_list(l, HX_JV_TUPLE);
    }
    if (hx_jpercent_format(r, s.u.s, args, out) < 0) return -1;
    return s.flag ? hx_jmarkup_of(r, *out, out) : 0;
}

/* ---- JSON ---- */

static int f_tojson(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    hx_jv v[4];
    if (hx_jargs_bind(r, "tojson", a, p, 4, 0, v) < 0) return -1;
    hx_jjson_opts o;
    memset(&o, 0, sizeof o);
    o.ensure_ascii = given(v[0]) && hx_jv_truthy(v[0]);
    o.sort_keys = given(v[3]) && hx_jv_truthy(v[3]);
    if (given(v[1]) && v[1].type != HX_JV_NONE) {
        if (v[1].type == HX_JV_STR) {
            o.indent = v[1].u.s;
        } else {
            int64_t w = 0;
            if (want_int(r, v[1], "tojson indent", &w) < 0) return -1;
            if (w > 1000) return hx_jfail(r, "tojson: indent too large");
            char sp[1001];
            int64_t k;
            for (k = 0; k < w; k++) sp[k] = ' ';
            if (!(o.indent = hx_jstr_make(r, sp, (size_t)(w > 0 ? w : 0)))) return -1;
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (given(v[2]) && v[2].type != HX_JV_NONE) {
        hx_jv sep = v[2];
        if (!hx_jv_is_list(sep) || sep.u.l->n != 2 || sep.u.l->v[0].type != HX_JV_STR ||
            sep.u.l->v[1].type != HX_JV_STR)
            return hx_jfail(r, "tojson: separators must be a pair of strings");
        o.item_sep = sep.u.l->v[0].u.s->s;
        o.key_sep = sep.u.l->v[1].u.s->s;
    }
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    if (hx_jv_tojson(r, &b, in, &o, 0) < 0 || hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

/* ---- sequences ---- */

static int f_length(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    int64_t n;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "length takes no arguments");
    if (in.type == HX_JV_NS) return hx_jfail(r, "object of type 'Namespace' has no len()");
    if (hx_jv_len(r, in, &n) < 0) return -1;
    *out = hx_jv_int(n);
    return 0;
}

static int f_default(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"default_value", "boolean"};
    hx_jv v[2];
    if (hx_jargs_bind(r, "default", a, p, 2, 0, v) < 0) return -1;
    bool boolean = given(v[1]) && hx_jv_truthy(v[1]);
    if (in.type == HX_JV_UNDEF || (boolean && !hx_jv_truthy(in))) {
        if (given(v[0])) *out = v[0];
        else if (hx_jv_make_str(r, "", 0, out) < 0) return -1;
        return 0;
    }
    *out = in;
    return 0;
}

static int f_list(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    const hx_jlist *items;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "list takes no arguments");
    if (iter_of(r, in, &items) < 0) return -1;
    hx_jlist *l = hx_jlist_new(r, items->n);
    if (!l) return -1;
    if (items->n) memcpy(l->v, items->v, items->n * sizeof(hx_jv));
    l->n = items->n;
    return new_list(r, l, false, out);
}

static int f_first(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    const hx_jlist *items;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "first takes no arguments");
    if (hx_jv_is_list(in) && in.flag) { /* next() on an iterator takes one item */
        *out = in.u.l->consumed || in.u.l->n == 0 ? hx_jv_undef_named(HX_JU_HINT, NULL, 0)
                                                   : in.u.l->v[0];
        return 0;
    }
    if (iter_of(r, in, &items) < 0) return -1;
    *out = items->n ? items->v[0] : hx_jv_undef_named(HX_JU_HINT, NULL, 0);
    return 0;
}

static int f_last(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    const hx_jlist *items;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "last takes no arguments");
    if (hx_jv_is_list(in) && in.flag) return hx_jfail(r, "'generator' object is not reversible");
    if (iter_of(r, in, &items) < 0) return -1;
    *out = items->n ? items->v[items->n - 1] : hx_jv_undef_named(HX_JU_HINT, NULL, 0);
    return 0;
}

static int f_join(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"d", "attribute"};
    hx_jv v[2];
    const hx_jlist *items;
    attr_path path;
    hx_jstr *sep = NULL;
    if (hx_jargs_bind(r, "join", a, p, 2, 0, v) < 0) return -1;
    if (given(v[0]) && hx_jv_to_str(r, v[0], &sep) < 0) return -1;
    if (attr_path_of(r, v[1], &path) < 0 || iter_of(r, in, &items) < 0) return -1;
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    for (size_t i = 0; i < items->n; i++) {
        hx_jv item = items->v[i];
        if (path.n && attr_get(r, &path, item, &item) < 0) return -1;
        if (i && sep) hx_jbuf_add(&b, sep->s, sep->len);
        if (hx_jv_str_append(r, &b, item) < 0) return -1;
    }
    if (hx_jbuf_check(r, &b) < 0) return -1;
    return hx_jv_make_str(r, b.p ? b.p : "", b.len, out);
}

static int f_items(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (a->n_pos || a->n_kw) return hx_jfail(r, "items takes no arguments");
    hx_jlist *l = hx_jlist_new(r, in.type == HX_JV_DICT ? in.u.d->n : 0);
    if (!l) return -1;
    if (in.type == HX_JV_DICT) {
        for (size_t i = 0; i < in.u.d->n; i++) {
            hx_jlist *pair = hx_jlist_new(r, 2);
            if (!pair) return -1;
            pair->v[0] = in.u.d->k[i];
            pair->v[1] = in.u.d->v[i];
            pair->n = 2;
            l->v[l->n++] = hx_jv_of_list(pair, HX_JV_TUPLE);
        }
    } else if (in.type != HX_JV_UNDEF) {
        return hx_jfail(r, "Can only get item pairs from a mapping.");
    }
    return new_list(r, l, true, out);
}

static int f_dictsort(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"case_sensitive", "by", "reverse"};
    hx_jv v[3];
    if (hx_jargs_bind(r, "dictsort", a, p, 3, 0, v) < 0) return -1;
    if (in.type != HX_JV_DICT) return hx_jfail(r, "dictsort needs a mapping");
    bool cs = given(v[0]) && hx_jv_truthy(v[0]), rev = given(v[2]) && hx_jv_truthy(v[2]);
    int pos = 0;
    if (given(v[1])) {
        if (v[1].type == HX_JV_STR && hx_jstr_eq(v[1].u.s, "value", 5)) pos = 1;
        else if (!(v[1].type == HX_JV_STR && hx_jstr_eq(v[1].u.s, "key", 3)))
            return hx_jfail(r, "You can only sort by either \"key\" or \"value\"");
    }
    size_t n = in.u.d->n;
    hx_jv *keys = hx_jalloc(r, (n ? n : 1) * sizeof *keys);
    size_t *idx = hx_jalloc(r, (n ? n : 1) * sizeof *idx);
    if (!keys || !idx) return -1;
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        if (fold(r, pos ? in.u.d->v[i] : in.u.d->k[i], cs, &keys[i]) < 0) return -1;
    }
    if (sort_keys(r, keys, idx, n, rev) < 0) return -1;
    hx_jlist *l = hx_jlist_new(r, n);
    if (!l) return -1;
    for (size_t i = 0; i < n; i++) {
        hx_jlist *pair = hx_jlist_new(r, 2);
        if (!pair) return -1;
        pair->v[0] = in.u.d->k[idx[i]];
        pair->v[1] = in.u.d->v[idx[i]];
        pair->n = 2;
        l->v[l->n++] = hx_jv_of_list(pair, HX_JV_TUPLE);
    }
    return new_list(r, l, false, out);
}

static int f_sort(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"reverse", "case_sensitive", "attribute"};
    hx_jv v[3];
    const hx_jlist *items;
    if (hx_jargs_bind(r, "sort", a, p, 3, 0, v) < 0 || iter_of(r, in, &items) < 0) return -1;
    bool rev = given(v[0]) && hx_jv_truthy(v[0]), cs = given(v[1]) && hx_jv_truthy(v[1]);
    /* attribute may list several comma-separated paths: compare their tuple */
    int32_t n_attrs = 0;
    attr_path *paths = NULL;
    if (given(v[2]) && v[2].type != HX_JV_NONE) {
        if (v[2].type == HX_JV_STR) {
            const hx_jstr *s = v[2].u.s;
            n_attrs = 1;
            for (size_t i = 0; i < s->len; i++) n_attrs += s->s[i] == ',';
            if (!(paths = hx_jalloc(r, (size_t)n_attrs * sizeof *paths))) return -1;
            size_t b = 0;
            int32_t k = 0;
            for (size_t i = 0; i <= s->len; i++) {
                if (i < s->len && s->s[i] != ',') continue;
                hx_jv part;
                if (hx_jv_make_str(r, s->s + b, i - b, &part) < 0 ||
                    attr_path_of(r, part, &paths[k++]) < 0)
                    return -1;
                b = i + 1;
            }
        } else {
            n_attrs = 1;
            if (!(paths = hx_jalloc(r, sizeof *paths)) || attr_path_of(r, v[2], &paths[0]) < 0)
                return -1;
        }
    }
    size_t n = items->n;
    hx_jv *keys = hx_jalloc(r, (n ? n : 1) * sizeof *keys);
    size_t *idx = hx_jalloc(r, (n ? n : 1) * sizeof *idx);
    if (!keys || !idx) return -1;
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        if (n_attrs == 0) {
            if (fold(r, items->v[i], cs, &keys[i]) < 0) return -1;
            continue;
        }
        hx_jlist *kl = hx_jlist_new(r, (size_t)n_attrs);
        if (!kl) return -1;
        for (int32_t k = 0; k < n_attrs; k++) {
            hx_jv x;
            if (attr_get(r, &paths[k], items->v[i], &x) < 0 || fold(r, x, cs, &x) < 0) return -1;
            kl->v[kl->n++] = x;
        }
        keys[i] = hx_jv_of_list(kl, HX_JV_LIST);
    }
    if (sort_keys(r, keys, idx, n, rev) < 0) return -1;
    hx_jlist *l = hx_jlist_new(r, n);
    if (!l) return -1;
    for (size_t i = 0; i < n; i++) l->v[l->n++] = items->v[idx[i]];
    return new_list(r, l, false, out);
}

static int f_reverse(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    const hx_jlist *items;
    if (a->n_pos || a->n_kw) return hx_jfail(r, "reverse takes no arguments");
    if (in.type == HX_JV_STR) {
        hx_jbuf b;
        hx_jbuf_init(&b, &r->arena, 0);
        const hx_jstr *s = in.u.s;
        size_t e = s->len;
        while (e > 0) {
            size_t st = e - 1;
            while (st > 0 && ((unsigned char)s->s[st] & 0xC0) == 0x80 && e - st < 4) st--;
            size_t j = st;
            hx_ju_next(s->s, e, &j);
            if (j != e) st = e - 1; /* not one whole code point: step a single byte */
            hx_jbuf_add(&b, s->s + st, e - st);
            e = st;
        }
        if (hx_jbuf_check(r, &b) < 0 || hx_jv_make_str(r, b.p ? b.p : "", b.len, out) < 0)
            return -1;
        out->flag = in.flag;
        return 0;
    }
    bool iterator = in.type != HX_JV_UNDEF;
    if (hx_jv_is_list(in) && in.flag) iterator = false; /* reversed(generator) fails; list() it */
    if (iter_of(r, in, &items) < 0) return -1;
    hx_jlist *l = hx_jlist_new(r, items->n);
    if (!l) return -1;
    for (size_t i = items->n; i-- > 0;) l->v[l->n++] = items->v[i];
    return new_list(r, l, iterator, out);
}

static int f_unique(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"case_sensitive", "attribute"};
    hx_jv v[2];
    const hx_jlist *items;
    attr_path path;
    if (hx_jargs_bind(r, "unique", a, p, 2, 0, v) < 0 || attr_path_of(r, v[1], &path) < 0 ||
        iter_of(r, in, &items) < 0)
        return -1;
    bool cs = given(v[0]) && hx_jv_truthy(v[0]);
    hx_jlist *l = hx_jlist_new(r, 0), *seen = hx_jlist_new(r, 0);
    if (!l || !seen) return -1;
    for (size_t i = 0; i < items->n; i++) {
        hx_jv key;
        if (attr_get(r, &path, items->v[i], &key) < 0 || fold(r, key, cs, &key) < 0) return -1;
        if (!hx_jv_hashable(key, 0))
            return hx_jfail(r, "unhashable type: '%s'", hx_jv_type_name(key));
        bool dup = false;
        if (hx_jstep(r, (int64_t)seen->n / 8) < 0) return -1;
        for (size_t k = 0; k < seen->n && !dup; k++) dup = hx_jv_eq(seen->v[k], key, &r->steps);
        if (hx_jstep(r, 0) < 0) return -1;
        if (dup) continue;
        if (hx_jlist_push(r, seen, key) < 0 || hx_jlist_push(r, l, items->v[i]) < 0) return -1;
    }
    return new_list(r, l, true, out);
}

static int minmax(hx_jrender *r, hx_jv in, const hx_jargs *a, bool max, hx_jv *out)
{
    static const char *const p[] = {"case_sensitive", "attribute"};
    hx_jv v[2];
    const hx_jlist *items;
    attr_path path;
    if (hx_jargs_bind(r, max ? "max" : "min", a, p, 2, 0, v) < 0 ||
        attr_path_of(r, v[1], &path) < 0 || iter_of(r, in, &items) < 0)
        return -1;
    bool cs = given(v[0]) && hx_jv_truthy(v[0]);
    if (items->n == 0) {
        *out = hx_jv_undef_named(HX_JU_HINT, NULL, 0);
        return 0;
    }
    size_t best = 0;
    hx_jv bk;
    if (attr_get(r, &path, items->v[0], &bk) < 0 || fold(r, bk, cs, &bk) < 0) return -1;
    for (size_t i = 1; i < items->n; i++) {
        hx_jv k;
        int c;
        if (attr_get(r, &path, items->v[i], &k) < 0 || fold(r, k, cs, &k) < 0 ||
            hx_jv_cmp(r, k, bk, &c) < 0)
            return -1;
        if (max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    *out = items->v[best];
    return 0;
}

static int f_min(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return minmax(r, in, a, false, out);
}

static int f_max(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return minmax(r, in, a, true, out);
}

static int f_sum(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"attribute", "start"};
    hx_jv v[2];
    const hx_jlist *items;
    attr_path path;
    if (hx_jargs_bind(r, "sum", a, p, 2, 0, v) < 0 || attr_path_of(r, v[0], &path) < 0 ||
        iter_of(r, in, &items) < 0)
        return -1;
    hx_jv acc = given(v[1]) ? v[1] : hx_jv_int(0);
    for (size_t i = 0; i < items->n; i++) {
        hx_jv x;
        if (attr_get(r, &path, items->v[i], &x) < 0) return -1;
        if (!hx_jv_is_num(acc) || !hx_jv_is_num(x))
            return hx_jfail(r, "unsupported operand type(s) for +: '%s' and '%s'",
                            hx_jv_type_name(acc), hx_jv_type_name(x));
        if (acc.type == HX_JV_FLOAT || x.type == HX_JV_FLOAT) {
            acc = hx_jv_float(hx_jv_num(acc) + hx_jv_num(x));
        } else {
            int64_t ai = acc.type == HX_JV_BOOL ? acc.u.b : acc.u.i;
            int64_t xi = x.type == HX_JV_BOOL ? x.u.b : x.u.i, s;
            if (__builtin_add_overflow(ai, xi, &s)) return hx_jfail(r, "integer overflow in sum");
            acc = hx_jv_int(s);
        }
    }
    *out = acc;
    return 0;
}

static int f_batch(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"linecount", "fill_with"};
    hx_jv v[2];
    const hx_jlist *items;
    int64_t n = 0;
    if (hx_jargs_bind(r, "batch", a, p, 2, 1, v) < 0 || want_int(r, v[0], "batch", &n) < 0 ||
        iter_of(r, in, &items) < 0)
        return -1;
    if (n <= 0) return hx_jfail(r, "batch: linecount must be positive");
    hx_jlist *l = hx_jlist_new(r, 0), *cur = NULL;
    if (!l) return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (!cur) {
            if (!(cur = hx_jlist_new(r, 0)) ||
                hx_jlist_push(r, l, hx_jv_of_list(cur, HX_JV_LIST)) < 0)
                return -1;
        }
        if (hx_jlist_push(r, cur, items->v[i]) < 0) return -1;
        if ((int64_t)cur->n == n) cur = NULL;
    }
    if (cur && given(v[1]) && v[1].type != HX_JV_NONE)
        while ((int64_t)cur->n < n)
            if (hx_jlist_push(r, cur, v[1]) < 0) return -1;
    return new_list(r, l, true, out);
}

/* select/reject/selectattr/rejectattr share jinja2's select_or_reject. */
static int select_or_reject(hx_jrender *r, hx_jv in, const hx_jargs *a, bool attr, bool keep,
                            hx_jv *out)
{
    const hx_jlist *items;
    int32_t k = 0;
    attr_path path = {NULL, 0};
    if (attr) {
        if (a->n_pos < 1) return hx_jfail(r, "missing parameter for attribute name");
        if (attr_path_of(r, a->pos[0], &path) < 0) return -1;
        k = 1;
    }
    int test = -1;
    if (a->n_pos > k) {
        hx_jv name = a->pos[k++];
        if (name.type != HX_JV_STR) return hx_jfail(r, "the test name must be a string");
        test = hx_jtest_find(name.u.s->s, name.u.s->len);
        if (test < 0) return hx_jfail(r, "no test named '%s'", name.u.s->s);
    }
    hx_jargs targs = *a;
    targs.pos = a->pos ? a->pos + k : NULL;
    targs.n_pos = a->n_pos - k;
    hx_jlist *l = hx_jlist_new(r, 0);
    if (!l) return -1;
    if (hx_jv_truthy(in)) {
        if (iter_of(r, in, &items) < 0) return -1;
        for (size_t i = 0; i < items->n; i++) {
            hx_jv x = items->v[i];
            bool ok;
            if (attr && attr_get(r, &path, x, &x) < 0) return -1;
            if (test >= 0) {
                if (hx_jtest_call(r, test, x, &targs, &ok) < 0) return -1;
            } else {
                ok = hx_jv_truthy(x);
            }
            if (ok == keep && hx_jlist_push(r, l, items->v[i]) < 0) return -1;
        }
    }
    return new_list(r, l, true, out);
}

static int f_select(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return select_or_reject(r, in, a, false, true, out);
}

static int f_reject(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return select_or_reject(r, in, a, false, false, out);
}

static int f_selectattr(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return select_or_reject(r, in, a, true, true, out);
}

static int f_rejectattr(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    return select_or_reject(r, in, a, true, false, out);
}

static int f_map(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    const hx_jlist *items;
    attr_path path = {NULL, 0};
    hx_jv dflt = hx_jv_none();
    bool by_attr = false, has_default = false;
    int filter = -1;
    hx_jargs fargs = *a;
    if (a->n_pos == 0) {
        for (int32_t k = 0; k < a->n_kw; k++) {
            if (hx_jstr_eq(a->kw_names[k], "attribute", 9)) {
                if (attr_path_of(r, a->kw[k], &path) < 0) return -1;
                by_attr = true;
            } else if (hx_jstr_eq(a->kw_names[k], "default", 7)) {
                dflt = a->kw[k];
                has_default = true;
            } else {
                return hx_jfail(r, "unexpected keyword argument '%s'", a->kw_names[k]->s);
            }
        }
        if (!by_attr) return hx_jfail(r, "map requires a filter argument");
    } else {
        hx_jv name = a->pos[0];
        if (name.type != HX_JV_STR) return hx_jfail(r, "map: the filter name must be a string");
        filter = hx_jfilter_find(name.u.s->s, name.u.s->len);
        if (filter < 0) return hx_jfail(r, "no filter named '%s'", name.u.s->s);
        fargs.pos = a->pos + 1;
        fargs.n_pos = a->n_pos - 1;
    }
    hx_jlist *l = hx_jlist_new(r, 0);
    if (!l) return -1;
    if (hx_jv_truthy(in)) {
        if (iter_of(r, in, &items) < 0) return -1;
        for (size_t i = 0; i < items->n; i++) {
            hx_jv x = items->v[i];
            if (by_attr) {
                for (int32_t p = 0; p < path.n; p++) {
                    if (hx_jgetitem(r, x, path.parts[p], &x) < 0) return -1;
                    if (has_default && dflt.type != HX_JV_NONE && x.type == HX_JV_UNDEF) x = dflt;
                }
            } else if (hx_jfilter_call(r, filter, x, &fargs, &x) < 0) {
                return -1;
            }
            if (hx_jlist_push(r, l, x) < 0) return -1;
        }
    }
    return new_list(r, l, true, out);
}

static int f_attr(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (a->n_pos != 1 || a->n_kw || a->pos[0].type != HX_JV_STR)
        return hx_jfail(r, "attr takes one string argument");
    return hx_jgetattr(r, in, a->pos[0].u.s, out);
}

/* ---- numbers ---- */

/* Python's int(str, 10): optional whitespace and sign, digits with single underscores. */
static bool parse_py_int(const hx_jstr *s, int64_t base, int64_t *out)
{
    const char *p = s->s, *e = s->s + s->len;
    while (p < e && (*p == ' ' || (*p >= '\t' && *p <= '\r'))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r'))) e--;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (e - p > 2 && p[0] == '0') {
            char k = (char)(p[1] | 0x20);
            int64_t pb = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
            if (pb && (base == 0 || base == pb)) {
                base = pb;
                p += 2;
                if (*p == '_') p++;
            }
        }
        if (base == 0) base = 10;
    }
    if (base < 2 || base > 36 || p == e) return false;
    uint64_t v = 0;
    bool prev_us = true;
    for (; p < e; p++) {
        if (*p == '_') {
            if (prev_us) return false;
            prev_us = true;
            continue;
        }
        char c = (char)(*p | 0x20);
        int64_t d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = false;
    }
    if (prev_us || v > (uint64_t)INT64_MAX) return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* Python's float(str): strtod after trimming, plus inf/nan words; no hex, no trailing junk. */
static bool parse_py_float(const hx_jstr *s, double *out)
{
    char buf[128];
    size_t k = 0;
    const char *p = s->s, *e = s->s + s->len;
    while (p < e && (*p == ' ' || (*p >= '\t' && *p <= '\r'))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r'))) e--;
    if (p == e || e - p >= (long)sizeof buf) return false;
    for (const char *q = p; q < e; q++) {
        if (*q == '_') {
            if (q == p || q + 1 == e || !(q[-1] >= '0' && q[-1] <= '9') ||
                !(q[1] >= '0' && q[1] <= '9'))
                return false;
            continue;
        }
        if (*q == 'x' || *q == 'X') return false;
        buf[k++] = *q;
    }
    buf[k] = '\0';
    char *end;
    *out = strtod(buf, &end);
    return end == buf + k;
}

static int f_int(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"default", "base"};
    hx_jv v[2];
    int64_t base = 10, i;
    double d;
    if (hx_jargs_bind(r, "int", a, p, 2, 0, v) < 0) return -1;
    if (given(v[1]) && want_int(r, v[1], "int base", &base) < 0) return -1;
    hx_jv dflt = given(v[0]) ? v[0] : hx_jv_int(0);
    switch (in.type) {
    case HX_JV_INT: *out = in; return 0;
    case HX_JV_BOOL: *out = hx_jv_int(in.u.b); return 0;
    case HX_JV_FLOAT:
        d = in.u.f;
        goto from_float;
    case HX_JV_STR:
        if (parse_py_int(in.u.s, base, &i)) {
            *out = hx_jv_int(i);
            return 0;
        }
        if (!parse_py_float(in.u.s, &d)) break;
        goto from_float;
    case HX_JV_UNDEF:
        return hx_jv_undef_fail(r, in);
    default:
        break;
    }
    *out = dflt;
    return 0;
from_float:
    if (isnan(d)) {
        *out = dflt;
        return 0;
    }
    if (isinf(d)) return hx_jfail(r, "cannot convert float infinity to integer");
    if (!(d > -9.2e18 && d < 9.2e18)) return hx_jfail(r, "integer too large");
    *out = hx_jv_int((int64_t)d);
    return 0;
}

static int f_float(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"default"};
    hx_jv v[1];
    double d;
    if (hx_jargs_bind(r, "float", a, p, 1, 0, v) < 0) return -1;
    switch (in.type) {
    case HX_JV_FLOAT: *out = in; return 0;
    case HX_JV_INT: *out = hx_jv_float((double)in.u.i); return 0;
    case HX_JV_BOOL: *out = hx_jv_float(in.u.b); return 0;
    case HX_JV_STR:
        if (parse_py_float(in.u.s, &d)) {
            *out = hx_jv_float(d);
            return 0;
        }
        break;
    case HX_JV_UNDEF:
        return hx_jv_undef_fail(r, in);
    default:
        break;
    }
    *out = given(v[0]) ? v[0] : hx_jv_float(0.0);
    return 0;
}

static int f_abs(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (a->n_pos || a->n_kw) return hx_jfail(r, "abs takes no arguments");
    if (in.type == HX_JV_FLOAT) *out = hx_jv_float(fabs(in.u.f));
    else if (in.type == HX_JV_INT && in.u.i != INT64_MIN)
        *out = hx_jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
    else if (in.type == HX_JV_BOOL) *out = hx_jv_int(in.u.b);
    else if (in.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, in);
    else return hx_jfail(r, "bad operand type for abs(): '%s'", hx_jv_type_name(in));
    return 0;
}

static int f_round(hx_jrender *r, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    static const char *const p[] = {"precision", "method"};
    hx_jv v[2];
    int64_t prec = 0;
    if (hx_jargs_bind(r, "round", a, p, 2, 0, v) < 0) return -1;
    if (given(v[0]) && want_int(r, v[0], "round", &prec) < 0) return -1;
    int method = 0;
    if (given(v[1])) {
        if (v[1].type != HX_JV_STR) return hx_jfail(r, "method must be a string");
        if (hx_jstr_eq(v[1].u.s, "ceil", 4)) method = 1;
        else if (hx_jstr_eq(v[1].u.s, "floor", 5)) method = 2;
        else if (!hx_jstr_eq(v[1].u.s, "common", 6))
            return hx_jfail(r, "method must be common, ceil or floor");
    }
    if (in.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, in);
    if (!hx_jv_is_num(in)) return hx_jfail(r, "type %s doesn't define __round__",
                                           hx_jv_type_name(in));
    if (prec > 300 || prec < -300) return hx_jfail(r, "round: precision out of range");
    double x = hx_jv_num(in);
    if (method == 0 && in.type != HX_JV_FLOAT) {
        /* round(int, n) stays an int; negative n rounds to tens, half to even */
        int64_t i = in.type == HX_JV_BOOL ? in.u.b : in.u.i;
        if (prec < 0) {
            int64_t m = 1;
            for (int64_t k = 0; k < -prec && m < INT64_MAX / 10; k++) m *= 10;
            int64_t q = i / m, rem = i % m;
            if (rem < 0) {
                rem += m;
                q -= 1;
            }
            if (rem * 2 > m || (rem * 2 == m && (q & 1))) q += 1;
            i = q * m;
        }
        *out = hx_jv_int(i);
        return 0;
    }
    if (method == 0) {
        /* Python rounds the exact binary value half-to-even at the decimal digit; printf's
         * correctly rounded conversion does the same. */
        if (!isfinite(x)) {
            *out = in;
            return 0;
        }
        char buf[512];
        if (prec >= 0) {
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            *out = hx_jv_float(strtod(buf, NULL));
        } else {
            double m = pow(10.0, (double)-prec);
            double y = x / m, fl = floor(y), diff = y - fl;
            double q = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1);
            *out = hx_jv_float(q * m);
        }
        return 0;
    }
    double m = pow(10.0, (double)prec);
    *out = hx_jv_float((method == 1 ? ceil(x * m) : floor(x * m)) / m);
    return 0;
}

/* ---- tables ---- */

typedef struct {
    const char *name;
    filter_fn   fn;
} filter_def;

static const filter_def filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"forceescape", f_forceescape}, {"format", f_format},
    {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
    {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower},
    {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr},
    {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title},
    {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};

int hx_jfilter_find(const char *name, size_t len)
{
    for (size_t i = 0; i < HX_COUNTOF(filters); i++)
        if (strlen(filters[i].name) == len && memcmp(filters[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

int hx_jfilter_call(hx_jrender *r, int id, hx_jv in, const hx_jargs *a, hx_jv *out)
{
    if (id < 0 || (size_t)id >= HX_COUNTOF(filters)) return hx_jfail(r, "bad filter");
    if (hx_jstep(r, 1) < 0) return -1;
    return filters[id].fn(r, in, a, out);
}

/* ---- tests ---- */

static int one_arg(hx_jrender *r, const hx_jargs *a, const char *what, hx_jv *out)
{
    if (a->n_pos + a->n_kw != 1) return hx_jfail(r, "test '%s' takes one argument", what);
    *out = a->n_pos ? a->pos[0] : a->kw[0];
    return 0;
}

static int no_arg(hx_jrender *r, const hx_jargs *a, const char *what)
{
    return a->n_pos || a->n_kw ? hx_jfail(r, "test '%s' takes no arguments", what) : 0;
}

#define SIMPLE_TEST(NAME, EXPR)                                                  \
    static int t_##NAME(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)    \
    {                                                                            \
        if (no_arg(r, a, #NAME) < 0) return -1;                                  \
        *out = (EXPR);                                                           \
        return 0;                                                                \
    }

SIMPLE_TEST(defined, in.type != HX_JV_UNDEF)
SIMPLE_TEST(undefined, in.type == HX_JV_UNDEF)
SIMPLE_TEST(none, in.type == HX_JV_NONE)
SIMPLE_TEST(boolean, in.type == HX_JV_BOOL)
SIMPLE_TEST(false, in.type == HX_JV_BOOL && !in.u.b)
SIMPLE_TEST(true, in.type == HX_JV_BOOL && in.u.b)
SIMPLE_TEST(integer, in.type == HX_JV_INT)
SIMPLE_TEST(float, in.type == HX_JV_FLOAT)
SIMPLE_TEST(number, hx_jv_is_num(in))
SIMPLE_TEST(string, in.type == HX_JV_STR)
SIMPLE_TEST(mapping, in.type == HX_JV_DICT)
SIMPLE_TEST(iterable, in.type == HX_JV_UNDEF || in.type == HX_JV_STR || hx_jv_is_list(in) ||
                          in.type == HX_JV_DICT)
SIMPLE_TEST(sequence, in.type == HX_JV_UNDEF || in.type == HX_JV_STR || in.type == HX_JV_DICT ||
                          (hx_jv_is_list(in) && !in.flag))
SIMPLE_TEST(callable, in.type == HX_JV_FUNC)
SIMPLE_TEST(escaped, in.type == HX_JV_STR && in.flag)

/* value % m == want, with Python's modulo on ints and floats (odd, even, divisibleby). */
static int mod_is(hx_jrender *r, hx_jv v, hx_jv m, int64_t want, bool *out)
{
    if (v.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, v);
    if (m.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, m);
    if (!hx_jv_is_num(v) || !hx_jv_is_num(m))
        return hx_jfail(r, "unsupported operand type(s) for %%: '%s' and '%s'",
                        hx_jv_type_name(v), hx_jv_type_name(m));
    if (v.type == HX_JV_FLOAT || m.type == HX_JV_FLOAT) {
        double x = hx_jv_num(v), y = hx_jv_num(m);
        if (y == 0) return hx_jfail(r, "float modulo by zero");
        double rem = fmod(x, y);
        if (rem != 0 && ((rem < 0) != (y < 0))) rem += y;
        *out = rem == (double)want;
        return 0;
    }
    int64_t x = v.type == HX_JV_BOOL ? v.u.b : v.u.i, y = m.type == HX_JV_BOOL ? m.u.b : m.u.i;
    if (y == 0) return hx_jfail(r, "integer division or modulo by zero");
    int64_t rem = y == -1 ? 0 : x % y;
    if (rem != 0 && ((rem < 0) != (y < 0))) rem += y;
    *out = rem == want;
    return 0;
}

static int t_odd(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    if (no_arg(r, a, "odd") < 0) return -1;
    return mod_is(r, in, hx_jv_int(2), 1, out);
}

static int t_even(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    if (no_arg(r, a, "even") < 0) return -1;
    return mod_is(r, in, hx_jv_int(2), 0, out);
}

static int t_divisibleby(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    hx_jv n = hx_jv_none();
    if (one_arg(r, a, "divisibleby", &n) < 0) return -1;
    return mod_is(r, in, n, 0, out);
}

static int cmp_test(hx_jrender *r, hx_jv in, const hx_jargs *a, const char *what, int op,
                    bool *out)
{
    hx_jv other;
    int c;
    if (one_arg(r, a, what, &other) < 0) return -1;
    if (op == 0) {
        *out = hx_jv_eq(in, other, &r->steps);
        return 0;
    }
    if (op == 1) {
        *out = !hx_jv_eq(in, other, &r->steps);
        return 0;
    }
    if (hx_jv_cmp(r, in, other, &c) < 0) return -1;
    *out = op == 2 ? c < 0 : op == 3 ? c <= 0 : op == 4 ? c > 0 : c >= 0;
    return 0;
}

#define CMP_TEST(NAME, OP)                                                     \
    static int t_##NAME(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)  \
    {                                                                          \
        return cmp_test(r, in, a, #NAME, OP, out);                             \
    }
CMP_TEST(eq, 0)
CMP_TEST(ne, 1)
CMP_TEST(lt, 2)
CMP_TEST(le, 3)
CMP_TEST(gt, 4)
CMP_TEST(ge, 5)

static int t_sameas(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    hx_jv other = hx_jv_none();
    if (one_arg(r, a, "sameas", &other) < 0) return -1;
    /* identity: equal scalars of the same type, or the very same container */
    if (in.type != other.type) *out = false;
    else if (in.type == HX_JV_NONE || in.type == HX_JV_UNDEF) *out = in.type == HX_JV_NONE;
    else if (in.type == HX_JV_BOOL) *out = in.u.b == other.u.b;
    else if (in.type == HX_JV_INT) *out = in.u.i == other.u.i && in.u.i >= -5 && in.u.i <= 256;
    else *out = in.u.l == other.u.l;
    return 0;
}

static int t_in(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    hx_jv seq;
    if (one_arg(r, a, "in", &seq) < 0) return -1;
    switch (seq.type) {
    case HX_JV_STR:
        if (in.type != HX_JV_STR)
            return hx_jfail(r, "'in <string>' requires string as left operand");
        *out = hx_jfind(seq.u.s->s, seq.u.s->len, in.u.s->s, in.u.s->len) != NULL;
        return hx_jstep_search(r, seq.u.s->len, in.u.s->len);
    case HX_JV_LIST:
    case HX_JV_TUPLE:
        *out = false;
        for (size_t i = 0; i < seq.u.l->n && !*out; i++)
            *out = hx_jv_eq(seq.u.l->v[i], in, &r->steps);
        return hx_jstep(r, 0);
    case HX_JV_DICT:
        *out = hx_jdict_get(seq.u.d, in) != NULL;
        return 0;
    case HX_JV_UNDEF:
        *out = false;
        return 0;
    default:
        return hx_jfail(r, "argument of type '%s' is not iterable", hx_jv_type_name(seq));
    }
}

static int t_lower(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    hx_jv s, lo;
    if (no_arg(r, a, "lower") < 0 || soft_str(r, in, &s) < 0) return -1;
    if (hx_jstr_case(r, s, HX_JCASE_LOWER, &lo) < 0) return -1;
    hx_jv up;
    if (hx_jstr_case(r, s, HX_JCASE_UPPER, &up) < 0) return -1;
    /* islower: has a cased character and no uppercase ones */
    *out = hx_jv_eq(s, lo, &r->steps) && !hx_jv_eq(s, up, &r->steps);
    return 0;
}

static int t_upper(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    hx_jv s, lo, up;
    if (no_arg(r, a, "upper") < 0 || soft_str(r, in, &s) < 0) return -1;
    if (hx_jstr_case(r, s, HX_JCASE_LOWER, &lo) < 0 || hx_jstr_case(r, s, HX_JCASE_UPPER, &up) < 0)
        return -1;
    *out = hx_jv_eq(s, up, &r->steps) && !hx_jv_eq(s, lo, &r->steps);
    return 0;
}

static int t_filter(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    if (no_arg(r, a, "filter") < 0) return -1;
    *out = in.type == HX_JV_STR && hx_jfilter_find(in.u.s->s, in.u.s->len) >= 0;
    return 0;
}

static int t_test(hx_jrender *r, hx_jv in, const hx_jargs *a, bool *out)
{
    if (no_arg(r, a, "test") < 0) return -1;
    *out = in.type == HX_JV_STR && hx_jtest_find(in.u.s->s, in.u.s->len) >= 0;
    return 0;
}

typedef struct {
    const char *name;
    test_fn     fn;
} test_def;

static const test_def tests[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none},
    {"boolean", t_boolean}, {"false", t_false}, {"true", t_true}, {"integer", t_integer},
    {"float", t_float}, {"number", t_number}, {"string", t_string}, {"mapping", t_mapping},
    {"iterable", t_iterable}, {"sequence", t_sequence}, {"callable", t_callable},
    {"escaped", t_escaped}, {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
    {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
    {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge},
    {"sameas", t_sameas}, {"in", t_in}, {"lower", t_lower}, {"upper", t_upper},
    {"filter", t_filter}, {"test", t_test},
};

int hx_jtest_find(const char *name, size_t len)
{
    for (size_t i = 0; i < HX_COUNTOF(tests); i++)
        if (strlen(tests[i].name) == len && memcmp(tests[i].name, name, len) == 0) return (int)i;
    return -1;
}

int hx_jtest_call(hx_jrender *r, int id, hx_jv in, const hx_jargs *a, bool *out)
{
    if (id < 0 || (size_t)id >= HX_COUNTOF(tests)) return hx_jfail(r, "bad test");
    if (hx_jstep(r, 1) < 0) return -1;
    return tests[id].fn(r, in, a, out);
}
