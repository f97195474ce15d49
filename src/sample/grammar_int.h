/* grammar_int.h - what grammar.c (compiler, recognizer) and grammar_vocab.c (token bytes, masks)
 * share: the compiled form, stack sets, the recognizer state with the mask's scratch, and the
 * one-byte step the mask walk is built on. Not for use outside src/sample/grammar*.c. */
#ifndef HX_SAMPLE_GRAMMAR_INT_H
#define HX_SAMPLE_GRAMMAR_INT_H
#include <stdatomic.h>

#include "sample/grammar.h"

enum { GEL_END, GEL_ALT, GEL_REF, GEL_CLASS, GEL_NCLASS };

typedef struct {
    uint32_t type;
    uint32_t a; /* REF: rule index; CLASS/NCLASS: first range */
    uint32_t b; /* CLASS/NCLASS: number of ranges */
} gel;

typedef struct {
    uint32_t lo, hi; /* inclusive code points */
} grange;

struct hx_grammar {
    atomic_uint refs;       /* hx_grammar_retain / hx_grammar_free; everything else is immutable */
    gel        *el;         /* [n_el] all rules, each closed by GEL_END */
    uint32_t    n_el;
    uint32_t   *rule_start; /* [n_rules] index of a rule's first element */
    uint32_t    n_rules;
    grange     *ranges;     /* [n_ranges] */
    uint32_t    n_ranges;
    uint32_t    root;
};

/* A set of stacks: data holds [len, pos_0 .. pos_len-1] per stack, bottom first; slots is an
 * open-addressing hash of (offset + 1) for de-duplication, with used[] listing the slots taken
 * so that clearing costs the number of stacks rather than the table size. */
typedef struct {
    uint32_t *data;
    size_t    n_data, cap_data;
    uint32_t *slots;
    uint32_t  cap_slots; /* power of two or 0 */
    uint32_t *used;
    uint32_t  n_stacks, cap_used;
    uint32_t  cp;        /* bits of the UTF-8 character being read */
    uint8_t   left;      /* continuation bytes still expected */
    uint8_t   seq_len;   /* length of that character */
    bool      has_empty; /* some stack is empty: the root rule may end here */
    bool      has_open;  /* some stack is not empty */
} sset;

/* One interned stack set of the mask walk: its words live in gmask.pool. */
typedef struct {
    size_t   off, n_data; /* pool[off .. off + n_data): the sset data layout */
    uint32_t n_stacks, cp, hash;
    uint8_t  left, seq_len;
    int8_t   plain_loop;  /* every plain byte leads back to this set: 1 yes, -1 no, 0 unknown */
} gset;

/* Scratch of hx_grammar_mask, kept in the state between calls so that a mask after the first
 * allocates nothing (grammar_vocab.c explains the walk). The interned sets and their transitions
 * are cleared at the start of every mask. */
typedef struct {
    sset     *depth;     /* [n_depth] one set per trie depth, for sets not interned */
    uint32_t  n_depth;
    int32_t  *at;        /* [n_depth + 1] per depth on the walk's path: interned set id, or -1 */
    uint32_t *pool;      /* words of the interned sets */
    size_t    n_pool, cap_pool;
    gset     *sets;      /* [n_sets] */
    uint32_t  n_sets, cap_sets;
    uint32_t *next;      /* [cap_sets * 256] transitions: 0 unknown, 1 refused, k + 2 to set k */
    uint32_t *slots;     /* open-addressing hash of set id + 1, cap_slots a power of two or 0 */
    uint32_t  cap_slots;
} gmask;

struct hx_grammar_state {
    const hx_grammar *g;    /* borrowed */
    sset              cur;
    sset              tmp[2];
    gmask             mask;
    uint32_t         *buf;  /* [HX_GRAMMAR_MAX_DEPTH + 2] expansion scratch */
};

/* Frees a set's memory and zeroes it. */
void hx_gram_sset_free(sset *s);

/* Advances in over one byte into out (cleared first), using buf (HX_GRAMMAR_MAX_DEPTH + 2 words)
 * as scratch. False when the byte is rejected: not in the language, invalid UTF-8, a limit
 * reached or out of memory. Reads only in's data, n_stacks, cp, left and seq_len. */
bool hx_gram_step_byte(const hx_grammar *g, const sset *in, uint8_t c, sset *out, uint32_t *buf);

/* Frees the mask scratch (grammar_vocab.c) and zeroes it. */
void hx_gram_mask_free(gmask *m);

static inline int gram_hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#endif
