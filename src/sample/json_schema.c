/* json_schema.c - JSON Schema subset to GBNF-like grammar text.
 *
 * Every schema node becomes one rule `gN ::= ...`, written after the fixed JSON primitives (ws,
 * string, number, value, ...). A $ref becomes one rule per target, named before its body is
 * written, so recursive schemas turn into recursive rules. Objects with declared properties use
 * two chains of rules so that optional properties can be left out without exponential blowup:
 * hN_i ("properties i.. with none written yet") and tN_i ("properties i.., each after a comma").
 * The output is plain text; grammar.c compiles and bounds it. */
#include "sample/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "sample/grammar.h"
#include "sample/regex.h"

/* ---- fixed rules ---- */

#define JSON_PRIMITIVES                                                                       \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,12}\n"                                                  \
    "string ::= \"\\\"\" char* \"\\\"\"\n"                                                     \
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" uesc)\n"                    \
    /* \\u escapes: surrogates only as a high-low pair, which strict parsers insist on */     \
    "uesc ::= [0-9a-cA-CeEfF] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} \"\\\\u\" "   \
    "[dD] [c-fC-F] hex{2}\n"                                                                   \
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"                                        \
    "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"                      \
    "boolean ::= \"true\" | \"false\"\n"                                                       \
    "null ::= \"null\"\n"                                                                      \
    "value ::= object | array | string | number | boolean | null\n"                            \
    "object ::= \"{\" ws (member (\",\" ws member)*)? \"}\"\n"                                \
    "member ::= string ws \":\" ws value ws\n"                                                 \
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"                             \
    "fmt-date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] " \
    "| \"3\" [01])\n"                                                                          \
    "fmt-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "            \
    "(\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"       \
    "fmt-date-time ::= fmt-date \"T\" fmt-time\n"                                              \
    "fmt-uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"               \
    "hex ::= [0-9a-fA-F]\n"                                                                    \
    "fmt-email ::= [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63})+\n"

const char *hx_json_object_grammar(void)
{
    return JSON_PRIMITIVES "root ::= object\n";
}

/* ---- generator ---- */

#define MAX_NESTING 64

typedef hx_strbuf sbuf;

typedef struct {
    const char *ref;  /* borrowed from the schema */
    int         rule; /* gN */
} ref_memo;

typedef struct {
    json_t    *root;   /* borrowed */
    sbuf       out;    /* the rules written so far */
    int        n_rules;
    ref_memo  *refs;
    size_t     n_refs, cap_refs;
    char       path[256]; /* JSON pointer of the node being written, for messages */
    int        depth;
    hx_err    *err;
    hx_status  st;
} sgen;

static bool sg_nomem(sgen *g)
{
    if (g->st == HX_OK) g->st = HX_E_NOMEM;
    hx_err_set(g->err, HX_E_NOMEM, "json_schema: out of memory");
    return false;
}

static bool sg_fail(sgen *g, hx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool sg_fail(sgen *g, hx_status st, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g->st == HX_OK) g->st = st;
    hx_err_set(g->err, st, "json_schema: %s (at %s)", msg, g->path[0] ? g->path : "#");
    return false;
}

static bool sb_put(sgen *g, sbuf *b, const char *s, size_t n)
{
    return hx_strbuf_put(b, s, n) || sg_nomem(g);
}

static bool sb_str(sgen *g, sbuf *b, const char *s)
{
    return sb_put(g, b, s, strlen(s));
}

static bool sb_printf(sgen *g, sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool sb_printf(sgen *g, sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    HX_ASSERT(n >= 0 && (size_t)n < sizeof tmp); /* only short, fixed-shape pieces come here */
    return sb_put(g, b, tmp, (size_t)n);
}

/* Appends s as a grammar literal: quotes, backslashes and control bytes escaped; UTF-8 kept. */
static bool sb_literal(sgen *g, sbuf *b, const char *s, size_t n)
{
    if (!sb_put(g, b, "\"", 1)) return false;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        bool ok;
        if (c == '"' || c == '\\') ok = sb_put(g, b, "\\", 1) && sb_put(g, b, s + i, 1);
        else if (c < 0x20 || c == 0x7F) ok = sb_printf(g, b, "\\x%02X", c);
        else ok = sb_put(g, b, s + i, 1);
        if (!ok) return false;
    }
    return sb_put(g, b, "\"", 1);
}

/* Appends the compact JSON text of v as a literal. */
static bool sb_json_literal(sgen *g, sbuf *b, const json_t *v)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) return sg_nomem(g);
    const bool ok = sb_literal(g, b, text, strlen(text));
    free(text); /* jansson's allocator, not ours */
    return ok;
}

/* Pushes "/seg" on the path; returns the old length for path_pop. Long paths are cut. */
static size_t path_push(sgen *g, const char *seg)
{
    const size_t n = strlen(g->path);
    snprintf(g->path + n, sizeof g->path - n, "%s%s", n ? "/" : "#/", seg);
    return n;
}

