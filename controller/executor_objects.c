/* executor_objects.c - the writes of a job's objects besides its pods
 * and its NetworkPolicy: the Service, the token Secret, the cluster
 * ConfigMap and the Kueue Workload; see controller/executor_int.h. */
#include "controller/executor_int.h"

#include "ctrain/log.h"

/* Creates `a->object`, a `what` (of `g`). AlreadyExists asks exec_name_taken
 * whose it is: the job's is done, anyone else's makes the pods wait. *sent
 * (optional) is set when the apiserver answered the create itself, not
 * exec_name_taken's read. */
static ctrain_err create_owned(pass *p, const kube_gvr *g, const char *what, const recon_action *a,
                               kube_status *st, int *sent) {
  const char *name = md_str(a->object, "name");
  pass_sent(p);
  ctrain_err r = kube_client_create(p->e->client, g, p->ns, a->object, NULL, NULL, st);
  if (sent)
    *sent = !already_exists(r, st);
  if (already_exists(r, st)) {
    ctrain_err gerr = CTRAIN_OK;
    taken t = exec_name_taken(p, g, what, name, NULL, st, &gerr);
    if (t == TAKEN_MINE)
      LOG_INFO("%s: %s %s already exists", p->key, what, name);
    return t == TAKEN_ERROR ? gerr : CTRAIN_OK;
  }
  if (!r)
    LOG_INFO("%s: created %s %s", p->key, what, name);
  return r;
}

ctrain_err exec_objects_create_service(pass *p, const recon_action *a, kube_status *st) {
  return create_owned(p, &KUBE_GVR_SERVICES, "Service", a, st, NULL);
}

/* The attempt's token Secret. Its content derives from the job uid and the
 * attempt, so one that already exists was written by an earlier pass (or
 * process) and counts as success; nothing is read back. A failure leaves
 * the pods of the pass unsent: they could not start without it. */
ctrain_err exec_objects_write_secret(pass *p, const recon_action *a, kube_status *st) {
  pass_sent(p);
  ctrain_err r =
      kube_client_create(p->e->client, &KUBE_GVR_SECRETS, p->ns, a->object, NULL, NULL, st);
  if (!r || r == CTRAIN_E_CONFLICT) {
    LOG_INFO("%s: secret %s %s", p->key, md_str(a->object, "name"),
             r ? "is there (an earlier pass created it)" : "created");
    ctl_job_token_written(p->state, p->uid, a->attempt);
    return CTRAIN_OK;
  }
  p->no_creates = 1;
  return r;
}

/* The attempt's cluster ConfigMap (what TF_CONFIG references): like the
 * Secret, deterministic, AlreadyExists is success, and a failure leaves
 * the pods of the pass unsent (their containers could not start) and
 * forgets the Secret's attempt, so the next pass writes both again. */
ctrain_err exec_objects_create_configmap(pass *p, const recon_action *a, kube_status *st) {
  const char *name = md_str(a->object, "name");
  pass_sent(p);
  ctrain_err r =
      kube_client_create(p->e->client, &KUBE_GVR_CONFIGMAPS, p->ns, a->object, NULL, NULL, st);
  if (!r || already_exists(r, st)) {
    LOG_INFO("%s: configmap %s %s", p->key, name,
             r ? "is there (an earlier pass created it)" : "created");
    return CTRAIN_OK;
  }
  p->no_creates = 1;
  /* Best effort: kube_events_emit counts and logs a dropped Event. */
  ctrain_ignore(kube_events_emit(
      p->e->events, p->jobref, "Warning", "FailedCreateConfigMap",
      "Error creating ConfigMap %s for attempt %d (its pods wait): %s (HTTP %d %s: %s)", name,
      a->attempt, ctrain_strerror(r), st->http_code, st->reason, st->message));
  return r;
}

/* The previous attempt's cluster ConfigMap; NotFound is done. */
ctrain_err exec_objects_delete_configmap(pass *p, const recon_action *a, kube_status *st) {
  kube_delete_opts d = {.grace_period_seconds = -1, .propagation_policy = "Background"};
  ctrain_err r =
      kube_client_delete(p->e->client, &KUBE_GVR_CONFIGMAPS, p->ns, a->name, &d, NULL, st);
  if (r == CTRAIN_E_NOTFOUND)
    r = CTRAIN_OK;
  if (!r)
    LOG_INFO("%s: deleted configmap %s (attempt %d)", p->key, a->name, a->attempt);
  return r;
}

/* The job's Kueue Workload: AlreadyExists is success (an earlier pass made
 * it). A failure (no Kueue CRD, RBAC) is a Warning event on the job, whose
 * pods stay uncreated, and the pass is retried with backoff. */
ctrain_err exec_objects_create_workload(pass *p, const recon_action *a, kube_status *st) {
  int sent = 0;
  ctrain_err r = create_owned(p, &ctl_exec_gvr_workloads, "Workload", a, st, &sent);
  if (r && sent) {
    /* Best effort: kube_events_emit counts and logs a dropped Event. */
    ctrain_ignore(kube_events_emit(p->e->events, p->jobref, "Warning", "FailedCreateWorkload",
                                   "Error creating Kueue Workload %s: %s (HTTP %d %s: %s)",
                                   md_str(a->object, "name"), ctrain_strerror(r), st->http_code,
                                   st->reason, st->message));
  }
  return r;
}

/* PUTs the Workload's new status (Finished, or its quota released); its
 * resourceVersion makes a write on a stale cache conflict. */
ctrain_err exec_objects_update_workload(pass *p, const recon_action *a, kube_status *st) {
  ctrain_err r = kube_client_update_status(p->e->client, &ctl_exec_gvr_workloads, p->ns, a->object,
                                           NULL, NULL, st);
  if (!r)
    LOG_INFO("%s: workload %s status written", p->key, md_str(a->object, "name"));
  return r;
}
