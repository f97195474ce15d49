/* http.c - the HTTP/1.1 layer of `hearth serve` on libmicrohttpd (see http.h for the contract).
 *
 * Owns: the listening socket (bound here so a taken port gives a precise error, then handed to
 * MHD), the MHD daemon and its thread per connection, and one hx_http_req per request.
 * Does not own: routes, handlers or the error body shape (the config's), nor any JSON.
 *
 * Invariants: a request's hx_http_req lives until both MHD has ended the request (notify
 * completed) and MHD has dropped the streamed response, if any; whichever happens last frees it,
 * calls stream_free exactly once and prints the log line. MHD calls every callback of one
 * connection on that connection's thread, except that hx_http_close may run the last release on
 * the closing thread once the connection threads are joined. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "serve/http.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/alloc.h"

/* MHD keeps a request's headers and its own write buffer in one pool per connection; 64 KiB
 * leaves room for about 32 KiB of request headers, and MHD itself refuses larger ones. */
#define HTTP_CONN_MEMORY_BYTES ((size_t)64 * 1024)

/* Headers every CORS preflight is allowed; the request's own list is appended. */
#define HTTP_CORS_HEADERS "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta"
#define HTTP_CORS_METHODS "GET, POST, DELETE, OPTIONS"

/* Termination code before MHD has reported one. */
#define HTTP_TERM_NONE (-1)

/* ---- types ---- */

struct hx_http {
    const hx_http_config *cfg;  /* borrowed; outlives the server */
    struct MHD_Daemon    *mhd;
    int                   port; /* the port actually bound */
    bool                  quiesced;
    atomic_int            n_live; /* requests not yet freed (handler or stream still running) */
};

/* One request. Owned by MHD's connection thread while the request runs; the two references
 * (the request itself, and the streamed response while MHD holds it) decide who frees it. */
struct hx_http_req {
    hx_http               *http;
    struct MHD_Connection *conn;     /* NULL once MHD ended the request: its values are gone */
    atomic_int             refs;
    atomic_bool            ended;    /* MHD ended the request; client_gone answers true */
    int                    fd;       /* the connection's socket, for client_gone */
    char                  *method;   /* copies: the log line outlives MHD's pool */
    char                  *path;
    hx_http_buf            body;     /* always NUL-terminated once the request is routed */
    bool                   too_large;
    int                    status;   /* queued status; 0: none queued */
    struct timespec        t0;
    atomic_int_least64_t   n_tok_in, n_tok_out;
    int                    term;     /* MHD_RequestTerminationCode, or HTTP_TERM_NONE */

    /* The streamed body, if the handler set one. */
    hx_http_stream_fn      stream;
    void                  *stream_state;
    hx_http_stream_free_fn stream_free;
    hx_http_buf            out;      /* bytes from stream not yet handed to MHD */
    size_t                 out_off;
    bool                   stream_more; /* the stream fn has not returned false yet */
    bool                   stream_eos;  /* we told MHD the body ended normally */
};

/* ---- buffers and responses ---- */

/* Makes room for n more bytes plus the NUL that keeps the buffer usable as a C string. */
static bool buf_reserve(hx_http_buf *b, size_t n)
{
    if (n > SIZE_MAX - 1 - b->len) return false;
    size_t need = b->len + n + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *d = hx_realloc(b->data, cap);
    if (!d) return false;
    b->data = d;
    b->cap = cap;
    return true;
}

bool hx_http_buf_append(hx_http_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n)) return false;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool hx_http_buf_printf(hx_http_buf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    bool ok = n >= 0 && buf_reserve(b, (size_t)n);
    if (ok) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    va_end(ap);
    return ok;
}

void hx_http_resp_header(hx_http_resp *r, const char *name, const char *value)
{
    if (r->n_headers < 0 || r->n_headers >= HX_HTTP_MAX_HEADERS) return;
    r->header_names[r->n_headers] = name;
    snprintf(r->header_values[r->n_headers], sizeof r->header_values[0], "%s",
             value ? value : "");
    r->n_headers++;
}

/* ---- the request, for handlers ---- */

