/* controller.c - ctrain-controller's run loop; see controller/controller.h.
 *
 * Informers feed a work queue of job keys, typed (controller/jobkind.h:
 * one table of the kinds served, TrainingJob and with --enable-tfjob
 * TFJob); pod, Service and Workload events map to their controlling job. A worker takes a key,
 * builds the reconcile input from the caches, calls the pure recon_reconcile with the job's
 * expectations (controller/jobstate.h) and hands the result to the executor
 * (controller/executor.h). Only the leader runs informers and workers.
 *
 * Workers decide in parallel: nothing is locked across a whole pass. The
 * queue never hands one key to two workers; what workers share is locked
 * narrowly where it lives: the map of job states (a lookup), one job's
 * state (that job's lock), the metrics (atomics and the histogram's lock),
 * the informer caches, the queue and the event recorder (their own locks).
 *
 * No Secret of a job's namespace is ever read: each attempt's token is
 * derived from the controller's key (controller/jobtoken.h), which lives
 * in one Secret of the controller's own namespace, created or read once at
 * start. The job state remembers which attempt's token Secret exists, so a
 * pass creates it once per attempt (once more after a restart, answered
 * AlreadyExists). */
#include "controller/controller.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/crypto.h>

#include "controller/cachefields.h"
#include "controller/executor.h"
#include "controller/http.h"
#include "controller/jobstate.h"
#include "controller/jobkind.h"
#include "controller/jobtoken.h"
#include "controller/kueue.h"
#include "controller/leader.h"
#include "controller/metrics.h"
#include "controller/podbuild.h"
#include "controller/progress.h"
#include "controller/reconcile.h"
#include "controller/slowstart.h"
#include "ctrain/clock.h"
#include "ctrain/json.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/kube_events.h"
#include "ctrain/kube_informer.h"
#include "ctrain/kube_lease.h"
#include "ctrain/kube_workqueue.h"
#include "ctrain/log.h"
#include "ctrain/util.h"
#include "ctrain/version.h"

#define CREATE_POOL_THREADS 16   /* pod creates in flight, besides one per worker */
#define EVENT_QUEUE_MAX     4096 /* events waiting to be written; more are dropped */
#define EVENT_DRAIN_MS      2000 /* at shutdown, write queued events for at most this */
#define MAX_WORKERS         256
#define NS_PER_S            1000000000LL
#define OWNED_BATCH_NS      (200 * 1000000LL) /* pod/Service events of one job, one pass */
#define MARK_RETRY_NS       (5 * NS_PER_S)    /* a failed leader label write, again after */

/* Set by the signal handler (on whichever thread the signal lands) and read
 * by the main thread and the lease thread (on_stopped): a lock-free atomic,
 * which C11 allows in a handler, where volatile sig_atomic_t orders nothing
 * between threads. */
static atomic_int stop_requested;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "stop_requested must be lock-free for the handler");

struct ctl;

/* An informer handler's ud: the controller and the kind it watches. */
typedef struct {
  struct ctl *c;
  const ctl_kind *kind;
} kind_ud;

typedef struct ctl {
  const ctl_options *o;
  kube_config *cfg;
  kube_client *client;
  kube_informer *jobs[CTL_NKINDS]; /* by ctl_kind_id; NULL: a kind this run does not serve */
  kind_ud kinds[CTL_NKINDS];       /* the ud of each one's handlers */
  kube_informer *pods, *services;
  kube_informer *workloads; /* Kueue Workloads of the jobs (controller/kueue.h) */
  kube_workqueue *q;
  kube_lease *lease;
  kube_events *events;
  ctl_http *http;
  ctl_progress *progress; /* the poller of the chiefs' /progress; NULL: off */
  slowstart_pool *create_pool;
  ctl_jobs *states; /* job key -> expectations and token attempt, locked per job */
  jobtoken_key key; /* derives every job token; read once at start */
  ctl_metrics metrics;
  ctl_exec exec;
  pthread_t workers[MAX_WORKERS];
  int nworkers;
  atomic_int leading;
  atomic_int lost_leadership;
  int marked;           /* the leader label last written on our pod (leader.h); -1: unknown */
  int64_t mark_next_ns; /* when a failed write of it is tried again */
} ctl;

