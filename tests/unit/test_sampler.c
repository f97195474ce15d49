/* test_sampler.c - the sampler chain: greedy, seeds, truncation, penalties, bias, logprobs. */
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

static const check_case cases[] = {
    { "temperature_zero_is_argmax", test_temperature_zero_is_argmax },
    { "same_seed_same_tokens_other_seed_differs", test_same_seed_same_tokens_other_seed_differs },
    { "top_k_and_top_p_truncate", test_top_k_and_top_p_truncate },
    { "draws_follow_the_distribution", test_draws_follow_the_distribution },
    { "penalties_and_bias", test_penalties_and_bias },
    { "logprobs_report_the_model_distribution", test_logprobs_report_the_model_distribution },
    { "bad_settings_are_invalid", test_bad_settings_are_invalid },
};
CHECK_MAIN(cases)
