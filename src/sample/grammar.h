/* grammar.h - structured output: a GBNF-like grammar, a recognizer over bytes, token masks.
 *
 * A grammar is compiled once from text into flat rules (immutable, shareable across threads).
 * An hx_grammar_state is the recognizer for one generation: a bounded set of stacks of grammar
 * positions (a pushdown recognizer in the style of llama.cpp's, so recursion such as nested JSON
 * works), advanced byte by byte; characters are Unicode code points, so a class like [^"\\]
 * accepts a multi-byte character one byte at a time and refuses invalid UTF-8. An
 * hx_grammar_vocab holds every token's bytes, by id and in a trie built once per tokenizer, so
 * the per-step mask walks shared prefixes once. This module does not sample and does not know the
 * server: the sampler calls hx_grammar_accept_bytes and, when a token is refused, hx_grammar_mask.
 *
 * Grammar text (one rule per `name ::= alternatives`; rules may span lines; `#` comments):
 *
 *     root   ::= "{" ws pair ("," ws pair)* "}"      # a literal, a group, repetition
 *     pair   ::= [a-z]+ ws ":" ws value              # classes with ranges; [^...] negates
 *     value  ::= "null" | [0-9]{1,3} | root          # alternatives; {m}, {m,}, {m,n}; ? * +
 *     ws     ::= [ \t\n]?                            # escapes: \n \t \r \\ \" \xHH \uHHHH
 *
 *     hx_grammar *g; hx_err err = {0};
 *     if (hx_grammar_compile(text, len, &g, &err) != HX_OK) puts(err.msg); // "grammar:3:7: ..."
 *     hx_grammar_state *s = hx_grammar_start(g);
 *     hx_grammar_mask(s, vocab, allowed);            // allowed[id] = 1 for tokens that fit
 *     hx_grammar_accept_bytes(s, piece, piece_len);  // after the token is chosen
 *     hx_grammar_state_free(s); hx_grammar_free(g);
 *
 * Bounds: a grammar is refused when left-recursive or when its start state already exceeds the
 * stack limits; at run time a byte whose expansion would exceed them is rejected (never a hang).
 * A compiled grammar is reference counted (hx_grammar_retain), so a cache and the requests using
 * it can share one. A state belongs to one thread at a time. Free functions accept NULL. */
#ifndef HX_SAMPLE_GRAMMAR_H
#define HX_SAMPLE_GRAMMAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "tokenizer/tokenizer.h"

#define HX_GRAMMAR_MAX_STACKS 4096 /* alternative parses alive at once */
#define HX_GRAMMAR_MAX_DEPTH  1024 /* positions on one stack (nesting depth) */
#define HX_GRAMMAR_MAX_REPEAT 4096 /* the largest m or n in X{m,n} */

typedef struct hx_grammar       hx_grammar;       /* immutable once compiled */
typedef struct hx_grammar_state hx_grammar_state; /* one generation's recognizer */
typedef struct hx_grammar_vocab hx_grammar_vocab; /* token bytes in a trie; immutable */

/* ---- grammars ---- */

/* Compiles src[0..len) (need not be NUL-terminated; UTF-8). The start rule is `root`. On error
 * returns HX_E_INVALID with err naming line and column, what was expected and what was found
 * ("grammar:2:9: expected ')' to close the group opened at 2:3, found end of input"), or
 * HX_E_UNSUPPORTED for a grammar beyond the limits above (left recursion, too many states).
 * HX_E_NOMEM on allocation failure. *out (free with hx_grammar_free) is written on success only. */
hx_status hx_grammar_compile(const char *src, size_t len, hx_grammar **out, hx_err *err);
/* Adds a reference to g and returns g. A compiled grammar starts with one reference; each
 * reference is dropped with hx_grammar_free, and the last one frees the grammar. Safe from any
 * thread (an atomic counter): one thread may retain or free while others read the grammar. */
hx_grammar *hx_grammar_retain(hx_grammar *g);
void        hx_grammar_free(hx_grammar *g); /* drops one reference */

