/* fmatmul_ref.c - the reference f32-activation matmul: the definition every SIMD variant of
 * fmatmul_avx2.c / fmatmul_avx512.c is tested against.
 *
 * Data layout: weights W [n_out, n_in] in their file format (tensor/quant.h), activations x
 * [n_rows, n_in] f32 row-major, out [n_rows, ld_out]. Each output is computed chunk by chunk of
 * 32 elements: dequantize the 32 weights to f32 (w = a * u + c with a, c per block or sub-block,
 * the formulas of tensor/quant_ref.c), take the f32 dot with x, add it to the sum. Nothing
 * quantizes the activations, so the result equals the exact dequantize-then-dot path up to f32
 * rounding. Speed: none intended (~1 GB/s of weights); the ISA files are the fast versions. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "base/f16.h"
#include "kernels.h"
#include "kernels_int.h"
#include "tensor/quant.h"

/* Dequantizes elements [e0, e0 + ne) of weight row o into out (ne <= 32; e0 a multiple of 32,
 * and ne == 32 for the quantized formats, whose rows are multiples of 32). */
static void deq_chunk(const hx_wmat *w, int64_t o, int64_t e0, int ne, float *out)
{
    const unsigned char *row = kn_wrow(w, o);
    switch (w->dtype) {
    case HX_DT_F32:
        for (int i = 0; i < ne; i++) memcpy(&out[i], row + 4 * (e0 + i), 4);
        return;
    case HX_DT_F16:
    case HX_DT_BF16:
        for (int i = 0; i < ne; i++) {
            uint16_t h;
            memcpy(&h, row + 2 * (e0 + i), 2);
            out[i] = w->dtype == HX_DT_F16 ? hx_f16_to_f32(h) : hx_bf16_to_f32(h);
        }
        return;
    case HX_DT_Q4_0: {
        const hx_block_q4_0 *b = (const hx_block_q4_0 *)(const void *)row + e0 / 32;
        const float d = hx_f16_to_f32(b->d);
        for (int j = 0; j < 16; j++) {
            out[j]      = d * (float)((b->qs[j] & 0x0F) - 8);
            out[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
        }
        return;
    }
    case HX_DT_Q4_1: {
        const hx_block_q4_1 *b = (const hx_block_q4_1 *)(const void *)row + e0 / 32;
        const float d = hx_f16_to_f32(b->d), m = hx_f16_to_f32(b->m);
        for (int j = 0; j < 16; j++) {
            out[j]      = d * (float)(b->qs[j] & 0x0F) + m;
            out[j + 16] = d * (float)(b->qs[j] >> 4) + m;
        }
        return;
    }
    case HX_DT_Q8_0: {
        const hx_block_q8_0 *b = (const hx_block_q8_0 *)(const void *)row + e0 / 32;
        const float d = hx_f16_to_f32(b->d);
        for (int j = 0; j < 32; j++) out[j] = d * (float)b->qs[j];
        return;
    }
    case HX_DT_Q4_K:
    case HX_DT_Q5_K: {
        const int64_t sb = e0 / HX_K_N;
        const int j = (int)(e0 % HX_K_N) / 32;
        const bool q5 = w->dtype == HX_DT_Q5_K;
        const hx_block_q4_k *b4 = (const hx_block_q4_k *)(const void *)row + sb;
        const hx_block_q5_k *b5 = (const hx_block_q5_k *)(const void *)row + sb;
        uint8_t sc[8], m[8];
        kn_k_scales(q5 ? b5->scales : b4->scales, sc, m);
        const float a = hx_f16_to_f32(q5 ? b5->d : b4->d) * (float)sc[j];
        const float c = hx_f16_to_f32(q5 ? b5->dmin : b4->dmin) * (float)m[j];
        const uint8_t *qs = (q5 ? b5->qs : b4->qs) + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int u = (qs[l] >> (4 * (j % 2))) & 0x0F;
            if (q5) u |= ((b5->qh[l] >> j) & 1) << 4;
            out[l] = a * (float)u - c;
        }
        return;
    }
    case HX_DT_Q6_K: {
        const hx_block_q6_k *b = (const hx_block_q6_k *)(const void *)row + e0 / HX_K_N;
        const int j = (int)(e0 % HX_K_N) / 32, h = j / 4, t = j % 4;
        const float d = hx_f16_to_f32(b->d);
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            const uint8_t lq = ql[l + 32 * (t % 2)];
            const int lo = t < 2 ? (lq & 0x0F) : (lq >> 4);
            const int u = lo | (((qh[l] >> (2 * t)) & 3) << 4);
            out[l] = d * (float)b->scales[8 * h + 2 * t + l / 16] * (float)(u - 32);
        }
        return;
    }
    case HX_DT_MLX4:
    case HX_DT_MLX8: {
        const int64_t n_groups = w->n_in / w->group_size, g = o * n_groups + e0 / w->group_size;
        const float s = kn_mlx_sb(w->scales, w->sb_dtype, g);
        const float bi = kn_mlx_sb(w->biases, w->sb_dtype, g);
        for (int i = 0; i < 32; i++) {
            const int64_t e = e0 + i;
            const int u = w->dtype == HX_DT_MLX8 ? row[e] : (row[e / 2] >> (4 * (e % 2))) & 0x0F;
            out[i] = s * (float)u + bi;
        }
        return;
    }
    default:
        HX_ASSERT(!"fmatmul_ref: unknown dtype");
    }
}

void hx_fmatmul_ref(const hx_wmat *w, int64_t o0, int64_t o1, const float *x, int64_t r0,
                    int64_t r1, float *out, int64_t ld_out)
{
    const int64_t n_in = w->n_in;
    float wq[32];
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * n_in;
        for (int64_t o = o0; o < o1; o++) {
            float sum = 0.0f;
            for (int64_t e0 = 0; e0 < n_in; e0 += 32) {
                const int ne = n_in - e0 < 32 ? (int)(n_in - e0) : 32;
                deq_chunk(w, o, e0, ne, wq);
                float part = 0.0f;
                for (int i = 0; i < ne; i++) part += wq[i] * xr[e0 + i];
                sum += part;
            }
            out[r * ld_out + o] = sum;
        }
    }
}
