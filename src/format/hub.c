/* hub.c - the hub's file listing, file choice and cache names (see hub.h for the layout).
 *
 * Listings and indexes come from the network, so every string taken from them is checked before
 * it names anything on disk; counts are bounded by the JSON that was actually received. */
#include "hub.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/path.h"

/* ---- names ---- */

static bool id_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}
static bool word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

static bool id_part_valid(const char *s, size_t n)
{
    if (n < 1 || n > 96 || !word_char(s[0]) || !word_char(s[n - 1])) return false;
    for (size_t i = 0; i < n; i++) {
        if (!id_char(s[i])) return false;
        if (i && ((s[i] == '-' && s[i - 1] == '-') || (s[i] == '.' && s[i - 1] == '.')))
            return false;
    }
    return true;
}

bool hx_hub_repo_id_valid(const char *id)
{
    const char *slash = strchr(id, '/');
    if (!slash) return id_part_valid(id, strlen(id));
    return id_part_valid(id, (size_t)(slash - id)) && id_part_valid(slash + 1, strlen(slash + 1));
}

hx_status hx_hub_spec_parse(const char *arg, char *repo, size_t repo_len, char *sel, size_t sel_len,
                            hx_err *err)
{
    const char *colon = strchr(arg, ':');
    size_t      n = colon ? (size_t)(colon - arg) : strlen(arg);
    if (n >= repo_len) return hx_err_set(err, HX_E_INVALID, "repo id too long: %.80s...", arg);
    memcpy(repo, arg, n);
    repo[n] = '\0';
    if (!hx_hub_repo_id_valid(repo))
        return hx_err_set(err, HX_E_INVALID,
                          "'%s' is not a Hugging Face repo id (expected ORG/REPO, e.g. "
                          "Qwen/Qwen3-0.6B or bartowski/Qwen3-0.6B-GGUF:Q4_K_M)",
                          repo);
    sel[0] = '\0';
    if (colon) {
        if (!colon[1])
            return hx_err_set(err, HX_E_INVALID,
                              "'%s': nothing after ':' (give a quant such as "
                              ":Q4_K_M or a file name)",
                              arg);
        if (!hx_fmt(sel, sel_len, "%s", colon + 1))
            return hx_err_set(err, HX_E_INVALID, "'%s': selector too long", arg);
    }
    return HX_OK;
}

bool hx_hub_path_valid(const char *path)
{
    size_t n = strlen(path);
    if (n == 0 || n > 1024 || path[0] == '/') return false;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\') return false;
    for (const char *c = path;;) { /* every component: not empty, ".", or ".." */
        const char *e = strchr(c, '/');
        size_t      k = e ? (size_t)(e - c) : strlen(c);
        if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        if (!e) return true;
        c = e + 1;
    }
}

bool hx_hub_etag_valid(const char *etag)
{
    size_t n = strlen(etag);
    if (n < 1 || n > 128 || etag[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!id_char(etag[i])) return false;
    return true;
}

void hx_hub_etag_clean(const char *raw, char *out, size_t len)
{
    out[0] = '\0';
    while (*raw == ' ' || *raw == '\t')
        raw++;
    if (strncmp(raw, "W/", 2) == 0) raw += 2;
    size_t n = strlen(raw);
    while (n &&
           (raw[n - 1] == ' ' || raw[n - 1] == '\t' || raw[n - 1] == '\r' || raw[n - 1] == '\n'))
        n--;
    if (n >= 2 && raw[0] == '"' && raw[n - 1] == '"') {
        raw++;
        n -= 2;
    }
    if (n + 1 > len) return;
    memcpy(out, raw, n);
    out[n] = '\0';
    if (!hx_hub_etag_valid(out)) out[0] = '\0';
}

bool hx_hub_commit_valid(const char *commit)
{
    size_t n = strlen(commit);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)commit[i])) return false;
    return true;
}

