/* packed.h - weights repacked once at load into 16-row interleaved blocks for the int8 matmul
 * (AVX-512 VNNI, or AVX2's vpmaddubsw on CPUs without it).
 *
 * Why: the file layouts keep each weight row's blocks together, so a dot kernel reduces one
 * output at a time and pays per block a scale broadcast, a conversion and a horizontal combine
 * (~12 vector ops per 32 weights). Interleaving 16 output rows puts one output per 32-bit lane:
 * a single vpdpbusd multiplies 4 weights of each of 16 rows by 4 activation bytes broadcast to
 * every lane (64 MACs), the 16 rows' scales are one 32-byte load, and nothing is reduced across
 * lanes until the end: ~2 vector ops per 32 weights per activation term, so decode stays memory
 * bound even with the two-term activations that make the integer path exact (act_quant.h).
 *
 * Formats: Q4_0, Q4_1, Q8_0, Q4_K and Q6_K (the quantized formats of the Llama GGUFs people run,
 * Q4_K_M files included; the others keep their file layout and kernels). Rows are taken in groups
 * of 16 (the last group padded with zero rows: every scale zero, so they contribute nothing). A
 * group is a sequence of block columns of col_n input elements (32, or 256 for the K-quants), each
 * col_bytes long and 64-byte aligned; every code chunk below is 64 bytes that hold in lane r
 * (bytes 4r .. 4r+3) 4 bytes of row r of the group.
 *
 * Q4_0, Q4_1, Q8_0 (col_n 32): the group starts with its scales, sc_bytes:
 *     nb = n_in / 32 entries of 16 f16 d (Q4_1: then 16 f16 m), padded to a 64-byte multiple
 * and then the nb block columns of codes, col_bytes 256 (Q4_0, Q4_1) or 512 (Q8_0): chunk k holds
 * in lane r row r's bytes qs[4k .. 4k+4): for the 4-bit formats the low nibbles are elements 4k..
 * and the high nibbles elements 16+4k.. of the block (k < 4); for Q8_0 the values of elements 4k..
 * with the sign bit flipped (u = q + 128, unsigned as vpdpbusd wants; k < 8).
 *
 * Q4_K and Q6_K (col_n 256, sc_bytes 0): each block column is one super-block of every row of the
 * group, its scales first. Byte offsets within the column, r = row in the group (0..15):
 *   Q4_K, col_bytes 2368 (16 rows of the file: 2304 bytes; 2.8% more):
 *     0     d[16]      f16   row r's d
 *     32    dmin[16]   f16   row r's dmin
 *     64    sc[8][16]  u8    sc[j][r] = row r's 6-bit scale of sub-block j (kn_k_scales)
 *     192   m[8][16]   u8    m[j][r]  = row r's 6-bit min of sub-block j
 *     320   codes: 4 x 8 chunks; chunk 8c + k (at 320 + 64 (8c + k)) holds in lane r row r's
 *           qs[32c + 4k .. +4): low nibbles elements 64c + 4k.. (sub-block 2c), high nibbles
 *           elements 64c + 32 + 4k.. (sub-block 2c + 1), as in the file.
 *   Q6_K, col_bytes 3392 (16 rows of the file: 3360 bytes; 1.0% more; the 6-bit codes stay
 *   split in ql and qh as in the file, since decode is memory bound):
 *     0     d[16]      f16   row r's d
 *     32    sc[16][16] i8    sc[j][r] = row r's scale of sub-block j (elements 16j .. 16j+16)
 *     288   32 zero bytes (so that the codes start 64-byte aligned)
 *     320   ql: 32 chunks; chunk k holds in lane r row r's ql[4k .. 4k+4)
 *     2368  qh: 16 chunks; chunk k holds in lane r row r's qh[4k .. 4k+4)
 *     The 6-bit code of an element is assembled as in the file (quant_ref.c): element
 *     128h + 32t + l (half h, quarter t, l < 32) is u = (4 bits of ql[64h + 32 (t & 1) + l], low
 *     nibble for t < 2, high for t >= 2) | (bits 2t, 2t+1 of qh[32h + l]) << 4, value u - 32.
 * The bytes are the file's bytes rearranged (Q4_K's scales unpacked to bytes): dequantizing a
 * packed matrix gives the same values.
 *
 * The matmul (two-term or single-term int8 activations, hx_act) computes per row, per block,
 *     v = d2 * (256 sum(u q1) + sum(u q2)) + k * s    (two terms: the second from
 *                                                       hx_act_quant2, so d2 = d1 / 256)
 *     v = d1 * sum(u q1) + k * s                      (single term)
 *     acc += dw * v          (Q4_1: acc += dw * v + mw * s)
 * with the integer sums exact (|256 S1 + S2| < 2^31 for every format),
 * with s = d1 * sum(q1) + d2 * sum(q2) the block's activation sum (hx_packed_act_sums) and
 * k = -8 (Q4_0), -128 (Q8_0), 0 (Q4_1): the offsets of the unsigned codes folded out.
 *
 * The K-quants, per row and super-block, with dx = d2 (two terms) or d1 (single term) of the
 * 32-element activation block the sub-block lies in, every product and sum rounded to f32 in
 * this order (fs, fm start at +0, j ascending):
 *   Q4_K, sub-blocks j = 0..7 of 32 elements (s_j = s of the activation block they are):
 *     S_j = 256 sum(u q1) + sum(u q2)   (single term: sum(u q1))        exact int32
 *     fs  = fma((float)S_j, sc_j * dx, fs)
 *     fm  = fma((float)m_j, s_j, fm)
 *     then acc = fma(d, fs, acc), acc = fma(-dmin, fm, acc)
 *   Q6_K, sub-blocks j = 0..15 of 16 elements, the -32 offset folded out exactly with the
 *   per-16 activation sums bsum1, bsum2 of each term (act_quant.h):
 *     A_j = 256 (sum(u q1) - 32 bsum1) + (sum(u q2) - 32 bsum2)  (single term: the first
 *           bracket alone)                                          exact int32
 *     fs  = fma((float)A_j, sc_j * dx, fs)
 *     then acc = fma(d, fs, acc)
 * Bounds (|q| <= 127): Q4_K |sum(u q)| <= 32 * 15 * 127 = 60960, so |S_j| <= 257 * 60960 < 2^24;
 * Q6_K |sum((u - 32) q)| <= 16 * 32 * 127 = 65024, so |A_j| <= 257 * 65024 < 2^24. Both are
 * exact in int32 and exact as floats, so only the float accumulation rounds. */
