"""`hearth get`, `ls` and `rm` against a fake Hugging Face hub on loopback.

The fake hub (a ThreadingHTTPServer on 127.0.0.1) speaks the part of the hub's HTTP API that
`hearth get` uses: GET /api/models/REPO[/revision/main] for the file listing, HEAD/GET
/REPO/resolve/REV/FILE with X-Repo-Commit, ETag (git blob sha1) for small files, and a 302 to a
second server (the "CDN", on localhost: another origin) with X-Linked-Etag (sha256) and
X-Linked-Size for LFS files. The CDN honours Range requests and can be told to drop a connection
mid-file or to serve wrong bytes. Every request is logged with its headers, so the tests can see
the Range a resume sends and where the token went. No outside network is used.
"""
import hashlib
import json
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest

from conftest import ROOT, inspect_json, run

COMMIT = "c0ffee" + "0" * 34  # 40 hex digits, like the hub's
LFS_SUFFIXES = (".safetensors", ".gguf")


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, commit=COMMIT):
        self.files = dict(files)  # path -> bytes
        self.commit = commit

    def is_lfs(self, path):
        return path.endswith(LFS_SUFFIXES)


class FakeHub:
    """The hub and its CDN. Set .corrupt (paths served with wrong bytes), .drop (path -> bytes
    after which the next CDN GET of it closes the connection; one-shot)."""

    def __init__(self):
        self.repos = {}
        self.log = []  # (server, method, path, headers dict)
        self.corrupt = set()
        self.drop = {}
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def record(self):
                with hub.lock:
                    hub.log.append((self.server.name, self.command, self.path,
                                    {k.lower(): v for k, v in self.headers.items()}))

            def send(self, status, body=b"", headers=(), head=False):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_HEAD(self):
                self.record()
                self.server.route(self, head=True)

            def do_GET(self):
                self.record()
                self.server.route(self, head=False)

        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.hub.name, self.hub.route = "hub", self.route_hub
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.cdn.name, self.cdn.route = "cdn", self.route_cdn
        for s in (self.hub, self.cdn):
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.hub.server_address[1]}"
        # "localhost", not 127.0.0.1: another host as well as another port
        self.cdn_base = f"http://localhost:{self.cdn.server_address[1]}"

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def requests(self, server=None, method=None):
        with self.lock:
            return [r for r in self.log if (server is None or r[0] == server)
                    and (method is None or r[1] == method)]

    # ---- the hub ----

    def listing(self, repo_id, repo):
        sib = []
        for p, data in sorted(repo.files.items()):
            s = {"rfilename": p, "size": len(data), "blobId": git_blob_sha1(data)}
            if repo.is_lfs(p):
                s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 134}
            sib.append(s)
        return {"_id": "x", "id": repo_id, "modelId": repo_id, "sha": repo.commit,
                "private": False, "gated": False, "siblings": sib}

    def not_found(self, h, head):
        h.send(404, b'{"error":"Repository not found"}',
               [("X-Error-Code", "RepoNotFound"), ("X-Error-Message", "Repository not found"),
                ("Content-Type", "application/json")], head)

    def route_hub(self, h, head):
        path = urlsplit(h.path).path
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            repo_id = rest.split("/revision/")[0]
            repo = self.repos.get(repo_id)
            if repo is None:
                return self.not_found(h, head)
            return h.send(200, json.dumps(self.listing(repo_id, repo)).encode(),
                          [("Content-Type", "application/json")], head)
        parts = path.lstrip("/").split("/", 4)  # org, name, "resolve", rev, file
        if len(parts) < 5 or parts[2] != "resolve":
            return h.send(404, b"no route", head=head)
        repo_id, rev, fname = f"{parts[0]}/{parts[1]}", parts[3], unquote(parts[4])
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.not_found(h, head)
        if rev not in (repo.commit, "main") or fname not in repo.files:
            return h.send(404, b"Entry not found", [("X-Error-Code", "EntryNotFound"),
                                                    ("X-Error-Message", "Entry not found")], head)
        data = repo.files[fname]
        common = [("X-Repo-Commit", repo.commit), ("ETag", f'"{git_blob_sha1(data)}"')]
        if repo.is_lfs(fname):
            sha = hashlib.sha256(data).hexdigest()
            loc = f"{self.cdn_base}/lfs/{sha}?name={fname.replace('/', '%2F')}"
            return h.send(302, b"Found. Redirecting", common + [
                ("X-Linked-Etag", f'"{sha}"'), ("X-Linked-Size", str(len(data))),
                ("Location", loc)], head)
        h.send(200, data, common, head)

    # ---- the CDN ----

    def blob(self, sha):
        for repo in self.repos.values():
            for p, data in repo.files.items():
                if hashlib.sha256(data).hexdigest() == sha:
                    return p, data
        return None, None

    def route_cdn(self, h, head):
        path = urlsplit(h.path).path
        fname, data = self.blob(path.rsplit("/", 1)[-1])
        if data is None:
            return h.send(404, b"NoSuchKey", head=head)
        if fname in self.corrupt:
            data = bytes(b ^ 0x5A for b in data)
        start = 0
        rng = h.headers.get("Range")
        status, headers = 200, [("ETag", f'"{hashlib.md5(data).hexdigest()}"')]
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return h.send(416, b"", [("Content-Range", f"bytes */{len(data)}")], head)
            status = 206
            headers.append(("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}"))
        body = data[start:]
        cut = self.drop.pop(fname, None) if not head else None
        if cut is None:
            return h.send(status, body, headers, head)
        # promise the whole body, send part of it, hang up
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[:cut])
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(2)


