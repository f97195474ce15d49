/* test_cpu_moe.c - mixture-of-experts routing and the CPU moe op (backend/cpu/moe.h).
 *
 * Routing against hand-computed softmaxes (ties to the lower id, renormalised or not); the op
 * against a per-row loop in double over the same F32 experts, for a batch where several rows
 * share experts, with a shared expert, and with an expert whose weights are NaN that no row
 * chooses (the op must never read it). */
#include "check.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/moe.h"
#include "backend/moe_route.h"

static int test_route_softmax_topk(void)
{
    const float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    int32_t ids[4];
    float w[4];
    double z = exp(1.0) + exp(3.0) + exp(2.0) + exp(0.0);
    hx_moe_route(logits, 4, 2, false, ids, w);
    CHECK_EQ(ids[0], 1);
    CHECK_EQ(ids[1], 2);
    CHECK_NEAR(w[0], exp(3.0) / z, 1e-6);
    CHECK_NEAR(w[1], exp(2.0) / z, 1e-6);
    hx_moe_route(logits, 4, 2, true, ids, w); /* renormalised: the softmax of the two */
    CHECK_NEAR(w[0], exp(3.0) / (exp(3.0) + exp(2.0)), 1e-6);
    CHECK_NEAR(w[1], exp(2.0) / (exp(3.0) + exp(2.0)), 1e-6);
    hx_moe_route(logits, 4, 4, true, ids, w); /* every expert: sums to 1, in order */
    CHECK_EQ(ids[2], 0);
    CHECK_EQ(ids[3], 3);
    CHECK_NEAR(w[0] + w[1] + w[2] + w[3], 1.0, 1e-6);
    const float tie[4] = {0.5f, 2.0f, 0.5f, 2.0f};
    hx_moe_route(tie, 4, 3, false, ids, w);
    CHECK_EQ(ids[0], 1);
    CHECK_EQ(ids[1], 3);
    CHECK_EQ(ids[2], 0);
    const float big[3] = {1000.0f, 999.0f, -1000.0f}; /* no overflow */
    hx_moe_route(big, 3, 1, false, ids, w);
    CHECK_EQ(ids[0], 0);
    CHECK_NEAR(w[0], 1.0 / (1.0 + exp(-1.0)), 1e-6);
    return 0;
}

enum { E = 5, K = 2, D = 64, F = 32, FS = 48, T = 9 };

static float wg[E][F][D], wu[E][F][D], wd[E][D][F];
static float sg[FS][D], su[FS][D], sd[D][FS], sinp[D];

static hx_tensor f32(const void *p, int64_t rows, int64_t cols)
{
    return (hx_tensor){.dtype = HX_DT_F32, .n_dims = 2, .shape = {rows, cols}, .data = p,
                       .n_bytes = (size_t)(rows * cols) * sizeof(float)};
}

static double silu(double x) { return x / (1.0 + exp(-x)); }

/* down(silu(gate x) * up x) of one row, in double. */
static void expert_ref(const float *g, const float *u, const float *dn, int64_t f,
                       const float *x, double *y)
{
    double h[FS];
    for (int64_t j = 0; j < f; j++) {
        double a = 0, b = 0;
        for (int c = 0; c < D; c++) a += (double)g[j * D + c] * x[c], b += (double)u[j * D + c] * x[c];
        h[j] = silu(a) * b;
    }
    for (int c = 0; c < D; c++) {
        double s = 0;
        for (int64_t j = 0; j < f; j++) s += (double)dn[c * f + j] * h[j];
        y[c] = s;
    }
}

