/* test_ctl_jobspec.c - the TrainingJob spec parsed into a job_spec
 * (controller/jobspec.h): typed fields, their defaults, what a wrong value
 * reads as, and the verdict. The verdict's every message is test_reconcile's
 * (InvalidSpec cases) and tests/integration/test_crd.py's. */
#include "test.h"

#include <cjson/cJSON.h>

#include "controller/jobspec.h"
#include "ctrain/contract.h"

#define MD   "\"metadata\":{\"name\":\"mnist\",\"namespace\":\"ml\",\"uid\":\"u-1\"}"
#define TMPL "{\"spec\":{\"containers\":[{\"name\":\"train\",\"image\":\"ctrain:dev\"}]}}"

static cJSON *parse(const char *text) {
  cJSON *j = cJSON_Parse(text);
  ASSERT_NOT_NULL(j);
  return j;
}

TEST(defaults) {
  cJSON *j = parse("{" MD ",\"spec\":{\"replicaSpecs\":{\"Worker\":{\"template\":" TMPL "}}}}");
  job_spec js;
  char msg[256] = "";
  ASSERT_OK(jobspec_parse(j, &js, msg, sizeof(msg)));
  ASSERT_STR_EQ(js.name, "mnist");
  ASSERT_STR_EQ(js.ns, "ml");
  ASSERT_STR_EQ(js.uid, "u-1");
  ASSERT_STR_EQ(js.kind, PODBUILD_KIND);
  ASSERT_STR_EQ(js.api_version, PODBUILD_API_VERSION);
  ASSERT(js.job == j);
  ASSERT_EQ(js.deleting, 0);
  ASSERT_NULL(js.queue);
  ASSERT_EQ(js.present[PODBUILD_WORKER], 1);
  ASSERT_EQ(js.replicas[PODBUILD_WORKER], 1); /* the CRD default */
  ASSERT_EQ(js.present[PODBUILD_CHIEF], 0);
  ASSERT_EQ(js.replicas[PODBUILD_CHIEF], 0);
  ASSERT_EQ(jobspec_replicas(&js, PODBUILD_EVALUATOR), 0);
  ASSERT_NULL(js.tmpl[PODBUILD_CHIEF]);
  ASSERT(js.tmpl[PODBUILD_WORKER] ==
         cJSON_GetObjectItemCaseSensitive(
             cJSON_GetObjectItemCaseSensitive(
                 cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "spec"),
                                                  "replicaSpecs"),
                 "Worker"),
             "template"));
  ASSERT_EQ(js.port, CTRAIN_DEFAULT_COLLECTIVE_PORT);
  ASSERT_EQ(js.progress_port, CTRAIN_DEFAULT_PROGRESS_PORT);
  ASSERT_EQ(js.backoff_limit, 3);
  ASSERT_EQ(js.max_disruptions, 10);
  ASSERT_EQ(js.active_deadline_s, 0);
  ASSERT_EQ(js.ttl_s, -1);
  ASSERT_EQ(js.progress_deadline_s, 0);
  ASSERT_EQ(js.restart, POL_ON_FAILURE);
  ASSERT_EQ(js.clean, CLEAN_RUNNING);
  ASSERT_EQ(js.success, SUCC_CHIEF_OR_WORKER0);
  ASSERT_EQ(js.suspend, 0);
  ASSERT_EQ(js.ckpt.kind, JOBSPEC_CKPT_NONE);
  ASSERT_NULL(js.ckpt.mount_path);
  cJSON_Delete(j);
}

