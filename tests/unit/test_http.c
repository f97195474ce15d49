/* test_http.c - the HTTP layer over real sockets: routing (200/404/405), body limits (413 from
 * Content-Length and from a chunked upload), CORS, API keys, streamed bodies (order, exactly-one
 * stream_free, client disconnects, close with a stream open) and a clear error for a taken port.
 * Every socket read has a deadline, so a broken server fails a case instead of hanging it. */
#define _GNU_SOURCE /* strcasestr */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "serve/http.h"
#include "check.h"

/* ---- what the handlers and streams saw ---- */

static atomic_int  n_stream_free;       /* calls of stream_free */
static atomic_bool last_completed;      /* its completed argument */
static atomic_bool stream_saw_gone;     /* the waiting stream saw client_gone */

typedef struct {
    int  step;
    bool wait_for_gone; /* after the first chunk, wait until the client leaves */
    hx_http_req *req;
} stream_state;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static bool stream_next(void *p, hx_http_buf *out)
{
    stream_state *s = p;
    static const char *const parts[] = {"one\n", "two\n", "three\n"};
    if (s->wait_for_gone) {
        if (s->step++ == 0) return hx_http_buf_append(out, "start\n", 6);
        /* Waits like a stream blocked on the engine, bounded so a bug cannot hang the test. */
        for (double t0 = now_ms(); now_ms() - t0 < 3000;) {
            if (hx_http_req_client_gone(s->req)) {
                atomic_store(&stream_saw_gone, true);
                return false;
            }
            sleep_ms(5);
        }
        return false;
    }
    hx_http_buf_printf(out, "%s", parts[s->step]);
    s->step++;
    hx_http_req_set_tokens(s->req, 3, s->step);
    return s->step < 3;
}

static void stream_done(void *p, bool completed)
{
    atomic_store(&last_completed, completed);
    atomic_fetch_add(&n_stream_free, 1);
    hx_free(p);
}

/* ---- routes ---- */

static void set_body(hx_http_resp *resp, const char *text)
{
    size_t n = strlen(text);
    resp->body = hx_alloc(n + 1);
    memcpy(resp->body, text, n + 1);
    resp->body_len = n;
}

static void on_hello(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx;
    const char *name = hx_http_req_query(req, "name");
    char text[128];
    snprintf(text, sizeof text, "hello%s%s", name ? " " : "", name ? name : "");
    resp->status = 200;
    resp->content_type = "text/plain";
    set_body(resp, text);
    hx_http_resp_header(resp, "X-Test", "yes");
}

static void on_echo(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx;
    size_t n = 0;
    const char *b = hx_http_req_body(req, &n);
    resp->status = 200;
    resp->body = hx_alloc(n + 1);
    memcpy(resp->body, b, n + 1);
    resp->body_len = n;
}

static void on_secret(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx;
    (void)req;
    resp->status = 200;
    set_body(resp, "{\"secret\":true}");
}

static void on_model_delete(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx;
    (void)req;
    resp->status = 200;
    set_body(resp, "{\"deleted\":true}");
}

static void start_stream(hx_http_req *req, hx_http_resp *resp, bool wait_for_gone)
{
    stream_state *s = hx_calloc(1, sizeof *s);
    s->wait_for_gone = wait_for_gone;
    s->req = req;
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->stream = stream_next;
    resp->stream_state = s;
    resp->stream_free = stream_done;
}

static void on_stream(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx;
    start_stream(req, resp, false);
}

static void on_wait(void *ctx, hx_http_req *req, hx_http_resp *resp)
{
    (void)ctx;
    start_stream(req, resp, true);
}

static const hx_http_route routes[] = {
    {"GET",    "/hello",       on_hello,        false},
    {"POST",   "/echo",        on_echo,         false},
    {"GET",    "/secret",      on_secret,       true},
    {"GET",    "/stream",      on_stream,       false},
    {"GET",    "/wait",        on_wait,         false},
    {"DELETE", "/v1/models/*", on_model_delete, false},
};

static void on_error(void *ctx, const char *path, int status, const char *message,
                     hx_http_resp *resp)
{
    (void)ctx;
    char text[512];
    snprintf(text, sizeof text, "{\"error\":{\"status\":%d,\"path\":\"%s\",\"message\":\"%s\"}}",
             status, path, message);
    resp->status = status;
    set_body(resp, text);
}

static hx_http_config test_config(void)
{
    return (hx_http_config){
        .host = "127.0.0.1",
        .port = 0,
        .max_body = 1024,
        .timeout_s = 5,
        .max_connections = 16,
        .routes = routes,
        .n_routes = (int)HX_COUNTOF(routes),
        .error = on_error,
        .log = false,
    };
}

