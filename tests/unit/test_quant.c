/* test_quant.c - weight formats: dtype table, half conversions, reference dequantize of every
 * format against blocks built by hand, convert variants against the reference, tensor rows.
 *
 * Expected values are worked out by hand in the comments from the byte layouts of quant.h, not
 * computed by code shaped like quant_ref.c, so a mistake in the reading of a format shows up
 * here. Comparisons of floats are exact (bit for bit where NaNs can occur): every value below is
 * exactly representable and the formats are defined to the last bit. The test assumes a
 * little-endian host, as hearth does (uint32 words are written as integers). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu.h"
#include "base/err.h"
#include "base/f16.h"
#include "check.h"
#include "tensor/convert.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/tensor.h"

/* ---- helpers ---- */

static void fill_random(unsigned char *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(check_rng(&seed) >> 24);
}

/* Compares n floats bit for bit, printing the first difference. */
#define CHECK_SAME_FLOATS(got, want, n) do {                                                 \
        for (int64_t i_ = 0; i_ < (int64_t)(n); i_++) {                                      \
            if (hx_f32_to_bits((got)[i_]) != hx_f32_to_bits((want)[i_]))                     \
                CHECK_FAIL("%s[%" PRId64 "] == %s[%" PRId64 "]: %.9g (0x%08x) vs %.9g (0x%08x)", \
                           #got, i_, #want, i_, (double)(got)[i_], hx_f32_to_bits((got)[i_]), \
                           (double)(want)[i_], hx_f32_to_bits((want)[i_]));                  \
        }                                                                                    \
    } while (0)

/* ---- dtype table ---- */

static int test_dtype_table_names_and_block_sizes(void)
{
    static const struct { hx_dtype dt; const char *name; int block_n, block_bytes; } want[] = {
        { HX_DT_F32,  "f32",  1,   4   }, { HX_DT_F16,  "f16",  1,   2   },
        { HX_DT_BF16, "bf16", 1,   2   }, { HX_DT_Q4_0, "q4_0", 32,  18  },
        { HX_DT_Q4_1, "q4_1", 32,  20  }, { HX_DT_Q8_0, "q8_0", 32,  34  },
        { HX_DT_Q4_K, "q4_k", 256, 144 }, { HX_DT_Q5_K, "q5_k", 256, 176 },
        { HX_DT_Q6_K, "q6_k", 256, 210 }, { HX_DT_MLX4, "mlx4", 8,   4   },
        { HX_DT_MLX8, "mlx8", 4,   4   },
    };
    CHECK_EQ(HX_COUNTOF(want), HX_DT_COUNT);
    for (size_t i = 0; i < HX_COUNTOF(want); i++) {
        const hx_dtype_traits *t = &hx_dtypes[want[i].dt];
        CHECK_STR(t->name, want[i].name);
        CHECK_EQ(t->block_n, want[i].block_n);
        CHECK_EQ(t->block_bytes, want[i].block_bytes);
        /* only the MLX formats lack a block dequantize: their scales live elsewhere */
        CHECK_EQ(t->dequant == NULL, want[i].dt == HX_DT_MLX4 || want[i].dt == HX_DT_MLX8);
    }
    return 0;
}

static int test_row_bytes_table_values(void)
{
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_F32, 3), 12);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_F16, 3), 6);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_BF16, 4096), 8192);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q4_0, 64), 36);    /* 2 blocks x 18 */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q4_1, 4096), 2560); /* 128 x 20 */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q8_0, 32), 34);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q4_K, 512), 288);  /* 2 x 144 */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q5_K, 4096), 2816); /* 16 x 176 */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q6_K, 256), 210);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_MLX4, 4096), 2048); /* n/2 */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_MLX8, 4096), 4096); /* n */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_MLX8, 12), 12);
    /* not a whole number of blocks (or words) */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q4_0, 33), 0);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q4_K, 128), 0);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_Q6_K, 300), 0);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_MLX4, 12), 0);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_MLX8, 6), 0);
    /* nonsense from a file */
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_F32, -4), 0);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_COUNT, 32), 0);
    CHECK_EQ(hx_dtype_row_bytes(HX_DT_F32, INT64_MAX - 7), 0); /* would overflow size_t */
    return 0;
}

static int test_dtype_from_name_is_case_insensitive(void)
{
    CHECK_EQ(hx_dtype_from_name("f32"), HX_DT_F32);
    CHECK_EQ(hx_dtype_from_name("F16"), HX_DT_F16);
    CHECK_EQ(hx_dtype_from_name("BF16"), HX_DT_BF16);
    CHECK_EQ(hx_dtype_from_name("Q4_0"), HX_DT_Q4_0);
    CHECK_EQ(hx_dtype_from_name("q4_1"), HX_DT_Q4_1);
    CHECK_EQ(hx_dtype_from_name("Q8_0"), HX_DT_Q8_0);
    CHECK_EQ(hx_dtype_from_name("Q4_K"), HX_DT_Q4_K);
    CHECK_EQ(hx_dtype_from_name("q5_K"), HX_DT_Q5_K);
    CHECK_EQ(hx_dtype_from_name("q6_k"), HX_DT_Q6_K);
    CHECK_EQ(hx_dtype_from_name("MLX4"), HX_DT_MLX4);
    CHECK_EQ(hx_dtype_from_name("mlx8"), HX_DT_MLX8);
    CHECK_EQ(hx_dtype_from_name("q4"), -1);
    CHECK_EQ(hx_dtype_from_name("q4_kk"), -1);
    CHECK_EQ(hx_dtype_from_name(""), -1);
    CHECK_EQ(hx_dtype_from_name(NULL), -1);
    return 0;
}