void ctl_request_stop(void) {
  atomic_store(&stop_requested, 1);
}

static const char *md_str(const cJSON *obj, const char *field) {
  return ctrain_json_str(ctrain_json_get(obj, "metadata"), field);
}

/* ---- informer handlers: everything becomes a job key ---------------------- */

/* Queues `key` after `delay_ns` (0: now). */
static void enqueue_key(ctl *c, const ctl_key *key, int64_t delay_ns) {
  char s[CTL_KEY_MAX];
  if (ctl_key_format(key, s, sizeof(s)))
    return;
  if (delay_ns)
    kube_workqueue_add_after(c->q, s, delay_ns);
  else
    kube_workqueue_add(c->q, s);
}

/* Enqueues the job (of a kind this run serves) that controls `obj` (pod,
 * Service or Workload), if any, after OWNED_BATCH_NS, as the Job
 * controller batches its pod events (syncJobBatchPeriod): the events of a
 * job's pods that arrive together (its creates, a gang's deletion) make one
 * pass and one status write instead of one each. */
static void enqueue_owner(ctl *c, const cJSON *obj) {
  const char *ns = md_str(obj, "namespace");
  const cJSON *r;
  cJSON_ArrayForEach(r, ctrain_json_get(ctrain_json_get(obj, "metadata"), "ownerReferences")) {
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
/* A job deleted: its state goes. Its pods' events bring its key back, and
 * that pass, finding no job, releases them (release_orphans). */
static void kind_delete(void *ud, const cJSON *o) {
  kind_ud *u = ud;
  ctl_key key;
  char s[CTL_KEY_MAX];
  if (ctl_key_of(u->kind, o, &key) || ctl_key_format(&key, s, sizeof(s)))
    return;
  ctl_jobs_drop(u->c->states, s);
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

/* ---- one pass ------------------------------------------------------------------ */

/* ---- the job token, for the progress poller ------------------------------ */

/* The job token of `attempt` (hex, as the pods get it in CTRAIN_JOB_TOKEN):
 * derived from the controller's key, as the reconciler derives it for the
 * attempt's Secret, so the poller reads no Secret. */
static ctrain_err progress_token(void *ud, const cJSON *job, int attempt, char *out, size_t len) {
  ctl *c = ud;
  const char *uid = ctrain_json_str(ctrain_json_get(job, "metadata"), "uid");
  if (!uid || !*uid)
    return CTRAIN_E_NOTFOUND;
  return jobtoken_derive(&c->key, uid, attempt, out, len);
}

/* The ObjectReference the executor's own events name. NULL: out of memory. */
static cJSON *job_ref(const cJSON *job, const char *ns, const char *name, const char *uid) {
  const char *api, *kind;
  podbuild_job_kind(job, &api, &kind);
  cJSON *ref = cJSON_CreateObject();
  if (!ref || !cJSON_AddStringToObject(ref, "apiVersion", api) ||
      !cJSON_AddStringToObject(ref, "kind", kind) ||
      !cJSON_AddStringToObject(ref, "namespace", ns) ||
      !cJSON_AddStringToObject(ref, "name", name) || !cJSON_AddStringToObject(ref, "uid", uid)) {
    cJSON_Delete(ref);
    return NULL;
  }
  return ref;
}

static const char *own_namespace(const ctl_options *o);

/* Decides and executes one pass for the job of `k` (its string `key`):
 * `obj` from its kind's cache and `v`, the reconciler's view of it. */
static ctrain_err sync_job(ctl *c, const ctl_key *k, const char *key, const cJSON *obj,
                           const ctl_view *v, int64_t *requeue_after_s) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *job = v->job;
  const char *ns = k->ns, *name = k->name;
  cJSON *pods = NULL, *svc = NULL, *jobref = NULL, *progress = NULL, *workload = NULL;
  recon_result res = {0};
  char errbuf[512] = "";
  char refused[RECON_CREATE_ERROR_MAX];
  const char *uid = md_str(job, "uid");
  ctl_job *js = NULL;
  if (!uid)
    return CTRAIN_OK;
  /* A job gated by Kueue: its Workload, once that cache listed (before, a
   * missing Workload would stop running pods); Kueue may be installed after
   * the controller started, so the workers do not wait for this cache. */
  if (kueue_queue_name(job)) {
    char wn[KUEUE_NAME_MAX];
    if (!kube_informer_has_synced(c->workloads)) {
      LOG_WARN("%s: labelled %s, waiting for the workloads.kueue.x-k8s.io cache (is Kueue "
               "installed?)",
               key, KUEUE_LABEL_QUEUE);
      *requeue_after_s = 5;
      goto out;
    }
    if (!kueue_workload_name(name, wn, sizeof(wn)))
      workload = kube_informer_get(c->workloads, ns, wn);
  }
  result = kube_informer_by_owner(c->pods, uid, &pods);
  if (result)
    goto out;
  svc = kube_informer_get(c->services, ns, name);
  js = ctl_jobs_acquire(c->states, key);
  /* What events name; built before the pass, which records expectations of
   * its actions, so running out of memory here leaves nothing expected. */
  jobref = job_ref(job, ns, name, uid);
  if (!js || !jobref) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  recon_input in = {.job = job,
                    .pods = pods,
                    .service = svc,
                    .token_attempt = ctl_job_token_attempt(js, uid),
                    .now = now.tv_sec,
                    .token = jobtoken_fn,
                    .token_ctx = &c->key,
                    .invalid_spec = v->invalid,
                    .workload = workload,
                    .controller_ns = own_namespace(c->o),
                    .progress_interval_s = (int)(c->o->progress_interval_s + 0.999)};
  int64_t attempt = 1; /* 1 also when status.attempt is not an int32 */
  ctrain_json_int_in(ctrain_json_get(job, "status"), "attempt", 1, INT32_MAX, 1, &attempt,
                     "status.attempt", NULL, 0);
  result = ctl_job_progress(js, (int)attempt, &progress, &in.straggler);
  if (result)
    goto out;
  in.progress = progress;
  if (ctl_job_create_error(js, uid, refused, sizeof(refused)))
    in.create_error = refused;
  result = ctl_job_reconcile(js, &in, &res, errbuf, sizeof(errbuf));
  if (result) {
    LOG_ERROR("%s: reconcile: %s: %s", key, ctrain_strerror(result), errbuf);
    goto out;
  }
  if ((result = k->kind->adapt(obj, v, &res))) {
    /* Out of memory: nothing of the pass is sent, so nothing is expected. */
    for (size_t i = 0; i < res.n_actions; i++) {
      const recon_action *a = &res.actions[i];
      if (a->kind == RECON_CREATE_POD)
        ctl_job_creation_failed(js, a->name);
      else if (a->kind == RECON_DELETE_POD)
        ctl_job_deletion_failed(js, a->uid);
    }
    goto out;
  }
  result = ctl_exec_run(&c->exec, k->kind->exec, js, key, obj, jobref, &res, requeue_after_s);
out:
  ctl_jobs_release(c->states, js);
  recon_result_free(&res);
  cJSON_Delete(pods);
  cJSON_Delete(svc);
  cJSON_Delete(jobref);
  cJSON_Delete(progress);
  cJSON_Delete(workload);
  return result;
}

/* Pods of a job that is gone and that are going keep PODBUILD_FINALIZER
 * until someone removes it: the garbage collector deleted them after the
 * job, whose passes would have. Collected under the informer's lock,
 * patched after. */
typedef struct {
  const char *job;
  char (*names)[256];
  char (*uids)[64];
  int *idx;
  size_t n, cap;
} orphans;

static int orphan_pod(void *ud, const cJSON *pod) {
  orphans *o = ud;
  const cJSON *md = ctrain_json_get(pod, "metadata");
  const char *job = ctrain_json_str(ctrain_json_get(md, "labels"), PODBUILD_LABEL_JOB);
  const char *name = ctrain_json_str(md, "name"), *uid = ctrain_json_str(md, "uid");
  const cJSON *dt = ctrain_json_get(md, "deletionTimestamp");
  if (!job || strcmp(job, o->job) || !name || !uid || !dt || cJSON_IsNull(dt) || o->n >= o->cap ||
      strlen(name) >= sizeof(o->names[0]) || strlen(uid) >= sizeof(o->uids[0]))
    return 0;
  int i = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, ctrain_json_get(md, "finalizers")) {
    if (cJSON_IsString(f) && !strcmp(f->valuestring, PODBUILD_FINALIZER)) {
      snprintf(o->names[o->n], sizeof(o->names[0]), "%s", name);
      snprintf(o->uids[o->n], sizeof(o->uids[0]), "%s", uid);
      o->idx[o->n++] = i;
      break;
    }
    i++;
  }
  return 0;
}

/* The executor's `stopping` (controller/executor.h). */
static int exec_stopping(void *ud) {
  ctl *c = ud;
  return atomic_load(&stop_requested) || atomic_load(&c->lost_leadership);
}

static ctrain_err release_orphans(ctl *c, const char *ns, const char *name) {
  ctrain_err result = CTRAIN_OK;
  orphans o = {.job = name, .cap = 256};
  o.names = calloc(o.cap, sizeof(*o.names));
  o.uids = calloc(o.cap, sizeof(*o.uids));
  o.idx = calloc(o.cap, sizeof(*o.idx));
  if (!o.names || !o.uids || !o.idx) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = kube_informer_each(c->pods, ns, orphan_pod, &o);
  for (size_t i = 0; i < o.n && !result; i++) {
    /* One write a pod: a deleted 4096-worker job takes minutes. A stopping
     * controller leaves the rest to the next leader, whose informer lists
     * them again (they keep the finalizer), so shutdown stays prompt. */
    if (exec_stopping(c)) {
      result = CTRAIN_E_CANCELLED;
      break;
    }
    kube_status st = {0};
    result = ctl_exec_remove_finalizer(&c->exec, ns, o.names[i], o.uids[i], o.idx[i], &st);
    if (result)
      LOG_WARN("%s/%s: pod %s: removing finalizer %s: %s (HTTP %d %s)", ns, name, o.names[i],
               PODBUILD_FINALIZER, ctrain_strerror(result), st.http_code, st.reason);
    else
      LOG_INFO("%s/%s: pod %s of a deleted job: finalizer %s removed", ns, name, o.names[i],
               PODBUILD_FINALIZER);
  }
  /* A cap of 256 per pass: more are left for the requeue the error gives. */
  if (!result && o.n == o.cap)
    result = CTRAIN_E_TOOBIG;
out:
  free(o.names);
  free(o.uids);
  free(o.idx);
  return result;
}

/* One reconcile of one key. Returns CTRAIN_OK, or an error that makes the
 * caller requeue the key with backoff. *requeue_after_s is set when the
 * result asks for a delayed requeue. */
static ctrain_err reconcile_key(ctl *c, const ctl_key *k, int64_t *requeue_after_s) {
  char key[CTL_KEY_MAX];
  *requeue_after_s = -1;
  kube_informer *inf = c->jobs[k->kind->id];
  if (ctl_key_format(k, key, sizeof(key)))
    return CTRAIN_OK; /* not a key we made: drop it */
  cJSON *obj = inf ? kube_informer_get(inf, k->ns, k->name) : NULL;
  if (!obj) {
    ctl_jobs_drop(c->states, key);
    return release_orphans(c, k->ns, k->name);
  }
  ctl_view v;
  ctrain_err result = k->kind->view(obj, &v);
  if (!result) {
    if (!v.foreign)
      result = sync_job(c, k, key, obj, &v, requeue_after_s);
    k->kind->view_free(&v);
  }
  cJSON_Delete(obj);
  return result;
}

static void *worker_main(void *arg) {
  ctl *c = arg;
  for (;;) {
    char *key = NULL;
    ctrain_err r = kube_workqueue_get(c->q, -1, &key);
    if (r == CTRAIN_E_CANCELLED)
      break;
    if (r)
      continue;
    int64_t after = -1;
    double t0 = ctrain_mono_s();
    ctl_key k;
    /* A string that is no key of ours is dropped, as a pass without error. */
    ctrain_err result = ctl_key_parse(key, &k) ? CTRAIN_OK : reconcile_key(c, &k, &after);
    ctl_metrics_observe(&c->metrics, ctrain_mono_s() - t0);
    if (result) {
      atomic_fetch_add(&c->metrics.reconcile_errors, 1);
      kube_workqueue_add_rate_limited(c->q, key);
    } else {
      kube_workqueue_forget(c->q, key);
    }
    if (after >= 0)
      kube_workqueue_add_after(c->q, key, after * NS_PER_S + NS_PER_S / 2);
    kube_workqueue_done(c->q, key);
    free(key);
  }
  return NULL;
}

/* ---- metrics, health, leadership --------------------------------------------- */

/* The TrainingJob informer: the gauge's, the progress poller's. */
#define TRAININGJOBS(c) ((c)->jobs[CTL_KIND_TRAININGJOB])

/* Whether the informer of every kind served has synced, waiting up to
 * `wait_ms` for each (0: a look). The TrainingJob one must exist. */
static int jobs_synced(ctl *c, int wait_ms) {
  if (!TRAININGJOBS(c))
    return 0;
  for (int i = 0; i < CTL_NKINDS; i++) {
    if (!ctl_kind_enabled(&ctl_kinds[i], c->o))
      continue;
    if (!c->jobs[i] || (wait_ms ? kube_informer_wait_synced(c->jobs[i], wait_ms)
                                : !kube_informer_has_synced(c->jobs[i])))
      return 0;
  }
  return 1;
}

static ctrain_err render_metrics(void *ud, ctrain_buf *out) {
  ctl *c = ud;
  ctl_metrics_gauges g = {
      .kube_requests = c->client ? kube_client_requests(c->client) : 0,
      .leader = atomic_load(&c->leading),
      .queue_depth = c->q ? kube_workqueue_len(c->q) : 0,
      .queue_waiting = c->q ? kube_workqueue_waiting(c->q) : 0,
      .trainingjobs = TRAININGJOBS(c) ? kube_informer_len(TRAININGJOBS(c)) : 0,
  };
  if (c->events)
    g.events = kube_events_get_counts(c->events);
  return ctl_metrics_render(&c->metrics, &g, out);
}

/* Ready: the leader once its caches synced; a standby is ready too (it
 * serves nothing but is healthy), so a rollout does not wait on election. */
/* The event writer holds events back (2 s at most) while keys wait in the
 * queue or creates are in flight: under a burst of new jobs the pods reach
 * the apiserver first, and the events after them. */
static int creates_first(void *ud) {
  ctl *c = ud;
  return atomic_load(&c->metrics.creates_in_flight) > 0 || (c->q && kube_workqueue_len(c->q) > 0);
}

static int ready(void *ud) {
  ctl *c = ud;
  if (!atomic_load(&c->leading))
    return !c->o->leader_elect ? 0 : 1;
  return jobs_synced(c, 0) && kube_informer_has_synced(c->pods) &&
         kube_informer_has_synced(c->services);
}

static void on_started(void *ud) {
  ctl *c = ud;
  LOG_INFO("became leader");
  atomic_store(&c->leading, 1);
}

static void on_stopped(void *ud) {
  ctl *c = ud;
  if (atomic_exchange(&c->leading, 0)) {
    LOG_WARN("lost leadership");
    if (!atomic_load(&stop_requested))
      atomic_store(&c->lost_leadership, 1);
  }
}

static void on_new_leader(void *ud, const char *id) {
  (void)ud;
  LOG_INFO("leader is %s", id);
}

/* Brings the leader label on our pod (controller/leader.h) in line with
 * whether we lead; a failed write is logged and tried again after
 * MARK_RETRY_NS (the daemon goes on: only scrapes through the Service
 * miss it). Outside a pod (no POD_NAME, POD_NAMESPACE) there is no pod to
 * label. Called from the main thread only. */
static void sync_leader_mark(ctl *c) {
  const char *pod = getenv("POD_NAME"), *ns = getenv("POD_NAMESPACE");
  int want = atomic_load(&c->leading);
  if (!pod || !*pod || !ns || !*ns || c->marked == want || ctrain_mono_ns() < c->mark_next_ns)
    return;
  char err[1400];
  if (ctl_leader_mark(c->client, ns, pod, want, err, sizeof(err))) {
    LOG_WARN("%s; again in %lld s", err, (long long)(MARK_RETRY_NS / NS_PER_S));
    c->mark_next_ns = ctrain_mono_ns() + MARK_RETRY_NS;
    return;
  }
  c->marked = want;
  LOG_INFO("pod %s/%s: label %s %s", ns, pod, CTL_LEADER_LABEL, want ? "set" : "removed");
}

/* ---- run ------------------------------------------------------------------------ */

/* The informer of every kind this run serves; its handlers' ud is c->kinds[]. */
static ctrain_err start_job_informers(ctl *c) {
  ctrain_err result;
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
    if ((result = kube_informer_new(c->client, &o, &c->jobs[i])) ||
        (result = kube_informer_start(c->jobs[i])))
      return result;
  }
  return CTRAIN_OK;
}

