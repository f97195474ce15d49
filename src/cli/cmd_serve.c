/* cmd_serve.c - `hearth serve MODEL`: parses the flags into hx_serve_options and runs the
 * server (serve/serve.h). Bare `hearth` serves the starter model the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/sequence.h"
#include "format/discover.h"
#include "kv/kv_pool.h"
#include "serve/serve.h"

/* The starter model `make run` installs into $HEARTH_HOME/models. */
#define STARTER_MODEL "SmolLM2-135M-Instruct.Q4_1"

static void usage(void)
{
    fprintf(stderr,
            "usage: hearth serve [MODEL] [options]   (MODEL defaults to the starter model, %s)\n"
            "  --host H          address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
            "  --port P          port (default 8080; 0 picks a free one)\n"
            "  --api-key K       require `Authorization: Bearer K` (or x-api-key) on /v1 routes\n"
            "  --max-body BYTES  request body limit (default 16777216)\n"
            "  --max-queue N     requests allowed to wait (default 64; beyond: 503)\n"
            "  --timeout S       idle connection timeout in seconds (default 60)\n"
            "  --ctx N           context positions (default: the model's, at most 8192)\n"
            "  --max-tokens N    reply limit when a request sets none (default 512)\n"
            "  --batch N         requests generating together (default 8; more wait in order)\n"
            "  --step-tokens N   rows per engine step: a long prompt is prefilled in chunks of\n"
            "                    this size between the others' tokens (default and most: 256\n"
            "                    on the CPU, 1024 on a GPU)\n"
            "  --prompt-cache GB KV of earlier prompts kept for reuse by common prefix\n"
            "                    (default 2; 0 turns it off)\n"
            "  --kv f16|q8|q4    KV cache storage: q8 holds 1.8x the positions in the same\n"
            "                    memory (99%% top-1 agreement with f16), q4 3.2x (84%%)\n"
            "  --memory-budget GB refuse to start when weights + KV + scratch exceed it\n"
            "                    (default 75%% of RAM; on a GPU, 95%% of its free memory;\n"
            "                    see hearth fit)\n"
            "  --device NAME     cpu, cuda (the first GPU) or cuda:N (default cpu; see\n"
            "                    hearth devices)\n"
            "  --threads N       CPU threads (default: physical cores)\n"
            "  --temp T --top-k K --top-p P --min-p P --seed S\n"
            "                    sampling defaults for requests (over the model's own)\n"
            "  --chat-template-file F  a Jinja chat template to use instead of the model's\n"
            "  --thinking on|off whether thinking models think when a request does not say\n"
            "                    (default: the chat template's own default)\n"
            "  --int8            faster, less exact int8 activations (see hearth run --help)\n"
            "  --quiet           no per-request log lines\n",
            STARTER_MODEL);
}

static bool starter_present(const char *home)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s.gguf", home, STARTER_MODEL);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Reads a whole-number flag value in [lo, hi]; false (after a message) when it is not one. */
static bool int_arg(const char *flag, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    const long long x = strtoll(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "hearth serve: %s wants a whole number from %lld to %lld, got '%s'\n",
                flag, lo, hi, v);
        return false;
    }
    *out = x;
    return true;
}

/* Reads a size in GB (decimal, 0 to 1024); false (after a message) when it is not one. */
static bool gb_arg(const char *flag, const char *v, double *out)
{
    char *end;
    const double x = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(x >= 0 && x <= 1024)) {
        fprintf(stderr, "hearth serve: %s wants GB from 0 to 1024, got '%s'\n", flag, v);
        return false;
    }
    *out = x;
    return true;
}

int hx_cmd_serve(int argc, char **argv)
{
    hx_serve_options o = hx_serve_options_default();
    o.model = STARTER_MODEL;
    bool model_given = false;
    long long x;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 0;
        }
        if (strcmp(a, "--quiet") == 0) { o.quiet = true; continue; }
        if (strcmp(a, "--int8") == 0) { o.int8 = true; continue; }
        if (a[0] != '-') { o.model = a, model_given = true; continue; }
        if (!v) {
            fprintf(stderr, "hearth serve: %s needs a value\n\n", a);
            usage();
            return 2;
        }
        i++;
        const int sf = hx_cli_sampling_flag("serve", a, v, &o.sampling);
        if (sf < 0) return 2;
        if (sf > 0) continue;
        if (strcmp(a, "--host") == 0) o.host = v;
        else if (strcmp(a, "--device") == 0) o.device = v;
        else if (strcmp(a, "--api-key") == 0) o.api_key = v;
        else if (strcmp(a, "--port") == 0) { if (!int_arg(a, v, 0, 65535, &x)) return 2; o.port = (int)x; }
        else if (strcmp(a, "--max-body") == 0) { if (!int_arg(a, v, 1, 1LL << 40, &x)) return 2; o.max_body = (size_t)x; }
        else if (strcmp(a, "--max-queue") == 0) { if (!int_arg(a, v, 0, 1 << 20, &x)) return 2; o.max_queue = (int)x; }
        else if (strcmp(a, "--timeout") == 0) { if (!int_arg(a, v, 1, 86400, &x)) return 2; o.timeout_s = (int)x; }
        else if (strcmp(a, "--ctx") == 0) { if (!int_arg(a, v, 0, 1 << 24, &x)) return 2; o.n_ctx = (int32_t)x; }
        else if (strcmp(a, "--max-tokens") == 0) { if (!int_arg(a, v, 1, 1 << 24, &x)) return 2; o.max_tokens = (int32_t)x; }
        else if (strcmp(a, "--batch") == 0) { if (!int_arg(a, v, 1, 64, &x)) return 2; o.n_batch = (int32_t)x; }
        else if (strcmp(a, "--step-tokens") == 0) { if (!int_arg(a, v, 16, HX_SEQUENCE_STEP_TOKENS_GPU, &x)) return 2; o.step_tokens = (int32_t)x; }
        else if (strcmp(a, "--kv") == 0) {
            hx_err e = {0};
            if (hx_kv_dtype_parse(v, &o.kv, &e) != HX_OK) {
                fprintf(stderr, "hearth serve: %s\n", e.msg);
                return 2;
            }
        }
        else if (strcmp(a, "--chat-template-file") == 0) o.chat_template_file = v;
        else if (strcmp(a, "--thinking") == 0) {
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
                fprintf(stderr, "hearth serve: --thinking wants on or off, got '%s'\n", v);
                return 2;
            }
            o.thinking = strcmp(v, "on") == 0;
        }
        else if (strcmp(a, "--prompt-cache") == 0) { if (!gb_arg(a, v, &o.prompt_cache_gb)) return 2; }
        else if (strcmp(a, "--memory-budget") == 0) {
            if (!gb_arg(a, v, &o.memory_budget_gb)) return 2;
            if (o.memory_budget_gb <= 0) {
                fprintf(stderr, "hearth serve: --memory-budget must be above 0\n");
                return 2;
            }
        }
        else if (strcmp(a, "--threads") == 0) { if (!int_arg(a, v, 0, 1024, &x)) return 2; o.n_threads = (int)x; }
        else {
            fprintf(stderr, "hearth serve: unknown option %s\n\n", a);
            usage();
            return 2;
        }
    }
    char home[4096];
    hx_discover_hearth_home(home, sizeof home);
    if (!model_given && !starter_present(home)) {
        fprintf(stderr, "hearth: the starter model (%s) is not installed in %s/models;\n"
                        "`make run` (or scripts/starter-model.sh) fetches it, or name a model:\n"
                        "hearth serve MODEL\n", STARTER_MODEL, home);
        return 1;
    }
    return hx_serve_run(&o);
}
