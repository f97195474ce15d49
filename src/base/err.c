/* err.c - hx_err recording, status names and the assertion handler. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

hx_status hx_err_set(hx_err *err, hx_status st, const char *fmt, ...)
{
    if (err && err->status == HX_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

const char *hx_status_str(hx_status st)
{
    switch (st) {
#define HX__CASE(name, value, text) case name: return text;
        HX_STATUS_LIST(HX__CASE)
#undef HX__CASE
    }
    return "unknown status";
}

const char *hx_version(void) { return HX_VERSION_STRING; }

void hx_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "hearth: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}