/* ---- a raw-socket client ---- */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Reads into buf until EOF, until `until` appears (when not NULL) or until the deadline.
 * Returns the bytes read; buf is NUL-terminated. */
static size_t read_until(int fd, char *buf, size_t cap, const char *until, int timeout_ms)
{
    size_t len = 0;
    double end = now_ms() + timeout_ms;
    buf[0] = '\0';
    while (len + 1 < cap) {
        if (until && strstr(buf, until)) break;
        int left = (int)(end - now_ms());
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t k = recv(fd, buf + len, cap - 1 - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
        buf[len] = '\0';
    }
    return len;
}

/* Sends one raw request (which should say Connection: close) and reads the whole answer. */
static size_t roundtrip(int port, const char *request, char *buf, size_t cap)
{
    buf[0] = '\0';
    int fd = connect_to(port);
    if (fd < 0) return 0;
    size_t n = send_all(fd, request, strlen(request)) ? read_until(fd, buf, cap, NULL, 2000) : 0;
    close(fd);
    return n;
}

static int status_of(const char *resp)
{
    int st = 0;
    if (sscanf(resp, "HTTP/1.%*d %d", &st) != 1) return 0;
    return st;
}

/* The response body: what follows the blank line. */
static const char *body_of(const char *resp)
{
    const char *p = strstr(resp, "\r\n\r\n");
    return p ? p + 4 : "";
}

/* A case-insensitive "Name: value" search in the response, for header checks. */
#define CHECK_HEADER(resp, line) do { if (!strcasestr((resp), (line))) \
    CHECK_FAIL("response lacks header \"%s\":\n%s", (line), (resp)); } while (0)

/* Cases share one process when the binary runs without arguments. */
static void reset_stream_log(void)
{
    atomic_store(&n_stream_free, 0);
    atomic_store(&last_completed, false);
    atomic_store(&stream_saw_gone, false);
}

static bool wait_for_free(int n, int timeout_ms)
{
    for (double t0 = now_ms(); now_ms() - t0 < timeout_ms; sleep_ms(2))
        if (atomic_load(&n_stream_free) >= n) return true;
    return atomic_load(&n_stream_free) >= n;
}

/* ---- cases ---- */

