/* procmem.h - this process's resident memory, now and at its peak.
 *
 * Read from /proc/self/status (VmRSS, VmHWM). Not getrusage's ru_maxrss: Linux carries that
 * across execve, so a process started from a large parent (a test runner) would report the
 * parent's size as its own peak. */
#ifndef HX_BASE_PROCMEM_H
#define HX_BASE_PROCMEM_H
#include <stdint.h>

/* Resident bytes now and the peak so far; 0 where the system does not say. */
void hx_proc_memory(int64_t *rss_bytes, int64_t *peak_bytes);

#endif
