/* test_sampler.c - the sampler chain: greedy, seeds, truncation, penalties, bias, logprobs, and
 * grammar-constrained sampling over a hand-made vocabulary. */
#include "base/alloc.h"
#include "check.h"
#include "sample/sampler.h"

#define V 1000

static void fill(float *l)
{
    for (int i = 0; i < V; i++) l[i] = (float)((i * 7919) % 1000) / 100.0f; /* max 9.99 at i=? */
}

static int argmax(const float *l)
{
    int b = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static int draw(hx_sampling p, int n, int *out)
{
    hx_sampler *s = NULL;
    hx_err err = {0};
    if (hx_sampler_init(&p, V, &s, &err) != HX_OK) return -1;
    float l[V];
    for (int i = 0; i < n; i++) {
        fill(l);
        out[i] = hx_sampler_sample(s, l, NULL);
    }
    hx_sampler_free(s);
    return 0;
}

static int test_temperature_zero_is_argmax(void)
{
    hx_sampling p = hx_sampling_default();
    p.temperature = 0;
    int out[5];
    float l[V];
    fill(l);
    CHECK_EQ(draw(p, 5, out), 0);
    for (int i = 0; i < 5; i++) CHECK_EQ(out[i], argmax(l));
    return 0;
}

static int test_same_seed_same_tokens_other_seed_differs(void)
{
    hx_sampling p = hx_sampling_default();
    p.temperature = 1.5f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 42;
    int a[200], b[200], c[200];
    CHECK_EQ(draw(p, 200, a), 0);
    CHECK_EQ(draw(p, 200, b), 0);
    p.seed = 43;
    CHECK_EQ(draw(p, 200, c), 0);
    int same = 0;
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(a[i], b[i]);
        same += a[i] == c[i];
    }
    CHECK(same < 200);
    return 0;
}

static int test_top_k_and_top_p_truncate(void)
{
    float l[V];
    fill(l);
    hx_sampling p = hx_sampling_default();
    p.temperature = 5.0f, p.top_k = 1, p.min_p = 0;
    int out[50];
    CHECK_EQ(draw(p, 50, out), 0);
    for (int i = 0; i < 50; i++) CHECK_EQ(out[i], argmax(l));
    p.top_k = 3;
    CHECK_EQ(draw(p, 50, out), 0);
    for (int i = 0; i < 50; i++) CHECK(l[out[i]] >= 9.97f); /* the 3 best are 9.99, 9.98, 9.97 */
    p.top_k = 0, p.top_p = 1e-6f;
    CHECK_EQ(draw(p, 50, out), 0);
    for (int i = 0; i < 50; i++) CHECK_EQ(out[i], argmax(l));
    return 0;
}

/* The share of n draws over the 4 logits l that give id (a fresh sampler of p). */
static double share_of(const hx_sampling *p, const float l[4], int32_t id, int n)
{
    hx_sampler *s = NULL;
    hx_err err = {0};
    if (hx_sampler_init(p, 4, &s, &err) != HX_OK) return -1.0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        float x[4] = {l[0], l[1], l[2], l[3]};
        hits += hx_sampler_sample(s, x, NULL) == id;
    }
    hx_sampler_free(s);
    return (double)hits / n;
}

/* Top-p measures the mass of what top-k kept, renormalized (llama.cpp, vLLM, transformers):
 * logits {1, 3, 1, 1}, top-k 2 keeps 3 and one 1, where the best holds e^3 / (e^3 + e) = 0.88
 * >= 0.8, so top-p keeps it alone. Against the whole vocabulary it would hold 0.71 and the
 * second would be drawn about one time in eight. */
static int test_top_p_within_top_k(void)
{
    const float l[4] = {1.0f, 3.0f, 1.0f, 1.0f};
    hx_sampling p = hx_sampling_default();
    p.temperature = 1.0f, p.top_k = 2, p.top_p = 0.8f, p.min_p = 0.0f, p.seed = 11;
    CHECK(share_of(&p, l, 1, 400) == 1.0);
    /* top-p 0.9 needs the second: it is drawn with its share of the two, 0.12 */
    p.top_p = 0.9f;
    CHECK_NEAR(share_of(&p, l, 1, 4000), exp(3) / (exp(3) + exp(1)), 0.02);
    return 0;
}

