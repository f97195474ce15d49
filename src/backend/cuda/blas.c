/* blas.c - cuBLAS through dlopen (blas.h). */
#include "backend/cuda/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

static hx_blas       blas;
static const char   *failure; /* why loading failed, or NULL */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Looks up name in lib into *slot; false when missing. (A data pointer to a function pointer
 * goes through memcpy: ISO C has no cast between them.) */
static bool sym(void *lib, const char *name, void *slot)
{
    void *p = dlsym(lib, name);
    if (!p) return false;
    memcpy(slot, &p, sizeof p);
    return true;
}

static void load(void)
{
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        failure = "cuBLAS 13 (libcublas.so.13) is not installed or not on the library path";
        return;
    }
    if (!sym(lib, "cublasCreate_v2", &blas.create) || !sym(lib, "cublasDestroy_v2", &blas.destroy) ||
        !sym(lib, "cublasSetStream_v2", &blas.set_stream) ||
        !sym(lib, "cublasSetWorkspace_v2", &blas.set_workspace) ||
        !sym(lib, "cublasGemmEx", &blas.gemm_ex) ||
        !sym(lib, "cublasSgemm_v2", &blas.sgemm) ||
        !sym(lib, "cublasGetStatusString", &blas.status_string))
        failure = "libcublas.so.13 lacks an entry point hearth needs";
}

const hx_blas *hx_blas_load(hx_err *err)
{
    pthread_once(&once, load);
    if (failure) {
        hx_err_set(err, HX_E_NOTFOUND, "cuda: %s", failure);
        return NULL;
    }
    return &blas;
}
