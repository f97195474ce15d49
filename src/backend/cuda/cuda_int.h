/* cuda_int.h - what the cuda backend's C files share, and no other module includes: the
 * backend's state (cuda_impl), the op log and the staging of host arrays (op_log.c), and the
 * uploads of weights and small tensors (weights.c); cuda_backend.c implements the ops table over
 * them. The state belongs to whoever holds the backend (backend.h: one thread at a time);
 * nothing here locks. Ops record launches through hx_cuda_record and never fail: a CUDA error
 * inside one is a broken device or a bug, and hx_cuda_die aborts with its message. */
#ifndef HX_BACKEND_CUDA_CUDA_INT_H
#define HX_BACKEND_CUDA_CUDA_INT_H
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#include "base/threadpool.h"

#define ARENA_BYTES  ((size_t)8 << 20)  /* staged host arrays between two reads */
#define ROPE_TAB_PAIRS 256              /* pair frequencies rope_tab holds */
#define RECENT       1024               /* slots of the staged arrays remembered (a power of 2) */
#define MAX_GRAPHS   32                 /* captured steps kept (least recently used goes); a step
                                         * shape has one per arena half (sample_start) */
#define SEEN         64                 /* signatures remembered until their second run */

/* A device copy of a host tensor or array: a weight in its format, or floats (dtype F32). */
typedef struct {
    const void  *key;   /* the host address it was uploaded from */
    hx_cuda_wmat w;
    bool         owned; /* freed with the backend; false for weights (weight_release frees) */
} cache_ent;

/* An array staged since the arena's last restart. */
typedef struct {
    const void *src;
    size_t      bytes, padded, off;
} staged;

typedef struct cuda_impl cuda_impl;
typedef void (*op_fn)(cuda_impl *c, const void *args);

/* One recorded op: its function and its argument bytes at op_args + off. */
typedef struct {
    op_fn    fn;
    uint32_t off, size;
} op_rec;

/* A captured step. */
typedef struct {
    uint64_t        sig;
    cudaGraphExec_t exec;
    uint64_t        last_use;
} graph_ent;

/* A matmul weight `weight` uploaded: the tensor handed to the model (its `prepared` points at
 * w) and the device allocations; `half` its rows in f16 when keep_dequantized made them. */
typedef struct {
    hx_tensor    t;
    hx_cuda_wmat w;
    void        *half;
} uploaded_weight;

/* One layer's experts on the device, for the routed moe op: their gate, up and down weights as
 * device arrays of hx_cuda_wmat (`tab`), and expert 0's on the host (`like`). key: the
 * model's array of gate weights (hx_moe.gate), which lives as long as the model. */
typedef struct {
    const void   *key;
    hx_cuda_wmat *tab[3];
    hx_cuda_wmat  like[3];
} moe_tables;

/* A step sample_start started: where its n draws go, and the arena side it staged into. */
typedef struct {
    hx_sample_out *out;
    int64_t        n;
    int            side;
} ahead_step;

struct cuda_impl {
    int            device;
    cudaStream_t   stream;
    const hx_blas *blas;             /* cuBLAS, loaded at create */
    cublasHandle_t handle;
    /* Pinned host staging, two halves of ARENA_BYTES, and its device twin (one half's size).
     * Steps stage into half arena_side: a step started ahead (sample_start) may not have copied
     * its staged arrays yet when the next step is recorded, so that one stages into the other
     * half (op_log.c signs each half's graphs apart). */
    unsigned char *arena_h, *arena_d;
    int            arena_side;
    /* The steps started by sample_start and not yet finished, oldest first: where their draws
     * land (pinned, one half each) and the host array they go to. */
    ahead_step     ahead[2];
    int            n_ahead;
    void          *ahead_h;           /* pinned: 2 x SAMPLE_ROWS hx_cuda_drawn */
    cudaEvent_t    ahead_ev[2];       /* per half: its draws have arrived */
    const void    *drawn_dev;         /* the draws the last sample_start made (device) */
    size_t         arena_used;
    staged         recent[RECENT];    /* by source address (stage_slot); src NULL: free */
    int            n_recent;
    cache_ent     *cache;             /* uploaded tensors, unsorted (a few hundred) */
    size_t         n_cache, cap_cache;
    void          *half_w;            /* one dequantized weight chunk */
    int64_t        half_w_elems;
    void          *half_x;            /* a matmul's input rows in f16 */
    int64_t        half_x_elems;
    void          *xq;                /* a GEMV's input rows as 16-bit integers, their scales */
    int64_t        xq_elems;          /* (2-byte units, as ensure_half counts) */
    const float   *xq_of;             /* the rows xq holds, while no op since changed them */
    int64_t        xq_n;
    void          *att_scratch;       /* decode attention's partial states */
    int64_t        att_scratch_elems;
    void          *smp_scratch;       /* the sample op's candidates, then its tokens */
    int64_t        smp_scratch_elems;
    hx_cuda_edit  *smp_edits;         /* a step's sampling edits gathered (host; grown, kept) */
    int64_t        smp_edits_cap;
    int64_t        max_weight_elems;  /* the largest matmul weight seen by `weight` */
    int64_t        max_n_in;          /* the widest input of those weights */
    size_t         uploaded;          /* weight bytes uploaded, for the progress line */
    int64_t        max_tok;           /* rows a step may have (reserve) */
    uploaded_weight **weights;        /* every weight `weight` uploaded and not yet released */
    size_t         n_weights, cap_weights;
    /* HEARTH_CUDA_PROFILE=1: every op waits for the GPU and adds its time to a per-op total,
     * printed when the backend is destroyed (for finding where a step's time goes). */
    bool           profile;
    /* HEARTH_CUDA_PROFILE=steps: ops run as usual (graphs, no waits between them); each `read`
     * splits a step's wall time into the host's time since the last read (the engine, and
     * recording ops), launching, the GPU's time (events) and the wait for it. */
    bool           step_prof;
    cudaEvent_t    ev_a, ev_b;
    double         last_read, st_host, st_launch, st_gpu, st_wait;
    int64_t        st_n;
    double         op_start;
    struct { const char *name; double ms; int64_t n; } prof[24];
    int            n_prof;
    op_rec        *ops;               /* the op log (see flush) */
    size_t         n_ops, cap_ops;
    unsigned char *op_args;
    size_t         args_used, args_cap;
    bool           use_graphs;        /* HEARTH_CUDA_GRAPHS=0 turns replay off */
    bool           gemv_post;         /* HEARTH_CUDA_GEMV_POST=0: no rope in a GEMV (matmul) */
    /* The rotation the step's first one-row rope kernel leaves in rope_tab (cosine and sine a
     * pair frequency): its staged positions (NULL: none this step; cleared as a step runs),
     * inv_freq, mscale and pairs; a GEMV's post with the same reads it (hx_cuda_gemv_post). */
    float         *rope_tab;
    const int32_t *tab_pos;
    const float   *tab_w;
    float          tab_f;
    int32_t        tab_half;
    graph_ent      graph[MAX_GRAPHS];
    int            n_graph;
    uint64_t       clock;
    uint64_t       seen[SEEN];        /* signatures run once, eagerly */
    int            n_seen;
    void          *blas_ws;           /* cuBLAS's workspace: fixed, so GEMMs can be captured */
    void          *moe_host;          /* the moe op's host arrays (routing) */
    void          *moe_dev;           /* the routed moe op's device arrays (moe_routed) */
    int64_t        moe_dev_elems;
    moe_tables    *moe_tabs;          /* per layer, its experts' weights as device tables */
    int            n_moe_tabs, cap_moe_tabs;
    hx_pool       *load_pool;         /* threads rearranging weights at upload; made at first use */
    size_t         moe_host_bytes;
};

