/* ctl_handlers.c - the controller's informers and their handlers: every
 * event becomes a job key (controller/jobkind.h), queued; see
 * controller/ctl_internal.h. The job informers' handlers are written once
 * for every kind of the table; an owned object's (pod, Service, Workload)
 * enqueue the job its controller ownerReference names, looked up in it. */
#include "controller/ctl_internal.h"

#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/cachefields.h"
#include "controller/podbuild.h"
#include "controller/runtime.h"
#include "ctrain/json.h"
#include "ctrain/log.h"

/* ---- informer handlers: everything becomes a job key ---------------------- */

/* Queues `key` after `delay_ns` (0: now). */
static void enqueue_key(ctl *c, const ctl_key *key, int64_t delay_ns) {
  char s[CTL_KEY_MAX];
  if (ctl_key_format(key, s, sizeof(s)))
    return;
  ctrain_err result =
      delay_ns ? kube_workqueue_add_after(c->q, s, delay_ns) : kube_workqueue_add(c->q, s);
  if (result)
    LOG_WARN("%s: out of memory queueing it; the informer's resync queues it again", s);
}

/* Enqueues the job (of a kind this run serves) that controls `obj` (pod,
 * Service or Workload), if any, after OWNED_BATCH_NS, as the Job
 * controller batches its pod events (syncJobBatchPeriod): the events of a
 * job's pods that arrive together (its creates, a gang's deletion) make one
 * pass and one status write instead of one each. */
static void enqueue_owner(ctl *c, const cJSON *obj) {
  const cJSON *md = ctrain_json_get(obj, "metadata"), *r;
  const char *ns = ctrain_json_str(md, "namespace");
  cJSON_ArrayForEach(r, ctrain_json_get(md, "ownerReferences")) {
    const ctl_kind *k =
        ctl_kind_of_owner(ctrain_json_str(r, "apiVersion"), ctrain_json_str(r, "kind"));
    ctl_key key;
    if (cJSON_IsTrue(ctrain_json_get(r, "controller")) && k && ctl_kind_enabled(k, c->o) &&
        !ctl_key_make(k, ns, ctrain_json_str(r, "name"), &key))
      enqueue_key(c, &key, OWNED_BATCH_NS);
  }
}

/* A job of any kind, added or changed: its own key. */
static void kind_enqueue(void *ud, const cJSON *o) {
  kind_ud *u = ud;
  ctl_key key;
  if (!ctl_key_of(u->kind, o, &key))
    enqueue_key(u->c, &key, 0);
}
static void kind_update(void *ud, const cJSON *old, const cJSON *o) {
  (void)old;
  kind_enqueue(ud, o);
}
/* A job deleted: its state and its per-job series go. Its pods' events
 * bring its key back, and that pass, finding no job, releases them
 * (release_orphans). */
static void kind_delete(void *ud, const cJSON *o) {
  kind_ud *u = ud;
  ctl_key key;
  char s[CTL_KEY_MAX];
  if (ctl_key_of(u->kind, o, &key) || ctl_key_format(&key, s, sizeof(s)))
    return;
  ctl_jobs_drop(u->c->states, s);
  ctl_jobmetrics_drop(&u->c->metrics.jobs, s,
                      ctrain_json_str(ctrain_json_get(o, "metadata"), "uid"));
  LOG_INFO("%s %s/%s deleted", u->kind->exec->noun, key.ns, key.name);
}
static void owned_add(void *ud, const cJSON *o) {
  enqueue_owner(ud, o);
}
static void owned_update(void *ud, const cJSON *old, const cJSON *o) {
  (void)old;
  enqueue_owner(ud, o);
}
static void owned_delete(void *ud, const cJSON *o) {
  enqueue_owner(ud, o);
}

/* A runtime added or changed: the TrainingJobs of its namespace (every
 * namespace for a ClusterTrainingRuntime) that name it and have no
 * snapshot yet (blocked on it) are queued. A scan of the job cache: runtimes
 * change rarely, and a job over one waits on it only until its first pass
 * found it. */
typedef struct {
  ctl *c;
  const char *kind, *name;
} runtime_scan;

static int enqueue_waiting(void *ud, const cJSON *job) {
  runtime_scan *s = ud;
  runtime_ref ref;
  ctl_key key;
  if (runtime_ref_of(job, &ref) && !runtime_snapshot_of(job) && !strcmp(ref.kind, s->kind) &&
      !strcmp(ref.name, s->name) && !ctl_key_of(&ctl_kinds[CTL_KIND_TRAININGJOB], job, &key))
    enqueue_key(s->c, &key, 0);
  return 0;
}

