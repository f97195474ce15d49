/* op_log.c - the cuda backend's op log and staging (cuda_int.h): ops are recorded, not run;
 * a step runs whole at the next read, replayed as a CUDA graph once seen twice; the small host
 * arrays ops take are copied into a pinned arena the step copies to the device. Owns the log,
 * the captured graphs and the arena's contents, not the arena itself (cuda_backend.c makes
 * it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "base/alloc.h"
#include "base/clock.h"

void hx_cuda_die(const char *what, const char *msg, const char *file, int line)
{
    fprintf(stderr, "hearth: cuda: %s failed: %s (%s:%d)\n", what, msg, file, line);
    abort();
}

/* After each op's launches: a bad launch configuration is reported here, not by the launch;
 * when profiling, the op's time (launch and GPU) is added to its name's total. */
void hx_cuda_op_done(cuda_impl *c, const char *name)
{
    CK(cudaGetLastError());
    if (!c->profile) return;
    CK(cudaStreamSynchronize(c->stream));
    int i = 0;
    while (i < c->n_prof && strcmp(c->prof[i].name, name) != 0) i++;
    if (i == c->n_prof) {
        if (i == (int)HX_COUNTOF(c->prof)) return;
        c->prof[c->n_prof++].name = name;
    }
    c->prof[i].ms += hx_now_ms() - c->op_start;
    c->prof[i].n++;
}

/* The impl, with this thread's current device set to ours (ops may run on another thread than
 * the one that created the backend, and the current device is per thread). */
cuda_impl *hx_cuda_enter(hx_backend *be)
{
    cuda_impl *c = be->impl;
    CK(cudaSetDevice(c->device));
    if (c->profile) {
        CK(cudaStreamSynchronize(c->stream));
        c->op_start = hx_now_ms();
    }
    return c;
}

/* ---- the op log: ops recorded, run at the next `read`, repeated steps as CUDA graphs ----
 *
 * An op records its launch (a function and its arguments, device pointers and sizes only) and
 * returns; `read`, `free`, `kv_free` and destroy run the log first. So a step (the ops between
 * two reads) is known whole before any of it runs, and the second time a step with the same
 * signature (every op's function and argument bytes, staging offsets included) comes, it is
 * captured as a CUDA graph and from then on replayed with one launch: a decode step of an 8B
 * model is ~550 launches, whose host cost is of the same order as the GPU time. The staged host
 * arrays are copied by the graph from the pinned arena at replay, so new positions and block
 * tables flow in without a new capture; block tables are staged padded to BLOCKS_PAD entries so
 * that a growing context changes the signature only every BLOCKS_PAD blocks. */

static void run_log(cuda_impl *c)
{
    for (size_t i = 0; i < c->n_ops; i++) {
        c->ops[i].fn(c, c->op_args + c->ops[i].off);
        CK(cudaGetLastError());
    }
}

/* A hash of every op's function and argument bytes, a word at a time (argument records are
 * memset before they are filled, so their padding is zero; their sizes are multiples of 8). */
static uint64_t log_signature(const cuda_impl *c)
{
    /* the arena's half: a graph copies its staged arrays from there */
    uint64_t h = 1469598103934665603ull ^ (uint64_t)c->arena_side;
    for (size_t i = 0; i < c->n_ops; i++) {
        uint64_t w = 0;
        memcpy(&w, &c->ops[i].fn, sizeof w < sizeof c->ops[i].fn ? sizeof w : sizeof c->ops[i].fn);
        h = (h ^ w ^ c->ops[i].size) * 1099511628211ull;
        const unsigned char *a = c->op_args + c->ops[i].off;
        for (size_t k = 0; k + 8 <= c->ops[i].size; k += 8) {
            memcpy(&w, a + k, 8);
            h = (h ^ w) * 1099511628211ull;
            h ^= h >> 29;
        }
    }
    return h;
}

/* Captures the log as a graph into a slot (the least recently used when all are taken). */
static graph_ent *capture(cuda_impl *c, uint64_t sig)
{
    CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    run_log(c);
    cudaGraph_t g;
    CK(cudaStreamEndCapture(c->stream, &g));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
    graph_ent *e = &c->graph[0];
    if (c->n_graph < MAX_GRAPHS) e = &c->graph[c->n_graph++];
    else {
        for (int i = 1; i < MAX_GRAPHS; i++)
            if (c->graph[i].last_use < e->last_use) e = &c->graph[i];
        cudaGraphExecDestroy(e->exec);
    }
    *e = (graph_ent){sig, exec, 0};
    return e;
}

/* Runs what the log holds: a graph's replay, a capture (a signature seen once before), or the
 * ops one by one. */
void hx_cuda_flush(cuda_impl *c)
{
    if (c->n_ops == 0) return;
    graph_ent *g = NULL;
    if (c->use_graphs) {
        const uint64_t sig = log_signature(c);
        for (int i = 0; i < c->n_graph && !g; i++)
            if (c->graph[i].sig == sig) g = &c->graph[i];
        bool seen = false;
        for (int i = 0; i < SEEN && !seen; i++) seen = c->seen[i] == sig;
        if (!g && seen) g = capture(c, sig);
        else if (!g) c->seen[c->n_seen++ % SEEN] = sig;
        if (g) {
            g->last_use = ++c->clock;
            CK(cudaGraphLaunch(g->exec, c->stream));
        }
    }
    if (!g) run_log(c);
    c->n_ops = 0;
    c->args_used = 0;
    c->tab_pos = NULL; /* the next step's first rope leaves its own (cuda_rope) */
}

