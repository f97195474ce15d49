/* test_response_store.c - the Responses API's store of responses (src/serve/response_store.h).
 *
 * Storing, reading back and deleting; the byte cap evicting the least recently used entries
 * first (and a read counting as a use); expiry after ttl_ms unused, on a clock the test drives;
 * an entry larger than the cap refused without disturbing the others; and two threads storing,
 * reading and deleting at once while the cap keeps evicting, with the accounting intact after. */
#include <jansson.h>
#include <pthread.h>

#include "base/alloc.h"
#include "check.h"
#include "serve/response_store.h"

/* ---- helpers ---- */

/* A response object of about `pad` bytes and a one-message conversation naming id. */
static void make_entry(const char *id, size_t pad, json_t **resp, json_t **conv)
{
    char *fill = hx_alloc(pad + 1);
    memset(fill, 'x', pad);
    fill[pad] = '\0';
    *resp = json_pack("{s:s, s:s, s:s}", "id", id, "object", "response", "pad", fill);
    *conv = json_pack("[{s:s, s:s}]", "role", "user", "content", id);
    hx_free(fill);
}

static hx_status put(hx_response_store *rs, const char *id, size_t pad, double now_ms)
{
    json_t *r, *c;
    make_entry(id, pad, &r, &c);
    hx_err err = {0};
    const hx_status st = hx_response_store_put(rs, id, r, c, now_ms, &err);
    json_decref(r);
    json_decref(c);
    return st;
}

static bool has(hx_response_store *rs, const char *id, double now_ms)
{
    return hx_response_store_get(rs, id, now_ms, NULL, NULL) == HX_OK;
}

static hx_response_store *store(size_t max_bytes, double ttl_ms)
{
    hx_response_store *rs = NULL;
    hx_err err = {0};
    return hx_response_store_init(max_bytes, ttl_ms, &rs, &err) == HX_OK ? rs : NULL;
}

/* ---- cases ---- */

static int test_put_get_delete_round_trip(void)
{
    hx_response_store *rs = store(1 << 20, 1000);
    CHECK(rs);
    json_t *r = json_pack("{s:s, s:[{s:s, s:s}], s:f}", "id", "resp_1", "output", "type",
                          "message", "text", "caf\xC3\xA9 \\u0000", "temperature", 0.5);
    json_t *c = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "user", "content", "hi", "role",
                          "assistant", "content", "hello");
    json_object_set_new(r, "nul", json_stringn("a\0b", 3));
    hx_err err = {0};
    CHECK_EQ(hx_response_store_put(rs, "resp_1", r, c, 0, &err), HX_OK);

    json_t *r2 = NULL, *c2 = NULL;
    CHECK_EQ(hx_response_store_get(rs, "resp_1", 10, &r2, &c2), HX_OK);
    CHECK(json_equal(r, r2));
    CHECK(json_equal(c, c2));
    CHECK(r2 != r && c2 != c);                /* fresh objects, not the stored ones */
    json_object_set_new(r2, "changed", json_true()); /* changing them changes nothing stored */
    json_t *r3 = NULL;
    CHECK_EQ(hx_response_store_get(rs, "resp_1", 20, &r3, NULL), HX_OK);
    CHECK(json_equal(r, r3));

    CHECK_EQ(hx_response_store_get(rs, "resp_2", 20, &r3, NULL), HX_E_NOTFOUND);
    CHECK_EQ(hx_response_store_delete(rs, "resp_2", 20), HX_E_NOTFOUND);
    CHECK_EQ(hx_response_store_delete(rs, "resp_1", 20), HX_OK);
    CHECK_EQ(hx_response_store_delete(rs, "resp_1", 20), HX_E_NOTFOUND);
    CHECK(!has(rs, "resp_1", 30));
    size_t n = 9, bytes = 9;
    hx_response_store_usage(rs, &n, &bytes);
    CHECK_EQ(n, 0);
    CHECK_EQ(bytes, 0);

    json_decref(r);
    json_decref(c);
    json_decref(r2);
    json_decref(c2);
    json_decref(r3);
    hx_response_store_free(rs);
    return 0;
}

