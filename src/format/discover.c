/* discover.c - local model listing and name resolution (see discover.h for the rules). */
#define _GNU_SOURCE
#include "discover.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/path.h"
#include "format/hub.h"

void hx_discover_hearth_home(char *buf, unsigned len)
{
    const char *h = getenv("HEARTH_HOME");
    if (h && *h) hx_fmt(buf, len, "%s", h);
    else hx_fmt(buf, len, "%s/.cache/hearth", getenv("HOME") ? getenv("HOME") : "/root");
}

void hx_discover_hf_cache(char *buf, unsigned len)
{
    const char *c = getenv("HF_HUB_CACHE"), *home = getenv("HF_HOME");
    if (c && *c) hx_fmt(buf, len, "%s", c);
    else if (home && *home) hx_fmt(buf, len, "%s/hub", home);
    else hx_fmt(buf, len, "%s/.cache/huggingface/hub", getenv("HOME") ? getenv("HOME") : "/root");
}

static hx_status add(hx_local_models *l, const char *name, const char *path, const char *where,
                     const char *root, hx_err *err)
{
    hx_local_model *p = hx_realloc(l->items, (size_t)(l->n + 1) * sizeof *p);
    if (!p) return hx_err_set(err, HX_E_NOMEM, "out of memory listing models");
    l->items = p;
    hx_local_model *m = &p[l->n];
    m->name = hx_strdup(name);
    m->path = hx_strdup(path);
    m->where = hx_strdup(where);
    m->root = hx_strdup(root);
    l->n++;
    if (!m->name || !m->path || !m->where || !m->root)
        return hx_err_set(err, HX_E_NOMEM, "out of memory listing models");
    return HX_OK;
}

/* A GGUF file that is a model of its own: any .gguf but the later parts of a split one. */
static bool gguf_model_file(const char *name)
{
    int part, n_parts;
    size_t stem;
    if (!hx_str_ends_with(name, ".gguf")) return false;
    return !hx_hub_gguf_split(name, &part, &n_parts, &stem) || part == 1;
}

/* Adds every .gguf model in dir as "<prefix><file>" (the .gguf kept when keep_ext). root is what
 * removing it deletes; NULL: the file itself. */
static hx_status add_ggufs(hx_local_models *l, const char *dir, const char *prefix, bool keep_ext,
                           const char *where, const char *root, hx_err *err)
{
    DIR *d = opendir(dir);
    if (!d) return HX_OK;
    hx_status st = HX_OK;
    struct dirent *e;
    while (st == HX_OK && (e = readdir(d))) {
        if (!gguf_model_file(e->d_name)) continue;
        char name[1024], path[4096];
        hx_fmt(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!hx_path_is_file(path)) continue;
        int n = (int)strlen(e->d_name) - (keep_ext ? 0 : 5);
        hx_fmt(name, sizeof name, "%s%.*s", prefix, n, e->d_name);
        st = add(l, name, path, where, root ? root : path, err);
    }
    closedir(d);
    return st;
}

static hx_status scan_hearth(hx_local_models *l, hx_err *err)
{
    char home[2048], dir[4096];
    hx_discover_hearth_home(home, sizeof home);
    hx_fmt(dir, sizeof dir, "%s/models", home);
    hx_status st = add_ggufs(l, dir, "", false, "hearth", NULL, err);
    DIR *d = opendir(dir);
    if (!d) return st;
    struct dirent *e;
    while (st == HX_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[4096 + 256], cfg[4096 + 300];
        hx_fmt(sub, sizeof sub, "%s/%s", dir, e->d_name);
        if (!hx_path_is_dir(sub)) continue;
        hx_fmt(cfg, sizeof cfg, "%s/config.json", sub);
        if (hx_path_is_file(cfg)) {
            st = add(l, e->d_name, sub, "hearth", sub, err);
        } else {
            char prefix[300];
            hx_fmt(prefix, sizeof prefix, "%s/", e->d_name);
            st = add_ggufs(l, sub, prefix, false, "hearth", NULL, err);
        }
    }
    closedir(d);
    return st;
}

