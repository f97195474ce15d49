/* hub_http.h - HTTP requests to the Hugging Face hub for `hearth get`, over libcurl.
 *
 * One connection handle (kept alive between requests). Redirects are followed here, not by
 * libcurl, so the rule for the token is in one place: the Authorization header goes only to the
 * endpoint's own origin (scheme, host and port), never to the CDN a file redirects to. A HEAD
 * stops at a redirect to another origin, as huggingface_hub's does: that response carries the
 * file's X-Linked-Etag and X-Linked-Size. Only src/cli links libcurl. */
#ifndef HX_CLI_HUB_HTTP_H
#define HX_CLI_HUB_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct hx_hub_http hx_hub_http;

/* The headers of the last response of a request (after redirects). */
typedef struct {
    long    status;           /* HTTP status; 0 before any response */
    char    etag[200];        /* ETag, raw */
    char    linked_etag[200]; /* X-Linked-Etag, raw (the sha256 of an LFS file) */
    char    commit[80];       /* X-Repo-Commit */
    char    error[240];       /* X-Error-Message, else the start of an error body */
    int64_t linked_size;      /* X-Linked-Size, -1 when absent */
    int64_t content_length;   /* Content-Length, -1 when absent */
    int64_t range_start;      /* first byte of Content-Range, -1 when absent */
} hx_hub_resp;

/* Receives the body of a 2xx response as it arrives; resp is the response's headers. Returns
 * false to stop the transfer (the callback records why in its own error). */
typedef bool (*hx_hub_body_fn)(const void *data, size_t n, const hx_hub_resp *resp, void *user);

/* endpoint: "https://huggingface.co" (no trailing slash needed); token: NULL or the bearer
 * token. HX_E_IO when libcurl cannot start. */
hx_status hx_hub_http_open(const char *endpoint, const char *token, hx_hub_http **out, hx_err *err);
void      hx_hub_http_close(hx_hub_http *h); /* accepts NULL */

/* GET url into a new hx_alloc'd, NUL-terminated buffer (*body, *len) of at most max_bytes,
 * following redirects. A non-2xx status is not an error here: resp->status says it. HX_E_IO
 * for a transfer that failed, naming the url. */
hx_status hx_hub_http_get(hx_hub_http *h, const char *url, size_t max_bytes, char **body,
                          size_t *len, hx_hub_resp *resp, hx_err *err);

/* HEAD url, following redirects within the endpoint's origin only. */
hx_status hx_hub_http_head(hx_hub_http *h, const char *url, hx_hub_resp *resp, hx_err *err);

/* GET url from byte `from` (a Range request when from > 0), following redirects; the body of
 * the final 2xx response goes to fn. HX_E_IO when the transfer breaks off (the message says how
 * many bytes arrived), stalls for a minute, or fn stops it (fn's error is kept, being first). */
hx_status hx_hub_http_download(hx_hub_http *h, const char *url, int64_t from, hx_hub_body_fn fn,
                               void *user, hx_hub_resp *resp, hx_err *err);

#endif