static void runtime_changed(ctl *c, const cJSON *rt, const char *kind) {
  const cJSON *md = ctrain_json_get(rt, "metadata");
  runtime_scan s = {c, kind, ctrain_json_str(md, "name")};
  if (s.name && TRAININGJOBS(c) &&
      kube_informer_each(TRAININGJOBS(c), ctrain_json_str(md, "namespace"), enqueue_waiting, &s))
    LOG_WARN("%s %s: out of memory scanning the jobs that wait for it", kind, s.name);
}
static void runtime_add(void *ud, const cJSON *o) {
  runtime_changed(ud, o, RUNTIME_KIND);
}
static void runtime_update(void *ud, const cJSON *old, const cJSON *o) {
  (void)old;
  runtime_changed(ud, o, RUNTIME_KIND);
}
static void cluster_runtime_add(void *ud, const cJSON *o) {
  runtime_changed(ud, o, RUNTIME_KIND_CLUSTER);
}
static void cluster_runtime_update(void *ud, const cJSON *old, const cJSON *o) {
  (void)old;
  runtime_changed(ud, o, RUNTIME_KIND_CLUSTER);
}

/* The runtimes' informers. Not waited for at start (a controller running
 * before this version's CRDs are installed serves every job without a
 * runtime); a pass of a job over one waits for its cache. */
static ctrain_err start_runtime_informers(ctl *c) {
  ctrain_err result;
  const char *ns = c->o->namespace_;
  kube_informer_opts ro = {
      .gvr = &ctl_exec_gvr_runtimes, .ns = ns, .handlers = {runtime_add, runtime_update, NULL, c}};
  if ((result = kube_informer_new(c->client, &ro, &c->runtimes)) ||
      (result = kube_informer_start(c->runtimes)))
    return result;
  ctl_metrics_add_cache(&c->metrics, ctl_exec_gvr_runtimes.resource, c->runtimes);
  if (ns && *ns)
    return CTRAIN_OK; /* one namespace: no cluster-scoped reads (RBAC: a Role) */
  kube_informer_opts co = {.gvr = &ctl_exec_gvr_cluster_runtimes,
                           .handlers = {cluster_runtime_add, cluster_runtime_update, NULL, c}};
  if ((result = kube_informer_new(c->client, &co, &c->cluster_runtimes)) ||
      (result = kube_informer_start(c->cluster_runtimes)))
    return result;
  ctl_metrics_add_cache(&c->metrics, ctl_exec_gvr_cluster_runtimes.resource, c->cluster_runtimes);
  return CTRAIN_OK;
}

/* ---- the informers ------------------------------------------------------------- */

/* The informer of every kind this run serves; its handlers' ud is c->kinds[]. */
static ctrain_err start_job_informers(ctl *c) {
  ctrain_err result;
  /* Before any event: the per-job series' cap (--metrics-max-jobs). */
  ctl_jobmetrics_set_max(&c->metrics.jobs, (size_t)c->o->metrics_max_jobs);
  for (int i = 0; i < CTL_NKINDS; i++) {
    const ctl_kind *k = &ctl_kinds[i];
    if (!ctl_kind_enabled(k, c->o))
      continue;
    c->kinds[i] = (kind_ud){c, k};
    kube_informer_opts o = {.gvr = k->exec->gvr,
                            .ns = c->o->namespace_,
                            .resync_ms = 300000,
                            .handlers = {kind_enqueue, kind_update, kind_delete, &c->kinds[i]},
                            .transform = k->transform};
    if ((result = kube_informer_new(c->client, &o, &c->jobs[i])))
      return result;
    ctl_metrics_add_cache(&c->metrics, k->exec->gvr->resource, c->jobs[i]);
    if ((result = kube_informer_start(c->jobs[i])))
      return result;
  }
  return CTRAIN_OK;
}

ctrain_err ctl_start_informers(ctl *c) {
  ctrain_err result;
  const char *ns = c->o->namespace_;
  kube_informer_opts po = {.gvr = &KUBE_GVR_PODS,
                           .ns = ns,
                           .label_selector = PODBUILD_LABEL_JOB,
                           .handlers = {owned_add, owned_update, owned_delete, c},
                           .transform = ctl_cache_pod_fields};
  kube_informer_opts so = {.gvr = &KUBE_GVR_SERVICES,
                           .ns = ns,
                           .label_selector = PODBUILD_LABEL_JOB,
                           .handlers = {owned_add, owned_update, owned_delete, c},
                           .transform = ctl_cache_service_fields};
  kube_informer_opts wo = {.gvr = &ctl_exec_gvr_workloads,
                           .ns = ns,
                           .label_selector = PODBUILD_LABEL_JOB,
                           .handlers = {owned_add, owned_update, owned_delete, c}};
  if ((result = kube_informer_new(c->client, &wo, &c->workloads)) ||
      (result = kube_informer_start(c->workloads)) ||
      (result = kube_informer_new(c->client, &po, &c->pods)) ||
      (result = kube_informer_new(c->client, &so, &c->services)) ||
      (result = kube_informer_start(c->pods)) || (result = kube_informer_start(c->services)))
    return result;
  ctl_metrics_add_cache(&c->metrics, KUBE_GVR_PODS.resource, c->pods);
  ctl_metrics_add_cache(&c->metrics, KUBE_GVR_SERVICES.resource, c->services);
  ctl_metrics_add_cache(&c->metrics, ctl_exec_gvr_workloads.resource, c->workloads);
  if ((result = start_job_informers(c)))
    return result;
  return start_runtime_informers(c); /* its handlers scan the TrainingJobs' */
}
