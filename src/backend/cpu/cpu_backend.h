/* cpu_backend.h - the CPU implementation of the backend ops table (backend/backend.h).
 *
 * Owns a persistent thread pool (base/threadpool.h); every op splits its rows, heads or
 * outputs across the pool deterministically, so results do not depend on timing. Activation
 * buffers are plain 64-byte-aligned host memory. */
#ifndef HX_BACKEND_CPU_BACKEND_H
#define HX_BACKEND_CPU_BACKEND_H
#include "backend/backend.h"

enum {
    /* Matmuls quantize activations to a single int8 term per block and use the integer
     * kernels (VNNI, maddubs) at every batch size: fastest, but not exact (starter model: 96.5%
     * top-1 agreement, KL 0.004). Without it matmuls are exact: f32-activation kernels for
     * decode, two-term int8 activations (~14 bits) on the VNNI tile for prefill. */
    HX_CPU_INT8_ACT = 1u << 0,
};

/* Creates the CPU backend with n_threads threads (0: one per physical core) and HX_CPU_* flags.
 * On success *out owns it; release with be->destroy(be). */
hx_status hx_cpu_backend_create(int n_threads, unsigned flags, hx_backend **out, hx_err *err);

#endif
