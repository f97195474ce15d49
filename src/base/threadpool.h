/* threadpool.h - a persistent pool of worker threads for CPU kernels.
 *
 * A pool of n threads counts the calling thread as thread 0: hx_pool_run(fn, args) runs
 * fn(args, ith, nth) on every thread (ith = 0..nth-1) and returns when all have finished. Work
 * is split by the task itself from (ith, nth), deterministically (hx_split_range), so results do
 * not depend on timing. Inside a task, hx_pool_barrier() separates dependent phases without
 * returning to the caller, which is how a whole forward pass can run as one dispatch.
 *
 * Owner: the thread that created the pool; hx_pool_run must not be called concurrently or from
 * inside a task. Workers spin briefly for the next job (dispatch latency matters: a decode step
 * issues hundreds of ops) and then sleep on a futex, so an idle pool costs no CPU. */
#ifndef HX_BASE_THREADPOOL_H
#define HX_BASE_THREADPOOL_H
#include <stdint.h>

#include "err.h"

typedef struct hx_pool hx_pool;

typedef void (*hx_task_fn)(void *args, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1; 1 means everything runs on the caller). */
hx_status hx_pool_init(int n_threads, hx_pool **out, hx_err *err);
void      hx_pool_free(hx_pool *pool); /* joins the workers; accepts NULL */
int       hx_pool_n_threads(const hx_pool *pool);

/* Runs fn on every thread of the pool, the caller included, and waits for all of them. */
void hx_pool_run(hx_pool *pool, hx_task_fn fn, void *args);

/* Called by every thread of a running task: returns once all nth threads have arrived. */
void hx_pool_barrier(hx_pool *pool);

/* Splits [0, n) into nth contiguous parts whose boundaries are multiples of `align` (except the
 * end), and gives part ith as [*lo, *hi). Parts differ by at most one `align` unit. */
void hx_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi);

#endif
