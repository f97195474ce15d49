/* fit.c - the memory contract (fit.h): every term of a model's resident memory, from its
 * description alone.
 *
 * Reading order: the constants mirrored from the code whose memory they predict, the weights
 * (which tensors are repacked copies, which are mapped pages, counted as the union of the pages
 * they span; on a GPU, what is uploaded), the terms that depend on the context, then the search
 * for the largest context.
 * Each mirrored size names the function it mirrors; test_fit.c compares them with the
 * allocator's live-byte count on the starter model. */
#define _POSIX_C_SOURCE 200809L
#include "engine/fit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/packed.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "engine/sequence.h"
#include "kv/kv_pool.h"
#include "model/model.h"

/* ---- mirrored constants ---- */

#define KV_BLOCK_TOKENS 16 /* sequence.c BLOCK_TOKENS: positions per KV block */
#define OWN_ROWS        4  /* cpu_backend.c OWN_ROWS: decode rows every thread quantizes itself */
#define MAX_THREADS     256 /* cpu_backend.c MAX_THREADS */
#define HUGE_BYTES      ((uint64_t)2 << 20) /* cpu_weight: matrices of 2 of these start aligned */
#define SAMPLER_BYTES_PER_TOKEN 12 /* sampler.c: counts (int32) + cands ({int32, float}) */

/* The runtime's fixed overhead, measured on the starter model (docs/memory.md has the method):
 * peak RSS of `hearth run` minus every other term at contexts of 512 to 4096 left 9.6-10.2 MiB,
 * of which the tokenizer (49152 tokens, heap 4.7 MiB by hx_alloc_live_bytes) is modelled apart.
 * The rest - the binary's text and data, libc, jansson, the chat template, thread-pool state -
 * is rounded up to BASE. The tokenizer's heap is ~100 bytes per vocabulary entry (token string,
 * hash slots, merge ranks) for a byte-level BPE; TOKENIZER_BYTES_PER_TOKEN rounds that up. */
#define OVERHEAD_BASE_BYTES        ((uint64_t)9 << 19) /* 4.5 MiB */
#define TOKENIZER_BYTES_PER_TOKEN  128
#define THREAD_BYTES               ((uint64_t)64 << 10) /* stack pages a pool thread touches */
/* Linux maps up to this much of a file mapping around a faulting page when those pages are in
 * the page cache (mm/memory.c fault_around_bytes, 64 KiB by default): a lookup of one embedding
 * row makes its whole neighbourhood resident. */
#define FAULT_AROUND_BYTES         ((uint64_t)64 << 10)

/* On a GPU (cuda_backend.c). The runtime's own device memory beyond our allocations - the
 * cuBLAS workspace and the kernel images the driver loads as they are first used - is an
 * estimate, not yet measured the way OVERHEAD_BASE_BYTES was (docs/memory.md); the context
 * itself is already out of the free memory the budget starts from, which is read after the
 * backend (or, for hearth fit, hx_gpu_list) has made one. */
#define CUDA_OVERHEAD_BYTES        ((uint64_t)256 << 20)
#define CUDA_ARENA_BYTES           ((uint64_t)8 << 20)  /* ARENA_BYTES: staged host arrays */
#define CUDA_HALF_W_ELEMS          ((int64_t)32 << 20)  /* HALF_W_ELEMS: a dequantized chunk */
#define CUDA_BLAS_WS               ((uint64_t)32 << 20) /* BLAS_WS: cuBLAS's fixed workspace */
#define CUDA_GEMV_ROWS             8    /* HX_CUDA_GEMV_ROWS (kernels.h) */
#define CUDA_DEC_ROWS              64   /* HX_CUDA_DEC_ROWS (kernels.h) */
#define CUDA_DEC_SPLITS            16   /* DEC_SPLITS, DEC_COUNTERS (attention.cu) */
#define CUDA_DEC_COUNTERS          4096
#define CUDA_Q6_K_BYTES            224  /* HX_CUDA_Q6_K_BYTES: a padded Q6_K super-block */
#define DEVICE_BUDGET_PERCENT      95 /* of the free memory: room for what the terms miss */

static const char *const layer_matmuls[] = {"attn_q",   "attn_k",         "attn_v",
                                            "attn_output", "ffn_gate",    "ffn_up",
                                            "ffn_down",    "ffn_gate_inp", "ffn_gate_shexp",
                                            "ffn_up_shexp", "ffn_down_shexp"};
/* The experts of a mixture-of-experts layer: stacked (<what>_exps) or one per expert
 * (<what>.E); a decode step reads n_expert_used of n_expert of them. */
