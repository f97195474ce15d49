/* cmd_get.c - `hearth get ORG/REPO[:QUANT|:FILE]`: download a model from the Hugging Face hub.
 *
 * Files land in the Hugging Face cache exactly as huggingface_hub lays them out (format/hub.h),
 * so both tools find and share them. For each file: HEAD resolve/COMMIT/FILE gives the blob name
 * (the ETag; the sha256 for LFS files) and size; the bytes go to blobs/ETAG.incomplete, resumed
 * with a Range request when a previous run left one; then they are checked (sha256 for LFS
 * files, size for the others), renamed to blobs/ETAG and linked from snapshots/COMMIT/FILE.
 * refs/main is written last, once every file is there. A blob is written under an flock(2) on
 * .locks/models--ORG--REPO/ETAG.lock, the lock huggingface_hub takes for the same file. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/path.h"
#include "base/sha256.h"
#include "cli/cli.h"
#include "cli/hub_http.h"
#include "format/discover.h"
#include "format/hub.h"

#define LISTING_MAX ((size_t)64 << 20) /* the largest file listing or index read into memory */

typedef struct {
    hx_hub_http *http;
    const char  *endpoint;
    const char  *repo;           /* "ORG/REPO" */
    char         rev[80];        /* the commit files are resolved at */
    char         repo_dir[4096]; /* CACHE/models--ORG--REPO */
    char         lock_dir[4096]; /* CACHE/.locks/models--ORG--REPO */
    bool         tty;            /* stderr is a terminal: progress bars */
    bool         have_token;
    int64_t      n_downloaded; /* bytes fetched this run */
} get_ctx;

/* ---- small helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* mkdir -p of path (every component); errno-carrying message on failure. */
static hx_status mkdirs(const char *path, hx_err *err)
{
    char p[4096];
    if (!hx_fmt(p, sizeof p, "%s", path))
        return hx_err_set(err, HX_E_IO, "%s: path too long", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        const char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return hx_err_set(err, HX_E_IO, "cannot create %s: %s", p, strerror(errno));
        if (c == '\0') break;
        *s = c;
    }
    return hx_path_is_dir(path) ? HX_OK : hx_err_set(err, HX_E_IO, "%s is not a folder", path);
}

/* The hub token: $HF_TOKEN, else the file `huggingface-cli login` writes ($HF_TOKEN_PATH, else
 * $HF_HOME/token, else ~/.cache/huggingface/token). Empty when there is none. */
static void read_token(char *buf, size_t len)
{
    const char *t = getenv("HF_TOKEN");
    buf[0] = '\0';
    if (t && *t) {
        hx_fmt(buf, len, "%s", t);
        return;
    }
    char        path[4096];
    const char *tp = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME");
    if (tp && *tp)
        hx_fmt(path, sizeof path, "%s", tp);
    else if (home && *home)
        hx_fmt(path, sizeof path, "%s/token", home);
    else
        hx_fmt(path, sizeof path, "%s/.cache/huggingface/token",
               getenv("HOME") ? getenv("HOME") : "/root");
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)len, f)) buf[0] = '\0';
    buf[strcspn(buf, "\r\n \t")] = '\0';
    fclose(f);
}

/* One line saying why the hub refused a request. */
static hx_status hub_refusal(const get_ctx *g, const char *what, const hx_hub_resp *r, hx_err *err)
{
    const char *why = r->error[0] ? r->error : "no detail";
    if (r->status == 401 || r->status == 404) {
        if (g->have_token && r->status == 401)
            return hx_err_set(err, HX_E_NOTFOUND,
                              "%s: the hub refused the token in HF_TOKEN "
                              "(HTTP 401: %s)",
                              what, why);
        return hx_err_set(err, HX_E_NOTFOUND,
                          "%s: not found on %s (HTTP %ld: %s); check the name; "
                          "a private or gated repo needs HF_TOKEN",
                          what, g->endpoint, r->status, why);
    }
    if (r->status == 403)
        return hx_err_set(err, HX_E_NOTFOUND,
                          "%s: access denied (HTTP 403: %s); a gated repo needs "
                          "its terms accepted on the hub and HF_TOKEN set",
                          what, why);
    return hx_err_set(err, HX_E_IO, "%s: the hub answered HTTP %ld (%s)", what, r->status, why);
}

