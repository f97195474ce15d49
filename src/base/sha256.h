/* sha256.h - SHA-256 (FIPS 180-4) with a streaming interface.
 *
 * Used to verify downloaded files against the sha256 the Hugging Face hub gives as the ETag of
 * large (LFS) files. Owns nothing: the state is a plain struct the caller keeps. Not a
 * constant-time implementation and not meant for secrets; it checks file integrity. */
#ifndef HX_BASE_SHA256_H
#define HX_BASE_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];    /* chaining state */
    uint64_t n_bytes; /* message bytes fed so far */
    uint8_t  buf[64]; /* a partial block */
    uint32_t n_buf;   /* bytes held in buf, < 64 */
} hx_sha256;

#define HX_SHA256_BYTES 32
#define HX_SHA256_HEX   65 /* 64 hex digits and the NUL */

void hx_sha256_init(hx_sha256 *s);
/* Feeds n bytes (any n, any number of calls). */
void hx_sha256_update(hx_sha256 *s, const void *data, size_t n);
/* Writes the 32-byte digest; s must be initialised again before reuse. */
void hx_sha256_final(hx_sha256 *s, uint8_t out[HX_SHA256_BYTES]);
/* Writes the digest as 64 lowercase hex digits and a NUL. */
void hx_sha256_final_hex(hx_sha256 *s, char out[HX_SHA256_HEX]);

/* One-shot convenience: the hex digest of a buffer. */
void hx_sha256_hex(const void *data, size_t n, char out[HX_SHA256_HEX]);

#endif
