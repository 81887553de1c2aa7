/* ctrain/kube_informer.h - list+watch into a local cache, as client-go's
 * shared informer does it.
 *
 * A background thread lists (in pages), fills the cache, then watches from
 * the list's resourceVersion; on 410 Gone, or when the watch fails for
 * good, it lists again. Every list, the first included, is an atomic
 * replace (client-go's Replace): its pages go into a new cache off to the
 * side, and only once the whole list arrived does that cache (and its
 * index) replace the live one, at once; readers see the old cache or the
 * new one, never part of a list. A list that fails part way (a page's
 * error, an expired continue token) leaves the live cache as it was, tells
 * the handlers nothing, and is tried again. After the replace the handlers
 * get the difference, once per key, in list order: on_add for keys new,
 * on_update(old, new) for keys whose resourceVersion changed, nothing for
 * the unchanged (a watch that never broke would have said nothing; the
 * resync re-delivers them), then on_delete with the last state seen for
 * keys the list lacks (client-go's DeletedFinalStateUnknown). Synced is set
 * after the first list's adds were delivered. The cache is indexed by
 * "namespace/name" and by owner (metadata.ownerReferences[]: by uid, and by
 * namespace and name).
 * Handlers run one at a time (never concurrently with each other), on
 * informer threads, after the cache reflects the change. An optional
 * resync period re-delivers every cached object to on_update(old == new),
 * for level-triggered controllers.
 *
 * Memory: the cache holds each object as its compact JSON text (after the
 * optional transform prunes it), about a quarter of a cJSON tree of it;
 * every read parses a fresh copy for the caller. A list holds one page as
 * text (page_size objects as the apiserver sends them, the client's body
 * cap) and one item of it as a tree at a time, never the page's tree; a
 * relist holds, besides the live cache, the text of each object that
 * changed: an unchanged one's text moves from the old cache to the new at
 * the replace. So a relist in which every object changed holds two texts
 * of each until the replace (client-go's holds two objects); one in which
 * none did, one. */
#ifndef CTRAIN_KUBE_INFORMER_H
#define CTRAIN_KUBE_INFORMER_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_watch.h"

/* Objects passed to handlers are borrowed for the call only; copy
 * (cJSON_Duplicate) what must outlive it. Any handler may be NULL. */
typedef struct kube_informer_handlers {
  void (*on_add)(void *ud, const cJSON *obj);
  void (*on_update)(void *ud, const cJSON *old_obj, const cJSON *new_obj);
  void (*on_delete)(void *ud, const cJSON *last_obj);
  void *ud;
} kube_informer_handlers;

/* An optional transform (client-go's SetTransform): called on the informer
 * thread with every object before it is cached or handed to a handler
 * (list items, watch ADDED/MODIFIED/DELETED objects), once per object. It
 * prunes `obj` in place to what the program reads, so the cache (and every
 * copy made from it) holds only that. It must keep metadata.name,
 * metadata.namespace and metadata.resourceVersion (the cache's key and its
 * "nothing changed" test) and metadata.ownerReferences[].uid (the owner
 * index) when the program uses them. */
typedef void (*kube_informer_transform_fn)(void *ud, cJSON *obj);

typedef struct kube_informer_opts {
  const kube_gvr *gvr;        /* borrowed, must outlive the informer */
  const char *ns;             /* NULL or "": all namespaces; copied */
  const char *label_selector; /* copied */
  const char *field_selector; /* copied */
  long resync_ms;             /* 0: no resync */
  long page_size;             /* list page; default 500 */
  long watch_timeout_s;       /* per watch connection; default 300 */
  kube_informer_handlers handlers;
  kube_informer_transform_fn transform; /* NULL: objects are cached whole */
  void *transform_ud;
} kube_informer_opts;

typedef struct kube_informer kube_informer;

/* `c` borrowed, must outlive the informer. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err kube_informer_new(kube_client *c, const kube_informer_opts *o,
                                              kube_informer **out);

/* Starts the list/watch (and resync) threads. Once only. */
CTRAIN_NODISCARD ctrain_err kube_informer_start(kube_informer *inf);

/* Stops and joins the threads; no handler runs after it returns.
 * Idempotent. */
void kube_informer_stop(kube_informer *inf);

/* 1 once the first list is in the cache. */
int kube_informer_has_synced(kube_informer *inf);

/* Waits (monotonic) until synced: CTRAIN_OK, or CTRAIN_E_TIMEOUT. */
CTRAIN_NODISCARD ctrain_err kube_informer_wait_synced(kube_informer *inf, long timeout_ms);

/* A copy of the cached object (owned by the caller, cJSON_Delete), or NULL.
 * ns NULL/"" for cluster-scoped objects. */
cJSON *kube_informer_get(kube_informer *inf, const char *ns, const char *name);

/* A new JSON array (owned by the caller) of copies of the cached objects:
 * all of them (ns NULL) or one namespace's. */
CTRAIN_NODISCARD ctrain_err kube_informer_list(kube_informer *inf, const char *ns, cJSON **out);

/* Calls fn(ud, obj) for each cached object (all of them, ns NULL, or one
 * namespace's), obj a copy parsed for the call and freed after it; stops
 * when fn returns nonzero. One object is parsed at a time, so a scan of a
 * large cache costs one object's tree, not the cache's (kube_informer_list).
 * fn runs under the informer's lock: it must not call into this informer.
 * CTRAIN_E_NOMEM when an object could not be parsed (the rest is skipped). */
CTRAIN_NODISCARD ctrain_err kube_informer_each(kube_informer *inf, const char *ns,
                                               int (*fn)(void *ud, const cJSON *obj), void *ud);

/* Same, for objects with an ownerReference to `owner_uid` (from the index). */
CTRAIN_NODISCARD ctrain_err kube_informer_by_owner(kube_informer *inf, const char *owner_uid,
                                                   cJSON **out);

/* Same, for the objects of namespace `ns` with an ownerReference that
 * names `owner_name` (of any kind, any uid: the caller decides which of
 * them are whose, e.g. a job's and an earlier job's of the same name). */
CTRAIN_NODISCARD ctrain_err kube_informer_by_owner_name(kube_informer *inf, const char *ns,
                                                        const char *owner_name, cJSON **out);

size_t kube_informer_len(kube_informer *inf);

/* Counters (thread-safe): lists done, watch events applied (ADDED,
 * MODIFIED, DELETED), resyncs; and the watch events received, by type
 * (events_by_type[KUBE_WATCH_ADDED] .. [KUBE_WATCH_BOOKMARK]; ERROR events
 * end the watch inside kube_watch and are not counted). */
typedef struct kube_informer_stats {
  long lists;
  long events;
  long resyncs;
  long events_by_type[KUBE_WATCH_BOOKMARK + 1];
} kube_informer_stats;
void kube_informer_get_stats(kube_informer *inf, kube_informer_stats *out);

/* Stops if running, then frees. Accepts NULL. */
void kube_informer_free(kube_informer *inf);

/* "namespace/name" or "name" of obj into buf; CTRAIN_E_INVAL without a name. */
CTRAIN_NODISCARD ctrain_err kube_informer_key(const cJSON *obj, char *buf, size_t cap);

/* Prunes obj in place to the fields `paths` name (n of them; dotted, e.g.
 * "metadata.labels", "status.containerStatuses.state"): a path keeps the
 * whole subtree it ends at; an array met on the way applies the rest of the
 * path to each of its elements. Every other field is removed. A transform's
 * building block. `paths` borrowed. */
void kube_informer_keep_fields(cJSON *obj, const char *const *paths, size_t n);

#endif
