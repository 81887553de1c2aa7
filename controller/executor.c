/* executor.c - a pass's actions as API calls; see controller/executor.h.
 * Its pods (creates, deletes, finalizers) are executor_pods.c's, the writes
 * of the job's other objects executor_objects.c's
 * (controller/executor_int.h). */
#include "controller/executor.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/executor_int.h"
#include "controller/ownership.h"
#include "controller/podbuild.h"
#include "ctrain/contract.h"
#include "ctrain/json.h"
#include "ctrain/log.h"
#include "ctrain/thread.h"

const kube_gvr ctl_exec_gvr_trainingjobs = {CTRAIN_API_GROUP, CTRAIN_API_VERSION,
                                            CTRAIN_RESOURCE_TRAININGJOBS};
const ctl_exec_kind ctl_exec_kind_trainingjob = {&ctl_exec_gvr_trainingjobs, "trainingjob", NULL};
static const kube_gvr GVR_NETPOL = {"networking.k8s.io", "v1", "networkpolicies"};
const kube_gvr ctl_exec_gvr_workloads = {"kueue.x-k8s.io", "v1beta2", "workloads"};
const kube_gvr ctl_exec_gvr_runtimes = {CTRAIN_API_GROUP, CTRAIN_API_VERSION,
                                        CTRAIN_RESOURCE_TRAININGRUNTIMES};
const kube_gvr ctl_exec_gvr_cluster_runtimes = {CTRAIN_API_GROUP, CTRAIN_API_VERSION,
                                                CTRAIN_RESOURCE_CLUSTERTRAININGRUNTIMES};

/* Records that the pass's creates wait on a taken name: the pods stay
 * unsent, the next pass shows `fmt` in the Blocked condition. */
