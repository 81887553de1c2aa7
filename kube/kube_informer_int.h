/* kube_informer_int.h - what the files of the informer share (private to
 * kube/; not installed): the informer itself, and the cache calls the
 * list/watch side builds on.
 *
 *   kube_informer.c        list (paged, an atomic replace), watch, resync,
 *                          the handlers, the threads, start/stop/free
 *   kube_informer_store.c  the cache and its owner index, the readers
 *                          (get, list, each, by owner, len), the
 *                          keep_fields transform helper */
#ifndef CTRAIN_KUBE_INFORMER_INT_H
#define CTRAIN_KUBE_INFORMER_INT_H

#include <pthread.h>

#include <cjson/cJSON.h>

#include "ctrain/kube_informer.h"
#include "ctrain/kube_watch.h"
#include "ctrain/strmap.h"

#define KEY_CAP 512

struct kube_informer {
  kube_client *c;
  kube_informer_opts o;
  char *ns, *label_selector, *field_selector;

  pthread_mutex_t mu;    /* guards everything below except dispatch */
  pthread_cond_t cv;     /* CLOCK_MONOTONIC: synced, stop */
  ctrain_strmap *items;  /* key -> the object as compact JSON text (owned char *) */
  ctrain_strmap *owners; /* owner uid -> ctrain_strmap* of keys */
  int synced, stopping, started;
  kube_watch *w; /* the watch in progress, to cancel */
  kube_informer_stats stats;

  pthread_mutex_t dispatch_mu; /* handlers run one at a time */
  pthread_t thread, resync_thread;
  int have_thread, have_resync;
};

/* Adds `key`, the key of `obj`, to (add nonzero) or removes it from the
 * owner index `owners` (the live one, mu held, or a relist's new one). */
void kube_informer_store_index_owners(ctrain_strmap *owners, const char *key, const cJSON *obj,
                                      int add);

/* A cached text parsed: a new tree (the caller's), or NULL (text NULL, or
 * out of memory). */
cJSON *kube_informer_store_parse_text(const char *text);

/* Puts (a text copy of) obj under key, the index updated; returns the
 * previous object, parsed (the caller's), or NULL. mu held. On NOMEM *err
 * is set and the cache is unchanged. */
cJSON *kube_informer_store_put(kube_informer *inf, const char *key, const cJSON *obj,
                               ctrain_err *err);

/* Removes key, the index updated; returns the object it held, parsed (the
 * caller's), or NULL (none, or out of memory). mu held. */
cJSON *kube_informer_store_del(kube_informer *inf, const char *key);

#endif
