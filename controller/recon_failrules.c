/* recon_failrules.c - spec.failurePolicy.rules (docs/api.md "failurePolicy",
 * docs/design.md "Gang restart"): the first rule that matches a collective
 * pod that ended its attempt decides for it, before restartPolicy and the
 * exit-code table, which apply when none matches. As the Job controller's
 * pod_failure_policy.go: exit codes of the containers that terminated with
 * a non-zero code (In / NotIn, optionally one container), the kubelet's
 * termination reason (OOMKilled), pod conditions (DisruptionTarget). */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"

static int int_in(const int *vals, int n, int v) {
  for (int i = 0; i < n; i++)
    if (vals[i] == v)
      return 1;
  return 0;
}

static int str_in(const char *const *vals, int n, const char *v) {
  for (int i = 0; v && i < n; i++)
    if (!strcmp(vals[i], v))
      return 1;
  return 0;
}

/* onExitCodes: some container (the named one) terminated with a non-zero
 * code that is In (or NotIn) the values; that container into *m. */
static int match_exit(const jobspec_rule *r, const cJSON *st, recon_rule_match *m) {
  const cJSON *cs;
  cJSON_ArrayForEach(cs, ctrain_json_get(st, "containerStatuses")) {
    const char *name = ctrain_json_str(cs, "name");
    const cJSON *term = ctrain_json_get(ctrain_json_get(cs, "state"), "terminated");
    const int code = (int)ctrain_json_int(term, "exitCode", 0);
    if (!term || code == 0 || (r->exit.container && (!name || strcmp(name, r->exit.container))))
      continue;
    if (int_in(r->exit.values, r->exit.n, code) != r->exit.not_in) {
      m->container = name;
      m->exit_code = code;
      m->reason = ctrain_json_str(term, "reason");
      return 1;
    }
  }
  return 0;
}

/* onTerminationReasons: some container (the named one) terminated with a
 * non-zero code and one of the reasons (the kubelet's OOMKilled, Error,
 * ContainerCannotRun, ...); without containerName also the pod's own
 * status.reason (Evicted, DeadlineExceeded, ...). */
static int match_reason(const jobspec_rule *r, const cJSON *st, recon_rule_match *m) {
  const cJSON *cs;
  cJSON_ArrayForEach(cs, ctrain_json_get(st, "containerStatuses")) {
    const char *name = ctrain_json_str(cs, "name");
    const cJSON *term = ctrain_json_get(ctrain_json_get(cs, "state"), "terminated");
    const char *why = ctrain_json_str(term, "reason");
    if (!term || ctrain_json_int(term, "exitCode", 0) == 0 ||
        (r->reason.container && (!name || strcmp(name, r->reason.container))))
      continue;
    if (str_in(r->reason.values, r->reason.n, why)) {
      m->container = name;
      m->exit_code = (int)ctrain_json_int(term, "exitCode", 0);
      m->reason = why;
      return 1;
    }
  }
  const char *pod_reason = ctrain_json_str(st, "reason");
  if (!r->reason.container && str_in(r->reason.values, r->reason.n, pod_reason)) {
    m->reason = pod_reason;
    return 1;
  }
  return 0;
}

/* onPodConditions: any of them present with its status. */
static int match_conditions(const jobspec_rule *r, const cJSON *st, recon_rule_match *m) {
  const cJSON *pc;
  cJSON_ArrayForEach(pc, ctrain_json_get(st, "conditions")) {
    const char *t = ctrain_json_str(pc, "type"), *s = ctrain_json_str(pc, "status");
    for (int i = 0; t && s && i < r->n_conds; i++)
      if (!strcmp(t, r->conds[i].type) && !strcmp(s, r->conds[i].status)) {
        if (!m->reason)
          m->reason = ctrain_json_str(pc, "reason");
        return 1;
      }
  }
  return 0;
}

int recon_rule_match_pod(const recon_ctx *c, const obs_pod *p, recon_rule_match *m) {
  const cJSON *st = ctrain_json_get(p->obj, "status");
  for (int i = 0; i < c->js.n_rules; i++) {
    const jobspec_rule *r = &c->js.rules[i];
    memset(m, 0, sizeof(*m));
    m->exit_code = p->exit_code;
    if (!r->exit.set && !r->reason.set && !r->n_conds)
      continue; /* matches nothing (jobspec_parse refuses it) */
    if (r->exit.set && !match_exit(r, st, m))
      continue;
    if (r->reason.set && !match_reason(r, st, m))
      continue;
    if (r->n_conds && !match_conditions(r, st, m))
      continue;
    if (!m->reason)
      m->reason = p->reason;
    m->rule = i;
    return i;
  }
  memset(m, 0, sizeof(*m));
  m->rule = -1;
  m->exit_code = p->exit_code;
  return -1;
}

/* How pod `p` ended, as the rule saw it: the matched container and its code
 * when a matcher chose one, else the pod's own description. */
