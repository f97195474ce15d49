/* safetensors.c - validating, zero-copy parser of safetensors files.
 *
 * Byte layout: u64 little-endian N | N bytes of UTF-8 JSON header | data section.
 * The module owns the mapping (when opened from a path), a copy of the name used in messages,
 * the tensor table (sorted by name, so lookups are a binary search) and the metadata "format"
 * string. Tensor data is never copied: hx_st_tensor.data points into the mapped bytes.
 * It does not interpret tensor names or metadata beyond "format" (format/model_files.c does).
 * Invariant of a successfully opened object: every tensor's [begin, end) lies inside the data
 * section, holds exactly product(shape) * dtype size bytes, and no two non-empty ranges overlap.
 * Bytes of the data section that no tensor covers are tolerated: nothing ever reads them. */
#include "safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* The reference implementation refuses headers over 100 MB; a larger one is almost surely a
 * corrupt length, and refusing it keeps jansson from building a huge tree from hostile input. */
#define MAX_HEADER_BYTES ((uint64_t)100 * 1024 * 1024)

/* ---- dtype table ---- */

static const struct {
    const char *name;
    size_t      size;
} dtypes[HX_ST_DTYPE_COUNT] = {
    [HX_ST_BOOL]    = { "BOOL",    1 },
    [HX_ST_U8]      = { "U8",      1 },
    [HX_ST_I8]      = { "I8",      1 },
    [HX_ST_U16]     = { "U16",     2 },
    [HX_ST_I16]     = { "I16",     2 },
    [HX_ST_F16]     = { "F16",     2 },
    [HX_ST_BF16]    = { "BF16",    2 },
    [HX_ST_U32]     = { "U32",     4 },
    [HX_ST_I32]     = { "I32",     4 },
    [HX_ST_F32]     = { "F32",     4 },
    [HX_ST_U64]     = { "U64",     8 },
    [HX_ST_I64]     = { "I64",     8 },
    [HX_ST_F64]     = { "F64",     8 },
    [HX_ST_F8_E4M3] = { "F8_E4M3", 1 },
    [HX_ST_F8_E5M2] = { "F8_E5M2", 1 },
};

const char *hx_st_dtype_name(hx_st_dtype dt)
{
    if ((unsigned)dt >= HX_ST_DTYPE_COUNT) return "?";
    return dtypes[dt].name;
}

size_t hx_st_dtype_size(hx_st_dtype dt)
{
    if ((unsigned)dt >= HX_ST_DTYPE_COUNT) return 0;
    return dtypes[dt].size;
}

/* ---- lifetime ---- */

void hx_safetensors_close(hx_safetensors *st)
{
    if (!st) return;
    /* tensors came from hx_calloc and n_tensors is set right after, so names not yet copied
     * are NULL, which hx_free accepts. */
    if (st->tensors)
        for (int64_t i = 0; i < st->n_tensors; i++) hx_free(st->tensors[i].name);
    hx_free(st->tensors);
    hx_free(st->meta_format);
    hx_unmap(&st->map);
    hx_free(st->path);
    hx_free(st);
}

/* ---- helpers ---- */

/* The JSON type of v in words, for "expected X, found Y" messages. */
static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:  return "an object";
    case JSON_ARRAY:   return "an array";
    case JSON_STRING:  return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL:    return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:   return "a boolean";
    case JSON_NULL:    return "null";
    }
    return "an unknown value";
}

/* Writes "[2, 3]" into buf (always NUL-terminated). 8 dims of 19 digits fit in 192 bytes. */
static void format_shape(char *buf, size_t cap, const int64_t *shape, int32_t n_dims)
{
    size_t off = 0;
    buf[0] = '\0';
    off += (size_t)snprintf(buf + off, cap - off, "[");
    for (int32_t i = 0; i < n_dims && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? ", " : "",
                                (long long)shape[i]);
    if (off < cap) snprintf(buf + off, cap - off, "]");
}

/* Reads a JSON integer that must be >= 0. jansson already rejects integers outside long long,
 * so every accepted value fits int64_t. Returns false for anything else (reals included). */
static bool get_nonneg_int(const json_t *v, int64_t *out)
{
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (int64_t)x;
    return true;
}

