/* test_ctl_kueue.c - admission by Kueue in the pure reconcile
 * (controller/recon_kueue.c) and the Workload it builds and reads
 * (controller/kueue.c): a job labelled kueue.x-k8s.io/queue-name gets one
 * Workload and no pod until the Workload is admitted; evicted, its pods go
 * and the quota is released; ended, its Workload is Finished. */
#include "test.h"

#include <cjson/cJSON.h>

#include "controller/jobspec.h"
#include "controller/kueue.h"
#include "controller/reconcile.h"

#define NOW 1700000000LL

typedef struct {
  cJSON *job, *pods, *wl;
  recon_expectations x;
  recon_result res;
  int token_attempt;
} world;

static ctrain_err fake_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  (void)ctx;
  snprintf(hex, n, "tok-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

/* A job of `workers` workers with 100m requests; `queue` NULL: no label. */
static void world_init(world *w, int workers, const char *queue) {
  char js[2048];
  memset(w, 0, sizeof(*w));
  snprintf(js, sizeof(js),
           "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
           "\"metadata\":{\"name\":\"tj\",\"namespace\":\"ns\",\"uid\":\"job-uid\","
           "\"generation\":1,\"labels\":{%s%s%s}},"
           "\"spec\":{\"replicaSpecs\":{\"Worker\":{\"replicas\":%d,\"template\":{\"spec\":{"
           "\"containers\":[{\"name\":\"w\",\"image\":\"ctrain:dev\","
           "\"resources\":{\"requests\":{\"cpu\":\"100m\"}}}]}}}},"
           "\"port\":2222,\"restartPolicy\":\"OnFailure\",\"backoffLimit\":3,\"suspend\":false,"
           "\"cleanPodPolicy\":\"Running\",\"successPolicy\":\"ChiefOrWorker0\"}}",
           queue ? "\"" KUEUE_LABEL_QUEUE "\":\"" : "", queue ? queue : "", queue ? "\"" : "",
           workers);
  w->job = cJSON_Parse(js);
  ASSERT_NOT_NULL(w->job);
  w->pods = cJSON_CreateArray();
  recon_expectations_init(&w->x);
}

static void world_free(world *w) {
  cJSON_Delete(w->job);
  cJSON_Delete(w->pods);
  cJSON_Delete(w->wl);
  recon_expectations_free(&w->x);
  recon_result_free(&w->res);
}

/* One pass; the new status is written back to the job, as the executor would. */
static void run(world *w) {
  char err[256] = "";
  recon_result_free(&w->res);
  recon_input in = {.job = w->job,
                    .pods = w->pods,
                    .service = w->job,
                    .token_attempt = w->token_attempt,
                    .now = NOW,
                    .token = fake_token,
                    .workload = w->wl};
  ctrain_err r = recon_reconcile(&in, &w->x, &w->res, err, sizeof(err));
  if (r)
    TEST_FAIL_("recon_reconcile: %d %s", (int)r, err);
  ASSERT_NOT_NULL(w->res.status);
  cJSON_DeleteItemFromObjectCaseSensitive(w->job, "status");
  cJSON_AddItemToObject(w->job, "status", cJSON_Duplicate(w->res.status, 1));
}

static int count(const world *w, recon_action_kind k) {
  int n = 0;
  for (size_t i = 0; i < w->res.n_actions; i++)
    n += w->res.actions[i].kind == k;
  return n;
}

static const recon_action *first(const world *w, recon_action_kind k) {
  for (size_t i = 0; i < w->res.n_actions; i++)
    if (w->res.actions[i].kind == k)
      return &w->res.actions[i];
  return NULL;
}

static const cJSON *cond(const cJSON *status, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(status, "conditions")) {
    if (!strcmp(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring, type))
      return c;
  }
  return NULL;
}

static const char *field(const cJSON *o, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* The Workload as Kueue leaves it: the one the controller built, with
 * `status` (JSON) added. */
static void set_workload(world *w, const char *status) {
  cJSON *wl = NULL;
  char err[128];
  cJSON_Delete(w->wl);
  job_spec js;
  jobspec_read(w->job, &js);
  ASSERT_OK(kueue_workload_build(&js, &wl, err, sizeof(err)));
  cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(wl, "metadata"), "resourceVersion",
                        cJSON_CreateString("7"));
  cJSON *st = cJSON_Parse(status);
  ASSERT_NOT_NULL(st);
  cJSON_AddItemToObject(wl, "status", st);
  w->wl = wl;
}

#define PENDING                                                                                    \
  "{\"conditions\":[{\"type\":\"QuotaReserved\",\"status\":\"False\",\"reason\":\"Pending\","      \
  "\"message\":\"insufficient unused quota for cpu in flavor rf, 200m more needed\"}]}"
