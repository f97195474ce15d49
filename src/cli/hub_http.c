/* hub_http.c - the hub's HTTP requests over one libcurl easy handle (see hub_http.h).
 *
 * Each request is one curl_easy_perform per hop: libcurl's own redirect following is off, and
 * the loop here decides per hop whether the Authorization header goes along (same origin as the
 * endpoint) and, for HEAD, whether to follow at all. Header lines are parsed as they arrive;
 * a status line starts a fresh hx_hub_resp, so 1xx and redirect responses leave nothing behind. */
#define _POSIX_C_SOURCE 200809L
#include "cli/hub_http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "base/path.h"
#include "hearth.h"

#define MAX_REDIRECTS 10

struct hx_hub_http {
    CURL *curl;
    char *endpoint;    /* no trailing slash */
    char  origin[600]; /* "scheme://host:port" of the endpoint, lowercase host */
    char *auth_header; /* "Authorization: Bearer ..." or NULL */
    char  user_agent[64];
    char  curl_err[CURL_ERROR_SIZE];
};

/* What one perform collects: headers, and where the body goes. */
typedef struct {
    hx_hub_resp   *resp;
    hx_hub_body_fn fn; /* 2xx bodies; NULL: discard */
    void          *user;
    bool           stopped; /* fn returned false */
    int64_t        n_body;  /* body bytes handed to fn */
    size_t         n_err;   /* bytes of an error body kept in resp->error */
} hop;

/* "scheme://host:port" of url, host lowercase, the default port filled in. False when url does
 * not parse. */
static bool origin_of(const char *url, char *buf, size_t len)
{
    CURLU *u = curl_url();
    char  *scheme = NULL, *host = NULL, *port = NULL;
    bool   ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
    if (ok) {
        for (char *p = host; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        for (char *p = scheme; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        ok = hx_fmt(buf, len, "%s://%s:%s", scheme, host, port);
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return ok;
}

static bool same_origin(const hx_hub_http *h, const char *url)
{
    char o[600];
    return origin_of(url, o, sizeof o) && strcmp(o, h->origin) == 0;
}

/* Copies a header value (without surrounding blanks and the line end) into out. */
static void header_value(const char *v, size_t n, char *out, size_t len)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n >= len) n = len - 1;
    memcpy(out, v, n);
    out[n] = '\0';
}

static int64_t parse_i64(const char *s)
{
    char     *end;
    long long v = strtoll(s, &end, 10);
    return end == s || v < 0 ? -1 : (int64_t)v;
}

static void resp_reset(hx_hub_resp *r)
{
    memset(r, 0, sizeof *r);
    r->linked_size = r->content_length = r->range_start = -1;
}

static size_t on_header(char *line, size_t size, size_t n, void *user)
{
    hop         *c = user;
    hx_hub_resp *r = c->resp;
    const size_t len = size * n;
    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) { /* a new response begins */
        resp_reset(r);
        const char *sp = memchr(line, ' ', len);
        if (sp) r->status = strtol(sp + 1, NULL, 10);
        c->n_err = 0;
        return len;
    }
    const char *colon = memchr(line, ':', len);
    if (!colon) return len;
    const size_t kn = (size_t)(colon - line), vn = len - kn - 1;
    char         v[256];
    header_value(colon + 1, vn, v, sizeof v);
#define IS(name) (kn == sizeof(name) - 1 && strncasecmp(line, name, kn) == 0)
    if (IS("etag"))
        hx_fmt(r->etag, sizeof r->etag, "%s", v);
    else if (IS("x-linked-etag"))
        hx_fmt(r->linked_etag, sizeof r->linked_etag, "%s", v);
    else if (IS("x-repo-commit"))
        hx_fmt(r->commit, sizeof r->commit, "%s", v);
    else if (IS("x-error-message"))
        hx_fmt(r->error, sizeof r->error, "%s", v);
    else if (IS("x-linked-size"))
        r->linked_size = parse_i64(v);
    else if (IS("content-length"))
        r->content_length = parse_i64(v);
    else if (IS("content-range") && strncasecmp(v, "bytes ", 6) == 0)
        r->range_start = parse_i64(v + 6);
#undef IS
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    hop         *c = user;
    const size_t len = size * n;
    hx_hub_resp *r = c->resp;
    if (r->status >= 200 && r->status < 300) {
        if (!c->fn) return len;
        if (!c->fn(data, len, r, c->user)) {
            c->stopped = true;
            return 0; /* libcurl ends the transfer with CURLE_WRITE_ERROR */
        }
        c->n_body += (int64_t)len;
        return len;
    }
    /* An error body: keep its start for the message when the hub sent no X-Error-Message. */
    if (!(r->status >= 300 && r->status < 400)) {
        size_t room = sizeof r->error - 1 - c->n_err;
        size_t take = len < room ? len : room;
        if (take && (c->n_err > 0 || r->error[0] == '\0')) {
            memcpy(r->error + c->n_err, data, take);
            c->n_err += take;
            r->error[c->n_err] = '\0';
            for (size_t i = 0; i < c->n_err; i++)
                if ((unsigned char)r->error[i] < 0x20) r->error[i] = ' ';
        }
    }
    return len;
}

