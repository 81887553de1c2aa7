/* ctrain/lnode_env.h - a container's environment and command line, as the
 * kubelet computes them.
 *
 * Env entries are resolved in order: `value` (with $(VAR) expanded against
 * the entries before it), `valueFrom.fieldRef` (metadata.name/namespace/uid,
 * metadata.labels['k'], metadata.annotations['k'], spec.nodeName,
 * spec.serviceAccountName, status.podIP, status.podIPs, status.hostIP),
 * `valueFrom.secretKeyRef` and `valueFrom.configMapKeyRef` (through a lookup
 * callback, so this module never talks to the apiserver). `envFrom` is
 * resolved through the same callback. A later entry replaces an earlier one
 * of the same name. */
#ifndef CTRAIN_LNODE_ENV_H
#define CTRAIN_LNODE_ENV_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"

/* Kinds of object a lookup reads. */
typedef enum { LNODE_REF_SECRET = 0, LNODE_REF_CONFIGMAP } lnode_ref_kind;

/* Fetches Secret or ConfigMap `name` in `ns`. On success *out is the object
 * (owned by the caller, cJSON_Delete). CTRAIN_E_NOTFOUND when it does not
 * exist; other errors are passed on. */
typedef ctrain_err (*lnode_lookup_fn)(void *ud, lnode_ref_kind kind, const char *ns,
                                      const char *name, cJSON **out);

typedef struct lnode_env_ctx {
  const cJSON *pod;       /* borrowed */
  const char *pod_ip;     /* borrowed; NULL: "" */
  const char *host_ip;    /* borrowed; NULL: "" */
  const char *node_name;  /* borrowed; NULL: spec.nodeName */
  const char *base_path;  /* PATH given to containers; NULL: none */
  const char *hostname;   /* HOSTNAME; NULL: none */
  lnode_lookup_fn lookup; /* may be NULL: Secret/ConfigMap refs then fail */
  void *lookup_ud;
} lnode_env_ctx;

/* A "NAME=value" list. */
typedef struct lnode_env {
  char **kv; /* NULL-terminated, owned */
  size_t n;
} lnode_env;

/* Builds the environment of `container` (borrowed). On success *out holds
 * owned strings (lnode_env_free). A missing non-optional key fails with
 * CTRAIN_E_NOTFOUND and `err` naming the object and key (the kubelet's
 * CreateContainerConfigError). */
ctrain_err lnode_env_build(const lnode_env_ctx *ctx, const cJSON *container, lnode_env *out,
                           char *err, size_t errlen);
void lnode_env_free(lnode_env *e);

/* Value of NAME in e, or NULL (borrowed). */
const char *lnode_env_get(const lnode_env *e, const char *name);

/* Kubernetes $(VAR) expansion of `in` against `e`: $(NAME) becomes the value
 * when NAME is set and stays as written otherwise; $$ becomes $. Returns an
 * owned string or NULL (out of memory). */
char *lnode_env_expand(const lnode_env *e, const char *in);

/* Resolves a downward-API field path against the pod (owned result in
 * *out). CTRAIN_E_UNSUPPORTED for a path the kubelet would refuse. */
ctrain_err lnode_env_field(const lnode_env_ctx *ctx, const char *field_path, char **out);

#endif
