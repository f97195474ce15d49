/* kernels.h - the CUDA kernels of the cuda backend, as C-callable launchers (gemv.cu: the
 * GEMVs; attention.cu: rope, KV cache writes and attention; sample.cu: the sampler's draw;
 * kernels.cu: the rest).
 *
 * Every launcher queues work on `stream` and returns at once; pointers are device memory unless
 * named h_*. Shapes and layouts are those of backend.h. A weight matrix is described by
 * hx_cuda_wmat: its rows in the file's block format, and for MLX the per-group scales and
 * biases. Q4_0, Q4_1 and Q8_0 are the exception: the backend uploads them split, each row's
 * codes contiguous in q (16 or 32 bytes per block, so a block is one or two aligned 16-byte
 * loads) and the blocks' f16 scales in `scales` (Q4_1's offsets in `biases`), [n_out,
 * n_in / group_size] each: group_size is 32, one scale a block, except for MLX 4-bit taken as
 * Q4_1, which keeps its groups of 64 or 128 values. Every format is read 32 elements at a time
 * (a "sub-block": a whole Q4_0/Q4_1/Q8_0 block, one eighth of a K-quant super-block, 32 values
 * of a float row or of an MLX group), so one device dequantizer serves the dequantize-to-f16
 * pass in front of cuBLAS and the embedding lookup. Q6_K super-blocks are uploaded padded from
 * 210 to HX_CUDA_Q6_K_BYTES bytes (zeros after the f16 scale), so that every field of theirs a
 * kernel reads is aligned for one wide load. */
#ifndef HX_BACKEND_CUDA_KERNELS_H
#define HX_BACKEND_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *hx_cuda_stream;

/* Whether the environment turns switch `name` off (set to "0"): the backend's HEARTH_CUDA_*
 * switches, each on unless so set. */
int hx_cuda_switched_off(const char *name);

#define HX_CUDA_Q6_K_BYTES 224 /* a Q6_K super-block on the device */

typedef struct {
    const void *q;          /* rows of the weight in its block format (Q4_0/Q4_1/Q8_0: codes) */
    const void *scales;     /* MLX, Q4_0/Q4_1/Q8_0: [n_out, n_in / group_size] in sb_dtype */
    const void *biases;
    int32_t     dtype;      /* hx_dtype */
    int32_t     sb_dtype;   /* MLX scales/biases: HX_DT_F16, HX_DT_BF16 or HX_DT_F32 */
    int32_t     group_size; /* MLX */
    int64_t     n_out, n_in;
    int64_t     row_bytes;  /* bytes of one row of q */
} hx_cuda_wmat;

/* True when the device code reads this format (every hx_dtype with n_in % 32 == 0). */
int hx_cuda_format_ok(int32_t dtype, int64_t n_in);

/* The KV store of backend.h, and one sequence's block table on the device. dtype is its
 * hx_kv_dtype: f16 elements, or (HX_KV_Q8, HX_KV_Q4; d_head % 32 == 0, block_tokens % 4 == 0)
 * one tile per (block, layer, kv head) in backend/kv_quant.h's layout, so that both backends'
 * caches compare byte for byte. A quantized cache is written by hx_cuda_kv_write(_rows) only,
 * never by hx_cuda_rope or a GEMV's post. */
typedef struct {
    uint16_t *k, *v;
    int32_t   n_layer, n_kv_head, d_head, block_tokens;
    int32_t   dtype;
} hx_cuda_kv;

/* What a GEMV of one row does with its output as it writes it (a job's post, hx_cuda_gemv; no
 * acc with it), when pos is not NULL: at decode, the rope and the cache write joined to the q,
 * k and v GEMV, a launch fewer a layer. With inv_freq, pairs (2i, 2i + 1) of each head of
 * d_head, i < half, are rotated by position *pos as hx_cuda_rope rotates them (mscale
 * multiplying cos and sin); with cache (kv.k or kv.v: kv gives its shape), every element is
 * also stored into position *pos's row of that cache (f16) in layer `layer`, through the block
 * table `blocks`, as hx_cuda_kv_write stores it. */
typedef struct {
    const int32_t *pos;
    const float   *inv_freq;
    float          mscale;
    int32_t        half, d_head, layer;
    int32_t        split; /* pairs (i, i + half) instead, half = d_head / 2: the streamed GEMV
                             only (hx_cuda_gemv_streams), whose blocks then take rows 4j..4j+3
                             and half + 4j.. of a head */
    uint16_t      *cache;
    const int32_t *blocks;
    hx_cuda_kv     kv;
    const float   *tab; /* with inv_freq (NULL: none): the rotation's cosine and sine of pair
                           frequency i at *pos, with mscale, at tab[2i] and tab[2i + 1], as the
                           step's rope kernel left them (hx_cuda_rope's tab) */
} hx_cuda_gemv_post;

