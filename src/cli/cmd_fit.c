/* cmd_fit.c - `hearth fit MODEL [--ctx N] [--batch B] [--kv f16|q8|q4] [--memory-budget GB]
 * [--threads N] [--device NAME] [--json] [--no-speed]`.
 *
 * Prints the memory contract of engine/fit.h for a model without loading its weights: each
 * term, the total against the budget, the largest safe context, the bytes one decoded token
 * reads and, from a short bandwidth probe (base/membw.h), the decode speed the memory roofline
 * allows. With --device cuda[:N] the fit is of that GPU's memory, read from the driver
 * (hx_gpu_list) without opening a backend; the probe measures the host's memory, so there is
 * no speed prediction then. The text and the JSON come from the same report. Exit status: 0
 * when the model fits, 1 when it does not (the report is still printed) or the model or device
 * cannot be opened, 2 on usage errors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "base/alloc.h"
#include "base/membw.h"
#include "cli/cli.h"
#include "engine/fit.h"
#include "kv/kv_pool.h"
#include "format/discover.h"
#include "format/model_files.h"

#define PROBE_THREADS 2   /* the bandwidth probe's default: what one decode stream gets */
#define PROBE_MS      300
#define MAX_GPUS      64

typedef struct {
    const char    *model;
    const char    *device; /* NULL: the CPU */
    hx_gpu_info    gpu;    /* the GPU the fit is of (device names one) */
    hx_fit_params  p;
    int            probe_threads;
    bool           json, speed;
} fit_opts;

static void usage(void)
{
    fprintf(stderr,
            "usage: hearth fit MODEL [options]\n"
            "  --ctx N             context positions per sequence (default: the model's, at most 8192)\n"
            "  --batch B           concurrent sequences (default 8)\n"
            "  --kv f16|q8|q4      KV cache element type (default f16)\n"
            "  --memory-budget GB  the budget in decimal GB (default: 75%% of RAM)\n"
            "  --threads N         CPU threads (default: physical cores; the probe uses 2)\n"
            "  --device NAME       cpu, cuda or cuda:N: fit the GPU's memory instead of the\n"
            "                      host's (default cpu; the budget: 95%% of its free memory)\n"
            "  --json              the report as one JSON object (sizes in bytes)\n"
            "  --no-speed          skip the bandwidth probe and the speed prediction\n"
            "exit status: 0 fits, 1 does not fit (or the model cannot be opened), 2 usage\n");
}

/* A whole-string integer in [lo, hi], or false. */
static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Reads the options into o: 0 to go on, 2 (after a message) on a usage error, -1 when --help
 * printed the usage (exit 0). */
static int parse(int argc, char **argv, fit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->p = hx_fit_params_default();
    o->probe_threads = PROBE_THREADS;
    o->speed = true;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return -1;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--no-speed") == 0) {
            o->speed = false;
        } else if (strcmp(a, "--ctx") == 0 && v) {
            if (!parse_int(v, 16, 1L << 24, &n)) goto bad;
            o->p.n_ctx = (int32_t)n, i++;
        } else if (strcmp(a, "--batch") == 0 && v) {
            if (!parse_int(v, 1, 4096, &n)) goto bad;
            o->p.n_batch = (int32_t)n, i++;
        } else if (strcmp(a, "--device") == 0 && v) {
            o->device = v, i++;
        } else if (strcmp(a, "--threads") == 0 && v) {
            if (!parse_int(v, 1, 256, &n)) goto bad;
            o->p.n_threads = o->probe_threads = (int)n, i++;
        } else if (strcmp(a, "--kv") == 0 && v) {
            hx_err e = {0};
            if (hx_kv_dtype_parse(v, &o->p.kv_type, &e) != HX_OK) goto bad;
            i++;
        } else if (strcmp(a, "--memory-budget") == 0 && v) {
            char *end;
            const double gb = strtod(v, &end);
            if (end == v || *end || !(gb > 0) || gb > 1e9) goto bad;
            o->p.budget_bytes = (uint64_t)(gb * 1e9);
            if (o->p.budget_bytes == 0) goto bad;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hearth fit: unknown option or missing value: %s\n", a);
            return 2;
        } else if (!o->model) {
            o->model = a;
        } else {
            fprintf(stderr, "hearth fit: unexpected argument: %s\n", a);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "hearth fit: invalid value for %s: %s\n", a, v);
        return 2;
    }
    if (!o->model) {
        usage();
        return 2;
    }
    return 0;
}

