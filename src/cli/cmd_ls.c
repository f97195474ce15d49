/* cmd_ls.c - `hearth ls`: local models with family, format, quantization, size, parameters and
 * trained context; `hearth ls --supported`: the architectures this build runs.
 * Each model is opened (a map, no read of the weights), so the figures are the files' own. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "format/discover.h"
#include "format/model_files.h"
#include "model/model.h"

static int list_supported(void)
{
    const char *const *a = hx_llm_architectures();
    printf("architectures this build runs (FAMILY in `hearth ls`):\n");
    for (; *a; a++) printf("  %s\n", *a);
    return 0;
}

int hx_cmd_ls(int argc, char **argv)
{
    bool supported = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--supported") == 0) {
            supported = true;
        } else {
            fprintf(stderr, "usage: hearth ls [--supported]\n");
            return 2;
        }
    }
    if (supported) return list_supported();
    hx_err err = {0};
    hx_local_models l;
    if (hx_discover_list(&l, &err) != HX_OK) {
        fprintf(stderr, "hearth: %s\n", err.msg);
        return 1;
    }
    if (l.n == 0) {
        char home[1024], cache[1024];
        hx_discover_hearth_home(home, sizeof home);
        hx_discover_hf_cache(cache, sizeof cache);
        printf("no local models (looked in %s/models and %s; `hearth get ORG/REPO` downloads one)\n",
               home, cache);
    } else {
        printf("%-44s %-10s %-11s %-7s %10s %8s %8s  %s\n", "NAME", "FAMILY", "FORMAT", "QUANT",
               "SIZE", "PARAMS", "CONTEXT", "WHERE");
    }
    for (int i = 0; i < l.n; i++) {
        hx_err e = {0};
        hx_model_files *mf = NULL;
        if (hx_model_files_open(l.items[i].path, &mf, &e) != HX_OK) {
            printf("%-44s (cannot open: %s)\n", l.items[i].name, e.msg);
            continue;
        }
        char q[16], size[32], params[32], ctx[32];
        snprintf(q, sizeof q, "%s", hx_dtypes[hx_model_files_main_dtype(mf)].name);
        for (char *p = q; *p; p++) *p = (char)toupper((unsigned char)*p);
        hx_cli_fmt_bytes((double)hx_model_files_n_bytes(mf), size, sizeof size);
        hx_cli_fmt_count((double)hx_model_files_n_params(mf), params, sizeof params);
        if (mf->hp.n_ctx_train > 0) snprintf(ctx, sizeof ctx, "%d", (int)mf->hp.n_ctx_train);
        else snprintf(ctx, sizeof ctx, "?");
        printf("%-44s %-10s %-11s %-7s %10s %8s %8s  %s\n", l.items[i].name, mf->hp.arch,
               hx_file_format_name(mf->format), q, size, params, ctx, l.items[i].where);
        hx_model_files_close(mf);
    }
    hx_discover_free(&l);
    return 0;
}
