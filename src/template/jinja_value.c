/* jinja_value.c - Python semantics of template values: truth, equality, ordering, str() and
 * repr(), json.dumps, and conversion from the JSON context.
 *
 * Chat templates print Python objects directly ({{ message }} prints a dict's repr, 1.0 prints
 * "1.0", None prints "None"), so the printers here reproduce CPython's formatting: shortest
 * round-trip float repr with its fixed/scientific switch, quote selection and escapes of
 * str.__repr__, ", " and ": " separators. json.dumps follows transformers' tojson (ensure_ascii
 * off by default, keys in insertion order). Recursive walks take a depth and fail past the
 * render's depth limit instead of exhausting the stack on self-built deep structures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_int.h"

/* ---- basics ---- */

bool hx_jv_truthy(hx_jv v)
{
    switch (v.type) {
    case HX_JV_UNDEF:
    case HX_JV_NONE: return false;
    case HX_JV_BOOL: return v.u.b;
    case HX_JV_INT: return v.u.i != 0;
    case HX_JV_FLOAT: return v.u.f != 0.0;
    case HX_JV_STR: return v.u.s->len != 0;
    case HX_JV_LIST: return v.flag || v.u.l->n != 0;
    case HX_JV_TUPLE: return v.u.l->n != 0;
    case HX_JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

const char *hx_jv_type_name(hx_jv v)
{
    switch (v.type) {
    case HX_JV_UNDEF: return "Undefined";
    case HX_JV_NONE: return "NoneType";
    case HX_JV_BOOL: return "bool";
    case HX_JV_INT: return "int";
    case HX_JV_FLOAT: return "float";
    case HX_JV_STR: return v.flag ? "Markup" : "str";
    case HX_JV_LIST: return v.flag ? "generator" : "list";
    case HX_JV_TUPLE: return "tuple";
    case HX_JV_DICT: return "dict";
    case HX_JV_NS: return "Namespace";
    case HX_JV_FUNC: return v.u.fn->kind == HX_JF_MACRO || v.u.fn->kind == HX_JF_CALLER
                                ? "Macro" : "builtin_function_or_method";
    case HX_JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

static const char *type_name_of(int t)
{
    hx_jv v = {0};
    v.type = (uint8_t)t;
    if (t == HX_JV_FUNC) return "function";
    return hx_jv_type_name(v);
}

int hx_jv_undef_fail(hx_jrender *r, hx_jv v)
{
    const hx_jstr *name = v.u.name;
    switch (v.flag) {
    case HX_JU_NAME:
        return name ? hx_jfail(r, "'%s' is undefined", name->s)
                    : hx_jfail(r, "undefined value used");
    case HX_JU_ATTR:
        return hx_jfail(r, "'%s object' has no attribute '%s'", type_name_of(v.aux),
                        name ? name->s : "?");
    case HX_JU_UNSAFE:
        return hx_jfail(r, "access to attribute '%s' of '%s' object is unsafe.",
                        name ? name->s : "?", type_name_of(v.aux));
    default:
        return name ? hx_jfail(r, "%s", name->s) : hx_jfail(r, "undefined value used");
    }
}

void hx_jhtml_escape(hx_jbuf *b, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: continue;
        }
        hx_jbuf_add(b, s + run, i - run);
        hx_jbuf_adds(b, rep);
        run = i + 1;
    }
    hx_jbuf_add(b, s + run, n - run);
}

bool hx_jv_hashable(hx_jv v, int depth)
{
    if (v.type == HX_JV_DICT || (v.type == HX_JV_LIST && !v.flag)) return false;
    if (v.type == HX_JV_TUPLE) {
        if (depth > HX_JMAX_VALUE_DEPTH) return false;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!hx_jv_hashable(v.u.l->v[i], depth + 1)) return false;
    }
    return true;
}

/* ---- equality and ordering ---- */

static bool num_eq(hx_jv a, hx_jv b)
{
    bool af = a.type == HX_JV_FLOAT, bf = b.type == HX_JV_FLOAT;
    int64_t ai = a.type == HX_JV_BOOL ? a.u.b : a.u.i;
    int64_t bi = b.type == HX_JV_BOOL ? b.u.b : b.u.i;
    if (!af && !bf) return ai == bi;
    if (af && bf) return a.u.f == b.u.f;
    double f = af ? a.u.f : b.u.f;
    int64_t i = af ? bi : ai;
    /* Python compares int and float exactly. */
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != floor(f))
        return false;
    return (int64_t)f == i;
}

