/* jinja_mem.c - the render arena, strings, byte buffers, list and dict storage, error records.
 *
 * A template owns one arena (its AST) and every render owns another (its values). Blocks are
 * taken from hx_alloc and never returned before hx_jarena_free, so pointers into an arena stay
 * valid for its whole life. The render arena carries a byte limit: crossing it is reported as a
 * limit error, not as out of memory, so a hostile template gets a clear message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "template/jinja_int.h"

/* ---- arena ---- */

struct hx_jarena_block {
    hx_jarena_block *prev;
    size_t           cap, off;
    size_t           pad_; /* keeps data 16-byte aligned after the three fields above */
    unsigned char    data[];
};

#define ARENA_BLOCK 65536

void *hx_jarena_alloc(hx_jarena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    hx_jarena_block *b = a->head;
    if (b && size <= b->cap - b->off) {
        void *p = b->data + b->off;
        b->off += size;
        return p;
    }
    if (size > SIZE_MAX / 2) return NULL;
    size_t cap = size > ARENA_BLOCK / 4 ? size : ARENA_BLOCK;
    if (a->limit_bytes && (a->used_bytes + cap > a->limit_bytes || cap > a->limit_bytes)) {
        a->over_limit = true;
        return NULL;
    }
    b = hx_alloc(sizeof *b + cap);
    if (!b) return NULL;
    a->used_bytes += cap;
    if (cap > ARENA_BLOCK && a->head) {
        /* A big allocation gets its own block behind the current one, so the current block's
         * free space is not abandoned. */
        b->prev = a->head->prev;
        b->cap = cap;
        b->off = size;
        a->head->prev = b;
        return b->data;
    }
    b->prev = a->head;
    b->cap = cap;
    b->off = size;
    a->head = b;
    return b->data;
}

void hx_jarena_free(hx_jarena *a)
{
    hx_jarena_block *b = a->head;
    while (b) {
        hx_jarena_block *prev = b->prev;
        hx_free(b);
        b = prev;
    }
    a->head = NULL;
    a->used_bytes = 0;
    a->over_limit = false;
}

/* ---- strings ---- */

hx_jstr *hx_jstr_new(hx_jarena *a, const char *s, size_t len)
{
    if (len > SIZE_MAX - sizeof(hx_jstr) - 1) return NULL;
    hx_jstr *r = hx_jarena_alloc(a, sizeof *r + len + 1);
    if (!r) return NULL;
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = '\0';
    return r;
}

bool hx_jstr_eq(const hx_jstr *a, const char *s, size_t len)
{
    return a->len == len && memcmp(a->s, s, len) == 0;
}

/* ---- buffers ---- */

void hx_jbuf_init(hx_jbuf *b, hx_jarena *a, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->a = a;
    b->limit = limit;
}

static bool buf_reserve(hx_jbuf *b, size_t n)
{
    if (b->fail) return false;
    if (n > SIZE_MAX / 4 - b->len || (b->limit && b->len + n > b->limit)) {
        b->fail = 2;
        return false;
    }
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = hx_jarena_alloc(b->a, cap);
    if (!p) {
        b->fail = b->a->over_limit ? 2 : 1;
        return false;
    }
    if (b->len) memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    return true;
}

