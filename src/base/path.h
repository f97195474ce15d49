/* path.h - file-system path helpers shared by the loaders and model discovery. */
#ifndef HX_BASE_PATH_H
#define HX_BASE_PATH_H
#include <stdbool.h>
#include <stddef.h>

bool hx_path_is_dir(const char *p);
bool hx_path_is_file(const char *p);
bool hx_str_ends_with(const char *s, const char *suffix);

/* dir + "/" + name in a new hx_alloc'd string (NULL when out of memory). */
char *hx_path_join(const char *dir, const char *name);

/* snprintf that reports truncation: false when the result did not fit (buf then holds a
 * truncated, NUL-terminated string). Paths that do not fit are treated as absent by callers. */
bool hx_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
