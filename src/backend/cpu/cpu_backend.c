/* cpu_backend.c - CPU ops: thin threaded drivers around per-row math.
 *
 * Parallel split, op by op: matmul by output features (each thread reads a disjoint slice of
 * the weight, so the threads together stream the matrix once per step, the decode bottleneck);
 * attention by (row, head) pairs, in runs that share a kv head; norms, rope and element-wise
 * ops by rows. Each task gets (ith, nth) and computes its range with hx_split_range, so a given
 * thread count always produces the same bits. Matmul kernels read each weight once per call
 * whatever the row count (the paths are described at the matmul section). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/f16.h"
#include "base/threadpool.h"
#include "backend/cpu/act_fn.h"
#include "backend/cpu/act_quant.h"
#include "backend/cpu/attn.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/packed.h"
#include "backend/kv_quant.h"

#define MAX_THREADS 256

typedef struct {
    hx_pool   *pool;
    int        n_threads;
    hx_kernels k;                     /* dot/matmul/quantizer variants for this CPU */
    hx_attn_variant attn[4];          /* attention/cache-write variants, best first, ref last */
    int        n_attn;
    bool       int8_act;              /* single-term int8 activations everywhere (opt-in) */
    float     *scratch[MAX_THREADS]; /* per-thread rows: dequantized weights, attention state */
    size_t     scratch_floats;
    void      *act_mem;              /* quantized activations of one matmul input, two terms */
    void      *act_buf;              /* act_mem rounded up to 64 bytes: the first term */
    void      *act2_buf;             /* the second (residual) term, act_bytes further */
    size_t     act_bytes;            /* of one term */
    hx_swiglu_fn swiglu;             /* the gated activation variants for this CPU */
    hx_swiglu_fn geglu;
    hx_pmatmul_fn pmatmul;           /* the packed-weight matmul, NULL where packing does not pay */
    float     *sums;                 /* [max_tok, max_row / 32] activation block sums (packed.h) */
    size_t     sums_floats;
    void      *own_act[MAX_THREADS]; /* per thread: both terms and sums of up to OWN_ROWS rows */
    size_t     own_act_bytes;        /* of one term there */
} cpu_impl;

/* Up to this many rows (decode), every thread quantizes the rows itself into its own buffer
 * rather than sharing one quantization behind a barrier: the barrier costs more than the row. */
#define OWN_ROWS 4

static cpu_impl *impl_of(hx_backend *be) { return be->impl; }

/* Element-wise and row-wise ops of fewer than SMALL_OP elements (a decode step's norms, rope,
 * gate, embedding row) run on the calling thread alone: a few microseconds of work, against a
 * pool hand-off that every thread must reach, which on a loaded machine can wait for a
 * descheduled worker. Their results do not depend on the split, so the bits are the same. */
#define SMALL_OP 16384

static void run_op(cpu_impl *c, hx_task_fn fn, void *args, int64_t n_elems)
{
    if (n_elems < SMALL_OP) fn(args, 0, 1);
    else hx_pool_run(c->pool, fn, args);
}

/* Gives every thread room for two rows of max_row floats (a dequantized weight row and a
 * dequantized bias, or an attention accumulator). */
static hx_status cpu_reserve(hx_backend *be, int64_t max_row, int64_t max_tok, hx_err *err)
{
    cpu_impl *c = be->impl;
    const int64_t act_n = (max_row + HX_ACT_BLOCK - 1) / HX_ACT_BLOCK * HX_ACT_BLOCK;
    const size_t act = hx_act_bytes(max_tok > 0 ? max_tok : 1, act_n > 0 ? act_n : HX_ACT_BLOCK);
    if (act > c->act_bytes) { /* act is a multiple of 64, so both terms stay aligned */
        void *p = hx_alloc(2 * act + 64);
        if (!p) return hx_err_set(err, HX_E_NOMEM, "out of memory for CPU scratch");
        hx_free(c->act_mem);
        c->act_mem = p;
        c->act_buf = (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
        c->act2_buf = (unsigned char *)c->act_buf + act;
        c->act_bytes = act;
    }
    const size_t sums = (size_t)(max_tok > 0 ? max_tok : 1) * (size_t)(act_n / HX_ACT_BLOCK + 1);
    if (sums > c->sums_floats) {
        float *p = hx_realloc(c->sums, sums * sizeof(float));
        if (!p) return hx_err_set(err, HX_E_NOMEM, "out of memory for CPU scratch");
        c->sums = p;
        c->sums_floats = sums;
    }
    const size_t own = hx_act_bytes(OWN_ROWS, act_n > 0 ? act_n : HX_ACT_BLOCK);
    if (own > c->own_act_bytes) {
        const size_t own_sums = OWN_ROWS * (size_t)(act_n / HX_ACT_BLOCK + 1) * sizeof(float);
        for (int t = 0; t < c->n_threads; t++) {
            void *p = hx_alloc(2 * own + own_sums + 64);
            if (!p) return hx_err_set(err, HX_E_NOMEM, "out of memory for CPU scratch");
            hx_free(c->own_act[t]);
            c->own_act[t] = p;
        }
        c->own_act_bytes = own;
    }
    const size_t floats = 2 * (size_t)(max_row > 0 ? max_row : 1);
    if (floats <= c->scratch_floats) return HX_OK;
    for (int t = 0; t < c->n_threads; t++) {
        float *p = hx_realloc(c->scratch[t], floats * sizeof(float));
        if (!p) return hx_err_set(err, HX_E_NOMEM, "out of memory for CPU scratch");
        c->scratch[t] = p;
    }
    c->scratch_floats = floats;
    return HX_OK;
}

/* Ops never allocate: a row longer than what reserve prepared is a caller bug. */
static void check_scratch(const cpu_impl *c, int64_t floats)
{
    HX_ASSERT(floats >= 0 && (size_t)floats <= c->scratch_floats);
}

/* ---- memory ---- */

static void *cpu_alloc(hx_backend *be, size_t bytes)
{
    (void)be;
    return hx_alloc(bytes ? bytes : 1);
}

static void cpu_free(hx_backend *be, void *p)
{
    (void)be;
    hx_free(p);
}

static void cpu_read(hx_backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n);
}

