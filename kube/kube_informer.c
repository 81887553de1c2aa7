/* kube_informer.c - list+watch cache with indexes and handlers; see
 * ctrain/kube_informer.h. The list, the watch, the resync and their
 * threads; the cache itself is kube_informer_store.c's
 * (kube_informer_int.h). */
#include "ctrain/clock.h"
#include "ctrain/kube_informer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/buf.h"
#include "ctrain/json.h"
#include "ctrain/kube_watch.h"
#include "ctrain/log.h"
#include "ctrain/strmap.h"
#include "ctrain/thread.h"
#include "kube_informer_int.h"
#include "kube_util.h"

#define BACKOFF_MIN_NS 500000000LL
#define BACKOFF_MAX_NS 30000000000LL

/* ------------------------------------------------------------------------ */

/* Keys of a map (each owned), except those in `skip` (optional). */
typedef struct {
  char **keys;
  size_t n, alloc;
  const ctrain_strmap *skip;
} key_list;

/* Appends a copy of key; nonzero: out of memory. */
static int key_push(key_list *k, const char *key) {
  if (ctrain_grow(&k->keys, &k->alloc, k->n + 1, sizeof(*k->keys), 64, 0))
    return 1;
  if (!(k->keys[k->n] = strdup(key)))
    return 1;
  k->n++;
  return 0;
}

static int collect_key(void *ud, const char *key, void *val) {
  key_list *k = ud;
  (void)val;
  if (k->skip && ctrain_strmap_has(k->skip, key))
    return 0;
  return key_push(k, key);
}

static void key_list_free(key_list *k) {
  for (size_t i = 0; i < k->n; i++)
    free(k->keys[i]);
  free(k->keys);
  memset(k, 0, sizeof(*k));
}

static const char *rv_of(const cJSON *obj) {
  return ctrain_json_str(ctrain_json_get(obj, "metadata"), "resourceVersion");
}

static void free_text(void *p) {
  cJSON_free(p);
}

static void free_set(void *p) {
  ctrain_strmap_free(p, NULL);
}

static void dispatch(kube_informer *inf, const cJSON *old, const cJSON *cur, int deleted) {
  kube_informer_handlers *h = &inf->o.handlers;
  ctrain_mutex_lock(&inf->dispatch_mu);
  if (deleted) {
    if (h->on_delete)
      h->on_delete(h->ud, old);
  } else if (old) {
    if (h->on_update)
      h->on_update(h->ud, old, cur);
  } else if (h->on_add) {
    h->on_add(h->ud, cur);
  }
  ctrain_mutex_unlock(&inf->dispatch_mu);
}

/* Applies one watch upsert (obj taken: transformed, cached as text, handed
 * to the handlers, freed) and tells the handlers. Informer thread only. */
static ctrain_err upsert(kube_informer *inf, cJSON *obj) {
  char key[KEY_CAP];
  if (inf->o.transform)
    inf->o.transform(inf->o.transform_ud, obj);
  ctrain_err result = kube_informer_key(obj, key, sizeof(key));
  if (result) {
    cJSON_Delete(obj);
    return CTRAIN_OK; /* an object without a name cannot be cached; skip it */
  }
  ctrain_mutex_lock(&inf->mu);
  cJSON *old = kube_informer_store_put(inf, key, obj, &result);
  ctrain_mutex_unlock(&inf->mu);
  if (result) {
    cJSON_Delete(obj);
    return result;
  }
  dispatch(inf, old, obj, 0);
  cJSON_Delete(old);
  cJSON_Delete(obj);
  return CTRAIN_OK;
}

static void remove_key(kube_informer *inf, const char *key) {
  ctrain_mutex_lock(&inf->mu);
  cJSON *old = kube_informer_store_del(inf, key);
  ctrain_mutex_unlock(&inf->mu);
  if (old) {
    dispatch(inf, old, NULL, 1);
    cJSON_Delete(old);
  }
}

/* ------------------------------------------------------------------------ */
/* List: an atomic replace (client-go's Replace) */

/* A relist's new cache, built off to the side while the live one serves
 * readers unchanged. items maps a key to its object's text (owned), or to
 * NULL when the text equals the live cache's: that text moves over at the
 * swap instead of being held twice, so the relist costs the live cache, the
 * page being read and the objects that changed. */
typedef struct {
  ctrain_strmap *items, *owners;
  key_list order; /* the keys in list order, for the handlers */
} next_cache;

