/* fuzz_tokenizer.c - libFuzzer target for the tokenizer.json loader, the encoder and the decoders.
 *
 * Each input is handed to hx_tokenizer_open_json_memory, the production entry point. A failed
 * open must leave a message that names the file ("fuzz: ...") and must not leak. When the
 * tokenizer loads, fixed texts (prose, special-token spellings, whitespace runs, multi-byte and
 * invalid UTF-8) and the input's own last bytes are encoded with every flag combination; the ids
 * are decoded whole and streamed, pieces and lookups are read back, and the traps check what
 * must hold (ids in range; the stream of a byte-level decoder equals decode). Build:
 * clang -fsanitize=fuzzer,address,undefined (the CMake option HEARTH_FUZZ). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static const char *const texts[] = {
    "Hello world! It's 2024, isn't it?",
    "<|im_start|>user\nhi<|im_end|>\n<s>[INST] x [/INST]</s>",
    "   \t\n\n  \r\n x  ",
    "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 12345",
    "\xFF\xFE bad \xE6\x97",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
    "",
};

static void exercise(const hx_tokenizer *t, const char *s, size_t n, unsigned flags)
{
    hx_tok_ids ids = { 0 };
    hx_tok_text out = { 0 };
    hx_err err = { 0 };
    const int32_t nv = hx_tokenizer_n_vocab(t);
    if (hx_tokenizer_encode(t, s, n, flags, &ids, &err) != HX_OK) __builtin_trap();
    for (size_t i = 0; i < ids.n; i++) {
        if (ids.ids[i] < 0 || ids.ids[i] >= nv) __builtin_trap();
        size_t len;
        const char *p = hx_tokenizer_piece(t, ids.ids[i], &len);
        if (len) sink += (unsigned char)p[0] + (unsigned char)p[len - 1];
        sink += (uint64_t)hx_tokenizer_token_id(t, p, len);
        sink += hx_tokenizer_is_special(t, ids.ids[i]) + hx_tokenizer_is_eot(t, ids.ids[i]);
    }
    for (unsigned skip = 0; skip < 2; skip++) {
        if (hx_tokenizer_decode(t, ids.ids, ids.n, skip, &out, &err) != HX_OK) __builtin_trap();
        sink += out.len;
        hx_detok d;
        const char *p;
        size_t len, total = 0;
        hx_detok_init(&d, t, skip);
        for (size_t i = 0; i < ids.n; i++) {
            if (hx_detok_push(&d, ids.ids[i], &p, &len, &err) != HX_OK) __builtin_trap();
            total += len;
        }
        if (hx_detok_push(&d, -1, &p, &len, &err) != HX_OK) __builtin_trap(); /* skipped */
        if (hx_detok_flush(&d, &p, &len, &err) != HX_OK) __builtin_trap();
        sink += total + len;
        hx_detok_free(&d);
    }
    hx_tok_text_free(&out);
    hx_tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hx_tokenizer *t = NULL;
    hx_err err = { 0 };
    size_t live = hx_alloc_live_bytes();
    if (hx_tokenizer_open_json_memory((const char *)data, size, "fuzz", &t, &err) != HX_OK) {
        if (err.status == HX_OK || strncmp(err.msg, "fuzz: ", 6) != 0) __builtin_trap();
        if (t != NULL || hx_alloc_live_bytes() != live) __builtin_trap();
        return 0;
    }
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (unsigned flags = 0; flags < 4; flags++)
            exercise(t, texts[i], strlen(texts[i]), flags);
    size_t tail = size < 48 ? size : 48; /* text the fuzzer controls too */
    exercise(t, (const char *)data + size - tail, tail, 2);
    size_t n;
    const int32_t *eot = hx_tokenizer_eot(t, &n);
    for (size_t i = 0; i < n; i++) sink += (uint64_t)eot[i];
    sink += (uint64_t)hx_tokenizer_bos(t) + (uint64_t)hx_tokenizer_eos(t);
    sink += strlen(hx_tokenizer_kind(t));
    hx_tokenizer_close(t);
    if (hx_alloc_live_bytes() != live) __builtin_trap();
    return 0;
}