/* With plain temperature-1 sampling, draw frequencies follow the softmax. */
static int test_draws_follow_the_distribution(void)
{
    hx_sampling p = hx_sampling_default();
    p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 7;
    hx_sampler *s = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sampler_init(&p, 4, &s, &err), HX_OK);
    int hits[4] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) {
        float l[4] = {0.0f, 1.0f, 2.0f, 3.0f};
        hits[hx_sampler_sample(s, l, NULL)]++;
    }
    hx_sampler_free(s);
    double z = 1 + exp(1) + exp(2) + exp(3);
    for (int i = 0; i < 4; i++) CHECK_NEAR((double)hits[i] / N, exp(i) / z, 0.01);
    return 0;
}

static int test_penalties_and_bias(void)
{
    hx_sampling p = hx_sampling_default();
    p.temperature = 0;
    float l[V];
    fill(l);
    const int top = argmax(l);
    /* a bias forbids the best token */
    int32_t ids[1] = {top};
    float vals[1] = {-100.0f};
    p.bias_ids = ids, p.bias_values = vals, p.n_bias = 1;
    int out[1];
    CHECK_EQ(draw(p, 1, out), 0);
    CHECK(out[0] != top);
    /* a strong presence penalty on a seen token moves the choice away from it */
    p.n_bias = 0, p.presence_penalty = 50.0f;
    hx_sampler *s = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sampler_init(&p, V, &s, &err), HX_OK);
    hx_sampler_accept(s, top);
    fill(l);
    CHECK(hx_sampler_sample(s, l, NULL) != top);
    hx_sampler_free(s);
    return 0;
}

static int test_logprobs_report_the_model_distribution(void)
{
    hx_sampling p = hx_sampling_default();
    p.temperature = 0, p.n_logprobs = 3;
    hx_sampler *s = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sampler_init(&p, 4, &s, &err), HX_OK);
    float l[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    hx_token_logprobs lp;
    CHECK_EQ(hx_sampler_sample(s, l, &lp), 3);
    const double lz = log(1 + exp(1) + exp(2) + exp(3));
    CHECK_NEAR(lp.logprob, 3 - lz, 1e-6);
    CHECK_EQ(lp.n_top, 3);
    CHECK_EQ(lp.top_ids[0], 3);
    CHECK_EQ(lp.top_ids[2], 1);
    CHECK_NEAR(lp.top_logprobs[1], 2 - lz, 1e-6);
    hx_sampler_free(s);
    return 0;
}

static int test_bad_settings_are_invalid(void)
{
    hx_sampler *s = NULL;
    hx_err err = {0};
    hx_sampling p = hx_sampling_default();
    p.top_p = 0;
    CHECK_EQ(hx_sampler_init(&p, V, &s, &err), HX_E_INVALID);
    p = hx_sampling_default();
    int32_t id = V;
    float v = 1;
    p.bias_ids = &id, p.bias_values = &v, p.n_bias = 1;
    hx_err err2 = {0};
    CHECK_EQ(hx_sampler_init(&p, V, &s, &err2), HX_E_INVALID);
    CHECK_CONTAINS(err2.msg, "outside the vocabulary");
    return 0;
}

/* ---- grammar-constrained sampling ---- */

/* A hand-made vocabulary: words, pieces of them, and two end tokens (7 and 9, given as 9, 7). */
enum { GV = 10, END_A = 7, END_B = 9 };
static const char *const k_tok[GV] = {"yes", "no", "y", "es", "n", "o", "maybe", "", "x", ""};

typedef struct {
    hx_grammar       *g;
    hx_grammar_vocab *v;
} gram;

