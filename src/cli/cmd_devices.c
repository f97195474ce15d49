/* cmd_devices.c - `hearth devices [--json]`: what this hearth can run on.
 *
 * Lists the backends compiled into the binary (backend/device.h) and every GPU the driver
 * reports, with its compute capability, multiprocessors and memory, or the reason there is none
 * (CUDA not built in, no driver, no device). It only asks the driver: no backend is opened. The
 * names it prints are the ones --device takes. Exit status 0 whether or not a GPU is found; 2
 * on usage errors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "base/cpu.h"
#include "cli/cli.h"

#define MAX_GPUS 64

static void usage(void)
{
    fprintf(stderr,
            "usage: hearth devices [--json]\n"
            "  lists the compiled backends and the GPUs found; the names are what\n"
            "  --device takes (cpu, cuda, cuda:N)\n"
            "  --json   one JSON object: {\"backends\": [...], \"gpus\": [...],\n"
            "           \"reason\": ...} (sizes in bytes)\n");
}

/* The compiled backends ("cpu cuda") as a JSON array of names. */
static json_t *backends_json(void)
{
    json_t *a = json_array();
    const char *p = hx_backends_compiled();
    while (*p) {
        const size_t n = strcspn(p, " ");
        if (n) json_array_append_new(a, json_stringn(p, n));
        p += n;
        if (*p) p++;
    }
    return a;
}

static int print_json(const hx_gpu_info *gpus, int n, const char *why)
{
    json_t *list = json_array();
    for (int i = 0; i < n; i++) {
        const hx_gpu_info *g = &gpus[i];
        char name[32], cc[16];
        snprintf(name, sizeof name, "cuda:%d", g->index);
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        json_array_append_new(list, json_pack("{s:i, s:s, s:s, s:s, s:i, s:I, s:I}", "index",
                                              g->index, "device", name, "name", g->name,
                                              "compute_capability", cc, "sms", g->n_sm,
                                              "total_bytes", (json_int_t)g->total_bytes,
                                              "free_bytes", (json_int_t)g->free_bytes));
    }
    json_t *j = json_pack("{s:o, s:o, s:o}", "backends", backends_json(), "gpus", list, "reason",
                          n > 0 || !why ? json_null() : json_string(why));
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (s) puts(s);
    free(s);
    json_decref(j);
    return s ? 0 : 1;
}

static void print_text(const hx_gpu_info *gpus, int n, const char *why)
{
    char isa[128];
    hx_cpu_isa_names(hx_cpu_isa(), isa, sizeof isa);
    printf("backends  %s\n", hx_backends_compiled());
    printf("cpu       %s, %d physical core%s\n", isa, hx_cpu_physical_cores(),
           hx_cpu_physical_cores() == 1 ? "" : "s");
    if (n == 0) {
        printf("gpus      none: %s\n", why ? why : "no CUDA GPU found");
        return;
    }
    const double gib = 1024.0 * 1024.0 * 1024.0;
    for (int i = 0; i < n; i++) {
        const hx_gpu_info *g = &gpus[i];
        printf("cuda:%-4d %s, compute %d.%d, %d SMs, %.1f GiB (%.1f GiB free)\n", g->index,
               g->name, g->cc_major, g->cc_minor, g->n_sm, g->total_bytes / gib,
               g->free_bytes / gib);
    }
}

int hx_cmd_devices(int argc, char **argv)
{
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "hearth devices: unexpected argument: %s\n", argv[i]);
            usage();
            return 2;
        }
    }
    hx_gpu_info gpus[MAX_GPUS];
    const char *why = NULL;
    int n = hx_gpu_list(gpus, MAX_GPUS, &why);
    if (n > MAX_GPUS) n = MAX_GPUS; /* the count is of all found; the rest were not filled */
    if (n < 0) n = 0;
    if (json) return print_json(gpus, n, why);
    print_text(gpus, n, why);
    return 0;
}