/* One GEMV of a launch: out[r][o] = w[o] . x[r] (+ bias[o]), and when acc is not NULL also
 * acc[r][o] += out[r][o] (a residual add). */
typedef struct {
    hx_cuda_wmat w;
    const float *bias;
    float       *out, *acc;
} hx_cuda_gemv_job;
#define HX_CUDA_GEMV_SET 3

/* n_jobs <= HX_CUDA_GEMV_SET GEMVs of the same n_rows <= HX_CUDA_GEMV_ROWS rows of x, weights
 * of one dtype and n_in, in one launch (q, k and v; gate and up): one pass over each w.
 * Float formats read x; block formats (hx_cuda_gemv_int8) read it rounded to 16-bit integers
 * instead, xq and xd from hx_cuda_quantize_x of those rows (relative error ~2e-5 against f32 x:
 * the integer dot products of llama.cpp, whose 8-bit activations err by ~4e-3, done twice).
 * From 5 rows (Q4_K: 3), Q4_0, Q4_1, Q8_0 and Q4_K rows of a multiple of 64 values take those
 * products on the tensor cores (int8 MMAs; the same integers, summed in another order). */
#define HX_CUDA_GEMV_ROWS 8
int hx_cuda_gemv_int8(int32_t dtype);
uint64_t hx_cuda_gemv_post_count(void); /* launches with a job's post, in the process (tests) */
/* Whether hx_cuda_gemv of these jobs at n_rows rows takes the streamed one-row GEMV. */
int hx_cuda_gemv_streams(const hx_cuda_gemv_job *jobs, int n_jobs, int64_t n_rows);
void hx_cuda_gemv(const hx_cuda_gemv_job *jobs, const hx_cuda_gemv_post *posts, int n_jobs,
                  const float *x, const int8_t *xq, const float *xd, int64_t n_rows,
                  hx_cuda_stream s); /* posts: one a job (n_rows 1), or NULL */
/* x [n] (n a multiple of 32) rounded per 32 values to 16-bit integers kept as two bytes: xq
 * [2 n] (the high bytes, then the low ones), xd [n / 32] (their scale). Per 32 values: d = max
 * |x| / 127, hi = round(x / d); r = x - hi d (one rounding); lo = round(256 r / d) clamped to
 * +-127 (ties to even; hi = lo = 0 where d = 0); xd = d / 256. x ~ xd (256 hi + lo). */
void hx_cuda_quantize_x(const float *x, int64_t n, int8_t *xq, float *xd, hx_cuda_stream s);
/* Rows [o0, o1) of w as f16 (or bf16 when bf16 != 0), row-major [o1 - o0, n_in]. */
void hx_cuda_dequant_rows(const hx_cuda_wmat *w, int64_t o0, int64_t o1, void *dst, int bf16,
                          hx_cuda_stream s);
/* x [n] f32 to f16 (or bf16). */
void hx_cuda_to_half(const float *x, int64_t n, void *dst, int bf16, hx_cuda_stream s);
/* out[r][o] += bias[o] for n_rows rows of n_out. */
void hx_cuda_add_bias(float *out, const float *bias, int64_t n_rows, int64_t n_out,
                      hx_cuda_stream s);

/* With xq (NULL: not), rmsnorm and glu also write their output rounded as hx_cuda_quantize_x
 * would (d, n a multiple of 32): the GEMV after them needs no rounding pass of its own. */
void hx_cuda_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t d, float eps,
                     float *out, int8_t *xq, float *xd, hx_cuda_stream s);

/* x [n_tok, n_head, d_head] and, when x2 is not NULL, x2 [n_tok, n_head2, d_head] (q and k)
 * rotated in one launch; inv_freq [n_rot / 2], pairs as in hx_rope. With kv (NULL: not) x2 is
 * K, and the launch also does hx_cuda_kv_write of it (rotated) and of v [n_tok, n_head2 *
 * d_head] into that layer. With tab (NULL: not), row 0's rotation is also left there: pair
 * frequency i's cosine and sine (with mscale) at tab[2i], tab[2i + 1] (a GEMV's post reads
 * them instead of computing them: hx_cuda_gemv_post.tab). */
