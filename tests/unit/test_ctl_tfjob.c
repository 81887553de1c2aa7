/* test_ctl_tfjob.c - kubeflow.org/v1 TFJob through the TrainingJob
 * reconciler (controller/tfjob.h): the mapping in, training-operator's
 * defaults, PS rejected, and the passes of the real recon_reconcile turned
 * into TFJob's status, labels, events and annotations, with a status that
 * round-trips (no write on a pass that changes nothing). */
#include "test.h"
#include "test_json.h"

#include <cjson/cJSON.h>

#include "controller/jobspec.h"
#include "controller/options.h"
#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "controller/tfjob.h"
#include "ctrain/contract.h"

#define TMPL(port)                                                                                 \
  "{\"spec\":{\"containers\":[{\"name\":\"sidecar\",\"image\":\"busybox\"},"                       \
  "{\"name\":\"tensorflow\",\"image\":\"tf:2\",\"ports\":[{\"name\":\"tfjob-port\","               \
  "\"containerPort\":" port "}]}]}}"

#define MD                                                                                         \
  "\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"TFJob\",\"metadata\":{\"name\":\"mn\","           \
  "\"namespace\":\"ml\",\"uid\":\"u-1\",\"generation\":2,\"resourceVersion\":\"7\"}"

/* o[key] as a string: a label or annotation key, dots and all. */
static const char *key(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double getn(const cJSON *o, const char *path) {
  const cJSON *v = get(o, path);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The condition `type` of a status, or NULL. */
static const cJSON *cond(const cJSON *status, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, get(status, "conditions")) {
    const char *t = gets_(c, "type");
    if (t && !strcmp(t, type))
      return c;
  }
  return NULL;
}

static ctrain_err fake_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  (void)ctx;
  snprintf(hex, n, "tok-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

/* One pass over TFJob `tf` with `pods` (NULL: none), adapted. */
typedef struct {
  tfjob_view v;
  recon_expectations x;
  recon_result res;
} pass;

static void run_pass(pass *p, const cJSON *tf, const cJSON *pods, int64_t now) {
  char err[512];
  memset(&p->res, 0, sizeof(p->res));
  ASSERT_OK(tfjob_to_job(tf, &p->v));
  recon_input in = {.job = p->v.job,
                    .pods = pods,
                    .now = now,
                    .token = fake_token,
                    .invalid_spec = p->v.invalid[0] ? p->v.invalid : NULL};
  ASSERT_OK(recon_reconcile(&in, &p->x, &p->res, err, sizeof(err)));
  ASSERT_OK(tfjob_adapt_result(tf, &p->v, &p->res));
}

/* Frees the pass, its expectations included (take them first to keep them). */
static void pass_done(pass *p) {
  recon_expectations_free(&p->x);
  recon_result_free(&p->res);
  tfjob_view_free(&p->v);
}

static size_t count(const recon_result *r, recon_action_kind k) {
  size_t n = 0;
  for (size_t i = 0; i < r->n_actions; i++)
    n += r->actions[i].kind == k;
  return n;
}

static const recon_action *find(const recon_result *r, recon_action_kind k, const char *reason) {
  for (size_t i = 0; i < r->n_actions; i++)
    if (r->actions[i].kind == k && (!reason || !strcmp(r->actions[i].reason, reason)))
      return &r->actions[i];
  return NULL;
}

/* tfjob_to_job maps the TFJob `json` to an invalid job whose message holds `want`. */
static void expect_invalid(const char *json, const char *want) {
  cJSON *tf = cJSON_Parse(json);
  ASSERT_NOT_NULL(tf);
  tfjob_view v;
  ASSERT_OK(tfjob_to_job(tf, &v));
  ASSERT_STR_CONTAINS(v.invalid, want);
  tfjob_view_free(&v);
  cJSON_Delete(tf);
}

/* Replicas of type t as the reconciler reads them (controller/jobspec.h). */
static int replicas_of(const cJSON *job, podbuild_type t) {
  job_spec js;
  jobspec_read(job, &js);
  return js.replicas[t];
}

TEST(mapping_and_case_insensitive_types) {
  cJSON *tf = cJSON_Parse(
      "{" MD ",\"spec\":{\"successPolicy\":\"AllWorkers\","
      "\"runPolicy\":{\"cleanPodPolicy\":\"All\",\"backoffLimit\":5,"
      "\"activeDeadlineSeconds\":600,\"ttlSecondsAfterFinished\":60,"
      "\"suspend\":true,\"schedulingPolicy\":{\"queue\":\"q\"}},"
      "\"tfReplicaSpecs\":{"
      "\"master\":{\"restartPolicy\":\"Always\",\"template\":" TMPL(
          "2345") "},"
                  "\"WORKER\":{\"replicas\":3,\"restartPolicy\":\"ExitCode\","
                  "\"template\":" TMPL(
                      "2345") "},"
                              "\"Evaluator\":{\"restartPolicy\":\"Never\",\"template\":" TMPL(
                                  "2345") "}}}}");
  ASSERT_NOT_NULL(tf);
  tfjob_view v;
  ASSERT_OK(tfjob_to_job(tf, &v));
  ASSERT_STR_EQ(v.invalid, "");
  ASSERT_EQ(v.foreign, 0);
  const cJSON *j = v.job;
  ASSERT_STR_EQ(gets_(j, "kind"), "TFJob");
  ASSERT_STR_EQ(gets_(j, "apiVersion"), "kubeflow.org/v1");
  ASSERT_STR_EQ(gets_(j, "metadata.uid"), "u-1");
  ASSERT_EQ(replicas_of(j, PODBUILD_CHIEF), 1); /* Master is the chief; default 1 */
  ASSERT_EQ(replicas_of(j, PODBUILD_WORKER), 3);
  ASSERT_EQ(replicas_of(j, PODBUILD_EVALUATOR), 1);
  /* Always counts as OnFailure; ExitCode is stricter; the evaluator's Never is not used. */
  ASSERT_STR_EQ(gets_(j, "spec.restartPolicy"), "ExitCode");
  ASSERT_EQ(getn(j, "spec.port"), 2345);
  ASSERT_STR_EQ(gets_(j, "spec.cleanPodPolicy"), "All");
  ASSERT_STR_EQ(gets_(j, "spec.successPolicy"), "AllWorkers");
  ASSERT_EQ(getn(j, "spec.backoffLimit"), 5);
  ASSERT_EQ(getn(j, "spec.activeDeadlineSeconds"), 600);
  ASSERT_EQ(getn(j, "spec.ttlSecondsAfterFinished"), 60);
  ASSERT(cJSON_IsTrue(get(j, "spec.suspend")));
  /* The template is the TFJob's own (a reference, not a copy). */
  ASSERT_STR_EQ(gets_(j, "spec.replicaSpecs.Worker.template.spec.containers.1.name"), "tensorflow");
  ASSERT_EQ(getn(j, "status.attempt"), 1);
  ASSERT_EQ(getn(j, "status.restarts"), 0);
  tfjob_view_free(&v);
  cJSON_Delete(tf);
}

TEST(training_operator_defaults) {
  cJSON *tf = cJSON_Parse("{" MD ",\"spec\":{\"tfReplicaSpecs\":{\"Worker\":{\"template\":"
                          "{\"spec\":{\"containers\":[{\"name\":\"x\",\"image\":\"i\"}]}}}}}}");
  tfjob_view v;
  ASSERT_OK(tfjob_to_job(tf, &v));
  ASSERT_STR_EQ(v.invalid, "");
  ASSERT_EQ(replicas_of(v.job, PODBUILD_WORKER), 1);
  ASSERT_EQ(replicas_of(v.job, PODBUILD_CHIEF), 0);
  ASSERT_STR_EQ(gets_(v.job, "spec.restartPolicy"), "Never"); /* TFJobDefaultRestartPolicy */
  ASSERT_STR_EQ(gets_(v.job, "spec.cleanPodPolicy"), "None"); /* SetDefaults_TFJob */
  ASSERT_STR_EQ(gets_(v.job, "spec.successPolicy"), "ChiefOrWorker0");
  ASSERT_EQ(getn(v.job, "spec.port"), CTRAIN_DEFAULT_COLLECTIVE_PORT);
  ASSERT_EQ(getn(v.job, "spec.backoffLimit"), 2147483647); /* nil: no limit */
  ASSERT_NULL(get(v.job, "spec.activeDeadlineSeconds"));
  ASSERT_NULL(get(v.job, "spec.suspend"));
  tfjob_view_free(&v);
  cJSON_Delete(tf);
}

TEST(invalid_and_foreign_specs) {
  static const char *const bad[][2] = {
      {"\"Chief\":{\"template\":" TMPL("2222") "},\"Master\":{\"template\":" TMPL("2222") "}",
       "Chief and Master"},
      {"\"Worker\":{\"template\":" TMPL("2222") "},\"Driver\":{\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Driver: unknown replica type"},
      {"\"Worker\":{\"restartPolicy\":\"Sometimes\",\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Worker.restartPolicy: unknown value 'Sometimes'"},
      {"\"ps\":{\"replicas\":2,\"template\":" TMPL("2222") "},\"Worker\":{\"template\":" TMPL(
           "2222") "}",
       "spec.tfReplicaSpecs.ps: parameter servers are not supported"},
      {"\"Worker\":{\"replicas\":1,\"template\":" TMPL("2222") "},\"WORKER\":{\"replicas\":4,"
                                                               "\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs: Worker and WORKER are the same replica type"},
  };
  char buf[2048];
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(buf, sizeof(buf), "{" MD ",\"spec\":{\"tfReplicaSpecs\":{%s}}}", bad[i][0]);
    expect_invalid(buf, bad[i][1]);
  }
  cJSON *tf = cJSON_Parse(
      "{" MD ",\"spec\":{\"runPolicy\":{\"managedBy\":\"kueue.x-k8s.io/"
      "multikueue\"},\"tfReplicaSpecs\":{\"Worker\":{\"template\":" TMPL("2222") "}}}}");
  tfjob_view v;
  ASSERT_OK(tfjob_to_job(tf, &v));
  ASSERT_EQ(v.foreign, 1);
  tfjob_view_free(&v);
  cJSON_Delete(tf);
}

/* The pods a pass created, as the cache would show them: uid and phase. */
static cJSON *pods_of(const recon_result *r, const char *phase) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; i < r->n_actions; i++) {
    if (r->actions[i].kind != RECON_CREATE_POD)
      continue;
    cJSON *p = cJSON_Duplicate(r->actions[i].object, 1);
    char uid[128];
    snprintf(uid, sizeof(uid), "pod-%s", r->actions[i].name);
    cJSON_AddStringToObject(cJSON_GetObjectItem(p, "metadata"), "uid", uid);
    cJSON *st = cJSON_AddObjectToObject(p, "status");
    cJSON_AddStringToObject(st, "phase", phase);
    cJSON_AddItemToArray(a, p);
  }
  return a;
}

