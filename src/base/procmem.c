/* procmem.c - resident memory of this process (see procmem.h). */
#include "base/procmem.h"

#include <stdio.h>

void hx_proc_memory(int64_t *rss_bytes, int64_t *peak_bytes)
{
    *rss_bytes = *peak_bytes = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    long long kib;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %lld kB", &kib) == 1) *rss_bytes = kib * 1024;
        else if (sscanf(line, "VmHWM: %lld kB", &kib) == 1) *peak_bytes = kib * 1024;
    }
    fclose(f);
}
