/* detokenize.c - ids back to text: the decoder chain, whole (decode) and streaming (hx_detok).
 *
 * Hugging Face decoders work on a list of token strings: ByteLevel maps characters back to bytes
 * and joins everything (invalid UTF-8 → U+FFFD per maximal bad sequence); ByteFallback turns
 * runs of <0xXX> tokens into text (a run that is not valid UTF-8 becomes one U+FFFD per byte);
 * Replace, Strip, Metaspace and BPEDecoder rewrite each string; Fuse joins them. decode runs
 * that chain as written. The stream runs the same steps on one token at a time in "raw" mode
 * (no UTF-8 repair inside the chain), applies a Strip that follows Fuse to the start of the
 * stream only, and repairs UTF-8 at the end, holding back a character split across tokens. */
#include <string.h>

#include "base/alloc.h"
#include "base/utf8.h"
#include "tokenizer/tokenizer_int.h"

/* ---- string lists ---- */

typedef struct {
    hx_tok_text buf;
    uint32_t   *off, *len;
    size_t      n, cap;
} strlist;

typedef struct {
    strlist     a, b;
    hx_tok_text tmp;
} chain_work;

static void sl_free(strlist *l)
{
    hx_tok_text_free(&l->buf);
    hx_free(l->off);
    hx_free(l->len);
    memset(l, 0, sizeof *l);
}

/* Starts a new, empty string at the end of the list. */
static hx_status sl_new(strlist *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        uint32_t *o = hx_realloc(l->off, cap * sizeof *o);
        if (o) l->off = o;
        uint32_t *n = hx_realloc(l->len, cap * sizeof *n);
        if (n) l->len = n;
        if (!o || !n) return HX_E_NOMEM;
        l->cap = cap;
    }
    if (l->buf.len > UINT32_MAX / 2) return HX_E_NOMEM;
    l->off[l->n] = (uint32_t)l->buf.len;
    l->len[l->n] = 0;
    l->n++;
    return HX_OK;
}

/* Appends bytes to the last string. */
static hx_status sl_add(strlist *l, const void *p, size_t n)
{
    if (hx_tok_text_append(&l->buf, p, n)) return HX_E_NOMEM;
    l->len[l->n - 1] += (uint32_t)n;
    return HX_OK;
}

static hx_status sl_push(strlist *l, const void *p, size_t n)
{
    return sl_new(l) == HX_OK ? sl_add(l, p, n) : HX_E_NOMEM;
}

static const char *sl_str(const strlist *l, size_t i)
{
    return l->buf.data ? l->buf.data + l->off[i] : "";
}

/* ---- steps ---- */

static bool is_byte_token(const char *s, size_t n, uint8_t *out)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    *out = (uint8_t)v;
    return true;
}

static hx_status step_bytelevel(const strlist *in, strlist *out, hx_tok_text *tmp, bool raw)
{
    tmp->len = 0;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = sl_str(in, i);
        size_t n = in->len[i], start = tmp->len;
        bool ok = true;
        for (size_t j = 0; j < n && ok;) {
            size_t adv;
            int32_t b = hx_tok_cp_to_byte(hx_tok_utf8_next(s + j, n - j, &adv));
            j += adv;
            if (b < 0) ok = false;
            else if (hx_tok_text_append(tmp, &(char){ (char)b }, 1)) return HX_E_NOMEM;
        }
        if (!ok) { /* a character outside the alphabet: the token's own bytes */
            tmp->len = start;
            if (hx_tok_text_append(tmp, s, n)) return HX_E_NOMEM;
        }
    }
    if (sl_new(out)) return HX_E_NOMEM;
    if (raw) return sl_add(out, tmp->data ? tmp->data : "", tmp->len);
    hx_tok_text fixed = { 0 };
    hx_status st = hx_tok_utf8_lossy(tmp->data ? tmp->data : "", tmp->len, &fixed);
    if (st == HX_OK) st = sl_add(out, fixed.data ? fixed.data : "", fixed.len);
    hx_tok_text_free(&fixed);
    return st;
}

