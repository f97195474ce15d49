/* toolcall.c - the incremental tool-call parsers (toolcall.h).
 *
 * One engine serves every family. In content mode it looks for the family's start markers
 * (a table below), streaming out all text that cannot be the start of one and holding back only a
 * suffix that may grow into a marker. Once a marker is found the parser is in body mode: the
 * markup from the marker on is kept in the buffer and the family's scan function is asked,
 * after every chunk, whether it is complete. A complete, valid body becomes calls (events
 * emitted at once); an invalid one is emitted as content, byte for byte; an unfinished one at the
 * end of the reply too. Each scan starts over from the marker, which keeps every scanner a plain
 * function of its text; it runs only when a chunk brings a byte that can end markup ('}', ']',
 * '>', '`'), so a long string argument streamed token by token is not rescanned per token.
 * Markup still unfinished after HX_TOOLCALL_BODY_MAX bytes is given up on as content.
 *
 * After a call (and at the reply's start) whitespace, and for Llama 3 the ';' between calls, is
 * held: dropped when a call or the end follows, emitted as content otherwise. */
#include "serve/toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* ---- types ---- */

enum { SCAN_MORE = 0, SCAN_DONE = 1, SCAN_BAD = 2, SCAN_NOMEM = 3 };

/* Longer than every start marker (DeepSeek's, the longest, is 28 bytes of UTF-8). */
#define MARKER_MAX 32

/* Looks at the markup s[0..n) (it starts with the marker, or '{' for a bare call). DONE: calls
 * were added and *used bytes are consumed; BAD: *used bytes (> 0) are content; MORE: incomplete. */
typedef int (*scan_fn)(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used);

typedef struct {
    const char *marker;
    scan_fn     scan;
} marker_def;

typedef struct {
    const char *name;
    marker_def  markers[2];
    int         n_markers;
    char        bare;      /* a reply may be a bare call starting with this byte, or 0 */
    bool        semicolon; /* ';' separates calls */
} family_def;

struct hx_toolcall_parser {
    const family_def *def;
    uint64_t          seed;
    char             *buf; /* held content, or the markup of the call being read */
    size_t            len, cap;
    bool              in_body;
    int               body_marker; /* index in def->markers, or -1 for a bare call */
    size_t            body_skip;   /* held spacing before the markup, dropped if it is a call */
    size_t            body_seen;   /* body bytes the scanner has already judged incomplete */
    bool              at_boundary; /* at the reply's start or right after a call */
    bool              bare_off;    /* a bare call failed once: the reply is plain JSON text */
    bool              finished;
    hx_toolcall      *calls;
    int32_t           n_calls, calls_cap;
    int32_t           n_emitted; /* calls whose events were sent; the rest are tentative */
};

/* ---- helpers ---- */

/* The last byte of every family's markup is one of these. */
static bool has_closer(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '}' || s[i] == ']' || s[i] == '>' || s[i] == '`') return true;
    return false;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static bool is_ident(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* The first index >= from where needle starts in s[0..n), or -1. */
static ptrdiff_t find_from(const char *s, size_t n, size_t from, const char *needle)
{
    const size_t k = strlen(needle);
    for (size_t i = from; i + k <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0) return (ptrdiff_t)i;
    return -1;
}

static bool starts(const char *s, size_t n, const char *p)
{
    const size_t k = strlen(p);
    return n >= k && memcmp(s, p, k) == 0;
}

/* True when s[0..n) is a proper prefix of p (more text could still make it p). */
static bool partial(const char *s, size_t n, const char *p)
{
    const size_t k = strlen(p);
    return n < k && memcmp(s, p, n) == 0;
}

/* Where the JSON object or array at s[0] ends: DONE with *end one past its closing bracket, MORE
 * when the text stops first, BAD when s[0] opens neither. Only brackets and strings are tracked;
 * json_loadb judges the rest. */
static int json_span(const char *s, size_t n, size_t *end)
{
    if (n == 0) return SCAN_MORE;
    if (s[0] != '{' && s[0] != '[') return SCAN_BAD;
    int  depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++; /* the escaped byte cannot end the string */
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) {
                *end = i + 1;
                return SCAN_DONE;
            }
        }
    }
    return SCAN_MORE;
}