static void path_pop(sgen *g, size_t n)
{
    g->path[n] = '\0';
}

static bool gen(sgen *g, json_t *s, int *rule);

static const char *const k_ignored[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs",
    "definitions", "deprecated", "readOnly", "writeOnly",
};
static const char *const k_known[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "minItems", "maxItems", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "format",
    "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
};

static bool check_keywords(sgen *g, json_t *s)
{
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        bool ok = false;
        for (size_t i = 0; i < HX_COUNTOF(k_ignored) && !ok; i++) ok = !strcmp(key, k_ignored[i]);
        for (size_t i = 0; i < HX_COUNTOF(k_known) && !ok; i++) ok = !strcmp(key, k_known[i]);
        if (!ok) return sg_fail(g, HX_E_UNSUPPORTED, "'%.100s' is not supported", key);
    }
    return true;
}

/* Reads a non-negative integer keyword; *v untouched when absent. */
static bool get_count(sgen *g, json_t *s, const char *key, int64_t *v)
{
    json_t *x = json_object_get(s, key);
    if (!x) return true;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return sg_fail(g, HX_E_INVALID, "expected '%s' to be a non-negative integer", key);
    if (json_integer_value(x) > HX_GRAMMAR_MAX_REPEAT)
        return sg_fail(g, HX_E_UNSUPPORTED, "'%s' above %d is not supported", key,
                       HX_GRAMMAR_MAX_REPEAT);
    *v = json_integer_value(x);
    return true;
}

/* Writes " X{lo,hi}" (hi < 0: unbounded), or nothing for {0,0}, for a parenthesised X. */
static bool sb_repeat(sgen *g, sbuf *b, const char *x, int64_t lo, int64_t hi)
{
    if (hi == 0) return true;
    if (hi < 0) return sb_printf(g, b, " %s{%lld,}", x, (long long)lo);
    return sb_printf(g, b, " %s{%lld,%lld}", x, (long long)lo, (long long)hi);
}

/* A string whose content matches the regex `pattern` (searched, as JSON Schema has it): the
 * regex's rules go to the output under a fresh name. */
static bool gen_pattern(sgen *g, json_t *s, json_t *pat, sbuf *b)
{
    if (!json_is_string(pat))
        return sg_fail(g, HX_E_INVALID, "expected 'pattern' to be a string");
    static const char *const other[] = { "format", "minLength", "maxLength" };
    for (size_t i = 0; i < HX_COUNTOF(other); i++)
        if (json_object_get(s, other[i]))
            return sg_fail(g, HX_E_UNSUPPORTED, "'pattern' together with '%s' is not supported",
                           other[i]);
    char name[32], *text = NULL;
    snprintf(name, sizeof name, "p%d", g->n_rules++);
    hx_err rerr = { 0 };
    const hx_status st = hx_regex_to_grammar(json_string_value(pat), json_string_length(pat),
                                             name, HX_REGEX_JSON_STRING, &text, &rerr);
    if (st != HX_OK) return sg_fail(g, st, "'pattern': %s", rerr.msg);
    const bool ok = sb_str(g, &g->out, text) && sb_printf(g, b, "\"\\\"\" %s \"\\\"\"", name);
    hx_free(text);
    return ok;
}

static bool gen_string(sgen *g, json_t *s, sbuf *b)
{
    json_t *pat = json_object_get(s, "pattern");
    if (pat) return gen_pattern(g, s, pat, b);
    json_t *fmt = json_object_get(s, "format");
    if (fmt) {
        static const char *const formats[] = { "date", "time", "date-time", "uuid", "email" };
        const char *f = json_string_value(fmt);
        if (!f) return sg_fail(g, HX_E_INVALID, "expected 'format' to be a string");
        for (size_t i = 0; i < HX_COUNTOF(formats); i++)
            if (!strcmp(f, formats[i])) return sb_printf(g, b, "\"\\\"\" fmt-%s \"\\\"\"", f);
        return sg_fail(g, HX_E_UNSUPPORTED, "'format' '%.60s' is not supported", f);
    }
    int64_t lo = 0, hi = -1;
    if (!get_count(g, s, "minLength", &lo) || !get_count(g, s, "maxLength", &hi)) return false;
    if (hi >= 0 && hi < lo)
        return sg_fail(g, HX_E_INVALID, "expected minLength <= maxLength, found %lld > %lld",
                       (long long)lo, (long long)hi);
    if (lo == 0 && hi < 0) return sb_put(g, b, "string", 6);
    return sb_put(g, b, "\"\\\"\"", 4) && sb_repeat(g, b, "char", lo, hi) &&
           sb_put(g, b, " \"\\\"\"", 5);
}

