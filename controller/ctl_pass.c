/* ctl_pass.c - one pass of one job key: the reconcile input from the
 * caches, the pure recon_reconcile with the job's expectations
 * (controller/jobstate.h), the result through the job's kind
 * (controller/jobkind.h) to the executor (controller/executor.h); and,
 * for a job that is gone, its pods' finalizers released. See
 * controller/ctl_internal.h. */
#include "controller/ctl_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "controller/kueue.h"
#include "controller/ownership.h"
#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "controller/runtime.h"
#include "ctrain/json.h"
#include "ctrain/log.h"

static const char *md_str(const cJSON *obj, const char *field) {
  return ctrain_json_str(ctrain_json_get(obj, "metadata"), field);
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

/* Pods of a job that is gone (or of an earlier job of the same name, which
 * is gone too) and that are going keep PODBUILD_FINALIZER until someone
 * removes it: the garbage collector deleted them after the job, whose
 * passes would have. `pods` (borrowed) are pods ownership found to be such
 * (an earlier incarnation's, or a deleted job's): each one with a
 * deletionTimestamp and our finalizer loses it, by a patch that tests its
 * uid. One write a pod: a deleted 4096-worker job takes minutes; a stopping
 * controller leaves the rest to the next leader, whose informer lists them
 * again (they keep the finalizer), so shutdown stays prompt. */
static ctrain_err release_pods(ctl *c, const char *ns, const char *job, const cJSON *pods) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *pod;
  cJSON_ArrayForEach(pod, pods) {
    const cJSON *md = ctrain_json_get(pod, "metadata");
    const char *name = ctrain_json_str(md, "name"), *uid = ctrain_json_str(md, "uid");
    const cJSON *dt = ctrain_json_get(md, "deletionTimestamp");
    if (!name || !uid || !dt || cJSON_IsNull(dt))
      continue;
    int idx = podbuild_finalizer_index(pod);
    if (idx < 0)
      continue;
    if (ctl_stopping(c))
      return CTRAIN_E_CANCELLED;
    kube_status st = {0};
    ctrain_err r = ctl_exec_remove_finalizer(&c->exec, ns, name, uid, idx, &st);
    if (r) {
      LOG_WARN("%s/%s: pod %s: removing finalizer %s: %s (HTTP %d %s)", ns, job, name,
               PODBUILD_FINALIZER, ctrain_strerror(r), st.http_code, st.reason);
      result = r;
    } else {
      LOG_INFO("%s/%s: pod %s of a deleted job (uid %s): finalizer %s removed", ns, job, name,
               own_controller_uid(pod) ? own_controller_uid(pod) : "?", PODBUILD_FINALIZER);
    }
  }
  return result;
}

/* No job `ns`/`name` of kind `k` in the cache: the pods whose controller is
 * a job of that kind and name (any uid: every one is gone) are released.
 * Found by the owner-name index, so the cost is the job's pods, not the
 * namespace's. */
static ctrain_err release_orphans(ctl *c, const ctl_kind *k, const char *ns, const char *name) {
  cJSON *cands = NULL, *gone = NULL;
  ctrain_err result = kube_informer_by_owner_name(c->pods, ns, name, &cands);
  if (result)
    return result;
  /* A job of this kind and name with a uid no pod has: every pod of an
   * earlier incarnation is OWN_EARLIER to it. */
  own_job j = {.ns = ns, .name = name, .uid = "-", .api_version = k->api_version, .kind = k->kind};
  cJSON *mine = NULL;
  result = own_split(cands, &j, &mine, &gone);
  cJSON_Delete(mine);
  if (!result)
    result = release_pods(c, ns, name, gone);
  cJSON_Delete(gone);
  cJSON_Delete(cands);
  return result;
}

/* The pass's pod creates as JSON text, their trees freed: a pass of a wide
 * job holds up to `burst` (500) pods while slow start sends them, and a
 * pod's cJSON tree is ~10x its text (bench/scale.py, 10 jobs x 1,024
 * workers: 68.8 MiB of heap in use with 7,280 pods cached). */
