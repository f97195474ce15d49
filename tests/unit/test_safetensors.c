/* test_safetensors.c - unit tests of the safetensors parser (src/format/safetensors.h).
 *
 * Files are built in memory from a header JSON string and data bytes, so each case shows the
 * exact header it feeds the parser. Every failure case checks the status and that the message
 * names the problem; the truncation and allocation-failure sweeps run the parser over every
 * prefix and every failing allocation, under ASan+UBSan in the test build. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, unlink */
#include "format/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "check.h"

/* ---- helpers ---- */

/* Returns a new buffer holding u64 LE strlen(json) | json | data_len bytes of data (each byte
 * set to its index, so tests can check data pointers). Caller frees with hx_free. */
static unsigned char *make_file(const char *json, size_t data_len, size_t *size)
{
    size_t n = strlen(json);
    *size = 8 + n + data_len;
    unsigned char *f = hx_alloc(*size);
    if (!f) return NULL;
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(f + 8, json, n);
    for (size_t i = 0; i < data_len; i++) f[8 + n + i] = (unsigned char)i;
    return f;
}

/* Parses json + data_len bytes of data; returns the status, the message in err. */
static hx_status parse_json(const char *json, size_t data_len, hx_err *err)
{
    size_t size;
    unsigned char *f = make_file(json, data_len, &size);
    if (!f) return HX_E_NOMEM;
    hx_safetensors *st = NULL;
    hx_status s = hx_safetensors_open_memory(f, size, "t.safetensors", &st, err);
    hx_safetensors_close(st);
    hx_free(f);
    return s;
}

/* A bad header must give HX_E_FORMAT with a message holding `want`. */
#define CHECK_BAD(json, data_len, want) do { \
    hx_err e_ = {0}; \
    CHECK_EQ(parse_json((json), (data_len), &e_), HX_E_FORMAT); \
    CHECK_CONTAINS(e_.msg, "t.safetensors: "); \
    CHECK_CONTAINS(e_.msg, (want)); \
} while (0)

/* An MLX-style file: packed U32 weight, F16 scales and biases, an F32 norm. Data is 56 bytes:
 * weight [2, 4] U32 = 32, scales [2, 2] F16 = 8, biases [2, 2] F16 = 8, norm [2] F32 = 8. The
 * entries are deliberately not in name order, nor in offset order. */
static const char mlx_json[] =
    "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [48, 56]},"
    " \"__metadata__\": {\"format\": \"mlx\"},"
    " \"layers.0.q.weight\": {\"dtype\": \"U32\", \"shape\": [2, 4], \"data_offsets\": [0, 32]},"
    " \"layers.0.q.scales\": {\"dtype\": \"F16\", \"shape\": [2, 2], \"data_offsets\": [32, 40],"
    " \"unknown_field\": [1, 2]},"
    " \"layers.0.q.biases\": {\"dtype\": \"F16\", \"shape\": [2, 2], \"data_offsets\": [40, 48]}}"
    "   "; /* writers may pad the header with spaces */
#define MLX_DATA 56

/* ---- valid files ---- */

