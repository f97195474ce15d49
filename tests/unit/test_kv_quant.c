/* test_kv_quant.c - the quantized KV formats (kv_quant.h) and the typed KV pool (kv_pool.h).
 *
 * Round-trip bound, per element of a group with minimum mn and range r = max - mn, qmax 255
 * (Q8) or 15 (Q4): |x - dequant(quant(x))| <= s/2 with the stored step s <= (r + |mn| 2^-10) /
 * qmax * 1.002 + 6e-8 (the minimum is rounded down and the step up to f16: 2^-11 relative each,
 * doubled for margin, plus a subnormal f16 ulp), plus f32 rounding 3e-7 * (|mn| + r). Values
 * already on a group's f16 grid come back exactly. */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/kv_quant.h"
#include "base/alloc.h"
#include "base/err.h"
#include "base/f16.h"
#include "check.h"
#include "kv/kv_pool.h"

/* Quantizes rows of several shapes and value ranges into every position of a tile, reads them
 * back, and checks every element against the bound above; prints the worst error in steps. */
static int round_trip_within_bound(hx_kv_dtype dt)
{
    static const int32_t d_heads[] = { 32, 64, 128 };
    static const float spans[] = { 1.0f, 1e-3f, 30.0f, 0.0f };   /* 0: a constant group */
    static const float centers[] = { 0.0f, 5.0f, -100.0f };
    const float qmax = dt == HX_KV_Q8 ? 255.0f : 15.0f;
    const int32_t bt = 16;
    uint32_t rng = 0x1234567u;
    double worst_steps = 0.0;
    float x[128], y[128];
    for (size_t di = 0; di < HX_COUNTOF(d_heads); di++) {
        const int32_t d = d_heads[di];
        uint8_t *tile = hx_calloc(1, hx_kv_tile_bytes(dt, bt, d));
        CHECK(tile != NULL);
        for (size_t si = 0; si < HX_COUNTOF(spans); si++)
        for (size_t ci = 0; ci < HX_COUNTOF(centers); ci++)
        for (int32_t off = 0; off < bt; off++) {
            for (int32_t i = 0; i < d; i++)
                x[i] = centers[ci] + spans[si] * check_rng_range(&rng, -1.0f, 1.0f);
            hx_kvq_quantize_row(dt, x, d, tile, bt, off);
            hx_kvq_dequantize_row(dt, tile, bt, off, d, y);
            for (int32_t g = 0; g < d / HX_KVQ_GROUP; g++) {
                float mn = x[g * 32], mx = x[g * 32];
                for (int32_t i = 1; i < 32; i++) {
                    mn = fminf(mn, x[g * 32 + i]);
                    mx = fmaxf(mx, x[g * 32 + i]);
                }
                const double r = (double)mx - mn;
                const double step = (r + fabs(mn) / 1024.0) / qmax * 1.002 + 6e-8;
                const double bound = 0.5 * step + 3e-7 * (fabs(mn) + r);
                for (int32_t i = g * 32; i < g * 32 + 32; i++) {
                    const double e = fabs((double)y[i] - x[i]);
                    if (e / step > worst_steps) worst_steps = e / step;
                    if (!(e <= bound))
                        CHECK_FAIL("d=%d span=%g center=%g off=%d [%d]: %.9g -> %.9g, error "
                                   "%.3g > bound %.3g", d, (double)spans[si],
                                   (double)centers[ci], off, i, (double)x[i], (double)y[i], e,
                                   bound);
                }
            }
        }
        hx_free(tile);
    }
    printf("%s: worst round-trip error %.3f of the step bound\n", dt == HX_KV_Q8 ? "q8" : "q4",
           worst_steps);
    return 0;
}

static int test_q8_round_trip_error_within_half_a_step(void)
{
    return round_trip_within_bound(HX_KV_Q8);
}

static int test_q4_round_trip_error_within_half_a_step(void)
{
    return round_trip_within_bound(HX_KV_Q4);
}

