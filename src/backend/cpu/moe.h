/* moe.h - the CPU backend's mixture-of-experts op (backend.h `moe`), written on top of the
 * backend's own matmul and activation ops. */
#ifndef HX_BACKEND_CPU_MOE_H
#define HX_BACKEND_CPU_MOE_H
#include "backend/backend.h"

void hx_cpu_moe(hx_backend *be, const hx_moe *m, const float *router, const float *x, int64_t n_tok,
                int64_t d_model, float *work, float *out);

/* Routing of one row (exposed for tests): the softmax of logits[n_expert], then the n_used most
 * probable experts (ties: the lower id) into ids, their probabilities into w (renormalised to
 * sum 1 when norm). */
void hx_moe_route(const float *logits, int32_t n_expert, int32_t n_used, bool norm, int32_t *ids,
                  float *w);

#endif