/* Bytes of K (or of V) one block holds: n_layer * n_kv_head tiles; 0 for a bad shape. */
static size_t kv_block_bytes(const hx_kv_store *kv)
{
    if (kv->n_layer <= 0 || kv->n_kv_head <= 0 || kv->block_tokens <= 0 || kv->d_head <= 0)
        return 0;
    return (size_t)kv->n_layer * (size_t)kv->n_kv_head *
           hx_kv_tile_bytes(kv->dtype, kv->block_tokens, kv->d_head);
}

/* K and V of every block, layer and kv head in kv->dtype: n_blocks * n_layer * n_kv_head tiles
 * of hx_kv_tile_bytes (kv_quant.h) each. Zeroed, so an unwritten position reads as 0 in every
 * dtype (scale and minimum 0). */
static hx_status cpu_kv_alloc(hx_backend *be, hx_kv_store *kv, hx_err *err)
{
    (void)be;
    static const char *const names[HX_KV_DTYPE_COUNT] = {"f16", "q8", "q4"};
    const hx_status ok = hx_kv_dtype_check(kv->dtype, kv->d_head, err);
    if (ok != HX_OK) return ok;
    const size_t per = kv_block_bytes(kv);
    if (kv->n_blocks <= 0 || per == 0 || (size_t)kv->n_blocks > SIZE_MAX / 2 / per)
        return hx_err_set(err, HX_E_INVALID, "KV cache of %d blocks is out of range", kv->n_blocks);
    const size_t bytes = (size_t)kv->n_blocks * per;
    kv->k = hx_calloc(1, bytes);
    kv->v = hx_calloc(1, bytes);
    if (!kv->k || !kv->v) {
        hx_free(kv->k);
        hx_free(kv->v);
        kv->k = kv->v = NULL;
        return hx_err_set(err, HX_E_NOMEM, "out of memory for a %zu MiB %s KV cache",
                          2 * bytes >> 20, names[kv->dtype]);
    }
    return HX_OK;
}

static void cpu_kv_free(hx_backend *be, hx_kv_store *kv)
{
    (void)be;
    hx_free(kv->k);
    hx_free(kv->v);
    kv->k = kv->v = NULL;
}

/* A block's K and V are each one contiguous run of kv_block_bytes (layout in backend.h). */
static void cpu_kv_copy(hx_backend *be, const hx_kv_store *kv, int32_t src, int32_t dst)
{
    (void)be;
    HX_ASSERT(src != dst && src >= 0 && dst >= 0 && src < kv->n_blocks && dst < kv->n_blocks);
    const size_t per = kv_block_bytes(kv), from = (size_t)src * per, to = (size_t)dst * per;
    memcpy((unsigned char *)kv->k + to, (const unsigned char *)kv->k + from, per);
    memcpy((unsigned char *)kv->v + to, (const unsigned char *)kv->v + from, per);
}

/* ---- embed ---- */

typedef struct {
    const hx_tensor *w;
    const int32_t   *ids;
    int64_t          n_tok;
    float           *out;
} embed_args;

static void embed_task(void *p, int ith, int nth)
{
    const embed_args *a = p;
    const int64_t d = a->w->shape[a->w->n_dims - 1];
    int64_t t0, t1;
    hx_split_range(a->n_tok, ith, nth, 1, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) hx_tensor_dequant_row(a->w, a->ids[t], a->out + t * d);
}

static void cpu_embed(hx_backend *be, const hx_tensor *w, const int32_t *ids, int64_t n_tok,
                      float *out)
{
    embed_args a = {w, ids, n_tok, out};
    run_op(impl_of(be), embed_task, &a, n_tok * w->shape[w->n_dims - 1]);
}