static int gram_open(gram *gr, const char *text)
{
    size_t lens[GV];
    for (int i = 0; i < GV; i++) lens[i] = strlen(k_tok[i]);
    const int32_t ends[2] = {END_B, END_A};
    hx_err err = {0};
    CHECK_EQ(hx_grammar_compile(text, strlen(text), &gr->g, &err), HX_OK);
    CHECK_EQ(hx_grammar_vocab_init(k_tok, lens, GV, ends, 2, &gr->v, &err), HX_OK);
    return 0;
}

static void gram_close(gram *gr)
{
    hx_grammar_free(gr->g);
    hx_grammar_vocab_free(gr->v);
}

/* Plain sampling (no truncation, no penalties) under the grammar. */
static hx_sampling gram_sampling(const gram *gr, float temperature)
{
    hx_sampling p = hx_sampling_default();
    p.temperature = temperature, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f;
    p.grammar = gr->g;
    p.grammar_vocab = gr->v;
    return p;
}

static int32_t sample_copy(hx_sampler *s, const float *l, hx_token_logprobs *lp)
{
    float c[GV + 2];
    memcpy(c, l, sizeof c);
    return hx_sampler_sample(s, c, lp);
}

static const char k_yes_no[] = "root ::= \"yes\" | \"no\"";

static int test_grammar_greedy_picks_the_best_allowed_token(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, k_yes_no), 0);
    hx_sampling p = gram_sampling(&gr, 0);
    p.n_logprobs = 2;
    hx_sampler *s = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sampler_init(&p, GV, &s, &err), HX_OK);
    CHECK(hx_sampler_grammar_active(s));
    /*                 yes  no    y    es   n    o    maybe end  x    end */
    float l[GV + 2] = {4.f, 5.f, 3.f, 7.f, 2.f, 1.f, 9.f, 6.f, 8.f, 6.f};
    hx_token_logprobs lp;
    CHECK_EQ(sample_copy(s, l, &lp), 1); /* "no": the end tokens are not allowed yet */
    double z = 0;
    for (int i = 0; i < GV; i++) z += exp(l[i]);
    CHECK_NEAR(lp.logprob, 5.0 - log(z), 1e-5); /* the model's, before the mask */
    CHECK_EQ(lp.top_ids[0], 6);
    CHECK_EQ(lp.top_ids[1], 8);
    /* "no" is complete and nothing can follow: only the end tokens are allowed, the best wins */
    CHECK_EQ(sample_copy(s, l, NULL), END_A);
    l[END_B] = 6.5f;
    CHECK_EQ(sample_copy(s, l, NULL), END_B);
    hx_sampler_free(s);
    gram_close(&gr);
    return 0;
}

/* Draws one token with each seed 1..n from logits l; counts per id. */
static int count_draws(hx_sampling p, const float *l, int n, int *hits)
{
    memset(hits, 0, GV * sizeof *hits);
    for (int i = 0; i < n; i++) {
        p.seed = (uint64_t)i + 1;
        hx_sampler *s = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_sampler_init(&p, GV, &s, &err), HX_OK);
        hits[sample_copy(s, l, NULL)]++;
        hx_sampler_free(s);
    }
    return 0;
}

/* Pearson's chi-square of hits against want[] (probabilities), over the ids with want > 0;
 * the ids with want == 0 must never be drawn. */
static int check_chi2(const int *hits, const double *want, int n, double limit)
{
    double chi2 = 0;
    for (int i = 0; i < GV; i++) {
        if (want[i] == 0) {
            if (hits[i])
                CHECK_FAIL("token %d (%s) drawn %d times, never allowed", i, k_tok[i], hits[i]);
            continue;
        }
        const double e = want[i] * n;
        chi2 += (hits[i] - e) * (hits[i] - e) / e;
    }
    printf("chi-square %.2f (limit %.2f)\n", chi2, limit);
    CHECK(chi2 < limit);
    return 0;
}

/* Without truncation the fallback gives exactly the model's distribution renormalized over the
 * allowed tokens; with top-k it gives the mixture the header states. */
