/* cuda_backend.h - the CUDA implementation of the backend ops table (backend/backend.h).
 *
 * Compiled only where nvcc was found (HX_HAVE_CUDA); reached through device.h. Weights are
 * uploaded once at load in their file block formats, activations and the KV pool live in
 * device memory, and ops are queued on one stream: `read` is where the host waits. Host code is
 * C (this folder's .c files); kernels and their launchers are in .cu files behind kernels.h. */
#ifndef HX_BACKEND_CUDA_CUDA_BACKEND_H
#define HX_BACKEND_CUDA_CUDA_BACKEND_H
#include "backend/backend.h"
#include "backend/device.h"

/* Creates the backend on GPU `device` (0-based). HX_E_NOTFOUND when there is no such GPU (or no
 * driver), with the reason in err. On success *out owns it; release with be->destroy(be). */
hx_status hx_cuda_backend_create(int device, hx_backend **out, hx_err *err);

/* The GPUs found (device.h, hx_gpu_list). */
int hx_cuda_list(hx_gpu_info *out, int max, const char **why);

#endif