static void pass_wait(pass *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pass_wait(pass *p, const char *fmt, ...) {
  char msg[RECON_CREATE_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  ctrain_mutex_lock(&p->mu);
  if (!p->waited++)
    snprintf(p->waiting, sizeof(p->waiting), "%s", msg);
  p->no_creates = 1;
  ctrain_mutex_unlock(&p->mu);
}

/* A create of `what` `name` (of `g`) met AlreadyExists. Whose the object
 * is decides (controller/ownership.h), from the apiserver, not the cache:
 * the job's own is done (*mine, when non-NULL, gets it); an earlier job's
 * of the same name is deleted with its uid as the precondition (unless it
 * is going already) and waited for; anything else is never touched: the
 * job waits, with a Warning event that names the object and its owner. */
taken exec_name_taken(pass *p, const kube_gvr *g, const char *what, const char *name, cJSON **mine,
                      kube_status *st, ctrain_err *err) {
  cJSON *obj = NULL;
  char who[400];
  taken t = TAKEN_WAIT;
  memset(st, 0, sizeof(*st));
  ctrain_err r = kube_client_get(p->e->client, g, p->ns, name, &obj, st);
  if (r == CTRAIN_E_NOTFOUND) {
    pass_wait(p, "%s %s was there and is gone: created again on the next try", what, name);
    return TAKEN_WAIT;
  }
  if (r) {
    LOG_WARN("%s: %s %s exists and could not be read: %s (HTTP %d %s)", p->key, what, name,
             ctrain_strerror(r), st->http_code, st->reason);
    *err = r;
    return TAKEN_ERROR;
  }
  own_describe(obj, who, sizeof(who));
  const cJSON *md = ctrain_json_get(obj, "metadata");
  const cJSON *dt = ctrain_json_get(md, "deletionTimestamp");
  int going = dt && !cJSON_IsNull(dt);
  switch (own_classify(obj, &p->owner)) {
  case OWN_MINE:
    t = TAKEN_MINE;
    if (mine) {
      *mine = obj;
      obj = NULL;
    }
    break;
  case OWN_EARLIER: {
    const char *uid = ctrain_json_str(md, "uid");
    /* A pod is deleted (the controller may delete pods); any other kind is
     * the garbage collector's, which deletes it since its owner is gone. */
    if (!going && uid && g == &KUBE_GVR_PODS) {
      kube_delete_opts d = {
          .precondition_uid = uid, .grace_period_seconds = -1, .propagation_policy = "Background"};
      kube_status ds = {0};
      ctrain_err dr = kube_client_delete(p->e->client, g, p->ns, name, &d, NULL, &ds);
      LOG_INFO("%s: %s %s (uid %s) of an earlier %s of this name: delete: %s", p->key, what, name,
               uid, p->owner.kind, dr ? ctrain_strerror(dr) : "sent");
    }
    pass_wait(p,
              "%s %s belongs to an earlier %s named %s (%s), which was deleted; waiting for it "
              "to go",
              what, name, p->owner.kind, p->owner.name, who);
    break;
  }
  default:
    pass_wait(p,
              "%s %s exists and is not this job's (%s): the controller does not touch it; "
              "delete or rename it, or rename the job",
              what, name, who);
    /* Best effort: kube_events_emit counts and logs a dropped Event. */
    ctrain_ignore(kube_events_emit(
        p->e->events, p->jobref, "Warning", "NameTaken",
        "%s %s exists and is not this job's (%s); the job waits for the name", what, name, who));
    break;
  }
  cJSON_Delete(obj);
  return t;
}

/* ---- one action each ---------------------------------------------------------- */

/* The job's kind as metrics label it: TrainingJob, or TFJob. */
static const char *job_kind(const pass *p) {
  const char *api_version, *kind;
  podbuild_job_kind(p->job, &api_version, &kind);
  return kind;
}

/* Job outcomes (controller/outcomes.h) a status write the apiserver
 * accepted recorded; out of memory loses the count, not the pass. */
static void count_outcomes(pass *p, const cJSON *status) {
  if (ctl_outcomes_observe(&p->e->metrics->outcomes, job_kind(p), p->ns,
                           ctrain_json_get(p->job, "status"), status))
    LOG_WARN("%s: job outcome counters: out of memory", p->key);
}

/* The per-job series (controller/jobmetrics.h) of what the pass decided:
 * its status once written, or as found when nothing had to be; nothing
 * when the write failed (the retry records it). Out of memory loses them,
 * not the pass. */
static void observe_job(pass *p) {
  for (size_t i = 0; i < p->res->n_actions; i++)
    if (p->res->actions[i].kind == RECON_UPDATE_STATUS && !p->ok[i])
      return;
  if (ctl_jobmetrics_observe(&p->e->metrics->jobs, p->key, p->ns, p->owner.name, job_kind(p),
                             p->uid, p->res->status))
    LOG_WARN("%s: per-job metrics: out of memory", p->key);
}

/* PUTs the job with `status` replaced through the status subresource; out
 * of memory sends nothing (never the job without its status). */
static ctrain_err write_status(pass *p, const recon_action *a, kube_status *st) {
  cJSON *obj = NULL;
  ctrain_err result;
  if (p->kind->write_status) {
    result = p->kind->write_status(p->e->client, p->job, a->object, st);
    goto done;
  }
  result = recon_status_object(p->job, a->object, &obj);
  if (result) {
    snprintf(st->message, sizeof(st->message), "status write: out of memory");
    goto out;
  }
  result = kube_client_update_status(p->e->client, p->kind->gvr, p->ns, obj, NULL, NULL, st);
done:
  if (result == CTRAIN_E_CONFLICT) {
    atomic_fetch_add(&p->e->metrics->status_conflicts, 1);
    LOG_INFO("%s: status write conflicted; requeue", p->key);
  } else if (!result) {
    atomic_fetch_add(&p->e->metrics->status_updates, 1);
    const cJSON *status = ctrain_json_get(a->object, "status");
    LOG_INFO("%s: status -> %s", p->key, recon_state(status ? status : a->object));
    count_outcomes(p, status ? status : a->object);
  }
out:
  cJSON_Delete(obj);
  return result;
}

/* The JSON patch that replaces the spec of the object with uid `uid` by
 * `spec` (borrowed): its first op tests the uid, so it never lands on a
 * namesake. NULL: out of memory. */
static char *replace_spec_patch(const char *uid, const cJSON *spec) {
  cJSON *ops = cJSON_CreateArray(), *test = cJSON_CreateObject(), *rep = cJSON_CreateObject();
  cJSON *copy = cJSON_Duplicate(spec, 1);
  char *patch = NULL;
  if (ops && test && rep && copy && cJSON_AddStringToObject(test, "op", "test") &&
      cJSON_AddStringToObject(test, "path", "/metadata/uid") &&
      cJSON_AddStringToObject(test, "value", uid) && cJSON_AddItemToArray(ops, test)) {
    test = NULL;
    if (cJSON_AddStringToObject(rep, "op", "replace") &&
        cJSON_AddStringToObject(rep, "path", "/spec") &&
        cJSON_AddItemToObject(rep, "value", copy)) {
      copy = NULL;
      if (cJSON_AddItemToArray(ops, rep)) {
        rep = NULL;
        patch = cJSON_PrintUnformatted(ops);
      }
    }
  }
  cJSON_Delete(ops);
  cJSON_Delete(test);
  cJSON_Delete(rep);
  cJSON_Delete(copy);
  return patch;
}

/* The attempt's NetworkPolicy: created, or, when the job's own exists (an
 * earlier attempt's), its spec replaced by a JSON patch that tests its uid.
 * One that is not the job's is never written: the pods wait (exec_name_taken).
 * A failure is a Warning event and leaves the pass's pods unsent, as a
 * missing Secret does: pods of the new attempt would not admit one another
 * under the old attempt's policy. */
static ctrain_err apply_network_policy(pass *p, const recon_action *a, kube_status *st) {
  const char *name = md_str(a->object, "name");
  char *patch = NULL;
  pass_sent(p);
  ctrain_err r = kube_client_create(p->e->client, &GVR_NETPOL, p->ns, a->object, NULL, NULL, st);
  if (already_exists(r, st)) {
    cJSON *mine = NULL;
    ctrain_err gerr = CTRAIN_OK;
    taken t = exec_name_taken(p, &GVR_NETPOL, "NetworkPolicy", name, &mine, st, &gerr);
    if (t == TAKEN_WAIT)
      return CTRAIN_OK; /* the pods wait; the next pass writes it again */
    if (t == TAKEN_ERROR)
      return gerr; /* the Warning event below is skipped: the log says it */
    const char *uid = md_str(mine, "uid");
    patch = uid ? replace_spec_patch(uid, ctrain_json_get(a->object, "spec")) : NULL;
    memset(st, 0, sizeof(*st));
    r = patch ? kube_client_patch(p->e->client, &GVR_NETPOL, p->ns, name, NULL, KUBE_PATCH_JSON,
                                  patch, NULL, NULL, st)
              : CTRAIN_E_NOMEM;
    cJSON_Delete(mine);
  }
  free(patch);
  if (!r) {
    LOG_INFO("%s: networkpolicy %s admits attempt %d", p->key, name, a->attempt);
    return CTRAIN_OK;
  }
  /* Best effort: kube_events_emit counts and logs a dropped Event. */
  ctrain_ignore(kube_events_emit(
      p->e->events, p->jobref, "Warning", "FailedCreateNetworkPolicy",
      "Error writing NetworkPolicy %s for attempt %d (its pods wait): %s (HTTP %d "
      "%s: %s)",
      name, a->attempt, ctrain_strerror(r), st->http_code, st->reason, st->message));
  return r;
}

/* Queued for the recorder's writer thread; one that cannot be written is
 * logged there, not retried. */
static void emit(pass *p, const recon_action *a) {
  if (!strcmp(a->reason, "Restarting") || !strcmp(a->reason, "TFJobRestarting")) {
    atomic_fetch_add(&p->e->metrics->restarts_decided, 1);
    if (ctl_outcomes_add(&p->e->metrics->outcomes, job_kind(p), p->ns, CTL_OUTCOME_RESTARTED, 1))
      LOG_WARN("%s: job outcome counters: out of memory", p->key);
  }
  /* Best effort: kube_events_emit counts and logs a dropped Event. */
  ctrain_ignore(kube_events_emit(p->e->events, a->object ? a->object : p->jobref, a->event_type,
                                 a->reason, "%s", a->message));
}

/* The pass's SuccessfulCreatePod events, one per created pod, become one
 * event naming them all ("Created pods: a, b, c (attempt 2)"): a job of N
 * workers costs one Event write instead of N. */
typedef struct {
  const recon_action *first; /* the first such event, or NULL */
  int n, attempt, more;      /* names listed; the attempt; names cut */
  char names[768];
  size_t len;
} created_events;

static int is_create_event(const recon_result *res, const recon_action *a) {
  return !strcmp(a->reason, "SuccessfulCreatePod") && a->after >= 0 &&
         (size_t)a->after < res->n_actions && res->actions[a->after].kind == RECON_CREATE_POD;
}

static void created_add(created_events *ce, const recon_action *ev, const recon_action *create) {
  const char *name = create->name ? create->name : "";
  if (!ce->first) {
    ce->first = ev;
    ce->attempt = create->attempt;
  }
  size_t need = strlen(name) + (ce->n ? 2 : 0);
  if (ce->len + need >= sizeof(ce->names)) {
    ce->more++;
    return;
  }
  ce->len += (size_t)snprintf(ce->names + ce->len, sizeof(ce->names) - ce->len, "%s%s",
                              ce->n ? ", " : "", name);
  ce->n++;
}

static void created_emit(pass *p, const created_events *ce) {
  if (!ce->first)
    return;
  if (ce->n + ce->more == 1) {
    emit(p, ce->first);
    return;
  }
  /* Best effort: kube_events_emit counts and logs a dropped Event. */
  ctrain_ignore(kube_events_emit(p->e->events, ce->first->object ? ce->first->object : p->jobref,
                                 ce->first->event_type, ce->first->reason,
                                 "Created pods: %s%s (attempt %d)", ce->names,
                                 ce->more ? " and more" : "", ce->attempt));
  if (ce->more)
    LOG_DEBUG("%s: %d pod names left out of the event", p->key, ce->more);
}

/* ---- the writes before the pods, at once ------------------------------------ */

/* The status, the Service, the NetworkPolicy, the token Secret and the
 * cluster ConfigMap (with the delete of the previous attempt's) do not
 * depend on one another: a pass sends them together, on the create pool,
 * then its pods (the Secret must exist before them, the status is recorded
 * before they change). A first pass so takes one round trip before its
 * pods instead of four. A status write that conflicts still stops the pass
 * before the pods; the creates sent with it are idempotent (AlreadyExists
 * counts as done), so the next pass, decided on the fresh job, finds them. */
static int is_prelude(recon_action_kind k) {
  return k == RECON_UPDATE_STATUS || k == RECON_CREATE_SERVICE ||
         k == RECON_CREATE_NETWORK_POLICY || k == RECON_CREATE_SECRET ||
         k == RECON_CREATE_CONFIGMAP || k == RECON_DELETE_CONFIGMAP;
}

typedef struct {
  pass *p;
  size_t *idx;     /* (n) action indices */
  ctrain_err *r;   /* (n) */
  kube_status *st; /* (n) */
} prelude_run;

static int prelude_one(void *ud, size_t k) {
  prelude_run *pr = ud;
  pass *p = pr->p;
  const recon_action *a = &p->res->actions[pr->idx[k]];
  kube_status *st = &pr->st[k];
  switch (a->kind) {
  case RECON_UPDATE_STATUS:
    pr->r[k] = write_status(p, a, st);
    break;
  case RECON_CREATE_SERVICE:
    pr->r[k] = exec_objects_create_service(p, a, st);
    break;
  case RECON_CREATE_NETWORK_POLICY:
    pr->r[k] = apply_network_policy(p, a, st);
    break;
  case RECON_CREATE_CONFIGMAP:
    pr->r[k] = exec_objects_create_configmap(p, a, st);
    break;
  case RECON_DELETE_CONFIGMAP:
    pr->r[k] = exec_objects_delete_configmap(p, a, st);
    break;
  default:
    pr->r[k] = exec_objects_write_secret(p, a, st);
    break;
  }
  return 0; /* one batch: a failure stops nothing */
}

/* Sends the prelude actions from `from` up to the first pod or delete
 * action, at once, and marks them handled. *result gets each failure (the
 * last wins, as in the pass); *conflict is set when the status write
 * conflicted. */
static void run_prelude(pass *p, size_t from, ctrain_err *result, int *conflict) {
  const recon_result *res = p->res;
  prelude_run pr = {.p = p};
  size_t n = 0, cap = res->n_actions - from;
  pr.idx = calloc(cap, sizeof(*pr.idx));
  pr.r = calloc(cap, sizeof(*pr.r));
  pr.st = calloc(cap, sizeof(*pr.st));
  if (!pr.idx || !pr.r || !pr.st) {
    *result = CTRAIN_E_NOMEM;
    *conflict = 1; /* send nothing after it, like a conflict */
    goto out;
  }
  for (size_t i = from; i < res->n_actions; i++) {
    recon_action_kind k = res->actions[i].kind;
    if (k == RECON_CREATE_POD || k == RECON_DELETE_POD || k == RECON_DELETE_JOB)
      break;
    if (is_prelude(k))
      pr.idx[n++] = i;
  }
  atomic_fetch_add(&p->e->metrics->creates_in_flight, (long)n);
  slowstart_run(p->e->create_pool, n, n, prelude_one, &pr);
  atomic_fetch_sub(&p->e->metrics->creates_in_flight, (long)n);
  for (size_t k = 0; k < n; k++) {
    const recon_action *a = &res->actions[pr.idx[k]];
    p->handled[pr.idx[k]] = 1;
    p->ok[pr.idx[k]] = pr.r[k] == CTRAIN_OK;
    if (!pr.r[k])
      continue;
    if (a->kind == RECON_CREATE_NETWORK_POLICY || a->kind == RECON_CREATE_CONFIGMAP) {
      /* The pods wait, and the next pass writes the Secret, the policy and
       * the ConfigMap again. */
      p->no_creates = 1;
      ctl_job_token_written(p->state, p->uid, 0);
    }
    if (a->kind == RECON_DELETE_CONFIGMAP)
      ctl_job_token_written(p->state, p->uid, 0); /* the next pass returns the delete again */
    if (a->kind == RECON_UPDATE_STATUS && pr.r[k] == CTRAIN_E_CONFLICT) {
      *conflict = 1; /* the rest was decided on a stale job */
      *result = pr.r[k];
      continue;
    }
    LOG_WARN("%s: %s %s: %s (HTTP %d %s: %s)", p->key, recon_action_kind_name(a->kind),
             a->name ? a->name : "", ctrain_strerror(pr.r[k]), pr.st[k].http_code, pr.st[k].reason,
             pr.st[k].message);
    *result = pr.r[k];
  }
out:
  free(pr.idx);
  free(pr.r);
  free(pr.st);
}

/* The pod creates and deletes from `from` on that were not sent: their
 * expectations are dropped. */
static void forget_unsent(pass *p, size_t from) {
  for (size_t i = from; i < p->res->n_actions; i++) {
    const recon_action *a = &p->res->actions[i];
    if (p->handled[i])
      continue;
    if (a->kind == RECON_CREATE_POD)
      ctl_job_creation_failed(p->state, a->name);
    else if (a->kind == RECON_DELETE_POD)
      ctl_job_deletion_failed(p->state, a->uid);
  }
}

/* ---- the pass ------------------------------------------------------------------ */

ctrain_err ctl_exec_run(const ctl_exec *e, const ctl_exec_kind *kind, ctl_job *state,
                        const char *key, const cJSON *job, const cJSON *jobref,
                        const recon_result *res, int64_t *requeue_after_s) {
  ctrain_err result = CTRAIN_OK;
  pass p = {.e = e,
            .kind = kind ? kind : &ctl_exec_kind_trainingjob,
            .state = state,
            .key = key,
            .job = job,
            .jobref = jobref,
            .res = res};
  p.ns = md_str(job, "namespace");
  p.uid = md_str(job, "uid");
  p.owner = (own_job){.ns = p.ns, .name = md_str(job, "name"), .uid = p.uid};
  podbuild_job_kind(job, &p.owner.api_version, &p.owner.kind);
  pthread_mutex_init(&p.mu, NULL);
  *requeue_after_s = -1;
  p.ok = calloc(res->n_actions + 1, sizeof(int));
  p.handled = calloc(res->n_actions + 1, sizeof(int));
  if (!p.ok || !p.handled) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  created_events ce = {0};
  for (size_t i = 0; i < res->n_actions; i++) {
    const recon_action *a = &res->actions[i];
    kube_status st;
    memset(&st, 0, sizeof(st));
    ctrain_err r = CTRAIN_OK;
    if (!p.handled[i] && is_prelude(a->kind)) {
      int conflict = 0;
      run_prelude(&p, i, &result, &conflict);
      if (conflict) {
        /* Nothing after it is sent: the pod creates and deletes the pass
         * decided are not in flight, so their expectations go, or the next
         * pass (on the fresh job) would wait for them until they expire. */
        forget_unsent(&p, i);
        goto out;
      }
    }
    if (p.handled[i])
      continue;
    if (a->kind != RECON_EVENT && a->kind != RECON_REQUEUE && exec_stopping(e)) {
      LOG_INFO("%s: pass cut short at action %zu of %zu: the controller is stopping", key, i,
               res->n_actions);
      result = CTRAIN_E_CANCELLED;
      break; /* the events of what was sent still go out */
    }
    switch (a->kind) {
    case RECON_UPDATE_STATUS:
    case RECON_CREATE_SERVICE:
    case RECON_CREATE_NETWORK_POLICY:
    case RECON_CREATE_SECRET:
    case RECON_CREATE_CONFIGMAP:
    case RECON_DELETE_CONFIGMAP:
      continue; /* sent and accounted for by run_prelude */
    case RECON_CREATE_POD:
      r = exec_pods_send_creates(&p, i);
      if (r && !result)
        result = r;
      continue; /* logged per pod */
    case RECON_DELETE_POD:
    case RECON_DELETE_JOB:
      r = exec_pods_delete(&p, a, &st);
      break;
    case RECON_EVENT:
      if (a->after >= 0 && (size_t)a->after < res->n_actions && !p.ok[a->after])
        continue;
      if (is_create_event(res, a))
        created_add(&ce, a, &res->actions[a->after]);
      else
        emit(&p, a);
      break;
    case RECON_REQUEUE:
      *requeue_after_s = a->seconds;
      break;
    case RECON_CREATE_WORKLOAD:
      r = exec_objects_create_workload(&p, a, &st);
      break;
    case RECON_REMOVE_FINALIZER:
      r = exec_pods_remove_finalizer(&p, a, &st);
      break;
    case RECON_UPDATE_WORKLOAD:
      r = exec_objects_update_workload(&p, a, &st);
      break;
    }
    p.ok[i] = r == CTRAIN_OK;
    if (r) {
      LOG_WARN("%s: %s %s: %s (HTTP %d %s: %s)", key, recon_action_kind_name(a->kind),
               a->name ? a->name : "", ctrain_strerror(r), st.http_code, st.reason, st.message);
      result = r;
    }
  }
  created_emit(&p, &ce);
  observe_job(&p);
  if (res->requeue_after_s >= 0 &&
      (*requeue_after_s < 0 || res->requeue_after_s < *requeue_after_s))
    *requeue_after_s = res->requeue_after_s;
  if (p.waited) {
    /* A name is taken: nothing of the attempt is known to exist (the next
     * pass writes the Secret, policy and ConfigMap again), the job shows
     * why (recon_input.waiting), and the pass is tried again with backoff,
     * or as soon as an event of its pods or objects brings the key back. */
    int delay = ctl_job_wait(state, p.uid, p.waiting);
    ctl_job_token_written(state, p.uid, 0);
    LOG_INFO("%s: waiting %d s: %s", key, delay, p.waiting);
    if (*requeue_after_s < 0 || delay < *requeue_after_s)
      *requeue_after_s = delay;
  } else if (p.creates && !result) {
    ctl_job_wait(state, p.uid, NULL);
  }
out:
  pthread_mutex_destroy(&p.mu);
  free(p.ok);
  free(p.handled);
  return result;
}