bool hx_hub_is_sha256(const char *s)
{
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

bool hx_hub_repo_folder(const char *repo_id, char *buf, size_t len)
{
    const char *slash = strchr(repo_id, '/');
    if (!slash) return hx_fmt(buf, len, "models--%s", repo_id);
    return hx_fmt(buf, len, "models--%.*s--%s", (int)(slash - repo_id), repo_id, slash + 1);
}

bool hx_hub_blob_link(const char *path, const char *etag, char *buf, size_t len)
{
    size_t off = 0;
    int    depth = 2; /* out of COMMIT/ and snapshots/ */
    for (const char *p = path; *p; p++)
        depth += *p == '/';
    for (int i = 0; i < depth; i++) {
        if (off + 3 >= len) return false;
        memcpy(buf + off, "../", 3);
        off += 3;
    }
    return hx_fmt(buf + off, len - off, "blobs/%s", etag);
}

bool hx_hub_url_path(const char *path, char *buf, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t            o = 0;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        const bool keep =
            isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~' || *p == '/';
        if (o + (keep ? 1 : 3) >= len) return false;
        if (keep) {
            buf[o++] = (char)*p;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    if (o >= len) return false;
    buf[o] = '\0';
    return true;
}

/* ---- the listing ---- */

void hx_hub_repo_free(hx_hub_repo *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_files; i++)
        hx_free(r->files[i].path);
    hx_free(r->files);
    memset(r, 0, sizeof *r);
}

int hx_hub_repo_find(const hx_hub_repo *r, const char *path)
{
    for (int i = 0; i < r->n_files; i++)
        if (strcmp(r->files[i].path, path) == 0) return i;
    return -1;
}

/* A non-negative JSON integer, or -1. */
static int64_t json_size(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    return (int64_t)json_integer_value(v);
}

hx_status hx_hub_repo_parse(const char *json, size_t len, hx_hub_repo *out, hx_err *err)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t      *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hx_err_set(err, HX_E_FORMAT, "hub file listing: not JSON (line %d: %s)", je.line,
                          je.text);
    hx_status   st = HX_OK;
    hx_hub_repo r = {0};
    json_t     *sha = json_object_get(root, "sha"), *sib = json_object_get(root, "siblings");
    if (!json_is_object(root) || !json_is_array(sib)) {
        st = hx_err_set(err, HX_E_FORMAT, "hub file listing: no \"siblings\" array of files");
        goto done;
    }
    if (sha) {
        const char *s = json_string_value(sha);
        if (!s || !hx_hub_commit_valid(s)) {
            st = hx_err_set(err, HX_E_FORMAT, "hub file listing: \"sha\" is not a commit id");
            goto done;
        }
        memcpy(r.commit, s, strlen(s) + 1);
    }
    const size_t n = json_array_size(sib);
    if (n > 0 && !(r.files = hx_calloc(n, sizeof *r.files))) {
        st = hx_err_set(err, HX_E_NOMEM, "hub file listing: out of memory for %zu files", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t     *f = json_array_get(sib, i);
        const char *name = json_string_value(json_object_get(f, "rfilename"));
        if (!name || strlen(name) != json_string_length(json_object_get(f, "rfilename")) ||
            !hx_hub_path_valid(name) || hx_hub_repo_find(&r, name) >= 0) {
            r.n_skipped++;
            continue;
        }
        hx_hub_file *hf = &r.files[r.n_files];
        if (!(hf->path = hx_strdup(name))) {
            st = hx_err_set(err, HX_E_NOMEM, "hub file listing: out of memory");
            goto done;
        }
        r.n_files++;
        json_t *lfs = json_object_get(f, "lfs");
        hf->size = json_size(json_object_get(f, "size"));
        if (hf->size < 0) hf->size = json_size(json_object_get(lfs, "size"));
        const char *sh = json_string_value(json_object_get(lfs, "sha256"));
        if (!sh) sh = json_string_value(json_object_get(lfs, "oid"));
        if (sh && hx_hub_is_sha256(sh))
            for (int k = 0; k < 65; k++)
                hf->sha256[k] = (char)tolower((unsigned char)sh[k]);
    }
done:
    json_decref(root);
    if (st != HX_OK)
        hx_hub_repo_free(&r);
    else
        *out = r;
    return st;
}

/* ---- GGUF files: quants and split parts ---- */

static bool ends_with_ci(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

bool hx_hub_gguf_split(const char *path, int *part, int *n_parts, size_t *stem_len)
{
    /* "-00001-of-00005.gguf" is 20 bytes */
    size_t n = strlen(path);
    if (n < 21 || !ends_with_ci(path, ".gguf")) return false;
    const char *s = path + n - 20;
    if (s[0] != '-' || strncmp(s + 6, "-of-", 4) != 0) return false;
    int a = 0, b = 0;
    for (int i = 0; i < 5; i++) {
        if (!isdigit((unsigned char)s[1 + i]) || !isdigit((unsigned char)s[10 + i])) return false;
        a = a * 10 + (s[1 + i] - '0');
        b = b * 10 + (s[10 + i] - '0');
    }
    if (a < 1 || b < 1 || a > b) return false;
    *part = a;
    *n_parts = b;
    *stem_len = (size_t)(s - path);
    return true;
}

int hx_hub_quant_match(const char *path, const char *quant)
{
    const char *b = base_name(path);
    size_t      n = strlen(b), q = strlen(quant);
    int         part, n_parts;
    size_t      stem;
    if (hx_hub_gguf_split(b, &part, &n_parts, &stem))
        n = stem;
    else if (ends_with_ci(b, ".gguf"))
        n -= 5;
    if (q == 0 || q > n) return 0;
    int best = 0;
    for (size_t i = 0; i + q <= n; i++) {
        if (strncasecmp(b + i, quant, q) != 0) continue;
        if (i > 0 && isalnum((unsigned char)b[i - 1])) continue;
        const char after = i + q < n ? b[i + q] : '\0';
        if (isalnum((unsigned char)after)) continue;
        const int m = after == '_' ? 1 : 2;
        if (m > best) best = m;
    }
    return best;
}

typedef struct {
    int     first; /* the file (or part 1) */
    int     n_parts;
    int64_t size; /* all parts; -1 when unknown */
} gguf_unit;

static bool is_mmproj(const char *path)
{
    return strncasecmp(base_name(path), "mmproj", 6) == 0;
}

/* Finds part k of the split whose part 1 is r->files[first]: index or -1. */
static int split_part(const hx_hub_repo *r, int first, int k, int n_parts)
{
    int         part, np;
    size_t      stem;
    const char *p = r->files[first].path;
    if (!hx_hub_gguf_split(p, &part, &np, &stem)) return -1;
    char want[1100];
    if (!hx_fmt(want, sizeof want, "%.*s-%05d-of-%05d%s", (int)stem, p, k, n_parts,
                p + strlen(p) - 5))
        return -1;
    return hx_hub_repo_find(r, want);
}

/* The GGUF models of a repo: single files, and splits whose every part is listed. hx_alloc'd. */
static gguf_unit *gguf_units(const hx_hub_repo *r, int *n_out)
{
    gguf_unit *u = hx_calloc((size_t)r->n_files + 1, sizeof *u);
    int        n = 0;
    if (!u) return NULL;
    for (int i = 0; i < r->n_files; i++) {
        const char *p = r->files[i].path;
        if (!ends_with_ci(p, ".gguf")) continue;
        int    part = 1, n_parts = 1;
        size_t stem;
        if (hx_hub_gguf_split(p, &part, &n_parts, &stem) && part != 1) continue;
        gguf_unit g = {i, n_parts, r->files[i].size};
        for (int k = 2; k <= n_parts && g.n_parts; k++) {
            int j = split_part(r, i, k, n_parts);
            if (j < 0)
                g.n_parts = 0; /* a part is missing: not offered */
            else if (g.size >= 0)
                g.size = r->files[j].size < 0 ? -1 : g.size + r->files[j].size;
        }
        if (g.n_parts) u[n++] = g;
    }
    *n_out = n;
    return u;
}

static void append(char *buf, size_t len, size_t *off, const char *fmt, const char *s, int64_t size)
{
    if (*off >= len) return;
    char sz[48] = "";
    if (size >= (int64_t)1 << 30)
        snprintf(sz, sizeof sz, " (%.2f GiB)", (double)size / (1 << 30));
    else if (size >= (int64_t)1 << 20)
        snprintf(sz, sizeof sz, " (%.1f MiB)", (double)size / (1 << 20));
    else if (size >= 1024)
        snprintf(sz, sizeof sz, " (%.1f KiB)", (double)size / 1024);
    else if (size >= 0)
        snprintf(sz, sizeof sz, " (%d B)", (int)size);
    if (!hx_fmt(buf + *off, len - *off, fmt, s, sz)) {
        if (len >= 4) memcpy(buf + len - 4, "...", 4); /* cut, and says so */
        *off = len;
        return;
    }
    *off += strlen(buf + *off);
}

void hx_hub_gguf_choices(const hx_hub_repo *r, char *buf, size_t len)
{
    int        n = 0;
    size_t     off = 0;
    gguf_unit *u = gguf_units(r, &n);
    buf[0] = '\0';
    for (int i = 0; u && i < n; i++)
        append(buf, len, &off, off ? ", %s%s" : "%s%s", r->files[u[i].first].path, u[i].size);
    if (n == 0 && len > 6) hx_fmt(buf, len, "(none)");
    hx_free(u);
}

/* ---- plans ---- */

void hx_hub_plan_free(hx_hub_plan *p)
{
    if (!p) return;
    hx_free(p->files);
    p->files = NULL;
    p->n_files = 0;
}

static hx_status plan_unit(const hx_hub_repo *r, const gguf_unit *g, hx_hub_plan *out, hx_err *err)
{
    memset(out, 0, sizeof *out);
    out->kind = HX_HUB_GGUF;
    out->index = -1;
    if (!(out->files = hx_calloc((size_t)g->n_parts, sizeof *out->files)))
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    out->files[0] = g->first;
    for (int k = 2; k <= g->n_parts; k++)
        out->files[k - 1] = split_part(r, g->first, k, g->n_parts);
    out->n_files = g->n_parts;
    return HX_OK;
}

static hx_status plan_safetensors(const hx_hub_repo *r, hx_hub_plan *out, hx_err *err)
{
    static const char *const meta[] = {
        "config.json",           "generation_config.json",  "tokenizer.json",
        "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
        "chat_template.json"};
    memset(out, 0, sizeof *out);
    out->kind = HX_HUB_SAFETENSORS;
    out->index = -1;
    if (!(out->files = hx_calloc((size_t)r->n_files + 1, sizeof *out->files)))
        return hx_err_set(err, HX_E_NOMEM, "out of memory");
    for (size_t m = 0; m < HX_COUNTOF(meta); m++) {
        int i = hx_hub_repo_find(r, meta[m]);
        if (i >= 0) out->files[out->n_files++] = i;
    }
    /* the index first: the weights it names are decided once it is read */
    for (int i = 0; i < r->n_files; i++) {
        const char *p = r->files[i].path;
        if (strchr(p, '/') || !hx_str_ends_with(p, ".safetensors.index.json")) continue;
        if (out->index < 0 || strcmp(p, "model.safetensors.index.json") == 0) out->index = i;
    }
    if (out->index >= 0) out->files[out->n_files++] = out->index;
    for (int i = 0; i < r->n_files; i++) {
        const char *p = r->files[i].path;
        if (!strchr(p, '/') && hx_str_ends_with(p, ".safetensors")) out->files[out->n_files++] = i;
    }
    return HX_OK;
}

/* Picks among units by quant: exact matches first, then prefix matches. */
static hx_status pick_quant(const hx_hub_repo *r, const gguf_unit *u, int n, const char *quant,
                            int *pick, hx_err *err)
{
    for (int want = 2; want >= 1; want--) {
        int    found = 0, at = -1;
        char   list[400];
        size_t off = 0;
        list[0] = '\0';
        for (int i = 0; i < n; i++) {
            if (is_mmproj(r->files[u[i].first].path)) continue;
            if (hx_hub_quant_match(r->files[u[i].first].path, quant) != want) continue;
            found++;
            at = i;
            append(list, sizeof list, &off, off ? ", %s%s" : "%s%s", r->files[u[i].first].path, -1);
        }
        if (found == 1) {
            *pick = at;
            return HX_OK;
        }
        if (found > 1)
            return hx_err_set(err, HX_E_AMBIGUOUS,
                              "quant '%s' matches %d files: %s; give the "
                              "full quant name or the file name after ':'",
                              quant, found, list);
    }
    *pick = -1;
    return HX_OK;
}

static bool has_top_level_safetensors(const hx_hub_repo *r)
{
    for (int i = 0; i < r->n_files; i++)
        if (!strchr(r->files[i].path, '/') && hx_str_ends_with(r->files[i].path, ".safetensors"))
            return true;
    return false;
}

hx_status hx_hub_plan_make(const hx_hub_repo *r, const char *sel, hx_hub_plan *out, hx_err *err)
{
    memset(out, 0, sizeof *out);
    out->index = -1;
    if (!sel[0] && hx_hub_repo_find(r, "config.json") >= 0 && has_top_level_safetensors(r))
        return plan_safetensors(r, out, err);
    int        n = 0;
    gguf_unit *u = gguf_units(r, &n);
    if (!u) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    char choices[300];
    hx_hub_gguf_choices(r, choices, sizeof choices);
    hx_status st = HX_OK;
    int       pick = -1;
    const int exact = sel[0] ? hx_hub_repo_find(r, sel) : -1;
    if (exact >= 0) {
        int         part, n_parts;
        size_t      stem;
        const char *p = r->files[exact].path;
        if (!ends_with_ci(p, ".gguf")) {
            st = hx_err_set(err, HX_E_INVALID,
                            "'%s' is not a GGUF file: a file after ':' picks "
                            "one GGUF model; give the repo id alone for a safetensors model",
                            sel);
            goto done;
        }
        const bool split = hx_hub_gguf_split(p, &part, &n_parts, &stem);
        for (int i = 0; i < n && pick < 0; i++) {
            const char *q = r->files[u[i].first].path;
            int         q_part, q_n;
            size_t      q_stem;
            if (u[i].first == exact ||
                (split && hx_hub_gguf_split(q, &q_part, &q_n, &q_stem) && q_n == n_parts &&
                 q_stem == stem && strncmp(q, p, stem) == 0))
                pick = i;
        }
        if (pick < 0)
            st = hx_err_set(err, HX_E_NOTFOUND,
                            "'%s' is part of a split GGUF file whose "
                            "other parts the repo does not list",
                            sel);
    } else if (sel[0] && ends_with_ci(sel, ".gguf")) {
        st = hx_err_set(err, HX_E_NOTFOUND, "no file '%s' in the repo; its GGUF files: %s", sel,
                        choices);
    } else if (sel[0]) {
        st = pick_quant(r, u, n, sel, &pick, err);
        if (st == HX_OK && pick < 0)
            st = hx_err_set(err, HX_E_NOTFOUND,
                            "no GGUF file in the repo matches quant '%s'; "
                            "its GGUF files: %s",
                            sel, choices);
    } else {
        int n_models = 0, only = -1;
        for (int i = 0; i < n; i++)
            if (!is_mmproj(r->files[u[i].first].path)) n_models++, only = i;
        if (n_models == 0) {
            st = hx_err_set(err, HX_E_NOTFOUND,
                            "the repo has neither safetensors weights with a "
                            "config.json nor GGUF files");
            goto done;
        }
        if (n_models == 1) {
            pick = only;
            goto done;
        }
        st = pick_quant(r, u, n, "Q4_K_M", &pick, err);
        if (st != HX_OK || pick >= 0) goto done;
        /* the smallest Q4; with several and a size unknown there is no telling which */
        int  n_q4 = 0;
        bool sizes_known = true;
        for (int i = 0; i < n; i++) {
            const char *p = r->files[u[i].first].path;
            if (is_mmproj(p) || hx_hub_quant_match(p, "Q4") == 0) continue;
            n_q4++;
            sizes_known = sizes_known && u[i].size >= 0;
            if (pick < 0 || u[i].size < u[pick].size) pick = i;
        }
        if (n_q4 > 1 && !sizes_known) pick = -1;
        if (pick < 0)
            st = hx_err_set(err, HX_E_AMBIGUOUS,
                            "the repo has several GGUF files and none is "
                            "Q4_K_M; pick one with :QUANT or :FILE: %s",
                            choices);
    }
done:
    if (st == HX_OK) st = plan_unit(r, &u[pick], out, err);
    hx_free(u);
    return st;
}

hx_status hx_hub_plan_apply_index(hx_hub_plan *p, const hx_hub_repo *r, const char *json,
                                  size_t len, hx_err *err)
{
    json_error_t je;
    json_t      *root = json_loadb(json, len, 0, &je);
    if (!root)
        return hx_err_set(err, HX_E_FORMAT, "safetensors index: not JSON (line %d: %s)", je.line,
                          je.text);
    hx_status st = HX_OK;
    json_t   *wm = json_object_get(root, "weight_map");
    int      *shards = NULL, n_shards = 0;
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        st = hx_err_set(err, HX_E_FORMAT, "safetensors index: no \"weight_map\" object");
        goto done;
    }
    if (!(shards = hx_calloc((size_t)r->n_files + 1, sizeof *shards))) {
        st = hx_err_set(err, HX_E_NOMEM, "out of memory");
        goto done;
    }
    const char *key;
    json_t     *v;
    json_object_foreach(wm, key, v)
    {
        const char *s = json_string_value(v);
        if (!s || !hx_hub_path_valid(s) || !hx_str_ends_with(s, ".safetensors")) {
            st = hx_err_set(err, HX_E_FORMAT,
                            "safetensors index: tensor '%.100s' maps to no "
                            "valid .safetensors file name",
                            key);
            goto done;
        }
        const int i = hx_hub_repo_find(r, s);
        if (i < 0) {
            st = hx_err_set(err, HX_E_NOTFOUND,
                            "safetensors index names '%.200s', which the "
                            "repo does not list",
                            s);
            goto done;
        }
        bool seen = false;
        for (int k = 0; k < n_shards && !seen; k++)
            seen = shards[k] == i;
        if (!seen) shards[n_shards++] = i;
    }
    /* the plan keeps its other files and takes exactly the shards the index names */
    int *files = hx_calloc((size_t)(p->n_files + n_shards) + 1, sizeof *files);
    if (!files) {
        st = hx_err_set(err, HX_E_NOMEM, "out of memory");
        goto done;
    }
    int n = 0;
    for (int k = 0; k < p->n_files; k++)
        if (!hx_str_ends_with(r->files[p->files[k]].path, ".safetensors")) files[n++] = p->files[k];
    for (int k = 0; k < n_shards; k++)
        files[n++] = shards[k];
    hx_free(p->files);
    p->files = files;
    p->n_files = n;
done:
    hx_free(shards);
    json_decref(root);
    return st;
}