static const char *const expert_matmuls[] = {"ffn_gate", "ffn_up", "ffn_down"};

hx_fit_params hx_fit_params_default(void)
{
    return (hx_fit_params){.n_batch = 8, .kv_type = HX_KV_F16, .repack = HX_FIT_REPACK_AUTO};
}

/* ---- the machine ---- */

static uint64_t page_bytes(void)
{
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uint64_t)p : 4096;
}

/* The first unsigned number in a file (a cgroup limit, /proc/meminfo's first line in kB), or 0. */
static uint64_t read_number(const char *path, const char *skip_prefix)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    if (fgets(line, sizeof line, f)) {
        const char *s = line;
        if (skip_prefix && strncmp(s, skip_prefix, strlen(skip_prefix)) == 0) s += strlen(skip_prefix);
        if (sscanf(s, " %llu", &v) != 1) v = 0; /* "max" (no cgroup limit) reads as 0 */
    }
    fclose(f);
    return (uint64_t)v;
}

uint64_t hx_fit_default_budget(void)
{
    uint64_t ram = 0;
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) ram = (uint64_t)pages * (uint64_t)psz;
    if (ram == 0) ram = read_number("/proc/meminfo", "MemTotal:") * 1024;
    /* A container's limit (cgroup v2, then v1) is what this process may really use. */
    const uint64_t lim[] = {read_number("/sys/fs/cgroup/memory.max", NULL),
                            read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL)};
    for (size_t i = 0; i < HX_COUNTOF(lim); i++)
        if (lim[i] > 0 && (ram == 0 || lim[i] < ram)) ram = lim[i];
    return ram / 4 * 3;
}

uint64_t hx_fit_default_device_budget(uint64_t free_bytes, uint64_t total_bytes)
{
    const uint64_t have = free_bytes > 0 ? free_bytes : total_bytes;
    return have / 100 * DEVICE_BUDGET_PERCENT;
}

/* ---- weights ---- */

/* What one model costs whatever the context. */
typedef struct {
    const hx_hparams *hp;
    uint64_t page;
    int32_t  n_threads;
    bool     device;         /* the terms are of a GPU's memory, not the host's */
    bool     repack;
    uint64_t weights, weights_packed;
    uint64_t weights_read;   /* bytes a decode step reads of the weights */
    uint64_t embed_row;      /* bytes of one token-embedding row */
    double   embed_row_windows; /* fault-around windows one row lookup maps, on average */
    uint64_t embed_table;    /* bytes of the pages of the whole table; 0 when it is resident
                              * anyway (the output projection reads it in place) */
    uint64_t largest_repack; /* file pages of the largest repacked tensor */
    uint64_t metadata;       /* file pages before the tensor data (parsed at open) */
    uint64_t scratch, scratch_reserved; /* the step's buffers: hx_llm and the backend */
    int64_t  largest_matmul; /* elements of the largest matmul weight (the GPU's chunk) */
} fit_model;

typedef struct {
    uintptr_t lo, hi; /* [lo, hi) in the address space of the mappings */
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Bytes of the pages [lo, hi) spans. */
static uint64_t span_pages(const span *s, uint64_t page)
{
    return s->hi > s->lo ? ((s->hi - 1) / page - s->lo / page + 1) * page : 0;
}

/* Bytes of the union of the pages the spans touch (sorts them). */
static uint64_t union_pages(span *s, size_t n, uint64_t page)
{
    qsort(s, n, sizeof *s, span_cmp);
    uint64_t total = 0, last = 0; /* last: one past the last page counted, as a page index */
    for (size_t i = 0; i < n; i++) {
        if (s[i].hi <= s[i].lo) continue;
        uint64_t p0 = s[i].lo / page;
        const uint64_t p1 = (s[i].hi - 1) / page + 1;
        if (p0 < last) p0 = last;
        if (p1 > p0) total += (p1 - p0) * page, last = p1;
    }
    return total;
}

typedef enum { NOT_MATMUL, LAYER_MATMUL, EXPERT_MATMUL } matmul_kind;

/* What a tensor named "blk.<i>.<what>.weight" is to the forward pass. */
static matmul_kind layer_matmul_kind(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) return NOT_MATMUL;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return NOT_MATMUL;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != '.') return NOT_MATMUL;
    for (size_t i = 0; i < HX_COUNTOF(layer_matmuls); i++) {
        const size_t n = strlen(layer_matmuls[i]);
        if (strncmp(p, layer_matmuls[i], n) == 0 && strcmp(p + n, ".weight") == 0)
            return LAYER_MATMUL;
    }
    for (size_t i = 0; i < HX_COUNTOF(expert_matmuls); i++) {
        const size_t n = strlen(expert_matmuls[i]);
        if (strncmp(p, expert_matmuls[i], n) != 0) continue;
        const char *q = p + n;
        if (strcmp(q, "_exps.weight") == 0) return EXPERT_MATMUL;
        if (*q++ != '.' || *q < '0' || *q > '9') continue;
        while (*q >= '0' && *q <= '9') q++;
        if (strcmp(q, ".weight") == 0) return EXPERT_MATMUL;
    }
    return NOT_MATMUL;
}