/* ---- matmul ----
 * Weights the backend repacked at load (packed.h: Q4_0/Q4_1/Q8_0/Q4_K/Q6_K on AVX2 or VNNI CPUs) take
 * the packed path, two-term int8 activations at every row count (matmul_packed_task below).
 * Other weights take one of four paths, picked per call; the first two are the default and
 * both are exact to within
 * 1e-5 of the float64 reference's logits scale (starter model: teacher-forced top-1 agreement
 * with the float64 reference 99.9%, the same as the scalar dequantize-then-dot loop).
 *  - f32 activations, fewer than TWO_TERM_ROWS rows (decode) or no VNNI: each thread takes a
 *    slice of output features and runs the f32-activation kernel of the weight format
 *    (fmatmul_*.c): weights dequantized in registers, FMA against the f32 rows. Decode is
 *    memory bound, and this runs at ~8 GB/s of weights per core, 80% of the int8 dot.
 *  - two-term int8 activations, TWO_TERM_ROWS rows or more with a VNNI tile (prefill): every
 *    thread quantizes its share of rows to int8 blocks (x ~= d1 q1), then the residual
 *    (x - d1 q1 ~= d2 q2), a barrier, then the VNNI tile runs both terms against one unpacked
 *    weight panel. The activation error is ~1/127^2 of the block maximum instead of 1/254, so
 *    it is as accurate as f32 in practice, and ~2x faster than the f32 FMA tile (VNNI does 64
 *    MACs per zmm op against 16 for FMA; the second term costs the tile about 1.6x, not 2x,
 *    since the panel is shared). Measured on the starter model: see the file header of
 *    matmul_tile_avx512.c. Smaller activation blocks (16) would halve the error at most; not
 *    enough (single int8 term: 96.5% top-1, KL 0.004, wrong greedy answers).
 *  - int8 activations (HX_CPU_INT8_ACT, opt-in): a single int8 term everywhere, the fastest
 *    and the least exact (the numbers above).
 *  - the scalar dequantize-row-then-dot loop (matmul_plain_task): rows whose length is not a
 *    multiple of 32, where the kernels do not apply; also the spec of the others. */

#define TWO_TERM_ROWS 8 /* below, the weight panel of the VNNI tile does not pay for itself */

typedef struct {
    cpu_impl        *c;
    const hx_tensor *w;
    const float     *bias; /* [n_out] f32 or NULL */
    const float     *x;    /* [n_rows, n_in] */
    int64_t          n_rows;
    float           *out;  /* [n_rows, n_out] */
    hx_wmat          wm;
    hx_act           act;
    hx_act           act2; /* the residual term, two-term path only */
    atomic_llong     next; /* packed path: the next group not yet taken */
} matmul_args;

static void matmul_plain_task(void *p, int ith, int nth)
{
    const matmul_args *a = p;
    const int64_t n_in = a->w->shape[a->w->n_dims - 1], n_out = a->w->shape[0];
    float *restrict wrow = a->c->scratch[ith];
    int64_t o0, o1;
    hx_split_range(n_out, ith, nth, 16, &o0, &o1);
    for (int64_t o = o0; o < o1; o++) {
        hx_tensor_dequant_row(a->w, o, wrow);
        const float b = a->bias ? a->bias[o] : 0.0f;
        for (int64_t r = 0; r < a->n_rows; r++) {
            const float *restrict xr = a->x + r * n_in;
            float s = 0.0f;
            for (int64_t i = 0; i < n_in; i++) s += wrow[i] * xr[i];
            a->out[r * n_out + o] = s + b;
        }
    }
}

static void add_bias(const matmul_args *a, int64_t o0, int64_t o1, int64_t n_out)
{
    if (!a->bias) return;
    for (int64_t r = 0; r < a->n_rows; r++)
        for (int64_t o = o0; o < o1; o++) a->out[r * n_out + o] += a->bias[o];
}

static void matmul_f32_task(void *p, int ith, int nth)
{
    const matmul_args *a = p;
    const int64_t n_out = a->wm.n_out;
    int64_t o0, o1;
    hx_split_range(n_out, ith, nth, 16, &o0, &o1);
    if (o0 >= o1) return;
    a->c->k.fmatmul[a->wm.dtype](&a->wm, o0, o1, a->x, 0, a->n_rows, a->out, n_out);
    add_bias(a, o0, o1, n_out);
}

