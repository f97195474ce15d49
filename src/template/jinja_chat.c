/* jinja_chat.c - the context transformers' apply_chat_template hands a chat template.
 *
 * render_jinja_template always passes messages, tools, documents and add_generation_prompt
 * (None/False when the caller gave none), so templates can test `tools is none` and
 * `tools is defined` with the same results here. Before rendering it also aliases reasoning
 * fields (_alias_reasoning_fields): a message whose reasoning arrives as reasoning_content,
 * thinking or reasoning gets it under "thinking" and "reasoning_content" too, in the key order
 * Python's {"thinking": r, **message, "reasoning_content": r} produces. The request itself is
 * never modified: the result shares unchanged values with it by reference. */
#include <string.h>

#include "template/jinja.h"

static const char *const reasoning_fields[] = {"reasoning_content", "thinking", "reasoning"};

/* A copy of msg with reasoning aliased, or a new reference to msg when it carries none. */
static json_t *alias_reasoning(json_t *msg)
{
    json_t *reasoning = NULL;
    for (size_t i = 0; i < 3 && !reasoning; i++) {
        json_t *v = json_object_get(msg, reasoning_fields[i]);
        if (v && !json_is_null(v)) reasoning = v;
    }
    if (!reasoning) return json_incref(msg);
    json_t *out = json_object();
    if (!out) return NULL;
    json_t *own = json_object_get(msg, "thinking");
    if (json_object_set(out, "thinking", own ? own : reasoning) != 0) goto fail;
    bool had_rc = false;
    for (void *it = json_object_iter(msg); it; it = json_object_iter_next(msg, it)) {
        const char *k = json_object_iter_key(it);
        json_t *v = json_object_iter_value(it);
        if (!strcmp(k, "thinking")) continue;
        if (!strcmp(k, "reasoning_content")) {
            had_rc = true;
            v = reasoning;
        }
        if (json_object_set(out, k, v) != 0) goto fail;
    }
    if (!had_rc && json_object_set(out, "reasoning_content", reasoning) != 0) goto fail;
    return out;
fail:
    json_decref(out);
    return NULL;
}

hx_status hx_template_chat_context(json_t *request, json_t **out, hx_err *err)
{
    hx_status st = HX_OK;
    json_t *ctx = NULL, *msgs = NULL;
    if (!json_is_object(request))
        return hx_err_set(err, HX_E_INVALID, "the chat request must be a JSON object");
    json_t *in_msgs = json_object_get(request, "messages");
    if (in_msgs && !json_is_array(in_msgs))
        return hx_err_set(err, HX_E_INVALID, "\"messages\" must be an array");
    if (!(ctx = json_copy(request))) goto nomem;
    if (in_msgs) {
        if (!(msgs = json_array())) goto nomem;
        for (size_t i = 0; i < json_array_size(in_msgs); i++) {
            json_t *m = json_array_get(in_msgs, i);
            if (!json_is_object(m)) {
                st = hx_err_set(err, HX_E_INVALID, "messages[%zu] must be an object", i);
                goto fail;
            }
            json_t *a = alias_reasoning(m);
            if (!a || json_array_append_new(msgs, a) != 0) goto nomem;
        }
        if (json_object_set_new(ctx, "messages", msgs) != 0) {
            msgs = NULL;
            goto nomem;
        }
        msgs = NULL;
    }
    if (!json_object_get(ctx, "tools") && json_object_set_new(ctx, "tools", json_null()) != 0)
        goto nomem;
    if (!json_object_get(ctx, "documents") &&
        json_object_set_new(ctx, "documents", json_null()) != 0)
        goto nomem;
    if (!json_object_get(ctx, "add_generation_prompt") &&
        json_object_set_new(ctx, "add_generation_prompt", json_false()) != 0)
        goto nomem;
    *out = ctx;
    return HX_OK;
nomem:
    st = hx_err_set(err, HX_E_NOMEM, "out of memory building the template context");
fail:
    json_decref(msgs);
    json_decref(ctx);
    return st;
}