/* tf with the status and annotations of the UPDATE_STATUS object of r, as
 * the apiserver would store them. */
static cJSON *written(const cJSON *tf, const recon_result *r) {
  const recon_action *a = find(r, RECON_UPDATE_STATUS, NULL);
  ASSERT_NOT_NULL(a);
  ASSERT_STR_EQ(gets_(a->object, "kind"), "TFJob");
  cJSON *n = cJSON_Duplicate(tf, 1);
  cJSON_DeleteItemFromObject(n, "status");
  cJSON_AddItemToObject(n, "status", cJSON_Duplicate(get(a->object, "status"), 1));
  cJSON *md = cJSON_GetObjectItem(n, "metadata");
  cJSON_DeleteItemFromObject(md, "annotations");
  cJSON_AddItemToObject(md, "annotations",
                        cJSON_Duplicate(get(a->object, "metadata.annotations"), 1));
  return n;
}

TEST(pass_pods_labels_status_and_no_rewrite) {
  cJSON *tf = cJSON_Parse("{" MD ",\"spec\":{\"runPolicy\":{\"backoffLimit\":2},"
                          "\"tfReplicaSpecs\":{"
                          "\"Chief\":{\"restartPolicy\":\"OnFailure\",\"template\":" TMPL(
                              "2345") "},"
                                      "\"Worker\":{\"replicas\":2,\"restartPolicy\":\"OnFailure\","
                                      "\"template\":" TMPL("2345") "}}}}");
  pass p = {0};
  run_pass(&p, tf, NULL, 1000);
  ASSERT_EQ(count(&p.res, RECON_CREATE_POD), 3);
  int masters = 0;
  for (size_t i = 0; i < p.res.n_actions; i++) {
    const recon_action *a = &p.res.actions[i];
    if (a->kind != RECON_CREATE_POD)
      continue;
    const cJSON *l = get(a->object, "metadata.labels");
    ASSERT_STR_EQ(key(l, "training.kubeflow.org/job-name"), "mn");
    ASSERT_STR_EQ(key(l, "training.kubeflow.org/operator-name"), "ctrain");
    ASSERT_STR_EQ(key(l, "training.kubeflow.org/replica-type"), key(l, "ctrain.dev/replica-type"));
    ASSERT_STR_EQ(key(l, "training.kubeflow.org/replica-index"),
                  key(l, "ctrain.dev/replica-index"));
    const char *role = key(l, "training.kubeflow.org/job-role");
    if (role) {
      ASSERT_STR_EQ(role, "master");
      ASSERT_STR_EQ(a->name, "mn-chief-0");
      masters++;
    }
    const cJSON *ref = get(a->object, "metadata.ownerReferences.0");
    ASSERT_STR_EQ(gets_(ref, "kind"), "TFJob");
    ASSERT_STR_EQ(gets_(ref, "apiVersion"), "kubeflow.org/v1");
    ASSERT_STR_EQ(gets_(ref, "uid"), "u-1");
    /* TF_CONFIG in the tensorflow container, its cluster from the attempt's
     * ConfigMap (below). */
    const cJSON *e;
    int seen = 0;
    cJSON_ArrayForEach(e, get(a->object, "spec.containers.1.env")) {
      if (!strcmp(gets_(e, "name"), "TF_CONFIG")) {
        ASSERT_STR_CONTAINS(gets_(e, "value"), "{\"cluster\":$(CTRAIN_TF_CLUSTER),");
        ASSERT(seen);
        seen++;
      }
      if (!strcmp(gets_(e, "name"), "CTRAIN_TF_CLUSTER")) {
        ASSERT_STR_EQ(gets_(e, "valueFrom.configMapKeyRef.name"), "mn-cluster-1");
        seen++;
      }
    }
    ASSERT_EQ(seen, 2);
  }
  ASSERT_EQ(masters, 1);
  /* The cluster, our one Service's addresses, in a ConfigMap the TFJob owns. */
  const recon_action *cm = find(&p.res, RECON_CREATE_CONFIGMAP, NULL);
  ASSERT_NOT_NULL(cm);
  ASSERT_STR_CONTAINS(gets_(cm->object, "data.cluster"), "\"mn-chief-0.mn.ml.svc:2345\"");
  ASSERT_STR_EQ(gets_(cm->object, "metadata.ownerReferences.0.kind"), "TFJob");
  /* Events name the TFJob. */
  const recon_action *ev = find(&p.res, RECON_EVENT, "SuccessfulCreatePod");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(gets_(ev->object, "kind"), "TFJob");
  /* The status to write: TFJob's shape, with the annotations. */
  const recon_action *up = &p.res.actions[0];
  ASSERT_EQ(up->kind, RECON_UPDATE_STATUS);
  const cJSON *st = get(up->object, "status");
  ASSERT_STR_EQ(gets_(cond(st, "Created"), "reason"), "TFJobCreated");
  ASSERT_STR_EQ(gets_(cond(st, "Created"), "message"), "TFJob mn is created");
  ASSERT_EQ(getn(st, "replicaStatuses.Chief.active"), 1);
  ASSERT_EQ(getn(st, "replicaStatuses.Worker.active"), 2);
  ASSERT_NOT_NULL(get(st, "startTime"));
  ASSERT_NULL(get(st, "restarts")); /* not TFJob's: it is pruned, so never written */
  ASSERT_NULL(get(st, "attempt"));
  ASSERT_NULL(get(st, "observedGeneration"));
  const cJSON *ann = get(up->object, "metadata.annotations");
  ASSERT_STR_EQ(cJSON_GetObjectItem(ann, CTRAIN_ANN_ATTEMPT)->valuestring, "1");
  ASSERT_STR_EQ(cJSON_GetObjectItem(ann, CTRAIN_ANN_RESTARTS)->valuestring, "0");

  /* Stored, then the next pass sees the pods it created: nothing to write. */
  cJSON *tf2 = written(tf, &p.res);
  cJSON *pods = pods_of(&p.res, "Pending");
  pass q = {.x = p.x};
  p.x = (recon_expectations){0};
  pass_done(&p);
  run_pass(&q, tf2, pods, 1001);
  ASSERT_EQ(count(&q.res, RECON_UPDATE_STATUS), 0);
  ASSERT_EQ(count(&q.res, RECON_CREATE_POD), 0);
  ASSERT_EQ(q.res.status_changed, 0);

  /* Worker 1 is killed (137): a gang restart, in TFJob's words and annotations. */
  cJSON *it, *w1 = NULL;
  cJSON_ArrayForEach(it, pods) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(it, "status"), "phase",
                              cJSON_CreateString("Running"));
    if (!strcmp(gets_(it, "metadata.name"), "mn-worker-1"))
      w1 = it;
  }
  ASSERT_NOT_NULL(w1);
  cJSON *wst = cJSON_GetObjectItem(w1, "status");
  cJSON_ReplaceItemInObject(wst, "phase", cJSON_CreateString("Failed"));
  cJSON *cs = cJSON_Parse("[{\"name\":\"tensorflow\",\"state\":{\"terminated\":{\"exitCode\":137,"
                          "\"reason\":\"Error\",\"finishedAt\":\"2026-01-01T00:00:00Z\"}}}]");
  cJSON_AddItemToObject(wst, "containerStatuses", cs);
  pass r = {.x = q.x};
  q.x = (recon_expectations){0};
  pass_done(&q);
  run_pass(&r, tf2, pods, 1002);
  const recon_action *w = &r.res.actions[0];
  ASSERT_EQ(w->kind, RECON_UPDATE_STATUS);
  ann = get(w->object, "metadata.annotations");
  ASSERT_STR_EQ(cJSON_GetObjectItem(ann, CTRAIN_ANN_ATTEMPT)->valuestring, "2");
  ASSERT_STR_EQ(cJSON_GetObjectItem(ann, CTRAIN_ANN_RESTARTS)->valuestring, "1");
  const cJSON *rc = cond(get(w->object, "status"), "Restarting");
  ASSERT_STR_EQ(gets_(rc, "reason"), "TFJobRestarting");
  ASSERT_STR_CONTAINS(gets_(rc, "message"), "mn-worker-1");
  ASSERT_NOT_NULL(find(&r.res, RECON_EVENT, "TFJobRestarting"));
  ASSERT_EQ(count(&r.res, RECON_DELETE_POD), 3); /* the whole gang, not one pod */

  /* A controller restarted now reads attempt and restarts back. */
  cJSON *tf3 = written(tf2, &r.res);
  tfjob_view v3;
  ASSERT_OK(tfjob_to_job(tf3, &v3));
  ASSERT_EQ(getn(v3.job, "status.attempt"), 2);
  ASSERT_EQ(getn(v3.job, "status.restarts"), 1);
  ASSERT_STR_EQ(gets_(cond(get(v3.job, "status"), "Restarting"), "reason"), "GangRestart");
  tfjob_view_free(&v3);
  pass_done(&r);
  cJSON_Delete(pods);
  cJSON_Delete(tf3);
  cJSON_Delete(tf2);
  cJSON_Delete(tf);
}

