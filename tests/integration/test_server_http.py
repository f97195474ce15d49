"""`hearth serve` at the HTTP level, with curl and raw sockets: SSE framing, headers, CORS, the API
key, routing errors, keep-alive, the request log, the operations routes (/health, /stats,
/metrics, /) and the process itself (port in use, signals, --quiet)."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import HEARTH
from server import Server, req

CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
LOG_LINE = re.compile(r"^(GET|POST|OPTIONS|PUT|DELETE|PATCH|HEAD) (\S+) (\d{3}) in=(\d+) out=(\d+) "
                      r"([\d.]+) ?ms$", re.M)


@pytest.fixture(scope="module")
def srv(starter):
    with Server("smollm2") as s:
        yield s


@pytest.fixture(scope="module")
def keyed(starter):
    with Server("smollm2", "--api-key", "k-789") as s:
        yield s


def curl(*args, timeout=60):
    p = subprocess.run(["curl", "-sS", *args], capture_output=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode()


def curl_full(url, *args, timeout=60):
    """curl with the response headers: returns (status, {lower name: value}, body text)."""
    out = curl("-D", "-", url, *args, timeout=timeout)
    head, _, body = out.partition("\r\n\r\n")
    while re.match(r"HTTP/\S+ 1\d\d", head):  # 100 Continue
        head, _, body = body.partition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


def post_args(body, *headers):
    args = ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
            json.dumps(body)]
    for h in headers:
        args += ["-H", h]
    return args


def get_json(s, path):
    st, h, b = req(s, "GET", path)
    assert st == 200, (path, st, b)
    return json.loads(b)


def wait_for(pred, timeout=5.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


# ---- SSE framing and headers ---------------------------------------------------------------------

def test_sse_framing_chat(srv):
    status, headers, body = curl_full(srv.url + "/v1/chat/completions", "-N", *post_args(
        {"messages": CAPITAL, "max_tokens": 8, "temperature": 0, "stream": True}))
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers.get("access-control-allow-origin") == "*"
    assert body.endswith("data: [DONE]\n\n"), body[-200:]
    events = body.split("\n\n")
    assert events[-1] == ""
    events = events[:-1]
    for e in events:
        assert e.startswith("data: "), repr(e)
        assert "\n" not in e, repr(e)  # one data line per event
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_sse_framing_completions_with_usage(srv):
    body = curl(srv.url + "/v1/completions", "-N", *post_args(
        {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
         "stream": True, "stream_options": {"include_usage": True}}))
    events = body.split("\n\n")[:-1]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert "Paris" in text
    assert chunks[-1]["choices"] == []
    assert 0 < chunks[-1]["usage"]["completion_tokens"] <= 6


def test_sse_framing_anthropic(srv):
    body = curl(srv.url + "/v1/messages", "-N", *post_args(
        {"model": "m", "messages": CAPITAL, "max_tokens": 6, "temperature": 0, "stream": True}))
    events = body.split("\n\n")
    assert events[-1] == ""
    for e in events[:-1]:
        lines = e.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and \
            lines[1].startswith("data: "), repr(e)
        assert json.loads(lines[1][6:])["type"] == lines[0][7:]
    assert events[-2].startswith("event: message_stop")
    assert "[DONE]" not in body


def test_json_response_headers(srv):
    status, headers, body = curl_full(srv.url + "/v1/chat/completions", *post_args(
        {"messages": CAPITAL, "max_tokens": 2, "temperature": 0}))
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert headers.get("access-control-allow-origin") == "*"
    assert int(headers["content-length"]) == len(body.encode())
    json.loads(body)


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/nope", "/stats", "/metrics"])
def test_every_response_has_cors(srv, path):
    status, headers, _ = curl_full(srv.url + path)
    assert headers.get("access-control-allow-origin") == "*", (path, status, headers)


def test_cors_on_errors_too(srv):
    status, headers, _ = curl_full(srv.url + "/v1/chat/completions",
                                   *post_args({"messages": []}))
    assert status == 400 and headers.get("access-control-allow-origin") == "*"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/models"])
def test_cors_preflight(srv, path):
    status, headers, body = curl_full(
        srv.url + path, "-X", "OPTIONS", "-H", "Origin: http://example.com",
        "-H", "Access-Control-Request-Method: POST",
        "-H", "Access-Control-Request-Headers: content-type, authorization, x-api-key")
    assert status == 204
    assert body == ""
    assert headers.get("access-control-allow-origin") == "*"
    methods = headers.get("access-control-allow-methods", "")
    assert "POST" in methods and "GET" in methods, headers
    allow_h = headers.get("access-control-allow-headers", "").lower()
    assert allow_h == "*" or all(h in allow_h for h in ("content-type", "authorization")), headers


def test_preflight_needs_no_api_key(keyed):
    status, headers, _ = curl_full(
        keyed.url + "/v1/chat/completions", "-X", "OPTIONS", "-H", "Origin: http://x.org",
        "-H", "Access-Control-Request-Method: POST")
    assert status == 204 and headers.get("access-control-allow-origin") == "*"


# ---- API key -------------------------------------------------------------------------------------

def test_auth_missing_key_openai_shape(keyed):
    status, headers, body = curl_full(keyed.url + "/v1/chat/completions", *post_args(
        {"messages": CAPITAL, "max_tokens": 2}))
    assert status == 401
    assert headers.get("access-control-allow-origin") == "*"
    b = json.loads(body)
    assert set(b["error"]) >= {"message", "type", "param", "code"}, b
    assert b["error"]["message"]


def test_auth_missing_key_anthropic_shape(keyed):
    status, _, body = curl_full(keyed.url + "/v1/messages", *post_args(
        {"model": "m", "messages": CAPITAL, "max_tokens": 2}))
    assert status == 401
    b = json.loads(body)
    assert b["type"] == "error" and b["error"]["type"] == "authentication_error", b
    assert b["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/SmolLM2-135M-Instruct.Q4_1"])
def test_auth_get_routes(keyed, path):
    assert curl_full(keyed.url + path)[0] == 401
    assert curl_full(keyed.url + path, "-H", "Authorization: Bearer wrong")[0] == 401
    assert curl_full(keyed.url + path, "-H", "Authorization: Bearer k-789")[0] == 200
    assert curl_full(keyed.url + path, "-H", "x-api-key: k-789")[0] == 200
    assert curl_full(keyed.url + path, "-H", "x-api-key: k-78")[0] == 401
    assert curl_full(keyed.url + path, "-H", "Authorization: k-789")[0] == 401


def test_auth_post_routes(keyed):
    chat = {"messages": CAPITAL, "max_tokens": 2, "temperature": 0}
    assert curl_full(keyed.url + "/v1/chat/completions",
                     *post_args(chat, "Authorization: Bearer k-789"))[0] == 200
    assert curl_full(keyed.url + "/v1/completions",
                     *post_args({"prompt": "Hi", "max_tokens": 2}, "x-api-key: k-789"))[0] == 200
    assert curl_full(keyed.url + "/v1/completions",
                     *post_args({"prompt": "Hi", "max_tokens": 2}))[0] == 401
    assert curl_full(keyed.url + "/v1/messages/count_tokens",
                     *post_args({"model": "m", "messages": CAPITAL}))[0] == 401


def test_auth_open_routes(keyed):
    assert curl_full(keyed.url + "/health")[0] == 200
    assert curl_full(keyed.url + "/")[0] == 200


def test_auth_checked_before_routing_errors_leak_nothing(keyed):
    # an unauthenticated bad request is a 401, not a 400 that reveals validation
    status, _, _ = curl_full(keyed.url + "/v1/chat/completions", *post_args({"messages": 3}))
    assert status == 401


# ---- routing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/nope", "/v1/nope", "/v1/chat/completions/extra", "/v2/models"])
def test_unknown_route_is_404(srv, path):
    status, headers, body = req(srv, "GET", path)
    assert status == 404
    b = json.loads(body)
    assert "error" in b


def test_unknown_route_post_is_404(srv):
    status, _, body = req(srv, "POST", "/v1/embeddings", {"input": "hi"})
    assert status == 404
    assert json.loads(body)["error"]["message"]


@pytest.mark.parametrize("method,path", [("GET", "/v1/chat/completions"),
                                         ("GET", "/v1/completions"),
                                         ("GET", "/v1/messages"),
                                         ("DELETE", "/v1/chat/completions"),
                                         ("POST", "/v1/models"),
                                         ("POST", "/health"),
                                         ("PUT", "/v1/messages/count_tokens")])
def test_wrong_method_is_405(srv, method, path):
    status, headers, body = req(srv, method, path, b"{}" if method in ("POST", "PUT") else None)
    assert status == 405, (method, path, status, body)
    assert "allow" in headers, headers
    b = json.loads(body)
    if path.startswith("/v1/messages"):
        assert b["type"] == "error"
    else:
        assert "error" in b


def test_query_string_is_ignored_for_routing(srv):
    assert req(srv, "GET", "/health?x=1")[0] == 200
    assert req(srv, "GET", "/v1/models?limit=5")[0] == 200


def test_error_bodies_use_each_api_shape(srv):
    st, h, b = req(srv, "POST", "/v1/chat/completions", b"{not json")
    assert st == 400 and h["content-type"].startswith("application/json")
    e = json.loads(b)["error"]
    assert set(e) >= {"message", "type", "param", "code"}
    assert e["type"] == "invalid_request_error"
    st, h, b = req(srv, "POST", "/v1/messages", b"{not json")
    assert st == 400
    b = json.loads(b)
    assert b["type"] == "error" and b["error"]["type"] == "invalid_request_error"


# ---- keep-alive ----------------------------------------------------------------------------------

def test_keep_alive_serves_several_requests_on_one_connection(srv):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        socks = set()
        for i in range(3):
            c.request("GET", "/health")
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["status"] == "ok"
            assert (r.getheader("Connection") or "").lower() != "close"
            socks.add(id(c.sock))
            body = json.dumps({"messages": CAPITAL, "max_tokens": 2, "temperature": 0})
            c.request("POST", "/v1/chat/completions", body=body,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["choices"]
            socks.add(id(c.sock))
        assert len(socks) == 1  # http.client reconnects (new sock) if the server closed
        # an error reply does not break the connection either
        c.request("GET", "/nope")
        r = c.getresponse()
        r.read()
        assert r.status == 404
        c.request("GET", "/health")
        assert c.getresponse().status == 200
    finally:
        c.close()


def test_keep_alive_after_a_stream(srv):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        body = json.dumps({"messages": CAPITAL, "max_tokens": 4, "stream": True})
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200
        assert r.read().endswith(b"data: [DONE]\n\n")
        sock = c.sock
        c.request("GET", "/health")
        assert c.getresponse().status == 200
        assert c.sock is sock
    finally:
        c.close()


# ---- request log ---------------------------------------------------------------------------------

def test_request_log_line(srv):
    st, _, b = req(srv, "POST", "/v1/chat/completions",
                   {"messages": CAPITAL, "max_tokens": 5, "temperature": 0})
    usage = json.loads(b)["usage"]
    req(srv, "GET", "/nope")

    def lines():
        return LOG_LINE.findall(srv.log())
    assert wait_for(lambda: any(l[1] == "/nope" for l in lines()))
    ls = lines()
    chat = [l for l in ls if l[0] == "POST" and l[1] == "/v1/chat/completions" and l[2] == "200"
            and int(l[4]) == usage["completion_tokens"]
            and int(l[3]) == usage["prompt_tokens"]]
    assert chat, srv.log()[-2000:]
    assert float(chat[-1][5]) > 0
    nope = [l for l in ls if l[1] == "/nope"][-1]
    assert nope[0] == "GET" and nope[2] == "404" and nope[3] == "0" and nope[4] == "0"


def test_request_log_line_of_a_stream(srv):
    n = len(LOG_LINE.findall(srv.log()))
    # greedy: a sampled reply may end (its end token drawn) before the 4 tokens asked
    for path, body in (("/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 4,
                                                 "temperature": 0, "stream": True}),
                       ("/v1/messages", {"model": "m", "messages": CAPITAL, "max_tokens": 4,
                                         "temperature": 0, "stream": True})):
        st, _, _ = req(srv, "POST", path, body)
        assert st == 200
    def streams():  # this test's two lines (a line of an earlier request may land after n)
        return [l for l in LOG_LINE.findall(srv.log())[n:]
                if l[0] == "POST" and l[1] in ("/v1/chat/completions", "/v1/messages")]
    assert wait_for(lambda: len(streams()) >= 2)
    for line in streams():
        assert line[2] == "200" and int(line[3]) > 0 and int(line[4]) == 4, line


def test_quiet_has_no_request_log(starter):
    with Server("smollm2", "--quiet") as s:
        for _ in range(3):
            assert req(s, "GET", "/health")[0] == 200
        req(s, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        time.sleep(0.2)
        assert not LOG_LINE.search(s.log()), s.log()


# ---- operations routes ---------------------------------------------------------------------------

def test_health(srv):
    st, h, b = req(srv, "GET", "/health")
    assert st == 200 and h["content-type"].startswith("application/json")
    assert json.loads(b) == {"status": "ok"}


def test_chat_page(srv):
    st, h, b = req(srv, "GET", "/")
    assert st == 200
    assert h["content-type"].startswith("text/html")
    assert b"<html" in b.lower()


def test_stats_shape(srv):
    s = get_json(srv, "/stats")
    assert isinstance(s["uptime_s"], (int, float)) and s["uptime_s"] >= 0
    for k in ("served", "active", "queued"):
        assert isinstance(s["requests"][k], int)
    for k in ("in", "out"):
        assert isinstance(s["tokens"][k], int)
    assert isinstance(s["prompt_tok_s"], (int, float))
    assert isinstance(s["decode_tok_s"], (int, float))
    assert isinstance(s["kv_blocks"]["used"], int) and isinstance(s["kv_blocks"]["free"], int)
    assert s["kv_blocks"]["free"] > 0
    rss = s["memory"]["rss_bytes"]
    assert isinstance(rss, int)
    assert abs(rss / 1024 - srv.rss_kib()) < 0.5 * srv.rss_kib()


def test_stats_counters_move(srv):
    before = get_json(srv, "/stats")
    st, _, b = req(srv, "POST", "/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "Count to five."}],
                    "max_tokens": 6, "temperature": 0})
    assert st == 200
    usage = json.loads(b)["usage"]
    after = get_json(srv, "/stats")
    assert after["requests"]["served"] > before["requests"]["served"]
    assert after["tokens"]["out"] - before["tokens"]["out"] == usage["completion_tokens"]
    assert after["tokens"]["in"] - before["tokens"]["in"] >= \
        usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
    assert after["uptime_s"] >= before["uptime_s"]
    assert after["requests"]["active"] == 0 and after["requests"]["queued"] == 0
    assert after["decode_tok_s"] > 0 and after["prompt_tok_s"] > 0


def parse_metrics(text):
    """{name or name{labels}: value}; checks the Prometheus text format line by line."""
    vals, types = {}, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            types[name] = kind
            continue
        if line.startswith("#"):
            assert line.startswith("# HELP "), line
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)( \d+)?$", line)
        assert m, f"bad metrics line {line!r}"
        vals[m.group(1)] = float(m.group(2))
    return vals, types


def test_metrics_format_and_counters_move(srv):
    st, h, b = req(srv, "GET", "/metrics")
    assert st == 200
    assert h["content-type"].startswith("text/plain")
    before, types = parse_metrics(b.decode())
    assert types and before
    assert any(t == "counter" for t in types.values())
    assert all(k.startswith("hearth_") for k in before), list(before)
    assert "hearth_requests_served_total" in before
    for name in types:
        assert any(k == name or k.startswith(name + "{") or k.startswith(name + "_")
                   for k in before), name
    req(srv, "POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0})
    after, _ = parse_metrics(req(srv, "GET", "/metrics")[2].decode())
    assert after["hearth_requests_served_total"] > before["hearth_requests_served_total"]
    moved = [k for k in before if types.get(k) == "counter" and after.get(k, 0) > before[k]]
    assert len(moved) >= 2, moved  # requests and tokens


# ---- the process ---------------------------------------------------------------------------------

def test_port_in_use_exits_1(starter):
    if not os.path.exists(HEARTH):
        pytest.skip("no binary")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        p = subprocess.run([HEARTH, "serve", "smollm2", "--host", "127.0.0.1", "--port", str(port)],
                           capture_output=True, text=True, timeout=60)
    finally:
        s.close()
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "in use" in (p.stderr + p.stdout), p.stderr


def test_url_line_and_explicit_host(starter):
    with Server("smollm2", "--host", "127.0.0.1") as s:
        assert s.url.startswith("http://127.0.0.1:")
        assert 0 < s.port < 65536
        assert req(s, "GET", "/health")[0] == 200


def test_help_lists_the_flags():
    if not os.path.exists(HEARTH):
        pytest.skip("no binary")
    p = subprocess.run([HEARTH, "serve", "--help"], capture_output=True, text=True, timeout=30)
    out = p.stdout + p.stderr
    for flag in ("--host", "--port", "--api-key", "--max-body", "--max-queue", "--timeout",
                 "--ctx", "--max-tokens", "--threads", "--temp", "--seed", "--quiet"):
        assert flag in out, flag


def test_request_defaults_from_flags(starter):
    with Server("smollm2", "--max-tokens", "6", "--temp", "1.0", "--seed", "5", "--top-k", "40",
                "--top-p", "0.95", "--min-p", "0.02", "--threads", "1") as s:
        story = {"messages": [{"role": "user", "content": "Write a long story."}]}
        texts = []
        for _ in range(2):
            st, _, b = req(s, "POST", "/v1/chat/completions", story)
            assert st == 200
            b = json.loads(b)
            assert b["usage"]["completion_tokens"] == 6
            assert b["choices"][0]["finish_reason"] == "length"
            texts.append(b["choices"][0]["message"]["content"])
        # --seed is each request's default seed: the same request gives the same text
        assert texts[0] == texts[1]
        # a request's own fields win over the flags
        st, _, b = req(s, "POST", "/v1/chat/completions", dict(story, max_tokens=2))
        assert json.loads(b)["usage"]["completion_tokens"] == 2
        st, _, b = req(s, "POST", "/v1/messages", dict(story, model="m", max_tokens=3))
        assert json.loads(b)["usage"]["output_tokens"] == 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_cleanly(starter, sig):
    s = Server("smollm2").start()
    try:
        assert req(s, "GET", "/health")[0] == 200
    finally:
        rc = s.stop(sig)
    assert rc == 0, s.log()[-2000:]


def test_sigterm_ends_a_stream_in_progress(starter):
    s = Server("smollm2").start()
    got = {}

    def reader():
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        try:
            c.request("POST", "/v1/chat/completions", body=json.dumps(
                {"messages": [{"role": "user", "content": "Write a very long story."}],
                 "max_tokens": 4000, "stream": True}),
                headers={"Content-Type": "application/json"})
            r = c.getresponse()
            got["status"] = r.status
            buf = b""
            while True:
                chunk = r.read1(4096)
                if not chunk:
                    break
                buf += chunk
                got["bytes"] = buf
        except Exception as e:  # noqa: BLE001 - an abrupt close is acceptable; recorded
            got["exc"] = e
        finally:
            got["done"] = time.monotonic()
            c.close()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert wait_for(lambda: got.get("bytes", b"").count(b"data: ") >= 3, timeout=30)
    finally:
        t0 = time.monotonic()
        rc = s.stop(signal.SIGTERM)
    t.join(10)
    assert not t.is_alive(), "the stream did not end after SIGTERM"
    assert rc == 0, s.log()[-2000:]
    assert got["done"] - t0 < 10
    # the stream ended cleanly: a finish reason, then [DONE]
    body = got.get("bytes", b"")
    assert body.endswith(b"data: [DONE]\n\n"), (got.get("exc"), body[-300:])
    assert b'"finish_reason":"' in body.replace(b'": "', b'":"')
