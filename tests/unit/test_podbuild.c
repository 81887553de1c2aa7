/* test_podbuild.c - the pod, Service and Secret the controller builds for a
 * TrainingJob (docs/design.md "Controller contract"). */
#include "test.h"
#include "test_json.h"

#include <cjson/cJSON.h>

#include "controller/jobspec.h"
#include "controller/podbuild.h"
#include "controller/podsec.h"
#include "ctrain/contract.h"
#include "ctrain/tfconfig.h"

#define TMPL(extra)                                                                                \
  "{\"spec\":{\"containers\":[{\"name\":\"train\",\"image\":\"ctrain:dev\"" extra "}]}}"

static const char *JOB =
    "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
    "\"metadata\":{\"name\":\"mnist\",\"namespace\":\"ml\",\"uid\":\"u-123\",\"generation\":1},"
    "\"spec\":{\"port\":2222,\"replicaSpecs\":{"
    "\"Chief\":{\"replicas\":1,\"template\":" TMPL(
        "") "},"
            "\"Worker\":{\"replicas\":3,\"template\":{\"metadata\":{\"labels\":{\"team\":\"a\"}},"
            "\"spec\":{\"containers\":[{\"name\":\"train\",\"image\":\"ctrain:dev\","
            "\"env\":[{\"name\":\"TF_CONFIG\",\"value\":\"bogus\"},{\"name\":\"KEEP\",\"value\":"
            "\"1\"}]},"
            "{\"name\":\"side\",\"image\":\"busybox\"}]}}},"
            "\"Evaluator\":{\"replicas\":1,\"template\":{\"spec\":{"
            "\"automountServiceAccountToken\":true,"
            "\"containers\":[{\"name\":\"eval\"}]}}}},"
            "\"checkpoint\":{\"mountPath\":\"/ckpt\",\"volume\":{\"persistentVolumeClaim\":"
            "{\"claimName\":\"ckpt\"}}}}}";

/* `j`'s spec as the builders take it: read, not judged (some cases are
 * invalid on purpose); valid until the next call. */
static const job_spec *spec_of(const cJSON *j) {
  static job_spec js;
  jobspec_read(j, &js);
  return &js;
}

static cJSON *job(void) {
  cJSON *j = cJSON_Parse(JOB);
  ASSERT_NOT_NULL(j);
  return j;
}

/* The env entry `name` of container `c`; asserts it appears exactly once. */
static const cJSON *env(const cJSON *c, const char *name) {
  const cJSON *found = NULL, *e;
  int n = 0;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "env")) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) {
      found = e;
      n++;
    }
  }
  ASSERT_LE(n, 1);
  return found;
}