/* Bytes at the end of s[0..n) that start a UTF-8 sequence the chunk did not finish. */
static size_t utf8_tail(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue;
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- calls ---- */

/* Appends a tentative call named name[0..name_len) with arguments args (an object; stolen).
 * SCAN_DONE, or SCAN_NOMEM. */
static int add_call(hx_toolcall_parser *tp, const char *name, size_t name_len, json_t *args)
{
    if (tp->n_calls == tp->calls_cap) {
        const int32_t cap = tp->calls_cap ? tp->calls_cap * 2 : 4;
        hx_toolcall  *c = hx_realloc(tp->calls, (size_t)cap * sizeof *c);
        if (!c) goto fail;
        tp->calls = c;
        tp->calls_cap = cap;
    }
    hx_toolcall *c = &tp->calls[tp->n_calls];
    memset(c, 0, sizeof *c);
    char *text = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) goto fail;
    c->arguments_len = strlen(text);
    c->arguments = hx_strndup(text, c->arguments_len);
    free(text); /* jansson's own allocator made it */
    c->name = hx_strndup(name, name_len);
    if (!c->arguments || !c->name) {
        hx_free(c->arguments);
        hx_free(c->name);
        goto fail;
    }
    /* The id depends on the seed and the call's index only, so a replay gives the same ids. */
    uint64_t       x = tp->seed ^ ((uint64_t)tp->n_calls * 0xD1B54A32D192ED03ull);
    const uint64_t a = splitmix64(&x), b = splitmix64(&x);
    snprintf(c->id, sizeof c->id, "call_%016llx%08llx", (unsigned long long)a,
             (unsigned long long)(b >> 32));
    c->input = args;
    tp->n_calls++;
    return SCAN_DONE;
fail:
    json_decref(args);
    return SCAN_NOMEM;
}

/* Drops the tentative calls of a body that turned out malformed. */
static void rollback(hx_toolcall_parser *tp)
{
    while (tp->n_calls > tp->n_emitted) {
        hx_toolcall *c = &tp->calls[--tp->n_calls];
        hx_free(c->name);
        hx_free(c->arguments);
        json_decref(c->input);
    }
}

/* An arguments value: an object, or a string holding one (OpenAI-style arguments). New
 * reference, or NULL. */
static json_t *args_object(json_t *v)
{
    if (json_is_object(v)) return json_incref(v);
    if (json_is_string(v)) {
        json_t *o = json_loadb(json_string_value(v), json_string_length(v), 0, NULL);
        if (json_is_object(o)) return o;
        json_decref(o);
    }
    return NULL;
}

/* A call from {"name": N, "arguments"|"parameters": {...}}. */
static int call_from_object(hx_toolcall_parser *tp, json_t *obj)
{
    json_t *name = json_object_get(obj, "name");
    json_t *a = json_object_get(obj, "arguments");
    if (!a) a = json_object_get(obj, "parameters");
    if (!json_is_string(name) || json_string_length(name) == 0 || !a) return SCAN_BAD;
    json_t *args = args_object(a);
    if (!args) return SCAN_BAD;
    return add_call(tp, json_string_value(name), json_string_length(name), args);
}

/* A call from the JSON object text s[0..n). */
static int call_from_text(hx_toolcall_parser *tp, const char *s, size_t n)
{
    json_t   *obj = json_loadb(s, n, 0, NULL);
    const int r = json_is_object(obj) ? call_from_object(tp, obj) : SCAN_BAD;
    json_decref(obj);
    return r;
}

/* ---- family scanners ---- */

/* <tool_call>{json}</tool_call> */
static int scan_hermes(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    const size_t    k = strlen("<tool_call>");
    const ptrdiff_t e = find_from(s, n, k, "</tool_call>");
    if (e < 0) return SCAN_MORE;
    *used = (size_t)e + strlen("</tool_call>");
    return call_from_text(tp, s + k, (size_t)e - k);
}

/* A parameter value of the XML form: JSON when it reads as a non-string JSON value (numbers,
 * booleans, objects), else the text itself, since the model writes strings unquoted. */
static json_t *xml_value(const char *s, size_t n)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (v && !json_is_string(v)) return v;
    json_decref(v);
    return json_stringn(s, n);
}