static bool gen_array(sgen *g, json_t *s, sbuf *b)
{
    json_t *items = json_object_get(s, "items");
    int item = -1;
    if (json_is_array(items))
        return sg_fail(g, HX_E_UNSUPPORTED, "'items' as an array (tuple validation) is not "
                       "supported");
    if (items) {
        const size_t n = path_push(g, "items");
        const bool ok = gen(g, items, &item);
        path_pop(g, n);
        if (!ok) return false;
    }
    int64_t lo = 0, hi = -1;
    if (!get_count(g, s, "minItems", &lo) || !get_count(g, s, "maxItems", &hi)) return false;
    if (hi >= 0 && hi < lo)
        return sg_fail(g, HX_E_INVALID, "expected minItems <= maxItems, found %lld > %lld",
                       (long long)lo, (long long)hi);
    char v[32], more[64];
    if (item >= 0) snprintf(v, sizeof v, "g%d", item);
    else snprintf(v, sizeof v, "value");
    snprintf(more, sizeof more, "(\",\" ws %s ws)", v);
    if (hi == 0) return sb_put(g, b, "\"[\" ws \"]\"", 10);
    if (lo == 0)
        return sb_printf(g, b, "\"[\" ws (%s ws", v) &&
               sb_repeat(g, b, more, 0, hi < 0 ? -1 : hi - 1) && sb_put(g, b, ")? \"]\"", 6);
    return sb_printf(g, b, "\"[\" ws %s ws", v) &&
           sb_repeat(g, b, more, lo - 1, hi < 0 ? -1 : hi - 1) && sb_put(g, b, " \"]\"", 4);
}

/* ---- integer ranges ---- */

/* The largest magnitude written for a bounded integer: 16 digits, as the `integer` rule allows. */
#define INT_CAP 9999999999999999LL

static const char *const k_int_bounds[] = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
};

/* The first bound keyword present in s, or NULL. */
static const char *int_bound_keyword(json_t *s)
{
    for (size_t i = 0; i < HX_COUNTOF(k_int_bounds); i++)
        if (json_object_get(s, k_int_bounds[i])) return k_int_bounds[i];
    return NULL;
}

/* Turns the number x of keyword key into an integer bound: for a lower bound the smallest
 * integer >= x (> x when exclusive), for an upper one the largest <= x (< x). The result is
 * clamped to +-INT_CAP, so a bound beyond 16 digits means "no bound" on that side (and a range
 * lying wholly beyond them shrinks to its edge value). */
static bool int_bound(sgen *g, json_t *x, const char *key, bool lower, bool exclusive,
                      int64_t *out)
{
    if (!json_is_number(x))
        return sg_fail(g, HX_E_INVALID, "expected '%s' to be a number", key);
    int64_t v;
    if (json_is_integer(x)) {
        const json_int_t i = json_integer_value(x);
        v = i > INT_CAP ? INT_CAP + 1 : i < -INT_CAP ? -INT_CAP - 1 : (int64_t)i;
        if (exclusive) v += lower ? 1 : -1;
    } else {
        const double d = json_real_value(x);
        const double r = lower ? (exclusive ? floor(d) + 1 : ceil(d))
                               : (exclusive ? ceil(d) - 1 : floor(d));
        /* 1e16 is INT_CAP + 1, exact in a double; anything strictly inside converts exactly. */
        v = r >= 1e16 ? INT_CAP + 1 : r <= -1e16 ? -INT_CAP - 1 : (int64_t)r;
    }
    *out = v > INT_CAP ? INT_CAP : v < -INT_CAP ? -INT_CAP : v;
    return true;
}

/* Reads one side of the range: `key` (minimum or maximum), made exclusive by a draft-4 boolean
 * `ex_key`, and a draft-6 numeric `ex_key`; when both give a bound the tighter one wins. *v is
 * untouched when the side has no bound. */
static bool int_side(sgen *g, json_t *s, const char *key, const char *ex_key, bool lower,
                     int64_t *v)
{
    json_t *x = json_object_get(s, key), *ex = json_object_get(s, ex_key);
    const bool ex_bool = json_is_boolean(ex);
    if (ex_bool && json_is_true(ex) && !x)
        return sg_fail(g, HX_E_INVALID, "expected '%s' beside a boolean '%s'", key, ex_key);
    int64_t a = 0;
    if (x) {
        if (!int_bound(g, x, key, lower, ex_bool && json_is_true(ex), &a)) return false;
        *v = a;
    }
    if (ex && !ex_bool) {
        if (!json_is_number(ex))
            return sg_fail(g, HX_E_INVALID, "expected '%s' to be a number or a boolean", ex_key);
        if (!int_bound(g, ex, ex_key, lower, true, &a)) return false;
        if (!x || (lower ? a > *v : a < *v)) *v = a;
    }
    return true;
}

/* Appends one alternative: the literal prefix[0..np), then the digit class [lo-hi] (none when
 * lo is 0 as a char), then n_any digits [0-9]. */
