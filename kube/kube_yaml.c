/* kube_yaml.c - lookups in a loaded libyaml document for kubeconfig files;
 * see kube_yaml.h. */
#include "kube_yaml.h"

#include <string.h>

#include "ctrain/util.h"

static yaml_node_t *ynode(yaml_document_t *doc, int id) {
  return id ? yaml_document_get_node(doc, id) : NULL;
}

yaml_node_t *kube_yaml_get(yaml_document_t *doc, yaml_node_t *map, const char *key) {
  if (!map || map->type != YAML_MAPPING_NODE)
    return NULL;
  size_t klen = strlen(key);
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = ynode(doc, p->key);
    if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == klen &&
        !memcmp(k->data.scalar.value, key, klen))
      return ynode(doc, p->value);
  }
  return NULL;
}

ctrain_err kube_yaml_no_duplicate_keys(yaml_document_t *doc, const char *src, char *err,
                                       size_t errlen) {
  for (yaml_node_t *m = doc->nodes.start; m < doc->nodes.top; m++) {
    if (m->type != YAML_MAPPING_NODE)
      continue;
    yaml_node_pair_t *first = m->data.mapping.pairs.start, *top = m->data.mapping.pairs.top;
    if (top - first > 4096)
      return ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: line %zu: a mapping of %td keys", src,
                         m->start_mark.line + 1, top - first);
    for (yaml_node_pair_t *p = first; p < top; p++) {
      yaml_node_t *k = ynode(doc, p->key);
      if (!k || k->type != YAML_SCALAR_NODE)
        continue;
      for (yaml_node_pair_t *q = first; q < p; q++) {
        yaml_node_t *o = ynode(doc, q->key);
        if (o && o->type == YAML_SCALAR_NODE && o->data.scalar.length == k->data.scalar.length &&
            !memcmp(o->data.scalar.value, k->data.scalar.value, k->data.scalar.length))
          return ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: line %zu: duplicate key '%.*s'",
                             src, k->start_mark.line + 1,
                             (int)(k->data.scalar.length > 64 ? 64 : k->data.scalar.length),
                             (const char *)k->data.scalar.value);
      }
    }
  }
  return CTRAIN_OK;
}

const char *kube_yaml_str(yaml_document_t *doc, yaml_node_t *map, const char *key, int *bad) {
  yaml_node_t *v = kube_yaml_get(doc, map, key);
  if (!v)
    return NULL;
  if (v->type != YAML_SCALAR_NODE) {
    *bad = 1;
    return NULL;
  }
  const char *s = (const char *)v->data.scalar.value;
  /* A plain `~`/`null`/empty scalar is YAML null; quoted ones are strings. */
  if (v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
      (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")))
    return NULL;
  if (strlen(s) != v->data.scalar.length) { /* embedded NUL */
    *bad = 1;
    return NULL;
  }
  return s;
}

yaml_node_t *kube_yaml_named(yaml_document_t *doc, yaml_node_t *root, const char *list,
                             const char *field, const char *name) {
  yaml_node_t *seq = kube_yaml_get(doc, root, list);
  if (!seq || seq->type != YAML_SEQUENCE_NODE)
    return NULL;
  for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
       it++) {
    yaml_node_t *e = ynode(doc, *it);
    int bad = 0;
    const char *n = kube_yaml_str(doc, e, "name", &bad);
    if (n && !strcmp(n, name)) {
      yaml_node_t *f = kube_yaml_get(doc, e, field);
      return f ? f : e; /* an entry without the field is an empty one */
    }
  }
  return NULL;
}

int kube_yaml_bool(const char *s) {
  static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const char *const no[] = {"false", "False", "FALSE", "no", "No",
                                   "NO",    "off",   "Off",   "OFF"};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
    if (!strcmp(s, yes[i]))
      return 1;
    if (!strcmp(s, no[i]))
      return 0;
  }
  return -1;
}
