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

#include <math.h>
#include <string.h>

void hx_moe_route(const float *logits, int32_t n_expert, int32_t n_used, bool norm, int32_t *ids,
                  float *w)
{
    float mx = logits[0];
    for (int32_t e = 1; e < n_expert; e++)
        if (logits[e] > mx) mx = logits[e];
    double sum = 0;
    for (int32_t e = 0; e < n_expert; e++)
        sum += exp((double)logits[e] - mx);
    double chosen = 0;
    for (int32_t j = 0; j < n_used; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j && !taken; i++)
                taken = ids[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        ids[j] = best;
        const double p = exp((double)logits[best] - mx) / sum;
        w[j] = (float)p;
        chosen += p;
    }
    if (norm && chosen > 0)
        for (int32_t j = 0; j < n_used; j++)
            w[j] = (float)(w[j] / chosen);
}

/* y = down(act(gate x) * up x) for n rows of x; g, u: [n, d_ff] scratch. */
static void run_expert(hx_backend *be, const hx_tensor *gate, const hx_tensor *up,
                       const hx_tensor *down, bool geglu, int64_t d_ff, const float *x, int64_t n,
                       float *g, float *u, float *y)
{
    be->matmul(be, gate, NULL, x, n, g);
    be->matmul(be, up, NULL, x, n, u);
    if (geglu)
        be->geglu(be, g, u, n * d_ff, g);
    else
        be->swiglu(be, g, u, n * d_ff, g);
    be->matmul(be, down, NULL, g, n, y);
}

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

    for (int64_t t = 0; t < T; t++)
        hx_moe_route(router + t * E, m->n_expert, m->n_used, m->norm_topk, ids + t * k, w + t * k);
    /* Counting sort of the (row, slot) pairs by expert: list[off[e] .. off[e + 1]) are the
     * slots t * k + j that chose e, in row order. */
    memset(off, 0, (size_t)(E + 1) * sizeof *off);
    for (int64_t s = 0; s < T * k; s++)
        off[ids[s] + 1]++;
    for (int64_t e = 0; e < E; e++)
        off[e + 1] += off[e];
    for (int64_t s = 0; s < T * k; s++)
        list[off[ids[s]]++] = (int32_t)s;
    for (int64_t e = E; e > 0; e--)
        off[e] = off[e - 1]; /* the fill advanced each start */
    off[0] = 0;

    memset(out, 0, (size_t)(T * d) * sizeof *out);
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = off[e + 1] - off[e];
        if (n == 0) continue;
        const int32_t *slots = list + off[e];
        for (int64_t i = 0; i < n; i++)
            memcpy(xs + i * d, x + (slots[i] / k) * d, (size_t)d * sizeof *xs);
        run_expert(be, m->gate[e], m->up[e], m->down[e], m->geglu, m->d_ff, xs, n, g, u, y);
        for (int64_t i = 0; i < n; i++) {
            float      *o = out + (slots[i] / k) * d;
            const float wt = w[slots[i]], *yi = y + i * d;
            for (int64_t c = 0; c < d; c++)
                o[c] += wt * yi[c];
        }
    }
    if (!m->sh_gate) return;
    /* The shared expert runs for every row; its gate is one dot product per row. */
    hx_tensor_dequant_row(m->sh_inp, 0, y);
    for (int64_t t = 0; t < T; t++) {
        double dot = 0;
        for (int64_t c = 0; c < d; c++)
            dot += (double)x[t * d + c] * y[c];
        sig[t] = (float)(1.0 / (1.0 + exp(-dot)));
    }
    run_expert(be, m->sh_gate, m->sh_up, m->sh_down, m->geglu, m->d_ff_sh, x, T, g, u, y);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < d; c++)
            out[t * d + c] += sig[t] * y[t * d + c];
}
