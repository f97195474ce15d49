/* packed.c - the 16-row interleaved layout (packed.h): geometry, repacking, the activation sums
 * and the scalar matmul that defines what every packed kernel computes. The reference reads
 * the packed bytes element by element, as written in packed.h, and performs the float
 * operations of the formulas there one at a time (fmaf where they say fma), so an optimized
 * kernel that does the same operations in the same order gives the same bits. */
#include "packed.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/err.h"
#include "kernels_int.h"

bool hx_pack_supported(hx_dtype dt, int64_t n_in)
{
    if (n_in <= 0) return false;
    if (dt == HX_DT_Q4_0 || dt == HX_DT_Q4_1 || dt == HX_DT_Q8_0) return n_in % 32 == 0;
    if (dt == HX_DT_Q4_K || dt == HX_DT_Q6_K) return n_in % HX_K_N == 0;
    return false;
}

size_t hx_pack_layout(hx_packed *p, const hx_wmat *w)
{
    HX_ASSERT(hx_pack_supported(w->dtype, w->n_in));
    const bool kq = w->dtype == HX_DT_Q4_K || w->dtype == HX_DT_Q6_K;
    p->dtype = w->dtype;
    p->n_in = w->n_in;
    p->n_out = w->n_out;
    p->n_groups = (w->n_out + HX_PACK_ROWS - 1) / HX_PACK_ROWS;
    p->col_n = kq ? HX_K_N : 32;
    if (kq) {
        p->sc_bytes = 0;
        p->col_bytes = w->dtype == HX_DT_Q4_K ? HX_PACK_Q4K_COL : HX_PACK_Q6K_COL;
    } else {
        const size_t sc_entry = w->dtype == HX_DT_Q4_1 ? 64 : 32;
        p->sc_bytes = ((size_t)(w->n_in / 32) * sc_entry + 63) & ~(size_t)63;
        p->col_bytes = w->dtype == HX_DT_Q8_0 ? 512 : 256;
    }
    p->group_bytes = p->sc_bytes + (size_t)(w->n_in / p->col_n) * p->col_bytes;
    p->data = NULL;
    return (size_t)p->n_groups * p->group_bytes;
}

/* The scale d, the min m (Q4_1) and the 16 (4-bit) or 32 (Q8_0) code bytes of block b of row o;
 * a row past n_out is all zero (d = 0 makes it contribute nothing). */
static void src_block(const hx_wmat *w, int64_t o, int64_t b, uint16_t *d, uint16_t *m,
                      uint8_t qs[32])
{
    *d = *m = 0;
    memset(qs, 0, 32);
    if (o >= w->n_out) return;
    const unsigned char *row = kn_wrow(w, o);
    if (w->dtype == HX_DT_Q4_0) {
        const hx_block_q4_0 *q = (const hx_block_q4_0 *)(const void *)row + b;
        memcpy(d, &q->d, 2);
        memcpy(qs, q->qs, 16);
    } else if (w->dtype == HX_DT_Q4_1) {
        const hx_block_q4_1 *q = (const hx_block_q4_1 *)(const void *)row + b;
        memcpy(d, &q->d, 2);
        memcpy(m, &q->m, 2);
        memcpy(qs, q->qs, 16);
    } else {
        const hx_block_q8_0 *q = (const hx_block_q8_0 *)(const void *)row + b;
        memcpy(d, &q->d, 2);
        for (int i = 0; i < 32; i++) qs[i] = (uint8_t)((uint8_t)q->qs[i] ^ 0x80u);
    }
}

/* Block column b (a super-block) of lane r of a K-quant group: its scales and codes, copied from
 * row o of w, or left zero (the caller cleared the column) for a padding row. */