static bool eq_depth(hx_jv a, hx_jv b, int depth, int64_t *work)
{
    if (depth > HX_JMAX_VALUE_DEPTH) return false;
    if (work) *work += 1;
    if (hx_jv_is_num(a) && hx_jv_is_num(b)) return num_eq(a, b);
    if (a.type != b.type) return false;
    switch (a.type) {
    case HX_JV_UNDEF:
    case HX_JV_NONE: return true;
    case HX_JV_STR:
        if (work) *work += (int64_t)(a.u.s->len / 64);
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case HX_JV_LIST:
    case HX_JV_TUPLE:
        if (a.u.l == b.u.l) return true;
        if (a.flag || b.flag) return false; /* iterators compare by identity */
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!eq_depth(a.u.l->v[i], b.u.l->v[i], depth + 1, work)) return false;
        return true;
    case HX_JV_DICT:
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            hx_jv *o = hx_jdict_get(b.u.d, a.u.d->k[i]);
            if (work) *work += (int64_t)(b.u.d->n / 8);
            if (!o || !eq_depth(a.u.d->v[i], *o, depth + 1, work)) return false;
        }
        return true;
    case HX_JV_NS: return a.u.d == b.u.d;
    case HX_JV_FUNC: return a.u.fn == b.u.fn;
    case HX_JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

bool hx_jv_eq(hx_jv a, hx_jv b, int64_t *work)
{
    return eq_depth(a, b, 0, work);
}

static int cmp_depth(hx_jrender *r, hx_jv a, hx_jv b, int *out, int depth)
{
    if (depth > HX_JMAX_VALUE_DEPTH) return hx_jfail(r, "values nested too deeply to compare");
    if (a.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, a);
    if (b.type == HX_JV_UNDEF) return hx_jv_undef_fail(r, b);
    if (hx_jv_is_num(a) && hx_jv_is_num(b)) {
        if (a.type != HX_JV_FLOAT && b.type != HX_JV_FLOAT) {
            int64_t x = a.type == HX_JV_BOOL ? a.u.b : a.u.i;
            int64_t y = b.type == HX_JV_BOOL ? b.u.b : b.u.i;
            *out = x < y ? -1 : x > y;
            return 0;
        }
        double x = hx_jv_num(a), y = hx_jv_num(b);
        *out = x < y ? -1 : x > y; /* NaN compares as "equal": both < and > are false */
        return 0;
    }
    if (a.type == HX_JV_STR && b.type == HX_JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        *out = c ? (c < 0 ? -1 : 1) : (a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len);
        return 0;
    }
    if (hx_jv_is_list(a) && a.type == b.type) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (hx_jv_eq(a.u.l->v[i], b.u.l->v[i], &r->steps)) continue;
            return cmp_depth(r, a.u.l->v[i], b.u.l->v[i], out, depth + 1);
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return hx_jfail(r, "'<' not supported between instances of '%s' and '%s'",
                    hx_jv_type_name(a), hx_jv_type_name(b));
}

int hx_jv_cmp(hx_jrender *r, hx_jv a, hx_jv b, int *out)
{
    return cmp_depth(r, a, b, out, 0);
}

/* ---- iteration and length ---- */

