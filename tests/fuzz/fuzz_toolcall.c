/* fuzz_toolcall.c - libFuzzer target for the tool-call and reasoning parsers (src/serve).
 *
 * Model output is outside input too: a model can emit any bytes. The first input byte picks
 * the tool-call family and a chunk size; the rest is fed to the reasoning splitter and to the
 * tool-call parser in chunks of that size, then finished. What must hold: no crash, no leak,
 * and every call the parser reports has a name and arguments that are a JSON object.
 * Build: clang -fsanitize=fuzzer (the CMake option HEARTH_FUZZ). */
#include <stddef.h>
#include <stdint.h>

#include "serve/reasoning.h"
#include "serve/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool on_reasoning(void *user, hx_reasoning_kind kind, const char *text, size_t len)
{
    (void)user, (void)kind, (void)text, (void)len;
    return true;
}

static bool on_call(void *user, const hx_toolcall_event *ev)
{
    (void)user, (void)ev;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const hx_toolcall_family fam = (hx_toolcall_family)(data[0] % HX_TOOLCALL_COUNT);
    const size_t chunk = 1 + (data[0] >> 3);
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;

    hx_err err = {0};
    hx_reasoning_params rp = hx_reasoning_params_default();
    rp.in_reasoning = (data[0] & 4) != 0;
    hx_reasoning *r = NULL;
    if (hx_reasoning_init(&rp, &r, &err) == HX_OK) {
        for (size_t i = 0; i < n; i += chunk)
            hx_reasoning_feed(r, text + i, n - i < chunk ? n - i : chunk, on_reasoning, NULL);
        hx_reasoning_finish(r, on_reasoning, NULL);
        hx_reasoning_free(r);
    }

    hx_toolcall_params tp = hx_toolcall_params_default();
    tp.family = fam;
    hx_toolcall_parser *p = NULL;
    if (hx_toolcall_init(&tp, &p, &err) != HX_OK) return 0;
    for (size_t i = 0; i < n; i += chunk)
        hx_toolcall_feed(p, text + i, n - i < chunk ? n - i : chunk, on_call, NULL);
    hx_toolcall_finish(p, on_call, NULL);
    for (int32_t i = 0; i < hx_toolcall_count(p); i++) {
        const hx_toolcall *c = hx_toolcall_get(p, i);
        if (!c->name || !c->arguments || !json_is_object(c->input)) __builtin_trap();
    }
    hx_toolcall_free(p);
    return 0;
}