TEST(every_field_typed) {
  cJSON *j = parse(
      "{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"TFJob\","
      "\"metadata\":{\"name\":\"mnist\",\"namespace\":\"ml\",\"uid\":\"u-1\","
      "\"deletionTimestamp\":\"2026-01-01T00:00:00Z\","
      "\"labels\":{\"kueue.x-k8s.io/queue-name\":\"q\"}},"
      "\"spec\":{\"port\":3333,\"progressPort\":9000,\"backoffLimit\":0,\"maxDisruptions\":2,"
      "\"activeDeadlineSeconds\":60,\"ttlSecondsAfterFinished\":0,"
      "\"progressDeadlineSeconds\":600,\"restartPolicy\":\"ExitCode\",\"cleanPodPolicy\":\"None\","
      "\"successPolicy\":\"AllWorkers\",\"suspend\":true,"
      "\"checkpoint\":{\"mountPath\":\"/ckpt\",\"volume\":{\"emptyDir\":{}}},"
      "\"replicaSpecs\":{\"Chief\":{\"replicas\":1,\"template\":" TMPL "},"
      "\"Worker\":{\"replicas\":4,\"template\":" TMPL "},"
      "\"Evaluator\":{\"replicas\":1,\"template\":" TMPL "}}}}");
  job_spec js;
  char msg[256] = "";
  ASSERT_OK(jobspec_parse(j, &js, msg, sizeof(msg)));
  ASSERT_STR_EQ(js.kind, "TFJob");
  ASSERT_STR_EQ(js.api_version, "kubeflow.org/v1");
  ASSERT_EQ(js.deleting, 1);
  ASSERT_STR_EQ(js.queue, "q");
  ASSERT_EQ(js.replicas[PODBUILD_CHIEF], 1);
  ASSERT_EQ(js.replicas[PODBUILD_WORKER], 4);
  ASSERT_EQ(js.replicas[PODBUILD_EVALUATOR], 1);
  ASSERT_EQ(js.port, 3333);
  ASSERT_EQ(js.progress_port, 9000);
  ASSERT_EQ(js.backoff_limit, 0);
  ASSERT_EQ(js.max_disruptions, 2);
  ASSERT_EQ(js.active_deadline_s, 60);
  ASSERT_EQ(js.ttl_s, 0);
  ASSERT_EQ(js.progress_deadline_s, 600);
  ASSERT_EQ(js.restart, POL_EXIT_CODE);
  ASSERT_EQ(js.clean, CLEAN_NONE);
  ASSERT_EQ(js.success, SUCC_ALL_WORKERS);
  ASSERT_EQ(js.suspend, 1);
  ASSERT_EQ(js.ckpt.kind, JOBSPEC_CKPT_VOLUME);
  ASSERT_STR_EQ(js.ckpt.mount_path, "/ckpt");
  ASSERT_NOT_NULL(cJSON_GetObjectItemCaseSensitive(js.ckpt.volume, "emptyDir"));
  cJSON_Delete(j);

  j = parse("{" MD ",\"spec\":{\"checkpoint\":{\"uri\":\"s3://bucket/runs\",\"endpoint\":"
            "\"http://minio:9000\",\"credentialsSecret\":\"creds\"},"
            "\"replicaSpecs\":{\"Worker\":{\"replicas\":2,\"template\":" TMPL "}}}}");
  ASSERT_OK(jobspec_parse(j, &js, msg, sizeof(msg)));
  ASSERT_EQ(js.ckpt.kind, JOBSPEC_CKPT_URI);
  ASSERT_STR_EQ(js.ckpt.uri, "s3://bucket/runs");
  ASSERT_STR_EQ(js.ckpt.endpoint, "http://minio:9000");
  ASSERT_STR_EQ(js.ckpt.credentials, "creds");
  ASSERT_NULL(js.ckpt.volume);
  cJSON_Delete(j);
}

/* A wrong value: the verdict names the field, the struct reads the default,
 * so a pass can still clean up after the job. jobspec_read fills the same
 * struct without a verdict. */
