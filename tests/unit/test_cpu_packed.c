/* test_cpu_packed.c - the 16-row interleaved weight layout and its matmul (backend/cpu/packed.h).
 *
 * Weights are random bytes with every f16 scale field (d, and Q4_1's m or the K-quants' dmin)
 * replaced by a small finite half, so every block is a valid Q4_0, Q4_1, Q8_0, Q4_K or Q6_K
 * block (any bytes are valid 6-bit scales, mins and codes); n_out = 37 leaves a last group of 5
 * rows and 11 padding rows, n_out = 1 a group of one row. Rows are 96 (or 32) elements for the
 * 32-element formats, 256 and 512 (one and two super-blocks) for the K-quants. The packed bytes
 * are read back by a decoder written here from the layout comment of packed.h, not from
 * packed.c. Activations are random floats of mixed magnitude with all-zero blocks, quantized by
 * the reference; the second term is the reference second-term quantizer (hx_act_quant2_ref,
 * scale d1 / 256). Rows 1 to 5 and 9 hit every remainder of the 4-row tile of the VNNI kernel.
 * Tolerances:
 *  - packing: exact. Every packed element dequantizes to the bits the file layout gives
 *    (hx_tensor_dequant_row), padding rows have zero scales, and packing the groups in pieces
 *    writes the same bytes as one call (into buffers prefilled with different garbage);
 *  - activation sums: 1e-6 of |d1 sum q1| + |d2 sum q2| (two f32 products and one add);
 *  - the reference matmul against the double-precision dot of the dequantized weights with the
 *    dequantized activations d1 q1 (+ d2 q2): 1e-5 * sum_i |w_i x_i| (integer sums are exact;
 *    f32 rounding of the block products and of the folded code offset k * s is all that is left;
 *    for the K-quants the rounding of the sub-block sums and of Q4_K's d fs - dmin fm, and of
 *    the reference dequantize's (d sc) q - dmin m the definition is computed from);
 *  - the VNNI kernel against the reference: 1e-6 * sum_i |w_i x_i| (the same operations in the
 *    same order, so in practice bit-identical);
 *  - two-term activations against the f32 source rows: 1e-4 * sum_i |w_i x_i|. The residual's
 *    quantization moves each element by up to amax_b / 65024 (amax_b / 32512 at exact ties), so the 50x outlier's block
 *    dominates; with n = 2048 its random-walk error is ~1e-5 of sum |w x| (3e-5 at most over
 *    the cells here, 1e-4 already at n = 512). And the total error must be at least 10x
 *    smaller than the single term's on the same data (it is 150-260x).
 * Cells the matmul must not write are prefilled with a sentinel and checked afterwards. */
#include "check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/packed.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/f16.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/tensor.h"

static const hx_dtype packed_dtypes[] = { HX_DT_Q4_0, HX_DT_Q4_1, HX_DT_Q8_0, HX_DT_Q4_K,
                                          HX_DT_Q6_K };

/* The matrix shapes of the matmul tests: [37, n_in] for every packed format, n_in one that
 * exercises several block columns (K-quants: one and two super-blocks). */
static const struct {
    hx_dtype dt;
    int64_t  n_in;
} mat_shapes[] = {
    { HX_DT_Q4_0, 96 },  { HX_DT_Q4_1, 96 },  { HX_DT_Q8_0, 96 },  { HX_DT_Q4_K, 256 },
    { HX_DT_Q4_K, 512 }, { HX_DT_Q6_K, 256 }, { HX_DT_Q6_K, 512 },
};

static bool is_kquant(hx_dtype dt) { return dt == HX_DT_Q4_K || dt == HX_DT_Q6_K; }

#define SENTINEL (-7.0f) /* prefill of output cells a call must leave alone */

/* ---- helpers ---- */

