/* grammar.c - GBNF-like grammar compiler and pushdown recognizer over bytes (token bytes and
 * masks are in grammar_vocab.c).
 *
 * Compiled form (flat, like llama.cpp's): every rule is a run of elements, its alternatives
 * separated by GEL_ALT and the last one closed by GEL_END. An element is a character class
 * (sorted, merged code point ranges; negated or not) or a reference to a rule. Repetition and
 * groups are rewritten into helper rules at compile time, so the recognizer knows only classes
 * and references.
 *
 * Recognizer state: a set of stacks of element positions; the top of each stack is always a
 * class (references are expanded eagerly), an empty stack means "the root rule is complete".
 * Matching a code point pops the class and expands what follows. While a multi-byte UTF-8
 * character is half-read, the set is only filtered: a stack stays when its class may contain
 * some character that starts with the bytes seen, which is exact (the remaining characters form
 * one contiguous range, surrogates aside), so no accepted prefix is a dead end. Left recursion is
 * refused at compile time, which makes expansion terminate; a work budget and the stack limits
 * bound it anyway. */
#include "sample/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define EXPAND_BUDGET (1u << 17) /* expansion steps plus stack words stored, for one byte */
#define EXPAND_LEVELS 12000u     /* nested expand calls (chains of leading references) */
#define LEAD_CHAIN    10000u     /* longest chain of leading references a grammar may have */

/* ---- stack sets ---- */

void hx_gram_sset_free(sset *s)
{
    hx_free(s->data);
    hx_free(s->slots);
    hx_free(s->used);
    memset(s, 0, sizeof *s);
}

static void sset_clear(sset *s)
{
    for (uint32_t i = 0; i < s->n_stacks; i++) s->slots[s->used[i]] = 0;
    s->n_data = 0;
    s->n_stacks = 0;
    s->cp = 0;
    s->left = s->seq_len = 0;
    s->has_empty = s->has_open = false;
}

static uint32_t stack_hash(const uint32_t *st, uint32_t len)
{
    uint32_t h = 2166136261u ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ st[i]) * 16777619u;
    return h;
}

/* Puts slot indices of all stacks into a table of cap slots (a power of two). */
static bool sset_rehash(sset *s, uint32_t cap)
{
    uint32_t *slots = hx_calloc(cap, sizeof *slots);
    uint32_t *used = hx_alloc((size_t)(cap / 2) * sizeof *used);
    if (!slots || !used) {
        hx_free(slots);
        hx_free(used);
        return false;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < s->n_stacks; i++) {
        const uint32_t len = s->data[off];
        uint32_t h = stack_hash(s->data + off + 1, len) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = (uint32_t)off + 1;
        used[i] = h;
        off += 1 + len;
    }
    hx_free(s->slots);
    hx_free(s->used);
    s->slots = slots;
    s->used = used;
    s->cap_slots = cap;
    s->cap_used = cap / 2;
    return true;
}

/* Adds a copy of st[0..len) unless present. False when out of memory or past the stack limit. */
static bool sset_add(sset *s, const uint32_t *st, uint32_t len)
{
    if (s->n_stacks + 1 > s->cap_used) {
        if (s->n_stacks >= HX_GRAMMAR_MAX_STACKS) return false;
        if (!sset_rehash(s, s->cap_slots ? s->cap_slots * 2 : 32)) return false;
    }
    const uint32_t mask = s->cap_slots - 1;
    uint32_t h = stack_hash(st, len) & mask;
    for (; s->slots[h]; h = (h + 1) & mask) {
        const uint32_t *o = s->data + s->slots[h] - 1;
        if (o[0] == len && memcmp(o + 1, st, len * sizeof *st) == 0) return true;
    }
    if (s->n_data + 1 + len > s->cap_data) {
        size_t cap = s->cap_data ? s->cap_data * 2 : 256;
        while (cap < s->n_data + 1 + len) cap *= 2;
        uint32_t *d = hx_realloc(s->data, cap * sizeof *d);
        if (!d) return false;
        s->data = d;
        s->cap_data = cap;
    }
    s->slots[h] = (uint32_t)s->n_data + 1;
    s->used[s->n_stacks++] = h;
    s->data[s->n_data] = len;
    memcpy(s->data + s->n_data + 1, st, len * sizeof *st);
    s->n_data += 1 + len;
    if (len == 0) s->has_empty = true;
    else s->has_open = true;
    return true;
}

