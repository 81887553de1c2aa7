/* reconcile.c - the decision of the TrainingJob reconciler: one pass from
 * what was observed to the actions and the new status (see
 * controller/reconcile.h for the rules and how to execute the actions; the
 * parts it uses are listed in controller/recon_internal.h). */
#include "controller/recon_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/kube_time.h"

/* The cluster ConfigMap of the current attempt (what each pod's TF_CONFIG
 * references), and the delete of the previous attempt's, so a job keeps
 * one. Returned with the token Secret (same rules: deterministic content,
 * AlreadyExists is success, before the attempt's pods). */
static ctrain_err ensure_cluster(recon_ctx *c) {
  cJSON *cm = NULL;
  char name[256];
  ctrain_err result = podbuild_cluster_configmap(&c->js, c->attempt, &cm, c->errbuf, c->errlen);
  if (result)
    return result;
  int i = recon_push(c, RECON_CREATE_CONFIGMAP, cm, NULL, NULL);
  if (i < 0)
    return CTRAIN_E_NOMEM;
  c->res->actions[i].attempt = c->attempt;
  if (c->attempt < 2)
    return CTRAIN_OK;
  if (podbuild_cluster_name(c->name, c->attempt - 1, c->js.name_tag, name, sizeof(name)))
    return CTRAIN_E_INVAL;
  i = recon_push(c, RECON_DELETE_CONFIGMAP, NULL, name, NULL);
  if (i < 0)
    return CTRAIN_E_NOMEM;
  c->res->actions[i].attempt = c->attempt - 1;
  return CTRAIN_OK;
}

/* The token Secret of the current attempt, unless it is known to exist,
 * with the attempt's NetworkPolicy and cluster ConfigMap.
 * Its content is derived (never read back): creating it again after a
 * restart is harmless, AlreadyExists is success. */
static ctrain_err ensure_secret(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  cJSON *sec = NULL, *np = NULL;
  char tok[RECON_TOKEN_MAX];
  if (c->in->token_attempt == c->attempt)
    return CTRAIN_OK;
  result = c->in->token(c->in->token_ctx, c->uid, c->attempt, tok, sizeof(tok));
  if (result) {
    if (c->errbuf && c->errlen)
      snprintf(c->errbuf, c->errlen, "the job token of attempt %d: %s", c->attempt,
               ctrain_strerror(result));
    goto out;
  }
  result = podbuild_secret(&c->js, c->attempt, tok, &sec, c->errbuf, c->errlen);
  if (result)
    goto out;
  int i = recon_push(c, RECON_CREATE_SECRET, sec, NULL, NULL);
  sec = NULL;
  if (i < 0) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  c->res->actions[i].attempt = c->attempt;
  /* The attempt's NetworkPolicy goes with its Secret: written before the
   * attempt's pods, it admits only pods of this attempt to them. */
  result = podbuild_network_policy(&c->js, c->attempt,
                                   c->in->controller_ns ? c->in->controller_ns : "ctrain-system",
                                   &np, c->errbuf, c->errlen);
  if (result)
    goto out;
  i = recon_push(c, RECON_CREATE_NETWORK_POLICY, np, NULL, NULL);
  np = NULL;
  if (i < 0) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  c->res->actions[i].attempt = c->attempt;
  result = ensure_cluster(c);
out:
  memset(tok, 0, sizeof(tok));
  cJSON_Delete(sec);
  cJSON_Delete(np);
  return result;
}

/* Deletes pods that are not the desired pod of the current attempt: older
 * attempts of the collective, indexes past `replicas`, unknown names. One
 * whose node stopped reporting is deleted with gracePeriodSeconds 0 (its
 * kubelet cannot confirm), as is one still Terminating
 * RECON_FORCE_DELETE_AFTER_S past its deletionTimestamp: a lost node holds
 * the next attempt back a bounded time, never forever. */