static hx_status flush_bytes(strlist *out, hx_tok_text *run, bool raw)
{
    if (run->len == 0) return HX_OK;
    hx_status st = HX_OK;
    if (raw || hx_utf8_valid(run->data, run->len)) {
        st = sl_push(out, run->data, run->len);
    } else {
        for (size_t i = 0; i < run->len && st == HX_OK; i++) st = sl_push(out, "\xEF\xBF\xBD", 3);
    }
    run->len = 0;
    return st;
}

static hx_status step_bytefallback(const strlist *in, strlist *out, hx_tok_text *run, bool raw)
{
    run->len = 0;
    for (size_t i = 0; i < in->n; i++) {
        uint8_t b;
        if (is_byte_token(sl_str(in, i), in->len[i], &b)) {
            if (hx_tok_text_append(run, &b, 1)) return HX_E_NOMEM;
            continue;
        }
        if (flush_bytes(out, run, raw) || sl_push(out, sl_str(in, i), in->len[i]))
            return HX_E_NOMEM;
    }
    return flush_bytes(out, run, raw);
}

/* Replaces each occurrence of pat in s by rep ("" removes), appending to the last string. */
static hx_status replace_into(strlist *out, const char *s, size_t n, const char *pat, size_t pl,
                              const char *rep, size_t rl)
{
    size_t from = 0;
    for (size_t i = 0; pl && i + pl <= n;) {
        if (s[i] == pat[0] && !memcmp(s + i, pat, pl)) {
            if (sl_add(out, s + from, i - from) || sl_add(out, rep, rl)) return HX_E_NOMEM;
            i += pl;
            from = i;
        } else {
            i++;
        }
    }
    return sl_add(out, s + from, n - from);
}

static hx_status step_strip(const hx_tok_dec *d, const strlist *in, strlist *out)
{
    char enc[4];
    size_t cl = hx_tok_utf8_put(d->ch, enc);
    for (size_t i = 0; i < in->n; i++) {
        const char *s = sl_str(in, i);
        size_t a = 0, b = in->len[i];
        for (int32_t k = 0; k < d->start && b - a >= cl && !memcmp(s + a, enc, cl); k++) a += cl;
        for (int32_t k = 0; k < d->stop && b - a >= cl && !memcmp(s + b - cl, enc, cl); k++)
            b -= cl;
        if (sl_push(out, s + a, b - a)) return HX_E_NOMEM;
    }
    return HX_OK;
}

static hx_status run_step(const hx_tokenizer *t, const hx_tok_dec *d, const strlist *in,
                          strlist *out, hx_tok_text *tmp, int32_t base, bool raw)
{
    const char *a = t->pool + d->a_off, *b = t->pool + d->b_off;
    switch (d->kind) {
    case HX_DEC_BYTELEVEL: return step_bytelevel(in, out, tmp, raw);
    case HX_DEC_BYTEFALLBACK: return step_bytefallback(in, out, tmp, raw);
    case HX_DEC_FUSE:
        if (sl_new(out)) return HX_E_NOMEM;
        for (size_t i = 0; i < in->n; i++)
            if (sl_add(out, sl_str(in, i), in->len[i])) return HX_E_NOMEM;
        return HX_OK;
    case HX_DEC_STRIP: return step_strip(d, in, out);
    case HX_DEC_REPLACE:
    case HX_DEC_METASPACE:
    case HX_DEC_BPE_SUFFIX:
        for (size_t i = 0; i < in->n; i++) {
            const char *rep = b;
            size_t rl = d->b_len;
            if (d->kind == HX_DEC_METASPACE) {
                /* The first token loses its replacement characters; later ones become spaces. */
                bool first = base + (int32_t)i == 0 && d->prepend != HX_PREPEND_NEVER;
                rep = first ? "" : " ";
                rl = first ? 0 : 1;
            } else if (d->kind == HX_DEC_BPE_SUFFIX) {
                bool last = !raw && i + 1 == in->n;
                rep = last ? "" : " ";
                rl = last ? 0 : 1;
            }
            if (sl_new(out) || replace_into(out, sl_str(in, i), in->len[i], a, d->a_len, rep, rl))
                return HX_E_NOMEM;
        }
        return HX_OK;
    }
    return HX_OK;
}

