/* tokenizer_int.h - what the files of the tokenizer module share: the hx_tokenizer struct, the
 * step descriptions of each pipeline stage and the helpers one file offers the others.
 *
 * Invariants: every string a tokenizer holds lives in its pool and is addressed by offset, so
 * the pool may grow while loading; once loading ends nothing in the struct changes except the
 * BPE cache, which only hx_tok_bpe_* touches under cache_lock. Token ids are dense in
 * [0, n_vocab); ids that no token uses carry HX_TOKA_UNUSED. Not part of the module's API:
 * only files in src/tokenizer include this. */
#ifndef HX_TOKENIZER_INT_H
#define HX_TOKENIZER_INT_H
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"

/* Limits that keep a hostile tokenizer.json from asking for absurd memory. The largest real
 * vocabularies (Gemma 3) hold 262,144 tokens. */
#define HX_TOK_MAX_VOCAB (1 << 22)
#define HX_TOK_MAX_TOKEN_BYTES 4096

struct hx_tok_prework;

/* ---- tokens ---- */

enum {
    HX_TOKA_SPECIAL = 1u << 0, /* control token: parsed only with HX_TOK_PARSE_SPECIAL */
    HX_TOKA_ADDED   = 1u << 1, /* cut out of the text before BPE */
    HX_TOKA_BYTE    = 1u << 2, /* "<0xXX>" byte-fallback token; `byte` holds the value */
    HX_TOKA_UNUSED  = 1u << 3, /* no token has this id */
    HX_TOKA_MODEL   = 1u << 4, /* in the BPE model's vocabulary (not only an added token) */
    HX_TOKA_MERGE   = 1u << 5, /* SentencePiece scores: may be the result of a merge */
};

typedef struct {
    uint32_t off, len; /* text in the pool */
    uint8_t  attr;     /* HX_TOKA_* */
    uint8_t  byte;
} hx_tok_entry;

typedef enum { HX_TOK_KIND_BPE, HX_TOK_KIND_SPM } hx_tok_kind;

/* Open-addressing map from strings to ids (the strings are the tokens' pool texts). */
typedef struct {
    int32_t *slots; /* id, or -1 when empty */
    uint32_t mask;
} hx_tok_strmap;

/* Open-addressing map from an id pair to (rank, merged id). */
typedef struct {
    uint64_t *keys;  /* (a << 32 | b) + 1; 0 when empty */
    uint32_t *rank;
    int32_t  *merged;
    uint32_t  mask;
    uint32_t  n;
} hx_tok_mergemap;

/* ---- added tokens ---- */

typedef struct {
    int32_t  id;
    uint32_t off, len; /* content in the pool */
    bool     special, lstrip, rstrip, normalized, single_word;
} hx_tok_added;

/* Byte trie over added-token contents, for leftmost-longest matching. Node 0 is the root;
 * edges live in a hash keyed by (node << 8 | byte). */
typedef struct {
    int32_t  *term;   /* per node: index into added[], or -1 */
    uint32_t  n_nodes, cap_nodes;
    uint64_t *ekeys;  /* edge key + 1; 0 when empty */
    uint32_t *evals;  /* child node */
    uint32_t  emask, n_edges;
    uint8_t   first[256]; /* 1 when some token starts with this byte */
} hx_tok_trie;

/* ---- pipeline steps ---- */

typedef enum {
    HX_NORM_NFC, HX_NORM_NFD, HX_NORM_NFKC, HX_NORM_NFKD, HX_NORM_LOWERCASE, HX_NORM_PREPEND,
    HX_NORM_REPLACE, HX_NORM_STRIP, HX_NORM_BYTELEVEL
} hx_tok_norm_kind;

typedef struct {
    hx_tok_norm_kind kind;
    uint32_t         a_off, a_len; /* Prepend text; Replace literal pattern */
    uint32_t         b_off, b_len; /* Replace content */
    pcre2_code      *re;           /* Replace with a Regex pattern */
    bool             left, right;  /* Strip */
} hx_tok_norm;

typedef enum {
    HX_PRE_SPLIT, HX_PRE_BYTELEVEL, HX_PRE_DIGITS, HX_PRE_PUNCT, HX_PRE_WHITESPACE,
    HX_PRE_WSSPLIT, HX_PRE_METASPACE, HX_PRE_CHARSPLIT
} hx_tok_pre_kind;

