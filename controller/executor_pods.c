/* executor_pods.c - a pass's pods: the creates with slow start, the
 * deletes (and the job's), the finalizer removals; see
 * controller/executor_int.h. */
#include "controller/executor_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/podbuild.h"
#include "ctrain/log.h"

/* ---- pod creates with slow start ------------------------------------------- */

typedef struct {
  ctrain_err result;
  int existed; /* AlreadyExists: 1 the job's own, 2 a name taken (exec_name_taken) */
  kube_status st;
} create_out;

typedef struct pass pass_t;

typedef struct {
  pass_t *p;
  const ctl_exec *e;
  const char *ns;
  const recon_action **acts; /* (n) the creates, in list order */
  create_out *out;           /* (n) */
} create_run;

static int create_one(void *ud, size_t i) {
  create_run *r = ud;
  create_out *o = &r->out[i];
  if (exec_stopping(r->e)) {
    o->result = CTRAIN_E_CANCELLED; /* counted as not sent: slow start stops after this batch */
    return 1;
  }
  const recon_action *a = r->acts[i];
  o->result = a->body ? kube_client_create_text(r->e->client, &KUBE_GVR_PODS, r->ns, a->body, NULL,
                                                NULL, &o->st)
                      : kube_client_create(r->e->client, &KUBE_GVR_PODS, r->ns, a->object, NULL,
                                           NULL, &o->st);
  if (already_exists(o->result, &o->st)) {
    ctrain_err gerr = CTRAIN_OK;
    taken t = exec_name_taken(r->p, &KUBE_GVR_PODS, "pod", r->acts[i]->name, NULL, &o->st, &gerr);
    o->result = t == TAKEN_ERROR ? gerr : CTRAIN_OK;
    o->existed = t == TAKEN_MINE ? 1 : 2;
  }
  return o->result != CTRAIN_OK || o->existed == 2; /* a taken name: no more batches */
}

int ctl_exec_create_permanent(int http_code) {
  return http_code == 400 || http_code == 413 || http_code == 422;
}

/* What one sent create came to: counts, expectations, log, event; a
 * permanent refusal goes to the job's state for the next pass. */
static ctrain_err create_done(pass *p, const recon_action *a, const create_out *o, int *ok) {
  ctl_metrics *m = p->e->metrics;
  if (o->result == CTRAIN_E_CANCELLED) {
    ctl_job_creation_failed(p->state, a->name); /* never sent: the controller is stopping */
    return o->result;
  }
  if (o->result) {
    atomic_fetch_add(&m->pod_create_errors, 1);
    ctl_job_creation_failed(p->state, a->name);
    char msg[1400];
    snprintf(msg, sizeof(msg), "Error creating pod %s: %s (HTTP %d %s: %s)", a->name,
             ctrain_strerror(o->result), o->st.http_code, o->st.reason, o->st.message);
    LOG_WARN("%s: %s", p->key, msg);
    /* Best effort: kube_events_emit counts and logs a dropped Event. */
    ctrain_ignore(
        kube_events_emit(p->e->events, p->jobref, "Warning", "FailedCreatePod", "%s", msg));
    if (ctl_exec_create_permanent(o->st.http_code)) {
      snprintf(msg, sizeof(msg), "the apiserver refuses pod %s (HTTP %d %s): %s", a->name,
               o->st.http_code, o->st.reason, o->st.message);
      ctl_job_create_refused(p->state, p->uid, msg);
    }
    return o->result;
  }
  if (o->existed == 2) {
    /* The name is taken (exec_name_taken): not created, never counted as such. */
    ctl_job_creation_failed(p->state, a->name);
    return CTRAIN_OK;
  }
  if (o->existed) {
    /* ours, not created by this call: no "created" event */
    LOG_INFO("%s: pod %s already exists and is the job's (cache behind the apiserver)", p->key,
             a->name);
    return CTRAIN_OK;
  }
  *ok = 1;
  atomic_fetch_add(&m->pods_created, 1);
  LOG_INFO("%s: created pod %s (attempt %d)", p->key, a->name, a->attempt);
  return CTRAIN_OK;
}

/* The creates go in batches of 1, 2, 4, ... (slowstart_run); see
 * controller/executor_int.h. */
