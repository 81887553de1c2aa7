/* test_ctl_cachefields.c - the informer transforms keep what the
 * reconciler, executor and progress poller read of a pod, a job and a
 * Service as the apiserver sends them, and drop the rest (managedFields,
 * the pod spec, kubectl's last-applied copy). */
#include "test.h"

#include "controller/cachefields.h"
#include "ctrain/json.h"

static const cJSON *at(const cJSON *o, const char *a, const char *b, const char *c) {
  const cJSON *x = ctrain_json_get(o, a);
  x = b ? ctrain_json_get(x, b) : x;
  return c ? ctrain_json_get(x, c) : x;
}

TEST(pod_keeps_what_is_read) {
  cJSON *pod = cJSON_Parse(
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"j-worker-0\","
      "\"namespace\":\"ns\",\"uid\":\"u\",\"resourceVersion\":\"7\",\"generation\":1,"
      "\"creationTimestamp\":\"2026-01-01T00:00:00Z\",\"deletionTimestamp\":\"2026-01-01T00:01:"
      "00Z\","
      "\"labels\":{\"ctrain.dev/job-name\":\"j\",\"ctrain.dev/replica-index\":\"0\"},"
      "\"ownerReferences\":[{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
      "\"name\":\"j\",\"uid\":\"J\",\"controller\":true}],"
      "\"managedFields\":[{\"manager\":\"ctrain-controller\",\"fieldsV1\":{\"f:spec\":{}}}]},"
      "\"spec\":{\"nodeName\":\"node1\",\"hostname\":\"j-worker-0\","
      "\"containers\":[{\"name\":\"worker\",\"image\":\"ctrain:latest\","
      "\"env\":[{\"name\":\"TF_CONFIG\",\"value\":\"{}\"}]}]},"
      "\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\",\"message\":\"m\","
      "\"podIP\":\"10.0.0.5\",\"hostIP\":\"10.0.0.1\",\"qosClass\":\"BestEffort\","
      "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"False\",\"reason\":"
      "\"Unschedulable\",\"message\":\"0/1 nodes\",\"lastProbeTime\":null}],"
      "\"initContainerStatuses\":[{\"name\":\"init\",\"image\":\"i\",\"imageID\":\"x\","
      "\"state\":{\"waiting\":{\"reason\":\"ErrImagePull\",\"message\":\"w\"}}}],"
      "\"containerStatuses\":[{\"name\":\"worker\",\"image\":\"ctrain:latest\",\"ready\":false,"
      "\"restartCount\":0,\"imageID\":\"x\",\"state\":{\"terminated\":{\"exitCode\":3,"
      "\"reason\":\"Error\",\"message\":\"{\\\"state\\\":\\\"failed\\\"}\","
      "\"finishedAt\":\"2026-01-01T00:00:30Z\"}}}]}}");
  ASSERT_NOT_NULL(pod);
  ctl_cache_pod_fields(NULL, pod);
  const cJSON *md = ctrain_json_get(pod, "metadata"), *st = ctrain_json_get(pod, "status");
  ASSERT_STR_EQ(ctrain_json_str(md, "name"), "j-worker-0");
  ASSERT_STR_EQ(ctrain_json_str(md, "namespace"), "ns");
  ASSERT_STR_EQ(ctrain_json_str(md, "uid"), "u");
  ASSERT_STR_EQ(ctrain_json_str(md, "resourceVersion"), "7");
  ASSERT_NOT_NULL(ctrain_json_get(md, "deletionTimestamp"));
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(md, "labels"), "ctrain.dev/replica-index"), "0");
  const cJSON *ref = cJSON_GetArrayItem(ctrain_json_get(md, "ownerReferences"), 0);
  ASSERT_STR_EQ(ctrain_json_str(ref, "uid"), "J");
  ASSERT_STR_EQ(ctrain_json_str(ref, "kind"), "TrainingJob");
  ASSERT(cJSON_IsTrue(ctrain_json_get(ref, "controller")));
  ASSERT_NULL(ctrain_json_get(md, "managedFields"));
  ASSERT_STR_EQ(ctrain_json_str(at(pod, "spec", NULL, NULL), "nodeName"), "node1");
  ASSERT_NULL(at(pod, "spec", "containers", NULL));
  ASSERT_NULL(at(pod, "spec", "hostname", NULL));
  ASSERT_STR_EQ(ctrain_json_str(st, "phase"), "Failed");
  ASSERT_STR_EQ(ctrain_json_str(st, "reason"), "Evicted");
  ASSERT_STR_EQ(ctrain_json_str(st, "podIP"), "10.0.0.5");
  ASSERT_NULL(ctrain_json_get(st, "hostIP"));
  ASSERT_NULL(ctrain_json_get(st, "qosClass"));
  const cJSON *cond = cJSON_GetArrayItem(ctrain_json_get(st, "conditions"), 0);
  ASSERT_STR_EQ(ctrain_json_str(cond, "type"), "PodScheduled");
  ASSERT_STR_EQ(ctrain_json_str(cond, "status"), "False");
  ASSERT_STR_EQ(ctrain_json_str(cond, "reason"), "Unschedulable");
  ASSERT_STR_EQ(ctrain_json_str(cond, "message"), "0/1 nodes");
  ASSERT_NULL(ctrain_json_get(cond, "lastProbeTime"));
  const cJSON *cs = cJSON_GetArrayItem(ctrain_json_get(st, "containerStatuses"), 0);
  ASSERT_STR_EQ(ctrain_json_str(cs, "name"), "worker");
  ASSERT_STR_EQ(ctrain_json_str(cs, "image"), "ctrain:latest");
  ASSERT_NULL(ctrain_json_get(cs, "imageID"));
  const cJSON *term = at(cs, "state", "terminated", NULL);
  ASSERT_EQ(ctrain_json_int(term, "exitCode", 0), 3);
  ASSERT_STR_EQ(ctrain_json_str(term, "reason"), "Error");
  ASSERT_STR_EQ(ctrain_json_str(term, "message"), "{\"state\":\"failed\"}");
  ASSERT_STR_EQ(ctrain_json_str(term, "finishedAt"), "2026-01-01T00:00:30Z");
  const cJSON *ics = cJSON_GetArrayItem(ctrain_json_get(st, "initContainerStatuses"), 0);
  ASSERT_STR_EQ(ctrain_json_str(at(ics, "state", "waiting", NULL), "reason"), "ErrImagePull");
  ASSERT_STR_EQ(ctrain_json_str(ics, "name"), "init");
  cJSON_Delete(pod);
}

