/* response_store.h - the Responses API's memory: stored responses by id, for GET /v1/responses/<id>
 * and for continuing a conversation with previous_response_id.
 *
 * An entry holds two JSON texts: the response object as the API returned it, and the
 * conversation it ended (the chat-shaped messages the reply was generated from plus the reply
 * itself as an assistant message), which a follow-up request prepends to its own input. Both are
 * kept serialized, so the byte accounting is exact and a reader gets its own fresh objects that
 * no other thread touches.
 *
 * Bounds: the entries' bytes stay within a cap (the least recently used go first), and an entry
 * not used (stored or read) for ttl_ms expires. Time is passed in by the caller (hx_now_ms(), or
 * a test's own clock), so expiry is deterministic under test.
 *
 * Thread-safety: every function may be called from any thread; one mutex guards the store. */
#ifndef HX_SERVE_RESPONSE_STORE_H
#define HX_SERVE_RESPONSE_STORE_H
#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

#define HX_RESPONSE_STORE_MAX_BYTES ((size_t)64 << 20) /* the server's cap: 64 MiB */
#define HX_RESPONSE_STORE_TTL_MS    (3600.0 * 1000.0)   /* the server's expiry: an hour unused */

typedef struct hx_response_store hx_response_store;

/* A new empty store in *out (free with hx_response_store_free) holding at most max_bytes (> 0)
 * of entries, each for ttl_ms (> 0) after its last use. HX_E_INVALID for a zero bound,
 * HX_E_NOMEM. */
hx_status hx_response_store_init(size_t max_bytes, double ttl_ms, hx_response_store **out,
                                 hx_err *err);
void      hx_response_store_free(hx_response_store *rs); /* NULL: no-op */

/* Stores response (an object) and conversation (an array) under id (all borrowed: serialized
 * here), replacing an entry of the same id, then drops expired entries and, least recently used
 * first, as many as needed to get back under the cap. now_ms is the current time on the clock
 * the caller always uses. HX_E_INVALID when the entry alone is larger than the cap (nothing is
 * stored and nothing evicted; an older entry of that id is removed, as it is stale), HX_E_NOMEM. */
hx_status hx_response_store_put(hx_response_store *rs, const char *id, json_t *response,
                                json_t *conversation, double now_ms, hx_err *err);

/* The entry of id, unless absent or expired: *response and *conversation (either may be NULL
 * when not wanted) receive new objects the caller owns, and the entry counts as used at now_ms.
 * HX_E_NOTFOUND (outputs untouched), HX_E_NOMEM. */
hx_status hx_response_store_get(hx_response_store *rs, const char *id, double now_ms,
                                json_t **response, json_t **conversation);

/* Removes the entry of id. HX_E_NOTFOUND when it is absent or expired. */
hx_status hx_response_store_delete(hx_response_store *rs, const char *id, double now_ms);

/* How many entries the store holds and their bytes (the texts, ids and bookkeeping), expired
 * ones not yet dropped included. Either pointer may be NULL. */
void hx_response_store_usage(hx_response_store *rs, size_t *n_entries, size_t *n_bytes);

#endif
