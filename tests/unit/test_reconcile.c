/* test_reconcile.c - the pure TrainingJob reconcile, rule by rule.
 *
 * A small in-memory world stands in for the apiserver: it applies the
 * actions a pass returns (pods appear Pending, deletes set a
 * deletionTimestamp, the status is written back) and the tests move pods
 * through their phases the way the kubelet would. */
#include "test.h"

#include <cjson/cJSON.h>

#include "backup_uris.h"

#include "controller/podbuild.h"
#include "ctrain/kube_time.h"
#include "controller/reconcile.h"
#include "ctrain/tfconfig.h"
#include "test_alloc.h"

#define NOW 1700000000LL

typedef struct {
  cJSON *job;
  cJSON *pods; /* array */
  int service;
  int token_attempt; /* the attempt whose token Secret was "created" */
  int64_t now;
  int burst;
  int progress_interval_s;
  int job_deleted;
  int token_fail;
  int token_calls;
  recon_expectations x;
  recon_result res;
  cJSON *progress; /* recon_input.progress */
  recon_straggler straggler;
  char *cluster;            /* data.cluster of the latest cluster ConfigMap created */
  int cluster_attempt;      /* its attempt */
  const char *create_error; /* recon_input.create_error */
} world;

/* A token that, like the controller's, depends on the job uid and attempt only. */
static ctrain_err fake_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  world *w = ctx;
  w->token_calls++;
  if (w->token_fail)
    return CTRAIN_E_IO;
  snprintf(hex, n, "tok-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

static cJSON *spec_of(world *w) {
  return cJSON_GetObjectItemCaseSensitive(w->job, "spec");
}

static void set_spec(world *w, const char *k, cJSON *v) {
  cJSON *spec = spec_of(w);
  if (cJSON_GetObjectItemCaseSensitive(spec, k))
    cJSON_ReplaceItemInObjectCaseSensitive(spec, k, v);
  else
    cJSON_AddItemToObject(spec, k, v);
}

static cJSON *template_json(void) {
  return cJSON_Parse("{\"spec\":{\"containers\":[{\"name\":\"train\",\"image\":\"ctrain:dev\","
                     "\"ports\":[{\"containerPort\":2222}]}]}}");
}

static void add_replicas(cJSON *rs, const char *type, int n) {
  cJSON *o = cJSON_AddObjectToObject(rs, type);
  cJSON_AddNumberToObject(o, "replicas", n);
  cJSON_AddItemToObject(o, "template", template_json());
}

/* A job as the apiserver returns it, with the CRD defaults applied. */
static void world_init(world *w, int chief, int workers, int evaluator) {
  memset(w, 0, sizeof(*w));
  w->job = cJSON_CreateObject();
  cJSON_AddStringToObject(w->job, "apiVersion", "ctrain.dev/v1alpha1");
  cJSON_AddStringToObject(w->job, "kind", "TrainingJob");
  cJSON *md = cJSON_AddObjectToObject(w->job, "metadata");
  cJSON_AddStringToObject(md, "name", "tj");
  cJSON_AddStringToObject(md, "namespace", "default");
  cJSON_AddStringToObject(md, "uid", "job-uid");
  cJSON_AddNumberToObject(md, "generation", 1);
  cJSON *spec = cJSON_AddObjectToObject(w->job, "spec");
  cJSON *rs = cJSON_AddObjectToObject(spec, "replicaSpecs");
  if (chief)
    add_replicas(rs, "Chief", 1);
  add_replicas(rs, "Worker", workers);
  if (evaluator)
    add_replicas(rs, "Evaluator", 1);
  cJSON_AddNumberToObject(spec, "port", 2222);
  cJSON_AddStringToObject(spec, "restartPolicy", "OnFailure");
  cJSON_AddNumberToObject(spec, "backoffLimit", 3);
  cJSON_AddFalseToObject(spec, "suspend");
  cJSON_AddStringToObject(spec, "cleanPodPolicy", "Running");
  cJSON_AddStringToObject(spec, "successPolicy", "ChiefOrWorker0");
  w->pods = cJSON_CreateArray();
  w->now = NOW;
  w->burst = 1000;
  recon_expectations_init(&w->x);
}

static void world_free(world *w) {
  cJSON_Delete(w->job);
  cJSON_Delete(w->pods);
  cJSON_Delete(w->progress);
  free(w->cluster);
  recon_expectations_free(&w->x);
  recon_result_free(&w->res);
}

static void run(world *w) {
  char err[256] = "";
  recon_result_free(&w->res);
  recon_input in = {
      .job = w->job,
      .pods = w->pods,
      .service = w->service ? w->job : NULL, /* any non-NULL object: "exists" */
      .token_attempt = w->token_attempt,
      .now = w->now,
      .token = fake_token,
      .token_ctx = w,
      .burst = w->burst,
      .progress = w->progress,
      .straggler = w->straggler,
      .progress_interval_s = w->progress_interval_s,
      .create_error = w->create_error,
  };
  ctrain_err r = recon_reconcile(&in, &w->x, &w->res, err, sizeof(err));
  if (r)
    TEST_FAIL_("recon_reconcile: %d %s", (int)r, err);
  ASSERT_NOT_NULL(w->res.status);
}

static cJSON *pod_by_name_in(cJSON *pods, const char *name) {
  cJSON *p;
  cJSON_ArrayForEach(p, pods) {
    const cJSON *n =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"), "name");
    if (!strcmp(n->valuestring, name))
      return p;
  }
  return NULL;
}

static cJSON *pod_by_name(world *w, const char *name) {
  cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    const cJSON *n =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"), "name");
    if (!strcmp(n->valuestring, name))
      return p;
  }
  return NULL;
}

static const char *str_at(const cJSON *o, const char *a, const char *b) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
  if (b)
    v = cJSON_GetObjectItemCaseSensitive(v, b);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int in_list(const char *const *names, const char *name) {
  for (size_t i = 0; names && names[i]; i++)
    if (name && !strcmp(names[i], name))
      return 1;
  return 0;
}

/* Applies a pass's actions as the apiserver would, except the creates of the
 * pods named in `unsent` (NULL-terminated; NULL: none), which the executor
 * did not send or which failed. */
static void apply_except(world *w, const char *const *unsent) {
  for (size_t i = 0; i < w->res.n_actions; i++) {
    recon_action *a = &w->res.actions[i];
    if (a->kind == RECON_CREATE_POD && in_list(unsent, a->name))
      continue;
    switch (a->kind) {
    case RECON_UPDATE_STATUS:
      cJSON_DeleteItemFromObject(w->job, "status");
      cJSON_AddItemToObject(w->job, "status", cJSON_Duplicate(a->object, 1));
      break;
    case RECON_CREATE_SERVICE:
      w->service = 1;
      break;
    case RECON_CREATE_SECRET:
      w->token_attempt = a->attempt; /* the executor remembers it */
      break;
    case RECON_CREATE_CONFIGMAP:
      free(w->cluster);
      w->cluster = strdup(str_at(a->object, "data", PODBUILD_CLUSTER_KEY));
      w->cluster_attempt = a->attempt;
      break;
    case RECON_CREATE_POD: {
      ASSERT_NULL(pod_by_name(w, a->name)); /* the apiserver would say AlreadyExists */
      cJSON *p = cJSON_Duplicate(a->object, 1);
      cJSON *md = cJSON_GetObjectItemCaseSensitive(p, "metadata");
      char uid[128];
      snprintf(uid, sizeof(uid), "uid-%s-a%d", a->name, a->attempt);
      cJSON_AddStringToObject(md, "uid", uid);
      cJSON *st = cJSON_AddObjectToObject(p, "status");
      cJSON_AddStringToObject(st, "phase", "Pending");
      cJSON_AddItemToArray(w->pods, p);
      break;
    }
    case RECON_DELETE_POD: {
      cJSON *p;
      int found = 0;
      cJSON_ArrayForEach(p, w->pods) {
        cJSON *md = cJSON_GetObjectItemCaseSensitive(p, "metadata");
        if (!strcmp(str_at(md, "uid", NULL), a->uid)) {
          found = 1;
          char ts[40]; /* the end of a 30 s grace period, as the apiserver sets it */
          ASSERT_OK(kube_time_format(w->now + 30, ts, sizeof(ts)));
          if (!cJSON_GetObjectItemCaseSensitive(md, "deletionTimestamp"))
            cJSON_AddStringToObject(md, "deletionTimestamp", ts);
        }
      }
      ASSERT(found);
      break;
    }
    case RECON_DELETE_JOB:
      w->job_deleted = 1;
      break;
    default:
      break;
    }
  }
}

static void apply(world *w) {
  apply_except(w, NULL);
}

/* The kubelet finishes every pending deletion. */
static void reap(world *w) {
  cJSON *p = w->pods->child;
  while (p) {
    cJSON *next = p->next;
    if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"),
                                         "deletionTimestamp"))
      cJSON_Delete(cJSON_DetachItemViaPointer(w->pods, p));
    p = next;
  }
}

static void set_phase(world *w, const char *name, const char *phase) {
  cJSON *p = pod_by_name(w, name);
  ASSERT_NOT_NULL(p);
  cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
  cJSON_ReplaceItemInObjectCaseSensitive(st, "phase", cJSON_CreateString(phase));
}

/* Every pod not being deleted is Running. */
static void all_running(world *w) {
  cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
    if (!strcmp(str_at(st, "phase", NULL), "Pending"))
      cJSON_ReplaceItemInObjectCaseSensitive(st, "phase", cJSON_CreateString("Running"));
  }
}

/* The pod's container exited with `code` at `finished` (seconds after NOW). */
static void terminate(world *w, const char *name, int code, const char *reason, int finished) {
  cJSON *p = pod_by_name(w, name);
  ASSERT_NOT_NULL(p);
  cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
  cJSON_ReplaceItemInObjectCaseSensitive(st, "phase",
                                         cJSON_CreateString(code ? "Failed" : "Succeeded"));
  cJSON_DeleteItemFromObject(st, "containerStatuses");
  cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(cs, c);
  cJSON_AddStringToObject(c, "name", "train");
  cJSON *term = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "state"), "terminated");
  cJSON_AddNumberToObject(term, "exitCode", code);
  cJSON_AddStringToObject(term, "reason", reason);
  char ts[40];
  ASSERT_OK(kube_time_format(NOW + finished, ts, sizeof(ts)));
  cJSON_AddStringToObject(term, "finishedAt", ts);
}

/* `name` exits 75 (it lost a peer) at NOW + finished, and the clock moves
 * past the window in which the end of the attempt waits for a cause
 * (RECON_PEER_LOSS_WINDOW_S) while others still run. */
static void lost_peer(world *w, const char *name, int finished) {
  terminate(w, name, 75, "Error", finished);
  if (w->now < NOW + finished + 75)
    w->now = NOW + finished + 75;
}

static size_t count(world *w, recon_action_kind k) {
  size_t n = 0;
  for (size_t i = 0; i < w->res.n_actions; i++)
    n += w->res.actions[i].kind == k;
  return n;
}

static recon_action *find(world *w, recon_action_kind k, const char *name) {
  for (size_t i = 0; i < w->res.n_actions; i++) {
    recon_action *a = &w->res.actions[i];
    if (a->kind == k && (!name || (a->name && !strcmp(a->name, name))))
      return a;
  }
  return NULL;
}

/* The pass creates exactly the pods `names` (NULL-terminated), in any order. */
static void expect_creates_(world *w, const char *const *names, const char *file, int line) {
  size_t n = 0;
  for (; names[n]; n++)
    if (!find(w, RECON_CREATE_POD, names[n]))
      TEST_FAIL_("%s:%d: no CreatePod %s", file, line, names[n]);
  if (count(w, RECON_CREATE_POD) != n)
    TEST_FAIL_("%s:%d: %zu CreatePod, expected %zu", file, line, count(w, RECON_CREATE_POD), n);
}
#define EXPECT_CREATES(w, ...)                                                                     \
  expect_creates_((w), (const char *const[]){__VA_ARGS__, NULL}, __FILE__, __LINE__)

static recon_action *find_event(world *w, const char *reason) {
  for (size_t i = 0; i < w->res.n_actions; i++) {
    recon_action *a = &w->res.actions[i];
    if (a->kind == RECON_EVENT && !strcmp(a->reason, reason))
      return a;
  }
  return NULL;
}

static const cJSON *cond(const cJSON *status, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(status, "conditions")) {
    if (!strcmp(str_at(c, "type", NULL), type))
      return c;
  }
  return NULL;
}

static const char *cond_status(world *w, const char *type) {
  return str_at(cond(w->res.status, type), "status", NULL);
}

static int64_t num(const cJSON *o, const char *a, const char *b) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
  if (b)
    v = cJSON_GetObjectItemCaseSensitive(v, b);
  ASSERT(cJSON_IsNumber(v));
  return (int64_t)v->valuedouble;
}

static int replica_count(world *w, const char *type, const char *field) {
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(w->res.status, "replicaStatuses");
  return (int)num(cJSON_GetObjectItemCaseSensitive(rs, type), field, NULL);
}

static const char *label(const cJSON *pod, const char *k) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
  return str_at(cJSON_GetObjectItemCaseSensitive(md, "labels"), k, NULL);
}

