/* fuzz_gguf.c - libFuzzer target for the GGUF parser (src/format/gguf.h).
 *
 * Feeds each input to hx_gguf_open_memory, the production entry point. When the parse succeeds
 * it reads everything the result points at: every kv through the getters and the string-array
 * walker, and the first and last byte of every tensor. Under ASan a parse that accepted an
 * out-of-range length shows up here as an overread; the __builtin_trap checks catch lookups that
 * disagree with the tables they index. Build: clang -fsanitize=fuzzer,address,undefined. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "format/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Keeps the compiler from dropping reads whose values are otherwise unused. */
static volatile uint64_t sink;

/* Copies a name into a NUL-terminated buffer for the lookups; false when it does not fit or holds
 * a NUL byte (valid UTF-8 allows one, but a C-string lookup cannot express it). */
static int to_cstr(hx_gguf_str s, char *buf, size_t cap)
{
    if (s.len >= cap || memchr(s.ptr, 0, (size_t)s.len)) return 0;
    memcpy(buf, s.ptr, (size_t)s.len);
    buf[s.len] = '\0';
    return 1;
}

static void exercise_kv(const hx_gguf *g, const hx_gguf_kv *kv)
{
    char key[4096];
    uint64_t u;
    double f;
    bool b;
    hx_gguf_str s;
    if (to_cstr(kv->key, key, sizeof key)) {
        if (hx_gguf_find(g, key) != kv) __builtin_trap(); /* keys are unique */
        if (hx_gguf_get_u64(g, key, &u)) sink += u;
        if (hx_gguf_get_f64(g, key, &f)) sink += (uint64_t)(f == f);
        if (hx_gguf_get_bool(g, key, &b)) sink += b;
        if (hx_gguf_get_str(g, key, &s)) {
            if (s.len) sink += (unsigned char)s.ptr[0] + (unsigned char)s.ptr[s.len - 1];
            sink += hx_gguf_str_eq(s, key);
        }
    }
    if (kv->type != HX_GGUF_ARRAY) return;
    if (kv->arr_type == HX_GGUF_STRING) {
        uint64_t pos = 0, n = 0;
        const unsigned char *cur = NULL;
        while (hx_gguf_str_array(kv, &pos, &cur, &s)) {
            if (s.len) sink += (unsigned char)s.ptr[0] + (unsigned char)s.ptr[s.len - 1];
            n++;
        }
        if (n != kv->arr_n) __builtin_trap();
    } else if (kv->arr_n) {
        /* Touch the last byte of the fixed-size items: the parser bounded them. */
        static const uint8_t size_of[HX_GGUF_TYPE_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1,
                                                             0, 0, 8, 8, 8 };
        sink += kv->arr_data[kv->arr_n * size_of[kv->arr_type] - 1];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hx_gguf *g = NULL;
    hx_err err = { 0 };
    size_t live = hx_alloc_live_bytes();
    if (hx_gguf_open_memory(data, size, "fuzz", &g, &err) != HX_OK) {
        if (err.status == HX_OK || strncmp(err.msg, "fuzz: ", 6) != 0) __builtin_trap();
        if (hx_alloc_live_bytes() != live) __builtin_trap(); /* a failed open leaked */
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) exercise_kv(g, &g->kv[i]);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        char name[4096];
        if (to_cstr(t->name, name, sizeof name) && hx_gguf_find_tensor(g, name) != t)
            __builtin_trap();
        uint32_t bn, bb;
        if (!hx_gguf_type_traits(t->ggml_type, &bn, &bb) || t->n_bytes == 0) __builtin_trap();
        sink += t->data[0] + t->data[t->n_bytes - 1];
        sink += (uint64_t)strlen(hx_gguf_type_name(t->ggml_type));
    }
    hx_gguf_close(g);
    if (hx_alloc_live_bytes() != live) __builtin_trap();
    return 0;
}