int hx_jv_iter(hx_jrender *r, hx_jv v, const hx_jlist **out)
{
    static const hx_jlist empty = {0, 0, NULL, false};
    switch (v.type) {
    case HX_JV_UNDEF:
        *out = &empty;
        return 0;
    case HX_JV_LIST:
    case HX_JV_TUPLE:
        if (v.flag) { /* an iterator yields its items once */
            *out = v.u.l->consumed ? &empty : v.u.l;
            v.u.l->consumed = true;
            return 0;
        }
        *out = v.u.l;
        return 0;
    case HX_JV_DICT: {
        hx_jlist *l = hx_jlist_new(r, v.u.d->n);
        if (!l) return -1;
        for (size_t i = 0; i < v.u.d->n; i++) l->v[l->n++] = v.u.d->k[i];
        *out = l;
        return 0;
    }
    case HX_JV_STR: {
        const hx_jstr *s = v.u.s;
        hx_jlist *l = hx_jlist_new(r, 0);
        if (!l) return -1;
        size_t i = 0;
        while (i < s->len) {
            size_t b = i;
            hx_ju_next(s->s, s->len, &i);
            hx_jv c;
            /* iterating a Markup yields plain str characters */
            if (hx_jv_make_str(r, s->s + b, i - b, &c) < 0 || hx_jlist_push(r, l, c) < 0)
                return -1;
        }
        *out = l;
        return 0;
    }
    default:
        return hx_jfail(r, "'%s' object is not iterable", hx_jv_type_name(v));
    }
}

int hx_jv_len(hx_jrender *r, hx_jv v, int64_t *out)
{
    switch (v.type) {
    case HX_JV_UNDEF: *out = 0; return 0;
    case HX_JV_STR:
        *out = (int64_t)hx_ju_len(v.u.s->s, v.u.s->len);
        return hx_jstep(r, (int64_t)(v.u.s->len / 16));
    case HX_JV_LIST:
    case HX_JV_TUPLE:
        if (v.flag) break;
        *out = (int64_t)v.u.l->n;
        return 0;
    case HX_JV_DICT: *out = (int64_t)v.u.d->n; return 0;
    default: break;
    }
    return hx_jfail(r, "object of type '%s' has no len()", hx_jv_type_name(v));
}

/* ---- printing ---- */

