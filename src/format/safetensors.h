/* safetensors.h - safetensors file parser, validating, zero-copy.
 *
 * Byte layout: u64 little-endian N | N bytes of UTF-8 JSON header | data.
 * The header maps each tensor name to {"dtype": "F16", "shape": [..], "data_offsets": [b, e]}
 * (offsets relative to the start of the data) and may hold "__metadata__": {string: string}.
 *
 * The parser checks the header length against the file, the JSON, every dtype and shape,
 * that e - b equals the element count times the dtype size (without overflow), that ranges lie
 * inside the data and do not overlap, and reports the first problem naming the file and tensor.
 * Interpreting names (Hugging Face or MLX conventions) is format/model_files.c's job. */
#ifndef HX_FORMAT_SAFETENSORS_H
#define HX_FORMAT_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/mapfile.h"

typedef enum {
    HX_ST_BOOL, HX_ST_U8, HX_ST_I8, HX_ST_U16, HX_ST_I16, HX_ST_F16, HX_ST_BF16, HX_ST_U32,
    HX_ST_I32, HX_ST_F32, HX_ST_U64, HX_ST_I64, HX_ST_F64, HX_ST_F8_E4M3, HX_ST_F8_E5M2,
    HX_ST_DTYPE_COUNT
} hx_st_dtype;

#define HX_ST_MAX_DIMS 8

typedef struct {
    char                *name;      /* owned, NUL-terminated */
    hx_st_dtype          dtype;
    int32_t              n_dims;    /* 0 (scalar) .. HX_ST_MAX_DIMS */
    int64_t              shape[HX_ST_MAX_DIMS]; /* outermost first */
    uint64_t             begin, end; /* relative to the data section */
    const unsigned char *data;      /* into the mapping */
} hx_st_tensor;

typedef struct hx_safetensors {
    char         *path;          /* owned copy */
    hx_mapped     map;
    const unsigned char *base;
    size_t        size;
    uint64_t      header_len;
    int64_t       n_tensors;
    hx_st_tensor *tensors;       /* sorted by name */
    char         *meta_format;   /* __metadata__.format ("pt", "mlx", ...) or NULL; owned */
} hx_safetensors;

/* Maps and parses path; same contract as hx_gguf_open. */
hx_status hx_safetensors_open(const char *path, hx_safetensors **out, hx_err *err);
hx_status hx_safetensors_open_memory(const void *data, size_t size, const char *name,
                                     hx_safetensors **out, hx_err *err);
void      hx_safetensors_close(hx_safetensors *st); /* accepts NULL and partly built objects */

const hx_st_tensor *hx_safetensors_find(const hx_safetensors *st, const char *name);

/* "F16", "BF16", ... and element sizes in bytes. */
const char *hx_st_dtype_name(hx_st_dtype dt);
size_t      hx_st_dtype_size(hx_st_dtype dt);

#endif