static int test_grammar_draws_follow_the_renormalized_distribution(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, k_yes_no), 0);
    hx_sampling p = gram_sampling(&gr, 1.0f);
    /*                 yes  no    y     es    n    o     maybe end   x     end */
    float l[GV + 2] = {2.f, 1.f, 0.5f, 1.5f, 0.f, -1.f, 2.5f, -1.f, -2.f, -1.f};
    const int allowed[] = {0, 1, 2, 4}; /* at the start: "yes", "no", "y", "n" */
    enum { N = 20000 };
    int hits[GV];
    double want[GV] = {0}, za = 0;
    for (int k = 0; k < 4; k++) za += exp(l[allowed[k]]);
    for (int k = 0; k < 4; k++) want[allowed[k]] = exp(l[allowed[k]]) / za;
    CHECK_EQ(count_draws(p, l, N, hits), 0);
    CHECK_EQ(check_chi2(hits, want, N, 16.27), 0); /* 3 degrees of freedom, p = 0.001 */

    /* top_k 3: q keeps maybe, yes, es (only "yes" allowed); q' keeps yes, no, y. */
    p.top_k = 3;
    const double zq = exp(2.5) + exp(2.0) + exp(1.5), q_yes = exp(2.0) / zq;
    const double zq2 = exp(2.0) + exp(1.0) + exp(0.5);
    memset(want, 0, sizeof want);
    want[0] = q_yes + (1 - q_yes) * exp(2.0) / zq2;
    want[1] = (1 - q_yes) * exp(1.0) / zq2;
    want[2] = (1 - q_yes) * exp(0.5) / zq2;
    CHECK_EQ(count_draws(p, l, N, hits), 0);
    CHECK_EQ(check_chi2(hits, want, N, 13.82), 0); /* 2 degrees of freedom, p = 0.001 */
    gram_close(&gr);
    return 0;
}

static int test_grammar_end_token_is_allowed_only_when_done(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, k_yes_no), 0);
    hx_sampling p = gram_sampling(&gr, 0);
    hx_sampler *s = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sampler_init(&p, GV, &s, &err), HX_OK);
    /*                 yes   no    y    es    n    o    maybe end   x    end */
    float l[GV + 2] = {-9.f, -9.f, 5.f, -5.f, 1.f, 1.f, 1.f, 10.f, 1.f, 10.f};
    CHECK_EQ(sample_copy(s, l, NULL), 2);     /* "y" */
    CHECK_EQ(sample_copy(s, l, NULL), 3);     /* "es", the only way on, however unlikely */
    CHECK_EQ(sample_copy(s, l, NULL), END_A); /* "yes" is done */
    hx_sampler_free(s);
    gram_close(&gr);
    return 0;
}

static int test_lazy_grammar_is_inactive_until_begin(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, k_yes_no), 0);
    hx_sampling p = gram_sampling(&gr, 0);
    p.grammar_lazy = true;
    hx_sampler *s = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_sampler_init(&p, GV, &s, &err), HX_OK);
    /*                 yes  no    y    es   n    o    maybe end  x    end */
    float l[GV + 2] = {4.f, 5.f, 3.f, 7.f, 2.f, 1.f, 9.f, 6.f, 8.f, 6.f};
    CHECK(!hx_sampler_grammar_active(s));
    CHECK_EQ(sample_copy(s, l, NULL), 6); /* unconstrained */
    hx_sampler_grammar_begin(s);
    CHECK(hx_sampler_grammar_active(s));
    CHECK_EQ(sample_copy(s, l, NULL), 1);
    hx_sampler_grammar_begin(s); /* already active: nothing changes */
    CHECK_EQ(sample_copy(s, l, NULL), END_A);
    hx_sampler_reset(s); /* inactive again, and the grammar back at its root */
    CHECK(!hx_sampler_grammar_active(s));
    CHECK_EQ(sample_copy(s, l, NULL), 6);
    hx_sampler_grammar_begin(s);
    CHECK_EQ(sample_copy(s, l, NULL), 1);
    hx_sampler_free(s);
    /* without a grammar, begin does nothing */
    hx_sampling plain = hx_sampling_default();
    CHECK_EQ(hx_sampler_init(&plain, GV, &s, &err), HX_OK);
    hx_sampler_grammar_begin(s);
    CHECK(!hx_sampler_grammar_active(s));
    hx_sampler_free(s);
    gram_close(&gr);
    return 0;
}

