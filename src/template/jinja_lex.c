/* jinja_lex.c - template source to tokens, following jinja2's lexer rule by rule.
 *
 * The source is first normalised as jinja2 does: CRLF and CR become LF and one trailing newline
 * is dropped (keep_trailing_newline=False). Text between tags becomes DATA tokens after the
 * whitespace rules transformers turns on: trim_blocks (a block or comment end eats one following
 * newline) and lstrip_blocks (spaces and tabs from the start of a line to a block or comment
 * start are dropped), overridden per tag by `-` (strip all whitespace on that side) and `+`
 * (keep it). Inside {{ }} and {% %} it produces names, literals and operators; an end delimiter
 * only counts while brackets are balanced, as in jinja2. "Whitespace" is Python's str.isspace.
 * Bracket nesting is capped (MAX_NEST), which also bounds the parser's recursion on brackets. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "template/jinja_int.h"

#define MAX_NEST 200

typedef struct {
    hx_jarena *a;
    const char *s;
    size_t      n;
    size_t      pos;
    /* position bookkeeping for line/column */
    size_t      lc_pos, lc_line_start;
    int32_t     lc_line;
    hx_jtoken  *toks;
    size_t      n_toks, cap;
    char        bal[MAX_NEST];
    int         n_bal;
    bool        line_starting;
    hx_err     *err;
} lexer;

/* Line and column (both 1-based; the column counts code points) of byte offset p. Offsets are
 * asked for in increasing order, so this walks the source once. */
static void linecol(lexer *lx, size_t p, int32_t *line, int32_t *col)
{
    if (p < lx->lc_pos) {
        lx->lc_pos = 0;
        lx->lc_line = 1;
        lx->lc_line_start = 0;
    }
    for (size_t i = lx->lc_pos; i < p && i < lx->n; i++) {
        if (lx->s[i] == '\n') {
            lx->lc_line++;
            lx->lc_line_start = i + 1;
        }
    }
    lx->lc_pos = p;
    *line = lx->lc_line;
    *col = (int32_t)hx_ju_len(lx->s + lx->lc_line_start, p - lx->lc_line_start) + 1;
}