const char *hx_http_req_method(const hx_http_req *r) { return r->method; }
const char *hx_http_req_path(const hx_http_req *r) { return r->path; }

const char *hx_http_req_header(const hx_http_req *r, const char *name)
{
    if (!r->conn) return NULL;
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *hx_http_req_query(const hx_http_req *r, const char *key)
{
    if (!r->conn) return NULL;
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *hx_http_req_body(const hx_http_req *r, size_t *len)
{
    if (len) *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

/* A hang-up, an error, or an orderly EOF means gone. Readable bytes that are not EOF are the
 * next pipelined request of a keep-alive client, and do not. hx_http_close shuts every
 * connection down, which shows here as a hang-up, so a waiting stream also ends on close. */
bool hx_http_req_client_gone(hx_http_req *r)
{
    if (atomic_load_explicit(&r->ended, memory_order_acquire) || r->fd < 0) return true;
    struct pollfd p = {.fd = r->fd, .events = POLLIN | POLLRDHUP};
    int n = poll(&p, 1, 0);
    if (n <= 0) return false; /* nothing pending, or EINTR: ask again later */
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t k = recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0) return true;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
}

void hx_http_req_set_tokens(hx_http_req *r, int64_t in, int64_t out)
{
    atomic_store_explicit(&r->n_tok_in, in, memory_order_relaxed);
    atomic_store_explicit(&r->n_tok_out, out, memory_order_relaxed);
}

/* ---- request lifetime ---- */

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Copies src into dst (cap bytes, NUL-terminated, cut if longer) with every byte outside
 * printable ASCII, and the backslash, written as \xHH. */
static void log_escape(const char *src, char *dst, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 5 < cap; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '\\') {
            dst[o++] = (char)*p;
        } else {
            dst[o++] = '\\', dst[o++] = 'x';
            dst[o++] = hex[*p >> 4], dst[o++] = hex[*p & 15];
        }
    }
    dst[o] = '\0';
}

/* Drops one reference; the last one ends the stream (exactly once, since only one caller can
 * take refs to zero), prints the log line and frees. */
static void req_release(hx_http_req *r)
{
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
    if (r->stream_free) {
        bool completed = r->stream_eos && r->term == (int)MHD_REQUEST_TERMINATED_COMPLETED_OK;
        r->stream_free(r->stream_state, completed);
    }
    if (r->http->cfg->log && r->status != 0) {
        /* One fprintf per line, so lines of concurrent requests do not interleave. Method and
         * path come from the client: escaped, they cannot forge a line or drive the terminal. */
        char method[64], path[1024];
        log_escape(r->method, method, sizeof method);
        log_escape(r->path, path, sizeof path);
        fprintf(stderr, "%s %s %d in=%" PRId64 " out=%" PRId64 " %.1fms\n", method, path,
                r->status, (int64_t)atomic_load_explicit(&r->n_tok_in, memory_order_relaxed),
                (int64_t)atomic_load_explicit(&r->n_tok_out, memory_order_relaxed),
                ms_since(&r->t0));
    }
    atomic_int *n_live = &r->http->n_live;
    hx_free(r->out.data);
    hx_free(r->body.data);
    hx_free(r->path);
    hx_free(r->method);
    hx_free(r);
    atomic_fetch_sub_explicit(n_live, 1, memory_order_release);
}

/* MHD_OPTION_NOTIFY_COMPLETED: MHD is done with the request, whether it completed, the client
 * left, the connection timed out or the daemon is stopping. Called once per request that reached
 * the access handler, on the connection's thread, before MHD drops its response. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    hx_http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    r->term = (int)toe;
    r->conn = NULL; /* MHD frees the request's headers after this returns */
    atomic_store_explicit(&r->ended, true, memory_order_release);
    req_release(r);
}

/* ---- streamed bodies ---- */