/* A backend may draw a token unless a grammar constrains it or top-k is off (or too large); the
 * number it draws with is the one hx_sampler_sample would have taken, the generator stays in
 * step, and the bias and penalties travel as edits. */
static int test_device_row_takes_the_next_number(void)
{
    hx_sampling p = hx_sampling_default();
    p.seed = 5;
    hx_sampler *a = NULL, *b = NULL;
    hx_err err = {0};
    hx_sample_row row;
    CHECK_EQ(hx_sampler_init(&p, 4, &a, &err), HX_OK);
    CHECK(hx_sampler_device_row(a, false, &row));
    CHECK(row.temperature == 0.8f && row.top_k == 40 && row.top_p == 0.95f && row.min_p == 0.05f);
    CHECK(row.u >= 0.0 && row.u < 1.0 && row.n_edits == 0 && !row.logprobs);
    hx_sampler_free(a);
    /* Three equal logits kept (top-k 3 of 4, no top-p or min-p): token floor(3 u). The host's
     * first draw must be what the device row's u gives, and the host's second what a sampler
     * that handed its first number to the device draws next. */
    p.temperature = 1.0f, p.top_k = 3, p.top_p = 1.0f, p.min_p = 0.0f;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        p.seed = seed;
        CHECK_EQ(hx_sampler_init(&p, 4, &a, &err), HX_OK);
        CHECK_EQ(hx_sampler_init(&p, 4, &b, &err), HX_OK);
        float l[4] = {0, 0, 0, -1};
        CHECK(hx_sampler_device_row(a, false, &row));
        CHECK_EQ(hx_sampler_sample(b, l, NULL), (int32_t)(row.u * 3));
        float l1[4] = {0, 0, 0, -1}, l2[4] = {0, 0, 0, -1};
        CHECK_EQ(hx_sampler_sample(a, l1, NULL), hx_sampler_sample(b, l2, NULL));
        hx_sampler_free(a);
        hx_sampler_free(b);
    }
    /* Greedy takes no number: the argmax, top_k 1; logprobs ask for the alternatives. */
    p.temperature = 0.0f, p.top_k = 0, p.n_logprobs = 4;
    CHECK_EQ(hx_sampler_init(&p, 4, &a, &err), HX_OK);
    CHECK(hx_sampler_device_row(a, true, &row));
    CHECK(row.temperature == 0.0f && row.top_k == 1 && row.u == 0.0);
    CHECK(row.logprobs && row.n_top == 4);
    hx_sampler_free(a);
    /* The bias, then each distinct token of the window with its count (3 twice: one edit; 2 both
     * biased and seen). */
    int32_t ids[2] = {2, 0};
    float vals[2] = {1.5f, -2.0f};
    p = hx_sampling_default();
    p.bias_ids = ids, p.bias_values = vals, p.n_bias = 2, p.presence_penalty = 0.5f;
    CHECK_EQ(hx_sampler_init(&p, 8, &a, &err), HX_OK);
    hx_sampler_accept(a, 2);
    hx_sampler_accept(a, 3);
    hx_sampler_accept(a, 5);
    hx_sampler_accept(a, 3);
    CHECK(hx_sampler_device_row(a, false, &row));
    CHECK_EQ(row.n_edits, 4);
    CHECK(row.presence_penalty == 0.5f && row.repeat_penalty == 1.0f);
    CHECK(row.edits[0].id == 2 && row.edits[0].bias == 1.5f && row.edits[0].count == 1);
    CHECK(row.edits[1].id == 0 && row.edits[1].bias == -2.0f && row.edits[1].count == 0);
    CHECK(row.edits[2].id == 3 && row.edits[2].bias == 0.0f && row.edits[2].count == 2);
    CHECK(row.edits[3].id == 5 && row.edits[3].bias == 0.0f && row.edits[3].count == 1);
    CHECK(hx_sampler_device_row(a, false, &row)); /* the counts are left as they were */
    CHECK(row.n_edits == 4 && row.edits[2].count == 2 && row.edits[3].count == 1);
    hx_sampler_free(a);
    /* What only the host does: top-k off or past the backend's bound, an id twice in the bias. */
    int32_t twice[2] = {1, 1};
    hx_sampling no[3];
    for (int i = 0; i < 3; i++) no[i] = hx_sampling_default();
    no[0].top_k = 0;
    no[1].top_k = HX_SAMPLE_TOP_K + 1;
    no[2].bias_ids = twice, no[2].bias_values = vals, no[2].n_bias = 2;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(hx_sampler_init(&no[i], 4, &a, &err), HX_OK);
        if (hx_sampler_device_row(a, false, &row))
            CHECK_FAIL("settings %d drawn by the backend", i);
        hx_sampler_free(a);
    }
    return 0;
}