hx_status hx_hub_http_open(const char *endpoint, const char *token, hx_hub_http **out, hx_err *err)
{
    static bool global_done;
    if (!global_done) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
            return hx_err_set(err, HX_E_IO, "libcurl could not start");
        global_done = true;
    }
    hx_hub_http *h = hx_calloc(1, sizeof *h);
    if (!h) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    size_t n = strlen(endpoint);
    while (n && endpoint[n - 1] == '/')
        n--;
    h->endpoint = hx_strndup(endpoint, n);
    h->curl = curl_easy_init();
    if (!h->endpoint || !h->curl) {
        hx_hub_http_close(h);
        return hx_err_set(err, HX_E_IO, "libcurl could not start");
    }
    if (!origin_of(h->endpoint, h->origin, sizeof h->origin) ||
        (strncmp(h->origin, "http://", 7) != 0 && strncmp(h->origin, "https://", 8) != 0)) {
        hx_hub_http_close(h);
        return hx_err_set(err, HX_E_INVALID, "HF_ENDPOINT '%s' is not an http(s) URL", endpoint);
    }
    if (token && *token) {
        size_t an = strlen(token) + 32;
        if (!(h->auth_header = hx_alloc(an))) {
            hx_hub_http_close(h);
            return hx_err_set(err, HX_E_NOMEM, "out of memory");
        }
        snprintf(h->auth_header, an, "Authorization: Bearer %s", token);
    }
    snprintf(h->user_agent, sizeof h->user_agent, "hearth/%s", hx_version());
    *out = h;
    return HX_OK;
}

void hx_hub_http_close(hx_hub_http *h)
{
    if (!h) return;
    if (h->curl) curl_easy_cleanup(h->curl);
    hx_free(h->endpoint);
    hx_free(h->auth_header);
    hx_free(h);
}

/* One hop: a request to url (HEAD when head), sending the token when auth and a Range from
 * byte `from` when from > 0. Returns the libcurl result; *next gets the redirect target (to be
 * freed with hx_free) when the response is a redirect with a Location. */