void hx_jbuf_add(hx_jbuf *b, const char *s, size_t n)
{
    if (n == 0 || !buf_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void hx_jbuf_addc(hx_jbuf *b, char c) { hx_jbuf_add(b, &c, 1); }

void hx_jbuf_adds(hx_jbuf *b, const char *s) { hx_jbuf_add(b, s, strlen(s)); }

void hx_jbuf_addf(hx_jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    hx_jbuf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void hx_jbuf_add_cp(hx_jbuf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    hx_jbuf_add(b, u, n);
}

/* ---- errors ---- */

int hx_jfail(hx_jrender *r, const char *fmt, ...)
{
    if (r->failed) return -1;
    r->failed = true;
    r->status = HX_E_INVALID;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int hx_jnomem(hx_jrender *r)
{
    if (r->arena.over_limit)
        return hx_jfail(r, "the template used more than %zu bytes of memory",
                        r->arena.limit_bytes);
    if (!r->failed) {
        hx_jfail(r, "out of memory");
        r->status = HX_E_NOMEM;
    }
    return -1;
}

int hx_jbuf_check(hx_jrender *r, const hx_jbuf *b)
{
    if (!b->fail) return 0;
    if (b->fail == 2 && !r->arena.over_limit)
        return hx_jfail(r, "the rendered text is longer than %zu bytes", b->limit);
    return hx_jnomem(r);
}

/* ---- allocation helpers ---- */

void *hx_jalloc(hx_jrender *r, size_t size)
{
    void *p = hx_jarena_alloc(&r->arena, size);
    if (!p) hx_jnomem(r);
    return p;
}

hx_jstr *hx_jstr_make(hx_jrender *r, const char *s, size_t len)
{
    hx_jstr *p = hx_jstr_new(&r->arena, s, len);
    if (!p) hx_jnomem(r);
    return p;
}

int hx_jv_make_str(hx_jrender *r, const char *s, size_t len, hx_jv *out)
{
    hx_jstr *p = hx_jstr_make(r, s, len);
    if (!p) return -1;
    *out = hx_jv_of_str(p);
    return 0;
}

hx_jlist *hx_jlist_new(hx_jrender *r, size_t cap)
{
    hx_jlist *l = hx_jalloc(r, sizeof *l);
    if (!l) return NULL;
    l->n = 0;
    l->cap = cap;
    l->v = NULL;
    l->consumed = false;
    if (cap) {
        if (cap > SIZE_MAX / sizeof(hx_jv) || !(l->v = hx_jalloc(r, cap * sizeof(hx_jv))))
            return NULL;
    }
    return l;
}

int hx_jlist_push(hx_jrender *r, hx_jlist *l, hx_jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(hx_jv)) return hx_jnomem(r);
        hx_jv *nv = hx_jalloc(r, cap * sizeof(hx_jv));
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(hx_jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

hx_jdict *hx_jdict_new(hx_jrender *r, size_t cap)
{
    hx_jdict *d = hx_jalloc(r, sizeof *d);
    if (!d) return NULL;
    memset(d, 0, sizeof *d);
    if (cap) {
        if (cap > SIZE_MAX / sizeof(hx_jv)) {
            hx_jnomem(r);
            return NULL;
        }
        d->k = hx_jalloc(r, cap * sizeof(hx_jv));
        d->v = hx_jalloc(r, cap * sizeof(hx_jv));
        if (!d->k || !d->v) return NULL;
        d->cap = cap;
    }
    return d;
}

hx_jv *hx_jdict_get_str(const hx_jdict *d, const char *s, size_t len)
{
    for (size_t i = 0; i < d->n; i++) {
        const hx_jv *k = &d->k[i];
        if (k->type == HX_JV_STR && k->u.s->len == len && memcmp(k->u.s->s, s, len) == 0)
            return &d->v[i];
    }
    return NULL;
}

hx_jv *hx_jdict_get(const hx_jdict *d, hx_jv k)
{
    if (k.type == HX_JV_STR) return hx_jdict_get_str(d, k.u.s->s, k.u.s->len);
    for (size_t i = 0; i < d->n; i++)
        if (hx_jv_eq(d->k[i], k, NULL)) return &d->v[i];
    return NULL;
}

int hx_jdict_set(hx_jrender *r, hx_jdict *d, hx_jv k, hx_jv v)
{
    hx_jv *slot = hx_jdict_get(d, k);
    if (slot) {
        *slot = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(hx_jv)) return hx_jnomem(r);
        hx_jv *nk = hx_jalloc(r, cap * sizeof(hx_jv));
        hx_jv *nv = hx_jalloc(r, cap * sizeof(hx_jv));
        if (!nk || !nv) return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(hx_jv));
            memcpy(nv, d->v, d->n * sizeof(hx_jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}
