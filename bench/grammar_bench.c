/* grammar_bench.c - what structured output costs on a real vocabulary (bench tool, not installed).
 *
 * usage: hx-grammar-bench MODEL [REPS]
 * Part 1 times hx_grammar_mask for the JSON-object grammar over MODEL's tokenizer at a few
 * positions (the start, inside a key, inside a value string, inside a nested string, inside a
 * number, after a value), median of REPS masks each (default 50), with the number of tokens
 * allowed. Inside a string nearly every token is allowed, which is the walk's worst case.
 * Part 2 generates with the model, greedy, alternating free and JSON-constrained runs of the
 * same prompt over the same number of tokens, and prints per decode step the forward pass and the
 * sampling (hx_gen_fed: the chain, the grammar check, any mask, the text) for both, medians over
 * the runs. The sampler checks the drawn token first and computes a mask only when the grammar
 * refuses it, so the sampling difference is the whole cost a constrained request pays; overhead
 * is that difference over the free step (forward + sampling). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/alloc.h"
#include "engine/model_load.h"
#include "engine/sequence.h"
#include "kv/kv_pool.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, const hx_err *err)
{
    fprintf(stderr, "hx-grammar-bench: %s: %s\n", what, err->msg);
    exit(1);
}

static void bench_masks(const hx_grammar *g, const hx_grammar_vocab *v, int reps)
{
    static const char *const where[] = {
        "", "{\"", "{\"name\": \"Al", "{\"a\": [1, {\"b\": [\"x", "{\"age\": 12",
        "{\"name\": \"Alice\"",
    };
    const int32_t n_vocab = hx_grammar_vocab_n_vocab(v);
    uint8_t *allowed = hx_alloc((size_t)n_vocab);
    double *t = hx_alloc((size_t)reps * sizeof *t);
    if (!allowed || !t) exit(1);
    for (size_t w = 0; w < sizeof where / sizeof *where; w++) {
        hx_grammar_state *s = hx_grammar_start(g);
        if (!s || !hx_grammar_accept_bytes(s, where[w], strlen(where[w]))) {
            fprintf(stderr, "hx-grammar-bench: prefix '%s' refused\n", where[w]);
            exit(1);
        }
        hx_grammar_mask(s, v, allowed); /* sizes the scratch */
        for (int r = 0; r < reps; r++) {
            const double t0 = now_ms();
            hx_grammar_mask(s, v, allowed);
            t[r] = now_ms() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_d);
        int n_allowed = 0;
        for (int32_t id = 0; id < n_vocab; id++) n_allowed += allowed[id];
        printf("{\"mask_after\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, "
               "\"allowed\": %d, \"n_vocab\": %d}\n", where[w], t[reps / 2], t[0], n_allowed,
               n_vocab);
        hx_grammar_state_free(s);
    }
    hx_free(allowed);
    hx_free(t);
}

typedef struct {
    char   text[8192];
    size_t len;
} collected;

static bool collect(const char *text, size_t len, const hx_token_logprobs *lp, void *user)
{
    (void)lp;
    collected *c = user;
    if (c->len + len < sizeof c->text) memcpy(c->text + c->len, text, len), c->len += len;
    c->text[c->len] = '\0';
    return true;
}

typedef struct {
    double fwd_ms, smp_ms; /* per decode step: the forward pass; hx_gen_fed (sampling and text) */
    int32_t n_gen;
} gen_times;

/* One greedy generation, driven step by step as the executor drives it, so that the forward pass
 * and hx_gen_fed (where sampling, the grammar check and any mask happen) are timed apart. The
 * prefill step is left out of both figures. */
static gen_times generate(hx_loaded_model *m, hx_sequence *seq, hx_kv_pool *pool,
                          const hx_tok_ids *prompt, const hx_grammar *g,
                          const hx_grammar_vocab *v, int32_t max_tokens, collected *out)
{
    hx_gen_params gp = {.max_tokens = max_tokens, .sampling = hx_sampling_default()};
    gp.sampling.temperature = 0;
    gp.sampling.grammar = g;
    gp.sampling.grammar_vocab = v;
    gp.ignore_eos = g == NULL; /* the free run goes to max_tokens; the constrained one ends */
    hx_err err = {0};
    out->len = 0;
    out->text[0] = '\0';
    hx_sequence_clear(seq);
    hx_gen *gen = NULL;
    if (hx_gen_begin(seq, prompt->ids, (int32_t)prompt->n, &gp, collect, out, &gen, &err) != HX_OK)
        die("begin", &err);
    const int32_t n_vocab = m->llm->hp.n_vocab;
    int32_t *ids = hx_alloc(HX_SEQUENCE_STEP_TOKENS * 3 * sizeof *ids), row = 0;
    float *logits = hx_alloc((size_t)n_vocab * sizeof *logits);
    if (!ids || !logits) exit(1);
    gen_times t = {0};
    for (bool first = true; !hx_gen_done(gen); first = false) {
        const int32_t rows = hx_gen_pending(gen);
        if (rows > HX_SEQUENCE_STEP_TOKENS) die("prompt", &(hx_err){.msg = "too long"});
        hx_kv_seq kvs, kvs_swa; /* the bench's model has no sliding layers' pool */
        if (hx_gen_reserve(gen, rows, &err) != HX_OK) die("reserve", &err);
        hx_gen_rows(gen, rows, 0, ids, ids + rows, ids + 2 * rows, &kvs, &kvs_swa);
        row = rows - 1;
        const hx_batch b = {.n_tok = rows, .tokens = ids, .pos = ids + rows, .seq = ids + 2 * rows,
                            .seqs = &kvs, .n_seqs = 1, .logit_rows = &row, .n_logits = 1};
        const double t0 = now_ms();
        if (hx_llm_forward(m->llm, &pool->store, NULL, &b, logits, &err) != HX_OK) die("forward", &err);
        const double t1 = now_ms();
        hx_gen_fed(gen, rows, logits);
        if (!first) t.fwd_ms += t1 - t0, t.smp_ms += now_ms() - t1;
    }
    hx_gen_stats st;
    if (hx_gen_end(gen, &st, &err) != HX_OK) die("end", &err);
    t.n_gen = st.n_gen;
    if (st.n_gen > 1) t.fwd_ms /= st.n_gen - 1, t.smp_ms /= st.n_gen - 1;
    hx_free(ids);
    hx_free(logits);
    return t;
}