static CURLcode perform(hx_hub_http *h, const char *url, bool head, bool auth, int64_t from, hop *c,
                        char **next)
{
    CURL              *k = h->curl;
    struct curl_slist *hdrs = NULL, *t;
    char               range[48];
    *next = NULL;
    curl_easy_reset(k);
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, h->curl_err);
    h->curl_err[0] = '\0';
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(k, CURLOPT_USERAGENT, h->user_agent);
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a transfer below 1 byte/s for 60 s has stalled: end it (the partial file stays) */
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(k, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(k, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, c);
    if (head) curl_easy_setopt(k, CURLOPT_NOBODY, 1L);
    /* sizes and hashes are of the stored bytes: no transfer encoding of the body */
    hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");
    if (hdrs && auth && h->auth_header && (t = curl_slist_append(hdrs, h->auth_header))) hdrs = t;
    if (hdrs) curl_easy_setopt(k, CURLOPT_HTTPHEADER, hdrs);
    if (from > 0) {
        snprintf(range, sizeof range, "%lld-", (long long)from);
        curl_easy_setopt(k, CURLOPT_RANGE, range);
    }
    resp_reset(c->resp);
    c->n_err = 0;
    CURLcode rc = curl_easy_perform(k);
    curl_slist_free_all(hdrs);
    const long st = c->resp->status;
    if (rc == CURLE_OK && (st == 301 || st == 302 || st == 303 || st == 307 || st == 308)) {
        char *loc = NULL; /* absolute, resolved against url by libcurl */
        if (curl_easy_getinfo(k, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
            *next = hx_strdup(loc);
    }
    return rc;
}

/* The request loop: hops until a non-redirect response (or, for HEAD, a redirect to another
 * origin), at most MAX_REDIRECTS times. */
static hx_status request(hx_hub_http *h, const char *url0, bool head, int64_t from, hop *c,
                         hx_err *err)
{
    char *url = hx_strdup(url0);
    if (!url) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    hx_status st = HX_OK;
    for (int hopn = 0;; hopn++) {
        char          *next = NULL;
        const CURLcode rc = perform(h, url, head, same_origin(h, url), from, c, &next);
        if (rc != CURLE_OK) {
            if (c->stopped)
                st = hx_err_set(err, HX_E_IO, "%s: transfer stopped", url);
            else if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR ||
                     rc == CURLE_OPERATION_TIMEDOUT)
                st = hx_err_set(err, HX_E_IO, "%s: the transfer broke off after %lld bytes (%s)",
                                url, (long long)c->n_body,
                                h->curl_err[0] ? h->curl_err : curl_easy_strerror(rc));
            else
                st = hx_err_set(err, HX_E_IO, "%s: %s", url,
                                h->curl_err[0] ? h->curl_err : curl_easy_strerror(rc));
            hx_free(next);
            break;
        }
        if (!next) break;                    /* a final response */
        if (head && !same_origin(h, next)) { /* the CDN: its headers are not the hub's */
            hx_free(next);
            break;
        }
        hx_free(url);
        url = next;
        if (hopn + 1 >= MAX_REDIRECTS) {
            st = hx_err_set(err, HX_E_IO, "%s: more than %d redirects", url0, MAX_REDIRECTS);
            break;
        }
    }
    hx_free(url);
    return st;
}

typedef struct {
    hx_strbuf b;
    size_t    max;
    bool      too_big;
} membuf;

static bool to_mem(const void *data, size_t n, const hx_hub_resp *resp, void *user)
{
    (void)resp;
    membuf *m = user;
    if (n > m->max - m->b.len) {
        m->too_big = true;
        return false;
    }
    return hx_strbuf_put(&m->b, data, n);
}

hx_status hx_hub_http_get(hx_hub_http *h, const char *url, size_t max_bytes, char **body,
                          size_t *len, hx_hub_resp *resp, hx_err *err)
{
    membuf    m = {.max = max_bytes};
    hop       c = {.resp = resp, .fn = to_mem, .user = &m};
    hx_err    e = {0};
    hx_status st = request(h, url, false, 0, &c, &e);
    if (st != HX_OK) {
        hx_free(m.b.data);
        if (m.too_big)
            return hx_err_set(err, HX_E_IO, "%s: the answer is larger than %zu bytes", url,
                              max_bytes);
        return hx_err_set(err, st, "%s", e.msg);
    }
    if (!hx_strbuf_put(&m.b, "", 0)) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    *body = m.b.data;
    *len = m.b.len;
    return HX_OK;
}

hx_status hx_hub_http_head(hx_hub_http *h, const char *url, hx_hub_resp *resp, hx_err *err)
{
    hop c = {.resp = resp};
    return request(h, url, true, 0, &c, err);
}

hx_status hx_hub_http_download(hx_hub_http *h, const char *url, int64_t from, hx_hub_body_fn fn,
                               void *user, hx_hub_resp *resp, hx_err *err)
{
    hop c = {.resp = resp, .fn = fn, .user = user};
    return request(h, url, false, from, &c, err);
}