/* The informers: the owned objects' (their handlers enqueue the owner),
 * then the jobs'. */
static ctrain_err start_informers(ctl *c) {
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
  return start_job_informers(c);
}

/* The controller's own namespace (its Lease and its key Secret): the
 * --leader-elect-namespace flag, else the pod's (POD_NAMESPACE), else
 * ctrain-system. Static or borrowed. */
static const char *own_namespace(const ctl_options *o) {
  const char *ns = o->lease_namespace;
  if (!ns || !*ns)
    ns = getenv("POD_NAMESPACE");
  if (!ns || !*ns)
    ns = "ctrain-system";
  return ns;
}

/* Fails fast, with the apiserver's words, when the CRD of a kind this run
 * serves is missing or RBAC forbids listing it: the one thing the
 * controller cannot work without. */
static ctrain_err check_job_lists(ctl *c) {
  for (int i = 0; i < CTL_NKINDS; i++) {
    const ctl_kind *k = &ctl_kinds[i];
    if (!ctl_kind_enabled(k, c->o))
      continue;
    kube_list_opts lo = {.limit = 1};
    kube_status st;
    cJSON *l = NULL;
    ctrain_err result = kube_client_list(c->client, k->exec->gvr, c->o->namespace_, &lo, &l, &st);
    cJSON_Delete(l);
    if (result) {
      LOG_ERROR("%s%scannot list %s.%s%s: %s (HTTP %d %s: %s)", k->flag ? k->flag : "",
                k->flag ? ": " : "", k->exec->gvr->resource, k->exec->gvr->group, k->crd_hint,
                ctrain_strerror(result), st.http_code, st.reason, st.message);
      return result;
    }
  }
  return CTRAIN_OK;
}