/* <function=N><parameter=P>\nvalue\n</parameter>...</function> filling s[0..n) up to whitespace. */
static int xml_function(hx_toolcall_parser *tp, const char *s, size_t n)
{
    size_t i = skip_ws(s, n, 0);
    if (!starts(s + i, n - i, "<function=")) return SCAN_BAD;
    i += strlen("<function=");
    const ptrdiff_t ne = find_from(s, n, i, ">");
    if (ne < 0 || (size_t)ne == i) return SCAN_BAD;
    const char  *name = s + i;
    const size_t name_len = (size_t)ne - i;
    for (size_t j = 0; j < name_len; j++)
        if (!is_ident(name[j])) return SCAN_BAD;
    i = (size_t)ne + 1;
    json_t *args = json_object();
    if (!args) return SCAN_NOMEM;
    for (;;) {
        i = skip_ws(s, n, i);
        if (starts(s + i, n - i, "</function>")) {
            i += strlen("</function>");
            break;
        }
        if (!starts(s + i, n - i, "<parameter=")) goto bad;
        i += strlen("<parameter=");
        const ptrdiff_t pe = find_from(s, n, i, ">");
        if (pe < 0 || (size_t)pe == i) goto bad;
        char key[256];
        if ((size_t)pe - i >= sizeof key) goto bad;
        memcpy(key, s + i, (size_t)pe - i);
        key[(size_t)pe - i] = '\0';
        size_t          v0 = (size_t)pe + 1;
        const ptrdiff_t ve = find_from(s, n, v0, "</parameter>");
        if (ve < 0) goto bad;
        size_t v1 = (size_t)ve;
        /* The template puts one newline on each side of the value; they are not part of it. */
        if (v0 < v1 && s[v0] == '\n') v0++;
        if (v1 > v0 && s[v1 - 1] == '\n') v1--;
        json_t *v = xml_value(s + v0, v1 - v0);
        if (!v || json_object_set_new(args, key, v) != 0) goto bad;
        i = (size_t)ve + strlen("</parameter>");
    }
    if (skip_ws(s, n, i) != n) goto bad;
    return add_call(tp, name, name_len, args);
bad:
    json_decref(args);
    return SCAN_BAD;
}

/* <tool_call><function=...>...</function></tool_call> */
static int scan_qwen3_coder(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    const size_t    k = strlen("<tool_call>");
    const ptrdiff_t e = find_from(s, n, k, "</tool_call>");
    if (e < 0) return SCAN_MORE;
    *used = (size_t)e + strlen("</tool_call>");
    return xml_function(tp, s + k, (size_t)e - k);
}

/* <function=...>...</function> without the wrapper, as Qwen3-Coder sometimes writes it. */
static int scan_xml_bare(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    const ptrdiff_t e = find_from(s, n, 0, "</function>");
    if (e < 0) return SCAN_MORE;
    *used = (size_t)e + strlen("</function>");
    return xml_function(tp, s, *used);
}

/* A JSON call object at s[i], after marker bytes s[0..i). */
static int json_call_at(hx_toolcall_parser *tp, const char *s, size_t n, size_t i, size_t *used)
{
    i = skip_ws(s, n, i);
    if (i == n) return SCAN_MORE;
    if (s[i] != '{') {
        *used = i > 0 ? i : 1;
        return SCAN_BAD;
    }
    size_t end;
    if (json_span(s + i, n - i, &end) == SCAN_MORE) return SCAN_MORE;
    *used = i + end;
    return call_from_text(tp, s + i, end);
}

/* <|python_tag|>{json} */
static int scan_llama(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    return json_call_at(tp, s, n, strlen("<|python_tag|>"), used);
}

static int scan_pythonic(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used);

/* A bare call: a JSON object, or a Python list of calls. */
static int scan_bare(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    return s[0] == '[' ? scan_pythonic(tp, s, n, used) : json_call_at(tp, s, n, 0, used);
}

/* [TOOL_CALLS][{...}, ...]  or  [TOOL_CALLS]N[ARGS]{...}  or  [TOOL_CALLS]N[CALL_ID]id[ARGS]{...}
 */