/* ---- progress ---- */

typedef struct {
    const char *name;
    int64_t     total;   /* -1 unknown */
    int64_t     done;    /* bytes in the file so far, resumed ones included */
    int64_t     resumed; /* bytes there before this transfer */
    double      t0, last;
    bool        tty;
} progress;

static void fmt_clock(double s, char *buf, size_t len)
{
    if (s < 0 || s > 359999) {
        snprintf(buf, len, "--:--");
        return;
    }
    const long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

static void progress_show(progress *p, bool final)
{
    const double t = now_s(), dt = t - p->t0;
    if (!final && t - p->last < (p->tty ? 0.1 : 5.0)) return;
    p->last = t;
    const double rate = dt > 0 ? (double)(p->done - p->resumed) / dt : 0;
    char         done[32], total[32], rs[32], eta[32];
    hx_cli_fmt_bytes((double)p->done, done, sizeof done);
    hx_cli_fmt_bytes((double)(p->total >= 0 ? p->total : 0), total, sizeof total);
    hx_cli_fmt_bytes(rate, rs, sizeof rs);
    /* the first half second says little about the rate */
    fmt_clock(p->total >= 0 && rate > 0 && dt >= 0.5 ? (double)(p->total - p->done) / rate : -1,
              eta, sizeof eta);
    const int pct = p->total > 0 ? (int)(100.0 * (double)p->done / (double)p->total) : 0;
    if (p->tty) {
        struct winsize ws;
        int cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
        int name_w = cols - 76;
        if (name_w < 12) name_w = 12;
        if (name_w > 40) name_w = 40;
        const int n = (int)strlen(p->name);
        char      shown[64], bar[21];
        if (n > name_w)
            snprintf(shown, sizeof shown, "...%s", p->name + n - (name_w - 3));
        else
            snprintf(shown, sizeof shown, "%s", p->name);
        const int fill = p->total > 0 ? (int)(20.0 * (double)p->done / (double)p->total) : 0;
        for (int i = 0; i < 20; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[20] = '\0';
        fprintf(stderr, "\r\033[K  %-*s %3d%% [%s] %10s / %-10s %10s/s  ETA %s", name_w, shown, pct,
                bar, done, total, rs, final ? "0:00" : eta);
        if (final) fputc('\n', stderr);
    } else if (final) {
        char el[32];
        fmt_clock(dt, el, sizeof el);
        fprintf(stderr, "  %s: %s in %s (%s/s)\n", p->name, done, el, rs);
    } else {
        fprintf(stderr, "  %s: %s of %s (%d%%), %s/s, ETA %s\n", p->name, done, total, pct, rs,
                eta);
    }
    fflush(stderr);
}

/* ---- one file ---- */

/* The sink of one download: appends to the .incomplete file, hashing as it goes. */
typedef struct {
    int         fd;
    const char *tmp;  /* the .incomplete path, for messages */
    int64_t     from; /* where this transfer was asked to start */
    bool        started;
    hx_sha256   sha;
    progress    prog;
    hx_err     *err;
    int64_t    *n_downloaded;
    bool        tty_progress;
} sink;

static bool write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool on_data(const void *data, size_t n, const hx_hub_resp *r, void *user)
{
    sink *s = user;
    if (!s->started) {
        s->started = true;
        s->prog.t0 = now_s(); /* rates count from the first byte, not from the request */
        if (!s->tty_progress) s->prog.last = s->prog.t0;
        if (s->from > 0 && r->status == 206 && r->range_start != s->from) {
            hx_err_set(s->err, HX_E_IO,
                       "%s: asked to resume at byte %lld, the server sent from %lld", s->tmp,
                       (long long)s->from, (long long)r->range_start);
            return false;
        }
        if (s->from > 0 && r->status != 206) { /* the server sent the whole file: start over */
            if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                hx_err_set(s->err, HX_E_IO, "%s: %s", s->tmp, strerror(errno));
                return false;
            }
            hx_sha256_init(&s->sha);
            s->prog.done = s->prog.resumed = 0;
        }
    }
    if (!write_all(s->fd, data, n)) {
        hx_err_set(s->err, HX_E_IO, "cannot write %s: %s", s->tmp, strerror(errno));
        return false;
    }
    hx_sha256_update(&s->sha, data, n);
    s->prog.done += (int64_t)n;
    *s->n_downloaded += (int64_t)n;
    progress_show(&s->prog, false);
    return true;
}

/* Feeds the first n bytes of fd to the hash (the part an earlier run downloaded). */
static hx_status hash_prefix(int fd, int64_t n, hx_sha256 *sha, const char *path, hx_err *err)
{
    static char buf[1 << 20];
    for (int64_t off = 0; off < n;) {
        const size_t want = (size_t)(n - off < (int64_t)sizeof buf ? n - off : (int64_t)sizeof buf);
        const ssize_t r = pread(fd, buf, want, off);
        if (r <= 0)
            return hx_err_set(err, HX_E_IO, "cannot read %s: %s", path,
                              r < 0 ? strerror(errno) : "short file");
        hx_sha256_update(sha, buf, (size_t)r);
        off += r;
    }
    return HX_OK;
}

/* Downloads url into blob (through blob.incomplete), resuming and verifying. size: -1 unknown;
 * sha256: "" when the file is not an LFS file. */
static hx_status download_blob(get_ctx *g, const char *url, const char *file, const char *blob,
                               int64_t size, const char *sha256, hx_err *err)
{
    char tmp[4200];
    if (!hx_fmt(tmp, sizeof tmp, "%s.incomplete", blob))
        return hx_err_set(err, HX_E_IO, "%s: path too long", blob);
    hx_err te = {0}; /* the transfer's own failure, wrapped below */
    sink   s = {.fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644),
                .tmp = tmp,
                .err = &te,
                .n_downloaded = &g->n_downloaded};
    if (s.fd < 0) return hx_err_set(err, HX_E_IO, "cannot open %s: %s", tmp, strerror(errno));
    hx_status   st = HX_OK;
    struct stat sb;
    int64_t     have = fstat(s.fd, &sb) == 0 ? (int64_t)sb.st_size : 0;
    if (size >= 0 && have > size) { /* longer than the file can be: not ours to resume */
        if (ftruncate(s.fd, 0) != 0) {
            st = hx_err_set(err, HX_E_IO, "%s: %s", tmp, strerror(errno));
            goto done;
        }
        have = 0;
    }
    hx_sha256_init(&s.sha);
    if (have > 0 && sha256[0] && (st = hash_prefix(s.fd, have, &s.sha, tmp, err)) != HX_OK)
        goto done;
    if (lseek(s.fd, have, SEEK_SET) != have) {
        st = hx_err_set(err, HX_E_IO, "%s: %s", tmp, strerror(errno));
        goto done;
    }
    s.from = have;
    s.prog = (progress){
        .name = file, .total = size, .done = have, .resumed = have, .t0 = now_s(), .tty = g->tty};
    s.prog.last = g->tty ? 0 : s.prog.t0; /* plain lines: the first after 5 s */
    s.tty_progress = g->tty;
    if (have > 0) {
        char hb[32];
        hx_cli_fmt_bytes((double)have, hb, sizeof hb);
        fprintf(stderr, "  %s: resuming after %s\n", file, hb);
    }
    if (size < 0 || have < size) {
        hx_hub_resp r;
        st = hx_hub_http_download(g->http, url, have, on_data, &s, &r, &te);
        if (st == HX_OK && r.status == 416 && have > 0) {
            /* the server cannot resume there: drop the partial file and take it whole */
            if (ftruncate(s.fd, 0) != 0 || lseek(s.fd, 0, SEEK_SET) != 0) {
                st = hx_err_set(err, HX_E_IO, "%s: %s", tmp, strerror(errno));
                goto done;
            }
            hx_sha256_init(&s.sha);
            s.from = 0;
            s.started = false;
            s.prog.done = s.prog.resumed = 0;
            st = hx_hub_http_download(g->http, url, 0, on_data, &s, &r, &te);
        }
        if (g->tty && s.prog.done > s.prog.resumed && st != HX_OK) fputc('\n', stderr);
        if (st != HX_OK) { /* the partial file stays for the next run */
            st = hx_err_set(err, st,
                            "%s: download interrupted (%s); %lld bytes are kept in %s: "
                            "run the same command again to resume",
                            file, te.msg, (long long)s.prog.done, tmp);
            goto done;
        }
        if (r.status < 200 || r.status >= 300) {
            st = hub_refusal(g, file, &r, err);
            goto done;
        }
    }
    /* check what arrived before it becomes the blob */
    const int64_t got = fstat(s.fd, &sb) == 0 ? (int64_t)sb.st_size : -1;
    if (size >= 0 && got != size) {
        st = hx_err_set(err, HX_E_IO,
                        "%s: size mismatch: the hub says %lld bytes, %lld arrived; "
                        "the download was deleted, run the command again",
                        file, (long long)size, (long long)got);
        goto fail;
    }
    if (sha256[0]) {
        char hex[HX_SHA256_HEX];
        hx_sha256_final_hex(&s.sha, hex);
        if (strcasecmp(hex, sha256) != 0) {
            st = hx_err_set(err, HX_E_IO,
                            "%s: sha256 mismatch: the hub says %s, the bytes that "
                            "arrived hash to %s; the download was deleted, run the command again",
                            file, sha256, hex);
            goto fail;
        }
    }
    if (fsync(s.fd) != 0 || rename(tmp, blob) != 0) {
        st = hx_err_set(err, HX_E_IO, "cannot store %s: %s", blob, strerror(errno));
        goto fail;
    }
    s.prog.done = got;
    progress_show(&s.prog, true);
    goto done;
fail:
    unlink(tmp);
done:
    close(s.fd);
    return st;
}