static void pack_k_lane(const hx_wmat *w, int64_t o, int64_t b, int r, unsigned char *col)
{
    if (o >= w->n_out) return;
    const unsigned char *row = kn_wrow(w, o);
    if (w->dtype == HX_DT_Q4_K) {
        const hx_block_q4_k *q = (const hx_block_q4_k *)(const void *)row + b;
        uint8_t sc[8], m[8];
        kn_k_scales(q->scales, sc, m);
        memcpy(col + 2 * r, &q->d, 2);
        memcpy(col + HX_PACK_Q4K_DMIN + 2 * r, &q->dmin, 2);
        for (int j = 0; j < 8; j++) {
            col[HX_PACK_Q4K_SC + 16 * j + r] = sc[j];
            col[HX_PACK_Q4K_M + 16 * j + r] = m[j];
        }
        for (int k = 0; k < 32; k++)
            memcpy(col + HX_PACK_K_CODES + 64 * k + 4 * r, q->qs + 4 * k, 4);
    } else {
        const hx_block_q6_k *q = (const hx_block_q6_k *)(const void *)row + b;
        memcpy(col + 2 * r, &q->d, 2);
        for (int j = 0; j < 16; j++) memcpy(col + HX_PACK_Q6K_SC + 16 * j + r, &q->scales[j], 1);
        for (int k = 0; k < 32; k++)
            memcpy(col + HX_PACK_K_CODES + 64 * k + 4 * r, q->ql + 4 * k, 4);
        for (int k = 0; k < 16; k++)
            memcpy(col + HX_PACK_Q6K_QH + 64 * k + 4 * r, q->qh + 4 * k, 4);
    }
}


void hx_pack_groups(const hx_packed *p, const hx_wmat *w, int64_t g0, int64_t g1)
{
    const int64_t nb = p->n_in / p->col_n;
    const bool kq = p->col_n == HX_K_N;
    const int chunks = (int)(p->col_bytes / 64);
#if defined(__x86_64__)
    const bool avx2 = (hx_cpu_isa() & HX_ISA_AVX2) != 0;
#endif
    for (int64_t g = g0; g < g1; g++) {
        unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        unsigned char *codes = grp + p->sc_bytes;
        memset(grp, 0, p->sc_bytes);
        for (int64_t b = 0; b < nb; b++) {
            unsigned char *cb = codes + (size_t)b * p->col_bytes;
            if (kq) {
                memset(cb, 0, p->col_bytes); /* padding rows and Q6_K's 32 spare bytes */
                for (int r = 0; r < HX_PACK_ROWS; r++)
                    pack_k_lane(w, g * HX_PACK_ROWS + r, b, r, cb);
                continue;
            }
            unsigned char *sc = grp + (size_t)b * (p->dtype == HX_DT_Q4_1 ? 64 : 32);
#if defined(__x86_64__)
            if (avx2 && (g + 1) * HX_PACK_ROWS <= w->n_out) {
                hx_pack_column_avx2(p, w, g * HX_PACK_ROWS, b, sc, cb);
                continue;
            }
#endif
            for (int r = 0; r < HX_PACK_ROWS; r++) {
                uint16_t d, m;
                uint8_t qs[32];
                src_block(w, g * HX_PACK_ROWS + r, b, &d, &m, qs);
                memcpy(sc + 2 * r, &d, 2);
                if (p->dtype == HX_DT_Q4_1) memcpy(sc + 32 + 2 * r, &m, 2);
                for (int k = 0; k < chunks; k++) memcpy(cb + 64 * k + 4 * r, qs + 4 * k, 4);
            }
        }
    }
}

void hx_packed_act_sums(const hx_act *x, const hx_act *x2, int64_t r0, int64_t r1, float *s)
{
    const int64_t nb = x->n / HX_ACT_BLOCK;
    for (int64_t r = r0; r < r1; r++) {
        const float *d1 = kn_xd(x, r);
        const int16_t *s1 = kn_xbsum(x, r);
        for (int64_t b = 0; b < nb; b++) {
            float v = d1[b] * (float)(s1[2 * b] + s1[2 * b + 1]);
            if (x2) {
                const float *d2 = kn_xd(x2, r);
                const int16_t *s2 = kn_xbsum(x2, r);
                v += d2[b] * (float)(s2[2 * b] + s2[2 * b + 1]);
            }
            s[r * nb + b] = v;
        }
    }
}