void hx_jfloat_repr(double f, char *buf)
{
    if (isnan(f)) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(buf, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        strcpy(buf, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    /* Shortest digit string that reads back as f (what Python's repr picks). */
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    int exp = atoi(p + 1);
    int decpt = exp + 1;
    char *o = buf;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            memcpy(o, digits, (size_t)nd);
            o += nd;
        } else if (decpt >= nd) {
            memcpy(o, digits, (size_t)nd);
            o += nd;
            for (int i = nd; i < decpt; i++) *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            memcpy(o, digits, (size_t)decpt);
            o += decpt;
            *o++ = '.';
            memcpy(o, digits + decpt, (size_t)(nd - decpt));
            o += nd - decpt;
        }
        *o = '\0';
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static void repr_str(hx_jbuf *b, const hx_jstr *s)
{
    bool has_sq = memchr(s->s, '\'', s->len) != NULL;
    bool has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    hx_jbuf_addc(b, q);
    size_t i = 0;
    while (i < s->len) {
        size_t start = i;
        uint32_t cp = hx_ju_next(s->s, s->len, &i);
        if (cp == (uint32_t)q || cp == '\\') {
            hx_jbuf_addc(b, '\\');
            hx_jbuf_addc(b, (char)cp);
        } else if (cp == '\t') {
            hx_jbuf_adds(b, "\\t");
        } else if (cp == '\n') {
            hx_jbuf_adds(b, "\\n");
        } else if (cp == '\r') {
            hx_jbuf_adds(b, "\\r");
        } else if (cp < 0x20 || cp == 0x7F) {
            hx_jbuf_addf(b, "\\x%02x", (unsigned)cp);
        } else if (cp < 0x7F) {
            hx_jbuf_addc(b, (char)cp);
        } else if (i - start == 1 && (unsigned char)s->s[start] >= 0x80) {
            hx_jbuf_addf(b, "\\x%02x", (unsigned)cp); /* a stray byte: show it, don't copy it */
        } else if (hx_ju_isprintable(cp)) {
            hx_jbuf_add(b, s->s + start, i - start);
        } else if (cp <= 0xFF) {
            hx_jbuf_addf(b, "\\x%02x", (unsigned)cp);
        } else if (cp <= 0xFFFF) {
            hx_jbuf_addf(b, "\\u%04x", (unsigned)cp);
        } else {
            hx_jbuf_addf(b, "\\U%08x", (unsigned)cp);
        }
    }
    hx_jbuf_addc(b, q);
}

static void add_scalar(hx_jbuf *b, hx_jv v)
{
    char tmp[48];
    switch (v.type) {
    case HX_JV_NONE: hx_jbuf_adds(b, "None"); break;
    case HX_JV_BOOL: hx_jbuf_adds(b, v.u.b ? "True" : "False"); break;
    case HX_JV_INT: hx_jbuf_addf(b, "%lld", (long long)v.u.i); break;
    case HX_JV_FLOAT:
        hx_jfloat_repr(v.u.f, tmp);
        hx_jbuf_adds(b, tmp);
        break;
    default: break;
    }
}

int hx_jv_repr_append(hx_jrender *r, hx_jbuf *b, hx_jv v, int depth)
{
    if (depth > HX_JMAX_VALUE_DEPTH) return hx_jfail(r, "value nested too deeply to print");
    if (hx_jstep(r, 1) < 0) return -1;
    switch (v.type) {
    case HX_JV_UNDEF:
        hx_jbuf_adds(b, "Undefined");
        return 0;
    case HX_JV_STR:
        if (v.flag) hx_jbuf_adds(b, "Markup(");
        repr_str(b, v.u.s);
        if (v.flag) hx_jbuf_addc(b, ')');
        return 0;
    case HX_JV_LIST:
    case HX_JV_TUPLE: {
        if (v.flag) {
            hx_jbuf_adds(b, "<generator object>");
            return 0;
        }
        bool tup = v.type == HX_JV_TUPLE;
        hx_jbuf_addc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) hx_jbuf_adds(b, ", ");
            if (hx_jv_repr_append(r, b, v.u.l->v[i], depth + 1) < 0) return -1;
        }
        if (tup && v.u.l->n == 1) hx_jbuf_addc(b, ',');
        hx_jbuf_addc(b, tup ? ')' : ']');
        return hx_jbuf_check(r, b);
    }
    case HX_JV_DICT:
    case HX_JV_NS:
        if (v.type == HX_JV_NS) hx_jbuf_adds(b, "<Namespace ");
        hx_jbuf_addc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) hx_jbuf_adds(b, ", ");
            if (hx_jv_repr_append(r, b, v.u.d->k[i], depth + 1) < 0) return -1;
            hx_jbuf_adds(b, ": ");
            if (hx_jv_repr_append(r, b, v.u.d->v[i], depth + 1) < 0) return -1;
        }
        hx_jbuf_addc(b, '}');
        if (v.type == HX_JV_NS) hx_jbuf_addc(b, '>');
        return hx_jbuf_check(r, b);
    case HX_JV_FUNC:
        if (v.u.fn->kind == HX_JF_MACRO) hx_jbuf_addf(b, "<Macro '%s'>", v.u.fn->def->name->s);
        else hx_jbuf_adds(b, "<built-in function>");
        return 0;
    case HX_JV_LOOP:
        hx_jbuf_addf(b, "<LoopContext %lld/%zu>", (long long)v.u.loop->index0 + 1,
                     v.u.loop->items->n);
        return 0;
    default:
        add_scalar(b, v);
        return 0;
    }
}

int hx_jv_str_append(hx_jrender *r, hx_jbuf *b, hx_jv v)
{
    switch (v.type) {
    case HX_JV_UNDEF:
        return 0;
    case HX_JV_STR:
        hx_jbuf_add(b, v.u.s->s, v.u.s->len);
        return 0;
    case HX_JV_NONE:
    case HX_JV_BOOL:
    case HX_JV_INT:
    case HX_JV_FLOAT:
        add_scalar(b, v);
        return 0;
    default:
        return hx_jv_repr_append(r, b, v, 0);
    }
}

