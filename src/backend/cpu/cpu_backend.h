/* cpu_backend.h - the CPU implementation of the backend ops table (backend/backend.h).
 *
 * Owns a persistent thread pool (base/threadpool.h); every op splits its rows, heads or
 * outputs across the pool deterministically, so results do not depend on timing. Activation
 * buffers are plain 64-byte-aligned host memory. */
#ifndef HX_BACKEND_CPU_BACKEND_H
#define HX_BACKEND_CPU_BACKEND_H
#include "backend/backend.h"

enum {
    /* Matmuls quantize activations to int8 blocks and use the integer kernels (VNNI, maddubs)
     * instead of exact f32 dots against dequantized weight rows. */
    HX_CPU_INT8_ACT = 1u << 0,
};

/* Creates the CPU backend with n_threads threads (0: one per physical core) and HX_CPU_* flags.
 * On success *out owns it; release with be->destroy(be). */
hx_status hx_cpu_backend_create(int n_threads, unsigned flags, hx_backend **out, hx_err *err);

#endif
