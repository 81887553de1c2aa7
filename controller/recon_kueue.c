/* recon_kueue.c - admission by Kueue in the reconcile pass: the job's
 * Workload, the gate that holds its pods until the Workload is admitted,
 * and Finished when the job ends (controller/reconcile.h lists the rules,
 * controller/kueue.h the Workload). Pure, as the rest of the pass. */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"

#define R_WAITING "WaitingForAdmission"
#define R_EVICTED "EvictedByKueue"

/* Deletes every pod that has not Succeeded; *left: pods (not Succeeded)
 * still there, going or not. */
static ctrain_err stop_pods(recon_ctx *c, int *left) {
  *left = 0;
  for (size_t k = 0; k < c->n_pods; k++) {
    if (c->pods[k].phase == PH_SUCCEEDED)
      continue;
    (*left)++;
    ctrain_err result = recon_delete_pod(c, &c->pods[k]);
    if (result)
      return result;
  }
  return CTRAIN_OK;
}

/* The job waits: Suspended with `reason` and `msg`, Running False, an
 * event when it starts waiting. */
static ctrain_err wait_for(recon_ctx *c, const char *reason, const char *msg) {
  int changed = 0;
  ctrain_err result = recon_cond_set(c, C_SUSPENDED, 1, reason, msg, &changed);
  if (!result)
    result = recon_cond_set(c, C_RUNNING, 0, reason, msg, NULL);
  if (!result && changed)
    result = recon_event(c, "Normal", reason, -1, "%s", msg);
  return result;
}

static ctrain_err create_workload(recon_ctx *c, const char *name) {
  cJSON *wl = NULL;
  ctrain_err result = kueue_workload_build(&c->js, &wl, c->errbuf, c->errlen);
  if (result)
    return result;
  int i = recon_push(c, RECON_CREATE_WORKLOAD, wl, NULL, NULL);
  if (i < 0)
    return CTRAIN_E_NOMEM;
  return recon_event(c, "Normal", "CreatedWorkload", i, "Created Workload %s in LocalQueue %s",
                     name, c->js.queue);
}

/* Evicted: the pods go; once none is left the quota reservation is
 * released, so Kueue queues the Workload again. */
static ctrain_err evicted(recon_ctx *c, const char *wl_name) {
  int left = 0;
  char msg[1024];
  ctrain_err result = stop_pods(c, &left);
  if (result)
    return result;
  const char *why = kueue_condition_message(c->in->workload, "Evicted");
  snprintf(msg, sizeof(msg), "Workload %s was evicted by Kueue (%s); waiting for admission again",
           wl_name, why ? why : "no reason given");
  if (!left) {
    cJSON *upd = NULL;
    result = kueue_workload_release(c->in->workload, c->in->now, &upd);
    if (result)
      return result;
    if (recon_push(c, RECON_UPDATE_WORKLOAD, upd, NULL, NULL) < 0)
      return CTRAIN_E_NOMEM;
  }
  return wait_for(c, R_EVICTED, msg);
}

ctrain_err recon_kueue_gate(recon_ctx *c, int *gated) {
  char name[KUEUE_NAME_MAX], msg[1024];
  int left = 0;
  ctrain_err result = CTRAIN_OK;
  *gated = c->wl_state != KUEUE_ADMITTED;
  if (!*gated)
    return CTRAIN_OK;
  if (kueue_workload_name(c->name, name, sizeof(name)))
    return CTRAIN_E_INVAL; /* recon_validate bounds the name */
  if (c->wl_state == KUEUE_EVICTED)
    return evicted(c, name);
  if (c->wl_state == KUEUE_ABSENT) {
    result = create_workload(c, name);
    if (result)
      return result;
  }
  result = stop_pods(c, &left);
  if (result)
    return result;
  const char *why = kueue_condition_message(c->in->workload, "QuotaReserved");
  snprintf(msg, sizeof(msg), "waiting for Kueue to admit Workload %s (LocalQueue %s)%s%s", name,
           c->js.queue, why && *why ? ": " : "", why && *why ? why : "");
  return wait_for(c, R_WAITING, msg);
}

ctrain_err recon_kueue_finish(recon_ctx *c) {
  cJSON *upd = NULL;
  if (!c->js.queue || !c->in->workload || c->wl_state == KUEUE_FINISHED)
    return CTRAIN_OK;
  int ok = recon_cond_true(c->status, C_SUCCEEDED);
  if (!ok && !recon_cond_true(c->status, C_FAILED))
    return CTRAIN_OK;
  const char *msg =
      ctrain_json_str(recon_cond_find(c->status, ok ? C_SUCCEEDED : C_FAILED), "message");
  ctrain_err result = kueue_workload_finished(c->in->workload, ok, msg, c->in->now, &upd);
  if (result)
    return result;
  return recon_push(c, RECON_UPDATE_WORKLOAD, upd, NULL, NULL) < 0 ? CTRAIN_E_NOMEM : CTRAIN_OK;
}

ctrain_err recon_kueue_pod(recon_ctx *c, int t, cJSON *pod) {
  if (!c->js.queue || !c->in->workload)
    return CTRAIN_OK;
  return kueue_pod_apply(c->in->workload, podbuild_type_label((podbuild_type)t), pod);
}