/* Fetches one file of the plan into the cache and links it from the snapshot. On return *pointer
 * holds snapshots/COMMIT/FILE. */
static hx_status fetch_file(get_ctx *g, const hx_hub_file *f, char *pointer, size_t pointer_len,
                            hx_err *err)
{
    char enc[3200], url[8192];
    if (!hx_hub_url_path(f->path, enc, sizeof enc) ||
        !hx_fmt(url, sizeof url, "%s/%s/resolve/%s/%s", g->endpoint, g->repo, g->rev, enc))
        return hx_err_set(err, HX_E_INVALID, "%s: name too long", f->path);
    hx_hub_resp r;
    hx_status   st = hx_hub_http_head(g->http, url, &r, err);
    if (st != HX_OK) return st;
    if (r.status < 200 || r.status >= 400) return hub_refusal(g, f->path, &r, err);
    if (!hx_hub_commit_valid(g->rev) || strcmp(g->rev, "main") == 0) {
        if (!hx_hub_commit_valid(r.commit))
            return hx_err_set(err, HX_E_FORMAT, "%s: the hub did not say which commit it serves",
                              f->path);
        hx_fmt(g->rev, sizeof g->rev, "%s", r.commit);
    }
    char etag[200];
    hx_hub_etag_clean(r.linked_etag[0] ? r.linked_etag : r.etag, etag, sizeof etag);
    if (!etag[0])
        return hx_err_set(err, HX_E_FORMAT, "%s: the hub sent no usable ETag (\"%s\")", f->path,
                          r.linked_etag[0] ? r.linked_etag : r.etag);
    int64_t size = r.linked_size >= 0                        ? r.linked_size
                   : r.status < 300 && r.content_length >= 0 ? r.content_length
                                                             : f->size;
    /* an LFS file's ETag is its sha256: the check on arrival */
    const char *sha = hx_hub_is_sha256(etag) ? etag : "";
    char        blobs[4200], blob[4400], snapdir[4400], link[1200], lock[4400];
    if (!hx_fmt(blobs, sizeof blobs, "%s/blobs", g->repo_dir) ||
        !hx_fmt(blob, sizeof blob, "%s/%s", blobs, etag) ||
        !hx_fmt(pointer, pointer_len, "%s/snapshots/%s/%s", g->repo_dir, g->rev, f->path) ||
        !hx_fmt(lock, sizeof lock, "%s/%s.lock", g->lock_dir, etag) ||
        !hx_hub_blob_link(f->path, etag, link, sizeof link))
        return hx_err_set(err, HX_E_IO, "%s: cache path too long", f->path);
    hx_fmt(snapdir, sizeof snapdir, "%s", pointer);
    *strrchr(snapdir, '/') = '\0';
    if ((st = mkdirs(blobs, err)) != HX_OK || (st = mkdirs(snapdir, err)) != HX_OK ||
        (st = mkdirs(g->lock_dir, err)) != HX_OK)
        return st;
    struct stat sb;
    bool        have =
        stat(blob, &sb) == 0 && S_ISREG(sb.st_mode) && (size < 0 || (int64_t)sb.st_size == size);
    if (!have) {
        int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lfd < 0) return hx_err_set(err, HX_E_IO, "cannot open %s: %s", lock, strerror(errno));
        if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
            fprintf(stderr, "  %s: waiting for another download of it (%s)\n", f->path, lock);
            if (flock(lfd, LOCK_EX) != 0) {
                close(lfd);
                return hx_err_set(err, HX_E_IO, "cannot lock %s: %s", lock, strerror(errno));
            }
        }
        /* the other download may have finished it meanwhile */
        have = stat(blob, &sb) == 0 && S_ISREG(sb.st_mode) &&
               (size < 0 || (int64_t)sb.st_size == size);
        if (!have) st = download_blob(g, url, f->path, blob, size, sha, err);
        close(lfd); /* releases the lock */
        if (st != HX_OK) return st;
    } else {
        char sz[32];
        hx_cli_fmt_bytes((double)sb.st_size, sz, sizeof sz);
        fprintf(stderr, "  %s: already in the cache (%s)\n", f->path, sz);
    }
    /* the snapshot entry: a relative symlink into blobs/, replacing whatever was there */
    char    cur[1200];
    ssize_t cn = readlink(pointer, cur, sizeof cur - 1);
    if (cn >= 0) cur[cn] = '\0';
    if (cn < 0 || strcmp(cur, link) != 0) {
        if (unlink(pointer) != 0 && errno != ENOENT)
            return hx_err_set(err, HX_E_IO, "cannot replace %s: %s", pointer, strerror(errno));
        if (symlink(link, pointer) != 0)
            return hx_err_set(err, HX_E_IO, "cannot link %s: %s", pointer, strerror(errno));
    }
    return HX_OK;
}