/* A grammar and a backend's draw: the drawn token stands when the grammar takes it; when it
 * refuses it, the host goes on from the row's logits exactly as hx_sampler_sample does (greedy,
 * and seeded with the refusal's second number). */
static int test_device_draw_under_a_grammar(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, k_yes_no), 0);
    /* "maybe" so far ahead that every draw takes it first (the backend's draw, below) */
    /*                       yes  no    y    es   n    o    maybe end  x    end */
    const float l0[GV + 2] = {4.f, 5.f, 3.f, 7.f, 2.f, 1.f, 40.f, 6.f, 8.f, 6.f};
    for (int t = 0; t < 2; t++) {
        hx_sampling p = gram_sampling(&gr, t ? 1.0f : 0.0f);
        p.seed = 3, p.top_k = GV; /* the backend takes top-k 1..256 */
        hx_sampler *a = NULL, *b = NULL;
        hx_err err = {0};
        hx_sample_row row;
        CHECK_EQ(hx_sampler_init(&p, GV, &a, &err), HX_OK);
        CHECK_EQ(hx_sampler_init(&p, GV, &b, &err), HX_OK);
        for (int step = 0; step < 2; step++) {
            float la[GV + 2], lb[GV + 2];
            memcpy(la, l0, sizeof la);
            memcpy(lb, l0, sizeof lb);
            CHECK(hx_sampler_device_row(a, false, &row));
            /* the backend's draw: "maybe", which the grammar never takes */
            CHECK(!hx_sampler_device_takes(a, 6));
            const int32_t got = hx_sampler_device_refused(a, la, 6);
            const int32_t want = hx_sampler_sample(b, lb, NULL);
            if (got != want)
                CHECK_FAIL("temperature %d, step %d: %d, the host %d", t, step, got, want);
        }
        hx_sampler_free(a);
        hx_sampler_free(b);
    }
    /* A token the grammar takes stands, and advances it: then only the end is allowed. */
    hx_sampling p = gram_sampling(&gr, 0);
    hx_sampler *a = NULL;
    hx_err err = {0};
    hx_sample_row row;
    CHECK_EQ(hx_sampler_init(&p, GV, &a, &err), HX_OK);
    CHECK(hx_sampler_device_row(a, false, &row));
    CHECK(hx_sampler_device_takes(a, 0)); /* "yes" */
    CHECK(hx_sampler_device_row(a, false, &row));
    CHECK(!hx_sampler_device_takes(a, 2));
    float l[GV + 2];
    memcpy(l, l0, sizeof l);
    CHECK_EQ(hx_sampler_device_refused(a, l, 2), END_A);
    hx_sampler_free(a);
    gram_close(&gr);
    return 0;
}

