/* logits.c - parity tool: runs hearth's forward pass on token ids (built as `hx-logits`).
 *
 * usage: hx-logits MODEL OUT.bin [--threads N] [--chunk N] [--greedy N] [--int8] [--kv f16|q8|q4]
 *                  [--device cpu|cuda|cuda:N]
 * Reads a JSON array of token ids on stdin. Runs them through the model in prefill chunks of
 * --chunk rows (default 64) with logits for every row, and writes them to OUT.bin as little-endian
 * float32 [n_tok, n_vocab]. With --greedy N it then decodes N tokens greedily, one step at a time
 * through the KV cache, and prints them as a JSON array on stdout. --int8 uses the int8-activation
 * matmuls (HX_CPU_INT8_ACT). --kv stores the KV cache as f16 (default) or quantized q8/q4
 * (hx_kv_pool_create_typed), which prefill attention reads as well as decode. A model with
 * sliding and global layers (Gemma 2/3) keeps its sliding layers' KV in a pool of its own that
 * holds only each step's window, as the engine does. --device runs it on a GPU (default: the
 * CPU), for parity of the CUDA backend against the same references. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/device.h"
#include "base/alloc.h"
#include "format/discover.h"
#include "kv/kv_pool.h"
#include "model/model.h"

static int die(const char *msg)
{
    fprintf(stderr, "hx-logits: %s\n", msg);
    return 1;
}

/* The cache: every layer in pool, or the sliding ones in swa (window positions) when split. */
typedef struct {
    hx_kv_pool *pool, *swa;
    hx_kv_table tab, tab_swa;
    int32_t     window;
} cache;

/* Runs rows [t0, t1) of ids at positions t0.. with logits for all of them when `all`, else for
 * the last row only. */
static hx_status step(hx_llm *m, cache *c, const int32_t *ids, int32_t t0, int32_t t1, bool all,
                      float *logits, hx_err *err)
{
    const int32_t n = t1 - t0;
    int32_t pos[4096], seq[4096], rows[4096];
    hx_status st = hx_kv_table_reserve(c->pool, &c->tab, t1, err);
    if (st != HX_OK) return st;
    if (c->swa) {
        hx_kv_table_drop_before(c->swa, &c->tab_swa, t0 - c->window + 1);
        if ((st = hx_kv_table_reserve(c->swa, &c->tab_swa, t1, err)) != HX_OK) return st;
        c->tab_swa.n_ctx = t1;
    }
    for (int32_t i = 0; i < n; i++) {
        pos[i] = t0 + i;
        seq[i] = 0;
        rows[i] = all ? i : n - 1;
    }
    c->tab.n_ctx = t1;
    const hx_kv_seq s = {c->tab.blocks, t1}, s_swa = {c->tab_swa.blocks, t1};
    hx_batch b = {.n_tok = n, .tokens = ids + t0, .pos = pos, .seq = seq, .seqs = &s,
                  .seqs_swa = &s_swa, .n_seqs = 1, .logit_rows = rows, .n_logits = all ? n : 1};
    return hx_llm_forward(m, &c->pool->store, c->swa ? &c->swa->store : NULL, &b, logits, err);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return die("usage: hx-logits MODEL OUT.bin [--threads N] [--chunk N] [--greedy N] [--int8] "
                   "[--kv f16|q8|q4] [--device cpu|cuda|cuda:N]");
    int threads = 0, chunk = 64, greedy = 0, int8 = 0;
    const char *device = NULL;
    hx_kv_dtype kv_dtype = HX_KV_F16;
    for (int i = 3; i < argc; i++)
        if (strcmp(argv[i], "--int8") == 0) int8 = 1;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--int8") == 0) { i--; continue; }
        if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--chunk") == 0) chunk = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--greedy") == 0) greedy = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--device") == 0) device = argv[i + 1];
        else if (strcmp(argv[i], "--kv") == 0) {
            hx_err kerr = {0};
            if (hx_kv_dtype_parse(argv[i + 1], &kv_dtype, &kerr) != HX_OK) return die(kerr.msg);
        }
        else return die("unknown option");
    }
    if (chunk < 1 || chunk > 4096) return die("--chunk must be 1..4096");
    json_error_t jerr;
    json_t *arr = json_loadf(stdin, 0, &jerr);
    if (!json_is_array(arr) || json_array_size(arr) == 0) return die("stdin: expected a JSON array of ids");
    const int32_t n = (int32_t)json_array_size(arr);
    int32_t *ids = calloc((size_t)n + (size_t)greedy + 1, sizeof *ids);
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    json_decref(arr);

    hx_err err = {0};
    char *path = NULL;
    hx_model_files *mf = NULL;
    hx_backend *be = NULL;
    hx_llm *m = NULL;
    cache c = {0};
    if (hx_discover_resolve(argv[1], &path, &err) || hx_model_files_open(path, &mf, &err) ||
        hx_backend_open(device, threads, int8 ? HX_CPU_INT8_ACT : 0, &be, &err) ||
        hx_llm_open(mf, be, chunk, &m, &err))
        return die(err.msg);
    const int32_t total = n + greedy;
    const hx_hparams *hp = &mf->hp;
    const int32_t n_swa = hx_hparams_n_swa_layers(hp);
    c.window = hp->sliding_window;
    if (hx_kv_pool_create_typed(be, hp->n_layer - n_swa, hp->n_kv_head, hp->d_head, 16,
                                (total + 15) / 16 + 1, kv_dtype, &c.pool, &err) ||
        (n_swa > 0 && hx_kv_pool_create_typed(be, n_swa, hp->n_kv_head, hp->d_head, 16,
                                              hx_kv_window_blocks(c.window, chunk, total, 16),
                                              kv_dtype, &c.swa, &err)))
        return die(err.msg);
    const size_t V = (size_t)mf->hp.n_vocab;
    float *logits = malloc((size_t)chunk * V * sizeof(float));
    FILE *out = fopen(argv[2], "wb");
    if (!out || !logits) return die("cannot open the output file");
    for (int32_t t0 = 0; t0 < n; t0 += chunk) {
        const int32_t t1 = t0 + chunk < n ? t0 + chunk : n;
        if (step(m, &c, ids, t0, t1, true, logits, &err)) return die(err.msg);
        fwrite(logits, sizeof(float), (size_t)(t1 - t0) * V, out);
    }
    fclose(out);
    if (greedy > 0) {
        const float *last = logits + (size_t)((n - 1) % chunk) * V;
        printf("[");
        for (int32_t g = 0; g < greedy; g++) {
            int32_t best = 0;
            for (size_t v = 1; v < V; v++)
                if (last[v] > last[best]) best = (int32_t)v;
            ids[n + g] = best;
            printf("%s%d", g ? ", " : "", best);
            if (g + 1 < greedy) {
                if (step(m, &c, ids, n + g, n + g + 1, false, logits, &err)) return die(err.msg);
                last = logits;
            }
        }
        printf("]\n");
    }
    hx_kv_table_free(c.pool, &c.tab);
    hx_kv_pool_free(c.pool);
    if (c.swa) hx_kv_table_free(c.swa, &c.tab_swa);
    hx_kv_pool_free(c.swa);
    hx_llm_close(m);
    be->destroy(be);
    hx_model_files_close(mf);
    hx_free(path);
    free(logits);
    free(ids);
    return 0;
}
