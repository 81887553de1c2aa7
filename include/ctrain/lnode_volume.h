/* ctrain/lnode_volume.h - a pod's volumes as host directories.
 *
 *   hostPath               the path itself (DirectoryOrCreate/FileOrCreate create it)
 *   emptyDir               <pod dir>/volumes/<name>, removed with the pod
 *   persistentVolumeClaim  <state dir>/pvc/<ns>/<claim>, shared by every pod of the claim
 *   configMap, secret,     files written under <pod dir>/volumes/<name> from the API
 *   downwardAPI, projected objects (projected: serviceAccountToken through the
 *                          TokenRequest API, configMap, secret, downwardAPI)
 * The containers see them through bind mounts (lnode_spawn). */
#ifndef CTRAIN_LNODE_VOLUME_H
#define CTRAIN_LNODE_VOLUME_H

#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"
#include "ctrain/kube_client.h"
#include "ctrain/lnode_env.h"

typedef struct lnode_volume {
  char *name; /* owned */
  char *path; /* host path, owned */
  int read_only;
} lnode_volume;

typedef struct lnode_volumes {
  lnode_volume *v; /* owned */
  size_t n;
  /* Earliest time (UNIX seconds) a projected token should be refreshed;
   * 0: no tokens. */
  time_t token_refresh_at;
} lnode_volumes;

typedef struct lnode_volume_ctx {
  kube_client *kc;          /* borrowed; for TokenRequest */
  const char *state_dir;    /* borrowed */
  const char *pod_dir;      /* borrowed: <state dir>/pods/<uid> */
  const lnode_env_ctx *env; /* pod, IPs and the Secret/ConfigMap lookup; borrowed */
} lnode_volume_ctx;

/* Prepares every volume of the pod in ctx->env->pod. `only_projected`
 * re-writes only the API-backed ones (token refresh). On failure `err`
 * names the volume (the kubelet's FailedMount) and out is left empty. */
ctrain_err lnode_volumes_prepare(const lnode_volume_ctx *ctx, int only_projected,
                                 lnode_volumes *out, char *err, size_t errlen);

/* Host path of volume `name`, or NULL (borrowed). */
const lnode_volume *lnode_volumes_find(const lnode_volumes *vs, const char *name);

void lnode_volumes_free(lnode_volumes *vs);

#endif