static ctrain_err serialise_pods(recon_result *res) {
  for (size_t i = 0; i < res->n_actions; i++) {
    recon_action *a = &res->actions[i];
    if (a->kind != RECON_CREATE_POD || !a->object)
      continue;
    if (!(a->body = cJSON_PrintUnformatted(a->object)))
      return CTRAIN_E_NOMEM;
    cJSON_Delete(a->object);
    a->object = NULL;
  }
  return CTRAIN_OK;
}

/* A TrainingJob over a runtime with no snapshot of it yet (controller/
 * runtime.h): the snapshot of the runtime in the cache into *snap, or why
 * it cannot be had into `why` (""). A runtime serves the jobs of its own
 * namespace only. */
static ctrain_err runtime_admission(ctl *c, const ctl_key *k, const cJSON *job, cJSON **snap,
                                    char *why, size_t len) {
  runtime_ref ref;
  char what[320];
  *snap = NULL;
  why[0] = '\0';
  if (k->kind->id != CTL_KIND_TRAININGJOB || runtime_snapshot_of(job) || !runtime_ref_of(job, &ref))
    return CTRAIN_OK;
  runtime_describe(&ref, k->ns, what, sizeof(what));
  kube_informer *inf = ref.cluster ? c->cluster_runtimes : c->runtimes;
  if (!inf) {
    snprintf(why, len,
             "%s: this controller serves namespace %s only and reads no cluster-scoped "
             "runtimes; name a TrainingRuntime of the job's namespace in spec.runtimeRef",
             what, c->o->namespace_);
    return CTRAIN_OK;
  }
  if (!kube_informer_has_synced(inf)) {
    snprintf(why, len,
             "%s: waiting for the %s.ctrain.dev cache (are this version's CRDs installed? "
             "kubectl apply --server-side -k manifests/crds)",
             what,
             ref.cluster ? ctl_exec_gvr_cluster_runtimes.resource : ctl_exec_gvr_runtimes.resource);
    return CTRAIN_OK;
  }
  cJSON *rt = kube_informer_get(inf, ref.cluster ? NULL : k->ns, ref.name);
  if (!rt) {
    snprintf(why, len, "%s not found: create it, or name another in spec.runtimeRef", what);
    return CTRAIN_OK;
  }
  ctrain_err result = runtime_snapshot(rt, &ref, snap, why, len);
  cJSON_Delete(rt);
  return result == CTRAIN_E_CONFIG ? CTRAIN_OK : result;
}

/* Decides and executes one pass for the job of `k` (its string `key`):
 * `obj` from its kind's cache and `v`, the reconciler's view of it. */
