/* api.c - the public inference API of hearth.h over the engine.
 *
 * hx_model owns what every conversation shares and never changes: the model files (mapped),
 * the tokenizer and the compiled chat template. hx_session owns what one conversation mutates:
 * a backend on the device its params name (a thread pool and scratch on the CPU; on a GPU the
 * uploaded weights too), the bound model (activation buffers) and a sequence (KV cache). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/device.h"
#include "base/alloc.h"
#include "engine/chat_prompt.h"
#include "engine/sequence.h"
#include "format/discover.h"
#include "hearth.h"
#include "template/jinja.h"

struct hx_model {
    hx_model_files *mf;
    hx_tokenizer   *tok;
    hx_template    *tpl; /* NULL when the model has no chat template */
    hx_model_params params; /* params.device points at device */
    char           *device; /* the caller's device name, copied; NULL: the CPU */
};

struct hx_session {
    hx_model    *model; /* borrowed */
    hx_backend  *be;
    hx_llm      *llm;
    hx_sequence *seq;
    hx_err       err;
};

HX_API hx_model_params hx_model_params_default(void)
{
    return (hx_model_params){.n_threads = 0, .n_ctx = 0, .int8_kernels = false, .device = NULL};
}

/* Opens and closes one backend on a device other than the CPU, so that a name that is wrong or
 * a GPU that is missing fails at hx_model_open, which can say why (a failed hx_session_open has
 * no session to carry the message). The CPU always opens. */
static hx_status check_device(const char *device, hx_err *err)
{
    if (!device || !*device || strcmp(device, "cpu") == 0) return HX_OK;
    hx_backend *be = NULL;
    const hx_status st = hx_backend_open(device, 1, 0, &be, err);
    if (be) be->destroy(be);
    return st;
}

HX_API void hx_free_string(char *s) { hx_free(s); }

HX_API hx_status hx_model_open(const char *model, const hx_model_params *params, hx_model **out,
                               char *errbuf, size_t errbuf_len)
{
    hx_err err = {0};
    char *path = NULL;
    hx_model *m = hx_calloc(1, sizeof *m);
    const hx_model_params p = params ? *params : hx_model_params_default();
    hx_status st = m ? check_device(p.device, &err)
                     : hx_err_set(&err, HX_E_NOMEM, "out of memory");
    if (st == HX_OK && p.device && !(m->device = hx_strdup(p.device)))
        st = hx_err_set(&err, HX_E_NOMEM, "out of memory");
    if (st == HX_OK) st = hx_discover_resolve(model, &path, &err);
    if (st == HX_OK) st = hx_model_files_open(path, &m->mf, &err);
    if (st == HX_OK) st = hx_tokenizer_open(m->mf, &m->tok, &err);
    if (st == HX_OK && m->mf->chat_template)
        st = hx_template_compile(m->mf->chat_template, strlen(m->mf->chat_template), &m->tpl, &err);
    hx_free(path);
    if (st != HX_OK) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
        hx_model_close(m);
        return st;
    }
    m->params = p;
    m->params.device = m->device;
    *out = m;
    return HX_OK;
}

HX_API void hx_model_close(hx_model *m)
{
    if (!m) return;
    hx_template_free(m->tpl);
    hx_tokenizer_close(m->tok);
    hx_model_files_close(m->mf);
    hx_free(m->device);
    hx_free(m);
}

HX_API hx_status hx_model_apply_template(hx_model *m, const char *messages_json,
                                         bool add_generation_prompt, char **out)
{
    if (!m->tpl) return HX_E_NOTFOUND;
    json_t *msgs = json_loads(messages_json, 0, NULL);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        return HX_E_INVALID;
    }
    hx_err err = {0};
    char *text = NULL;
    hx_status st =
        hx_chat_render(m->tpl, m->tok, msgs, NULL, add_generation_prompt, &text, NULL, &err);
    json_decref(msgs);
    if (st == HX_OK) *out = text;
    return st;
}

HX_API hx_status hx_model_tokenize(hx_model *m, const char *text, size_t len, bool parse_special,
                                   int32_t *ids, size_t max, size_t *n)
{
    hx_tok_ids v = {0};
    hx_err err = {0};
    hx_status st = hx_tokenizer_encode(m->tok, text, len, parse_special ? HX_TOK_PARSE_SPECIAL : 0,
                                       &v, &err);
    if (st == HX_OK) {
        *n = v.n;
        memcpy(ids, v.ids, (v.n < max ? v.n : max) * sizeof *ids);
    }
    hx_tok_ids_free(&v);
    return st;
}

