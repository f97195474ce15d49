/* test_cpu_act_fn.c - the gated activation (backend/cpu/act_fn.h).
 *
 * Every variant this CPU runs against silu(g) * u computed in double, on gates from -100 to 100
 * (exp overflowing and underflowing on both sides), lengths that leave every tail of a 16-wide
 * step, and out aliasing gate. Tolerance: 4e-7 relative to |silu(g) u| plus 1e-30 absolute: the
 * reference's expf and the polynomial exp are within 2 ulp, the divide and multiply add a
 * rounding each. */
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/act_fn.h"
#include "base/cpu.h"

static int check_variant(hx_swiglu_fn fn, const char *name)
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
            const double x = g[i], want = x / (1.0 + exp(-x)) * u[i];
            if (!(fabs(out[i] - want) <= 4e-7 * fabs(want) + 1e-30))
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
        const double x = g[i], want = x / (1.0 + exp(-x)) * u[i];
        if (!(fabs(alias[i] - want) <= 4e-7 * fabs(want) + 1e-30))
            CHECK_FAIL("%s aliased i=%d: %.9g, want %.9g", name, i, (double)alias[i], want);
    }
    return 0;
}

static int test_swiglu_ref_matches_double(void) { return check_variant(hx_swiglu_ref, "ref"); }

static int test_swiglu_selected_matches_double(void)
{
    const hx_swiglu_fn fn = hx_swiglu_select(hx_cpu_isa());
    if (fn == hx_swiglu_ref) printf("skip: no SIMD variant on this CPU (the reference is tested)\n");
    return check_variant(fn, "selected");
}

static const check_case cases[] = {
    { "swiglu_ref_matches_double", test_swiglu_ref_matches_double },
    { "swiglu_selected_matches_double", test_swiglu_selected_matches_double },
};

CHECK_MAIN(cases)
