/* chat_prompt.c - see chat_prompt.h. */
#include "engine/chat_prompt.h"

/* The text of a special token (empty when the model has none). */
static json_t *token_text(const hx_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *p = id >= 0 ? hx_tokenizer_piece(tok, id, &n) : "";
    return json_stringn(p, n);
}

hx_status hx_chat_render(const hx_template *tpl, const hx_tokenizer *tok, json_t *messages,
                         json_t *extra, bool add_generation_prompt, char **out, size_t *len,
                         hx_err *err)
{
    json_t *req = json_is_object(extra) ? json_copy(extra) : json_object();
    json_t *base = json_pack("{s:O, s:b, s:o, s:o}", "messages", messages,
                             "add_generation_prompt", add_generation_prompt, "bos_token",
                             token_text(tok, hx_tokenizer_bos(tok)), "eos_token",
                             token_text(tok, hx_tokenizer_eos(tok)));
    if (!base || !req || json_object_update(req, base) != 0) {
        json_decref(req);
        req = NULL;
    }
    json_decref(base);
    json_t *ctx = NULL;
    hx_status st = req ? hx_template_chat_context(req, &ctx, err)
                       : hx_err_set(err, HX_E_NOMEM, "out of memory");
    if (st == HX_OK) st = hx_template_render(tpl, ctx, out, len, err);
    json_decref(ctx);
    json_decref(req);
    return st;
}
