/* errors.c - every error body the server sends, in the shape of the API that was asked.
 *
 * The one place error JSON is built (STYLE 56). A failure is a status (hx_status from the
 * adapters and the engine, or an HTTP status from the HTTP layer) plus a message; this file maps
 * it to the HTTP status and to the body each SDK parses:
 *   OpenAI:    {"error":{"message":M,"type":T,"param":P|null,"code":C|null}}
 *   Anthropic: {"type":"error","error":{"type":T,"message":M}}
 * After a stream began, the same body goes out as the final Server-Sent Event. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "base/alloc.h"
#include "serve/adapter.h"

/* What one HTTP status is called in each API. */
typedef struct {
    int         status;
    const char *openai_type, *anthropic_type;
} error_kind;

static const error_kind kinds[] = {
    {400, "invalid_request_error", "invalid_request_error"},
    {401, "authentication_error",  "authentication_error"},
    {403, "permission_error",      "permission_error"},
    {404, "not_found_error",       "not_found_error"},
    {405, "invalid_request_error", "invalid_request_error"},
    {408, "timeout_error",         "timeout_error"},
    {413, "invalid_request_error", "request_too_large"},
    {429, "rate_limit_error",      "rate_limit_error"},
    {503, "server_error",          "overloaded_error"},
};

static const error_kind *kind_of(int status)
{
    for (size_t i = 0; i < HX_COUNTOF(kinds); i++)
        if (kinds[i].status == status) return &kinds[i];
    static const error_kind server = {500, "server_error", "api_error"};
    static const error_kind client = {400, "invalid_request_error", "invalid_request_error"};
    return status >= 400 && status < 500 ? &client : &server;
}

int hx_serve_error_status(hx_status st)
{
    switch (st) {
    case HX_E_INVALID:
    case HX_E_UNSUPPORTED:
    case HX_E_CONTEXT:   return 400;
    case HX_E_NOTFOUND:  return 404;
    case HX_E_BUSY:
    case HX_E_CANCELLED: return 503;
    default:             return 500;
    }
}

/* OpenAI's machine-readable code for a status, or NULL. */
static const char *openai_code(hx_status st, int status)
{
    if (st == HX_E_CONTEXT) return "context_length_exceeded";
    if (st == HX_E_UNSUPPORTED) return "unsupported_parameter";
    if (status == 401) return "invalid_api_key";
    if (status == 404) return "not_found";
    if (status == 413) return "request_too_large";
    return NULL;
}

/* The body for a failure: st is HX_OK when only the HTTP status is known. NULL: OOM. */
static json_t *error_body(hx_api api, hx_status st, int status, const char *msg, const char *param)
{
    const error_kind *k = kind_of(status);
    /* A prompt that leaves no room to generate is refused by memory admission (MISSION.md): its
     * own error type in both shapes, so clients can tell it from a malformed request. */
    const char *type = st == HX_E_CONTEXT ? "memory_admission"
                       : api == HX_API_ANTHROPIC ? k->anthropic_type : k->openai_type;
    if (!msg || !*msg) msg = st != HX_OK ? hx_status_str(st) : "error";
    json_t *m = hx_json_text(msg, strlen(msg));
    if (!m) return NULL;
    if (api == HX_API_ANTHROPIC)
        return json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type,
                         "message", m);
    const char *code = openai_code(st, status);
    return json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", m, "type", type,
                     "param", param && *param ? json_string(param) : json_null(), "code",
                     code ? json_string(code) : json_null());
}

/* Fills resp with status and the body; a body that cannot be built leaves an empty one. */
static void fill(hx_api api, hx_status st, int status, const char *msg, const char *param,
                 hx_http_resp *resp)
{
    resp->status = status;
    resp->content_type = NULL;
    resp->body = NULL;
    resp->body_len = 0;
    json_t *body = error_body(api, st, status, msg, param);
    if (body) {
        const size_t n = json_dumpb(body, NULL, 0, JSON_COMPACT);
        char *p = n ? hx_alloc(n + 1) : NULL;
        if (p && json_dumpb(body, p, n, JSON_COMPACT) == n) {
            p[n] = '\0';
            resp->body = p;
            resp->body_len = n;
        } else {
            hx_free(p);
        }
        json_decref(body);
    }
    if (st == HX_E_BUSY || status == 503) hx_http_resp_header(resp, "Retry-After", "1");
}

void hx_serve_error(hx_api api, hx_status st, const char *msg, const char *param,
                    hx_http_resp *resp)
{
    fill(api, st, hx_serve_error_status(st), msg, param, resp);
}

bool hx_serve_error_event(hx_api api, hx_status st, const char *msg, hx_http_buf *out)
{
    json_t *body = error_body(api, st, hx_serve_error_status(st), msg, NULL);
    if (!body) return false;
    return hx_sse_json(out, api == HX_API_ANTHROPIC ? "error" : NULL, body);
}

/* Paths of the Anthropic API get its error shape; everything else OpenAI's. */
static hx_api api_of_path(const char *path)
{
    return path && strncmp(path, "/v1/messages", 12) == 0 &&
                   (path[12] == '\0' || path[12] == '/' || path[12] == '?')
               ? HX_API_ANTHROPIC
               : HX_API_OPENAI;
}

void hx_serve_http_error(void *ctx, const char *path, int status, const char *message,
                         hx_http_resp *resp)
{
    (void)ctx;
    fill(api_of_path(path), HX_OK, status > 0 ? status : 500, message, NULL, resp);
}