TEST(ps_rejected_with_event_and_nothing_created) {
  cJSON *tf =
      cJSON_Parse("{" MD ",\"spec\":{\"tfReplicaSpecs\":{"
                  "\"PS\":{\"replicas\":2,\"template\":" TMPL(
                      "2222") "},"
                              "\"Worker\":{\"replicas\":2,\"template\":" TMPL("2222") "}}}}");
  pass p = {0};
  run_pass(&p, tf, NULL, 1000);
  ASSERT_EQ(count(&p.res, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&p.res, RECON_CREATE_SERVICE), 0);
  ASSERT_EQ(count(&p.res, RECON_CREATE_SECRET), 0);
  const recon_action *up = find(&p.res, RECON_UPDATE_STATUS, NULL);
  ASSERT_NOT_NULL(up);
  const cJSON *f = cond(get(up->object, "status"), "Failed");
  ASSERT_STR_EQ(gets_(f, "status"), "True");
  ASSERT_STR_EQ(gets_(f, "reason"), "TFJobFailedValidation");
  ASSERT_STR_CONTAINS(gets_(f, "message"), "parameter servers are not supported");
  const recon_action *ev = find(&p.res, RECON_EVENT, "TFJobFailedValidation");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(ev->event_type, "Warning");
  ASSERT_STR_CONTAINS(ev->message, "spec.tfReplicaSpecs.PS");
  /* Stored, the next pass writes nothing and says nothing again. */
  cJSON *tf2 = written(tf, &p.res);
  pass_done(&p);
  pass q = {0};
  run_pass(&q, tf2, NULL, 1001);
  ASSERT_EQ(q.res.n_actions, 0);
  pass_done(&q);
  cJSON_Delete(tf2);
  cJSON_Delete(tf);
}