static int test_valid_multi_tensor_file_parses(void)
{
    size_t size;
    unsigned char *f = make_file(mlx_json, MLX_DATA, &size);
    CHECK(f != NULL);
    hx_safetensors *st = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_safetensors_open_memory(f, size, "m.safetensors", &st, &err), HX_OK);
    CHECK(st != NULL);
    CHECK_EQ(err.status, HX_OK);
    CHECK_EQ(st->n_tensors, 4);
    CHECK_STR(st->meta_format, "mlx");
    CHECK_STR(st->path, "m.safetensors");
    CHECK_EQ(st->header_len, strlen(mlx_json));

    /* Sorted by name. */
    for (int64_t i = 1; i < st->n_tensors; i++)
        CHECK(strcmp(st->tensors[i - 1].name, st->tensors[i].name) < 0);

    const unsigned char *data = f + 8 + strlen(mlx_json);
    const hx_st_tensor *w = hx_safetensors_find(st, "layers.0.q.weight");
    CHECK(w != NULL);
    CHECK_STR(w->name, "layers.0.q.weight");
    CHECK_EQ(w->dtype, HX_ST_U32);
    CHECK_EQ(w->n_dims, 2);
    CHECK_EQ(w->shape[0], 2);
    CHECK_EQ(w->shape[1], 4);
    CHECK_EQ(w->begin, 0);
    CHECK_EQ(w->end, 32);
    CHECK(w->data == data);

    const hx_st_tensor *sc = hx_safetensors_find(st, "layers.0.q.scales");
    CHECK(sc != NULL);
    CHECK_EQ(sc->dtype, HX_ST_F16);
    CHECK(sc->data == data + 32);
    CHECK_EQ(sc->data[0], 32); /* make_file sets each data byte to its index */

    const hx_st_tensor *bi = hx_safetensors_find(st, "layers.0.q.biases");
    CHECK(bi != NULL);
    CHECK(bi->data == data + 40);

    const hx_st_tensor *nw = hx_safetensors_find(st, "model.norm.weight");
    CHECK(nw != NULL);
    CHECK_EQ(nw->dtype, HX_ST_F32);
    CHECK_EQ(nw->n_dims, 1);
    CHECK_EQ(nw->shape[0], 2);
    CHECK(nw->data == data + 48);

    CHECK(hx_safetensors_find(st, "layers.0.q") == NULL);
    CHECK(hx_safetensors_find(st, "__metadata__") == NULL);
    CHECK(hx_safetensors_find(st, "") == NULL);
    CHECK(hx_safetensors_find(st, "zzz") == NULL);
    CHECK(hx_safetensors_find(NULL, "x") == NULL);

    hx_safetensors_close(st);
    hx_safetensors_close(NULL);
    hx_free(f);
    return 0;
}

static int test_every_dtype_has_a_name_and_size(void)
{
    static const char *const names[] = { "BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32",
                                         "I32", "F32", "U64", "I64", "F64", "F8_E4M3",
                                         "F8_E5M2" };
    static const size_t sizes[] = { 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8, 1, 1 };
    CHECK_EQ(HX_COUNTOF(names), HX_ST_DTYPE_COUNT);
    for (int dt = 0; dt < HX_ST_DTYPE_COUNT; dt++) {
        CHECK_STR(hx_st_dtype_name((hx_st_dtype)dt), names[dt]);
        CHECK_EQ(hx_st_dtype_size((hx_st_dtype)dt), sizes[dt]);

        /* Each dtype also parses: a [3] tensor of it occupies 3 * size bytes. */
        char json[160];
        snprintf(json, sizeof json, "{\"x\": {\"dtype\": \"%s\", \"shape\": [3], "
                 "\"data_offsets\": [0, %zu]}}", names[dt], 3 * sizes[dt]);
        hx_err err = {0};
        CHECK_EQ(parse_json(json, 3 * sizes[dt], &err), HX_OK);
    }
    CHECK_STR(hx_st_dtype_name(HX_ST_DTYPE_COUNT), "?");
    CHECK_EQ(hx_st_dtype_size(HX_ST_DTYPE_COUNT), 0);
    return 0;
}

static int test_scalar_shape_is_one_element(void)
{
    size_t size;
    unsigned char *f = make_file(
        "{\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}", 4, &size);
    CHECK(f != NULL);
    hx_safetensors *st = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_safetensors_open_memory(f, size, "s", &st, &err), HX_OK);
    const hx_st_tensor *t = hx_safetensors_find(st, "s");
    CHECK(t != NULL);
    CHECK_EQ(t->n_dims, 0);
    CHECK_EQ(t->end - t->begin, 4);
    CHECK(st->meta_format == NULL);
    hx_safetensors_close(st);
    hx_free(f);

    CHECK_BAD("{\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 0]}}", 0,
              "hold 0 bytes but shape [] of F32 needs 4");
    return 0;
}