#define ADMITTED                                                                                   \
  "{\"admission\":{\"clusterQueue\":\"cq\",\"podSetAssignments\":[{\"name\":\"worker\","           \
  "\"flavors\":{\"cpu\":\"rf\"},\"count\":3}]},\"conditions\":["                                   \
  "{\"type\":\"QuotaReserved\",\"status\":\"True\",\"reason\":\"QuotaReserved\",\"message\":\"\"}" \
  ","                                                                                              \
  "{\"type\":\"Admitted\",\"status\":\"True\",\"reason\":\"Admitted\",\"message\":\"\"}]}"
#define EVICTED                                                                                    \
  "{\"admission\":{\"clusterQueue\":\"cq\",\"podSetAssignments\":[]},\"conditions\":["             \
  "{\"type\":\"QuotaReserved\",\"status\":\"True\",\"reason\":\"QuotaReserved\",\"message\":\"\"}" \
  ","                                                                                              \
  "{\"type\":\"Admitted\",\"status\":\"True\",\"reason\":\"Admitted\",\"message\":\"\"},"          \
  "{\"type\":\"Evicted\",\"status\":\"True\",\"reason\":\"Preempted\","                            \
  "\"message\":\"Preempted to accommodate a higher priority Workload\"}]}"

/* The pods of the CREATE_POD actions appear, in `phase`. */
static void pods_appear(world *w, const char *phase) {
  for (size_t i = 0; i < w->res.n_actions; i++) {
    if (w->res.actions[i].kind != RECON_CREATE_POD)
      continue;
    cJSON *p = cJSON_Duplicate(w->res.actions[i].object, 1);
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(p, "metadata"), "uid",
                            w->res.actions[i].name);
    cJSON *st = cJSON_AddObjectToObject(p, "status");
    cJSON_AddStringToObject(st, "phase", phase);
    cJSON_AddItemToArray(w->pods, p);
  }
  const recon_action *s = first(w, RECON_CREATE_SECRET);
  if (s)
    w->token_attempt = s->attempt;
}

TEST(queued_job_creates_its_workload_and_no_pod) {
  world w;
  world_init(&w, 3, "lq");
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_WORKLOAD), 1);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_SECRET), 0);
  const cJSON *wl = first(&w, RECON_CREATE_WORKLOAD)->object;
  ASSERT_STR_EQ(field(wl, "apiVersion"), "kueue.x-k8s.io/v1beta2");
  ASSERT_STR_EQ(field(wl, "kind"), "Workload");
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(wl, "metadata");
  ASSERT_STR_EQ(field(md, "name"), "trainingjob-tj");
  ASSERT_STR_EQ(field(md, "namespace"), "ns");
  const cJSON *ref = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"), 0);
  ASSERT_STR_EQ(field(ref, "kind"), "TrainingJob");
  ASSERT_STR_EQ(field(ref, "uid"), "job-uid");
  ASSERT(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ref, "controller")));
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(wl, "spec");
  ASSERT_STR_EQ(field(spec, "queueName"), "lq");
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(spec, "priorityClassRef"));
  const cJSON *sets = cJSON_GetObjectItemCaseSensitive(spec, "podSets");
  ASSERT_EQ(cJSON_GetArraySize(sets), 1);
  const cJSON *ps = cJSON_GetArrayItem(sets, 0);
  ASSERT_STR_EQ(field(ps, "name"), "worker");
  ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(ps, "count")->valueint, 3);
  const cJSON *c0 =
      cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(
                                 cJSON_GetObjectItemCaseSensitive(ps, "template"), "spec"),
                             "containers"),
                         0);
  ASSERT_STR_EQ(field(cJSON_GetObjectItemCaseSensitive(
                          cJSON_GetObjectItemCaseSensitive(c0, "resources"), "requests"),
                      "cpu"),
                "100m");
  /* The job says why it waits, and which queue. */
  const cJSON *s = cond(w.res.status, "Suspended");
  ASSERT_NOT_NULL(s);
  ASSERT_STR_EQ(field(s, "status"), "True");
  ASSERT_STR_EQ(field(s, "reason"), "WaitingForAdmission");
  ASSERT_STR_CONTAINS(field(s, "message"), "LocalQueue lq");
  ASSERT_STR_CONTAINS(field(s, "message"), "trainingjob-tj");
  ASSERT_STR_EQ(recon_state(w.res.status), "Suspended");
  ASSERT_NULL(cond(w.res.status, "Created"));
  world_free(&w);
}

