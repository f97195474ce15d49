/* device.h - choosing the backend a model runs on, by the name a user types.
 *
 * "cpu" (the default), "cuda" (the first GPU) or "cuda:N". The CUDA backend exists only in a
 * build made where nvcc was found; elsewhere asking for it is a clear error, never a silent
 * fallback to the CPU. This is the one place that knows which backends exist: the engine, the
 * server and the command line name a device and get an ops table (backend.h). */
#ifndef HX_BACKEND_DEVICE_H
#define HX_BACKEND_DEVICE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* One GPU as the driver reports it. */
typedef struct {
    int     index;          /* the N of cuda:N */
    char    name[96];       /* "NVIDIA H200" */
    int     cc_major, cc_minor;
    int     n_sm;           /* multiprocessors */
    int64_t total_bytes, free_bytes;
} hx_gpu_info;

/* Creates the backend `device` names (NULL or "" mean "cpu"); n_threads and cpu_flags apply to
 * the CPU backend (HX_CPU_* in backend/cpu/cpu_backend.h) and are ignored by the others. On
 * success *out owns it (be->destroy). HX_E_INVALID for an unknown name, HX_E_UNSUPPORTED when
 * CUDA was not built into this binary, HX_E_NOTFOUND when no such GPU is present. */
hx_status hx_backend_open(const char *device, int n_threads, unsigned cpu_flags, hx_backend **out,
                          hx_err *err);

/* True when device names a GPU ("cuda", "cuda:N"), so callers can size memory against it. */
bool hx_device_is_gpu(const char *device);

/* The backends compiled into this binary, space separated: "cpu" or "cpu cuda". */
const char *hx_backends_compiled(void);

/* Fills up to max entries of out with the GPUs found and returns how many there are; 0 when
 * CUDA was not built or there is no usable driver or device (why: in *why, when not NULL, a
 * static string such as "no CUDA driver"). */
int hx_gpu_list(hx_gpu_info *out, int max, const char **why);

#endif