static int test_zero_tensors_is_valid(void)
{
    static const char *const headers[] = { "{}", "{\"__metadata__\": {\"format\": \"pt\"}}",
                                           "{\"__metadata__\": {}}" };
    for (size_t i = 0; i < HX_COUNTOF(headers); i++) {
        size_t size;
        unsigned char *f = make_file(headers[i], 0, &size);
        CHECK(f != NULL);
        hx_safetensors *st = NULL;
        hx_err err = {0};
        CHECK_EQ(hx_safetensors_open_memory(f, size, "z", &st, &err), HX_OK);
        CHECK_EQ(st->n_tensors, 0);
        CHECK(hx_safetensors_find(st, "x") == NULL);
        if (i == 1) CHECK_STR(st->meta_format, "pt");
        hx_safetensors_close(st);
        hx_free(f);
    }
    return 0;
}

static int test_empty_tensors_and_holes_are_accepted(void)
{
    /* A tensor with a 0 dimension holds no bytes and may sit anywhere, even inside another
     * tensor's range; bytes no tensor covers (4..8 here) are tolerated. */
    size_t size;
    unsigned char *f = make_file(
        "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
        " \"e\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [2, 2]},"
        " \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [8, 10]}}", 12, &size);
    CHECK(f != NULL);
    hx_safetensors *st = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_safetensors_open_memory(f, size, "h", &st, &err), HX_OK);
    CHECK_EQ(st->n_tensors, 3);
    const hx_st_tensor *e = hx_safetensors_find(st, "e");
    CHECK(e != NULL);
    CHECK_EQ(e->shape[0], 0);
    CHECK_EQ(e->shape[1], 5);
    hx_safetensors_close(st);
    hx_free(f);
    return 0;
}

/* ---- malformed files ---- */

static int test_truncated_file_is_a_format_error(void)
{
    size_t size;
    unsigned char *f = make_file(mlx_json, MLX_DATA, &size);
    CHECK(f != NULL);
    for (size_t len = 0; len < size; len++) {
        /* A fresh buffer of exactly len bytes, so ASan catches any read past the end. */
        unsigned char *cut = hx_alloc(len ? len : 1);
        CHECK(cut != NULL);
        memcpy(cut, f, len);
        hx_safetensors *st = NULL;
        hx_err err = {0};
        hx_status s = hx_safetensors_open_memory(cut, len, "cut", &st, &err);
        hx_free(cut);
        if (s != HX_E_FORMAT) CHECK_FAIL("length %zu: status %d (%s)", len, s, err.msg);
        CHECK(st == NULL);
        CHECK_CONTAINS(err.msg, "cut: ");
    }
    hx_free(f);
    return 0;
}

static int test_file_shorter_than_length_field(void)
{
    hx_safetensors *st = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_safetensors_open_memory("\x02\0\0", 3, "short", &st, &err), HX_E_FORMAT);
    CHECK_CONTAINS(err.msg, "short: file is 3 bytes");
    hx_err err2 = {0};
    CHECK_EQ(hx_safetensors_open_memory(NULL, 0, NULL, &st, &err2), HX_E_FORMAT);
    CHECK_CONTAINS(err2.msg, "<memory>: file is 0 bytes");
    hx_err err3 = {0};
    CHECK_EQ(hx_safetensors_open_memory(NULL, 5, "x", &st, &err3), HX_E_INVALID);
    CHECK(st == NULL);
    return 0;
}

static int test_header_length_beyond_file(void)
{
    size_t size;
    unsigned char *f = make_file("{}", 0, &size);
    CHECK(f != NULL);
    hx_safetensors *st = NULL;
    hx_err err = {0};
    f[0] = 3; /* "{}" is 2 bytes, the file holds only 2 after the length */
    CHECK_EQ(hx_safetensors_open_memory(f, size, "long", &st, &err), HX_E_FORMAT);
    CHECK_CONTAINS(err.msg, "long: header length 3 reaches past the end of the file");

    /* The largest length: avail + length must not wrap around. */
    memset(f, 0xff, 8);
    hx_err err2 = {0};
    CHECK_EQ(hx_safetensors_open_memory(f, size, "long", &st, &err2), HX_E_FORMAT);
    CHECK_CONTAINS(err2.msg, "header length 18446744073709551615 reaches past");
    CHECK(st == NULL);
    hx_free(f);
    return 0;
}

