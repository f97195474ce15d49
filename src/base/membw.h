/* membw.h - a quick probe of the memory read bandwidth decode can use.
 *
 * Decode of one sequence reads every weight byte once per token, so its ceiling is the
 * machine's streaming read bandwidth divided by the bytes read per token (engine/fit.h). This
 * measures that bandwidth the way the matmuls read: n_threads threads, each streaming its own
 * contiguous share of a buffer far larger than the last-level cache (256 MiB, advised to huge
 * pages like the repacked weights). It does not measure page-cache-backed mappings (4 KiB
 * pages, a little slower) or write bandwidth. bench/membw.c is the fuller dev tool. */
#ifndef HX_BASE_MEMBW_H
#define HX_BASE_MEMBW_H

/* Read bandwidth in bytes per second: the best of repeated passes over the buffer during about
 * ms milliseconds (at least two passes; filling the buffer first adds ~50-100 ms). n_threads
 * <= 0 means 1. Returns 0 when the buffer or the threads cannot be had. Allocates 256 MiB for
 * the duration of the call. Thread-safe, but two probes at once measure each other. */
double hx_membw_read(int n_threads, int ms);

#endif
