/* ctrain/strmap.h - a string-keyed hash map (separate chaining, FNV-1a),
 * the index under the informer cache and the work queue's sets.
 *
 * Keys are copied; values are borrowed pointers the caller manages. Not
 * thread-safe: the owner locks around it. */
#ifndef CTRAIN_CTRAIN_STRMAP_H
#define CTRAIN_CTRAIN_STRMAP_H

#include <stddef.h>

#include "ctrain/err.h"

typedef struct ctrain_strmap ctrain_strmap;

/* *out owned by the caller (ctrain_strmap_free). */
CTRAIN_NODISCARD ctrain_err ctrain_strmap_new(ctrain_strmap **out);

/* Frees the map and its key copies; calls free_val on each value when
 * non-NULL. Accepts NULL. */
void ctrain_strmap_free(ctrain_strmap *m, void (*free_val)(void *));

/* The value for key (borrowed) or NULL. */
void *ctrain_strmap_get(const ctrain_strmap *m, const char *key);
int ctrain_strmap_has(const ctrain_strmap *m, const char *key);

/* Sets key -> val. The previous value, if any, goes to *old (when old is
 * non-NULL) and is no longer referenced by the map. */
CTRAIN_NODISCARD ctrain_err ctrain_strmap_put(ctrain_strmap *m, const char *key, void *val,
                                              void **old);

/* Removes key; returns its value (or NULL). *found (optional) says whether
 * it was there, for maps that store NULL values. */
void *ctrain_strmap_del(ctrain_strmap *m, const char *key, int *found);

size_t ctrain_strmap_len(const ctrain_strmap *m);

/* Calls fn for each entry in unspecified order; a non-zero return stops.
 * fn must not modify the map. */
typedef int (*ctrain_strmap_fn)(void *ud, const char *key, void *val);
void ctrain_strmap_each(const ctrain_strmap *m, ctrain_strmap_fn fn, void *ud);

#endif