static int test_header_over_size_limit(void)
{
    /* 100 MiB + 1 of spaces after "{}" would be valid JSON; the length alone is refused. */
    const size_t n = (size_t)100 * 1024 * 1024 + 1;
    unsigned char *f = hx_calloc(1, 8 + n);
    CHECK(f != NULL);
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)n >> (8 * i));
    hx_safetensors *st = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_safetensors_open_memory(f, 8 + n, "big", &st, &err), HX_E_FORMAT);
    CHECK_CONTAINS(err.msg, "big: header length 104857601 is over the 104857600-byte limit");
    hx_free(f);
    return 0;
}

static int test_header_not_json_names_line_and_column(void)
{
    CHECK_BAD("{\n  \"a\": {\"dtype\": \"F32\",,}\n}", 0, "not valid JSON (line 2, column");
    CHECK_BAD("", 0, "not valid JSON (line");
    CHECK_BAD("{\"a\": 1} trailing", 0, "not valid JSON");
    CHECK_BAD("{\"a\": \"\\u0000\"}", 0, "not valid JSON");
    return 0;
}

static int test_header_not_an_object(void)
{
    CHECK_BAD("[]", 0, "header is an array, expected a JSON object");
    CHECK_BAD("[{\"dtype\": \"F32\"}]", 0, "expected a JSON object");
    CHECK_BAD("3", 0, "not valid JSON"); /* jansson refuses bare scalars at the top level */
    return 0;
}

static int test_bad_metadata_is_rejected(void)
{
    CHECK_BAD("{\"__metadata__\": [1]}", 0, "\"__metadata__\" is an array, expected an object");
    CHECK_BAD("{\"__metadata__\": {\"format\": 3}}", 0,
              "\"__metadata__\" member 'format' is an integer, expected a string");
    return 0;
}

static int test_bad_dtype_names_the_tensor(void)
{
    CHECK_BAD("{\"w\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
              "tensor 'w': unknown dtype 'Q4'");
    CHECK_BAD("{\"w\": {\"dtype\": \"f16\", \"shape\": [1], \"data_offsets\": [0, 2]}}", 2,
              "tensor 'w': unknown dtype 'f16'");
    CHECK_BAD("{\"w\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
              "tensor 'w': \"dtype\" is an integer, expected a string");
    CHECK_BAD("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
              "tensor 'w' has no \"dtype\"");
    CHECK_BAD("{\"w\": [1, 2]}", 0, "tensor 'w' is an array, expected an object");
    return 0;
}

static int test_bad_shape_is_rejected(void)
{
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [2, -1], \"data_offsets\": [0, 0]}}", 0,
              "tensor 'w': shape[1] is negative, expected a non-negative integer");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [2.0], \"data_offsets\": [0, 2]}}", 2,
              "tensor 'w': shape[0] is a real number, expected a non-negative integer");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [\"2\"], \"data_offsets\": [0, 2]}}", 2,
              "shape[0] is a string");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": 2, \"data_offsets\": [0, 2]}}", 2,
              "\"shape\" is an integer, expected an array");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"data_offsets\": [0, 2]}}", 2,
              "tensor 'w' has no \"shape\"");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], "
              "\"data_offsets\": [0, 1]}}", 1, "shape has 9 dimensions, at most 8");
    return 0;
}

static int test_bad_data_offsets_are_rejected(void)
{
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 3,
              "tensor 'w': data_offsets [0, 4] reach past the end of the data section (3 bytes)");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [9, 9]}}", 3,
              "data_offsets [9, 9] reach past the end");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [2, 1]}}", 3,
              "data_offsets [2, 1] end before they begin");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1, 2]}}", 3,
              "\"data_offsets\" must be an array of 2 integers");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [-1, 0]}}", 3,
              "must hold 2 non-negative integers");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1.0]}}", 3,
              "must hold 2 non-negative integers");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1]}}", 3,
              "tensor 'w' has no \"data_offsets\"");
    /* Past long long: jansson refuses the number itself. */
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], "
              "\"data_offsets\": [0, 18446744073709551615]}}", 3, "not valid JSON");
    return 0;
}

static int test_size_mismatch_names_both_sizes(void)
{
    CHECK_BAD("{\"w\": {\"dtype\": \"F16\", \"shape\": [2, 3], \"data_offsets\": [0, 10]}}", 12,
              "t.safetensors: tensor 'w': data_offsets [0, 10] hold 10 bytes but shape [2, 3] of "
              "F16 needs 12");
    CHECK_BAD("{\"w\": {\"dtype\": \"F16\", \"shape\": [2, 3], \"data_offsets\": [0, 14]}}", 14,
              "hold 14 bytes but shape [2, 3] of F16 needs 12");
    return 0;
}