static void matmul_int8_task(void *p, int ith, int nth)
{
    matmul_args *a = p;
    const hx_kernels *k = &a->c->k;
    const int64_t n = a->act.n, n_out = a->wm.n_out;
    int64_t r0, r1, o0, o1;
    hx_split_range(a->n_rows, ith, nth, 1, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        k->act_quant(a->x + r * n, a->act.qs + r * n, a->act.d + r * (n / HX_ACT_BLOCK),
                     a->act.bsum + r * (n / HX_ACT_SUB), n);
    hx_pool_barrier(a->c->pool);
    hx_split_range(n_out, ith, nth, 16, &o0, &o1);
    if (o0 >= o1) return;
    k->matmul[a->wm.dtype](&a->wm, o0, o1, &a->act, 0, a->n_rows, a->out, n_out);
    add_bias(a, o0, o1, n_out);
}

/* Quantizes rows [r0, r1) of the input to int8 blocks and, two-term, their residuals too. */
static void quantize_rows(const matmul_args *a, int64_t r0, int64_t r1, hx_act *x, hx_act *x2)
{
    const hx_kernels *k = &a->c->k;
    const int64_t n = x->n, nb = n / HX_ACT_BLOCK, ns = n / HX_ACT_SUB;
    for (int64_t r = r0; r < r1; r++) {
        k->act_quant(a->x + r * n, x->qs + r * n, x->d + r * nb, x->bsum + r * ns, n);
        if (x2)
            k->act_quant2(a->x + r * n, x->qs + r * n, x->d + r * nb, x2->qs + r * n,
                          x2->d + r * nb, x2->bsum + r * ns, n);
    }
}

/* Phase 1 quantizes this thread's rows (and, two-term, their residuals); phase 2, after the
 * barrier, runs the tile over this thread's outputs. */
static void matmul_two_term_task(void *p, int ith, int nth)
{
    matmul_args *a = p;
    const int64_t n_out = a->wm.n_out;
    int64_t r0, r1, o0, o1;
    hx_split_range(a->n_rows, ith, nth, 1, &r0, &r1);
    quantize_rows(a, r0, r1, &a->act, &a->act2);
    hx_pool_barrier(a->c->pool);
    hx_split_range(n_out, ith, nth, 16, &o0, &o1);
    if (o0 >= o1) return;
    a->c->k.matmul2[a->wm.dtype](&a->wm, o0, o1, &a->act, &a->act2, 0, a->n_rows, a->out, n_out);
    add_bias(a, o0, o1, n_out);
}

/* Packed weights (packed.h): phase 1 quantizes this thread's rows (two terms unless the
 * backend runs single-term int8) and their block sums; phase 2, after a barrier, runs this
 * thread's groups of 16 outputs over every row. Up to OWN_ROWS rows every thread quantizes all
 * of them into its own buffer instead, and there is no barrier. */
static void matmul_packed_task(void *p, int ith, int nth)
{
    matmul_args *a = p;
    cpu_impl *c = a->c;
    const hx_packed *pk = a->w->prepared;
    const bool two = !c->int8_act;
    hx_act own, own2, *x = &a->act, *x2 = two ? &a->act2 : NULL;
    float *sums = c->sums;
    if (a->n_rows <= OWN_ROWS) {
        unsigned char *m = (unsigned char *)(((uintptr_t)c->own_act[ith] + 63) & ~(uintptr_t)63);
        hx_act_init(&own, m, a->n_rows, x->n);
        hx_act_init(&own2, m + c->own_act_bytes, a->n_rows, x->n);
        x = &own;
        x2 = two ? &own2 : NULL;
        sums = (float *)(void *)(m + 2 * c->own_act_bytes);
        quantize_rows(a, 0, a->n_rows, x, x2);
        hx_packed_act_sums(x, x2, 0, a->n_rows, sums);
    } else {
        int64_t r0, r1;
        hx_split_range(a->n_rows, ith, nth, 1, &r0, &r1);
        quantize_rows(a, r0, r1, x, x2);
        hx_packed_act_sums(x, x2, r0, r1, sums);
        hx_pool_barrier(c->pool);
    }
    /* Prefill takes groups in chunks from a shared counter rather than an even split: the
     * threads are not equally fast on a shared machine (+5% prompt tok/s on the 1B shape).
     * Decode keeps one contiguous range per thread, one long stream for the prefetchers (1%
     * faster than chunks). A group is computed whole by one thread either way, so the bits do
     * not depend on which. */
    const int64_t chunk = a->n_rows <= OWN_ROWS ? (pk->n_groups + nth - 1) / nth
                          : pk->n_groups / (8 * nth) > 1 ? pk->n_groups / (8 * nth) : 1;
    for (;;) {
        const int64_t g0 = atomic_fetch_add_explicit(&a->next, chunk, memory_order_relaxed);
        if (g0 >= pk->n_groups) break;
        const int64_t g1 = g0 + chunk < pk->n_groups ? g0 + chunk : pk->n_groups;
        c->pmatmul(pk, g0, g1, x, x2, sums, 0, a->n_rows, a->out, pk->n_out);
        const int64_t o1 = g1 * HX_PACK_ROWS < pk->n_out ? g1 * HX_PACK_ROWS : pk->n_out;
        add_bias(a, g0 * HX_PACK_ROWS, o1, pk->n_out);
    }
}

/* ---- weights: repacking at load ---- */

/* A weight the backend repacked: the tensor handed to the model (its `prepared` points at p)
 * and the packed copy. */
typedef struct {
    hx_tensor t;
    hx_packed p;
    void     *mem; /* p.data's allocation */
} packed_weight;

typedef struct {
    const hx_packed *p;
    const hx_wmat   *w;
} pack_args;

static void pack_task(void *p, int ith, int nth)
{
    const pack_args *a = p;
    int64_t g0, g1;
    hx_split_range(a->p->n_groups, ith, nth, 1, &g0, &g1);
    hx_pack_groups(a->p, a->w, g0, g1);
}

/* Q4_0/Q4_1/Q8_0/Q4_K/Q6_K matrices are repacked into 16-row groups where this CPU has the
 * packed kernel (packed.h); every other weight is used as the file has it. The copy replaces the file's
 * bytes for matmul only, so the mapped pages are read once here and then left to the page
 * cache; the embedding lookup keeps reading the file's tensor. */
static const hx_tensor *cpu_weight(hx_backend *be, const hx_tensor *w, hx_err *err)
{
    cpu_impl *c = impl_of(be);
    if (!c->pmatmul || w->prepared || !hx_pack_supported(w->dtype, w->shape[w->n_dims - 1]))
        return w;
    const hx_wmat wm = hx_wmat_from_tensor(w);
    packed_weight *pw = hx_calloc(1, sizeof *pw);
    const size_t bytes = pw ? hx_pack_layout(&pw->p, &wm) : 0;
    /* Matrices of 4 MiB or more start on a 2 MiB boundary and their whole 2 MiB pages are
     * advised huge, so decode streams them with few TLB misses (the untouched slack before the
     * start costs address space only). */
    const size_t huge = (size_t)2 << 20, align = bytes >= 2 * huge ? huge : 64;
    if (!pw || !(pw->mem = hx_alloc(bytes + align))) {
        hx_free(pw);
        hx_err_set(err, HX_E_NOMEM, "out of memory repacking a %zu MiB weight", bytes >> 20);
        return NULL;
    }
    pw->p.data = (unsigned char *)(((uintptr_t)pw->mem + align - 1) & ~(uintptr_t)(align - 1));
#ifdef MADV_HUGEPAGE
    if (align == huge) (void)madvise(pw->p.data, bytes & ~(huge - 1), MADV_HUGEPAGE);
#endif
    pack_args a = {&pw->p, &wm};
    hx_pool_run(c->pool, pack_task, &a);
    pw->t = *w;
    pw->t.prepared = &pw->p;
    return &pw->t;
}

static void cpu_weight_release(hx_backend *be, const hx_tensor *w)
{
    (void)be;
    if (!w || !w->prepared) return;
    packed_weight *pw = (packed_weight *)(void *)((const char *)w->prepared -
                                                 offsetof(packed_weight, p));
    hx_free(pw->mem);
    hx_free(pw);
}

static void cpu_matmul(hx_backend *be, const hx_tensor *w, const hx_tensor *bias, const float *x,
                       int64_t n_rows, float *out)
{
    cpu_impl *c = impl_of(be);
    const int64_t n_in = w->shape[w->n_dims - 1], n_out = w->shape[0];
    check_scratch(c, 2 * (n_in > n_out ? n_in : n_out));
    float *b = NULL;
    if (bias) { /* the second half of thread 0's scratch holds the bias while the op runs */
        b = c->scratch[0] + c->scratch_floats / 2;
        hx_tensor_dequant_row(bias, 0, b);
    }
    matmul_args a = {c, w, b, x, n_rows, out, {0}, {0}, {0}, 0};
    if (w->prepared) {
        HX_ASSERT(hx_act_bytes(n_rows, n_in) <= c->act_bytes &&
                  (size_t)(n_rows * (n_in / HX_ACT_BLOCK)) <= c->sums_floats);
        hx_act_init(&a.act, c->act_buf, n_rows, n_in);
        hx_act_init(&a.act2, c->act2_buf, n_rows, n_in);
        hx_pool_run(c->pool, matmul_packed_task, &a);
        return;
    }
    if (n_in % HX_ACT_BLOCK != 0) {
        hx_pool_run(c->pool, matmul_plain_task, &a);
        return;
    }
    a.wm = hx_wmat_from_tensor(w);
    const bool two_term = n_rows >= TWO_TERM_ROWS && c->k.matmul2[w->dtype] != NULL;
    if (!c->int8_act && !two_term) {
        hx_pool_run(c->pool, matmul_f32_task, &a);
        return;
    }
    HX_ASSERT(hx_act_bytes(n_rows, n_in) <= c->act_bytes);
    hx_act_init(&a.act, c->act_buf, n_rows, n_in);
    a.act.f = x; /* F32/F16/BF16 kernels read the f32 rows */
    if (c->int8_act) {
        hx_pool_run(c->pool, matmul_int8_task, &a);
        return;
    }
    hx_act_init(&a.act2, c->act2_buf, n_rows, n_in);
    hx_pool_run(c->pool, matmul_two_term_task, &a);
}

/* ---- rmsnorm ---- */

typedef struct {
    const float     *x;
    const hx_tensor *w;
    int64_t          n_rows, d;
    float            eps;
    float           *out;
    float          **scratch;
} norm_args;

static void rmsnorm_task(void *p, int ith, int nth)
{
    const norm_args *a = p;
    float *restrict wv = a->scratch[ith];
    int64_t r0, r1;
    hx_split_range(a->n_rows, ith, nth, 1, &r0, &r1);
    if (r0 < r1) hx_tensor_dequant_row(a->w, 0, wv);
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = a->x + r * a->d;
        float *yr = a->out + r * a->d;
        double ss = 0.0; /* accumulate in double: d_model can be 8192 */
        for (int64_t i = 0; i < a->d; i++) ss += (double)xr[i] * xr[i];
        const float scale = (float)(1.0 / sqrt(ss / (double)a->d + (double)a->eps));
        for (int64_t i = 0; i < a->d; i++) yr[i] = xr[i] * scale * wv[i];
    }
}

