/* dequant.c - hx-dequant: dequantize one row read from stdin, for parity tests against gguf-py
 * and mlx (tests/integration/test_dequant_parity.py).
 *
 *   hx-dequant DTYPE N [GROUP SB_DTYPE]
 *
 * stdin holds exactly one row of N elements of DTYPE (any name of hx_dtypes[], any case):
 *   block formats: hx_dtype_row_bytes(DTYPE, N) bytes, the blocks as stored in a GGUF file;
 *   mlx4 / mlx8:   the N/2 or N bytes of packed little-endian uint32 words, then N/GROUP scales,
 *                  then N/GROUP biases, both in SB_DTYPE (f16, bf16 or f32), little-endian.
 * stdout gets N little-endian float32, made by hx_tensor_dequant_row on a [1, N] tensor, so
 * the test covers the path the engine uses (dispatched converters included). Errors go to
 * stderr with exit status 1. A test tool: it exits on bad input, which library code never does. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

static _Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hx-dequant: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static long long parse_count(const char *s, const char *what)
{
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v <= 0)
        die("%s must be a positive integer, got \"%s\"", what, s);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5)
        die("usage: hx-dequant DTYPE N [GROUP SB_DTYPE]  (row bytes on stdin, f32 on stdout)");
    const int dt = hx_dtype_from_name(argv[1]);
    if (dt < 0) die("unknown dtype \"%s\"", argv[1]);
    const int64_t n = parse_count(argv[2], "N");
    const int mlx = dt == HX_DT_MLX4 || dt == HX_DT_MLX8;
    if (mlx != (argc == 5))
        die(mlx ? "%s needs GROUP and SB_DTYPE" : "%s takes no GROUP or SB_DTYPE", argv[1]);

    const size_t row_bytes = hx_dtype_row_bytes((hx_dtype)dt, n);
    if (row_bytes == 0)
        die("N = %lld is not a multiple of %s's block of %d elements", (long long)n, argv[1],
            hx_dtypes[dt].block_n);

    hx_tensor t = { .dtype = (hx_dtype)dt, .n_dims = 2, .shape = { 1, n }, .n_bytes = row_bytes };
    size_t sb_bytes = 0; /* of the scales, and again of the biases */
    if (mlx) {
        const long long group = parse_count(argv[3], "GROUP");
        if (group != 32 && group != 64 && group != 128)
            die("GROUP must be 32, 64 or 128, got %lld", group);
        if (n % group != 0) die("N = %lld is not a multiple of GROUP = %lld", (long long)n, group);
        const int sb = hx_dtype_from_name(argv[4]);
        if (sb != HX_DT_F16 && sb != HX_DT_BF16 && sb != HX_DT_F32)
            die("SB_DTYPE must be f16, bf16 or f32, got \"%s\"", argv[4]);
        t.group_size = (int32_t)group;
        t.sb_dtype = (hx_dtype)sb;
        sb_bytes = hx_dtype_row_bytes((hx_dtype)sb, n / group);
    }

    /* Read one byte more than needed, to tell a too-long input from an exact one. */
    const size_t want = row_bytes + 2 * sb_bytes;
    unsigned char *in = hx_alloc(want + 1);
    float *out = hx_alloc((size_t)n * sizeof(float));
    unsigned char *le = hx_alloc((size_t)n * 4);
    if (!in || !out || !le) die("out of memory for N = %lld", (long long)n);
    size_t got = 0, r;
    while (got < want + 1 && (r = fread(in + got, 1, want + 1 - got, stdin)) > 0) got += r;
    if (ferror(stdin)) die("reading stdin: %s", strerror(errno));
    if (got != want)
        die("expected exactly %zu bytes on stdin for %s N=%lld, got %s%zu", want, argv[1],
            (long long)n, got > want ? "more than " : "", got > want ? want : got);

    t.data = in;
    if (mlx) {
        t.scales = in + row_bytes;
        t.biases = in + row_bytes + sb_bytes;
    }
    hx_tensor_dequant_row(&t, 0, out);

    for (int64_t i = 0; i < n; i++) { /* little-endian whatever the host */
        const uint32_t u = hx_f32_to_bits(out[i]);
        for (int k = 0; k < 4; k++) le[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    if (fwrite(le, 1, (size_t)n * 4, stdout) != (size_t)n * 4 || fflush(stdout) != 0)
        die("writing stdout: %s", strerror(errno));
    hx_free(le);
    hx_free(out);
    hx_free(in);
    return 0;
}