/* Everything that does not need leadership: the client (and a check that
 * the CRD is there and RBAC lets us list it), the job states, the event
 * recorder, the create pool, the queue, the metrics server. */
static ctrain_err setup(ctl *c) {
  ctrain_err result;
  const ctl_options *o = c->o;
  char err[512] = "";
  result = kube_config_load_default(o->kubeconfig, o->context, &c->cfg, err, sizeof(err));
  if (result) {
    LOG_ERROR("kubeconfig: %s", err);
    return result;
  }
  LOG_INFO("API server %s (configuration: %s)", c->cfg->server, c->cfg->source);
  kube_client_opts co = {.qps = o->qps, .burst = o->burst, .http1 = 1}; /* ~40 threads */
  result = kube_client_new(c->cfg, &co, &c->client, err, sizeof(err));
  if (result) {
    LOG_ERROR("kube client: %s", err);
    return result;
  }
  if ((result = check_job_lists(c)))
    return result;
  /* The token key: a missing RBAC rule on the key Secret stops us here,
   * with the apiserver's words, rather than at the first job. */
  result = jobtoken_key_load(c->client, own_namespace(o), JOBTOKEN_KEY_SECRET, &c->key, err,
                             sizeof(err));
  if (result) {
    LOG_ERROR("job token key: %s", err);
    return result;
  }
  LOG_INFO("job token key: secret %s/%s", own_namespace(o), JOBTOKEN_KEY_SECRET);
  const char *pod = getenv("POD_NAME");
  kube_events_opts eo = {.component = "ctrain-controller",
                         .instance = pod && *pod ? pod : NULL,
                         .queue_max = EVENT_QUEUE_MAX,
                         .yield = creates_first,
                         .yield_ud = c};
  kube_workqueue_opts qo = {.qps = 10, .burst = 100};
  /* The queue before the event writer starts: creates_first reads it. */
  if ((result = ctl_jobs_new(&c->states)) || (result = kube_workqueue_new(&qo, &c->q)) ||
      (result = kube_events_new(c->client, &eo, &c->events)) ||
      (result = kube_events_start(c->events)) ||
      (result = slowstart_pool_new(CREATE_POOL_THREADS, &c->create_pool)))
    return result;
  c->exec = (ctl_exec){.client = c->client,
                       .create_pool = c->create_pool,
                       .events = c->events,
                       .metrics = &c->metrics,
                       .stopping = exec_stopping,
                       .stopping_ud = c};
  if (strcmp(o->metrics_addr, "0")) {
    ctl_http_handlers h = {render_metrics, ready, c};
    int port = 0;
    result = ctl_http_start(o->metrics_addr, &h, &c->http, &port, err, sizeof(err));
    if (result) {
      LOG_ERROR("%s", err);
      return result;
    }
    LOG_INFO("serving /metrics, /healthz, /readyz on port %d", port);
  }
  return CTRAIN_OK;
}