ctrain_err exec_pods_send_creates(pass *p, size_t from) {
  ctrain_err result = CTRAIN_OK;
  const recon_result *res = p->res;
  create_run run = {.p = p, .e = p->e, .ns = p->ns};
  size_t n = 0, sent = 0;
  int give_up = p->no_creates;
  size_t *idx = calloc(res->n_actions, sizeof(*idx));
  run.acts = calloc(res->n_actions, sizeof(*run.acts));
  run.out = calloc(res->n_actions, sizeof(*run.out));
  if (!idx || !run.acts || !run.out) {
    result = CTRAIN_E_NOMEM;
    give_up = 1;
  }
  for (size_t i = from; i < res->n_actions; i++) {
    if (res->actions[i].kind != RECON_CREATE_POD)
      continue;
    p->handled[i] = 1;
    p->ok[i] = 0;
    if (idx) {
      idx[n] = i;
      run.acts[n] = &res->actions[i];
    }
    n++;
  }
  if (!give_up) {
    pass_sent(p);
    atomic_fetch_add(&p->e->metrics->creates_in_flight, (long)n);
    sent = slowstart_run(p->e->create_pool, n, 1, create_one, &run);
    atomic_fetch_sub(&p->e->metrics->creates_in_flight, (long)n);
  }
  for (size_t k = 0; k < sent; k++) {
    ctrain_err r = create_done(p, run.acts[k], &run.out[k], &p->ok[idx[k]]);
    if (r && !result)
      result = r;
  }
  if (sent < n) {
    /* Given up: the next pass (this key is requeued with backoff) returns them again. */
    for (size_t i = from, k = 0; i < res->n_actions; i++)
      if (res->actions[i].kind == RECON_CREATE_POD && k++ >= sent)
        ctl_job_creation_failed(p->state, res->actions[i].name);
    atomic_fetch_add(&p->e->metrics->pod_creates_skipped, (long)(n - sent));
    LOG_INFO("%s: %zu of %zu pod creates not sent (%s)", p->key, n - sent, n,
             p->waited ? "a name the job uses is taken"
             : give_up ? "no token Secret"
                       : "slow start stopped after a failed batch");
    if (!result && !p->waited)
      result = CTRAIN_E_CANCELLED; /* a wait is retried by its own requeue (ctl_exec_run) */
  }
  free(idx);
  free(run.acts);
  free(run.out);
  return result;
}

/* ---- deletes and finalizers ------------------------------------------------ */

static ctrain_err finalizer_patch(const ctl_exec *e, const char *ns, const char *name,
                                  const char *uid, int index, kube_status *st) {
  char patch[512];
  snprintf(patch, sizeof(patch),
           "[{\"op\":\"test\",\"path\":\"/metadata/uid\",\"value\":\"%s\"},"
           "{\"op\":\"test\",\"path\":\"/metadata/finalizers/%d\",\"value\":\"%s\"},"
           "{\"op\":\"remove\",\"path\":\"/metadata/finalizers/%d\"}]",
           uid, index, PODBUILD_FINALIZER, index);
  memset(st, 0, sizeof(*st));
  return kube_client_patch(e->client, &KUBE_GVR_PODS, ns, name, NULL, KUBE_PATCH_JSON, patch, NULL,
                           NULL, st);
}

/* Removes PODBUILD_FINALIZER from a pod that is going, by a JSON patch that
 * first tests the uid and the finalizer at its index. NotFound is done. A
 * failed test (422: the cache was behind) reads the pod: another pod of
 * that name, or ours without the finalizer (an earlier pass removed it), is
 * done; ours with it at another index is patched again at that index. */
ctrain_err ctl_exec_remove_finalizer(const ctl_exec *e, const char *ns, const char *name,
                                     const char *uid, int index, kube_status *st) {
  ctrain_err r = finalizer_patch(e, ns, name, uid, index, st);
  if (r == CTRAIN_E_INVAL) {
    cJSON *pod = NULL;
    kube_status gs = {0};
    ctrain_err g = kube_client_get(e->client, &KUBE_GVR_PODS, ns, name, &pod, &gs);
    int at = podbuild_finalizer_index(pod);
    const char *now_uid = md_str(pod, "uid");
    if (g == CTRAIN_E_NOTFOUND || (!g && (!now_uid || strcmp(now_uid, uid) || at < 0)))
      r = CTRAIN_OK; /* gone, another pod, or released already */
    else if (!g && at != index)
      r = finalizer_patch(e, ns, name, uid, at, st);
    cJSON_Delete(pod);
  }
  return r == CTRAIN_E_NOTFOUND ? CTRAIN_OK : r;
}

ctrain_err exec_pods_remove_finalizer(pass *p, const recon_action *a, kube_status *st) {
  ctrain_err r = ctl_exec_remove_finalizer(p->e, p->ns, a->name, a->uid, a->index, st);
  if (!r)
    LOG_INFO("%s: pod %s: finalizer %s removed", p->key, a->name, PODBUILD_FINALIZER);
  return r;
}

ctrain_err exec_pods_delete(pass *p, const recon_action *a, kube_status *st) {
  kube_delete_opts d = {.precondition_uid = a->uid,
                        .grace_period_seconds = a->force ? 0 : -1,
                        .propagation_policy = "Background"};
  int pod = a->kind == RECON_DELETE_POD;
  const kube_gvr *g = pod ? &KUBE_GVR_PODS : p->kind->gvr;
  ctrain_err r = kube_client_delete(p->e->client, g, p->ns, a->name, &d, NULL, st);
  if (r == CTRAIN_E_NOTFOUND)
    r = CTRAIN_OK;
  if (r && pod)
    ctl_job_deletion_failed(p->state, a->uid);
  if (!r) {
    if (pod)
      atomic_fetch_add(&p->e->metrics->pods_deleted, 1);
    LOG_INFO("%s: deleted %s %s%s", p->key, pod ? "pod" : p->kind->noun, a->name,
             a->force ? " (gracePeriodSeconds 0)" : "");
  }
  return r;
}
