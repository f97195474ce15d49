/* alloc.c - counting allocator with fault injection.
 *
 * Each block carries a 16-byte header holding its size, so hx_free can subtract it from the live
 * count without asking libc. Counters are atomic: any thread may allocate. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define HDR 16 /* keeps the returned pointer 16-byte aligned */

static atomic_size_t  live_bytes;
static atomic_int_fast64_t fail_countdown = -1;

static int should_fail(void)
{
    int_fast64_t n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (n < 0) return 0;
    if (n == 0) return 1;
    atomic_fetch_sub_explicit(&fail_countdown, 1, memory_order_relaxed);
    return 0;
}

void *hx_alloc(size_t size)
{
    if (size > SIZE_MAX - HDR || should_fail()) return NULL;
    unsigned char *p = malloc(size + HDR);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    atomic_fetch_add_explicit(&live_bytes, size, memory_order_relaxed);
    return p + HDR;
}

/* libc's calloc rather than alloc + memset: a large block comes from fresh mapped pages that
 * are already zero, so it costs no resident memory until written (the KV cache is sized for
 * the whole context but a short conversation touches a few blocks). */
void *hx_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    const size_t bytes = n * size;
    if (bytes > SIZE_MAX - HDR || should_fail()) return NULL;
    unsigned char *p = calloc(1, bytes + HDR);
    if (!p) return NULL;
    memcpy(p, &bytes, sizeof bytes);
    atomic_fetch_add_explicit(&live_bytes, bytes, memory_order_relaxed);
    return p + HDR;
}

void *hx_realloc(void *p, size_t size)
{
    if (!p) return hx_alloc(size);
    if (size > SIZE_MAX - HDR || should_fail()) return NULL;
    unsigned char *base = (unsigned char *)p - HDR;
    size_t old;
    memcpy(&old, base, sizeof old);
    unsigned char *q = realloc(base, size + HDR);
    if (!q) return NULL;
    memcpy(q, &size, sizeof size);
    atomic_fetch_sub_explicit(&live_bytes, old, memory_order_relaxed);
    atomic_fetch_add_explicit(&live_bytes, size, memory_order_relaxed);
    return q + HDR;
}

void hx_free(void *p)
{
    if (!p) return;
    unsigned char *base = (unsigned char *)p - HDR;
    size_t size;
    memcpy(&size, base, sizeof size);
    atomic_fetch_sub_explicit(&live_bytes, size, memory_order_relaxed);
    free(base);
}

char *hx_strndup(const char *s, size_t n)
{
    char *d = hx_alloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *hx_strdup(const char *s) { return hx_strndup(s, strlen(s)); }

size_t hx_alloc_live_bytes(void)
{
    return atomic_load_explicit(&live_bytes, memory_order_relaxed);
}

void hx_alloc_fail_after(int64_t n)
{
    atomic_store_explicit(&fail_countdown, n < 0 ? -1 : n, memory_order_relaxed);
}