static void next_cache_free(next_cache *n) {
  ctrain_strmap_free(n->items, free_text);
  ctrain_strmap_free(n->owners, free_set);
  key_list_free(&n->order);
  memset(n, 0, sizeof(*n));
}

/* Adds one list item (transformed here; borrowed) to the new cache. Reads
 * the live cache without mu: the informer thread, which this runs on, is
 * its only writer. */
static ctrain_err next_put(kube_informer *inf, next_cache *n, cJSON *item) {
  char key[KEY_CAP];
  if (inf->o.transform)
    inf->o.transform(inf->o.transform_ud, item);
  if (kube_informer_key(item, key, sizeof(key)))
    return CTRAIN_OK; /* an object without a name cannot be cached; skip it */
  if (ctrain_strmap_has(n->items, key))
    return CTRAIN_OK; /* a key twice in one list: the first one stands */
  char *text = cJSON_PrintUnformatted(item);
  if (!text)
    return CTRAIN_E_NOMEM;
  const char *live = ctrain_strmap_get(inf->items, key);
  if (live && !strcmp(live, text)) {
    cJSON_free(text);
    text = NULL; /* the live text moves over at the swap */
  }
  ctrain_err result = ctrain_strmap_put(n->items, key, text, NULL);
  if (result) {
    cJSON_free(text);
    return result;
  }
  if (key_push(&n->order, key))
    return CTRAIN_E_NOMEM; /* n->items has the key: next_cache_free frees it */
  kube_informer_store_index_owners(n->owners, key, item, 1);
  return CTRAIN_OK;
}

/* ---- A list page, one item at a time ------------------------------------ */

/* A page's items are parsed one by one out of its text, not as one tree: a
 * tree of 500 pods as the apiserver sends them (spec, managedFields) costs
 * ~36 KiB each, ~18 MiB for the page, where one item's tree is all this
 * holds besides the text. The scan below only finds where the top-level
 * members and the items begin and end; cJSON parses (and validates) each. */

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    p++;
  return p;
}

/* The end of the JSON string opening at p, or NULL. */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\')
      p++;
    else if (*p == '"')
      return p + 1;
  }
  return NULL;
}

/* The end of the JSON value at p (p past whitespace), or NULL: strings and
 * brackets matched, nothing else checked. */
static const char *skip_value(const char *p, const char *end) {
  if (p >= end)
    return NULL;
  if (*p == '"')
    return skip_string(p, end);
  if (*p != '{' && *p != '[') {
    while (p < end && !strchr(",}] \t\r\n", *p))
      p++;
    return p;
  }
  int depth = 0;
  while (p < end) {
    if (*p == '"') {
      if (!(p = skip_string(p, end)))
        return NULL;
      continue;
    }
    if (*p == '{' || *p == '[')
      depth++;
    else if ((*p == '}' || *p == ']') && --depth == 0)
      return p + 1;
    p++;
  }
  return NULL;
}

/* What a page says besides its items, and where its items are. */
typedef struct {
  cJSON *kind, *api, *md;        /* parsed; NULL when absent */
  const char *items, *items_end; /* the items array's text; NULL when absent */
} list_page;

static void list_page_clear(list_page *pg) {
  cJSON_Delete(pg->kind);
  cJSON_Delete(pg->api);
  cJSON_Delete(pg->md);
  memset(pg, 0, sizeof(*pg));
}

/* Splits the list object in text[0, len) into *pg. CTRAIN_E_PARSE: not a
 * JSON object. */