/* A key with dots (a label) read without the dotted-path helper. */
static const char *key(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *env_value(const cJSON *c, const char *name) {
  return gets_(env(c, name), "value");
}

TEST(names_and_types) {
  char buf[64];
  ASSERT_OK(podbuild_pod_name("mnist", PODBUILD_EVALUATOR, 0, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "mnist-evaluator-0");
  ASSERT_EQ(podbuild_pod_name("mnist", PODBUILD_WORKER, 12, buf, 8), CTRAIN_E_TOOBIG);
  ASSERT_OK(podbuild_secret_name("mnist", 3, NULL, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "mnist-token-3");
  ASSERT_EQ(podbuild_secret_name("mnist", 3, NULL, buf, 8), CTRAIN_E_TOOBIG);
  ASSERT_EQ(podbuild_type_from_label("worker"), PODBUILD_WORKER);
  ASSERT_EQ(podbuild_type_from_label("Worker"), -1);
  ASSERT_STR_EQ(podbuild_type_spec_name(PODBUILD_CHIEF), "Chief");
  cJSON *j = job();
  ASSERT_EQ(spec_of(j)->replicas[PODBUILD_WORKER], 3);
  ASSERT_EQ(spec_of(j)->replicas[PODBUILD_CHIEF], 1);
  cJSON_DeleteItemFromObject((cJSON *)get(j, "spec.replicaSpecs"), "Chief");
  ASSERT_EQ(spec_of(j)->replicas[PODBUILD_CHIEF], 0);
  cJSON_Delete(j);
}

TEST(worker_pod_shape) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 1, 2, &pod, err, sizeof(err)));
  ASSERT_STR_EQ(gets_(pod, "kind"), "Pod");
  ASSERT_STR_EQ(gets_(pod, "metadata.name"), "mnist-worker-1");
  ASSERT_STR_EQ(gets_(pod, "metadata.namespace"), "ml");
  ASSERT_STR_EQ(gets_(pod, "spec.hostname"), "mnist-worker-1");
  ASSERT_STR_EQ(gets_(pod, "spec.subdomain"), "mnist");
  ASSERT_STR_EQ(gets_(pod, "spec.restartPolicy"), "Never");
  ASSERT(cJSON_IsFalse(get(pod, "spec.automountServiceAccountToken")));
  const cJSON *labels = get(pod, "metadata.labels");
  ASSERT_STR_EQ(key(labels, "ctrain.dev/job-name"), "mnist");
  ASSERT_STR_EQ(key(labels, "ctrain.dev/replica-type"), "worker");
  ASSERT_STR_EQ(key(labels, "ctrain.dev/replica-index"), "1");
  ASSERT_STR_EQ(key(labels, "ctrain.dev/attempt"), "2");
  ASSERT_STR_EQ(key(labels, "team"), "a"); /* the template's labels stay */
  const cJSON *refs = get(pod, "metadata.ownerReferences");
  ASSERT_EQ(cJSON_GetArraySize(refs), 1);
  ASSERT_STR_EQ(gets_(refs, "0.apiVersion"), "ctrain.dev/v1alpha1");
  ASSERT_STR_EQ(gets_(refs, "0.kind"), "TrainingJob");
  ASSERT_STR_EQ(gets_(refs, "0.name"), "mnist");
  ASSERT_STR_EQ(gets_(refs, "0.uid"), "u-123");
  ASSERT(cJSON_IsTrue(get(refs, "0.controller")));
  ASSERT(cJSON_IsTrue(get(refs, "0.blockOwnerDeletion")));
  /* The job's template is not modified by the build. */
  ASSERT_NULL(get(j, "spec.replicaSpecs.Worker.template.spec.hostname"));
  ASSERT_STR_EQ(gets_(j, "spec.replicaSpecs.Worker.template.spec.containers.0.env.0.value"),
                "bogus");
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

TEST(env_in_every_container) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 2, 3, &pod, err, sizeof(err)));
  const cJSON *containers = get(pod, "spec.containers");
  ASSERT_EQ(cJSON_GetArraySize(containers), 2);
  const cJSON *c;
  cJSON_ArrayForEach(c, containers) {
    ASSERT_NOT_NULL(env_value(c, "TF_CONFIG"));
    ASSERT_STR_EQ(env_value(c, "CTRAIN_JOB_NAME"), "mnist");
    ASSERT_STR_EQ(env_value(c, "CTRAIN_NAMESPACE"), "ml");
    ASSERT_STR_EQ(env_value(c, "CTRAIN_ATTEMPT"), "3");
    ASSERT_STR_EQ(env_value(c, "CTRAIN_BACKUP_DIR"), "/ckpt");
    const cJSON *tok = env(c, "CTRAIN_JOB_TOKEN");
    ASSERT_NULL(get(tok, "value"));
    ASSERT_STR_EQ(gets_(tok, "valueFrom.secretKeyRef.name"), "mnist-token-3");
    ASSERT_STR_EQ(gets_(tok, "valueFrom.secretKeyRef.key"), "token");
    const cJSON *m = get(c, "volumeMounts.0");
    ASSERT_STR_EQ(gets_(m, "name"), PODBUILD_CKPT_VOLUME);
    ASSERT_STR_EQ(gets_(m, "mountPath"), "/ckpt");
  }
  /* The template's own variables survive; its TF_CONFIG is replaced. */
  ASSERT_STR_EQ(env_value(get(containers, "0"), "KEEP"), "1");
  ASSERT(strcmp(env_value(get(containers, "0"), "TF_CONFIG"), "bogus") != 0);
  const cJSON *vols = get(pod, "spec.volumes");
  ASSERT_EQ(cJSON_GetArraySize(vols), 1);
  ASSERT_STR_EQ(gets_(vols, "0.name"), PODBUILD_CKPT_VOLUME);
  ASSERT_STR_EQ(gets_(vols, "0.persistentVolumeClaim.claimName"), "ckpt");
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