# ---- fixtures ----

@pytest.fixture(scope="module")
def tiny_ggufs(tmp_path_factory):
    """tests/tools/gen_tiny_gguf.py's models (needs the gguf package)."""
    pytest.importorskip("gguf")
    out = tmp_path_factory.mktemp("tiny-gguf")
    subprocess.run([os.sys.executable, os.path.join(ROOT, "tests", "tools", "gen_tiny_gguf.py"),
                    str(out)], check=True)
    return out


@pytest.fixture
def hub(tiny_models, tiny_ggufs):
    h = FakeHub()
    st = {}
    src = tiny_models / "tiny-llama-sharded"
    for f in os.listdir(src):
        st[f] = (src / f).read_bytes()
    st["README.md"] = b"# Tiny\n"
    st[".gitattributes"] = b"*.safetensors filter=lfs\n"
    st["consolidated.safetensors"] = b"not in the index: never downloaded" * 10
    st["original/params.json"] = b"{}"
    h.repos["TinyOrg/Tiny-Llama"] = Repo(st)
    g = lambda n: (tiny_ggufs / n).read_bytes()
    h.repos["TinyOrg/Tiny-GGUF"] = Repo({
        "README.md": b"# quants\n",
        "Tiny-Llama-Q8_0.gguf": g("tiny-llama-q8_0.gguf"),
        "Tiny-Llama-Q4_0.gguf": g("tiny-llama-q4_0.gguf"),
        "Tiny-Llama-Q4_K_M.gguf": g("tiny-llama-q4_k.gguf"),
        "Tiny-Llama-Q4_K_S.gguf": g("tiny-llama-q4_1.gguf"),
        "mmproj-Tiny-Llama-F16.gguf": b"projector" * 20,
        "F16/Tiny-Llama-F16-00001-of-00002.gguf": b"first part" * 50,
        "F16/Tiny-Llama-F16-00002-of-00002.gguf": b"second part" * 70,
    }, commit="beef" + "1" * 36)
    yield h
    h.close()


@pytest.fixture
def env(hub, tmp_path):
    home = tmp_path / "hfhome"
    home.mkdir()
    return {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "HF_HUB_CACHE": str(tmp_path / "hub"),
            "HEARTH_HOME": str(tmp_path / "hearth"), "HF_TOKEN": "", "HF_TOKEN_PATH": ""}


