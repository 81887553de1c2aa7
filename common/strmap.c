/* strmap.c - string-keyed hash map; see ctrain/strmap.h. */
#include "ctrain/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  char *key;
  void *val;
  uint64_t hash;
  struct entry *next;
} entry;

struct ctrain_strmap {
  entry **buckets;
  size_t nbuckets; /* power of two */
  size_t len;
};

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

ctrain_err ctrain_strmap_new(ctrain_strmap **out) {
  ctrain_strmap *m = calloc(1, sizeof(*m));
  if (!m)
    return CTRAIN_E_NOMEM;
  m->nbuckets = 16;
  m->buckets = calloc(m->nbuckets, sizeof(*m->buckets));
  if (!m->buckets) {
    free(m);
    return CTRAIN_E_NOMEM;
  }
  *out = m;
  return CTRAIN_OK;
}

void ctrain_strmap_free(ctrain_strmap *m, void (*free_val)(void *)) {
  if (!m)
    return;
  for (size_t i = 0; i < m->nbuckets; i++) {
    entry *e = m->buckets[i];
    while (e) {
      entry *next = e->next;
      if (free_val)
        free_val(e->val);
      free(e->key);
      free(e);
      e = next;
    }
  }
  free(m->buckets);
  free(m);
}

static entry *find(const ctrain_strmap *m, const char *key, uint64_t h) {
  for (entry *e = m->buckets[h & (m->nbuckets - 1)]; e; e = e->next)
    if (e->hash == h && !strcmp(e->key, key))
      return e;
  return NULL;
}

void *ctrain_strmap_get(const ctrain_strmap *m, const char *key) {
  entry *e = find(m, key, fnv1a(key));
  return e ? e->val : NULL;
}

int ctrain_strmap_has(const ctrain_strmap *m, const char *key) {
  return find(m, key, fnv1a(key)) != NULL;
}

static void grow(ctrain_strmap *m) {
  size_t nb = m->nbuckets * 2;
  entry **b = calloc(nb, sizeof(*b));
  if (!b)
    return; /* keep working with longer chains */
  for (size_t i = 0; i < m->nbuckets; i++) {
    entry *e = m->buckets[i];
    while (e) {
      entry *next = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = next;
    }
  }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = nb;
}

ctrain_err ctrain_strmap_put(ctrain_strmap *m, const char *key, void *val, void **old) {
  uint64_t h = fnv1a(key);
  entry *e = find(m, key, h);
  if (old)
    *old = NULL;
  if (e) {
    if (old)
      *old = e->val;
    e->val = val;
    return CTRAIN_OK;
  }
  e = calloc(1, sizeof(*e));
  if (!e)
    return CTRAIN_E_NOMEM;
  e->key = strdup(key);
  if (!e->key) {
    free(e);
    return CTRAIN_E_NOMEM;
  }
  e->val = val;
  e->hash = h;
  e->next = m->buckets[h & (m->nbuckets - 1)];
  m->buckets[h & (m->nbuckets - 1)] = e;
  m->len++;
  if (m->len > m->nbuckets / 4 * 3)
    grow(m);
  return CTRAIN_OK;
}

void *ctrain_strmap_del(ctrain_strmap *m, const char *key, int *found) {
  uint64_t h = fnv1a(key);
  entry **pp = &m->buckets[h & (m->nbuckets - 1)];
  if (found)
    *found = 0;
  for (; *pp; pp = &(*pp)->next) {
    entry *e = *pp;
    if (e->hash == h && !strcmp(e->key, key)) {
      void *v = e->val;
      *pp = e->next;
      free(e->key);
      free(e);
      m->len--;
      if (found)
        *found = 1;
      return v;
    }
  }
  return NULL;
}

size_t ctrain_strmap_len(const ctrain_strmap *m) {
  return m->len;
}

void ctrain_strmap_each(const ctrain_strmap *m, ctrain_strmap_fn fn, void *ud) {
  for (size_t i = 0; i < m->nbuckets; i++)
    for (entry *e = m->buckets[i]; e; e = e->next)
      if (fn(ud, e->key, e->val))
        return;
}