/* What the controller writes is what the worker (and TF) reads. */
static void check_tfconfig(cJSON *j, podbuild_type t, int index, tfconfig_task_type want_type,
                           int want_rank, int want_world) {
  cJSON *pod = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_pod(spec_of(j), t, index, 1, &pod, err, sizeof(err)));
  const cJSON *c0 = get(pod, "spec.containers.0");
  const char *tfc = env_value(c0, "TF_CONFIG");
  /* The cluster comes from the attempt's ConfigMap through the variable
   * listed before TF_CONFIG; the kubelet expands the reference. */
  const cJSON *var = env(c0, CTRAIN_ENV_TF_CLUSTER);
  ASSERT_STR_EQ(gets_(var, "valueFrom.configMapKeyRef.name"), "mnist-cluster-1");
  ASSERT_STR_EQ(gets_(var, "valueFrom.configMapKeyRef.key"), PODBUILD_CLUSTER_KEY);
  int var_at = -1, tf_at = -1, at = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, get(c0, "env")) {
    var_at = !strcmp(gets_(e, "name"), CTRAIN_ENV_TF_CLUSTER) ? at : var_at;
    tf_at = !strcmp(gets_(e, "name"), "TF_CONFIG") ? at : tf_at;
    at++;
  }
  ASSERT_LT(var_at, tf_at);
  cJSON *cm = NULL;
  ASSERT_OK(podbuild_cluster_configmap(spec_of(j), 1, &cm, err, sizeof(err)));
  const char *cluster = gets_(get(cm, "data"), PODBUILD_CLUSTER_KEY);
  const char *ref = strstr(tfc, "$(" CTRAIN_ENV_TF_CLUSTER ")");
  ASSERT_NOT_NULL(ref);
  char full[4096];
  snprintf(full, sizeof(full), "%.*s%s%s", (int)(ref - tfc), tfc, cluster,
           ref + strlen("$(" CTRAIN_ENV_TF_CLUSTER ")"));
  cJSON_Delete(cm);
  tfconfig tc;
  ASSERT_OK(tfconfig_parse(&tc, full, err, sizeof(err)));
  ASSERT_EQ(tc.type, want_type);
  ASSERT_EQ(tc.index, index);
  ASSERT_EQ(tc.rank, want_rank);
  ASSERT_EQ(tc.world, want_world);
  ASSERT_EQ(tc.n_evaluator, spec_of(j)->replicas[PODBUILD_EVALUATOR]);
  char self[128];
  snprintf(self, sizeof(self), "mnist-%s-%d.mnist.ml.svc:2222", tfconfig_type_name(want_type),
           index);
  ASSERT_STR_EQ(tc.self_addr, self);
  if (want_rank >= 0)
    ASSERT_STR_EQ(tc.addrs[want_rank], self);
  tfconfig_free(&tc);
  cJSON_Delete(pod);
}

TEST(tfconfig_round_trip) {
  cJSON *j = job();
  check_tfconfig(j, PODBUILD_CHIEF, 0, TFCONFIG_CHIEF, 0, 4);
  check_tfconfig(j, PODBUILD_WORKER, 0, TFCONFIG_WORKER, 1, 4);
  check_tfconfig(j, PODBUILD_WORKER, 2, TFCONFIG_WORKER, 3, 4);
  check_tfconfig(j, PODBUILD_EVALUATOR, 0, TFCONFIG_EVALUATOR, -1, 4);
  /* Without a chief, worker i has rank i and worker 0 is the chief. */
  cJSON_DeleteItemFromObject((cJSON *)get(j, "spec.replicaSpecs"), "Chief");
  check_tfconfig(j, PODBUILD_WORKER, 0, TFCONFIG_WORKER, 0, 3);
  check_tfconfig(j, PODBUILD_WORKER, 2, TFCONFIG_WORKER, 2, 3);
  cJSON_Delete(j);
}

TEST(automount_and_no_checkpoint) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  /* The evaluator's template asks for the token: kept. */
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_EVALUATOR, 0, 1, &pod, err, sizeof(err)));
  ASSERT(cJSON_IsTrue(get(pod, "spec.automountServiceAccountToken")));
  cJSON_Delete(pod);
  pod = NULL;
  cJSON_DeleteItemFromObject((cJSON *)get(j, "spec"), "checkpoint");
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)));
  const cJSON *c = get(pod, "spec.containers.0");
  ASSERT_NULL(env(c, "CTRAIN_BACKUP_DIR"));
  ASSERT_NULL(get(c, "volumeMounts"));
  ASSERT_NULL(get(pod, "spec.volumes"));
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

