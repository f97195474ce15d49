/* test_gguf.c - unit tests of the GGUF parser (src/format/gguf.h).
 *
 * Files are built byte by byte with the small writer below, so each case states exactly what is
 * on disk. Every malformed file is parsed from a heap block of exactly its size, so ASan flags
 * any read past the end. The writer uses libc malloc, not hx_alloc: it is scaffolding, and must
 * neither fail under fault injection nor show up in the live-byte counts the cases check. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "format/gguf.h"

/* ---- writer ---- */

typedef struct {
    unsigned char *p;
    size_t         len, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) abort(); /* test scaffolding: no memory is not a case worth handling */
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void w_le(wbuf *b, uint64_t v, size_t n)
{
    unsigned char t[8];
    for (size_t i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
    w_bytes(b, t, n);
}

static void w_u32(wbuf *b, uint32_t v) { w_le(b, v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_le(b, v, 8); }

static void w_f32(wbuf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    w_u32(b, u);
}

static void w_f64(wbuf *b, double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    w_u64(b, u);
}

static void w_strn(wbuf *b, const char *s, size_t n)
{
    w_u64(b, n);
    w_bytes(b, s, n);
}

static void w_str(wbuf *b, const char *s) { w_strn(b, s, strlen(s)); }

static void w_free(wbuf *b)
{
    free(b->p);
    *b = (wbuf){ 0 };
}

static void w_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    w_bytes(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_tensors);
    w_u64(b, n_kv);
}

static void w_key(wbuf *b, const char *key, hx_gguf_type t)
{
    w_str(b, key);
    w_u32(b, (uint32_t)t);
}

/* A scalar kv whose value is the low `bytes` bytes of raw. */
static void kv_scalar(wbuf *b, const char *key, hx_gguf_type t, uint64_t raw, size_t bytes)
{
    w_key(b, key, t);
    w_le(b, raw, bytes);
}

static void kv_str(wbuf *b, const char *key, const char *v)
{
    w_key(b, key, HX_GGUF_STRING);
    w_str(b, v);
}

static void w_tensor(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t offset)
{
    w_str(b, name);
    w_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) w_u64(b, ne[i]);
    w_u32(b, type);
    w_u64(b, offset);
}

/* Pads with zeros to a multiple of align, then appends n bytes of the pattern (i * 7 + 1). */
static void w_data(wbuf *b, size_t align, size_t n)
{
    while (b->len % align) w_le(b, 0, 1);
    for (size_t i = 0; i < n; i++) w_le(b, (i * 7 + 1) & 0xff, 1);
}

/* A file holding one tensor and data_bytes of data after the default 32-byte padding. */
static void one_tensor(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes)
{
    w_header(b, 3, 1, 0);
    w_tensor(b, name, n_dims, ne, type, offset);
    w_data(b, 32, data_bytes);
}

enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12 };

/* The reference valid file: a kv of every type, both array kinds, alignment 64 and four tensors
 * of four types. It ends exactly at the last tensor's last byte, so every truncation of it is
 * malformed. */
static void build_full(wbuf *b)
{
    w_header(b, 3, 4, 18);
    kv_str(b, "general.architecture", "llama");
    kv_scalar(b, "general.alignment", HX_GGUF_U32, 64, 4);
    kv_scalar(b, "t.u8", HX_GGUF_U8, 200, 1);
    kv_scalar(b, "t.i8", HX_GGUF_I8, (uint64_t)-5, 1);
    kv_scalar(b, "t.u16", HX_GGUF_U16, 60000, 2);
    kv_scalar(b, "t.i16", HX_GGUF_I16, (uint64_t)-30000, 2);
    kv_scalar(b, "t.u32", HX_GGUF_U32, 4000000000u, 4);
    kv_scalar(b, "t.i32", HX_GGUF_I32, (uint64_t)-2000000000, 4);
    w_key(b, "t.f32", HX_GGUF_F32);
    w_f32(b, 1.5f);
    kv_scalar(b, "t.bool", HX_GGUF_BOOL, 1, 1);
    kv_scalar(b, "t.u64", HX_GGUF_U64, (UINT64_C(1) << 40) + 7, 8);
    kv_scalar(b, "t.i64", HX_GGUF_I64, (uint64_t)-(INT64_C(1) << 40), 8);
    w_key(b, "t.f64", HX_GGUF_F64);
    w_f64(b, 3.25);
    kv_str(b, "t.empty_str", "");
    w_key(b, "t.arr_u32", HX_GGUF_ARRAY);
    w_u32(b, HX_GGUF_U32);
    w_u64(b, 3);
    for (uint32_t i = 1; i <= 3; i++) w_u32(b, i);
    w_key(b, "t.arr_str", HX_GGUF_ARRAY);
    w_u32(b, HX_GGUF_STRING);
    w_u64(b, 3);
    w_str(b, "a");
    w_str(b, "");
    w_str(b, "h\xc3\xa9llo");
    w_key(b, "t.arr_empty", HX_GGUF_ARRAY);
    w_u32(b, HX_GGUF_I32);
    w_u64(b, 0);
    kv_scalar(b, "t.\xe2\x82\xac", HX_GGUF_U8, 1, 1); /* a UTF-8 key (the euro sign) */

    /* The data section is written in offset order; the infos list them out of order on purpose. */
    w_tensor(b, "q8", 1, (const uint64_t[]){ 64 }, T_Q8_0, 192);        /* 68 bytes */
    w_tensor(b, "tok.f32", 2, (const uint64_t[]){ 4, 2 }, T_F32, 0);    /* 32 bytes */
    w_tensor(b, "half", 1, (const uint64_t[]){ 8 }, T_F16, 64);         /* 16 bytes */
    w_tensor(b, "q4", 2, (const uint64_t[]){ 32, 2 }, T_Q4_0, 128);     /* 36 bytes */
    w_data(b, 64, 192 + 68);
}

