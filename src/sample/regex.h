/* regex.h - a regular expression to grammar text for sample/grammar.h.
 *
 * The dialect is the part Python's re and ECMAScript agree on: literals, `.`, classes [a-z] [^..]
 * with ranges and escapes, \d \w \s \D \W \S, groups ( ) (?: ) (?P<n> ) (?<n> ), alternation,
 * and the quantifiers * + ? {m} {m,} {,n} {m,n} (a lazy `?` after one is accepted: it changes
 * which match is found, not which texts match). Escapes: \n \t \r \f \v \0 \xHH \uHHHH
 * \UHHHHHHHH and any escaped punctuation. `^` / \A may open and `$` / \Z / \z may close a
 * top-level alternative. Refused by name (HX_E_UNSUPPORTED): backreferences, lookaround, \b \B,
 * inline flags such as (?i), possessive quantifiers, anchors anywhere else.
 *
 * Where the two dialects differ the grammar keeps to what both accept, since constraining
 * generation to a subset is always safe: `.` excludes \n \r U+2028 U+2029; \d \w \s are the
 * ASCII classes; \W is the ASCII non-word characters; \S excludes Unicode white space too. */
#ifndef HX_SAMPLE_REGEX_H
#define HX_SAMPLE_REGEX_H
#include <stddef.h>

#include "base/err.h"

enum {
    /* The regex applies to the content of a JSON string, as JSON Schema's `pattern` does: the
     * grammar matches the content as written inside the quotes (", \ and control characters
     * as JSON escapes), and a side of a top-level alternative not anchored by ^ or $ may carry
     * any other characters (a search, not a full match). Without the flag the text itself
     * must match the whole regex, as vLLM's guided_regex does. */
    HX_REGEX_JSON_STRING = 1u << 0,
};

/* Writes grammar rules for re[0..len) (UTF-8) to *out (NUL-terminated; free with hx_free): the
 * rule named `rule` matches the language, and helper rules, if any, are named `rule` plus a
 * suffix starting with '-'. With rule "root" and flags 0 the text is a whole grammar for
 * hx_grammar_compile. HX_E_INVALID for a malformed regex and HX_E_UNSUPPORTED for a feature
 * outside the dialect, err naming it and the offset ("regex: backreferences are not supported
 * (at offset 4)"); HX_E_NOMEM. */
hx_status hx_regex_to_grammar(const char *re, size_t len, const char *rule, unsigned flags,
                              char **out, hx_err *err);

#endif