static ctrain_err list_page_scan(const char *text, size_t len, list_page *pg) {
  const char *p = text, *end = text + len;
  memset(pg, 0, sizeof(*pg));
  p = skip_ws(p, end);
  if (p >= end || *p++ != '{')
    return CTRAIN_E_PARSE;
  for (int first = 1;; first = 0) {
    p = skip_ws(p, end);
    if (p < end && *p == '}' && first)
      return CTRAIN_OK;
    const char *key = p, *key_end = skip_string(p, end);
    if (p >= end || *p != '"' || !key_end)
      return CTRAIN_E_PARSE;
    p = skip_ws(key_end, end);
    if (p >= end || *p++ != ':')
      return CTRAIN_E_PARSE;
    p = skip_ws(p, end);
    const char *val = p, *val_end = skip_value(p, end);
    if (!val_end)
      return CTRAIN_E_PARSE;
    size_t klen = (size_t)(key_end - key);
    cJSON **slot = NULL;
    if (klen == 7 && !memcmp(key, "\"items\"", 7)) {
      pg->items = val;
      pg->items_end = val_end;
    } else if (klen == 6 && !memcmp(key, "\"kind\"", 6)) {
      slot = &pg->kind;
    } else if (klen == 12 && !memcmp(key, "\"apiVersion\"", 12)) {
      slot = &pg->api;
    } else if (klen == 10 && !memcmp(key, "\"metadata\"", 10)) {
      slot = &pg->md;
    }
    if (slot) {
      cJSON_Delete(*slot);
      if (!(*slot = cJSON_ParseWithLength(val, (size_t)(val_end - val))))
        return CTRAIN_E_PARSE;
    }
    p = skip_ws(val_end, end);
    if (p < end && *p == ',') {
      p++;
      continue;
    }
    if (p < end && *p == '}')
      return CTRAIN_OK;
    return CTRAIN_E_PARSE;
  }
}

/* Parses the page's items one at a time, gives each the list's kind (less
 * "List") and apiVersion where it has none, and adds it to the new cache. */
static ctrain_err list_page_items(kube_informer *inf, next_cache *n, const list_page *pg) {
  const char *lkind = cJSON_IsString(pg->kind) ? pg->kind->valuestring : NULL;
  const char *api = cJSON_IsString(pg->api) ? pg->api->valuestring : NULL;
  char kind[128] = "";
  if (lkind) {
    snprintf(kind, sizeof(kind), "%s", lkind);
    size_t kl = strlen(kind);
    if (kl > 4 && !strcmp(kind + kl - 4, "List"))
      kind[kl - 4] = '\0';
  }
  const char *p = pg->items, *end = pg->items_end;
  if (!p || (end - p == 4 && !memcmp(p, "null", 4)))
    return CTRAIN_OK;
  if (*p++ != '[')
    return CTRAIN_E_PARSE;
  for (int first = 1;; first = 0) {
    p = skip_ws(p, end);
    if (p < end && *p == ']' && first)
      return CTRAIN_OK;
    const char *item_end = NULL;
    cJSON *item = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &item_end, 0);
    if (!item)
      return CTRAIN_E_PARSE;
    if (kind[0] && !cJSON_HasObjectItem(item, "kind"))
      cJSON_AddStringToObject(item, "kind", kind);
    if (api && !cJSON_HasObjectItem(item, "apiVersion"))
      cJSON_AddStringToObject(item, "apiVersion", api);
    ctrain_err result = next_put(inf, n, item);
    cJSON_Delete(item);
    if (result)
      return result;
    p = skip_ws(item_end, end);
    if (p < end && *p == ',') {
      p++;
      continue;
    }
    if (p < end && *p == ']')
      return CTRAIN_OK;
    return CTRAIN_E_PARSE;
  }
}

/* GETs one page of the list into *text (the body; owned, free()). */
static ctrain_err list_page_get(kube_informer *inf, const char *cont, char **text, size_t *len,
                                kube_status *st) {
  char path[8192], num[32];
  ctrain_err result = kube_client_path(inf->o.gvr, inf->ns, NULL, NULL, path, sizeof(path));
  snprintf(num, sizeof(num), "%ld", inf->o.page_size);
  const char *const q[][2] = {{"labelSelector", inf->label_selector},
                              {"fieldSelector", inf->field_selector},
                              {"limit", num},
                              {"continue", cont}};
  for (size_t i = 0; !result && i < sizeof(q) / sizeof(q[0]); i++)
    result = kube_client_query_add(path, sizeof(path), q[i][0], q[i][1]);
  if (result) {
    memset(st, 0, sizeof(*st));
    return result;
  }
  return kube_client_request(inf->c, "GET", path, NULL, NULL, 0, text, len, st);
}

/* Lists everything (paged) into a new cache; writes the list's
 * resourceVersion into rv. CTRAIN_OK: *n is the whole list. */