static ctrain_err delete_strays(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  for (size_t k = 0; k < c->n_pods && !result; k++) {
    const obs_pod *p = &c->pods[k];
    int old = recon_is_collective(p->type) && p->attempt != c->attempt;
    if (!p->slot || old) {
      c->old_pods += old || recon_is_collective(p->type);
      if (p->node_lost)
        result = recon_force_delete_pod(c, p);
      else if (!p->deleting)
        result = recon_delete_pod(c, p);
      else if (p->delete_at && !p->grace0 &&
               c->in->now >= p->delete_at + RECON_FORCE_DELETE_AFTER_S)
        result = recon_force_delete_pod(c, p);
      else if (p->delete_at && !p->grace0)
        recon_requeue_at(c, p->delete_at + RECON_FORCE_DELETE_AFTER_S);
    }
  }
  return result;
}

/* Creates the missing pods: at most `burst` creates in flight (returned now
 * or still expected from earlier passes). Slow start is the executor's: it
 * sends these in batches 1, 2, 4, ... and gives up the rest after a failed
 * batch (reconcile.h). */
static ctrain_err create_pods(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  int pending = 0;
  for (size_t i = 0; i < c->x->n; i++)
    pending += !c->x->e[i].is_delete;
  const int burst = c->in->burst > 0 ? c->in->burst : RECON_DEFAULT_BURST;
  int budget = burst - pending;
  /* One attempt at a time: none of the next one starts while a pod of an
   * older one (or a stray collective pod) is still there, so no process of
   * it can meet the new pods under a name they share. */
  if (c->old_pods)
    return CTRAIN_OK;
  for (int t = 0; t < PODBUILD_NTYPES && budget > 0; t++)
    for (int i = 0; i < c->js.replicas[t] && budget > 0; i++) {
      char name[256];
      cJSON *pod = NULL;
      if (c->slots[t][i])
        continue; /* the name is taken: ours, or an older one going away */
      if (podbuild_pod_name(c->name, t, i, name, sizeof(name)))
        return CTRAIN_E_INVAL;
      if (recon_exp_pending_create(c->x, name))
        continue;
      result = podbuild_pod(&c->js, t, i, c->attempt, &pod, c->errbuf, c->errlen);
      if (!result)
        result = recon_kueue_pod(c, t, pod);
      if (result) {
        cJSON_Delete(pod);
        return result;
      }
      int idx = recon_push(c, RECON_CREATE_POD, pod, name, NULL);
      if (idx < 0)
        return CTRAIN_E_NOMEM;
      c->res->actions[idx].attempt = c->attempt;
      result = recon_exp_add(c->x, 0, name, NULL, c->attempt, c->in->now);
      if (!result)
        result = recon_event(c, "Normal", "SuccessfulCreatePod", idx,
                             "Created pod: %s (attempt %d)", name, c->attempt);
      if (result)
        return result;
      budget--;
    }
  return result;
}

/* Running when every collective pod of the attempt is up (Running, or
 * already Succeeded) and at least one runs. */
static ctrain_err update_running(recon_ctx *c) {
  int running = 0;
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++)
    for (int i = 0; i < c->js.replicas[t]; i++) {
      const obs_pod *p = c->slots[t][i];
      if (!p || p->deleting || p->attempt != c->attempt ||
          (p->phase != PH_RUNNING && p->phase != PH_SUCCEEDED))
        return CTRAIN_OK;
      running += p->phase == PH_RUNNING;
    }
  if (!running)
    return CTRAIN_OK;
  char msg[256];
  snprintf(msg, sizeof(msg), "TrainingJob %s is running (attempt %d)", c->name, c->attempt);
  ctrain_err result = recon_cond_set(c, C_RUNNING, 1, R_RUNNING, msg, NULL);
  if (!result)
    result = recon_cond_set(c, C_RESTARTING, 0, R_RUNNING, msg, NULL);
  return result;
}

/* A collective pod of the attempt that cannot start (its image is missing,
 * it does not fit any node) is named in the latest True condition of the
 * job (Created or Restarting: its reason becomes the pod's, e.g.
 * ErrImageNeverPull) and in a Warning event when that reason first shows.
 * The job keeps waiting, as the kubelet and the scheduler keep trying. */
