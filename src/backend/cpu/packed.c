/* packed.c - the 16-row interleaved layout (packed.h): geometry, repacking, the activation sums
 * and the scalar matmul that defines what every packed kernel computes. */
#include "packed.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/err.h"
#include "kernels_int.h"

bool hx_pack_supported(hx_dtype dt, int64_t n_in)
{
    return (dt == HX_DT_Q4_0 || dt == HX_DT_Q4_1 || dt == HX_DT_Q8_0) && n_in > 0 &&
           n_in % 32 == 0;
}

size_t hx_pack_layout(hx_packed *p, const hx_wmat *w)
{
    HX_ASSERT(hx_pack_supported(w->dtype, w->n_in));
    const int64_t nb = w->n_in / 32;
    const size_t sc_entry = w->dtype == HX_DT_Q4_1 ? 64 : 32;
    p->dtype = w->dtype;
    p->n_in = w->n_in;
    p->n_out = w->n_out;
    p->n_groups = (w->n_out + HX_PACK_ROWS - 1) / HX_PACK_ROWS;
    p->sc_bytes = ((size_t)nb * sc_entry + 63) & ~(size_t)63;
    p->code_bytes = w->dtype == HX_DT_Q8_0 ? 512 : 256;
    p->group_bytes = p->sc_bytes + (size_t)nb * p->code_bytes;
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

void hx_pack_groups(const hx_packed *p, const hx_wmat *w, int64_t g0, int64_t g1)
{
    const int64_t nb = p->n_in / 32;
    const int chunks = (int)(p->code_bytes / 64);
    for (int64_t g = g0; g < g1; g++) {
        unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        unsigned char *codes = grp + p->sc_bytes;
        memset(grp, 0, p->sc_bytes);
        for (int64_t b = 0; b < nb; b++) {
            unsigned char *sc = grp + (size_t)b * (p->dtype == HX_DT_Q4_1 ? 64 : 32);
            unsigned char *cb = codes + (size_t)b * p->code_bytes;
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

void hx_pmatmul_ref(const hx_packed *p, int64_t g0, int64_t g1, const hx_act *x,
                    const hx_act *x2, const float *s, int64_t r0, int64_t r1, float *out,
                    int64_t ld_out)
{
    const int64_t nb = p->n_in / 32;
    const float k = p->dtype == HX_DT_Q4_0 ? -8.0f : p->dtype == HX_DT_Q8_0 ? -128.0f : 0.0f;
    for (int64_t g = g0; g < g1; g++) {
        const unsigned char *grp = p->data + (size_t)g * p->group_bytes;
        for (int lane = 0; lane < HX_PACK_ROWS; lane++) {
            const int64_t o = g * HX_PACK_ROWS + lane;
            if (o >= p->n_out) break;
            for (int64_t r = r0; r < r1; r++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const unsigned char *sc = grp + (size_t)b * (p->dtype == HX_DT_Q4_1 ? 64 : 32);
                    const unsigned char *cb = grp + p->sc_bytes + (size_t)b * p->code_bytes;
                    uint16_t dh, mh = 0;
                    memcpy(&dh, sc + 2 * lane, 2);
                    if (p->dtype == HX_DT_Q4_1) memcpy(&mh, sc + 32 + 2 * lane, 2);
                    const float sb = s[r * nb + b];
                    int32_t si = code_dot(p, cb, lane, kn_xqs(x, r) + 32 * b);
                    if (x2) si = si * 256 + code_dot(p, cb, lane, kn_xqs(x2, r) + 32 * b);
                    const float dx = x2 ? kn_xd(x2, r)[b] : kn_xd(x, r)[b];
                    const float v = p->dtype == HX_DT_Q4_1 ? (float)si * dx
                                                           : fmaf((float)si, dx, k * sb);
                    acc = fmaf(v, hx_f16_to_f32(dh), acc);
                    if (p->dtype == HX_DT_Q4_1) acc = fmaf(sb, hx_f16_to_f32(mh), acc);
                }
                out[r * ld_out + o] = acc;
            }
        }
    }
}

hx_pmatmul_fn hx_pmatmul_select(unsigned isa)
{
#if defined(__x86_64__)
    const unsigned vnni = HX_ISA_AVX512 | HX_ISA_AVX512VNNI;
    if ((isa & vnni) == vnni) return hx_pmatmul_avx512vnni;
#endif
    (void)isa;
    return NULL;
}
