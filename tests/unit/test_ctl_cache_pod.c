/* test_ctl_cache_pod.c - what ctl_cache_pod_fields drops of a pod as KWOK
 * and the kubelet write it, and what it must keep for the readers
 * (recon_observe.c: the PodScheduled, DisruptionTarget and Ready conditions;
 * ownership.c, enqueue_owner, observe_pod: each ownerReference's apiVersion,
 * kind, name, uid and controller). */
#include "test.h"

#include "controller/cachefields.h"
#include "ctrain/json.h"

TEST(pod_conditions_and_owner_refs) {
  cJSON *pod = cJSON_Parse(
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"j-worker-0\","
      "\"namespace\":\"ns\",\"uid\":\"u\",\"resourceVersion\":\"7\","
      "\"ownerReferences\":[{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
      "\"name\":\"j\",\"uid\":\"J\",\"controller\":true,\"blockOwnerDeletion\":true}]},"
      "\"status\":{\"phase\":\"Running\",\"conditions\":["
      "{\"type\":\"PodReadyToStartContainers\",\"status\":\"True\"},"
      "{\"type\":\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\","
      "\"message\":\"0/1 nodes\",\"lastProbeTime\":null},"
      "{\"type\":\"Initialized\",\"status\":\"True\",\"lastTransitionTime\":\"t\"},"
      "{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"NodeNotReady\"},"
      "{\"type\":\"ContainersReady\",\"status\":\"True\"},"
      "{\"status\":\"True\"},"
      "{\"type\":\"DisruptionTarget\",\"status\":\"True\",\"reason\":\"EvictionByEvictionAPI\","
      "\"message\":\"m\"}]}}");
  ASSERT_NOT_NULL(pod);
  ctl_cache_pod_fields(NULL, pod);
  const cJSON *conds = ctrain_json_get(ctrain_json_get(pod, "status"), "conditions");
  char *s = cJSON_PrintUnformatted(conds);
  ASSERT_STR_EQ(s, "[{\"type\":\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\","
                   "\"message\":\"0/1 nodes\"},"
                   "{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"NodeNotReady\"},"
                   "{\"type\":\"DisruptionTarget\",\"status\":\"True\",\"reason\":"
                   "\"EvictionByEvictionAPI\",\"message\":\"m\"}]");
  cJSON_free(s);
  s = cJSON_PrintUnformatted(ctrain_json_get(ctrain_json_get(pod, "metadata"), "ownerReferences"));
  ASSERT_STR_EQ(s, "[{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
                   "\"name\":\"j\",\"uid\":\"J\",\"controller\":true}]");
  cJSON_free(s);
  ASSERT_STR_EQ(ctrain_json_str(pod, "kind"), "Pod"); /* events name the pod by it */
  cJSON_Delete(pod);
}

TEST(pod_without_conditions) {
  cJSON *pod = cJSON_Parse("{\"metadata\":{\"name\":\"p\"},\"status\":{\"phase\":\"Pending\"}}");
  ASSERT_NOT_NULL(pod);
  ctl_cache_pod_fields(NULL, pod);
  char *s = cJSON_PrintUnformatted(pod);
  ASSERT_STR_EQ(s, "{\"metadata\":{\"name\":\"p\"},\"status\":{\"phase\":\"Pending\"}}");
  cJSON_free(s);
  cJSON_Delete(pod);
}

TEST_MAIN(T(pod_conditions_and_owner_refs), T(pod_without_conditions))