/* MHD's content reader: hands out what the stream fn produced, asking it for more (it blocks
 * until it has some) whenever the buffer is drained. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    hx_http_req *r = cls;
    while (r->out_off == r->out.len) {
        if (!r->stream_more) {
            /* A stream that stopped because its client left did not complete: end with an
             * error so MHD does not report the request as a success. */
            if (hx_http_req_client_gone(r)) return MHD_CONTENT_READER_END_WITH_ERROR;
            r->stream_eos = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        r->out.len = r->out_off = 0;
        if (r->out.data) r->out.data[0] = '\0';
        r->stream_more = r->stream(r->stream_state, &r->out);
    }
    size_t n = r->out.len - r->out_off;
    if (n > max) n = max;
    memcpy(buf, r->out.data + r->out_off, n);
    r->out_off += n;
    return (ssize_t)n;
}

/* MHD dropped the streamed response: it will read no more, so its reference goes. */
static void stream_response_free(void *cls) { req_release(cls); }

/* ---- responses ---- */

static void free_body(void *p) { hx_free(p); }

/* Sends resp (taking its body and stream) with the CORS header and the handler's headers.
 * A stream's state is ended by req_release in every case, including failure here. */
static enum MHD_Result send_resp(hx_http_req *r, hx_http_resp *resp)
{
    struct MHD_Response *m = NULL;
    int status = resp->status > 0 ? resp->status : 500;
    if (status < 100 || status > 999) status = 500;

    if (resp->stream) {
        r->stream = resp->stream;
        r->stream_state = resp->stream_state;
        r->stream_free = resp->stream_free;
        r->stream_more = true;
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the response's */
        m = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, r,
                                              stream_response_free);
        if (!m) req_release(r);
        hx_free(resp->body);
    } else if (resp->body && resp->body_len) {
        m = MHD_create_response_from_buffer_with_free_callback(resp->body_len, resp->body,
                                                               free_body);
        if (!m) hx_free(resp->body);
    } else {
        hx_free(resp->body);
        m = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    }
    resp->body = NULL;
    if (!m) return MHD_NO; /* out of memory: MHD closes the connection */

    MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : "application/json");
    MHD_add_response_header(m, "Access-Control-Allow-Origin", "*");
    if (resp->stream) {
        MHD_add_response_header(m, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(m, "X-Accel-Buffering", "no"); /* nginx: do not buffer */
    }
    char expose[256] = "";
    size_t expose_len = 0;
    for (int i = 0; i < resp->n_headers && i < HX_HTTP_MAX_HEADERS; i++) {
        if (!resp->header_names[i]) continue;
        MHD_add_response_header(m, resp->header_names[i], resp->header_values[i]);
        int k = snprintf(expose + expose_len, sizeof expose - expose_len, "%s%s",
                         expose_len ? ", " : "", resp->header_names[i]);
        if (k > 0 && (size_t)k < sizeof expose - expose_len) expose_len += (size_t)k;
    }
    /* Browsers hide non-simple response headers (Retry-After, ...) from scripts otherwise. */
    if (expose_len) MHD_add_response_header(m, "Access-Control-Expose-Headers", expose);

    r->status = status;
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)status, m);
    MHD_destroy_response(m); /* the connection keeps its own reference */
    return ok;
}

/* An error the layer raises itself, with its body from the config's error fn. */
static enum MHD_Result send_error(hx_http_req *r, int status, const char *message,
                                  const char *hdr_name, const char *hdr_value)
{
    const hx_http_config *cfg = r->http->cfg;
    hx_http_resp resp;
    memset(&resp, 0, sizeof resp);
    if (cfg->error) {
        cfg->error(cfg->ctx, r->path, status, message, &resp);
    } else {
        size_t n = strlen(message);
        if ((resp.body = hx_alloc(n + 1))) {
            memcpy(resp.body, message, n + 1);
            resp.body_len = n;
        }
        resp.content_type = "text/plain; charset=utf-8";
    }
    if (resp.stream) { /* an error fn must not stream; end its state now */
        if (resp.stream_free) resp.stream_free(resp.stream_state, false);
        resp.stream = NULL;
        resp.stream_free = NULL;
    }
    resp.status = status;
    if (hdr_name) hx_http_resp_header(&resp, hdr_name, hdr_value);
    return send_resp(r, &resp);
}

/* ---- routing ---- */

static bool path_matches(const char *route, const char *path)
{
    size_t n = strlen(route);
    if (n && route[n - 1] == '*') return strncmp(route, path, n - 1) == 0;
    return strcmp(route, path) == 0;
}