TEST(pod_errors) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT_EQ(podbuild_pod(spec_of(j), PODBUILD_WORKER, 3, 1, &pod, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "spec.replicaSpecs.Worker");
  ASSERT_NULL(pod);
  ASSERT_EQ(podbuild_pod(spec_of(j), PODBUILD_WORKER, 0, 0, &pod, err, sizeof(err)),
            CTRAIN_E_INVAL);
  cJSON_ReplaceItemInObject((cJSON *)get(j, "spec.replicaSpecs.Chief.template.spec"), "containers",
                            cJSON_CreateArray());
  ASSERT_EQ(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "spec.replicaSpecs.Chief.template.spec.containers");
  ASSERT_NULL(pod);
  cJSON_DeleteItemFromObject((cJSON *)get(j, "metadata"), "uid");
  ASSERT_EQ(podbuild_pod(spec_of(j), PODBUILD_WORKER, 0, 1, &pod, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "metadata.uid");
  cJSON_Delete(j);
}

/* spec.checkpoint.uri: a job with `s3` storage, an endpoint and a
 * credentials Secret (replacing the volume). */
static cJSON *s3_job(const char *endpoint) {
  cJSON *j = job();
  cJSON *spec = (cJSON *)get(j, "spec");
  cJSON *ck = cJSON_CreateObject();
  cJSON_AddStringToObject(ck, "uri", "s3://bucket/runs/mnist");
  if (endpoint)
    cJSON_AddStringToObject(ck, "endpoint", endpoint);
  cJSON_AddStringToObject(ck, "credentialsSecret", "s3-creds");
  cJSON_ReplaceItemInObject(spec, "checkpoint", ck);
  return j;
}

static void assert_secret_ref(const cJSON *c, const char *name, int optional) {
  const cJSON *e = env(c, name);
  ASSERT_NOT_NULL(e);
  ASSERT_NULL(get(e, "value"));
  const cJSON *ref = get(e, "valueFrom.secretKeyRef");
  ASSERT_EQ(cJSON_GetArraySize(ref), 3);
  ASSERT_STR_EQ(gets_(ref, "name"), "s3-creds");
  ASSERT_STR_EQ(gets_(ref, "key"), name);
  ASSERT(optional ? cJSON_IsTrue(get(ref, "optional")) : cJSON_IsFalse(get(ref, "optional")));
}

TEST(backup_uri_env) {
  cJSON *j = s3_job("http://minio.storage:9000"), *pod = NULL;
  char err[256] = "";
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++) {
    ASSERT_OK(podbuild_pod(spec_of(j), t, 0, 2, &pod, err, sizeof(err)));
    const cJSON *c;
    cJSON_ArrayForEach(c, get(pod, "spec.containers")) {
      ASSERT_STR_EQ(env_value(c, "CTRAIN_BACKUP_URI"), "s3://bucket/runs/mnist");
      ASSERT_STR_EQ(env_value(c, "CTRAIN_S3_ENDPOINT"), "http://minio.storage:9000");
      assert_secret_ref(c, "AWS_ACCESS_KEY_ID", 0);
      assert_secret_ref(c, "AWS_SECRET_ACCESS_KEY", 0);
      assert_secret_ref(c, "AWS_SESSION_TOKEN", 1);
      /* No volume: nothing mounted, no backup dir. */
      ASSERT_NULL(env(c, "CTRAIN_BACKUP_DIR"));
      ASSERT_NULL(get(c, "volumeMounts"));
    }
    ASSERT_NULL(get(pod, "spec.volumes"));
    cJSON_Delete(pod);
    pod = NULL;
  }
  /* The worker template's own variables stay; exactly ours are added. */
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 1, 1, &pod, err, sizeof(err)));
  const cJSON *w = get(pod, "spec.containers.0");
  ASSERT_STR_EQ(env_value(w, "KEEP"), "1");
  /* The cluster, TF_CONFIG, 3 CTRAIN_*, the token, URI, endpoint, 3 AWS_*, the progress
   * port, KEEP. */
  ASSERT_EQ(cJSON_GetArraySize(get(w, "env")), 13);
  ASSERT_STR_EQ(env_value(w, "CTRAIN_PROGRESS_PORT"), "8471");
  cJSON_Delete(pod);
  pod = NULL;
  /* The evaluator takes no part in backups. */
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_EVALUATOR, 0, 1, &pod, err, sizeof(err)));
  ASSERT_NULL(env(get(pod, "spec.containers.0"), "CTRAIN_BACKUP_URI"));
  ASSERT_NULL(env(get(pod, "spec.containers.0"), "AWS_ACCESS_KEY_ID"));
  cJSON_Delete(pod);
  pod = NULL;
  cJSON_Delete(j);

  /* Without an endpoint: no CTRAIN_S3_ENDPOINT (the worker's default). */
  j = s3_job(NULL);
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)));
  ASSERT_NULL(env(get(pod, "spec.containers.0"), "CTRAIN_S3_ENDPOINT"));
  ASSERT_STR_EQ(env_value(get(pod, "spec.containers.0"), "CTRAIN_BACKUP_URI"),
                "s3://bucket/runs/mnist");
  cJSON_Delete(pod);
  pod = NULL;
  /* Errors name the field. */
  cJSON *ck = (cJSON *)get(j, "spec.checkpoint");
  cJSON_DeleteItemFromObject(ck, "credentialsSecret");
  ASSERT_EQ(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "spec.checkpoint.credentialsSecret");
  cJSON_ReplaceItemInObject(ck, "uri", cJSON_CreateString("file:///tmp"));
  ASSERT_EQ(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "spec.checkpoint.uri");
  ASSERT_NULL(pod);
  cJSON_Delete(j);
}