/* The bytes of the CPU backend's repacked copy of t (cpu_weight), or 0 when it keeps t as is.
 * A stacked expert tensor [n_expert, rows, cols] is repacked expert by expert. */
static uint64_t packed_bytes(const fit_model *fm, const hx_tensor *t)
{
    if (!fm->repack || t->n_dims < 2 || !hx_pack_supported(t->dtype, t->shape[t->n_dims - 1]))
        return 0;
    hx_tensor one = *t;
    uint64_t  copies = 1;
    if (t->n_dims == 3) {
        copies = (uint64_t)t->shape[0];
        one.n_dims = 2;
        one.shape[0] = t->shape[1];
        one.shape[1] = t->shape[2];
    }
    const hx_wmat wm = hx_wmat_from_tensor(&one);
    hx_packed p;
    return copies * hx_pack_layout(&p, &wm);
}

/* Adds t's bytes in the mapping (MLX: its scales and biases too) to the spans. */
static size_t add_spans(const hx_tensor *t, span *s, size_t n)
{
    if (t->data && t->n_bytes) s[n++] = (span){(uintptr_t)t->data, (uintptr_t)t->data + t->n_bytes};
    const uint64_t sb = (hx_tensor_data_bytes(t) - t->n_bytes) / 2; /* MLX: each of the two */
    if (t->scales && sb) s[n++] = (span){(uintptr_t)t->scales, (uintptr_t)t->scales + sb};
    if (t->biases && sb) s[n++] = (span){(uintptr_t)t->biases, (uintptr_t)t->biases + sb};
    return n;
}

/* Classifies every tensor. A matmul weight the backend repacks costs its packed copy (the model
 * drops its mapped pages after reading them once: hx_model_files_drop); every other tensor the
 * forward pass reads costs the pages it spans in the mapping, resident once read and read again
 * each step. The token embedding is looked up a row at a time; its pages count by rows in use
 * (context-dependent) unless the output projection reads it whole in place. */
static hx_status weights(const hx_model_files *mf, fit_model *fm, hx_err *err)
{
    const hx_tensor_info *embd = hx_model_files_find(mf, "token_embd.weight");
    const hx_tensor_info *output = hx_model_files_find(mf, "output.weight");
    if (!embd) return hx_err_set(err, HX_E_FORMAT, "%s: missing tensor token_embd.weight", mf->path);
    if (mf->n_tensors < 0 || (uint64_t)mf->n_tensors > SIZE_MAX / (3 * sizeof(span)))
        return hx_err_set(err, HX_E_FORMAT, "%s: %lld tensors", mf->path, (long long)mf->n_tensors);
    span *s = hx_alloc((size_t)mf->n_tensors * 3 * sizeof *s + 1);
    if (!s) return hx_err_set(err, HX_E_NOMEM, "out of memory");
    size_t n = 0;
    uint64_t packed = 0, read = 0, largest = 0, meta_total = 0;
    for (int64_t i = 0; i < mf->n_tensors; i++) {
        const hx_tensor_info *ti = &mf->tensors[i];
        const hx_tensor *t = &ti->t;
        const bool is_output = ti == output || (!output && ti == embd);
        const matmul_kind kind = layer_matmul_kind(ti->name);
        const bool matmul = is_output || kind != NOT_MATMUL;
        const uint64_t pk = matmul ? packed_bytes(fm, t) : 0;
        /* Of an expert's weights a decode step reads its share: n_used of n_expert. */
        const double share = kind == EXPERT_MATMUL && fm->hp->n_expert > 0
                                 ? (double)fm->hp->n_expert_used / fm->hp->n_expert
                                 : 1.0;
        if (pk) {
            packed += pk;
            read += (uint64_t)(pk * share);
            span one = {(uintptr_t)t->data, (uintptr_t)t->data + t->n_bytes};
            const uint64_t file_pages = span_pages(&one, fm->page);
            if (file_pages > largest) largest = file_pages;
        } else if (ti == embd && !is_output) {
            /* looked up by rows: the embed term */
        } else {
            n = add_spans(t, s, n);
            read += (uint64_t)(hx_tensor_data_bytes(t) * share);
        }
    }
    /* The bytes before each file's first tensor: the header and metadata the loader parses. */
    for (int32_t f = 0; f < mf->n_files || f == 0; f++) {
        uint64_t first = UINT64_MAX;
        for (int64_t i = 0; i < mf->n_tensors; i++)
            if (mf->tensors[i].file_index == f && mf->tensors[i].offset < first)
                first = mf->tensors[i].offset;
        if (first != UINT64_MAX) meta_total += (first + fm->page - 1) / fm->page * fm->page;
    }
    fm->weights_packed = packed;
    fm->weights = packed + union_pages(s, n, fm->page);
    fm->weights_read = read;
    fm->largest_repack = largest;
    fm->metadata = meta_total;
    hx_free(s);

    /* The embedding table: resident in full through `weights` when it is the output projection
     * read in place; otherwise each row lookup touches the pages the row spans. */
    const hx_tensor *e = &embd->t;
    const int64_t rows = hx_tensor_n_rows(e);
    fm->embed_row = rows > 0 ? hx_tensor_data_bytes(e) / (uint64_t)rows : 0;
    /* A row of b bytes at an arbitrary offset spans 1 + (b - 1) / w windows on average. */
    const uint64_t w = FAULT_AROUND_BYTES > fm->page ? FAULT_AROUND_BYTES : fm->page;
    fm->embed_row_windows = fm->embed_row ? 1.0 + (double)(fm->embed_row - 1) / (double)w : 0;
    const bool in_weights = !output && !packed_bytes(fm, e);
    if (in_weights) {
        fm->embed_table = 0;
    } else {
        span es[3];
        const size_t ne = add_spans(e, es, 0);
        fm->embed_table = union_pages(es, ne, fm->page);
    }
    return HX_OK;
}