def cache_repo(env, repo_id):
    return os.path.join(env["HF_HUB_CACHE"], "models--" + repo_id.replace("/", "--"))


def snapshot_files(env, repo_id, commit):
    snap = os.path.join(cache_repo(env, repo_id), "snapshots", commit)
    out = []
    for d, _, files in os.walk(snap):
        out += [os.path.relpath(os.path.join(d, f), snap) for f in files]
    return sorted(out)


# ---- layout ----

def test_safetensors_repo_in_the_huggingface_layout(hub, env):
    p = run("get", "TinyOrg/Tiny-Llama", env=env)
    assert p.returncode == 0, p.stderr
    repo = hub.repos["TinyOrg/Tiny-Llama"]
    root = cache_repo(env, "TinyOrg/Tiny-Llama")
    want = ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
            "tokenizer_config.json"]
    want = [w for w in want if w in repo.files]
    assert snapshot_files(env, "TinyOrg/Tiny-Llama", COMMIT) == want
    assert open(os.path.join(root, "refs", "main")).read() == COMMIT  # no newline, as the hub's
    blobs = sorted(os.listdir(os.path.join(root, "blobs")))
    expect_blobs = sorted(hashlib.sha256(repo.files[f]).hexdigest() if repo.is_lfs(f)
                          else git_blob_sha1(repo.files[f]) for f in want)
    assert blobs == expect_blobs  # no .incomplete left behind
    for f in want:
        link = os.path.join(root, "snapshots", COMMIT, f)
        assert os.path.islink(link)
        blob = hashlib.sha256(repo.files[f]).hexdigest() if repo.is_lfs(f) else git_blob_sha1(repo.files[f])
        assert os.readlink(link) == f"../../blobs/{blob}"
        assert open(link, "rb").read() == repo.files[f]
    # the model is usable by name, and the command said how to run it
    assert "hearth run TinyOrg/Tiny-Llama" in p.stdout
    d = inspect_json("TinyOrg/Tiny-Llama", env=env)
    assert d["format"] == "safetensors" and d["arch"] == "llama"


def test_huggingface_hub_finds_the_files(hub, env):
    hf = pytest.importorskip("huggingface_hub")
    assert run("get", "TinyOrg/Tiny-Llama", env=env).returncode == 0
    snap = os.path.join(cache_repo(env, "TinyOrg/Tiny-Llama"), "snapshots", COMMIT)
    for f in ("config.json", "model-00001-of-00002.safetensors"):
        got = hf.hf_hub_download("TinyOrg/Tiny-Llama", f, cache_dir=env["HF_HUB_CACHE"],
                                 local_files_only=True)
        assert os.path.realpath(got) == os.path.realpath(os.path.join(snap, f))
    info = hf.scan_cache_dir(env["HF_HUB_CACHE"])
    assert not info.warnings, info.warnings
    (r,) = [r for r in info.repos if r.repo_id == "TinyOrg/Tiny-Llama"]
    (rev,) = r.revisions
    assert rev.commit_hash == COMMIT and "main" in rev.refs
    assert {f.file_name for f in rev.files} >= {"config.json", "model-00002-of-00002.safetensors"}


def test_second_get_uses_the_cache(hub, env):
    assert run("get", "TinyOrg/Tiny-Llama", env=env).returncode == 0
    n_cdn = len(hub.requests("cdn", "GET"))
    p = run("get", "TinyOrg/Tiny-Llama", env=env)
    assert p.returncode == 0 and "already in the cache" in p.stderr
    assert len(hub.requests("cdn", "GET")) == n_cdn


# ---- GGUF: which file ----

def test_gguf_default_is_q4_k_m(hub, env):
    p = run("get", "TinyOrg/Tiny-GGUF", env=env)
    assert p.returncode == 0, p.stderr
    commit = hub.repos["TinyOrg/Tiny-GGUF"].commit
    assert snapshot_files(env, "TinyOrg/Tiny-GGUF", commit) == ["Tiny-Llama-Q4_K_M.gguf"]
    assert "hearth run TinyOrg/Tiny-GGUF" in p.stdout
    ls = run("ls", env=env, check=True).stdout
    line = next(l for l in ls.splitlines() if "TinyOrg/Tiny-GGUF" in l)
    assert "llama" in line and "gguf" in line and "Q4_K" in line and "hf-cache" in line
    assert "FAMILY" in ls and "CONTEXT" in ls