static void put_f16(void *p, float v)
{
    const uint16_t h = hx_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static uint16_t get_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* A random matrix of a packed format [n_out, n] with valid scales (d in [0.001, 0.02], Q4_1's
 * m in [-0.1, 0.1]; the K-quants' d and dmin in [0.0001, 0.002], as their 6- and 8-bit
 * sub-block scales multiply them); the rest of every block is random bytes. Free with
 * free(w.data). */
static hx_wmat make_wmat(hx_dtype dt, int64_t n_out, int64_t n, uint32_t seed)
{
    hx_wmat w = { .dtype = dt, .n_in = n, .n_out = n_out };
    w.row_bytes = hx_dtype_row_bytes(dt, n);
    unsigned char *p = malloc(w.row_bytes * (size_t)n_out);
    for (size_t i = 0; i < w.row_bytes * (size_t)n_out; i++)
        p[i] = (unsigned char)(check_rng(&seed) >> 24);
    const int64_t n_blocks = n_out * (n / hx_dtypes[dt].block_n);
    for (int64_t b = 0; b < n_blocks; b++) {
        unsigned char *blk = p + b * hx_dtypes[dt].block_bytes;
        if (dt == HX_DT_Q4_K) { /* d, dmin */
            put_f16(blk, check_rng_range(&seed, 0.0001f, 0.002f));
            put_f16(blk + 2, check_rng_range(&seed, 0.0001f, 0.002f));
        } else if (dt == HX_DT_Q6_K) { /* d is the block's last field */
            put_f16(blk + 208, check_rng_range(&seed, 0.0001f, 0.002f));
        } else {
            put_f16(blk, check_rng_range(&seed, 0.001f, 0.02f));
            if (dt == HX_DT_Q4_1) put_f16(blk + 2, check_rng_range(&seed, -0.1f, 0.1f));
        }
    }
    w.data = p;
    return w;
}

/* Row o of w dequantized by the reference (tensor/quant.h) into out[n_in]. */
static void dequant_row(const hx_wmat *w, int64_t o, float *out)
{
    hx_tensor t = { .dtype = w->dtype, .n_dims = 2, .shape = { w->n_out, w->n_in },
                    .data = w->data };
    hx_tensor_dequant_row(&t, o, out);
}

/* Lays w out, and packs all of it in one call into a fresh 64-byte aligned buffer prefilled
 * with fill (so bytes the packer skips show up). Free with free(p->data). */
static size_t pack_all(hx_packed *p, const hx_wmat *w, int fill)
{
    const size_t bytes = hx_pack_layout(p, w);
    p->data = aligned_alloc(64, bytes);
    memset(p->data, fill, bytes);
    hx_pack_groups(p, w, 0, p->n_groups);
    return bytes;
}

/* Element i of a K-quant row at lane `lane` of the block column col, from packed.h: Q4_K (2368
 * bytes): d at 2 lane, dmin at 32 + 2 lane, 6-bit scale and min of sub-block j at 64 + 16 j +
 * lane and 192 + 16 j + lane, qs[32c + 4k ..] in lane of chunk 8c + k at 320 (low nibbles
 * sub-block 2c, high 2c + 1); Q6_K (3392 bytes): d at 2 lane, int8 scale of sub-block j (16
 * elements) at 32 + 16 j + lane, ql[4k ..] in lane of chunk k at 320, qh[4k ..] in lane of chunk
 * k at 2368, element 128h + 32t + l = ql[64h + 32 (t & 1) + l] (low nibble t < 2, else high) |
 * bits 2t, 2t+1 of qh[32h + l] << 4, minus 32. */
static float packed_k_value(hx_dtype dt, const unsigned char *col, int lane, int e,
                            uint16_t *d_bits, uint16_t *m_bits)
{
    *d_bits = get_u16(col + 2 * lane);
    const float d = hx_f16_to_f32(*d_bits);
    if (dt == HX_DT_Q4_K) {
        *m_bits = get_u16(col + 32 + 2 * lane);
        const int j = e / 32, l = e % 32;
        const int sc = col[64 + 16 * j + lane], m = col[192 + 16 * j + lane];
        const int u = col[320 + 64 * (8 * (j / 2) + l / 4) + 4 * lane + l % 4];
        const int q = j % 2 ? u >> 4 : u & 15;
        const float ds = d * (float)sc, dm = hx_f16_to_f32(*m_bits) * (float)m;
        const float v = ds * (float)q;
        return v - dm;
    }
    *m_bits = 0;
    int8_t sc;
    memcpy(&sc, col + 32 + 16 * (e / 16) + lane, 1);
    const int h = e / 128, t = (e % 128) / 32, l = e % 32;
    const int bl = 64 * h + 32 * (t & 1) + l, bh = 32 * h + l;
    const int ql = col[320 + 64 * (bl / 4) + 4 * lane + bl % 4];
    const int qh = col[2368 + 64 * (bh / 4) + 4 * lane + bh % 4];
    const int u = (t < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * t)) & 3) << 4);
    const float ds = d * (float)sc;
    return ds * (float)(u - 32);
}

/* Element i of row o (o < 16 * n_groups, padding rows included) of the packed matrix, read back
 * from the layout documented in packed.h: group o / 16, lane o % 16, block column i / col_n.
 * 32-element formats: scales first (per block column 16 f16 d, then for Q4_1 16 f16 m), codes
 * after sc_bytes (per block column col_bytes; chunk k of 64 bytes holds in bytes 4 * lane .. + 4
 * the row's qs[4k .. 4k+4): low nibbles elements j, high nibbles elements 16 + j, or Q8_0's
 * q + 128). K-quants: packed_k_value. The scales' bits go to d_bits and m_bits (Q4_1's m,
 * Q4_K's dmin, else 0). The arithmetic mirrors quant_ref.c. */
static float packed_value(const hx_packed *p, int64_t o, int64_t i, uint16_t *d_bits,
                          uint16_t *m_bits)
{
    const int64_t g = o / HX_PACK_ROWS;
    const int lane = (int)(o % HX_PACK_ROWS);
    const unsigned char *grp = p->data + (size_t)g * p->group_bytes;
    if (is_kquant(p->dtype))
        return packed_k_value(p->dtype, grp + (size_t)(i / 256) * p->col_bytes, lane,
                              (int)(i % 256), d_bits, m_bits);
    const int64_t b = i / 32;
    const int e = (int)(i % 32);
    const unsigned char *sc = grp + (size_t)b * (p->dtype == HX_DT_Q4_1 ? 64 : 32);
    const unsigned char *codes = grp + p->sc_bytes + (size_t)b * p->col_bytes;
    *d_bits = get_u16(sc + 2 * lane);
    *m_bits = p->dtype == HX_DT_Q4_1 ? get_u16(sc + 32 + 2 * lane) : 0;
    const float d = hx_f16_to_f32(*d_bits);
    if (p->dtype == HX_DT_Q8_0) {
        const int u = codes[64 * (e / 4) + 4 * lane + e % 4];
        return d * (float)(u - 128);
    }
    const int j = e % 16; /* the byte qs[j] holding element e */
    const int u = codes[64 * (j / 4) + 4 * lane + j % 4];
    const int q = e < 16 ? (u & 15) : (u >> 4);
    if (p->dtype == HX_DT_Q4_0) return d * (float)(q - 8);
    const float dq = d * (float)q;
    return dq + hx_f16_to_f32(*m_bits);
}