/* Finds the GPU --device names in the driver's list (hx_gpu_list: no backend is opened, so
 * nothing is allocated on it) and takes its memory into the fit's parameters. 0 to go on (the
 * CPU: nothing to do), 2 for a name that is no device, 1 when the GPU is not there; both after
 * one line naming the device and the reason. */
static int find_gpu(fit_opts *o)
{
    const char *d = o->device;
    if (!d || !*d || strcmp(d, "cpu") == 0) return 0;
    if (!hx_device_is_gpu(d)) {
        fprintf(stderr, "hearth fit: unknown device '%s' (expected cpu, cuda or cuda:N)\n", d);
        return 2;
    }
    const int want = strcmp(d, "cuda") == 0 ? 0 : atoi(d + 5); /* "cuda:N", checked above */
    hx_gpu_info gpus[MAX_GPUS];
    const char *why = NULL;
    const int n = hx_gpu_list(gpus, MAX_GPUS, &why);
    if (n <= 0) {
        fprintf(stderr, "hearth fit: device '%s': %s; `hearth devices` lists what this hearth "
                        "has\n", d, why ? why : "no CUDA GPU found");
        return 1;
    }
    if (want >= n || want >= MAX_GPUS) {
        fprintf(stderr, "hearth fit: device '%s': no such GPU (%d found; `hearth devices` lists "
                        "them)\n", d, n);
        return 1;
    }
    o->gpu = gpus[want];
    /* A driver that could not say: the fit still needs a device, so count it as 1 byte. */
    o->p.device_total_bytes = o->gpu.total_bytes > 0 ? (uint64_t)o->gpu.total_bytes : 1;
    o->p.device_free_bytes = o->gpu.free_bytes > 0 ? (uint64_t)o->gpu.free_bytes : 0;
    o->speed = false; /* the probe reads host memory, not the GPU's */
    return 0;
}

static json_t *report_json(const char *path, const hx_fit_report *r, const hx_gpu_info *gpu,
                           int probe_threads)
{
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string(path));
    /* Only a GPU adds keys: the CPU's report keeps the shape its readers know. */
    if (gpu) {
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", gpu->index);
        json_object_set_new(j, "device", json_string(name));
        json_object_set_new(j, "gpu_name", json_string(gpu->name));
        json_object_set_new(j, "gpu_memory",
                            json_pack("{s:I, s:I}", "free_bytes", (json_int_t)r->device_free_bytes,
                                      "total_bytes", (json_int_t)r->device_total_bytes));
    }
    json_object_set_new(j, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(j, "n_batch", json_integer(r->n_batch));
    json_object_set_new(j, "n_threads", json_integer(r->n_threads));
    json_object_set_new(j, "kv_type", json_string(hx_kv_dtype_name(r->kv_type)));
    json_object_set_new(j, "repacked", json_boolean(r->repacked));
    json_object_set_new(j, "n_ctx_train", json_integer(r->n_ctx_train));
#define BYTES(k) json_object_set_new(j, #k, json_integer((json_int_t)r->k))
    BYTES(weights_bytes);
    BYTES(weights_packed_bytes);
    BYTES(kv_bytes);
    BYTES(kv_bytes_per_token);
    json_object_set_new(j, "kv_window_layers", json_integer(r->kv_window_layers));
    json_object_set_new(j, "kv_window", json_integer(r->kv_window));
    BYTES(scratch_bytes);
    BYTES(scratch_reserved_bytes);
    BYTES(embed_bytes);
    BYTES(load_bytes);
    BYTES(overhead_bytes);
    BYTES(total_bytes);
    BYTES(budget_bytes);
#undef BYTES
    json_object_set_new(j, "fits", json_boolean(r->fits));
    json_object_set_new(j, "max_ctx", json_integer(r->max_ctx));
    json_object_set_new(j, "read_bytes_per_token", json_integer((json_int_t)r->read_bytes_per_token));
    const bool bw = r->bandwidth_bytes_per_s > 0;
    json_object_set_new(j, "bandwidth_bytes_per_s", bw ? json_real(r->bandwidth_bytes_per_s) : json_null());
    json_object_set_new(j, "bandwidth_threads", bw ? json_integer(probe_threads) : json_null());
    json_object_set_new(j, "decode_tok_s", bw ? json_real(r->decode_tok_s) : json_null());
    json_object_set_new(j, "decode_tok_s_batch", bw ? json_real(r->decode_tok_s_batch) : json_null());
    return j;
}

