/* jinja.h - chat templates: a Jinja2 interpreter for the subset real chat templates use.
 *
 * A template is compiled once into an immutable hx_template (safe to share between threads) and
 * rendered any number of times against a context given as a jansson object. Rendering aims to be
 * byte-identical to Python jinja2 as Hugging Face transformers runs it (apply_chat_template):
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols and
 * {% generation %} extensions, transformers' tojson, raise_exception, strftime_now, namespace
 * and dict globals, and jinja2's default Undefined.
 *
 * Work is bounded: rendering stops with an error past the limits below, so a hostile template
 * cannot hang or exhaust memory. Errors carry "line L, column C: message".
 *
 * Usage:
 *     hx_template *t = NULL;
 *     hx_err err = {0};
 *     if (hx_template_compile(src, strlen(src), &t, &err) != HX_OK) { puts(err.msg); ... }
 *     char *text = NULL; size_t len = 0;
 *     if (hx_template_render(t, ctx, &text, &len, &err) == HX_OK) { fwrite(text, 1, len, out); }
 *     hx_free(text);
 *     hx_template_free(t);
 */
#ifndef HX_TEMPLATE_JINJA_H
#define HX_TEMPLATE_JINJA_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct hx_template hx_template; /* opaque; immutable once compiled */

/* Bounds on one render. Zero in a field means "use the default". */
typedef struct {
    size_t  max_output_bytes; /* rendered text, and any one captured block (default 64 MiB) */
    size_t  max_memory_bytes; /* the render's arena: values, strings, scopes (default 256 MiB) */
    int64_t max_steps;        /* statements, loop iterations, expression nodes (default 100M) */
    int32_t max_depth;        /* nested macro calls, blocks and value nesting (default 200) */
} hx_template_limits;

hx_template_limits hx_template_limits_default(void);

/* Compiles src[0..len) (UTF-8; CRLF and CR are read as LF, one trailing newline is dropped as
 * jinja2 does). On success *out owns the template (hx_template_free). On failure returns
 * HX_E_INVALID (syntax error, unknown filter or test: err says "line L, column C: message") or
 * HX_E_NOMEM, and leaves *out untouched. */
hx_status hx_template_compile(const char *src, size_t len, hx_template **out, hx_err *err);

/* Releases a template; accepts NULL. No render may be running on it. */
void hx_template_free(hx_template *t);

/* Renders t with the variables of the JSON object ctx (borrowed, never modified; NULL means no
 * variables). On success *out is a new NUL-terminated hx_alloc'd string the caller frees with
 * hx_free, and *out_len (if not NULL) its length in bytes (the text may hold NUL bytes that came
 * from the context). On failure returns HX_E_INVALID (raise_exception, an evaluation error or a
 * limit, with "line L, column C: message" in err) or HX_E_NOMEM; *out is untouched.
 * Thread-safe: any number of renders may run on one template at once. */
hx_status hx_template_render(const hx_template *t, json_t *ctx, char **out, size_t *out_len,
                             hx_err *err);

/* The same with explicit limits (NULL: defaults). */
hx_status hx_template_render_ex(const hx_template *t, json_t *ctx, const hx_template_limits *lim,
                                char **out, size_t *out_len, hx_err *err);

/* Builds the context transformers' apply_chat_template gives a template from a chat request
 * object (messages, tools, documents, add_generation_prompt, any extra keyword): a new object
 * that copies request, sets tools and documents to null and add_generation_prompt to false where
 * absent, and in each message that carries reasoning (the first non-null of "reasoning_content",
 * "thinking", "reasoning") exposes it as "thinking" (first key, unless the message has its own)
 * and "reasoning_content" (replaced in place, else last), exactly as transformers does. On
 * success *out owns a new reference (json_decref). HX_E_INVALID when
 * request is not an object or messages is not an array of objects. */
hx_status hx_template_chat_context(json_t *request, json_t **out, hx_err *err);

#endif