/* Validates one tensor entry and fills t (all but name and data). data_size is the length of the
 * data section; every range is checked against it here. */
static hx_status parse_tensor(const char *path, const char *name, const json_t *entry,
                              uint64_t data_size, hx_st_tensor *t, hx_err *err)
{
    if (!json_is_object(entry))
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s' is %s, expected an object", path,
                          name, json_kind(entry));

    /* dtype */
    const json_t *jdt = json_object_get(entry, "dtype");
    if (!jdt)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s' has no \"dtype\"", path, name);
    if (!json_is_string(jdt))
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': \"dtype\" is %s, expected a string",
                          path, name, json_kind(jdt));
    const char *dts = json_string_value(jdt);
    int dt = 0;
    while (dt < HX_ST_DTYPE_COUNT && strcmp(dtypes[dt].name, dts) != 0) dt++;
    if (dt == HX_ST_DTYPE_COUNT)
        return hx_err_set(err, HX_E_FORMAT,
                          "%s: tensor '%s': unknown dtype '%s' (expected one of BOOL, U8, I8, "
                          "U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2)",
                          path, name, dts);
    t->dtype = (hx_st_dtype)dt;

    /* shape */
    const json_t *jsh = json_object_get(entry, "shape");
    if (!jsh)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s' has no \"shape\"", path, name);
    if (!json_is_array(jsh))
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': \"shape\" is %s, expected an array",
                          path, name, json_kind(jsh));
    size_t n_dims = json_array_size(jsh);
    if (n_dims > HX_ST_MAX_DIMS)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': shape has %zu dimensions, at most %d "
                          "are supported", path, name, n_dims, HX_ST_MAX_DIMS);
    t->n_dims = (int32_t)n_dims;
    for (size_t i = 0; i < n_dims; i++) {
        const json_t *d = json_array_get(jsh, i);
        if (!get_nonneg_int(d, &t->shape[i]))
            return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': shape[%zu] is %s, expected a "
                              "non-negative integer", path, name, i,
                              json_is_integer(d) ? "negative" : json_kind(d));
    }

    /* data_offsets */
    const json_t *jof = json_object_get(entry, "data_offsets");
    if (!jof)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s' has no \"data_offsets\"", path, name);
    if (!json_is_array(jof) || json_array_size(jof) != 2)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': \"data_offsets\" must be an array of "
                          "2 integers [begin, end]", path, name);
    int64_t b, e;
    if (!get_nonneg_int(json_array_get(jof, 0), &b) || !get_nonneg_int(json_array_get(jof, 1), &e))
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': \"data_offsets\" must hold 2 "
                          "non-negative integers", path, name);
    if (b > e)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end "
                          "before they begin", path, name, (long long)b, (long long)e);
    if ((uint64_t)e > data_size)
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] reach past "
                          "the end of the data section (%llu bytes)", path, name, (long long)b,
                          (long long)e, (unsigned long long)data_size);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;

    /* Byte count. The product is taken over the non-zero dimensions and must fit in int64 even
     * when another dimension is 0: code downstream computes strides as products of dimensions,
     * and a shape like [0, 2^40, 2^40] would overflow those although it holds no element. */
    char shape_s[192];
    uint64_t n_nonzero = 1;
    bool has_zero = false;
    bool overflow = false;
    for (int32_t i = 0; i < t->n_dims; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (d == 0) { has_zero = true; continue; }
        if (n_nonzero > (uint64_t)INT64_MAX / d) { overflow = true; break; }
        n_nonzero *= d;
    }
    const uint64_t elt = dtypes[t->dtype].size;
    if (overflow || n_nonzero > (uint64_t)INT64_MAX / elt) {
        format_shape(shape_s, sizeof shape_s, t->shape, t->n_dims);
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': shape %s of %s overflows a 64-bit "
                          "byte count", path, name, shape_s, dtypes[t->dtype].name);
    }
    const uint64_t need = has_zero ? 0 : n_nonzero * elt;
    if (t->end - t->begin != need) {
        format_shape(shape_s, sizeof shape_s, t->shape, t->n_dims);
        return hx_err_set(err, HX_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu "
                          "bytes but shape %s of %s needs %llu", path, name,
                          (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)(t->end - t->begin), shape_s,
                          dtypes[t->dtype].name, (unsigned long long)need);
    }
    return HX_OK;
}