/* dst becomes a copy of src, tables included (a plain copy: no re-hashing). */
static bool sset_copy(sset *dst, const sset *src)
{
    sset_clear(dst);
    if (dst->cap_data < src->n_data) {
        uint32_t *d = hx_realloc(dst->data, src->n_data * sizeof *d);
        if (!d) return false;
        dst->data = d;
        dst->cap_data = src->n_data;
    }
    if (dst->cap_slots != src->cap_slots) {
        uint32_t *slots = hx_alloc((size_t)(src->cap_slots ? src->cap_slots : 1) * sizeof *slots);
        uint32_t *used = hx_alloc((size_t)(src->cap_used ? src->cap_used : 1) * sizeof *used);
        if (!slots || !used) {
            hx_free(slots);
            hx_free(used);
            return false;
        }
        hx_free(dst->slots);
        hx_free(dst->used);
        dst->slots = slots;
        dst->used = used;
        dst->cap_slots = src->cap_slots;
        dst->cap_used = src->cap_used;
    }
    if (src->n_data) memcpy(dst->data, src->data, src->n_data * sizeof *dst->data);
    if (src->cap_slots) memcpy(dst->slots, src->slots, src->cap_slots * sizeof *dst->slots);
    if (src->n_stacks) memcpy(dst->used, src->used, src->n_stacks * sizeof *dst->used);
    dst->n_data = src->n_data;
    dst->n_stacks = src->n_stacks;
    dst->cp = src->cp;
    dst->left = src->left;
    dst->seq_len = src->seq_len;
    dst->has_empty = src->has_empty;
    dst->has_open = src->has_open;
    return true;
}

/* ---- expansion and matching ---- */

typedef struct {
    const hx_grammar *g;
    sset             *out;
    uint32_t         *buf; /* the stack being built, bottom first */
    uint32_t          work;
    uint32_t          level; /* recursion depth of expand, bounded to protect the C stack */
    bool              failed;
} expander;

static bool is_seq_end(const hx_grammar *g, uint32_t pos)
{
    return g->el[pos].type == GEL_END || g->el[pos].type == GEL_ALT;
}

/* Expands buf[0..len) until its top is a class (or it is empty) and adds the results to the
 * output set. Contract that makes the in-place recursion safe: buf[0..len) holds the same
 * values on return as on entry; anything above may be overwritten. */
static void expand(expander *x, uint32_t len)
{
    const hx_grammar *g = x->g;
    if (x->failed) return;
    if (++x->work > EXPAND_BUDGET || x->level >= EXPAND_LEVELS) {
        x->failed = true;
        return;
    }
    if (len == 0 || g->el[x->buf[len - 1]].type != GEL_REF) {
        x->work += len; /* hashing and comparing cost the stack's length */
        if (x->work > EXPAND_BUDGET || !sset_add(x->out, x->buf, len)) x->failed = true;
        return;
    }
    const uint32_t top = x->buf[len - 1];
    const uint32_t rule = g->el[top].a;
    uint32_t nlen = len - 1;
    if (!is_seq_end(g, top + 1)) x->buf[nlen++] = top + 1; /* where to resume after the rule */
    for (uint32_t pos = g->rule_start[rule];;) {
        uint32_t l2 = nlen;
        if (!is_seq_end(g, pos)) {
            if (l2 >= HX_GRAMMAR_MAX_DEPTH) {
                x->failed = true;
                break;
            }
            x->buf[l2++] = pos;
        }
        x->level++;
        expand(x, l2);
        x->level--;
        if (x->failed) break;
        while (!is_seq_end(g, pos)) pos++; /* to the next alternative */
        if (g->el[pos].type == GEL_END) break;
        pos++;
    }
    x->buf[len - 1] = top;
}

static bool class_match(const hx_grammar *g, const gel *e, uint32_t cp)
{
    const grange *r = g->ranges + e->a;
    bool in = false;
    for (uint32_t i = 0; i < e->b && !in; i++) in = cp >= r[i].lo && cp <= r[i].hi;
    return in != (e->type == GEL_NCLASS);
}

/* Whether the class holds some character in [lo, hi]. Ranges are sorted and merged, so a
 * negated class misses all of [lo, hi] only when one range covers it. */
static bool class_may_match(const hx_grammar *g, const gel *e, uint32_t lo, uint32_t hi)
{
    if (lo > hi) return false;
    const grange *r = g->ranges + e->a;
    for (uint32_t i = 0; i < e->b; i++) {
        if (e->type == GEL_CLASS && r[i].lo <= hi && r[i].hi >= lo) return true;
        if (e->type == GEL_NCLASS && r[i].lo <= lo && r[i].hi >= hi) return false;
    }
    return e->type == GEL_NCLASS;
}

/* Advances every open stack of in over the whole character cp into out (cleared first). */
static bool step_cp(const hx_grammar *g, const sset *in, uint32_t cp, sset *out, uint32_t *buf)
{
    expander x = { g, out, buf, 0, 0, false };
    size_t off = 0;
    for (uint32_t i = 0; i < in->n_stacks && !x.failed; i++) {
        const uint32_t len = in->data[off];
        const uint32_t *st = in->data + off + 1;
        off += 1 + len;
        if (len == 0 || !class_match(g, &g->el[st[len - 1]], cp)) continue;
        memcpy(buf, st, len * sizeof *st);
        const uint32_t next = st[len - 1] + 1;
        if (is_seq_end(g, next)) {
            expand(&x, len - 1);
        } else {
            buf[len - 1] = next;
            expand(&x, len);
        }
    }
    return !x.failed && out->n_stacks > 0;
}