TEST(service_shape) {
  cJSON *j = job(), *svc = NULL;
  char err[256] = "";
  cJSON_ReplaceItemInObject((cJSON *)get(j, "spec"), "port", cJSON_CreateNumber(3333));
  ASSERT_OK(podbuild_service(spec_of(j), &svc, err, sizeof(err)));
  ASSERT_STR_EQ(gets_(svc, "kind"), "Service");
  ASSERT_STR_EQ(gets_(svc, "metadata.name"), "mnist");
  ASSERT_STR_EQ(gets_(svc, "metadata.namespace"), "ml");
  ASSERT_STR_EQ(gets_(svc, "metadata.ownerReferences.0.uid"), "u-123");
  ASSERT_STR_EQ(gets_(svc, "spec.clusterIP"), "None");
  ASSERT(cJSON_IsTrue(get(svc, "spec.publishNotReadyAddresses")));
  cJSON_Delete(svc);
  cJSON_Delete(j);
}

TEST(service_selector_and_port) {
  cJSON *j = job(), *svc = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_service(spec_of(j), &svc, err, sizeof(err)));
  const cJSON *sel = get(svc, "spec.selector");
  ASSERT_EQ(cJSON_GetArraySize(sel), 1);
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(sel, PODBUILD_LABEL_JOB)->valuestring, "mnist");
  ASSERT_EQ(get(svc, "spec.ports.0.port")->valuedouble, 2222);
  ASSERT_EQ(get(svc, "spec.ports.0.targetPort")->valuedouble, 2222);
  cJSON_Delete(svc);
  cJSON_Delete(j);
}