/* Runs passes, applying each and marking new pods Running, until a pass
 * creates nothing. Returns the number of passes that created pods. */
static int settle(world *w) {
  int passes = 0;
  for (int i = 0; i < 64; i++) {
    run(w);
    apply(w);
    if (!count(w, RECON_CREATE_POD))
      return passes;
    passes++;
    all_running(w);
  }
  TEST_FAIL_("settle: no fixed point");
  return -1;
}

/* ---- tests ------------------------------------------------------------------ */

TEST(first_reconcile_creates_service_secret_all_pods) {
  world w;
  world_init(&w, 1, 3, 0);
  run(&w);
  /* The status goes first, then Service, Secret and the attempt's
   * NetworkPolicy, and every pod, in type and index order (the executor's
   * slow start sends them 1, 2, 1). */
  ASSERT_EQ(w.res.actions[0].kind, RECON_UPDATE_STATUS);
  ASSERT_EQ(w.res.actions[1].kind, RECON_CREATE_SERVICE);
  ASSERT_EQ(w.res.actions[2].kind, RECON_CREATE_SECRET);
  ASSERT_EQ(w.res.actions[3].kind, RECON_CREATE_NETWORK_POLICY);
  ASSERT_EQ(count(&w, RECON_CREATE_SERVICE), 1);
  ASSERT_EQ(count(&w, RECON_CREATE_NETWORK_POLICY), 1);
  /* Only the attempt's own pods may reach the job's pods. */
  const cJSON *np = w.res.actions[3].object;
  ASSERT_EQ(w.res.actions[3].attempt, 1);
  ASSERT_STR_EQ(
      cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(np, "metadata"), "name")), "tj");
  char *npj = cJSON_PrintUnformatted(np);
  ASSERT_STR_CONTAINS(npj, "\"podSelector\":{\"matchLabels\":{\"ctrain.dev/job-name\":\"tj\"}}");
  ASSERT_STR_CONTAINS(npj, "{\"ctrain.dev/job-name\":\"tj\",\"ctrain.dev/attempt\":\"1\"}");
  ASSERT_STR_CONTAINS(npj, "\"policyTypes\":[\"Ingress\"]");
  free(npj);
  ASSERT_EQ(count(&w, RECON_CREATE_SECRET), 1);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 4);
  static const char *const order[] = {"tj-chief-0", "tj-worker-0", "tj-worker-1", "tj-worker-2"};
  size_t k = 0;
  for (size_t i = 0; i < w.res.n_actions; i++) {
    recon_action *a = &w.res.actions[i];
    if (a->kind != RECON_CREATE_POD)
      continue;
    ASSERT_STR_EQ(a->name, order[k]);
    ASSERT_EQ(a->attempt, 1);
    /* Each create has its own event, tied to it by index. */
    size_t events = 0;
    for (size_t j = 0; j < w.res.n_actions; j++)
      if (w.res.actions[j].kind == RECON_EVENT && w.res.actions[j].after == (int)i) {
        ASSERT_GT(j, i);
        ASSERT_STR_EQ(w.res.actions[j].reason, "SuccessfulCreatePod");
        ASSERT_STR_CONTAINS(w.res.actions[j].message, order[k]);
        events++;
      }
    ASSERT_EQ(events, 1);
    k++;
  }
  ASSERT_EQ(k, 4);
  recon_action *pod = find(&w, RECON_CREATE_POD, "tj-chief-0");
  ASSERT_NOT_NULL(pod);
  /* The Secret of attempt 1 holds the token the callback derived. */
  recon_action *sec = find(&w, RECON_CREATE_SECRET, NULL);
  ASSERT_EQ(sec->attempt, 1);
  const char *tok =
      str_at(cJSON_GetObjectItemCaseSensitive(sec->object, "stringData"), "token", NULL);
  ASSERT_STR_EQ(tok, "tok-job-uid-1");
  ASSERT_STR_EQ(str_at(sec->object, "metadata", "name"), "tj-token-1");
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(sec->object, "metadata"), "resourceVersion"));
  recon_action *svc = find(&w, RECON_CREATE_SERVICE, NULL);
  ASSERT_STR_EQ(str_at(svc->object, "spec", "clusterIP"), "None");
  /* Pod created event, tied to the create. */
  recon_action *ev = find_event(&w, "SuccessfulCreatePod");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(ev->event_type, "Normal");
  ASSERT_STR_CONTAINS(ev->message, "tj-chief-0");
  ASSERT_EQ(w.res.actions[ev->after].kind, RECON_CREATE_POD);
  ASSERT_STR_EQ(w.res.actions[ev->after].name, "tj-chief-0");
  ASSERT_STR_EQ(str_at(ev->object, "kind", NULL), "TrainingJob");
  ASSERT_STR_EQ(str_at(ev->object, "uid", NULL), "job-uid");
  /* Status. */
  ASSERT_STR_EQ(cond_status(&w, "Created"), "True");
  ASSERT_NULL(cond(w.res.status, "Running"));
  ASSERT_STR_EQ(str_at(w.res.status, "startTime", NULL), "2023-11-14T22:13:20Z");
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  ASSERT_EQ(num(w.res.status, "observedGeneration", NULL), 1);
  /* The creates of the pass count as active already (as in the Job controller). */
  ASSERT_EQ(replica_count(&w, "Worker", "active"), 3);
  ASSERT_EQ(replica_count(&w, "Chief", "active"), 1);
  ASSERT(w.res.status_changed);
  ASSERT_EQ(recon_expectations_pending(&w.x), 4);
  world_free(&w);
}

TEST(pods_appearing_need_no_status_write) {
  world w;
  world_init(&w, 1, 3, 1);
  run(&w);
  ASSERT(w.res.status_changed);
  /* The executor: worker-2 failed, the evaluator was not sent. */
  static const char *const unsent[] = {"tj-worker-2", "tj-evaluator-0", NULL};
  apply_except(&w, unsent);
  /* The cache shows a part of the pods that were created: still expected,
   * still counted, nothing to write (a lagging cache costs no request). */
  cJSON *real = w.pods;
  w.pods = cJSON_CreateArray();
  cJSON_AddItemToArray(w.pods, cJSON_Duplicate(pod_by_name_in(real, "tj-worker-0"), 1));
  run(&w);
  ASSERT(!w.res.status_changed);
  ASSERT_NULL(find(&w, RECON_UPDATE_STATUS, NULL));
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(replica_count(&w, "Worker", "active"), 3);
  cJSON_Delete(w.pods);
  w.pods = real;
  /* The failures are reported: the count drops and the status is written;
   * the creates come back with their own expectations and count again. */
  recon_expect_creation_failed(&w.x, "tj-worker-2");
  recon_expect_creation_failed(&w.x, "tj-evaluator-0");
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 2);
  ASSERT_EQ(replica_count(&w, "Worker", "active"), 3);
  ASSERT_EQ(replica_count(&w, "Evaluator", "active"), 1);
  ASSERT(!w.res.status_changed);
  /* Given up again, and this time the burst lets only worker-2 through:
   * the evaluator's count drops to what exists, and that is written. */
  recon_expect_creation_failed(&w.x, "tj-worker-2");
  recon_expect_creation_failed(&w.x, "tj-evaluator-0");
  w.burst = 1;
  run(&w);
  EXPECT_CREATES(&w, "tj-worker-2");
  ASSERT(w.res.status_changed);
  ASSERT_EQ(replica_count(&w, "Worker", "active"), 3);
  ASSERT_EQ(replica_count(&w, "Evaluator", "active"), 0);
  world_free(&w);
}

TEST(all_missing_pods_in_one_pass) {
  world w;
  world_init(&w, 1, 14, 1); /* 16 pods */
  ASSERT_EQ(settle(&w), 1);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 16);
  ASSERT_STR_EQ(cond_status(&w, "Running"), "True");
  ASSERT_EQ(replica_count(&w, "Worker", "active"), 14);
  ASSERT_EQ(recon_expectations_pending(&w.x), 0);
  world_free(&w);
}

TEST(burst_caps_creates) {
  world w;
  world_init(&w, 0, 20, 0);
  w.burst = 3;
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  static const char *const unsent[] = {"tj-worker-1", NULL};
  apply_except(&w, unsent);
  /* The cache has not shown them yet: 3 in flight is the burst, nothing more. */
  cJSON *real = w.pods;
  w.pods = cJSON_CreateArray();
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  /* worker-1 failed: its slot in the burst is free again, and it goes first. */
  recon_expect_creation_failed(&w.x, "tj-worker-1");
  run(&w);
  EXPECT_CREATES(&w, "tj-worker-1");
  cJSON_Delete(w.pods);
  w.pods = real;
  apply(&w);
  /* Observed pods leave the burst: 3 per pass, ceil(17 / 3) more passes. */
  int passes = settle(&w);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 20);
  ASSERT_EQ(passes, 6);
  world_free(&w);
}

TEST(expectations_prevent_duplicates_when_cache_lags) {
  world w;
  world_init(&w, 1, 3, 0);
  w.burst = 2;
  run(&w);
  EXPECT_CREATES(&w, "tj-chief-0", "tj-worker-0");
  /* The create happened but the cache shows no pod yet: nothing again. */
  cJSON *lagged = cJSON_Duplicate(w.pods, 1);
  apply(&w);
  cJSON *real = w.pods;
  w.pods = lagged;
  for (int i = 0; i < 3; i++) {
    w.now += 10;
    run(&w);
    ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
    /* A requeue at the expectations' expiry keeps a lost watch event from stalling the job. */
    ASSERT_GT(w.res.requeue_after_s, 0);
    ASSERT_LE(w.res.requeue_after_s, RECON_EXPECTATIONS_TTL_S);
  }
  /* Once the pods are seen the other two go out, never chief-0 or worker-0 again. */
  w.pods = real;
  cJSON_Delete(lagged);
  run(&w);
  EXPECT_CREATES(&w, "tj-worker-1", "tj-worker-2");
  ASSERT_EQ(recon_expectations_pending(&w.x), 2);
  world_free(&w);
}

TEST(expectations_lag_then_observed) {
  world w;
  world_init(&w, 1, 3, 0);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 4);
  /* The executor's slow start: chief-0 (batch 1) and worker-0 succeeded,
   * worker-1 failed in batch 2, so worker-2 was never sent. */
  static const char *const unsent[] = {"tj-worker-1", "tj-worker-2", NULL};
  apply_except(&w, unsent);
  recon_expect_creation_failed(&w.x, "tj-worker-1");
  recon_expect_creation_failed(&w.x, "tj-worker-2");
  ASSERT_EQ(recon_expectations_pending(&w.x), 2);
  /* A cache that shows none of the pods yet: only the two given up are
   * returned, the two still expected are not. */
  cJSON *real = w.pods;
  w.pods = cJSON_CreateArray();
  run(&w);
  EXPECT_CREATES(&w, "tj-worker-1", "tj-worker-2");
  ASSERT_EQ(recon_expectations_pending(&w.x), 4);
  cJSON *lagged = w.pods;
  w.pods = real;
  apply(&w); /* the retries land */
  /* Same lagging cache again: all four expected, nothing new. */
  w.pods = lagged;
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(recon_expectations_pending(&w.x), 4);
  cJSON_Delete(lagged);
  w.pods = real;
  /* The cache catches up: every expectation observed, nothing created. */
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(recon_expectations_pending(&w.x), 0);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 4);
  world_free(&w);
}

TEST(expectations_expire) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  ASSERT_NOT_NULL(find(&w, RECON_CREATE_POD, "tj-worker-0"));
  w.now += RECON_EXPECTATIONS_TTL_S - 1;
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  w.now += 1;
  run(&w);
  ASSERT_NOT_NULL(find(&w, RECON_CREATE_POD, "tj-worker-0"));
  world_free(&w);
}

TEST(creation_failed_is_retried) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 2);
  /* worker-0 (batch 1) failed: worker-1 was not sent. */
  recon_expect_creation_failed(&w.x, "tj-worker-0");
  ASSERT_EQ(recon_expectations_pending(&w.x), 1);
  recon_expect_creation_failed(&w.x, "tj-worker-1");
  ASSERT_EQ(recon_expectations_pending(&w.x), 0);
  run(&w);
  EXPECT_CREATES(&w, "tj-worker-0", "tj-worker-1");
  ASSERT_EQ(recon_expectations_pending(&w.x), 2);
  world_free(&w);
}

TEST(steady_state_no_actions) {
  world w;
  world_init(&w, 1, 2, 1);
  settle(&w);
  ASSERT_STR_EQ(cond_status(&w, "Running"), "True");
  run(&w);
  apply(&w);
  /* Nothing changed: no status write, no create, no event. */
  run(&w);
  ASSERT_EQ(w.res.n_actions, 0);
  ASSERT(!w.res.status_changed);
  ASSERT_NOT_NULL(w.res.status);
  /* Time passes: still nothing (no timestamps churn). */
  w.now += 3600;
  run(&w);
  ASSERT_EQ(w.res.n_actions, 0);
  world_free(&w);
}