/* Picks the snapshot folder of one cached repo: refs/main, else the newest snapshot. */
static bool pick_snapshot(const char *repo_dir, char *out, size_t len)
{
    char ref[4096], rev[128] = "";
    hx_fmt(ref, sizeof ref, "%s/refs/main", repo_dir);
    FILE *f = fopen(ref, "r");
    if (f) {
        if (fgets(rev, sizeof rev, f)) rev[strcspn(rev, "\r\n")] = '\0';
        fclose(f);
    }
    if (rev[0]) {
        hx_fmt(out, len, "%s/snapshots/%s", repo_dir, rev);
        if (hx_path_is_dir(out)) return true;
    }
    char snaps[4096];
    hx_fmt(snaps, sizeof snaps, "%s/snapshots", repo_dir);
    DIR *d = opendir(snaps);
    if (!d) return false;
    struct dirent *e;
    long newest = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096 + 256];
        struct stat st;
        hx_fmt(p, sizeof p, "%s/%s", snaps, e->d_name);
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && st.st_mtime > newest) {
            newest = st.st_mtime;
            hx_fmt(out, len, "%s", p);
        }
    }
    closedir(d);
    return newest >= 0;
}

static hx_status scan_hf(hx_local_models *l, hx_err *err)
{
    char cache[2048];
    hx_discover_hf_cache(cache, sizeof cache);
    DIR *d = opendir(cache);
    if (!d) return HX_OK;
    hx_status st = HX_OK;
    struct dirent *e;
    while (st == HX_OK && (e = readdir(d))) {
        if (strncmp(e->d_name, "models--", 8) != 0) continue;
        /* models--ORG--NAME → ORG/NAME (names themselves never contain "--" at the split) */
        char repo[512];
        const char *rest = e->d_name + 8, *sep = strstr(rest, "--");
        if (sep) hx_fmt(repo, sizeof repo, "%.*s/%s", (int)(sep - rest), rest, sep + 2);
        else hx_fmt(repo, sizeof repo, "%s", rest);
        char repo_dir[4096], snap[4096], cfg[4096 + 16];
        hx_fmt(repo_dir, sizeof repo_dir, "%s/%s", cache, e->d_name);
        if (!pick_snapshot(repo_dir, snap, sizeof snap)) continue;
        hx_fmt(cfg, sizeof cfg, "%s/config.json", snap);
        if (hx_path_is_file(cfg)) st = add(l, repo, snap, "hf-cache", repo_dir, err);
        char prefix[520];
        hx_fmt(prefix, sizeof prefix, "%s:", repo);
        if (st == HX_OK) st = add_ggufs(l, snap, prefix, true, "hf-cache", repo_dir, err);
        /* quants a repo keeps in folders of their own (Q4_K_M/FILE-00001-of-00002.gguf) */
        DIR *sd = st == HX_OK ? opendir(snap) : NULL;
        struct dirent *se;
        while (sd && st == HX_OK && (se = readdir(sd))) {
            char sub[4096 + 256], subprefix[1100];
            if (se->d_name[0] == '.') continue;
            hx_fmt(sub, sizeof sub, "%s/%s", snap, se->d_name);
            if (!hx_path_is_dir(sub)) continue;
            hx_fmt(subprefix, sizeof subprefix, "%s:%s/", repo, se->d_name);
            st = add_ggufs(l, sub, subprefix, true, "hf-cache", repo_dir, err);
        }
        if (sd) closedir(sd);
    }
    closedir(d);
    return st;
}

static int cmp_model(const void *a, const void *b)
{
    return strcasecmp(((const hx_local_model *)a)->name, ((const hx_local_model *)b)->name);
}

hx_status hx_discover_list(hx_local_models *out, hx_err *err)
{
    hx_local_models l = {0};
    hx_status st = scan_hearth(&l, err);
    if (st == HX_OK) st = scan_hf(&l, err);
    if (st != HX_OK) {
        hx_discover_free(&l);
        return st;
    }
    if (l.n > 1) qsort(l.items, (size_t)l.n, sizeof *l.items, cmp_model);
    *out = l;
    return HX_OK;
}

void hx_discover_free(hx_local_models *l)
{
    for (int i = 0; i < l->n; i++) {
        hx_free(l->items[i].name);
        hx_free(l->items[i].path);
        hx_free(l->items[i].where);
        hx_free(l->items[i].root);
    }
    hx_free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* Case-insensitive substring test. */
static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return true;
    return n == 0;
}

bool hx_discover_repo_id(const hx_local_model *m, char *buf, unsigned len)
{
    if (strcmp(m->where, "hf-cache") != 0) return false;
    const char *colon = strchr(m->name, ':');
    return hx_fmt(buf, len, "%.*s", colon ? (int)(colon - m->name) : (int)strlen(m->name), m->name);
}