/* A batch of activation rows [n_rows, n] with both terms and both forms of the sums. */
typedef struct {
    int64_t n_rows, n;
    float  *f;      /* [n_rows, n] the f32 source rows */
    hx_act  x;      /* their reference quantization (x.f = f) */
    hx_act  x2;     /* the second term: the residuals f - d1 q1 at scale d1 / 256 */
    float  *s1;     /* [n_rows, n / 32] hx_packed_act_sums of x alone */
    float  *s2;     /* [n_rows, n / 32] hx_packed_act_sums of x + x2 */
    void   *buf, *buf2;
} acts;

/* Quantizes the rows a->f (already filled) into both terms and computes both sums. */
static void acts_quantize(acts *a)
{
    const int64_t n = a->n, nb = n / 32;
    a->buf = aligned_alloc(64, hx_act_bytes(a->n_rows, n));
    a->buf2 = aligned_alloc(64, hx_act_bytes(a->n_rows, n));
    hx_act_init(&a->x, a->buf, a->n_rows, n);
    hx_act_init(&a->x2, a->buf2, a->n_rows, n);
    hx_act_quantize(&a->x, a->f, hx_act_quant_ref);
    for (int64_t r = 0; r < a->n_rows; r++)
        hx_act_quant2_ref(a->f + r * n, a->x.qs + r * n, a->x.d + r * nb, a->x2.qs + r * n,
                          a->x2.d + r * nb, a->x2.bsum + r * (n / 16), n);
    a->s1 = malloc((size_t)(a->n_rows * nb) * sizeof(float));
    a->s2 = malloc((size_t)(a->n_rows * nb) * sizeof(float));
    hx_packed_act_sums(&a->x, NULL, 0, a->n_rows, a->s1);
    hx_packed_act_sums(&a->x, &a->x2, 0, a->n_rows, a->s2);
}

/* Rows of uniform values, 20x larger in every third block (shifted by row), and one block of
 * every four all zero (so some rows have one, some none). */
static acts make_acts(int64_t n_rows, int64_t n, uint32_t seed)
{
    acts a = { .n_rows = n_rows, .n = n };
    a.f = malloc((size_t)(n_rows * n) * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const int64_t b = i / 32;
            const float mag = (b + r) % 3 == 0 ? 20.0f : 1.0f;
            a.f[r * n + i] = (b + r) % 4 == 3 ? 0.0f : check_rng_range(&seed, -mag, mag);
        }
    acts_quantize(&a);
    return a;
}

static void free_acts(acts *a)
{
    free(a->f);
    free(a->buf);
    free(a->buf2);
    free(a->s1);
    free(a->s2);
}

/* The dequantized activation i of row r: d1 q1 (+ d2 q2 when two), in double (exact). */
static double act_value(const acts *a, int64_t r, int64_t i, bool two)
{
    const int64_t nb = a->n / 32, j = r * a->n + i;
    double v = (double)a->x.d[r * nb + i / 32] * a->x.qs[j];
    if (two) v += (double)a->x2.d[r * nb + i / 32] * a->x2.qs[j];
    return v;
}

/* The definition of the packed matmul for one cell: sum_i w_i * x_i in double over the
 * dequantized weights wrow and activations; *mag = sum_i |w_i x_i|. */
static double exact_dot(const float *wrow, const acts *a, int64_t r, bool two, double *mag)
{
    double e = 0.0, m = 0.0;
    for (int64_t i = 0; i < a->n; i++) {
        const double wx = (double)wrow[i] * act_value(a, r, i, two);
        e += wx;
        m += fabs(wx);
    }
    *mag = m;
    return e;
}

/* Output width of the test buffers: wider than n_out, so a write past n_out is caught. */
static int64_t ld_for(const hx_packed *p) { return p->n_out + 4; }

/* Runs fn over groups [g0, g1) and rows [r0, r1) into a fresh [n_rows, ld_for(p)] buffer
 * prefilled with SENTINEL. The caller frees it. */
static float *run_pmatmul(hx_pmatmul_fn fn, const hx_packed *p, int64_t g0, int64_t g1,
                          const acts *a, bool two, int64_t r0, int64_t r1)
{
    const int64_t ld = ld_for(p);
    float *y = malloc((size_t)(a->n_rows * ld) * sizeof(float));
    for (int64_t i = 0; i < a->n_rows * ld; i++) y[i] = SENTINEL;
    fn(p, g0, g1, &a->x, two ? &a->x2 : NULL, two ? a->s2 : a->s1, r0, r1, y, ld);
    return y;
}

/* Whether cell (r, o) is one that a call over groups [g0, g1) and rows [r0, r1) writes. */
static bool in_range(const hx_packed *p, int64_t g0, int64_t g1, int64_t r0, int64_t r1,
                     int64_t r, int64_t o)
{
    return r >= r0 && r < r1 && o >= g0 * HX_PACK_ROWS && o < g1 * HX_PACK_ROWS && o < p->n_out;
}

/* ---- packing ---- */

/* Packs a [n_out, n_in] matrix of dt and checks the geometry, every element against the file
 * layout, the padding rows, and that group-range pieces give the same bytes as one call. */