static void cpu_rmsnorm(hx_backend *be, const float *x, const hx_tensor *w, int64_t n_rows,
                        int64_t d, float eps, float *out)
{
    cpu_impl *c = impl_of(be);
    check_scratch(c, d);
    norm_args a = {x, w, n_rows, d, eps, out, c->scratch};
    run_op(c, rmsnorm_task, &a, n_rows * d);
}

/* ---- rope ---- */

typedef struct {
    float         *x;
    const int32_t *pos;
    int64_t        n_tok;
    int32_t        n_head, d_head;
    const hx_rope *rope;
} rope_args;

/* Split by tokens: each token's cos/sin pairs are computed once (in double, as before), in
 * chunks of 128 pairs, and applied to all of its heads. */
static void rope_task(void *p, int ith, int nth)
{
    enum { CHUNK = 128 };
    const rope_args *a = p;
    const hx_rope *rp = a->rope;
    const int32_t half = rp->n_rot / 2;
    float cs[CHUNK], sn[CHUNK];
    int64_t t0, t1;
    hx_split_range(a->n_tok, ith, nth, 1, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const double pos = (double)a->pos[t];
        for (int32_t c0 = 0; c0 < half; c0 += CHUNK) {
            const int32_t c1 = half - c0 < CHUNK ? half : c0 + CHUNK;
            for (int32_t i = c0; i < c1; i++) {
                const double ang = pos * (double)rp->inv_freq[i];
                cs[i - c0] = (float)cos(ang) * rp->mscale;
                sn[i - c0] = (float)sin(ang) * rp->mscale;
            }
            for (int32_t h = 0; h < a->n_head; h++) {
                float *v = a->x + (t * a->n_head + h) * a->d_head;
                for (int32_t i = c0; i < c1; i++) {
                    const int32_t i0 = rp->pairs ? 2 * i : i;
                    const int32_t i1 = rp->pairs ? 2 * i + 1 : i + half;
                    const float x0 = v[i0], x1 = v[i1];
                    v[i0] = x0 * cs[i - c0] - x1 * sn[i - c0];
                    v[i1] = x0 * sn[i - c0] + x1 * cs[i - c0];
                }
            }
        }
    }
}