TEST(secret_shape) {
  cJSON *j = job(), *sec = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_secret(spec_of(j), 2, "abcd", &sec, err, sizeof(err)));
  ASSERT_STR_EQ(gets_(sec, "kind"), "Secret");
  ASSERT_STR_EQ(gets_(sec, "metadata.name"), "mnist-token-2");
  ASSERT_NULL(get(sec, "metadata.resourceVersion"));
  ASSERT_STR_EQ(gets_(sec, "metadata.ownerReferences.0.uid"), "u-123");
  ASSERT(cJSON_IsTrue(get(sec, "metadata.ownerReferences.0.controller")));
  ASSERT_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(get(sec, "metadata.labels"),
                                                                      PODBUILD_LABEL_ATTEMPT)),
                "2");
  ASSERT_STR_EQ(gets_(sec, "stringData.token"), "abcd");
  ASSERT_EQ(cJSON_GetArraySize(get(sec, "stringData")), 1);
  cJSON_Delete(sec);
  sec = NULL;
  ASSERT_EQ(podbuild_secret(spec_of(j), 1, "", &sec, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(sec);
  ASSERT_EQ(podbuild_secret(spec_of(j), 0, "abcd", &sec, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(sec);
  cJSON_Delete(j);
}

/* The progress port: env and a containerPort `progress` on the training
 * container of the chief and the workers (default 8471, spec.progressPort
 * wins), none on the evaluator. */
TEST(cluster_configmap_shape) {
  cJSON *j = job(), *cm = NULL;
  char err[256] = "", buf[64];
  ASSERT_OK(podbuild_cluster_name("mnist", 4, NULL, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "mnist-cluster-4");
  ASSERT_EQ(podbuild_cluster_name("mnist", 4, NULL, buf, 8), CTRAIN_E_TOOBIG);
  ASSERT_OK(podbuild_cluster_configmap(spec_of(j), 4, &cm, err, sizeof(err)));
  ASSERT_STR_EQ(gets_(cm, "apiVersion"), "v1");
  ASSERT_STR_EQ(gets_(cm, "kind"), "ConfigMap");
  ASSERT_STR_EQ(gets_(cm, "metadata.name"), "mnist-cluster-4");
  ASSERT_STR_EQ(gets_(cm, "metadata.namespace"), "ml");
  ASSERT_STR_EQ(key(get(cm, "metadata.labels"), PODBUILD_LABEL_JOB), "mnist");
  ASSERT_STR_EQ(key(get(cm, "metadata.labels"), PODBUILD_LABEL_ATTEMPT), "4");
  ASSERT_STR_EQ(gets_(cm, "metadata.ownerReferences.0.uid"), "u-123");
  ASSERT(cJSON_IsTrue(get(cm, "immutable")));
  const char *cluster = gets_(get(cm, "data"), PODBUILD_CLUSTER_KEY);
  ASSERT_STR_EQ(cluster,
                "{\"chief\":[\"mnist-chief-0.mnist.ml.svc:2222\"],"
                "\"worker\":[\"mnist-worker-0.mnist.ml.svc:2222\","
                "\"mnist-worker-1.mnist.ml.svc:2222\",\"mnist-worker-2.mnist.ml.svc:2222\"],"
                "\"evaluator\":[\"mnist-evaluator-0.mnist.ml.svc:2222\"]}");
  size_t size = 0;
  ASSERT_OK(podbuild_cluster_size(spec_of(j), &size));
  ASSERT_EQ(size, strlen(cluster));
  cJSON_Delete(cm);
  ASSERT_EQ(podbuild_cluster_configmap(spec_of(j), 0, &cm, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(cm);
  cJSON_Delete(j);
}

TEST(progress_port) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 1, 1, &pod, err, sizeof(err)));
  const cJSON *c0 = get(pod, "spec.containers.0");
  ASSERT_STR_EQ(env_value(c0, "CTRAIN_PROGRESS_PORT"), "8471");
  ASSERT_STR_EQ(gets_(c0, "ports.0.name"), "progress");
  ASSERT_EQ(get(c0, "ports.0.containerPort")->valuedouble, 8471);
  ASSERT_NULL(env(get(pod, "spec.containers.1"), "CTRAIN_PROGRESS_PORT"));
  cJSON_Delete(pod);
  pod = NULL;
  cJSON_AddNumberToObject((cJSON *)get(j, "spec"), "progressPort", 9100);
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)));
  c0 = get(pod, "spec.containers.0");
  ASSERT_STR_EQ(env_value(c0, "CTRAIN_PROGRESS_PORT"), "9100");
  ASSERT_EQ(get(c0, "ports.0.containerPort")->valuedouble, 9100);
  cJSON_Delete(pod);
  pod = NULL;
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_EVALUATOR, 0, 1, &pod, err, sizeof(err)));
  ASSERT_NULL(env(get(pod, "spec.containers.0"), "CTRAIN_PROGRESS_PORT"));
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

/* The NetworkPolicy of attempt 3: pods of the same job AND attempt on every
 * port (NCCL's ephemeral ones too); the controller's pods, from its own
 * namespace only (the immutable metadata.name label), to the progress port
 * only. */