static void bench_decode(hx_loaded_model *m, const hx_grammar *g, const hx_grammar_vocab *v,
                         int runs)
{
    static const char prompt_text[] =
        "<|im_start|>user\nGive me a JSON object describing a cat named Tom who is 3 years "
        "old.<|im_end|>\n<|im_start|>assistant\n";
    const hx_hparams *hp = &m->llm->hp;
    hx_tok_ids prompt = {0};
    hx_err err = {0};
    hx_kv_pool *pool = NULL;
    hx_sequence *seq = NULL;
    if (hx_tokenizer_encode(m->tok, prompt_text, strlen(prompt_text), HX_TOK_PARSE_SPECIAL, &prompt,
                            &err) != HX_OK ||
        hx_kv_pool_create(m->be, hp->n_layer, hp->n_kv_head, hp->d_head, 16, 64, &pool,
                          &err) != HX_OK ||
        hx_sequence_init_shared(m->llm, m->tok, pool, NULL, 1024, &seq, &err) != HX_OK)
        die("setup", &err);
    static collected text;
    double *fwd[2], *smp[2];
    for (int k = 0; k < 2; k++) {
        fwd[k] = hx_alloc((size_t)runs * sizeof *fwd[k]);
        smp[k] = hx_alloc((size_t)runs * sizeof *smp[k]);
        if (!fwd[k] || !smp[k]) exit(1);
    }
    /* The constrained run first, to learn how many tokens it takes; the free run then generates
     * as many, so both decode over the same context lengths. */
    const int32_t n_tok = generate(m, seq, pool, &prompt, g, v, 400, &text).n_gen;
    json_t *out = json_pack("{s:s, s:i}", "constrained_output", text.text, "tokens", n_tok);
    char *line = out ? json_dumps(out, JSON_COMPACT) : NULL;
    if (line) puts(line);
    free(line);
    json_decref(out);
    for (int r = 0; r < runs; r++) /* alternating, so drift in the machine hits both alike */
        for (int k = 0; k < 2; k++) {
            const gen_times t = generate(m, seq, pool, &prompt, k ? g : NULL, k ? v : NULL, n_tok,
                                         &text);
            fwd[k][r] = t.fwd_ms;
            smp[k][r] = t.smp_ms;
        }
    for (int k = 0; k < 2; k++) {
        qsort(fwd[k], (size_t)runs, sizeof *fwd[k], cmp_d);
        qsort(smp[k], (size_t)runs, sizeof *smp[k], cmp_d);
    }
    const double free_step = fwd[0][runs / 2] + smp[0][runs / 2];
    printf("{\"forward_ms_free\": %.3f, \"forward_ms_json\": %.3f, \"sample_ms_free\": %.4f, "
           "\"sample_ms_json\": %.4f, \"overhead\": %.4f, \"runs\": %d}\n", fwd[0][runs / 2],
           fwd[1][runs / 2], smp[0][runs / 2], smp[1][runs / 2],
           (smp[1][runs / 2] - smp[0][runs / 2]) / free_step, runs);
    for (int k = 0; k < 2; k++) hx_free(fwd[k]), hx_free(smp[k]);
    hx_sequence_free(seq);
    hx_kv_pool_free(pool);
    hx_tok_ids_free(&prompt);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hx-grammar-bench MODEL [REPS]\n");
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 50;
    hx_err err = {0};
    hx_loaded_model m;
    if (hx_loaded_model_open(argv[1], NULL, 0, 0, false, &m, &err) != HX_OK) die(argv[1], &err);
    hx_grammar_vocab *v = NULL;
    hx_grammar *g = NULL;
    const char *text = hx_json_object_grammar();
    if (hx_grammar_vocab_from_tokenizer(m.tok, &v, &err) != HX_OK ||
        hx_grammar_compile(text, strlen(text), &g, &err) != HX_OK)
        die("grammar", &err);
    bench_masks(g, v, reps > 0 ? reps : 1);
    bench_decode(&m, g, v, 5);
    hx_grammar_free(g);
    hx_grammar_vocab_free(v);
    hx_loaded_model_close(&m);
    return 0;
}
