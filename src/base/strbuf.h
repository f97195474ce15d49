/* strbuf.h - a growable, always NUL-terminated byte string, for code that writes text in pieces
 * (grammar generators, response bodies). The bytes are hx_alloc'd: hand data over to a caller
 * that frees it with hx_free, or free it the same way. A zeroed hx_strbuf is empty. */
#ifndef HX_BASE_STRBUF_H
#define HX_BASE_STRBUF_H
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char  *data; /* NULL until the first append */
    size_t len, cap;
} hx_strbuf;

/* Appends s[0..n) (n may be 0: then only makes data a valid empty string). False when out of
 * memory, with b unchanged. */
bool hx_strbuf_put(hx_strbuf *b, const char *s, size_t n);

#endif