void hx_cuda_rope(float *x, int32_t n_head, float *x2, int32_t n_head2, const int32_t *pos,
                  int64_t n_tok, int32_t d_head, const float *inv_freq, int32_t n_rot,
                  float mscale, int pairs, const hx_cuda_kv *kv, int32_t layer,
                  const int32_t *blocks, const float *v, float *tab, hx_cuda_stream s);

void hx_cuda_kv_write(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks,
                      const int32_t *pos, const float *k, const float *v, int64_t n_tok,
                      hx_cuda_stream s);
/* Decode rows of several sequences in one launch: row t's sequence's block table is tab[t] and
 * its position *pos[t] (device memory), so that a step of many streams writes their caches in
 * one launch and attends in another, not one of each per sequence. */
#define HX_CUDA_DEC_ROWS 64
typedef struct {
    const int32_t *tab[HX_CUDA_DEC_ROWS];
    const int32_t *pos[HX_CUDA_DEC_ROWS];
} hx_cuda_rows;
void hx_cuda_kv_write_rows(const hx_cuda_kv *kv, int32_t layer, const hx_cuda_rows *rows,
                           const float *k, const float *v, int64_t n_tok, hx_cuda_stream s);
/* Causal attention of n_tok rows of q [n_tok, n_head, d_head] over the sequence's cache
 * (row t sees positions up to pos[t], from pos[t] - window + 1 when window > 0). From
 * HX_CUDA_FLASH_ROWS rows with d_head 64 or 128 it runs on the tensor cores (q, and the
 * probabilities, rounded to f16: relative error ~1e-3 instead of ~1e-6). */
#define HX_CUDA_FLASH_ROWS 16
void hx_cuda_attention(const hx_cuda_kv *kv, int32_t layer, const int32_t *blocks,
                       const float *q, const int32_t *pos, int64_t n_tok, int32_t n_head,
                       float scale, int32_t window, float softcap, float *scratch, float *out,
                       int8_t *xq, float *xd, int32_t splits, hx_cuda_stream s);
/* Blocks a decode row's context is split over when it attends n_keys keys at most (the
 * `splits` hx_cuda_attention takes: launching only those saves the rest starting to exit). */
int32_t hx_cuda_attention_splits(int64_t n_keys);
/* hx_cuda_attention of n_tok <= HX_CUDA_DEC_ROWS decode rows given as hx_cuda_rows (the split
 * kernel, whatever the row count), when hx_cuda_attention_rows_ok; scratch as below. */
int hx_cuda_attention_rows_ok(int64_t n_tok, int32_t n_head, int32_t d_head);
int64_t hx_cuda_attention_rows_scratch(int64_t n_tok, int32_t n_head, int32_t d_head);
void hx_cuda_attention_rows(const hx_cuda_kv *kv, int32_t layer, const hx_cuda_rows *rows,
                            const float *q, int64_t n_tok, int32_t n_head, float scale,
                            int32_t window, float softcap, float *scratch, float *out,
                            int8_t *xq, float *xd, int32_t splits, hx_cuda_stream s);
/* With xq (NULL: not), decode rows (when hx_cuda_attention_scratch > 0) with d_head a multiple of
 * 32 also write their output rounded as hx_cuda_quantize_x would, like rmsnorm below.
 * Floats of device scratch hx_cuda_attention needs for these rows (decode, up to
 * HX_CUDA_GEMV_ROWS rows, splits the context: partial states and counters); 0 when none. The
 * scratch must be zeroed once when allocated: the launches leave their counters at zero. */
int64_t hx_cuda_attention_scratch(int64_t n_tok, int32_t n_head, int32_t d_head);

/* out[rows[i]] += w[i] * y[i] for n rows of d floats; the rows must be distinct (a mixture of
 * experts' results added into their tokens' rows, one expert at a time). */
void hx_cuda_scatter_add(float *out, const float *y, const int32_t *rows, const float *w,
                         int64_t n, int64_t d, hx_cuda_stream s);
void hx_cuda_gather_rows(const float *src, const int32_t *rows, int64_t n, int64_t d,
                         float *dst, hx_cuda_stream s);
/* A mixture of experts' decode rows without a wait for the host (cuda_backend.c cuda_moe). Per
 * row of router [n_tok, n_expert] (n_expert <= HX_CUDA_MOE_EXPERTS, n_used <= 32): the
 * softmax's n_used most probable experts (ties: the lower id) into ids [n_tok, n_used] and
 * their probabilities into w, renormalised to sum 1 when norm (hx_moe_route, sums in float). */