TEST(network_policy_progress_rule) {
  cJSON *j = job(), *np = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_network_policy(spec_of(j), 3, "ctl-ns", &np, err, sizeof(err)));
  ASSERT_EQ(cJSON_GetArraySize(get(np, "spec.ingress")), 2);
  ASSERT(get(np, "spec.ingress.0.ports") == NULL);
  const cJSON *peer = get(np, "spec.ingress.0.from.0.podSelector.matchLabels");
  ASSERT_STR_EQ(key(peer, "ctrain.dev/attempt"), "3");
  ASSERT(key(peer, "ctrain.dev/job-name") != NULL);
  ASSERT(key(get(np, "spec.podSelector.matchLabels"), "ctrain.dev/attempt") == NULL);
  const cJSON *r = get(np, "spec.ingress.1");
  ASSERT_EQ(cJSON_GetArraySize(get(r, "ports")), 1);
  ASSERT_EQ(get(r, "ports.0.port")->valuedouble, 8471);
  ASSERT_EQ(cJSON_GetArraySize(get(r, "from")), 1);
  ASSERT_STR_EQ(key(get(r, "from.0.namespaceSelector.matchLabels"), "kubernetes.io/metadata.name"),
                "ctl-ns");
  const cJSON *ml = get(r, "from.0.podSelector.matchLabels");
  ASSERT_STR_EQ(key(ml, "app.kubernetes.io/name"), "ctrain");
  ASSERT_STR_EQ(key(ml, "app.kubernetes.io/component"), "controller");
  cJSON_Delete(np);
  ASSERT_EQ(podbuild_network_policy(spec_of(j), 0, "ctl-ns", &np, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_EQ(podbuild_network_policy(spec_of(j), 1, NULL, &np, err, sizeof(err)), CTRAIN_E_INVAL);
  cJSON_Delete(j);
}

/* Every pod carries the attempt finalizer once, and chief and workers
 * tolerate a lost node for PODBUILD_NODE_LOSS_TOLERATION_S unless the
 * template says otherwise. */
TEST(pod_finalizer_and_tolerations) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 0, 1, &pod, err, sizeof(err)));
  const cJSON *f = get(pod, "metadata.finalizers");
  ASSERT_EQ(cJSON_GetArraySize(f), 1);
  ASSERT_STR_EQ(cJSON_GetArrayItem(f, 0)->valuestring, PODBUILD_FINALIZER);
  const cJSON *tol = get(pod, "spec.tolerations");
  ASSERT_EQ(cJSON_GetArraySize(tol), 2);
  ASSERT_STR_EQ(key(cJSON_GetArrayItem(tol, 1), "key"), "node.kubernetes.io/unreachable");
  ASSERT_EQ(get(pod, "spec.tolerations.1.tolerationSeconds")->valuedouble,
            PODBUILD_NODE_LOSS_TOLERATION_S);
  ASSERT_STR_EQ(key(cJSON_GetArrayItem(tol, 0), "effect"), "NoExecute");
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

/* The securityContext `restricted:latest` asks for, on every container of a
 * pod whose template sets none (the worker's two containers, sidecar
 * included), and fsGroup for the checkpoint volume. */
static void assert_restricted_container(const cJSON *c) {
  ASSERT(cJSON_IsFalse(get(c, "securityContext.allowPrivilegeEscalation")));
  const cJSON *drop = get(c, "securityContext.capabilities.drop");
  ASSERT_EQ(cJSON_GetArraySize(drop), 1);
  ASSERT_STR_EQ(cJSON_GetArrayItem(drop, 0)->valuestring, "ALL");
}

TEST(pod_security_restricted_by_default) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 1, 1, &pod, err, sizeof(err)));
  ASSERT(cJSON_IsTrue(get(pod, "spec.securityContext.runAsNonRoot")));
  ASSERT_STR_EQ(gets_(pod, "spec.securityContext.seccompProfile.type"), "RuntimeDefault");
  ASSERT_EQ(get(pod, "spec.securityContext.fsGroup")->valuedouble, PODSEC_FS_GROUP);
  ASSERT_STR_EQ(gets_(pod, "spec.securityContext.fsGroupChangePolicy"), "OnRootMismatch");
  ASSERT_EQ(cJSON_GetArraySize(get(pod, "spec.containers")), 2);
  assert_restricted_container(get(pod, "spec.containers.0"));
  assert_restricted_container(get(pod, "spec.containers.1"));
  cJSON_Delete(pod);
  pod = NULL;
  /* No checkpoint volume: no fsGroup (it would touch only the user's volumes). */
  cJSON_DeleteItemFromObject((cJSON *)get(j, "spec"), "checkpoint");
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)));
  ASSERT_NULL(get(pod, "spec.securityContext.fsGroup"));
  ASSERT(cJSON_IsTrue(get(pod, "spec.securityContext.runAsNonRoot")));
  assert_restricted_container(get(pod, "spec.containers.0"));
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

/* Replaces the Chief's template spec of `j` by the JSON `spec`. */
static void set_chief_spec(cJSON *j, const char *spec) {
  cJSON *t = (cJSON *)get(j, "spec.replicaSpecs.Chief.template");
  cJSON *v = cJSON_Parse(spec);
  ASSERT_NOT_NULL(v);
  ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(t, "spec", v));
}

/* What the template sets is kept: its seccomp profile, runAsNonRoot false,
 * its fsGroup, a privileged container (no allowPrivilegeEscalation: the API
 * refuses false with privileged), its own capabilities.drop; init
 * containers get the defaults too. */
