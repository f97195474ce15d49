/* dot_ref.c - the reference dot of a weight row with an activation row, for every format.
 *
 * These loops are the specification every SIMD kernel is tested against: plain C, one block at
 * a time, integer sums inside a block and one float multiply-add per block (per sub-block for
 * K-quants, per 32 for MLX groups), in the order written here. For a quantized weight block with
 * w_i = a * (u_i - k) or w_i = a * u_i + c and an activation block x_i ~= dx * q_i:
 *     sum_i w_i x_i = a * dx * sum_i (u_i - k) q_i          (Q4_0, Q8_0, Q6_K)
 *                   = a * dx * sum_i u_i q_i + c * dx * S   (Q4_1, Q4_K, Q5_K, MLX; S = sum q_i)
 * so nothing is dequantized. F32/F16/BF16 weights are dotted in f32 against x->f. Speed: none
 * intended (about 1 GB/s of weights); see the ISA files. Layouts are in tensor/quant.h. */
#include <stdint.h>

#include "base/f16.h"
#include "kernels.h"
#include "kernels_int.h"
#include "tensor/quant.h"

/* ---- float formats: f32 activations ---- */

float hx_dot_f32_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const float *wr = kn_wrow(w, o);
    const float *xr = x->f + r * x->n;
    float sum = 0.0f;
    for (int64_t i = 0; i < w->n_in; i++) sum += wr[i] * xr[i];
    return sum;
}

float hx_dot_f16_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const uint16_t *wr = kn_wrow(w, o);
    const float *xr = x->f + r * x->n;
    float sum = 0.0f;
    for (int64_t i = 0; i < w->n_in; i++) sum += hx_f16_to_f32(wr[i]) * xr[i];
    return sum;
}

float hx_dot_bf16_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const uint16_t *wr = kn_wrow(w, o);
    const float *xr = x->f + r * x->n;
    float sum = 0.0f;
    for (int64_t i = 0; i < w->n_in; i++) sum += hx_bf16_to_f32(wr[i]) * xr[i];
    return sum;
}

/* ---- 32-element blocks ---- */

/* Q4_0: w = d * (nibble - 8); byte j holds element j (low nibble) and j+16 (high nibble). */
float hx_dot_q4_0_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_0 *wb = kn_wrow(w, o);
    const int8_t *q = kn_xqs(x, r);
    const float  *dx = kn_xd(x, r);
    float sum = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_Q4_0_N; b++, q += 32) {
        int32_t acc = 0;
        for (int j = 0; j < 16; j++) {
            acc += ((wb[b].qs[j] & 0x0F) - 8) * q[j];
            acc += ((wb[b].qs[j] >> 4) - 8) * q[j + 16];
        }
        sum += hx_f16_to_f32(wb[b].d) * dx[b] * (float)acc;
    }
    return sum;
}

/* Q4_1: w = d * nibble + m: the offset multiplies the block's activation sum. */
float hx_dot_q4_1_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_1 *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    float sum = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_Q4_1_N; b++, q += 32) {
        int32_t acc = 0;
        for (int j = 0; j < 16; j++)
            acc += (wb[b].qs[j] & 0x0F) * q[j] + (wb[b].qs[j] >> 4) * q[j + 16];
        const int32_t s = bs[2 * b] + bs[2 * b + 1];
        sum += hx_f16_to_f32(wb[b].d) * dx[b] * (float)acc;
        sum += hx_f16_to_f32(wb[b].m) * dx[b] * (float)s;
    }
    return sum;
}

float hx_dot_q8_0_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q8_0 *wb = kn_wrow(w, o);
    const int8_t *q = kn_xqs(x, r);
    const float  *dx = kn_xd(x, r);
    float sum = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_Q8_0_N; b++, q += 32) {
        int32_t acc = 0;
        for (int j = 0; j < 32; j++) acc += wb[b].qs[j] * q[j];
        sum += hx_f16_to_f32(wb[b].d) * dx[b] * (float)acc;
    }
    return sum;
}

/* ---- 256-element K-quant super-blocks ---- */

/* Q4_K: sub-block j (32 elements, activation block 8B+j) has w = d*sc_j*u - dmin*m_j. Chunk c of
 * qs holds sub-block 2c in its low nibbles and 2c+1 in its high nibbles. */
float hx_dot_q4_k_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q4_k *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    float sum = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        uint8_t sc[8], m[8];
        kn_k_scales(wb[b].scales, sc, m);
        const float d = hx_f16_to_f32(wb[b].d), dmin = hx_f16_to_f32(wb[b].dmin);
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = wb[b].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            const int8_t *qj = q + b * HX_K_N + 32 * j;
            int32_t acc = 0;
            for (int l = 0; l < 32; l++) acc += ((qs[l] >> shift) & 0x0F) * qj[l];
            const int64_t ib = b * 8 + j; /* activation block */
            const int32_t s = bs[2 * ib] + bs[2 * ib + 1];
            sum += d * (float)sc[j] * dx[ib] * (float)acc;
            sum -= dmin * (float)m[j] * dx[ib] * (float)s;
        }
    }
    return sum;
}