#ifndef HX_BACKEND_CPU_PACKED_H
#define HX_BACKEND_CPU_PACKED_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "act_quant.h"
#include "kernels.h"

#define HX_PACK_ROWS 16 /* rows interleaved per group */

/* Byte offsets inside a K-quant block column (the layout above). */
enum {
    HX_PACK_K_CODES  = 320,  /* end of the scales, start of the codes (Q4_K qs, Q6_K ql) */
    HX_PACK_Q4K_DMIN = 32,
    HX_PACK_Q4K_SC   = 64,
    HX_PACK_Q4K_M    = 192,
    HX_PACK_Q4K_COL  = 2368, /* col_bytes */
    HX_PACK_Q6K_SC   = 32,
    HX_PACK_Q6K_QH   = 2368,
    HX_PACK_Q6K_COL  = 3392, /* col_bytes */
};
_Static_assert(HX_PACK_Q4K_M + 8 * 16 == HX_PACK_K_CODES &&
                   HX_PACK_Q4K_COL == HX_PACK_K_CODES + 32 * 64 &&
                   HX_PACK_Q6K_SC + 16 * 16 + 32 == HX_PACK_K_CODES &&
                   HX_PACK_Q6K_QH == HX_PACK_K_CODES + 32 * 64 &&
                   HX_PACK_Q6K_COL == HX_PACK_Q6K_QH + 16 * 64 && HX_PACK_Q6K_COL % 64 == 0,
               "the K-quant column offsets add up to the layout above");