def test_gguf_quant_and_file_selection(hub, env):
    commit = hub.repos["TinyOrg/Tiny-GGUF"].commit
    assert run("get", "TinyOrg/Tiny-GGUF:q8_0", env=env).returncode == 0  # case-insensitive
    assert snapshot_files(env, "TinyOrg/Tiny-GGUF", commit) == ["Tiny-Llama-Q8_0.gguf"]
    assert run("get", "TinyOrg/Tiny-GGUF:Tiny-Llama-Q4_0.gguf", env=env).returncode == 0
    assert "Tiny-Llama-Q4_0.gguf" in snapshot_files(env, "TinyOrg/Tiny-GGUF", commit)
    # two models of one repo: each is found by repo:quant
    assert inspect_json("TinyOrg/Tiny-GGUF:Q8_0", env=env)["quant"] == "q8_0"
    assert inspect_json("TinyOrg/Tiny-GGUF:Q4_0", env=env)["quant"] == "q4_0"
    p = run("inspect", "TinyOrg/Tiny-GGUF", env=env)
    assert p.returncode == 1 and "Q8_0" in p.stderr and "Q4_0" in p.stderr


def test_ambiguous_and_unknown_quants_list_the_choices(hub, env):
    p = run("get", "TinyOrg/Tiny-GGUF:Q4_K", env=env)
    assert p.returncode == 1
    assert "Tiny-Llama-Q4_K_M.gguf" in p.stderr and "Tiny-Llama-Q4_K_S.gguf" in p.stderr
    p = run("get", "TinyOrg/Tiny-GGUF:Q5_K_M", env=env)
    assert p.returncode == 1 and "Q5_K_M" in p.stderr and "Tiny-Llama-Q8_0.gguf" in p.stderr
    assert not os.path.exists(os.path.join(cache_repo(env, "TinyOrg/Tiny-GGUF"), "refs"))


def test_split_gguf_downloads_every_part(hub, env):
    commit = hub.repos["TinyOrg/Tiny-GGUF"].commit
    p = run("get", "TinyOrg/Tiny-GGUF:F16", env=env)
    assert p.returncode == 0, p.stderr
    assert snapshot_files(env, "TinyOrg/Tiny-GGUF", commit) == [
        "F16/Tiny-Llama-F16-00001-of-00002.gguf", "F16/Tiny-Llama-F16-00002-of-00002.gguf"]
    link = os.path.join(cache_repo(env, "TinyOrg/Tiny-GGUF"), "snapshots", commit,
                        "F16/Tiny-Llama-F16-00002-of-00002.gguf")
    assert os.readlink(link).startswith("../../../blobs/")  # one more ../ for the folder


# ---- failures ----

def test_interrupted_download_resumes_with_range(hub, env):
    f = "model-00001-of-00002.safetensors"
    data = hub.repos["TinyOrg/Tiny-Llama"].files[f]
    sha = hashlib.sha256(data).hexdigest()
    cut = len(data) // 3
    hub.drop[f] = cut
    p = run("get", "TinyOrg/Tiny-Llama", env=env)
    assert p.returncode == 1 and "interrupted" in p.stderr and "again" in p.stderr, p.stderr
    part = os.path.join(cache_repo(env, "TinyOrg/Tiny-Llama"), "blobs", sha + ".incomplete")
    assert os.path.getsize(part) == cut
    assert not os.path.exists(os.path.join(cache_repo(env, "TinyOrg/Tiny-Llama"), "refs", "main"))
    p = run("get", "TinyOrg/Tiny-Llama", env=env)
    assert p.returncode == 0, p.stderr
    ranges = [r[3].get("range") for r in hub.requests("cdn", "GET") if sha in r[2]]
    assert ranges[-1] == f"bytes={cut}-"
    blob = os.path.join(cache_repo(env, "TinyOrg/Tiny-Llama"), "blobs", sha)
    assert open(blob, "rb").read() == data and not os.path.exists(part)