#define HX_CUDA_MOE_EXPERTS 1024
void hx_cuda_moe_route(const float *router, int64_t n_tok, int32_t n_expert, int32_t n_used,
                       int norm, int32_t *ids, float *w, hx_cuda_stream s);
/* For each of n_pairs pairs p: out[p] [n_out] = table[ids[p]] . x[p / x_div], with x as
 * hx_cuda_quantize_x left n_x rows of it (xq [2 n_x n_in], xd). table: weights in device memory,
 * all of like's block format (hx_cuda_gemv_int8) and shape; like: one of them, on the host. */
void hx_cuda_gemv_routed(const hx_cuda_wmat *table, const hx_cuda_wmat *like,
                         const int32_t *ids, int64_t n_pairs, int32_t x_div, const int8_t *xq,
                         const float *xd, int64_t n_x, float *out, hx_cuda_stream s);
uint64_t hx_cuda_gemv_routed_count(void); /* its launches in the process (for tests) */
/* out[t] = sum_j w[t k + j] * y[t k + j] for n_tok rows of d (overwritten). */
void hx_cuda_moe_combine(const float *y, const float *w, int64_t n_tok, int32_t k, int64_t d,
                         float *out, hx_cuda_stream s);
/* act 0: silu(gate) * up; 1: gelu_tanh(gate) * up. */
void hx_cuda_glu(const float *gate, const float *up, int64_t n, int act, float *out,
                 int8_t *xq, float *xd, hx_cuda_stream s);
void hx_cuda_add(float *x, const float *y, int64_t n, hx_cuda_stream s);
void hx_cuda_scale(float *x, float f, int64_t n, hx_cuda_stream s);
void hx_cuda_softcap(float *x, float cap, int64_t n, hx_cuda_stream s);

/* Draws of the sampler chain on the device (sample.cu): one hx_cuda_draw per row of logits,
 * as backend.h's hx_sample_row (temperature 0: the argmax; top_k 0: the row is skipped, its out
 * entry left alone; top_k at most HX_CUDA_DRAW_TOP_K; logprobs 0 or 1). */
typedef struct {
    float   temperature;
    int32_t top_k;
    float   top_p, min_p;
    double  u;
    int32_t logprobs, n_top;
    float   repeat, presence, frequency;
    int32_t unused;
} hx_cuda_draw;
/* backend.h's hx_sample_edit of row `row1 - 1` (row1 0: padding, ignored). */
typedef struct {
    int32_t row1, id;
    float   bias;
    int32_t count;
} hx_cuda_edit;
#define HX_CUDA_DRAW_TOP_K 256
#define HX_CUDA_DRAW_N_TOP 20 /* alternatives with the log-probabilities, at most */
typedef struct {
    int32_t token;
    float   logprob;
    int32_t top_ids[HX_CUDA_DRAW_N_TOP];
    float   top_logprobs[HX_CUDA_DRAW_N_TOP];
} hx_cuda_drawn;
/* out[t] = row ids[t] of the table w, as f32; an id below 0 is backend.h's HX_TOKEN_DRAWN(i):
 * the token drawn[i] (device memory; NULL when no id is below 0). */
void hx_cuda_embed(const hx_cuda_wmat *w, const int32_t *ids, const hx_cuda_drawn *drawn,
                   int64_t n_tok, float *out, hx_cuda_stream s);
/* Bytes of device scratch hx_cuda_sample needs for n rows of n_vocab logits. */
size_t hx_cuda_sample_scratch(int64_t n, int64_t n_vocab);
/* Applies the n_edits edits to logits [n, n_vocab] in place, then out[i] = the draw of row i
 * (device memory). */
void hx_cuda_sample(float *logits, int64_t n, int64_t n_vocab, const hx_cuda_draw *draws,
                    const hx_cuda_edit *edits, int64_t n_edits, void *scratch,
                    hx_cuda_drawn *out, hx_cuda_stream s);

#ifdef HX_CUDA_TIMELINE
/* A dev build's timeline (kernels.cuh): a launch's wait ended at t (ns, the GPU's global timer),
 * its grid gx x gy of bx threads; used 0: an empty slot. One ring per kernel file. */
typedef struct {
    unsigned long long t;
    uint32_t           gx, gy, bx, used;
} hx_cuda_tl_rec;
#define HX_CUDA_TL_CAP 65536u
size_t hx_cuda_timeline_gemv(hx_cuda_tl_rec *out);
size_t hx_cuda_timeline_attention(hx_cuda_tl_rec *out);
size_t hx_cuda_timeline_kernels(hx_cuda_tl_rec *out);
#endif

#ifdef __cplusplus
}
#endif
#endif
