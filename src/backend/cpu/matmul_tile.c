/* matmul_tile.c - the reference matmul (the definition every tiled kernel is tested against) and
 * the generic tiling of a dot kernel, used by formats without a dedicated tile kernel.
 *
 * Blocking of hx_matmul_by_dot: outputs in strips of 16 rows of W, and for each strip every
 * activation row in turn. A strip of 16 weight rows is 16 * row_bytes (Q4_0, n_in 4096: 37 KiB),
 * so it stays in L2 (1 MiB per Zen 4 core) while all rows pass over it: W is read from memory
 * once per call instead of once per row, and each activation row (1.25 * n_in bytes) comes from
 * L2 as well. The dot then runs at its L2-resident speed, which is its compute speed. */
#include "kernels.h"

void hx_matmul_ref(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x, int64_t r0,
                   int64_t r1, float *out, int64_t ld_out)
{
    hx_dot_fn dot = hx_kernels_select(0).dot[w->dtype];
    for (int64_t r = r0; r < r1; r++)
        for (int64_t o = o0; o < o1; o++) out[r * ld_out + o] = dot(w, o, x, r);
}

void hx_matmul_by_dot(hx_dot_fn dot, const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                      int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    enum { STRIP = 16 };
    for (int64_t os = o0; os < o1; os += STRIP) {
        const int64_t oe = os + STRIP < o1 ? os + STRIP : o1;
        for (int64_t r = r0; r < r1; r++) {
            float *restrict y = out + r * ld_out;
            for (int64_t o = os; o < oe; o++) y[o] = dot(w, o, x, r);
        }
    }
}
