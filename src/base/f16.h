/* f16.h - IEEE half and bfloat16 conversions (portable C; exact for every input).
 *
 * These are the definitions the SIMD conversion variants are tested against. */
#ifndef HX_BASE_F16_H
#define HX_BASE_F16_H
#include <stdint.h>
#include <string.h>

static inline float hx_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t hx_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Half → float: normals rebias the exponent; subnormals are scaled by 2^-24 exactly. */
static inline float hx_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp  = (h >> 10) & 0x1F;
    const uint32_t mant = h & 0x3FF;
    if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return hx_bits_to_f32(hx_f32_to_bits(v) | sign);
    }
    if (exp == 31) return hx_bits_to_f32(sign | 0x7F800000u | (mant << 13)); /* inf / nan */
    return hx_bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Float → half with round-to-nearest-even; overflow gives inf, NaN stays NaN. */
static inline uint16_t hx_f32_to_f16(float f)
{
    const uint32_t x    = hx_f32_to_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t ax   = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return (uint16_t)(sign | 0x7C00 | (ax > 0x7F800000u ? 0x200 : 0));
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00); /* rounds past 65504 */
    if (ax < 0x38800000u) {                                  /* result is subnormal or zero */
        float v = hx_bits_to_f32(ax) * 16777216.0f;           /* scale to units of 2^-24 */
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t m = ax + 0xFFF + ((ax >> 13) & 1); /* round to nearest even on bit 13 */
    return (uint16_t)(sign | ((m - 0x38000000u) >> 13));
}

static inline float hx_bf16_to_f32(uint16_t b) { return hx_bits_to_f32((uint32_t)b << 16); }

#endif