static int test_get_route_answers_200_with_body(void)
{
    hx_http_config cfg = test_config();
    cfg.log = true; /* exercises the log line; it goes to stderr */
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    CHECK(hx_http_port(h) > 0);
    static char buf[8192];

    roundtrip(hx_http_port(h), "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_STR(body_of(buf), "hello");
    CHECK_HEADER(buf, "Content-Type: text/plain");
    CHECK_HEADER(buf, "X-Test: yes");

    roundtrip(hx_http_port(h), "GET /hello?name=bob HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_STR(body_of(buf), "hello bob");

    /* A body under the limit reaches the handler whole; JSON is the default content type. */
    roundtrip(hx_http_port(h), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n"
              "Connection: close\r\n\r\n{\"a\":\"xyz\"}", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_STR(body_of(buf), "{\"a\":\"xyz\"}");
    CHECK_HEADER(buf, "Content-Type: application/json");

    /* Two requests on one keep-alive connection, sent back to back, both get answers. */
    int fd = connect_to(hx_http_port(h));
    CHECK(fd >= 0);
    const char *two = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"
                      "GET /hello?name=2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    CHECK(send_all(fd, two, strlen(two)));
    read_until(fd, buf, sizeof buf, NULL, 2000);
    close(fd);
    CHECK_CONTAINS(buf, "\r\n\r\nhello");
    CHECK_CONTAINS(buf, "hello 2");
    hx_http_close(h);
    return 0;
}

static int test_unknown_path_is_404_from_error_fn(void)
{
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    roundtrip(hx_http_port(h), "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 404);
    CHECK_CONTAINS(body_of(buf), "\"status\":404");
    CHECK_CONTAINS(body_of(buf), "\"path\":\"/nope\"");
    CHECK_HEADER(buf, "Content-Type: application/json");
    /* A prefix route matches only under its prefix. */
    roundtrip(hx_http_port(h), "DELETE /v1/model HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 404);
    hx_http_close(h);
    return 0;
}

static int test_wrong_method_is_405_with_allow(void)
{
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    roundtrip(hx_http_port(h), "POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 405);
    CHECK_HEADER(buf, "Allow: GET");
    CHECK_CONTAINS(body_of(buf), "\"status\":405");

    roundtrip(hx_http_port(h), "GET /v1/models/llama HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 405);
    CHECK_HEADER(buf, "Allow: DELETE");
    roundtrip(hx_http_port(h), "DELETE /v1/models/llama HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    hx_http_close(h);
    return 0;
}

static int test_body_over_limit_is_413(void)
{
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192], req[8192];

    /* Declared too large: refused from the headers alone, before any body is sent. */
    roundtrip(hx_http_port(h), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 413);
    CHECK_CONTAINS(body_of(buf), "\"status\":413");

    /* Chunked, so no length up front: 3 chunks of 1000 bytes outgrow the 1024-byte limit. */
    size_t n = (size_t)snprintf(req, sizeof req, "POST /echo HTTP/1.1\r\nHost: t\r\n"
                                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    for (int c = 0; c < 3; c++) {
        n += (size_t)snprintf(req + n, sizeof req - n, "3e8\r\n");
        memset(req + n, 'a' + c, 1000);
        n += 1000;
        n += (size_t)snprintf(req + n, sizeof req - n, "\r\n");
    }
    n += (size_t)snprintf(req + n, sizeof req - n, "0\r\n\r\n");
    CHECK(n < sizeof req);
    roundtrip(hx_http_port(h), req, buf, sizeof buf);
    CHECK_EQ(status_of(buf), 413);
    CHECK_CONTAINS(body_of(buf), "\"status\":413");

    /* The same upload within the limit goes through. */
    roundtrip(hx_http_port(h), "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
              "Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_STR(body_of(buf), "abcde");
    hx_http_close(h);
    return 0;
}

static int test_options_preflight_has_cors_headers(void)
{
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    roundtrip(hx_http_port(h), "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
              "Origin: http://example.com\r\nAccess-Control-Request-Method: POST\r\n"
              "Access-Control-Request-Headers: x-stainless-os, content-type\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 204);
    CHECK_HEADER(buf, "Access-Control-Allow-Origin: *");
    CHECK_HEADER(buf, "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS");
    CHECK_CONTAINS(buf, "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
    CHECK_CONTAINS(buf, "x-stainless-os");
    CHECK_HEADER(buf, "Access-Control-Max-Age: 86400");
    hx_http_close(h);
    return 0;
}

static int test_responses_carry_cors_origin(void)
{
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    roundtrip(hx_http_port(h), "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_HEADER(buf, "Access-Control-Allow-Origin: *");
    CHECK_HEADER(buf, "Access-Control-Expose-Headers: X-Test");
    roundtrip(hx_http_port(h), "GET /missing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 404);
    CHECK_HEADER(buf, "Access-Control-Allow-Origin: *");
    hx_http_close(h);
    return 0;
}

static int test_api_key_required_bearer_and_x_api_key(void)
{
    hx_http_config cfg = test_config();
    cfg.api_key = "sekret-key";
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    const int port = hx_http_port(h);

    roundtrip(port, "GET /secret HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 401);
    CHECK_CONTAINS(body_of(buf), "\"status\":401");
    CHECK_HEADER(buf, "Access-Control-Allow-Origin: *");
    roundtrip(port, "GET /secret HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekret-kez\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 401);
    roundtrip(port, "GET /secret HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekret-key-longer\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 401);
    roundtrip(port, "GET /secret HTTP/1.1\r\nHost: t\r\nx-api-key: sekret\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 401);

    roundtrip(port, "GET /secret HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekret-key\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_STR(body_of(buf), "{\"secret\":true}");
    roundtrip(port, "GET /secret HTTP/1.1\r\nHost: t\r\nX-Api-Key: sekret-key\r\n"
              "Connection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);

    /* Routes without auth stay open. */
    roundtrip(port, "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    hx_http_close(h);
    return 0;
}

static int test_stream_sends_chunks_in_order_and_frees_state(void)
{
    reset_stream_log();
    size_t live0 = hx_alloc_live_bytes();
    hx_http_config cfg = test_config();
    cfg.log = true;
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    roundtrip(hx_http_port(h), "GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK_EQ(status_of(buf), 200);
    CHECK_HEADER(buf, "Transfer-Encoding: chunked");
    CHECK_HEADER(buf, "Content-Type: text/event-stream");
    CHECK_HEADER(buf, "Cache-Control: no-cache");
    CHECK_HEADER(buf, "X-Accel-Buffering: no");
    CHECK_HEADER(buf, "Access-Control-Allow-Origin: *");
    const char *one = strstr(buf, "one\n"), *two = strstr(buf, "two\n"),
               *three = strstr(buf, "three\n");
    CHECK(one && two && three && one < two && two < three);
    CHECK_CONTAINS(three, "\r\n0\r\n\r\n"); /* the last chunk: the stream ended normally */

    CHECK(wait_for_free(1, 2000));
    CHECK_EQ(atomic_load(&n_stream_free), 1);
    CHECK(atomic_load(&last_completed));
    hx_http_close(h);
    CHECK_EQ(atomic_load(&n_stream_free), 1);
    CHECK_EQ(hx_alloc_live_bytes(), live0);
    return 0;
}

static int test_client_gone_is_seen_by_a_waiting_stream(void)
{
    reset_stream_log();
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    int fd = connect_to(hx_http_port(h));
    CHECK(fd >= 0);
    const char *req = "GET /wait HTTP/1.1\r\nHost: t\r\n\r\n";
    CHECK(send_all(fd, req, strlen(req)));
    read_until(fd, buf, sizeof buf, "start\n", 2000);
    CHECK_CONTAINS(buf, "start\n");
    /* A keep-alive client may send its next request early: readable bytes are not a goodbye. */
    const char *next = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    CHECK(send_all(fd, next, strlen(next)));
    sleep_ms(100);
    CHECK(!atomic_load(&stream_saw_gone));
    CHECK_EQ(atomic_load(&n_stream_free), 0);
    close(fd); /* the client leaves mid-stream */

    CHECK(wait_for_free(1, 2000));
    CHECK(atomic_load(&stream_saw_gone));
    CHECK_EQ(atomic_load(&n_stream_free), 1);
    CHECK(!atomic_load(&last_completed));
    hx_http_close(h);
    CHECK_EQ(atomic_load(&n_stream_free), 1);
    return 0;
}

static int test_port_in_use_is_a_clear_error(void)
{
    hx_http_config cfg = test_config();
    hx_http *h1 = NULL, *h2 = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h1, &err), HX_OK);
    hx_http_config cfg2 = cfg;
    cfg2.port = hx_http_port(h1);
    CHECK_EQ(hx_http_open(&cfg2, &h2, &err), HX_E_IO);
    CHECK(h2 == NULL);
    CHECK_CONTAINS(err.msg, "in use");
    CHECK_CONTAINS(err.msg, "127.0.0.1");

    /* After quiesce the first server no longer listens, and the port can be taken again. */
    hx_http_quiesce(h1);
    hx_err err2 = {0};
    CHECK_EQ(hx_http_open(&cfg2, &h2, &err2), HX_OK);
    CHECK_EQ(hx_http_port(h2), cfg2.port);
    hx_http_close(h2);
    hx_http_close(h1);
    return 0;
}

static int test_close_with_open_stream_does_not_hang_or_leak(void)
{
    reset_stream_log();
    size_t live0 = hx_alloc_live_bytes();
    hx_http_config cfg = test_config();
    hx_http *h = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_http_open(&cfg, &h, &err), HX_OK);
    static char buf[8192];
    int fd = connect_to(hx_http_port(h));
    CHECK(fd >= 0);
    const char *req = "GET /wait HTTP/1.1\r\nHost: t\r\n\r\n";
    CHECK(send_all(fd, req, strlen(req)));
    read_until(fd, buf, sizeof buf, "start\n", 2000);
    CHECK_CONTAINS(buf, "start\n");

    double t0 = now_ms();
    hx_http_close(h); /* the client is still connected and the stream is waiting */
    double took = now_ms() - t0;
    CHECK(took < 1500);
    CHECK_EQ(atomic_load(&n_stream_free), 1);
    CHECK(!atomic_load(&last_completed));
    CHECK_EQ(hx_alloc_live_bytes(), live0);
    read_until(fd, buf, sizeof buf, NULL, 1000); /* the server side is closed: EOF */
    close(fd);
    return 0;
}

static const check_case cases[] = {
    { "get_route_answers_200_with_body",            test_get_route_answers_200_with_body },
    { "unknown_path_is_404_from_error_fn",          test_unknown_path_is_404_from_error_fn },
    { "wrong_method_is_405_with_allow",             test_wrong_method_is_405_with_allow },
    { "body_over_limit_is_413",                     test_body_over_limit_is_413 },
    { "options_preflight_has_cors_headers",         test_options_preflight_has_cors_headers },
    { "responses_carry_cors_origin",                test_responses_carry_cors_origin },
    { "api_key_required_bearer_and_x_api_key",      test_api_key_required_bearer_and_x_api_key },
    { "stream_sends_chunks_in_order_and_frees_state", test_stream_sends_chunks_in_order_and_frees_state },
    { "client_gone_is_seen_by_a_waiting_stream",    test_client_gone_is_seen_by_a_waiting_stream },
    { "port_in_use_is_a_clear_error",               test_port_in_use_is_a_clear_error },
    { "close_with_open_stream_does_not_hang_or_leak", test_close_with_open_stream_does_not_hang_or_leak },
};
CHECK_MAIN(cases)
