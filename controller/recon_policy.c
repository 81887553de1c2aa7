/* recon_policy.c - the policies of a TrainingJob: restartPolicy (which
 * failure ends the attempt, gang restart or Failed; spec.failurePolicy's
 * rules first, recon_failrules.c), successPolicy, cleanPodPolicy and
 * ttlSecondsAfterFinished. */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/kube_time.h"

/* What a finished job still does: cleanPodPolicy, then TTL. Sets *deleted
 * when the TTL expired and the job is to be deleted. */
ctrain_err recon_finished(recon_ctx *c, int *deleted) {
  ctrain_err result = CTRAIN_OK;
  *deleted = 0;
  if (c->js.ttl_s >= 0) {
    int64_t base = 0;
    if (kube_time_parse(ctrain_json_str(c->status, "completionTime"), &base)) {
      const char *ty = recon_cond_true(c->status, C_SUCCEEDED) ? C_SUCCEEDED : C_FAILED;
      if (kube_time_parse(ctrain_json_str(recon_cond_find(c->status, ty), "lastTransitionTime"),
                          &base))
        base = c->in->now;
    }
    if (c->in->now >= base + c->js.ttl_s) {
      *deleted = 1;
      return recon_push(c, RECON_DELETE_JOB, NULL, c->name, c->uid) < 0 ? CTRAIN_E_NOMEM
                                                                        : CTRAIN_OK;
    }
    recon_requeue_at(c, base + c->js.ttl_s);
  }
  for (size_t k = 0; k < c->n_pods && c->js.clean != CLEAN_NONE; k++) {
    const obs_pod *p = &c->pods[k];
    if (c->js.clean == CLEAN_RUNNING && p->phase != PH_PENDING && p->phase != PH_RUNNING &&
        p->phase != PH_UNKNOWN)
      continue;
    result = recon_delete_pod(c, p);
    if (result)
      return result;
  }
  return result;
}

/* Marks the job Failed with `reason`/`message`. */
ctrain_err recon_fail_job(recon_ctx *c, const char *reason, const char *message, int emit) {
  ctrain_err result;
  int changed = 0;
  result = recon_set_terminal(c, C_FAILED, reason, message, &changed);
  if (!result && changed && emit)
    result = recon_event(c, "Warning", "Failed", -1, "%s", message);
  return result;
}

static int retries(restart_policy pol, ctrain_exit_class cls) {
  switch (pol) {
  case POL_EXIT_CODE:
    return cls == CTRAIN_EXIT_CLASS_RETRYABLE;
  case POL_ON_FAILURE:
    return cls == CTRAIN_EXIT_CLASS_RETRYABLE || cls == CTRAIN_EXIT_CLASS_OTHER;
  default:
    return 0;
  }
}

/* A pod that failed without an exit code was evicted or lost its node:
 * retryable, like a signal. */
static ctrain_exit_class pod_class(const obs_pod *p) {
  return p->exit_code < 0 ? CTRAIN_EXIT_CLASS_RETRYABLE : ctrain_exit_classify(p->exit_code);
}

void recon_describe_failure(const obs_pod *p, char *buf, size_t len) {
  if (p->exit_code >= 0)
    snprintf(buf, len, "pod %s failed with exit code %d (%s)%s", p->name, p->exit_code,
             p->reason ? p->reason : "Error", p->deleting ? " after it was deleted" : "");
  else if (p->deleting)
    snprintf(buf, len, "pod %s was deleted before it finished", p->name);
  else
    snprintf(buf, len, "pod %s failed without an exit code (%s)", p->name,
             p->reason ? p->reason : "Unknown");
}

/* How likely a failure is the cause of the attempt's end rather than a
 * consequence of it, at equal finish times: a pod killed (a signal, OOMKilled)
 * or deleted/evicted (no exit code) first; then one that exited with an
 * error of its own; last one that exited 75, which by contract means it lost
 * a peer. */
static int cause_rank(const obs_pod *p) {
  if (p->exit_code < 0 || p->exit_code >= 128)
    return 0;
  return p->exit_code == CTRAIN_EXIT_TEMPFAIL ? 2 : 1;
}