static hx_status fail_at(lexer *lx, size_t p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hx_status fail_at(lexer *lx, size_t p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int32_t line, col;
    linecol(lx, p, &line, &col);
    return hx_err_set(lx->err, HX_E_INVALID, "line %d, column %d: %s", (int)line, (int)col, msg);
}

static hx_status nomem(lexer *lx)
{
    return hx_err_set(lx->err, HX_E_NOMEM, "out of memory compiling a template");
}

static hx_jtoken *emit(lexer *lx, int type, size_t at)
{
    if (lx->n_toks == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        hx_jtoken *t = hx_jarena_alloc(lx->a, cap * sizeof *t);
        if (!t) return NULL;
        if (lx->n_toks) memcpy(t, lx->toks, lx->n_toks * sizeof *t);
        lx->toks = t;
        lx->cap = cap;
    }
    hx_jtoken *t = &lx->toks[lx->n_toks++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    linecol(lx, at, &t->line, &t->col);
    return t;
}

/* Length of the run of Python whitespace at s[p..n). */
static size_t space_run(const char *s, size_t n, size_t p)
{
    size_t i = p;
    while (i < n) {
        size_t j = i;
        uint32_t cp = hx_ju_next(s, n, &j);
        if (!hx_ju_isspace(cp)) break;
        i = j;
    }
    return i - p;
}

/* End of s[b..e) once trailing Python whitespace is removed (str.rstrip()). */
static size_t rstrip_end(const char *s, size_t b, size_t e)
{
    size_t last = b, i = b;
    while (i < e) {
        uint32_t cp = hx_ju_next(s, e, &i);
        if (!hx_ju_isspace(cp)) last = i;
    }
    return last;
}

/* Emits the text s[b..e) that precedes a tag, after the tag's whitespace control: sign '-'
 * strips all trailing whitespace; otherwise, for blocks and comments (lstrip), whitespace between
 * the last newline (or the start of a line) and the tag is dropped. */
static hx_status emit_text(lexer *lx, size_t b, size_t e, char sign, bool lstrip)
{
    if (sign == '-') {
        e = rstrip_end(lx->s, b, e);
    } else if (sign != '+' && lstrip) {
        size_t l = e;
        while (l > b && lx->s[l - 1] != '\n') l--;
        if ((l > b || lx->line_starting) && l < e && space_run(lx->s, e, l) == e - l) e = l;
    }
    if (e > b) {
        hx_jtoken *t = emit(lx, HX_JT_DATA, b);
        if (!t || !(t->s = hx_jstr_new(lx->a, lx->s + b, e - b))) return nomem(lx);
    }
    return HX_OK;
}

static bool at(const lexer *lx, size_t p, const char *lit)
{
    size_t k = strlen(lit);
    return p + k <= lx->n && memcmp(lx->s + p, lit, k) == 0;
}

/* Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at p; returns its end or 0. */
static size_t match_raw_begin(const lexer *lx, size_t p)
{
    size_t i = p + 2;
    if (i < lx->n && (lx->s[i] == '-' || lx->s[i] == '+')) i++;
    i += space_run(lx->s, lx->n, i);
    if (!at(lx, i, "raw")) return 0;
    i += 3;
    i += space_run(lx->s, lx->n, i);
    if (at(lx, i, "-%}")) return i + 3 + space_run(lx->s, lx->n, i + 3);
    if (at(lx, i, "%}")) return i + 2;
    return 0;
}

/* Finds `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)` from p. *tag is where it starts, *sign its
 * whitespace sign, and the return value its end (0 when absent). */
static size_t find_endraw(const lexer *lx, size_t p, size_t *tag, char *sign)
{
    for (size_t q = p; q + 1 < lx->n; q++) {
        if (lx->s[q] != '{' || lx->s[q + 1] != '%') continue;
        size_t i = q + 2;
        char sg = 0;
        if (i < lx->n && (lx->s[i] == '-' || lx->s[i] == '+')) sg = lx->s[i++];
        i += space_run(lx->s, lx->n, i);
        if (!at(lx, i, "endraw")) continue;
        i += 6;
        i += space_run(lx->s, lx->n, i);
        size_t end = 0;
        if (at(lx, i, "+%}")) end = i + 3;
        else if (at(lx, i, "-%}")) end = i + 3 + space_run(lx->s, lx->n, i + 3);
        else if (at(lx, i, "%}")) end = i + 2 + (at(lx, i + 2, "\n") ? 1 : 0);
        if (!end) continue;
        *tag = q;
        *sign = sg;
        return end;
    }
    return 0;
}

/* Decodes the body of a string literal the way jinja2 does (Python's unicode-escape after
 * backslash-replacing non-ASCII characters). */
static hx_status unescape(lexer *lx, size_t b, size_t e, hx_jstr **out)
{
    hx_jbuf buf;
    hx_jbuf_init(&buf, lx->a, 0);
    const char *s = lx->s;
    size_t i = b;
    while (i < e) {
        char c = s[i];
        if (c != '\\' || i + 1 >= e) {
            hx_jbuf_addc(&buf, c);
            i++;
            continue;
        }
        unsigned char x = (unsigned char)s[i + 1];
        i += 2;
        uint32_t cp = 0;
        int nhex = 0;
        switch (x) {
        case '\n': break;
        case '\\': hx_jbuf_addc(&buf, '\\'); break;
        case '\'': hx_jbuf_addc(&buf, '\''); break;
        case '"': hx_jbuf_addc(&buf, '"'); break;
        case 'a': hx_jbuf_addc(&buf, '\a'); break;
        case 'b': hx_jbuf_addc(&buf, '\b'); break;
        case 'f': hx_jbuf_addc(&buf, '\f'); break;
        case 'n': hx_jbuf_addc(&buf, '\n'); break;
        case 'r': hx_jbuf_addc(&buf, '\r'); break;
        case 't': hx_jbuf_addc(&buf, '\t'); break;
        case 'v': hx_jbuf_addc(&buf, '\v'); break;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'N': return fail_at(lx, i - 2, "\\N{...} escapes are not supported");
        default:
            if (x >= '0' && x <= '7') {
                cp = (uint32_t)(x - '0');
                for (int k = 0; k < 2 && i < e && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                hx_jbuf_add_cp(&buf, cp);
            } else if (x >= 0x80) {
                /* Python saw "\\" followed by the backslash-replaced character: a literal
                 * backslash, then the escape's text. */
                size_t j = i - 1;
                uint32_t u = hx_ju_next(s, e, &j);
                i = j;
                if (u <= 0xFF) hx_jbuf_addf(&buf, "\\x%02x", (unsigned)u);
                else if (u <= 0xFFFF) hx_jbuf_addf(&buf, "\\u%04x", (unsigned)u);
                else hx_jbuf_addf(&buf, "\\U%08x", (unsigned)u);
            } else {
                hx_jbuf_addc(&buf, '\\');
                hx_jbuf_addc(&buf, (char)x);
            }
        }
        if (nhex) {
            for (int k = 0; k < nhex; k++) {
                char h = i < e ? s[i] : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) return fail_at(lx, i, "truncated \\%c escape in a string", x);
                cp = cp * 16 + (uint32_t)d;
                i++;
            }
            if (cp > 0x10FFFF) return fail_at(lx, i, "illegal Unicode character in a string");
            hx_jbuf_add_cp(&buf, cp);
        }
    }
    if (buf.fail) return nomem(lx);
    *out = hx_jstr_new(lx->a, buf.p ? buf.p : "", buf.len);
    return *out ? HX_OK : nomem(lx);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Length of (\d+_)*\d+ at p, or 0. */
static size_t digits_run(const lexer *lx, size_t p)
{
    size_t i = p;
    if (i >= lx->n || !is_digit(lx->s[i])) return 0;
    while (i < lx->n) {
        if (is_digit(lx->s[i])) i++;
        else if (lx->s[i] == '_' && i + 1 < lx->n && is_digit(lx->s[i + 1])) i++;
        else break;
    }
    return i - p;
}

/* Length of e[+-]?(\d+_)*\d+ at p, or 0. */
static size_t exponent_run(const lexer *lx, size_t p)
{
    if (p >= lx->n || (lx->s[p] != 'e' && lx->s[p] != 'E')) return 0;
    size_t i = p + 1;
    if (i < lx->n && (lx->s[i] == '+' || lx->s[i] == '-')) i++;
    size_t d = digits_run(lx, i);
    return d ? i + d - p : 0;
}

static hx_status lex_number(lexer *lx, bool *matched)
{
    size_t p = lx->pos;
    const char *s = lx->s;
    *matched = false;
    /* float: (?<!\.) digits ( (.digits)? exponent | .digits ) */
    if (!(p > 0 && s[p - 1] == '.')) {
        size_t d = digits_run(lx, p);
        size_t end = 0;
        if (d) {
            size_t q = p + d;
            size_t frac = (q < lx->n && s[q] == '.') ? digits_run(lx, q + 1) : 0;
            if (frac) {
                size_t ex = exponent_run(lx, q + 1 + frac);
                end = q + 1 + frac + ex;
            } else {
                size_t ex = exponent_run(lx, q);
                if (ex) end = q + ex;
            }
        }
        if (end) {
            char tmp[128];
            size_t k = 0;
            for (size_t i = p; i < end && k + 1 < sizeof tmp; i++)
                if (s[i] != '_') tmp[k++] = s[i];
            tmp[k] = '\0';
            hx_jtoken *t = emit(lx, HX_JT_FLOAT, p);
            if (!t) return nomem(lx);
            t->f = strtod(tmp, NULL);
            lx->pos = end;
            *matched = true;
            return HX_OK;
        }
    }
    /* integer: 0b.. 0o.. 0x.. [1-9](_?\d)* 0(_?0)* */
    if (!is_digit(s[p])) return HX_OK;
    int base = 10;
    size_t i = p;
    if (s[p] == '0' && p + 1 < lx->n) {
        char k = (char)(s[p + 1] | 0x20);
        base = k == 'b' ? 2 : k == 'o' ? 8 : k == 'x' ? 16 : 10;
    }
    uint64_t v = 0;
    bool overflow = false;
    size_t n_digits = 0;
    if (base != 10) {
        i = p + 2;
        while (i < lx->n) {
            size_t j = i;
            if (s[j] == '_') j++;
            if (j >= lx->n) break;
            char c = (char)(s[j] | 0x20);
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99;
            if (d >= base) break;
            if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) overflow = true;
            v = v * (uint64_t)base + (uint64_t)d;
            n_digits++;
            i = j + 1;
        }
        if (n_digits == 0) {
            base = 10; /* "0b" without digits: just the integer 0, then a name */
            i = p;
        }
    }
    if (base == 10) {
        i = p;
        if (s[p] == '0') {
            i = p + 1;
            while (i < lx->n) {
                size_t j = i + (s[i] == '_');
                if (j < lx->n && s[j] == '0') i = j + 1;
                else break;
            }
            v = 0;
        } else {
            while (i < lx->n) {
                size_t j = i + (s[i] == '_' && i > p);
                if (j < lx->n && is_digit(s[j])) {
                    uint64_t d = (uint64_t)(s[j] - '0');
                    if (v > (UINT64_MAX - d) / 10) overflow = true;
                    v = v * 10 + d;
                    i = j + 1;
                } else {
                    break;
                }
            }
        }
    }
    if (overflow || v > (uint64_t)INT64_MAX)
        return fail_at(lx, p, "integer literal too large");
    hx_jtoken *t = emit(lx, HX_JT_INT, p);
    if (!t) return nomem(lx);
    t->i = (int64_t)v;
    lx->pos = i;
    *matched = true;
    return HX_OK;
}

static bool name_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static bool name_char(unsigned char c) { return name_start(c) || is_digit((char)c); }

typedef struct {
    const char *text;
    int         type;
} op_def;

/* Two-character operators first, so the longest match wins. */
static const op_def ops[] = {
    {"//", HX_JT_FLOORDIV}, {"**", HX_JT_POW}, {"==", HX_JT_EQ}, {"!=", HX_JT_NE},
    {">=", HX_JT_GTEQ}, {"<=", HX_JT_LTEQ},
    {"+", HX_JT_ADD}, {"-", HX_JT_SUB}, {"/", HX_JT_DIV}, {"*", HX_JT_MUL}, {"%", HX_JT_MOD},
    {"~", HX_JT_TILDE}, {"[", HX_JT_LBRACKET}, {"]", HX_JT_RBRACKET}, {"(", HX_JT_LPAREN},
    {")", HX_JT_RPAREN}, {"{", HX_JT_LBRACE}, {"}", HX_JT_RBRACE}, {">", HX_JT_GT},
    {"<", HX_JT_LT}, {"=", HX_JT_ASSIGN}, {".", HX_JT_DOT}, {":", HX_JT_COLON},
    {"|", HX_JT_PIPE}, {",", HX_JT_COMMA}, {";", HX_JT_SEMICOLON},
};

/* Tokenizes the inside of {{ }} or {% %} up to and including its end delimiter. Reaching the
 * end of the source first is left to the parser to report. */
static hx_status lex_tag(lexer *lx, bool block)
{
    const char *s = lx->s;
    for (;;) {
        size_t p = lx->pos;
        if (p >= lx->n) return HX_OK;
        if (lx->n_bal == 0) {
            size_t end = 0;
            if (block) {
                if (at(lx, p, "+%}")) end = p + 3;
                else if (at(lx, p, "-%}")) end = p + 3 + space_run(s, lx->n, p + 3);
                else if (at(lx, p, "%}")) end = p + 2 + (at(lx, p + 2, "\n") ? 1 : 0);
            } else {
                if (at(lx, p, "-}}")) end = p + 3 + space_run(s, lx->n, p + 3);
                else if (at(lx, p, "}}")) end = p + 2;
            }
            if (end) {
                if (!emit(lx, block ? HX_JT_BLOCK_END : HX_JT_VAR_END, p)) return nomem(lx);
                lx->line_starting = s[end - 1] == '\n';
                lx->pos = end;
                return HX_OK;
            }
        }
        size_t ws = space_run(s, lx->n, p);
        if (ws) {
            lx->pos += ws;
            lx->line_starting = s[lx->pos - 1] == '\n';
            continue;
        }
        lx->line_starting = false;
        unsigned char c = (unsigned char)s[p];
        if (is_digit((char)c)) {
            bool matched;
            hx_status st = lex_number(lx, &matched);
            if (st != HX_OK) return st;
            if (matched) continue;
        }
        if (name_start(c)) {
            size_t i = p;
            while (i < lx->n && name_char((unsigned char)s[i])) i++;
            hx_jtoken *t = emit(lx, HX_JT_NAME, p);
            if (!t || !(t->s = hx_jstr_new(lx->a, s + p, i - p))) return nomem(lx);
            lx->pos = i;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t i = p + 1;
            while (i < lx->n && s[i] != (char)c) i += (s[i] == '\\' && i + 1 < lx->n) ? 2 : 1;
            if (i < lx->n) {
                hx_jtoken *t = emit(lx, HX_JT_STRING, p);
                if (!t) return nomem(lx);
                hx_status st = unescape(lx, p + 1, i, &t->s);
                if (st != HX_OK) return st;
                lx->pos = i + 1;
                continue;
            }
            return fail_at(lx, p, "unterminated string");
        }
        const op_def *op = NULL;
        for (size_t k = 0; k < HX_COUNTOF(ops); k++)
            if (at(lx, p, ops[k].text)) {
                op = &ops[k];
                break;
            }
        if (!op) return fail_at(lx, p, "unexpected char '%c'", c >= 0x20 && c < 0x7F ? c : '?');
        if (op->type == HX_JT_LBRACE || op->type == HX_JT_LPAREN || op->type == HX_JT_LBRACKET) {
            if (lx->n_bal == MAX_NEST) return fail_at(lx, p, "brackets nested too deeply");
            lx->bal[lx->n_bal++] = op->type == HX_JT_LBRACE ? '}'
                                 : op->type == HX_JT_LPAREN ? ')' : ']';
        } else if (op->type == HX_JT_RBRACE || op->type == HX_JT_RPAREN ||
                   op->type == HX_JT_RBRACKET) {
            if (lx->n_bal == 0) return fail_at(lx, p, "unexpected '%c'", c);
            char want = lx->bal[--lx->n_bal];
            if (want != (char)c) return fail_at(lx, p, "unexpected '%c', expected '%c'", c, want);
        }
        if (!emit(lx, op->type, p)) return nomem(lx);
        lx->pos += strlen(op->text);
    }
}

static hx_status lex_all(lexer *lx)
{
    const char *s = lx->s;
    lx->line_starting = true;
    while (lx->pos < lx->n) {
        size_t p = lx->pos, q = p;
        while (q + 1 < lx->n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' ||
                                                  s[q + 1] == '#')))
            q++;
        if (q + 1 >= lx->n) { /* no more tags: the rest is data */
            hx_status st = emit_text(lx, p, lx->n, 0, false);
            lx->pos = lx->n;
            return st;
        }
        char kind = s[q + 1];
        size_t raw_end = kind == '%' ? match_raw_begin(lx, q) : 0;
        char sign = (q + 2 < lx->n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        hx_status st = emit_text(lx, p, q, sign, kind != '{');
        if (st != HX_OK) return st;
        if (raw_end) {
            lx->line_starting = s[raw_end - 1] == '\n';
            size_t tag;
            char rsign;
            size_t end = find_endraw(lx, raw_end, &tag, &rsign);
            if (!end) return fail_at(lx, q, "missing end of raw directive");
            lx->pos = raw_end;
            st = emit_text(lx, raw_end, tag, rsign, true);
            if (st != HX_OK) return st;
            lx->line_starting = s[end - 1] == '\n';
            lx->pos = end;
            continue;
        }
        size_t body = q + 2 + (sign ? 1 : 0);
        lx->line_starting = false;
        if (kind == '#') {
            size_t j = body;
            while (j + 1 < lx->n && !(s[j] == '#' && s[j + 1] == '}')) j++;
            if (j + 1 >= lx->n) return fail_at(lx, q, "missing end of comment tag");
            size_t end;
            if (j > body && s[j - 1] == '+') end = j + 2;
            else if (j > body && s[j - 1] == '-') end = j + 2 + space_run(s, lx->n, j + 2);
            else end = j + 2 + (at(lx, j + 2, "\n") ? 1 : 0);
            lx->line_starting = s[end - 1] == '\n';
            lx->pos = end;
            continue;
        }
        if (!emit(lx, kind == '%' ? HX_JT_BLOCK_BEGIN : HX_JT_VAR_BEGIN, q)) return nomem(lx);
        lx->pos = body;
        lx->n_bal = 0;
        st = lex_tag(lx, kind == '%');
        if (st != HX_OK) return st;
    }
    return HX_OK;
}

hx_status hx_jlex(hx_jarena *a, const char *src, size_t len, hx_jtoken **toks, size_t *n,
                  hx_err *err)
{
    lexer lx;
    memset(&lx, 0, sizeof lx);
    lx.a = a;
    lx.err = err;
    lx.lc_line = 1;
    /* Normalise newlines and drop one trailing newline, as jinja2's tokeniter does. */
    char *s = hx_jarena_alloc(a, len + 1);
    if (!s) return nomem(&lx);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k > 0 && s[k - 1] == '\n') k--;
    s[k] = '\0';
    lx.s = s;
    lx.n = k;
    hx_status st = lex_all(&lx);
    if (st != HX_OK) return st;
    if (!emit(&lx, HX_JT_EOF, lx.n)) return nomem(&lx);
    *toks = lx.toks;
    *n = lx.n_toks;
    return HX_OK;
}