/* ---- half and bfloat16 conversions ---- */

static int test_f16_edge_cases_convert_exactly(void)
{
    static const struct { uint16_t h; uint32_t f; } cases[] = {
        { 0x0000, 0x00000000 }, /* +0 */
        { 0x8000, 0x80000000 }, /* -0 keeps its sign */
        { 0x0001, 0x33800000 }, /* smallest subnormal: 1 * 2^-24 */
        { 0x8001, 0xB3800000 }, /* -2^-24 */
        { 0x03FF, 0x387FC000 }, /* largest subnormal: 1023 * 2^-24 = 1.998046875 * 2^-15 */
        { 0x0400, 0x38800000 }, /* smallest normal: 2^-14 */
        { 0x3C00, 0x3F800000 }, /* 1 */
        { 0x3555, 0x3EAAA000 }, /* (1 + 341/1024) / 4 = 0.333251953125 */
        { 0xC000, 0xC0000000 }, /* -2 */
        { 0x7BFF, 0x477FE000 }, /* max: 65504 */
        { 0xFBFF, 0xC77FE000 }, /* -65504 */
        { 0x7C00, 0x7F800000 }, /* +inf */
        { 0xFC00, 0xFF800000 }, /* -inf */
        { 0x7E00, 0x7FC00000 }, /* quiet NaN */
        { 0x7C01, 0x7F802000 }, /* signaling NaN: payload 1 << 13, stays signaling */
        { 0xFE01, 0xFFC02000 }, /* negative quiet NaN with payload */
    };
    for (size_t i = 0; i < HX_COUNTOF(cases); i++) {
        const float f = hx_f16_to_f32(cases[i].h);
        if (hx_f32_to_bits(f) != cases[i].f)
            CHECK_FAIL("half 0x%04x: got 0x%08x, want 0x%08x", cases[i].h, hx_f32_to_bits(f),
                       cases[i].f);
    }
    CHECK(hx_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    CHECK(hx_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(isinf(hx_f16_to_f32(0xFC00)) && signbit(hx_f16_to_f32(0xFC00)));
    CHECK(isnan(hx_f16_to_f32(0x7C01)));
    CHECK(signbit(hx_f16_to_f32(0x8000)) && hx_f16_to_f32(0x8000) == 0.0f);
    return 0;
}

static int test_bf16_edge_cases_convert_exactly(void)
{
    CHECK(hx_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(hx_bf16_to_f32(0xC000) == -2.0f);
    CHECK(hx_bf16_to_f32(0x3EAB) == 0.333984375f); /* 0x3EAB0000 = (1 + 0x2B/128) / 4 */
    CHECK(hx_bf16_to_f32(0x7F7F) == 0x1.FEp127f);  /* largest finite bfloat16 */
    CHECK(hx_bf16_to_f32(0x0001) == 0x1p-133f);    /* smallest subnormal: 2^-126 * 2^-7 */
    CHECK(isinf(hx_bf16_to_f32(0x7F80)) && !signbit(hx_bf16_to_f32(0x7F80)));
    CHECK(isinf(hx_bf16_to_f32(0xFF80)) && signbit(hx_bf16_to_f32(0xFF80)));
    CHECK(signbit(hx_bf16_to_f32(0x8000)) && hx_bf16_to_f32(0x8000) == 0.0f);
    CHECK_EQ(hx_f32_to_bits(hx_bf16_to_f32(0x7F81)), 0x7F810000); /* NaN payload kept */
    return 0;
}

/* Every half converts to float and back to itself; NaNs come back as NaN of the same sign. */
static int test_f32_to_f16_round_trips_all_65536_halves(void)
{
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        const float f = hx_f16_to_f32((uint16_t)h);
        const uint16_t back = hx_f32_to_f16(f);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) {
            CHECK((back & 0x7C00) == 0x7C00 && (back & 0x03FF) != 0);
            CHECK_EQ(back & 0x8000, h & 0x8000);
        } else if (back != h) {
            CHECK_FAIL("half 0x%04x -> %.9g -> 0x%04x", (unsigned)h, (double)f, back);
        }
    }
    return 0;
}

static int test_f32_to_f16_rounds_to_nearest_even(void)
{
    CHECK_EQ(hx_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);           /* tie between 0x3C00, 0x3C01 */
    CHECK_EQ(hx_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);       /* tie between 0x3C01, 0x3C02 */
    CHECK_EQ(hx_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01); /* just above the tie */
    CHECK_EQ(hx_f32_to_f16(65519.99f), 0x7BFF);                  /* below 65520: stays max */
    CHECK_EQ(hx_f32_to_f16(65520.0f), 0x7C00);                   /* tie with 2^16: to inf */
    CHECK_EQ(hx_f32_to_f16(1e6f), 0x7C00);
    CHECK_EQ(hx_f32_to_f16(-INFINITY), 0xFC00);
    CHECK_EQ(hx_f32_to_f16(0x1p-25f), 0x0000);                   /* half of 2^-24, tie to 0 */
    CHECK_EQ(hx_f32_to_f16(3 * 0x1p-25f), 0x0002);               /* 1.5 units: tie to 2 */
    CHECK_EQ(hx_f32_to_f16(0x1p-25f * 1.0001f), 0x0001);
    CHECK_EQ(hx_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);         /* rounds up into normals */
    CHECK_EQ(hx_f32_to_f16(-1e-10f), 0x8000);                    /* underflow keeps the sign */
    return 0;
}

/* Every variant this CPU runs gives the reference's bits for all 65536 inputs, cut into rows of
 * odd lengths (so the vector loops and the scalar tails both run) starting at odd addresses,
 * and writes nothing past the row's end. */
static int test_convert_variants_equal_reference_bits(void)
{
    enum { N_ALL = 65536, GUARD = 4 };
    static uint16_t src[N_ALL + 1];
    static float want_f16[N_ALL], want_bf16[N_ALL], got[1001 + GUARD];
    for (uint32_t i = 0; i < N_ALL; i++) src[i + 1] = (uint16_t)i;
    hx_convert_f16_row_ref(src + 1, want_f16, N_ALL);
    hx_convert_bf16_row_ref(src + 1, want_bf16, N_ALL);

    const hx_convert_variant *v;
    const int n_v = hx_convert_variants(&v);
    char isa[128];
    hx_cpu_isa_names(hx_cpu_isa(), isa, sizeof isa);
    printf("isa: %s; convert variants:", isa);
    for (int k = 0; k < n_v; k++) printf(" %s", v[k].name);
    printf("\n");
    CHECK(n_v >= 1);
    CHECK_STR(v[n_v - 1].name, "ref");

    static const int64_t lens[] = { 1, 7, 33, 1001 };
    for (int k = 0; k < n_v; k++) {
        for (size_t il = 0; il < HX_COUNTOF(lens); il++) {
            const int64_t len = lens[il];
            for (int64_t at = 0; at + len <= N_ALL; at += len) {
                for (int g = 0; g < GUARD; g++) got[len + g] = -7.0f;
                v[k].f16(src + 1 + at, got, len);
                CHECK_SAME_FLOATS(got, want_f16 + at, len);
                for (int g = 0; g < GUARD; g++) CHECK(got[len + g] == -7.0f);
                v[k].bf16(src + 1 + at, got, len);
                CHECK_SAME_FLOATS(got, want_bf16 + at, len);
                for (int g = 0; g < GUARD; g++) CHECK(got[len + g] == -7.0f);
            }
        }
        v[k].f16(src + 1, got, 0); /* an empty row is fine */
    }
    return 0;
}

/* The dispatched converter is the first usable variant and agrees with the reference. */
static int test_convert_dispatch_matches_reference(void)
{
    static uint16_t src[1001];
    static float got[1001], want[1001];
    fill_random((unsigned char *)src, sizeof src, 99);
    hx_convert_f16_row(src, got, 1001);
    hx_convert_f16_row_ref(src, want, 1001);
    CHECK_SAME_FLOATS(got, want, 1001);
    hx_convert_bf16_row(src, got, 1001);
    hx_convert_bf16_row_ref(src, want, 1001);
    CHECK_SAME_FLOATS(got, want, 1001);
    const hx_convert_variant *v;
    hx_convert_variants(&v);
    CHECK((v[0].isa & ~hx_cpu_isa()) == 0);
    return 0;
}

/* ---- plain float formats through the table ---- */

static int test_f32_f16_bf16_dequant_by_hand(void)
{
    const float f32[3] = { 1.5f, -0.0f, 1e30f };
    const uint16_t f16[3] = { 0x3E00, 0xB800, 0x0001 };  /* 1.5, -0.5, 2^-24 */
    const uint16_t bf16[3] = { 0x3FC0, 0xBF00, 0x4F80 }; /* 1.5, -0.5, 2^32 */
    const float want_f16[3] = { 1.5f, -0.5f, 0x1p-24f }, want_bf16[3] = { 1.5f, -0.5f, 0x1p32f };
    float out[3];
    hx_dtypes[HX_DT_F32].dequant(f32, out, 3);
    CHECK_SAME_FLOATS(out, f32, 3);
    hx_dtypes[HX_DT_F16].dequant(f16, out, 3);
    CHECK_SAME_FLOATS(out, want_f16, 3);
    hx_dtypes[HX_DT_BF16].dequant(bf16, out, 3);
    CHECK_SAME_FLOATS(out, want_bf16, 3);
    return 0;
}

/* ---- 32-element blocks ---- */

/* d = 0.5 (half 0x3800). Byte j holds nibble j (element j) low and 15-j (element j+16) high.
 * Element j     = 0.5 * (j - 8):      -4, -3.5, ..., 3.5
 * Element j+16  = 0.5 * (15 - j - 8): 3.5, 3, ..., -4 */
static int test_q4_0_block_by_hand(void)
{
    hx_block_q4_0 b = { .d = 0x3800 };
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    static const float want[32] = {
        -4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,
        0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  2.5f,  3.0f,  3.5f,
        3.5f,  3.0f,  2.5f,  2.0f,  1.5f,  1.0f,  0.5f,  0.0f,
        -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f,
    };
    float out[32];
    hx_dequant_q4_0(&b, out, 32);
    CHECK_SAME_FLOATS(out, want, 32);
    return 0;
}

/* d = 0.25 (0x3400), m = -1 (0xBC00), same nibbles as the Q4_0 case but unsigned:
 * element j = 0.25 * j - 1, element j+16 = 0.25 * (15 - j) - 1. */
static int test_q4_1_block_by_hand(void)
{
    hx_block_q4_1 b = { .d = 0x3400, .m = 0xBC00 };
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    static const float want[32] = {
        -1.0f,  -0.75f, -0.5f,  -0.25f, 0.0f,   0.25f,  0.5f,   0.75f,
        1.0f,   1.25f,  1.5f,   1.75f,  2.0f,   2.25f,  2.5f,   2.75f,
        2.75f,  2.5f,   2.25f,  2.0f,   1.75f,  1.5f,   1.25f,  1.0f,
        0.75f,  0.5f,   0.25f,  0.0f,   -0.25f, -0.5f,  -0.75f, -1.0f,
    };
    float out[32];
    hx_dequant_q4_1(&b, out, 32);
    CHECK_SAME_FLOATS(out, want, 32);
    return 0;
}

/* d = 0.125 (0x3000); q[j] = 8j - 128 for j < 31 (so element j = j - 16) and q[31] = 127
 * (element 31 = 127 / 8 = 15.875): both ends of int8. */
static int test_q8_0_block_by_hand(void)
{
    hx_block_q8_0 b = { .d = 0x3000 };
    for (int j = 0; j < 31; j++) b.qs[j] = (int8_t)(8 * j - 128);
    b.qs[31] = 127;
    float want[32];
    for (int j = 0; j < 31; j++) want[j] = (float)(j - 16);
    want[31] = 15.875f;
    float out[32];
    hx_dequant_q8_0(&b, out, 32);
    CHECK_SAME_FLOATS(out, want, 32);
    CHECK(out[0] == -16.0f);
    return 0;
}

/* ---- K-quants ---- */

/* Scale bytes shared by the Q4_K and Q5_K cases, unpacked by hand.
 *   byte  value  bits       low 6 bits           top 2 bits
 *   0     0x41   01 000001  scale 0 = 1          -> scale 4 high = 1 (+16)
 *   1     0x82   10 000010  scale 1 = 2          -> scale 5 high = 2 (+32)
 *   2     0xC3   11 000011  scale 2 = 3          -> scale 6 high = 3 (+48)
 *   3     0x3F   00 111111  scale 3 = 63         -> scale 7 high = 0
 *   4     0x04   00 000100  min 0 = 4            -> min 4 high = 0
 *   5     0xC5   11 000101  min 1 = 5            -> min 5 high = 3 (+48)
 *   6     0x46   01 000110  min 2 = 6            -> min 6 high = 1 (+16)
 *   7     0x87   10 000111  min 3 = 7            -> min 7 high = 2 (+32)
 *   byte  value  low nibble = scale j+4 low, high nibble = min j+4 low
 *   8     0x21   scale 4 = 1 + 16 = 17;   min 4 = 2 + 0  = 2
 *   9     0x43   scale 5 = 3 + 32 = 35;   min 5 = 4 + 48 = 52
 *   10    0x65   scale 6 = 5 + 48 = 53;   min 6 = 6 + 16 = 22
 *   11    0xF7   scale 7 = 7 + 0  = 7;    min 7 = 15 + 32 = 47 */
static const uint8_t k_scales[12] = { 0x41, 0x82, 0xC3, 0x3F, 0x04, 0xC5,
                                      0x46, 0x87, 0x21, 0x43, 0x65, 0xF7 };
static const int k_sc[8] = { 1, 2, 3, 63, 17, 35, 53, 7 };
static const int k_mn[8] = { 4, 5, 6, 7, 2, 52, 22, 47 };

/* d = 1 (0x3C00), dmin = 0.5 (0x3800). Chunk c of qs (bytes 32c .. 32c+31) holds sub-block 2c
 * in low nibbles and 2c+1 in high nibbles; byte 32c + l gets low nibble l % 16 and high nibble
 * 15 - l % 16. So element 64c + l = 1 * sc[2c] * (l % 16) - 0.5 * m[2c] and element
 * 64c + 32 + l = 1 * sc[2c+1] * (15 - l % 16) - 0.5 * m[2c+1]. Spot values:
 *   e=0   sub 0, q 0:   1*0 - 0.5*4 = -2
 *   e=40  sub 1, q 7:   2*7 - 0.5*5 = 11.5
 *   e=165 sub 5, q 10:  35*10 - 0.5*52 = 324
 *   e=200 sub 6, q 8:   53*8 - 0.5*22 = 413
 *   e=255 sub 7, q 0:   7*0 - 0.5*47 = -23.5 */
static int test_q4_k_unpacks_both_halves_of_6bit_scales(void)
{
    hx_block_q4_k b = { .d = 0x3C00, .dmin = 0x3800 };
    memcpy(b.scales, k_scales, sizeof k_scales);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i % 16) | ((15 - i % 16) << 4));
    float out[256];
    hx_dequant_q4_k(&b, out, 256);
    CHECK(out[0] == -2.0f);
    CHECK(out[40] == 11.5f);
    CHECK(out[165] == 324.0f);
    CHECK(out[200] == 413.0f);
    CHECK(out[255] == -23.5f);
    for (int e = 0; e < 256; e++) {
        const int sub = e / 32, l = e % 32;
        const int q = sub % 2 == 0 ? l % 16 : 15 - l % 16;
        CHECK_NEAR(out[e], (double)k_sc[sub] * q - 0.5 * k_mn[sub], 0);
    }
    return 0;
}