/* ---- helpers ---- */

static void show(const hx_err *e)
{
    if (getenv("GGUF_TEST_SHOW")) printf("    msg: %s\n", e->msg);
}

/* Copies bytes into a block of exactly n bytes so ASan sees any overread. */
static unsigned char *exact_copy(const void *p, size_t n)
{
    unsigned char *c = malloc(n ? n : 1);
    if (!c) abort();
    if (n) memcpy(c, p, n);
    return c;
}

/* Parses b (as "t.gguf") and checks that it fails with `want`, a message that starts with the
 * name and contains needle, *out untouched and no memory left behind. */
static int expect_fail(const wbuf *b, hx_status want, const char *needle)
{
    static hx_gguf sentinel; /* must still be in *out after a failure */
    size_t live = hx_alloc_live_bytes();
    unsigned char *copy = exact_copy(b->p, b->len);
    hx_gguf *g = &sentinel;
    hx_err err = { 0 };
    hx_status st = hx_gguf_open_memory(copy, b->len, "t.gguf", &g, &err);
    free(copy);
    show(&err);
    if (st == HX_OK) hx_gguf_close(g);
    CHECK_EQ(st, want);
    CHECK_EQ(err.status, want);
    CHECK(g == &sentinel);
    CHECK(strncmp(err.msg, "t.gguf: ", 8) == 0);
    CHECK_CONTAINS(err.msg, needle);
    CHECK_EQ(hx_alloc_live_bytes(), live);
    return 0;
}

static int expect_format(wbuf *b, const char *needle)
{
    int r = expect_fail(b, HX_E_FORMAT, needle);
    w_free(b);
    return r;
}

/* ---- cases ---- */

static int test_valid_file_parses_every_kv_type(void)
{
    wbuf b = { 0 };
    build_full(&b);
    size_t live = hx_alloc_live_bytes();
    hx_gguf *g = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "full.gguf", &g, &err), HX_OK);
    CHECK_EQ(err.status, HX_OK);
    CHECK_EQ(g->version, 3);
    CHECK_EQ(g->n_kv, 18);
    CHECK_EQ(g->n_tensors, 4);
    CHECK_EQ(g->alignment, 64);
    CHECK_EQ(g->data_offset % 64, 0);
    CHECK_EQ(g->data_offset + 192 + 68, b.len);
    CHECK_STR(g->path, "full.gguf");

    uint64_t u;
    double f;
    bool bl;
    hx_gguf_str s;
    CHECK(hx_gguf_get_str(g, "general.architecture", &s) && hx_gguf_str_eq(s, "llama"));
    CHECK(hx_gguf_get_u64(g, "t.u8", &u) && u == 200);
    CHECK(hx_gguf_get_u64(g, "t.u16", &u) && u == 60000);
    CHECK(hx_gguf_get_u64(g, "t.u32", &u) && u == 4000000000u);
    CHECK(hx_gguf_get_u64(g, "t.u64", &u) && u == (UINT64_C(1) << 40) + 7);
    CHECK(!hx_gguf_get_u64(g, "t.i8", &u)); /* negative: not a u64 */
    CHECK(!hx_gguf_get_u64(g, "t.f32", &u));
    CHECK(!hx_gguf_get_u64(g, "t.bool", &u));
    CHECK_EQ(hx_gguf_find(g, "t.i8")->v.i64, -5);
    CHECK_EQ(hx_gguf_find(g, "t.i16")->v.i64, -30000);
    CHECK_EQ(hx_gguf_find(g, "t.i32")->v.i64, -2000000000);
    CHECK_EQ(hx_gguf_find(g, "t.i64")->v.i64, -(INT64_C(1) << 40));
    CHECK(hx_gguf_get_f64(g, "t.f32", &f) && f == 1.5);
    CHECK(hx_gguf_get_f64(g, "t.f64", &f) && f == 3.25);
    CHECK(hx_gguf_get_f64(g, "t.i16", &f) && f == -30000.0);
    CHECK(hx_gguf_get_f64(g, "t.u32", &f) && f == 4000000000.0);
    CHECK(!hx_gguf_get_f64(g, "general.architecture", &f));
    CHECK(hx_gguf_get_bool(g, "t.bool", &bl) && bl);
    CHECK(!hx_gguf_get_bool(g, "t.u8", &bl));
    CHECK(hx_gguf_get_str(g, "t.empty_str", &s) && s.len == 0 && hx_gguf_str_eq(s, ""));
    CHECK(!hx_gguf_get_str(g, "t.u8", &s));
    CHECK(hx_gguf_find(g, "t.\xe2\x82\xac") != NULL);
    CHECK(hx_gguf_find(g, "missing") == NULL);
    CHECK(hx_gguf_find(g, "t.u") == NULL); /* a prefix of keys, not a key */
    CHECK(!hx_gguf_get_u64(g, "missing", &u));

    const hx_gguf_kv *kv = hx_gguf_find(g, "t.arr_u32");
    CHECK(kv && kv->type == HX_GGUF_ARRAY && kv->arr_type == HX_GGUF_U32 && kv->arr_n == 3);
    CHECK_EQ(kv->arr_data[0], 1);
    CHECK_EQ(kv->arr_data[8], 3);
    kv = hx_gguf_find(g, "t.arr_empty");
    CHECK(kv && kv->arr_type == HX_GGUF_I32 && kv->arr_n == 0);

    const hx_gguf_tensor *t = hx_gguf_find_tensor(g, "q4");
    CHECK(t != NULL);
    CHECK_EQ(t->n_dims, 2);
    CHECK_EQ(t->ne[0], 32);
    CHECK_EQ(t->ne[1], 2);
    CHECK_EQ(t->ne[2], 1);
    CHECK_EQ(t->ne[3], 1);
    CHECK_EQ(t->ggml_type, T_Q4_0);
    CHECK_EQ(t->n_bytes, 36);
    CHECK(t->data == b.p + g->data_offset + 128);
    CHECK_EQ(t->data[0], (128 * 7 + 1) & 0xff);
    t = hx_gguf_find_tensor(g, "q8");
    CHECK(t && t->n_bytes == 68 && t->offset == 192);
    t = hx_gguf_find_tensor(g, "tok.f32");
    CHECK(t && t->n_bytes == 32 && t->data == b.p + g->data_offset);
    t = hx_gguf_find_tensor(g, "half");
    CHECK(t && t->n_bytes == 16 && t->ggml_type == T_F16);
    CHECK(hx_gguf_find_tensor(g, "nope") == NULL);
    CHECK(g->tensors[0].data == hx_gguf_find_tensor(g, "q8")->data); /* file order kept */

    hx_gguf_close(g);
    hx_gguf_close(NULL);
    CHECK_EQ(hx_alloc_live_bytes(), live);
    w_free(&b);
    return 0;
}