static int scan_mistral(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    const size_t k = strlen("[TOOL_CALLS]");
    size_t       i = skip_ws(s, n, k);
    *used = k;
    if (i == n) return SCAN_MORE;
    if (s[i] == '[') {
        size_t end;
        if (json_span(s + i, n - i, &end) == SCAN_MORE) return SCAN_MORE;
        *used = i + end;
        json_t *arr = json_loadb(s + i, end, 0, NULL);
        int     r = json_is_array(arr) && json_array_size(arr) > 0 ? SCAN_DONE : SCAN_BAD;
        for (size_t j = 0; r == SCAN_DONE && j < json_array_size(arr); j++) {
            json_t *o = json_array_get(arr, j);
            r = json_is_object(o) ? call_from_object(tp, o) : SCAN_BAD;
        }
        json_decref(arr);
        return r;
    }
    const size_t name0 = i;
    while (i < n && is_ident(s[i]))
        i++;
    const size_t name1 = i;
    if (name1 - name0 > 256) return SCAN_BAD;
    if (i == n) return SCAN_MORE;
    if (name1 == name0) return SCAN_BAD;
    if (starts(s + i, n - i, "[CALL_ID]")) {
        const ptrdiff_t a = find_from(s, n, i, "[ARGS]");
        if (a < 0) return n - i > 512 ? SCAN_BAD : SCAN_MORE;
        i = (size_t)a;
    } else if (partial(s + i, n - i, "[CALL_ID]") || partial(s + i, n - i, "[ARGS]")) {
        return SCAN_MORE;
    }
    if (!starts(s + i, n - i, "[ARGS]")) return SCAN_BAD;
    i = skip_ws(s, n, i + strlen("[ARGS]"));
    if (i == n) return SCAN_MORE;
    size_t    end;
    const int sp = json_span(s + i, n - i, &end);
    if (sp != SCAN_DONE) return sp;
    *used = i + end;
    json_t *args = json_loadb(s + i, end, 0, NULL);
    if (!json_is_object(args)) {
        json_decref(args);
        return SCAN_BAD;
    }
    return add_call(tp, s + name0, name1 - name0, args);
}

/* s[0..n) without surrounding whitespace and, when present, a ```json ... ``` fence. */
static void unfence(const char **s, size_t *n)
{
    size_t a = skip_ws(*s, *n, 0), b = *n;
    while (b > a && is_ws((*s)[b - 1]))
        b--;
    if (starts(*s + a, b - a, "```json") && b - a >= 10 && memcmp(*s + b - 3, "```", 3) == 0) {
        a += strlen("```json");
        b -= 3;
    }
    *s += a;
    *n = b - a;
}

/* <｜tool▁calls▁begin｜>
 * (<｜tool▁call▁begin｜>T<｜tool▁sep｜>N\n```json\nA\n```<｜tool▁call▁end｜>)+
 * <｜tool▁calls▁end｜>, where V3.1 writes N<｜tool▁sep｜>A instead. */
static int scan_deepseek(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    const size_t    k = strlen(HX_DS_CALLS_BEGIN);
    const ptrdiff_t e = find_from(s, n, k, HX_DS_CALLS_END);
    if (e < 0) return SCAN_MORE;
    *used = (size_t)e + strlen(HX_DS_CALLS_END);
    size_t       i = k;
    const size_t stop = (size_t)e;
    int          r = SCAN_BAD;
    for (;;) {
        i = skip_ws(s, stop, i);
        if (i == stop) break;
        if (!starts(s + i, stop - i, HX_DS_CALL_BEGIN)) return SCAN_BAD;
        i += strlen(HX_DS_CALL_BEGIN);
        const ptrdiff_t sep = find_from(s, stop, i, HX_DS_SEP);
        const ptrdiff_t ce = find_from(s, stop, i, HX_DS_CALL_END);
        if (sep < 0 || ce < 0 || sep > ce) return SCAN_BAD;
        const char *head = s + i, *body = s + sep + strlen(HX_DS_SEP);
        size_t      head_len = (size_t)sep - i, body_len = (size_t)(ce - sep) - strlen(HX_DS_SEP);
        const char *name = head;
        size_t      name_len = head_len;
        if (head_len == 8 && memcmp(head, "function", 8) == 0) {
            /* V3: the name is the first line after the separator, the arguments follow. */
            const ptrdiff_t nl = find_from(body, body_len, 0, "\n");
            if (nl <= 0) return SCAN_BAD;
            name = body;
            name_len = (size_t)nl;
            body += nl + 1;
            body_len -= (size_t)nl + 1;
        }
        for (size_t j = 0; j < name_len; j++)
            if (!is_ident(name[j])) return SCAN_BAD;
        if (name_len == 0) return SCAN_BAD;
        unfence(&body, &body_len);
        json_t *args = json_loadb(body, body_len, 0, NULL);
        if (!json_is_object(args)) {
            json_decref(args);
            return SCAN_BAD;
        }
        r = add_call(tp, name, name_len, args);
        if (r != SCAN_DONE) return r;
        i = (size_t)ce + strlen(HX_DS_CALL_END);
    }
    return r;
}