TEST(conditions_transition_times) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  apply(&w);
  const char *created_ltt = str_at(cond(w.res.status, "Created"), "lastTransitionTime", NULL);
  ASSERT_STR_EQ(created_ltt, "2023-11-14T22:13:20Z");
  ASSERT_NULL(cond(w.res.status, "Running"));
  w.now += 100;
  all_running(&w);
  run(&w);
  /* Created kept its time; Running is new and last (the State column). */
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Created"), "lastTransitionTime", NULL),
                "2023-11-14T22:13:20Z");
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Running"), "lastTransitionTime", NULL),
                "2023-11-14T22:15:00Z");
  const cJSON *conds = cJSON_GetObjectItemCaseSensitive(w.res.status, "conditions");
  int n = cJSON_GetArraySize(conds);
  ASSERT_STR_EQ(str_at(cJSON_GetArrayItem(conds, n - 1), "type", NULL), "Running");
  world_free(&w);
}

TEST(state_is_last_true_condition) {
  world w;
  world_init(&w, 0, 1, 0);
  ASSERT_STR_EQ(recon_state(NULL), "Pending");
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Created");
  apply(&w);
  all_running(&w);
  settle(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Running");
  lost_peer(&w, "tj-worker-0", 1);
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Restarting");
  apply(&w);
  reap(&w);
  settle(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Running");
  terminate(&w, "tj-worker-0", 0, "Completed", 2);
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Succeeded");
  world_free(&w);
}

TEST(worker_exit_75_gang_restart) {
  world w;
  world_init(&w, 1, 3, 0);
  settle(&w);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 4);
  w.now += 60;
  lost_peer(&w, "tj-worker-2", 59);
  run(&w);
  /* Attempt 2 decided, recorded first. */
  ASSERT_EQ(w.res.actions[0].kind, RECON_UPDATE_STATUS);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 1);
  ASSERT_EQ(w.res.attempt, 2);
  ASSERT_STR_EQ(cond_status(&w, "Restarting"), "True");
  ASSERT_STR_EQ(cond_status(&w, "Running"), "False");
  const char *msg = str_at(cond(w.res.status, "Restarting"), "message", NULL);
  ASSERT_STR_CONTAINS(msg, "tj-worker-2");
  ASSERT_STR_CONTAINS(msg, "exit code 75");
  recon_action *ev = find_event(&w, "Restarting");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(ev->event_type, "Warning");
  ASSERT_STR_CONTAINS(ev->message, "tj-worker-2");
  ASSERT_STR_CONTAINS(ev->message, "75");
  /* Every collective pod of attempt 1 goes, with its uid as precondition. */
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 4);
  ASSERT_STR_EQ(find(&w, RECON_DELETE_POD, "tj-chief-0")->uid, "uid-tj-chief-0-a1");
  /* New token for the new attempt, in a new Secret (never an update). */
  recon_action *sec = find(&w, RECON_CREATE_SECRET, NULL);
  ASSERT_NOT_NULL(sec);
  ASSERT_EQ(sec->attempt, 2);
  ASSERT_STR_EQ(str_at(sec->object, "metadata", "name"), "tj-token-2");
  ASSERT_STR_EQ(str_at(cJSON_GetObjectItemCaseSensitive(sec->object, "stringData"), "token", NULL),
                "tok-job-uid-2");
  /* Names are still taken: nothing created yet. */
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  apply(&w);
  /* Pods terminating (they exit 75 on SIGTERM): no second restart, no creates. */
  terminate(&w, "tj-worker-0", 75, "Error", 61);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 1);
  apply(&w);
  /* Gone: attempt 2 is created (slow start again). */
  reap(&w);
  run(&w);
  recon_action *c = find(&w, RECON_CREATE_POD, "tj-chief-0");
  ASSERT_NOT_NULL(c);
  ASSERT_EQ(c->attempt, 2);
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(c->object, "metadata"), "labels");
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(labels, PODBUILD_LABEL_ATTEMPT)->valuestring, "2");
  apply(&w);
  all_running(&w);
  settle(&w);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 4);
  ASSERT_STR_EQ(cond_status(&w, "Running"), "True");
  ASSERT_STR_EQ(cond_status(&w, "Restarting"), "False");
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 1);
  world_free(&w);
}

TEST(exit_78_fails_without_restart) {
  world w;
  world_init(&w, 1, 2, 0);
  settle(&w);
  w.now += 30;
  terminate(&w, "tj-worker-1", 78, "Error", 29);
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  const cJSON *f = cond(w.res.status, "Failed");
  ASSERT_STR_EQ(str_at(f, "reason", NULL), "NotRetryable");
  ASSERT_STR_CONTAINS(str_at(f, "message", NULL), "tj-worker-1");
  ASSERT_STR_CONTAINS(str_at(f, "message", NULL), "exit code 78");
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  ASSERT_NOT_NULL(str_at(w.res.status, "completionTime", NULL));
  ASSERT_STR_EQ(cond_status(&w, "Running"), "False");
  ASSERT_NOT_NULL(find_event(&w, "Failed"));
  ASSERT_STR_EQ(find_event(&w, "Failed")->event_type, "Warning");
  /* cleanPodPolicy Running: the running ones go, the failed one stays. */
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 2);
  ASSERT_NULL(find(&w, RECON_DELETE_POD, "tj-worker-1"));
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_NULL(find(&w, RECON_CREATE_SECRET, NULL));
  apply(&w);
  reap(&w);
  /* Finished: nothing is ever created again, and nothing else happens. */
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  apply(&w);
  run(&w);
  ASSERT_EQ(w.res.n_actions, 0);
  world_free(&w);
}

/* The restart table: policy x exit code -> restart or fail. */
TEST(restart_table) {
  static const struct {
    const char *policy;
    int code;
    int restart;
  } cases[] = {
      {"OnFailure", 75, 1}, {"OnFailure", 1, 1},  {"OnFailure", 137, 1}, {"OnFailure", 64, 0},
      {"OnFailure", 65, 0}, {"OnFailure", 78, 0}, {"ExitCode", 75, 1},   {"ExitCode", 143, 1},
      {"ExitCode", 1, 0},   {"ExitCode", 70, 0},  {"ExitCode", 78, 0},   {"Never", 75, 0},
      {"Never", 1, 0},      {"Never", 137, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    world w;
    world_init(&w, 0, 2, 0);
    set_spec(&w, "restartPolicy", cJSON_CreateString(cases[i].policy));
    settle(&w);
    terminate(&w, "tj-worker-1", cases[i].code, "Error", 5);
    w.now = NOW + 5 + 75; /* past the wait for the cause of a lone 75 (lost_peer) */
    run(&w);
    const int restarted = num(w.res.status, "attempt", NULL) == 2;
    const char *failed = cond_status(&w, "Failed");
    if (restarted != cases[i].restart || (!restarted) != (failed && !strcmp(failed, "True")))
      TEST_FAIL_("policy %s code %d: restarted %d failed %s, want restart %d", cases[i].policy,
                 cases[i].code, restarted, failed ? failed : "(none)", cases[i].restart);
    if (!restarted) {
      char want[64];
      snprintf(want, sizeof(want), "exit code %d", cases[i].code);
      ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Failed"), "message", NULL), want);
      ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Failed"), "message", NULL), cases[i].policy);
    }
    world_free(&w);
  }
}

TEST(exitcode_policy_exit_1_fails) {
  world w;
  world_init(&w, 1, 2, 0);
  set_spec(&w, "restartPolicy", cJSON_CreateString("ExitCode"));
  settle(&w);
  terminate(&w, "tj-worker-0", 1, "Error", 3);
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Failed"), "reason", NULL), "NotRetryable");
  ASSERT_NULL(find_event(&w, "Restarting"));
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  world_free(&w);
}

TEST(backoff_limit_exhausted) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(2));
  settle(&w);
  for (int attempt = 1; attempt <= 3; attempt++) {
    char name[] = "tj-worker-0";
    lost_peer(&w, name, attempt);
    run(&w);
    if (attempt <= 2) {
      ASSERT_EQ(num(w.res.status, "attempt", NULL), attempt + 1);
      ASSERT_EQ(num(w.res.status, "restarts", NULL), attempt);
      apply(&w);
      reap(&w);
      settle(&w);
      ASSERT_EQ(cJSON_GetArraySize(w.pods), 2);
    }
  }
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  const cJSON *f = cond(w.res.status, "Failed");
  ASSERT_STR_EQ(str_at(f, "reason", NULL), "BackoffLimitExceeded");
  ASSERT_STR_CONTAINS(str_at(f, "message", NULL), "exit code 75");
  ASSERT_STR_CONTAINS(str_at(f, "message", NULL), "tj-worker-0");
  ASSERT_STR_CONTAINS(str_at(f, "message", NULL), "backoffLimit 2");
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 2);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 3);
  ASSERT_STR_EQ(cond_status(&w, "Restarting"), "False");
  world_free(&w);
}

TEST(backoff_limit_zero_never_restarts) {
  world w;
  world_init(&w, 0, 1, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(0));
  settle(&w);
  lost_peer(&w, "tj-worker-0", 1);
  run(&w);
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Failed"), "reason", NULL), "BackoffLimitExceeded");
  world_free(&w);
}

TEST(cause_of_the_failure_named) {
  /* Two failures: the cause is named (the earlier one; at the same second,
   * not the one that exited 75 for a lost peer, and the killed one rather
   * than one that exited 1 when its peer died, as TensorFlow does); a
   * permanent one wins. */
  static const struct {
    int backoff; /* -1: the default */
    const char *pod0;
    int code0;
    const char *reason0;
    int at0;
    const char *pod1;
    int code1;
    int at1;
    const char *condition, *named;
  } cases[] = {
      {0, "tj-worker-0", 137, "OOMKilled", 10, "tj-worker-2", 75, 20, "Failed",
       "tj-worker-0 failed with exit code 137 (OOMKilled)"},
      {-1, "tj-worker-0", 75, "Error", 10, "tj-worker-1", 137, 10, "Restarting",
       "tj-worker-1 failed with exit code 137"},
      {-1, "tj-worker-0", 1, "Error", 10, "tj-worker-2", 137, 10, "Restarting",
       "tj-worker-2 failed with exit code 137"},
      {-1, "tj-worker-0", 65, "Error", 10, "tj-worker-2", 75, 20, "Failed",
       "tj-worker-0 failed with exit code 65"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    world w;
    world_init(&w, 0, 3, 0);
    if (cases[i].backoff >= 0)
      set_spec(&w, "backoffLimit", cJSON_CreateNumber(cases[i].backoff));
    settle(&w);
    terminate(&w, cases[i].pod0, cases[i].code0, cases[i].reason0, cases[i].at0);
    terminate(&w, cases[i].pod1, cases[i].code1, "Error", cases[i].at1);
    run(&w);
    const char *m = str_at(cond(w.res.status, cases[i].condition), "message", NULL);
    ASSERT_STR_CONTAINS(m, cases[i].named);
    if (!strcmp(cases[i].condition, "Failed"))
      ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
    world_free(&w);
  }
}

TEST(evicted_pod_is_retryable) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "restartPolicy", cJSON_CreateString("ExitCode"));
  settle(&w);
  set_phase(&w, "tj-worker-1", "Failed");
  cJSON *st = cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-1"), "status");
  cJSON_AddStringToObject(st, "reason", "Evicted");
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Restarting"), "message", NULL), "Evicted");
  world_free(&w);
}

TEST(sidecar_keeps_pod_running_but_worker_failed) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "restartPolicy", cJSON_CreateString("Never"));
  settle(&w);
  terminate(&w, "tj-worker-1", 78, "Error", 1);
  set_phase(&w, "tj-worker-1", "Running"); /* a sidecar still runs */
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Failed"), "message", NULL), "exit code 78");
  world_free(&w);
}

TEST(chief_success_and_clean_pod_policy) {
  static const struct {
    const char *policy;
    int deletes;
  } cases[] = {{"Running", 3}, {"All", 4}, {"None", 0}};
  for (size_t i = 0; i < 3; i++) {
    world w;
    world_init(&w, 1, 3, 0);
    set_spec(&w, "cleanPodPolicy", cJSON_CreateString(cases[i].policy));
    settle(&w);
    w.now += 500;
    terminate(&w, "tj-chief-0", 0, "Completed", 499);
    run(&w);
    ASSERT_STR_EQ(cond_status(&w, "Succeeded"), "True");
    ASSERT_STR_EQ(cond_status(&w, "Running"), "False");
    ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Succeeded"), "message", NULL), "tj-chief-0");
    ASSERT_STR_EQ(str_at(w.res.status, "completionTime", NULL), "2023-11-14T22:21:40Z");
    ASSERT_NOT_NULL(find_event(&w, "Succeeded"));
    ASSERT_EQ((int)count(&w, RECON_DELETE_POD), cases[i].deletes);
    if (cases[i].deletes == 3)
      ASSERT_NULL(find(&w, RECON_DELETE_POD, "tj-chief-0"));
    ASSERT_EQ(replica_count(&w, "Chief", "succeeded"), 1);
    ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
    world_free(&w);
  }
}