static int test_put_replaces_an_entry_of_the_same_id(void)
{
    hx_response_store *rs = store(1 << 20, 1000);
    CHECK(rs);
    CHECK_EQ(put(rs, "a", 100, 0), HX_OK);
    size_t n = 0, small = 0, big = 0;
    hx_response_store_usage(rs, &n, &small);
    CHECK_EQ(put(rs, "a", 500, 1), HX_OK);
    hx_response_store_usage(rs, &n, &big);
    CHECK_EQ(n, 1);
    CHECK_EQ(big - small, 400);
    json_t *r = NULL;
    CHECK_EQ(hx_response_store_get(rs, "a", 2, &r, NULL), HX_OK);
    CHECK_EQ(strlen(json_string_value(json_object_get(r, "pad"))), 500);
    json_decref(r);
    hx_response_store_free(rs);
    return 0;
}

static int test_byte_cap_evicts_least_recently_used_first(void)
{
    /* Measure one entry, then allow room for exactly three. */
    hx_response_store *probe = store(1 << 20, 1000);
    CHECK(probe);
    CHECK_EQ(put(probe, "e0", 1000, 0), HX_OK);
    size_t one = 0;
    hx_response_store_usage(probe, NULL, &one);
    hx_response_store_free(probe);

    hx_response_store *rs = store(3 * one, 1e9);
    CHECK(rs);
    CHECK_EQ(put(rs, "e0", 1000, 0), HX_OK);
    CHECK_EQ(put(rs, "e1", 1000, 1), HX_OK);
    CHECK_EQ(put(rs, "e2", 1000, 2), HX_OK);
    CHECK(has(rs, "e0", 3)); /* e0 is now the most recently used; e1 the least */
    CHECK_EQ(put(rs, "e3", 1000, 4), HX_OK);
    CHECK(!has(rs, "e1", 5));
    CHECK(has(rs, "e0", 5) && has(rs, "e2", 5) && has(rs, "e3", 5));
    size_t n = 0, bytes = 0;
    hx_response_store_usage(rs, &n, &bytes);
    CHECK_EQ(n, 3);
    CHECK(bytes <= 3 * one);

    /* A bigger entry pushes out as many of the oldest as it needs. */
    CHECK_EQ(put(rs, "big", 2500, 6), HX_OK);
    hx_response_store_usage(rs, &n, &bytes);
    CHECK_EQ(n, 1);
    CHECK(has(rs, "big", 7));
    CHECK(bytes <= 3 * one);
    hx_response_store_free(rs);
    return 0;
}

static int test_entries_expire_after_ttl_unused(void)
{
    hx_response_store *rs = store(1 << 20, 1000);
    CHECK(rs);
    CHECK_EQ(put(rs, "old", 10, 0), HX_OK);
    CHECK_EQ(put(rs, "kept", 10, 0), HX_OK);
    CHECK(has(rs, "kept", 900));  /* a read is a use: kept lives until 1900 */
    CHECK(!has(rs, "old", 1000)); /* 1000 ms unused: gone */
    CHECK_EQ(hx_response_store_delete(rs, "old", 1000), HX_E_NOTFOUND);
    CHECK(has(rs, "kept", 1899));
    CHECK(!has(rs, "kept", 2899));
    size_t n = 9;
    hx_response_store_usage(rs, &n, NULL);
    CHECK_EQ(n, 0);

    /* Storing sweeps what expired even if nobody asks for it again. */
    CHECK_EQ(put(rs, "a", 10, 5000), HX_OK);
    CHECK_EQ(put(rs, "b", 10, 7000), HX_OK);
    hx_response_store_usage(rs, &n, NULL);
    CHECK_EQ(n, 1);
    hx_response_store_free(rs);
    return 0;
}

