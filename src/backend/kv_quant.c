/* kv_quant.c - reference quantize/dequantize of one KV row (kv_quant.h), the definition of the
 * Q8 and Q4 cache formats.
 *
 * Plain C and used as is by the cache write: a decode step writes n_kv_head * d_head * 2 values
 * per layer (384 for SmolLM2-135M, ~1 us over 30 layers at ~2 ns per element), noise next to
 * the step's matmuls, so it has no SIMD variant. */
#include "backend/kv_quant.h"

#include "base/err.h"
#include "base/f16.h"

/* The next f16 below h (h not NaN, not -inf). */
static uint16_t f16_next_down(uint16_t h)
{
    if (h == 0x0000) return 0x8001;            /* +0 -> the smallest negative subnormal */
    return (h & 0x8000) ? (uint16_t)(h + 1)    /* negative: larger magnitude */
                        : (uint16_t)(h - 1);   /* positive: smaller magnitude */
}

hx_status hx_kv_dtype_check(hx_kv_dtype dt, int32_t d_head, hx_err *err)
{
    static const char *const names[HX_KV_DTYPE_COUNT] = {"f16", "q8", "q4"};
    if ((unsigned)dt >= HX_KV_DTYPE_COUNT)
        return hx_err_set(err, HX_E_INVALID, "KV cache dtype %d is unknown", (int)dt);
    if (dt != HX_KV_F16 && (d_head <= 0 || d_head % HX_KVQ_GROUP != 0))
        return hx_err_set(err, HX_E_INVALID,
                          "a %s KV cache needs d_head a multiple of %d (groups of %d share a "
                          "scale); this model has d_head %d: use f16",
                          names[dt], HX_KVQ_GROUP, HX_KVQ_GROUP, d_head);
    return HX_OK;
}

void hx_kvq_quantize_row(hx_kv_dtype dt, const float *x, int32_t d, uint8_t *tile, int32_t bt,
                         int32_t off)
{
    HX_ASSERT((dt == HX_KV_Q8 || dt == HX_KV_Q4) && d % HX_KVQ_GROUP == 0 && off < bt);
    const int32_t ng = d / HX_KVQ_GROUP, rb = hx_kvq_row_bytes(dt, d);
    const float qmax = dt == HX_KV_Q8 ? 255.0f : 15.0f;
    uint8_t *codes = tile + (size_t)off * (size_t)rb;
    uint16_t *scales = (uint16_t *)(void *)(tile + (size_t)bt * (size_t)rb);
    uint16_t *mins = scales + (size_t)ng * (size_t)bt;
    for (int32_t g = 0; g < ng; g++) {
        const float *xg = x + g * HX_KVQ_GROUP;
        float mn = xg[0], mx = xg[0];
        for (int32_t i = 1; i < HX_KVQ_GROUP; i++) {
            mn = xg[i] < mn ? xg[i] : mn;
            mx = xg[i] > mx ? xg[i] : mx;
        }
        /* m: mn rounded down to f16, s: the step from m to mx rounded up, so that m + s * [0,
         * qmax] covers the group and no element is clamped: the error stays under s/2 even
         * when f16 cannot hold mn closely (a narrow group far from zero). */
        uint16_t mh = hx_f32_to_f16(mn);
        if (hx_f16_to_f32(mh) > mn) mh = f16_next_down(mh);
        const float m = hx_f16_to_f32(mh);
        uint16_t sh = hx_f32_to_f16((mx - m) / qmax);
        if (hx_f16_to_f32(sh) * qmax < mx - m) sh = (uint16_t)(sh + 1); /* s >= 0: next up */
        const float s = hx_f16_to_f32(sh);
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        uint8_t c[HX_KVQ_GROUP];
        for (int32_t i = 0; i < HX_KVQ_GROUP; i++) {
            float v = (xg[i] - m) * inv;
            if (!(v >= 0.0f)) v = 0.0f; /* also NaN: no float-to-int conversion of a NaN */
            if (v > qmax) v = qmax;
            c[i] = (uint8_t)(v + 0.5f);
        }
        if (dt == HX_KV_Q8) {
            for (int32_t i = 0; i < HX_KVQ_GROUP; i++) codes[g * HX_KVQ_GROUP + i] = c[i];
        } else {
            for (int32_t i = 0; i < HX_KVQ_GROUP / 2; i++)
                codes[g * HX_KVQ_GROUP / 2 + i] = (uint8_t)(c[i] | (c[i + 16] << 4));
        }
        scales[(size_t)g * (size_t)bt + (size_t)off] = sh;
        mins[(size_t)g * (size_t)bt + (size_t)off] = mh;
    }
}

void hx_kvq_dequantize_row(hx_kv_dtype dt, const uint8_t *tile, int32_t bt, int32_t off,
                           int32_t d, float *y)
{
    HX_ASSERT((dt == HX_KV_Q8 || dt == HX_KV_Q4) && d % HX_KVQ_GROUP == 0 && off < bt);
    const int32_t ng = d / HX_KVQ_GROUP, rb = hx_kvq_row_bytes(dt, d);
    const uint8_t *codes = tile + (size_t)off * (size_t)rb;
    const uint16_t *scales = hx_kvq_scales(tile, dt, bt, d);
    const uint16_t *mins = scales + (size_t)ng * (size_t)bt;
    for (int32_t g = 0; g < ng; g++) {
        const float s = hx_f16_to_f32(scales[(size_t)g * (size_t)bt + (size_t)off]);
        const float m = hx_f16_to_f32(mins[(size_t)g * (size_t)bt + (size_t)off]);
        float *yg = y + g * HX_KVQ_GROUP;
        if (dt == HX_KV_Q8) {
            for (int32_t i = 0; i < HX_KVQ_GROUP; i++)
                yg[i] = m + s * (float)codes[g * HX_KVQ_GROUP + i];
        } else {
            const uint8_t *cg = codes + g * HX_KVQ_GROUP / 2;
            for (int32_t i = 0; i < HX_KVQ_GROUP / 2; i++) {
                yg[i] = m + s * (float)(cg[i] & 0x0F);
                yg[i + 16] = m + s * (float)(cg[i] >> 4);
            }
        }
    }
}