TEST(pending_workload_keeps_zero_pods_pass_after_pass) {
  world w;
  world_init(&w, 3, "lq");
  run(&w);
  set_workload(&w, PENDING);
  for (int pass = 0; pass < 3; pass++) {
    run(&w);
    ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
    ASSERT_EQ(count(&w, RECON_CREATE_WORKLOAD), 0);
    ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 0);
    ASSERT_STR_CONTAINS(field(cond(w.res.status, "Suspended"), "message"),
                        "insufficient unused quota");
  }
  /* Nothing changes: the last pass writes nothing. */
  ASSERT_EQ((int)w.res.n_actions, 0);
  world_free(&w);
}

TEST(admitted_workload_creates_the_whole_gang) {
  world w;
  world_init(&w, 3, "lq");
  run(&w);
  set_workload(&w, PENDING);
  run(&w);
  set_workload(&w, ADMITTED);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  ASSERT_EQ(count(&w, RECON_CREATE_SECRET), 1);
  ASSERT_EQ(count(&w, RECON_CREATE_WORKLOAD), 0);
  const cJSON *s = cond(w.res.status, "Suspended");
  ASSERT_STR_EQ(field(s, "status"), "False");
  ASSERT_STR_EQ(field(s, "reason"), "AdmittedByKueue");
  ASSERT_STR_EQ(recon_state(w.res.status), "Created");
  ASSERT_NOT_NULL(field(w.res.status, "startTime"));
  int admitted_event = 0;
  for (size_t i = 0; i < w.res.n_actions; i++)
    admitted_event |=
        w.res.actions[i].kind == RECON_EVENT && !strcmp(w.res.actions[i].reason, "Admitted");
  ASSERT(admitted_event);
  world_free(&w);
}

TEST(admission_check_pod_set_updates_reach_the_pods) {
  world w;
  world_init(&w, 2, "lq");
  run(&w);
  set_workload(&w, ADMITTED);
  cJSON *checks = cJSON_Parse(
      "[{\"name\":\"ac\",\"state\":\"Ready\",\"message\":\"\",\"podSetUpdates\":[{\"name\":"
      "\"worker\",\"nodeSelector\":{\"pool\":\"a\"},\"labels\":{\"l\":\"v\"},"
      "\"tolerations\":[{\"key\":\"k\",\"operator\":\"Exists\"}]},{\"name\":\"chief\","
      "\"nodeSelector\":{\"pool\":\"other\"}}]}]");
  cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(w.wl, "status"), "admissionChecks",
                        checks);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 2);
  for (size_t i = 0; i < w.res.n_actions; i++) {
    if (w.res.actions[i].kind != RECON_CREATE_POD)
      continue;
    const cJSON *pod = w.res.actions[i].object;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
    ASSERT_STR_EQ(field(cJSON_GetObjectItemCaseSensitive(spec, "nodeSelector"), "pool"), "a");
    /* The admission check's toleration, then the controller's two for a lost node. */
    ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(spec, "tolerations")), 3);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(pod, "metadata"), "labels");
    ASSERT_STR_EQ(field(labels, "l"), "v");
    ASSERT_STR_EQ(field(labels, "ctrain.dev/job-name"), "tj");
  }
  world_free(&w);
}

TEST(eviction_deletes_the_pods_then_releases_the_quota) {
  world w;
  world_init(&w, 3, "lq");
  run(&w);
  set_workload(&w, ADMITTED);
  run(&w);
  pods_appear(&w, "Running");
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Running");
  set_workload(&w, EVICTED);
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 3);
  ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 0); /* pods still there */
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  const cJSON *s = cond(w.res.status, "Suspended");
  ASSERT_STR_EQ(field(s, "reason"), "EvictedByKueue");
  ASSERT_STR_CONTAINS(field(s, "message"), "higher priority");
  ASSERT_STR_EQ(field(cond(w.res.status, "Running"), "status"), "False");
  /* The pods are gone: the reservation is released, Kueue queues it again. */
  cJSON_Delete(w.pods);
  w.pods = cJSON_CreateArray();
  run(&w);
  ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 1);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  const cJSON *upd = first(&w, RECON_UPDATE_WORKLOAD)->object;
  const cJSON *ust = cJSON_GetObjectItemCaseSensitive(upd, "status");
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(ust, "admission"));
  ASSERT_STR_EQ(field(cond(ust, "QuotaReserved"), "status"), "False");
  ASSERT_STR_EQ(field(cond(ust, "Admitted"), "status"), "False");
  ASSERT_STR_EQ(field(cond(ust, "Requeued"), "status"), "True"); /* Preempted */
  ASSERT_STR_EQ(field(cond(ust, "Requeued"), "reason"), "Preempted");
  ASSERT_STR_EQ(kueue_state_name(kueue_workload_state(upd)), "Pending");
  ASSERT_STR_EQ(field(cJSON_GetObjectItemCaseSensitive(upd, "metadata"), "resourceVersion"), "7");
  /* Admitted again: the same attempt's pods come back. */
  set_workload(&w, ADMITTED);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(w.res.status, "restarts")
                ? cJSON_GetObjectItemCaseSensitive(w.res.status, "restarts")->valueint
                : 0,
            0);
  world_free(&w);
}