static bool int_alt(sgen *g, sbuf *b, bool *first, const char *prefix, size_t np, char lo,
                    char hi, int n_any)
{
    char lit[24];
    size_t n = 0;
    memcpy(lit, prefix, np);
    n = np;
    if (lo && lo == hi) lit[n++] = lo, lo = 0; /* a one-digit class joins the literal */
    if (lo == '0' && hi == '9') lo = 0, n_any++; /* [0-9] joins the digits after it */
    bool ok = *first || sb_put(g, b, " | ", 3);
    *first = false;
    if (ok && n) ok = sb_printf(g, b, "\"%.*s\"%s", (int)n, lit, lo || n_any ? " " : "");
    if (ok && lo) ok = sb_printf(g, b, "[%c-%c]%s", lo, hi, n_any ? " " : "");
    if (ok && n_any == 1) ok = sb_put(g, b, "[0-9]", 5);
    else if (ok && n_any > 1) ok = sb_printf(g, b, "[0-9]{%d}", n_any);
    return ok;
}

static bool all_digits(const char *p, size_t n, char c)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != c) return false;
    return true;
}

/* Appends alternatives for exactly the m-digit strings from x to y (x <= y, as digit strings of
 * the same length), behind the literal prefix[0..np): the shared leading digits join the
 * prefix; then x's first digit followed by the range from x's tail up to 9s, the digits
 * strictly between followed by any m-1 digits, and y's first digit followed by 0s up to y's
 * tail. A tail of all 0s (for x) or all 9s (for y) folds its digit into the middle class, so
 * [123, 456] gives "12" [3-9] | "1" [3-9] [0-9] | [2-3] [0-9]{2} | "4" [0-4] [0-9] | "45" [0-6].
 * prefix has room for 16 digits, the most m and np add up to. */
static bool int_same_len(sgen *g, sbuf *b, bool *first, char *prefix, size_t np, const char *x,
                         const char *y, size_t m)
{
    static const char zeros[] = "0000000000000000", nines[] = "9999999999999999";
    while (m > 0 && x[0] == y[0]) prefix[np++] = x[0], x++, y++, m--;
    if (m == 0) return int_alt(g, b, first, prefix, np, 0, 0, 0);
    char lo = x[0], hi = y[0];
    const bool lo_whole = all_digits(x + 1, m - 1, '0'), hi_whole = all_digits(y + 1, m - 1, '9');
    if (!lo_whole) {
        prefix[np] = lo++;
        if (!int_same_len(g, b, first, prefix, np + 1, x + 1, nines, m - 1)) return false;
    }
    if (!hi_whole) hi--;
    if (lo <= hi && !int_alt(g, b, first, prefix, np, lo, hi, (int)m - 1)) return false;
    if (!hi_whole) {
        prefix[np] = y[0];
        if (!int_same_len(g, b, first, prefix, np + 1, zeros, y + 1, m - 1)) return false;
    }
    return true;
}

/* Appends alternatives for exactly the decimal numbers lo..hi (0 <= lo <= hi <= INT_CAP), without
 * leading zeros, one digit count at a time; a run of digit counts covered whole becomes one
 * alternative, [1-9] [0-9]{d-1,e-1}. */
static bool int_magnitudes(sgen *g, sbuf *b, bool *first, int64_t lo, int64_t hi)
{
    if (lo == 0) {
        if (!int_alt(g, b, first, "0", 1, 0, 0, 0)) return false;
        if (hi == 0) return true;
        lo = 1;
    }
    char xs[24], ys[24], prefix[24];
    const int d_lo = snprintf(xs, sizeof xs, "%lld", (long long)lo);
    const int d_hi = snprintf(ys, sizeof ys, "%lld", (long long)hi);
    int64_t p10 = 1; /* 10^(d-1) */
    for (int d = 1; d < d_lo; d++) p10 *= 10;
    for (int d = d_lo; d <= d_hi; d++, p10 *= 10) {
        const int64_t p_lo = lo > p10 ? lo : p10, p_hi = hi < p10 * 10 - 1 ? hi : p10 * 10 - 1;
        if (p_lo == p10 && p_hi == p10 * 10 - 1) {
            int e = d; /* the last digit count covered whole from here */
            int64_t q10 = p10 * 10;
            while (e < d_hi && hi >= q10 * 10 - 1) e++, q10 *= 10;
            bool ok;
            if (e == d) {
                ok = int_alt(g, b, first, "", 0, '1', '9', d - 1);
            } else {
                ok = (*first || sb_put(g, b, " | ", 3)) &&
                     sb_printf(g, b, "[1-9] [0-9]{%d,%d}", d - 1, e - 1);
                *first = false;
            }
            if (!ok) return false;
            for (; d < e; d++) p10 *= 10;
            continue;
        }
        snprintf(xs, sizeof xs, "%lld", (long long)p_lo); /* both have d digits */
        snprintf(ys, sizeof ys, "%lld", (long long)p_hi);
        if (!int_same_len(g, b, first, prefix, 0, xs, ys, (size_t)d)) return false;
    }
    return true;
}

/* An integer, bounded when the schema gives minimum, maximum, exclusiveMinimum or
 * exclusiveMaximum; without bounds the plain `integer` rule. Negative numbers are "-" followed
 * by their magnitudes, so "-0" is never written. */
