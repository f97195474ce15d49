/* arena.h - a region allocator: many allocations, one release.
 *
 * A request's memory (its parsed fields, prompt tokens, stop strings) lives in one arena and is
 * released together when the request ends, so request code never frees field by field. Blocks
 * come from hx_alloc, so they count against the memory figures like everything else. Not
 * thread-safe: an arena has one owner at a time. */
#ifndef HX_BASE_ARENA_H
#define HX_BASE_ARENA_H
#include <stddef.h>

typedef struct hx_arena_block hx_arena_block;

typedef struct {
    hx_arena_block *head;
    size_t          block_bytes; /* size of a fresh block (larger requests get their own) */
    size_t          used_bytes;  /* bytes of all blocks held */
} hx_arena;

/* An empty arena whose blocks are at least block_bytes (0: 4 KiB). Allocates nothing yet. */
hx_arena hx_arena_make(size_t block_bytes);

/* size bytes aligned to align (a power of two; 0 means alignof(max_align_t)), or NULL when out
 * of memory or on overflow. Memory is not zeroed. */
void *hx_arena_alloc(hx_arena *a, size_t size, size_t align);
void *hx_arena_calloc(hx_arena *a, size_t n, size_t size); /* zeroed; NULL on n*size overflow */
char *hx_arena_strndup(hx_arena *a, const char *s, size_t n); /* NUL-terminated copy */
char *hx_arena_strdup(hx_arena *a, const char *s);

/* Releases every block; the arena is empty and reusable afterwards. */
void hx_arena_free(hx_arena *a);

#endif
