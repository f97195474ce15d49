/* cmd_inspect.c - `hearth inspect MODEL [--tensors] [--json]`.
 *
 * The text form is printed from the same JSON description that --json prints
 * (format/describe.c), so both always say the same thing. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "format/describe.h"
#include "format/discover.h"
#include "format/model_files.h"

static void upper(const char *s, char *out, size_t len)
{
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++) out[i] = (char)toupper((unsigned char)s[i]);
    out[i] = '\0';
}

static json_int_t geti(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

static void print_text(json_t *d, bool tensors)
{
    json_t *hp = json_object_get(d, "hparams");
    char q[32], cnt[32], sz[32];
    upper(json_string_value(json_object_get(d, "quant")), q, sizeof q);
    hx_cli_fmt_count((double)geti(d, "n_params"), cnt, sizeof cnt);
    hx_cli_fmt_bytes((double)geti(d, "n_bytes"), sz, sizeof sz);
    printf("path            %s\n", json_string_value(json_object_get(d, "path")));
    printf("format          %s", json_string_value(json_object_get(d, "format")));
    if (geti(d, "format_version")) printf(" v%lld", (long long)geti(d, "format_version"));
    json_t *mlx = json_object_get(d, "mlx_quantization");
    if (mlx) printf(" (%lld-bit, group %lld)", (long long)geti(mlx, "bits"), (long long)geti(mlx, "group_size"));
    printf("\narchitecture    %s\n", json_string_value(json_object_get(d, "arch")));
    printf("parameters      %s (%lld)\n", cnt, (long long)geti(d, "n_params"));
    printf("quantization    %s\n", q);
    printf("weights         %s\n", sz);
    printf("layers          %lld\n", (long long)geti(hp, "n_layer"));
    printf("hidden size     %lld\n", (long long)geti(hp, "d_model"));
    printf("heads           %lld (kv heads %lld, head dim %lld)\n", (long long)geti(hp, "n_head"),
           (long long)geti(hp, "n_kv_head"), (long long)geti(hp, "d_head"));
    printf("ffn size        %lld\n", (long long)geti(hp, "d_ff"));
    printf("vocab           %lld\n", (long long)geti(hp, "n_vocab"));
    printf("context         %lld (trained)\n", (long long)geti(hp, "n_ctx_train"));
    json_t *rs = json_object_get(hp, "rope_scaling");
    printf("rope            theta %g, %s layout, scaling %s", json_real_value(json_object_get(hp, "rope_theta")),
           json_string_value(json_object_get(hp, "rope_layout")),
           json_is_object(rs) ? json_string_value(json_object_get(rs, "type")) : "none");
    if (json_is_object(rs)) printf(" x%g", json_real_value(json_object_get(rs, "factor")));
    printf("\nnorm eps        %g\n", json_real_value(json_object_get(hp, "norm_eps")));
    if (geti(hp, "sliding_window")) printf("sliding window  %lld\n", (long long)geti(hp, "sliding_window"));
    if (geti(hp, "n_expert"))
        printf("experts         %lld (%lld per token, width %lld%s)\n", (long long)geti(hp, "n_expert"),
               (long long)geti(hp, "n_expert_used"), (long long)geti(hp, "d_ff_exp"),
               geti(hp, "d_ff_shexp") ? ", and a shared expert" : "");
    printf("tied embeddings %s\n", json_is_true(json_object_get(hp, "tie_embeddings")) ? "yes" : "no");
    printf("qk norm         %s\n", json_is_true(json_object_get(hp, "qk_norm")) ? "yes" : "no");
    printf("attention bias  %s\n", json_is_true(json_object_get(hp, "attn_bias")) ? "yes" : "no");
    json_t *tok = json_object_get(d, "tokenizer");
    if (json_is_object(tok))
        printf("tokenizer       %s, %lld tokens (from %s)\n", json_string_value(json_object_get(tok, "type")),
               (long long)geti(tok, "vocab_size"), json_string_value(json_object_get(tok, "source")));
    else
        printf("tokenizer       none\n");
    json_t *ct = json_object_get(d, "chat_template");
    if (json_is_true(json_object_get(ct, "present")))
        printf("chat template   yes (%s, %lld bytes)\n", json_string_value(json_object_get(ct, "source")),
               (long long)geti(ct, "bytes"));
    else
        printf("chat template   no\n");
    printf("bytes by format\n");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(d, "bytes_by_dtype"), k, v) {
        upper(k, q, sizeof q);
        hx_cli_fmt_bytes((double)json_integer_value(v), sz, sizeof sz);
        printf("  %-6s %12lld  %s\n", q, (long long)json_integer_value(v), sz);
    }
    json_t *ts = json_object_get(d, "tensors");
    printf("tensors         %zu\n", json_array_size(ts));
    if (!tensors) return;
    printf("\n%-36s %-6s %-20s %12s %12s\n", "name", "type", "shape", "bytes", "offset");
    size_t i;
    json_t *t;
    json_array_foreach(ts, i, t) {
        char shape[64] = "[", *p = shape + 1;
        size_t j;
        json_t *dim;
        json_array_foreach(json_object_get(t, "shape"), j, dim)
            p += snprintf(p, (size_t)(shape + sizeof shape - p), "%s%lld", j ? ", " : "", (long long)json_integer_value(dim));
        snprintf(p, (size_t)(shape + sizeof shape - p), "]");
        upper(json_string_value(json_object_get(t, "dtype")), q, sizeof q);
        printf("%-36s %-6s %-20s %12lld %12lld\n", json_string_value(json_object_get(t, "name")), q, shape,
               (long long)geti(t, "bytes"), (long long)geti(t, "offset"));
    }
}

int hx_cmd_inspect(int argc, char **argv)
{
    const char *model = NULL;
    bool json_out = false, tensors = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json_out = true;
        else if (strcmp(argv[i], "--tensors") == 0) tensors = true;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "hearth inspect: unknown option %s\n", argv[i]);
            return 2;
        } else if (!model) model = argv[i];
        else {
            fprintf(stderr, "hearth inspect: one model at a time\n");
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "usage: hearth inspect MODEL [--tensors] [--json]\n");
        return 2;
    }
    hx_err err = {0};
    char *path = NULL;
    hx_model_files *mf = NULL;
    if (hx_discover_resolve(model, &path, &err) != HX_OK ||
        hx_model_files_open(path, &mf, &err) != HX_OK) {
        fprintf(stderr, "hearth: %s\n", err.msg);
        hx_free(path);
        return 1;
    }
    hx_free(path);
    json_t *d = hx_model_describe(mf);
    int rc = 0;
    if (!d) {
        fprintf(stderr, "hearth: out of memory\n");
        rc = 1;
    } else if (json_out) {
        if (!tensors) json_object_del(d, "tensors");
        json_dumpf(d, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        putchar('\n');
    } else {
        print_text(d, tensors);
    }
    json_decref(d);
    hx_model_files_close(mf);
    return rc;
}