static void describe(const obs_pod *p, const recon_rule_match *m, char *buf, size_t len) {
  if (m->container)
    snprintf(buf, len, "container %s of pod %s failed with exit code %d (%s)", m->container,
             p->name, m->exit_code, m->reason ? m->reason : "Error");
  else
    recon_describe_failure(p, buf, len);
}

/* The counts of the observed status, once per pass; those the expectations
 * keep when they are ahead of it (the attempt they go with is newer). */
static void load_counts(recon_ctx *c) {
  const cJSON *arr = ctrain_json_get(c->old_status, "ruleRestarts"), *v;
  int i = 0;
  if (c->rules_loaded)
    return;
  c->rules_loaded = 1;
  cJSON_ArrayForEach(v, arr) {
    if (i >= JOBSPEC_MAX_RULES)
      break;
    c->rule_restarts[i++] =
        cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e9 ? (int)v->valuedouble : 0;
  }
  if (c->x->attempt > ctrain_json_int(c->old_status, "attempt", 1))
    for (i = 0; i < JOBSPEC_MAX_RULES; i++)
      if (c->x->rule_restarts[i] > c->rule_restarts[i])
        c->rule_restarts[i] = c->x->rule_restarts[i];
}

void recon_rule_remember(recon_ctx *c) {
  load_counts(c);
  memcpy(c->x->rule_restarts, c->rule_restarts, sizeof(c->x->rule_restarts));
}

ctrain_err recon_rule_fail(recon_ctx *c, const obs_pod *p, const recon_rule_match *m, int *done) {
  char what[512], msg[1024];
  describe(p, m, what, sizeof(what));
  snprintf(msg, sizeof(msg), "%s, matching spec.failurePolicy.rules[%d] (FailJob)", what, m->rule);
  *done = 1;
  return recon_fail_job(c, R_RULE_FAIL_JOB, msg, 1);
}

ctrain_err recon_rule_restart(recon_ctx *c, const obs_pod *p, const recon_rule_match *m,
                              int *done) {
  const jobspec_rule *r = &c->js.rules[m->rule];
  const int not_counted = r->action == RULE_RESTART_NOT_COUNTED;
  const int cap = r->max_restarts;
  char what[512], desc[1024];
  load_counts(c);
  int *count = &c->rule_restarts[m->rule];
  describe(p, m, what, sizeof(what));
  *done = 0;
  if (cap >= 0 && *count >= cap) {
    snprintf(desc, sizeof(desc),
             "spec.failurePolicy.rules[%d] (%s): maxRestarts %d reached after %d restarts by "
             "this rule; last: %s",
             m->rule, jobspec_rule_action_names[r->action], cap, *count, what);
    *done = 1;
    return recon_fail_job(c, R_RULE_LIMIT, desc, 1);
  }
  if (not_counted && cap >= 0)
    snprintf(desc, sizeof(desc),
             "%s, matching spec.failurePolicy.rules[%d] (RestartNotCounted): restart %d of %d by "
             "this rule, counted against maxDisruptions, not backoffLimit",
             what, m->rule, *count + 1, cap);
  else if (not_counted)
    snprintf(desc, sizeof(desc),
             "%s, matching spec.failurePolicy.rules[%d] (RestartNotCounted): counted against "
             "maxDisruptions, not backoffLimit",
             what, m->rule);
  else if (cap >= 0)
    snprintf(desc, sizeof(desc),
             "%s, matching spec.failurePolicy.rules[%d] (Restart): restart %d of %d by this rule",
             what, m->rule, *count + 1, cap);
  else
    snprintf(desc, sizeof(desc), "%s, matching spec.failurePolicy.rules[%d] (Restart)", what,
             m->rule);
  /* Counted before the restart, so the expectations remember it with the
   * attempt (recon_rule_remember); taken back when no restart came of it. */
  (*count)++;
  ctrain_err result =
      recon_end_attempt(c, not_counted ? R_RULE_NOT_COUNTED : R_RESTART,
                        not_counted ? RECON_END_DISRUPTION : RECON_END_FAILURE, desc, done);
  if (result || *done)
    (*count)--;
  return result;
}

ctrain_err recon_rule_status(recon_ctx *c) {
  const cJSON *old = ctrain_json_get(c->old_status, "ruleRestarts");
  if (!c->js.n_rules && !cJSON_IsArray(old))
    return CTRAIN_OK;
  load_counts(c);
  cJSON *arr = cJSON_CreateArray();
  if (!arr || !ctrain_json_put(c->status, "ruleRestarts", arr))
    return CTRAIN_E_NOMEM;
  for (int i = 0; i < c->js.n_rules; i++) {
    cJSON *n = cJSON_CreateNumber(c->rule_restarts[i]);
    if (!n || !cJSON_AddItemToArray(arr, n)) {
      cJSON_Delete(n);
      return CTRAIN_E_NOMEM;
    }
  }
  return CTRAIN_OK;
}