/* A Python single-quoted string at s[a] (its closing quote at s[b - 1]) as a JSON string: the
 * escapes \', \\, \n and \t are decoded, any other escaped byte is kept as written. */
static json_t *py_single_quoted(const char *s, size_t a, size_t b)
{
    char *tmp = hx_alloc(b - a);
    if (!tmp) return NULL;
    size_t m = 0;
    for (size_t i = a + 1; i + 1 < b; i++) {
        char c = s[i];
        if (c == '\\' && i + 2 < b) {
            c = s[++i];
            if (c == 'n')
                c = '\n';
            else if (c == 't')
                c = '\t';
        }
        tmp[m++] = c;
    }
    json_t *v = json_stringn(tmp, m);
    hx_free(tmp);
    return v;
}

/* One Python-style argument value at s[*i]: JSON, a single-quoted string, or True/False/None.
 * New reference, or NULL when it is none of these. */
static json_t *py_value(const char *s, size_t n, size_t *i)
{
    size_t a = *i, b;
    if (a < n && (s[a] == '"' || s[a] == '\'')) {
        for (b = a + 1; b < n && s[b] != s[a]; b++)
            if (s[b] == '\\') b++;
        if (b >= n) return NULL;
        *i = ++b;
        if (s[a] == '\'') return py_single_quoted(s, a, b);
    } else if (a < n && (s[a] == '{' || s[a] == '[')) {
        size_t end;
        if (json_span(s + a, n - a, &end) != SCAN_DONE) return NULL;
        *i = b = a + end;
    } else {
        for (b = a; b < n && s[b] != ',' && s[b] != ')' && !is_ws(s[b]); b++) {
        }
        *i = b;
        if (b - a == 4 && memcmp(s + a, "True", 4) == 0) return json_true();
        if (b - a == 5 && memcmp(s + a, "False", 5) == 0) return json_false();
        if (b - a == 4 && memcmp(s + a, "None", 4) == 0) return json_null();
    }
    return json_loadb(s + a, b - a, JSON_DECODE_ANY, NULL);
}

/* Python call expressions N(k=v, ...) filling s[0..n), separated by whitespace, or by commas
 * when comma is set (the inside of a Python list). DONE with at least one call, else BAD. */
static int py_calls(hx_toolcall_parser *tp, const char *s, size_t n, bool comma)
{
    size_t i = 0;
    int    r = SCAN_BAD;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i == n) break;
        if (comma && r == SCAN_DONE) {
            if (s[i] != ',') return SCAN_BAD;
            i = skip_ws(s, n, i + 1);
        }
        const size_t name0 = i;
        while (i < n && is_ident(s[i]))
            i++;
        if (i == name0 || i == n || s[i] != '(') return SCAN_BAD;
        const size_t name1 = i++;
        json_t      *args = json_object();
        if (!args) return SCAN_NOMEM;
        for (;;) {
            i = skip_ws(s, n, i);
            if (i < n && s[i] == ')') {
                i++;
                break;
            }
            const size_t key0 = i;
            while (i < n && is_ident(s[i]))
                i++;
            char key[256];
            if (i == key0 || i - key0 >= sizeof key) goto bad;
            memcpy(key, s + key0, i - key0);
            key[i - key0] = '\0';
            i = skip_ws(s, n, i);
            if (i == n || s[i] != '=') goto bad;
            i = skip_ws(s, n, i + 1);
            json_t *v = py_value(s, n, &i);
            if (!v || json_object_set_new(args, key, v) != 0) goto bad;
            i = skip_ws(s, n, i);
            if (i < n && s[i] == ',')
                i++;
            else if (!(i < n && s[i] == ')'))
                goto bad;
        }
        r = add_call(tp, s + name0, name1 - name0, args);
        if (r != SCAN_DONE) return r;
        continue;
    bad:
        json_decref(args);
        return SCAN_BAD;
    }
    return r;
}