/* Hugging Face's SplitDelimiterBehavior. */
typedef enum {
    HX_SPLIT_REMOVED, HX_SPLIT_ISOLATED, HX_SPLIT_MERGED_PREV, HX_SPLIT_MERGED_NEXT,
    HX_SPLIT_CONTIGUOUS
} hx_tok_behavior;

typedef enum { HX_PREPEND_ALWAYS, HX_PREPEND_FIRST, HX_PREPEND_NEVER } hx_tok_prepend;

typedef struct {
    hx_tok_pre_kind kind;
    hx_tok_behavior behavior;
    bool            invert;
    pcre2_code     *re;                /* Split regex, ByteLevel's or Whitespace's */
    uint32_t        lit_off, lit_len;  /* Split literal; Metaspace replacement; CharSplit char */
    bool            add_prefix_space;  /* ByteLevel */
    bool            use_regex;         /* ByteLevel */
    bool            individual_digits; /* Digits */
    bool            split;             /* Metaspace */
    hx_tok_prepend  prepend;           /* Metaspace */
} hx_tok_pre;

typedef enum {
    HX_DEC_BYTELEVEL, HX_DEC_REPLACE, HX_DEC_BYTEFALLBACK, HX_DEC_FUSE, HX_DEC_STRIP,
    HX_DEC_METASPACE, HX_DEC_BPE_SUFFIX
} hx_tok_dec_kind;

typedef struct {
    hx_tok_dec_kind kind;
    uint32_t        a_off, a_len; /* Replace pattern; Metaspace replacement; BPE suffix */
    uint32_t        b_off, b_len; /* Replace content */
    uint32_t        ch;           /* Strip: the code point stripped */
    int32_t         start, stop;  /* Strip counts */
    hx_tok_prepend  prepend;      /* Metaspace */
} hx_tok_dec;

/* ---- the BPE cache ---- */

typedef struct {
    uint64_t hash;   /* 0 when empty */
    char    *blob;   /* key bytes, then n_ids int32 ids (hx_alloc'd) */
    uint16_t key_len;
    uint16_t n_ids;
} hx_tok_cache_slot;

#define HX_TOK_CACHE_SLOTS 8192
#define HX_TOK_CACHE_MAX_KEY 48

/* ---- the tokenizer ---- */

struct hx_tokenizer {
    char        *name;      /* file name for messages, owned */
    hx_tok_kind  kind;
    bool         byte_level; /* the vocabulary is in the byte-level alphabet */
    /* Strings: token texts, added contents, step literals. */
    char        *pool;
    size_t       pool_len, pool_cap;
    /* Vocabulary: entry per id; `vocab` maps model token text to id. */
    int32_t       n_vocab;
    hx_tok_entry *tok;
    float        *scores;   /* SPM only: merge priority per id (higher first) */
    hx_tok_strmap vocab;
    hx_tok_mergemap merges; /* BPE only */
    /* BPE model options (tokenizer.json "model"). */
    bool     byte_fallback, ignore_merges, fuse_unk;
    int32_t  unk_id;                    /* -1: unknown characters are dropped */
    uint32_t cont_off, cont_len;        /* continuing_subword_prefix */
    uint32_t eow_off, eow_len;          /* end_of_word_suffix */
    int32_t  byte_tok[256];             /* id of "<0xXX>", or -1 */
    int32_t  bl_tok[256];               /* id of the byte-level character of each byte, or -1 */
    /* Added tokens and the two matchers: on raw text and on normalized text. */
    hx_tok_added *added;
    int32_t       n_added;
    hx_tok_trie   trie_raw, trie_norm;
    /* Pipeline. */
    hx_tok_norm *norm;
    int32_t      n_norm;
    hx_tok_pre  *pre;
    int32_t      n_pre;
    bool         bl_deferred; /* the last pre-tokenizer is ByteLevel: the model maps bytes */
    hx_tok_dec  *dec;
    int32_t      n_dec;
    /* Post-processing for a single sequence with add_special. */
    int32_t *post_pre, *post_post;
    int32_t  n_post_pre, n_post_post;
    /* Special ids. */
    int32_t  bos, eos, pad;
    int32_t *eot;
    int32_t  n_eot;
    /* PCRE2 allocations go through hx_alloc. */
    pcre2_general_context *gctx;
    pcre2_compile_context *cctx;
    /* Cache of pre-token → ids; guarded by cache_lock (the only mutable state). */
    pthread_mutex_t    cache_lock;
    bool               cache_lock_ok;
    hx_tok_cache_slot *cache;
};