static int test_overlapping_ranges_are_rejected(void)
{
    CHECK_BAD("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
              " \"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [3, 7]}}", 8,
              "tensors 'a' [0, 4] and 'b' [3, 7] overlap");
    /* Same range twice. */
    CHECK_BAD("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
              " \"b\": {\"dtype\": \"I8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 4,
              "overlap");
    /* Nested inside a long range, with a tensor in between that does not overlap the second. */
    CHECK_BAD("{\"big\": {\"dtype\": \"U8\", \"shape\": [10], \"data_offsets\": [0, 10]},"
              " \"x\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [1, 3]},"
              " \"y\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [6, 8]}}", 10,
              "tensors 'big' [0, 10] and 'x' [1, 3] overlap");
    return 0;
}

static int test_shape_product_overflow_is_rejected(void)
{
    /* 2^32 * 2^32 elements overflows int64. */
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [4294967296, 4294967296], "
              "\"data_offsets\": [0, 0]}}", 0,
              "tensor 'w': shape [4294967296, 4294967296] of U8 overflows a 64-bit byte count");
    /* 2^62 elements fit int64, their 8-byte size does not. */
    CHECK_BAD("{\"w\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904], "
              "\"data_offsets\": [0, 0]}}", 0, "overflows a 64-bit byte count");
    /* A product that wraps exactly to 0 in 64 bits (2^64) must not pass as an empty tensor. */
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [65536, 65536, 65536, 65536], "
              "\"data_offsets\": [0, 0]}}", 0, "overflows");
    /* A 0 dimension does not excuse the others: strides would still overflow. */
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [0, 4294967296, 4294967296], "
              "\"data_offsets\": [0, 0]}}", 0, "overflows");
    return 0;
}

static int test_duplicate_keys_are_rejected(void)
{
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
              " \"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 2,
              "duplicate object key");
    CHECK_BAD("{\"w\": {\"dtype\": \"U8\", \"dtype\": \"I8\", \"shape\": [1], "
              "\"data_offsets\": [0, 1]}}", 1, "duplicate object key");
    return 0;
}

static int test_non_utf8_header_is_rejected(void)
{
    /* A stray 0xff, an overlong '/' and a UTF-16 surrogate encoded in UTF-8. */
    CHECK_BAD("{\"w\xff\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
              "not valid JSON (line 1");
    CHECK_BAD("{\"\xc0\xaf\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
              "not valid JSON");
    CHECK_BAD("{\"\xed\xa0\x80\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
              1, "not valid JSON");
    return 0;
}

/* ---- resources ---- */

static int test_allocation_failure_is_clean(void)
{
    size_t size;
    unsigned char *f = make_file(mlx_json, MLX_DATA, &size);
    CHECK(f != NULL);
    const size_t live0 = hx_alloc_live_bytes();
    int n_nomem = 0;
    for (int64_t k = 0;; k++) {
        hx_safetensors *st = NULL;
        hx_err err = {0};
        hx_alloc_fail_after(k);
        hx_status s = hx_safetensors_open_memory(f, size, "oom", &st, &err);
        hx_alloc_fail_after(-1);
        if (s == HX_OK) {
            CHECK(st != NULL);
            CHECK(hx_safetensors_find(st, "layers.0.q.weight") != NULL);
            hx_safetensors_close(st);
            CHECK_EQ(hx_alloc_live_bytes(), live0);
            break;
        }
        if (s != HX_E_NOMEM) CHECK_FAIL("k=%" PRId64 ": status %d (%s)", k, s, err.msg);
        CHECK(st == NULL);
        CHECK_CONTAINS(err.msg, "oom: out of memory");
        CHECK_EQ(hx_alloc_live_bytes(), live0);
        n_nomem++;
        CHECK(k < 1000);
    }
    CHECK(n_nomem >= 6); /* object, path, format, table, 4 names, overlap index */
    hx_free(f);
    return 0;
}

