/* matmul_tile_avx512.c - tiled matmul for prefill with AVX-512 VNNI: out[r][o] for a block of
 * activation rows x a block of weight rows, every quantized format.
 *
 * Data layout. Weights of 16 outputs (a strip) and 1024 input elements (a chunk) are unpacked
 * once into a panel in L1: every format becomes unsigned codes u with w = a * u + c per group of
 * G elements (G = 32; 16 for Q6_K, whose scales cover 16):
 *     codes [G-group][G/4][16 outputs][4 bytes]   one zmm per 4 elements x 16 outputs
 *     a, c  [G-group][16 outputs] f32              Q4_0: a = d, c = -8d; Q8_0: u = q + 128,
 *                                                 c = -128d; Q4_1/K/MLX: scale and min/bias
 * Register tile: 16 outputs x 8 rows. For each 4 elements, one zmm of codes meets each row's 4
 * activation bytes broadcast (vpdpbusd with {1to16}), so an int32 lane holds one output's dot
 * over the group with no horizontal work. Per row and group: G/4 vpdpbusd, then
 *     acc += cvt(isum) * (a * dx) + c * (dx * S)       (S = the activation block sum)
 * which is 4 float ops and a broadcast next to 8 vpdpbusd.
 *
 * Napkin math (Zen 4 core, ~3.7 GHz): a zmm vpdpbusd is 64 MACs and issues about once per cycle,
 * so the core's int8 peak is ~64 MAC/cycle (~470 GOP/s counting a MAC as 2 ops). The inner loop
 * is 8 vpdpbusd in ~13 vector ops, i.e. at best ~60% of peak (~280 GOP/s); Q6_K (G = 16) ~45%.
 * The panel costs ~2 scalar ops per weight element and is amortised over every row of the call,
 * so it is ~5% at 512 rows; below 8 rows the dot kernels (no panel) are used instead. Each weight
 * byte is read from memory once per call; activations (1.25 B per element per row) come from L2
 * once per strip.
 *
 * Two-term activations (hx_matmul2_avx512vnni, the backend's default prefill): each panel is run
 * against the int8 rows and then against their int8 residuals, so the unpacking is shared and the
 * second term costs only the vpdpbusd work (~1.6x the single-term time rather than 2x). The
 * result carries ~14-bit activations: on the starter model, teacher-forced top-1 agreement with
 * the float64 reference equals that of exact f32 (single term: 96.5%), while a 400-token
 * hx-logits run (1 thread, CPU time) took 5.4 s against 5.6 s with the f32 FMA kernels and 4.9 s
 * single-term; in isolation the f32 FMA tile does ~62 GOP/s against ~230 for one VNNI term. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "kernels_int.h"

enum {
    NO = 16,   /* outputs per strip: one zmm of int32 lanes */
    RT = 8,    /* rows per register tile */
    KC = 1024, /* elements per panel chunk: a multiple of 256 (K-quants) and 128 (MLX groups) */
};

typedef struct {
    _Alignas(64) uint8_t codes[KC * NO]; /* [KC/G][G/4][NO][4] */
    _Alignas(64) float a[KC / 16][NO];   /* [KC/G][NO] */
    _Alignas(64) float c[KC / 16][NO];
} panel;

/* ---- unpacking one weight row chunk into codes and per-group (a, c) ---- */

/* Elements [e0, e0+ne) of weight row o as codes u[ne] and per-group a[ne/G], c[ne/G], where G
 * is 16 for Q6_K and 32 otherwise. Plain C: it runs once per call per weight element. */