/* Waits for leadership of the Lease (or takes it when election is off). */
static ctrain_err lead(ctl *c) {
  ctrain_err result;
  const ctl_options *o = c->o;
  if (!o->leader_elect) {
    atomic_store(&c->leading, 1);
    return CTRAIN_OK;
  }
  char identity[300], host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const char *pod = getenv("POD_NAME");
  snprintf(identity, sizeof(identity), "%s_%d", pod && *pod ? pod : host, (int)getpid());
  const char *lns = own_namespace(o);
  kube_lease_opts lo = {.ns = lns,
                        .name = o->lease_name,
                        .identity = identity,
                        .on_started_leading = on_started,
                        .on_stopped_leading = on_stopped,
                        .on_new_leader = on_new_leader,
                        .ud = c};
  if ((result = kube_lease_new(c->client, &lo, &c->lease)) || (result = kube_lease_start(c->lease)))
    return result;
  LOG_INFO("waiting for leadership of lease %s/%s as %s", lns, o->lease_name, identity);
  while (!atomic_load(&c->leading) && !atomic_load(&stop_requested)) {
    sync_leader_mark(c); /* a standby's pod gets no scrapes */
    usleep(100000);
  }
  return CTRAIN_OK;
}

/* The informers, and once every cache synced, the workers. No worker may
 * decide on a partial cache: a pod informer that has not listed yet would
 * look like "no pods" and duplicate them. */
