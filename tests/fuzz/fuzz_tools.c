/* fuzz_tools.c - libFuzzer target for the tools of a chat request (src/serve/tools.h).
 *
 * A request's tools, tool_choice and messages are outside input. The first input byte picks the
 * request shape, the tool-call family and parallel calls; the rest is read as a JSON object
 * {"tools": ..., "tool_choice": ..., "messages": ...} (and, as it is, as a chat template for the
 * detection heuristics). The tools are normalized, the choice parsed, a call grammar written and
 * compiled, the system prompt written and the messages folded. What must hold: no crash, no leak,
 * and every grammar hx_tools_grammar writes compiles (or exceeds the grammar's stated limits).
 * Build: clang -fsanitize=fuzzer (the CMake option HEARTH_FUZZ). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "sample/grammar.h"
#include "serve/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const hx_tools_shape     shape = (hx_tools_shape)(data[0] % HX_TOOLS_SHAPE_COUNT);
    const hx_toolcall_family fam = (hx_toolcall_family)((data[0] >> 2) % HX_TOOLCALL_COUNT);
    const bool               parallel = (data[0] & 0x80) != 0;
    const char              *text = (const char *)data + 1;
    const size_t             n = size - 1;

    char *tpl = malloc(n + 1);
    if (!tpl) return 0;
    memcpy(tpl, text, n);
    tpl[n] = '\0';
    const bool calls = hx_tools_template_has_tool_calls(tpl);
    const bool role = hx_tools_template_has_tool_role(tpl);
    (void)hx_tools_template_renders_tools(tpl);
    free(tpl);

    json_t *req = json_loadb(text, n, 0, NULL);
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    hx_err  err = {0};
    char    param[64];
    json_t *tools = NULL, *folded = NULL;
    if (hx_tools_normalize(json_object_get(req, "tools"), shape, &tools, param, sizeof param,
                           &err) == HX_OK) {
        hx_tool_choice choice;
        char          *out = NULL;
        if (hx_tools_choice(json_object_get(req, "tool_choice"), shape, tools, &choice, param,
                            sizeof param, &err) == HX_OK &&
            hx_tools_grammar(fam, tools, &choice, parallel, &out, &err) == HX_OK) {
            hx_grammar     *g = NULL;
            hx_err          gerr = {0};
            const hx_status st = hx_grammar_compile(out, strlen(out), &g, &gerr);
            if (st == HX_E_INVALID) __builtin_trap(); /* the writer made malformed grammar text */
            hx_grammar_free(g);
            hx_free(out);
        }
        if (hx_tools_system_prompt(tools, fam, &out, &err) == HX_OK) hx_free(out);
        json_decref(tools);
    }
    if (hx_tools_fold_messages(json_object_get(req, "messages"), fam, calls, role, &folded, &err) ==
        HX_OK)
        json_decref(folded);
    json_decref(req);
    return 0;
}
