/* jinja_unicode.c - the few Unicode facts Python's str methods depend on.
 *
 * Templates run Python string methods (strip, split, upper, title, isprintable for repr), whose
 * definitions are Unicode-wide. utf8proc supplies categories and simple case mappings; the
 * definitions of "space" and "printable" follow CPython's (Objects/unicodectype.c). Decoding is
 * lenient: a byte that does not start valid UTF-8 decodes as its own value, so malformed input
 * is carried through unchanged instead of failing. */
#include <utf8proc.h>

#include "template/jinja_int.h"

uint32_t hx_ju_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = n - *i;
    uint32_t c = p[0];
    size_t k = 0;
    uint32_t min = 0;
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0) { k = 1; c &= 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { k = 2; c &= 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { k = 3; c &= 0x07; min = 0x10000; }
    else {
        *i += 1;
        return c;
    }
    if (left <= k) {
        *i += 1;
        return p[0];
    }
    for (size_t j = 1; j <= k; j++) {
        if ((p[j] & 0xC0) != 0x80) {
            *i += 1;
            return p[0];
        }
        c = (c << 6) | (p[j] & 0x3F);
    }
    if (c < min || c > 0x10FFFF) {
        *i += 1;
        return p[0];
    }
    *i += k + 1;
    return c;
}

size_t hx_ju_len(const char *s, size_t n)
{
    size_t i = 0, count = 0;
    while (i < n) {
        hx_ju_next(s, n, &i);
        count++;
    }
    return count;
}

bool hx_ju_isspace(uint32_t cp)
{
    /* CPython: category Zs, or bidirectional class WS, B or S. For ASCII that is \t\n\v\f\r,
     * \x1c-\x1f and space. */
    if (cp < 128) return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20);
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

bool hx_ju_isprintable(uint32_t cp)
{
    if (cp < 128) return cp >= 0x20 && cp < 0x7F;
    if (cp > 0x10FFFF) return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

uint32_t hx_ju_upper(uint32_t cp)
{
    if (cp < 128) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    return cp > 0x10FFFF ? cp : (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
}

uint32_t hx_ju_lower(uint32_t cp)
{
    if (cp < 128) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    return cp > 0x10FFFF ? cp : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
}

uint32_t hx_ju_title(uint32_t cp)
{
    if (cp < 128) return hx_ju_upper(cp);
    return cp > 0x10FFFF ? cp : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
}

bool hx_ju_iscased(uint32_t cp)
{
    if (cp < 128) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (cp > 0x10FFFF) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

bool hx_ju_isalpha(uint32_t cp)
{
    if (cp < 128) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (cp > 0x10FFFF) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool hx_ju_isdigit(uint32_t cp)
{
    if (cp < 128) return cp >= '0' && cp <= '9';
    if (cp > 0x10FFFF) return false;
    return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ND;
}

bool hx_ju_isalnum(uint32_t cp)
{
    if (cp < 128) return hx_ju_isalpha(cp) || hx_ju_isdigit(cp);
    if (cp > 0x10FFFF) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}