/* ---- shared helpers (tokenizer.c) ---- */

hx_tokenizer *hx_tok_new(const char *name);
/* Appends bytes to the pool; returns their offset, or UINT32_MAX when out of memory. */
uint32_t hx_tok_pool_add(hx_tokenizer *t, const char *s, size_t len);
/* Sets the size of the id space; entries start as HX_TOKA_UNUSED with empty text. */
hx_status hx_tok_set_vocab_size(hx_tokenizer *t, int32_t n, hx_err *err);
/* Finishes loading: the vocabulary map, byte tables, added-token tries, EOT list. */
hx_status hx_tok_finish(hx_tokenizer *t, hx_err *err);
/* Keeps room for extra more bytes and a NUL. */
hx_status hx_tok_text_reserve(hx_tok_text *b, size_t extra);
/* Classifies the UTF-8 at s[0..n) (n > 0): 1 = a valid character of *len bytes; 0 = an invalid
 * sequence whose maximal valid prefix is *len bytes (≥ 1; replaced by one U+FFFD); -1 = a valid
 * but unfinished prefix of *len = n bytes. */
int       hx_tok_utf8_check(const unsigned char *s, size_t n, size_t *len);
/* Appends s with each invalid sequence replaced by U+FFFD (Python's errors="replace"). */
hx_status hx_tok_utf8_lossy(const char *s, size_t n, hx_tok_text *out);
/* Opens a prework for encode/normalize calls on t (match data, JIT context). */
hx_status hx_tok_prework_init(const hx_tokenizer *t, struct hx_tok_prework *w);

/* ---- maps (vocab.c) ---- */

uint64_t  hx_tok_hash(const void *p, size_t n); /* for short strings */

hx_status hx_tok_strmap_build(hx_tokenizer *t, hx_err *err); /* from HX_TOKA_MODEL tokens */
int32_t   hx_tok_strmap_get(const hx_tokenizer *t, const char *s, size_t n);
void      hx_tok_strmap_free(hx_tok_strmap *m);
hx_status hx_tok_merges_init(hx_tok_mergemap *m, uint32_t n_expected);
/* Inserts or replaces (later merges of the same pair win, as in Hugging Face). */
hx_status hx_tok_merges_put(hx_tok_mergemap *m, int32_t a, int32_t b, uint32_t rank,
                            int32_t merged);
bool      hx_tok_merges_get(const hx_tok_mergemap *m, int32_t a, int32_t b, uint32_t *rank,
                            int32_t *merged);
void      hx_tok_merges_free(hx_tok_mergemap *m);

/* ---- added tokens (added.c) ---- */

hx_status hx_tok_added_build(hx_tokenizer *t, hx_err *err);
void      hx_tok_trie_free(hx_tok_trie *tr);
/* Exact lookup of an added token by content: its index in t->added, or -1. */
int32_t   hx_tok_added_find(const hx_tokenizer *t, const char *s, size_t n);

typedef struct {
    size_t  start, end; /* byte range in the text */
    int32_t id;         /* added token id, or -1 for plain text */
} hx_tok_seg;

/* Splits text into plain ranges and added-token matches the way Hugging Face does
 * (leftmost-longest; single_word, lstrip, rstrip; special tokens skipped unless parse_special).
 * Appends to *segs (grown with hx_realloc). */
hx_status hx_tok_added_split(const hx_tokenizer *t, const hx_tok_trie *tr, const char *s,
                             size_t n, bool parse_special, hx_tok_seg **segs, size_t *n_segs,
                             size_t *cap_segs);

/* ---- normalizers (normalize.c) ---- */

/* Runs the normalizer chain over s[0..n), writing the result into out (replaced); w->tmp is
 * its scratch and w's match data serves Replace regexes. */