static ctrain_err list_all(kube_informer *inf, next_cache *n, char *rv, size_t rv_cap) {
  ctrain_err result = CTRAIN_OK;
  char *text = NULL, *cont = NULL;
  size_t len = 0;
  list_page pg = {0};
  kube_status st;

  if ((result = ctrain_strmap_new(&n->items)) || (result = ctrain_strmap_new(&n->owners)))
    goto out;
  for (;;) {
    result = list_page_get(inf, cont, &text, &len, &st);
    if (result) {
      LOG_WARN("kube: informer %s: list: %s (HTTP %d %s)", inf->o.gvr->resource,
               ctrain_strerror(result), st.http_code, st.message);
      goto out;
    }
    if ((result = list_page_scan(text, len, &pg)) || (result = list_page_items(inf, n, &pg))) {
      if (result == CTRAIN_E_PARSE)
        LOG_WARN("kube: informer %s: list: a page that is not a list (%zu bytes)",
                 inf->o.gvr->resource, len);
      goto out;
    }
    free(text);
    text = NULL;
    const char *c = ctrain_json_str(pg.md, "continue");
    free(cont);
    cont = NULL;
    if (c && *c) {
      cont = strdup(c);
      if (!cont) {
        result = CTRAIN_E_NOMEM;
        goto out;
      }
    } else {
      const char *lrv = ctrain_json_str(pg.md, "resourceVersion");
      snprintf(rv, rv_cap, "%s", lrv ? lrv : "");
      break;
    }
    list_page_clear(&pg);
  }
out:
  free(cont);
  free(text);
  list_page_clear(&pg);
  return result;
}

/* Tells the handlers what the replace changed, the live cache being the new
 * one (its keys in list order in `order`) and `old` the one it replaced:
 * on_add for keys new; on_update(old, new) for keys whose resourceVersion
 * changed; nothing for the unchanged, as a watch that never broke would
 * have said nothing (the resync, where configured, re-delivers them); then
 * on_delete with the last known state for keys the list lacks (client-go's
 * DeletedFinalStateUnknown). No lock held: the informer thread, this one,
 * is the live cache's only writer, and `old` is no longer shared. */
static void deliver_deltas(kube_informer *inf, const key_list *order, ctrain_strmap *old) {
  for (size_t i = 0; i < order->n; i++) {
    const char *key = order->keys[i];
    const char *old_text = ctrain_strmap_get(old, key);
    if (!old_text && ctrain_strmap_has(old, key))
      continue; /* the same text: it moved over at the swap */
    cJSON *cur = kube_informer_store_parse_text(ctrain_strmap_get(inf->items, key));
    cJSON *prev = kube_informer_store_parse_text(old_text);
    if (cur && !old_text) {
      dispatch(inf, NULL, cur, 0);
    } else if (cur && prev) {
      const char *orv = rv_of(prev), *nrv = rv_of(cur);
      if (!(orv && nrv && !strcmp(orv, nrv)))
        dispatch(inf, prev, cur, 0);
    } /* else out of memory: the handlers miss this one */
    cJSON_Delete(cur);
    cJSON_Delete(prev);
  }
  key_list gone = {.skip = inf->items};
  ctrain_strmap_each(old, collect_key, &gone);
  for (size_t i = 0; i < gone.n; i++) {
    cJSON *last = kube_informer_store_parse_text(ctrain_strmap_get(old, gone.keys[i]));
    if (last)
      dispatch(inf, last, NULL, 1);
    cJSON_Delete(last);
  }
  key_list_free(&gone);
}

/* Lists everything into a new cache; only when the whole list arrived does
 * it replace the live cache (and its index), at once under mu, so readers
 * see the old cache or the new one, never a part of a list. Then tells the
 * handlers the difference. A failed list (a page's error, an expired
 * continue token) leaves the live cache as it was and tells nobody. */
static ctrain_err relist(void *ud, char *rv, size_t rv_cap) {
  kube_informer *inf = ud;
  next_cache n = {0};
  ctrain_err result = list_all(inf, &n, rv, rv_cap);
  if (result) {
    next_cache_free(&n);
    return result;
  }
  ctrain_mutex_lock(&inf->mu);
  /* Unchanged texts move from the live cache to the new one. Both puts
   * replace an existing key's value: no allocation, nothing to fail, so
   * their results are dropped on purpose. */
  for (size_t i = 0; i < n.order.n; i++) {
    const char *key = n.order.keys[i];
    if (ctrain_strmap_get(n.items, key))
      continue;
    void *text = NULL;
    ctrain_ignore(ctrain_strmap_put(inf->items, key, NULL, &text));
    ctrain_ignore(ctrain_strmap_put(n.items, key, text, NULL));
  }
  ctrain_strmap *items = inf->items, *owners = inf->owners;
  inf->items = n.items;
  inf->owners = n.owners;
  n.items = items;
  n.owners = owners;
  ctrain_mutex_unlock(&inf->mu);
  deliver_deltas(inf, &n.order, n.items);
  next_cache_free(&n);
  ctrain_mutex_lock(&inf->mu);
  inf->stats.lists++;
  if (!inf->synced) {
    inf->synced = 1;
    ctrain_cond_broadcast(&inf->cv);
  }
  ctrain_mutex_unlock(&inf->mu);
  return CTRAIN_OK;
}