/* Whether failure a is more likely the cause than b: it finished earlier
 * (finishedAt has one-second resolution; unknown, as for a deleted pod, counts
 * as earliest), or at the same second with a lower cause_rank. */
static int cause_before(const obs_pod *a, const obs_pod *b) {
  if (a->finished != b->finished)
    return a->finished < b->finished;
  return cause_rank(a) < cause_rank(b);
}

/* Pod status reasons the kubelet gives a pod it ended for the node's sake
 * (node-pressure eviction, preemption, node shutdown) rather than its own. */
static int disruption_reason(const char *r) {
  static const char *const rs[] = {"Evicted",  "Preempting",   "NodeLost",
                                   "Shutdown", "NodeShutdown", "Terminated"};
  for (size_t i = 0; r && i < sizeof(rs) / sizeof(rs[0]); i++)
    if (!strcmp(r, rs[i]))
      return 1;
  return 0;
}

/* Whether pod `p` of the current attempt ended, and whether by a
 * disruption (evicted, preempted, deleted by someone else, its node lost)
 * rather than a failure of its own; its description in `what`. */
static int pod_ended(recon_ctx *c, obs_pod *p, int *disruption, char *what, size_t len) {
  const char *node = p->node ? p->node : "(unscheduled)";
  *disruption = 0;
  if (p->deleting && p->phase != PH_SUCCEEDED && !recon_exp_pending_delete(c->x, p->uid)) {
    /* Deleted by someone else (kubectl delete, with or without --force, a
     * drain's eviction, a preemption, PodGC, the taint manager) before it
     * finished: the attempt is over. Its name is never reused within it. */
    *disruption = 1;
    if (p->disruption)
      snprintf(what, len, "pod %s on node %s was disrupted (%s)", p->name, node, p->disruption);
    else
      snprintf(what, len, "pod %s on node %s was deleted before it finished", p->name, node);
    if (p->phase != PH_FAILED) {
      p->phase = PH_FAILED;
      p->exit_code = -1;
      p->reason = "Deleted";
    }
    return 1;
  }
  if (p->deleting || p->phase == PH_SUCCEEDED)
    return 0;
  if (p->node_lost) {
    *disruption = 1;
    snprintf(what, len, "node %s of pod %s stopped reporting (the pod is marked not ready)", node,
             p->name);
    return 1;
  }
  if (p->phase != PH_FAILED)
    return 0;
  if (p->disruption || (p->exit_code < 0 && disruption_reason(p->reason))) {
    *disruption = 1;
    snprintf(what, len, "pod %s on node %s was ended by its node (%s)", p->name, node,
             p->disruption ? p->disruption : p->reason);
    return 1;
  }
  recon_describe_failure(p, what, len);
  return 1;
}

ctrain_err recon_end_attempt(recon_ctx *c, const char *reason, recon_end_kind kind,
                             const char *what, int *done) {
  ctrain_err result = CTRAIN_OK;
  const int disruption = kind == RECON_END_DISRUPTION;
  char msg[1400];
  *done = 0;
  if (disruption && c->disruptions >= c->js.max_disruptions) {
    snprintf(msg, sizeof(msg), "maxDisruptions %d reached after %d disruptions; last: %s",
             c->js.max_disruptions, c->disruptions, what);
    *done = 1;
    return recon_fail_job(c, R_DISRUPTIONS, msg, 1);
  }
  if (kind == RECON_END_FAILURE && c->restarts >= c->js.backoff_limit) {
    snprintf(msg, sizeof(msg), "backoffLimit %d reached after %d restarts; last failure: %s",
             c->js.backoff_limit, c->restarts, what);
    *done = 1;
    return recon_fail_job(c, R_BACKOFF, msg, 1);
  }
  /* Gang restart: the attempt is over for every collective member. */
  c->attempt++;
  if (disruption)
    c->disruptions++;
  else if (kind == RECON_END_FAILURE)
    c->restarts++;
  if (c->attempt > c->x->attempt) {
    c->x->attempt = c->attempt;
    c->x->restarts = c->restarts;
    c->x->disruptions = c->disruptions;
    recon_rule_remember(c);
  }
  if (disruption)
    snprintf(msg, sizeof(msg),
             "%s; gang restart after disruption %d of %d (not counted against backoffLimit), "
             "attempt %d",
             what, c->disruptions, c->js.max_disruptions, c->attempt);
  else
    snprintf(msg, sizeof(msg), "%s; gang restart %d of %d, attempt %d", what, c->restarts,
             c->js.backoff_limit, c->attempt);
  result = recon_cond_set(c, C_RESTARTING, 1, reason, msg, NULL);
  if (!result)
    result = recon_cond_set(c, C_RUNNING, 0, reason, msg, NULL);
  if (!result)
    result = recon_event(c, "Warning", "Restarting", -1, "%s", msg);
  /* A failed evaluator gets a fresh start with the new attempt. */
  for (int i = 0; !result && i < c->js.replicas[PODBUILD_EVALUATOR]; i++) {
    const obs_pod *p = c->slots[PODBUILD_EVALUATOR][i];
    if (p && p->phase == PH_FAILED)
      result = recon_delete_pod(c, p);
  }
  return result;
}