static void cpu_rope(hx_backend *be, float *x, const int32_t *pos, int64_t n_tok, int32_t n_head,
                     int32_t d_head, const hx_rope *rope)
{
    rope_args a = {x, pos, n_tok, n_head, d_head, rope};
    run_op(impl_of(be), rope_task, &a, n_tok * n_head * d_head);
}

/* ---- KV cache and attention ---- */

/* Address of kv head h at position `pos` of `layer` in the sequence's blocks (K or V base). */
static uint16_t *kv_at(const hx_kv_store *kv, void *base, int32_t layer, int32_t h,
                       const hx_kv_seq *seq, int32_t pos)
{
    const int32_t block = seq->blocks[pos / kv->block_tokens], off = pos % kv->block_tokens;
    HX_ASSERT(block >= 0); /* never a block a window pool dropped (sequence.c) */
    const size_t idx = ((((size_t)block * (size_t)kv->n_layer + (size_t)layer) *
                             (size_t)kv->n_kv_head + (size_t)h) * (size_t)kv->block_tokens +
                        (size_t)off) * (size_t)kv->d_head;
    return (uint16_t *)base + idx;
}

/* Rows of kv_dim floats to f16, head by head (vcvtps2ph where the CPU has it; same bits as
 * hx_f32_to_f16). Single-threaded: a step writes n_tok * kv_dim * 2 values, tiny next to the
 * matmuls. */
static void cpu_kv_write(hx_backend *be, hx_kv_store *kv, int32_t layer, const hx_kv_seq *seq,
                         const int32_t *pos, const float *k, const float *v, int64_t n_tok)
{
    const hx_f16_store_fn store = impl_of(be)->attn[0].store;
    const int32_t kvd = kv->kv_dim, dh = kv->d_head;
    if (kv->dtype != HX_KV_F16) { /* quantized: each head's row into its (block, layer) tile */
        const hx_kv_dtype dt = kv->dtype;
        const int32_t bt = kv->block_tokens;
        const size_t tile_bytes = hx_kv_tile_bytes(dt, bt, dh);
        for (int64_t t = 0; t < n_tok; t++)
            for (int32_t h = 0; h < kv->n_kv_head; h++) {
                const int32_t block = seq->blocks[pos[t] / bt], off = pos[t] % bt;
                HX_ASSERT(block >= 0);
                const size_t tile = (((size_t)block * (size_t)kv->n_layer + (size_t)layer) *
                                         (size_t)kv->n_kv_head + (size_t)h) * tile_bytes;
                hx_kvq_quantize_row(dt, k + t * kvd + h * dh, dh, (uint8_t *)kv->k + tile, bt,
                                    off);
                hx_kvq_quantize_row(dt, v + t * kvd + h * dh, dh, (uint8_t *)kv->v + tile, bt,
                                    off);
            }
        return;
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int32_t h = 0; h < kv->n_kv_head; h++) {
            store(k + t * kvd + h * dh, kv_at(kv, kv->k, layer, h, seq, pos[t]), dh);
            store(v + t * kvd + h * dh, kv_at(kv, kv->v, layer, h, seq, pos[t]), dh);
        }
}