int hx_jv_to_str(hx_jrender *r, hx_jv v, hx_jstr **out)
{
    if (v.type == HX_JV_STR) {
        *out = v.u.s;
        return 0;
    }
    hx_jbuf b;
    hx_jbuf_init(&b, &r->arena, r->lim.max_output_bytes);
    if (hx_jv_str_append(r, &b, v) < 0 || hx_jbuf_check(r, &b) < 0) return -1;
    *out = hx_jstr_make(r, b.p ? b.p : "", b.len);
    return *out ? 0 : -1;
}

/* ---- JSON ---- */

static void json_str(hx_jbuf *b, const char *s, size_t n, bool ensure_ascii)
{
    hx_jbuf_addc(b, '"');
    size_t i = 0, run = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp = hx_ju_next(s, n, &i);
        const char *rep = NULL;
        char tmp[16];
        if (cp == '"') rep = "\\\"";
        else if (cp == '\\') rep = "\\\\";
        else if (cp == '\n') rep = "\\n";
        else if (cp == '\r') rep = "\\r";
        else if (cp == '\t') rep = "\\t";
        else if (cp == '\b') rep = "\\b";
        else if (cp == '\f') rep = "\\f";
        else if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                         0xDC00 + (v & 0x3FF));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            rep = tmp;
        }
        if (!rep) continue;
        hx_jbuf_add(b, s + run, start - run);
        hx_jbuf_adds(b, rep);
        run = i;
    }
    hx_jbuf_add(b, s + run, n - run);
    hx_jbuf_addc(b, '"');
}

static void newline_indent(hx_jbuf *b, const hx_jjson_opts *o, int level)
{
    hx_jbuf_addc(b, '\n');
    for (int i = 0; i < level; i++) hx_jbuf_add(b, o->indent->s, o->indent->len);
}

/* A dict key as json.dumps converts it: str as is, numbers and constants to their JSON text. */
static int json_key(hx_jrender *r, hx_jv k, hx_jstr **out)
{
    char tmp[48];
    switch (k.type) {
    case HX_JV_STR: *out = k.u.s; return 0;
    case HX_JV_BOOL: strcpy(tmp, k.u.b ? "true" : "false"); break;
    case HX_JV_NONE: strcpy(tmp, "null"); break;
    case HX_JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)k.u.i); break;
    case HX_JV_FLOAT:
        if (isnan(k.u.f)) strcpy(tmp, "NaN");
        else if (isinf(k.u.f)) strcpy(tmp, k.u.f < 0 ? "-Infinity" : "Infinity");
        else hx_jfloat_repr(k.u.f, tmp);
        break;
    default:
        return hx_jfail(r, "keys must be str, int, float, bool or None, not %s",
                        hx_jv_type_name(k));
    }
    *out = hx_jstr_make(r, tmp, strlen(tmp));
    return *out ? 0 : -1;
}

static int cmp_key_idx(const void *a, const void *b, void *ctx);