TEST(worker0_success_without_chief) {
  world w;
  world_init(&w, 0, 3, 0);
  settle(&w);
  terminate(&w, "tj-worker-1", 0, "Completed", 1);
  run(&w);
  ASSERT_NULL(cond(w.res.status, "Succeeded")); /* worker 1 is not the chief */
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);    /* a Succeeded pod is never recreated */
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  ASSERT_EQ(replica_count(&w, "Worker", "succeeded"), 1);
  ASSERT_EQ(replica_count(&w, "Worker", "active"), 2);
  terminate(&w, "tj-worker-0", 0, "Completed", 2);
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Succeeded"), "True");
  world_free(&w);
}

TEST(all_workers_success_policy) {
  world w;
  world_init(&w, 1, 2, 0);
  set_spec(&w, "successPolicy", cJSON_CreateString("AllWorkers"));
  settle(&w);
  terminate(&w, "tj-chief-0", 0, "Completed", 1);
  terminate(&w, "tj-worker-0", 0, "Completed", 1);
  run(&w);
  ASSERT_NULL(cond(w.res.status, "Succeeded"));
  terminate(&w, "tj-worker-1", 0, "Completed", 2);
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Succeeded"), "True");
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Succeeded"), "message", NULL), "all 2 workers");
  world_free(&w);
}

TEST(success_wins_over_later_failures) {
  world w;
  world_init(&w, 1, 2, 0);
  settle(&w);
  terminate(&w, "tj-chief-0", 0, "Completed", 1);
  lost_peer(&w, "tj-worker-1", 2); /* lost its peer when the chief left */
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Succeeded"), "True");
  ASSERT_NULL(cond(w.res.status, "Failed"));
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  world_free(&w);
}

TEST(deadline_requeue_then_fail) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "activeDeadlineSeconds", cJSON_CreateNumber(100));
  run(&w);
  ASSERT_EQ(w.res.requeue_after_s, 100);
  recon_action *rq = find(&w, RECON_REQUEUE, NULL);
  ASSERT_NOT_NULL(rq);
  ASSERT_EQ(rq->seconds, 100);
  ASSERT_EQ(w.res.actions[w.res.n_actions - 1].kind, RECON_REQUEUE);
  apply(&w);
  all_running(&w);
  w.now += 40;
  run(&w);
  ASSERT_EQ(w.res.requeue_after_s, 60);
  apply(&w);
  all_running(&w);
  w.now += 60;
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Failed"), "reason", NULL), "DeadlineExceeded");
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Failed"), "message", NULL),
                      "activeDeadlineSeconds");
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 2); /* both running pods */
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(w.res.requeue_after_s, -1);
  world_free(&w);
}

TEST(ttl_requeue_then_delete_job) {
  world w;
  world_init(&w, 0, 1, 0);
  set_spec(&w, "ttlSecondsAfterFinished", cJSON_CreateNumber(60));
  settle(&w);
  terminate(&w, "tj-worker-0", 0, "Completed", 0);
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Succeeded"), "True");
  ASSERT_EQ(w.res.requeue_after_s, 60);
  ASSERT_NULL(find(&w, RECON_DELETE_JOB, NULL));
  apply(&w);
  w.now += 59;
  run(&w);
  ASSERT_EQ(w.res.requeue_after_s, 1);
  ASSERT_NULL(find(&w, RECON_DELETE_JOB, NULL));
  w.now += 1;
  run(&w);
  ASSERT_EQ(w.res.n_actions, 1);
  recon_action *d = find(&w, RECON_DELETE_JOB, NULL);
  ASSERT_NOT_NULL(d);
  ASSERT_STR_EQ(d->name, "tj");
  ASSERT_STR_EQ(d->uid, "job-uid");
  world_free(&w);
}

TEST(ttl_zero_deletes_failed_job_next_pass) {
  world w;
  world_init(&w, 0, 1, 0);
  set_spec(&w, "ttlSecondsAfterFinished", cJSON_CreateNumber(0));
  set_spec(&w, "restartPolicy", cJSON_CreateString("Never"));
  settle(&w);
  terminate(&w, "tj-worker-0", 1, "Error", 0);
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  ASSERT_NOT_NULL(find(&w, RECON_DELETE_JOB, NULL));
  world_free(&w);
}

TEST(suspend_and_resume) {
  world w;
  world_init(&w, 1, 2, 1);
  set_spec(&w, "activeDeadlineSeconds", cJSON_CreateNumber(1000));
  settle(&w);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 4);
  terminate(&w, "tj-evaluator-0", 0, "Completed", 1); /* a Succeeded pod is kept */
  w.now += 100;
  set_spec(&w, "suspend", cJSON_CreateTrue());
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 3);
  ASSERT_NULL(find(&w, RECON_DELETE_POD, "tj-evaluator-0"));
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_STR_EQ(cond_status(&w, "Suspended"), "True");
  ASSERT_STR_EQ(cond_status(&w, "Running"), "False");
  ASSERT_NOT_NULL(find_event(&w, "Suspended"));
  ASSERT_EQ(w.res.requeue_after_s, -1); /* no deadline while suspended */
  apply(&w);
  /* Terminating pods exit 75 on SIGTERM: no restart while suspended. */
  lost_peer(&w, "tj-worker-0", 101);
  run(&w);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  ASSERT_NULL(find_event(&w, "Suspended"));
  apply(&w);
  reap(&w);
  run(&w);
  apply(&w);
  run(&w);
  ASSERT_EQ(w.res.n_actions, 0); /* suspended and quiet */
  /* Resume: Suspended False, startTime reset, pods back with the same attempt. */
  w.now += 5000;
  set_spec(&w, "suspend", cJSON_CreateFalse());
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Suspended"), "False");
  ASSERT_NOT_NULL(find_event(&w, "Resumed"));
  ASSERT_NULL(cond(w.res.status, "Failed")); /* the deadline restarted at resume */
  ASSERT_EQ(w.res.requeue_after_s, 1000);
  char want[40];
  ASSERT_OK(kube_time_format(w.now, want, sizeof(want)));
  ASSERT_STR_EQ(str_at(w.res.status, "startTime", NULL), want);
  /* Every deleted pod comes back; the Succeeded evaluator is not recreated. */
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  ASSERT_NULL(find(&w, RECON_CREATE_POD, "tj-evaluator-0"));
  ASSERT_EQ(find(&w, RECON_CREATE_POD, "tj-chief-0")->attempt, 1);
  apply(&w);
  all_running(&w);
  settle(&w);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 4);
  ASSERT_STR_EQ(cond_status(&w, "Running"), "True");
  world_free(&w);
}

TEST(suspended_from_start_creates_nothing) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "suspend", cJSON_CreateTrue());
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_SERVICE), 0);
  ASSERT_STR_EQ(cond_status(&w, "Suspended"), "True");
  world_free(&w);
}

static void expect_invalid(world *w, const char *field) {
  run(w);
  ASSERT_EQ(w->res.n_actions, 1);
  ASSERT_EQ(w->res.actions[0].kind, RECON_UPDATE_STATUS);
  ASSERT_STR_EQ(cond_status(w, "Failed"), "True");
  ASSERT_STR_EQ(str_at(cond(w->res.status, "Failed"), "reason", NULL), "InvalidSpec");
  ASSERT_STR_CONTAINS(str_at(cond(w->res.status, "Failed"), "message", NULL), field);
  ASSERT_NULL(cond(w->res.status, "Created"));
}

TEST(invalid_spec_fails_with_no_other_action) {
  world w;
  /* A template without containers. */
  world_init(&w, 1, 2, 0);
  cJSON *wt = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(spec_of(&w), "replicaSpecs"), "Worker"),
          "template"),
      "spec");
  cJSON_ReplaceItemInObjectCaseSensitive(wt, "containers", cJSON_CreateArray());
  expect_invalid(&w, "spec.replicaSpecs.Worker.template.spec.containers");
  /* Invalid stays failed and creates nothing on later passes. */
  apply(&w);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_SERVICE), 0);
  world_free(&w);

  /* The collective port declared by two containers of one pod. */
  world_init(&w, 0, 2, 0);
  wt = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(spec_of(&w), "replicaSpecs"), "Worker"),
          "template"),
      "spec");
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(wt, "containers"),
                       cJSON_Parse("{\"name\":\"side\",\"ports\":[{\"containerPort\":2222}]}"));
  expect_invalid(&w, "spec.replicaSpecs.Worker.template.spec.containers[1].ports[0].containerPort");
  world_free(&w);

  /* A name too long for tj-evaluator-0 as a hostname (63). */
  world_init(&w, 0, 1, 1);
  cJSON *md = cJSON_GetObjectItemCaseSensitive(w.job, "metadata");
  cJSON_ReplaceItemInObjectCaseSensitive(
      md, "name", cJSON_CreateString("a234567890123456789012345678901234567890123456789012"));
  expect_invalid(&w, "metadata.name");
  world_free(&w);

  /* Not a DNS-1035 label (the Service name). */
  world_init(&w, 0, 1, 0);
  md = cJSON_GetObjectItemCaseSensitive(w.job, "metadata");
  cJSON_ReplaceItemInObjectCaseSensitive(md, "name", cJSON_CreateString("1job"));
  expect_invalid(&w, "metadata.name");
  world_free(&w);

  /* The checkpoint mount collides with the template's. */
  world_init(&w, 0, 1, 0);
  set_spec(&w, "checkpoint", cJSON_Parse("{\"mountPath\":\"/data\",\"volume\":{\"emptyDir\":{}}}"));
  wt = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(spec_of(&w), "replicaSpecs"), "Worker"),
          "template"),
      "spec");
  cJSON_AddItemToObject(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(wt, "containers"), 0),
                        "volumeMounts", cJSON_Parse("[{\"name\":\"d\",\"mountPath\":\"/data\"}]"));
  expect_invalid(&w, "volumeMounts[0].mountPath");
  world_free(&w);
}

TEST(validate_direct) {
  world w;
  world_init(&w, 1, 4096, 1);
  char msg[512] = "";
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  /* 51 characters still fit "-worker-4095" and "-evaluator-0" in 63. */
  cJSON *md = cJSON_GetObjectItemCaseSensitive(w.job, "metadata");
  cJSON_ReplaceItemInObjectCaseSensitive(
      md, "name", cJSON_CreateString("a23456789012345678901234567890123456789012345678901"));
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(spec_of(&w), "replicaSpecs"),
                             "Worker");
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "spec.replicaSpecs.Worker");
  world_free(&w);
}

/* spec.checkpoint.uri (object storage): valid with credentialsSecret; what
 * the schema would reject is reported naming the field if it gets here. */
TEST(validate_backup_uri) {
  world w;
  world_init(&w, 1, 2, 0);
  char msg[512] = "";
  set_spec(&w, "checkpoint",
           cJSON_Parse("{\"uri\":\"s3://bkt/p\",\"endpoint\":\"http://minio:9000\","
                       "\"credentialsSecret\":\"creds\"}"));
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  set_spec(&w, "checkpoint", cJSON_Parse("{\"uri\":\"s3://bkt/p\"}"));
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "spec.checkpoint.credentialsSecret");
  set_spec(&w, "checkpoint",
           cJSON_Parse("{\"uri\":\"http://b/p\",\"credentialsSecret\":\"creds\"}"));
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "spec.checkpoint.uri");
  set_spec(&w, "checkpoint",
           cJSON_Parse("{\"uri\":\"gs://bkt\",\"credentialsSecret\":\"c\","
                       "\"volume\":{\"emptyDir\":{}},\"mountPath\":\"/x\"}"));
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "spec.checkpoint.uri");
  ASSERT_STR_CONTAINS(msg, "volume");
  world_free(&w);
}

/* The controller admits exactly the backup URIs of tests/data/backup_uris.tsv
 * that the worker and the CRD admit (issue 31): recon_validate refuses the
 * others as InvalidSpec naming the field, and the pods of the others build. */
TEST(validate_backup_uri_table) {
  backup_uri_row *rows = NULL;
  int n = backup_uris_load(BACKUP_URIS_TSV, &rows);
  ASSERT_GE(n, 60);
  world w;
  world_init(&w, 1, 2, 0);
  int wrong = 0;
  for (int i = 0; i < n; i++) {
    char msg[512] = "", err[512] = "";
    cJSON *ck = cJSON_CreateObject();
    cJSON_AddStringToObject(ck, "uri", rows[i].uri);
    cJSON_AddStringToObject(ck, "credentialsSecret", "creds");
    set_spec(&w, "checkpoint", ck);
    int ok = recon_validate(w.job, msg, sizeof(msg)) == CTRAIN_OK;
    cJSON *pod = NULL;
    int built = podbuild_pod(w.job, PODBUILD_WORKER, 0, 1, &pod, err, sizeof(err)) == CTRAIN_OK;
    cJSON_Delete(pod);
    if (ok != rows[i].accepted || built != ok || (!ok && !strstr(msg, "spec.checkpoint.uri"))) {
      fprintf(stderr, "backup_uris.tsv:%d: %s (%s): table %s, controller %s, podbuild %s: %s\n",
              rows[i].line, rows[i].uri, rows[i].why, rows[i].accepted ? "yes" : "no",
              ok ? "yes" : "no", built ? "yes" : "no", ok ? err : msg);
      wrong++;
    }
  }
  free(rows);
  world_free(&w);
  ASSERT_EQ(wrong, 0);
}