static int test_string_array_iteration(void)
{
    wbuf b = { 0 };
    build_full(&b);
    hx_gguf *g = NULL;
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "full.gguf", &g, NULL), HX_OK);
    const hx_gguf_kv *kv = hx_gguf_find(g, "t.arr_str");
    CHECK(kv && kv->arr_type == HX_GGUF_STRING && kv->arr_n == 3);
    const char *want[] = { "a", "", "h\xc3\xa9llo" };
    uint64_t pos = 0;
    const unsigned char *cur = NULL;
    hx_gguf_str s;
    int n = 0;
    while (hx_gguf_str_array(kv, &pos, &cur, &s)) {
        CHECK(n < 3);
        CHECK(hx_gguf_str_eq(s, want[n]));
        n++;
    }
    CHECK_EQ(n, 3);
    CHECK_EQ(pos, 3);
    CHECK(!hx_gguf_str_array(kv, &pos, &cur, &s)); /* stays at the end */

    /* Restarting from pos 0 resets the cursor; non-string arrays and scalars yield nothing. */
    pos = 0;
    CHECK(hx_gguf_str_array(kv, &pos, &cur, &s) && hx_gguf_str_eq(s, "a"));
    pos = 0;
    CHECK(!hx_gguf_str_array(hx_gguf_find(g, "t.arr_u32"), &pos, &cur, &s));
    CHECK(!hx_gguf_str_array(hx_gguf_find(g, "t.u8"), &pos, &cur, &s));
    CHECK(!hx_gguf_str_array(NULL, &pos, &cur, &s));
    hx_gguf_close(g);
    w_free(&b);
    return 0;
}

static int test_truncated_gguf_is_a_format_error(void)
{
    wbuf b = { 0 };
    build_full(&b);
    size_t live = hx_alloc_live_bytes();
    for (size_t n = 0; n < b.len; n++) {
        unsigned char *copy = exact_copy(b.p, n);
        hx_gguf *g = NULL;
        hx_err err = { 0 };
        hx_status st = hx_gguf_open_memory(n ? copy : NULL, n, "cut.gguf", &g, &err);
        free(copy);
        if (st != HX_E_FORMAT) CHECK_FAIL("truncated to %zu bytes: status %d", n, (int)st);
        CHECK(g == NULL);
        CHECK(strncmp(err.msg, "cut.gguf: ", 10) == 0);
        CHECK(strlen(err.msg) > 12);
        CHECK_EQ(hx_alloc_live_bytes(), live);
    }
    w_free(&b);
    return 0;
}