static void print_text(const char *path, const hx_fit_report *r, const hx_gpu_info *gpu,
                       int probe_threads)
{
    char a[32], b[32];
#define FMT(buf, x) hx_cli_fmt_bytes((double)(x), buf, sizeof buf)
    printf("model           %s\n", path);
    if (gpu) {
        FMT(a, r->device_total_bytes);
        FMT(b, r->device_free_bytes);
        printf("device          cuda:%d, %s: %s, %s free\n", gpu->index, gpu->name, a, b);
        printf("context         %d positions x %d sequence%s, KV %s\n", r->n_ctx, r->n_batch,
               r->n_batch == 1 ? "" : "s", hx_kv_dtype_name(r->kv_type));
        FMT(a, r->weights_bytes);
        printf("weights         %12s  (uploaded to the GPU in the file's formats)\n", a);
    } else {
        printf("context         %d positions x %d sequence%s, KV %s, %d thread%s\n", r->n_ctx,
               r->n_batch, r->n_batch == 1 ? "" : "s", hx_kv_dtype_name(r->kv_type),
               r->n_threads, r->n_threads == 1 ? "" : "s");
        FMT(a, r->weights_bytes);
        FMT(b, r->weights_packed_bytes);
        printf("weights         %12s  (%s repacked for the CPU kernels, the rest mapped)\n", a, b);
    }
    FMT(a, r->kv_bytes);
    FMT(b, r->kv_bytes_per_token);
    if (r->kv_window_layers > 0)
        printf("kv cache        %12s  (%s per position; %d sliding layers keep %d positions)\n",
               a, b, r->kv_window_layers, r->kv_window);
    else
        printf("kv cache        %12s  (%s per position)\n", a, b);
    FMT(a, r->scratch_bytes);
    FMT(b, r->scratch_reserved_bytes);
    if (gpu) printf("scratch         %12s  (device allocations, committed whole)\n", a);
    else printf("scratch         %12s  (%s reserved, written only in part)\n", a, b);
    FMT(a, r->embed_bytes);
    printf("embedding rows  %12s\n", a);
    FMT(a, r->load_bytes);
    printf("load transient  %12s\n", a);
    FMT(a, r->overhead_bytes);
    printf("overhead        %12s\n", a);
    FMT(a, r->total_bytes);
    printf("total           %12s\n", a);
    FMT(a, r->budget_bytes);
    printf("budget          %12s\n", a);
    if (r->fits) {
        FMT(a, r->budget_bytes - r->total_bytes);
        printf("fits            yes, %s to spare\n", a);
    } else {
        FMT(a, r->total_bytes - r->budget_bytes);
        printf("fits            NO, %s over the budget\n", a);
    }
    if (r->max_ctx > 0)
        printf("max context     %d positions per sequence at %d sequence%s (trained: %d)\n",
               r->max_ctx, r->n_batch, r->n_batch == 1 ? "" : "s", r->n_ctx_train);
    else
        printf("max context     none: not even %d positions fit\n", 16);
    FMT(a, r->read_bytes_per_token);
    printf("read per token  %12s\n", a);
    if (r->bandwidth_bytes_per_s > 0) {
        printf("bandwidth       %.1f GB/s (measured, %d thread%s)\n", r->bandwidth_bytes_per_s / 1e9,
               probe_threads, probe_threads == 1 ? "" : "s");
        printf("decode          %.0f tok/s one sequence, %.0f tok/s over %d (the memory roofline)\n",
               r->decode_tok_s, r->decode_tok_s_batch, r->n_batch);
    } else if (gpu) {
        printf("decode          not predicted on a GPU (the bandwidth probe reads host memory)\n");
    }
#undef FMT
}

int hx_cmd_fit(int argc, char **argv)
{
    fit_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = find_gpu(&o))) return rc;
    const hx_gpu_info *gpu = o.p.device_total_bytes > 0 ? &o.gpu : NULL;
    hx_err err = {0};
    char *path = NULL;
    hx_model_files *mf = NULL;
    hx_fit_report r;
    hx_status st = hx_discover_resolve(o.model, &path, &err);
    if (st == HX_OK) st = hx_model_files_open(path, &mf, &err);
    if (st == HX_OK) {
        if (o.speed) o.p.bandwidth_bytes_per_s = hx_membw_read(o.probe_threads, PROBE_MS);
        st = hx_fit_compute(mf, &o.p, &r, &err);
    }
    if (st != HX_OK) {
        fprintf(stderr, "hearth: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    if (o.json) {
        json_t *j = report_json(path, &r, gpu, o.probe_threads);
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        if (s) puts(s);
        free(s);
        json_decref(j);
    } else {
        print_text(path, &r, gpu, o.probe_threads);
    }
    rc = r.fits ? 0 : 1;
done:
    hx_model_files_close(mf);
    hx_free(path);
    return rc;
}
