"""A running `hearth serve` for the server tests: start it on a free port, wait until /health
answers 200, stop it with SIGTERM and check that it exits cleanly.

    with Server("smollm2", "--api-key", "k") as s:
        requests_to(s.url + "/v1/models")

The server prints a line holding its URL (http://HOST:PORT/) on stdout once it listens; its
stderr (the request log) is kept in s.log() for assertions.

HEARTH_TEST_DEVICE=cuda (or cuda:N) runs every server of the suite on that device: how the
suite is run against a GPU-backed server on a machine that has one."""
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import HEARTH


class Server:
    def __init__(self, model="smollm2", *args, env=None, ready_timeout=60):
        self.argv = [HEARTH, "serve", model, "--port", "0", *args]
        if os.environ.get("HEARTH_TEST_DEVICE") and "--device" not in args:
            self.argv += ["--device", os.environ["HEARTH_TEST_DEVICE"]]
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.ready_timeout = ready_timeout
        self.proc = None
        self.url = None
        self.returncode = None

    def start(self):
        if not os.path.exists(HEARTH):
            pytest.skip(f"hearth binary not built at {HEARTH}")
        self._err = tempfile.TemporaryFile(mode="w+", errors="replace")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True, env=self.env)
        deadline = time.monotonic() + self.ready_timeout
        while self.url is None:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"hearth serve exited ({self.proc.wait()}): {self.log()}")
            m = re.search(r"(http://[^\s/]+:\d+)/", line)
            if m:
                self.url = m.group(1)
            if time.monotonic() > deadline:
                raise AssertionError("hearth serve printed no URL in time: " + self.log())
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError("hearth serve never became healthy: " + self.log())
            time.sleep(0.05)
        return self

    @property
    def port(self):
        return int(self.url.rsplit(":", 1)[1])

    def log(self):
        self._err.seek(0)
        return self._err.read()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends sig and waits; returns the exit status."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.returncode = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"hearth serve did not stop within {timeout}s of {sig}")
        elif self.proc:
            self.returncode = self.proc.returncode
        return self.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None:
            assert rc == 0, f"hearth serve exited with {rc}: {self.log()[-2000:]}"


def req(s, method, path, body=None, headers=None, timeout=60):
    """One request to server s on a fresh connection: (status, {lower header: value}, body
    bytes). body: bytes as they are, or any other value sent as JSON."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body)
        hdrs = dict(headers or {})
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=hdrs)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def stats(s):
    """GET /stats of server s, parsed."""
    st, _, b = req(s, "GET", "/stats")
    assert st == 200
    return json.loads(b)


def wait_idle(s, timeout=30):
    """Waits until server s runs and queues nothing; returns its /stats then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = stats(s)
        if st["requests"]["active"] == 0 and st["requests"]["queued"] == 0:
            return st
        time.sleep(0.05)
    raise AssertionError(f"server not idle after {timeout}s: {stats(s)}")