/* ------------------------------------------------------------------------ */
/* Watch */

static ctrain_err on_event(void *ud, kube_watch_event *ev) {
  kube_informer *inf = ud;
  ctrain_err result = CTRAIN_OK;
  char key[KEY_CAP];
  if (ev->type >= KUBE_WATCH_ADDED && ev->type <= KUBE_WATCH_BOOKMARK) {
    ctrain_mutex_lock(&inf->mu);
    inf->stats.events_by_type[ev->type]++;
    ctrain_mutex_unlock(&inf->mu);
  }
  switch (ev->type) {
  case KUBE_WATCH_ADDED:
  case KUBE_WATCH_MODIFIED:
    result = upsert(inf, ev->object);
    ev->object = NULL; /* taken */
    break;
  case KUBE_WATCH_DELETED:
    if (kube_informer_key(ev->object, key, sizeof(key)) == CTRAIN_OK)
      remove_key(inf, key);
    break;
  default:
    return CTRAIN_OK;
  }
  ctrain_mutex_lock(&inf->mu);
  inf->stats.events++;
  ctrain_mutex_unlock(&inf->mu);
  return result;
}

static int wait_stop(kube_informer *inf, int64_t ns) {
  return ctrain_cond_nap(&inf->cv, &inf->mu, &inf->stopping, ns);
}

static void *run(void *arg) {
  kube_informer *inf = arg;
  int64_t backoff = BACKOFF_MIN_NS;
  char rv[128];
  for (;;) {
    ctrain_mutex_lock(&inf->mu);
    int stopping = inf->stopping;
    ctrain_mutex_unlock(&inf->mu);
    if (stopping)
      break;
    ctrain_err result = relist(inf, rv, sizeof(rv));
    if (result) {
      if (wait_stop(inf, backoff))
        break;
      backoff = backoff * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : backoff * 2;
      continue;
    }
    backoff = BACKOFF_MIN_NS;
    kube_watch_opts wo = {.gvr = inf->o.gvr,
                          .ns = inf->ns,
                          .label_selector = inf->label_selector,
                          .field_selector = inf->field_selector,
                          .resource_version = rv,
                          .timeout_seconds = inf->o.watch_timeout_s,
                          .relist = relist,
                          .relist_ud = inf};
    kube_watch *w = NULL;
    if (kube_watch_new(inf->c, &wo, &w)) {
      if (wait_stop(inf, backoff))
        break;
      continue;
    }
    ctrain_mutex_lock(&inf->mu);
    inf->w = w;
    stopping = inf->stopping;
    ctrain_mutex_unlock(&inf->mu);
    kube_status st = {0};
    result = stopping ? CTRAIN_E_CANCELLED : kube_watch_run(w, on_event, inf, &st);
    ctrain_mutex_lock(&inf->mu);
    inf->w = NULL;
    ctrain_mutex_unlock(&inf->mu);
    kube_watch_free(w);
    if (result == CTRAIN_E_CANCELLED)
      break;
    LOG_WARN("kube: informer %s: watch ended: %s (HTTP %d %s); relisting", inf->o.gvr->resource,
             ctrain_strerror(result), st.http_code, st.message);
    if (wait_stop(inf, backoff))
      break;
  }
  return NULL;
}

static void *resync(void *arg) {
  kube_informer *inf = arg;
  while (!wait_stop(inf, (int64_t)inf->o.resync_ms * 1000000)) {
    key_list k = {0};
    ctrain_mutex_lock(&inf->mu);
    int synced = inf->synced;
    if (synced)
      ctrain_strmap_each(inf->items, collect_key, &k);
    ctrain_mutex_unlock(&inf->mu);
    for (size_t i = 0; i < k.n; i++) {
      /* Copy under the cache lock, deliver under the dispatch lock. */
      ctrain_mutex_lock(&inf->mu);
      cJSON *copy = kube_informer_store_parse_text(ctrain_strmap_get(inf->items, k.keys[i]));
      ctrain_mutex_unlock(&inf->mu);
      if (copy)
        dispatch(inf, copy, copy, 0);
      cJSON_Delete(copy);
    }
    key_list_free(&k);
    if (synced) {
      ctrain_mutex_lock(&inf->mu);
      inf->stats.resyncs++;
      ctrain_mutex_unlock(&inf->mu);
    }
  }
  return NULL;
}