/* Q5_K: Q4_K with a fifth bit, bit j of qh[l] for element l of sub-block j. */
float hx_dot_q5_k_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q5_k *wb = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    float sum = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        uint8_t sc[8], m[8];
        kn_k_scales(wb[b].scales, sc, m);
        const float d = hx_f16_to_f32(wb[b].d), dmin = hx_f16_to_f32(wb[b].dmin);
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = wb[b].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            const int8_t *qj = q + b * HX_K_N + 32 * j;
            int32_t acc = 0;
            for (int l = 0; l < 32; l++) {
                const int u = ((qs[l] >> shift) & 0x0F) | (((wb[b].qh[l] >> j) & 1) << 4);
                acc += u * qj[l];
            }
            const int64_t ib = b * 8 + j;
            const int32_t s = bs[2 * ib] + bs[2 * ib + 1];
            sum += d * (float)sc[j] * dx[ib] * (float)acc;
            sum -= dmin * (float)m[j] * dx[ib] * (float)s;
        }
    }
    return sum;
}

/* Q6_K: w = d * sc_k * (u - 32) with a signed scale per 16 elements; element 128h + 32t + l
 * (half h, quarter t) is lo/hi nibble of ql[64h + l + 32(t%2)] (hi when t >= 2) plus bits 2t,2t+1
 * of qh[32h + l] as bits 4,5; its scale is scales[8h + 2t + l/16]. */
float hx_dot_q6_k_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    const hx_block_q6_k *wb = kn_wrow(w, o);
    const int8_t *q = kn_xqs(x, r);
    const float  *dx = kn_xd(x, r);
    float sum = 0.0f;
    for (int64_t b = 0; b < w->n_in / HX_K_N; b++) {
        const float d = hx_f16_to_f32(wb[b].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = wb[b].ql + 64 * h, *qh = wb[b].qh + 32 * h;
            for (int t = 0; t < 4; t++) {
                const int64_t ib = b * 8 + 4 * h + t; /* activation block */
                const int8_t *qt = q + ib * 32;
                float part = 0.0f;
                for (int half = 0; half < 2; half++) { /* the two 16-element sub-blocks */
                    int32_t acc = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const uint8_t lq = ql[l + 32 * (t % 2)];
                        const int lo = t < 2 ? (lq & 0x0F) : (lq >> 4);
                        const int u = lo | (((qh[l] >> (2 * t)) & 3) << 4);
                        acc += (u - 32) * qt[l];
                    }
                    part += (float)wb[b].scales[8 * h + 2 * t + half] * (float)acc;
                }
                sum += d * dx[ib] * part;
            }
        }
    }
    return sum;
}

/* ---- MLX affine: w = s_g * u + b_g per group of group_size (32, 64 or 128) ---- */

/* Shared by MLX4 and MLX8: u(j) is element j of the row's packed codes. */
static float dot_mlx_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r, int bits)
{
    const unsigned char *wq = kn_wrow(w, o);
    const int8_t  *q = kn_xqs(x, r);
    const float   *dx = kn_xd(x, r);
    const int16_t *bs = kn_xbsum(x, r);
    const int64_t gs = w->group_size, n_groups = w->n_in / gs;
    float sum = 0.0f;
    for (int64_t g = 0; g < n_groups; g++) {
        const float s  = kn_mlx_sb(w->scales, w->sb_dtype, o * n_groups + g);
        const float bi = kn_mlx_sb(w->biases, w->sb_dtype, o * n_groups + g);
        for (int64_t ib = g * gs / 32; ib < (g + 1) * gs / 32; ib++) {
            int32_t acc = 0;
            for (int64_t i = ib * 32; i < ib * 32 + 32; i++) {
                const int u = bits == 8 ? wq[i] : (wq[i / 2] >> (4 * (i % 2))) & 0x0F;
                acc += u * q[i];
            }
            const int32_t sq = bs[2 * ib] + bs[2 * ib + 1];
            sum += s * dx[ib] * (float)acc;
            sum += bi * dx[ib] * (float)sq;
        }
    }
    return sum;
}

float hx_dot_mlx4_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_mlx_ref(w, o, x, r, 4);
}

float hx_dot_mlx8_ref(const hx_wmat *w, int64_t o, const hx_act *x, int64_t r)
{
    return dot_mlx_ref(w, o, x, r, 8);
}