static ctrain_err sync_job(ctl *c, const ctl_key *k, const char *key, const cJSON *obj,
                           const ctl_view *v, int64_t *requeue_after_s) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *job = v->job;
  const char *ns = k->ns, *name = k->name;
  cJSON *pods = NULL, *svc = NULL, *jobref = NULL, *progress = NULL, *workload = NULL;
  cJSON *cands = NULL, *earlier = NULL, *snap = NULL;
  char rt_why[RECON_CREATE_ERROR_MAX];
  ctrain_err released = CTRAIN_OK;
  recon_result res = {0};
  char errbuf[512] = "";
  char refused[RECON_CREATE_ERROR_MAX], waiting[RECON_CREATE_ERROR_MAX];
  char tag[JOBTOKEN_TAG_SIZE];
  const char *uid = md_str(job, "uid");
  ctl_job *state = NULL;
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
  /* Ownership (controller/ownership.h): the pods of the job are those of
   * its namespace whose controller is its uid; those of an earlier job of
   * the same name (deleted, re-applied) that are going lose our finalizer
   * here, or a re-applied job would wait on them for good. */
  own_job oj = {.ns = ns, .name = name, .uid = uid};
  podbuild_job_kind(job, &oj.api_version, &oj.kind);
  result = kube_informer_by_owner_name(c->pods, ns, name, &cands);
  if (!result)
    result = own_split(cands, &oj, &pods, &earlier);
  /* The pods are parsed trees (~9 KB each): a pass of a 1,024-worker job
   * holds ~9 MB of them, so the candidates go now and the job's own once
   * decided (below), not at the end of the pass's writes. */
  cJSON_Delete(cands);
  cands = NULL;
  if (result)
    goto out;
  released = release_pods(c, ns, name, earlier); /* a failure: requeued after the pass */
  /* A Service or Workload of that name that is not the job's is as good as
   * none: the pass creates it, and the executor finds whose it is. */
  svc = kube_informer_get(c->services, ns, name);
  if (svc && !own_is_mine(svc, &oj)) {
    cJSON_Delete(svc);
    svc = NULL;
  }
  if (workload && !own_is_mine(workload, &oj)) {
    cJSON_Delete(workload);
    workload = NULL;
  }
  result = runtime_admission(c, k, job, &snap, rt_why, sizeof(rt_why));
  if (result)
    goto out;
  state = ctl_jobs_acquire(c->states, key);
  /* What events name; built before the pass, which records expectations of
   * its actions, so running out of memory here leaves nothing expected. */
  jobref = job_ref(job, ns, name, uid);
  if (!state || !jobref) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  recon_input in = {.job = job,
                    .pods = pods,
                    .service = svc,
                    .token_attempt = ctl_job_token_attempt(state, uid),
                    .now = now.tv_sec,
                    .token = jobtoken_fn,
                    .token_ctx = &c->key,
                    .invalid_spec = v->invalid,
                    .workload = workload,
                    .controller_ns = ctl_own_namespace(c->o),
                    .progress_interval_s = (int)(c->o->progress_interval_s + 0.999),
                    .runtime_admit = snap,
                    .runtime_blocked = rt_why[0] ? rt_why : NULL};
  int64_t attempt = 1;
  if (ctrain_json_int_in(ctrain_json_get(job, "status"), "attempt", 1, INT32_MAX, 1, &attempt,
                         "status.attempt", NULL, 0))
    attempt = 1; /* a status.attempt that is not an int32 reads as the first */
  result = ctl_job_progress(state, (int)attempt, &progress, &in.straggler);
  if (result)
    goto out;
  in.progress = progress;
  if (ctl_job_create_error(state, uid, refused, sizeof(refused)))
    in.create_error = refused;
  if (ctl_job_waiting(state, uid, waiting, sizeof(waiting)))
    in.waiting = waiting;
  if (!jobtoken_name_tag(&c->key, uid, tag, sizeof(tag)))
    in.name_tag = tag;
  result = ctl_job_reconcile(state, &in, &res, errbuf, sizeof(errbuf));
  cJSON_Delete(pods); /* the result owns what it needs of them */
  pods = NULL;
  in.pods = NULL;
  if (result) {
    LOG_ERROR("%s: reconcile: %s: %s", key, ctrain_strerror(result), errbuf);
    goto out;
  }
  if (!(result = k->kind->adapt(obj, v, &res)))
    result = serialise_pods(&res);
  if (result) {
    /* Out of memory: nothing of the pass is sent, so nothing is expected. */
    for (size_t i = 0; i < res.n_actions; i++) {
      const recon_action *a = &res.actions[i];
      if (a->kind == RECON_CREATE_POD)
        ctl_job_creation_failed(state, a->name);
      else if (a->kind == RECON_DELETE_POD)
        ctl_job_deletion_failed(state, a->uid);
    }
    goto out;
  }
  result = ctl_exec_run(&c->exec, k->kind->exec, state, key, obj, jobref, &res, requeue_after_s);
  if (!result)
    result = released;
out:
  ctl_jobs_release(c->states, state);
  recon_result_free(&res);
  cJSON_Delete(pods);
  cJSON_Delete(cands);
  cJSON_Delete(earlier);
  cJSON_Delete(svc);
  cJSON_Delete(jobref);
  cJSON_Delete(progress);
  cJSON_Delete(workload);
  cJSON_Delete(snap);
  return result;
}

ctrain_err ctl_reconcile_key(ctl *c, const ctl_key *k, int64_t *requeue_after_s) {
  char key[CTL_KEY_MAX];
  *requeue_after_s = -1;
  kube_informer *inf = c->jobs[k->kind->id];
  if (ctl_key_format(k, key, sizeof(key)))
    return CTRAIN_OK; /* not a key we made: drop it */
  cJSON *obj = inf ? kube_informer_get(inf, k->ns, k->name) : NULL;
  if (!obj) {
    ctl_jobs_drop(c->states, key);
    return release_orphans(c, k->kind, k->ns, k->name);
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