static int test_oversize_entry_is_refused_and_others_stay(void)
{
    hx_response_store *rs = store(4096, 1000);
    CHECK(rs);
    CHECK_EQ(put(rs, "small", 100, 0), HX_OK);
    json_t *r, *c;
    make_entry("huge", 8192, &r, &c);
    hx_err err = {0};
    CHECK_EQ(hx_response_store_put(rs, "huge", r, c, 1, &err), HX_E_INVALID);
    CHECK_CONTAINS(err.msg, "huge");
    CHECK_CONTAINS(err.msg, "4096");
    json_decref(r);
    json_decref(c);
    CHECK(!has(rs, "huge", 2));
    CHECK(has(rs, "small", 2));
    hx_response_store_free(rs);
    return 0;
}

static int test_zero_bounds_are_invalid(void)
{
    hx_response_store *rs = NULL;
    hx_err err = {0};
    CHECK_EQ(hx_response_store_init(0, 1000, &rs, &err), HX_E_INVALID);
    CHECK(rs == NULL);
    CHECK_EQ(hx_response_store_init(1024, 0, &rs, &err), HX_E_INVALID);
    hx_response_store_free(NULL);
    return 0;
}

/* ---- threads ---- */

#define N_OPS 4000

typedef struct {
    hx_response_store *rs;
    int                tag;
    int                failures; /* results no interleaving can explain */
} worker;

/* Stores, reads back and deletes its own ids while the other thread does the same; the cap
 * holds a few dozen entries, so both keep evicting each other's. */
static void *work(void *arg)
{
    worker *w = arg;
    char id[32];
    for (int i = 0; i < N_OPS; i++) {
        snprintf(id, sizeof id, "t%d_%d", w->tag, i % 97);
        if (put(w->rs, id, 200 + (size_t)(i % 7) * 50, (double)i) != HX_OK) w->failures++;
        json_t *r = NULL, *c = NULL;
        const hx_status st = hx_response_store_get(w->rs, id, (double)i, &r, &c);
        if (st == HX_OK && strcmp(json_string_value(json_object_get(r, "id")), id) != 0)
            w->failures++;
        if (st != HX_OK && st != HX_E_NOTFOUND) w->failures++;
        json_decref(r);
        json_decref(c);
        if (i % 5 == 0) hx_response_store_delete(w->rs, id, (double)i);
    }
    return NULL;
}

static int test_two_threads_share_the_store(void)
{
    hx_response_store *rs = store(16 * 1024, 1e9);
    CHECK(rs);
    worker w[2] = {{rs, 0, 0}, {rs, 1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK_EQ(w[0].failures, 0);
    CHECK_EQ(w[1].failures, 0);
    size_t n = 0, bytes = 0;
    hx_response_store_usage(rs, &n, &bytes);
    CHECK(n > 0 && bytes <= 16 * 1024);
    /* Deleting every id left must bring the accounting back to zero exactly. */
    char id[32];
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 97; k++) {
            snprintf(id, sizeof id, "t%d_%d", t, k);
            hx_response_store_delete(rs, id, N_OPS);
        }
    hx_response_store_usage(rs, &n, &bytes);
    CHECK_EQ(n, 0);
    CHECK_EQ(bytes, 0);
    hx_response_store_free(rs);
    return 0;
}

static const check_case cases[] = {
    { "put_get_delete_round_trip", test_put_get_delete_round_trip },
    { "put_replaces_an_entry_of_the_same_id", test_put_replaces_an_entry_of_the_same_id },
    { "byte_cap_evicts_least_recently_used_first", test_byte_cap_evicts_least_recently_used_first },
    { "entries_expire_after_ttl_unused", test_entries_expire_after_ttl_unused },
    { "oversize_entry_is_refused_and_others_stay", test_oversize_entry_is_refused_and_others_stay },
    { "zero_bounds_are_invalid", test_zero_bounds_are_invalid },
    { "two_threads_share_the_store", test_two_threads_share_the_store },
};
CHECK_MAIN(cases)