static ctrain_err start_workers(ctl *c) {
  ctrain_err result = start_informers(c);
  if (result) {
    LOG_ERROR("informers: %s", ctrain_strerror(result));
    return result;
  }
  while (!atomic_load(&stop_requested) &&
         (!jobs_synced(c, 200) || kube_informer_wait_synced(c->pods, 200) ||
          kube_informer_wait_synced(c->services, 200)))
    ;
  if (atomic_load(&stop_requested))
    return CTRAIN_OK;
  LOG_INFO("caches synced: %zu trainingjobs, %zu pods, %zu services",
           kube_informer_len(TRAININGJOBS(c)), kube_informer_len(c->pods),
           kube_informer_len(c->services));
  for (; c->nworkers < c->o->workers && c->nworkers < MAX_WORKERS; c->nworkers++)
    if (pthread_create(&c->workers[c->nworkers], NULL, worker_main, c))
      return CTRAIN_E_NOMEM;
  ctl_progress_opts po = {.interval_s = c->o->progress_interval_s,
                          .threshold = c->o->straggler_threshold,
                          .concurrency = c->o->progress_concurrency,
                          .jobs = TRAININGJOBS(c),
                          .pods = c->pods,
                          .states = c->states,
                          .q = c->q,
                          .metrics = &c->metrics,
                          .token = progress_token,
                          .token_ud = c};
  result = ctl_progress_start(&po, &c->progress);
  if (result)
    return result;
  LOG_INFO("ctrain-controller %s running: %d workers, namespace %s", CTRAIN_VERSION, c->nworkers,
           c->o->namespace_ ? c->o->namespace_ : "(all)");
  return CTRAIN_OK;
}