/* Same d, dmin, scales and nibbles as the Q4_K case, plus qh[l] = 0xAA (bits 1,3,5,7) for even
 * l and 0x55 (bits 0,2,4,6) for odd l. Bit k of qh[l] is the 5th bit of element l of sub-block
 * k, so element (k, l) gets +16 exactly when k + l is odd. Spot values:
 *   e=0   k 0, l 0:  even, q 0:        1*0 - 2 = -2
 *   e=1   k 0, l 1:  odd,  q 1+16:     1*17 - 2 = 15
 *   e=33  k 1, l 1:  even, q 14:       2*14 - 2.5 = 25.5
 *   e=40  k 1, l 8:  odd,  q 7+16:     2*23 - 2.5 = 43.5
 *   e=255 k 7, l 31: even, q 0:        -23.5 */
static int test_q5_k_block_adds_fifth_bit_from_qh(void)
{
    hx_block_q5_k b = { .d = 0x3C00, .dmin = 0x3800 };
    memcpy(b.scales, k_scales, sizeof k_scales);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i % 16) | ((15 - i % 16) << 4));
    for (int l = 0; l < 32; l++) b.qh[l] = l % 2 == 0 ? 0xAA : 0x55;
    float out[256];
    hx_dequant_q5_k(&b, out, 256);
    CHECK(out[0] == -2.0f);
    CHECK(out[1] == 15.0f);
    CHECK(out[33] == 25.5f);
    CHECK(out[40] == 43.5f);
    CHECK(out[255] == -23.5f);
    for (int e = 0; e < 256; e++) {
        const int k = e / 32, l = e % 32;
        const int q = (k % 2 == 0 ? l % 16 : 15 - l % 16) + ((k + l) % 2 ? 16 : 0);
        CHECK_NEAR(out[e], (double)k_sc[k] * q - 0.5 * k_mn[k], 0);
    }
    return 0;
}