typedef struct {
    hx_dtype       dtype;       /* source format: Q4_0, Q4_1, Q8_0, Q4_K or Q6_K */
    int64_t        n_in, n_out; /* the source matrix [n_out, n_in] */
    int64_t        n_groups;    /* ceil(n_out / 16) */
    int64_t        col_n;       /* input elements per block column: 32, or 256 (K-quants) */
    size_t         sc_bytes;    /* scales at the head of a group (64-byte multiple); 0 for the
                                 * K-quants, whose scales head each block column */
    size_t         col_bytes;   /* one block column: 256, 512, 2368 (Q4_K) or 3392 (Q6_K) */
    size_t         group_bytes; /* sc_bytes + n_in / col_n * col_bytes */
    unsigned char *data;        /* n_groups * group_bytes, 64-byte aligned; the caller
                                 * allocates and frees it (hx_pack_layout gives the size) */
} hx_packed;

/* True when dt with rows of n_in has a packed layout: Q4_0/Q4_1/Q8_0 with n_in % 32 == 0, or
 * Q4_K/Q6_K with n_in % 256 == 0 (n_in > 0). */
bool hx_pack_supported(hx_dtype dt, int64_t n_in);

/* Fills p's geometry for w (hx_pack_supported) and returns the bytes p->data needs. */
size_t hx_pack_layout(hx_packed *p, const hx_wmat *w);

/* Repacks groups [g0, g1) of w into p->data (p laid out by hx_pack_layout); threads may pack
 * disjoint group ranges at once. */
void hx_pack_groups(const hx_packed *p, const hx_wmat *w, int64_t g0, int64_t g1);

/* Block column b of group rows o0 .. o0 + 15 (all < n_out) of a Q4_0/Q4_1/Q8_0 matrix, written as
 * hx_pack_groups writes it (scales at sc, codes at cb), with AVX2-file intrinsics (x86-64 builds
 * only; hx_pack_groups uses it where the CPU has AVX2). */
void hx_pack_column_avx2(const hx_packed *p, const hx_wmat *w, int64_t o0, int64_t b,
                         unsigned char *sc, unsigned char *cb);

/* s[r * nb + b] = d1 * sum(q1) (+ d2 * sum(q2) when x2) over block b of rows [r0, r1) of x,
 * nb = x->n / 32: the activation sums the packed matmul needs (Q6_K reads the integer bsum of
 * x and x2 instead and ignores them). */
void hx_packed_act_sums(const hx_act *x, const hx_act *x2, int64_t r0, int64_t r1, float *s);

/* out[r * ld_out + o] = sum_i W[o][i] * x[r][i] for r in [r0, r1) and the outputs of groups
 * [g0, g1) (o < n_out), with x the int8 activations x (+ the residual term x2 made by
 * hx_act_quant2, or NULL for one term) and s their hx_packed_act_sums (row stride n_in / 32). */
typedef void (*hx_pmatmul_fn)(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                              const hx_act *x2, const float *s, int64_t r0, int64_t r1,
                              float *out, int64_t ld_out);

/* The scalar definition, the AVX-512 VNNI kernel and the AVX2 kernel (x86-64 builds only). The
 * AVX2 kernel (vpmaddubsw + vpmaddwd, packed_avx2.c) takes Q4_0/Q4_1/Q8_0 itself and hands the
 * K-quants to hx_pmatmul_k_avx2 (packed_k_avx2.c); its Q8_0 sums the signed codes (u ^ 0x80)
 * directly instead of folding out k = -128, since vpmaddubsw would saturate on 255 * 127 * 2, so
 * its Q8_0 bits may differ from the reference's by a rounding. */
void hx_pmatmul_ref(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                    const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                    int64_t ld_out);
void hx_pmatmul_avx512vnni(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                           const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                           int64_t ld_out);
void hx_pmatmul_avx2(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                     const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                     int64_t ld_out);
void hx_pmatmul_k_avx2(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                       const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                       int64_t ld_out);

/* The best packed matmul for ISA mask isa: AVX-512 VNNI, else AVX2; NULL where neither applies
 * (the file-layout kernels are used instead). */
hx_pmatmul_fn hx_pmatmul_select(unsigned isa);

#endif
