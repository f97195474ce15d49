/* test_sha256.c - SHA-256 against the FIPS 180-4 examples and digests computed with Python's
 * hashlib, and the streaming interface against the one-shot one for every way of cutting. */
#include <stdlib.h>

#include "base/sha256.h"
#include "check.h"

static int hex_of(const void *data, size_t n, const char *want)
{
    char got[HX_SHA256_HEX];
    hx_sha256_hex(data, n, got);
    CHECK_STR(got, want);
    return 0;
}

static int test_fips_examples(void)
{
    if (hex_of("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") ||
        hex_of("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        return 1;
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmno"
                       "pqklmnopqrlmnopqrsmnopqrstnopqrstu";
    if (hex_of(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") ||
        hex_of(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"))
        return 1;
    return 0;
}

static int test_a_million_a(void)
{
    hx_sha256 s;
    char chunk[1000], got[HX_SHA256_HEX];
    memset(chunk, 'a', sizeof chunk);
    hx_sha256_init(&s);
    for (int i = 0; i < 1000; i++) hx_sha256_update(&s, chunk, sizeof chunk);
    hx_sha256_final_hex(&s, got);
    CHECK_STR(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    return 0;
}

/* data[i] = (i * 131 + 7) mod 256; digests from hashlib.sha256, at every padding boundary. */
static const struct { int n; const char *hex; } python_digests[] = {
    {      1, "ca358758f6d27e6cf45272937977a748fd88391db679ceda7dc7bf1f005ee879" },
    {     55, "16ed9c4697ca11d5f6fb25ea7900252dd4cb97215d7f6d0b2bb3e2a86ac0ec72" },
    {     56, "939ada93b2fe1e9c596d767bb408567c83e253667f0b25e5be8e16f35f2cbac9" },
    {     57, "ab84281f3b181e6cfc7cf870c7f3e7912be6fd1ac49c7dd6b21f6c25bb9a5eaa" },
    {     63, "6073f83b09ae82016cdbe24c18996c48f0eaa08ca675d0f6b90b807fc29e0149" },
    {     64, "b337ba9b0c69c391364e985fdcb23a889887e59800832c92fbfa22b8a3c40304" },
    {     65, "9d6a3fb113b586b4ab97bc11c993a27bd9b7bbcb756e0646083dc47a679600e6" },
    {    119, "9773fbac8194c3d789af101b49b6a26073076895ef6e0f658432849dd477a43f" },
    {    120, "070a538f085dd94821d4dc197c5c8b791051891d4fa2a1bf25d3c275236676f7" },
    {    127, "5072b7a9a4cda7f6d80f1eff09b8b9653201dba22319daf32c6c05339d57f483" },
    {    128, "485a94e53eba9717a5d8b7b4489cad92a752f1c5722e7dfd29dd164b7c438d11" },
    {    129, "72b63785704123441e7405a2620b859d1f107604ef5882e2674e82cc40d173a6" },
    {   1000, "533b698850849b7908b20a22658f639c0b2a476f1791f85f50188287c31a9aba" },
    {   4097, "265eb02ffd0a68c82b2c2280e8dbb61681034b21c3386c29cc046215d0fd0fa4" },
    { 100003, "bbfad4f95f90d384d555f3df407b8abd654b51131434e1bdca5cda29038f40d1" },
};

static unsigned char *pattern(int n)
{
    unsigned char *d = malloc((size_t)n + 1);
    for (int i = 0; d && i < n; i++) d[i] = (unsigned char)((i * 131 + 7) & 0xFF);
    return d;
}

static int test_matches_python_hashlib(void)
{
    for (size_t k = 0; k < sizeof python_digests / sizeof python_digests[0]; k++) {
        unsigned char *d = pattern(python_digests[k].n);
        int rc = hex_of(d, (size_t)python_digests[k].n, python_digests[k].hex);
        free(d);
        if (rc) CHECK_FAIL("length %d", python_digests[k].n);
    }
    return 0;
}

/* Two pieces cut anywhere, and runs of fixed-size pieces, give the one-shot digest. */
static int test_streaming_equals_one_shot(void)
{
    const int n = 300;
    unsigned char *d = pattern(n);
    char want[HX_SHA256_HEX], got[HX_SHA256_HEX];
    hx_sha256_hex(d, (size_t)n, want);
    for (int cut = 0; cut <= n; cut++) {
        hx_sha256 s;
        hx_sha256_init(&s);
        hx_sha256_update(&s, d, (size_t)cut);
        hx_sha256_update(&s, d + cut, (size_t)(n - cut));
        hx_sha256_final_hex(&s, got);
        if (strcmp(got, want) != 0) {
            free(d);
            CHECK_FAIL("cut at %d: %s vs %s", cut, got, want);
        }
    }
    static const int steps[] = { 1, 3, 7, 63, 64, 65, 128 };
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        hx_sha256 s;
        hx_sha256_init(&s);
        for (int off = 0; off < n; off += steps[k])
            hx_sha256_update(&s, d + off, (size_t)(n - off < steps[k] ? n - off : steps[k]));
        hx_sha256_final_hex(&s, got);
        if (strcmp(got, want) != 0) {
            free(d);
            CHECK_FAIL("pieces of %d: %s vs %s", steps[k], got, want);
        }
    }
    free(d);
    return 0;
}

static int test_raw_digest_matches_hex(void)
{
    hx_sha256 s;
    uint8_t raw[HX_SHA256_BYTES];
    hx_sha256_init(&s);
    hx_sha256_update(&s, "abc", 3);
    hx_sha256_final(&s, raw);
    CHECK_EQ(raw[0], 0xba);
    CHECK_EQ(raw[31], 0xad);
    return 0;
}

static const check_case cases[] = {
    { "fips_examples", test_fips_examples },
    { "a_million_a", test_a_million_a },
    { "matches_python_hashlib", test_matches_python_hashlib },
    { "streaming_equals_one_shot", test_streaming_equals_one_shot },
    { "raw_digest_matches_hex", test_raw_digest_matches_hex },
};
CHECK_MAIN(cases)
