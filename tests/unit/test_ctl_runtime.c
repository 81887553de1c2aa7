/* test_ctl_runtime.c - TrainingRuntime and ClusterTrainingRuntime
 * (controller/runtime.h): the merge of a job over a runtime (containers,
 * env, volumes and mounts by name, the job's values winning, other lists
 * replaced), the snapshot a pass records and the view that reads the job
 * over it (TrainingJob's view in controller/jobkind.h), and the
 * reconciler's gate (controller/reconcile.h): a job is blocked while its
 * runtime cannot be had, records it once, and is read merged over the
 * record whatever the runtime became since. */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/jobkind.h"
#include "controller/reconcile.h"
#include "controller/runtime.h"
#include "ctrain/json.h"

/* JSON with ' for ", parsed (owned by the caller). */
static cJSON *J(const char *s) {
  char *t = strdup(s);
  for (char *p = t; *p; p++)
    if (*p == '\'')
      *p = '"';
  cJSON *o = cJSON_Parse(t);
  free(t);
  if (!o)
    abort();
  return o;
}

/* Whether `got` equals the JSON `want` (with '). */
static int same(const cJSON *got, const char *want) {
  cJSON *w = J(want);
  int eq = cJSON_Compare(got, w, 1);
  if (!eq) {
    char *g = cJSON_PrintUnformatted(got);
    fprintf(stderr, "got  %s\nwant %s\n", g, want);
    free(g);
  }
  cJSON_Delete(w);
  return eq;
}

TEST(objects_merge_and_the_jobs_scalars_win) {
  cJSON *base = J("{'a':1,'b':{'c':2,'d':3},'l':[1,2]}");
  cJSON *over = J("{'a':5,'b':{'d':4,'e':6},'l':[9]}");
  cJSON *m = runtime_merge(base, over, NULL);
  ASSERT(same(m, "{'a':5,'b':{'c':2,'d':4,'e':6},'l':[9]}"));
  cJSON_Delete(m);
  m = runtime_merge(base, NULL, NULL);
  ASSERT(cJSON_Compare(m, base, 1));
  cJSON_Delete(m);
  m = runtime_merge(NULL, over, NULL);
  ASSERT(cJSON_Compare(m, over, 1));
  cJSON_Delete(m);
  cJSON_Delete(base);
  cJSON_Delete(over);
}

/* Containers merge by name as objects; env, volumes, mounts by name, the
 * job's item whole; tolerations and args are the job's. */
TEST(named_lists_merge_by_name) {
  cJSON *rt = J("{'containers':[{'name':'worker','image':'ctrain:1','args':['--epochs=3'],"
                "'env':[{'name':'A','value':'rt'},{'name':'B','valueFrom':{'x':1}}],"
                "'volumeMounts':[{'name':'data','mountPath':'/data'}]},"
                "{'name':'sidecar','image':'s:1'}],"
                "'volumes':[{'name':'data','emptyDir':{}}],"
                "'tolerations':[{'key':'gpu'}],'nodeSelector':{'pool':'cpu'}}");
  cJSON *job =
      J("{'containers':[{'name':'worker','args':['--epochs=5'],"
        "'env':[{'name':'B','value':'job'},{'name':'C','value':'job'}]},"
        "{'name':'extra','image':'e:1'}],"
        "'volumes':[{'name':'data','hostPath':{'path':'/x'}},{'name':'more','emptyDir':{}}],"
        "'tolerations':[{'key':'spot'}],'nodeSelector':{'zone':'a'}}");
  cJSON *m = runtime_merge(rt, job, "spec");
  ASSERT(same(m, "{'containers':[{'name':'worker','image':'ctrain:1','args':['--epochs=5'],"
                 "'env':[{'name':'A','value':'rt'},{'name':'B','value':'job'},"
                 "{'name':'C','value':'job'}],"
                 "'volumeMounts':[{'name':'data','mountPath':'/data'}]},"
                 "{'name':'sidecar','image':'s:1'},{'name':'extra','image':'e:1'}],"
                 "'volumes':[{'name':'data','hostPath':{'path':'/x'}},"
                 "{'name':'more','emptyDir':{}}],"
                 "'tolerations':[{'key':'spot'}],'nodeSelector':{'pool':'cpu','zone':'a'}}"));
  cJSON_Delete(m);
  cJSON_Delete(rt);
  cJSON_Delete(job);
}

