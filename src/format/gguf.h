/* gguf.h - GGUF file parser (versions 2 and 3), validating, zero-copy.
 *
 * Byte layout (all little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv × { string key | u32 type | value }
 *   n_tensors × { string name | u32 n_dims | n_dims × u64 ne | u32 ggml_type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data
 * where string = u64 length + bytes (no NUL), and an array value = u32 elem_type | u64 n | items.
 * ne[0] is the innermost (contiguous) dimension; offsets are relative to the data section and
 * must be multiples of the alignment.
 *
 * The parser checks every count and length against the bytes that remain, every key and name
 * for valid UTF-8 and uniqueness, every tensor's byte range against the file (no overflow, no
 * overlap), and reports the first problem with the byte offset where it was found. It does not
 * interpret metadata (format/model_files.c does); it knows every ggml type's block size so it can
 * bound tensors of types hearth does not compute with. */
#ifndef HX_FORMAT_GGUF_H
#define HX_FORMAT_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/mapfile.h"

typedef enum {
    HX_GGUF_U8 = 0, HX_GGUF_I8 = 1, HX_GGUF_U16 = 2, HX_GGUF_I16 = 3, HX_GGUF_U32 = 4,
    HX_GGUF_I32 = 5, HX_GGUF_F32 = 6, HX_GGUF_BOOL = 7, HX_GGUF_STRING = 8, HX_GGUF_ARRAY = 9,
    HX_GGUF_U64 = 10, HX_GGUF_I64 = 11, HX_GGUF_F64 = 12, HX_GGUF_TYPE_COUNT
} hx_gguf_type;

typedef struct {
    const char *ptr; /* into the file; NOT NUL-terminated */
    uint64_t    len;
} hx_gguf_str;

typedef struct {
    hx_gguf_str  key;
    hx_gguf_type type;
    union {          /* scalars, widened; which member is valid follows `type` */
        uint64_t    u64; /* U8, U16, U32, U64, BOOL */
        int64_t     i64; /* I8, I16, I32, I64 */
        double      f64; /* F32, F64 */
        hx_gguf_str str; /* STRING */
    } v;
    /* ARRAY only: element type, count and the first element's bytes in the file. Arrays of
     * strings are length-prefixed items: walk them with hx_gguf_str_array. Nested arrays are
     * rejected by the parser. */
    hx_gguf_type         arr_type;
    uint64_t             arr_n;
    const unsigned char *arr_data;
} hx_gguf_kv;

typedef struct {
    hx_gguf_str          name;
    uint32_t             n_dims;      /* 1..4 */
    uint64_t             ne[4];       /* ne[0] innermost; unused dims are 1 */
    uint32_t             ggml_type;   /* the file's type id (see hx_gguf_type_name) */
    uint64_t             offset;      /* relative to the data section */
    uint64_t             n_bytes;
    const unsigned char *data;        /* into the mapping */
} hx_gguf_tensor;

/* Made only by hx_gguf_open*: the parser allocates it inside a larger private struct holding
 * sorted indexes for the lookups, so a hand-built hx_gguf must never be passed to them. */
typedef struct hx_gguf {
    char                *path;        /* owned copy of the name given to open */
    hx_mapped            map;         /* when opened from a file */
    const unsigned char *base;        /* the bytes parsed (the mapping or the caller's buffer) */
    size_t               size;
    uint32_t             version;
    uint64_t             n_kv;
    hx_gguf_kv          *kv;
    uint64_t             n_tensors;
    hx_gguf_tensor      *tensors;
    uint64_t             alignment;
    uint64_t             data_offset; /* start of the data section in the file */
} hx_gguf;

/* Maps and parses path. On success *out owns the parse (hx_gguf_close). On failure returns
 * HX_E_FORMAT (bad content), HX_E_IO/HX_E_NOTFOUND (cannot read) or HX_E_NOMEM, with err naming
 * the file and the problem, and leaves *out untouched. */
hx_status hx_gguf_open(const char *path, hx_gguf **out, hx_err *err);

/* Parses a caller-owned buffer that must outlive the result; `name` is used in messages. */
hx_status hx_gguf_open_memory(const void *data, size_t size, const char *name, hx_gguf **out,
                              hx_err *err);
void hx_gguf_close(hx_gguf *g); /* accepts NULL and partly built objects */

/* Lookups by key; NULL / false when absent or of an incompatible type. */
const hx_gguf_kv     *hx_gguf_find(const hx_gguf *g, const char *key);
const hx_gguf_tensor *hx_gguf_find_tensor(const hx_gguf *g, const char *name);
bool hx_gguf_get_u64(const hx_gguf *g, const char *key, uint64_t *out); /* any non-negative int */
bool hx_gguf_get_f64(const hx_gguf *g, const char *key, double *out);   /* any number */
bool hx_gguf_get_bool(const hx_gguf *g, const char *key, bool *out);
bool hx_gguf_get_str(const hx_gguf *g, const char *key, hx_gguf_str *out);

/* Iterates an array of strings: *pos starts at 0 and advances; returns false after the last
 * item. The parser validated the array, so this never reads outside it. */
bool hx_gguf_str_array(const hx_gguf_kv *kv, uint64_t *pos, const unsigned char **cursor,
                       hx_gguf_str *out);

/* True when s equals the NUL-terminated text t. */
bool hx_gguf_str_eq(hx_gguf_str s, const char *t);

/* ggml type names ("Q4_K", "F16", "IQ2_XS", ...); "unknown" for ids outside the table. Block
 * traits for any known id (false when unknown). */
const char *hx_gguf_type_name(uint32_t ggml_type);
bool        hx_gguf_type_traits(uint32_t ggml_type, uint32_t *block_n, uint32_t *block_bytes);

#endif