/* Advances in over one byte into out (cleared here); the contract is in grammar_int.h. */
bool hx_gram_step_byte(const hx_grammar *g, const sset *in, uint8_t c, sset *out, uint32_t *buf)
{
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    sset_clear(out);
    uint32_t v;
    uint8_t left, seq;
    if (in->left == 0) {
        if (c < 0x80) return step_cp(g, in, c, out, buf);
        if (c >= 0xC2 && c <= 0xDF) v = c & 0x1F, left = 1;
        else if ((c & 0xF0) == 0xE0) v = c & 0x0F, left = 2;
        else if (c >= 0xF0 && c <= 0xF4) v = c & 0x07, left = 3;
        else return false; /* a continuation byte, an overlong lead, or past U+10FFFF */
        seq = (uint8_t)(left + 1);
    } else {
        if ((c & 0xC0) != 0x80) return false;
        v = in->cp << 6 | (c & 0x3F);
        left = (uint8_t)(in->left - 1);
        seq = in->seq_len;
        if (left == 0) {
            if (v < min_cp[seq] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
            return step_cp(g, in, v, out, buf);
        }
    }
    /* Half a character: keep the stacks whose class may hold a character starting this way. */
    const uint32_t shift = 6u * left;
    uint32_t lo = v << shift, hi = lo | ((1u << shift) - 1);
    if (lo < min_cp[seq]) lo = min_cp[seq];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    size_t off = 0;
    for (uint32_t i = 0; i < in->n_stacks; i++) {
        const uint32_t len = in->data[off];
        const uint32_t *st = in->data + off + 1;
        off += 1 + len;
        if (len == 0) continue;
        const gel *e = &g->el[st[len - 1]];
        const bool may = class_may_match(g, e, lo, hi < 0xD7FF ? hi : 0xD7FF) ||
                         class_may_match(g, e, lo > 0xE000 ? lo : 0xE000, hi);
        if (may && !sset_add(out, st, len)) return false;
    }
    out->cp = v;
    out->left = left;
    out->seq_len = seq;
    return out->n_stacks > 0;
}

/* The set at the start of the root rule, into out. */
static bool start_set(const hx_grammar *g, sset *out, uint32_t *buf)
{
    sset_clear(out);
    expander x = { g, out, buf, 0, 0, false };
    for (uint32_t pos = g->rule_start[g->root];;) {
        uint32_t len = 0;
        if (!is_seq_end(g, pos)) buf[len++] = pos;
        expand(&x, len);
        if (x.failed) return false;
        while (!is_seq_end(g, pos)) pos++;
        if (g->el[pos].type == GEL_END) break;
        pos++;
    }
    return out->n_stacks > 0;
}

/* ---- recognizer API ---- */

hx_grammar_state *hx_grammar_start(const hx_grammar *g)
{
    hx_grammar_state *s = hx_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    s->buf = hx_alloc((HX_GRAMMAR_MAX_DEPTH + 2) * sizeof *s->buf);
    if (!s->buf || !start_set(g, &s->cur, s->buf)) goto fail;
    return s;
fail:
    hx_grammar_state_free(s);
    return NULL;
}

hx_grammar_state *hx_grammar_state_copy(const hx_grammar_state *src)
{
    hx_grammar_state *s = hx_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = src->g;
    s->buf = hx_alloc((HX_GRAMMAR_MAX_DEPTH + 2) * sizeof *s->buf);
    if (!s->buf || !sset_copy(&s->cur, &src->cur)) goto fail;
    return s;
fail:
    hx_grammar_state_free(s);
    return NULL;
}

void hx_grammar_state_free(hx_grammar_state *s)
{
    if (!s) return;
    hx_gram_sset_free(&s->cur);
    hx_gram_sset_free(&s->tmp[0]);
    hx_gram_sset_free(&s->tmp[1]);
    hx_gram_mask_free(&s->mask);
    hx_free(s->buf);
    hx_free(s);
}

bool hx_grammar_accept_bytes(hx_grammar_state *s, const char *p, size_t n)
{
    if (n == 0) return true;
    const sset *in = &s->cur;
    sset *out = NULL;
    for (size_t i = 0; i < n; i++) {
        out = &s->tmp[i & 1];
        if (!hx_gram_step_byte(s->g, in, (uint8_t)p[i], out, s->buf)) return false;
        in = out;
    }
    /* Swap rather than copy: the old current set becomes scratch. */
    sset t = s->cur;
    s->cur = *out;
    *out = t;
    return true;
}

bool hx_grammar_done(const hx_grammar_state *s)
{
    return s->cur.left == 0 && s->cur.has_empty;
}

bool hx_grammar_can_continue(const hx_grammar_state *s)
{
    return s->cur.left > 0 || s->cur.has_open;
}

/* ---- compiler: builder ---- */

typedef struct {
    char    *name; /* NULL for helper rules made from groups and repetitions */
    gel     *el;
    uint32_t n_el, cap_el;
    bool     defined;
    int      line, col; /* definition, or first use while undefined */
} brule;

typedef struct {
    const char *src, *end, *p;
    brule      *rules;
    uint32_t    n_rules, cap_rules;
    grange     *ranges;
    uint32_t    n_ranges, cap_ranges;
    uint64_t    n_el_total;
    hx_err     *err;
    hx_status   st;
} gb;

#define GB_MAX_ELEMENTS (1u << 22)

static void line_col(const gb *b, const char *at, int *line, int *col)
{
    *line = 1, *col = 1;
    for (const char *q = b->src; q < at; q++) {
        if (*q == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

/* Describes what is at p for "found ..." messages. */
static const char *found(const gb *b, const char *p, char *tmp, size_t n)
{
    if (p >= b->end) return "end of input";
    const uint8_t c = (uint8_t)*p;
    if (c == '\n') return "end of line";
    if (c >= 0x20 && c < 0x7F) snprintf(tmp, n, "'%c'", c);
    else snprintf(tmp, n, "byte 0x%02X", c);
    return tmp;
}

/* Records "grammar:LINE:COL: message" at position at; returns false for `return gb_fail(...)`. */
static bool gb_fail(gb *b, hx_status st, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool gb_fail(gb *b, hx_status st, const char *at, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(b, at, &line, &col);
    if (b->st == HX_OK) b->st = st;
    hx_err_set(b->err, st, "grammar:%d:%d: %s", line, col, msg);
    return false;
}

static bool gb_nomem(gb *b)
{
    if (b->st == HX_OK) b->st = HX_E_NOMEM;
    hx_err_set(b->err, HX_E_NOMEM, "grammar: out of memory");
    return false;
}

/* Appends a rule; its index, or UINT32_MAX when out of memory. name is copied. */
static uint32_t gb_add_rule(gb *b, const char *name, size_t name_len, const char *at)
{
    if (b->n_rules == b->cap_rules) {
        uint32_t cap = b->cap_rules ? b->cap_rules * 2 : 32;
        brule *r = hx_realloc(b->rules, cap * sizeof *r);
        if (!r) return gb_nomem(b), UINT32_MAX;
        b->rules = r;
        b->cap_rules = cap;
    }
    brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (name && !(r->name = hx_strndup(name, name_len))) return gb_nomem(b), UINT32_MAX;
    line_col(b, at, &r->line, &r->col);
    return b->n_rules++;
}

static bool gb_push(gb *b, uint32_t rule, uint32_t type, uint32_t a, uint32_t n)
{
    brule *r = &b->rules[rule];
    if (++b->n_el_total > GB_MAX_ELEMENTS)
        return gb_fail(b, HX_E_UNSUPPORTED, b->p, "grammar grows past %u elements once "
                       "repetitions are expanded", GB_MAX_ELEMENTS);
    if (r->n_el == r->cap_el) {
        uint32_t cap = r->cap_el ? r->cap_el * 2 : 16;
        gel *e = hx_realloc(r->el, cap * sizeof *e);
        if (!e) return gb_nomem(b);
        r->el = e;
        r->cap_el = cap;
    }
    r->el[r->n_el++] = (gel){ type, a, n };
    return true;
}

static bool gb_push_range(gb *b, uint32_t lo, uint32_t hi)
{
    if (b->n_ranges == b->cap_ranges) {
        uint32_t cap = b->cap_ranges ? b->cap_ranges * 2 : 64;
        grange *r = hx_realloc(b->ranges, cap * sizeof *r);
        if (!r) return gb_nomem(b);
        b->ranges = r;
        b->cap_ranges = cap;
    }
    b->ranges[b->n_ranges++] = (grange){ lo, hi };
    return true;
}

/* ---- compiler: lexing ---- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Skips spaces, newlines and # comments: rules end where the next `name ::=` starts, so line
 * breaks carry no meaning and alternatives may continue on the next line. */
static void skip_ws(gb *b)
{
    while (b->p < b->end) {
        const char c = *b->p;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            b->p++;
        } else if (c == '#') {
            while (b->p < b->end && *b->p != '\n') b->p++;
        } else {
            break;
        }
    }
}

static const char *skip_blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* Whether p starts `name ::=`, the start of the next rule. */
static bool at_rule_start(const gb *b)
{
    const char *q = b->p;
    while (q < b->end && is_name_char(*q)) q++;
    if (q == b->p) return false;
    q = skip_blank(q, b->end);
    return b->end - q >= 3 && memcmp(q, "::=", 3) == 0;
}

/* Reads one character of a literal or class (an escape or one UTF-8 character) into *cp. */
static bool parse_char(gb *b, uint32_t *cp)
{
    char tmp[16];
    const char *at = b->p;
    if (b->p >= b->end)
        return gb_fail(b, HX_E_INVALID, at, "expected a character, found end of input");
    uint8_t c = (uint8_t)*b->p++;
    if (c == '\\') {
        if (b->p >= b->end)
            return gb_fail(b, HX_E_INVALID, at, "expected an escape after '\\', found end of "
                           "input");
        const char e = *b->p++;
        int n_hex = 0;
        switch (e) {
        case 'n': *cp = '\n'; return true;
        case 't': *cp = '\t'; return true;
        case 'r': *cp = '\r'; return true;
        case '0': *cp = 0; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
            *cp = (uint8_t)e;
            return true;
        case 'x': n_hex = 2; break;
        case 'u': n_hex = 4; break;
        case 'U': n_hex = 8; break;
        default:
            return gb_fail(b, HX_E_INVALID, at, "expected an escape (\\n \\t \\r \\\\ \\\" \\xHH "
                           "\\uHHHH), found '\\%s'", found(b, b->p - 1, tmp, sizeof tmp));
        }
        uint32_t v = 0;
        for (int i = 0; i < n_hex; i++) {
            const int h = b->p < b->end ? gram_hexval(*b->p) : -1;
            if (h < 0)
                return gb_fail(b, HX_E_INVALID, b->p, "expected %d hex digits after '\\%c', "
                               "found %s", n_hex, e, found(b, b->p, tmp, sizeof tmp));
            v = v << 4 | (uint32_t)h;
            b->p++;
        }
        if (v > 0x10FFFF)
            return gb_fail(b, HX_E_INVALID, at, "expected a code point up to U+10FFFF, found "
                           "U+%X", v);
        *cp = v;
        return true;
    }
    if (c < 0x80) {
        *cp = c;
        return true;
    }
    int n = c >= 0xF8 ? -1 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    uint32_t v = n > 0 ? c & (0x3Fu >> n) : 0;
    for (int i = 0; i < n; i++) {
        if (b->p >= b->end || ((uint8_t)*b->p & 0xC0) != 0x80) n = -1;
        else v = v << 6 | ((uint8_t)*b->p++ & 0x3F);
    }
    if (n < 0 || v > 0x10FFFF)
        return gb_fail(b, HX_E_INVALID, at, "expected UTF-8 text, found byte 0x%02X", c);
    *cp = v;
    return true;
}

static int cmp_range(const void *x, const void *y)
{
    const grange *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* ---- compiler: parsing ---- */

static bool parse_alternates(gb *b, uint32_t rule, bool nested);

static bool parse_literal(gb *b, uint32_t rule)
{
    char tmp[16];
    const char *open = b->p++;
    for (;;) {
        if (b->p >= b->end) {
            int l, c;
            line_col(b, open, &l, &c);
            return gb_fail(b, HX_E_INVALID, b->p, "expected '\"' to close the literal opened at "
                           "%d:%d, found %s", l, c, found(b, b->p, tmp, sizeof tmp));
        }
        if (*b->p == '"') break;
        uint32_t cp;
        if (!parse_char(b, &cp) || !gb_push_range(b, cp, cp) ||
            !gb_push(b, rule, GEL_CLASS, b->n_ranges - 1, 1))
            return false;
    }
    b->p++;
    return true;
}

static bool parse_class(gb *b, uint32_t rule)
{
    char tmp[16];
    const char *open = b->p++;
    bool neg = false;
    if (b->p < b->end && *b->p == '^') neg = true, b->p++;
    const uint32_t first = b->n_ranges;
    for (;;) {
        if (b->p >= b->end) {
            int l, c;
            line_col(b, open, &l, &c);
            return gb_fail(b, HX_E_INVALID, b->p, "expected ']' to close the class opened at "
                           "%d:%d, found %s", l, c, found(b, b->p, tmp, sizeof tmp));
        }
        if (*b->p == ']') break;
        const char *at = b->p;
        uint32_t lo, hi;
        if (!parse_char(b, &lo)) return false;
        hi = lo;
        if (b->end - b->p >= 2 && b->p[0] == '-' && b->p[1] != ']') {
            b->p++;
            if (!parse_char(b, &hi)) return false;
            if (hi < lo)
                return gb_fail(b, HX_E_INVALID, at, "expected a range low-high, found U+%04X "
                               "after U+%04X", hi, lo);
        }
        if (!gb_push_range(b, lo, hi)) return false;
    }
    b->p++;
    /* Sort and merge, which class_may_match relies on. */
    const uint32_t n = b->n_ranges - first;
    uint32_t m = 0;
    grange *r = n ? b->ranges + first : NULL; /* an empty class [] may come before any range */
    if (n) qsort(r, n, sizeof *r, cmp_range);
    for (uint32_t i = 0; i < n; i++) {
        if (m > 0 && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    b->n_ranges = first + m;
    return gb_push(b, rule, neg ? GEL_NCLASS : GEL_CLASS, first, m);
}

static bool parse_count(gb *b, uint32_t *v)
{
    char tmp[16];
    const char *at = b->p;
    uint64_t x = 0;
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9') {
        x = x * 10 + (uint64_t)(*b->p++ - '0');
        if (x > HX_GRAMMAR_MAX_REPEAT)
            return gb_fail(b, HX_E_UNSUPPORTED, at, "expected a repetition count up to %d",
                           HX_GRAMMAR_MAX_REPEAT);
    }
    if (b->p == at)
        return gb_fail(b, HX_E_INVALID, at, "expected a number, found %s",
                       found(b, b->p, tmp, sizeof tmp));
    *v = (uint32_t)x;
    return true;
}

/* Appends copies of x[0..n) to rule. x must not live in that rule's array. */
static bool push_copy(gb *b, uint32_t rule, const gel *x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!gb_push(b, rule, x[i].type, x[i].a, x[i].b)) return false;
    return true;
}

/* Rewrites the symbol x[0..n) followed by the postfix operator at b->p into a reference to a
 * helper rule appended to `rule`:  X* -> R ::= X R |     X+ -> R ::= X S, S ::= X S |
 * X? -> R ::= X |     X{m,n} -> R ::= X..X (m times) O_{n-m}, O_k ::= X O_{k-1} |  */
static bool parse_repeat(gb *b, uint32_t rule, const gel *x, uint32_t n)
{
    char tmp[16];
    const char *at = b->p;
    uint32_t lo = 0, hi = 0;
    bool unbounded = false;
    const char op = *b->p++;
    if (op == '*') unbounded = true;
    else if (op == '+') lo = 1, unbounded = true;
    else if (op == '?') hi = 1;
    else {
        skip_ws(b);
        if (!parse_count(b, &lo)) return false;
        skip_ws(b);
        hi = lo;
        if (b->p < b->end && *b->p == ',') {
            b->p++;
            skip_ws(b);
            if (b->p < b->end && *b->p == '}') unbounded = true;
            else if (!parse_count(b, &hi)) return false;
            skip_ws(b);
        }
        if (b->p >= b->end || *b->p != '}')
            return gb_fail(b, HX_E_INVALID, b->p, "expected '}' to close the repetition opened "
                           "here, found %s", found(b, b->p, tmp, sizeof tmp));
        b->p++;
        if (!unbounded && hi < lo)
            return gb_fail(b, HX_E_INVALID, at, "expected {m,n} with m <= n, found {%u,%u}", lo,
                           hi);
    }
    const uint32_t r = gb_add_rule(b, NULL, 0, at);
    if (r == UINT32_MAX) return false;
    for (uint32_t i = 0; i < lo; i++)
        if (!push_copy(b, r, x, n)) return false;
    if (unbounded) {
        const uint32_t s = gb_add_rule(b, NULL, 0, at); /* S ::= X S | */
        if (s == UINT32_MAX || !push_copy(b, s, x, n) || !gb_push(b, s, GEL_REF, s, 0) ||
            !gb_push(b, s, GEL_ALT, 0, 0) || !gb_push(b, s, GEL_END, 0, 0) ||
            !gb_push(b, r, GEL_REF, s, 0))
            return false;
    } else if (hi > lo) {
        uint32_t prev = UINT32_MAX; /* O_1 ::= X | ;  O_k ::= X O_{k-1} | */
        for (uint32_t k = 1; k <= hi - lo; k++) {
            const uint32_t o = gb_add_rule(b, NULL, 0, at);
            if (o == UINT32_MAX || !push_copy(b, o, x, n)) return false;
            if (prev != UINT32_MAX && !gb_push(b, o, GEL_REF, prev, 0)) return false;
            if (!gb_push(b, o, GEL_ALT, 0, 0) || !gb_push(b, o, GEL_END, 0, 0)) return false;
            prev = o;
        }
        if (!gb_push(b, r, GEL_REF, prev, 0)) return false;
    }
    return gb_push(b, r, GEL_END, 0, 0) && gb_push(b, rule, GEL_REF, r, 0);
}

static uint32_t find_rule(const gb *b, const char *name, size_t len)
{
    for (uint32_t i = 0; i < b->n_rules; i++)
        if (b->rules[i].name && strlen(b->rules[i].name) == len &&
            memcmp(b->rules[i].name, name, len) == 0)
            return i;
    return UINT32_MAX;
}

static bool parse_sequence(gb *b, uint32_t rule, bool nested)
{
    char tmp[16];
    uint32_t last = UINT32_MAX; /* where the last symbol's elements start in the rule */
    for (;;) {
        skip_ws(b);
        if (b->p >= b->end) return true;
        const char c = *b->p;
        if (c == '|' || c == ')') return true;
        if (!nested && at_rule_start(b)) return true;
        const uint32_t here = b->rules[rule].n_el;
        if (c == '"') {
            if (!parse_literal(b, rule)) return false;
        } else if (c == '[') {
            if (!parse_class(b, rule)) return false;
        } else if (c == '.') {
            b->p++; /* any character: a negated empty class */
            if (!gb_push(b, rule, GEL_NCLASS, 0, 0)) return false;
        } else if (is_name_char(c)) {
            const char *name = b->p;
            while (b->p < b->end && is_name_char(*b->p)) b->p++;
            const size_t len = (size_t)(b->p - name);
            uint32_t ref = find_rule(b, name, len);
            if (ref == UINT32_MAX && (ref = gb_add_rule(b, name, len, name)) == UINT32_MAX)
                return false;
            if (!gb_push(b, rule, GEL_REF, ref, 0)) return false;
        } else if (c == '(') {
            const char *open = b->p++;
            const uint32_t grp = gb_add_rule(b, NULL, 0, open);
            if (grp == UINT32_MAX || !parse_alternates(b, grp, true)) return false;
            if (b->p >= b->end || *b->p != ')') {
                int l, col;
                line_col(b, open, &l, &col);
                return gb_fail(b, HX_E_INVALID, b->p, "expected ')' to close the group opened "
                               "at %d:%d, found %s", l, col, found(b, b->p, tmp, sizeof tmp));
            }
            b->p++;
            if (!gb_push(b, rule, GEL_REF, grp, 0)) return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == UINT32_MAX)
                return gb_fail(b, HX_E_INVALID, b->p, "expected a symbol before '%c', found "
                               "none", c);
            /* Take the symbol out of the rule, then put back a reference to its repetition. */
            const uint32_t n = b->rules[rule].n_el - last;
            gel *x = hx_alloc((n ? n : 1) * sizeof *x);
            if (!x) return gb_nomem(b);
            if (n) memcpy(x, b->rules[rule].el + last, n * sizeof *x);
            b->rules[rule].n_el = last;
            const bool ok = parse_repeat(b, rule, x, n);
            hx_free(x);
            if (!ok) return false;
            last = b->rules[rule].n_el - 1; /* the reference: "a"?* repeats the repetition */
            continue;
        } else {
            return gb_fail(b, HX_E_INVALID, b->p, "expected a literal, class, rule name or group, "
                           "found %s", found(b, b->p, tmp, sizeof tmp));
        }
        last = here;
    }
}

static bool parse_alternates(gb *b, uint32_t rule, bool nested)
{
    if (!parse_sequence(b, rule, nested)) return false;
    while (b->p < b->end && *b->p == '|') {
        b->p++;
        if (!gb_push(b, rule, GEL_ALT, 0, 0) || !parse_sequence(b, rule, nested)) return false;
    }
    return gb_push(b, rule, GEL_END, 0, 0);
}

static bool parse_rules(gb *b)
{
    char tmp[16];
    for (;;) {
        skip_ws(b);
        if (b->p >= b->end) return true;
        const char *name = b->p;
        while (b->p < b->end && is_name_char(*b->p)) b->p++;
        if (b->p == name)
            return gb_fail(b, HX_E_INVALID, b->p, "expected a rule name, found %s",
                           found(b, b->p, tmp, sizeof tmp));
        const size_t len = (size_t)(b->p - name);
        b->p = skip_blank(b->p, b->end);
        if (b->end - b->p < 3 || memcmp(b->p, "::=", 3) != 0)
            return gb_fail(b, HX_E_INVALID, b->p, "expected '::=' after rule name '%.*s', "
                           "found %s", (int)(len < 64 ? len : 64), name,
                           found(b, b->p, tmp, sizeof tmp));
        b->p += 3;
        uint32_t r = find_rule(b, name, len);
        if (r != UINT32_MAX && b->rules[r].defined)
            return gb_fail(b, HX_E_INVALID, name, "expected each rule defined once, found a "
                           "second definition of '%s' (first at %d:%d)", b->rules[r].name,
                           b->rules[r].line, b->rules[r].col);
        if (r == UINT32_MAX && (r = gb_add_rule(b, name, len, name)) == UINT32_MAX) return false;
        b->rules[r].defined = true;
        line_col(b, name, &b->rules[r].line, &b->rules[r].col);
        if (!parse_alternates(b, r, false)) return false;
        if (b->p < b->end && *b->p == ')')
            return gb_fail(b, HX_E_INVALID, b->p, "expected a symbol or a new rule, found ')' "
                           "with no group open");
    }
}

/* ---- compiler: checks ---- */

/* Left recursion (a rule reaching itself before consuming a character) would make expansion
 * loop, so it is refused. state: 0 unvisited, 1 on the DFS path, 2 done. */
static bool check_left(gb *b, const hx_grammar *g, const bool *nullable, uint8_t *state,
                       uint32_t r, uint32_t depth)
{
    if (state[r] == 2) return true;
    if (depth > LEAD_CHAIN) {
        const brule *br = &b->rules[r];
        hx_err_set(b->err, HX_E_UNSUPPORTED, "grammar:%d:%d: expected at most %u rules nested "
                   "at the start of one another, found more", br->line, br->col, LEAD_CHAIN);
        b->st = HX_E_UNSUPPORTED;
        return false;
    }
    if (state[r] == 1) {
        const brule *br = &b->rules[r];
        hx_err_set(b->err, HX_E_UNSUPPORTED, "grammar:%d:%d: rule '%s' is left-recursive (it "
                   "can reach itself before reading a character); expected a right-recursive "
                   "form", br->line, br->col, br->name ? br->name : "(group)");
        b->st = HX_E_UNSUPPORTED;
        return false;
    }
    state[r] = 1;
    bool lead = true; /* still at the leftmost position of the alternative */
    for (uint32_t pos = g->rule_start[r];; pos++) {
        const gel *e = &g->el[pos];
        if (e->type == GEL_END) break;
        if (e->type == GEL_ALT) {
            lead = true;
            continue;
        }
        if (!lead) continue;
        if (e->type == GEL_REF) {
            if (!check_left(b, g, nullable, state, e->a, depth + 1)) return false;
            lead = nullable[e->a];
        } else {
            lead = false;
        }
    }
    state[r] = 2;
    return true;
}

static bool check_grammar(gb *b, const hx_grammar *g)
{
    bool ok = false;
    bool *nullable = hx_calloc(g->n_rules, sizeof *nullable);
    uint8_t *state = hx_calloc(g->n_rules, 1);
    if (!nullable || !state) {
        gb_nomem(b);
        goto done;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            bool alt_ok = true;
            for (uint32_t pos = g->rule_start[r];; pos++) {
                const gel *e = &g->el[pos];
                if (e->type == GEL_END || e->type == GEL_ALT) {
                    if (alt_ok) {
                        nullable[r] = changed = true;
                        break;
                    }
                    if (e->type == GEL_END) break;
                    alt_ok = true;
                } else if (e->type != GEL_REF || !nullable[e->a]) {
                    alt_ok = false;
                }
            }
        }
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (!check_left(b, g, nullable, state, r, 0)) goto done;
    ok = true;
done:
    hx_free(nullable);
    hx_free(state);
    return ok;
}

/* ---- compiler: entry point ---- */

hx_grammar *hx_grammar_retain(hx_grammar *g)
{
    /* Relaxed is enough: the caller already holds a reference, so nothing can be freed here. */
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

/* The last reference frees. acq_rel orders every holder's reads of the grammar before the free
 * that one of them performs. */
void hx_grammar_free(hx_grammar *g)
{
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
    hx_free(g->el);
    hx_free(g->rule_start);
    hx_free(g->ranges);
    hx_free(g);
}

hx_status hx_grammar_compile(const char *src, size_t len, hx_grammar **out, hx_err *err)
{
    gb b = { .src = src, .end = src + len, .p = src, .err = err, .st = HX_OK };
    hx_grammar *g = NULL;
    hx_grammar_state *s = NULL;
    if (!parse_rules(&b)) goto fail;
    for (uint32_t i = 0; i < b.n_rules; i++) {
        const brule *r = &b.rules[i];
        if (r->name && !r->defined) {
            b.st = HX_E_INVALID;
            hx_err_set(err, HX_E_INVALID, "grammar:%d:%d: expected a definition of rule '%s' "
                       "used here, found none", r->line, r->col, r->name);
            goto fail;
        }
    }
    const uint32_t root = find_rule(&b, "root", 4);
    if (root == UINT32_MAX) {
        b.st = HX_E_INVALID;
        hx_err_set(err, HX_E_INVALID, "grammar:1:1: expected a rule named 'root', found none");
        goto fail;
    }
    g = hx_calloc(1, sizeof *g);
    if (!g) goto nomem;
    atomic_init(&g->refs, 1);
    g->n_rules = b.n_rules;
    g->n_el = (uint32_t)b.n_el_total;
    g->root = root;
    g->rule_start = hx_alloc((size_t)b.n_rules * sizeof *g->rule_start);
    g->el = hx_alloc((size_t)(g->n_el ? g->n_el : 1) * sizeof *g->el);
    g->ranges = hx_alloc((size_t)(b.n_ranges ? b.n_ranges : 1) * sizeof *g->ranges);
    if (!g->rule_start || !g->el || !g->ranges) goto nomem;
    g->n_ranges = b.n_ranges;
    if (b.n_ranges) memcpy(g->ranges, b.ranges, b.n_ranges * sizeof *g->ranges);
    uint32_t at = 0;
    for (uint32_t i = 0; i < b.n_rules; i++) {
        g->rule_start[i] = at;
        if (b.rules[i].n_el) memcpy(g->el + at, b.rules[i].el, b.rules[i].n_el * sizeof *g->el);
        at += b.rules[i].n_el;
    }
    g->n_el = at;
    if (!check_grammar(&b, g)) goto fail;
    s = hx_calloc(1, sizeof *s);
    if (!s || !(s->buf = hx_alloc((HX_GRAMMAR_MAX_DEPTH + 2) * sizeof *s->buf))) goto nomem;
    s->g = g;
    if (!start_set(g, &s->cur, s->buf)) {
        b.st = HX_E_UNSUPPORTED;
        hx_err_set(err, HX_E_UNSUPPORTED, "grammar: expected a start state within %d parses "
                   "and %d nested rules, found more (or out of memory)", HX_GRAMMAR_MAX_STACKS,
                   HX_GRAMMAR_MAX_DEPTH);
        goto fail;
    }
    *out = g;
    g = NULL; /* handed over; the builder below is freed either way */
    goto done;
nomem:
    gb_nomem(&b);
fail:
    if (b.st == HX_OK) b.st = HX_E_INVALID;
done:
    hx_grammar_state_free(s);
    hx_grammar_free(g);
    for (uint32_t i = 0; i < b.n_rules; i++) hx_free(b.rules[i].name), hx_free(b.rules[i].el);
    hx_free(b.rules);
    hx_free(b.ranges);
    return b.st;
}