TEST(pod_security_template_wins) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  set_chief_spec(j, "{\"securityContext\":{\"runAsNonRoot\":false,\"fsGroup\":1000,"
                    "\"seccompProfile\":{\"type\":\"Localhost\",\"localhostProfile\":\"p\"}},"
                    "\"initContainers\":[{\"name\":\"init\"}],"
                    "\"containers\":[{\"name\":\"a\",\"securityContext\":{\"privileged\":true}},"
                    "{\"name\":\"b\",\"securityContext\":{\"allowPrivilegeEscalation\":true,"
                    "\"capabilities\":{\"drop\":[\"NET_RAW\"],\"add\":[\"SYS_PTRACE\"]}}}]}");
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)));
  ASSERT(cJSON_IsFalse(get(pod, "spec.securityContext.runAsNonRoot")));
  ASSERT_EQ(get(pod, "spec.securityContext.fsGroup")->valuedouble, 1000);
  ASSERT_NULL(get(pod, "spec.securityContext.fsGroupChangePolicy"));
  ASSERT_STR_EQ(gets_(pod, "spec.securityContext.seccompProfile.type"), "Localhost");
  assert_restricted_container(get(pod, "spec.initContainers.0"));
  ASSERT_NULL(get(pod, "spec.containers.0.securityContext.allowPrivilegeEscalation"));
  ASSERT_STR_EQ(gets_(pod, "spec.containers.0.securityContext.capabilities.drop.0"), "ALL");
  ASSERT(cJSON_IsTrue(get(pod, "spec.containers.1.securityContext.allowPrivilegeEscalation")));
  ASSERT_STR_EQ(gets_(pod, "spec.containers.1.securityContext.capabilities.drop.0"), "NET_RAW");
  ASSERT_EQ(cJSON_GetArraySize(get(pod, "spec.containers.1.securityContext.capabilities.drop")), 1);
  ASSERT_STR_EQ(gets_(pod, "spec.containers.1.securityContext.capabilities.add.0"), "SYS_PTRACE");
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

/* A template with runAsUser 0 (pod or any container) runs as root: no
 * runAsNonRoot, which would keep it from starting; the rest still applies. */
TEST(pod_security_root_template_not_refused) {
  static const char *const specs[] = {
      "{\"securityContext\":{\"runAsUser\":0},\"containers\":[{\"name\":\"a\"}]}",
      "{\"containers\":[{\"name\":\"a\"},{\"name\":\"b\",\"securityContext\":"
      "{\"runAsUser\":0}}]}",
      "{\"initContainers\":[{\"name\":\"i\",\"securityContext\":{\"runAsUser\":0}}],"
      "\"containers\":[{\"name\":\"a\"}]}",
  };
  for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
    cJSON *j = job(), *pod = NULL;
    char err[256] = "";
    set_chief_spec(j, specs[i]);
    ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_CHIEF, 0, 1, &pod, err, sizeof(err)));
    ASSERT_NULL(get(pod, "spec.securityContext.runAsNonRoot"));
    ASSERT_STR_EQ(gets_(pod, "spec.securityContext.seccompProfile.type"), "RuntimeDefault");
    assert_restricted_container(get(pod, "spec.containers.0"));
    cJSON_Delete(pod);
    cJSON_Delete(j);
  }
}

/* A TFJob's pods (the adapter's job carries kind TFJob) get no
 * securityContext of ours, as training-operator's. */
TEST(pod_security_not_on_tfjob_pods) {
  cJSON *j = job(), *pod = NULL;
  char err[256] = "";
  ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(j, "apiVersion",
                                                cJSON_CreateString("kubeflow.org/v1")));
  ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(j, "kind", cJSON_CreateString("TFJob")));
  ASSERT_OK(podbuild_pod(spec_of(j), PODBUILD_WORKER, 0, 1, &pod, err, sizeof(err)));
  ASSERT_NULL(get(pod, "spec.securityContext"));
  ASSERT_NULL(get(pod, "spec.containers.0.securityContext"));
  cJSON_Delete(pod);
  cJSON_Delete(j);
}

TEST_MAIN(T(cluster_configmap_shape), T(progress_port), T(network_policy_progress_rule),
          T(pod_finalizer_and_tolerations), T(names_and_types), T(worker_pod_shape),
          T(env_in_every_container), T(tfconfig_round_trip), T(automount_and_no_checkpoint),
          T(pod_errors), T(service_shape), T(service_selector_and_port), T(secret_shape),
          T(backup_uri_env), T(pod_security_restricted_by_default), T(pod_security_template_wins),
          T(pod_security_root_template_not_refused), T(pod_security_not_on_tfjob_pods))
