/* arena.c - the region allocator (see arena.h). Blocks form a list, newest first; an
 * allocation that does not fit the newest block starts a new one. */
#include "base/arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

struct hx_arena_block {
    hx_arena_block *prev;
    size_t          cap, off;
    alignas(max_align_t) unsigned char data[];
};

hx_arena hx_arena_make(size_t block_bytes)
{
    return (hx_arena){.head = NULL, .block_bytes = block_bytes ? block_bytes : 4096, .used_bytes = 0};
}

void *hx_arena_alloc(hx_arena *a, size_t size, size_t align)
{
    if (align == 0) align = alignof(max_align_t);
    if ((align & (align - 1)) != 0) return NULL;
    hx_arena_block *b = a->head;
    if (b) {
        const uintptr_t base = (uintptr_t)b->data;
        const uintptr_t p = (base + b->off + (align - 1)) & ~(uintptr_t)(align - 1);
        if (p - base <= b->cap && size <= b->cap - (p - base)) {
            b->off = (p - base) + size;
            return (void *)p;
        }
    }
    if (size > SIZE_MAX - sizeof *b - align) return NULL;
    const size_t cap = size + align > a->block_bytes ? size + align : a->block_bytes;
    if (!(b = hx_alloc(sizeof *b + cap))) return NULL;
    b->prev = a->head;
    b->cap = cap;
    b->off = 0;
    a->head = b;
    a->used_bytes += cap;
    return hx_arena_alloc(a, size, align); /* fits now, by construction */
}

void *hx_arena_calloc(hx_arena *a, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    void *p = hx_arena_alloc(a, n * size, 0);
    if (p) memset(p, 0, n * size);
    return p;
}

char *hx_arena_strndup(hx_arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX) return NULL;
    char *p = hx_arena_alloc(a, n + 1, 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *hx_arena_strdup(hx_arena *a, const char *s) { return hx_arena_strndup(a, s, strlen(s)); }

void hx_arena_free(hx_arena *a)
{
    for (hx_arena_block *b = a->head; b;) {
        hx_arena_block *prev = b->prev;
        hx_free(b);
        b = prev;
    }
    a->head = NULL;
    a->used_bytes = 0;
}