TEST(deleted_pod_is_recreated_same_attempt) {
  world w;
  world_init(&w, 0, 3, 0);
  settle(&w);
  /* Someone deleted worker-1 and it is gone. */
  cJSON *p = pod_by_name(&w, "tj-worker-1");
  cJSON_Delete(cJSON_DetachItemViaPointer(w.pods, p));
  run(&w);
  recon_action *c = find(&w, RECON_CREATE_POD, "tj-worker-1");
  ASSERT_NOT_NULL(c);
  ASSERT_EQ(c->attempt, 1);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 1);
  world_free(&w);
}

TEST(pod_deleted_by_someone_else_ends_the_attempt) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  /* kubectl delete pod / a drain's eviction: deletionTimestamp set, the
   * container still running out its grace period. */
  cJSON *md = cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-1"), "metadata");
  cJSON_AddStringToObject(md, "deletionTimestamp", "2026-01-01T00:00:00Z");
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  /* A disruption, not a failure: counted apart from backoffLimit. */
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  ASSERT_EQ(num(w.res.status, "disruptions", NULL), 1);
  const char *msg = str_at(cond(w.res.status, "Restarting"), "message", NULL);
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Restarting"), "reason", NULL), "Disruption");
  ASSERT_STR_CONTAINS(msg, "pod tj-worker-1 on node");
  ASSERT_STR_CONTAINS(msg, "was deleted before it finished");
  /* Nothing is recreated under attempt 1. */
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

TEST(missing_image_named_in_status_and_event_once) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  apply(&w); /* pods created, Pending */
  cJSON *st = cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-1"), "status");
  cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
  cJSON *c0 = cJSON_CreateObject();
  cJSON_AddStringToObject(c0, "name", "worker");
  cJSON_AddStringToObject(c0, "image", "ctrain:nope");
  cJSON *waiting = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c0, "state"), "waiting");
  cJSON_AddStringToObject(waiting, "reason", "ErrImageNeverPull");
  cJSON_AddStringToObject(waiting, "message", "Container image \"ctrain:nope\" is not present");
  cJSON_AddItemToArray(cs, c0);
  run(&w);
  const cJSON *created = cond(w.res.status, "Created");
  ASSERT_STR_EQ(str_at(created, "reason", NULL), "ErrImageNeverPull");
  const char *msg = str_at(created, "message", NULL);
  ASSERT_STR_CONTAINS(msg, "pod tj-worker-1 cannot start: container worker (image ctrain:nope)");
  ASSERT_STR_CONTAINS(msg, "is not present");
  recon_action *ev = find_event(&w, "ErrImageNeverPull");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(ev->event_type, "Warning");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  apply(&w);
  /* The same state again: no second event. */
  run(&w);
  ASSERT_NULL(find_event(&w, "ErrImageNeverPull"));
  apply(&w);
  /* Once the pods run, the reason is the job's own again. */
  all_running(&w);
  settle(&w);
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Created"), "reason", NULL), "TrainingJobCreated");
  ASSERT_STR_EQ(cond_status(&w, "Running"), "True");
  world_free(&w);
}

TEST(unschedulable_pod_named) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  apply(&w);
  cJSON *st = cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-0"), "status");
  cJSON *pc = cJSON_AddArrayToObject(st, "conditions");
  cJSON *c0 = cJSON_CreateObject();
  cJSON_AddStringToObject(c0, "type", "PodScheduled");
  cJSON_AddStringToObject(c0, "status", "False");
  cJSON_AddStringToObject(c0, "reason", "Unschedulable");
  cJSON_AddStringToObject(c0, "message", "0/1 nodes are available: 1 Insufficient cpu.");
  cJSON_AddItemToArray(pc, c0);
  run(&w);
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Created"), "reason", NULL), "Unschedulable");
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Created"), "message", NULL),
                      "pod tj-worker-0 cannot be scheduled: 0/1 nodes are available");
  ASSERT_NOT_NULL(find_event(&w, "Unschedulable"));
  world_free(&w);
}

TEST(stray_pods_deleted) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  /* Scaled down to 1 worker: worker-1 is now extra. */
  cJSON *wrs = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(spec_of(&w), "replicaSpecs"), "Worker");
  cJSON_ReplaceItemInObjectCaseSensitive(wrs, "replicas", cJSON_CreateNumber(1));
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 1);
  ASSERT_NOT_NULL(find(&w, RECON_DELETE_POD, "tj-worker-1"));
  /* A second pass before the cache shows the deletion: no second delete. */
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  /* A failed delete is retried. */
  recon_expect_deletion_failed(&w.x, "uid-tj-worker-1-a1");
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 1);
  world_free(&w);
}

TEST(foreign_pods_ignored) {
  world w;
  world_init(&w, 0, 1, 0);
  cJSON *p = cJSON_Parse("{\"metadata\":{\"name\":\"tj-worker-0\",\"uid\":\"other\","
                         "\"labels\":{\"ctrain.dev/job-name\":\"tj\"},"
                         "\"ownerReferences\":[{\"uid\":\"someone-else\",\"controller\":true}]},"
                         "\"status\":{\"phase\":\"Running\"}}");
  cJSON_AddItemToArray(w.pods, p);
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  world_free(&w);
}

TEST(lagging_job_cache_keeps_new_attempt) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  lost_peer(&w, "tj-worker-0", 1);
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  /* Apply everything but the status write (the job cache lags), then the
   * old pods vanish. */
  cJSON *old_status = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(w.job, "status"), 1);
  apply(&w);
  cJSON_ReplaceItemInObjectCaseSensitive(w.job, "status", old_status);
  reap(&w);
  run(&w);
  recon_action *c = find(&w, RECON_CREATE_POD, "tj-worker-0");
  ASSERT_NOT_NULL(c);
  ASSERT_EQ(c->attempt, 2); /* never attempt 1 again */
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 1);
  world_free(&w);
}

TEST(pod_labels_give_attempt_when_status_lost) {
  /* A fresh controller (no expectations) and a status without attempt: the
   * pods' labels tell the attempt. */
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  cJSON *p;
  cJSON_ArrayForEach(p, w.pods) {
    cJSON *labels =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"), "labels");
    cJSON_ReplaceItemInObjectCaseSensitive(labels, PODBUILD_LABEL_ATTEMPT, cJSON_CreateString("3"));
  }
  cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(w.job, "status"), "attempt");
  recon_expectations_free(&w.x);
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 3);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

TEST(evaluator_outside_the_gang) {
  world w;
  world_init(&w, 1, 1, 1);
  settle(&w);
  /* An evaluator failure alone does not restart the gang. */
  terminate(&w, "tj-evaluator-0", 1, "Error", 1);
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  ASSERT_NULL(cond(w.res.status, "Failed"));
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(replica_count(&w, "Evaluator", "failed"), 1);
  apply(&w);
  /* A gang restart gives the failed evaluator a fresh start. */
  lost_peer(&w, "tj-worker-0", 2);
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_NOT_NULL(find(&w, RECON_DELETE_POD, "tj-evaluator-0"));
  apply(&w);
  reap(&w);
  settle(&w);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 3);
  ASSERT_STR_EQ(label(pod_by_name(&w, "tj-evaluator-0"), PODBUILD_LABEL_ATTEMPT), "2");
  world_free(&w);
}

TEST(running_evaluator_survives_gang_restart) {
  world w;
  world_init(&w, 1, 1, 1);
  settle(&w);
  lost_peer(&w, "tj-worker-0", 2);
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 2);
  ASSERT_NULL(find(&w, RECON_DELETE_POD, "tj-evaluator-0"));
  world_free(&w);
}

TEST(secret_created_once_per_attempt) {
  world w;
  world_init(&w, 0, 1, 0);
  run(&w);
  apply(&w);
  run(&w);
  ASSERT_NULL(find(&w, RECON_CREATE_SECRET, NULL));
  ASSERT_NULL(find(&w, RECON_CREATE_SERVICE, NULL));
  world_free(&w);
}

/* A restarted controller knows no token Secret: it creates the attempt's
 * Secret again (answered AlreadyExists) with the very same token, so pods
 * already running and pods still to come agree. */
TEST(restart_recreates_the_same_token) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  char first[128];
  recon_action *sec = find(&w, RECON_CREATE_SECRET, NULL);
  ASSERT_NOT_NULL(sec);
  snprintf(first, sizeof(first), "%s",
           str_at(cJSON_GetObjectItemCaseSensitive(sec->object, "stringData"), "token", NULL));
  apply(&w);
  recon_expectations_free(&w.x);
  w.token_attempt = 0;
  run(&w);
  sec = find(&w, RECON_CREATE_SECRET, NULL);
  ASSERT_NOT_NULL(sec);
  ASSERT_EQ(sec->attempt, 1);
  ASSERT_STR_EQ(str_at(sec->object, "metadata", "name"), "tj-token-1");
  ASSERT_STR_EQ(str_at(cJSON_GetObjectItemCaseSensitive(sec->object, "stringData"), "token", NULL),
                first);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

TEST(token_failure_is_an_error) {
  world w;
  world_init(&w, 0, 1, 0);
  w.token_fail = 1;
  char err[256] = "";
  recon_input in = {
      .job = w.job, .pods = w.pods, .now = w.now, .token = fake_token, .token_ctx = &w};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "token");
  ASSERT_EQ(w.res.n_actions, 0);
  ASSERT_NULL(w.res.status);
  /* A job without a uid is the caller's error. */
  cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(w.job, "metadata"), "uid");
  w.token_fail = 0;
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "uid");
  /* So is a missing token callback. */
  recon_input none = {.job = w.job, .pods = w.pods, .now = w.now};
  ASSERT_EQ(recon_reconcile(&none, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "token");
  world_free(&w);
}

TEST(pod_list_object_accepted) {
  world w;
  world_init(&w, 0, 1, 0);
  settle(&w);
  cJSON *list = cJSON_CreateObject();
  cJSON_AddStringToObject(list, "kind", "PodList");
  cJSON_AddItemToObject(list, "items", w.pods);
  w.pods = list;
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  cJSON *items = cJSON_DetachItemFromObject(list, "items");
  cJSON_Delete(list);
  w.pods = items;
  world_free(&w);
}

TEST(time_round_trip) {
  char buf[40];
  int64_t t = 0;
  ASSERT_OK(kube_time_format(NOW, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "2023-11-14T22:13:20Z");
  ASSERT_OK(kube_time_parse(buf, &t));
  ASSERT_EQ(t, NOW);
  ASSERT_OK(kube_time_parse("2023-11-14T22:13:20.123456Z", &t));
  ASSERT_EQ(t, NOW);
  ASSERT_OK(kube_time_parse("2023-11-14T23:13:20+01:00", &t));
  ASSERT_EQ(t, NOW);
  ASSERT_EQ(kube_time_parse("2023-11-14 22:13:20", &t), CTRAIN_E_PARSE);
  ASSERT_EQ(kube_time_parse("2023-11-14T22:13:20Zjunk", &t), CTRAIN_E_PARSE);
  ASSERT_EQ(kube_time_parse(NULL, &t), CTRAIN_E_PARSE);
}

/* TF_CONFIG of container `c` as the kubelet gives it: the $(CTRAIN_TF_CLUSTER)
 * reference replaced by the ConfigMap's cluster, the variable defined from
 * the ConfigMap of the pod's attempt and earlier in the list. Owned. */
static char *expand_cluster(world *w, const cJSON *c, const char *tfc) {
  const cJSON *e;
  int at = 0, var_at = -1, tf_at = -1;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "env")) {
    const char *n = str_at(e, "name", NULL);
    if (!strcmp(n, PODBUILD_CLUSTER_ENV)) {
      const cJSON *ref = cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(e, "valueFrom"), "configMapKeyRef");
      char name[64];
      snprintf(name, sizeof(name), "tj-cluster-%d", w->cluster_attempt);
      ASSERT_STR_EQ(str_at(ref, "name", NULL), name);
      ASSERT_STR_EQ(str_at(ref, "key", NULL), PODBUILD_CLUSTER_KEY);
      var_at = at;
    }
    if (!strcmp(n, "TF_CONFIG"))
      tf_at = at;
    at++;
  }
  ASSERT_GE(var_at, 0);
  ASSERT_LT(var_at, tf_at);
  ASSERT_NOT_NULL(w->cluster);
  const char *ref = strstr(tfc, "$(" PODBUILD_CLUSTER_ENV ")");
  ASSERT_NOT_NULL(ref);
  size_t rl = strlen("$(" PODBUILD_CLUSTER_ENV ")");
  size_t n = strlen(tfc) - rl + strlen(w->cluster) + 1;
  char *x = malloc(n);
  ASSERT_NOT_NULL(x);
  snprintf(x, n, "%.*s%s%s", (int)(ref - tfc), tfc, w->cluster, ref + rl);
  return x;
}