static int test_tensor_past_end_of_file_is_rejected(void)
{
    wbuf b = { 0 };
    one_tensor(&b, "w", 1, (const uint64_t[]){ 16 }, T_F32, 0, 63); /* needs 64 */
    if (expect_format(&b, "tensor 'w': 64 bytes at data offset 0 run past the end")) return 1;
    one_tensor(&b, "w", 1, (const uint64_t[]){ 16 }, T_F32, 64, 64); /* offset past the data */
    if (expect_format(&b, "run past the end of the file")) return 1;
    /* offset + n_bytes wraps around 2^64: must be caught, not wrapped into range */
    one_tensor(&b, "w", 1, (const uint64_t[]){ 16 }, T_F32, UINT64_MAX - 31, 64);
    if (expect_format(&b, "run past the end of the file")) return 1;
    /* a file with tensors that ends inside the padding before its data */
    w_header(&b, 3, 1, 0);
    w_tensor(&b, "w", 1, (const uint64_t[]){ 1 }, T_F32, 0);
    return expect_format(&b, "file ends inside the padding before the data section");
}

static int test_overlapping_tensors_are_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 3, 0);
    w_tensor(&b, "c", 1, (const uint64_t[]){ 8 }, T_F32, 64);
    w_tensor(&b, "a", 1, (const uint64_t[]){ 8 }, T_F32, 0);
    w_tensor(&b, "b", 1, (const uint64_t[]){ 16 }, T_F32, 32); /* [32, 96) overlaps c [64, 96) */
    w_data(&b, 32, 96);
    if (expect_format(&b, "tensors 'b' (data [32, 96)) and 'c' (data [64, 96)) overlap"))
        return 1;
    /* Two tensors at the same offset overlap too. */
    w_header(&b, 3, 2, 0);
    w_tensor(&b, "x", 1, (const uint64_t[]){ 8 }, T_F32, 0);
    w_tensor(&b, "y", 1, (const uint64_t[]){ 8 }, T_F32, 0);
    w_data(&b, 32, 32);
    return expect_format(&b, "overlap");
}

static int test_misaligned_offset_is_rejected(void)
{
    wbuf b = { 0 };
    one_tensor(&b, "w", 1, (const uint64_t[]){ 4 }, T_F32, 16, 64);
    if (expect_format(&b, "tensor 'w': offset 16 is not a multiple of the alignment 32")) return 1;
    /* With general.alignment = 16 the same offset is fine. */
    w_header(&b, 3, 1, 1);
    kv_scalar(&b, "general.alignment", HX_GGUF_U32, 16, 4);
    w_tensor(&b, "w", 1, (const uint64_t[]){ 4 }, T_F32, 16);
    w_data(&b, 16, 32);
    hx_gguf *g = NULL;
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "t.gguf", &g, NULL), HX_OK);
    CHECK_EQ(g->alignment, 16);
    CHECK_EQ(g->data_offset % 16, 0);
    hx_gguf_close(g);
    w_free(&b);
    return 0;
}

static int test_bad_alignment_is_rejected(void)
{
    static const uint32_t bad[] = { 0, 48, 3 };
    wbuf b = { 0 };
    for (size_t i = 0; i < HX_COUNTOF(bad); i++) {
        w_header(&b, 3, 0, 1);
        kv_scalar(&b, "general.alignment", HX_GGUF_U32, bad[i], 4);
        if (expect_format(&b, "is not a nonzero power of two")) return 1;
    }
    w_header(&b, 3, 0, 1);
    kv_scalar(&b, "general.alignment", HX_GGUF_U64, 32, 8);
    return expect_format(&b, "key 'general.alignment': has type u64, expected u32");
}

static int test_absurd_dims_are_rejected(void)
{
    wbuf b = { 0 };
    one_tensor(&b, "big", 2, (const uint64_t[]){ UINT64_C(1) << 32, UINT64_C(1) << 32 }, T_F32,
               0, 32);
    if (expect_format(&b, "tensor 'big': ne[1] = 4294967296 makes the element count overflow"))
        return 1;
    one_tensor(&b, "big", 1, (const uint64_t[]){ UINT64_C(1) << 63 }, T_F32, 0, 32);
    if (expect_format(&b, "ne[0] = 9223372036854775808 makes the element count overflow"))
        return 1;
    /* Fits int64 as an element count, but not as bytes: 2^62 F32 elements are 2^64 bytes. */
    one_tensor(&b, "big", 1, (const uint64_t[]){ UINT64_C(1) << 62 }, T_F32, 0, 32);
    if (expect_format(&b, "overflow a 64-bit byte count")) return 1;
    one_tensor(&b, "z", 2, (const uint64_t[]){ 4, 0 }, T_F32, 0, 32);
    if (expect_format(&b, "tensor 'z': ne[1] is 0")) return 1;
    one_tensor(&b, "d", 5, (const uint64_t[]){ 1, 1, 1, 1, 1 }, T_F32, 0, 32);
    if (expect_format(&b, "tensor 'd': n_dims 5 is outside 1..4")) return 1;
    one_tensor(&b, "d", 0, NULL, T_F32, 0, 32);
    return expect_format(&b, "n_dims 0 is outside 1..4");
}

static int test_ne0_off_the_block_size_is_rejected(void)
{
    wbuf b = { 0 };
    one_tensor(&b, "q", 2, (const uint64_t[]){ 48, 2 }, T_Q4_0, 0, 64);
    if (expect_format(&b, "tensor 'q': ne[0] = 48 is not a multiple of the Q4_0 block size 32"))
        return 1;
    one_tensor(&b, "k", 1, (const uint64_t[]){ 128 }, T_Q4_K, 0, 256);
    return expect_format(&b, "not a multiple of the Q4_K block size 256");
}

