/* kube_informer_store.c - the informer's cache: the objects as text by
 * key, the owner index, the readers' copies (get, list, each, by owner) and
 * the keep_fields transform helper; see ctrain/kube_informer.h. The
 * list/watch/resync threads that fill it are kube_informer.c's. */
#include "ctrain/kube_informer.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/log.h"
#include "ctrain/strmap.h"
#include "ctrain/thread.h"
#include "kube_informer_int.h"

#define KEEP_MAX 64 /* paths kube_informer_keep_fields heeds */

ctrain_err kube_informer_key(const cJSON *obj, char *buf, size_t cap) {
  const cJSON *md = ctrain_json_get(obj, "metadata");
  const char *name = ctrain_json_str(md, "name"), *ns = ctrain_json_str(md, "namespace");
  if (!name || !*name)
    return CTRAIN_E_INVAL;
  int n = (ns && *ns) ? snprintf(buf, cap, "%s/%s", ns, name) : snprintf(buf, cap, "%s", name);
  return (n < 0 || (size_t)n >= cap) ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

/* Adds `key` to (or removes it from) the set `owners` holds under `ix`. */
static void index_one(ctrain_strmap *owners, const char *ix, const char *key, int add) {
  ctrain_strmap *set = ctrain_strmap_get(owners, ix);
  if (add) {
    if (!set) {
      if (ctrain_strmap_new(&set))
        return;
      if (ctrain_strmap_put(owners, ix, set, NULL)) {
        ctrain_strmap_free(set, NULL);
        return;
      }
    }
    if (ctrain_strmap_put(set, key, NULL, NULL)) /* the cache is right, the index misses one */
      LOG_WARN("kube: out of memory indexing %s under its owner %s; lookups by owner miss it "
               "until its next change or relist",
               key, ix);
  } else if (set) {
    ctrain_strmap_del(set, key, NULL);
    if (!ctrain_strmap_len(set)) {
      ctrain_strmap_del(owners, ix, NULL);
      ctrain_strmap_free(set, NULL);
    }
  }
}

/* Owner index maintenance on `owners` (the live index, mu held, or a
 * relist's new one): each ownerReference indexes the object under the
 * owner's uid and under "<the object's namespace>/<the owner's name>" (a
 * uid has no '/', so the two never meet; an owner is in its dependent's
 * namespace, so the name's index never crosses namespaces). */
void kube_informer_store_index_owners(ctrain_strmap *owners, const char *key, const cJSON *obj,
                                      int add) {
  const cJSON *md = ctrain_json_get(obj, "metadata");
  const char *ns = ctrain_json_str(md, "namespace");
  const cJSON *ref;
  cJSON_ArrayForEach(ref, ctrain_json_get(md, "ownerReferences")) {
    const char *uid = ctrain_json_str(ref, "uid"), *name = ctrain_json_str(ref, "name");
    if (uid && *uid && !strchr(uid, '/'))
      index_one(owners, uid, key, add);
    char ix[KEY_CAP];
    int n = name && *name ? snprintf(ix, sizeof(ix), "%s/%s", ns ? ns : "", name) : -1;
    if (n > 0 && (size_t)n < sizeof(ix))
      index_one(owners, ix, key, add);
  }
}

/* The cache holds each object as its compact JSON text, not as a cJSON
 * tree: a tree costs a 64-byte node plus a string allocation per field,
 * several times the text, and every reader gets its own copy anyway (a
 * parse here where it was a cJSON_Duplicate). NULL: out of memory. */
cJSON *kube_informer_store_parse_text(const char *text) {
  return text ? cJSON_Parse(text) : NULL;
}

/* Puts (a text copy of) obj under key; returns the previous object,
 * parsed (owned by the caller), or NULL. mu held. On NOMEM *err is set and
 * the cache is unchanged. */
cJSON *kube_informer_store_put(kube_informer *inf, const char *key, const cJSON *obj,
                               ctrain_err *err) {
  char *text = cJSON_PrintUnformatted(obj);
  *err = CTRAIN_OK;
  if (!text) {
    *err = CTRAIN_E_NOMEM;
    return NULL;
  }
  const char *old_text = ctrain_strmap_get(inf->items, key);
  cJSON *old = kube_informer_store_parse_text(old_text);
  if (old_text && !old) {
    cJSON_free(text);
    *err = CTRAIN_E_NOMEM;
    return NULL;
  }
  if (old)
    kube_informer_store_index_owners(inf->owners, key, old, 0);
  char *prev = NULL;
  if ((*err = ctrain_strmap_put(inf->items, key, text, (void **)&prev))) {
    cJSON_free(text);
    if (old)
      kube_informer_store_index_owners(inf->owners, key, old, 1);
    cJSON_Delete(old);
    return NULL;
  }
  cJSON_free(prev);
  kube_informer_store_index_owners(inf->owners, key, obj, 1);
  return old;
}

/* Removes key; returns the object it held, parsed (owned by the caller),
 * or NULL (none, or out of memory: then the handlers miss the delete). */
cJSON *kube_informer_store_del(kube_informer *inf, const char *key) {
  char *text = ctrain_strmap_del(inf->items, key, NULL);
  cJSON *old = kube_informer_store_parse_text(text);
  cJSON_free(text);
  if (old)
    kube_informer_store_index_owners(inf->owners, key, old, 0);
  return old;
}

/* ------------------------------------------------------------------------ */
/* Transform helper */

/* 1 when the first component of the dotted `rest` is `name`; *sub is then
 * what follows it ("" when the path ends there). */
static int first_is(const char *rest, const char *name, const char **sub) {
  size_t len = strcspn(rest, ".");
  if (strlen(name) != len || strncmp(rest, name, len))
    return 0;
  *sub = rest[len] ? rest + len + 1 : "";
  return 1;
}

/* Keeps in `node` what the n path suffixes `rest` name. No allocation:
 * the suffixes point into the caller's paths. */
static void keep_in(cJSON *node, const char *const *rest, size_t n) {
  if (cJSON_IsArray(node)) {
    cJSON *el;
    cJSON_ArrayForEach(el, node) keep_in(el, rest, n);
    return;
  }
  if (!cJSON_IsObject(node))
    return; /* a scalar where a path goes on: nothing below it to choose */
  cJSON *child = node->child;
  while (child) {
    cJSON *next = child->next;
    const char *sub[KEEP_MAX];
    size_t m = 0;
    int whole = 0;
    for (size_t i = 0; i < n && child->string; i++) {
      const char *s;
      if (first_is(rest[i], child->string, &s)) {
        if (*s)
          sub[m++] = s;
        else
          whole = 1;
      }
    }
    if (!whole && m)
      keep_in(child, sub, m);
    else if (!whole)
      cJSON_Delete(cJSON_DetachItemViaPointer(node, child));
    child = next;
  }
}

void kube_informer_keep_fields(cJSON *obj, const char *const *paths, size_t n) {
  if (obj && paths)
    keep_in(obj, paths, n < KEEP_MAX ? n : KEEP_MAX);
}

cJSON *kube_informer_get(kube_informer *inf, const char *ns, const char *name) {
  char key[KEY_CAP];
  int n = (ns && *ns) ? snprintf(key, sizeof(key), "%s/%s", ns, name)
                      : snprintf(key, sizeof(key), "%s", name);
  if (n < 0 || (size_t)n >= sizeof(key))
    return NULL;
  ctrain_mutex_lock(&inf->mu);
  cJSON *copy = kube_informer_store_parse_text(ctrain_strmap_get(inf->items, key));
  ctrain_mutex_unlock(&inf->mu);
  return copy;
}

typedef struct {
  kube_informer *inf;
  const char *ns;
  size_t nslen;
  cJSON *arr;
  int oom;
} list_ctx;

static int add_copy(void *ud, const char *key, void *val) {
  list_ctx *l = ud;
  const char *text = val ? val : ctrain_strmap_get(l->inf->items, key); /* owner sets: key only */
  if (!text)
    return 0;
  if (l->ns && (strncmp(key, l->ns, l->nslen) || key[l->nslen] != '/'))
    return 0;
  cJSON *copy = kube_informer_store_parse_text(text);
  if (!copy || !cJSON_AddItemToArray(l->arr, copy)) {
    cJSON_Delete(copy);
    l->oom = 1;
    return 1;
  }
  return 0;
}

/* Copies of the objects `m` (the cache or an owner set) names, in ns when
 * ns is non-NULL, as a new array into *out. */
static ctrain_err copy_all(kube_informer *inf, const ctrain_strmap *m, const char *ns,
                           cJSON **out) {
  list_ctx l = {inf, ns, ns ? strlen(ns) : 0, cJSON_CreateArray(), 0};
  *out = NULL;
  if (!l.arr)
    return CTRAIN_E_NOMEM;
  if (m)
    ctrain_strmap_each(m, add_copy, &l);
  if (l.oom) {
    cJSON_Delete(l.arr);
    return CTRAIN_E_NOMEM;
  }
  *out = l.arr;
  return CTRAIN_OK;
}

ctrain_err kube_informer_list(kube_informer *inf, const char *ns, cJSON **out) {
  ctrain_mutex_lock(&inf->mu);
  ctrain_err result = copy_all(inf, inf->items, (ns && *ns) ? ns : NULL, out);
  ctrain_mutex_unlock(&inf->mu);
  return result;
}

typedef struct {
  const char *ns;
  size_t nslen;
  int (*fn)(void *ud, const cJSON *obj);
  void *ud;
  int oom;
} each_ctx;

static int each_one(void *ud, const char *key, void *val) {
  each_ctx *e = ud;
  if (!val || (e->ns && (strncmp(key, e->ns, e->nslen) || key[e->nslen] != '/')))
    return 0;
  cJSON *obj = kube_informer_store_parse_text(val);
  if (!obj) {
    e->oom = 1;
    return 1;
  }
  int stop = e->fn(e->ud, obj);
  cJSON_Delete(obj);
  return stop;
}

ctrain_err kube_informer_each(kube_informer *inf, const char *ns,
                              int (*fn)(void *ud, const cJSON *obj), void *ud) {
  each_ctx e = {(ns && *ns) ? ns : NULL, (ns && *ns) ? strlen(ns) : 0, fn, ud, 0};
  ctrain_mutex_lock(&inf->mu);
  ctrain_strmap_each(inf->items, each_one, &e);
  ctrain_mutex_unlock(&inf->mu);
  return e.oom ? CTRAIN_E_NOMEM : CTRAIN_OK;
}

ctrain_err kube_informer_by_owner(kube_informer *inf, const char *owner_uid, cJSON **out) {
  ctrain_mutex_lock(&inf->mu);
  const ctrain_strmap *set =
      owner_uid && !strchr(owner_uid, '/') ? ctrain_strmap_get(inf->owners, owner_uid) : NULL;
  ctrain_err result = copy_all(inf, set, NULL, out);
  ctrain_mutex_unlock(&inf->mu);
  return result;
}

ctrain_err kube_informer_by_owner_name(kube_informer *inf, const char *ns, const char *owner_name,
                                       cJSON **out) {
  char ix[KEY_CAP];
  int n = snprintf(ix, sizeof(ix), "%s/%s", ns ? ns : "", owner_name ? owner_name : "");
  if (n < 0 || (size_t)n >= sizeof(ix) || !owner_name || !*owner_name)
    return copy_all(inf, NULL, NULL, out);
  ctrain_mutex_lock(&inf->mu);
  ctrain_err result = copy_all(inf, ctrain_strmap_get(inf->owners, ix), NULL, out);
  ctrain_mutex_unlock(&inf->mu);
  return result;
}

size_t kube_informer_len(kube_informer *inf) {
  ctrain_mutex_lock(&inf->mu);
  size_t n = ctrain_strmap_len(inf->items);
  ctrain_mutex_unlock(&inf->mu);
  return n;
}