int hx_jv_tojson(hx_jrender *r, hx_jbuf *b, hx_jv v, const hx_jjson_opts *o, int depth)
{
    char tmp[48];
    if (depth > HX_JMAX_VALUE_DEPTH) return hx_jfail(r, "value nested too deeply for tojson");
    if (hx_jstep(r, 1) < 0) return -1;
    switch (v.type) {
    case HX_JV_NONE: hx_jbuf_adds(b, "null"); return 0;
    case HX_JV_BOOL: hx_jbuf_adds(b, v.u.b ? "true" : "false"); return 0;
    case HX_JV_INT: hx_jbuf_addf(b, "%lld", (long long)v.u.i); return 0;
    case HX_JV_FLOAT:
        if (isnan(v.u.f)) hx_jbuf_adds(b, "NaN");
        else if (isinf(v.u.f)) hx_jbuf_adds(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            hx_jfloat_repr(v.u.f, tmp);
            hx_jbuf_adds(b, tmp);
        }
        return 0;
    case HX_JV_STR:
        json_str(b, v.u.s->s, v.u.s->len, o->ensure_ascii);
        return 0;
    case HX_JV_LIST:
    case HX_JV_TUPLE:
        if (v.flag) break;
        if (v.u.l->n == 0) {
            hx_jbuf_adds(b, "[]");
            return 0;
        }
        hx_jbuf_addc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) hx_jbuf_adds(b, o->item_sep);
            if (o->indent) newline_indent(b, o, depth + 1);
            if (hx_jv_tojson(r, b, v.u.l->v[i], o, depth + 1) < 0) return -1;
        }
        if (o->indent) newline_indent(b, o, depth);
        hx_jbuf_addc(b, ']');
        return hx_jbuf_check(r, b);
    case HX_JV_DICT: {
        const hx_jdict *d = v.u.d;
        if (d->n == 0) {
            hx_jbuf_adds(b, "{}");
            return 0;
        }
        size_t *order = hx_jalloc(r, d->n * sizeof *order);
        if (!order) return -1;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].type != HX_JV_STR || d->k[0].type != HX_JV_STR)
                    return hx_jfail(r, "sort_keys needs keys of one orderable type");
            /* insertion sort keeps this dependency-free; dicts here are small */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0 && cmp_key_idx(&order[j - 1], &x, (void *)d) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        hx_jbuf_addc(b, '{');
        for (size_t k = 0; k < d->n; k++) {
            size_t i = order[k];
            hx_jstr *key = NULL;
            if (k) hx_jbuf_adds(b, o->item_sep);
            if (o->indent) newline_indent(b, o, depth + 1);
            if (json_key(r, d->k[i], &key) < 0) return -1;
            json_str(b, key->s, key->len, o->ensure_ascii);
            hx_jbuf_adds(b, o->key_sep);
            if (hx_jv_tojson(r, b, d->v[i], o, depth + 1) < 0) return -1;
        }
        if (o->indent) newline_indent(b, o, depth);
        hx_jbuf_addc(b, '}');
        return hx_jbuf_check(r, b);
    }
    default:
        break;
    }
    return hx_jfail(r, "Object of type %s is not JSON serializable", hx_jv_type_name(v));
}

static int cmp_key_idx(const void *a, const void *b, void *ctx)
{
    const hx_jdict *d = ctx;
    const hx_jstr *x = d->k[*(const size_t *)a].u.s, *y = d->k[*(const size_t *)b].u.s;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

int hx_jv_from_json(hx_jrender *r, json_t *j, hx_jv *out, int depth)
{
    if (depth > HX_JMAX_VALUE_DEPTH)
        return hx_jfail(r, "the JSON context is nested too deeply");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        hx_jdict *d = hx_jdict_new(r, json_object_size(j));
        if (!d) return -1;
        for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
            hx_jv k, v;
            const char *key = json_object_iter_key(it);
            if (hx_jv_make_str(r, key, json_object_iter_key_len(it), &k) < 0) return -1;
            if (hx_jv_from_json(r, json_object_iter_value(it), &v, depth + 1) < 0) return -1;
            /* keys are unique in a jansson object, so append without a lookup */
            if (d->n == d->cap) {
                if (hx_jdict_set(r, d, k, v) < 0) return -1;
            } else {
                d->k[d->n] = k;
                d->v[d->n] = v;
                d->n++;
            }
        }
        *out = hx_jv_of_dict(d, HX_JV_DICT);
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        hx_jlist *l = hx_jlist_new(r, n);
        if (!l) return -1;
        for (size_t i = 0; i < n; i++)
            if (hx_jv_from_json(r, json_array_get(j, i), &l->v[l->n++], depth + 1) < 0)
                return -1;
        *out = hx_jv_of_list(l, HX_JV_LIST);
        return 0;
    }
    case JSON_STRING:
        return hx_jv_make_str(r, json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER:
        *out = hx_jv_int((int64_t)json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = hx_jv_float(json_real_value(j));
        return 0;
    case JSON_TRUE:
        *out = hx_jv_bool(true);
        return 0;
    case JSON_FALSE:
        *out = hx_jv_bool(false);
        return 0;
    default:
        *out = hx_jv_none();
        return 0;
    }
}
