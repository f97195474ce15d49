/* alloc.h - the one door for heap memory.
 *
 * Every allocation in hearth goes through these functions so that live bytes can be counted
 * (against the memory budget, and by tests proving a code path allocates nothing) and so that
 * tests can inject failures. hx_free(NULL) is a no-op. */
#ifndef HX_BASE_ALLOC_H
#define HX_BASE_ALLOC_H
#include <stddef.h>
#include <stdint.h>

void *hx_alloc(size_t size);
void *hx_calloc(size_t n, size_t size); /* NULL on overflow of n * size */
void *hx_realloc(void *p, size_t size);
void  hx_free(void *p);
char *hx_strdup(const char *s);
char *hx_strndup(const char *s, size_t n);

/* Bytes currently allocated through hx_alloc and friends. */
size_t hx_alloc_live_bytes(void);

/* Fault injection for tests: the n-th allocation from now (0 = the next one) and every one after
 * it fail until hx_alloc_fail_after(-1) is called. */
void hx_alloc_fail_after(int64_t n);

#endif