/* Looks at the collective pods of the current attempt: one that ended ends
 * the attempt, by the first spec.failurePolicy rule that matches it, else
 * by restartPolicy (a failure) or as a disruption. In this order: a FailJob
 * rule matched some pod; a failure no rule matched that restartPolicy does
 * not retry; a disruption no rule matched; else the cause (the earliest
 * failure, or disruption a rule matched), by its rule's action or as a
 * failure. Sets *done when the job became terminal. */
ctrain_err recon_handle_failures(recon_ctx *c, int *done) {
  const obs_pod *first = NULL, *first_perm = NULL, *first_dis = NULL, *fail_pod = NULL;
  recon_rule_match m, first_m, fail_m;
  char what[512], first_what[512] = "", dis_what[512] = "", msg[1024];
  int all_peer_lost = 1, running = 0;
  int64_t earliest = 0;
  *done = 0;
  first_m.rule = -1;
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++)
    for (int i = 0; i < c->js.replicas[t]; i++) {
      obs_pod *p = c->slots[t][i];
      int dis = 0;
      if (!p || p->attempt != c->attempt)
        continue;
      if (!pod_ended(c, p, &dis, what, sizeof(what))) {
        running += p->phase == PH_RUNNING && !p->deleting;
        continue;
      }
      const int rule = recon_rule_match_pod(c, p, &m);
      if (rule >= 0 && c->js.rules[rule].action == RULE_FAIL_JOB) {
        if (!fail_pod || cause_before(p, fail_pod)) {
          fail_pod = p;
          fail_m = m;
        }
        continue;
      }
      if (dis && rule < 0) {
        if (!first_dis || cause_before(p, first_dis)) {
          first_dis = p;
          snprintf(dis_what, sizeof(dis_what), "%s", what);
        }
        continue;
      }
      all_peer_lost &= p->exit_code == CTRAIN_EXIT_TEMPFAIL && p->finished > 0;
      if (p->finished > 0 && (!earliest || p->finished < earliest))
        earliest = p->finished;
      if (!first || cause_before(p, first)) {
        first = p;
        first_m = m;
        snprintf(first_what, sizeof(first_what), "%s", what);
      }
      if (rule < 0 && !retries(c->js.restart, pod_class(p)) &&
          (!first_perm || cause_before(p, first_perm)))
        first_perm = p;
    }
  if (fail_pod)
    return recon_rule_fail(c, fail_pod, &fail_m, done);
  if (!first && !first_dis)
    return CTRAIN_OK;
  if (first_perm) {
    recon_describe_failure(first_perm, what, sizeof(what));
    snprintf(msg, sizeof(msg), "%s, which restartPolicy %s does not retry", what,
             jobspec_restart_names[c->js.restart]);
    *done = 1;
    return recon_fail_job(c, R_NOT_RETRYABLE, msg, 1);
  }
  if (first_dis)
    return recon_end_attempt(c, R_DISRUPTION, RECON_END_DISRUPTION, dis_what, done);
  /* Every failed member lost a peer (exit 75) while another still looks
   * Running: that one may sit on a node that stopped reporting, which the
   * node controller shows only after its grace period. Wait a bounded time
   * for the cause, so a node loss is not charged to backoffLimit. */
  if (all_peer_lost && running && c->in->now < earliest + RECON_PEER_LOSS_WINDOW_S) {
    recon_requeue_at(c, earliest + RECON_PEER_LOSS_WINDOW_S);
    return CTRAIN_OK;
  }
  if (first_m.rule >= 0)
    return recon_rule_restart(c, first, &first_m, done);
  return recon_end_attempt(c, R_RESTART, RECON_END_FAILURE, first_what, done);
}