/* ---- recognizer ---- */

/* A new state at the start of the root rule; NULL only when out of memory. Borrows g, which
 * must outlive the state. Free with hx_grammar_state_free. */
hx_grammar_state *hx_grammar_start(const hx_grammar *g);
hx_grammar_state *hx_grammar_state_copy(const hx_grammar_state *s); /* NULL: out of memory */
void              hx_grammar_state_free(hx_grammar_state *s);

/* Advances over p[0..n). True when every byte keeps at least one parse alive; false when some
 * byte is rejected (not in the language, invalid UTF-8, a limit reached, or out of memory), in
 * which case the state is left exactly as it was before the call. */
bool hx_grammar_accept_bytes(hx_grammar_state *s, const char *p, size_t n);

/* The bytes accepted so far form a complete sentence of the grammar (and no UTF-8 character is
 * half-read): the end-of-sequence token is allowed now. */
bool hx_grammar_done(const hx_grammar_state *s);

/* Some byte can still be accepted (a sentence may be both done and continuable: "1" in [0-9]+). */
bool hx_grammar_can_continue(const hx_grammar_state *s);

/* ---- token masks ---- */

/* Builds the trie from token bytes given by the caller: bytes[id][0..lens[id]) for id in
 * [0, n_vocab); a token of length 0 is never allowed. end_ids[0..n_end) are the tokens that end
 * generation (EOS, end of turn); they are allowed exactly when the state is done (their own
 * bytes, if any, are not matched). Everything is copied. HX_E_INVALID for a bad id, HX_E_NOMEM on
 * allocation failure. */
hx_status hx_grammar_vocab_init(const char *const *bytes, const size_t *lens, int32_t n_vocab,
                                const int32_t *end_ids, size_t n_end, hx_grammar_vocab **out,
                                hx_err *err);

/* The same from a tokenizer: each token's bytes recovered from its piece (byte-level BPE pieces
 * through the inverse GPT-2 byte table; SentencePiece "▁" as a space and <0xNN> as byte NN);
 * special (control) tokens are never allowed, except the end-of-turn tokens as end_ids. */
hx_status hx_grammar_vocab_from_tokenizer(const hx_tokenizer *t, hx_grammar_vocab **out,
                                          hx_err *err);
void      hx_grammar_vocab_free(hx_grammar_vocab *v);
int32_t   hx_grammar_vocab_n_vocab(const hx_grammar_vocab *v);

/* The bytes token id matches, as the vocab holds them (a copy; borrowed, valid as long as v):
 * *len is 0 for the tokens never allowed (no bytes, special tokens) and for the end tokens, which
 * match no bytes. An id outside [0, n_vocab) gives "" with *len 0. */
const char *hx_grammar_vocab_token(const hx_grammar_vocab *v, int32_t id, size_t *len);
/* id is one of the vocab's end tokens (allowed exactly when the state is done). */
bool        hx_grammar_vocab_is_end(const hx_grammar_vocab *v, int32_t id);

/* Writes allowed[0..n_vocab): 1 for each token whose bytes the state accepts (exactly the tokens
 * for which hx_grammar_accept_bytes on a copy of s would return true), 1 for the end tokens when
 * hx_grammar_done(s), 0 otherwise; a token ending inside a UTF-8 character is allowed when some
 * allowed character starts that way. The walk shares work between tokens with a common prefix and
 * remembers each step per (stack set, byte), so a mask inside a string, where most tokens fit,
 * costs about one look-up per trie node. s is not advanced; it keeps scratch memory between calls
 * so that a mask after the first allocates nothing once the scratch has grown to what the grammar
 * needs (hence non-const). HX_E_NOMEM (allowed then all 0) when the per-depth scratch cannot be
 * allocated; an allocation failure deeper in the walk rejects the token concerned, as
 * hx_grammar_accept_bytes would. */
hx_status hx_grammar_mask(hx_grammar_state *s, const hx_grammar_vocab *v, uint8_t *allowed);

#endif