static int check_pack(hx_dtype dt, int64_t n_out, int64_t n_in, uint32_t seed)
{
    const char *name = hx_dtypes[dt].name;
    hx_wmat w = make_wmat(dt, n_out, n_in, seed);
    hx_packed p, q;
    const size_t bytes = pack_all(&p, &w, 0xA5);
    const int64_t n_groups = (n_out + HX_PACK_ROWS - 1) / HX_PACK_ROWS;

    /* The geometry the decoder relies on. */
    CHECK(p.dtype == dt && p.n_in == n_in && p.n_out == n_out);
    CHECK_EQ(p.n_groups, n_groups);
    if (is_kquant(dt)) {
        CHECK_EQ(p.col_n, 256);
        CHECK_EQ(p.sc_bytes, 0);
        CHECK_EQ(p.col_bytes, dt == HX_DT_Q4_K ? 2368 : 3392);
        /* Close to the file's size: 16 rows of a super-block are 2304 or 3360 bytes. */
        CHECK(p.col_bytes <= 16 * (size_t)hx_dtypes[dt].block_bytes * 105 / 100);
    } else {
        const int64_t nb = n_in / 32;
        const size_t sc_entry = dt == HX_DT_Q4_1 ? 64 : 32;
        CHECK_EQ(p.col_n, 32);
        CHECK_EQ(p.col_bytes, dt == HX_DT_Q8_0 ? 512 : 256);
        CHECK(p.sc_bytes % 64 == 0 && p.sc_bytes >= (size_t)nb * sc_entry &&
              p.sc_bytes < (size_t)nb * sc_entry + 64);
    }
    CHECK_EQ(p.group_bytes, p.sc_bytes + (size_t)(n_in / p.col_n) * p.col_bytes);
    CHECK_EQ(bytes, (size_t)n_groups * p.group_bytes);

    /* Every element of every real row dequantizes to the file's bits. */
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t o = 0; o < n_out; o++) {
        dequant_row(&w, o, row);
        for (int64_t i = 0; i < n_in; i++) {
            uint16_t d, m;
            const float got = packed_value(&p, o, i, &d, &m);
            if (hx_f32_to_bits(got) != hx_f32_to_bits(row[i]))
                CHECK_FAIL("%s n_out=%lld n_in=%lld: row %lld element %lld packs to %.9g, "
                           "file layout %.9g", name, (long long)n_out, (long long)n_in,
                           (long long)o, (long long)i, (double)got, (double)row[i]);
        }
    }
    free(row);

    /* The padding rows of the last group have zero scales (and so contribute nothing). */
    for (int64_t o = n_out; o < n_groups * HX_PACK_ROWS; o++)
        for (int64_t i = 0; i < n_in; i++) {
            uint16_t d, m;
            const float v = packed_value(&p, o, i, &d, &m);
            if (d != 0 || m != 0 || v != 0.0f)
                CHECK_FAIL("%s n_out=%lld n_in=%lld: padding row %lld element %lld has d %#x "
                           "m %#x value %.9g", name, (long long)n_out, (long long)n_in,
                           (long long)o, (long long)i, d, m, (double)v);
        }

    /* Groups [0, 1) then [1, n_groups) over different garbage: the same bytes, so the pieces
     * are independent and every byte of the layout is written. */
    CHECK_EQ(hx_pack_layout(&q, &w), bytes);
    q.data = aligned_alloc(64, bytes);
    memset(q.data, 0x5A, bytes);
    hx_pack_groups(&q, &w, 0, 1);
    hx_pack_groups(&q, &w, 1, n_groups);
    for (size_t k = 0; k < bytes; k++)
        if (p.data[k] != q.data[k])
            CHECK_FAIL("%s n_out=%lld n_in=%lld: byte %zu of group %zu is %#x packed in one call, "
                       "%#x packed in two", name, (long long)n_out, (long long)n_in, k,
                       k / p.group_bytes, p.data[k], q.data[k]);
    free(q.data);
    free(p.data);
    free((void *)w.data);
    return 0;
}

static int test_packing_keeps_every_value(void)
{
    static const int64_t n_outs[] = { 37, 1, 16 }, n_ins[] = { 96, 32 }, k_ins[] = { 256, 512 };
    uint32_t seed = 10;
    for (size_t k = 0; k < HX_COUNTOF(packed_dtypes); k++)
        for (size_t a = 0; a < HX_COUNTOF(n_outs); a++)
            for (size_t b = 0; b < 2; b++) {
                const hx_dtype dt = packed_dtypes[k];
                if (check_pack(dt, n_outs[a], is_kquant(dt) ? k_ins[b] : n_ins[b], seed++))
                    return 1;
            }
    return 0;
}

static int test_pack_supported_formats_and_lengths(void)
{
    CHECK(hx_pack_supported(HX_DT_Q4_0, 32));
    CHECK(hx_pack_supported(HX_DT_Q4_1, 96));
    CHECK(hx_pack_supported(HX_DT_Q8_0, 4096));
    CHECK(hx_pack_supported(HX_DT_Q4_K, 256));
    CHECK(hx_pack_supported(HX_DT_Q4_K, 8192));
    CHECK(hx_pack_supported(HX_DT_Q6_K, 2048));
    CHECK(!hx_pack_supported(HX_DT_Q4_0, 48));
    CHECK(!hx_pack_supported(HX_DT_Q8_0, 0));
    CHECK(!hx_pack_supported(HX_DT_Q4_K, 0));
    CHECK(!hx_pack_supported(HX_DT_Q4_K, 128));
    CHECK(!hx_pack_supported(HX_DT_Q6_K, 96));
    CHECK(!hx_pack_supported(HX_DT_Q6_K, 384));
    CHECK(!hx_pack_supported(HX_DT_Q5_K, 256));
    CHECK(!hx_pack_supported(HX_DT_F32, 32));
    CHECK(!hx_pack_supported(HX_DT_F16, 32));
    return 0;
}

/* ---- activation sums ---- */

/* s = d1 sum(q1) (+ d2 sum(q2)) per block, summing the codes here rather than reading bsum; a
 * call over rows [r0, r1) writes only those rows' entries. */