/* spec.progressDeadlineSeconds with the controller's --progress-interval 0:
 * nothing polls /progress, so nothing could tell a hung chief from a
 * healthy one. The deadline is then not enforced (never a NoProgress
 * restart of a healthy job), and the job says so. */
#define C_DEADLINE_OFF "ProgressDeadlineNotEnforced"
#define R_POLLING_OFF  "PollingDisabled"
#define R_POLLING_ON   "PollingEnabled"
#define R_NO_DEADLINE  "NoProgressDeadline"

/* Keeps condition `type` first in the list, as the Straggler condition is:
 * the State column and recon_state read the last one, the job's phase. */
static void cond_first(recon_ctx *c, const char *type) {
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(c->status, "conditions");
  cJSON *s = recon_cond_find(c->status, type);
  if (s && conds && conds->child != s) {
    cJSON_DetachItemViaPointer(conds, s);
    cJSON_InsertItemInArray(conds, 0, s);
  }
}

/* The condition ProgressDeadlineNotEnforced: True (reason PollingDisabled,
 * and a Warning event when it turns True) while the job sets the deadline
 * and the controller polls nothing; False once it polls again (the deadline
 * counts from then) or the deadline is gone. Absent when never True. */
static ctrain_err note_enforcement(recon_ctx *c) {
  char msg[512];
  int changed = 0;
  if (c->js.progress_deadline_s > 0 && c->in->progress_interval_s <= 0) {
    snprintf(msg, sizeof(msg),
             "spec.progressDeadlineSeconds %lld is not enforced: the controller runs with "
             "--progress-interval 0, so nothing polls the chief's /progress to measure it",
             (long long)c->js.progress_deadline_s);
    ctrain_err result = recon_cond_set(c, C_DEADLINE_OFF, 1, R_POLLING_OFF, msg, &changed);
    cond_first(c, C_DEADLINE_OFF);
    if (!result && changed)
      result = recon_event(c, "Warning", C_DEADLINE_OFF, -1, "%s", msg);
    return result;
  }
  if (!recon_cond_true(c->status, C_DEADLINE_OFF))
    return CTRAIN_OK;
  if (c->js.progress_deadline_s > 0) {
    snprintf(msg, sizeof(msg),
             "spec.progressDeadlineSeconds %lld is enforced from now on: the controller polls the "
             "chief's /progress every %d s (--progress-interval)",
             (long long)c->js.progress_deadline_s, c->in->progress_interval_s);
    return recon_cond_set(c, C_DEADLINE_OFF, 0, R_POLLING_ON, msg, NULL);
  }
  return recon_cond_set(c, C_DEADLINE_OFF, 0, R_NO_DEADLINE,
                        "spec.progressDeadlineSeconds is not set", NULL);
}

/* The chief's position as status.progress (or a poll) gives it, for people:
 * "epoch 3 step 1 (global step 3)", the parts it has. */
static void describe_position(const cJSON *prog, char *buf, size_t len) {
  const cJSON *e = ctrain_json_get(prog, "epoch"), *s = ctrain_json_get(prog, "step"),
              *g = ctrain_json_get(prog, "globalStep");
  size_t n = 0;
  buf[0] = '\0';
  if (cJSON_IsNumber(e))
    n += (size_t)snprintf(buf + n, len - n, "epoch %lld", (long long)e->valuedouble);
  if (n < len && cJSON_IsNumber(s))
    n += (size_t)snprintf(buf + n, len - n, "%sstep %lld", n ? " " : "", (long long)s->valuedouble);
  if (n < len && cJSON_IsNumber(g))
    n += (size_t)snprintf(buf + n, len - n, n ? " (global step %lld)" : "global step %lld",
                          (long long)g->valuedouble);
  if (!n)
    snprintf(buf, len, "no epoch or step");
}

