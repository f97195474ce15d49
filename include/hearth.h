/* hearth.h - public C API of libhearth.
 *
 * hearth is a local LLM runtime: it loads open-weight models (GGUF, Hugging Face safetensors,
 * MLX-quantized safetensors), runs them on CPUs and NVIDIA GPUs and serves them over HTTP.
 * This header is the whole contract of the library.
 *
 * Conventions:
 *  - Functions that can fail return hx_status (0 is success, errors are negative); results are
 *    written through out-pointers only on success.
 *  - Strings the library returns stay valid until the next call on the same object.
 *  - Close/free functions accept NULL.
 *
 * Usage (inspecting a model's description; generation arrives with the engine, issue 4):
 *
 *     hx_model_info *info = NULL;
 *     char err[256];
 *     if (hx_model_info_open("smollm2", &info, err, sizeof err) != HX_OK) { puts(err); return 1; }
 *     printf("%s, %d layers\n", hx_model_info_arch(info), hx_model_info_n_layer(info));
 *     hx_model_info_close(info);
 */
#ifndef HEARTH_H
#define HEARTH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define HX_API __attribute__((visibility("default"))) /* libhearth builds with -fvisibility=hidden */

#define HX_VERSION_MAJOR 0
#define HX_VERSION_MINOR 1
#define HX_VERSION_PATCH 0
#define HX_VERSION_STRING "0.1.0"

/* The library's version as "MAJOR.MINOR.PATCH"; static text. */
HX_API const char *hx_version(void);

/* One list makes the enum and hx_status_str(). Append only: values are ABI. */
#define HX_STATUS_LIST(S)                                          \
    S(HX_OK,            0, "ok")                                   \
    S(HX_E_INVALID,    -1, "invalid argument")                     \
    S(HX_E_NOMEM,      -2, "out of memory")                        \
    S(HX_E_IO,         -3, "input/output error")                   \
    S(HX_E_FORMAT,     -4, "malformed or unsupported model file")  \
    S(HX_E_CONTEXT,    -5, "prompt longer than the context window") \
    S(HX_E_CANCELLED,  -6, "cancelled")                            \
    S(HX_E_NOTFOUND,   -7, "not found")                            \
    S(HX_E_AMBIGUOUS,  -8, "ambiguous name")                       \
    S(HX_E_UNSUPPORTED,-9, "unsupported")

typedef enum {
#define HX__ENUM(name, value, text) name = value,
    HX_STATUS_LIST(HX__ENUM)
#undef HX__ENUM
} hx_status;

/* A short description of a status; static text, never NULL. */
HX_API const char *hx_status_str(hx_status st);

/* ---- model description ----
 * hx_model_info is the description of a model's files: architecture, hyper-parameters, tensors.
 * It maps the files (no copy) and is immutable once open, so it may be shared across threads. */
typedef struct hx_model_info hx_model_info; /* opaque */

/* Opens MODEL, which is a path (.gguf file or a safetensors folder), a Hugging Face repo id found
 * in the HF cache, or a case-insensitive substring of a local model's name. On success *out owns
 * the description (release with hx_model_info_close). On failure *out is untouched and errbuf,
 * if given, receives one line naming the file and the problem. */
HX_API hx_status hx_model_info_open(const char *model, hx_model_info **out, char *errbuf,
                                    size_t errbuf_len);
HX_API void hx_model_info_close(hx_model_info *info);

/* Accessors; strings are borrowed and live as long as the info. */
HX_API const char *hx_model_info_path(const hx_model_info *info);   /* the resolved path */
HX_API const char *hx_model_info_format(const hx_model_info *info); /* "gguf", "safetensors", "mlx" */
HX_API const char *hx_model_info_arch(const hx_model_info *info);   /* e.g. "llama", "qwen2" */
HX_API int32_t     hx_model_info_n_layer(const hx_model_info *info);
HX_API int32_t     hx_model_info_d_model(const hx_model_info *info);
HX_API int32_t     hx_model_info_n_vocab(const hx_model_info *info);
HX_API int64_t     hx_model_info_n_params(const hx_model_info *info);
/* The model description as a JSON object (the same as `hearth inspect --json`); borrowed. */
HX_API const char *hx_model_info_json(hx_model_info *info);

#ifdef __cplusplus
}
#endif
#endif /* HEARTH_H */
