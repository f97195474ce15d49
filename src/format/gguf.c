/* gguf.c - validating, zero-copy GGUF (v2/v3) parser; the byte layout is in gguf.h.
 *
 * Owns: the parsed kv and tensor tables, two sorted pointer indexes over them (for duplicate
 * detection and O(log n) lookup) and, when opened by path, the file mapping. Every string and
 * tensor pointer in the result points into the parsed bytes; nothing is copied.
 * Does not: interpret metadata (format/model_files.c does) or dequantize anything.
 * Invariants of a successful parse: every count and length was checked against the remaining
 * bytes before use, every tensor lies inside the data section, no two tensors overlap, and keys
 * and tensor names are valid UTF-8 and unique. Parsing is O(n log n) in the number of entries and
 * O(n) in bytes; memory grows with the entries actually read, never with a count the file claims.
 */
#include "format/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/utf8.h"

/* ---- types ---- */

/* The public struct is the first member, so the hx_gguf * handed out converts back to the
 * private object. hx_gguf values are only ever made by hx_gguf_open*, which guarantees this. */
typedef struct {
    hx_gguf      pub;
    const void **kv_by_key;      /* [n_kv] const hx_gguf_kv *, by key bytes, ties in file order */
    const void **tensor_by_name; /* [n_tensors] const hx_gguf_tensor *, the same way by name */
} gguf_impl;

/* A cursor over the bytes being parsed. `what`/`who` name the entry being read, so every
 * message deeper down can say which key or tensor it was in. */
typedef struct {
    const unsigned char *base;
    size_t               size;
    size_t               pos;
    const char          *name; /* path or caller's name, first word of every message */
    hx_err              *err;
    const char          *what; /* "key", "tensor" or NULL */
    hx_gguf_str          who;  /* that entry's name, when known */
} reader;

/* Traits of every ggml type id the format has defined, indexed by id. Ids 4, 5 (Q4_2, Q4_3),
 * 31-33 and 36-38 (repacked in-memory layouts) were removed from ggml and never appear in files,
 * so their rows are empty and they count as unknown. Sizes are those of ggml's block structs;
 * Q8_1 is 36 bytes (two f16 then 32 int8), which older gguf-py tables list as 40. */
typedef struct {
    const char *name;
    uint32_t    block_n;     /* elements per block */
    uint32_t    block_bytes; /* bytes per block */
} ggml_traits;

static const ggml_traits ggml_types[] = {
    [0]  = { "F32",     1,   4   },
    [1]  = { "F16",     1,   2   },
    [2]  = { "Q4_0",    32,  18  },
    [3]  = { "Q4_1",    32,  20  },
    [6]  = { "Q5_0",    32,  22  },
    [7]  = { "Q5_1",    32,  24  },
    [8]  = { "Q8_0",    32,  34  },
    [9]  = { "Q8_1",    32,  36  },
    [10] = { "Q2_K",    256, 84  },
    [11] = { "Q3_K",    256, 110 },
    [12] = { "Q4_K",    256, 144 },
    [13] = { "Q5_K",    256, 176 },
    [14] = { "Q6_K",    256, 210 },
    [15] = { "Q8_K",    256, 292 },
    [16] = { "IQ2_XXS", 256, 66  },
    [17] = { "IQ2_XS",  256, 74  },
    [18] = { "IQ3_XXS", 256, 98  },
    [19] = { "IQ1_S",   256, 50  },
    [20] = { "IQ4_NL",  32,  18  },
    [21] = { "IQ3_S",   256, 110 },
    [22] = { "IQ2_S",   256, 82  },
    [23] = { "IQ4_XS",  256, 136 },
    [24] = { "I8",      1,   1   },
    [25] = { "I16",     1,   2   },
    [26] = { "I32",     1,   4   },
    [27] = { "I64",     1,   8   },
    [28] = { "F64",     1,   8   },
    [29] = { "IQ1_M",   256, 56  },
    [30] = { "BF16",    1,   2   },
    [34] = { "TQ1_0",   256, 54  },
    [35] = { "TQ2_0",   256, 66  },
    [39] = { "MXFP4",   32,  17  },
};