static int test_open_reads_a_file_from_disk(void)
{
    size_t size;
    unsigned char *f = make_file(mlx_json, MLX_DATA, &size);
    CHECK(f != NULL);
    const char *tmpdir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/hx_st_XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *fp = fdopen(fd, "wb");
    CHECK(fp != NULL);
    CHECK_EQ(fwrite(f, 1, size, fp), size);
    CHECK_EQ(fclose(fp), 0);

    const size_t live0 = hx_alloc_live_bytes();
    hx_safetensors *st = NULL;
    hx_err err = {0};
    hx_status s = hx_safetensors_open(path, &st, &err);
    unlink(path); /* the mapping keeps the bytes readable */
    CHECK_EQ(s, HX_OK);
    CHECK_STR(st->path, path);
    CHECK_EQ(st->n_tensors, 4);
    CHECK_STR(st->meta_format, "mlx");
    const hx_st_tensor *nw = hx_safetensors_find(st, "model.norm.weight");
    CHECK(nw != NULL);
    CHECK(nw->data >= st->base && nw->data + 8 == st->base + st->size);
    CHECK_EQ(nw->data[7], 55);
    hx_safetensors_close(st);
    CHECK_EQ(hx_alloc_live_bytes(), live0);

    /* An empty file is a format error, not an I/O one. */
    snprintf(path, sizeof path, "%s/hx_st_XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    hx_err err2 = {0};
    s = hx_safetensors_open(path, &st, &err2);
    unlink(path);
    CHECK_EQ(s, HX_E_FORMAT);
    CHECK_CONTAINS(err2.msg, "file is 0 bytes");
    CHECK_EQ(hx_alloc_live_bytes(), live0);
    hx_free(f);
    return 0;
}

static int test_missing_path_is_not_found(void)
{
    const size_t live0 = hx_alloc_live_bytes();
    hx_safetensors *st = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_safetensors_open("/nonexistent/dir/model.safetensors", &st, &err),
             HX_E_NOTFOUND);
    CHECK(st == NULL);
    CHECK_CONTAINS(err.msg, "/nonexistent/dir/model.safetensors");
    CHECK_EQ(hx_alloc_live_bytes(), live0);
    return 0;
}

static const check_case cases[] = {
    { "valid_multi_tensor_file_parses", test_valid_multi_tensor_file_parses },
    { "every_dtype_has_a_name_and_size", test_every_dtype_has_a_name_and_size },
    { "scalar_shape_is_one_element", test_scalar_shape_is_one_element },
    { "zero_tensors_is_valid", test_zero_tensors_is_valid },
    { "empty_tensors_and_holes_are_accepted", test_empty_tensors_and_holes_are_accepted },
    { "truncated_file_is_a_format_error", test_truncated_file_is_a_format_error },
    { "file_shorter_than_length_field", test_file_shorter_than_length_field },
    { "header_length_beyond_file", test_header_length_beyond_file },
    { "header_over_size_limit", test_header_over_size_limit },
    { "header_not_json_names_line_and_column", test_header_not_json_names_line_and_column },
    { "header_not_an_object", test_header_not_an_object },
    { "bad_metadata_is_rejected", test_bad_metadata_is_rejected },
    { "bad_dtype_names_the_tensor", test_bad_dtype_names_the_tensor },
    { "bad_shape_is_rejected", test_bad_shape_is_rejected },
    { "bad_data_offsets_are_rejected", test_bad_data_offsets_are_rejected },
    { "size_mismatch_names_both_sizes", test_size_mismatch_names_both_sizes },
    { "overlapping_ranges_are_rejected", test_overlapping_ranges_are_rejected },
    { "shape_product_overflow_is_rejected", test_shape_product_overflow_is_rejected },
    { "duplicate_keys_are_rejected", test_duplicate_keys_are_rejected },
    { "non_utf8_header_is_rejected", test_non_utf8_header_is_rejected },
    { "allocation_failure_is_clean", test_allocation_failure_is_clean },
    { "open_reads_a_file_from_disk", test_open_reads_a_file_from_disk },
    { "missing_path_is_not_found", test_missing_path_is_not_found },
};
CHECK_MAIN(cases)