/* d = 0.25 (0x3400); scales = 1,-1,2,-2,...,7,-7,127,-128; ql[i] = i; qh[i] = 0xE4
 * (binary 11 10 01 00: quarters 0,1,2,3 get high bits 0,1,2,3) in the first half and 0x1B
 * (00 01 10 11: high bits 3,2,1,0) in the second. Element e: half n = e/128, quarter
 * t = (e%128)/32, l = e%32; its low 4 bits are lo(ql[64n+l]), lo(ql[64n+32+l]), hi(ql[64n+l]),
 * hi(ql[64n+32+l]) for t = 0..3, its high 2 bits are bits 2t..2t+1 of qh[32n+l], its scale is
 * scales[8n + 2t + l/16]. Worked out:
 *   e=0   n0 t0 l0:  low 0,             high 0: q = 0 - 32 = -32,  sc 1:    0.25*1*-32 = -8
 *   e=47  n0 t1 l15: low 47&15 = 15,    high 1: q = 31 - 32 = -1,  sc 2:    0.25*2*-1 = -0.5
 *   e=100 n0 t3 l4:  low 36>>4 = 2,     high 3: q = 50 - 32 = 18,  sc 4:    0.25*4*18 = 18
 *   e=142 n1 t0 l14: low 78&15 = 14,    high 3: q = 62 - 32 = 30,  sc 5:    0.25*5*30 = 37.5
 *   e=200 n1 t2 l8:  low 72>>4 = 4,     high 1: q = 20 - 32 = -12, sc 7:    0.25*7*-12 = -21
 *   e=224 n1 t3 l0:  low 96>>4 = 6,     high 0: q = 6 - 32 = -26,  sc 127:  0.25*127*-26 = -825.5
 *   e=255 n1 t3 l31: low 127>>4 = 7,    high 0: q = 7 - 32 = -25,  sc -128: 0.25*-128*-25 = 800 */