typedef struct {
    hx_attn_fn           attend;          /* f16 cache */
    hx_attn_q_fn         attend_q;        /* quantized cache */
    hx_attn_capped_fn    attend_capped;   /* the same with soft-capped scores (Gemma 2) */
    hx_attn_q_capped_fn  attend_q_capped;
    const hx_kv_store   *kv;
    int32_t              layer;
    const hx_kv_seq     *seq;
    const float         *q;     /* [n_tok, n_head, d_head] */
    const int32_t       *pos;   /* [n_tok] */
    int64_t              n_tok;
    const hx_attn_shape *s;
    int64_t              align; /* split boundaries: whole groups when there are enough */
    float               *out;   /* [n_tok, n_head * d_head] */
} attn_args;

/* Each thread takes a contiguous range of (row, head) pairs and hands the kernel runs of
 * consecutive heads of one row that share a kv head, so each thread reads a group's K/V once
 * (the kernel keeps a chunk in L1 across the run's heads). Splitting by pairs rather than by
 * whole groups keeps decode balanced when n_kv_head is small (SmolLM2-135M: 3 kv heads, 9 heads);
 * at prefill the split falls on group boundaries. A head's result does not depend on which run
 * it is in, so any thread count gives the same bits. */
static void attention_task(void *p, int ith, int nth)
{
    const attn_args *a = p;
    const hx_attn_shape *s = a->s;
    const hx_kv_store *kv = a->kv;
    const int32_t d = s->d_head, n_head = s->n_head, group = s->n_head / s->n_kv_head;
    const size_t layer_off = (size_t)a->layer * (size_t)kv->block_tokens * (size_t)kv->kv_dim;
    HX_ASSERT(kv->d_head == d && kv->n_kv_head == s->n_kv_head);
    int64_t r0, r1;
    hx_split_range(a->n_tok * n_head, ith, nth, a->align, &r0, &r1);
    for (int64_t r = r0; r < r1;) {
        const int64_t t = r / n_head;
        const int32_t h = (int32_t)(r % n_head), kvh = h / group;
        int64_t r_end = t * n_head + (int64_t)(kvh + 1) * group;
        if (r_end > r1) r_end = r1;
        if (r_end > r + HX_ATTN_MAX_Q) r_end = r + HX_ATTN_MAX_Q;
        const int32_t last = a->pos[t];
        const int32_t first = s->sliding_window > 0 && last - s->sliding_window + 1 > 0
                                  ? last - s->sliding_window + 1 : 0;
        if (kv->dtype != HX_KV_F16) { /* tiles of (block, layer, kv head), kv_quant.h */
            const size_t tb = hx_kv_tile_bytes(kv->dtype, kv->block_tokens, d);
            const size_t off = ((size_t)a->layer * (size_t)kv->n_kv_head + (size_t)kvh) * tb;
            const hx_attn_qkv qview = {
                .k = (const uint8_t *)kv->k + off,
                .v = (const uint8_t *)kv->v + off,
                .blocks = a->seq->blocks,
                .block_stride = (size_t)kv->n_layer * (size_t)kv->n_kv_head * tb,
                .block_tokens = kv->block_tokens,
                .dtype = kv->dtype,
            };
            if (s->softcap > 0.0f)
                a->attend_q_capped(&qview, a->q + r * d, (int32_t)(r_end - r), d, s->scale,
                                   s->softcap, first, last, a->out + r * d);
            else
                a->attend_q(&qview, a->q + r * d, (int32_t)(r_end - r), d, s->scale, first, last,
                            a->out + r * d);
            r = r_end;
            continue;
        }
        const size_t head_off = layer_off + (size_t)kvh * (size_t)kv->block_tokens * (size_t)d;
        const hx_attn_kv view = {
            .k = (const uint16_t *)kv->k + head_off,
            .v = (const uint16_t *)kv->v + head_off,
            .blocks = a->seq->blocks,
            .block_stride = (size_t)kv->n_layer * (size_t)kv->block_tokens * (size_t)kv->kv_dim,
            .row_stride = d,
            .block_tokens = kv->block_tokens,
        };
        if (s->softcap > 0.0f)
            a->attend_capped(&view, a->q + r * d, (int32_t)(r_end - r), d, s->scale, s->softcap,
                             first, last, a->out + r * d);
        else
            a->attend(&view, a->q + r * d, (int32_t)(r_end - r), d, s->scale, first, last,
                      a->out + r * d);
        r = r_end;
    }
}

/* Picks the best variant whose d_head alignment fits this model (once per call, outside every
 * loop; the reference fits any d_head). A quantized cache takes the best variant's attend_q,
 * which every variant has for any d_head % 32 == 0 (kv_alloc refused the others). Soft-capped
 * scores take the best variant that has them (the reference has). */