TEST(created_pod_tfconfig_parses_back) {
  world w;
  world_init(&w, 1, 2, 1);
  settle(&w);
  static const struct {
    const char *name;
    tfconfig_task_type type;
    int index, rank;
  } want[] = {{"tj-chief-0", TFCONFIG_CHIEF, 0, 0},
              {"tj-worker-0", TFCONFIG_WORKER, 0, 1},
              {"tj-worker-1", TFCONFIG_WORKER, 1, 2},
              {"tj-evaluator-0", TFCONFIG_EVALUATOR, 0, -1}};
  for (size_t i = 0; i < 4; i++) {
    cJSON *p = pod_by_name(&w, want[i].name);
    ASSERT_NOT_NULL(p);
    const cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "spec"), "containers"),
        0);
    const char *tfc = NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "env")) {
      if (!strcmp(str_at(e, "name", NULL), "TF_CONFIG"))
        tfc = str_at(e, "value", NULL);
    }
    /* The kubelet expands the reference from the variable before it. */
    char *x = expand_cluster(&w, c, tfc);
    tfconfig tc;
    char err[256] = "";
    ASSERT_OK(tfconfig_parse(&tc, x, err, sizeof(err)));
    free(x);
    ASSERT_EQ(tc.type, want[i].type);
    ASSERT_EQ(tc.index, want[i].index);
    ASSERT_EQ(tc.rank, want[i].rank);
    ASSERT_EQ(tc.world, 3);
    ASSERT_STR_CONTAINS(tc.self_addr, want[i].name);
    ASSERT_STR_CONTAINS(tc.self_addr, ".tj.default.svc:2222");
    tfconfig_free(&tc);
  }
  world_free(&w);
}

TEST(action_kind_names) {
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_POD), "CreatePod");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_REQUEUE), "Requeue");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_SECRET), "CreateSecret");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_NETWORK_POLICY), "CreateNetworkPolicy");
  ASSERT_STR_EQ(recon_action_kind_name((recon_action_kind)99), "Unknown");
}

TEST(controller_restart_creates_no_duplicates) {
  world w;
  world_init(&w, 1, 3, 1);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 5);
  /* The controller dies during slow start: 3 of 5 pods exist, all Pending. */
  static const char *const unsent[] = {"tj-worker-2", "tj-evaluator-0", NULL};
  apply_except(&w, unsent);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 3);
  /* A new controller process: no expectations, the cache is full. */
  recon_expectations_free(&w.x);
  run(&w);
  ASSERT_NULL(find(&w, RECON_CREATE_POD, "tj-chief-0"));
  ASSERT_NULL(find(&w, RECON_CREATE_POD, "tj-worker-0"));
  ASSERT_NULL(find(&w, RECON_CREATE_POD, "tj-worker-1"));
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 2); /* worker-2 and the evaluator */
  apply(&w);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(cJSON_GetArraySize(w.pods), 5);
  world_free(&w);
}

TEST(delete_expectation_satisfied_by_deletion_timestamp) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  lost_peer(&w, "tj-worker-1", 1);
  run(&w);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 2);
  ASSERT_EQ(recon_expectations_pending(&w.x), 2);
  apply(&w); /* deletionTimestamp set, pods still listed */
  run(&w);
  ASSERT_EQ(recon_expectations_pending(&w.x), 0);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  world_free(&w);
}

TEST(failed_pass_rolls_back_expectations) {
  world w;
  world_init(&w, 0, 1, 1);
  settle(&w);
  terminate(&w, "tj-evaluator-0", 1, "Error", 1);
  lost_peer(&w, "tj-worker-0", 2);
  /* The restart pass deletes pods, then needs a new token and fails. */
  w.token_fail = 1;
  recon_result_free(&w.res); /* settle's last pass */
  char err[256] = "";
  recon_input in = {.job = w.job,
                    .pods = w.pods,
                    .service = w.job,
                    .token_attempt = w.token_attempt,
                    .now = w.now,
                    .token = fake_token,
                    .token_ctx = &w};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_EQ(recon_expectations_pending(&w.x), 0);
  ASSERT_EQ(w.x.attempt, 0);
  /* The retry decides the same restart, with its deletes. */
  w.token_fail = 0;
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 1);
  ASSERT_NOT_NULL(find_event(&w, "Restarting"));
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 2);
  ASSERT_EQ(recon_expectations_pending(&w.x), 2);
  world_free(&w);
}

/* A result that still holds a pass is refused and left alone: zeroing it
 * (as recon_reconcile once did) leaked its actions and status. */
TEST(non_empty_result_refused) {
  world w;
  world_init(&w, 0, 1, 0);
  run(&w);
  recon_action *actions = w.res.actions;
  cJSON *status = w.res.status;
  size_t n = w.res.n_actions;
  ASSERT_GT(n, 0);
  char err[256] = "";
  recon_input in = {
      .job = w.job, .pods = w.pods, .now = w.now, .token = fake_token, .token_ctx = &w};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "not empty");
  ASSERT(w.res.actions == actions);
  ASSERT(w.res.status == status);
  ASSERT_EQ(w.res.n_actions, n);
  /* A status alone counts as holding a pass too. */
  recon_result only_status = {.status = cJSON_CreateObject()};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &only_status, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NOT_NULL(only_status.status);
  recon_result_free(&only_status);
  ASSERT_EQ(recon_reconcile(&in, &w.x, NULL, err, sizeof(err)), CTRAIN_E_INVAL);
  /* Freed, it is accepted again. */
  recon_result_free(&w.res);
  ASSERT_OK(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)));
  ASSERT_NOT_NULL(w.res.status);
  world_free(&w);
}

/* The object UPDATE_STATUS writes, with each of its allocations failing in
 * turn: CTRAIN_E_NOMEM and nothing, or the job with the whole new status.
 * Before, a failed copy of the status gave the job without one, which the
 * controller PUT to the status subresource. */
TEST(status_object_whole_or_nothing) {
  world w;
  world_init(&w, 0, 1, 0);
  settle(&w); /* w.job has an old status; w.res.status is a new one */
  cJSON *status = cJSON_Duplicate(w.res.status, 1);
  cJSON_ReplaceItemInObjectCaseSensitive(status, "attempt", cJSON_CreateNumber(9));
  int failures = 0;
  for (long n = 0;; n++) {
    cJSON *obj = (cJSON *)1;
    test_alloc_fail_nth(n);
    ctrain_err r = recon_status_object(w.job, status, &obj);
    int fired = test_alloc_fired();
    test_alloc_off();
    if (fired) {
      failures++;
      if (r != CTRAIN_E_NOMEM || obj)
        TEST_FAIL_("allocation %ld failed: result %d, object %p; want NOMEM and none", n, (int)r,
                   (void *)obj);
      continue;
    }
    ASSERT_OK(r);
    ASSERT(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(obj, "status"), status, 1));
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON *job = cJSON_Duplicate(w.job, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(job, "status");
    ASSERT(cJSON_Compare(obj, job, 1)); /* the rest is the job's */
    cJSON_Delete(job);
    cJSON_Delete(obj);
    break;
  }
  ASSERT_GT(failures, 10);
  cJSON_Delete(status);
  world_free(&w);
}

/* ---- progress, stragglers, result ---------------------------------------- */

static void set_progress(world *w, int epoch, double acc, int slowest_rank, double ratio,
                         const char *poll_time) {
  cJSON_Delete(w->progress);
  char buf[512];
  snprintf(buf, sizeof(buf),
           "{\"epoch\":%d,\"epochs\":2,\"step\":19,\"stepsPerEpoch\":1875,\"samplesPerSec\":"
           "16500.5,\"loss\":0.4,\"accuracy\":%g,\"replicasInSync\":4,\"slowestWorker\":{\"rank\":"
           "%d,\"ratio\":%g},\"lastPollTime\":\"%s\"}",
           epoch, acc, slowest_rank, ratio, poll_time);
  w->progress = cJSON_Parse(buf);
  ASSERT_NOT_NULL(w->progress);
}

TEST(progress_written_while_running_only_when_changed) {
  world w;
  world_init(&w, 1, 3, 0);
  set_progress(&w, 1, 0.5, 2, 1.1, "2023-11-14T22:13:20Z");
  settle(&w);
  run(&w);
  apply(&w);
  ASSERT_STR_EQ(cond_status(&w, "Running"), "True");
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(w.res.status, "progress");
  ASSERT_EQ(num(p, "epoch", NULL), 1);
  ASSERT_STR_EQ(str_at(p, "slowestWorker", "pod"), "tj-worker-1"); /* rank 2, with a chief */
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "slowestWorker"),
                                               "rank"));
  /* Only lastPollTime moved: nothing to write. */
  set_progress(&w, 1, 0.5, 2, 1.1, "2023-11-14T22:13:30Z");
  run(&w);
  ASSERT_EQ(w.res.status_changed, 0);
  ASSERT_STR_EQ(
      str_at(cJSON_GetObjectItemCaseSensitive(w.res.status, "progress"), "lastPollTime", NULL),
      "2023-11-14T22:13:20Z");
  set_progress(&w, 2, 0.7, 0, 1.0, "2023-11-14T22:13:40Z");
  run(&w);
  ASSERT_EQ(w.res.status_changed, 1);
  ASSERT_EQ(w.res.actions[0].kind, RECON_UPDATE_STATUS);
  apply(&w);
  p = cJSON_GetObjectItemCaseSensitive(w.res.status, "progress");
  ASSERT_EQ(num(p, "epoch", NULL), 2);
  ASSERT_STR_EQ(str_at(p, "slowestWorker", "pod"), "tj-chief-0");
  /* A pass without a poll keeps what is there. */
  cJSON_Delete(w.progress);
  w.progress = NULL;
  run(&w);
  ASSERT_EQ(w.res.status_changed, 0);
  ASSERT_EQ(num(cJSON_GetObjectItemCaseSensitive(w.res.status, "progress"), "epoch", NULL), 2);
  world_free(&w);
}

TEST(progress_not_written_before_running) {
  world w;
  world_init(&w, 0, 2, 0);
  set_progress(&w, 1, 0.5, 0, 1.0, "2023-11-14T22:13:20Z");
  run(&w);
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(w.res.status, "progress"));
  world_free(&w);
}

static void set_node(world *w, const char *pod, const char *node) {
  cJSON *p = pod_by_name(w, pod);
  ASSERT_NOT_NULL(p);
  cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(p, "spec"), "nodeName", node);
}

TEST(straggler_condition_and_events) {
  world w;
  world_init(&w, 1, 3, 0);
  settle(&w);
  set_node(&w, "tj-worker-2", "node-b");
  set_progress(&w, 1, 0.5, 3, 2.1, "2023-11-14T22:13:20Z");
  /* Known, none straggling: nothing. */
  w.straggler = (recon_straggler){.known = 1, .rank = -1};
  run(&w);
  apply(&w);
  ASSERT_NULL(cond(w.res.status, "Straggler"));
  ASSERT_NULL(find_event(&w, "Straggler"));
  w.straggler = (recon_straggler){.known = 1, .rank = 3, .ratio = 2.1};
  run(&w);
  recon_action *ev = find_event(&w, "Straggler");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(ev->event_type, "Warning");
  ASSERT_STR_EQ(ev->message,
                "worker tj-worker-2 on node node-b computes 2.1x the median step time");
  ASSERT_STR_EQ(cond_status(&w, "Straggler"), "True");
  ASSERT_STR_EQ(recon_state(w.res.status), "Running"); /* the phase stays last */
  apply(&w);
  run(&w); /* the same verdict: no second event */
  ASSERT_NULL(find_event(&w, "Straggler"));
  ASSERT_EQ(w.res.status_changed, 0);
  /* Not known (no poll this time): the condition stays. */
  w.straggler = (recon_straggler){0};
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Straggler"), "True");
  w.straggler = (recon_straggler){.known = 1, .rank = -1};
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Straggler"), "False");
  ev = find_event(&w, "StragglerRecovered");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_EQ(ev->event_type, "Normal");
  ASSERT_STR_EQ(recon_state(w.res.status), "Running");
  world_free(&w);
}

static void set_message(world *w, const char *pod, const char *msg) {
  cJSON *p = pod_by_name(w, pod);
  cJSON *cs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "status"),
                                               "containerStatuses");
  cJSON *term = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cs, 0), "state"), "terminated");
  ASSERT_NOT_NULL(term);
  cJSON_AddStringToObject(term, "message", msg);
}

TEST(result_from_the_chief_termination_message) {
  world w;
  world_init(&w, 1, 2, 0);
  set_progress(&w, 2, 0.85, 0, 1.0, "2023-11-14T22:13:20Z");
  settle(&w);
  run(&w);
  apply(&w);
  w.now += 100;
  terminate(&w, "tj-chief-0", 0, "Completed", 99);
  set_message(&w, "tj-chief-0",
              "{\"state\":\"Succeeded\",\"loss\":0.35,\"accuracy\":0.877,\"val_loss\":0.41,"
              "\"val_accuracy\":0.86,\"samples_per_sec\":16000.25,\"epochs\":2,\"steps\":3750,"
              "\"model\":\"/ckpt/model\",\"replicas_in_sync\":3}");
  run(&w);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(w.res.status, "result");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(str_at(r, "state", NULL), "Succeeded");
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(r, "accuracy")->valuedouble, 0.877, 1e-12);
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(r, "valAccuracy")->valuedouble, 0.86, 1e-12);
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(r, "valLoss")->valuedouble, 0.41, 1e-12);
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(r, "samplesPerSec")->valuedouble, 16000.25, 1e-9);
  ASSERT_EQ(num(r, "epochs", NULL), 2);
  ASSERT_EQ(num(r, "steps", NULL), 3750);
  ASSERT_EQ(num(r, "replicasInSync", NULL), 3);
  ASSERT_STR_EQ(str_at(r, "model", NULL), "/ckpt/model");
  /* The Accuracy and Val-Accuracy columns (progress.accuracy, valAccuracy)
   * show the final numbers. */
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(w.res.status, "progress");
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(pr, "accuracy")->valuedouble, 0.877, 1e-12);
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(pr, "valAccuracy")->valuedouble, 0.86, 1e-12);
  ASSERT_EQ(num(pr, "epoch", NULL), 2); /* the last poll said 2 of 2; the result's epochs */
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(pr, "samplesPerSec")->valuedouble, 16000.25, 1e-9);
  recon_action *ev = find_event(&w, "Succeeded");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_CONTAINS(ev->message, "accuracy 0.877 (val 0.86), model /ckpt/model");
  apply(&w);
  /* The pods go: the result stays. */
  cJSON_Delete(w.pods);
  w.pods = cJSON_CreateArray();
  run(&w);
  ASSERT_STR_EQ(str_at(cJSON_GetObjectItemCaseSensitive(w.res.status, "result"), "model", NULL),
                "/ckpt/model");
  world_free(&w);
}