/* Device bytes of a weight as the CUDA backend uploads it: its file format, except Q6_K padded
 * to CUDA_Q6_K_BYTES a super-block and MLX 4-bit taken as Q4_1 (20 bytes per 32 values) where
 * its scales are f16 or bf16 and its groups a multiple of 32 (counted so even when a bf16 value
 * out of f16's range keeps it MLX, which is smaller: the estimate errs high). */
static uint64_t device_bytes(const hx_tensor *t)
{
    if (t->dtype == HX_DT_Q6_K) return (uint64_t)hx_tensor_n_elems(t) / 256 * CUDA_Q6_K_BYTES;
    if (t->dtype == HX_DT_MLX4 && t->group_size % 32 == 0 && t->sb_dtype != HX_DT_F32)
        return (uint64_t)hx_tensor_n_elems(t) / 32 * 20;
    return hx_tensor_data_bytes(t);
}

/* What the CUDA backend uploads (cuda/weights.c): every matmul weight and the embedding table
 * once each (device_bytes; an MLX tensor with its scales and biases; a tied table serves both
 * uses), and the other tensors the ops name - norm weights, biases - as f32. The file's pages in
 * host memory are the host's and not counted. */
static hx_status device_weights(const hx_model_files *mf, fit_model *fm, hx_err *err)
{
    const hx_tensor_info *embd = hx_model_files_find(mf, "token_embd.weight");
    const hx_tensor_info *output = hx_model_files_find(mf, "output.weight");
    if (!embd) return hx_err_set(err, HX_E_FORMAT, "%s: missing tensor token_embd.weight", mf->path);
    uint64_t total = 0, read = 0;
    int64_t largest = 0;
    for (int64_t i = 0; i < mf->n_tensors; i++) {
        const hx_tensor_info *ti = &mf->tensors[i];
        const hx_tensor *t = &ti->t;
        const bool is_output = ti == output || (!output && ti == embd);
        const matmul_kind kind = layer_matmul_kind(ti->name);
        const double share = kind == EXPERT_MATMUL && fm->hp->n_expert > 0
                                 ? (double)fm->hp->n_expert_used / fm->hp->n_expert
                                 : 1.0;
        if (is_output || kind != NOT_MATMUL) {
            total += device_bytes(t);
            read += (uint64_t)(device_bytes(t) * share);
            const int64_t elems = hx_tensor_n_elems(t);
            if (elems > largest) largest = elems;
        } else if (ti == embd) {
            total += device_bytes(t); /* uploaded whole for the row lookups */
        } else {
            const uint64_t f32 = (uint64_t)hx_tensor_n_elems(t) * sizeof(float);
            total += f32;
            read += f32;
        }
    }
    fm->weights = total;
    fm->weights_read = read;
    fm->largest_matmul = largest;
    const int64_t rows = hx_tensor_n_rows(&embd->t);
    fm->embed_row = rows > 0 ? hx_tensor_data_bytes(&embd->t) / (uint64_t)rows : 0;
    return HX_OK; /* packed, largest_repack, metadata, embed_table: 0 */
}