#define RUNTIME                                                                                    \
  "{'metadata':{'name':'team','namespace':'ns','uid':'r1','resourceVersion':'7','generation':2},"  \
  "'spec':{'replicaSpecs':{'Worker':{'template':{'spec':{'containers':[{'name':'worker',"          \
  "'image':'ctrain:1','env':[{'name':'MODE','value':'rt'}]}]}}},"                                  \
  "'Chief':{'template':{'spec':{'containers':[{'name':'worker','image':'ctrain:1'}]}}}},"          \
  "'backoffLimit':7,'progressDeadlineSeconds':600,'queueName':'team-q',"                           \
  "'checkpoint':{'mountPath':'/ckpt','volume':{'persistentVolumeClaim':{'claimName':'c'}}}}}"

#define JOB(status)                                                                                \
  "{'apiVersion':'ctrain.dev/v1alpha1','kind':'TrainingJob',"                                      \
  "'metadata':{'name':'tj','namespace':'ns','uid':'u1'},"                                          \
  "'spec':{'runtimeRef':{'kind':'TrainingRuntime','name':'team'},"                                 \
  "'replicaSpecs':{'Worker':{'replicas':2,'template':{'spec':{'containers':[{'name':'worker',"     \
  "'env':[{'name':'MODE','value':'job'}]}]}}}},'backoffLimit':1}" status "}"

TEST(snapshot_and_view) {
  cJSON *rt = J(RUNTIME), *job = J(JOB("")), *snap = NULL;
  runtime_ref ref;
  char msg[256], what[128];
  ASSERT(runtime_ref_of(job, &ref));
  ASSERT_STR_EQ(ref.kind, RUNTIME_KIND);
  ASSERT(!ref.cluster);
  runtime_describe(&ref, "ns", what, sizeof(what));
  ASSERT_STR_EQ(what, "TrainingRuntime ns/team");
  ASSERT_NULL(runtime_snapshot_of(job));
  ASSERT_OK(runtime_snapshot(rt, &ref, &snap, msg, sizeof(msg)));
  ASSERT_STR_EQ(ctrain_json_str(snap, "kind"), "TrainingRuntime");
  ASSERT_STR_EQ(ctrain_json_str(snap, "name"), "team");
  ASSERT_STR_EQ(ctrain_json_str(snap, "uid"), "r1");
  ASSERT_STR_EQ(ctrain_json_str(snap, "resourceVersion"), "7");
  ASSERT_EQ(ctrain_json_int(snap, "generation", 0), 2);

  /* The view of a job without a snapshot is the job itself. */
  const ctl_kind *tj = &ctl_kinds[CTL_KIND_TRAININGJOB];
  ctl_view v;
  ASSERT_OK(tj->view(job, &v));
  ASSERT(v.job == job);
  tj->view_free(&v);

  /* With one: the job over it. */
  cJSON *st = cJSON_AddObjectToObject(job, "status");
  ASSERT(ctrain_json_put(st, "runtime", snap));
  ASSERT_OK(tj->view(job, &v));
  ASSERT(v.job != job);
  ASSERT_NULL(v.invalid);
  const cJSON *spec = ctrain_json_get(v.job, "spec");
  ASSERT_EQ(ctrain_json_int(spec, "backoffLimit", 0), 1);              /* the job's */
  ASSERT_EQ(ctrain_json_int(spec, "progressDeadlineSeconds", 0), 600); /* the runtime's */
  ASSERT(same(ctrain_json_get(spec, "checkpoint"),
              "{'mountPath':'/ckpt','volume':{'persistentVolumeClaim':{'claimName':'c'}}}"));
  ASSERT(same(ctrain_json_get(spec, "replicaSpecs"),
              "{'Worker':{'template':{'spec':{'containers':[{'name':'worker','image':'ctrain:1',"
              "'env':[{'name':'MODE','value':'job'}]}]}},'replicas':2}}")); /* no Chief */
  ASSERT_NULL(ctrain_json_get(spec, "queueName"));
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(ctrain_json_get(v.job, "metadata"), "labels"),
                                "kueue.x-k8s.io/queue-name"),
                "team-q");
  tj->view_free(&v);

  /* A snapshot of another runtime than spec.runtimeRef's: invalid, named. */
  cJSON *s = cJSON_GetObjectItemCaseSensitive(st, "runtime");
  ctrain_json_put(s, "name", cJSON_CreateString("other"));
  ASSERT_OK(tj->view(job, &v));
  ASSERT_NOT_NULL(v.invalid);
  ASSERT(strstr(v.invalid, "status.runtime") && strstr(v.invalid, "TrainingRuntime team"));
  tj->view_free(&v);
  cJSON_Delete(rt);
  cJSON_Delete(job);
}

