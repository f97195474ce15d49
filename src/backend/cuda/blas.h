/* blas.h - the few cuBLAS entry points the cuda backend calls, loaded when a GPU backend starts.
 *
 * cuBLAS is opened with dlopen rather than linked: linking it makes every hearth process, the
 * CPU-only ones too, map and relocate its ~700 MB of libraries at start (measured: `hearth
 * --version` went from a few MiB and milliseconds to 226 MiB and 120 ms). */
#ifndef HX_BACKEND_CUDA_BLAS_H
#define HX_BACKEND_CUDA_BLAS_H
#include <cublas_v2.h>

#include "base/err.h"

typedef struct {
    cublasStatus_t (*create)(cublasHandle_t *h);
    cublasStatus_t (*destroy)(cublasHandle_t h);
    cublasStatus_t (*set_stream)(cublasHandle_t h, cudaStream_t s);
    cublasStatus_t (*set_workspace)(cublasHandle_t h, void *ws, size_t bytes);
    cublasStatus_t (*gemm_ex)(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const void *alpha, const void *a,
                              cudaDataType at, int lda, const void *b, cudaDataType bt, int ldb,
                              const void *beta, void *c, cudaDataType ct, int ldc,
                              cublasComputeType_t compute, cublasGemmAlgo_t algo);
    cublasStatus_t (*sgemm)(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const float *alpha, const float *a, int lda,
                            const float *b, int ldb, const float *beta, float *c, int ldc);
    const char *(*status_string)(cublasStatus_t s);
} hx_blas;

/* Loads cuBLAS once per process (thread-safe); NULL with err set when it is not installed. */
const hx_blas *hx_blas_load(hx_err *err);

#endif