/* Runs what is logged and waits for the GPU to finish it. */
void hx_cuda_settle(cuda_impl *c)
{
    hx_cuda_flush(c);
    CK(cudaStreamSynchronize(c->stream));
}

/* Appends an op (its arguments are copied); with HEARTH_CUDA_PROFILE it runs at once, timed. */
void hx_cuda_record(cuda_impl *c, const char *name, op_fn fn, const void *args, size_t size)
{
    c->xq_of = NULL; /* any op may write the rows xq was made from (cuda_matmul re-sets it) */
    if (c->profile) {
        fn(c, args);
        hx_cuda_op_done(c, name);
        return;
    }
    const size_t need = c->args_used + ((size + 15) & ~(size_t)15);
    if (c->n_ops == c->cap_ops || need > c->args_cap) {
        const size_t cap_ops = c->cap_ops ? 2 * c->cap_ops : 1024;
        const size_t cap_args = need > 2 * c->args_cap ? 2 * need : 2 * c->args_cap;
        op_rec *o = hx_realloc(c->ops, cap_ops * sizeof *o);
        if (o) c->ops = o, c->cap_ops = cap_ops;
        unsigned char *a = o ? hx_realloc(c->op_args, cap_args) : NULL;
        if (a) c->op_args = a, c->args_cap = cap_args;
        if (!o || !a)
            hx_cuda_die("host allocation", "out of memory for the op log", __FILE__, __LINE__);
    }
    memcpy(c->op_args + c->args_used, args, size);
    c->ops[c->n_ops++] = (op_rec){fn, (uint32_t)c->args_used, (uint32_t)size};
    c->args_used = need;
}

/* ---- staging of small host arrays ---- */

typedef struct {
    size_t off, bytes;
} stage_args;

/* The arena half steps stage into now. */
static unsigned char *arena_half(const cuda_impl *c)
{
    return c->arena_h + (size_t)c->arena_side * ARENA_BYTES;
}

static void run_stage(cuda_impl *c, const void *p)
{
    const stage_args *a = p;
    CK(cudaMemcpyAsync(c->arena_d + a->off, arena_half(c) + a->off, a->bytes,
                       cudaMemcpyHostToDevice, c->stream));
}

/* Forgets every staged array (the arena restarts, or the table is half full). */
void hx_cuda_forget_staged(cuda_impl *c)
{
    if (c->n_recent == 0) return;
    memset(c->recent, 0, sizeof c->recent);
    c->n_recent = 0;
}

/* The slot of src in the table of staged arrays: where it is, or the free one it would take.
 * A step stages each sequence's block table and positions once and finds them again for every
 * layer's ops, so the table is looked up some thousands of times a step: hashed. */
static staged *stage_slot(cuda_impl *c, const void *src)
{
    uint64_t h = (uint64_t)(uintptr_t)src * 0x9e3779b97f4a7c15ull;
    for (size_t i = (size_t)(h >> 40) & (RECENT - 1);; i = (i + 1) & (RECENT - 1))
        if (c->recent[i].src == src || !c->recent[i].src) return &c->recent[i];
}

/* The device address of a copy of bytes of src, zero-padded to `padded` bytes. */
const void *hx_cuda_stage(cuda_impl *c, const void *src, size_t bytes, size_t padded)
{
    staged *e = stage_slot(c, src);
    if (e->src == src && e->bytes == bytes && e->padded == padded &&
        memcmp(arena_half(c) + e->off, src, bytes) == 0)
        return c->arena_d + e->off;
    HX_ASSERT(bytes <= padded && padded <= ARENA_BYTES);
    if (c->arena_used + padded > ARENA_BYTES) { /* staged bytes may still be unread: run them */
        hx_cuda_settle(c);
        c->arena_used = 0;
        hx_cuda_forget_staged(c);
    }
    const size_t off = c->arena_used;
    memcpy(arena_half(c) + off, src, bytes);
    memset(arena_half(c) + off + bytes, 0, padded - bytes);
    stage_args a;
    memset(&a, 0, sizeof a);
    a.off = off;
    a.bytes = padded;
    hx_cuda_record(c, "stage", run_stage, &a, sizeof a);
    c->arena_used = (off + padded + 15) & ~(size_t)15;
    if (c->n_recent >= RECENT / 2) hx_cuda_forget_staged(c); /* wholesale, keeping probes short */
    e = stage_slot(c, src);
    if (!e->src) c->n_recent++;
    *e = (staged){src, bytes, padded, off};
    return c->arena_d + off;
}

const int32_t *hx_cuda_stage_ints(cuda_impl *c, const int32_t *src, int64_t n)
{
    return hx_cuda_stage(c, src, (size_t)n * sizeof *src, (size_t)n * sizeof *src);
}

/* Runs what is logged, waits for the GPU and forgets every captured graph. */
void hx_cuda_drop_graphs(cuda_impl *c)
{
    hx_cuda_settle(c);
    for (int i = 0; i < c->n_graph; i++) cudaGraphExecDestroy(c->graph[i].exec);
    c->n_graph = 0;
}