/* ---- scratch: the step's buffers ---- */

/* hx_llm_open's activation buffers for T rows (reserved), and what of them a step writes. */
static void llm_scratch(const hx_hparams *hp, int64_t T, int32_t n_batch, uint64_t *reserved,
                        uint64_t *touched)
{
    const uint64_t d = (uint64_t)hp->d_model, qd = (uint64_t)hp->n_head * (uint64_t)hp->d_head,
                   kvd = (uint64_t)hp->n_kv_head * (uint64_t)hp->d_head, f = sizeof(float);
    const uint64_t t = (uint64_t)T;
    /* x, h, q (it also holds the attention and MLP outputs, d wide), k, v, gate, up: a full
     * prefill step writes every row of each. */
    const uint64_t dq = d > qd ? d : qd;
    const uint64_t rows = t * f * (d + 2 * dq + 2 * kvd + 2 * (uint64_t)hp->d_ff);
    /* Mixture of experts: the router's logits and the moe op's work buffer (hx_llm_open). */
    const int64_t d_ff_moe = hx_llm_moe_width(hp);
    const uint64_t moe = hp->n_expert > 0
                             ? t * (uint64_t)hp->n_expert * f +
                                   (uint64_t)hx_moe_work_floats(T, (int64_t)d, d_ff_moe,
                                                                hp->n_expert_used, hp->n_expert) * f
                             : 0;
    /* The RoPE tables (two for Gemma 3) and the f32 (1 + w) norm copies of Gemma's Hugging Face
     * files: four d_model norms and two d_head ones per layer, and the output norm. */
    const uint64_t folded = hp->norm_plus_one
                                ? ((uint64_t)hp->n_layer * (4 * d + 2 * (uint64_t)hp->d_head) + d) * f
                                : 0;
    const uint64_t fixed = sizeof(hx_llm) + (uint64_t)hp->n_layer * sizeof(hx_layer) +
                           (hp->rope_theta_swa > 0 ? 2 : 1) * (uint64_t)hp->d_head / 2 * f +
                           folded +
                           /* the expert arrays: a pointer and a view per expert weight */
                           (uint64_t)hp->n_layer * 3 * (uint64_t)(hp->n_expert > 0 ? hp->n_expert : 0) *
                               (sizeof(hx_tensor *) + sizeof(hx_tensor));
    /* logits [min(T, HX_LLM_LOGIT_ROWS), n_vocab]: only the rows whose logits are asked for
     * are written - one per sequence in a step. */
    const uint64_t cap = (uint64_t)(T < HX_LLM_LOGIT_ROWS ? T : HX_LLM_LOGIT_ROWS);
    const uint64_t logit_rows = (uint64_t)n_batch < cap ? (uint64_t)n_batch : cap;
    *reserved = rows + moe + fixed + cap * (uint64_t)hp->n_vocab * f;
    *touched = rows + moe + fixed + logit_rows * (uint64_t)hp->n_vocab * f;
}

/* cpu_reserve's buffers for steps of T rows of up to `widest` floats, and what matmuls write of
 * them: activations quantized for inputs of at most n_in floats. */