hx_status hx_tok_normalize(const hx_tokenizer *t, const char *s, size_t n, hx_tok_text *out,
                           struct hx_tok_prework *w);
void      hx_tok_norm_free(hx_tok_norm *nm);

/* ---- pre-tokenizers (pretokenize.c) ---- */

typedef struct {
    uint32_t off, len; /* in the work store */
    bool     mapped;   /* already in the byte-level alphabet */
    bool     at_start; /* starts at offset 0 of the original text (Metaspace "first") */
} hx_tok_piece;

typedef struct {
    uint32_t start, end;
    bool     match;
} hx_tok_event;

typedef struct hx_tok_prework {
    hx_tok_text       store;    /* the text every piece points into */
    hx_tok_piece     *a, *b;    /* pieces before and after the current step */
    size_t            n_a, cap_a, n_b, cap_b;
    hx_tok_event     *ev;       /* one piece's matches and gaps, in order */
    size_t            n_ev, cap_ev;
    hx_tok_text       tmp;      /* normalizer scratch */
    pcre2_match_data *md;
    pcre2_jit_stack  *jit_stack; /* made only when a match overflows the default JIT stack */
    pcre2_match_context *mctx;
    const hx_tokenizer *tok;
} hx_tok_prework;

/* Compiles a Hugging Face (Oniguruma) regex with PCRE2 (UTF, UCP, JIT), translating the
 * classes whose meaning differs. `what` names the JSON path for messages. */
hx_status hx_tok_regex_compile(hx_tokenizer *t, const char *pat, size_t len, const char *what,
                               pcre2_code **out, hx_err *err);
/* Next match of re in s[0..n) at or after pos: its range; false when none (or on a matching
 * error, which the callers treat as "no more matches"). */
bool      hx_tok_regex_next(const pcre2_code *re, const char *s, size_t n, size_t pos,
                            hx_tok_prework *w, size_t *ms, size_t *me);
/* Pre-tokenizes s (already normalized) into w->a / w->n_a. */
hx_status hx_tok_pretokenize(const hx_tokenizer *t, const char *s, size_t n, bool at_start,
                             hx_tok_prework *w);
void      hx_tok_prework_free(hx_tok_prework *w);
void      hx_tok_pre_free(hx_tok_pre *p);
/* The GPT-2 split regex (ByteLevel's use_regex). */
extern const char hx_tok_gpt2_regex[];
/* Byte-level alphabet: the code point standing for each byte, and back (-1: not in it). */
uint32_t hx_tok_byte_to_cp(uint8_t b);
int32_t  hx_tok_cp_to_byte(uint32_t cp);
/* Decodes one UTF-8 character of s[0..n) (n > 0, valid UTF-8): its code point and length. */
uint32_t hx_tok_utf8_next(const char *s, size_t n, size_t *adv);
size_t   hx_tok_utf8_put(uint32_t cp, char *out); /* 1..4 bytes */

/* ---- BPE (bpe.c) ---- */

typedef struct {
    int32_t  *ids;   /* symbol ids */
    int32_t  *prev, *next;
    uint32_t *start, *len; /* SPM: byte range of each symbol in the word */
    void     *heap;  /* merge candidates (bpe.c's heap_item) */
    size_t    cap, heap_cap;
    hx_tok_text word; /* the word in the byte-level alphabet, when it needs mapping */
} hx_tok_bpework;

/* Encodes one pre-token: appends its ids to out. need_map: the bytes are raw and the
 * vocabulary is byte-level (the model maps each byte to its character). */
hx_status hx_tok_bpe_word(const hx_tokenizer *t, const char *s, size_t n, bool need_map,
                          hx_tok_bpework *w, hx_tok_ids *out);
void      hx_tok_bpework_free(hx_tok_bpework *w);
hx_status hx_tok_cache_init(hx_tokenizer *t);
void      hx_tok_cache_free(hx_tokenizer *t);

/* ---- loaders (load_json.c, load_gguf.c): fill t; hx_tok_finish runs after them ---- */

hx_status hx_tok_load_json(hx_tokenizer *t, const char *data, size_t len, const char *cfg_path,
                           hx_err *err);
hx_status hx_tok_load_gguf(hx_tokenizer *t, const hx_gguf *g, hx_err *err);

#endif