TEST(deactivated_workload_is_released_not_requeued) {
  world w;
  world_init(&w, 1, "lq");
  run(&w);
  set_workload(&w, EVICTED);
  cJSON *ev = (cJSON *)cond(cJSON_GetObjectItemCaseSensitive(w.wl, "status"), "Evicted");
  cJSON_ReplaceItemInObjectCaseSensitive(ev, "reason", cJSON_CreateString("Deactivated"));
  run(&w);
  ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 1);
  const cJSON *ust =
      cJSON_GetObjectItemCaseSensitive(first(&w, RECON_UPDATE_WORKLOAD)->object, "status");
  ASSERT_STR_EQ(field(cond(ust, "Requeued"), "status"), "False");
  ASSERT_STR_EQ(field(cond(ust, "Requeued"), "reason"), "Deactivated");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

TEST(ended_job_finishes_its_workload_once) {
  world w;
  world_init(&w, 2, "lq");
  run(&w);
  set_workload(&w, ADMITTED);
  run(&w);
  pods_appear(&w, "Succeeded");
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Succeeded");
  ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 1);
  const cJSON *upd = first(&w, RECON_UPDATE_WORKLOAD)->object;
  const cJSON *f = cond(cJSON_GetObjectItemCaseSensitive(upd, "status"), "Finished");
  ASSERT_STR_EQ(field(f, "status"), "True");
  ASSERT_STR_EQ(field(f, "reason"), "Succeeded");
  ASSERT_EQ(kueue_workload_state(upd), KUEUE_FINISHED);
  /* The status action goes first, the Workload after it. */
  ASSERT_EQ(w.res.actions[0].kind, RECON_UPDATE_STATUS);
  /* A later pass on the same cache asks again (the write may have been
   * lost); once the cache shows it Finished, nothing more. */
  run(&w);
  ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 1);
  cJSON *fin = cJSON_Duplicate(first(&w, RECON_UPDATE_WORKLOAD)->object, 1);
  cJSON_Delete(w.wl);
  w.wl = fin;
  run(&w);
  ASSERT_EQ(count(&w, RECON_UPDATE_WORKLOAD), 0);
  world_free(&w);
}

TEST(failed_job_finishes_its_workload_as_failed) {
  world w;
  world_init(&w, 1, "lq");
  cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(w.job, "spec"),
                                         "restartPolicy", cJSON_CreateString("Never"));
  run(&w);
  set_workload(&w, ADMITTED);
  run(&w);
  pods_appear(&w, "Failed");
  cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(w.pods, 0), "status");
  cJSON *cs = cJSON_Parse("[{\"name\":\"w\",\"state\":{\"terminated\":{\"exitCode\":1}}}]");
  cJSON_AddItemToObject(st, "containerStatuses", cs);
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Failed");
  const cJSON *upd = first(&w, RECON_UPDATE_WORKLOAD)->object;
  ASSERT_STR_EQ(field(cond(cJSON_GetObjectItemCaseSensitive(upd, "status"), "Finished"), "reason"),
                "Failed");
  world_free(&w);
}

TEST(unlabelled_job_ignores_kueue) {
  world w;
  world_init(&w, 3, NULL);
  w.wl = cJSON_Parse("{\"status\":" ADMITTED "}"); /* a stray Workload changes nothing */
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_WORKLOAD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  ASSERT_NULL(cond(w.res.status, "Suspended"));
  world_free(&w);
}

TEST(empty_queue_label_is_no_queue) {
  world w;
  world_init(&w, 2, "");
  ASSERT_NULL(kueue_queue_name(w.job));
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_WORKLOAD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 2);
  world_free(&w);
}

TEST(spec_suspend_wins_over_admission) {
  world w;
  world_init(&w, 2, "lq");
  cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(w.job, "spec"), "suspend",
                                         cJSON_CreateTrue());
  set_workload(&w, ADMITTED);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_STR_EQ(field(cond(w.res.status, "Suspended"), "reason"), "TrainingJobSuspended");
  world_free(&w);
}

