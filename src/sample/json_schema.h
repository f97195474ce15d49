/* json_schema.h - JSON Schema (a practical subset) to grammar text for sample/grammar.h.
 *
 * Supported: type (object, array, string, number, integer, boolean, null, and arrays of types),
 * properties (generated in declared order; required ones always, optional ones may be left
 * out), required, additionalProperties (false, true or a schema; when absent, objects with
 * properties get no extra keys, since a generator never needs them, and objects without
 * properties take any keys), enum, const, items, minItems/maxItems, anyOf/oneOf (both as "one
 * of these"), $ref to "#" or "#/..." pointers ($defs, definitions), minLength/maxLength, the
 * string formats date, time, date-time, uuid and email (loosely), pattern (a regex in the
 * dialect of sample/regex.h, searched unless anchored; not beside format or the lengths), and on
 * integers only minimum,
 * maximum, exclusiveMinimum and exclusiveMaximum (numbers, real ones rounded inwards; the
 * exclusive ones also in draft-4 boolean form; written digit by digit so the grammar takes
 * exactly the integers in range, with bounds past 16 digits clamped to the 16 digits an integer
 * may have; refused on numbers and beside enum, const, anyOf, oneOf or $ref). Annotations
 * (title, description, default, examples, $schema, $id, $comment) are ignored. Every other
 * keyword is refused by name, never silently dropped. Whitespace between tokens is kept tight
 * (nothing, one space, or a newline and at most 12 blanks) so a small model cannot ramble.
 * Known looseness: an extra key allowed by additionalProperties may repeat a declared name, and
 * oneOf is not checked for exclusivity. */
#ifndef HX_SAMPLE_JSON_SCHEMA_H
#define HX_SAMPLE_JSON_SCHEMA_H
#include <jansson.h>

#include "base/err.h"

/* Writes grammar text (for hx_grammar_compile) accepting exactly the JSON texts the schema
 * describes, within the subset above. schema is borrowed. On success *out_grammar_text is
 * NUL-terminated text the caller frees with hx_free. HX_E_UNSUPPORTED names the keyword
 * ("json_schema: 'patternProperties' is not supported (at #/properties/a)"); HX_E_INVALID names
 * a malformed schema (wrong keyword type, dangling $ref, minItems > maxItems, integer bounds that
 * leave no integer); HX_E_NOMEM. */
hx_status hx_json_schema_to_grammar(json_t *schema, char **out_grammar_text, hx_err *err);

/* Grammar text for any JSON object (response_format {"type": "json_object"}); static, borrowed. */
const char *hx_json_object_grammar(void);

#endif
