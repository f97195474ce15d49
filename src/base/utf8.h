/* utf8.h - UTF-8 validation. */
#ifndef HX_BASE_UTF8_H
#define HX_BASE_UTF8_H
#include <stdbool.h>
#include <stddef.h>

/* True when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF). */
bool hx_utf8_valid(const char *s, size_t n);

#endif