static void backend_scratch(const hx_hparams *hp, int64_t T, int32_t n_threads, uint64_t *reserved,
                            uint64_t *touched)
{
    const int64_t qd = (int64_t)hp->n_head * hp->d_head;
    const int64_t n_in = hx_llm_widest_input(hp);
    const int64_t widest = n_in > hp->n_vocab ? n_in : hp->n_vocab; /* hx_llm_open's reserve */
    const int64_t act_n = (widest + HX_ACT_BLOCK - 1) / HX_ACT_BLOCK * HX_ACT_BLOCK;
    const int64_t in_n = (n_in + HX_ACT_BLOCK - 1) / HX_ACT_BLOCK * HX_ACT_BLOCK;
    const uint64_t nt = (uint64_t)n_threads, f = sizeof(float);
    /* act_mem: two terms of T rows; sums: T rows of act_n / 32 + 1 floats; per thread: two terms
     * of OWN_ROWS rows and their sums; per thread: 2 * widest floats of row scratch. */
    const uint64_t act = hx_act_bytes(T, act_n), own = hx_act_bytes(OWN_ROWS, act_n);
    const uint64_t own_sums = OWN_ROWS * (uint64_t)(act_n / HX_ACT_BLOCK + 1) * f;
    *reserved = (2 * act + 64) + (uint64_t)T * (uint64_t)(act_n / HX_ACT_BLOCK + 1) * f +
                nt * (2 * own + own_sums + 64) + nt * 2 * (uint64_t)widest * f;
    /* Written: both terms for inputs of in_n, their sums; per thread its own rows' terms and
     * sums, one row of in_n floats (a dequantized weight or norm row), and on thread 0 a bias
     * row of qd floats where the family has q/k/v biases. */
    *touched = 2 * hx_act_bytes(T, in_n) + (uint64_t)T * (uint64_t)(in_n / HX_ACT_BLOCK) * f +
               nt * (2 * hx_act_bytes(OWN_ROWS, in_n) + OWN_ROWS * (uint64_t)(in_n / HX_ACT_BLOCK) * f +
                     (uint64_t)in_n * f) +
               (hp->attn_bias ? (uint64_t)qd * f : 0);
}

/* cuda_reserve's buffers for steps of T rows and the staging arena (cuda_backend.c): the f16
 * copy of a step's input rows, as wide as the widest matmul input, and one chunk of a
 * dequantized weight for the tensor-core matmuls; then what decode steps grow on first use: the
 * GEMV's input as 16-bit integers (two bytes a value, a float per 32) and decode attention's
 * counters and partial states (kernels.h). Device memory is committed when allocated, so
 * reserved is touched. */
static uint64_t cuda_scratch(const hx_hparams *hp, int64_t T, int64_t largest_matmul)
{
    const int64_t n_in = hx_llm_widest_input(hp);
    const int64_t chunk = largest_matmul < CUDA_HALF_W_ELEMS ? largest_matmul : CUDA_HALF_W_ELEMS;
    const int64_t gemv = CUDA_GEMV_ROWS * n_in * 2 + CUDA_GEMV_ROWS * n_in / 32 * 4 + 16;
    /* decode attention's partial states, for as many rows as one launch joins */
    int64_t dec_rows = CUDA_DEC_COUNTERS / (hp->n_head > 0 ? hp->n_head : 1);
    if (dec_rows > CUDA_DEC_ROWS) dec_rows = CUDA_DEC_ROWS;
    if (dec_rows > T) dec_rows = T;
    const int64_t attn = (CUDA_DEC_COUNTERS + dec_rows * hp->n_head * CUDA_DEC_SPLITS *
                                                  (hp->d_head + 2)) * 4;
    return (uint64_t)(n_in * T) * 2 + (uint64_t)chunk * 2 + CUDA_ARENA_BYTES + CUDA_BLAS_WS +
           (uint64_t)gemv + (uint64_t)attn;
}

/* ---- the terms at one context ---- */