static int test_q6_k_block_by_hand(void)
{
    static const int8_t sc[16] = { 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 127, -128 };
    hx_block_q6_k b = { .d = 0x3400 };
    for (int i = 0; i < 128; i++) b.ql[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) b.qh[i] = i < 32 ? 0xE4 : 0x1B;
    memcpy(b.scales, sc, sizeof sc);
    float out[256];
    hx_dequant_q6_k(&b, out, 256);
    CHECK(out[0] == -8.0f);
    CHECK(out[47] == -0.5f);
    CHECK(out[100] == 18.0f);
    CHECK(out[142] == 37.5f);
    CHECK(out[200] == -21.0f);
    CHECK(out[224] == -825.5f);
    CHECK(out[255] == 800.0f);
    for (int e = 0; e < 256; e++) {
        const int n = e / 128, t = (e % 128) / 32, l = e % 32;
        const int byte = b.ql[64 * n + (t % 2) * 32 + l];
        const int low = t < 2 ? byte & 15 : byte >> 4;
        const int high = (b.qh[32 * n + l] >> (2 * t)) & 3;
        const int s = sc[8 * n + 2 * t + l / 16];
        CHECK_NEAR(out[e], 0.25 * s * ((low | high << 4) - 32), 0);
    }
    return 0;
}

