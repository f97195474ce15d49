/* moe_route.h - the parts of a mixture-of-experts MLP (backend.h `moe`) every backend shares:
 * routing the rows and sorting them by expert, the shared expert's gate, and one expert's MLP
 * written on the backend's own ops. */
#ifndef HX_BACKEND_MOE_ROUTE_H
#define HX_BACKEND_MOE_ROUTE_H
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/* Routing of one row: the softmax of logits[n_expert], then the n_used most probable experts
 * (ties: the lower id) into ids, their probabilities into w (renormalised to sum 1 when
 * norm). */
void hx_moe_route(const float *logits, int32_t n_expert, int32_t n_used, bool norm, int32_t *ids,
                  float *w);

/* Counting sort of the n_slots = n_tok * n_used routed (row, slot) pairs by expert: on return
 * list[off[e] .. off[e + 1]) are the slots t * n_used + j that chose e, in row order. off has
 * n_expert + 1 entries. */
void hx_moe_sort(const int32_t *ids, int64_t n_slots, int32_t n_expert, int32_t *off,
                 int32_t *list);

/* Both for the n_tok rows of router [n_tok, n_expert] (host memory): hx_moe_route of each row
 * into ids and w [n_tok, n_used], then hx_moe_sort of the slots into off and list. */
void hx_moe_plan(const hx_moe *m, const float *router, int64_t n_tok, int32_t *ids, float *w,
                 int32_t *off, int32_t *list);

/* The shared expert's weight of each of the n_tok rows of x [n_tok, d] (host memory):
 * sigmoid(x . sh_inp), the dot product in double. vec: d floats of scratch. */
void hx_moe_shared_gate(const hx_moe *m, const float *x, int64_t n_tok, int64_t d, float *vec,
                        float *gate);

/* y = down(act(gate x) * up x) for n rows of x with the backend's ops; g, u: [n, d_ff] of its
 * memory, scratch. */
void hx_moe_expert(hx_backend *be, const hx_tensor *gate, const hx_tensor *up,
                   const hx_tensor *down, bool geglu, int64_t d_ff, const float *x, int64_t n,
                   float *g, float *u, float *y);

#endif