static int test_huge_counts_fail_fast(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, UINT64_C(1) << 60);
    kv_str(&b, "a", "b");
    if (expect_format(&b, "at byte 16: key/value count 1152921504606846976 is impossible"))
        return 1;
    w_header(&b, 3, UINT64_C(1) << 60, 0);
    w_data(&b, 1, 100);
    if (expect_format(&b, "at byte 8: tensor count 1152921504606846976 is impossible")) return 1;
    /* Counts the bytes could hold on their own but not together. */
    w_header(&b, 3, 2, 3);
    w_data(&b, 1, 3 * 13 + 40);
    if (expect_format(&b, "tensor count 2 is impossible")) return 1;
    /* An array claiming more items than the bytes left. */
    w_header(&b, 3, 0, 1);
    w_key(&b, "arr", HX_GGUF_ARRAY);
    w_u32(&b, HX_GGUF_U64);
    w_u64(&b, UINT64_C(1) << 61); /* × 8 bytes wraps to 0 in 64 bits */
    w_u64(&b, 0);
    if (expect_format(&b, "key 'arr': array of 2305843009213693952 u64 runs past the end"))
        return 1;
    w_header(&b, 3, 0, 1);
    w_key(&b, "arr", HX_GGUF_ARRAY);
    w_u32(&b, HX_GGUF_STRING);
    w_u64(&b, UINT64_MAX);
    return expect_format(&b, "array of 18446744073709551615 strings cannot fit");
}

static int test_string_length_overflow_is_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, 1);
    w_u64(&b, UINT64_MAX); /* key length: pos + len would wrap */
    w_bytes(&b, "abcdefghijklmnop", 16);
    if (expect_format(&b, "at byte 24: key length 18446744073709551615 runs past the end of the "
                          "file (size 48)"))
        return 1;
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", HX_GGUF_STRING);
    w_u64(&b, 9999999);
    w_bytes(&b, "xyz", 3);
    if (expect_format(&b, "at byte 37: key 'k': string value length 9999999 runs past the end"))
        return 1;
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", HX_GGUF_ARRAY);
    w_u32(&b, HX_GGUF_STRING);
    w_u64(&b, 2);
    w_str(&b, "ok");
    w_u64(&b, UINT64_MAX - 5);
    if (expect_format(&b, "key 'k': array string length 18446744073709551610 runs past")) return 1;
    w_header(&b, 3, 1, 0);
    w_u64(&b, 1000);
    w_bytes(&b, "name + the rest of a tensor info", 32);
    return expect_format(&b, "tensor name length 1000 runs past the end of the file");
}

static int test_non_utf8_key_is_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, 2);
    kv_scalar(&b, "fine", HX_GGUF_U8, 1, 1);
    kv_scalar(&b, "bad\xc0\xaf", HX_GGUF_U8, 1, 1); /* an overlong '/' */
    if (expect_format(&b, "at byte 41: key of 5 bytes is not valid UTF-8")) return 1;
    w_header(&b, 3, 0, 1);
    kv_scalar(&b, "\xed\xa0\x80", HX_GGUF_U8, 1, 1); /* a surrogate */
    if (expect_format(&b, "not valid UTF-8")) return 1;
    one_tensor(&b, "w\xff", 1, (const uint64_t[]){ 1 }, T_F32, 0, 4);
    return expect_format(&b, "at byte 24: tensor name of 2 bytes is not valid UTF-8");
}

static int test_duplicate_key_is_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, 4);
    kv_scalar(&b, "x", HX_GGUF_U8, 1, 1);  /* at byte 24, 14 bytes */
    kv_scalar(&b, "zz", HX_GGUF_U8, 1, 1); /* at byte 38, 15 bytes */
    kv_scalar(&b, "zz", HX_GGUF_U8, 2, 1); /* at byte 53 */
    kv_scalar(&b, "x", HX_GGUF_U32, 3, 4); /* later in the file than the second "zz" */
    return expect_format(&b, "at byte 53: duplicate key 'zz' (first defined at byte 38)");
}

static int test_duplicate_tensor_name_is_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 3, 0);
    w_tensor(&b, "w", 1, (const uint64_t[]){ 8 }, T_F32, 0);  /* at byte 24, 33 bytes */
    w_tensor(&b, "v", 1, (const uint64_t[]){ 8 }, T_F32, 32); /* at byte 57 */
    w_tensor(&b, "w", 1, (const uint64_t[]){ 8 }, T_F32, 64); /* at byte 90 */
    w_data(&b, 32, 96);
    return expect_format(&b, "at byte 90: duplicate tensor name 'w' (first defined at byte 24)");
}

static int test_nested_array_is_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, 1);
    w_key(&b, "nest", HX_GGUF_ARRAY);
    w_u32(&b, HX_GGUF_ARRAY);
    w_u64(&b, 1);
    w_u32(&b, HX_GGUF_U8);
    w_u64(&b, 1);
    w_le(&b, 0, 1);
    return expect_format(&b, "key 'nest': nested arrays are not supported");
}

