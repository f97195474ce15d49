/* tokenizer.h - text ⇄ token ids, equal token for token to Hugging Face `tokenizers`.
 *
 * One hx_tokenizer is built from a tokenizer.json (Hugging Face) or from GGUF metadata
 * (tokenizer.ggml.model "gpt2": byte-level BPE; "llama": SentencePiece-style BPE by scores).
 * Encoding runs the Hugging Face pipeline: added/special tokens are cut out first, the rest is
 * normalized, pre-tokenized (PCRE2 JIT regexes) and merged by BPE. Decoding runs the decoder
 * chain; hx_detok streams text out token by token without ever splitting a UTF-8 character.
 *
 * Ownership and threads: a tokenizer is immutable once open (its BPE cache is internally
 * locked), so one may be shared by any number of threads; hx_tok_ids, hx_tok_text and hx_detok
 * belong to one thread at a time. Strings returned by accessors are borrowed and live as long as
 * the tokenizer. Close/free functions accept NULL. Input text that is not valid UTF-8 is encoded
 * as if each maximal invalid sequence were U+FFFD (what Python's errors="replace" would hand the
 * reference).
 *
 *     hx_tokenizer *tok; hx_err err = {0}; hx_tok_ids ids = {0};
 *     if (hx_tokenizer_open_json("tokenizer.json", &tok, &err) != HX_OK) puts(err.msg);
 *     hx_tokenizer_encode(tok, "Hello", 5, HX_TOK_PARSE_SPECIAL, &ids, &err);
 *     hx_tok_ids_free(&ids); hx_tokenizer_close(tok);
 */
#ifndef HX_TOKENIZER_TOKENIZER_H
#define HX_TOKENIZER_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/gguf.h"
#include "format/model_files.h"

typedef struct hx_tokenizer hx_tokenizer; /* opaque; see tokenizer_int.h */

/* A growable id vector. Zero-initialise it; encode appends; free with hx_tok_ids_free. */
typedef struct {
    int32_t *ids;
    size_t   n, cap;
} hx_tok_ids;
void      hx_tok_ids_free(hx_tok_ids *v);
hx_status hx_tok_ids_push(hx_tok_ids *v, int32_t id); /* HX_E_NOMEM when it cannot grow */

/* A growable byte buffer for decoded text; data is NUL-terminated after each successful call
 * (the text itself may contain NUL bytes: use len). Zero-initialise; free with hx_tok_text_free. */
typedef struct {
    char  *data;
    size_t len, cap;
} hx_tok_text;
void      hx_tok_text_free(hx_tok_text *b);
hx_status hx_tok_text_append(hx_tok_text *b, const void *p, size_t n); /* HX_E_NOMEM */

/* Encode flags. */
enum {
    /* Add BOS/EOS as the tokenizer's post-processor (tokenizer.json) or add_bos_token /
     * add_eos_token (GGUF, tokenizer_config.json) says: Hugging Face's add_special_tokens=True. */
    HX_TOK_ADD_SPECIAL   = 1u << 0,
    /* Match special tokens (<|im_end|>, <s>, ...) written in the text. Off for user text, so
     * it cannot inject control tokens; non-special added tokens are matched either way. */
    HX_TOK_PARSE_SPECIAL = 1u << 1,
};

/* Decode flags. */
enum {
    HX_TOK_SKIP_SPECIAL = 1u << 0, /* leave special tokens out of the text */
};

/* ---- opening ---- */

/* The model's tokenizer: GGUF metadata when mf is a GGUF file, else mf->tokenizer_json (with
 * tokenizer_config.json beside it). HX_E_NOTFOUND when the model has neither. */
hx_status hx_tokenizer_open(const hx_model_files *mf, hx_tokenizer **out, hx_err *err);

/* A tokenizer.json file; reads tokenizer_config.json in the same folder when present (BOS/EOS
 * names, add_bos_token/add_eos_token where the file has no post-processor). */
hx_status hx_tokenizer_open_json(const char *path, hx_tokenizer **out, hx_err *err);

/* tokenizer.json text held by the caller (copied as needed; need not outlive the call); `name`
 * prefixes error messages. No tokenizer_config.json is read. */
hx_status hx_tokenizer_open_json_memory(const char *data, size_t len, const char *name,
                                        hx_tokenizer **out, hx_err *err);