static bool gen_integer(sgen *g, json_t *s, sbuf *b)
{
    if (!int_bound_keyword(s)) return sb_put(g, b, "integer", 7);
    int64_t lo = -INT_CAP, hi = INT_CAP;
    if (!int_side(g, s, "minimum", "exclusiveMinimum", true, &lo) ||
        !int_side(g, s, "maximum", "exclusiveMaximum", false, &hi))
        return false;
    if (lo > hi)
        return sg_fail(g, HX_E_INVALID, "expected the bounds to leave some integer, found the "
                       "empty range [%lld, %lld]", (long long)lo, (long long)hi);
    bool first = true;
    if (lo < 0) {
        bool neg_first = true;
        if (!sb_put(g, b, "\"-\" (", 5) ||
            !int_magnitudes(g, b, &neg_first, hi < 0 ? -hi : 1, -lo) || !sb_put(g, b, ")", 1))
            return false;
        first = false;
    }
    return hi < 0 || int_magnitudes(g, b, &first, lo > 0 ? lo : 0, hi);
}

/* ---- extra keys that are not declared names ---- */

typedef struct {
    const uint32_t *cp; /* a declared name's characters */
    size_t          n;
} cpname;

/* Writes rule gN for the rest of a key (after the opening quote and d characters that the
 * names[0..k) share) that is none of those names, and returns N: at each trie node the key may
 * go on with a name's next character, leave every name with some other character or an escape
 * (then anything may follow), or close, unless a name ends exactly here. */
static bool gen_key_node(sgen *g, const cpname *names, size_t k, size_t d, int *rule)
{
    sbuf b = { 0 };
    cpname *sub = hx_alloc((k ? k : 1) * sizeof *sub);
    bool ok = sub != NULL, terminal = false;
    if (!ok) sg_nomem(g);
    char cls[2048] = "[^\"\\\\\\x00-\\x1F";
    size_t cls_len = strlen(cls);
    for (size_t i = 0; ok && i < k; i++) {
        if (names[i].n == d) {
            terminal = true;
            continue;
        }
        const uint32_t c = names[i].cp[d];
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) seen = names[j].n > d && names[j].cp[d] == c;
        if (seen) continue;
        size_t m = 0;
        for (size_t j = i; j < k; j++)
            if (names[j].n > d && names[j].cp[d] == c) sub[m++] = names[j];
        int child = -1;
        char utf8[5] = { 0 };
        size_t u = 0;
        if (c < 0x80) utf8[u++] = (char)c;
        else if (c < 0x800) utf8[u++] = (char)(0xC0 | c >> 6), utf8[u++] = (char)(0x80 | (c & 0x3F));
        else if (c < 0x10000)
            utf8[u++] = (char)(0xE0 | c >> 12), utf8[u++] = (char)(0x80 | (c >> 6 & 0x3F)),
            utf8[u++] = (char)(0x80 | (c & 0x3F));
        else
            utf8[u++] = (char)(0xF0 | c >> 18), utf8[u++] = (char)(0x80 | (c >> 12 & 0x3F)),
            utf8[u++] = (char)(0x80 | (c >> 6 & 0x3F)), utf8[u++] = (char)(0x80 | (c & 0x3F));
        ok = gen_key_node(g, sub, m, d + 1, &child) && sb_literal(g, &b, utf8, u) &&
             sb_printf(g, &b, " g%d | ", child);
        if (ok && cls_len + 11 < sizeof cls)
            cls_len += (size_t)snprintf(cls + cls_len, sizeof cls - cls_len, "\\U%08X", c);
        else if (ok)
            ok = sg_fail(g, HX_E_UNSUPPORTED, "more than %zu distinct property name characters "
                         "at one position are not supported", sizeof cls / 11);
    }
    if (ok) {
        *rule = g->n_rules++;
        ok = sb_printf(g, &g->out, "g%d ::= ", *rule) &&
             sb_put(g, &g->out, b.data ? b.data : "", b.len) &&
             sb_put(g, &g->out, cls, cls_len) &&
             sb_str(g, &g->out, "] char* \"\\\"\" | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" uesc) char* "
                                "\"\\\"\"") &&
             (terminal || sb_str(g, &g->out, " | \"\\\"\"")) && sb_str(g, &g->out, "\n");
    }
    hx_free(sub);
    hx_free(b.data);
    return ok;
}

/* Writes a rule for a key that is none of the declared property names and returns its number,
 * or -1 (any key) when a name holds a character that JSON escapes: the trie works on characters
 * as written, and an escaped spelling could slip past it anyway. */