/* ------------------------------------------------------------------------ */

ctrain_err kube_informer_new(kube_client *c, const kube_informer_opts *o, kube_informer **out) {
  ctrain_err result = CTRAIN_OK;
  kube_informer *inf = NULL;
  int oom = 0;
  *out = NULL;
  if (!c || !o || !o->gvr)
    return CTRAIN_E_INVAL;
  inf = calloc(1, sizeof(*inf));
  if (!inf)
    return CTRAIN_E_NOMEM;
  inf->c = c;
  inf->o = *o;
  if (inf->o.page_size <= 0)
    inf->o.page_size = 500;
  inf->ns = kube_dup_opt(o->ns, &oom);
  inf->label_selector = kube_dup_opt(o->label_selector, &oom);
  inf->field_selector = kube_dup_opt(o->field_selector, &oom);
  if (oom || ctrain_strmap_new(&inf->items) || ctrain_strmap_new(&inf->owners)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  pthread_mutex_init(&inf->mu, NULL);
  pthread_mutex_init(&inf->dispatch_mu, NULL);
  ctrain_cond_init_mono(&inf->cv);
  *out = inf;
  inf = NULL;
out:
  if (inf) {
    ctrain_strmap_free(inf->items, NULL);
    ctrain_strmap_free(inf->owners, NULL);
    free(inf->ns);
    free(inf->label_selector);
    free(inf->field_selector);
    free(inf);
  }
  return result;
}

ctrain_err kube_informer_start(kube_informer *inf) {
  if (inf->started)
    return CTRAIN_E_INVAL;
  inf->started = 1;
  if (pthread_create(&inf->thread, NULL, run, inf))
    return CTRAIN_E_NOMEM;
  inf->have_thread = 1;
  if (inf->o.resync_ms > 0) {
    if (pthread_create(&inf->resync_thread, NULL, resync, inf))
      return CTRAIN_E_NOMEM;
    inf->have_resync = 1;
  }
  return CTRAIN_OK;
}

void kube_informer_stop(kube_informer *inf) {
  ctrain_mutex_lock(&inf->mu);
  inf->stopping = 1;
  ctrain_cond_broadcast(&inf->cv);
  if (inf->w)
    kube_watch_cancel(inf->w);
  ctrain_mutex_unlock(&inf->mu);
  if (inf->have_thread)
    pthread_join(inf->thread, NULL);
  if (inf->have_resync)
    pthread_join(inf->resync_thread, NULL);
  inf->have_thread = inf->have_resync = 0;
}

int kube_informer_has_synced(kube_informer *inf) {
  ctrain_mutex_lock(&inf->mu);
  int s = inf->synced;
  ctrain_mutex_unlock(&inf->mu);
  return s;
}

ctrain_err kube_informer_wait_synced(kube_informer *inf, long timeout_ms) {
  struct timespec ts = ctrain_deadline_ts((int64_t)timeout_ms * 1000000);
  ctrain_mutex_lock(&inf->mu);
  while (!inf->synced && !inf->stopping && ctrain_cond_timedwait(&inf->cv, &inf->mu, &ts) == 0)
    ;
  int s = inf->synced;
  ctrain_mutex_unlock(&inf->mu);
  return s ? CTRAIN_OK : CTRAIN_E_TIMEOUT;
}

void kube_informer_get_stats(kube_informer *inf, kube_informer_stats *out) {
  ctrain_mutex_lock(&inf->mu);
  *out = inf->stats;
  ctrain_mutex_unlock(&inf->mu);
}

void kube_informer_free(kube_informer *inf) {
  if (!inf)
    return;
  kube_informer_stop(inf);
  ctrain_strmap_free(inf->items, free_text);
  ctrain_strmap_free(inf->owners, free_set);
  pthread_mutex_destroy(&inf->mu);
  pthread_mutex_destroy(&inf->dispatch_mu);
  pthread_cond_destroy(&inf->cv);
  free(inf->ns);
  free(inf->label_selector);
  free(inf->field_selector);
  free(inf);
}