HX_API hx_generate_params hx_generate_params_default(const hx_model *m)
{
    const hx_sampling s = hx_model_sampling_defaults(m->mf);
    return (hx_generate_params){.temperature = s.temperature, .top_k = s.top_k, .top_p = s.top_p,
                                .min_p = s.min_p, .repeat_penalty = s.repeat_penalty,
                                .presence_penalty = s.presence_penalty,
                                .frequency_penalty = s.frequency_penalty, .seed = 0};
}

HX_API hx_status hx_session_open(hx_model *m, const hx_model_params *params, hx_session **out)
{
    const hx_model_params p = params ? *params : m->params;
    hx_session *s = hx_calloc(1, sizeof *s);
    if (!s) return HX_E_NOMEM;
    s->model = m;
    hx_status st = hx_backend_open(p.device, p.n_threads, p.int8_kernels ? HX_CPU_INT8_ACT : 0,
                                   &s->be, &s->err);
    const int32_t step = hx_device_is_gpu(p.device) ? HX_SEQUENCE_STEP_TOKENS_GPU
                                                    : HX_SEQUENCE_STEP_TOKENS;
    if (st == HX_OK) st = hx_llm_open(m->mf, s->be, step, &s->llm, &s->err);
    if (st == HX_OK) {
        const int32_t ctx = p.n_ctx > 0 ? p.n_ctx : hx_sequence_default_ctx(&m->mf->hp);
        st = hx_sequence_init(s->llm, m->tok, ctx, HX_KV_F16, &s->seq, &s->err);
    }
    if (st != HX_OK) {
        hx_session_close(s);
        return st;
    }
    *out = s;
    return HX_OK;
}

HX_API void hx_session_close(hx_session *s)
{
    if (!s) return;
    hx_sequence_free(s->seq);
    hx_llm_close(s->llm);
    if (s->be) s->be->destroy(s->be);
    hx_free(s);
}

HX_API const char *hx_session_errmsg(const hx_session *s) { return s->err.msg; }

typedef struct {
    hx_piece_cb cb;
    void       *user;
} cb_bridge;

static bool bridge(const char *text, size_t len, const hx_token_logprobs *lp, void *user)
{
    (void)lp;
    const cb_bridge *b = user;
    return b->cb ? b->cb(text, len, b->user) : true;
}

HX_API hx_status hx_session_generate(hx_session *s, const char *prompt,
                                     const hx_generate_params *params, hx_piece_cb cb,
                                     void *user_data, hx_generate_stats *stats)
{
    s->err = (hx_err){0};
    const hx_generate_params p = params ? *params : hx_generate_params_default(s->model);
    hx_gen_params gp = {.max_tokens = p.max_tokens, .stop = p.stop, .n_stop = p.n_stop};
    gp.sampling = hx_sampling_default();
    gp.sampling.temperature = p.temperature;
    gp.sampling.top_k = p.top_k;
    gp.sampling.top_p = p.top_p;
    gp.sampling.min_p = p.min_p;
    gp.sampling.repeat_penalty = p.repeat_penalty;
    gp.sampling.presence_penalty = p.presence_penalty;
    gp.sampling.frequency_penalty = p.frequency_penalty;
    gp.sampling.seed = p.seed;
    hx_tok_ids ids = {0};
    hx_gen_stats gs = {0};
    cb_bridge b = {cb, user_data};
    hx_status st = hx_tokenizer_encode(s->model->tok, prompt, strlen(prompt), HX_TOK_PARSE_SPECIAL,
                                       &ids, &s->err);
    if (st == HX_OK)
        st = hx_sequence_generate(s->seq, ids.ids, (int32_t)ids.n, &gp, bridge, &b, &gs, &s->err);
    hx_tok_ids_free(&ids);
    if (st == HX_OK && stats)
        *stats = (hx_generate_stats){.n_prompt = gs.n_prompt, .n_cached = gs.n_cached,
                                     .n_generated = gs.n_gen, .prompt_ms = gs.prompt_ms,
                                     .generate_ms = gs.gen_ms, .first_token_ms = gs.first_ms,
                                     .finish = (hx_finish_reason)gs.finish};
    return st;
}