static void unpack_row(const hx_wmat *w, int64_t o, int64_t e0, int ne, uint8_t *u, float *a,
                       float *c)
{
    const void *row = kn_wrow(w, o);
    switch (w->dtype) {
    case HX_DT_Q4_0:
    case HX_DT_Q4_1: {
        const int q41 = w->dtype == HX_DT_Q4_1;
        const size_t bb = q41 ? sizeof(hx_block_q4_1) : sizeof(hx_block_q4_0);
        for (int b = 0; b < ne / 32; b++) {
            const uint8_t *blk = (const uint8_t *)row + (size_t)(e0 / 32 + b) * bb;
            uint16_t d, m = 0;
            memcpy(&d, blk, 2);
            if (q41) memcpy(&m, blk + 2, 2);
            const uint8_t *qs = blk + (q41 ? 4 : 2);
            for (int j = 0; j < 16; j++) {
                u[32 * b + j]      = qs[j] & 0x0F;
                u[32 * b + j + 16] = qs[j] >> 4;
            }
            a[b] = hx_f16_to_f32(d);
            c[b] = q41 ? hx_f16_to_f32(m) : -8.0f * a[b];
        }
        return;
    }
    case HX_DT_Q8_0: {
        const hx_block_q8_0 *blk = (const hx_block_q8_0 *)row + e0 / 32;
        for (int b = 0; b < ne / 32; b++) {
            for (int j = 0; j < 32; j++) u[32 * b + j] = (uint8_t)(blk[b].qs[j] ^ 0x80);
            a[b] = hx_f16_to_f32(blk[b].d);
            c[b] = -128.0f * a[b];
        }
        return;
    }
    case HX_DT_Q4_K:
    case HX_DT_Q5_K: {
        const int q5 = w->dtype == HX_DT_Q5_K;
        for (int sb = 0; sb < ne / HX_K_N; sb++) {
            const uint8_t *scales, *qs, *qh = NULL;
            uint16_t d16, dmin16;
            if (q5) {
                const hx_block_q5_k *blk = (const hx_block_q5_k *)row + e0 / HX_K_N + sb;
                scales = blk->scales, qs = blk->qs, qh = blk->qh, d16 = blk->d, dmin16 = blk->dmin;
            } else {
                const hx_block_q4_k *blk = (const hx_block_q4_k *)row + e0 / HX_K_N + sb;
                scales = blk->scales, qs = blk->qs, d16 = blk->d, dmin16 = blk->dmin;
            }
            uint8_t sc[8], m[8];
            kn_k_scales(scales, sc, m);
            const float d = hx_f16_to_f32(d16), dmin = hx_f16_to_f32(dmin16);
            for (int j = 0; j < 8; j++) {
                uint8_t *uj = u + HX_K_N * sb + 32 * j;
                const uint8_t *qc = qs + 32 * (j / 2);
                const int shift = 4 * (j % 2);
                for (int l = 0; l < 32; l++) {
                    int v = (qc[l] >> shift) & 0x0F;
                    if (qh) v |= ((qh[l] >> j) & 1) << 4;
                    uj[l] = (uint8_t)v;
                }
                a[8 * sb + j] = d * (float)sc[j];
                c[8 * sb + j] = -(dmin * (float)m[j]);
            }
        }
        return;
    }
    case HX_DT_Q6_K: {
        for (int sb = 0; sb < ne / HX_K_N; sb++) {
            const hx_block_q6_k *blk = (const hx_block_q6_k *)row + e0 / HX_K_N + sb;
            const float d = hx_f16_to_f32(blk->d);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = blk->ql + 64 * h, *qh = blk->qh + 32 * h;
                for (int t = 0; t < 4; t++)
                    for (int l = 0; l < 32; l++) {
                        const uint8_t lq = ql[l + 32 * (t % 2)];
                        const int lo = t < 2 ? (lq & 0x0F) : (lq >> 4);
                        u[HX_K_N * sb + 128 * h + 32 * t + l] =
                            (uint8_t)(lo | (((qh[l] >> (2 * t)) & 3) << 4));
                    }
            }
            for (int k = 0; k < 16; k++) {
                a[16 * sb + k] = d * (float)blk->scales[k];
                c[16 * sb + k] = -32.0f * a[16 * sb + k];
            }
        }
        return;
    }
    case HX_DT_MLX4:
    case HX_DT_MLX8: {
        const uint8_t *wq = row;
        const int64_t gs = w->group_size, n_groups = w->n_in / gs;
        for (int i = 0; i < ne; i++) {
            const int64_t e = e0 + i;
            u[i] = w->dtype == HX_DT_MLX8 ? wq[e] : (uint8_t)((wq[e / 2] >> (4 * (e % 2))) & 0x0F);
        }
        for (int b = 0; b < ne / 32; b++) {
            const int64_t g = o * n_groups + (e0 + 32 * b) / gs;
            a[b] = kn_mlx_sb(w->scales, w->sb_dtype, g);
            c[b] = kn_mlx_sb(w->biases, w->sb_dtype, g);
        }
        return;
    }
    default:
        HX_ASSERT(!"unpack_row: not a quantized format");
    }
}