/* Reads a small file (the safetensors index) whole. */
static hx_status read_small(const char *path, char **buf, size_t *len, hx_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return hx_err_set(err, HX_E_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    hx_status   st = HX_OK;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0 || (size_t)sb.st_size > LISTING_MAX) {
        st = hx_err_set(err, HX_E_FORMAT, "%s: not a plausible index file", path);
    } else if (!(*buf = hx_alloc((size_t)sb.st_size + 1))) {
        st = hx_err_set(err, HX_E_NOMEM, "out of memory");
    } else if (fread(*buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        hx_free(*buf);
        st = hx_err_set(err, HX_E_IO, "cannot read %s", path);
    } else {
        *len = (size_t)sb.st_size;
    }
    fclose(f);
    return st;
}

/* ---- the verb ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: hearth get ORG/REPO[:QUANT|:FILE]\n"
               "  a safetensors repo: config, tokenizer, chat template and weights\n"
               "  a GGUF repo: one model; :Q4_K_M picks the quant, :FILE.gguf the file; without\n"
               "    either, the only one, else Q4_K_M, else the smallest Q4\n"
               "Files go to the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or\n"
               "~/.cache/huggingface/hub), shared with huggingface_hub. An interrupted download\n"
               "resumes when the command is run again. HF_TOKEN authenticates (private and gated\n"
               "repos); HF_ENDPOINT changes the hub (default https://huggingface.co).\n");
}

/* GET the repo's file listing at main (falling back to the default branch). */
static hx_status get_listing(get_ctx *g, hx_hub_repo *repo, hx_err *err)
{
    char        url[2048], *body = NULL;
    size_t      len = 0;
    hx_hub_resp r;
    hx_fmt(url, sizeof url, "%s/api/models/%s/revision/main?blobs=true", g->endpoint, g->repo);
    hx_status st = hx_hub_http_get(g->http, url, LISTING_MAX, &body, &len, &r, err);
    if (st == HX_OK && r.status == 404) {
        hx_free(body);
        body = NULL;
        hx_fmt(url, sizeof url, "%s/api/models/%s?blobs=true", g->endpoint, g->repo);
        st = hx_hub_http_get(g->http, url, LISTING_MAX, &body, &len, &r, err);
    }
    if (st == HX_OK && (r.status < 200 || r.status >= 300)) st = hub_refusal(g, g->repo, &r, err);
    if (st == HX_OK) {
        hx_err e = {0};
        if ((st = hx_hub_repo_parse(body, len, repo, &e)) != HX_OK)
            hx_err_set(err, st, "%s: %s", g->repo, e.msg);
    }
    hx_free(body);
    return st;
}

int hx_cmd_get(int argc, char **argv)
{
    const char *spec = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "hearth get: unknown option %s\n", argv[i]);
            return 2;
        }
        if (spec) {
            fprintf(stderr, "hearth get: one model at a time\n");
            return 2;
        }
        spec = argv[i];
    }
    if (!spec) {
        usage(stderr);
        return 2;
    }
    hx_err err = {0};
    char   repo_id[256], sel[1100], token[4096], cache[2048], folder[300];
    if (hx_hub_spec_parse(spec, repo_id, sizeof repo_id, sel, sizeof sel, &err) != HX_OK) {
        fprintf(stderr, "hearth get: %s\n", err.msg);
        return 2;
    }
    const char *ep = getenv("HF_ENDPOINT");
    char        endpoint[1024];
    hx_fmt(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    for (size_t n = strlen(endpoint); n && endpoint[n - 1] == '/'; n--)
        endpoint[n - 1] = '\0';
    read_token(token, sizeof token);
    hx_discover_hf_cache(cache, sizeof cache);
    hx_hub_repo_folder(repo_id, folder, sizeof folder);

    get_ctx     g = {.endpoint = endpoint,
                     .repo = repo_id,
                     .tty = isatty(STDERR_FILENO),
                     .have_token = token[0] != '\0'};
    hx_hub_repo repo = {0};
    hx_hub_plan plan = {0};
    char       *index = NULL, first[4400] = "";
    int         rc = 1;
    if (!hx_fmt(g.repo_dir, sizeof g.repo_dir, "%s/%s", cache, folder) ||
        !hx_fmt(g.lock_dir, sizeof g.lock_dir, "%s/.locks/%s", cache, folder)) {
        fprintf(stderr, "hearth get: cache path too long: %s\n", cache);
        return 1;
    }
    if (hx_hub_http_open(endpoint, token, &g.http, &err) != HX_OK ||
        get_listing(&g, &repo, &err) != HX_OK)
        goto fail;
    hx_fmt(g.rev, sizeof g.rev, "%s", repo.commit[0] ? repo.commit : "main");
    if (hx_hub_plan_make(&repo, sel, &plan, &err) != HX_OK) {
        hx_err e = err;
        err = (hx_err){0};
        hx_err_set(&err, e.status, "%s: %s", repo_id, e.msg);
        goto fail;
    }
    {
        int64_t total = 0;
        bool    known = true;
        for (int i = 0; i < plan.n_files; i++) {
            known = known && repo.files[plan.files[i]].size >= 0;
            total += repo.files[plan.files[i]].size;
        }
        char tb[32] = "";
        if (known) hx_cli_fmt_bytes((double)total, tb, sizeof tb);
        fprintf(stderr, "%s%s%s: %s model, %d file%s%s%s%s, commit %.10s\n  into %s\n", repo_id,
                sel[0] ? ":" : "", sel, plan.kind == HX_HUB_GGUF ? "GGUF" : "safetensors",
                plan.n_files, plan.n_files == 1 ? "" : "s", known ? " (" : "", tb, known ? ")" : "",
                repo.commit[0] ? repo.commit : "main", g.repo_dir);
    }
    const double t0 = now_s();
    for (int i = 0; i < plan.n_files; i++) {
        const int fi = plan.files[i];
        char      pointer[4400];
        if (fetch_file(&g, &repo.files[fi], pointer, sizeof pointer, &err) != HX_OK) goto fail;
        if (i == 0) hx_fmt(first, sizeof first, "%s", pointer);
        if (fi == plan.index) {
            size_t len = 0;
            hx_err e = {0};
            if (read_small(pointer, &index, &len, &err) != HX_OK) goto fail;
            if (hx_hub_plan_apply_index(&plan, &repo, index, len, &e) != HX_OK) {
                hx_err_set(&err, e.status, "%s: %s", repo.files[fi].path, e.msg);
                goto fail;
            }
            /* the files before the index are unchanged, so i still counts the done ones */
        }
    }
    /* refs/main last: a snapshot it names is complete */
    {
        char refs[4200], ref[4300], tmp[4400];
        hx_fmt(refs, sizeof refs, "%s/refs", g.repo_dir);
        hx_fmt(ref, sizeof ref, "%s/main", refs);
        hx_fmt(tmp, sizeof tmp, "%s.tmp%ld", ref, (long)getpid());
        FILE *f = NULL;
        if (mkdirs(refs, &err) != HX_OK) goto fail;
        if (!(f = fopen(tmp, "w")) || fputs(g.rev, f) < 0 || fclose(f) != 0 ||
            rename(tmp, ref) != 0) {
            hx_err_set(&err, HX_E_IO, "cannot write %s: %s", ref, strerror(errno));
            goto fail;
        }
    }
    {
        char got[32], el[32];
        hx_cli_fmt_bytes((double)g.n_downloaded, got, sizeof got);
        fmt_clock(now_s() - t0, el, sizeof el);
        /* the shortest name that finds this model again */
        char where[4400], name[1400];
        hx_fmt(where, sizeof where, "%s", first);
        if (plan.kind == HX_HUB_SAFETENSORS) {
            *strrchr(where, '/') = '\0';
            hx_fmt(name, sizeof name, "%s", repo_id);
        } else {
            hx_fmt(name, sizeof name, "%s:%s", repo_id, repo.files[plan.files[0]].path);
        }
        char       *p = NULL;
        hx_err      e = {0};
        const char *tries[] = {repo_id, spec, name};
        const char *run = name;
        for (size_t t = 0; t < HX_COUNTOF(tries); t++) {
            p = NULL;
            e = (hx_err){0};
            if (hx_discover_resolve(tries[t], &p, &e) == HX_OK && strcmp(p, where) == 0) {
                run = tries[t];
                hx_free(p);
                break;
            }
            hx_free(p);
        }
        if (g.n_downloaded)
            printf("ready: %s (%s downloaded in %s)\n", repo_id, got, el);
        else
            printf("ready: %s (everything was already in the cache)\n", repo_id);
        printf("  %s\nrun it:  hearth run %s \"Hello\"\n", where, run);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "hearth get: %s\n", err.msg);
    hx_free(index);
    hx_hub_plan_free(&plan);
    hx_hub_repo_free(&repo);
    hx_hub_http_close(g.http);
    return rc;
}