def test_corrupted_file_is_detected_and_refused(hub, env):
    f = "model-00002-of-00002.safetensors"
    sha = hashlib.sha256(hub.repos["TinyOrg/Tiny-Llama"].files[f]).hexdigest()
    hub.corrupt.add(f)
    p = run("get", "TinyOrg/Tiny-Llama", env=env)
    assert p.returncode == 1 and "sha256 mismatch" in p.stderr and sha in p.stderr, p.stderr
    root = cache_repo(env, "TinyOrg/Tiny-Llama")
    assert not any(b.startswith(sha) for b in os.listdir(os.path.join(root, "blobs")))
    assert not os.path.lexists(os.path.join(root, "snapshots", COMMIT, f))
    assert not os.path.exists(os.path.join(root, "refs", "main"))
    hub.corrupt.clear()
    assert run("get", "TinyOrg/Tiny-Llama", env=env).returncode == 0


def test_token_goes_to_the_hub_only(hub, env):
    env = dict(env, HF_TOKEN="hf_secret_token")
    assert run("get", "TinyOrg/Tiny-GGUF:Q8_0", env=env).returncode == 0
    hub_reqs, cdn_reqs = hub.requests("hub"), hub.requests("cdn")
    assert hub_reqs and cdn_reqs
    assert all(r[3].get("authorization") == "Bearer hf_secret_token" for r in hub_reqs)
    assert all("authorization" not in r[3] for r in cdn_reqs)


def test_missing_repo_is_a_clear_error(hub, env):
    p = run("get", "NoSuchOrg/No-Such-Model", env=env)
    assert p.returncode == 1
    assert "NoSuchOrg/No-Such-Model" in p.stderr and "not found" in p.stderr
    assert "Repository not found" in p.stderr
    p = run("get", "not a repo id", env=env)
    assert p.returncode == 2 and "repo id" in p.stderr


# ---- ls and rm ----

def test_ls_supported_lists_architectures():
    out = run("ls", "--supported", check=True).stdout
    assert "llama" in out and "qwen3" in out


def test_rm_removes_the_repo(hub, env):
    assert run("get", "TinyOrg/Tiny-Llama", env=env).returncode == 0
    assert run("get", "TinyOrg/Tiny-GGUF:Q8_0", env=env).returncode == 0
    root = cache_repo(env, "TinyOrg/Tiny-Llama")
    # stdin is not a terminal: nothing goes without --yes
    p = run("rm", "TinyOrg/Tiny-Llama", env=env)
    assert p.returncode == 1 and "--yes" in p.stderr and os.path.isdir(root)
    p = run("rm", "tinyorg/tiny", env=env)  # matches both repos
    assert p.returncode == 1 and "Tiny-GGUF" in p.stderr and os.path.isdir(root)
    p = run("rm", "TinyOrg/Tiny-Llama", "--yes", env=env)
    assert p.returncode == 0 and "removed" in p.stdout, p.stderr
    assert not os.path.exists(root)
    ls = run("ls", env=env, check=True).stdout
    assert "TinyOrg/Tiny-Llama " not in ls and "TinyOrg/Tiny-GGUF" in ls
    # by quant, in a repo of one model
    assert run("rm", "TinyOrg/Tiny-GGUF:Q8_0", "-y", env=env).returncode == 0
    assert not os.path.exists(cache_repo(env, "TinyOrg/Tiny-GGUF"))


def test_rm_a_loose_file(env, tiny_ggufs):
    models = os.path.join(env["HEARTH_HOME"], "models")
    os.makedirs(models)
    shutil.copy(tiny_ggufs / "tiny-llama-q8_0.gguf", models)
    p = run("rm", "tiny-llama-q8", "--yes", env=env)
    assert p.returncode == 0, p.stderr
    assert os.listdir(models) == []