TEST(a_runtime_without_spec_is_refused) {
  cJSON *rt = J("{'metadata':{'name':'x'}}"), *snap = NULL;
  runtime_ref ref = {RUNTIME_KIND_CLUSTER, "x", 1};
  char msg[128];
  ASSERT_EQ(runtime_snapshot(rt, &ref, &snap, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_NULL(snap);
  ASSERT(strstr(msg, "ClusterTrainingRuntime x"));
  cJSON_Delete(rt);
}

static ctrain_err token(void *ctx, const char *uid, int attempt, char *hex, size_t len) {
  (void)ctx, (void)uid, (void)attempt;
  snprintf(hex, len, "%064d", 0);
  return CTRAIN_OK;
}

/* The actions of kind k in res. */
static int count(const recon_result *res, recon_action_kind k) {
  int n = 0;
  for (size_t i = 0; i < res->n_actions; i++)
    n += res->actions[i].kind == k;
  return n;
}

static const recon_action *event(const recon_result *res) {
  for (size_t i = 0; i < res->n_actions; i++)
    if (res->actions[i].kind == RECON_EVENT)
      return &res->actions[i];
  return NULL;
}

/* Blocked while the runtime cannot be had; recorded once found, and
 * nothing else that pass; the next pass (over the merged view) creates the
 * pods with the runtime's image and the job's env, and keeps the record. */
TEST(gate_blocks_records_then_runs) {
  cJSON *job = J(JOB("")), *rt = J(RUNTIME), *snap = NULL;
  recon_expectations x;
  recon_expectations_init(&x);
  recon_result res = {0};
  char err[256];
  recon_input in = {.job = job,
                    .now = 1700000000,
                    .token = token,
                    .runtime_blocked = "TrainingRuntime ns/team not found"};
  ASSERT_OK(recon_reconcile(&in, &x, &res, err, sizeof(err)));
  const cJSON *c = cJSON_GetArrayItem(ctrain_json_get(res.status, "conditions"), 0);
  ASSERT_STR_EQ(ctrain_json_str(c, "type"), "Blocked");
  ASSERT_STR_EQ(ctrain_json_str(c, "reason"), "RuntimeNotFound");
  ASSERT(strstr(ctrain_json_str(c, "message"), "TrainingRuntime ns/team"));
  ASSERT_EQ(count(&res, RECON_CREATE_POD), 0);
  ASSERT_NOT_NULL(event(&res));
  ASSERT_STR_EQ(event(&res)->event_type, "Warning");
  ASSERT_EQ(res.requeue_after_s, RECON_RUNTIME_RETRY_S);

  /* Found: recorded, Blocked False, no pod yet. */
  cJSON *st = cJSON_Duplicate(res.status, 1);
  ctrain_json_put(job, "status", st);
  recon_result_free(&res);
  runtime_ref ref;
  ASSERT(runtime_ref_of(job, &ref));
  ASSERT_OK(runtime_snapshot(rt, &ref, &snap, err, sizeof(err)));
  in = (recon_input){.job = job, .now = 1700000010, .token = token, .runtime_admit = snap};
  ASSERT_OK(recon_reconcile(&in, &x, &res, err, sizeof(err)));
  ASSERT(cJSON_Compare(ctrain_json_get(res.status, "runtime"), snap, 1));
  ASSERT_EQ(count(&res, RECON_CREATE_POD), 0);
  ASSERT_EQ(count(&res, RECON_UPDATE_STATUS), 1);
  ASSERT_STR_EQ(event(&res)->reason, "RuntimeRecorded");
  ASSERT(strstr(event(&res)->message, "generation 2"));
  c = cJSON_GetArrayItem(ctrain_json_get(res.status, "conditions"), 0);
  ASSERT_STR_EQ(ctrain_json_str(c, "status"), "False");

  /* The next pass reads the job over the record, and keeps it. */
  ctrain_json_put(job, "status", cJSON_Duplicate(res.status, 1));
  recon_result_free(&res);
  const ctl_kind *tj = &ctl_kinds[CTL_KIND_TRAININGJOB];
  ctl_view v;
  ASSERT_OK(tj->view(job, &v));
  in = (recon_input){.job = v.job, .now = 1700000020, .token = token};
  ASSERT_OK(recon_reconcile(&in, &x, &res, err, sizeof(err)));
  /* The runtime's queueName gates it on Kueue (controller/kueue.h). */
  ASSERT_EQ(count(&res, RECON_CREATE_WORKLOAD), 1);
  ASSERT_EQ(count(&res, RECON_CREATE_POD), 0);
  ASSERT(strstr(event(&res)->message, "LocalQueue team-q"));
  recon_result_free(&res);
  tj->view_free(&v);
  /* Without a queue: the pods, the runtime's image and mount, the job's env. */
  cJSON *rspec = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "status"), "runtime"),
      "spec");
  cJSON_DeleteItemFromObjectCaseSensitive(rspec, "queueName");
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(snap, "spec"),
                                          "queueName");
  ASSERT_OK(tj->view(job, &v));
  in.job = v.job;
  ASSERT_OK(recon_reconcile(&in, &x, &res, err, sizeof(err)));
  ASSERT_EQ(count(&res, RECON_CREATE_POD), 2);
  for (size_t i = 0; i < res.n_actions; i++) {
    const recon_action *a = &res.actions[i];
    if (a->kind != RECON_CREATE_POD)
      continue;
    char *text = cJSON_PrintUnformatted(a->object);
    ASSERT(strstr(text, "\"image\":\"ctrain:1\""));
    ASSERT(strstr(text, "\"name\":\"MODE\",\"value\":\"job\""));
    ASSERT(strstr(text, "/ckpt"));
    free(text);
  }
  ASSERT(cJSON_Compare(ctrain_json_get(res.status, "runtime"), snap, 1));
  recon_result_free(&res);
  tj->view_free(&v);
  recon_expectations_free(&x);
  cJSON_Delete(snap);
  cJSON_Delete(rt);
  cJSON_Delete(job);
}

