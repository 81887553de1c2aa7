/* kube_yaml.h - lookups in a loaded libyaml document, for kubeconfig files
 * (private to kube/; not installed).
 *
 * Aliases are resolved by the loader into shared nodes; only named keys are
 * ever looked up, so a document full of aliases costs no more than its text.
 * Returned nodes and strings are borrowed from the document. */
#ifndef CTRAIN_KUBE_YAML_H
#define CTRAIN_KUBE_YAML_H

#include <stddef.h>

#include <yaml.h>

#include "ctrain/err.h"

/* Value node of `key` in mapping `map`, or NULL (also when map is not a
 * mapping). */
yaml_node_t *kube_yaml_get(yaml_document_t *doc, yaml_node_t *map, const char *key);

/* Refuses a document whose mappings repeat a key, as kubectl does: with two
 * `server:` or `token:` keys, which one counts would be a reader's guess.
 * Every node of the document is looked at once (aliases share nodes).
 * CTRAIN_E_CONFIG naming src and the line. */
CTRAIN_NODISCARD ctrain_err kube_yaml_no_duplicate_keys(yaml_document_t *doc, const char *src,
                                                        char *err, size_t errlen);

/* Scalar text of `key`: NULL when absent or null; *bad = 1 when present but
 * not a scalar (or holding a NUL). */
const char *kube_yaml_str(yaml_document_t *doc, yaml_node_t *map, const char *key, int *bad);

/* Finds the entry named `name` in the list `list` of {name: ..., <field>:
 * {...}} and returns its <field> mapping (the entry itself when it has no
 * such field: an empty one). */
yaml_node_t *kube_yaml_named(yaml_document_t *doc, yaml_node_t *root, const char *list,
                             const char *field, const char *name);

/* YAML 1.1 booleans as go-yaml accepts them: 1, 0, or -1 for anything else. */
int kube_yaml_bool(const char *s);

#endif