/* A group of values m + s * c with m and s exact in f16 and c spanning [0, qmax] round-trips
 * exactly, and its codes are c (checked through the Q4 nibble order: element i in the low
 * nibble of byte i, element 16 + i in the high nibble). */
static int test_values_on_the_grid_round_trip_exactly(void)
{
    const int32_t bt = 16, d = 64;
    uint32_t rng = 77;
    for (hx_kv_dtype dt = HX_KV_Q8; dt <= HX_KV_Q4; dt++) {
        const int qmax = dt == HX_KV_Q8 ? 255 : 15;
        uint8_t *tile = hx_calloc(1, hx_kv_tile_bytes(dt, bt, d));
        CHECK(tile != NULL);
        float x[64], y[64];
        int c[64];
        const float m = -1.5f, s = 0.0625f; /* exact in f16 */
        for (int32_t i = 0; i < d; i++) {
            c[i] = (int)(check_rng(&rng) % (uint32_t)(qmax + 1));
            if (i % 32 == 0) c[i] = 0;
            if (i % 32 == 1) c[i] = qmax; /* the group spans the whole code range */
            x[i] = m + s * (float)c[i];
        }
        hx_kvq_quantize_row(dt, x, d, tile, bt, 3);
        hx_kvq_dequantize_row(dt, tile, bt, 3, d, y);
        for (int32_t i = 0; i < d; i++) CHECK_EQ(hx_f32_to_bits(y[i]), hx_f32_to_bits(x[i]));
        const uint8_t *row = tile + 3 * hx_kvq_row_bytes(dt, d);
        for (int32_t i = 0; i < d; i++) {
            const int got = dt == HX_KV_Q8 ? row[i]
                            : (i % 32) < 16 ? row[(i / 32) * 16 + i % 32] & 0x0F
                                            : row[(i / 32) * 16 + i % 32 - 16] >> 4;
            CHECK_EQ(got, c[i]);
        }
        const uint16_t *sc = hx_kvq_scales(tile, dt, bt, d); /* [group][bt], then the minimums */
        CHECK_EQ(sc[0 * bt + 3], hx_f32_to_f16(s));
        CHECK_EQ(sc[1 * bt + 3], hx_f32_to_f16(s));
        CHECK_EQ(sc[2 * bt + 3], hx_f32_to_f16(m));
        hx_free(tile);
    }
    return 0;
}

/* A NaN element does not poison its group (it reads back as a value of the group's range) and
 * does not trip UBSan's float-to-int check. */
static int test_nan_element_gets_code_zero(void)
{
    const int32_t bt = 16, d = 32;
    uint8_t tile[16 * (32 + 4)] = {0};
    float x[32], y[32];
    for (int32_t i = 0; i < d; i++) x[i] = (float)i / 31.0f;
    x[7] = NAN;
    hx_kvq_quantize_row(HX_KV_Q8, x, d, tile, bt, 0);
    hx_kvq_dequantize_row(HX_KV_Q8, tile, bt, 0, d, y);
    CHECK(isfinite(y[7]));
    for (int32_t i = 0; i < d; i++)
        if (i != 7) CHECK_NEAR(y[i], x[i], 0.5 / 255 + 1e-3);
    return 0;
}

/* Sizes: 36 bytes per 32 elements for Q8, 20 for Q4, 64 for F16; per token of SmolLM2-135M
 * (30 layers, 3 kv heads of 64) K plus V is 23,040 / 12,960 / 7,200 bytes. */
static int test_sizes_are_36_and_20_bytes_per_32_elements(void)
{
    CHECK_EQ(hx_kv_tile_bytes(HX_KV_F16, 16, 64), 16 * 64 * 2);
    CHECK_EQ(hx_kv_tile_bytes(HX_KV_Q8, 16, 64), 16 * 2 * 36);
    CHECK_EQ(hx_kv_tile_bytes(HX_KV_Q4, 16, 128), 16 * 4 * 20);
    CHECK_EQ(hx_kv_dtype_bytes_per_token(HX_KV_F16, 30, 3, 64), 23040);
    CHECK_EQ(hx_kv_dtype_bytes_per_token(HX_KV_Q8, 30, 3, 64), 12960);
    CHECK_EQ(hx_kv_dtype_bytes_per_token(HX_KV_Q4, 30, 3, 64), 7200);
    CHECK_EQ(hx_kv_dtype_bytes_per_token(HX_KV_Q4, 30, 3, 48), 0);
    return 0;
}