/* Size in the file of a scalar of each value type; 0 for STRING and ARRAY (variable). */
static const uint8_t value_size[HX_GGUF_TYPE_COUNT] = {
    [HX_GGUF_U8] = 1,  [HX_GGUF_I8] = 1,  [HX_GGUF_U16] = 2, [HX_GGUF_I16] = 2,
    [HX_GGUF_U32] = 4, [HX_GGUF_I32] = 4, [HX_GGUF_F32] = 4, [HX_GGUF_BOOL] = 1,
    [HX_GGUF_U64] = 8, [HX_GGUF_I64] = 8, [HX_GGUF_F64] = 8,
};

static const char *const value_type_name[HX_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

/* The smallest possible kv (empty key, u32 type, one-byte value) and tensor info (empty name,
 * n_dims, one ne, type, offset). Dividing the remaining bytes by these bounds a claimed count
 * before anything is allocated for it. */
#define MIN_KV_BYTES     (8 + 4 + 1)
#define MIN_TENSOR_BYTES (8 + 4 + 8 + 4 + 8)
#define HEADER_BYTES     (4 + 4 + 8 + 8)
#define SHOW_MAX         80 /* longest name echoed into a message, in bytes */

/* ---- errors ---- */

/* How many bytes of s to echo in a message: at most SHOW_MAX, cut back to a character boundary so
 * the message itself stays valid UTF-8 when s is. */
static int show_len(hx_gguf_str s)
{
    if (s.len <= SHOW_MAX) return (int)s.len;
    size_t n = SHOW_MAX;
    while (n > 0 && ((unsigned char)s.ptr[n] & 0xC0) == 0x80) n--;
    return (int)n;
}

static const char *show_more(hx_gguf_str s) { return s.len > SHOW_MAX ? "..." : ""; }

/* Records "NAME: at byte AT: KIND 'WHO': problem" (the at-part omitted when at == SIZE_MAX, the
 * entry part when the reader names none) and returns HX_E_FORMAT. */
static hx_status fail_at(reader *r, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hx_status fail_at(reader *r, size_t at, const char *fmt, ...)
{
    char problem[384], where[40] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    if (at != SIZE_MAX) snprintf(where, sizeof where, "at byte %zu: ", at);
    if (r->what && r->who.ptr)
        hx_err_set(r->err, HX_E_FORMAT, "%s: %s%s '%.*s%s': %s", r->name, where, r->what,
                   show_len(r->who), r->who.ptr, show_more(r->who), problem);
    else
        hx_err_set(r->err, HX_E_FORMAT, "%s: %s%s", r->name, where, problem);
    return HX_E_FORMAT; /* a constant, so callers' "returns non-OK on failure" is visible */
}

static hx_status fail_nomem(reader *r, const char *what)
{
    hx_err_set(r->err, HX_E_NOMEM, "%s: out of memory (%s)", r->name, what);
    return HX_E_NOMEM;
}

/* ---- reading ---- */

static size_t remaining(const reader *r) { return r->size - r->pos; }

/* Assembles little-endian integers byte by byte, so the host's byte order does not matter. */
static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

/* Reads an n-byte little-endian field named `field`; fails when the file ends inside it. */
static hx_status rd_uint(reader *r, size_t n, const char *field, uint64_t *out)
{
    *out = 0;
    if (remaining(r) < n)
        return fail_at(r, r->pos, "file ends inside the %s (%zu bytes needed, %zu left)", field,
                       n, remaining(r));
    *out = load_le(r->base + r->pos, n);
    r->pos += n;
    return HX_OK;
}

static hx_status rd_u32(reader *r, const char *field, uint32_t *out)
{
    uint64_t v;
    hx_status st = rd_uint(r, 4, field, &v);
    if (st == HX_OK) *out = (uint32_t)v;
    return st;
}

/* Reads a length-prefixed string, checking the length against the bytes left before making the
 * view. The result points into the parsed bytes. */
static hx_status rd_str(reader *r, const char *field, hx_gguf_str *out)
{
    size_t at = r->pos;
    uint64_t len;
    hx_status st = rd_uint(r, 8, field, &len);
    if (st != HX_OK) return st;
    if (len > remaining(r))
        return fail_at(r, at, "%s length %" PRIu64 " runs past the end of the file (size %zu)",
                       field, len, r->size);
    out->ptr = (const char *)r->base + r->pos;
    out->len = len;
    r->pos += (size_t)len;
    return HX_OK;
}

/* Reads a scalar of type t (not STRING or ARRAY) into kv's union, widened. */
static hx_status rd_scalar(reader *r, hx_gguf_type t, hx_gguf_kv *kv)
{
    uint64_t raw;
    hx_status st = rd_uint(r, value_size[t], "value", &raw);
    if (st != HX_OK) return st;
    switch (t) {
    case HX_GGUF_I8:  kv->v.i64 = (int8_t)raw; break;
    case HX_GGUF_I16: kv->v.i64 = (int16_t)raw; break;
    case HX_GGUF_I32: kv->v.i64 = (int32_t)raw; break;
    case HX_GGUF_I64: kv->v.i64 = (int64_t)raw; break;
    case HX_GGUF_F32: {
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, sizeof f);
        kv->v.f64 = f;
        break;
    }
    case HX_GGUF_F64: memcpy(&kv->v.f64, &raw, sizeof kv->v.f64); break;
    default:          kv->v.u64 = raw; break; /* U8, U16, U32, U64, BOOL */
    }
    return HX_OK;
}

/* Reads an array value: element type, count, items. Fixed-size items are bounds-checked as one
 * block (count × size without overflow); string items are walked once, each length checked. */
static hx_status rd_array(reader *r, hx_gguf_kv *kv)
{
    size_t at = r->pos;
    uint32_t et;
    uint64_t n;
    hx_status st = rd_u32(r, "array element type", &et);
    if (st != HX_OK) return st;
    if (et >= HX_GGUF_TYPE_COUNT)
        return fail_at(r, at, "unknown array element type %" PRIu32 " (valid: 0..%d)", et,
                       HX_GGUF_TYPE_COUNT - 1);
    if (et == HX_GGUF_ARRAY)
        return fail_at(r, at, "nested arrays are not supported");
    at = r->pos;
    if ((st = rd_uint(r, 8, "array length", &n)) != HX_OK) return st;
    kv->arr_type = (hx_gguf_type)et;
    kv->arr_n = n;
    kv->arr_data = r->base + r->pos;
    if (et != HX_GGUF_STRING) {
        size_t es = value_size[et];
        if (n > remaining(r) / es)
            return fail_at(r, at, "array of %" PRIu64 " %s runs past the end of the file (size "
                           "%zu)", n, value_type_name[et], r->size);
        r->pos += (size_t)n * es;
        return HX_OK;
    }
    if (n > remaining(r) / 8) /* each string needs its 8-byte length at least */
        return fail_at(r, at, "array of %" PRIu64 " strings cannot fit in the %zu bytes left", n,
                       remaining(r));
    for (uint64_t i = 0; i < n; i++) {
        hx_gguf_str s;
        if ((st = rd_str(r, "array string", &s)) != HX_OK) return st;
    }
    return HX_OK;
}

/* ---- helpers ---- */

static hx_gguf_str kv_name(const void *p) { return ((const hx_gguf_kv *)p)->key; }
static hx_gguf_str tensor_name(const void *p) { return ((const hx_gguf_tensor *)p)->name; }

static int str_cmp(hx_gguf_str a, hx_gguf_str b)
{
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (c) return c;
    return (a.len > b.len) - (a.len < b.len);
}

/* Equal keys are ordered by position in the file (their array order), so in a run of duplicates
 * the first element is the first definition. */
static int cmp_kv_by_key(const void *a, const void *b)
{
    const hx_gguf_kv *x = *(const void *const *)a, *y = *(const void *const *)b;
    int c = str_cmp(x->key, y->key);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_by_name(const void *a, const void *b)
{
    const hx_gguf_tensor *x = *(const void *const *)a, *y = *(const void *const *)b;
    int c = str_cmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_by_offset(const void *a, const void *b)
{
    const hx_gguf_tensor *x = *(const void *const *)a, *y = *(const void *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

/* Grows an array of elem-byte items to hold one more than *cap, doubling and never past max.
 * Returns the new block (the old one is then gone) or NULL with the old block intact. */
static void *grow(void *arr, size_t elem, uint64_t *cap, uint64_t max)
{
    uint64_t n = *cap ? *cap * 2 : 16;
    if (n > max) n = max;
    if (n > SIZE_MAX / elem) return NULL;
    void *p = hx_realloc(arr, (size_t)n * elem);
    if (p) *cap = n;
    return p;
}

/* Builds an array of pointers to the n items (elem bytes apart) at items, sorted by cmp.
 * NULL when out of memory; n == 0 gives NULL too, and callers treat that as empty. */
static const void **sorted_index(const void *items, size_t elem, uint64_t n,
                                 int (*cmp)(const void *, const void *))
{
    if (n == 0 || n > SIZE_MAX / sizeof(void *)) return NULL;
    const void **idx = hx_alloc((size_t)n * sizeof *idx);
    if (!idx) return NULL;
    for (uint64_t i = 0; i < n; i++) idx[i] = (const unsigned char *)items + i * elem;
    qsort(idx, (size_t)n, sizeof *idx, cmp);
    return idx;
}

/* Finds, in an index sorted by name with ties in file order, the duplicate whose second
 * definition comes first in the file: that is the first problem a sequential reader would meet.
 * Sets *first and *second and returns true when there is one. */
static bool find_duplicate(const void *const *idx, uint64_t n,
                           hx_gguf_str (*name_of)(const void *), const void **first,
                           const void **second)
{
    *first = *second = NULL;
    for (uint64_t i = 0; i + 1 < n;) {
        uint64_t j = i + 1;
        while (j < n && str_cmp(name_of(idx[i]), name_of(idx[j])) == 0) j++;
        /* idx[i] is the earliest definition in the run and idx[i + 1] the next one. */
        if (j > i + 1 && (!*second || (const char *)idx[i + 1] < (const char *)*second)) {
            *first = idx[i];
            *second = idx[i + 1];
        }
        i = j;
    }
    return *second != NULL;
}

/* Byte offset of a parsed string's length prefix in the file: where its entry starts. */
static size_t str_at(const reader *r, hx_gguf_str s)
{
    return (size_t)((const unsigned char *)s.ptr - r->base) - 8;
}

/* Binary search of a sorted index whose items start with (or are found by) a name. */
static const void *index_find(const void *const *idx, uint64_t n, const char *key,
                              hx_gguf_str (*name_of)(const void *))
{
    if (!idx || !key) return NULL;
    hx_gguf_str k = { key, strlen(key) };
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(name_of(idx[mid]), k);
        if (c == 0) return idx[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ---- parsing ---- */

static hx_status parse_header(reader *r, hx_gguf *g)
{
    hx_status st;
    uint64_t v;
    if (r->size < 4 || memcmp(r->base, "GGUF", 4) != 0) {
        if (r->size < 4)
            return fail_at(r, SIZE_MAX, "not a GGUF file (%zu bytes, too short for the magic)",
                           r->size);
        return fail_at(r, 0, "not a GGUF file (magic is %02x %02x %02x %02x, expected \"GGUF\")",
                       r->base[0], r->base[1], r->base[2], r->base[3]);
    }
    r->pos = 4;
    if ((st = rd_u32(r, "version", &g->version)) != HX_OK) return st;
    if (g->version != 2 && g->version != 3) {
        /* Big-endian GGUF (v3 allows it) shows up here as a byte-swapped version. */
        uint32_t v32 = g->version;
        uint32_t swapped = (v32 >> 24) | ((v32 >> 8) & 0xff00) | ((v32 << 8) & 0xff0000) |
                           (v32 << 24);
        const char *hint = " (hearth reads versions 2 and 3)";
        if (swapped == 2 || swapped == 3)
            hint = " (a big-endian file? hearth reads little-endian GGUF only)";
        else if (v32 == 1)
            hint = " (hearth reads versions 2 and 3; convert the model again with current tools)";
        return fail_at(r, 4, "unsupported GGUF version %" PRIu32 "%s", v32, hint);
    }
    if ((st = rd_uint(r, 8, "tensor count", &g->n_tensors)) != HX_OK) return st;
    if ((st = rd_uint(r, 8, "key/value count", &v)) != HX_OK) return st;
    g->n_kv = v;

    /* Bound both counts by the bytes left before anything is allocated for them. */
    size_t left = remaining(r);
    if (g->n_kv > left / MIN_KV_BYTES)
        return fail_at(r, 16, "key/value count %" PRIu64 " is impossible: each takes at least %d "
                       "bytes and %zu are left (file size %zu)", g->n_kv, MIN_KV_BYTES, left,
                       r->size);
    left -= (size_t)g->n_kv * MIN_KV_BYTES;
    if (g->n_tensors > left / MIN_TENSOR_BYTES)
        return fail_at(r, 8, "tensor count %" PRIu64 " is impossible: each takes at least %d "
                       "bytes and at most %zu are left for them (file size %zu)", g->n_tensors,
                       MIN_TENSOR_BYTES, left, r->size);
    return HX_OK;
}

static hx_status parse_kv(reader *r, hx_gguf_kv *kv)
{
    hx_status st;
    size_t at = r->pos;
    uint32_t t;
    r->what = NULL;
    if ((st = rd_str(r, "key", &kv->key)) != HX_OK) return st;
    if (!hx_utf8_valid(kv->key.ptr, kv->key.len))
        return fail_at(r, at, "key of %" PRIu64 " bytes is not valid UTF-8", kv->key.len);
    r->what = "key";
    r->who = kv->key;
    at = r->pos;
    if ((st = rd_u32(r, "value type", &t)) != HX_OK) return st;
    if (t >= HX_GGUF_TYPE_COUNT)
        return fail_at(r, at, "unknown value type %" PRIu32 " (valid: 0..%d)", t,
                       HX_GGUF_TYPE_COUNT - 1);
    kv->type = (hx_gguf_type)t;
    if (t == HX_GGUF_STRING) return rd_str(r, "string value", &kv->v.str);
    if (t == HX_GGUF_ARRAY) return rd_array(r, kv);
    return rd_scalar(r, kv->type, kv);
}

/* Reads all kvs into g->kv (grown as entries arrive), then indexes them by key and rejects
 * duplicates. */
static hx_status parse_kvs(reader *r, gguf_impl *impl)
{
    hx_gguf *g = &impl->pub;
    uint64_t n = g->n_kv, cap = 0;
    hx_status st;
    g->n_kv = 0; /* counts entries filled so far, so a partly built object stays consistent */
    for (uint64_t i = 0; i < n; i++) {
        if (i == cap) {
            hx_gguf_kv *kv = grow(g->kv, sizeof *kv, &cap, n);
            if (!kv) return fail_nomem(r, "key/value table");
            g->kv = kv;
        }
        memset(&g->kv[i], 0, sizeof g->kv[i]);
        if ((st = parse_kv(r, &g->kv[i])) != HX_OK) return st;
        g->n_kv = i + 1;
    }
    r->what = NULL;
    if (n == 0) return HX_OK;
    impl->kv_by_key = sorted_index(g->kv, sizeof *g->kv, n, cmp_kv_by_key);
    if (!impl->kv_by_key) return fail_nomem(r, "key index");
    const void *first, *second;
    if (find_duplicate(impl->kv_by_key, n, kv_name, &first, &second)) {
        hx_gguf_str k = ((const hx_gguf_kv *)second)->key;
        return fail_at(r, str_at(r, k), "duplicate key '%.*s%s' (first defined at byte %zu)",
                       show_len(k), k.ptr, show_more(k),
                       str_at(r, ((const hx_gguf_kv *)first)->key));
    }
    return HX_OK;
}

/* general.alignment, when present, must be a u32 power of two; it defaults to 32. */
static hx_status parse_alignment(reader *r, gguf_impl *impl)
{
    hx_gguf *g = &impl->pub;
    const hx_gguf_kv *kv = hx_gguf_find(g, "general.alignment");
    g->alignment = 32;
    if (!kv) return HX_OK;
    size_t at = str_at(r, kv->key) + 8 + (size_t)kv->key.len + 4; /* the value */
    r->what = "key";
    r->who = kv->key;
    if (kv->type != HX_GGUF_U32)
        return fail_at(r, at, "has type %s, expected u32", value_type_name[kv->type]);
    if (kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)) != 0)
        return fail_at(r, at, "value %" PRIu64 " is not a nonzero power of two", kv->v.u64);
    g->alignment = kv->v.u64;
    r->what = NULL;
    return HX_OK;
}

/* Reads one tensor info and derives its size. The data range is checked later, once the start of
 * the data section is known. */
static hx_status parse_tensor(reader *r, const hx_gguf *g, hx_gguf_tensor *t)
{
    hx_status st;
    size_t at = r->pos;
    r->what = NULL;
    if ((st = rd_str(r, "tensor name", &t->name)) != HX_OK) return st;
    if (!hx_utf8_valid(t->name.ptr, t->name.len))
        return fail_at(r, at, "tensor name of %" PRIu64 " bytes is not valid UTF-8", t->name.len);
    r->what = "tensor";
    r->who = t->name;
    at = r->pos;
    if ((st = rd_u32(r, "dimension count", &t->n_dims)) != HX_OK) return st;
    if (t->n_dims < 1 || t->n_dims > 4)
        return fail_at(r, at, "n_dims %" PRIu32 " is outside 1..4", t->n_dims);
    int64_t n_elem = 1;
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        at = r->pos;
        if ((st = rd_uint(r, 8, "dimension", &t->ne[d])) != HX_OK) return st;
        if (t->ne[d] == 0)
            return fail_at(r, at, "ne[%" PRIu32 "] is 0 (every dimension must be at least 1)", d);
        if (t->ne[d] > (uint64_t)(INT64_MAX / n_elem))
            return fail_at(r, at, "ne[%" PRIu32 "] = %" PRIu64 " makes the element count "
                           "overflow int64", d, t->ne[d]);
        n_elem *= (int64_t)t->ne[d];
    }
    at = r->pos;
    if ((st = rd_u32(r, "ggml type", &t->ggml_type)) != HX_OK) return st;
    uint32_t block_n, block_bytes;
    if (!hx_gguf_type_traits(t->ggml_type, &block_n, &block_bytes))
        return fail_at(r, at, "unknown ggml type id %" PRIu32, t->ggml_type);
    if (t->ne[0] % block_n != 0)
        return fail_at(r, at, "ne[0] = %" PRIu64 " is not a multiple of the %s block size "
                       "%" PRIu32, t->ne[0], hx_gguf_type_name(t->ggml_type), block_n);
    /* n_elem / block_n blocks: exact, since ne[0] (a factor of n_elem) is a multiple. */
    uint64_t n_blocks = (uint64_t)n_elem / block_n;
    if (n_blocks > UINT64_MAX / block_bytes)
        return fail_at(r, at, "%" PRIu64 " blocks of %s overflow a 64-bit byte count", n_blocks,
                       hx_gguf_type_name(t->ggml_type));
    t->n_bytes = n_blocks * block_bytes;
    at = r->pos;
    if ((st = rd_uint(r, 8, "tensor offset", &t->offset)) != HX_OK) return st;
    if (t->offset % g->alignment != 0)
        return fail_at(r, at, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                       t->offset, g->alignment);
    return HX_OK;
}

/* Checks that names are unique, that every tensor lies inside the data section and that no two
 * overlap, and points each tensor at its bytes. */
static hx_status check_tensors(reader *r, gguf_impl *impl)
{
    hx_gguf *g = &impl->pub;
    uint64_t n = g->n_tensors;
    const void **by_off = NULL;
    hx_status st = HX_OK;
    if (n == 0) return HX_OK;

    impl->tensor_by_name = sorted_index(g->tensors, sizeof *g->tensors, n, cmp_tensor_by_name);
    if (!impl->tensor_by_name) return fail_nomem(r, "tensor index");
    const void *first, *second;
    if (find_duplicate(impl->tensor_by_name, n, tensor_name, &first, &second)) {
        hx_gguf_str k = ((const hx_gguf_tensor *)second)->name;
        return fail_at(r, str_at(r, k), "duplicate tensor name '%.*s%s' (first defined at byte "
                       "%zu)", show_len(k), k.ptr, show_more(k),
                       str_at(r, ((const hx_gguf_tensor *)first)->name));
    }

    uint64_t data_bytes = r->size - g->data_offset;
    for (uint64_t i = 0; i < n; i++) {
        hx_gguf_tensor *t = &g->tensors[i];
        r->what = "tensor";
        r->who = t->name;
        if (t->offset > data_bytes || t->n_bytes > data_bytes - t->offset)
            return fail_at(r, SIZE_MAX, "%" PRIu64 " bytes at data offset %" PRIu64 " run past "
                           "the end of the file: the data section starts at byte %" PRIu64
                           " and holds %" PRIu64 " bytes (file size %zu)", t->n_bytes, t->offset,
                           g->data_offset, data_bytes, r->size);
        t->data = r->base + g->data_offset + t->offset;
    }
    r->what = NULL;

    by_off = sorted_index(g->tensors, sizeof *g->tensors, n, cmp_tensor_by_offset);
    if (!by_off) return fail_nomem(r, "tensor offset index");
    for (uint64_t i = 1; i < n; i++) {
        const hx_gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->n_bytes > b->offset) {
            st = fail_at(r, (size_t)(g->data_offset + b->offset), "tensors '%.*s%s' (data [%"
                         PRIu64 ", %" PRIu64 ")) and '%.*s%s' (data [%" PRIu64 ", %" PRIu64
                         ")) overlap", show_len(a->name), a->name.ptr, show_more(a->name),
                         a->offset, a->offset + a->n_bytes, show_len(b->name), b->name.ptr,
                         show_more(b->name), b->offset, b->offset + b->n_bytes);
            break;
        }
    }
    hx_free(by_off);
    return st;
}

static hx_status parse(reader *r, gguf_impl *impl)
{
    hx_gguf *g = &impl->pub;
    hx_status st;
    if ((st = parse_header(r, g)) != HX_OK) return st;
    if ((st = parse_kvs(r, impl)) != HX_OK) return st;
    if ((st = parse_alignment(r, impl)) != HX_OK) return st;

    uint64_t n = g->n_tensors, cap = 0;
    g->n_tensors = 0; /* counts infos filled so far */
    for (uint64_t i = 0; i < n; i++) {
        if (i == cap) {
            hx_gguf_tensor *t = grow(g->tensors, sizeof *t, &cap, n);
            if (!t) return fail_nomem(r, "tensor table");
            g->tensors = t;
        }
        memset(&g->tensors[i], 0, sizeof g->tensors[i]);
        if ((st = parse_tensor(r, g, &g->tensors[i])) != HX_OK) return st;
        g->n_tensors = i + 1;
    }
    r->what = NULL;

    /* The data section starts at the next multiple of the alignment. A file without tensors may
     * end before that padding (writers skip it when there is no data), so it is clamped there. */
    uint64_t a = g->alignment;
    g->data_offset = ((uint64_t)r->pos + a - 1) / a * a;
    if (g->data_offset > r->size) {
        if (n != 0)
            return fail_at(r, r->pos, "file ends inside the padding before the data section "
                           "(data starts at byte %" PRIu64 ", file size %zu)", g->data_offset,
                           r->size);
        g->data_offset = r->size;
    }
    return check_tensors(r, impl);
}

/* ---- lifetime ---- */

/* Parses g->base[0..size) into impl; on failure closes impl. `name` is the caller's text for
 * messages, valid even when the owned copy could not be made. */
static hx_status open_common(gguf_impl *impl, const char *name, hx_gguf **out, hx_err *err)
{
    reader r = { .base = impl->pub.base, .size = impl->pub.size, .name = name, .err = err };
    hx_status st = parse(&r, impl);
    if (st != HX_OK) goto fail;
    *out = &impl->pub;
    return HX_OK;
fail:
    hx_gguf_close(&impl->pub);
    return st;
}

hx_status hx_gguf_open(const char *path, hx_gguf **out, hx_err *err)
{
    if (!path || !out)
        return hx_err_set(err, HX_E_INVALID, "hx_gguf_open: path and out must not be NULL");
    hx_status st;
    gguf_impl *impl = hx_calloc(1, sizeof *impl);
    if (!impl) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory (parser state)", path);
    if (!(impl->pub.path = hx_strdup(path))) {
        st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory (path copy)", path);
        goto fail;
    }
    if ((st = hx_map_file(path, &impl->pub.map, err)) != HX_OK) goto fail;
    impl->pub.base = impl->pub.map.data;
    impl->pub.size = impl->pub.map.size;
    return open_common(impl, path, out, err); /* closes impl itself on failure */
fail:
    hx_gguf_close(&impl->pub);
    return st;
}

hx_status hx_gguf_open_memory(const void *data, size_t size, const char *name, hx_gguf **out,
                              hx_err *err)
{
    if (!name) name = "<memory>";
    if ((!data && size) || !out)
        return hx_err_set(err, HX_E_INVALID, "%s: hx_gguf_open_memory: data (when size > 0) and "
                          "out must not be NULL", name);
    hx_status st;
    gguf_impl *impl = hx_calloc(1, sizeof *impl);
    if (!impl) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory (parser state)", name);
    if (!(impl->pub.path = hx_strdup(name))) {
        st = hx_err_set(err, HX_E_NOMEM, "%s: out of memory (name copy)", name);
        goto fail;
    }
    impl->pub.base = data;
    impl->pub.size = size;
    return open_common(impl, name, out, err);
fail:
    hx_gguf_close(&impl->pub);
    return st;
}

void hx_gguf_close(hx_gguf *g)
{
    if (!g) return;
    gguf_impl *impl = (gguf_impl *)g;
    hx_free((void *)impl->tensor_by_name);
    hx_free((void *)impl->kv_by_key);
    hx_free(g->tensors);
    hx_free(g->kv);
    hx_unmap(&g->map); /* zeroed when parsing caller memory: a no-op then */
    hx_free(g->path);
    hx_free(impl);
}

/* ---- lookups ---- */

const hx_gguf_kv *hx_gguf_find(const hx_gguf *g, const char *key)
{
    if (!g) return NULL;
    const gguf_impl *impl = (const gguf_impl *)g;
    return index_find(impl->kv_by_key, g->n_kv, key, kv_name);
}

const hx_gguf_tensor *hx_gguf_find_tensor(const hx_gguf *g, const char *name)
{
    if (!g) return NULL;
    const gguf_impl *impl = (const gguf_impl *)g;
    return index_find(impl->tensor_by_name, g->n_tensors, name, tensor_name);
}

bool hx_gguf_get_u64(const hx_gguf *g, const char *key, uint64_t *out)
{
    const hx_gguf_kv *kv = hx_gguf_find(g, key);
    if (!kv) return false;
    switch (kv->type) {
    case HX_GGUF_U8: case HX_GGUF_U16: case HX_GGUF_U32: case HX_GGUF_U64:
        *out = kv->v.u64;
        return true;
    case HX_GGUF_I8: case HX_GGUF_I16: case HX_GGUF_I32: case HX_GGUF_I64:
        if (kv->v.i64 < 0) return false;
        *out = (uint64_t)kv->v.i64;
        return true;
    default:
        return false;
    }
}

bool hx_gguf_get_f64(const hx_gguf *g, const char *key, double *out)
{
    const hx_gguf_kv *kv = hx_gguf_find(g, key);
    if (!kv) return false;
    switch (kv->type) {
    case HX_GGUF_F32: case HX_GGUF_F64:
        *out = kv->v.f64;
        return true;
    case HX_GGUF_U8: case HX_GGUF_U16: case HX_GGUF_U32: case HX_GGUF_U64:
        *out = (double)kv->v.u64;
        return true;
    case HX_GGUF_I8: case HX_GGUF_I16: case HX_GGUF_I32: case HX_GGUF_I64:
        *out = (double)kv->v.i64;
        return true;
    default:
        return false;
    }
}

bool hx_gguf_get_bool(const hx_gguf *g, const char *key, bool *out)
{
    const hx_gguf_kv *kv = hx_gguf_find(g, key);
    if (!kv || kv->type != HX_GGUF_BOOL) return false;
    *out = kv->v.u64 != 0; /* ggml writes 0 or 1; any other byte is read as true, as ggml does */
    return true;
}

bool hx_gguf_get_str(const hx_gguf *g, const char *key, hx_gguf_str *out)
{
    const hx_gguf_kv *kv = hx_gguf_find(g, key);
    if (!kv || kv->type != HX_GGUF_STRING) return false;
    *out = kv->v.str;
    return true;
}

bool hx_gguf_str_array(const hx_gguf_kv *kv, uint64_t *pos, const unsigned char **cursor,
                       hx_gguf_str *out)
{
    if (!kv || kv->type != HX_GGUF_ARRAY || kv->arr_type != HX_GGUF_STRING) return false;
    if (*pos >= kv->arr_n) return false;
    if (*pos == 0) *cursor = kv->arr_data;
    const unsigned char *p = *cursor;
    out->len = load_le(p, 8);
    out->ptr = (const char *)p + 8;
    *cursor = p + 8 + out->len;
    (*pos)++;
    return true;
}

bool hx_gguf_str_eq(hx_gguf_str s, const char *t)
{
    size_t n = strlen(t);
    return s.len == n && (n == 0 || memcmp(s.ptr, t, n) == 0);
}

const char *hx_gguf_type_name(uint32_t ggml_type)
{
    if (ggml_type >= HX_COUNTOF(ggml_types) || !ggml_types[ggml_type].name) return "unknown";
    return ggml_types[ggml_type].name;
}

bool hx_gguf_type_traits(uint32_t ggml_type, uint32_t *block_n, uint32_t *block_bytes)
{
    if (ggml_type >= HX_COUNTOF(ggml_types) || !ggml_types[ggml_type].name) return false;
    if (block_n) *block_n = ggml_types[ggml_type].block_n;
    if (block_bytes) *block_bytes = ggml_types[ggml_type].block_bytes;
    return true;
}