ctrain_err recon_check_progress(recon_ctx *c, int *done) {
  int64_t since = 0, moved = 0, polled = 0, enforced = 0;
  char what[512], pos[128];
  const char *from = "the attempt started";
  *done = 0;
  ctrain_err result = note_enforcement(c);
  if (result || c->js.progress_deadline_s <= 0 || c->in->progress_interval_s <= 0 ||
      !recon_cond_true(c->status, C_RUNNING))
    return result;
  const cJSON *run = recon_cond_find(c->status, C_RUNNING);
  if (kube_time_parse(ctrain_json_str(run, "lastTransitionTime"), &since))
    return CTRAIN_OK;
  /* Enforced since the controller polls again (the condition turned False). */
  const cJSON *off = recon_cond_find(c->status, C_DEADLINE_OFF);
  if (off && !kube_time_parse(ctrain_json_str(off, "lastTransitionTime"), &enforced) &&
      enforced > since) {
    since = enforced;
    from = "the controller started polling it";
  }
  const cJSON *prog = c->in->progress ? c->in->progress : ctrain_json_get(c->status, "progress");
  char mv[64];
  recon_progress_moved(c, mv, sizeof(mv));
  if (*mv && !kube_time_parse(mv, &moved) && moved > since) {
    since = moved;
    from = "its position last moved";
  }
  if (c->in->now < since + c->js.progress_deadline_s) {
    recon_requeue_at(c, since + c->js.progress_deadline_s);
    return CTRAIN_OK;
  }
  if (kube_time_parse(ctrain_json_str(prog, "lastPollTime"), &polled))
    polled = 0; /* never polled, or a time we cannot read: no answer since `since` */
  const obs_pod *chief = c->js.replicas[PODBUILD_CHIEF]    ? c->slots[PODBUILD_CHIEF][0]
                         : c->js.replicas[PODBUILD_WORKER] ? c->slots[PODBUILD_WORKER][0]
                                                           : NULL;
  const char *who = chief ? chief->name : "the chief";
  if (polled < since) {
    snprintf(what, sizeof(what),
             "no progress for %lld s (progressDeadlineSeconds %lld): %s has not answered a "
             "/progress poll since %s",
             (long long)(c->in->now - since), (long long)c->js.progress_deadline_s, who, from);
  } else {
    describe_position(prog, pos, sizeof(pos));
    snprintf(what, sizeof(what),
             "no progress for %lld s (progressDeadlineSeconds %lld): %s reports %s, "
             "unchanged since it last moved",
             (long long)(c->in->now - since), (long long)c->js.progress_deadline_s, who, pos);
  }
  return recon_end_attempt(c, R_NO_PROGRESS, RECON_END_FAILURE, what, done);
}

/* Whether the success policy holds for the current attempt; names the pod or
 * group in `what`. */
int recon_succeeded(recon_ctx *c, char *what, size_t len) {
  const obs_pod *p;
  if (c->js.success == SUCC_CHIEF_OR_WORKER0) {
    p = c->js.replicas[PODBUILD_CHIEF] ? c->slots[PODBUILD_CHIEF][0] : c->slots[PODBUILD_WORKER][0];
    if (p && p->attempt == c->attempt && p->phase == PH_SUCCEEDED) {
      snprintf(what, len, "pod %s succeeded", p->name);
      return 1;
    }
    return 0;
  }
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++)
    for (int i = 0; i < c->js.replicas[t]; i++) {
      p = c->slots[t][i];
      if (!p || p->attempt != c->attempt || p->phase != PH_SUCCEEDED)
        return 0;
    }
  snprintf(what, len, "all %d workers%s succeeded", c->js.replicas[PODBUILD_WORKER],
           c->js.replicas[PODBUILD_CHIEF] ? " and the chief" : "");
  return 1;
}
