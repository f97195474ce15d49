/* chat_prompt.h - a conversation rendered into the model's prompt text.
 *
 * The one place that builds what a chat template sees: the messages, add_generation_prompt,
 * bos_token and eos_token spelled as the model's tokenizer spells them, then transformers'
 * context rules (hx_template_chat_context). The CLI and the library both render through it. */
#ifndef HX_ENGINE_CHAT_PROMPT_H
#define HX_ENGINE_CHAT_PROMPT_H
#include <jansson.h>
#include <stdbool.h>

#include "template/jinja.h"
#include "tokenizer/tokenizer.h"

/* Renders messages (a JSON array, borrowed) through tpl. extra (an object, borrowed, may be
 * NULL) adds variables to the template's context: tools, enable_thinking, any
 * chat_template_kwargs. On success *out is a new hx_alloc'd string (hx_free) of *len bytes.
 * HX_E_INVALID for messages the template rejects. */
hx_status hx_chat_render(const hx_template *tpl, const hx_tokenizer *tok, json_t *messages,
                         json_t *extra, bool add_generation_prompt, char **out, size_t *len,
                         hx_err *err);

#endif