/* For calls inside ops, which cannot fail gracefully (see the file comment). */
#define CK(call)                                                                         \
    do {                                                                                 \
        const cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) hx_cuda_die(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define CK_BLAS(call)                                                                    \
    do {                                                                                 \
        const cublasStatus_t s_ = (call);                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            hx_cuda_die(#call, c->blas->status_string(s_), __FILE__, __LINE__);              \
    } while (0)

/* ---- op_log.c ---- */

/* Prints what failed and aborts (the CK macros' end). */
void hx_cuda_die(const char *what, const char *msg, const char *file, int line);
/* The impl, with this thread's current device set to ours; every op starts with it. */
cuda_impl *hx_cuda_enter(hx_backend *be);
/* After an op's launches: a bad launch is reported here; with HEARTH_CUDA_PROFILE=1 the op is
 * timed under `name`. */
void hx_cuda_op_done(cuda_impl *c, const char *name);
/* Appends an op to the log: fn runs with a copy of the size bytes at args at the next flush. */
void hx_cuda_record(cuda_impl *c, const char *name, op_fn fn, const void *args, size_t size);
/* Runs what the log holds (a graph replay where the step was seen before); does not wait. */
void hx_cuda_flush(cuda_impl *c);
/* hx_cuda_flush, then waits for the GPU. */
void hx_cuda_settle(cuda_impl *c);
/* hx_cuda_settle, and forgets every captured graph (device buffers they name will move). */
void hx_cuda_drop_graphs(cuda_impl *c);
/* The device address of a copy of bytes of the host array src, zero-padded to `padded`
 * bytes, valid for the ops recorded until the next read. */
const void *hx_cuda_stage(cuda_impl *c, const void *src, size_t bytes, size_t padded);
const int32_t *hx_cuda_stage_ints(cuda_impl *c, const int32_t *src, int64_t n);
/* Forgets every staged array (after a read, when the arena restarts). */
void hx_cuda_forget_staged(cuda_impl *c);

/* ---- weights.c ---- */

/* Sets be's weight, keep_dequantized, weight_release and table ops. */
void hx_cuda_weight_ops(hx_backend *be);
/* Device copies of small host tensors and arrays, made at first use and kept until destroy:
 * t as floats (norm weights, biases), n floats at p (rope frequencies), a table read in its
 * format (the embeddings). */
const float *hx_cuda_dev_floats(cuda_impl *c, const hx_tensor *t);
const float *hx_cuda_dev_array(cuda_impl *c, const float *p, int64_t n);
const hx_cuda_wmat *hx_cuda_dev_wmat(cuda_impl *c, const hx_tensor *t);
/* The upload behind a tensor the weight op returned. */
uploaded_weight *hx_cuda_uploaded_of(const hx_tensor *w);
/* A mixture-of-experts layer's expert tables for the routed moe op, or NULL. */
const moe_tables *hx_cuda_moe_tables(cuda_impl *c, const hx_moe *m);
/* Frees every upload the backend owns, the weights' f16 copies and the expert tables. */
void hx_cuda_weights_free(cuda_impl *c);

#endif