/* Builds the panel of outputs [os, os+nov) (the rest zero) for elements [e0, e0+ne). */
static void build_panel(panel *P, const hx_wmat *w, int64_t os, int nov, int64_t e0, int ne, int G)
{
    uint8_t u[KC];
    float a[KC / 16], c[KC / 16];
    for (int o = 0; o < NO; o++) {
        if (o < nov) {
            unpack_row(w, os + o, e0, ne, u, a, c);
        } else {
            memset(u, 0, (size_t)ne);
            memset(a, 0, sizeof a);
            memset(c, 0, sizeof c);
        }
        for (int g = 0; g < ne / G; g++) {
            P->a[g][o] = a[g];
            P->c[g][o] = c[g];
            for (int k = 0; k < G / 4; k++)
                memcpy(P->codes + ((g * (G / 4) + k) * NO + o) * 4, u + g * G + 4 * k, 4);
        }
    }
}

/* ---- the register tile ---- */

/* Rows [r, r+nr) (nr <= RT) against the panel: adds (or, if first, stores) 16 outputs per row
 * into out[row * ld + os ...], the first nov of them. Inlined with constant nr and G so the
 * accumulators live in registers. */
static inline __attribute__((always_inline)) void
tile(const panel *P, const hx_act *x, int64_t r, int nr, int64_t e0, int ne, int G, float *out,
     int64_t ld, int64_t os, int nov, int first)
{
    const int8_t *xq[RT];
    const float *xd[RT];
    const int16_t *xs[RT];
    __m512 acc[RT];
    for (int i = 0; i < nr; i++) {
        xq[i] = kn_xqs(x, r + i) + e0;
        xd[i] = kn_xd(x, r + i) + e0 / 32;
        xs[i] = kn_xbsum(x, r + i) + e0 / 16;
        acc[i] = _mm512_setzero_ps();
    }
    for (int g = 0; g < ne / G; g++) {
        __m512i isum[RT];
        for (int i = 0; i < nr; i++) isum[i] = _mm512_setzero_si512();
        for (int k = 0; k < G / 4; k++) {
            const __m512i wk = _mm512_load_si512(P->codes + (g * (G / 4) + k) * NO * 4);
            for (int i = 0; i < nr; i++) {
                int32_t x4;
                memcpy(&x4, xq[i] + g * G + 4 * k, 4);
                isum[i] = _mm512_dpbusd_epi32(isum[i], wk, _mm512_set1_epi32(x4));
            }
        }
        const __m512 va = _mm512_load_ps(P->a[g]), vc = _mm512_load_ps(P->c[g]);
        for (int i = 0; i < nr; i++) {
            const float dx = xd[i][g * G / 32];
            const int s = G == 32 ? xs[i][2 * g] + xs[i][2 * g + 1] : xs[i][g];
            const __m512 f = _mm512_mul_ps(va, _mm512_set1_ps(dx));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), f, acc[i]);
            acc[i] = _mm512_fmadd_ps(vc, _mm512_set1_ps(dx * (float)s), acc[i]);
        }
    }
    const __mmask16 k = (__mmask16)((1u << nov) - 1);
    for (int i = 0; i < nr; i++) {
        float *y = out + (r + i) * ld + os;
        const __m512 v = first ? acc[i] : _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(k, y));
        _mm512_mask_storeu_ps(y, k, v);
    }
}

