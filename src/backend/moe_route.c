/* moe_route.c - what the backends' moe ops share (moe_route.h). */
#include "backend/moe_route.h"

#include <math.h>
#include <string.h>

#include "tensor/tensor.h"

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

void hx_moe_sort(const int32_t *ids, int64_t n_slots, int32_t n_expert, int32_t *off,
                 int32_t *list)
{
    memset(off, 0, (size_t)(n_expert + 1) * sizeof *off);
    for (int64_t s = 0; s < n_slots; s++)
        off[ids[s] + 1]++;
    for (int32_t e = 0; e < n_expert; e++)
        off[e + 1] += off[e];
    for (int64_t s = 0; s < n_slots; s++)
        list[off[ids[s]]++] = (int32_t)s;
    for (int32_t e = n_expert; e > 0; e--)
        off[e] = off[e - 1]; /* the fill advanced each start */
    off[0] = 0;
}

void hx_moe_plan(const hx_moe *m, const float *router, int64_t n_tok, int32_t *ids, float *w,
                 int32_t *off, int32_t *list)
{
    const int64_t k = m->n_used;
    for (int64_t t = 0; t < n_tok; t++)
        hx_moe_route(router + t * m->n_expert, m->n_expert, m->n_used, m->norm_topk, ids + t * k,
                     w + t * k);
    hx_moe_sort(ids, n_tok * k, m->n_expert, off, list);
}

void hx_moe_shared_gate(const hx_moe *m, const float *x, int64_t n_tok, int64_t d, float *vec,
                        float *gate)
{
    hx_tensor_dequant_row(m->sh_inp, 0, vec);
    for (int64_t t = 0; t < n_tok; t++) {
        double dot = 0;
        for (int64_t c = 0; c < d; c++)
            dot += (double)x[t * d + c] * vec[c];
        gate[t] = (float)(1.0 / (1.0 + exp(-dot)));
    }
}

void hx_moe_expert(hx_backend *be, const hx_tensor *gate, const hx_tensor *up,
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