/* ```tool_code\nN(k=v, ...)\n...``` : one call per Python call expression. */
static int scan_gemma(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    const size_t    k = strlen("```tool_code");
    const ptrdiff_t e = find_from(s, n, k, "```");
    if (e < 0) return SCAN_MORE;
    *used = (size_t)e + 3;
    return py_calls(tp, s + k, (size_t)e - k, false);
}

/* [N(k=v, ...), ...] as the whole reply: a Python list of calls. Brackets are matched the JSON
 * way (double-quoted strings skipped), which is exact for the JSON values templates render. */
static int scan_pythonic(hx_toolcall_parser *tp, const char *s, size_t n, size_t *used)
{
    size_t end;
    if (json_span(s, n, &end) != SCAN_DONE) return SCAN_MORE;
    *used = end;
    return py_calls(tp, s + 1, end - 2, true);
}

/* ---- the family table ---- */

/* One family per row, aligned (STYLE 54). Columns: name, start markers with their scanners,
 * marker count, the first byte of a bare call, ';' between calls. */
/* clang-format off */
static const family_def families[HX_TOOLCALL_COUNT] = {
    [HX_TOOLCALL_GENERIC]     = {"generic",     {{"<tool_call>", scan_hermes}},    1, '{', false},
    [HX_TOOLCALL_HERMES]      = {"hermes",      {{"<tool_call>", scan_hermes}},    1, 0,   false},
    [HX_TOOLCALL_QWEN3_CODER] = {"qwen3_coder", {{"<tool_call>", scan_qwen3_coder},
                                                 {"<function=",  scan_xml_bare}},  2, 0,   false},
    [HX_TOOLCALL_LLAMA3]      = {"llama3",      {{"<|python_tag|>", scan_llama}},  1, '{', true},
    [HX_TOOLCALL_MISTRAL]     = {"mistral",     {{"[TOOL_CALLS]", scan_mistral}},  1, 0,   false},
    [HX_TOOLCALL_GEMMA]       = {"gemma",       {{"```tool_code", scan_gemma}},    1, 0,   false},
    [HX_TOOLCALL_DEEPSEEK_V3] = {"deepseek_v3", {{HX_DS_CALLS_BEGIN, scan_deepseek}}, 1, 0,   false},
    [HX_TOOLCALL_PYTHONIC]    = {"pythonic",    {{NULL, NULL}},                    0, '[', false},
};
/* clang-format on */

const char *hx_toolcall_family_name(hx_toolcall_family f)
{
    return (unsigned)f < HX_TOOLCALL_COUNT ? families[f].name : "?";
}

hx_toolcall_family hx_toolcall_detect(const char *tpl, const char *arch)
{
    if (tpl) {
        /* Most specific first: Qwen3-Coder's template also says <tool_call>, and a Llama template
         * may quote JSON examples. */
        if (strstr(tpl, "<function=")) return HX_TOOLCALL_QWEN3_CODER;
        /* The pythonic Llama 3.2/4 and Gemma 3 templates describe the list format in prose; the
         * Llama ones also say ipython. */
        if (strstr(tpl, "[func_name1(")) return HX_TOOLCALL_PYTHONIC;
        if (strstr(tpl, "tool\xe2\x96\x81"
                        "calls\xe2\x96\x81"
                        "begin"))
            return HX_TOOLCALL_DEEPSEEK_V3;
        if (strstr(tpl, "[TOOL_CALLS]")) return HX_TOOLCALL_MISTRAL;
        if (strstr(tpl, "<tool_call>")) return HX_TOOLCALL_HERMES;
        if (strstr(tpl, "<|python_tag|>") || strstr(tpl, "Environment: ipython") ||
            (strstr(tpl, "<|start_header_id|>") && strstr(tpl, "ipython")))
            return HX_TOOLCALL_LLAMA3;
        if (strstr(tpl, "tool_code")) return HX_TOOLCALL_GEMMA;
    }
    if (arch) {
        if (strncmp(arch, "qwen", 4) == 0) return HX_TOOLCALL_HERMES;
        if (strncmp(arch, "llama", 5) == 0) return HX_TOOLCALL_LLAMA3;
        if (strncmp(arch, "mistral", 7) == 0) return HX_TOOLCALL_MISTRAL;
        if (strncmp(arch, "gemma", 5) == 0) return HX_TOOLCALL_GEMMA;
        if (strncmp(arch, "deepseek", 8) == 0) return HX_TOOLCALL_DEEPSEEK_V3;
    }
    return HX_TOOLCALL_GENERIC;
}