static bool gen_other_key(sgen *g, json_t *props, int *rule)
{
    const size_t k = json_object_size(props);
    cpname *names = hx_calloc(k, sizeof *names);
    uint32_t *cps = NULL;
    size_t total = 0, at = 0, i = 0;
    const char *key;
    json_t *v;
    bool ok = names != NULL, plain = true;
    json_object_foreach(props, key, v) total += strlen(key);
    if (ok && !(cps = hx_alloc((total ? total : 1) * sizeof *cps))) ok = false;
    if (!ok) {
        hx_free(names);
        return sg_nomem(g);
    }
    json_object_foreach(props, key, v) {
        names[i].cp = cps + at;
        for (const unsigned char *p = (const unsigned char *)key; *p;) {
            uint32_t c = *p++;
            const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
            if (extra) c &= 0x3Fu >> extra;
            for (int e = 0; e < extra && *p; e++) c = c << 6 | (*p++ & 0x3F);
            plain &= c >= 0x20 && c != '"' && c != '\\';
            cps[at++] = c;
        }
        names[i].n = (size_t)(cps + at - names[i].cp);
        i++;
    }
    *rule = -1;
    int body = -1;
    if (plain && (ok = gen_key_node(g, names, k, 0, &body))) {
        *rule = g->n_rules++;
        ok = sb_printf(g, &g->out, "g%d ::= \"\\\"\" g%d\n", *rule, body);
    }
    hx_free(cps);
    hx_free(names);
    return ok;
}

/* An object with declared properties; see the file comment for the h/t chains. */
static bool gen_object(sgen *g, json_t *s, sbuf *b)
{
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return sg_fail(g, HX_E_INVALID, "expected 'properties' to be an object");
    if (req && !json_is_array(req))
        return sg_fail(g, HX_E_INVALID, "expected 'required' to be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return sg_fail(g, HX_E_INVALID, "expected 'additionalProperties' to be a boolean or a "
                       "schema");
    const size_t n = props ? json_object_size(props) : 0;
    if (n == 0 && (!addl || json_is_true(addl))) return sb_put(g, b, "object", 6);
    int extra = -1; /* value rule of extra keys: -1 none, -2 any value, else gN */
    if (addl && json_is_true(addl)) extra = -2;
    if (addl && json_is_object(addl)) {
        const size_t pn = path_push(g, "additionalProperties");
        const bool ok = gen(g, addl, &extra);
        path_pop(g, pn);
        if (!ok) return false;
    }
    int *kv = hx_alloc((n + 1) * sizeof *kv);
    bool *required = hx_calloc(n + 1, sizeof *required);
    bool ok = kv && required;
    if (!ok) sg_nomem(g);
    const char *key;
    json_t *v;
    size_t i = 0;
    sbuf rules = { 0 }; /* written after the children's rules, into g->out at the end */
    json_object_foreach(props, key, v) {
        if (!ok) break;
        for (size_t k = 0; k < json_array_size(req); k++)
            required[i] |= json_is_string(json_array_get(req, k)) &&
                           !strcmp(json_string_value(json_array_get(req, k)), key);
        const size_t p1 = path_push(g, "properties");
        const size_t p2 = path_push(g, key);
        int val = -1;
        ok = gen(g, v, &val);
        path_pop(g, p2);
        path_pop(g, p1);
        if (!ok) break;
        json_t *jkey = json_string(key);
        kv[i] = g->n_rules++;
        ok = jkey && sb_printf(g, &rules, "g%d ::= ", kv[i]) && sb_json_literal(g, &rules, jkey) &&
             sb_printf(g, &rules, " ws \":\" ws g%d ws\n", val);
        if (!jkey) sg_nomem(g);
        json_decref(jkey);
        i++;
    }
    const int base = g->n_rules;
    g->n_rules += 2 * (int)(n + 1) + 2;
    const int t0 = base, h0 = base + (int)n + 1, obj = base + 2 * (int)(n + 1);
    const int ex = obj + 1;
    char exv[32];
    if (extra == -2) snprintf(exv, sizeof exv, "value");
    else snprintf(exv, sizeof exv, "g%d", extra);
    char key_rule[32] = "string";
    if (ok && extra != -1 && n > 0) {
        int k;
        ok = gen_other_key(g, props, &k);
        if (ok && k >= 0) snprintf(key_rule, sizeof key_rule, "g%d", k);
    }
    if (ok && extra != -1)
        ok = sb_printf(g, &rules, "g%d ::= %s ws \":\" ws %s ws\n", ex, key_rule, exv);
    /* t_n and h_n: after the declared properties, only extra keys (when allowed) may follow. */
    if (ok && extra != -1)
        ok = sb_printf(g, &rules, "g%d ::= (\",\" ws g%d)*\ng%d ::= (g%d g%d)?\n", t0 + (int)n,
                       ex, h0 + (int)n, ex, t0 + (int)n);
    else if (ok)
        ok = sb_printf(g, &rules, "g%d ::=\ng%d ::=\n", t0 + (int)n, h0 + (int)n);
    for (size_t k = n; ok && k-- > 0;) {
        const int t = t0 + (int)k, h = h0 + (int)k;
        if (required[k])
            ok = sb_printf(g, &rules, "g%d ::= \",\" ws g%d g%d\ng%d ::= g%d g%d\n", t, kv[k],
                           t + 1, h, kv[k], t + 1);
        else
            ok = sb_printf(g, &rules, "g%d ::= (\",\" ws g%d)? g%d\ng%d ::= g%d g%d | g%d\n", t,
                           kv[k], t + 1, h, kv[k], t + 1, h + 1);
    }
    ok = ok && sb_put(g, &g->out, rules.data ? rules.data : "", rules.len) &&
         sb_printf(g, b, "\"{\" ws g%d \"}\"", h0);
    hx_free(rules.data);
    hx_free(kv);
    hx_free(required);
    return ok;
}

