/* ctrain/kube_strmap.h - a string-keyed hash map (separate chaining, FNV-1a),
 * the index under the informer cache and the work queue's sets.
 *
 * Keys are copied; values are borrowed pointers the caller manages. Not
 * thread-safe: the owner locks around it. */
#ifndef CTRAIN_KUBE_STRMAP_H
#define CTRAIN_KUBE_STRMAP_H

#include <stddef.h>

#include "ctrain/err.h"

typedef struct kube_strmap kube_strmap;

/* *out owned by the caller (kube_strmap_free). */
ctrain_err kube_strmap_new(kube_strmap **out);

/* Frees the map and its key copies; calls free_val on each value when
 * non-NULL. Accepts NULL. */
void kube_strmap_free(kube_strmap *m, void (*free_val)(void *));

/* The value for key (borrowed) or NULL. */
void *kube_strmap_get(const kube_strmap *m, const char *key);
int kube_strmap_has(const kube_strmap *m, const char *key);

/* Sets key -> val. The previous value, if any, goes to *old (when old is
 * non-NULL) and is no longer referenced by the map. */
ctrain_err kube_strmap_put(kube_strmap *m, const char *key, void *val, void **old);

/* Removes key; returns its value (or NULL). *found (optional) says whether
 * it was there, for maps that store NULL values. */
void *kube_strmap_del(kube_strmap *m, const char *key, int *found);

size_t kube_strmap_len(const kube_strmap *m);

/* Calls fn for each entry in unspecified order; a non-zero return stops.
 * fn must not modify the map. */
typedef int (*kube_strmap_fn)(void *ud, const char *key, void *val);
void kube_strmap_each(const kube_strmap *m, kube_strmap_fn fn, void *ud);

#endif
