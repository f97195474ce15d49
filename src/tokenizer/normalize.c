/* normalize.c - the normalizer chain of tokenizer.json: NFC/NFD/NFKC/NFKD (utf8proc),
 * Lowercase, Prepend, Replace (literal or regex), Strip and ByteLevel, run in order.
 *
 * Each step reads one buffer and writes the other; the input is valid UTF-8 and so is every
 * step's output. Offsets back into the original text are not tracked: the only consumer that
 * needs them (Metaspace's prepend_scheme "first") asks whether a piece starts the original text,
 * and the encoder answers that from the segment position. Pure ASCII skips the Unicode forms,
 * which leave it unchanged. */
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer_int.h"

#include <utf8proc.h>

static hx_status unicode_form(const char *s, size_t n, utf8proc_option_t opt, hx_tok_text *out)
{
    size_t i = 0;
    while (i < n && (uint8_t)s[i] < 0x80) i++;
    if (i == n) return hx_tok_text_append(out, s, n);
    /* Decompose into code points, reorder/compose, re-encode in place: utf8proc writes UTF-8
     * over its own UTF-32 buffer, which always has room (4 bytes per code point). */
    utf8proc_ssize_t need = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                               NULL, 0, opt);
    if (need < 0) return hx_tok_text_append(out, s, n); /* not reachable on valid UTF-8 */
    utf8proc_int32_t *buf = hx_alloc(((size_t)need + 1) * sizeof *buf);
    if (!buf) return HX_E_NOMEM;
    utf8proc_ssize_t got = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                              buf, need, opt);
    hx_status st;
    if (got < 0 || got > need) {
        st = hx_tok_text_append(out, s, n);
    } else {
        got = utf8proc_normalize_utf32(buf, got, opt);
        if (got >= 0) got = utf8proc_reencode(buf, got, opt);
        st = got < 0 ? hx_tok_text_append(out, s, n) : hx_tok_text_append(out, buf, (size_t)got);
    }
    hx_free(buf);
    return st;
}

static hx_status lowercase(const char *s, size_t n, hx_tok_text *out)
{
    char enc[8];
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t c = hx_tok_utf8_next(s + i, n - i, &adv);
        i += adv;
        if (c == 0x130) { /* the one code point whose full lowercase is two: i + U+0307 */
            if (hx_tok_text_append(out, "i\xCC\x87", 3)) return HX_E_NOMEM;
            continue;
        }
        uint32_t l = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        if (hx_tok_text_append(out, enc, hx_tok_utf8_put(l, enc))) return HX_E_NOMEM;
    }
    return HX_OK;
}

static bool is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static hx_status strip(const char *s, size_t n, bool left, bool right, hx_tok_text *out)
{
    size_t a = 0, b = n;
    while (left && a < b) {
        size_t adv;
        if (!is_ws(hx_tok_utf8_next(s + a, b - a, &adv))) break;
        a += adv;
    }
    while (right && b > a) {
        size_t i = b - 1, adv;
        while (i > a && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
        if (!is_ws(hx_tok_utf8_next(s + i, b - i, &adv))) break;
        b = i;
    }
    return hx_tok_text_append(out, s + a, b - a);
}

static hx_status replace(const hx_tokenizer *t, const hx_tok_norm *nm, const char *s, size_t n,
                         hx_tok_prework *w, hx_tok_text *out)
{
    const char *pat = t->pool + nm->a_off, *rep = t->pool + nm->b_off;
    size_t pos = 0;
    for (;;) {
        size_t ms, me;
        if (nm->re) {
            if (!hx_tok_regex_next(nm->re, s, n, pos, w, &ms, &me)) break;
        } else {
            if (nm->a_len == 0 || pos + nm->a_len > n) break;
            const char *hit = NULL;
            for (size_t i = pos; i + nm->a_len <= n; i++)
                if (s[i] == pat[0] && !memcmp(s + i, pat, nm->a_len)) {
                    hit = s + i;
                    break;
                }
            if (!hit) break;
            ms = (size_t)(hit - s);
            me = ms + nm->a_len;
        }
        if (hx_tok_text_append(out, s + pos, ms - pos) || hx_tok_text_append(out, rep, nm->b_len))
            return HX_E_NOMEM;
        if (me == ms) { /* an empty match: keep the next character and move past it */
            if (ms >= n) {
                pos = n;
                break;
            }
            size_t adv;
            (void)hx_tok_utf8_next(s + ms, n - ms, &adv);
            if (hx_tok_text_append(out, s + ms, adv)) return HX_E_NOMEM;
            me = ms + adv;
        }
        pos = me;
    }
    return hx_tok_text_append(out, s + pos, n - pos);
}

static hx_status byte_level(const char *s, size_t n, hx_tok_text *out)
{
    char enc[4];
    for (size_t i = 0; i < n; i++)
        if (hx_tok_text_append(out, enc, hx_tok_utf8_put(hx_tok_byte_to_cp((uint8_t)s[i]), enc)))
            return HX_E_NOMEM;
    return HX_OK;
}

static hx_status run_step(const hx_tokenizer *t, const hx_tok_norm *nm, const char *s, size_t n,
                          hx_tok_prework *w, hx_tok_text *out)
{
    switch (nm->kind) {
    case HX_NORM_NFC: return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
    case HX_NORM_NFD: return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out);
    case HX_NORM_NFKC:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case HX_NORM_NFKD:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case HX_NORM_LOWERCASE: return lowercase(s, n, out);
    case HX_NORM_PREPEND:
        /* Hugging Face prepends only to non-empty text. */
        if (n && hx_tok_text_append(out, t->pool + nm->a_off, nm->a_len)) return HX_E_NOMEM;
        return hx_tok_text_append(out, s, n);
    case HX_NORM_REPLACE: return replace(t, nm, s, n, w, out);
    case HX_NORM_STRIP: return strip(s, n, nm->left, nm->right, out);
    case HX_NORM_BYTELEVEL: return byte_level(s, n, out);
    }
    return hx_tok_text_append(out, s, n);
}

hx_status hx_tok_normalize(const hx_tokenizer *t, const char *s, size_t n, hx_tok_text *out,
                           hx_tok_prework *w)
{
    out->len = 0;
    if (t->n_norm == 0) return hx_tok_text_append(out, s, n);
    /* Steps alternate between out and w->tmp so that the last one writes into out. */
    hx_tok_text *bufs[2] = { out, &w->tmp };
    int cur = (t->n_norm % 2 == 1) ? 0 : 1;
    const char *in = s;
    size_t in_len = n;
    for (int32_t i = 0; i < t->n_norm; i++) {
        hx_tok_text *dst = bufs[cur];
        dst->len = 0;
        if (hx_tok_text_reserve(dst, in_len + 16) != HX_OK) return HX_E_NOMEM;
        if (run_step(t, &t->norm[i], in, in_len, w, dst) != HX_OK) return HX_E_NOMEM;
        in = dst->data;
        in_len = dst->len;
        cur ^= 1;
    }
    return HX_OK;
}

void hx_tok_norm_free(hx_tok_norm *nm)
{
    if (nm && nm->re) pcre2_code_free(nm->re);
}