/* One candidate list for an error message: the names of list for which keep[i]. */
static void name_list(const hx_local_models *l, const bool *keep, char *list, size_t len)
{
    size_t off = 0;
    list[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        if (!keep[i]) continue;
        if (!hx_fmt(list + off, len - off, "%s%s", off ? ", " : "", l->items[i].name)) {
            memcpy(list + len - 4, "...", 4); /* the list is cut, and says so */
            break;
        }
        off += strlen(list + off);
    }
}

/* How well sel picks entry m of repo: 3 the exact file, 2 the quant exactly, 1 a quant prefix. */
static int select_score(const hx_local_model *m, const char *repo, const char *sel)
{
    char id[512];
    if (!hx_discover_repo_id(m, id, sizeof id) || strcasecmp(id, repo) != 0) return 0;
    const char *file = strchr(m->name, ':');
    if (!file) return 0;
    file++;
    if (strcasecmp(file, sel) == 0) return 3;
    return hx_hub_quant_match(file, sel);
}

hx_status hx_discover_find(const hx_local_models *l, const char *arg, int *idx, hx_err *err)
{
    if (!arg || !*arg) return hx_err_set(err, HX_E_INVALID, "no model given");
    bool *keep = hx_calloc((size_t)l->n + 1, sizeof *keep);
    if (!keep) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    hx_status st = HX_OK;
    char list[400];
    int n = 0, pick = -1;
    for (int i = 0; i < l->n && pick < 0; i++)
        if (strcasecmp(l->items[i].name, arg) == 0) pick = i;
    if (pick >= 0) goto done;
    /* a repo id: the one model of that repo */
    for (int i = 0; i < l->n; i++) {
        char id[512];
        if ((keep[i] = hx_discover_repo_id(&l->items[i], id, sizeof id) && strcasecmp(id, arg) == 0))
            n++, pick = i;
    }
    if (n > 1) {
        name_list(l, keep, list, sizeof list);
        st = hx_err_set(err, HX_E_AMBIGUOUS, "repo '%s' holds %d models: %s; add :QUANT or :FILE",
                        arg, n, list);
        goto done;
    }
    if (n == 1) goto done;
    /* ORG/NAME:QUANT or ORG/NAME:FILE */
    const char *colon = strchr(arg, ':');
    if (colon) {
        char repo[512];
        int best = 0;
        hx_fmt(repo, sizeof repo, "%.*s", (int)(colon - arg), arg);
        for (int i = 0; i < l->n; i++) {
            const int s = select_score(&l->items[i], repo, colon + 1);
            if (s > best) best = s;
        }
        for (int i = 0; i < l->n && best > 0; i++)
            if ((keep[i] = select_score(&l->items[i], repo, colon + 1) == best)) n++, pick = i;
        if (n > 1) {
            name_list(l, keep, list, sizeof list);
            st = hx_err_set(err, HX_E_AMBIGUOUS, "model '%s' matches %d models: %s; give more of "
                            "the name", arg, n, list);
        }
        if (n >= 1) goto done;
    }
    for (int i = 0; i < l->n; i++)
        if ((keep[i] = contains_ci(l->items[i].name, arg))) n++, pick = i;
    if (n == 0) {
        char home[2048], cache[2048];
        hx_discover_hearth_home(home, sizeof home);
        hx_discover_hf_cache(cache, sizeof cache);
        st = hx_err_set(err, HX_E_NOTFOUND,
                        "model '%s' not found: not a path, and no local model name contains it "
                        "(looked in %s/models and %s; `hearth ls` lists them, `hearth get ORG/REPO` "
                        "downloads one)",
                        arg, home, cache);
    } else if (n > 1) {
        name_list(l, keep, list, sizeof list);
        st = hx_err_set(err, HX_E_AMBIGUOUS, "model '%s' matches %d models: %s; give more of the name",
                        arg, n, list);
    }
done:
    hx_free(keep);
    if (st == HX_OK) *idx = pick;
    return st;
}

hx_status hx_discover_resolve(const char *arg, char **path, hx_err *err)
{
    if (!arg || !*arg) return hx_err_set(err, HX_E_INVALID, "no model given");
    if (hx_path_is_file(arg) || hx_path_is_dir(arg)) {
        if (!(*path = hx_strdup(arg))) return hx_err_set(err, HX_E_NOMEM, "out of memory");
        return HX_OK;
    }
    hx_local_models l;
    int i;
    hx_status st = hx_discover_list(&l, err);
    if (st != HX_OK) return st;
    st = hx_discover_find(&l, arg, &i, err);
    if (st == HX_OK && !(*path = hx_strdup(l.items[i].path)))
        st = hx_err_set(err, HX_E_NOMEM, "out of memory");
    hx_discover_free(&l);
    return st;
}