static int run_moe(bool shared, bool norm)
{
    uint32_t seed = 11;
    for (int e = 0; e < E; e++)
        for (int j = 0; j < F; j++)
            for (int c = 0; c < D; c++) {
                wg[e][j][c] = check_rng_range(&seed, -0.3f, 0.3f);
                wu[e][j][c] = check_rng_range(&seed, -0.3f, 0.3f);
                wd[e][c][j] = check_rng_range(&seed, -0.3f, 0.3f);
            }
    for (int j = 0; j < FS; j++)
        for (int c = 0; c < D; c++) {
            sg[j][c] = check_rng_range(&seed, -0.3f, 0.3f);
            su[j][c] = check_rng_range(&seed, -0.3f, 0.3f);
            sd[c][j] = check_rng_range(&seed, -0.3f, 0.3f);
        }
    for (int c = 0; c < D; c++) sinp[c] = check_rng_range(&seed, -0.3f, 0.3f);
    /* Expert 4 is poisoned and never chosen. */
    for (int j = 0; j < F; j++)
        for (int c = 0; c < D; c++) wg[4][j][c] = wu[4][j][c] = wd[4][c][j] = NAN;

    hx_backend *be = NULL;
    hx_err err = {0};
    CHECK(hx_cpu_backend_create(2, 0, &be, &err) == HX_OK);
    CHECK(be->reserve(be, 64, T, &err) == HX_OK);
    hx_tensor tg[E], tu[E], td[E];
    const hx_tensor *pg[E], *pu[E], *pd[E];
    for (int e = 0; e < E; e++) {
        tg[e] = f32(wg[e], F, D), tu[e] = f32(wu[e], F, D), td[e] = f32(wd[e], D, F);
        pg[e] = &tg[e], pu[e] = &tu[e], pd[e] = &td[e];
    }
    hx_tensor tsg = f32(sg, FS, D), tsu = f32(su, FS, D), tsd = f32(sd, D, FS);
    hx_tensor tsi = {.dtype = HX_DT_F32, .n_dims = 1, .shape = {D}, .data = sinp,
                     .n_bytes = sizeof sinp};
    hx_moe m = {.n_expert = E, .n_used = K, .d_ff = F, .gate = pg, .up = pu, .down = pd,
                .norm_topk = norm};
    if (shared) m.sh_gate = &tsg, m.sh_up = &tsu, m.sh_down = &tsd, m.sh_inp = &tsi, m.d_ff_sh = FS;
    float *x = be->alloc(be, T * D * sizeof(float)), *out = be->alloc(be, T * D * sizeof(float));
    float *router = be->alloc(be, T * E * sizeof(float));
    float *work = be->alloc(be, (size_t)hx_moe_work_floats(T, D, FS, K, E) * sizeof(float));
    CHECK(x && out && router && work);
    for (int i = 0; i < T * D; i++) x[i] = check_rng_range(&seed, -1, 1);
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < 4; e++) router[t * E + e] = check_rng_range(&seed, -2, 2);
        router[t * E + 4] = -50.0f;
    }
    be->moe(be, &m, router, x, T, D, work, out);

    int used[E] = {0};
    for (int t = 0; t < T; t++) {
        int32_t ids[K];
        float w[K];
        hx_moe_route(router + t * E, E, K, norm, ids, w);
        double want[D] = {0}, y[D];
        for (int j = 0; j < K; j++) {
            used[ids[j]]++;
            expert_ref(&wg[ids[j]][0][0], &wu[ids[j]][0][0], &wd[ids[j]][0][0], F, x + t * D, y);
            for (int c = 0; c < D; c++) want[c] += w[j] * y[c];
        }
        if (shared) {
            double dot = 0;
            for (int c = 0; c < D; c++) dot += (double)x[t * D + c] * sinp[c];
            expert_ref(&sg[0][0], &su[0][0], &sd[0][0], FS, x + t * D, y);
            for (int c = 0; c < D; c++) want[c] += y[c] / (1.0 + exp(-dot));
        }
        for (int c = 0; c < D; c++) CHECK_NEAR(out[t * D + c], want[c], 2e-5);
    }
    int shared_experts = 0;
    for (int e = 0; e < 4; e++) shared_experts += used[e] > 1;
    CHECK(shared_experts > 0); /* some expert ran several rows at once */
    CHECK_EQ(used[4], 0);
    be->free(be, x), be->free(be, out), be->free(be, router), be->free(be, work);
    be->destroy(be);
    return 0;
}

static int test_moe_matches_a_per_row_loop(void) { return run_moe(false, false); }
static int test_moe_renormalised(void) { return run_moe(false, true); }
static int test_moe_with_a_shared_expert(void) { return run_moe(true, false); }

static const check_case cases[] = {
    { "route_softmax_topk", test_route_softmax_topk },
    { "moe_matches_a_per_row_loop", test_moe_matches_a_per_row_loop },
    { "moe_renormalised", test_moe_renormalised },
    { "moe_with_a_shared_expert", test_moe_with_a_shared_expert },
};
CHECK_MAIN(cases)