static ctrain_err report_stuck(recon_ctx *c) {
  const obs_pod *p = NULL;
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER && !p; t++)
    for (int i = 0; i < c->js.replicas[t] && !p; i++) {
      const obs_pod *q = c->slots[t][i];
      if (q && !q->deleting && q->attempt == c->attempt && q->stuck_reason)
        p = q;
    }
  if (!p)
    return CTRAIN_OK;
  const char *type = recon_cond_true(c->status, C_RESTARTING) ? C_RESTARTING : C_CREATED;
  if (!recon_cond_true(c->status, type))
    return CTRAIN_OK;
  char msg[1024];
  if (p->stuck_container)
    snprintf(msg, sizeof(msg), "pod %s cannot start: container %s (image %s): %s: %s", p->name,
             p->stuck_container, p->stuck_image ? p->stuck_image : "?", p->stuck_reason,
             p->stuck_message ? p->stuck_message : "");
  else
    snprintf(msg, sizeof(msg), "pod %s cannot be scheduled: %s", p->name,
             p->stuck_message ? p->stuck_message : p->stuck_reason);
  const cJSON *old = recon_cond_find(c->old_status, type);
  const char *old_reason = ctrain_json_str(old, "reason");
  ctrain_err result = recon_cond_set(c, type, 1, p->stuck_reason, msg, NULL);
  if (!result && (!old_reason || strcmp(old_reason, p->stuck_reason)))
    result = recon_event(c, "Warning", p->stuck_reason, -1, "%s", msg);
  return result;
}

/* An invalid spec: nothing is created, the status says why. */
static ctrain_err mark_invalid(recon_ctx *c, const char *msg) {
  char full[1280], note[256];
  recon_runtime_note(c, note, sizeof(note));
  snprintf(full, sizeof(full), "%s%s", msg, note);
  ctrain_err result = recon_cond_set(c, C_FAILED, 1, R_INVALID, full, NULL);
  if (!result && !ctrain_json_str(c->status, "completionTime"))
    result = recon_set_time(c, "completionTime", c->in->now);
  c->invalid = 1;
  return result;
}

/* spec.suspend: every pod that has not Succeeded goes, the job is Suspended. */
static ctrain_err suspend(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  int changed = 0;
  for (size_t k = 0; k < c->n_pods && !result; k++)
    if (c->pods[k].phase != PH_SUCCEEDED)
      result = recon_delete_pod(c, &c->pods[k]);
  if (!result)
    result = recon_cond_set(c, C_SUSPENDED, 1, R_SUSPENDED, "TrainingJob is suspended", &changed);
  if (!result)
    result = recon_cond_set(c, C_RUNNING, 0, R_SUSPENDED, "TrainingJob is suspended", NULL);
  if (!result && changed)
    result = recon_event(c, "Normal", "Suspended", -1, "TrainingJob %s is suspended: pods deleted",
                         c->name);
  return result;
}

/* Resumed (or first seen): startTime, and the Created condition. The
 * deadline counts from the resume, as the Job controller does. */
static ctrain_err start(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  char msg[256];
  if (recon_cond_true(c->old_status, C_SUSPENDED)) {
    /* Resumed by spec.suspend, or admitted by Kueue (recon_kueue.c). */
    const char *why = c->js.queue ? "TrainingJob is admitted by Kueue" : "TrainingJob is resumed";
    result = recon_cond_set(c, C_SUSPENDED, 0, c->js.queue ? R_ADMITTED : R_RESUMED, why, NULL);
    if (!result)
      result = recon_set_time(c, "startTime", c->in->now);
    if (!result)
      result = recon_event(c, "Normal", c->js.queue ? "Admitted" : "Resumed", -1,
                           c->js.queue ? "TrainingJob %s is admitted by Kueue: creating pods"
                                       : "TrainingJob %s is resumed: recreating pods",
                           c->name);
    if (result)
      return result;
  }
  if (!ctrain_json_str(c->status, "startTime")) {
    result = recon_set_time(c, "startTime", c->in->now);
    if (result)
      return result;
  }
  snprintf(msg, sizeof(msg), "TrainingJob %s is created", c->name);
  return recon_cond_set(c, C_CREATED, 1, R_CREATED, msg, NULL);
}

