/* sampling_flags.c - the sampling flags shared by run, chat and serve: --temp --top-k --top-p
 * --min-p --seed. Each is checked for its range here, so every verb refuses the same bad values
 * with the same message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* value as a float in [lo, hi]; false when it is not one. */
static bool float_in(const char *value, double lo, double hi, float *out)
{
    char *end;
    const double x = strtod(value, &end);
    if (*value == '\0' || *end != '\0' || !(x >= lo && x <= hi)) return false;
    *out = (float)x;
    return true;
}

int hx_cli_sampling_flag(const char *cmd, const char *flag, const char *value,
                         hx_sampling_flags *f)
{
    const char *want = NULL;
    char *end;
    if (strcmp(flag, "--temp") == 0) {
        f->temp_set = true;
        if (!float_in(value, 0, 100, &f->temp)) want = "a number from 0 to 100";
    } else if (strcmp(flag, "--top-p") == 0) {
        f->top_p_set = true;
        if (!float_in(value, 0, 1, &f->top_p)) want = "a number from 0 to 1";
    } else if (strcmp(flag, "--min-p") == 0) {
        f->min_p_set = true;
        if (!float_in(value, 0, 1, &f->min_p)) want = "a number from 0 to 1";
    } else if (strcmp(flag, "--top-k") == 0) {
        f->top_k_set = true;
        const long k = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || k < 0 || k > (1L << 24)) want = "a whole number >= 0";
        f->top_k = (int32_t)k;
    } else if (strcmp(flag, "--seed") == 0) {
        f->seed_set = true;
        f->seed = strtoull(value, &end, 10);
        if (*value == '\0' || *value == '-' || *end != '\0') want = "a whole number >= 0";
    } else {
        return 0;
    }
    if (!want) return 1;
    fprintf(stderr, "hearth %s: %s wants %s, got '%s'\n", cmd, flag, want, value);
    return -1;
}