static int test_act_sums_equal_scaled_code_sums(void)
{
    enum { ROWS = 5, N = 96, NB = N / 32 };
    acts a = make_acts(ROWS, N, 21);
    float s[ROWS * NB];
    for (int two = 0; two <= 1; two++) {
        static const int64_t ranges[][2] = { { 0, ROWS }, { 1, 3 } };
        for (size_t k = 0; k < HX_COUNTOF(ranges); k++) {
            const int64_t r0 = ranges[k][0], r1 = ranges[k][1];
            for (int i = 0; i < ROWS * NB; i++) s[i] = SENTINEL;
            hx_packed_act_sums(&a.x, two ? &a.x2 : NULL, r0, r1, s);
            for (int64_t r = 0; r < ROWS; r++)
                for (int64_t b = 0; b < NB; b++) {
                    const float got = s[r * NB + b];
                    if (r < r0 || r >= r1) {
                        if (got != SENTINEL)
                            CHECK_FAIL("two=%d rows [%lld,%lld): wrote row %lld block %lld", two,
                                       (long long)r0, (long long)r1, (long long)r, (long long)b);
                        continue;
                    }
                    int64_t q1 = 0, q2 = 0;
                    for (int j = 0; j < 32; j++) {
                        q1 += a.x.qs[r * N + 32 * b + j];
                        q2 += a.x2.qs[r * N + 32 * b + j];
                    }
                    const double t1 = (double)a.x.d[r * NB + b] * (double)q1;
                    const double t2 = two ? (double)a.x2.d[r * NB + b] * (double)q2 : 0.0;
                    const double tol = 1e-6 * (fabs(t1) + fabs(t2));
                    if (!(fabs(got - (t1 + t2)) <= tol))
                        CHECK_FAIL("two=%d row %lld block %lld: sum %.9g, by hand %.9g (tol %.3g)",
                                   two, (long long)r, (long long)b, (double)got, t1 + t2, tol);
                }
        }
    }
    /* The sums hx_packed_act_sums gave for the whole batch in make_acts are these too. */
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t b = 0; b < NB; b++) {
            int64_t q1 = 0;
            for (int j = 0; j < 32; j++) q1 += a.x.qs[r * N + 32 * b + j];
            CHECK_NEAR(a.s1[r * NB + b], (double)a.x.d[r * NB + b] * (double)q1, 1e-6);
        }
    free_acts(&a);
    return 0;
}

/* ---- the reference matmul against its definition ---- */

static int test_pmatmul_ref_matches_definition(void)
{
    enum { N_OUT = 37 };
    static const int64_t rows[] = { 1, 3, 6 };
    for (size_t k = 0; k < HX_COUNTOF(mat_shapes); k++) {
        const hx_dtype dt = mat_shapes[k].dt;
        const int64_t n_in = mat_shapes[k].n_in;
        hx_wmat w = make_wmat(dt, N_OUT, n_in, 30 + (uint32_t)k);
        hx_packed p;
        pack_all(&p, &w, 0);
        const int64_t ld = ld_for(&p);
        float *wrows = malloc((size_t)(N_OUT * n_in) * sizeof(float));
        for (int64_t o = 0; o < N_OUT; o++) dequant_row(&w, o, wrows + o * n_in);
        double worst = 0.0;
        for (size_t ri = 0; ri < HX_COUNTOF(rows); ri++) {
            const int64_t n_rows = rows[ri];
            acts a = make_acts(n_rows, n_in, 40 + (uint32_t)ri);
            /* All groups and rows; then group 1 alone over rows [1, n_rows) (threads split
             * both ways). */
            const int64_t rng[][4] = { { 0, p.n_groups, 0, n_rows }, { 1, 2, 1, n_rows } };
            for (int two = 0; two <= 1; two++)
                for (size_t gi = 0; gi < HX_COUNTOF(rng); gi++) {
                    const int64_t g0 = rng[gi][0], g1 = rng[gi][1], r0 = rng[gi][2],
                                  r1 = rng[gi][3];
                    float *got = run_pmatmul(hx_pmatmul_ref, &p, g0, g1, &a, two, r0, r1);
                    for (int64_t r = 0; r < n_rows; r++)
                        for (int64_t o = 0; o < ld; o++) {
                            const float g = got[r * ld + o];
                            if (!in_range(&p, g0, g1, r0, r1, r, o)) {
                                if (g != SENTINEL)
                                    CHECK_FAIL("%s groups [%lld,%lld) rows [%lld,%lld): wrote "
                                               "r=%lld o=%lld", hx_dtypes[dt].name,
                                               (long long)g0, (long long)g1, (long long)r0,
                                               (long long)r1, (long long)r, (long long)o);
                                continue;
                            }
                            double mag;
                            const double e = exact_dot(wrows + o * n_in, &a, r, two, &mag);
                            const double err = fabs((double)g - e);
                            if (!(err <= 1e-5 * mag))
                                CHECK_FAIL("%s n_in=%lld two=%d rows=%lld r=%lld o=%lld: %.9g "
                                           "vs definition %.9g (|w.x| %.3g)",
                                           hx_dtypes[dt].name, (long long)n_in, two,
                                           (long long)n_rows, (long long)r, (long long)o,
                                           (double)g, e, mag);
                            if (err / mag > worst) worst = err / mag;
                        }
                    free(got);
                }
            free_acts(&a);
        }
        printf("  %s n_in=%lld: max |ref - definition| / sum|w x| = %.2e\n",
               hx_dtypes[dt].name, (long long)n_in, worst);
        free(wrows);
        free(p.data);
        free((void *)w.data);
    }
    return 0;
}

/* ---- the SIMD kernels against the reference ---- */

#if defined(__x86_64__)
static bool cpu_has(unsigned need) { return (hx_cpu_isa() & need) == need; }
static bool cpu_has_vnni(void) { return cpu_has(HX_ISA_AVX512 | HX_ISA_AVX512VNNI); }

