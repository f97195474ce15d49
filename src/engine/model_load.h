/* model_load.h - a model made ready to generate, in one call.
 *
 * Resolves a model argument (path, Hugging Face repo id or name part), opens its files, its
 * tokenizer and, when asked, its chat template, creates the CPU backend and binds the model to
 * it. The command line, the server and the engine's tests all start this way; what they build
 * on top (a sequence, an executor) stays theirs. Owner: whoever opened it; the parts are
 * immutable after open except the backend's scratch, which the one thread generating uses. */
#ifndef HX_ENGINE_MODEL_LOAD_H
#define HX_ENGINE_MODEL_LOAD_H
#include <stdbool.h>

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
    hx_llm         *llm;  /* bound for HX_SEQUENCE_STEP_TOKENS rows per step */
} hx_loaded_model;

/* Opens model with n_threads CPU threads (0: physical cores) and HX_CPU_* flags. On failure
 * everything opened so far is closed, *out is zeroed and err names the file and problem. */
hx_status hx_loaded_model_open(const char *model, int n_threads, unsigned cpu_flags,
                               bool with_template, hx_loaded_model *out, hx_err *err);
void      hx_loaded_model_close(hx_loaded_model *m); /* a zeroed or partly opened one is fine */

#endif
