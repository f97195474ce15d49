/* threadpool.c - spin-then-futex persistent pool (see threadpool.h).
 *
 * Dispatch: the caller publishes fn/args, then bumps `gen`; each worker waits for gen to change,
 * runs its share, and counts itself into `n_done`, on which the caller waits the same way.
 * Waiting spins on the atomic first (a job usually follows within microseconds during a forward
 * pass) and then sleeps on the futex of the word. The barrier is a counter plus a phase word: the last thread to arrive resets the counter
 * and advances the phase, which releases the others. Each hot atomic has its own cache line. */
#define _GNU_SOURCE
#include "threadpool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc.h"

#define SPIN_ITERS  4000 /* ~100 us of polling before sleeping (pause is ~26 ns on Zen 4) */
#define YIELD_EVERY 1000  /* ~25 us: then give the core to a runnable thread, if any */

/* 64 bytes apart, so no two hot counters share a cache line (heap blocks are only 16-byte
 * aligned, so spacing rather than alignas). */
typedef struct {
    atomic_uint v;
    char        pad[64 - sizeof(atomic_uint)];
} padded_uint;

struct hx_pool {
    int          n_threads;
    pthread_t   *threads;
    hx_task_fn   fn;   /* published before gen is bumped; read after seeing the new gen */
    void        *args;
    padded_uint  gen;  /* job generation; the futex word workers sleep on */
    padded_uint  n_done;
    padded_uint  stop;
    padded_uint  bar_count;
    padded_uint  bar_phase;
    padded_uint  sleepers; /* threads in (or about to enter) futex_wait: wake only if any */
};

typedef struct {
    hx_pool *pool;
    int      ith;
} worker_arg;

static void futex_wait(atomic_uint *addr, unsigned expected)
{
    syscall(SYS_futex, (void *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr)
{
    syscall(SYS_futex, (void *)addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause");
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Waits until *addr != seen: spins first, then sleeps on the futex. The sleeper count and the
 * word are both sequentially consistent, so a waker that bumps the word and then reads
 * sleepers == 0 knows any later sleeper will see the new value in futex_wait's own check. */
static unsigned wait_change(hx_pool *pool, atomic_uint *addr, unsigned seen)
{
    unsigned v;
    for (int i = 1; i <= SPIN_ITERS; i++) {
        v = atomic_load_explicit(addr, memory_order_acquire);
        if (v != seen) return v;
        cpu_relax();
        /* A thread we wait for may be queued behind us on this core (more runnable threads
         * than cores): yielding lets it run now instead of after our spin. */
        if (i % YIELD_EVERY == 0) sched_yield();
    }
    atomic_fetch_add(&pool->sleepers.v, 1);
    while ((v = atomic_load(addr)) == seen) futex_wait(addr, seen);
    atomic_fetch_sub(&pool->sleepers.v, 1);
    return v;
}

/* Bumps *addr (releasing everything written before) and wakes sleepers if there are any. */
static void publish(hx_pool *pool, atomic_uint *addr)
{
    atomic_fetch_add(addr, 1);
    if (atomic_load(&pool->sleepers.v) != 0) futex_wake_all(addr);
}

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    hx_pool *pool = wa->pool;
    const int ith = wa->ith;
    unsigned seen = 0;
    for (;;) {
        seen = wait_change(pool, &pool->gen.v, seen);
        if (atomic_load_explicit(&pool->stop.v, memory_order_acquire)) break;
        pool->fn(pool->args, ith, pool->n_threads);
        publish(pool, &pool->n_done.v);
    }
    hx_free(wa);
    return NULL;
}

hx_status hx_pool_init(int n_threads, hx_pool **out, hx_err *err)
{
    if (n_threads < 1 || n_threads > 1024)
        return hx_err_set(err, HX_E_INVALID, "thread count %d out of range (1..1024)", n_threads);
    hx_pool *pool = hx_calloc(1, sizeof *pool);
    if (!pool) return hx_err_set(err, HX_E_NOMEM, "out of memory creating the thread pool");
    pool->n_threads = 1;
    pool->threads = hx_calloc((size_t)n_threads, sizeof *pool->threads);
    if (!pool->threads) {
        hx_pool_free(pool);
        return hx_err_set(err, HX_E_NOMEM, "out of memory creating the thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = hx_alloc(sizeof *wa);
        int rc = wa ? pthread_create(&pool->threads[i], NULL, worker_main,
                                     (*wa = (worker_arg){pool, i}, wa))
                    : -1;
        if (rc != 0) {
            hx_free(wa);
            hx_pool_free(pool);
            return hx_err_set(err, rc < 0 ? HX_E_NOMEM : HX_E_IO,
                              "cannot start worker thread %d of %d: %s", i, n_threads,
                              rc < 0 ? "out of memory" : strerror(rc));
        }
        pool->n_threads = i + 1; /* counts started threads, so free joins exactly those */
    }
    *out = pool;
    return HX_OK;
}

void hx_pool_free(hx_pool *pool)
{
    if (!pool) return;
    if (pool->n_threads > 1) {
        atomic_store_explicit(&pool->stop.v, 1, memory_order_release);
        publish(pool, &pool->gen.v);
        for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i], NULL);
    }
    hx_free(pool->threads);
    hx_free(pool);
}

int hx_pool_n_threads(const hx_pool *pool) { return pool->n_threads; }

void hx_pool_run(hx_pool *pool, hx_task_fn fn, void *args)
{
    const int nth = pool->n_threads;
    if (nth == 1) {
        fn(args, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->args = args;
    atomic_store_explicit(&pool->n_done.v, 0, memory_order_relaxed);
    publish(pool, &pool->gen.v);
    fn(args, 0, nth);
    /* Spin, then sleep like the workers: a caller spinning without end on a busy machine holds
     * the core a descheduled worker needs (prefill of the starter model measured 6x slower
     * with one other busy process on this 2-core machine). */
    unsigned v;
    while ((v = atomic_load_explicit(&pool->n_done.v, memory_order_acquire)) !=
           (unsigned)(nth - 1))
        wait_change(pool, &pool->n_done.v, v);
}

void hx_pool_barrier(hx_pool *pool)
{
    const unsigned nth = (unsigned)pool->n_threads;
    if (nth == 1) return;
    const unsigned phase = atomic_load_explicit(&pool->bar_phase.v, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->bar_count.v, 1, memory_order_acq_rel) == nth - 1) {
        atomic_store_explicit(&pool->bar_count.v, 0, memory_order_relaxed);
        publish(pool, &pool->bar_phase.v);
        return;
    }
    wait_change(pool, &pool->bar_phase.v, phase);
}

void hx_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi)
{
    if (align < 1) align = 1;
    const int64_t units = (n + align - 1) / align;
    const int64_t per = units / nth, extra = units % nth;
    const int64_t u0 = ith * per + (ith < extra ? ith : extra);
    const int64_t u1 = u0 + per + (ith < extra ? 1 : 0);
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}
