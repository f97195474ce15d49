/* test_cpu_act_fn.c - the gated activations and the tanh cap (backend/cpu/act_fn.h).
 *
 * Every variant this CPU runs against silu(g) * u computed in double, on gates from -100 to 100
 * (exp overflowing and underflowing on both sides), lengths that leave every tail of a 16-wide
 * step, and out aliasing gate. Tolerance: 4e-7 relative to |silu(g) u| plus 1e-30 absolute: the
 * reference's expf and the polynomial exp are within 2 ulp, the divide and multiply add a
 * rounding each. GeGLU adds 2e-7 |g u|: its reference is PyTorch's form 0.5 g (1 + tanh(.)) in
 * f32, where 1 + tanh cancels for negative g (an absolute error of an ulp of 1, times 0.5 g u). */
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/act_fn.h"
#include "base/cpu.h"

/* silu(g) * u, or gelu_tanh(g) * u, in double. */
static double want_of(int gelu, double x, double u)
{
    if (gelu) return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * u;
    return x / (1.0 + exp(-x)) * u;
}

static int within(int gelu, double got, double want, double g, double u)
{
    return fabs(got - want) <= 4e-7 * fabs(want) + (gelu ? 2e-7 * fabs(g * u) : 0.0) + 1e-30;
}

static int check_fn(hx_swiglu_fn fn, const char *name, int gelu)
{
    enum { N = 1000 };
    static float g[N], u[N], out[N];
    uint32_t seed = 5;
    for (int i = 0; i < N; i++) {
        g[i] = i % 50 == 0 ? check_rng_range(&seed, -100, 100) : check_rng_range(&seed, -12, 12);
        u[i] = check_rng_range(&seed, -3, 3);
    }
    g[1] = 0.0f;
    g[2] = -0.0f;
    g[3] = 88.5f;   /* exp(-g) underflows to 0 */
    g[4] = -88.5f;  /* exp(-g) overflows: silu -> -0 */
    for (int n = 0; n <= 33; n++) { /* every tail length, then a long run below */
        memset(out, 0x55, sizeof out);
        fn(g, u, n, out);
        for (int i = 0; i < n; i++) {
            const double x = g[i], want = want_of(gelu, x, u[i]);
            if (!within(gelu, out[i], want, x, u[i]))
                CHECK_FAIL("%s n=%d: g=%.9g u=%.9g -> %.9g, want %.9g", name, n, (double)g[i],
                           (double)u[i], (double)out[i], want);
        }
        uint32_t bits;
        memcpy(&bits, &out[n], 4);
        if (n < N && bits != 0x55555555u) CHECK_FAIL("%s n=%d wrote past the end", name, n);
    }
    static float alias[N];
    memcpy(alias, g, sizeof g);
    fn(alias, u, N, alias); /* out == gate */
    for (int i = 0; i < N; i++) {
        const double x = g[i], want = want_of(gelu, x, u[i]);
        if (!within(gelu, alias[i], want, x, u[i]))
            CHECK_FAIL("%s aliased i=%d: %.9g, want %.9g", name, i, (double)alias[i], want);
    }
    return 0;
}

static int check_variant(hx_swiglu_fn fn, const char *name) { return check_fn(fn, name, 0); }

static int test_swiglu_ref_matches_double(void) { return check_variant(hx_swiglu_ref, "ref"); }

static int test_swiglu_selected_matches_double(void)
{
    const hx_swiglu_fn fn = hx_swiglu_select(hx_cpu_isa());
    if (fn == hx_swiglu_ref) printf("skip: no SIMD variant on this CPU (the reference is tested)\n");
    return check_variant(fn, "selected");
}

/* GeGLU: the same gates (tanh saturating on both sides, the cube overflowing the polynomial's
 * range at |g| = 100) against gelu_tanh(g) * u in double. */
static int test_geglu_ref_matches_double(void) { return check_fn(hx_geglu_ref, "geglu ref", 1); }

static int test_geglu_selected_matches_double(void)
{
    const hx_swiglu_fn fn = hx_geglu_select(hx_cpu_isa());
    if (fn == hx_geglu_ref) printf("skip: no SIMD variant on this CPU (the reference is tested)\n");
    return check_fn(fn, "geglu selected", 1);
}

/* cap * tanh(x / cap) within 2 ulp-ish of double, bounded by cap for any x. */
static int test_softcap_matches_double(void)
{
    enum { N = 2000 };
    static float x[N], y[N];
    uint32_t seed = 9;
    for (int i = 0; i < N; i++) x[i] = check_rng_range(&seed, -400, 400);
    x[0] = 0.0f;
    x[1] = 1e30f;
    x[2] = -1e30f;
    memcpy(y, x, sizeof x);
    const float cap = 30.0f;
    hx_softcap_ref(y, cap, N);
    for (int i = 0; i < N; i++) {
        const double want = cap * tanh((double)x[i] / cap);
        if (!(fabs(y[i] - want) <= 5e-7 * fabs(want) + 1e-30) || fabsf(y[i]) > cap)
            CHECK_FAIL("softcap x=%.9g -> %.9g, want %.9g", (double)x[i], (double)y[i], want);
    }
    return 0;
}

static const check_case cases[] = {
    { "geglu_ref_matches_double", test_geglu_ref_matches_double },
    { "geglu_selected_matches_double", test_geglu_selected_matches_double },
    { "softcap_matches_double", test_softcap_matches_double },
    { "swiglu_ref_matches_double", test_swiglu_ref_matches_double },
    { "swiglu_selected_matches_double", test_swiglu_selected_matches_double },
};

CHECK_MAIN(cases)
