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
 * Objects and threads:
 *  - hx_model: weights (mapped), tokenizer and chat template; immutable once open and shareable
 *    by any number of threads and sessions.
 *  - hx_session: one conversation (its KV cache, its thread pool); one thread at a time.
 *  - hx_model_info: a model's description without loading it for inference.
 *
 * Usage:
 *
 *     hx_model *model;
 *     hx_session *chat;
 *     char err[512];
 *     if (hx_model_open("smollm2", NULL, &model, err, sizeof err) != HX_OK) { puts(err); return 1; }
 *     hx_session_open(model, NULL, &chat);
 *     char *prompt;
 *     hx_model_apply_template(model, "[{\"role\": \"user\", \"content\": \"Hi!\"}]", true,
 *                             &prompt);
 *     hx_generate_params gp = hx_generate_params_default(model);
 *     hx_session_generate(chat, prompt, &gp, print_piece, NULL, NULL);
 *     hx_free_string(prompt);
 *     hx_session_close(chat);
 *     hx_model_close(model);
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
    S(HX_E_UNSUPPORTED,-9, "unsupported")                         \
    S(HX_E_BUSY,      -10, "busy: the request queue is full")

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

/* ---- inference ---- */

typedef struct hx_model   hx_model;   /* opaque */
typedef struct hx_session hx_session; /* opaque */

typedef struct {        /* fields are appended, never reordered */
    int32_t n_threads;  /* 0: one per physical core */
    int32_t n_ctx;      /* positions per session; 0: the model's, at most 8192 */
    bool    int8_kernels; /* faster int8-activation matmuls, slightly less exact */
    /* Where sessions run: NULL or "cpu" (the default), "cuda" (the first GPU) or "cuda:N".
     * Borrowed for the call only (hx_model_open keeps a copy). n_threads and int8_kernels are
     * the CPU's and ignored on a GPU, where each session uploads its own copy of the weights. */
    const char *device;
} hx_model_params;
HX_API hx_model_params hx_model_params_default(void);

/* Opens MODEL (a path, a Hugging Face repo id in the HF cache, or part of a local model's name)
 * for inference. params may be NULL (defaults). On success *out owns the model
 * (hx_model_close); on failure errbuf, if given, gets one line naming the file and problem.
 * A device other than the CPU is tried here, so that a session can open there: HX_E_INVALID for
 * an unknown name, HX_E_UNSUPPORTED when this libhearth was built without CUDA, HX_E_NOTFOUND
 * when there is no such GPU, each with its line in errbuf. */
HX_API hx_status hx_model_open(const char *model, const hx_model_params *params, hx_model **out,
                               char *errbuf, size_t errbuf_len);
HX_API void      hx_model_close(hx_model *model); /* after every session of it is closed */

/* Renders a conversation through the model's chat template. messages_json is a JSON array of
 * {"role": ..., "content": ...} objects (content a string or a list of {"type": "text", "text"}
 * parts). On success *out is a new string the caller frees with hx_free_string. HX_E_INVALID for
 * malformed JSON or a template that raises; HX_E_NOTFOUND when the model has no template. */
HX_API hx_status hx_model_apply_template(hx_model *model, const char *messages_json,
                                         bool add_generation_prompt, char **out);
HX_API void      hx_free_string(char *s); /* accepts NULL */

/* Token ids of text (special tokens such as <|im_end|> recognised when parse_special). Writes up
 * to max ids to ids and the full count to *n; a count above max means the array was too small
 * (nothing else is wrong: call again with a larger one). */
HX_API hx_status hx_model_tokenize(hx_model *model, const char *text, size_t len,
                                   bool parse_special, int32_t *ids, size_t max, size_t *n);

typedef struct {                 /* fields are appended, never reordered */
    float       temperature;     /* 0: greedy */
    int32_t     top_k;           /* 0: off */
    float       top_p;           /* 1: off */
    float       min_p;           /* 0: off */
    float       repeat_penalty;  /* 1: off */
    float       presence_penalty;
    float       frequency_penalty;
    uint64_t    seed;
    int32_t     max_tokens;      /* <= 0: until the context is full */
    const char *const *stop;     /* stop strings (borrowed for the call) */
    int32_t     n_stop;
} hx_generate_params;

/* The model's sampling defaults (its generation_config.json, else hearth's), seed 0, no limit. */
HX_API hx_generate_params hx_generate_params_default(const hx_model *model);

typedef enum { HX_FINISH_REASON_STOP = 0, HX_FINISH_REASON_LENGTH = 1,
               HX_FINISH_REASON_CANCELLED = 2 } hx_finish_reason;

typedef struct {
    int32_t          n_prompt;      /* prompt tokens */
    int32_t          n_cached;      /* of which reused from the session's cache */
    int32_t          n_generated;
    double           prompt_ms;     /* prefill time */
    double           generate_ms;   /* decode time after the first token */
    double           first_token_ms;
    hx_finish_reason finish;
} hx_generate_stats;

/* Receives generated text as it becomes final (whole UTF-8 characters). `piece` is borrowed:
 * copy it. Return false to stop: generation then finishes with HX_FINISH_REASON_CANCELLED. */
typedef bool (*hx_piece_cb)(const char *piece, size_t len, void *user_data);

/* A conversation over model. params may be NULL (the model's params). *out is closed with
 * hx_session_close, which accepts NULL. The session's backend opens on params->device: the
 * failures hx_model_open lists for a device, and HX_E_NOMEM when a GPU cannot hold the weights
 * and the KV cache. */
HX_API hx_status hx_session_open(hx_model *model, const hx_model_params *params,
                                 hx_session **out);
HX_API void      hx_session_close(hx_session *s);

/* Generates a continuation of prompt (text; special tokens recognised, as rendered by
 * hx_model_apply_template), streaming it to cb. The session keeps its KV cache: a prompt that
 * extends the previous one (the next chat turn) re-runs only what is new. stats may be NULL.
 * HX_E_CONTEXT when the prompt does not fit the context; details via hx_session_errmsg. */
HX_API hx_status hx_session_generate(hx_session *s, const char *prompt,
                                     const hx_generate_params *params, hx_piece_cb cb,
                                     void *user_data, hx_generate_stats *stats);
HX_API const char *hx_session_errmsg(const hx_session *s); /* detail of the last failure */

#ifdef __cplusplus
}
#endif
#endif /* HEARTH_H */