/* Numbers out of their field's range, or not whole, are
 * refused as written (replicas 4294967297 ran 1 pod, 4294967300 ran 4,
 * 2147483648 was reported as -2147483648). */
TEST(out_of_range_numbers_are_refused_as_written) {
  static const char *const bad[][2] = {
      {"\"Worker\":{\"replicas\":4294967297,\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Worker.replicas: 4294967297 is outside 0..2147483647"},
      {"\"Worker\":{\"replicas\":4294967300,\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Worker.replicas: 4294967300 is outside 0..2147483647"},
      {"\"worker\":{\"replicas\":2147483648,\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.worker.replicas: 2147483648 is outside 0..2147483647"},
      {"\"Worker\":{\"replicas\":-1e300,\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Worker.replicas: -1e+300 is outside 0..2147483647"},
      {"\"Worker\":{\"replicas\":2.5,\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Worker.replicas: 2.5 is not an integer"},
      {"\"Worker\":{\"replicas\":\"3\",\"template\":" TMPL("2222") "}",
       "spec.tfReplicaSpecs.Worker.replicas: \"3\" is not an integer"},
      {"\"Worker\":{\"template\":" TMPL("65536") "}",
       "spec.tfReplicaSpecs.Worker.template.spec.containers[1].ports[0].containerPort: 65536 is "
       "outside 1..65535"},
      {"\"Worker\":{\"template\":" TMPL("22.5") "}", "containerPort: 22.5 is not an integer"},
  };
  char buf[2048];
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(buf, sizeof(buf), "{" MD ",\"spec\":{\"tfReplicaSpecs\":{%s}}}", bad[i][0]);
    expect_invalid(buf, bad[i][1]);
  }
  static const char *const policy[][2] = {
      {"\"backoffLimit\":1e300", "spec.runPolicy.backoffLimit: 1e+300 is outside 0..2147483647"},
      {"\"backoffLimit\":-1", "spec.runPolicy.backoffLimit: -1 is outside 0..2147483647"},
      {"\"activeDeadlineSeconds\":0.5",
       "spec.runPolicy.activeDeadlineSeconds: 0.5 is not an integer"},
      {"\"activeDeadlineSeconds\":9223372036854775807",
       "spec.runPolicy.activeDeadlineSeconds: 9.2233720368547758e+18 is outside 1..2147483647"},
      {"\"ttlSecondsAfterFinished\":true",
       "spec.runPolicy.ttlSecondsAfterFinished: true is not an integer"},
  };
  for (size_t i = 0; i < sizeof(policy) / sizeof(policy[0]); i++) {
    snprintf(buf, sizeof(buf),
             "{" MD
             ",\"spec\":{\"runPolicy\":{%s},\"tfReplicaSpecs\":{\"Worker\":{\"template\":" TMPL(
                 "2222") "}}}}",
             policy[i][0]);
    expect_invalid(buf, policy[i][1]);
  }
  /* A whole pass: no pod, the job Failed with the message as written. */
  cJSON *tf = cJSON_Parse("{" MD ",\"spec\":{\"tfReplicaSpecs\":{\"Worker\":{\"replicas\":"
                          "4294967297,\"template\":" TMPL("2222") "}}}}");
  pass p = {0};
  run_pass(&p, tf, NULL, 1000);
  ASSERT_EQ(count(&p.res, RECON_CREATE_POD), 0);
  const recon_action *up = find(&p.res, RECON_UPDATE_STATUS, NULL);
  ASSERT_NOT_NULL(up);
  ASSERT_STR_CONTAINS(gets_(cond(get(up->object, "status"), "Failed"), "message"), "4294967297");
  pass_done(&p);
  cJSON_Delete(tf);
  /* In range: mapped as given. */
  tf = cJSON_Parse("{" MD ",\"spec\":{\"runPolicy\":{\"backoffLimit\":0,"
                   "\"activeDeadlineSeconds\":2147483647},\"tfReplicaSpecs\":{\"Worker\":{"
                   "\"replicas\":4096.0,\"template\":" TMPL("65535") "}}}}");
  tfjob_view v;
  ASSERT_OK(tfjob_to_job(tf, &v));
  ASSERT_STR_EQ(v.invalid, "");
  ASSERT_EQ(replicas_of(v.job, PODBUILD_WORKER), 4096);
  ASSERT_EQ(getn(v.job, "spec.port"), 65535);
  ASSERT_EQ(getn(v.job, "spec.backoffLimit"), 0);
  ASSERT_EQ(getn(v.job, "spec.activeDeadlineSeconds"), 2147483647);
  tfjob_view_free(&v);
  cJSON_Delete(tf);
}