/* The success policy held (`what` says how): Succeeded, then clean-up. */
static ctrain_err succeed(recon_ctx *c, const char *what) {
  int changed = 0, deleted = 0;
  char summary[512];
  ctrain_err result = recon_set_terminal(c, C_SUCCEEDED, R_SUCCEEDED, what, &changed);
  if (!result && changed)
    result = recon_event(c, "Normal", "Succeeded", -1, "TrainingJob %s succeeded: %s%s", c->name,
                         what, recon_result_summary(c, summary, sizeof(summary)));
  return result ? result : recon_finished(c, &deleted);
}

/* activeDeadlineSeconds from startTime: Failed when it passed (*done), else
 * a requeue when it will. */
static ctrain_err check_deadline(recon_ctx *c, int *done) {
  int64_t start = 0;
  int deleted = 0;
  char msg[256];
  *done = 0;
  if (c->js.active_deadline_s <= 0 ||
      kube_time_parse(ctrain_json_str(c->status, "startTime"), &start))
    return CTRAIN_OK;
  if (c->in->now < start + c->js.active_deadline_s) {
    recon_requeue_at(c, start + c->js.active_deadline_s);
    return CTRAIN_OK;
  }
  *done = 1;
  snprintf(msg, sizeof(msg), "TrainingJob was active longer than activeDeadlineSeconds %" PRId64,
           c->js.active_deadline_s);
  ctrain_err result = recon_fail_job(c, R_DEADLINE, msg, 1);
  return result ? result : recon_finished(c, &deleted);
}

/* Blocked: the executor met a name the job uses taken (recon_input.waiting);
 * False again once a pass's creates went through. */
static ctrain_err note_blocked(recon_ctx *c) {
  if (c->in->waiting)
    return recon_cond_set(c, C_BLOCKED, 1, R_NAME_TAKEN, c->in->waiting, NULL);
  if (recon_cond_true(c->old_status, C_BLOCKED))
    return recon_cond_set(c, C_BLOCKED, 0, R_NAMES_FREE, "the names the job uses are free", NULL);
  return CTRAIN_OK;
}

/* The headless Service (the NetworkPolicy is the attempt's: ensure_secret). */
static ctrain_err ensure_service(recon_ctx *c) {
  cJSON *svc = NULL;
  if (c->in->service)
    return CTRAIN_OK;
  ctrain_err result = podbuild_service(&c->js, &svc, c->errbuf, c->errlen);
  if (result)
    return result;
  return recon_push(c, RECON_CREATE_SERVICE, svc, NULL, NULL) < 0 ? CTRAIN_E_NOMEM : CTRAIN_OK;
}

/* Every pod of the job that is going (someone deleted it, or we did) loses
 * PODBUILD_FINALIZER: its end is accounted for by this pass, whose status,
 * when it changed, is written before (finish puts UPDATE_STATUS first, and
 * a conflict there stops the rest). */
static ctrain_err remove_finalizers(recon_ctx *c) {
  for (size_t k = 0; k < c->n_pods; k++) {
    const obs_pod *p = &c->pods[k];
    if (!p->deleting || p->finalizer < 0 || !p->uid)
      continue;
    int i = recon_push(c, RECON_REMOVE_FINALIZER, NULL, p->name, p->uid);
    if (i < 0)
      return CTRAIN_E_NOMEM;
    c->res->actions[i].index = p->finalizer;
  }
  return CTRAIN_OK;
}

