/* moe.h - the CPU backend's mixture-of-experts op (backend.h `moe`), written on top of the
 * backend's own matmul and activation ops. */
#ifndef HX_BACKEND_CPU_MOE_H
#define HX_BACKEND_CPU_MOE_H
#include "backend/backend.h"

void hx_cpu_moe(hx_backend *be, const hx_moe *m, const float *router, const float *x, int64_t n_tok,
                int64_t d_model, float *work, float *out);

#endif
