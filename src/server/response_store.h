/*
 * response_store.h — the Responses API's stored responses (`store: true`),
 * for previous_response_id and GET / DELETE /v1/responses/{id}: an in-memory
 * map from a response id to two JSON texts, the conversation's input items up
 * to that response and the response object (whose output continues them).
 * The texts are opaque here; api_responses.c says what they hold.
 *
 *   id ──FNV-1a──▶ bucket ──▶ entry ──▶ entry          (hash chains)
 *   oldest ◀──▶ entry ◀──▶ entry ◀──▶ ... ◀──▶ newest  (insertion order: eviction from the oldest)
 *
 * Bounded by a number of entries and a number of bytes (an entry counts its
 * id, both texts and a fixed overhead): a put evicts the oldest entries until
 * both bounds hold again; an entry larger than the byte bound on its own is
 * not stored.  A get does not make an entry younger (oldest first, as the
 * flag's documentation says; a conversation's newest response is the newest
 * entry anyway).
 *
 * Thread-safe: one mutex around every call (connection threads look up and
 * delete, the engine thread's on_done stores).  get copies the texts out, so
 * an entry evicted or deleted meanwhile never dangles.
 */
#ifndef DJ_SERVER_RESPONSE_STORE_H
#define DJ_SERVER_RESPONSE_STORE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

struct dj_response_store;

/* A store of at most max_entries entries and max_bytes bytes (0 for either: nothing is ever
 * stored; gets find nothing).  DJ_ERR_NOMEM. */
enum dj_status response_store_create(size_t max_entries, size_t max_bytes, struct dj_response_store **out);
void response_store_destroy(struct dj_response_store *s); /* accepts NULL */

/* Stores copies of id (NUL-terminated, non-empty), input[0..n_input) and response[0..n_response)
 * (either may hold NUL bytes; each is kept with a NUL after it), replacing an entry of the same id
 * (the new one is the newest), then evicts the oldest entries beyond the bounds.  Errors, with
 * nothing stored and nothing evicted: DJ_ERR_INVALID (empty id; the entry alone is over max_bytes,
 * or the store holds nothing), DJ_ERR_NOMEM. */
enum dj_status response_store_put(struct dj_response_store *s, const char *id, const char *input, size_t n_input,
                                  const char *response, size_t n_response);

/* Copies of the entry's texts: *input / *response malloc'd and NUL-terminated (the caller frees),
 * with their lengths; pass NULL for a text not wanted.  DJ_ERR_NOT_FOUND (never stored, deleted
 * or evicted; message "no stored response 'ID'"), DJ_ERR_NOMEM.  Out-params are set only on
 * success. */
enum dj_status response_store_get(struct dj_response_store *s, const char *id, char **input, size_t *n_input,
                                  char **response, size_t *n_response);

/* Removes the entry of id; false when there was none. */
bool response_store_delete(struct dj_response_store *s, const char *id);

/* Entries held, bytes they count, and entries evicted so far (for the start-up line and tests). */
void response_store_stats(struct dj_response_store *s, size_t *n_entries, size_t *n_bytes, size_t *n_evicted);

#endif