TEST(job_keeps_spec_and_status_drops_managed_fields) {
  cJSON *job = cJSON_Parse(
      "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{"
      "\"name\":\"j\",\"namespace\":\"ns\",\"uid\":\"J\",\"resourceVersion\":\"9\","
      "\"generation\":2,\"labels\":{\"kueue.x-k8s.io/queue-name\":\"q\"},"
      "\"annotations\":{\"a\":\"b\",\"kubectl.kubernetes.io/last-applied-configuration\":\"{}\"},"
      "\"managedFields\":[{\"manager\":\"kubectl\"}]},"
      "\"spec\":{\"replicaSpecs\":{\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{"
      "\"containers\":[{\"name\":\"worker\",\"image\":\"ctrain:latest\"}]}}}}},"
      "\"status\":{\"attempt\":1,\"conditions\":[{\"type\":\"Created\",\"status\":\"True\"}]}}");
  ASSERT_NOT_NULL(job);
  ctl_cache_job_fields(NULL, job);
  const cJSON *md = ctrain_json_get(job, "metadata");
  ASSERT_STR_EQ(ctrain_json_str(job, "kind"), "TrainingJob");
  ASSERT_STR_EQ(ctrain_json_str(job, "apiVersion"), "ctrain.dev/v1alpha1");
  ASSERT_EQ(ctrain_json_int(md, "generation", 0), 2);
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(md, "labels"), "kueue.x-k8s.io/queue-name"), "q");
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(md, "annotations"), "a"), "b");
  ASSERT_NULL(ctrain_json_get(ctrain_json_get(md, "annotations"),
                              "kubectl.kubernetes.io/last-applied-configuration"));
  ASSERT_NULL(ctrain_json_get(md, "managedFields"));
  const char *path[] = {"spec", "replicaSpecs", "Worker", "template", "spec", "containers"};
  ASSERT_EQ(cJSON_GetArraySize(ctrain_json_path(job, 6, path)), 1);
  ASSERT_EQ(ctrain_json_int(ctrain_json_get(job, "status"), "attempt", 0), 1);
  cJSON_Delete(job);
}

TEST(service_keeps_identity_only) {
  cJSON *svc = cJSON_Parse("{\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\",\"uid\":\"S\","
                           "\"ownerReferences\":[{\"uid\":\"J\"}],\"managedFields\":[{}]},"
                           "\"spec\":{\"clusterIP\":\"None\"},\"status\":{}}");
  ASSERT_NOT_NULL(svc);
  ctl_cache_service_fields(NULL, svc);
  char *s = cJSON_PrintUnformatted(svc);
  ASSERT_STR_EQ(s, "{\"metadata\":{\"name\":\"j\",\"namespace\":\"ns\",\"uid\":\"S\","
                   "\"ownerReferences\":[{\"uid\":\"J\"}]}}");
  cJSON_free(s);
  cJSON_Delete(svc);
}

TEST_MAIN(T(pod_keeps_what_is_read), T(job_keeps_spec_and_status_drops_managed_fields),
          T(service_keeps_identity_only))