/* The typed pool stores its dtype, allocates tiles of the quantized size, and refuses a d_head
 * that is not a multiple of 32 with a message naming it; the untyped form is F16. */
static int test_pool_refuses_d_head_not_multiple_of_32(void)
{
    hx_backend *be = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_cpu_backend_create(1, 0, &be, &err), HX_OK);
    hx_kv_pool *p = NULL;
    CHECK_EQ(hx_kv_pool_create_typed(be, 2, 3, 64, 16, 4, HX_KV_Q4, &p, &err), HX_OK);
    CHECK_EQ(p->store.dtype, HX_KV_Q4);
    CHECK(p->store.k != NULL && p->store.v != NULL);
    hx_kv_pool_free(p);
    p = NULL;
    CHECK_EQ(hx_kv_pool_create(be, 2, 3, 64, 16, 4, &p, &err), HX_OK);
    CHECK_EQ(p->store.dtype, HX_KV_F16);
    hx_kv_pool_free(p);
    for (hx_kv_dtype dt = HX_KV_Q8; dt <= HX_KV_Q4; dt++) {
        p = NULL;
        err = (hx_err){0};
        CHECK_EQ(hx_kv_pool_create_typed(be, 2, 3, 80, 16, 4, dt, &p, &err), HX_E_INVALID);
        CHECK(p == NULL);
        CHECK_CONTAINS(err.msg, "d_head 80");
        CHECK_CONTAINS(err.msg, "multiple of 32");
    }
    err = (hx_err){0};
    CHECK_EQ(hx_kv_pool_create_typed(be, 2, 3, 64, 16, 4, (hx_kv_dtype)7, &p, &err),
             HX_E_INVALID);
    be->destroy(be);
    return 0;
}

/* --kv names: f16, q8, q4 parse to their dtype and print back; anything else is refused with
 * the accepted names in the message. */
static int test_dtype_names_parse_and_print(void)
{
    hx_err err = {0};
    hx_kv_dtype dt = HX_KV_F16;
    CHECK_EQ(hx_kv_dtype_parse("q8", &dt, &err), HX_OK);
    CHECK_EQ(dt, HX_KV_Q8);
    CHECK_EQ(hx_kv_dtype_parse("q4", &dt, &err), HX_OK);
    CHECK_EQ(dt, HX_KV_Q4);
    CHECK_EQ(hx_kv_dtype_parse("f16", &dt, &err), HX_OK);
    CHECK_EQ(dt, HX_KV_F16);
    CHECK_STR(hx_kv_dtype_name(HX_KV_Q4), "q4");
    CHECK_EQ(hx_kv_dtype_parse("q5", &dt, &err), HX_E_INVALID);
    CHECK_EQ(dt, HX_KV_F16);
    CHECK_CONTAINS(err.msg, "f16, q8 or q4");
    return 0;
}

static const check_case cases[] = {
    { "q8_round_trip_error_within_half_a_step", test_q8_round_trip_error_within_half_a_step },
    { "q4_round_trip_error_within_half_a_step", test_q4_round_trip_error_within_half_a_step },
    { "values_on_the_grid_round_trip_exactly", test_values_on_the_grid_round_trip_exactly },
    { "nan_element_gets_code_zero", test_nan_element_gets_code_zero },
    { "sizes_are_36_and_20_bytes_per_32_elements", test_sizes_are_36_and_20_bytes_per_32_elements },
    { "pool_refuses_d_head_not_multiple_of_32", test_pool_refuses_d_head_not_multiple_of_32 },
    { "dtype_names_parse_and_print", test_dtype_names_parse_and_print },
};

CHECK_MAIN(cases)
