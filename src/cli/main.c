/* main.c - the hearth command: dispatches verbs. Only this file and the verbs may exit. */
#include <stdio.h>
#include <string.h>

#include "backend/device.h"
#include "base/cpu.h"
#include "cli/cli.h"
#include "hearth.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} verb;

static const verb verbs[] = {
    {"serve",   hx_cmd_serve,   "[MODEL]: the OpenAI/Anthropic API and chat page on 127.0.0.1:8080"},
    {"run",     hx_cmd_run,     "MODEL \"PROMPT\": generate a reply (chat template applied; --raw skips it)"},
    {"chat",    hx_cmd_chat,    "MODEL: interactive multi-turn chat"},
    {"inspect", hx_cmd_inspect, "describe a model: architecture, sizes, tensors (--tensors, --json)"},
    {"fit",     hx_cmd_fit,     "MODEL: will it fit? memory by term, largest safe context, decode speed (--json)"},
    {"devices", hx_cmd_devices, "the compiled backends and the GPUs found: the names --device takes (--json)"},
    {"ls",      hx_cmd_ls,      "list local models ($HEARTH_HOME/models and the Hugging Face cache; --supported)"},
    {"get",     hx_cmd_get,     "ORG/REPO[:QUANT|:FILE]: download a model from the Hugging Face hub"},
    {"rm",      hx_cmd_rm,      "NAME [--yes]: delete a local model"},
    {"tokenize", hx_cmd_tokenize, "SOURCE [TEXT]: token ids and pieces (--json; no TEXT: JSON lines on stdin)"},
    {"detokenize", hx_cmd_detokenize, "SOURCE: token ids on stdin to text"},
    {"template", hx_cmd_template, "SOURCE: render the chat template for a JSON request on stdin"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: hearth VERB [ARGS]   (no verb: serve the starter model)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-11s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\nMODEL is a path (.gguf file or safetensors folder), a Hugging Face repo id in the\n"
               "HF cache, or part of a local model's name (see `hearth ls`).\n"
               "serve, run, chat and fit take --device cpu|cuda|cuda:N (default cpu).\n"
               "hearth --version prints the version and the compiled backends.\n");
}

void hx_cli_fmt_count(double n, char *buf, unsigned len)
{
    if (n >= 1e9) snprintf(buf, len, "%.2fB", n / 1e9);
    else if (n >= 1e6) snprintf(buf, len, "%.1fM", n / 1e6);
    else if (n >= 1e3) snprintf(buf, len, "%.1fK", n / 1e3);
    else snprintf(buf, len, "%.0f", n);
}

void hx_cli_fmt_bytes(double n, char *buf, unsigned len)
{
    if (n >= 1024.0 * 1024 * 1024) snprintf(buf, len, "%.2f GiB", n / (1024.0 * 1024 * 1024));
    else if (n >= 1024.0 * 1024) snprintf(buf, len, "%.1f MiB", n / (1024.0 * 1024));
    else if (n >= 1024.0) snprintf(buf, len, "%.1f KiB", n / 1024.0);
    else snprintf(buf, len, "%.0f B", n);
}

/* "hearth X.Y.Z" and every compiled backend, the CPU's with the ISA its kernels use:
 * "backends: cpu (avx2 fma), cuda". */
static void print_version(void)
{
    char isa[128];
    hx_cpu_isa_names(hx_cpu_isa(), isa, sizeof isa);
    printf("hearth %s\nbackends:", hx_version());
    const char *p = hx_backends_compiled();
    for (int first = 1; *p; first = 0) {
        const int n = (int)strcspn(p, " ");
        if (n == 3 && strncmp(p, "cpu", 3) == 0) printf("%s cpu (%s)", first ? "" : ",", isa);
        else printf("%s %.*s", first ? "" : ",", n, p);
        p += n;
        while (*p == ' ') p++;
    }
    putchar('\n');
}

int main(int argc, char **argv)
{
    if (argc < 2) return hx_cmd_serve(0, argv + 1); /* bare `hearth`: serve the starter model */
    const char *v = argv[1];
    if (strcmp(v, "--version") == 0 || strcmp(v, "version") == 0) {
        print_version();
        return 0;
    }
    if (strcmp(v, "help") == 0 || strcmp(v, "--help") == 0 || strcmp(v, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(v, verbs[i].name) == 0) return verbs[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "hearth: unknown verb '%s'\n\n", v);
    usage(stderr);
    return 2;
}
