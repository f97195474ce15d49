/* packed.h - weights repacked once at load into 16-row interleaved blocks for the VNNI matmul.
 *
 * Why: the file layouts keep each weight row's blocks together, so a dot kernel reduces one
 * output at a time and pays per block a scale broadcast, a conversion and a horizontal combine
 * (~12 vector ops per 32 weights). Interleaving 16 output rows puts one output per 32-bit lane:
 * a single vpdpbusd multiplies 4 weights of each of 16 rows by 4 activation bytes broadcast to
 * every lane (64 MACs), the 16 rows' scales are one 32-byte load, and nothing is reduced across
 * lanes until the end: ~2 vector ops per 32 weights per activation term, so decode stays memory
 * bound even with the two-term activations that make the integer path exact (act_quant.h).
 *
 * Formats: Q4_0, Q4_1 and Q8_0 (the quantized formats of the Llama GGUFs people run; the others
 * keep their file layout and kernels). Rows are taken in groups of 16 (the last group padded
 * with zero rows). A group holds, for its nb = n_in / 32 block columns:
 *     scales  nb entries of 16 f16 d (Q4_1: then 16 f16 m), padded to a 64-byte multiple
 *     codes   nb entries of 256 bytes (Q4_0, Q4_1) or 512 bytes (Q8_0), 64-byte aligned
 * Within a block column's codes, chunk k (64 bytes) holds in lane r (bytes 4r..4r+3) row r's
 * bytes qs[4k .. 4k+4): for the 4-bit formats the low nibbles are elements 4k.. and the high
 * nibbles elements 16+4k.. of the block (k < 4); for Q8_0 the values of elements 4k.. with the
 * sign bit flipped (u = q + 128, unsigned as vpdpbusd wants; k < 8).
 * The bytes are the file's bytes rearranged: dequantizing a packed matrix gives the same values.
 *
 * The matmul (two-term or single-term int8 activations, hx_act) computes per row, per block,
 *     v = d2 * (256 sum(u q1) + sum(u q2)) + k * s    (two terms: the second from
 *                                                       hx_act_quant2, so d2 = d1 / 256)
 *     v = d1 * sum(u q1) + k * s                      (single term)
 *     acc += dw * v          (Q4_1: acc += dw * v + mw * s)
 * with the integer sums exact (|256 S1 + S2| < 2^31 for every format).
 * with s = d1 * sum(q1) + d2 * sum(q2) the block's activation sum (hx_packed_act_sums) and
 * k = -8 (Q4_0), -128 (Q8_0), 0 (Q4_1): the offsets of the unsigned codes folded out. */
#ifndef HX_BACKEND_CPU_PACKED_H
#define HX_BACKEND_CPU_PACKED_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "act_quant.h"
#include "kernels.h"

#define HX_PACK_ROWS 16 /* rows interleaved per group */

typedef struct {
    hx_dtype       dtype;       /* source format: Q4_0, Q4_1 or Q8_0 */
    int64_t        n_in, n_out; /* the source matrix [n_out, n_in] */
    int64_t        n_groups;    /* ceil(n_out / 16) */
    size_t         sc_bytes;    /* scales of one group (64-byte multiple) */
    size_t         code_bytes;  /* codes of one block column: 256 or 512 */
    size_t         group_bytes; /* sc_bytes + n_in / 32 * code_bytes */
    unsigned char *data;        /* n_groups * group_bytes, 64-byte aligned; the caller
                                 * allocates and frees it (hx_pack_layout gives the size) */
} hx_packed;

/* True when dt with rows of n_in has a packed layout (Q4_0/Q4_1/Q8_0, n_in % 32 == 0). */
bool hx_pack_supported(hx_dtype dt, int64_t n_in);

/* Fills p's geometry for w (hx_pack_supported) and returns the bytes p->data needs. */
size_t hx_pack_layout(hx_packed *p, const hx_wmat *w);

/* Repacks groups [g0, g1) of w into p->data (p laid out by hx_pack_layout); threads may pack
 * disjoint group ranges at once. */
void hx_pack_groups(const hx_packed *p, const hx_wmat *w, int64_t g0, int64_t g1);

/* s[r * nb + b] = d1 * sum(q1) (+ d2 * sum(q2) when x2) over block b of rows [r0, r1) of x,
 * nb = x->n / 32: the activation sums the packed matmul needs. */
void hx_packed_act_sums(const hx_act *x, const hx_act *x2, int64_t r0, int64_t r1, float *s);

/* out[r * ld_out + o] = sum_i W[o][i] * x[r][i] for r in [r0, r1) and the outputs of groups
 * [g0, g1) (o < n_out), with x the int8 activations x (+ the residual term x2 made by
 * hx_act_quant2, or NULL for one term) and s their hx_packed_act_sums (row stride n_in / 32). */
typedef void (*hx_pmatmul_fn)(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                              const hx_act *x2, const float *s, int64_t r0, int64_t r1,
                              float *out, int64_t ld_out);

/* The scalar definition, and the AVX-512 VNNI kernel (x86-64 builds only). */
void hx_pmatmul_ref(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                    const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                    int64_t ld_out);
void hx_pmatmul_avx512vnni(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                           const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                           int64_t ld_out);

/* The best packed matmul for ISA mask isa, or NULL where packing does not pay (no VNNI: the
 * file-layout kernels are used instead). */
hx_pmatmul_fn hx_pmatmul_select(unsigned isa);

#endif