/* True when the chain's Strip step comes after a Fuse: it then trims the whole text. */
static const hx_tok_dec *stream_strip(const hx_tokenizer *t)
{
    bool fused = false;
    for (int32_t i = 0; i < t->n_dec; i++) {
        if (t->dec[i].kind == HX_DEC_FUSE || t->dec[i].kind == HX_DEC_BYTELEVEL) fused = true;
        if (t->dec[i].kind == HX_DEC_STRIP && fused) return &t->dec[i];
    }
    return NULL;
}

/* Runs the chain over the strings in w->a; the result is joined into out (appended). `base`
 * is the index of the first string in the whole sequence. */
static hx_status run_chain(const hx_tokenizer *t, chain_work *w, int32_t base, bool raw,
                           hx_tok_text *out)
{
    strlist *in = &w->a, *nx = &w->b;
    const hx_tok_dec *skip = raw ? stream_strip(t) : NULL;
    if (t->n_dec == 0) { /* no decoder: Hugging Face joins the tokens with spaces */
        for (size_t i = 0; i < in->n; i++) {
            if ((base > 0 || i > 0) && hx_tok_text_append(out, " ", 1)) return HX_E_NOMEM;
            if (hx_tok_text_append(out, sl_str(in, i), in->len[i])) return HX_E_NOMEM;
        }
        return HX_OK;
    }
    for (int32_t k = 0; k < t->n_dec; k++) {
        if (&t->dec[k] == skip) continue;
        nx->n = 0;
        nx->buf.len = 0;
        if (run_step(t, &t->dec[k], in, nx, &w->tmp, base, raw)) return HX_E_NOMEM;
        strlist *sw = in;
        in = nx;
        nx = sw;
    }
    for (size_t i = 0; i < in->n; i++)
        if (hx_tok_text_append(out, sl_str(in, i), in->len[i])) return HX_E_NOMEM;
    return HX_OK;
}

static void chain_free(chain_work *w)
{
    sl_free(&w->a);
    sl_free(&w->b);
    hx_tok_text_free(&w->tmp);
}

/* ---- decode ---- */

static bool keep(const hx_tokenizer *t, int32_t id, unsigned flags)
{
    if (id < 0 || id >= t->n_vocab || (t->tok[id].attr & HX_TOKA_UNUSED)) return false;
    return !((flags & HX_TOK_SKIP_SPECIAL) && (t->tok[id].attr & HX_TOKA_SPECIAL));
}

hx_status hx_tokenizer_decode(const hx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                              hx_tok_text *out, hx_err *err)
{
    chain_work w = { 0 };
    hx_status st = HX_OK;
    out->len = 0;
    for (size_t i = 0; i < n && st == HX_OK; i++)
        if (keep(t, ids[i], flags))
            st = sl_push(&w.a, t->pool + t->tok[ids[i]].off, t->tok[ids[i]].len);
    if (st == HX_OK) st = run_chain(t, &w, 0, false, out);
    if (st == HX_OK) st = hx_tok_text_reserve(out, 0);
    if (st == HX_OK) out->data[out->len] = '\0';
    chain_free(&w);
    if (st != HX_OK) return hx_err_set(err, st, "%s: out of memory while decoding", t->name);
    return HX_OK;
}

/* ---- streaming ---- */

void hx_detok_init(hx_detok *d, const hx_tokenizer *t, unsigned flags)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->flags = flags;
    const hx_tok_dec *s = stream_strip(t);
    if (s) {
        d->strip_left = s->start;
        d->strip_cp = s->ch;
    }
}

/* Moves the complete characters of hold + p[0..n) into d->out and keeps an unfinished tail
 * in hold. Invariant: hold is always a valid but unfinished prefix of one character, so a
 * check of hold + more bytes fails, if at all, at an index past the held bytes. */