static void terms(const fit_model *fm, int32_t n_ctx, int32_t n_batch, hx_kv_dtype kv_type,
                  uint64_t budget, hx_fit_report *r)
{
    const hx_hparams *hp = fm->hp;
    const uint64_t blocks = ((uint64_t)n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    const uint64_t positions = blocks * KV_BLOCK_TOKENS * (uint64_t)n_batch;
    r->kv_bytes_per_token = hx_kv_dtype_bytes_per_token(kv_type, hp->n_layer, hp->n_kv_head, hp->d_head);
    /* Sliding layers in a pool of their own keep each sequence's window (executor.c, one step of
     * HX_SEQUENCE_STEP_TOKENS rows): that many positions, however long the context. */
    const int32_t n_swa = hx_hparams_n_swa_layers(hp);
    const uint64_t swa_tok = hx_kv_dtype_bytes_per_token(kv_type, n_swa, hp->n_kv_head, hp->d_head);
    r->kv_window_layers = n_swa;
    r->kv_window = n_swa > 0 ? hp->sliding_window : 0;
    const int32_t step = fm->device ? HX_SEQUENCE_STEP_TOKENS_GPU : HX_SEQUENCE_STEP_TOKENS;
    const uint64_t swa_positions = (uint64_t)hx_kv_window_blocks(hp->sliding_window, step, n_ctx,
                                                                 KV_BLOCK_TOKENS) *
                                   KV_BLOCK_TOKENS * (uint64_t)n_batch;
    r->kv_bytes = n_swa > 0 ? positions * (r->kv_bytes_per_token - swa_tok) + swa_positions * swa_tok
                            : positions * r->kv_bytes_per_token;
    /* Per sequence (sequence.c): the tokens the cache holds, its last logits, the step's pos,
     * seq and row arrays, the pool's refcount and free list, and a sampler. Host memory: not on
     * a GPU's account. */
    const uint64_t per_seq = fm->device ? 0
                                        : (uint64_t)n_ctx * 4 + (uint64_t)hp->n_vocab * 4 +
                                              3 * (uint64_t)HX_SEQUENCE_STEP_TOKENS * 4 +
                                              blocks * 8 +
                                              (uint64_t)hp->n_vocab * SAMPLER_BYTES_PER_TOKEN;
    r->scratch_bytes = fm->scratch + (uint64_t)n_batch * per_seq;
    r->scratch_reserved_bytes = fm->scratch_reserved + (uint64_t)n_batch * per_seq;
    /* Every cached position was looked up once, at most n_vocab distinct rows. A page fault on
     * a file mapping maps the whole fault-around window around it, so k random rows leave
     * W (1 - exp(-k r / W)) of the table's W windows resident (r: windows per row). */
    const uint64_t rows = positions < (uint64_t)hp->n_vocab ? positions : (uint64_t)hp->n_vocab;
    const uint64_t w = FAULT_AROUND_BYTES > fm->page ? FAULT_AROUND_BYTES : fm->page;
    const double windows = (double)((fm->embed_table + w - 1) / w);
    const double used = windows > 0 ? windows * -expm1(-(double)rows * fm->embed_row_windows / windows) : 0;
    const uint64_t embed = (uint64_t)ceil(used) * w;
    r->embed_bytes = embed < fm->embed_table ? embed : fm->embed_table;
    /* While loading, the KV pool and scratch are not touched yet, but the tensor being repacked
     * has its file pages and its copy resident at once. */
    const uint64_t later = r->kv_bytes + r->scratch_bytes + r->embed_bytes;
    r->load_bytes = fm->largest_repack > later ? fm->largest_repack - later : 0;
    r->total_bytes = r->weights_bytes + r->kv_bytes + r->scratch_bytes + r->embed_bytes +
                     r->load_bytes + r->overhead_bytes;
    r->fits = r->total_bytes <= budget;
}

hx_status hx_fit_compute(const hx_model_files *mf, const hx_fit_params *params, hx_fit_report *out,
                         hx_err *err)
{
    const hx_fit_params p = params ? *params : hx_fit_params_default();
    const hx_hparams *hp = &mf->hp;
    if (p.n_ctx < 0 || p.n_ctx > (1 << 24) || p.n_batch < 0 || p.n_batch > 4096)
        return hx_err_set(err, HX_E_INVALID, "context %d or batch %d out of range (0..%d, 0..4096)",
                          p.n_ctx, p.n_batch, 1 << 24);
    if ((unsigned)p.kv_type >= HX_KV_DTYPE_COUNT)
        return hx_err_set(err, HX_E_INVALID, "unknown KV cache type %d", (int)p.kv_type);
    if (hx_kv_dtype_bytes_per_token(p.kv_type, mf->hp.n_layer, mf->hp.n_kv_head, mf->hp.d_head) == 0)
        return hx_err_set(err, HX_E_INVALID,
                          "--kv %s needs d_head a multiple of 32; this model has d_head %d",
                          hx_kv_dtype_name(p.kv_type), mf->hp.d_head);
    if (hp->n_layer < 1 || hp->d_model < 1 || hp->n_head < 1 || hp->n_kv_head < 1 ||
        hp->d_head < 1 || hp->d_ff < 1 || hp->n_vocab < 1 ||
        (uint64_t)hp->n_layer * (uint64_t)hp->n_kv_head * (uint64_t)hp->d_head > ((uint64_t)1 << 30) ||
        (uint64_t)hp->n_head * (uint64_t)hp->d_head > ((uint64_t)1 << 24) || hp->d_model > (1 << 24) ||
        hp->d_ff > (1 << 24) || hp->n_vocab > (1 << 24))
        return hx_err_set(err, HX_E_FORMAT, "%s: hyper-parameters out of range for a forward pass "
                          "(layers %d, d_model %d, heads %d/%d, d_head %d, d_ff %d, vocab %d)",
                          mf->path, hp->n_layer, hp->d_model, hp->n_head, hp->n_kv_head,
                          hp->d_head, hp->d_ff, hp->n_vocab);

    fit_model fm = {.hp = hp, .page = page_bytes(), .device = p.device_total_bytes > 0};
    fm.n_threads = p.n_threads > 0 ? p.n_threads : hx_cpu_physical_cores();
    if (fm.n_threads > MAX_THREADS) fm.n_threads = MAX_THREADS;
    fm.repack = !fm.device && (p.repack == HX_FIT_REPACK_ALWAYS ||
                               (p.repack == HX_FIT_REPACK_AUTO &&
                                hx_pmatmul_select(hx_cpu_isa()) != NULL));
    hx_status st = fm.device ? device_weights(mf, &fm, err) : weights(mf, &fm, err);
    if (st != HX_OK) return st;
    const int64_t T = fm.device ? HX_SEQUENCE_STEP_TOKENS_GPU : HX_SEQUENCE_STEP_TOKENS;
    const int32_t n_batch = p.n_batch > 0 ? p.n_batch : 8;
    uint64_t lr, lt, br, bt;
    llm_scratch(hp, T, n_batch, &lr, &lt);
    if (fm.device) {
        /* Every activation buffer is a device allocation, committed whole (the small host
         * parts of hx_llm's fixed term are counted with them: a few KiB). */
        fm.scratch = fm.scratch_reserved = lr + cuda_scratch(hp, T, fm.largest_matmul);
    } else {
        backend_scratch(hp, T, fm.n_threads, &br, &bt);
        fm.scratch = lt + bt;
        fm.scratch_reserved = lr + br;
    }

    hx_fit_report r = {0};
    r.n_ctx = p.n_ctx > 0 ? p.n_ctx : hx_sequence_default_ctx(hp);
    r.n_batch = n_batch;
    r.n_threads = fm.n_threads;
    r.kv_type = p.kv_type;
    r.repacked = fm.weights_packed > 0;
    r.n_ctx_train = hp->n_ctx_train > 0 ? hp->n_ctx_train : 0;
    r.weights_bytes = fm.weights;
    r.weights_packed_bytes = fm.weights_packed;
    r.overhead_bytes = fm.device ? CUDA_OVERHEAD_BYTES
                                 : OVERHEAD_BASE_BYTES + fm.metadata +
                                       (uint64_t)hp->n_vocab * TOKENIZER_BYTES_PER_TOKEN +
                                       (uint64_t)fm.n_threads * THREAD_BYTES;
    r.device_total_bytes = p.device_total_bytes;
    r.device_free_bytes = fm.device ? p.device_free_bytes : 0;
    r.budget_bytes = p.budget_bytes > 0 ? p.budget_bytes
                     : fm.device    ? hx_fit_default_device_budget(p.device_free_bytes,
                                                                   p.device_total_bytes)
                                    : hx_fit_default_budget();
    terms(&fm, r.n_ctx, n_batch, p.kv_type, r.budget_bytes, &r);

    /* The largest context that fits: total grows with the context, so bisect over blocks. */
    const int64_t cap = r.n_ctx_train > 0 ? r.n_ctx_train : (1 << 24);
    int64_t lo = 0, hi = cap / KV_BLOCK_TOKENS; /* invariant: lo blocks fit (or lo == 0) */
    hx_fit_report probe = r;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        terms(&fm, (int32_t)(mid * KV_BLOCK_TOKENS), n_batch, p.kv_type, r.budget_bytes, &probe);
        if (probe.fits) lo = mid;
        else hi = mid - 1;
    }
    r.max_ctx = (int32_t)(lo * KV_BLOCK_TOKENS);

    /* Decode of one sequence reads every weight once per token, one embedding row, and the KV
     * of the positions before it: n_ctx / 2 on average over a context filled from empty. */
    const uint64_t half = (uint64_t)r.n_ctx / 2, win = (uint64_t)r.kv_window;
    const uint64_t swa_tok = hx_kv_dtype_bytes_per_token(r.kv_type, r.kv_window_layers,
                                                         hp->n_kv_head, hp->d_head);
    const uint64_t swa_read = half < win ? half : win;
    const uint64_t kv_read = half * (r.kv_bytes_per_token - swa_tok) + swa_read * swa_tok;
    r.read_bytes_per_token = fm.weights_read + fm.embed_row + kv_read;
    r.bandwidth_bytes_per_s = p.bandwidth_bytes_per_s > 0 ? p.bandwidth_bytes_per_s : 0;
    if (r.bandwidth_bytes_per_s > 0) {
        r.decode_tok_s = r.bandwidth_bytes_per_s / (double)r.read_bytes_per_token;
        r.decode_tok_s_batch = r.bandwidth_bytes_per_s * n_batch /
                               ((double)fm.weights_read + (double)n_batch * (double)(fm.embed_row + kv_read));
    }
    *out = r;
    return HX_OK;
}