/* Kernel fn against the reference on every packed format, odd row counts, partial group and row
 * ranges, one and two terms: within 1e-6 of sum|w x| per output, nothing written outside the
 * range asked for. */
static int check_kernel_matches_reference(const char *name, hx_pmatmul_fn fn)
{
    enum { N_OUT = 37 };
    static const int64_t rows[] = { 1, 2, 3, 4, 5, 9 };
    for (size_t k = 0; k < HX_COUNTOF(mat_shapes); k++) {
        const hx_dtype dt = mat_shapes[k].dt;
        const int64_t n_in = mat_shapes[k].n_in;
        hx_wmat w = make_wmat(dt, N_OUT, n_in, 50 + (uint32_t)k);
        hx_packed p;
        pack_all(&p, &w, 0);
        const int64_t ld = ld_for(&p);
        float *wrows = malloc((size_t)(N_OUT * n_in) * sizeof(float));
        for (int64_t o = 0; o < N_OUT; o++) dequant_row(&w, o, wrows + o * n_in);
        double worst = 0.0;
        int64_t n_cells = 0, n_same_bits = 0;
        for (size_t ri = 0; ri < HX_COUNTOF(rows); ri++) {
            const int64_t n_rows = rows[ri];
            acts a = make_acts(n_rows, n_in, 60 + (uint32_t)ri);
            /* All groups and rows; group 1 alone; all groups over rows [1, n_rows). */
            const int64_t rng[][4] = {
                { 0, p.n_groups, 0, n_rows }, { 1, 2, 0, n_rows }, { 0, p.n_groups, 1, n_rows }
            };
            for (int two = 0; two <= 1; two++)
                for (size_t gi = 0; gi < HX_COUNTOF(rng); gi++) {
                    const int64_t g0 = rng[gi][0], g1 = rng[gi][1], r0 = rng[gi][2],
                                  r1 = rng[gi][3];
                    float *want = run_pmatmul(hx_pmatmul_ref, &p, g0, g1, &a, two, r0, r1);
                    float *got = run_pmatmul(fn, &p, g0, g1, &a, two, r0, r1);
                    for (int64_t r = 0; r < n_rows; r++)
                        for (int64_t o = 0; o < ld; o++) {
                            const float g = got[r * ld + o], e = want[r * ld + o];
                            if (!in_range(&p, g0, g1, r0, r1, r, o)) {
                                if (g != SENTINEL)
                                    CHECK_FAIL("%s rows=%lld groups [%lld,%lld) rows [%lld,%lld): "
                                               "wrote r=%lld o=%lld", hx_dtypes[dt].name,
                                               (long long)n_rows, (long long)g0, (long long)g1,
                                               (long long)r0, (long long)r1, (long long)r,
                                               (long long)o);
                                continue;
                            }
                            double mag;
                            exact_dot(wrows + o * n_in, &a, r, two, &mag);
                            const double err = fabs((double)g - e);
                            if (!(err <= 1e-6 * mag))
                                CHECK_FAIL("%s n_in=%lld two=%d rows=%lld groups [%lld,%lld) "
                                           "r=%lld o=%lld: %.9g vs ref %.9g (|w.x| %.3g)",
                                           hx_dtypes[dt].name, (long long)n_in, two,
                                           (long long)n_rows, (long long)g0, (long long)g1,
                                           (long long)r, (long long)o, (double)g, (double)e, mag);
                            if (err / mag > worst) worst = err / mag;
                            n_cells++;
                            n_same_bits += hx_f32_to_bits(g) == hx_f32_to_bits(e);
                        }
                    free(want);
                    free(got);
                }
            free_acts(&a);
        }
        printf("  %s %s n_in=%lld: max |kernel - ref| / sum|w x| = %.2e, %lld of %lld cells "
               "bit-identical\n", name, hx_dtypes[dt].name, (long long)n_in, worst,
               (long long)n_same_bits, (long long)n_cells);
        free(wrows);
        free(p.data);
        free((void *)w.data);
    }
    return 0;
}
#endif

static int test_pmatmul_avx512vnni_matches_reference(void)
{
#if defined(__x86_64__)
    if (!cpu_has_vnni()) {
        printf("skip: this CPU lacks AVX-512 VNNI (hx_pmatmul_avx512vnni not run)\n");
        return 0;
    }
    return check_kernel_matches_reference("avx512vnni", hx_pmatmul_avx512vnni);
#else
    printf("skip: not an x86-64 build (no hx_pmatmul_avx512vnni)\n");
    return 0;
#endif
}

static int test_pmatmul_avx2_matches_reference(void)
{
#if defined(__x86_64__)
    if (!cpu_has(HX_ISA_AVX2)) {
        printf("skip: this CPU lacks AVX2 (hx_pmatmul_avx2 not run)\n");
        return 0;
    }
    return check_kernel_matches_reference("avx2", hx_pmatmul_avx2);
#else
    printf("skip: not an x86-64 build (no hx_pmatmul_avx2)\n");
    return 0;
#endif
}

/* ---- K-quant integer sums at their bounds ---- */

/* The K-quant sums are exact in int32 (packed.h): drive them to their bounds, every code at its
 * extreme (Q4_K u = 15 with scale and min 63; Q6_K u - 32 = -32 with scale -128, and u - 32 = 31
 * with scale 127) against activations of +-127 in both terms (bsum +-2032), and check the
 * reference against the definition and the VNNI kernel against the reference. An overflow
 * would miss the definition (and the sanitizer build traps it in the reference). */