/* ---- MLX affine ---- */

/* Per-group scales and biases, S[g] and B[g], in each storage dtype, encoded by hand:
 *   S = 0.5 1 1.5 2 2.5 3 3.5 4        B = -1 -2 -3 -4 0.25 0.5 0.75 1
 * f16: sign | 5-bit exponent (bias 15) | 10-bit fraction; bf16: the top half of the f32. */
static const float mlx_s[8] = { 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f };
static const float mlx_b[8] = { -1.0f, -2.0f, -3.0f, -4.0f, 0.25f, 0.5f, 0.75f, 1.0f };
static const uint16_t mlx_s_f16[8] = { 0x3800, 0x3C00, 0x3E00, 0x4000,
                                       0x4100, 0x4200, 0x4300, 0x4400 };
static const uint16_t mlx_b_f16[8] = { 0xBC00, 0xC000, 0xC200, 0xC400,
                                       0x3400, 0x3800, 0x3A00, 0x3C00 };
static const uint16_t mlx_s_bf16[8] = { 0x3F00, 0x3F80, 0x3FC0, 0x4000,
                                        0x4020, 0x4040, 0x4060, 0x4080 };
static const uint16_t mlx_b_bf16[8] = { 0xBF80, 0xC000, 0xC040, 0xC080,
                                        0x3E80, 0x3F00, 0x3F40, 0x3F80 };

static const void *mlx_sb(hx_dtype dt, int bias)
{
    if (dt == HX_DT_F16) return bias ? mlx_b_f16 : mlx_s_f16;
    if (dt == HX_DT_BF16) return bias ? mlx_b_bf16 : mlx_s_bf16;
    return bias ? mlx_b : mlx_s;
}

/* The hand-written encodings above say what they mean to. */
static int check_mlx_tables(void)
{
    for (int g = 0; g < 8; g++) {
        CHECK(hx_f16_to_f32(mlx_s_f16[g]) == mlx_s[g] && hx_f16_to_f32(mlx_b_f16[g]) == mlx_b[g]);
        CHECK(hx_bf16_to_f32(mlx_s_bf16[g]) == mlx_s[g]);
        CHECK(hx_bf16_to_f32(mlx_b_bf16[g]) == mlx_b[g]);
    }
    return 0;
}

/* 4-bit, 256 elements, element i holds i % 16. Element j of a word sits at bits [4j, 4j+4), so
 * the words holding 0,1,...,7 and 8,...,15 read 0x76543210 and 0xFEDCBA98. Element
 * i = S[i / G] * (i % 16) + B[i / G], e.g. with G = 32: element 37 = 1 * 5 - 2 = 3, element
 * 255 = 4 * 15 + 1 = 61; with G = 128: element 200 = 1 * 8 - 2 = 6. */
static int test_mlx4_groups_32_64_128_each_scale_dtype(void)
{
    if (check_mlx_tables()) return 1;
    uint32_t words[32];
    for (int w = 0; w < 32; w++) words[w] = w % 2 ? 0xFEDCBA98u : 0x76543210u;
    static const int groups[3] = { 32, 64, 128 };
    static const hx_dtype sbs[3] = { HX_DT_F16, HX_DT_BF16, HX_DT_F32 };
    for (int ig = 0; ig < 3; ig++) {
        for (int is = 0; is < 3; is++) {
            const int G = groups[ig];
            float out[256];
            hx_dequant_mlx(words, mlx_sb(sbs[is], 0), mlx_sb(sbs[is], 1), sbs[is], 4, G, out,
                           256);
            for (int i = 0; i < 256; i++)
                CHECK_NEAR(out[i], mlx_s[i / G] * (i % 16) + mlx_b[i / G], 0);
            if (G == 32) CHECK(out[37] == 3.0f && out[255] == 61.0f);
            if (G == 128) CHECK(out[200] == 6.0f);
        }
    }
    return 0;
}

/* 8-bit, 256 elements, element i holds 37 i mod 256; element j of a word sits at bits
 * [8j, 8j+8), so word 0 holds 0, 37, 74, 111 = 0x6F4A2500 and word 1 holds 148, 185, 222,
 * 259-256 = 3 = 0x03DEB994. Element i = S[i / G] * q_i + B[i / G], e.g. G = 32: element 7
 * = 0.5 * 3 - 1 = 0.5; G = 64: element 70 = 1 * (2590 mod 256 = 30) - 2 = 28. */