static int test_grammar_references_are_counted(void)
{
    const size_t live = hx_alloc_live_bytes();
    hx_grammar *g = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_grammar_compile(k_yes_no, strlen(k_yes_no), &g, &err), HX_OK);
    CHECK(hx_grammar_retain(g) == g);
    hx_grammar_free(g); /* one reference left: still usable */
    hx_grammar_state *st = hx_grammar_start(g);
    CHECK(st && hx_grammar_accept_bytes(st, "yes", 3) && hx_grammar_done(st));
    hx_grammar_state_free(st);
    CHECK(hx_alloc_live_bytes() > live);
    hx_grammar_free(g); /* the last one frees */
    CHECK_EQ(hx_alloc_live_bytes(), live);
    return 0;
}

static int test_dead_grammar_ends_with_the_first_end_token(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, "root ::= \"z\""), 0); /* no token starts with z */
    float l[GV + 2] = {4.f, 5.f, 3.f, 7.f, 2.f, 1.f, 9.f, 6.f, 8.f, 6.5f};
    for (int t = 0; t < 2; t++) {
        hx_sampling p = gram_sampling(&gr, t ? 1.0f : 0.0f);
        hx_sampler *s = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_sampler_init(&p, GV, &s, &err), HX_OK);
        CHECK_EQ(sample_copy(s, l, NULL), END_A); /* the lowest end id, whatever the logits */
        hx_sampler_free(s);
    }
    gram_close(&gr);
    return 0;
}

static int test_grammar_settings_are_checked(void)
{
    gram gr;
    CHECK_EQ(gram_open(&gr, k_yes_no), 0);
    hx_sampling p = gram_sampling(&gr, 0);
    hx_sampler *s = NULL;
    hx_err err = {0};
    p.grammar_vocab = NULL;
    CHECK_EQ(hx_sampler_init(&p, GV, &s, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "grammar vocab");
    p.grammar_vocab = gr.v;
    err = (hx_err){0};
    CHECK_EQ(hx_sampler_init(&p, GV - 2, &s, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "grammar vocab of 10 tokens");
    /* a model with padding ids past the vocab: they are never allowed */
    CHECK_EQ(hx_sampler_init(&p, GV + 2, &s, &err), HX_OK);
    float l[GV + 2] = {4.f, 5.f, 3.f, 7.f, 2.f, 1.f, 9.f, 6.f, 8.f, 6.f, 20.f, 30.f};
    CHECK_EQ(sample_copy(s, l, NULL), 1);
    hx_sampler_free(s);
    gram_close(&gr);
    return 0;
}

static const check_case cases[] = {
    { "temperature_zero_is_argmax", test_temperature_zero_is_argmax },
    { "same_seed_same_tokens_other_seed_differs", test_same_seed_same_tokens_other_seed_differs },
    { "top_k_and_top_p_truncate", test_top_k_and_top_p_truncate },
    { "top_p_within_top_k", test_top_p_within_top_k },
    { "draws_follow_the_distribution", test_draws_follow_the_distribution },
    { "penalties_and_bias", test_penalties_and_bias },
    { "logprobs_report_the_model_distribution", test_logprobs_report_the_model_distribution },
    { "bad_settings_are_invalid", test_bad_settings_are_invalid },
    { "grammar_greedy_picks_the_best_allowed_token", test_grammar_greedy_picks_the_best_allowed_token },
    { "grammar_draws_follow_the_renormalized_distribution", test_grammar_draws_follow_the_renormalized_distribution },
    { "grammar_end_token_is_allowed_only_when_done", test_grammar_end_token_is_allowed_only_when_done },
    { "lazy_grammar_is_inactive_until_begin", test_lazy_grammar_is_inactive_until_begin },
    { "device_row_takes_the_next_number", test_device_row_takes_the_next_number },
    { "device_draw_under_a_grammar", test_device_draw_under_a_grammar },
    { "grammar_references_are_counted", test_grammar_references_are_counted },
    { "dead_grammar_ends_with_the_first_end_token", test_dead_grammar_ends_with_the_first_end_token },
    { "grammar_settings_are_checked", test_grammar_settings_are_checked },
};
CHECK_MAIN(cases)
