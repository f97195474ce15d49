/* err.h - first-failure error records and the always-on assertion macro.
 *
 * hx_err keeps the status and message of the first failure only: the innermost code knows the
 * most (file, tensor, byte offset), so later, vaguer failures must not overwrite it. */
#ifndef HX_BASE_ERR_H
#define HX_BASE_ERR_H
#include "hearth.h"

typedef struct {
    hx_status status; /* HX_OK until the first failure */
    char      msg[512]; /* "file: what was wrong (expected X, found Y)" */
} hx_err;

/* Records the failure if none is recorded yet and returns st, so call sites can write
 * `return hx_err_set(err, HX_E_FORMAT, "...")`. err may be NULL. */
hx_status hx_err_set(hx_err *err, hx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prints the expression and file:line, then aborts. On in every build; for cheap invariants
 * only, never to handle bad input. */
#define HX_ASSERT(c) \
    do { if (!(c)) hx_assert_fail(#c, __FILE__, __LINE__); } while (0)
_Noreturn void hx_assert_fail(const char *expr, const char *file, int line);

#define HX_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

#endif
