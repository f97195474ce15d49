/* cmd_rm.c - `hearth rm NAME [--yes]`: delete a local model.
 *
 * NAME is resolved like any model argument (`hearth ls` names, substrings, ORG/REPO:QUANT) or is
 * a repo id of the Hugging Face cache. What goes is the model's root (hx_local_model.root): a
 * file or folder in $HEARTH_HOME/models, or the whole models--ORG--REPO folder of the HF cache
 * with every model in it (and its lock folder). Nothing is deleted without --yes or a "y" typed
 * at the terminal; a root outside those two places is refused whatever the name says. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/path.h"
#include "cli/cli.h"
#include "format/discover.h"
#include "format/hub.h"

static int64_t du_total;

static int du_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)path, (void)ftw;
    if (type == FTW_F && S_ISREG(sb->st_mode)) du_total += (int64_t)sb->st_size;
    return 0;
}

static int rm_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT) {
        fprintf(stderr, "hearth rm: cannot remove %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* True when path is dir/<one component> (a direct child). */
static bool child_of(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return strncmp(path, dir, n) == 0 && path[n] == '/' && path[n + 1] &&
           !strchr(path + n + 1, '/');
}

/* Deletes root, a file or a folder tree (symlinks themselves, never their targets). */
static int remove_tree(const char *root)
{
    struct stat sb;
    if (lstat(root, &sb) != 0) return errno == ENOENT ? 0 : 1;
    if (!S_ISDIR(sb.st_mode)) return rm_cb(root, &sb, FTW_F, NULL);
    return nftw(root, rm_cb, 32, FTW_DEPTH | FTW_PHYS) != 0;
}

int hx_cmd_rm(int argc, char **argv)
{
    const char *name = NULL;
    bool        yes = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--yes") == 0 || strcmp(argv[i], "-y") == 0)
            yes = true;
        else if (argv[i][0] == '-' || name) {
            fprintf(stderr, "usage: hearth rm NAME [--yes]\n");
            return 2;
        } else
            name = argv[i];
    }
    if (!name) {
        fprintf(stderr, "usage: hearth rm NAME [--yes]\n");
        return 2;
    }
    hx_err          err = {0};
    hx_local_models l;
    if (hx_discover_list(&l, &err) != HX_OK) {
        fprintf(stderr, "hearth rm: %s\n", err.msg);
        return 1;
    }
    int rc = 1, pick = -1;
    /* a repo id names the whole repo, however many models it holds */
    for (int i = 0; i < l.n && pick < 0; i++) {
        char id[512];
        if (hx_discover_repo_id(&l.items[i], id, sizeof id) && strcasecmp(id, name) == 0) pick = i;
    }
    if (pick < 0 && hx_discover_find(&l, name, &pick, &err) != HX_OK) {
        fprintf(stderr, "hearth rm: %s\n", err.msg);
        goto done;
    }
    const hx_local_model *m = &l.items[pick];
    char                  home[2048], cache[2048], models[2100], what[512], lock[4200] = "";
    hx_discover_hearth_home(home, sizeof home);
    hx_discover_hf_cache(cache, sizeof cache);
    hx_fmt(models, sizeof models, "%s/models", home);
    const bool  hf = strcmp(m->where, "hf-cache") == 0;
    const char *base = strrchr(m->root, '/') ? strrchr(m->root, '/') + 1 : m->root;
    if (hf ? !child_of(m->root, cache) || strncmp(base, "models--", 8) != 0
           : strncmp(m->root, models, strlen(models)) != 0 || m->root[strlen(models)] != '/') {
        fprintf(stderr, "hearth rm: %s lies outside %s; not removing it\n", m->root,
                hf ? cache : models);
        goto done;
    }
    if (hf) {
        hx_discover_repo_id(m, what, sizeof what);
        hx_fmt(lock, sizeof lock, "%s/.locks/%s", cache, base);
    } else {
        hx_fmt(what, sizeof what, "%s", m->name);
    }
    du_total = 0;
    struct stat sb;
    if (lstat(m->root, &sb) == 0 && S_ISDIR(sb.st_mode))
        nftw(m->root, du_cb, 32, FTW_PHYS);
    else if (stat(m->root, &sb) == 0)
        du_total = (int64_t)sb.st_size;
    char sz[32];
    hx_cli_fmt_bytes((double)du_total, sz, sizeof sz);
    printf("%s (%s): %s\n", what, sz, m->root);
    int n_models = 0;
    for (int i = 0; i < l.n; i++)
        if (strcmp(l.items[i].root, m->root) == 0) n_models++;
    if (n_models > 1) {
        printf("  it holds %d models, all of them go:\n", n_models);
        for (int i = 0; i < l.n; i++)
            if (strcmp(l.items[i].root, m->root) == 0) printf("    %s\n", l.items[i].name);
    }
    if (!yes) {
        if (!isatty(STDIN_FILENO)) {
            fprintf(stderr, "hearth rm: not removing %s without confirmation: add --yes\n", what);
            goto done;
        }
        printf("remove it? [y/N] ");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin) || (line[0] != 'y' && line[0] != 'Y')) {
            printf("kept\n");
            rc = 0;
            goto done;
        }
    }
    if (remove_tree(m->root) != 0) goto done;
    if (lock[0]) remove_tree(lock); /* huggingface_hub's lock files for the repo, if any */
    printf("removed %s (%s freed)\n", what, sz);
    rc = 0;
done:
    hx_discover_free(&l);
    return rc;
}
