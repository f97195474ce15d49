/* describe.h - a model's description as JSON: the data behind `hearth inspect` (text and
 * --json) and hx_model_info_json(). One builder, so the two outputs never disagree. */
#ifndef HX_FORMAT_DESCRIBE_H
#define HX_FORMAT_DESCRIBE_H
#include <jansson.h>

#include "format/model_files.h"

/* Returns a new JSON object (caller json_decref's it), or NULL when out of memory. Reads
 * tokenizer.json (for its type and vocabulary size) when the model has one. */
json_t *hx_model_describe(const hx_model_files *mf);

#endif