/* The pass itself, after parsing, in the order of reconcile.h's rules. */
static ctrain_err decide(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  char msg[1024];
  int done = 0, deleted = 0;

  if (c->js.deleting)
    return CTRAIN_OK; /* the garbage collector takes the pods; finalizers go (remove_finalizers) */
  if (recon_cond_true(c->old_status, C_SUCCEEDED) || recon_cond_true(c->old_status, C_FAILED))
    return recon_finished(c, &deleted);
  result = recon_runtime_gate(c, &done);
  if (result || done)
    return result;
  if (c->in->invalid_spec)
    return mark_invalid(c, c->in->invalid_spec);
  if (c->spec_err == CTRAIN_E_CONFIG)
    return mark_invalid(c, c->spec_msg);
  result = recon_validate_budget(&c->js, msg, sizeof(msg));
  if (result == CTRAIN_E_CONFIG)
    return mark_invalid(c, msg);
  if (result)
    return result;
  /* 0: nothing polls, and the deadline is not enforced (recon_check_progress). */
  const int poll_s = c->in->progress_interval_s;
  if (poll_s > 0 && c->js.progress_deadline_s > 0 && c->js.progress_deadline_s < 2 * poll_s) {
    snprintf(msg, sizeof(msg),
             "spec.progressDeadlineSeconds: %lld is shorter than two progress polls (2 x %d s, "
             "the controller's --progress-interval)",
             (long long)c->js.progress_deadline_s, poll_s);
    return mark_invalid(c, msg);
  }
  if (c->js.suspend)
    return suspend(c);
  if (c->js.queue) {
    result = recon_kueue_gate(c, &done);
    if (result || done)
      return result;
  }
  result = start(c);
  if (result)
    return result;
  if (recon_succeeded(c, msg, sizeof(msg)))
    return succeed(c, msg);
  result = check_deadline(c, &done);
  if (result || done)
    return result;
  if (c->in->create_error) {
    /* The apiserver refuses the pods this spec makes: failed, as for an
     * invalid spec, but its pods (those it accepted) are cleaned up. */
    result = recon_fail_job(c, R_CREATE_FAILED, c->in->create_error, 1);
    return result ? result : recon_finished(c, &deleted);
  }
  const int attempt = c->attempt;
  result = recon_handle_failures(c, &done);
  if (!result && !done && attempt == c->attempt)
    result = recon_check_progress(c, &done);
  if (result)
    return result;
  if (done)
    return recon_finished(c, &deleted);

  result = note_blocked(c);
  if (!result)
    result = ensure_service(c);
  if (!result)
    result = ensure_secret(c);
  if (!result)
    result = delete_strays(c);
  if (!result)
    result = create_pods(c);
  if (!result)
    result = update_running(c);
  if (!result)
    result = report_stuck(c);
  return result;
}

/* The job, its spec parsed once for the pass: every part reads c->js. The
 * verdict waits in spec_err for decide (a finished job is not judged). */
static ctrain_err parse_job(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  char *errbuf = c->errbuf;
  size_t errlen = c->errlen;
  c->job = c->in->job;
  c->old_status = ctrain_json_get(c->job, "status");
  c->spec_err = jobspec_parse(c->job, &c->js, c->spec_msg, sizeof(c->spec_msg));
  c->js.name_tag = c->in->name_tag;
  c->name = c->js.name;
  c->ns = c->js.ns;
  c->uid = c->js.uid;
  if (!c->name || !c->ns || !c->uid)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "recon: the TrainingJob has no metadata.name, namespace or uid");
  if (c->spec_err && c->spec_err != CTRAIN_E_CONFIG)
    CTRAIN_FAIL(c->spec_err, "recon: %s", c->spec_msg);
  c->wl_state = kueue_workload_state(c->in->workload);
out:
  return result;
}

/* The current attempt: the status, or what we decided and the cache has
 * not shown yet, or the newest pod. */
static void current_attempt(recon_ctx *c) {
  const recon_expectations *x = c->x;
  c->attempt = (int)ctrain_json_int(c->old_status, "attempt", 1);
  c->restarts = (int)ctrain_json_int(c->old_status, "restarts", 0);
  c->disruptions = (int)ctrain_json_int(c->old_status, "disruptions", 0);
  if (c->attempt < 1)
    c->attempt = 1;
  if (x->attempt > c->attempt) {
    c->attempt = x->attempt;
    if (x->restarts > c->restarts)
      c->restarts = x->restarts;
    if (x->disruptions > c->disruptions)
      c->disruptions = x->disruptions;
  }
  for (size_t k = 0; k < c->n_pods; k++)
    if (recon_is_collective(c->pods[k].type) && c->pods[k].attempt > c->attempt)
      c->attempt = c->pods[k].attempt;
}

/* The end of a pass that keeps its actions: a requeue for the earliest
 * expectation that may expire, the status first when it changed (so a
 * decision, a new attempt or a terminal state, is recorded before the pods
 * change), the requeue last. */
