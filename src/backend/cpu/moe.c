/* moe.c - mixture of experts on the CPU (moe.h).
 *
 * Routing is a few dozen floats per row and runs on the caller. The experts then run one at a
 * time over the rows that chose them: those rows are gathered into one contiguous block, go
 * through the expert's gate, up and down matmuls together (a prefill of n rows reads each
 * chosen expert's weights once, not once per row), and each result row is added, weighted,
 * into its row of out. An expert no row chose is never read, so a decode step streams only
 * n_used experts' weights. Experts run in ascending id, so the sum of a row is in a fixed order
 * whatever the batch. The matmuls themselves are the backend's, split across its threads. */
#include "backend/cpu/moe.h"

#include <string.h>

#include "backend/moe_route.h"

void hx_cpu_moe(hx_backend *be, const hx_moe *m, const float *router, const float *x, int64_t n_tok,
                int64_t d_model, float *work, float *out)
{
    const int64_t T = n_tok, d = d_model, k = m->n_used, E = m->n_expert;
    const int64_t d_ff = m->d_ff > m->d_ff_sh ? m->d_ff : m->d_ff_sh;
    /* work: xs [T, d] | g, u [T, d_ff] | y [T, d] | w [T, k] | ids, list [T, k] | sig [T] |
     * off [E + 1] (hx_moe_work_floats) */
    float   *xs = work, *g = xs + T * d, *u = g + T * d_ff, *y = u + T * d_ff, *w = y + T * d;
    int32_t *ids = (int32_t *)(w + T * k), *list = ids + T * k;
    float   *sig = (float *)(list + T * k);
    int32_t *off = (int32_t *)(sig + T);

    hx_moe_plan(m, router, T, ids, w, off, list);

    memset(out, 0, (size_t)(T * d) * sizeof *out);
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = off[e + 1] - off[e];
        if (n == 0) continue;
        const int32_t *slots = list + off[e];
        for (int64_t i = 0; i < n; i++)
            memcpy(xs + i * d, x + (slots[i] / k) * d, (size_t)d * sizeof *xs);
        hx_moe_expert(be, m->gate[e], m->up[e], m->down[e], m->geglu, m->d_ff, xs, n, g, u, y);
        for (int64_t i = 0; i < n; i++) {
            float      *o = out + (slots[i] / k) * d;
            const float wt = w[slots[i]], *yi = y + i * d;
            for (int64_t c = 0; c < d; c++)
                o[c] += wt * yi[c];
        }
    }
    if (!m->sh_gate) return;
    /* The shared expert runs for every row; its gate is one dot product per row. */
    hx_moe_shared_gate(m, x, T, d, y, sig);
    hx_moe_expert(be, m->sh_gate, m->sh_up, m->sh_down, m->geglu, m->d_ff_sh, x, T, g, u, y);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < d; c++)
            out[t * d + c] += sig[t] * y[t * d + c];
}
