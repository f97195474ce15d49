/* reasoning.c - the incremental reasoning/content splitter (reasoning.h).
 *
 * State between calls is the current kind and the held-back bytes: a suffix that may still grow
 * into the tag being looked for, plus an incomplete UTF-8 sequence. Each feed joins the held bytes
 * and the new chunk in a scratch buffer, emits every run now certain and keeps the rest. The held
 * part never exceeds HX_REASONING_TAG_MAX + 3 bytes; the scratch buffer grows to the largest
 * chunk fed. */
#include "serve/reasoning.h"

#include <string.h>

#include "base/alloc.h"

/* ---- types ---- */

struct hx_reasoning {
    char   open[HX_REASONING_TAG_MAX + 1];
    char   close[HX_REASONING_TAG_MAX + 1];
    size_t open_len, close_len;
    bool   inside; /* in the thinking block */
    bool   finished;
    char  *buf; /* held bytes, then the chunk being processed */
    size_t len, cap;
};

/* ---- lifetime ---- */

hx_reasoning_params hx_reasoning_params_default(void)
{
    return (hx_reasoning_params){.open = "<think>", .close = "</think>", .in_reasoning = false};
}

bool hx_reasoning_tags_for_template(const char *tpl, hx_reasoning_params *p)
{
    if (!tpl) return false;
    /* The bracket and seed forms are checked first: a template using them may also mention
     * <think> in prose, never the other way round. */
    if (strstr(tpl, "[THINK]")) {
        p->open = "[THINK]";
        p->close = "[/THINK]";
        return true;
    }
    if (strstr(tpl, "<seed:think>")) {
        p->open = "<seed:think>";
        p->close = "</seed:think>";
        return true;
    }
    p->open = "<think>";
    p->close = "</think>";
    return strstr(tpl, "<think>") != NULL || strstr(tpl, "</think>") != NULL;
}

/* The start of the last occurrence of needle in hay[0..n), or -1. */
static ptrdiff_t last_find(const char *hay, size_t n, const char *needle)
{
    const size_t k = strlen(needle);
    if (k == 0 || k > n) return -1;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(hay + i, needle, k) == 0) return (ptrdiff_t)i;
    return -1;
}

bool hx_reasoning_prompt_opens(const char *prompt, size_t len, const hx_reasoning_params *p)
{
    const ptrdiff_t o = last_find(prompt, len, p->open);
    const ptrdiff_t c = last_find(prompt, len, p->close);
    return o >= 0 && o > c;
}

hx_status hx_reasoning_init(const hx_reasoning_params *p, hx_reasoning **out, hx_err *err)
{
    const size_t no = p->open ? strlen(p->open) : 0, nc = p->close ? strlen(p->close) : 0;
    if (no == 0 || nc == 0 || no > HX_REASONING_TAG_MAX || nc > HX_REASONING_TAG_MAX)
        return hx_err_set(err, HX_E_INVALID,
                          "reasoning tags: expected 1..%d bytes each, found %zu and %zu",
                          HX_REASONING_TAG_MAX, no, nc);
    hx_reasoning *r = hx_calloc(1, sizeof *r);
    if (!r) return hx_err_set(err, HX_E_NOMEM, "reasoning splitter: out of memory");
    memcpy(r->open, p->open, no + 1);
    memcpy(r->close, p->close, nc + 1);
    r->open_len = no;
    r->close_len = nc;
    r->inside = p->in_reasoning;
    *out = r;
    return HX_OK;
}

void hx_reasoning_free(hx_reasoning *r)
{
    if (!r) return;
    hx_free(r->buf);
    hx_free(r);
}

bool hx_reasoning_inside(const hx_reasoning *r)
{
    return r->inside;
}

/* ---- core ---- */

/* Bytes at the end of s[0..n) that start a UTF-8 sequence the chunk did not finish. Emitting
 * them now would hand the wire half a character. */
static size_t utf8_tail(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* The longest proper prefix of tag[0..k) that ends s[0..n). */
static size_t prefix_tail(const char *s, size_t n, const char *tag, size_t k)
{
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (memcmp(s + n - m, tag, m) == 0) return m;
    return 0;
}

static const char *find(const char *s, size_t n, const char *tag, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == tag[0] && memcmp(s + i, tag, k) == 0) return s + i;
    return NULL;
}

static bool emit(hx_reasoning *r, const char *s, size_t n, hx_reasoning_cb cb, void *user)
{
    if (n == 0) return true;
    return cb(user, r->inside ? HX_REASONING_REASONING : HX_REASONING_CONTENT, s, n);
}

/* Emits every certain run of r->buf and keeps the rest at its front. With final, nothing is
 * kept: an unfinished tag is text. */
static hx_status drain(hx_reasoning *r, bool final, hx_reasoning_cb cb, void *user)
{
    size_t    pos = 0;
    hx_status st = HX_OK;
    if (r->len == 0) return HX_OK; /* nothing held (buf may still be NULL) */
    for (;;) {
        const char  *tag = r->inside ? r->close : r->open;
        const size_t k = r->inside ? r->close_len : r->open_len;
        const char  *s = r->buf + pos;
        const size_t n = r->len - pos;
        const char  *hit = find(s, n, tag, k);
        if (hit) {
            if (!emit(r, s, (size_t)(hit - s), cb, user)) {
                st = HX_E_CANCELLED;
                break;
            }
            r->inside = !r->inside;
            pos += (size_t)(hit - s) + k;
            continue;
        }
        size_t keep = 0;
        if (!final) {
            keep = prefix_tail(s, n, tag, k);
            keep += utf8_tail(s, n - keep);
        }
        if (!emit(r, s, n - keep, cb, user)) st = HX_E_CANCELLED;
        pos += n - keep;
        break;
    }
    memmove(r->buf, r->buf + pos, r->len - pos);
    r->len -= pos;
    return st;
}

hx_status hx_reasoning_feed(hx_reasoning *r, const char *text, size_t len, hx_reasoning_cb cb,
                            void *user)
{
    HX_ASSERT(!r->finished);
    if (len == 0) return HX_OK;
    if (r->len + len > r->cap) {
        const size_t cap = (r->len + len) * 2;
        char        *b = hx_realloc(r->buf, cap);
        if (!b) return HX_E_NOMEM;
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, text, len);
    r->len += len;
    return drain(r, false, cb, user);
}

hx_status hx_reasoning_finish(hx_reasoning *r, hx_reasoning_cb cb, void *user)
{
    HX_ASSERT(!r->finished);
    r->finished = true;
    return drain(r, true, cb, user);
}