static hx_status emit_utf8(hx_detok *d, const char *p, size_t n, bool final)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    while (d->n_hold > 0) {
        unsigned char buf[4];
        size_t k = (size_t)d->n_hold, take = 0, len;
        memcpy(buf, d->hold, k);
        while (k < 4 && take < n) buf[k++] = (unsigned char)p[take++];
        int r = hx_tok_utf8_check(buf, k, &len);
        if (r == -1 && !final) { /* still unfinished: everything so far is held */
            memcpy(d->hold, buf, k);
            d->n_hold = (int32_t)k;
            return HX_OK;
        }
        if (r == -1) len = k; /* unfinished at the very end: one U+FFFD */
        if (hx_tok_text_append(&d->out, r == 1 ? (const char *)buf : fffd, r == 1 ? len : 3))
            return HX_E_NOMEM;
        size_t used = len - (size_t)d->n_hold; /* bytes of p that belonged to it */
        d->n_hold = 0;
        p += used;
        n -= used;
    }
    while (n > 0) {
        size_t a = 0, len;
        while (a < n && (unsigned char)p[a] < 0x80) a++;
        if (a && hx_tok_text_append(&d->out, p, a)) return HX_E_NOMEM;
        p += a;
        n -= a;
        if (n == 0) break;
        int r = hx_tok_utf8_check((const unsigned char *)p, n, &len);
        if (r == -1 && !final) {
            memcpy(d->hold, p, n);
            d->n_hold = (int32_t)n;
            return HX_OK;
        }
        if (r == -1) len = n;
        if (hx_tok_text_append(&d->out, r == 1 ? p : fffd, r == 1 ? len : 3)) return HX_E_NOMEM;
        p += len;
        n -= len;
    }
    return HX_OK;
}

hx_status hx_detok_push(hx_detok *d, int32_t id, const char **text, size_t *len, hx_err *err)
{
    const hx_tokenizer *t = d->tok;
    hx_status st = HX_OK;
    hx_tok_text bytes = { 0 };
    d->out.len = 0;
    if (keep(t, id, d->flags)) {
        chain_work *w = d->work;
        if (!w && !(w = d->work = hx_calloc(1, sizeof *w))) st = HX_E_NOMEM;
        if (st == HX_OK) {
            w->a.n = 0;
            w->a.buf.len = 0;
            st = sl_push(&w->a, t->pool + t->tok[id].off, t->tok[id].len);
        }
        if (st == HX_OK) st = run_chain(t, w, d->n_tokens, true, &bytes);
        d->n_tokens++;
        const char *p = bytes.data ? bytes.data : "";
        size_t n = bytes.len;
        char enc[4];
        size_t cl = hx_tok_utf8_put(d->strip_cp, enc);
        while (st == HX_OK && d->strip_left > 0 && n > 0) {
            if (n < cl || memcmp(p, enc, cl) != 0) {
                d->strip_left = 0;
                break;
            }
            p += cl;
            n -= cl;
            d->strip_left--;
        }
        if (st == HX_OK) st = emit_utf8(d, p, n, false);
    }
    hx_tok_text_free(&bytes);
    if (st == HX_OK) st = hx_tok_text_reserve(&d->out, 0);
    if (st != HX_OK) return hx_err_set(err, st, "%s: out of memory while decoding", t->name);
    d->out.data[d->out.len] = '\0';
    *text = d->out.data;
    *len = d->out.len;
    return HX_OK;
}

hx_status hx_detok_flush(hx_detok *d, const char **text, size_t *len, hx_err *err)
{
    d->out.len = 0;
    hx_status st = emit_utf8(d, "", 0, true);
    if (st == HX_OK) st = hx_tok_text_reserve(&d->out, 0);
    if (st != HX_OK) return hx_err_set(err, st, "%s: out of memory while decoding", d->tok->name);
    d->out.data[d->out.len] = '\0';
    *text = d->out.data;
    *len = d->out.len;
    return HX_OK;
}

void hx_detok_free(hx_detok *d)
{
    if (!d) return;
    if (d->work) {
        chain_free(d->work);
        hx_free(d->work);
    }
    hx_tok_text_free(&d->out);
    d->work = NULL;
}