static ctrain_err finish(recon_ctx *c, int64_t exp_next) {
  recon_result *res = c->res;
  if (exp_next != INT64_MAX && c->x->n && !c->invalid)
    recon_requeue_at(c, exp_next);
  cJSON *empty = c->old_status ? NULL : cJSON_CreateObject();
  if (!c->old_status && !empty)
    return CTRAIN_E_NOMEM;
  int differs = !cJSON_Compare(c->old_status ? c->old_status : empty, c->status, 1);
  cJSON_Delete(empty);
  if (differs && recon_result_status_first(c))
    return CTRAIN_E_NOMEM;
  if (c->requeue >= 0) {
    int i = recon_push(c, RECON_REQUEUE, NULL, NULL, NULL);
    if (i < 0)
      return CTRAIN_E_NOMEM;
    res->actions[i].seconds = c->requeue;
    res->requeue_after_s = c->requeue;
  }
  return CTRAIN_OK;
}

/* Refuses a result that still holds a pass: zeroing it would leak its
 * actions and status. */
static ctrain_err check_args(const recon_input *in, const recon_expectations *x,
                             const recon_result *res, char *errbuf, size_t errlen) {
  const char *why = NULL;
  if (!res)
    why = "result is required";
  else if (res->actions || res->n_actions || res->status)
    why = "result not empty (recon_result_free it first)";
  else if (!in || !in->job || !x)
    why = "job and expectations are required";
  else if (!in->token)
    why = "a token callback is required";
  if (why && errbuf && errlen)
    snprintf(errbuf, errlen, "recon_reconcile: %s", why);
  return why ? CTRAIN_E_INVAL : CTRAIN_OK;
}

ctrain_err recon_reconcile(const recon_input *in, recon_expectations *x, recon_result *res,
                           char *errbuf, size_t errlen) {
  ctrain_err result;
  recon_ctx c;
  if (errbuf && errlen)
    errbuf[0] = '\0';
  /* Checked before anything is touched: `out` frees `res` on failure and
   * must not free what the caller still owns. */
  result = check_args(in, x, res, errbuf, errlen);
  if (result)
    return result;
  memset(&c, 0, sizeof(c));
  memset(res, 0, sizeof(*res));
  res->requeue_after_s = -1;
  c.in = in;
  c.x = x;
  c.res = res;
  c.errbuf = errbuf;
  c.errlen = errlen;
  c.requeue = -1;
  /* What this pass adds to the expectations is undone when its actions are
   * not returned (an error, or the job itself is to be deleted). */
  size_t exp_mark = 0;
  int exp_attempt = x->attempt, exp_restarts = x->restarts, exp_marked = 0;
  int64_t exp_next = INT64_MAX;

  result = parse_job(&c);
  if (!result)
    result = recon_observe(&c);
  if (result)
    goto out;
  exp_next = recon_exp_observe(&c);
  exp_mark = x->n;
  exp_marked = 1;
  current_attempt(&c);
  result = recon_init_status(&c);
  if (!result)
    result = recon_progress_init(&c);
  if (!result)
    result = decide(&c);
  if (!result)
    result = remove_finalizers(&c);
  if (!result)
    result = recon_progress_apply(&c);
  if (!result)
    result = recon_kueue_finish(&c);
  if (result)
    goto out;
  int delete_job = 0;
  for (size_t i = 0; i < res->n_actions; i++)
    delete_job |= res->actions[i].kind == RECON_DELETE_JOB;
  result = recon_fill_counts(&c);
  if (result)
    goto out;
  if (delete_job) {
    /* A job about to be deleted needs nothing else. */
    recon_result_keep_delete_job(res);
    x->n = exp_mark;
  } else {
    result = finish(&c, exp_next);
    if (result)
      goto out;
  }
  res->attempt = c.attempt;
  res->status = c.status;
  c.status = NULL;
out:
  if (result == CTRAIN_E_NOMEM && errbuf && errlen && !errbuf[0])
    snprintf(errbuf, errlen, "recon: out of memory");
  if (result) {
    recon_result_free(res);
    if (exp_marked && x->n >= exp_mark) {
      x->n = exp_mark;
      x->attempt = exp_attempt;
      x->restarts = exp_restarts;
    }
  }
  cJSON_Delete(c.status);
  for (int t = 0; t < PODBUILD_NTYPES; t++)
    free(c.slots[t]);
  free(c.pods);
  return result;
}
