/* mapfile.h - read-only memory maps of whole files.
 *
 * Model weights are mapped, never copied. A mapping of an empty file has data == NULL and
 * size == 0; callers check sizes before reading. */
#ifndef HX_BASE_MAPFILE_H
#define HX_BASE_MAPFILE_H
#include <stddef.h>

#include "err.h"

typedef struct {
    const unsigned char *data; /* borrowed view of the file, read-only */
    size_t               size;
} hx_mapped;

/* Maps path read-only. On failure returns HX_E_IO (or HX_E_NOTFOUND when the file does not
 * exist) with the path and errno text in err, and leaves *m zeroed. */
hx_status hx_map_file(const char *path, hx_mapped *m, hx_err *err);
void      hx_unmap(hx_mapped *m); /* accepts a zeroed mapping */

/* Drops this process's resident pages of [p, p + n) that lie inside m (whole pages only; bytes
 * outside m are ignored): for data read once and kept elsewhere, such as weights a backend
 * repacked. The bytes stay readable; reading them again brings them back from the page cache. */
void hx_map_drop(const hx_mapped *m, const void *p, size_t n);

#endif