TEST(workload_states_and_names) {
  char buf[KUEUE_NAME_MAX], small[8];
  ASSERT_OK(kueue_workload_name("job-a", buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "trainingjob-job-a");
  ASSERT_EQ(kueue_workload_name("job-a", small, sizeof(small)), CTRAIN_E_TOOBIG);
  ASSERT_EQ(kueue_workload_state(NULL), KUEUE_ABSENT);
  cJSON *wl = cJSON_Parse("{\"status\":" PENDING "}");
  ASSERT_EQ(kueue_workload_state(wl), KUEUE_PENDING);
  cJSON_Delete(wl);
  /* Quota reserved but admission checks not Ready yet: still pending. */
  wl = cJSON_Parse("{\"status\":{\"admission\":{},\"conditions\":[{\"type\":\"QuotaReserved\","
                   "\"status\":\"True\"},{\"type\":\"Admitted\",\"status\":\"False\"}]}}");
  ASSERT_EQ(kueue_workload_state(wl), KUEUE_PENDING);
  cJSON_Delete(wl);
  wl = cJSON_Parse("{\"status\":" ADMITTED "}");
  ASSERT_EQ(kueue_workload_state(wl), KUEUE_ADMITTED);
  cJSON_Delete(wl);
  wl = cJSON_Parse("{\"status\":" EVICTED "}");
  ASSERT_EQ(kueue_workload_state(wl), KUEUE_EVICTED);
  cJSON_Delete(wl);
  /* Evicted and released: pending again. */
  wl = cJSON_Parse("{\"status\":{\"conditions\":[{\"type\":\"Evicted\",\"status\":\"True\"},"
                   "{\"type\":\"QuotaReserved\",\"status\":\"False\"}]}}");
  ASSERT_EQ(kueue_workload_state(wl), KUEUE_PENDING);
  cJSON_Delete(wl);
}

TEST(priority_class_and_every_replica_type_in_the_workload) {
  world w;
  world_init(&w, 2, "lq");
  cJSON *rs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(w.job, "spec"),
                                               "replicaSpecs");
  cJSON *chief = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(rs, "Worker"), 1);
  cJSON_ReplaceItemInObjectCaseSensitive(chief, "replicas", cJSON_CreateNumber(1));
  cJSON_AddStringToObject(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(chief, "template"), "spec"),
      "priorityClassName", "high");
  cJSON_AddItemToObject(rs, "Chief", chief);
  cJSON *wl = NULL;
  char err[128];
  job_spec js;
  jobspec_read(w.job, &js);
  ASSERT_OK(kueue_workload_build(&js, &wl, err, sizeof(err)));
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(wl, "spec");
  const cJSON *pc = cJSON_GetObjectItemCaseSensitive(spec, "priorityClassRef");
  ASSERT_STR_EQ(field(pc, "name"), "high");
  ASSERT_STR_EQ(field(pc, "kind"), "PriorityClass");
  const cJSON *sets = cJSON_GetObjectItemCaseSensitive(spec, "podSets");
  ASSERT_EQ(cJSON_GetArraySize(sets), 2);
  ASSERT_STR_EQ(field(cJSON_GetArrayItem(sets, 0), "name"), "chief");
  ASSERT_STR_EQ(field(cJSON_GetArrayItem(sets, 1), "name"), "worker");
  ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sets, 1), "count")->valueint, 2);
  cJSON_Delete(wl);
  /* No queue label: no Workload. */
  cJSON *plain = cJSON_Parse("{\"metadata\":{\"name\":\"a\",\"namespace\":\"b\",\"uid\":\"c\"}}");
  jobspec_read(plain, &js);
  ASSERT_EQ(kueue_workload_build(&js, &wl, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(wl);
  cJSON_Delete(plain);
  world_free(&w);
}

TEST(action_kind_names_of_kueue) {
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_WORKLOAD), "CreateWorkload");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_UPDATE_WORKLOAD), "UpdateWorkload");
}

TEST_MAIN(T(queued_job_creates_its_workload_and_no_pod),
          T(pending_workload_keeps_zero_pods_pass_after_pass),
          T(admitted_workload_creates_the_whole_gang),
          T(admission_check_pod_set_updates_reach_the_pods),
          T(eviction_deletes_the_pods_then_releases_the_quota),
          T(deactivated_workload_is_released_not_requeued), T(ended_job_finishes_its_workload_once),
          T(failed_job_finishes_its_workload_as_failed), T(unlabelled_job_ignores_kueue),
          T(empty_queue_label_is_no_queue), T(spec_suspend_wins_over_admission),
          T(workload_states_and_names), T(priority_class_and_every_replica_type_in_the_workload),
          T(action_kind_names_of_kueue))