static void cpu_attention(hx_backend *be, const hx_kv_store *kv, int32_t layer,
                          const hx_kv_seq *seq, const float *q, const int32_t *pos, int64_t n_tok,
                          const hx_attn_shape *s, float *out)
{
    cpu_impl *c = impl_of(be);
    HX_ASSERT(s->n_kv_head > 0 && s->n_head % s->n_kv_head == 0);
    hx_attn_fn attend = NULL;
    hx_attn_capped_fn capped = NULL;
    hx_attn_q_capped_fn q_capped = NULL;
    for (int i = 0; i < c->n_attn; i++) {
        const hx_attn_variant *v = &c->attn[i];
        if (!attend && s->d_head % v->d_align == 0) attend = v->attend;
        if (!capped && s->d_head % v->d_align == 0) capped = v->attend_capped;
        if (!q_capped) q_capped = v->attend_q_capped;
    }
    HX_ASSERT(attend && capped && q_capped); /* the reference has all three */
    HX_ASSERT(kv->dtype == HX_KV_F16 || s->d_head % HX_KVQ_GROUP == 0);
    const int32_t group = s->n_head / s->n_kv_head;
    const int64_t align = n_tok * s->n_kv_head >= 4 * (int64_t)c->n_threads ? group : 1;
    attn_args a = {attend, c->attn[0].attend_q, capped, q_capped, kv, layer, seq, q, pos, n_tok,
                   s, align, out};
    hx_pool_run(c->pool, attention_task, &a);
}

/* ---- element-wise ---- */

typedef struct {
    hx_swiglu_fn fn;
    const float *gate, *up;
    int64_t      n;
    float       *out;
} swiglu_args;

static void swiglu_task(void *p, int ith, int nth)
{
    const swiglu_args *a = p;
    int64_t i0, i1;
    hx_split_range(a->n, ith, nth, 64, &i0, &i1);
    if (i1 > i0) a->fn(a->gate + i0, a->up + i0, i1 - i0, a->out + i0);
}

static void cpu_swiglu(hx_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    swiglu_args a = {impl_of(be)->swiglu, gate, up, n, out};
    run_op(impl_of(be), swiglu_task, &a, n);
}

/* The same split as swiglu, with the GeGLU variant. */
static void cpu_geglu(hx_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    swiglu_args a = {impl_of(be)->geglu, gate, up, n, out};
    run_op(impl_of(be), swiglu_task, &a, n);
}

static void cpu_scale(hx_backend *be, float *x, float s, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

/* Runs on the caller: only the logits rows of a step (n_logits x n_vocab) are capped. */
static void cpu_softcap(hx_backend *be, float *x, float cap, int64_t n)
{
    (void)be;
    hx_softcap_ref(x, cap, n);
}

static void cpu_gather_rows(hx_backend *be, const float *src, const int32_t *rows, int64_t n,
                            int64_t d, float *dst)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * d, src + (int64_t)rows[i] * d, (size_t)d * sizeof(float));
}

static void cpu_add(hx_backend *be, float *x, const float *y, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_destroy(hx_backend *be)
{
    if (!be) return;
    cpu_impl *c = be->impl;
    if (c) {
        hx_pool_free(c->pool);
        for (int t = 0; t < c->n_threads; t++) {
            hx_free(c->scratch[t]);
            hx_free(c->own_act[t]);
        }
        hx_free(c->act_mem);
        hx_free(c->sums);
        hx_free(c);
    }
    hx_free(be);
}

hx_status hx_cpu_backend_create(int n_threads, unsigned flags, hx_backend **out, hx_err *err)
{
    if (n_threads <= 0) n_threads = hx_cpu_physical_cores();
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    hx_backend *be = hx_calloc(1, sizeof *be);
    cpu_impl *c = hx_calloc(1, sizeof *c);
    if (!be || !c) {
        hx_free(be);
        hx_free(c);
        return hx_err_set(err, HX_E_NOMEM, "out of memory creating the CPU backend");
    }
    be->impl = c;
    c->n_threads = n_threads;
    c->k = hx_kernels_select(hx_cpu_isa());
    c->n_attn = hx_attn_variants(hx_cpu_isa(), c->attn, (int)HX_COUNTOF(c->attn));
    if (c->n_attn > (int)HX_COUNTOF(c->attn)) c->n_attn = (int)HX_COUNTOF(c->attn);
    c->int8_act = (flags & HX_CPU_INT8_ACT) != 0;
    c->pmatmul = hx_pmatmul_select(hx_cpu_isa());
    c->swiglu = hx_swiglu_select(hx_cpu_isa());
    c->geglu = hx_geglu_select(hx_cpu_isa());
    hx_status st = hx_pool_init(n_threads, &c->pool, err);
    if (st != HX_OK) {
        cpu_destroy(be);
        return st;
    }
    be->name = "cpu";
    be->reserve = cpu_reserve;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->read = cpu_read;
    be->kv_alloc = cpu_kv_alloc;
    be->kv_free = cpu_kv_free;
    be->kv_copy = cpu_kv_copy;
    be->embed = cpu_embed;
    be->matmul = cpu_matmul;
    be->weight = cpu_weight;
    be->weight_release = cpu_weight_release;
    be->rmsnorm = cpu_rmsnorm;
    be->rope = cpu_rope;
    be->kv_write = cpu_kv_write;
    be->attention = cpu_attention;
    be->gather_rows = cpu_gather_rows;
    be->swiglu = cpu_swiglu;
    be->geglu = cpu_geglu;
    be->moe = hx_cpu_moe;
    be->add = cpu_add;
    be->scale = cpu_scale;
    be->softcap = cpu_softcap;
    be->destroy = cpu_destroy;
    *out = be;
    return HX_OK;
}