TEST(result_of_a_failure_and_foreign_messages) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "restartPolicy", cJSON_CreateString("Never"));
  settle(&w);
  terminate(&w, "tj-worker-0", 65, "Error", 10);
  set_message(&w, "tj-worker-0",
              "{\"state\":\"Failed\",\"error\":\"bad data: /data/x.gz\",\"loss\":null,"
              "\"accuracy\":null,\"model\":null}");
  run(&w);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(w.res.status, "result");
  ASSERT_STR_EQ(str_at(r, "state", NULL), "Failed");
  ASSERT_STR_EQ(str_at(r, "error", NULL), "bad data: /data/x.gz");
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(r, "accuracy"));
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(r, "model"));
  world_free(&w);
  /* Not JSON (a plain-text message): no result. */
  world_init(&w, 0, 1, 0);
  settle(&w);
  terminate(&w, "tj-worker-0", 0, "Completed", 10);
  set_message(&w, "tj-worker-0", "done");
  run(&w);
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(w.res.status, "result"));
  ASSERT_STR_EQ(cond_status(&w, "Succeeded"), "True");
  world_free(&w);
  /* Never polled: the columns still get the final numbers. */
  world_init(&w, 0, 1, 0);
  settle(&w);
  terminate(&w, "tj-worker-0", 0, "Completed", 10);
  set_message(&w, "tj-worker-0", "{\"state\":\"Succeeded\",\"accuracy\":0.9,\"epochs\":4}");
  run(&w);
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(w.res.status, "progress");
  ASSERT_EQ(num(pr, "epoch", NULL), 4);
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(pr, "accuracy")->valuedouble, 0.9, 1e-12);
  world_free(&w);
}

/* ---- disruptions, one attempt at a time, finalizers, progress deadline ---- */

/* Someone deletes `name` (deletionTimestamp `at`, grace 0 when forced); the
 * pod stays listed: our finalizer holds it. */
static void delete_by_someone(world *w, const char *name, int64_t at, int forced) {
  cJSON *md = cJSON_GetObjectItemCaseSensitive(pod_by_name(w, name), "metadata");
  char ts[40];
  ASSERT_OK(kube_time_format(at, ts, sizeof(ts)));
  cJSON_AddStringToObject(md, "deletionTimestamp", ts);
  cJSON_AddNumberToObject(md, "deletionGracePeriodSeconds", forced ? 0 : 30);
}

/* The node controller marked `name` not ready: Ready False, its container
 * still running and ready as the kubelet last said. */
static void node_lost(world *w, const char *name, const char *node) {
  cJSON *p = pod_by_name(w, name);
  cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(p, "spec"), "nodeName",
                        cJSON_CreateString(node));
  cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
  cJSON_AddItemToObject(st, "conditions",
                        cJSON_Parse("[{\"type\":\"Ready\",\"status\":\"False\"}]"));
  cJSON_AddItemToObject(st, "containerStatuses",
                        cJSON_Parse("[{\"name\":\"train\",\"ready\":true,\"state\":{\"running\":"
                                    "{\"startedAt\":\"2023-11-14T22:13:20Z\"}}}]"));
}

static const recon_action *finalizer_removal(world *w, const char *name) {
  for (size_t i = 0; i < w->res.n_actions; i++)
    if (w->res.actions[i].kind == RECON_REMOVE_FINALIZER && !strcmp(w->res.actions[i].name, name))
      return &w->res.actions[i];
  return NULL;
}

/* kubectl delete --force --grace-period=0 of worker-1: the finalizer keeps
 * it listed; the attempt ends as a disruption (backoffLimit 0 still
 * restarts), the finalizer goes after the status, and no pod of attempt 2
 * starts while one of attempt 1 remains. */
TEST(force_deleted_pod_is_a_disruption_never_recreated) {
  world w;
  world_init(&w, 1, 2, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(0));
  settle(&w);
  cJSON *f = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-1"), "metadata"), "finalizers");
  ASSERT_STR_EQ(cJSON_GetArrayItem(f, 0)->valuestring, PODBUILD_FINALIZER);
  delete_by_someone(&w, "tj-worker-1", w.now, 1);
  run(&w);
  ASSERT_EQ(w.res.actions[0].kind, RECON_UPDATE_STATUS);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  ASSERT_EQ(num(w.res.status, "disruptions", NULL), 1);
  ASSERT_STR_EQ(recon_state(w.res.status), "Restarting");
  const recon_action *fr = finalizer_removal(&w, "tj-worker-1");
  ASSERT_NOT_NULL(fr);
  ASSERT_EQ(fr->index, 0);
  ASSERT_STR_EQ(fr->uid, "uid-tj-worker-1-a1");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 2); /* chief-0 and worker-0 */
  apply(&w);
  /* worker-1's object went; chief-0 and worker-0 terminate: still nothing. */
  cJSON_Delete(cJSON_DetachItemViaPointer(w.pods, pod_by_name(&w, "tj-worker-1")));
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_REMOVE_FINALIZER), 2); /* the two we deleted */
  apply(&w);
  reap(&w);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 3);
  ASSERT_EQ(find(&w, RECON_CREATE_POD, "tj-worker-1")->attempt, 2);
  world_free(&w);
}

/* Pods of an ended attempt that stay Terminating (their node is gone) are
 * force-deleted RECON_FORCE_DELETE_AFTER_S past their deletionTimestamp. */
TEST(stuck_terminating_pods_force_deleted_after_a_bound) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  terminate(&w, "tj-worker-1", 137, "Error", 1);
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  apply(&w); /* worker-0 deleting, deletionTimestamp now + 30 */
  int64_t at = w.now + 30;
  cJSON_Delete(cJSON_DetachItemViaPointer(w.pods, pod_by_name(&w, "tj-worker-1")));
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(w.res.requeue_after_s, at + RECON_FORCE_DELETE_AFTER_S - w.now);
  apply(&w);
  w.now = at + RECON_FORCE_DELETE_AFTER_S;
  run(&w);
  const recon_action *d = find(&w, RECON_DELETE_POD, "tj-worker-0");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ(d->force, 1);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

/* A node that stops reporting: its pods are marked not ready; the attempt
 * ends as a disruption naming the node, and they are deleted at once with
 * grace 0 (no kubelet will confirm). */
TEST(node_loss_is_a_disruption_naming_the_node) {
  world w;
  world_init(&w, 0, 2, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(0));
  settle(&w);
  node_lost(&w, "tj-worker-1", "node-2");
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_EQ(num(w.res.status, "disruptions", NULL), 1);
  recon_action *ev = find_event(&w, "Restarting");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_CONTAINS(ev->message, "node node-2");
  ASSERT_STR_CONTAINS(ev->message, "not counted against backoffLimit");
  const recon_action *d = find(&w, RECON_DELETE_POD, "tj-worker-1");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ(d->force, 1);
  d = find(&w, RECON_DELETE_POD, "tj-worker-0");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ(d->force, 0);
  world_free(&w);
}

/* Ready False from the kubelet itself (a readiness probe or gate: it gives a
 * reason) is not a lost node. */
TEST(kubelet_not_ready_is_not_node_loss) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  node_lost(&w, "tj-worker-1", "node-1");
  cJSON *c0 = cJSON_GetArrayItem(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-1"), "status"), "conditions"),
      0);
  cJSON_AddStringToObject(c0, "reason", "ReadinessGatesNotReady");
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  world_free(&w);
}

/* The survivors exit 75 (lost a peer) before the node controller marks the
 * lost one: the end waits up to RECON_PEER_LOSS_WINDOW_S for the cause,
 * which makes it a disruption; without one it is a failure after the wait. */
TEST(lost_peer_waits_for_its_cause) {
  world w;
  world_init(&w, 0, 3, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(0));
  settle(&w);
  terminate(&w, "tj-worker-0", 75, "Error", 10);
  terminate(&w, "tj-worker-2", 75, "Error", 11);
  w.now = NOW + 20;
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  ASSERT_EQ(count(&w, RECON_DELETE_POD), 0);
  ASSERT_EQ(w.res.requeue_after_s, 10 + RECON_PEER_LOSS_WINDOW_S - 20);
  node_lost(&w, "tj-worker-1", "node-2");
  w.now = NOW + 50;
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_EQ(num(w.res.status, "disruptions", NULL), 1);
  ASSERT_STR_CONTAINS(find_event(&w, "Restarting")->message, "node-2");
  world_free(&w);

  world_init(&w, 0, 2, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(0));
  settle(&w);
  terminate(&w, "tj-worker-0", 75, "Error", 10); /* worker-1 hangs, Running and Ready */
  w.now = NOW + 10 + RECON_PEER_LOSS_WINDOW_S;
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Failed");
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Failed"), "reason", NULL), "BackoffLimitExceeded");
  world_free(&w);
}

/* Evictions count as disruptions up to maxDisruptions, then fail the job. */
TEST(disruptions_bounded_by_max_disruptions) {
  world w;
  world_init(&w, 0, 1, 0);
  set_spec(&w, "backoffLimit", cJSON_CreateNumber(0));
  set_spec(&w, "maxDisruptions", cJSON_CreateNumber(2));
  for (int i = 1; i <= 3; i++) {
    settle(&w);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(pod_by_name(&w, "tj-worker-0"), "status");
    cJSON_AddItemToObject(st, "conditions",
                          cJSON_Parse("[{\"type\":\"DisruptionTarget\",\"status\":\"True\","
                                      "\"reason\":\"EvictionByEvictionAPI\"}]"));
    delete_by_someone(&w, "tj-worker-0", w.now + 30, 0);
    run(&w);
    if (i <= 2) {
      ASSERT_EQ(num(w.res.status, "disruptions", NULL), i);
      ASSERT_STR_CONTAINS(find_event(&w, "Restarting")->message, "EvictionByEvictionAPI");
      apply(&w);
      reap(&w);
    }
  }
  ASSERT_STR_EQ(recon_state(w.res.status), "Failed");
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Failed"), "reason", NULL), "DisruptionLimitExceeded");
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 0);
  world_free(&w);
}

/* spec.progressDeadlineSeconds: the step stops moving -> NoProgress restart
 * after the deadline, counted against backoffLimit. */
TEST(no_progress_restarts_the_gang) {
  world w;
  world_init(&w, 1, 1, 0);
  set_spec(&w, "progressDeadlineSeconds", cJSON_CreateNumber(60));
  settle(&w);
  char ts[40];
  ASSERT_OK(kube_time_format(w.now + 10, ts, sizeof(ts)));
  set_progress(&w, 1, 0.5, 0, 1.0, ts);
  w.now += 10;
  run(&w);
  apply(&w);
  ASSERT_STR_EQ(
      str_at(cJSON_GetObjectItemCaseSensitive(w.res.status, "progress"), "lastProgressTime", NULL),
      ts);
  ASSERT_EQ(w.res.requeue_after_s, 60);
  /* Polls keep coming with the same step. */
  char ts2[40];
  ASSERT_OK(kube_time_format(w.now + 59, ts2, sizeof(ts2)));
  set_progress(&w, 1, 0.5, 0, 1.0, ts2);
  w.now += 59;
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  w.now += 1;
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  ASSERT_EQ(num(w.res.status, "restarts", NULL), 1);
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Restarting"), "reason", NULL), "NoProgress");
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Restarting"), "message", NULL), "step 19");
  world_free(&w);
}

/* A deadline shorter than two polls could never be met: InvalidSpec. */
TEST(progress_deadline_shorter_than_two_polls_invalid) {
  world w;
  world_init(&w, 0, 1, 0);
  set_spec(&w, "progressDeadlineSeconds", cJSON_CreateNumber(30));
  w.progress_interval_s = 20;
  run(&w);
  ASSERT_STR_EQ(recon_state(w.res.status), "Failed");
  ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Failed"), "message", NULL),
                      "spec.progressDeadlineSeconds");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

/* Integers as written: a deadline near 2^63 (startTime + it would overflow)
 * or a fractional backoffLimit is an invalid spec naming the field. */