/* sum over block b of row r's codes u (row lane of the group's block column cb) times q. */
static int32_t code_dot(const hx_packed *p, const unsigned char *cb, int lane, const int8_t *q)
{
    int32_t acc = 0;
    if (p->dtype == HX_DT_Q8_0) {
        for (int k = 0; k < 8; k++)
            for (int j = 0; j < 4; j++) acc += cb[64 * k + 4 * lane + j] * q[4 * k + j];
        return acc;
    }
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) {
            const int u = cb[64 * k + 4 * lane + j];
            acc += (u & 15) * q[4 * k + j] + (u >> 4) * q[16 + 4 * k + j];
        }
    return acc;
}

/* Row o = lane of the group against activation row r, Q4_0/Q4_1/Q8_0 (packed.h). */
static float dot_q32(const hx_packed *p, const unsigned char *grp, int lane, const hx_act *x,
                     const hx_act *x2, const float *s, int64_t r)
{
    const int64_t nb = p->n_in / 32;
    const float k = p->dtype == HX_DT_Q4_0 ? -8.0f : p->dtype == HX_DT_Q8_0 ? -128.0f : 0.0f;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *sc = grp + (size_t)b * (p->dtype == HX_DT_Q4_1 ? 64 : 32);
        const unsigned char *cb = grp + p->sc_bytes + (size_t)b * p->col_bytes;
        uint16_t dh, mh = 0;
        memcpy(&dh, sc + 2 * lane, 2);
        if (p->dtype == HX_DT_Q4_1) memcpy(&mh, sc + 32 + 2 * lane, 2);
        const float sb = s[r * nb + b];
        int32_t si = code_dot(p, cb, lane, kn_xqs(x, r) + 32 * b);
        if (x2) si = si * 256 + code_dot(p, cb, lane, kn_xqs(x2, r) + 32 * b);
        const float dx = x2 ? kn_xd(x2, r)[b] : kn_xd(x, r)[b];
        const float v = p->dtype == HX_DT_Q4_1 ? (float)si * dx : fmaf((float)si, dx, k * sb);
        acc = fmaf(v, hx_f16_to_f32(dh), acc);
        if (p->dtype == HX_DT_Q4_1) acc = fmaf(sb, hx_f16_to_f32(mh), acc);
    }
    return acc;
}

/* sum(u q) over the 32 elements of Q4_K sub-block j of a column (lane's codes), q the
 * activations of the sub-block. */
static int32_t q4k_code_dot(const unsigned char *col, int lane, int j, const int8_t *q)
{
    int32_t acc = 0;
    for (int l = 0; l < 32; l++) {
        const int u = col[HX_PACK_K_CODES + 512 * (j / 2) + 64 * (l / 4) + 4 * lane + l % 4];
        acc += (j % 2 ? u >> 4 : u & 15) * q[l];
    }
    return acc;
}

/* sum(u q) over the 16 elements of Q6_K sub-block j of a column, u the 6-bit codes. */
static int32_t q6k_code_dot(const unsigned char *col, int lane, int j, const int8_t *q)
{
    int32_t acc = 0;
    for (int i = 0; i < 16; i++) {
        const int e = 16 * j + i, h = e / 128, t = (e % 128) / 32, l = e % 32;
        const int bl = 64 * h + 32 * (t & 1) + l, bh = 32 * h + l;
        const int ql = col[HX_PACK_K_CODES + 64 * (bl / 4) + 4 * lane + bl % 4];
        const int qh = col[HX_PACK_Q6K_QH + 64 * (bh / 4) + 4 * lane + bh % 4];
        const int u = (t < 2 ? ql & 15 : ql >> 4) | ((qh >> (2 * t)) & 3) << 4;
        acc += u * q[i];
    }
    return acc;
}