/* ---- lifetime ---- */

hx_toolcall_params hx_toolcall_params_default(void)
{
    return (hx_toolcall_params){.family = HX_TOOLCALL_GENERIC, .seed = 0};
}

hx_status hx_toolcall_init(const hx_toolcall_params *p, hx_toolcall_parser **out, hx_err *err)
{
    if ((unsigned)p->family >= HX_TOOLCALL_COUNT)
        return hx_err_set(err, HX_E_INVALID, "tool-call family: expected 0..%d, found %d",
                          HX_TOOLCALL_COUNT - 1, (int)p->family);
    hx_toolcall_parser *tp = hx_calloc(1, sizeof *tp);
    if (!tp) return hx_err_set(err, HX_E_NOMEM, "tool-call parser: out of memory");
    tp->def = &families[p->family];
    tp->seed = p->seed;
    tp->at_boundary = true;
    *out = tp;
    return HX_OK;
}

void hx_toolcall_free(hx_toolcall_parser *tp)
{
    if (!tp) return;
    tp->n_emitted = 0;
    rollback(tp);
    hx_free(tp->calls);
    hx_free(tp->buf);
    hx_free(tp);
}

int32_t hx_toolcall_count(const hx_toolcall_parser *tp)
{
    return tp->n_emitted;
}

const hx_toolcall *hx_toolcall_get(const hx_toolcall_parser *tp, int32_t i)
{
    HX_ASSERT(i >= 0 && i < tp->n_emitted);
    return &tp->calls[i];
}

/* ---- core ---- */

static bool emit_content(const char *s, size_t n, hx_toolcall_cb cb, void *user)
{
    if (n == 0) return true;
    const hx_toolcall_event ev = {.kind = HX_TOOLCALL_EV_CONTENT, .index = -1, .text = s, .len = n};
    return cb(user, &ev);
}

/* Sends the events of the calls a body just completed and makes them final. */
static bool emit_calls(hx_toolcall_parser *tp, hx_toolcall_cb cb, void *user)
{
    bool ok = true;
    for (; tp->n_emitted < tp->n_calls; tp->n_emitted++) {
        const hx_toolcall *c = &tp->calls[tp->n_emitted];
        hx_toolcall_event  ev = {.kind = HX_TOOLCALL_EV_CALL_START,
                                 .index = tp->n_emitted,
                                 .id = c->id,
                                 .name = c->name};
        ok = ok && cb(user, &ev);
        ev = (hx_toolcall_event){.kind = HX_TOOLCALL_EV_CALL_ARGS,
                                 .index = tp->n_emitted,
                                 .text = c->arguments,
                                 .len = c->arguments_len};
        ok = ok && cb(user, &ev);
        ev = (hx_toolcall_event){.kind = HX_TOOLCALL_EV_CALL_END, .index = tp->n_emitted};
        ok = ok && cb(user, &ev);
    }
    return ok;
}

/* The marker s[0..n) starts with: its index; -2 when s is a proper prefix of one (wait for
 * more); -1 for none. */
static int marker_at(const family_def *d, const char *s, size_t n)
{
    int r = -1;
    for (int m = 0; m < d->n_markers; m++) {
        if (starts(s, n, d->markers[m].marker)) return m;
        if (partial(s, n, d->markers[m].marker)) r = -2;
    }
    return r;
}

/* Handles r->buf: emits what is certain, keeps the rest at its front. With final nothing is
 * kept: unfinished markup is content. */