static int test_unknown_value_type_is_rejected(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, 1);
    kv_scalar(&b, "k", (hx_gguf_type)13, 0, 8);
    if (expect_format(&b, "at byte 33: key 'k': unknown value type 13")) return 1;
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", HX_GGUF_ARRAY);
    w_u32(&b, 0xffffffffu);
    w_u64(&b, 0);
    return expect_format(&b, "key 'k': unknown array element type 4294967295");
}

static int test_unknown_ggml_type_names_the_tensor(void)
{
    wbuf b = { 0 };
    one_tensor(&b, "blk.0.attn_q.weight", 1, (const uint64_t[]){ 32 }, 4, 0, 64);
    if (expect_format(&b, "tensor 'blk.0.attn_q.weight': unknown ggml type id 4")) return 1;
    one_tensor(&b, "w", 1, (const uint64_t[]){ 32 }, 40, 0, 64);
    return expect_format(&b, "tensor 'w': unknown ggml type id 40");
}

static int test_bad_magic_is_rejected(void)
{
    wbuf b = { 0 };
    w_bytes(&b, "GGML", 4);
    w_u32(&b, 3);
    w_u64(&b, 0);
    w_u64(&b, 0);
    if (expect_format(&b, "at byte 0: not a GGUF file (magic is 47 47 4d 4c")) return 1;
    w_bytes(&b, "GG", 2);
    if (expect_format(&b, "not a GGUF file (2 bytes, too short for the magic)")) return 1;
    return expect_format(&b, "not a GGUF file (0 bytes");
}

static int test_version_1_is_unsupported(void)
{
    wbuf b = { 0 };
    w_header(&b, 1, 0, 0);
    if (expect_format(&b, "at byte 4: unsupported GGUF version 1")) return 1;
    w_header(&b, 4, 0, 0);
    if (expect_format(&b, "unsupported GGUF version 4 (hearth reads versions 2 and 3)")) return 1;
    w_header(&b, 0x03000000u, 0, 0);
    if (expect_format(&b, "big-endian")) return 1;
    /* Version 2 has the same layout and parses. */
    w_header(&b, 2, 0, 1);
    kv_str(&b, "general.architecture", "llama");
    hx_gguf *g = NULL;
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "v2.gguf", &g, NULL), HX_OK);
    CHECK_EQ(g->version, 2);
    hx_gguf_close(g);
    w_free(&b);
    return 0;
}

static int test_file_without_tensors_needs_no_padding(void)
{
    wbuf b = { 0 };
    w_header(&b, 3, 0, 1);
    kv_str(&b, "tokenizer.ggml.model", "gpt2"); /* a vocab-only file ends right here */
    hx_gguf *g = NULL;
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "vocab.gguf", &g, NULL), HX_OK);
    CHECK_EQ(g->n_tensors, 0);
    CHECK_EQ(g->data_offset, b.len);
    CHECK(hx_gguf_find_tensor(g, "x") == NULL);
    hx_gguf_close(g);
    w_free(&b);

    w_header(&b, 3, 0, 0); /* and the smallest valid file of all */
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "empty.gguf", &g, NULL), HX_OK);
    CHECK(hx_gguf_find(g, "x") == NULL);
    hx_gguf_close(g);
    w_free(&b);
    return 0;
}

static int test_bad_arguments_are_invalid(void)
{
    hx_gguf *g = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_gguf_open_memory(NULL, 10, "x", &g, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "x: ");
    CHECK_EQ(hx_gguf_open_memory("GGUF", 4, "x", NULL, NULL), HX_E_INVALID);
    CHECK_EQ(hx_gguf_open(NULL, &g, NULL), HX_E_INVALID);
    CHECK(g == NULL);
    err = (hx_err){ 0 };
    CHECK_EQ(hx_gguf_open("/nonexistent/dir/m.gguf", &g, &err), HX_E_NOTFOUND);
    CHECK_CONTAINS(err.msg, "/nonexistent/dir/m.gguf");
    CHECK(g == NULL);
    return 0;
}

static int test_open_by_path(void)
{
    wbuf b = { 0 };
    build_full(&b);
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, b.p, b.len), (int64_t)b.len);
    close(fd);
    size_t live = hx_alloc_live_bytes();
    hx_gguf *g = NULL;
    hx_err err = { 0 };
    hx_status st = hx_gguf_open(path, &g, &err);
    if (st != HX_OK) {
        unlink(path);
        CHECK_FAIL("%s", err.msg);
    }
    CHECK_STR(g->path, path);
    CHECK(g->base == g->map.data && g->size == b.len);
    const hx_gguf_tensor *t = hx_gguf_find_tensor(g, "q8");
    CHECK(t && memcmp(t->data, b.p + g->data_offset + 192, 68) == 0);
    hx_gguf_close(g);

    /* A truncated file on disk names the path in its message. */
    CHECK_EQ(truncate(path, 100), 0);
    err = (hx_err){ 0 };
    CHECK_EQ(hx_gguf_open(path, &g, &err), HX_E_FORMAT);
    CHECK(strncmp(err.msg, path, strlen(path)) == 0);
    CHECK_EQ(truncate(path, 0), 0);
    err = (hx_err){ 0 };
    CHECK_EQ(hx_gguf_open(path, &g, &err), HX_E_FORMAT);
    unlink(path);
    CHECK_EQ(hx_alloc_live_bytes(), live);
    w_free(&b);
    return 0;
}