/* A spec that the merged job makes invalid names the runtime. */
TEST(invalid_merge_names_the_runtime) {
  cJSON *job = J("{'apiVersion':'ctrain.dev/v1alpha1','kind':'TrainingJob',"
                 "'metadata':{'name':'tj','namespace':'ns','uid':'u1'},"
                 "'spec':{'runtimeRef':{'name':'empty'},'replicaSpecs':{'Worker':{'replicas':1}}},"
                 "'status':{'runtime':{'kind':'TrainingRuntime','name':'empty','generation':4,"
                 "'spec':{}}}}");
  const ctl_kind *tj = &ctl_kinds[CTL_KIND_TRAININGJOB];
  ctl_view v;
  recon_expectations x;
  recon_expectations_init(&x);
  recon_result res = {0};
  char err[256];
  ASSERT_OK(tj->view(job, &v));
  recon_input in = {.job = v.job, .now = 1700000000, .token = token};
  ASSERT_OK(recon_reconcile(&in, &x, &res, err, sizeof(err)));
  const cJSON *c = cJSON_GetArrayItem(ctrain_json_get(res.status, "conditions"), 0);
  ASSERT_STR_EQ(ctrain_json_str(c, "type"), "Failed");
  ASSERT_STR_EQ(ctrain_json_str(c, "reason"), "InvalidSpec");
  const char *m = ctrain_json_str(c, "message");
  ASSERT(strstr(m, "spec.replicaSpecs.Worker"));
  ASSERT(strstr(m, "TrainingRuntime empty, generation 4"));
  ASSERT_EQ(count(&res, RECON_CREATE_POD), 0);
  recon_result_free(&res);
  tj->view_free(&v);
  recon_expectations_free(&x);
  cJSON_Delete(job);
}

TEST_MAIN(T(objects_merge_and_the_jobs_scalars_win), T(named_lists_merge_by_name),
          T(snapshot_and_view), T(a_runtime_without_spec_is_refused),
          T(gate_blocks_records_then_runs), T(invalid_merge_names_the_runtime))
