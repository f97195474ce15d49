/* http.h - the HTTP/1.1 server under `hearth serve`, on libmicrohttpd.
 *
 * Owns the listening socket and one thread per connection, so a handler may block (waiting for
 * the engine) and a streamed response may wait for its next bytes. For every request it:
 * reads the body whole, refusing more than max_body (413, from Content-Length before reading
 * when the client sends one); answers CORS preflight (OPTIONS) itself and adds CORS headers to
 * every response; checks the API key on routes marked auth (`Authorization: Bearer KEY` or
 * `x-api-key: KEY`, 401 otherwise); matches the route table (404 for an unknown path, 405 for a
 * known path with another method, with an Allow header); and prints one log line on stderr when
 * the request ends (method, path, status, tokens in/out, milliseconds). Errors it raises itself
 * get their body from the error function in the config, so each API keeps its own error shape.
 * It knows nothing of JSON, models or engines.
 *
 * Keep-alive is on; a connection idle for timeout_s seconds is closed (which also bounds a
 * slow client that trickles a request). */
#ifndef HX_SERVE_HTTP_H
#define HX_SERVE_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct hx_http     hx_http;
typedef struct hx_http_req hx_http_req; /* valid in the handler and until stream_free returns */

/* A growable byte buffer that stream functions append to. */
typedef struct {
    char  *data;
    size_t len, cap;
} hx_http_buf;
bool hx_http_buf_append(hx_http_buf *b, const void *p, size_t n); /* false: out of memory */
bool hx_http_buf_printf(hx_http_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A streamed body: called (on the connection's thread) whenever the previous bytes were sent.
 * Appends the next bytes to out, blocking until it has some; returns false when the stream is
 * over (what it appended in that call is still sent). */
typedef bool (*hx_http_stream_fn)(void *state, hx_http_buf *out);
/* Called exactly once when the response ends, whether the stream ran to its end (completed) or
 * the client went away first; frees state. */
typedef void (*hx_http_stream_free_fn)(void *state, bool completed);

#define HX_HTTP_MAX_HEADERS 4

typedef struct {
    int                    status;       /* HTTP status; 0 means 500 */
    const char            *content_type; /* static text; NULL: "application/json" */
    char                  *body;         /* hx_alloc'd, taken by the http layer; NULL: empty */
    size_t                 body_len;
    hx_http_stream_fn      stream;       /* set: a streamed (chunked) body; body is ignored */
    void                  *stream_state;
    hx_http_stream_free_fn stream_free;
    int                    n_headers;    /* extra headers, e.g. Retry-After */
    const char            *header_names[HX_HTTP_MAX_HEADERS]; /* static text */
    char                   header_values[HX_HTTP_MAX_HEADERS][128];
} hx_http_resp;

/* Adds a header to the response (ignored past HX_HTTP_MAX_HEADERS). name is static text. */
void hx_http_resp_header(hx_http_resp *r, const char *name, const char *value);

typedef void (*hx_http_handler)(void *ctx, hx_http_req *req, hx_http_resp *resp);

typedef struct {
    const char     *method; /* "GET", "POST", "DELETE" */
    const char     *path;   /* exact, or a prefix when it ends in '*' ("/v1/models/ *" style) */
    hx_http_handler fn;
    bool            auth;   /* needs the API key when the server has one */
} hx_http_route;

/* Fills resp with an error body for a request to path (the layer's own 401/404/405/413/...). */
typedef void (*hx_http_error_fn)(void *ctx, const char *path, int status, const char *message,
                                 hx_http_resp *resp);

typedef struct {
    const char          *host;            /* "127.0.0.1"; "0.0.0.0" or "::" for all */
    int                  port;            /* 0: any free port (see hx_http_port) */
    size_t               max_body;        /* bytes */
    int                  timeout_s;       /* idle connection timeout */
    int                  max_connections; /* concurrent connections accepted */
    const char          *api_key;         /* NULL or "": no authentication */
    const hx_http_route *routes;
    int                  n_routes;
    hx_http_error_fn     error;
    void                *ctx;             /* passed to handlers and error */
    bool                 log;             /* the per-request line on stderr */
} hx_http_config;

/* Listens and serves until hx_http_close. cfg (and what it points to) must outlive the server.
 * HX_E_IO with a clear message when the address is taken or cannot be bound. */
hx_status hx_http_open(const hx_http_config *cfg, hx_http **out, hx_err *err);
int       hx_http_port(const hx_http *h);   /* the port listened on */
void      hx_http_quiesce(hx_http *h);      /* stops accepting new connections */
/* Waits up to timeout_ms for every request in progress to end (idle keep-alive connections do
 * not count): after the engine was told to stop, this lets streams send their last events.
 * true when none is left. */
bool      hx_http_drain(hx_http *h, int timeout_ms);
/* Closes every connection (streams get their stream_free), joins the threads, frees. NULL ok. */
void      hx_http_close(hx_http *h);

/* ---- the request, for handlers ---- */
const char *hx_http_req_method(const hx_http_req *r);
const char *hx_http_req_path(const hx_http_req *r);                 /* without the query */
const char *hx_http_req_header(const hx_http_req *r, const char *name); /* case-insensitive; NULL */
const char *hx_http_req_query(const hx_http_req *r, const char *key);   /* NULL when absent */
const char *hx_http_req_body(const hx_http_req *r, size_t *len);    /* NUL-terminated; may hold NULs */
/* true once the client has closed its side of the connection (checked without blocking):
 * a handler or stream waiting for the engine polls this to cancel work nobody will read. */
bool        hx_http_req_client_gone(hx_http_req *r);
/* Token counts for the request's log line; may be called until stream_free returns. */
void        hx_http_req_set_tokens(hx_http_req *r, int64_t in, int64_t out);

#endif