/* Fails the k-th allocation for k = 0, 1, ... until the parse no longer allocates that many
 * times: every attempt must end in HX_E_NOMEM or HX_OK, with nothing leaked. */
static int test_alloc_failure_never_crashes_or_leaks(void)
{
    wbuf b = { 0 };
    build_full(&b);
    size_t live = hx_alloc_live_bytes();
    int64_t k;
    for (k = 0; k < 1000; k++) {
        hx_gguf *g = NULL;
        hx_err err = { 0 };
        hx_alloc_fail_after(k);
        hx_status st = hx_gguf_open_memory(b.p, b.len, "oom.gguf", &g, &err);
        hx_alloc_fail_after(-1);
        if (st == HX_OK) {
            CHECK(hx_gguf_find_tensor(g, "q4") != NULL);
            hx_gguf_close(g);
            CHECK_EQ(hx_alloc_live_bytes(), live);
            break;
        }
        CHECK_EQ(st, HX_E_NOMEM);
        CHECK(g == NULL);
        CHECK(strncmp(err.msg, "oom.gguf: out of memory", 23) == 0);
        CHECK_EQ(hx_alloc_live_bytes(), live);
    }
    CHECK(k > 0 && k < 1000);
    w_free(&b);
    return 0;
}

/* 50,000 kvs and 50,000 tensors: the duplicate and overlap checks must not be quadratic (this
 * would take minutes if they were). */
static int test_many_entries_parse_quickly(void)
{
    enum { N = 50000 };
    wbuf b = { 0 };
    char name[32];
    w_header(&b, 3, N, N);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        kv_scalar(&b, name, HX_GGUF_U32, (uint64_t)i, 4);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "t.%d", i);
        w_tensor(&b, name, 1, (const uint64_t[]){ 8 }, T_F32, (uint64_t)(N - 1 - i) * 32);
    }
    w_data(&b, 32, (size_t)N * 32);
    clock_t t0 = clock();
    hx_gguf *g = NULL;
    hx_err err = { 0 };
    CHECK_EQ(hx_gguf_open_memory(b.p, b.len, "many.gguf", &g, &err), HX_OK);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    uint64_t u;
    CHECK(hx_gguf_get_u64(g, "k.31337", &u) && u == 31337);
    const hx_gguf_tensor *t = hx_gguf_find_tensor(g, "t.0");
    CHECK(t && t->offset == (uint64_t)(N - 1) * 32);
    hx_gguf_close(g);
    printf("    parsed %d kvs and %d tensors in %.3f s\n", N, N, secs);
    CHECK(secs < 10.0);
    w_free(&b);
    return 0;
}

static int test_type_table(void)
{
    static const struct { uint32_t id; const char *name; uint32_t n, bytes; } want[] = {
        { 0, "F32", 1, 4 },          { 1, "F16", 1, 2 },         { 2, "Q4_0", 32, 18 },
        { 3, "Q4_1", 32, 20 },       { 6, "Q5_0", 32, 22 },      { 7, "Q5_1", 32, 24 },
        { 8, "Q8_0", 32, 34 },       { 9, "Q8_1", 32, 36 },      { 10, "Q2_K", 256, 84 },
        { 11, "Q3_K", 256, 110 },    { 12, "Q4_K", 256, 144 },   { 13, "Q5_K", 256, 176 },
        { 14, "Q6_K", 256, 210 },    { 15, "Q8_K", 256, 292 },   { 16, "IQ2_XXS", 256, 66 },
        { 17, "IQ2_XS", 256, 74 },   { 18, "IQ3_XXS", 256, 98 }, { 19, "IQ1_S", 256, 50 },
        { 20, "IQ4_NL", 32, 18 },    { 21, "IQ3_S", 256, 110 },  { 22, "IQ2_S", 256, 82 },
        { 23, "IQ4_XS", 256, 136 },  { 24, "I8", 1, 1 },         { 25, "I16", 1, 2 },
        { 26, "I32", 1, 4 },         { 27, "I64", 1, 8 },        { 28, "F64", 1, 8 },
        { 29, "IQ1_M", 256, 56 },    { 30, "BF16", 1, 2 },       { 34, "TQ1_0", 256, 54 },
        { 35, "TQ2_0", 256, 66 },    { 39, "MXFP4", 32, 17 },
    };
    for (size_t i = 0; i < HX_COUNTOF(want); i++) {
        uint32_t n = 0, bytes = 0;
        CHECK_STR(hx_gguf_type_name(want[i].id), want[i].name);
        CHECK(hx_gguf_type_traits(want[i].id, &n, &bytes));
        CHECK_EQ(n, want[i].n);
        CHECK_EQ(bytes, want[i].bytes);
    }
    static const uint32_t unknown[] = { 4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, UINT32_MAX };
    for (size_t i = 0; i < HX_COUNTOF(unknown); i++) {
        CHECK_STR(hx_gguf_type_name(unknown[i]), "unknown");
        CHECK(!hx_gguf_type_traits(unknown[i], NULL, NULL));
    }
    return 0;
}