static hx_status drain(hx_toolcall_parser *tp, bool final, hx_toolcall_cb cb, void *user)
{
    const family_def *d = tp->def;
    size_t            pos = 0;
    bool              ok = true, nomem = false;
    if (tp->len == 0 && !tp->in_body) return HX_OK; /* nothing held (buf may still be NULL) */
    while (ok) {
        const char  *s = tp->buf + pos;
        const size_t n = tp->len - pos;
        if (tp->in_body) {
            /* The spacing before the markup stays in the buffer until the body is judged: a
             * malformed body is content together with it. */
            const size_t  skip = tp->body_skip;
            size_t        used = 0;
            const scan_fn scan =
                tp->body_marker >= 0 ? d->markers[tp->body_marker].scan : scan_bare;
            /* Every markup ends with one of the closing bytes, so a chunk without one cannot
             * complete the body: skipping the rescan keeps a long call linear in practice. */
            if (!final && tp->body_seen > 0 && n - skip <= HX_TOOLCALL_BODY_MAX &&
                !has_closer(s + skip + tp->body_seen, n - skip - tp->body_seen)) {
                tp->body_seen = n - skip;
                break;
            }
            int r = scan(tp, s + skip, n - skip, &used);
            if (r == SCAN_NOMEM) {
                /* The body stays in the buffer: the bytes before it were emitted and must not be
                 * emitted again by a later call. */
                rollback(tp);
                nomem = true;
                break;
            }
            /* Markup longer than HX_TOOLCALL_BODY_MAX is given up on: it is content. */
            if (r == SCAN_MORE && !final && n - skip <= HX_TOOLCALL_BODY_MAX) {
                tp->body_seen = n - skip;
                break;
            }
            if (r == SCAN_MORE) {
                r = SCAN_BAD;
                used = n - skip;
            }
            tp->in_body = false;
            tp->body_skip = 0;
            tp->body_seen = 0;
            if (r == SCAN_DONE) {
                ok = emit_calls(tp, cb, user);
                tp->at_boundary = true;
            } else {
                rollback(tp);
                HX_ASSERT(used > 0 && used <= n - skip);
                ok = emit_content(s, skip + used, cb, user);
                tp->at_boundary = false;
                if (tp->body_marker < 0) tp->bare_off = true;
            }
            pos += skip + used;
            continue;
        }
        if (n == 0) break;
        if (tp->at_boundary) {
            size_t j = 0;
            while (j < n && (is_ws(s[j]) || (d->semicolon && tp->n_calls > 0 && s[j] == ';')))
                j++;
            /* Spacing is held only up to a bound, then it is plain content. */
            if (j == n && n > HX_TOOLCALL_SPACING_MAX) {
                tp->at_boundary = false;
                continue;
            }
            if (j == n) {
                if (!final) break;
                /* Spacing after the last call is markup; a reply of only whitespace is not. */
                if (tp->n_calls == 0) ok = emit_content(s, n, cb, user);
                pos += n;
                break;
            }
            const int m = marker_at(d, s + j, n - j);
            if (m >= 0 || (d->bare && !tp->bare_off && s[j] == d->bare)) {
                tp->body_skip = j;
                tp->in_body = true;
                tp->body_marker = m >= 0 ? m : -1;
                continue;
            }
            if (m == -2 && !final) break;
            tp->at_boundary = false;
        }
        /* Plain content: up to the earliest marker, or all but a possible marker prefix. */
        size_t i = 0;
        int    m = -1;
        for (; i < n && m < 0; i++) {
            m = marker_at(d, s + i, n - i);
            if (m == -2) m = -1;
        }
        if (m >= 0) {
            i--;
            ok = emit_content(s, i, cb, user);
            pos += i;
            tp->in_body = true;
            tp->body_marker = m;
            continue;
        }
        size_t keep = 0;
        if (!final) {
            for (size_t t = n < MARKER_MAX ? n : MARKER_MAX; t > 0 && keep == 0; t--)
                if (marker_at(d, s + n - t, t) == -2) keep = t;
            keep += utf8_tail(s, n - keep);
        }
        ok = emit_content(s, n - keep, cb, user);
        pos += n - keep;
        break;
    }
    memmove(tp->buf, tp->buf + pos, tp->len - pos);
    tp->len -= pos;
    return nomem ? HX_E_NOMEM : ok ? HX_OK : HX_E_CANCELLED;
}

hx_status hx_toolcall_feed(hx_toolcall_parser *tp, const char *text, size_t len, hx_toolcall_cb cb,
                           void *user)
{
    HX_ASSERT(!tp->finished);
    if (len == 0) return HX_OK;
    if (tp->len + len > tp->cap) {
        const size_t cap = (tp->len + len) * 2;
        char        *b = hx_realloc(tp->buf, cap);
        if (!b) return HX_E_NOMEM;
        tp->buf = b;
        tp->cap = cap;
    }
    memcpy(tp->buf + tp->len, text, len);
    tp->len += len;
    return drain(tp, false, cb, user);
}

hx_status hx_toolcall_finish(hx_toolcall_parser *tp, hx_toolcall_cb cb, void *user)
{
    HX_ASSERT(!tp->finished);
    tp->finished = true;
    return drain(tp, true, cb, user);
}
