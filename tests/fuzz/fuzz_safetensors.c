/* fuzz_safetensors.c - libFuzzer target for the safetensors parser.
 *
 * Feeds each input to hx_safetensors_open_memory, the same entry point hx_safetensors_open uses
 * after mapping a file. On success it checks the parser's promises: every tensor is found by its
 * own name and its first and last data bytes are readable (ASan flags any range that escapes the
 * input). The input is copied into a buffer of exactly its size so reads past it are caught.
 * Seeds: tests/fuzz/seed_safetensors.py writes a corpus of small valid and broken files. */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *buf = hx_alloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);

    hx_safetensors *st = NULL;
    hx_err err = {0};
    if (hx_safetensors_open_memory(buf, size, "fuzz", &st, &err) == HX_OK) {
        volatile unsigned sink = 0; /* keeps the reads from being optimized away */
        for (int64_t i = 0; i < st->n_tensors; i++) {
            const hx_st_tensor *t = &st->tensors[i];
            HX_ASSERT(hx_safetensors_find(st, t->name) == t);
            HX_ASSERT(t->begin <= t->end && t->n_dims >= 0 && t->n_dims <= HX_ST_MAX_DIMS);
            HX_ASSERT(t->data >= buf && t->data + (t->end - t->begin) <= buf + size);
            if (t->end > t->begin) sink += t->data[0] + t->data[t->end - t->begin - 1];
        }
        (void)sink;
    } else {
        HX_ASSERT(st == NULL && err.status != HX_OK && err.msg[0] != '\0');
    }
    hx_safetensors_close(st);
    hx_free(buf);
    return 0;
}
