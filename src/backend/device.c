/* device.c - backend selection by device name (see device.h). */
#include "backend/device.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* Parses "cuda" or "cuda:N" into N; -1 for anything else. */
static int gpu_index(const char *device)
{
    if (!device || strncmp(device, "cuda", 4) != 0) return -1;
    if (device[4] == '\0') return 0;
    if (device[4] != ':' || device[5] < '0' || device[5] > '9') return -1;
    char *end;
    const long n = strtol(device + 5, &end, 10);
    return *end == '\0' && n < 1024 ? (int)n : -1;
}

bool hx_device_is_gpu(const char *device)
{
    return gpu_index(device) >= 0;
}

hx_status hx_backend_open(const char *device, int n_threads, unsigned cpu_flags, hx_backend **out,
                          hx_err *err)
{
    *out = NULL;
    if (!device || !*device || strcmp(device, "cpu") == 0)
        return hx_cpu_backend_create(n_threads, cpu_flags, out, err);
    const int gpu = gpu_index(device);
    if (gpu < 0)
        return hx_err_set(err, HX_E_INVALID, "unknown device '%s' (expected cpu, cuda or cuda:N)",
                          device);
#ifdef HX_HAVE_CUDA
    return hx_cuda_backend_create(gpu, out, err);
#else
    return hx_err_set(err, HX_E_UNSUPPORTED,
                      "device '%s': this hearth was built without CUDA (nvcc was not found at "
                      "build time); `hearth devices` lists what it has", device);
#endif
}

const char *hx_backends_compiled(void)
{
#ifdef HX_HAVE_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}

int hx_gpu_list(hx_gpu_info *out, int max, const char **why)
{
#ifdef HX_HAVE_CUDA
    return hx_cuda_list(out, max, why);
#else
    (void)out;
    (void)max;
    if (why) *why = "CUDA was not built into this binary";
    return 0;
#endif
}