static int test_mlx8_groups_32_64_128_each_scale_dtype(void)
{
    if (check_mlx_tables()) return 1;
    uint32_t words[64];
    int q[256];
    for (int i = 0; i < 256; i++) q[i] = (37 * i) % 256;
    for (int w = 0; w < 64; w++)
        words[w] = (uint32_t)q[4 * w] | (uint32_t)q[4 * w + 1] << 8 |
                   (uint32_t)q[4 * w + 2] << 16 | (uint32_t)q[4 * w + 3] << 24;
    CHECK_EQ(words[0], 0x6F4A2500u);
    CHECK_EQ(words[1], 0x03DEB994u);
    static const int groups[3] = { 32, 64, 128 };
    static const hx_dtype sbs[3] = { HX_DT_F16, HX_DT_BF16, HX_DT_F32 };
    for (int ig = 0; ig < 3; ig++) {
        for (int is = 0; is < 3; is++) {
            const int G = groups[ig];
            float out[256];
            hx_dequant_mlx(words, mlx_sb(sbs[is], 0), mlx_sb(sbs[is], 1), sbs[is], 8, G, out,
                           256);
            for (int i = 0; i < 256; i++)
                CHECK_NEAR(out[i], mlx_s[i / G] * q[i] + mlx_b[i / G], 0);
            if (G == 32) CHECK(out[7] == 0.5f);
            if (G == 64) CHECK(out[70] == 28.0f);
        }
    }
    return 0;
}

/* A call on the tail of a row, from a group boundary, matches the whole-row result there, also
 * when the words, scales and biases sit at odd addresses (safetensors does not align). */
static int test_mlx_partial_row_and_unaligned_inputs(void)
{
    unsigned char raw[128 + 1], s_raw[8 * 2 + 1], b_raw[8 * 2 + 1];
    fill_random(raw + 1, 128, 5);
    memcpy(s_raw + 1, mlx_s_f16, sizeof mlx_s_f16);
    memcpy(b_raw + 1, mlx_b_f16, sizeof mlx_b_f16);
    for (int bits = 4; bits <= 8; bits += 4) {
        const int n = 128 * 8 / bits; /* 256 or 128 elements */
        float whole[256], part[256];
        hx_dequant_mlx(raw + 1, s_raw + 1, b_raw + 1, HX_DT_F16, bits, 32, whole, n);
        /* groups 2.. : skip 2 * 32 elements = 64 * bits / 8 bytes and 2 scales */
        hx_dequant_mlx(raw + 1 + 64 * bits / 8, s_raw + 1 + 4, b_raw + 1 + 4, HX_DT_F16, bits,
                       32, part, n - 64);
        CHECK_SAME_FLOATS(part, whole + 64, n - 64);
    }
    return 0;
}

/* ---- tensors ---- */

static int test_tensor_counts_elements_and_rows(void)
{
    hx_tensor t = { .dtype = HX_DT_F32, .n_dims = 3, .shape = { 2, 3, 512 } };
    CHECK_EQ(hx_tensor_n_elems(&t), 3072);
    CHECK_EQ(hx_tensor_n_rows(&t), 6);
    t.n_dims = 1;
    t.shape[0] = 7;
    CHECK_EQ(hx_tensor_n_elems(&t), 7);
    CHECK_EQ(hx_tensor_n_rows(&t), 1);
    return 0;
}

/* For each dtype a [3, 512] tensor of random bytes: row r must be the reference dequantize of
 * bytes [r * row_bytes, (r+1) * row_bytes) with row_bytes written out here from the block sizes
 * (512/32 blocks of 18, 20, 34 B; 512/256 of 144, 176, 210 B). MLX rows also take their own
 * slice of scales and biases: 512/64 = 8 groups per row. */
