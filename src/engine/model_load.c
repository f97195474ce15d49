/* model_load.c - a model made ready to generate (see model_load.h). */
#include "engine/model_load.h"

#include <stdio.h>
#include <string.h>

#include "backend/device.h"
#include "base/alloc.h"
#include "engine/sequence.h"
#include "format/discover.h"

/* The device's name as reports give it: "cpu", or "cuda:N" for "cuda" and "cuda:N". */
static void device_name(const char *device, char *out, size_t cap)
{
    if (!hx_device_is_gpu(device)) snprintf(out, cap, "cpu");
    else if (strcmp(device, "cuda") == 0) snprintf(out, cap, "cuda:0");
    else snprintf(out, cap, "%s", device);
}

hx_status hx_loaded_model_open(const char *model, const char *device, int n_threads,
                               unsigned cpu_flags, bool with_template, hx_loaded_model *out,
                               hx_err *err)
{
    hx_loaded_model m = {0};
    hx_status st = hx_backend_open(device, n_threads, cpu_flags, &m.be, err);
    if (st == HX_OK) {
        device_name(device, m.device, sizeof m.device);
        /* Measured now, while nothing of ours is on the device but the backend itself. */
        if (m.be->mem_info) m.be->mem_info(m.be, &m.device_free_bytes, &m.device_total_bytes);
    }
    if (st == HX_OK) st = hx_discover_resolve(model, &m.path, err);
    if (st == HX_OK) st = hx_model_files_open(m.path, &m.mf, err);
    if (st == HX_OK) st = hx_tokenizer_open(m.mf, &m.tok, err);
    if (st == HX_OK && with_template && m.mf->chat_template)
        st = hx_template_compile(m.mf->chat_template, strlen(m.mf->chat_template), &m.tpl, err);
    const int32_t step = hx_device_is_gpu(device) ? HX_SEQUENCE_STEP_TOKENS_GPU
                                                  : HX_SEQUENCE_STEP_TOKENS;
    if (st == HX_OK) st = hx_llm_open(m.mf, m.be, step, &m.llm, err);
    if (st != HX_OK) hx_loaded_model_close(&m);
    *out = m;
    return st;
}

void hx_loaded_model_close(hx_loaded_model *m)
{
    hx_llm_close(m->llm);
    if (m->be) m->be->destroy(m->be);
    hx_template_free(m->tpl);
    hx_tokenizer_close(m->tok);
    hx_model_files_close(m->mf);
    hx_free(m->path);
    memset(m, 0, sizeof *m);
}