/* The starter model, when it has been downloaded: a real file from a real converter. */
static int test_starter_model_opens(void)
{
    char path[1024];
    const char *home = getenv("HEARTH_HOME"), *user = getenv("HOME");
    if (home && *home)
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        snprintf(path, sizeof path, "%s/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 user ? user : "");
    if (access(path, R_OK) != 0) {
        printf("skip: starter model not found (%s)\n", path);
        return 0;
    }
    hx_gguf *g = NULL;
    hx_err err = { 0 };
    if (hx_gguf_open(path, &g, &err) != HX_OK) CHECK_FAIL("%s", err.msg);
    hx_gguf_str s;
    uint64_t u;
    double f;
    bool bl;
    CHECK_EQ(g->version, 3);
    CHECK_EQ(g->n_tensors, 272);
    CHECK_EQ(g->n_kv, 33);
    CHECK(hx_gguf_get_str(g, "general.architecture", &s) && hx_gguf_str_eq(s, "llama"));
    CHECK(hx_gguf_get_u64(g, "llama.block_count", &u) && u == 30);
    CHECK(hx_gguf_get_u64(g, "llama.embedding_length", &u) && u == 576);
    CHECK(hx_gguf_get_u64(g, "llama.attention.head_count_kv", &u) && u == 3);
    CHECK(hx_gguf_get_f64(g, "llama.rope.freq_base", &f) && f == 100000.0);
    CHECK(hx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bl) && !bl);
    const hx_gguf_kv *tok = hx_gguf_find(g, "tokenizer.ggml.tokens");
    CHECK(tok && tok->arr_type == HX_GGUF_STRING && tok->arr_n == 49152);
    uint64_t pos = 0, n = 0;
    const unsigned char *cur = NULL;
    while (hx_gguf_str_array(tok, &pos, &cur, &s)) {
        if (n == 0) CHECK(hx_gguf_str_eq(s, "<|endoftext|>"));
        if (n == 1) CHECK(hx_gguf_str_eq(s, "<|im_start|>"));
        n++;
    }
    CHECK_EQ(n, 49152);
    const hx_gguf_tensor *t = hx_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->ggml_type == T_Q8_0 && t->ne[0] == 576 && t->ne[1] == 49152);
    CHECK_EQ(t->n_bytes, 576 / 32 * 34 * 49152);
    t = hx_gguf_find_tensor(g, "output_norm.weight");
    CHECK(t && t->ggml_type == T_F32 && t->n_dims == 1 && t->ne[0] == 576);
    CHECK(t->data + t->n_bytes <= g->base + g->size);
    t = hx_gguf_find_tensor(g, "blk.29.ffn_down.weight");
    CHECK(t && t->ggml_type == 3 && t->ne[0] == 1536 && t->ne[1] == 576);
    hx_gguf_close(g);
    return 0;
}

static const check_case cases[] = {
    { "valid_file_parses_every_kv_type", test_valid_file_parses_every_kv_type },
    { "string_array_iteration", test_string_array_iteration },
    { "truncated_gguf_is_a_format_error", test_truncated_gguf_is_a_format_error },
    { "tensor_past_end_of_file_is_rejected", test_tensor_past_end_of_file_is_rejected },
    { "overlapping_tensors_are_rejected", test_overlapping_tensors_are_rejected },
    { "misaligned_offset_is_rejected", test_misaligned_offset_is_rejected },
    { "bad_alignment_is_rejected", test_bad_alignment_is_rejected },
    { "absurd_dims_are_rejected", test_absurd_dims_are_rejected },
    { "ne0_off_the_block_size_is_rejected", test_ne0_off_the_block_size_is_rejected },
    { "huge_counts_fail_fast", test_huge_counts_fail_fast },
    { "string_length_overflow_is_rejected", test_string_length_overflow_is_rejected },
    { "non_utf8_key_is_rejected", test_non_utf8_key_is_rejected },
    { "duplicate_key_is_rejected", test_duplicate_key_is_rejected },
    { "duplicate_tensor_name_is_rejected", test_duplicate_tensor_name_is_rejected },
    { "nested_array_is_rejected", test_nested_array_is_rejected },
    { "unknown_value_type_is_rejected", test_unknown_value_type_is_rejected },
    { "unknown_ggml_type_names_the_tensor", test_unknown_ggml_type_names_the_tensor },
    { "bad_magic_is_rejected", test_bad_magic_is_rejected },
    { "version_1_is_unsupported", test_version_1_is_unsupported },
    { "file_without_tensors_needs_no_padding", test_file_without_tensors_needs_no_padding },
    { "bad_arguments_are_invalid", test_bad_arguments_are_invalid },
    { "open_by_path", test_open_by_path },
    { "alloc_failure_never_crashes_or_leaks", test_alloc_failure_never_crashes_or_leaks },
    { "many_entries_parse_quickly", test_many_entries_parse_quickly },
    { "type_table", test_type_table },
    { "starter_model_opens", test_starter_model_opens },
};

CHECK_MAIN(cases)