/* Row o = lane of the group against activation row r, Q4_K/Q6_K: the formulas of packed.h. */
static float dot_k(const hx_packed *p, const unsigned char *grp, int lane, const hx_act *x,
                   const hx_act *x2, const float *s, int64_t r)
{
    const int64_t nb = p->n_in / 32, n_col = p->n_in / HX_K_N;
    const float *dx = x2 ? kn_xd(x2, r) : kn_xd(x, r);
    const int8_t *q1 = kn_xqs(x, r), *q2 = x2 ? kn_xqs(x2, r) : NULL;
    const int16_t *bs1 = kn_xbsum(x, r), *bs2 = x2 ? kn_xbsum(x2, r) : NULL;
    float acc = 0.0f;
    for (int64_t c = 0; c < n_col; c++) {
        const unsigned char *col = grp + (size_t)c * p->col_bytes;
        uint16_t dh;
        memcpy(&dh, col + 2 * lane, 2);
        float fs = 0.0f;
        if (p->dtype == HX_DT_Q4_K) {
            float fm = 0.0f;
            for (int j = 0; j < 8; j++) {
                const int64_t b = 8 * c + j, e = 32 * b;
                int32_t si = q4k_code_dot(col, lane, j, q1 + e);
                if (x2) si = si * 256 + q4k_code_dot(col, lane, j, q2 + e);
                const float t = (float)col[HX_PACK_Q4K_SC + 16 * j + lane] * dx[b];
                fs = fmaf((float)si, t, fs);
                fm = fmaf((float)col[HX_PACK_Q4K_M + 16 * j + lane], s[r * nb + b], fm);
            }
            uint16_t mh;
            memcpy(&mh, col + HX_PACK_Q4K_DMIN + 2 * lane, 2);
            acc = fmaf(hx_f16_to_f32(dh), fs, acc);
            acc = fmaf(-hx_f16_to_f32(mh), fm, acc);
        } else {
            for (int j = 0; j < 16; j++) {
                const int64_t hs = 16 * c + j, e = 16 * hs; /* hs: the sub-block's bsum */
                int32_t ai = q6k_code_dot(col, lane, j, q1 + e) - 32 * bs1[hs];
                if (x2) ai = ai * 256 + (q6k_code_dot(col, lane, j, q2 + e) - 32 * bs2[hs]);
                int8_t sc;
                memcpy(&sc, col + HX_PACK_Q6K_SC + 16 * j + lane, 1);
                const float t = (float)sc * dx[hs / 2];
                fs = fmaf((float)ai, t, fs);
            }
            acc = fmaf(hx_f16_to_f32(dh), fs, acc);
        }
    }
    return acc;
}

void hx_pmatmul_ref(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                    const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                    int64_t ld_out)
{
    const bool kq = p->col_n == HX_K_N;
    for (int64_t g = g0; g < g1; g++) {
        const unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        for (int lane = 0; lane < HX_PACK_ROWS; lane++) {
            const int64_t o = g * HX_PACK_ROWS + lane;
            if (o >= p->n_out) break;
            for (int64_t r = r0; r < r1; r++)
                out[r * ld_out + o] = kq ? dot_k(p, grp, lane, x, x2, s, r)
                                         : dot_q32(p, grp, lane, x, x2, s, r);
        }
    }
}

hx_pmatmul_fn hx_pmatmul_select(unsigned isa)
{
#if defined(__x86_64__)
    const unsigned vnni = HX_ISA_AVX512 | HX_ISA_AVX512VNNI;
    if ((isa & vnni) == vnni) return hx_pmatmul_avx512vnni;
    if (isa & HX_ISA_AVX2) return hx_pmatmul_avx2;
#endif
    (void)isa;
    return NULL;
}