static int test_k_quant_sums_exact_at_their_bounds(void)
{
    enum { N_OUT = 16, N_IN = 512, ROWS = 2 };
    acts a = { .n_rows = ROWS, .n = N_IN };
    a.f = malloc(sizeof(float)); /* unused; free_acts frees it */
    a.buf = aligned_alloc(64, hx_act_bytes(ROWS, N_IN));
    a.buf2 = aligned_alloc(64, hx_act_bytes(ROWS, N_IN));
    hx_act_init(&a.x, a.buf, ROWS, N_IN);
    hx_act_init(&a.x2, a.buf2, ROWS, N_IN);
    for (int64_t r = 0; r < ROWS; r++) { /* row 0 all +127, row 1 all -127, in both terms */
        const int q = r == 0 ? 127 : -127;
        for (int64_t i = 0; i < N_IN; i++) a.x.qs[r * N_IN + i] = a.x2.qs[r * N_IN + i] = (int8_t)q;
        for (int64_t b = 0; b < N_IN / 32; b++) {
            a.x.d[r * (N_IN / 32) + b] = 0.01f * (float)(b + 1);
            a.x2.d[r * (N_IN / 32) + b] = 0.01f * (float)(b + 1) / 256.0f;
        }
        for (int64_t h = 0; h < N_IN / 16; h++)
            a.x.bsum[r * (N_IN / 16) + h] = a.x2.bsum[r * (N_IN / 16) + h] = (int16_t)(16 * q);
    }
    a.s1 = malloc((size_t)(ROWS * (N_IN / 32)) * sizeof(float));
    a.s2 = malloc((size_t)(ROWS * (N_IN / 32)) * sizeof(float));
    hx_packed_act_sums(&a.x, NULL, 0, ROWS, a.s1);
    hx_packed_act_sums(&a.x, &a.x2, 0, ROWS, a.s2);

    static const hx_dtype kq[] = { HX_DT_Q4_K, HX_DT_Q6_K };
    for (size_t k = 0; k < HX_COUNTOF(kq); k++) {
        const hx_dtype dt = kq[k];
        hx_wmat w = { .dtype = dt, .n_in = N_IN, .n_out = N_OUT };
        w.row_bytes = hx_dtype_row_bytes(dt, N_IN);
        unsigned char *wd = malloc(w.row_bytes * N_OUT);
        for (int64_t o = 0; o < N_OUT; o++)
            for (int64_t b = 0; b < N_IN / 256; b++) {
                unsigned char *blk = wd + o * w.row_bytes + b * hx_dtypes[dt].block_bytes;
                if (dt == HX_DT_Q4_K) { /* every 6-bit scale and min 63, every code 15 */
                    memset(blk, 0xFF, 144);
                    put_f16(blk, 0.001f);
                    put_f16(blk + 2, 0.001f);
                } else { /* odd rows u = 63, scale 127; even rows u = 0, scale -128 */
                    memset(blk, o % 2 ? 0xFF : 0x00, 192);
                    memset(blk + 192, o % 2 ? 0x7F : 0x80, 16);
                    put_f16(blk + 208, 0.001f);
                }
            }
        w.data = wd;
        hx_packed p;
        pack_all(&p, &w, 0);
        float *wrows = malloc((size_t)(N_OUT * N_IN) * sizeof(float));
        for (int64_t o = 0; o < N_OUT; o++) dequant_row(&w, o, wrows + o * N_IN);
        for (int two = 0; two <= 1; two++) {
            float *ref = run_pmatmul(hx_pmatmul_ref, &p, 0, 1, &a, two, 0, ROWS);
            hx_pmatmul_fn fn = hx_pmatmul_select(hx_cpu_isa());
            float *got = fn ? run_pmatmul(fn, &p, 0, 1, &a, two, 0, ROWS) : NULL;
            for (int64_t r = 0; r < ROWS; r++)
                for (int64_t o = 0; o < N_OUT; o++) {
                    double mag;
                    const double e = exact_dot(wrows + o * N_IN, &a, r, two, &mag);
                    const float g = ref[r * ld_for(&p) + o];
                    if (!(fabs((double)g - e) <= 1e-5 * mag))
                        CHECK_FAIL("%s two=%d r=%lld o=%lld: ref %.9g vs definition %.9g "
                                   "(|w.x| %.3g)", hx_dtypes[dt].name, two, (long long)r,
                                   (long long)o, (double)g, e, mag);
                    if (got && !(fabs((double)got[r * ld_for(&p) + o] - g) <= 1e-6 * mag))
                        CHECK_FAIL("%s two=%d r=%lld o=%lld: selected %.9g vs ref %.9g",
                                   hx_dtypes[dt].name, two, (long long)r, (long long)o,
                                   (double)got[r * ld_for(&p) + o], (double)g);
                }
            free(ref);
            free(got);
        }
        free(wrows);
        free(p.data);
        free(wd);
    }
    free_acts(&a);
    return 0;
}

/* ---- selection ---- */

/* VNNI where a mask has both AVX-512 bits, else AVX2 where it has AVX2 (x86-64 builds), else
 * NULL; this CPU's mask gets what it has. */
static int test_pmatmul_select_best_kernel(void)
{
    CHECK(hx_pmatmul_select(0) == NULL);
    CHECK(hx_pmatmul_select(HX_ISA_NEON | HX_ISA_NEON_DOT) == NULL);
#if defined(__x86_64__)
    const hx_pmatmul_fn vnni = hx_pmatmul_avx512vnni, avx2 = hx_pmatmul_avx2;
    CHECK(hx_pmatmul_select(HX_ISA_AVX2) == avx2);
    CHECK(hx_pmatmul_select(HX_ISA_AVX2 | HX_ISA_AVX512) == avx2);
    CHECK(hx_pmatmul_select(HX_ISA_AVX2 | HX_ISA_AVXVNNI) == avx2);
    CHECK(hx_pmatmul_select(HX_ISA_AVX512 | HX_ISA_AVX512VNNI) == vnni);
    CHECK(hx_pmatmul_select(HX_ISA_AVX2 | HX_ISA_AVX512 | HX_ISA_AVX512VNNI) == vnni);
    CHECK(hx_pmatmul_select(hx_cpu_isa()) ==
          (cpu_has_vnni() ? vnni : cpu_has(HX_ISA_AVX2) ? avx2 : NULL));
#else
    CHECK(hx_pmatmul_select(HX_ISA_AVX2) == NULL);
    CHECK(hx_pmatmul_select(hx_cpu_isa()) == NULL);
#endif
    return 0;
}

