/* mapfile.c - mmap wrapper. MAP_PRIVATE + PROT_READ: the file is never written, and pages are
 * shared with the page cache, so opening a model costs page-table setup, not a copy. */
#define _GNU_SOURCE
#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

hx_status hx_map_file(const char *path, hx_mapped *m, hx_err *err)
{
    *m = (hx_mapped){0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return hx_err_set(err, e == ENOENT ? HX_E_NOTFOUND : HX_E_IO, "%s: cannot open: %s", path,
                          strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return hx_err_set(err, HX_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hx_err_set(err, HX_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return HX_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED)
        return hx_err_set(err, HX_E_IO, "%s: cannot map: %s", path, strerror(e));
    m->data = p;
    m->size = (size_t)st.st_size;
    return HX_OK;
}

void hx_unmap(hx_mapped *m)
{
    if (m->data) munmap((void *)m->data, m->size);
    *m = (hx_mapped){0};
}

void hx_map_drop(const hx_mapped *m, const void *p, size_t n)
{
    const uintptr_t lo_m = (uintptr_t)m->data, hi_m = lo_m + m->size;
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    if (!m->data || hi <= lo_m || lo >= hi_m) return;
    if (lo < lo_m) lo = lo_m;
    if (hi > hi_m) hi = hi_m;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    lo = (lo + page - 1) & ~(page - 1);
    hi &= ~(page - 1);
    /* A private read-only mapping never holds changed pages, so DONTNEED loses nothing. */
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
