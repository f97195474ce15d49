/* check.h - the whole unit-test framework.
 *
 * A test file defines `static int test_x(void)` functions returning 0 on success, lists them in a
 * check_case table and ends with CHECK_MAIN(cases). Run with no argument it runs every case and
 * prints "ok"/"FAIL" per case; with a case name it runs only that one (ctest runs each case in
 * its own process). Checks print both values and file:line. */
#ifndef HX_CHECK_H
#define HX_CHECK_H
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_FAIL(...)                                   \
    do {                                                  \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);   \
        fprintf(stderr, __VA_ARGS__);                     \
        fputc('\n', stderr);                              \
        return 1;                                         \
    } while (0)
#define CHECK(c) do { if (!(c)) CHECK_FAIL("CHECK(%s)", #c); } while (0)
#define CHECK_EQ(a, b) do { int64_t a_ = (int64_t)(a), b_ = (int64_t)(b); if (a_ != b_) \
    CHECK_FAIL("%s == %s: %" PRId64 " vs %" PRId64, #a, #b, a_, b_); } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) \
        CHECK_FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
    } while (0)
#define CHECK_CONTAINS(hay, needle) do { const char *h_ = (hay), *n_ = (needle); \
    if (!h_ || !strstr(h_, n_)) CHECK_FAIL("\"%s\" contains \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)
/* Relative tolerance, floored at an absolute tolerance of tol around zero. */
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
    if (!(fabs(a_ - b_) <= (tol) * fmax(1.0, fabs(b_)))) \
        CHECK_FAIL("%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol)); } while (0)

typedef struct {
    const char *name;
    int (*fn)(void);
} check_case;

/* xorshift32: deterministic test data. check_rng_unit is uniform in [0, 1) with 24 bits,
 * check_rng_range uniform in [lo, hi). */
static inline uint32_t check_rng(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static inline float check_rng_unit(uint32_t *s)
{
    return (float)(check_rng(s) >> 8) * (1.0f / 16777216.0f);
}

static inline float check_rng_range(uint32_t *s, float lo, float hi)
{
    return lo + (hi - lo) * check_rng_unit(s);
}

/* Runs every case, or with names given those named (in the table's order); a name that names no
 * case is an error, so that a mistyped or removed case is never silently skipped. */
static inline int check_run(const check_case *cases, size_t n, int argc, char **argv)
{
    int failed = 0;
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < n && strcmp(argv[a], cases[i].name) != 0) i++;
        if (i == n) {
            fprintf(stderr, "no test case named %s\n", argv[a]);
            return 2;
        }
    }
    for (size_t i = 0; i < n; i++) {
        bool named = argc == 1;
        for (int a = 1; a < argc && !named; a++) named = strcmp(argv[a], cases[i].name) == 0;
        if (!named) continue;
        int r = cases[i].fn();
        printf("%s %s\n", r == 0 ? "ok  " : "FAIL", cases[i].name);
        fflush(stdout);
        failed += r != 0;
    }
    return failed ? 1 : 0;
}

#define CHECK_MAIN(cases)                                                     \
    int main(int argc, char **argv)                                           \
    {                                                                         \
        return check_run(cases, sizeof(cases) / sizeof((cases)[0]), argc, argv); \
    }

/* Directory of ../shared/data (set by CMake), or NULL with a visible skip message. */
static inline const char *check_shared_data(void)
{
    const char *d = getenv("HEARTH_SHARED_DATA");
    if (!d || !*d) {
        printf("skip: ../shared/data is absent (HEARTH_SHARED_DATA unset)\n");
        return NULL;
    }
    return d;
}

/* Path of the starter model (SmolLM2-135M Q4_1 under $HEARTH_HOME/models, default
 * ~/.cache/hearth), or NULL with a visible skip message when it is not installed. */
static inline const char *check_starter_model(void)
{
    static char path[4096];
    const char *home = getenv("HEARTH_HOME");
    if (home && *home) snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else snprintf(path, sizeof path, "%s/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                  getenv("HOME") ? getenv("HOME") : "");
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("skip: the starter model is absent (%s)\n", path);
        return NULL;
    }
    fclose(f);
    return path;
}

#endif