/* ---- two-term accuracy ---- */

/* Against the f32 source rows (not their quantization): mixed magnitudes within every block
 * (1, 0.1 and 0.01) and one 50x outlier per row, which makes its block's single-term step
 * coarse for the 31 small values beside it. The two-term result must be near the exact dot and
 * at least 10x closer in total than the single term, proving the second term is used. Runs the
 * reference and, where this CPU has it, the selected kernel. */
static int test_two_term_near_f32_and_beats_one_term(void)
{
    enum { N_OUT = 37, N_IN = 2048, ROWS = 4 };
    static const float mags[] = { 1.0f, 0.1f, 0.01f };
    uint32_t seed = 70;
    acts a = { .n_rows = ROWS, .n = N_IN };
    a.f = malloc((size_t)(ROWS * N_IN) * sizeof(float));
    for (int64_t i = 0; i < ROWS * N_IN; i++) {
        const float mag = mags[check_rng(&seed) % HX_COUNTOF(mags)];
        a.f[i] = check_rng_range(&seed, -mag, mag);
    }
    for (int64_t r = 0; r < ROWS; r++)
        a.f[r * N_IN + check_rng(&seed) % N_IN] = r % 2 ? -50.0f : 50.0f;
    acts_quantize(&a);

    hx_pmatmul_fn fns[2] = { hx_pmatmul_ref, hx_pmatmul_select(hx_cpu_isa()) };
    const char *fn_names[2] = { "ref", "selected" };
    for (size_t k = 0; k < HX_COUNTOF(packed_dtypes); k++) {
        const hx_dtype dt = packed_dtypes[k];
        hx_wmat w = make_wmat(dt, N_OUT, N_IN, 80 + (uint32_t)k);
        hx_packed p;
        pack_all(&p, &w, 0);
        const int64_t ld = ld_for(&p);
        float *row = malloc((size_t)N_IN * sizeof(float));
        for (int f = 0; f < 2; f++) {
            if (!fns[f]) continue;
            float *y1 = run_pmatmul(fns[f], &p, 0, p.n_groups, &a, false, 0, ROWS);
            float *y2 = run_pmatmul(fns[f], &p, 0, p.n_groups, &a, true, 0, ROWS);
            double sum_e1 = 0.0, sum_e2 = 0.0, worst1 = 0.0, worst2 = 0.0;
            for (int64_t o = 0; o < N_OUT; o++) {
                dequant_row(&w, o, row);
                for (int64_t r = 0; r < ROWS; r++) {
                    double e = 0.0, mag = 0.0;
                    for (int64_t i = 0; i < N_IN; i++) {
                        const double wx = (double)row[i] * a.f[r * N_IN + i];
                        e += wx;
                        mag += fabs(wx);
                    }
                    const double e1 = fabs((double)y1[r * ld + o] - e);
                    const double e2 = fabs((double)y2[r * ld + o] - e);
                    if (!(e2 <= 1e-4 * mag))
                        CHECK_FAIL("%s %s r=%lld o=%lld: two-term %.9g vs f32 %.9g (|w.x| %.3g)",
                                   hx_dtypes[dt].name, fn_names[f], (long long)r, (long long)o,
                                   (double)y2[r * ld + o], e, mag);
                    sum_e1 += e1;
                    sum_e2 += e2;
                    if (e1 / mag > worst1) worst1 = e1 / mag;
                    if (e2 / mag > worst2) worst2 = e2 / mag;
                }
            }
            printf("  %s %s: max |err| / sum|w x|: one term %.2e, two terms %.2e; total error "
                   "ratio %.0fx\n", hx_dtypes[dt].name, fn_names[f], worst1, worst2,
                   sum_e2 > 0 ? sum_e1 / sum_e2 : INFINITY);
            if (!(sum_e1 > 0.0 && sum_e1 >= 10.0 * sum_e2))
                CHECK_FAIL("%s %s: total error one term %.3g, two terms %.3g: the second term "
                           "does not help 10x", hx_dtypes[dt].name, fn_names[f], sum_e1, sum_e2);
            free(y1);
            free(y2);
        }
        free(row);
        free(p.data);
        free((void *)w.data);
    }
    free_acts(&a);
    return 0;
}

static const check_case cases[] = {
    { "packing_keeps_every_value", test_packing_keeps_every_value },
    { "pack_supported_formats_and_lengths", test_pack_supported_formats_and_lengths },
    { "act_sums_equal_scaled_code_sums", test_act_sums_equal_scaled_code_sums },
    { "pmatmul_ref_matches_definition", test_pmatmul_ref_matches_definition },
    { "pmatmul_avx512vnni_matches_reference", test_pmatmul_avx512vnni_matches_reference },
    { "pmatmul_avx2_matches_reference", test_pmatmul_avx2_matches_reference },
    { "k_quant_sums_exact_at_their_bounds", test_k_quant_sums_exact_at_their_bounds },
    { "pmatmul_select_best_kernel", test_pmatmul_select_best_kernel },
    { "two_term_near_f32_and_beats_one_term", test_two_term_near_f32_and_beats_one_term },
};
CHECK_MAIN(cases)