/* Validates "__metadata__": an object of string values. Copies "format" into st->meta_format. */
static hx_status parse_metadata(hx_safetensors *st, const json_t *meta, hx_err *err)
{
    if (!json_is_object(meta))
        return hx_err_set(err, HX_E_FORMAT, "%s: \"__metadata__\" is %s, expected an object of "
                          "strings", st->path, json_kind(meta));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v))
            return hx_err_set(err, HX_E_FORMAT, "%s: \"__metadata__\" member '%s' is %s, expected "
                              "a string", st->path, key, json_kind(v));
        if (strcmp(key, "format") == 0) {
            st->meta_format = hx_strdup(json_string_value(v));
            if (!st->meta_format)
                return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", st->path);
        }
    }
    return HX_OK;
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const hx_st_tensor *)a)->name, ((const hx_st_tensor *)b)->name);
}

static int cmp_by_range(const void *a, const void *b)
{
    const hx_st_tensor *x = *(const hx_st_tensor *const *)a;
    const hx_st_tensor *y = *(const hx_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reports the first overlap between non-empty ranges. Empty ranges (a dimension of 0) hold no
 * byte, so they overlap nothing wherever they sit. Sorting by begin makes one sweep enough: a
 * range overlaps an earlier one exactly when it begins before the furthest end seen so far. */
static hx_status check_overlaps(hx_safetensors *st, hx_err *err)
{
    if (st->n_tensors < 2) return HX_OK;
    hx_st_tensor **order = hx_calloc((size_t)st->n_tensors, sizeof *order);
    if (!order) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", st->path);
    for (int64_t i = 0; i < st->n_tensors; i++) order[i] = &st->tensors[i];
    qsort(order, (size_t)st->n_tensors, sizeof *order, cmp_by_range);

    hx_status s = HX_OK;
    const hx_st_tensor *furthest = NULL; /* the non-empty range with the largest end so far */
    for (int64_t i = 0; i < st->n_tensors; i++) {
        const hx_st_tensor *t = order[i];
        if (t->begin == t->end) continue;
        if (furthest && t->begin < furthest->end) {
            s = hx_err_set(err, HX_E_FORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] "
                           "overlap", st->path, furthest->name,
                           (unsigned long long)furthest->begin, (unsigned long long)furthest->end,
                           t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
            break;
        }
        if (!furthest || t->end > furthest->end) furthest = t;
    }
    hx_free(order);
    return s;
}

/* ---- core ---- */

/* Parses st->base[0 .. st->size) into st. On failure st may be partly built; the caller closes
 * it. */
static hx_status parse(hx_safetensors *st, hx_err *err)
{
    hx_status s;
    json_t *root = NULL;
    const char *path = st->path;

    if (st->size < 8) {
        s = hx_err_set(err, HX_E_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header "
                       "length", path, st->size);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | st->base[i]; /* little-endian on any host */
    const uint64_t avail = (uint64_t)st->size - 8;           /* no overflow: size >= 8 */
    if (n > avail) {
        s = hx_err_set(err, HX_E_FORMAT, "%s: header length %llu reaches past the end of the file "
                       "(%zu bytes; at most %llu bytes follow the length)", path,
                       (unsigned long long)n, st->size, (unsigned long long)avail);
        goto fail;
    }
    if (n > MAX_HEADER_BYTES) {
        s = hx_err_set(err, HX_E_FORMAT, "%s: header length %llu is over the %llu-byte limit", path,
                       (unsigned long long)n, (unsigned long long)MAX_HEADER_BYTES);
        goto fail;
    }
    st->header_len = n;
    const uint64_t data_size = avail - n;
    const unsigned char *data = st->base + 8 + n;

    /* jansson checks UTF-8 (overlongs and surrogates included), rejects "\u0000" in strings
     * (names must be C strings) and, with this flag, duplicate keys, which would otherwise let
     * two tools read different tensors from the same file. */
    json_error_t jerr;
    root = json_loadb((const char *)st->base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        s = hx_err_set(err, HX_E_FORMAT, "%s: header is not valid JSON (line %d, column %d, "
                       "header byte %d): %s", path, jerr.line, jerr.column, jerr.position,
                       jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        s = hx_err_set(err, HX_E_FORMAT, "%s: header is %s, expected a JSON object", path,
                       json_kind(root));
        goto fail;
    }

    const json_t *meta = json_object_get(root, "__metadata__");
    if (meta) {
        s = parse_metadata(st, meta, err);
        if (s != HX_OK) goto fail;
    }

    size_t n_tensors = json_object_size(root) - (meta ? 1 : 0);
    if (n_tensors > 0) {
        st->tensors = hx_calloc(n_tensors, sizeof *st->tensors);
        if (!st->tensors) {
            s = hx_err_set(err, HX_E_NOMEM, "%s: out of memory for %zu tensors", path, n_tensors);
            goto fail;
        }
        st->n_tensors = (int64_t)n_tensors;
    }

    /* jansson keeps insertion order, so the first bad tensor reported is the first in the file. */
    size_t i = 0;
    const char *key;
    json_t *entry;
    json_object_foreach(root, key, entry) {
        if (strcmp(key, "__metadata__") == 0) continue;
        HX_ASSERT(i < n_tensors);
        hx_st_tensor *t = &st->tensors[i++];
        s = parse_tensor(path, key, entry, data_size, t, err);
        if (s != HX_OK) goto fail;
        t->name = hx_strdup(key);
        if (!t->name) {
            s = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        t->data = data + t->begin;
    }
    HX_ASSERT(i == n_tensors);

    if (n_tensors > 0) qsort(st->tensors, n_tensors, sizeof *st->tensors, cmp_by_name);
    s = check_overlaps(st, err);
    if (s != HX_OK) goto fail;

    json_decref(root);
    return HX_OK;
fail:
    json_decref(root); /* accepts NULL */
    return s;
}

/* Wraps the bytes in a new object and parses them; on failure closes it and leaves *out alone. */
static hx_status open_common(hx_safetensors *st, hx_safetensors **out, hx_err *err)
{
    hx_status s = parse(st, err);
    if (s != HX_OK) goto fail;
    *out = st;
    return HX_OK;
fail:
    hx_safetensors_close(st);
    return s;
}

hx_status hx_safetensors_open(const char *path, hx_safetensors **out, hx_err *err)
{
    hx_status s;
    if (!path || !out)
        return hx_err_set(err, HX_E_INVALID, "hx_safetensors_open: path and out are required");
    hx_safetensors *st = hx_calloc(1, sizeof *st);
    if (!st) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
    st->path = hx_strdup(path);
    if (!st->path) {
        s = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    s = hx_map_file(path, &st->map, err);
    if (s != HX_OK) goto fail;
    st->base = st->map.data;
    st->size = st->map.size;
    return open_common(st, out, err); /* closes st on failure */
fail:
    hx_safetensors_close(st);
    return s;
}

hx_status hx_safetensors_open_memory(const void *data, size_t size, const char *name,
                                     hx_safetensors **out, hx_err *err)
{
    if (!name) name = "<memory>";
    if (!out || (!data && size > 0))
        return hx_err_set(err, HX_E_INVALID, "%s: hx_safetensors_open_memory: out is required and "
                          "data may be NULL only when size is 0", name);
    hx_status s;
    hx_safetensors *st = hx_calloc(1, sizeof *st);
    if (!st) return hx_err_set(err, HX_E_NOMEM, "%s: out of memory", name);
    st->path = hx_strdup(name);
    if (!st->path) {
        s = hx_err_set(err, HX_E_NOMEM, "%s: out of memory", name);
        goto fail;
    }
    st->base = data; /* borrowed: the caller keeps the bytes alive until close */
    st->size = size;
    return open_common(st, out, err); /* closes st on failure */
fail:
    hx_safetensors_close(st);
    return s;
}

/* ---- lookup ---- */

const hx_st_tensor *hx_safetensors_find(const hx_safetensors *st, const char *name)
{
    if (!st || !name) return NULL;
    int64_t lo = 0, hi = st->n_tensors; /* the answer, if any, lies in [lo, hi) */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->tensors[mid].name);
        if (c == 0) return &st->tensors[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}