/* Compares in time that depends only on the lengths, so the key cannot be guessed byte by
 * byte from response times. */
static bool key_equal(const char *given, const char *key)
{
    size_t n_given = strlen(given), n_key = strlen(key);
    unsigned char diff = (unsigned char)(n_given != n_key);
    for (size_t i = 0; i < n_key; i++) {
        unsigned char g = i < n_given ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

static bool authorized(hx_http_req *r, const char *key)
{
    const char *auth = hx_http_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth) {
        while (*auth == ' ') auth++;
        if (strncasecmp(auth, "Bearer ", 7) == 0) {
            auth += 7;
            while (*auth == ' ') auth++;
            if (key_equal(auth, key)) return true;
        }
    }
    const char *x = hx_http_req_header(r, "x-api-key");
    return x && key_equal(x, key);
}

/* The CORS preflight answer, for any path: browsers send it before a cross-origin POST. */
static enum MHD_Result send_preflight(hx_http_req *r)
{
    struct MHD_Response *m = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!m) return MHD_NO;
    char allow[1024];
    const char *asked = hx_http_req_header(r, "Access-Control-Request-Headers");
    snprintf(allow, sizeof allow, "%s%s%s", HTTP_CORS_HEADERS, asked && *asked ? ", " : "",
             asked ? asked : "");
    MHD_add_response_header(m, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(m, "Access-Control-Allow-Methods", HTTP_CORS_METHODS);
    MHD_add_response_header(m, "Access-Control-Allow-Headers", allow);
    MHD_add_response_header(m, "Access-Control-Max-Age", "86400");
    r->status = MHD_HTTP_NO_CONTENT;
    enum MHD_Result ok = MHD_queue_response(r->conn, MHD_HTTP_NO_CONTENT, m);
    MHD_destroy_response(m);
    return ok;
}

/* The whole body is in: answer preflight, match a route, check the key, run the handler. */
static enum MHD_Result route(hx_http_req *r)
{
    const hx_http_config *cfg = r->http->cfg;
    if (strcmp(r->method, "OPTIONS") == 0) return send_preflight(r);

    const hx_http_route *hit = NULL;
    char   allow[128] = "";
    size_t allow_len = 0;
    bool   path_known = false;
    for (int i = 0; i < cfg->n_routes && !hit; i++) {
        const hx_http_route *rt = &cfg->routes[i];
        if (!path_matches(rt->path, r->path)) continue;
        path_known = true;
        if (strcmp(rt->method, r->method) == 0) {
            hit = rt;
        } else if (!strstr(allow, rt->method)) {
            int k = snprintf(allow + allow_len, sizeof allow - allow_len, "%s%s",
                             allow_len ? ", " : "", rt->method);
            if (k > 0 && (size_t)k < sizeof allow - allow_len) allow_len += (size_t)k;
        }
    }
    if (!hit && !path_known) return send_error(r, MHD_HTTP_NOT_FOUND, "no such endpoint", NULL, NULL);
    if (!hit) {
        char msg[192];
        snprintf(msg, sizeof msg, "method %s is not allowed here (allowed: %s)", r->method, allow);
        return send_error(r, MHD_HTTP_METHOD_NOT_ALLOWED, msg, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (hit->auth && cfg->api_key && cfg->api_key[0] && !authorized(r, cfg->api_key)) {
        return send_error(r, MHD_HTTP_UNAUTHORIZED,
                          "missing or wrong API key (send Authorization: Bearer KEY or x-api-key)",
                          MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }

    hx_http_resp resp;
    memset(&resp, 0, sizeof resp);
    hit->fn(cfg->ctx, r, &resp);
    return send_resp(r, &resp);
}

/* MHD's access handler, called on the connection's thread: first with the headers only (make
 * the request, refuse a declared body over the limit), then with each piece of the body, then
 * once more with none when the body is complete (route). MHD accepts a response only on the
 * first or last call, so a body that outgrows the limit while arriving is read and dropped,
 * and its 413 goes out on the last call. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    hx_http *h = cls;
    hx_http_req *r = *con_cls;

    if (!r) {
        if (!(r = hx_calloc(1, sizeof *r))) return MHD_NO;
        atomic_fetch_add_explicit(&h->n_live, 1, memory_order_relaxed);
        r->http = h;
        r->conn = conn;
        atomic_init(&r->refs, 1); /* the request's; dropped in on_completed */
        atomic_init(&r->ended, false);
        atomic_init(&r->n_tok_in, 0);
        atomic_init(&r->n_tok_out, 0);
        r->term = HTTP_TERM_NONE;
        r->fd = -1;
        clock_gettime(CLOCK_MONOTONIC, &r->t0);
        *con_cls = r; /* from here on_completed frees it */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) r->fd = ci->connect_fd;
        r->method = hx_strdup(method ? method : "");
        r->path = hx_strdup(url ? url : "");
        if (!r->method || !r->path) return MHD_NO;

        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end = NULL;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            /* A malformed length never gets here: MHD answers 400 itself. */
            if (end != cl && (errno == ERANGE || n > (unsigned long long)h->cfg->max_body))
                return send_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large",
                                  NULL, NULL);
        }
        return MHD_YES;
    }

    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0; /* consumed, kept or not */
        if (r->too_large) return MHD_YES;
        if (n > h->cfg->max_body - r->body.len) {
            r->too_large = true;
            hx_free(r->body.data);
            r->body = (hx_http_buf){0};
            return MHD_YES;
        }
        return hx_http_buf_append(&r->body, upload_data, n) ? MHD_YES : MHD_NO;
    }

    if (r->too_large)
        return send_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large", NULL, NULL);
    if (!hx_http_buf_append(&r->body, "", 0)) return MHD_NO; /* NUL-terminates even an empty one */
    return route(r);
}