TEST(status_shape_round_trip) {
  /* Our status -> TFJob's -> ours: the conditions come back as they were. */
  cJSON *tf = cJSON_Parse("{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"TFJob\","
                          "\"metadata\":{\"name\":\"mn\",\"namespace\":\"ml\",\"uid\":"
                          "\"u\",\"annotations\":{\"ctrain.dev/attempt\":\"3\","
                          "\"ctrain.dev/restarts\":\"2\"}},"
                          "\"spec\":{\"tfReplicaSpecs\":{\"Master\":{\"template\":" TMPL(
                              "2222") "},\"Worker\":{\"template\":" TMPL("2222") "}}}}");
  cJSON *ours = cJSON_Parse(
      "{\"conditions\":["
      "{\"type\":\"Created\",\"status\":\"True\",\"reason\":\"TrainingJobCreated\","
      "\"message\":\"TrainingJob mn is created\",\"lastUpdateTime\":\"2026-01-01T00:00:00Z\","
      "\"lastTransitionTime\":\"2026-01-01T00:00:00Z\"},"
      "{\"type\":\"Running\",\"status\":\"False\",\"reason\":\"GangRestart\",\"message\":\"pod "
      "mn-worker-0 failed\"},"
      "{\"type\":\"Restarting\",\"status\":\"True\",\"reason\":\"GangRestart\",\"message\":\"pod "
      "mn-worker-0 failed\"},"
      "{\"type\":\"Suspended\",\"status\":\"False\",\"reason\":\"TrainingJobResumed\","
      "\"message\":\"TrainingJob is resumed\"}],"
      "\"replicaStatuses\":{\"Chief\":{\"active\":1,\"succeeded\":0,\"failed\":0},"
      "\"Worker\":{\"active\":0,\"succeeded\":0,\"failed\":1}},"
      "\"startTime\":\"2026-01-01T00:00:00Z\",\"restarts\":2,\"attempt\":3}");
  cJSON *tst = NULL, *back = NULL;
  ASSERT_OK(tfjob_status_to_tf(tf, ours, &tst));
  ASSERT_STR_EQ(gets_(cond(tst, "Restarting"), "reason"), "TFJobRestarting");
  ASSERT_STR_EQ(gets_(cond(tst, "Suspended"), "reason"), "TFJobResumed");
  ASSERT_STR_EQ(gets_(cond(tst, "Suspended"), "message"), "TFJob is resumed");
  ASSERT_EQ(getn(tst, "replicaStatuses.Master.active"), 1); /* the TFJob says Master */
  ASSERT_NULL(get(tst, "replicaStatuses.Chief"));
  ASSERT_NULL(get(tst, "attempt"));
  cJSON_AddItemToObject(tf, "status", tst);
  ASSERT_OK(tfjob_status_from_tf(tf, &back));
  ASSERT(cJSON_Compare(get(back, "conditions"), get(ours, "conditions"), 1));
  ASSERT(cJSON_Compare(get(back, "replicaStatuses"), get(ours, "replicaStatuses"), 1));
  ASSERT_EQ(getn(back, "attempt"), 3);
  ASSERT_EQ(getn(back, "restarts"), 2);
  ASSERT_STR_EQ(gets_(back, "startTime"), "2026-01-01T00:00:00Z");
  /* The Failed reasons all read as training-operator's TFJobFailed. */
  cJSON *failed = cJSON_Parse("{\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\","
                              "\"reason\":\"DeadlineExceeded\",\"message\":\"TrainingJob was "
                              "active longer than activeDeadlineSeconds 3\"}]}");
  cJSON *ft = NULL;
  ASSERT_OK(tfjob_status_to_tf(tf, failed, &ft));
  ASSERT_STR_EQ(gets_(cond(ft, "Failed"), "reason"), "TFJobFailed");
  ASSERT_STR_EQ(gets_(cond(ft, "Failed"), "message"),
                "TFJob was active longer than activeDeadlineSeconds 3");
  cJSON_Delete(ft);
  cJSON_Delete(failed);
  cJSON_Delete(back);
  cJSON_Delete(ours);
  cJSON_Delete(tf);
}