/* A GGUF file (a model or a vocab-only file), or an already parsed one (borrowed: the
 * tokenizer copies what it needs, so g may be closed afterwards). */
hx_status hx_tokenizer_open_gguf(const char *path, hx_tokenizer **out, hx_err *err);
hx_status hx_tokenizer_from_gguf(const hx_gguf *g, hx_tokenizer **out, hx_err *err);

/* Opens whatever path is: a .gguf file, a tokenizer.json file or a folder holding one. */
hx_status hx_tokenizer_open_path(const char *path, hx_tokenizer **out, hx_err *err);

void hx_tokenizer_close(hx_tokenizer *t);

/* ---- encoding and decoding ---- */

/* Appends the ids of text[0..len) to out (HX_TOK_* flags). HX_E_NOMEM with out holding a
 * prefix of the result on allocation failure; never fails otherwise. */
hx_status hx_tokenizer_encode(const hx_tokenizer *t, const char *text, size_t len, unsigned flags,
                              hx_tok_ids *out, hx_err *err);

/* Replaces out's content with the text of ids, as Hugging Face's decode would produce it
 * (decoder chain applied to the whole sequence; invalid UTF-8 becomes U+FFFD). Ids outside
 * the vocabulary are skipped. HX_E_NOMEM on allocation failure. */
hx_status hx_tokenizer_decode(const hx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                              hx_tok_text *out, hx_err *err);

/* ---- vocabulary ---- */

int32_t     hx_tokenizer_n_vocab(const hx_tokenizer *t);       /* highest id + 1 */
/* The token's text as the vocabulary spells it ("Ġhello", "▁the", "<0x0A>"), borrowed, and
 * its length; "" for ids outside the vocabulary or unused ids. */
const char *hx_tokenizer_piece(const hx_tokenizer *t, int32_t id, size_t *len);
int32_t     hx_tokenizer_token_id(const hx_tokenizer *t, const char *text, size_t len); /* -1 */
bool        hx_tokenizer_is_special(const hx_tokenizer *t, int32_t id); /* control tokens */
int32_t     hx_tokenizer_bos(const hx_tokenizer *t);               /* -1 when none */
int32_t     hx_tokenizer_eos(const hx_tokenizer *t);               /* -1 when none */
/* Ids that end a turn: EOS plus the tokens such as <|im_end|>, <|eot_id|>, <end_of_turn>;
 * borrowed array of *n ids. */
const int32_t *hx_tokenizer_eot(const hx_tokenizer *t, size_t *n);
bool        hx_tokenizer_is_eot(const hx_tokenizer *t, int32_t id);
/* "bpe" (byte-level), "spm-bpe" (SentencePiece style); borrowed static text. */
const char *hx_tokenizer_kind(const hx_tokenizer *t);

/* ---- streaming detokenizer ----
 * Push ids as they are generated; each push hands back the bytes that are now safe to show:
 * whole UTF-8 characters only (a character split over tokens is held back until complete).
 * flush hands back what is left, with incomplete or invalid bytes as U+FFFD. The SentencePiece
 * leading space (the dummy prefix) is dropped from the start of the stream, as decode does.
 * Text returned is borrowed until the next call on the same hx_detok. Differences from decode:
 * none on valid text; on invalid byte-fallback runs decode writes one U+FFFD per byte and the
 * stream one per maximal invalid sequence. */
typedef struct {
    const hx_tokenizer *tok;        /* borrowed */
    unsigned            flags;      /* HX_TOK_SKIP_SPECIAL */
    int32_t             n_tokens;   /* tokens decoded so far (Metaspace's first-token rule) */
    int32_t             strip_left; /* leading characters still to drop (the dummy prefix) */
    uint32_t            strip_cp;   /* the character dropped */
    unsigned char       hold[4];    /* an incomplete UTF-8 character waiting for its bytes */
    int32_t             n_hold;
    hx_tok_text         out;        /* what the last call handed back */
    void               *work;       /* decoder scratch, made on first use */
} hx_detok;

void      hx_detok_init(hx_detok *d, const hx_tokenizer *t, unsigned flags);
hx_status hx_detok_push(hx_detok *d, int32_t id, const char **text, size_t *len, hx_err *err);
hx_status hx_detok_flush(hx_detok *d, const char **text, size_t *len, hx_err *err);
void      hx_detok_free(hx_detok *d);

#endif