static int test_tensor_dequant_row_picks_the_right_row(void)
{
    enum { LEN = 512, ROWS = 3 };
    static const struct { hx_dtype dt; size_t row_bytes; } fmts[] = {
        { HX_DT_F32, 2048 }, { HX_DT_F16, 1024 },  { HX_DT_BF16, 1024 }, { HX_DT_Q4_0, 288 },
        { HX_DT_Q4_1, 320 }, { HX_DT_Q8_0, 544 },  { HX_DT_Q4_K, 288 },  { HX_DT_Q5_K, 352 },
        { HX_DT_Q6_K, 420 }, { HX_DT_MLX4, 256 },  { HX_DT_MLX8, 512 },
    };
    static uint16_t data_u16[ROWS * 2048 / 2]; /* 2-byte aligned, as the blocks need */
    unsigned char *data = (unsigned char *)data_u16;
    float out[LEN], want[LEN];
    for (size_t f = 0; f < HX_COUNTOF(fmts); f++) {
        const hx_dtype dt = fmts[f].dt;
        const size_t rb = fmts[f].row_bytes;
        CHECK_EQ(hx_dtype_row_bytes(dt, LEN), rb);
        fill_random(data, sizeof data_u16, 1000 + (uint32_t)f);
        hx_tensor t = { .dtype = dt, .n_dims = 2, .shape = { ROWS, LEN }, .data = data,
                        .n_bytes = ROWS * rb };
        const int mlx = dt == HX_DT_MLX4 || dt == HX_DT_MLX8;
        const int n_sb = mlx ? 3 : 1;
        for (int is = 0; is < n_sb; is++) {
            static const hx_dtype sbs[3] = { HX_DT_F16, HX_DT_BF16, HX_DT_F32 };
            float s[ROWS * 8], b[ROWS * 8]; /* row r, group g: s = 0.25 (r+1) + g, b = r - g */
            uint16_t s16[ROWS * 8], b16[ROWS * 8];
            for (int i = 0; i < ROWS * 8; i++) {
                s[i] = 0.25f * (float)(i / 8 + 1) + (float)(i % 8);
                b[i] = (float)(i / 8) - (float)(i % 8);
                /* f16 and bf16 hold these small quarter-multiples exactly */
                s16[i] = sbs[is] == HX_DT_F16 ? hx_f32_to_f16(s[i])
                                              : (uint16_t)(hx_f32_to_bits(s[i]) >> 16);
                b16[i] = sbs[is] == HX_DT_F16 ? hx_f32_to_f16(b[i])
                                              : (uint16_t)(hx_f32_to_bits(b[i]) >> 16);
            }
            if (mlx) {
                t.sb_dtype = sbs[is];
                t.group_size = 64;
                t.scales = sbs[is] == HX_DT_F32 ? (const void *)s : (const void *)s16;
                t.biases = sbs[is] == HX_DT_F32 ? (const void *)b : (const void *)b16;
            }
            for (int r = 0; r < ROWS; r++) {
                const unsigned char *rp = data + (size_t)r * rb;
                if (mlx) {
                    for (int i = 0; i < LEN; i++) {
                        const int q = dt == HX_DT_MLX8 ? rp[i] : (rp[i / 2] >> (4 * (i % 2))) & 15;
                        want[i] = s[r * 8 + i / 64] * (float)q + b[r * 8 + i / 64];
                    }
                } else {
                    hx_dtypes[dt].dequant(rp, want, LEN);
                }
                hx_tensor_dequant_row(&t, r, out);
                CHECK_SAME_FLOATS(out, want, LEN);
            }
        }
    }
    return 0;
}

/* The row of a 3-d tensor counts over all outer dimensions: row 4 of [2, 3, 64] is [1, 1, :]. */
static int test_tensor_dequant_row_of_3d_tensor(void)
{
    float data[2 * 3 * 64], out[64];
    for (int i = 0; i < 2 * 3 * 64; i++) data[i] = (float)i;
    hx_tensor t = { .dtype = HX_DT_F32, .n_dims = 3, .shape = { 2, 3, 64 }, .data = data,
                    .n_bytes = sizeof data };
    hx_tensor_dequant_row(&t, 4, out);
    for (int i = 0; i < 64; i++) CHECK(out[i] == (float)(4 * 64 + i));
    return 0;
}

static const check_case cases[] = {
    { "dtype_table_names_and_block_sizes", test_dtype_table_names_and_block_sizes },
    { "row_bytes_table_values", test_row_bytes_table_values },
    { "dtype_from_name_is_case_insensitive", test_dtype_from_name_is_case_insensitive },
    { "f16_edge_cases_convert_exactly", test_f16_edge_cases_convert_exactly },
    { "bf16_edge_cases_convert_exactly", test_bf16_edge_cases_convert_exactly },
    { "f32_to_f16_round_trips_all_65536_halves", test_f32_to_f16_round_trips_all_65536_halves },
    { "f32_to_f16_rounds_to_nearest_even", test_f32_to_f16_rounds_to_nearest_even },
    { "convert_variants_equal_reference_bits", test_convert_variants_equal_reference_bits },
    { "convert_dispatch_matches_reference", test_convert_dispatch_matches_reference },
    { "f32_f16_bf16_dequant_by_hand", test_f32_f16_bf16_dequant_by_hand },
    { "q4_0_block_by_hand", test_q4_0_block_by_hand },
    { "q4_1_block_by_hand", test_q4_1_block_by_hand },
    { "q8_0_block_by_hand", test_q8_0_block_by_hand },
    { "q4_k_unpacks_both_halves_of_6bit_scales", test_q4_k_unpacks_both_halves_of_6bit_scales },
    { "q5_k_block_adds_fifth_bit_from_qh", test_q5_k_block_adds_fifth_bit_from_qh },
    { "q6_k_block_by_hand", test_q6_k_block_by_hand },
    { "mlx4_groups_32_64_128_each_scale_dtype", test_mlx4_groups_32_64_128_each_scale_dtype },
    { "mlx8_groups_32_64_128_each_scale_dtype", test_mlx8_groups_32_64_128_each_scale_dtype },
    { "mlx_partial_row_and_unaligned_inputs", test_mlx_partial_row_and_unaligned_inputs },
    { "tensor_counts_elements_and_rows", test_tensor_counts_elements_and_rows },
    { "tensor_dequant_row_picks_the_right_row", test_tensor_dequant_row_picks_the_right_row },
    { "tensor_dequant_row_of_3d_tensor", test_tensor_dequant_row_of_3d_tensor },
};
CHECK_MAIN(cases)