TEST(out_of_range_spec_numbers_invalid) {
  static const char *const cases[][2] = {
      {"activeDeadlineSeconds", "9.2e18"}, {"backoffLimit", "1.5"}, {"maxDisruptions", "-1"}};
  for (size_t i = 0; i < 3; i++) {
    world w;
    world_init(&w, 0, 1, 0);
    set_spec(&w, cases[i][0], cJSON_Parse(cases[i][1]));
    run(&w);
    ASSERT_STR_EQ(recon_state(w.res.status), "Failed");
    ASSERT_STR_CONTAINS(str_at(cond(w.res.status, "Failed"), "message", NULL), cases[i][0]);
    ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
    world_free(&w);
  }
}

/* A job being deleted: nothing is created or restarted; the pods the
 * garbage collector deletes lose the finalizer. */
TEST(deleting_job_only_releases_finalizers) {
  world w;
  world_init(&w, 0, 2, 0);
  settle(&w);
  cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(w.job, "metadata"), "deletionTimestamp",
                          "2023-11-14T22:13:20Z");
  delete_by_someone(&w, "tj-worker-0", w.now + 30, 0);
  delete_by_someone(&w, "tj-worker-1", w.now + 30, 0);
  run(&w);
  ASSERT_EQ(count(&w, RECON_REMOVE_FINALIZER), 2);
  ASSERT_EQ(count(&w, RECON_CREATE_POD) + count(&w, RECON_DELETE_POD), 0);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 1);
  world_free(&w);
}

/* The cluster of TF_CONFIG is stored once per attempt, in an immutable
 * ConfigMap created before the attempt's pods; a new attempt's replaces
 * the previous one's, so a job keeps one. */
TEST(cluster_configmap_per_attempt) {
  world w;
  world_init(&w, 1, 3, 0);
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_CONFIGMAP), 1);
  ASSERT_EQ(count(&w, RECON_DELETE_CONFIGMAP), 0);
  size_t cm_at = 0, first_pod = 0;
  for (size_t i = 0; i < w.res.n_actions; i++) {
    if (w.res.actions[i].kind == RECON_CREATE_CONFIGMAP)
      cm_at = i;
    if (w.res.actions[i].kind == RECON_CREATE_POD && !first_pod)
      first_pod = i;
  }
  ASSERT_LT(cm_at, first_pod);
  const recon_action *cm = &w.res.actions[cm_at];
  ASSERT_EQ(cm->attempt, 1);
  ASSERT_STR_EQ(str_at(cm->object, "metadata", "name"), "tj-cluster-1");
  ASSERT(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cm->object, "immutable")));
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(cm->object, "metadata");
  ASSERT_STR_EQ(
      str_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"), 0), "uid",
             NULL),
      "job-uid");
  ASSERT_STR_EQ(str_at(md, "labels", PODBUILD_LABEL_ATTEMPT), "1");
  ASSERT_STR_EQ(str_at(cm->object, "data", PODBUILD_CLUSTER_KEY),
                "{\"chief\":[\"tj-chief-0.tj.default.svc:2222\"],\"worker\":[\"tj-worker-0.tj."
                "default.svc:2222\",\"tj-worker-1.tj.default.svc:2222\",\"tj-worker-2.tj.default."
                "svc:2222\"]}");
  apply(&w);
  settle(&w);
  /* Not again in the same attempt. */
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_CONFIGMAP), 0);
  w.now += 60;
  lost_peer(&w, "tj-worker-2", 59);
  run(&w);
  ASSERT_EQ(num(w.res.status, "attempt", NULL), 2);
  recon_action *c2 = find(&w, RECON_CREATE_CONFIGMAP, NULL);
  ASSERT_NOT_NULL(c2);
  ASSERT_EQ(c2->attempt, 2);
  ASSERT_STR_EQ(str_at(c2->object, "metadata", "name"), "tj-cluster-2");
  recon_action *d = find(&w, RECON_DELETE_CONFIGMAP, "tj-cluster-1");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ(d->attempt, 1);
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_CONFIGMAP), "CreateConfigMap");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_DELETE_CONFIGMAP), "DeleteConfigMap");
  world_free(&w);
}

/* What one job stores, as the controller sends it, at the CRD's maximum of
 * 4096 workers (plus a chief): linear in the workers. Before, every pod
 * carried the whole cluster in TF_CONFIG (n pods x n addresses). */
TEST(stored_bytes_at_4096_workers) {
  world w;
  world_init(&w, 1, 4096, 0);
  w.burst = 5000;
  run(&w);
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 4097);
  size_t pods = 0, cm = 0, n = 0, max_pod = 0;
  for (size_t i = 0; i < w.res.n_actions; i++) {
    const recon_action *a = &w.res.actions[i];
    if (a->kind != RECON_CREATE_POD && a->kind != RECON_CREATE_CONFIGMAP)
      continue;
    char *t = cJSON_PrintUnformatted(a->object);
    ASSERT_NOT_NULL(t);
    if (a->kind == RECON_CREATE_POD) {
      pods += strlen(t);
      max_pod = strlen(t) > max_pod ? strlen(t) : max_pod;
      n++;
    } else {
      cm += strlen(t);
    }
    free(t);
  }
  /* The same pods before: TF_CONFIG held the cluster itself, and there was
   * no variable for it nor a ConfigMap. */
  size_t cluster = 0;
  ASSERT_OK(podbuild_cluster_size(w.job, &cluster));
  const size_t var_entry =
      strlen(",{\"name\":\"" PODBUILD_CLUSTER_ENV "\",\"valueFrom\":{\"configMapKeyRef\":{"
             "\"name\":\"tj-cluster-1\",\"key\":\"" PODBUILD_CLUSTER_KEY "\"}}}");
  const size_t before = pods + n * (cluster - strlen("$(" PODBUILD_CLUSTER_ENV ")") - var_entry);
  const size_t after = pods + cm;
  printf("stored per job at 4096 workers + chief: before %zu bytes (%.1f MB), after %zu bytes "
         "(%.2f MB: %zu pods of <= %zu bytes, the cluster ConfigMap %zu bytes)\n",
         before, before / 1e6, after, after / 1e6, n, max_pod, cm);
  ASSERT_GT(before, (size_t)600 * 1000 * 1000);
  ASSERT_LT(after, (size_t)16 * 1024 * 1024);
  ASSERT_LT(max_pod, (size_t)4096);
  ASSERT_GT(cm, cluster);
  ASSERT_LT(cm, cluster + cluster / 10); /* its quotes escaped */
  world_free(&w);
}

/* A job whose objects would exceed the budgets is refused before anything
 * is created, the message naming the budget. */
TEST(budget_refuses_oversized_jobs) {
  world w;
  world_init(&w, 1, 4096, 1);
  char msg[512];
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  /* A 20 KiB template: 4096 x 20 KiB is over 64 MiB. */
  cJSON *c = cJSON_GetArrayItem(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(
                  cJSON_GetObjectItemCaseSensitive(
                      cJSON_GetObjectItemCaseSensitive(spec_of(&w), "replicaSpecs"), "Worker"),
                  "template"),
              "spec"),
          "containers"),
      0);
  char *big = malloc(20 * 1024 + 1);
  ASSERT_NOT_NULL(big);
  memset(big, 'x', 20 * 1024);
  big[20 * 1024] = 0;
  cJSON *args = cJSON_AddArrayToObject(c, "args");
  cJSON_AddItemToArray(args, cJSON_CreateString(big));
  free(big);
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "per-job budget of 67108864 bytes (64 MiB)");
  ASSERT_STR_CONTAINS(msg, "4098 pods");
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  ASSERT_STR_EQ(str_at(cond(w.res.status, "Failed"), "reason", NULL), "InvalidSpec");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&w, RECON_CREATE_CONFIGMAP), 0);
  world_free(&w);
  /* The cluster ConfigMap's own budget: only a name longer than the CRD
   * allows gets there (validation refuses the pod names first otherwise),
   * so the builder is checked directly. */
  world_init(&w, 0, 4096, 0);
  cJSON *md = cJSON_GetObjectItemCaseSensitive(w.job, "metadata");
  char ns[300];
  memset(ns, 'n', 253);
  ns[253] = 0;
  cJSON_ReplaceItemInObjectCaseSensitive(md, "namespace", cJSON_CreateString(ns));
  size_t size = 0;
  ASSERT_OK(podbuild_cluster_size(w.job, &size));
  ASSERT_GT(size, (size_t)PODBUILD_CLUSTER_BYTES_MAX);
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "over the budget of 983040 bytes");
  cJSON *cm = NULL;
  char err[256];
  ASSERT_NE(podbuild_cluster_configmap(w.job, 1, &cm, err, sizeof(err)), CTRAIN_OK);
  ASSERT_NULL(cm);
  world_free(&w);
}

/* A pod create the apiserver refused for good (the executor's report)
 * fails the job with the apiserver's message; the pods it accepted go. */
TEST(refused_create_fails_the_job) {
  world w;
  world_init(&w, 0, 2, 0);
  run(&w);
  static const char *const unsent[] = {"tj-worker-0", "tj-worker-1", NULL};
  apply_except(&w, unsent);
  w.create_error = "the apiserver refuses pod tj-worker-0 (HTTP 422 Invalid): Pod "
                   "\"tj-worker-0\" is invalid: spec.containers[0].ports[0].containerPort: "
                   "Invalid value: -5: must be between 1 and 65535, inclusive";
  w.now += 5;
  run(&w);
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  const cJSON *f = cond(w.res.status, "Failed");
  ASSERT_STR_EQ(str_at(f, "reason", NULL), "FailedCreatePod");
  ASSERT_STR_CONTAINS(str_at(f, "message", NULL), "spec.containers[0].ports[0].containerPort");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  recon_action *ev = find_event(&w, "Failed");
  ASSERT_NOT_NULL(ev);
  ASSERT_STR_CONTAINS(ev->message, "containerPort");
  apply(&w);
  w.create_error = NULL;
  run(&w); /* terminal: stays Failed, creates nothing */
  ASSERT_STR_EQ(cond_status(&w, "Failed"), "True");
  ASSERT_EQ(count(&w, RECON_CREATE_POD), 0);
  world_free(&w);
}

TEST_MAIN(
    T(force_deleted_pod_is_a_disruption_never_recreated),
    T(stuck_terminating_pods_force_deleted_after_a_bound),
    T(node_loss_is_a_disruption_naming_the_node), T(lost_peer_waits_for_its_cause),
    T(disruptions_bounded_by_max_disruptions), T(no_progress_restarts_the_gang),
    T(deleting_job_only_releases_finalizers), T(progress_deadline_shorter_than_two_polls_invalid),
    T(first_reconcile_creates_service_secret_all_pods), T(all_missing_pods_in_one_pass),
    T(pods_appearing_need_no_status_write), T(burst_caps_creates),
    T(expectations_prevent_duplicates_when_cache_lags), T(expectations_lag_then_observed),
    T(expectations_expire), T(creation_failed_is_retried), T(steady_state_no_actions),
    T(conditions_transition_times), T(worker_exit_75_gang_restart),
    T(exit_78_fails_without_restart), T(restart_table), T(exitcode_policy_exit_1_fails),
    T(backoff_limit_exhausted), T(backoff_limit_zero_never_restarts), T(cause_of_the_failure_named),
    T(evicted_pod_is_retryable), T(pod_deleted_by_someone_else_ends_the_attempt),
    T(missing_image_named_in_status_and_event_once), T(unschedulable_pod_named),
    T(sidecar_keeps_pod_running_but_worker_failed), T(chief_success_and_clean_pod_policy),
    T(worker0_success_without_chief), T(all_workers_success_policy),
    T(success_wins_over_later_failures), T(deadline_requeue_then_fail),
    T(ttl_requeue_then_delete_job), T(ttl_zero_deletes_failed_job_next_pass), T(suspend_and_resume),
    T(suspended_from_start_creates_nothing), T(invalid_spec_fails_with_no_other_action),
    T(validate_direct), T(deleted_pod_is_recreated_same_attempt), T(stray_pods_deleted),
    T(foreign_pods_ignored), T(lagging_job_cache_keeps_new_attempt),
    T(pod_labels_give_attempt_when_status_lost), T(evaluator_outside_the_gang),
    T(running_evaluator_survives_gang_restart), T(secret_created_once_per_attempt),
    T(restart_recreates_the_same_token), T(token_failure_is_an_error), T(validate_backup_uri),
    T(pod_list_object_accepted), T(time_round_trip), T(created_pod_tfconfig_parses_back),
    T(action_kind_names), T(controller_restart_creates_no_duplicates),
    T(delete_expectation_satisfied_by_deletion_timestamp), T(failed_pass_rolls_back_expectations),
    T(state_is_last_true_condition), T(non_empty_result_refused), T(status_object_whole_or_nothing),
    T(progress_written_while_running_only_when_changed), T(progress_not_written_before_running),
    T(straggler_condition_and_events), T(result_from_the_chief_termination_message),
    T(result_of_a_failure_and_foreign_messages), T(cluster_configmap_per_attempt),
    T(stored_bytes_at_4096_workers), T(budget_refuses_oversized_jobs),
    T(refused_create_fails_the_job), T(kubelet_not_ready_is_not_node_loss),
    T(out_of_range_spec_numbers_invalid), T(validate_backup_uri_table))