/* MHD's own messages: the ones a client can cause (bad requests, disconnects) are noise on a
 * server's stderr; the rest (resource limits, failures to accept) are real and kept. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    static const char *const noise[] = {
        "Error processing request", "Too late to send an error", "Not enough memory in pool",
        "without `Host'", "Content-Length' header", "Socket has been disconnected",
        "Connection socket is closed", "closed by remote side", "Failed to send",
        "Processing thread terminating", "Accepted connection", "timed out",
        "application error generating response", /* stream_read, when its client left */
    };
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (size_t i = 0; i < HX_COUNTOF(noise); i++)
        if (strstr(msg, noise[i])) return;
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
    fprintf(stderr, "hearth: http: %s\n", msg);
}

/* ---- lifetime ---- */

/* "[::1]:8080" or "127.0.0.1:8080", for messages. */
static void format_addr(char *buf, size_t size, const char *host, int port)
{
    snprintf(buf, size, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* Binds and listens on host:port, naming the failure precisely. *is_v6 tells MHD the family. */
static hx_status listen_on(const char *host, int port, int *out_fd, bool *is_v6, hx_err *err)
{
    char where[300], port_s[16];
    format_addr(where, sizeof where, host, port);
    snprintf(port_s, sizeof port_s, "%d", port);

    struct addrinfo hints, *res = NULL, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, port_s, &hints, &res);
    if (gai != 0)
        return hx_err_set(err, HX_E_IO, "cannot listen on %s: cannot resolve host '%s': %s",
                          where, host, gai_strerror(gai));
    /* "localhost" may resolve to ::1 and 127.0.0.1; clients try 127.0.0.1 most often. */
    for (ai = res; ai && ai->ai_family != AF_INET; ai = ai->ai_next) {}
    if (!ai) ai = res;

    hx_status st = HX_OK;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
    if (fd < 0) {
        st = hx_err_set(err, HX_E_IO, "cannot listen on %s: socket: %s", where, strerror(errno));
        goto fail;
    }
    int one = 1, zero = 0;
    /* SO_REUSEADDR lets a restarted server bind over TIME_WAIT leftovers; Linux still refuses a
     * second listener on the port, so "in use" stays detectable. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) /* "::" takes IPv4 clients too */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        const char *why = strerror(e), *hint = "";
        if (e == EADDRINUSE) {
            why = "address already in use";
            hint = " (is another server running? choose another with --port)";
        } else if (e == EACCES) {
            hint = " (ports below 1024 need privileges; choose another with --port)";
        } else if (e == EADDRNOTAVAIL) {
            hint = " (no interface has this address; check --host)";
        }
        st = hx_err_set(err, HX_E_IO, "cannot listen on %s: %s%s", where, why, hint);
        goto fail;
    }
    *is_v6 = ai->ai_family == AF_INET6;
    *out_fd = fd;
    freeaddrinfo(res);
    return HX_OK;
fail:
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return st;
}

