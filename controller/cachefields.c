/* cachefields.c - the fields each informer cache keeps; see
 * controller/cachefields.h. */
#include "controller/cachefields.h"

#include <string.h>

#include "ctrain/json.h"
#include "ctrain/kube_informer.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Identity, owners and labels: the cache key, the owner index, the
 * "nothing changed" test (resourceVersion), enqueue_owner and observe_pod. */
#define META_PATHS                                                                                 \
  "apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.uid",                     \
      "metadata.resourceVersion", "metadata.labels", "metadata.deletionTimestamp",                 \
      "metadata.creationTimestamp", OWNER_PATHS

/* What ownership.c, enqueue_owner and observe_pod read of an ownerReference
 * (not blockOwnerDeletion: nothing reads it, and no cached object is
 * written back but a job, which keeps its own). */
#define OWNER_PATHS                                                                                \
  "metadata.ownerReferences.apiVersion", "metadata.ownerReferences.kind",                          \
      "metadata.ownerReferences.name", "metadata.ownerReferences.uid",                             \
      "metadata.ownerReferences.controller"

/* recon_observe.c (phase, failure, stuck reasons), recon_progress.c (the
 * termination message, the node of a slow worker), progress.c (podIP). */
static const char *const pod_paths[] = {META_PATHS,
                                        "metadata.finalizers",
                                        "metadata.deletionGracePeriodSeconds",
                                        "status.containerStatuses.ready",
                                        "spec.nodeName",
                                        "status.phase",
                                        "status.reason",
                                        "status.message",
                                        "status.podIP",
                                        "status.conditions.type",
                                        "status.conditions.status",
                                        "status.conditions.reason",
                                        "status.conditions.message",
                                        "status.containerStatuses.name",
                                        "status.containerStatuses.image",
                                        "status.containerStatuses.state",
                                        "status.initContainerStatuses.name",
                                        "status.initContainerStatuses.image",
                                        "status.initContainerStatuses.state"};

/* The reconciler reads the whole spec (the pod templates) and status, and
 * metadata.generation (observedGeneration); a status write PUTs the cached
 * job back, where the apiserver keeps everything but its status, so what is
 * dropped here (managedFields, kubectl's last-applied copy of the job) is
 * not lost. */
static const char *const job_paths[] = {
    META_PATHS, "metadata.generation", "metadata.annotations", "metadata.finalizers", "spec",
    "status"};

/* A Service is only looked up: it exists or not. */
static const char *const service_paths[] = {META_PATHS};

/* The pod conditions recon_observe.c reads (stuck_reason, disruption_of,
 * the Ready test); the kubelet's others (Initialized, ContainersReady,
 * PodReadyToStartContainers) are dropped: ~40 bytes each of every pod. */
static const char *const pod_conditions[] = {"PodScheduled", "DisruptionTarget", "Ready"};

void ctl_cache_pod_fields(void *ud, cJSON *obj) {
  (void)ud;
  kube_informer_keep_fields(obj, pod_paths, N(pod_paths));
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "status"),
                                                  "conditions");
  cJSON *c = conds ? conds->child : NULL;
  while (c) {
    cJSON *next = c->next;
    const char *t = ctrain_json_str(c, "type");
    int keep = 0;
    for (size_t i = 0; t && i < N(pod_conditions); i++)
      keep |= !strcmp(t, pod_conditions[i]);
    if (!keep)
      cJSON_Delete(cJSON_DetachItemViaPointer(conds, c));
    c = next;
  }
}

void ctl_cache_job_fields(void *ud, cJSON *obj) {
  (void)ud;
  kube_informer_keep_fields(obj, job_paths, N(job_paths));
  cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                                "annotations");
  cJSON_DeleteItemFromObjectCaseSensitive(ann, "kubectl.kubernetes.io/last-applied-configuration");
}

void ctl_cache_service_fields(void *ud, cJSON *obj) {
  (void)ud;
  kube_informer_keep_fields(obj, service_paths, N(service_paths));
}