static bool gen_type(sgen *g, json_t *s, const char *type, sbuf *b)
{
    static const char *const simple[] = { "number", "boolean", "null" };
    const char *bound = int_bound_keyword(s);
    if (!strcmp(type, "string")) return gen_string(g, s, b);
    if (!strcmp(type, "integer")) return gen_integer(g, s, b);
    if (!strcmp(type, "number") && bound)
        return sg_fail(g, HX_E_UNSUPPORTED, "'%s' is supported on integers only", bound);
    if (!strcmp(type, "array")) return gen_array(g, s, b);
    if (!strcmp(type, "object")) return gen_object(g, s, b);
    for (size_t i = 0; i < HX_COUNTOF(simple); i++)
        if (!strcmp(type, simple[i])) return sb_put(g, b, type, strlen(type));
    return sg_fail(g, HX_E_INVALID, "expected a JSON type name, found 'type' '%.60s'", type);
}

/* Finds the target of "#" or "#/a/b" (JSON pointer, ~0 and ~1 unescaped) in the root. */
static json_t *resolve_ref(sgen *g, const char *ref)
{
    if (ref[0] != '#') return NULL;
    json_t *at = g->root;
    const char *p = ref + 1;
    while (at && *p == '/') {
        char seg[256];
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof seg; p++) {
            if (p[0] == '~' && p[1] == '1') seg[n++] = '/', p++;
            else if (p[0] == '~' && p[1] == '0') seg[n++] = '~', p++;
            else seg[n++] = *p;
        }
        seg[n] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            const unsigned long k = strtoul(seg, &end, 10);
            at = *end == '\0' && n ? json_array_get(at, k) : NULL;
        } else {
            at = NULL;
        }
    }
    return *p ? NULL : at;
}

static bool gen_ref(sgen *g, const char *ref, int *rule)
{
    for (size_t i = 0; i < g->n_refs; i++) {
        if (!strcmp(g->refs[i].ref, ref)) {
            *rule = g->refs[i].rule;
            return true;
        }
    }
    if (ref[0] != '#')
        return sg_fail(g, HX_E_UNSUPPORTED, "'$ref' '%.100s' is not supported (only \"#...\" "
                       "pointers into this schema)", ref);
    json_t *target = resolve_ref(g, ref);
    if (!target) return sg_fail(g, HX_E_INVALID, "expected '$ref' '%.100s' to point into the "
                                "schema, found nothing there", ref);
    if (g->n_refs == g->cap_refs) {
        const size_t cap = g->cap_refs ? g->cap_refs * 2 : 8;
        ref_memo *r = hx_realloc(g->refs, cap * sizeof *r);
        if (!r) return sg_nomem(g);
        g->refs = r;
        g->cap_refs = cap;
    }
    /* Named before the body is written, so a reference to itself inside resolves to it. */
    const int me = g->n_rules++;
    g->refs[g->n_refs++] = (ref_memo){ ref, me };
    int body = -1;
    char saved[sizeof g->path];
    memcpy(saved, g->path, sizeof saved);
    snprintf(g->path, sizeof g->path, "%s", ref);
    const bool ok = gen(g, target, &body);
    memcpy(g->path, saved, sizeof saved);
    if (!ok || !sb_printf(g, &g->out, "g%d ::= g%d\n", me, body)) return false;
    *rule = me;
    return true;
}

/* Bounds apply only where the schema's own type lists "integer" (gen_type refuses them on a
 * "number" alternative); beside $ref, const, enum, anyOf or oneOf, which take precedence over
 * type here, they would be dropped, so they are refused instead. */
static bool check_int_bounds(sgen *g, json_t *s)
{
    static const char *const takes_over[] = { "$ref", "const", "enum", "anyOf", "oneOf" };
    const char *bound = int_bound_keyword(s);
    if (!bound) return true;
    for (size_t i = 0; i < HX_COUNTOF(takes_over); i++)
        if (json_object_get(s, takes_over[i]))
            return sg_fail(g, HX_E_UNSUPPORTED, "'%s' is supported on integers only, not beside "
                           "'%s'", bound, takes_over[i]);
    json_t *type = json_object_get(s, "type");
    bool integer = json_is_string(type) && !strcmp(json_string_value(type), "integer");
    for (size_t i = 0; i < json_array_size(type) && !integer; i++) {
        const char *t = json_string_value(json_array_get(type, i));
        integer = t && !strcmp(t, "integer");
    }
    if (!integer) return sg_fail(g, HX_E_UNSUPPORTED, "'%s' is supported on integers only", bound);
    return true;
}