TEST(wrong_values_read_as_defaults) {
  static const struct {
    const char *spec, *field;
  } rows[] = {
      {"\"restartPolicy\":\"Sometimes\"", "spec.restartPolicy: unknown value 'Sometimes'"},
      {"\"cleanPodPolicy\":\"Some\"", "spec.cleanPodPolicy: unknown value 'Some'"},
      {"\"successPolicy\":\"Any\"", "spec.successPolicy: unknown value 'Any'"},
      {"\"port\":70000", "spec.port"},
      {"\"backoffLimit\":-1", "spec.backoffLimit"},
      {"\"checkpoint\":{\"mountPath\":\"rel\",\"volume\":{}}",
       "spec.checkpoint.mountPath: must be an absolute path"},
      {"\"checkpoint\":{\"uri\":\"s3://bucket\",\"credentialsSecret\":\"c\",\"volume\":{}}",
       "spec.checkpoint.uri: mutually exclusive with spec.checkpoint.volume"},
      {"\"checkpoint\":{\"uri\":\"s3://bucket\"}",
       "spec.checkpoint.credentialsSecret: required with uri"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char text[1024], msg[512] = "";
    snprintf(text, sizeof(text),
             "{" MD ",\"spec\":{%s,\"replicaSpecs\":{\"Worker\":{\"replicas\":2,\"template\":" TMPL
             "}}}}",
             rows[i].spec);
    cJSON *j = parse(text);
    job_spec js, read;
    ASSERT_EQ(jobspec_parse(j, &js, msg, sizeof(msg)), CTRAIN_E_CONFIG);
    ASSERT_STR_CONTAINS(msg, rows[i].field);
    ASSERT_EQ(js.restart, POL_ON_FAILURE);
    ASSERT_EQ(js.clean, CLEAN_RUNNING);
    ASSERT_EQ(js.success, SUCC_CHIEF_OR_WORKER0);
    ASSERT_EQ(js.replicas[PODBUILD_WORKER], 2);
    if (strstr(rows[i].field, "checkpoint")) {
      ASSERT_EQ(js.ckpt.kind, JOBSPEC_CKPT_INVALID);
      ASSERT_STR_CONTAINS(msg, js.ckpt.why);
    }
    jobspec_read(j, &read);
    ASSERT_EQ(read.restart, js.restart);
    ASSERT_EQ(read.ckpt.kind, js.ckpt.kind);
    ASSERT_EQ(read.port, js.port);
    cJSON_Delete(j);
  }
}

/* A count the reconciler cannot size by reads as 0 (no slots, no pods);
 * the verdict quotes it as written. */
TEST(replicas_out_of_range) {
  cJSON *j = parse("{" MD ",\"spec\":{\"replicaSpecs\":{\"Worker\":{\"replicas\":5000,"
                   "\"template\":" TMPL "},\"Chief\":{\"replicas\":2,\"template\":" TMPL "}}}}");
  job_spec js;
  char msg[256] = "";
  ASSERT_EQ(jobspec_parse(j, &js, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_EQ(msg, "spec.replicaSpecs.Chief.replicas: 2 is outside 1..1");
  ASSERT_EQ(js.replicas[PODBUILD_WORKER], 0);
  ASSERT_EQ(js.replicas[PODBUILD_CHIEF], 2);
  cJSON_DeleteItemFromObject(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "spec"), "replicaSpecs"),
      "Chief");
  ASSERT_EQ(jobspec_parse(j, &js, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_EQ(msg, "spec.replicaSpecs.Worker.replicas: 5000 is outside 1..4096");
  cJSON_Delete(j);
  /* No spec at all: filled, refused. */
  j = parse("{" MD "}");
  ASSERT_EQ(jobspec_parse(j, &js, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_EQ(msg, "spec: required");
  ASSERT_EQ(js.replicas[PODBUILD_WORKER], 0);
  ASSERT_EQ(js.port, CTRAIN_DEFAULT_COLLECTIVE_PORT);
  cJSON_Delete(j);
}

TEST_MAIN(T(defaults), T(every_field_typed), T(wrong_values_read_as_defaults),
          T(replicas_out_of_range))
