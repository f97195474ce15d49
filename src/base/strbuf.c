/* strbuf.c - growable string (strbuf.h). */
#include "base/strbuf.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

bool hx_strbuf_put(hx_strbuf *b, const char *s, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = hx_realloc(b->data, cap);
        if (!d) return false;
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}