/* Writes one rule for schema s and returns its number in *rule. */
static bool gen(sgen *g, json_t *s, int *rule)
{
    if (++g->depth > MAX_NESTING) {
        g->depth--;
        return sg_fail(g, HX_E_UNSUPPORTED, "schemas nested deeper than %d are not supported",
                       MAX_NESTING);
    }
    bool ok = true;
    sbuf b = { 0 };
    if (json_is_false(s)) {
        ok = sg_fail(g, HX_E_UNSUPPORTED, "the schema 'false' (nothing is valid) is not "
                     "supported");
        goto done;
    }
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        ok = sb_put(g, &b, "value", 5);
        goto emit;
    }
    if (!json_is_object(s)) {
        ok = sg_fail(g, HX_E_INVALID, "expected a schema object or boolean, found a %s",
                     json_is_array(s) ? "array" : json_is_string(s) ? "string" : "number");
        goto done;
    }
    if (!check_keywords(g, s) || !check_int_bounds(g, s)) {
        ok = false;
        goto done;
    }
    json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        if (!json_is_string(x)) {
            ok = sg_fail(g, HX_E_INVALID, "expected '$ref' to be a string");
            goto done;
        }
        int r = -1;
        ok = gen_ref(g, json_string_value(x), &r) && sb_printf(g, &b, "g%d", r);
    } else if ((x = json_object_get(s, "const"))) {
        ok = sb_json_literal(g, &b, x);
    } else if ((x = json_object_get(s, "enum"))) {
        if (!json_is_array(x) || json_array_size(x) == 0) {
            ok = sg_fail(g, HX_E_INVALID, "expected 'enum' to be a non-empty array");
            goto done;
        }
        for (size_t i = 0; ok && i < json_array_size(x); i++)
            ok = (i == 0 || sb_put(g, &b, " | ", 3)) &&
                 sb_json_literal(g, &b, json_array_get(x, i));
    } else if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        if (!json_is_array(x) || json_array_size(x) == 0) {
            ok = sg_fail(g, HX_E_INVALID, "expected '%s' to be a non-empty array", kw);
            goto done;
        }
        for (size_t i = 0; ok && i < json_array_size(x); i++) {
            char idx[32];
            snprintf(idx, sizeof idx, "%zu", i);
            const size_t p1 = path_push(g, kw), p2 = path_push(g, idx);
            int r = -1;
            ok = gen(g, json_array_get(x, i), &r) &&
                 sb_printf(g, &b, "%sg%d", i ? " | " : "", r);
            path_pop(g, p2);
            path_pop(g, p1);
        }
    } else if ((x = json_object_get(s, "type"))) {
        if (json_is_string(x)) {
            ok = gen_type(g, s, json_string_value(x), &b);
        } else if (json_is_array(x) && json_array_size(x) > 0) {
            for (size_t i = 0; ok && i < json_array_size(x); i++) {
                const char *t = json_string_value(json_array_get(x, i));
                if (!t) ok = sg_fail(g, HX_E_INVALID, "expected 'type' to list type names");
                else ok = (i == 0 || sb_put(g, &b, " | ", 3)) && sb_put(g, &b, "(", 1) &&
                          gen_type(g, s, t, &b) && sb_put(g, &b, ")", 1);
            }
        } else {
            ok = sg_fail(g, HX_E_INVALID, "expected 'type' to be a type name or an array of them");
        }
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) {
        ok = gen_object(g, s, &b);
    } else if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
               json_object_get(s, "maxItems")) {
        ok = gen_array(g, s, &b);
    } else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
               json_object_get(s, "format") || json_object_get(s, "pattern")) {
        ok = gen_string(g, s, &b);
    } else {
        ok = sb_put(g, &b, "value", 5); /* only annotations: anything goes */
    }
emit:
    if (ok) {
        *rule = g->n_rules++;
        ok = sb_printf(g, &g->out, "g%d ::= ", *rule) && sb_put(g, &g->out, b.data, b.len) &&
             sb_put(g, &g->out, "\n", 1);
    }
done:
    hx_free(b.data);
    g->depth--;
    return ok;
}

hx_status hx_json_schema_to_grammar(json_t *schema, char **out_grammar_text, hx_err *err)
{
    sgen g = { .root = schema, .err = err, .st = HX_OK };
    int root = -1;
    if (!schema) return hx_err_set(err, HX_E_INVALID, "json_schema: expected a schema, found NULL");
    if (sb_put(&g, &g.out, JSON_PRIMITIVES, strlen(JSON_PRIMITIVES)) && gen(&g, schema, &root) &&
        sb_printf(&g, &g.out, "root ::= g%d\n", root)) {
        *out_grammar_text = g.out.data;
        g.out.data = NULL; /* handed over */
    } else if (g.st == HX_OK) {
        g.st = HX_E_INVALID;
    }
    hx_free(g.refs);
    hx_free(g.out.data);
    return g.st;
}