TEST(master_labels) {
  cJSON *tf = cJSON_Parse(
      "{" MD ",\"spec\":{\"tfReplicaSpecs\":{"
      "\"Master\":{\"template\":" TMPL("2222") "},"
                                               "\"Worker\":{\"template\":" TMPL("2222") "}}}}");
  pass p = {0};
  run_pass(&p, tf, NULL, 1000);
  int seen = 0;
  for (size_t i = 0; i < p.res.n_actions; i++) {
    const recon_action *a = &p.res.actions[i];
    if (a->kind != RECON_CREATE_POD)
      continue;
    const cJSON *l = get(a->object, "metadata.labels");
    const char *type = key(l, "training.kubeflow.org/replica-type");
    if (!strcmp(a->name, "mn-chief-0")) {
      ASSERT_STR_EQ(type, "master");
      ASSERT_STR_EQ(key(l, "training.kubeflow.org/job-role"), "master");
      seen++;
    } else {
      ASSERT_STR_EQ(type, "worker");
      ASSERT_NULL(key(l, "training.kubeflow.org/job-role")); /* the chief is the master */
      seen++;
    }
  }
  ASSERT_EQ(seen, 2);
  pass_done(&p);
  cJSON_Delete(tf);
}

TEST(enable_flag_off_by_default) {
  ctl_options o;
  char err[256];
  char *none[] = {"ctrain-controller"};
  ASSERT_OK(ctl_options_parse(&o, 1, none, err, sizeof(err)));
  ASSERT_EQ(o.enable_tfjob, 0);
  char *on[] = {"ctrain-controller", "--enable-tfjob"};
  ASSERT_OK(ctl_options_parse(&o, 2, on, err, sizeof(err)));
  ASSERT_EQ(o.enable_tfjob, 1);
  char *off[] = {"ctrain-controller", "--enable-tfjob=false"};
  ASSERT_OK(ctl_options_parse(&o, 2, off, err, sizeof(err)));
  ASSERT_EQ(o.enable_tfjob, 0);
}

TEST_MAIN(T(enable_flag_off_by_default), T(mapping_and_case_insensitive_types),
          T(out_of_range_numbers_are_refused_as_written), T(training_operator_defaults),
          T(invalid_and_foreign_specs), T(pass_pods_labels_status_and_no_rewrite),
          T(ps_rejected_with_event_and_nothing_created), T(status_shape_round_trip),
          T(master_labels))
