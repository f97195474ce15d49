/* fuzz_template.c - libFuzzer target for the chat-template engine (src/template/jinja.h).
 *
 * Input layout: the first line is a JSON context (used when it parses as an object, else the
 * context is empty), the rest is the template source. Each input is compiled and rendered
 * through the production entry points, once with the raw context and once with the context
 * hx_template_chat_context builds, under small limits so one input stays fast. Failures are
 * fine; crashes, leaks, hangs and sanitizer reports are what this looks for. A successful render
 * must return a NUL-terminated string of the reported length. Build: clang -fsanitize=fuzzer. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "template/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void render_once(const hx_template *t, json_t *ctx)
{
    hx_template_limits lim = hx_template_limits_default();
    lim.max_steps = 200000;
    lim.max_output_bytes = 1 << 20;
    lim.max_memory_bytes = 64 << 20;
    char *out = NULL;
    size_t len = 0;
    hx_err err = {0};
    if (hx_template_render_ex(t, ctx, &lim, &out, &len, &err) == HX_OK) {
        if (out[len] != '\0') __builtin_trap();
        hx_free(out);
    } else if (out != NULL || err.msg[0] == '\0') {
        __builtin_trap(); /* failures leave *out alone and always say why */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *nl = memchr(s, '\n', size);
    size_t head = nl ? (size_t)(nl - s) : 0;
    const char *tpl = nl ? nl + 1 : s;
    size_t tpl_len = nl ? size - head - 1 : size;
    json_t *ctx = NULL;
    if (head) {
        ctx = json_loadb(s, head, JSON_DISABLE_EOF_CHECK, NULL);
        if (ctx && !json_is_object(ctx)) {
            json_decref(ctx);
            ctx = NULL;
        }
    }
    hx_template *t = NULL;
    hx_err err = {0};
    if (hx_template_compile(tpl, tpl_len, &t, &err) == HX_OK) {
        render_once(t, ctx);
        json_t *chat = NULL;
        if (ctx && hx_template_chat_context(ctx, &chat, &err) == HX_OK) {
            render_once(t, chat);
            json_decref(chat);
        }
        hx_template_free(t);
    } else if (err.msg[0] == '\0') {
        __builtin_trap();
    }
    json_decref(ctx);
    return 0;
}