hx_status hx_http_open(const hx_http_config *cfg, hx_http **out, hx_err *err)
{
    hx_status st = HX_OK;
    int fd = -1;
    bool is_v6 = false;
    const char *host = cfg->host && cfg->host[0] ? cfg->host : "127.0.0.1";
    if (cfg->port < 0 || cfg->port > 65535)
        return hx_err_set(err, HX_E_INVALID, "port %d is out of range (0 to 65535)", cfg->port);
    hx_http *h = hx_calloc(1, sizeof *h);
    if (!h) return hx_err_set(err, HX_E_NOMEM, "http server: out of memory");
    h->cfg = cfg;

    st = listen_on(host, cfg->port, &fd, &is_v6, err);
    if (st != HX_OK) goto fail;

    /* ITC lets quiesce and stop wake the polling thread; POLL lifts select()'s fd limit. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES) flags |= MHD_USE_POLL;
    if (is_v6) flags |= MHD_USE_DUAL_STACK;
    struct MHD_OptionItem opts[8];
    int n_opts = 0;
    opts[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT,
                                             cfg->timeout_s > 0 ? cfg->timeout_s : 0, NULL};
    opts[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                             (intptr_t)HTTP_CONN_MEMORY_BYTES, NULL};
    if (cfg->max_connections > 0)
        opts[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
                                                 cfg->max_connections, NULL};
    opts[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

    /* Function pointers go through the varargs, not MHD_OptionItem's void *, which cannot hold
     * them portably. */
    /* The logger goes first so that MHD prints nothing of its own while parsing the rest. */
    h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                              MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
                              MHD_OPTION_LISTEN_SOCKET, fd,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                              MHD_OPTION_ARRAY, opts,
                              MHD_OPTION_END);
    if (!h->mhd) {
        char where[300];
        format_addr(where, sizeof where, host, cfg->port);
        st = hx_err_set(err, HX_E_IO, "cannot start the HTTP server on %s (libmicrohttpd "
                        "refused to start; see the message above)", where);
        goto fail;
    }
    fd = -1; /* MHD closes it on stop */

    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di && di->port ? di->port : cfg->port;
    *out = h;
    return HX_OK;
fail:
    if (fd >= 0) close(fd);
    hx_free(h);
    return st;
}

int hx_http_port(const hx_http *h) { return h->port; }

void hx_http_quiesce(hx_http *h)
{
    if (!h || h->quiesced) return;
    MHD_socket fd = MHD_quiesce_daemon(h->mhd);
    if (fd != MHD_INVALID_SOCKET) { /* MHD no longer owns it after quiesce */
        /* MHD's polling thread may still be inside poll() on the socket, which keeps it
         * listening past close(); shutdown() stops it listening at once, freeing the port. */
        shutdown(fd, SHUT_RDWR);
        close(fd);
    }
    h->quiesced = true;
}

bool hx_http_drain(hx_http *h, int timeout_ms)
{
    for (int waited = 0;; waited += 10) {
        if (atomic_load_explicit(&h->n_live, memory_order_acquire) == 0) return true;
        if (waited >= timeout_ms) return false;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 10 * 1000000L}, NULL);
    }
}

/* MHD_stop_daemon shuts every connection socket down and joins the connection threads; a stream
 * blocked waiting for the engine must be polling hx_http_req_client_gone (which then answers
 * true) or the join waits for it. Every request then ends through on_completed, so each
 * stream_free runs before this returns. */
void hx_http_close(hx_http *h)
{
    if (!h) return;
    if (h->mhd) MHD_stop_daemon(h->mhd);
    hx_free(h);
}
