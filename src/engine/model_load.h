/* model_load.h - a model made ready to generate, in one call.
 *
 * Opens the backend of the device asked for (backend/device.h: "cpu", "cuda", "cuda:N"),
 * resolves a model argument (path, Hugging Face repo id or name part), opens its files, its
 * tokenizer and, when asked, its chat template, and binds the model to the backend. The command
 * line, the server and the engine's tests all start this way; what they build on top (a sequence,
 * an executor) stays theirs. Owner: whoever opened it; the parts are immutable after open except
 * the backend's scratch, which the one thread generating uses. */
#ifndef HX_ENGINE_MODEL_LOAD_H
#define HX_ENGINE_MODEL_LOAD_H
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "format/model_files.h"
#include "model/model.h"
#include "template/jinja.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    char           *path; /* the resolved path (hx_alloc'd) */
    hx_model_files *mf;
    hx_tokenizer   *tok;
    hx_template    *tpl;  /* NULL when the model has none or it was not asked for */
    hx_backend     *be;
    hx_llm         *llm;  /* bound for HX_SEQUENCE_STEP_TOKENS(_GPU) rows per step */
    char            device[24]; /* "cpu" or "cuda:N": the device's name in reports (/stats) */
    /* A GPU's memory as its backend reported it right after opening, before any weight was
     * uploaded: what a memory budget on that device is measured against. 0 on the CPU (no
     * mem_info: its memory is the host's). */
    int64_t         device_free_bytes, device_total_bytes;
} hx_loaded_model;

/* Opens model on device (NULL or "": the CPU; else as hx_backend_open takes it) with n_threads
 * CPU threads (0: physical cores) and HX_CPU_* flags, both for the CPU backend only. The
 * backend is opened first, so a device that cannot be used (an unknown name, CUDA not built
 * in, no such GPU) fails before any file is read, with hx_backend_open's message. On failure
 * everything opened so far is closed, *out is zeroed and err names the device or the file and
 * the problem. */
hx_status hx_loaded_model_open(const char *model, const char *device, int n_threads,
                               unsigned cpu_flags, bool with_template, hx_loaded_model *out,
                               hx_err *err);
void      hx_loaded_model_close(hx_loaded_model *m); /* a zeroed or partly opened one is fine */

#endif