/* Stops and frees everything setup, lead and start_workers made, in the
 * order their users go. */
static void teardown(ctl *c) {
  ctl_progress_stop(c->progress); /* it reads the caches, states and queue below */
  if (c->q)
    kube_workqueue_shutdown(c->q);
  for (int i = 0; i < c->nworkers; i++)
    pthread_join(c->workers[i], NULL);
  ctl_http_stop(c->http);              /* /metrics and /readyz read what goes below */
  slowstart_pool_free(c->create_pool); /* its threads' handles go before the client */
  kube_events_stop(c->events, EVENT_DRAIN_MS);
  for (int i = 0; i < CTL_NKINDS; i++)
    kube_informer_free(c->jobs[i]);
  kube_informer_free(c->pods);
  kube_informer_free(c->services);
  kube_informer_free(c->workloads);
  kube_lease_free(c->lease); /* releases the Lease so a standby takes over at once */
  kube_events_free(c->events);
  kube_workqueue_free(c->q);
  ctl_jobs_free(c->states);
  kube_client_free(c->client);
  kube_config_free(c->cfg);
  ctl_metrics_destroy(&c->metrics);
  OPENSSL_cleanse(&c->key, sizeof(c->key));
}

ctrain_err ctl_run(const ctl_options *o) {
  ctrain_err result;
  ctl *c = calloc(1, sizeof(*c));
  if (!c)
    return CTRAIN_E_NOMEM;
  c->o = o;
  c->marked = -1;
  ctl_metrics_init(&c->metrics);
  if ((result = setup(c)) || (result = lead(c)) || atomic_load(&stop_requested) ||
      (result = start_workers(c)))
    goto out;
  while (!atomic_load(&stop_requested) && !atomic_load(&c->lost_leadership)) {
    sync_leader_mark(c);
    usleep(100000);
  }
  if (atomic_load(&c->lost_leadership)) {
    LOG_ERROR("leadership lost; exiting so a new leader starts from a fresh cache");
    result = CTRAIN_E_CANCELLED;
  } else {
    LOG_INFO("stopping (signal)");
  }
out:
  teardown(c);
  free(c);
  return result;
}