/* One strip x chunk over all rows, with G fixed at compile time. */
static inline __attribute__((always_inline)) void
strip_rows(const panel *P, const hx_act *x, int64_t r0, int64_t r1, int64_t e0, int ne, int G,
           float *out, int64_t ld, int64_t os, int nov, int first)
{
    int64_t r = r0;
    for (; r + RT <= r1; r += RT) tile(P, x, r, RT, e0, ne, G, out, ld, os, nov, first);
    for (; r < r1; r++) tile(P, x, r, 1, e0, ne, G, out, ld, os, nov, first);
}

static hx_dot_fn dot_for(hx_dtype dt)
{
    switch (dt) {
    case HX_DT_Q4_0: return hx_dot_q4_0_avx512;
    case HX_DT_Q4_1: return hx_dot_q4_1_avx512;
    case HX_DT_Q8_0: return hx_dot_q8_0_avx512;
    case HX_DT_Q4_K: return hx_dot_q4_k_avx512;
    case HX_DT_Q5_K: return hx_dot_q5_k_avx512;
    case HX_DT_Q6_K: return hx_dot_q6_k_avx512;
    case HX_DT_MLX4: return hx_dot_mlx4_avx512;
    case HX_DT_MLX8: return hx_dot_mlx8_avx512;
    case HX_DT_F16:  return hx_dot_f16_avx512;
    case HX_DT_BF16: return hx_dot_bf16_avx512;
    default:         return hx_dot_f32_avx512;
    }
}

/* The tiled matmul over one or two activation terms: with x2, every panel is run against x
 * then x2 and the results add up (the panel, the costly unpacking, is built once). */
static void matmul_terms(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                         const hx_act *x2, int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    static _Thread_local panel P; /* 24 KiB: too big for a pool thread's stack to be polite */
    const hx_dtype dt = w->dtype;
    const int G = dt == HX_DT_Q6_K ? 16 : 32;
    for (int64_t os = o0; os < o1; os += NO) {
        const int nov = o1 - os < NO ? (int)(o1 - os) : NO;
        for (int64_t e0 = 0; e0 < w->n_in; e0 += KC) {
            const int ne = w->n_in - e0 < KC ? (int)(w->n_in - e0) : KC;
            build_panel(&P, w, os, nov, e0, ne, G);
            if (G == 16) strip_rows(&P, x, r0, r1, e0, ne, 16, out, ld_out, os, nov, e0 == 0);
            else         strip_rows(&P, x, r0, r1, e0, ne, 32, out, ld_out, os, nov, e0 == 0);
            if (!x2) continue;
            if (G == 16) strip_rows(&P, x2, r0, r1, e0, ne, 16, out, ld_out, os, nov, 0);
            else         strip_rows(&P, x2, r0, r1, e0, ne, 32, out, ld_out, os, nov, 0);
        }
    }
}

void hx_matmul_avx512vnni(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                          int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    const hx_dtype dt = w->dtype;
    if (r1 - r0 < RT || dt == HX_DT_F32 || dt == HX_DT_F16 || dt == HX_DT_BF16) {
        hx_matmul_by_dot(dot_for(dt), w, o0, o1, x, r0, r1, out, ld_out);
        return;
    }
    matmul_terms(w, o0, o1, x, NULL, r0, r1, out, ld_out);
}

void hx_matmul2_avx512vnni(const hx_wmat *w, int64_t o0, int64_t o1, const hx_act *x,
                           const hx_act *x2, int64_t r0, int64_t r1, float *out, int64_t ld_out)
{
    HX_ASSERT(w->dtype != HX_DT_F32 && w->dtype != HX_DT_F16 && w->dtype != HX_DT_BF16);
    matmul_terms(w, o0, o1, x, x2, r0, r1, out, ld_out);
}
#endif
