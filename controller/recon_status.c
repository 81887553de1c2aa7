/* recon_status.c - the status a pass writes: conditions (with their
 * transition times), replicaStatuses and counts, the object an UPDATE_STATUS
 * writes, and the state for logs. */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/kube_time.h"

cJSON *recon_cond_find(const cJSON *status, const char *type) {
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
  cJSON *it;
  cJSON_ArrayForEach(it, conds) {
    const char *t = ctrain_json_str(it, "type");
    if (t && !strcmp(t, type))
      return it;
  }
  return NULL;
}

int recon_cond_true(const cJSON *status, const char *type) {
  const char *s = ctrain_json_str(recon_cond_find(status, type), "status");
  return s && !strcmp(s, "True");
}

/* Sets condition `type` of the new status. A status change stamps
 * lastTransitionTime; a condition that becomes True moves to the end of the
 * list; a False condition that never existed is not added. Sets *changed to
 * 1 when the status of the type changed. */
ctrain_err recon_cond_set(recon_ctx *c, const char *type, int value, const char *reason,
                          const char *message, int *changed) {
  char now[40];
  const char *want = value ? "True" : "False";
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(c->status, "conditions");
  cJSON *cur = recon_cond_find(c->status, type);
  if (changed)
    *changed = 0;
  if (kube_time_format(c->in->now, now, sizeof(now)))
    return CTRAIN_E_INVAL;
  if (!cur && !value)
    return CTRAIN_OK;
  const char *st = ctrain_json_str(cur, "status");
  if (cur && st && !strcmp(st, want)) {
    const char *r = ctrain_json_str(cur, "reason"), *m = ctrain_json_str(cur, "message");
    if (r && m && !strcmp(r, reason) && !strcmp(m, message))
      return CTRAIN_OK;
    if (!ctrain_json_put(cur, "reason", cJSON_CreateString(reason)) ||
        !ctrain_json_put(cur, "message", cJSON_CreateString(message)) ||
        !ctrain_json_put(cur, "lastUpdateTime", cJSON_CreateString(now)))
      return CTRAIN_E_NOMEM;
    return CTRAIN_OK;
  }
  if (changed)
    *changed = 1;
  cJSON *n = cJSON_CreateObject();
  if (!n || !cJSON_AddStringToObject(n, "type", type) ||
      !cJSON_AddStringToObject(n, "status", want) ||
      !cJSON_AddStringToObject(n, "reason", reason) ||
      !cJSON_AddStringToObject(n, "message", message) ||
      !cJSON_AddStringToObject(n, "lastUpdateTime", now) ||
      !cJSON_AddStringToObject(n, "lastTransitionTime", now)) {
    cJSON_Delete(n);
    return CTRAIN_E_NOMEM;
  }
  if (!conds) {
    conds = cJSON_AddArrayToObject(c->status, "conditions");
    if (!conds) {
      cJSON_Delete(n);
      return CTRAIN_E_NOMEM;
    }
  }
  if (cur && !value)
    return cJSON_ReplaceItemViaPointer(conds, cur, n) ? CTRAIN_OK
                                                      : (cJSON_Delete(n), CTRAIN_E_NOMEM);
  if (cur)
    cJSON_Delete(cJSON_DetachItemViaPointer(conds, cur));
  return cJSON_AddItemToArray(conds, n) ? CTRAIN_OK : (cJSON_Delete(n), CTRAIN_E_NOMEM);
}

ctrain_err recon_set_time(recon_ctx *c, const char *field, int64_t t) {
  char buf[40];
  if (kube_time_format(t, buf, sizeof(buf)))
    return CTRAIN_E_INVAL;
  return ctrain_json_put(c->status, field, cJSON_CreateString(buf)) ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

/* The desired pod (type, index) that an expected create of `name` is for, or
 * 0 when the name is none of this job's. */
static int expected_slot(const recon_ctx *c, const char *name, int *type, int *index) {
  size_t len = strlen(c->name);
  char label[32], want[256];
  if (strncmp(name, c->name, len) || name[len] != '-')
    return 0;
  const char *rest = name + len + 1, *dash = strrchr(rest, '-');
  if (!dash || (size_t)(dash - rest) >= sizeof(label))
    return 0;
  memcpy(label, rest, (size_t)(dash - rest));
  label[dash - rest] = '\0';
  *type = podbuild_type_from_label(label);
  *index = recon_parse_uint(dash + 1);
  return *type >= 0 && *index >= 0 && *index < c->js.replicas[*type] &&
         !podbuild_pod_name(c->name, *type, *index, want, sizeof(want)) && !strcmp(want, name);
}

/* replicaStatuses counts the pods of the current attempt (any attempt for
 * the evaluator). `active` includes the creates in flight (returned by this
 * pass or still expected), as the Job controller counts the pods it just
 * created: the status written before the creates already says what they
 * make, and the pass that sees them appear has nothing to write. A create
 * that fails leaves the expectations and the next pass corrects the count. */
ctrain_err recon_fill_counts(recon_ctx *c) {
  cJSON *rs = cJSON_CreateObject();
  if (!rs || !ctrain_json_put(c->status, "replicaStatuses", rs))
    return CTRAIN_E_NOMEM;
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    if (!c->js.replicas[t])
      continue;
    int active = 0, succeeded = 0, failed = 0;
    for (size_t k = 0; k < c->n_pods; k++) {
      const obs_pod *p = &c->pods[k];
      if (p->type != t || (recon_is_collective(t) && p->attempt != c->attempt))
        continue;
      if (p->phase == PH_SUCCEEDED)
        succeeded++;
      else if (p->phase == PH_FAILED)
        failed++;
      else if (!p->deleting)
        active++;
    }
    for (size_t k = 0; k < c->x->n; k++) {
      const recon_expect_entry *en = &c->x->e[k];
      int et, ei;
      if (!en->is_delete && (!recon_is_collective(t) || en->attempt == c->attempt) &&
          expected_slot(c, en->name, &et, &ei) && et == t && !c->slots[t][ei])
        active++;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToObject(rs, podbuild_type_spec_name(t), o)) {
      cJSON_Delete(o);
      return CTRAIN_E_NOMEM;
    }
    if (!cJSON_AddNumberToObject(o, "active", active) ||
        !cJSON_AddNumberToObject(o, "succeeded", succeeded) ||
        !cJSON_AddNumberToObject(o, "failed", failed))
      return CTRAIN_E_NOMEM;
  }
  if (!ctrain_json_put(c->status, "restarts", cJSON_CreateNumber(c->restarts)) ||
      !ctrain_json_put(c->status, "disruptions", cJSON_CreateNumber(c->disruptions)) ||
      !ctrain_json_put(c->status, "attempt", cJSON_CreateNumber(c->attempt)))
    return CTRAIN_E_NOMEM;
  if (recon_rule_status(c))
    return CTRAIN_E_NOMEM;
  const cJSON *gen = ctrain_json_get(ctrain_json_get(c->job, "metadata"), "generation");
  if (cJSON_IsNumber(gen) &&
      !ctrain_json_put(c->status, "observedGeneration", cJSON_CreateNumber(gen->valuedouble)))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* Starts the new status from the observed one: conditions, times. */
ctrain_err recon_init_status(recon_ctx *c) {
  c->status = cJSON_CreateObject();
  if (!c->status)
    return CTRAIN_E_NOMEM;
  const cJSON *conds = ctrain_json_get(c->old_status, "conditions");
  if (cJSON_IsArray(conds) && !ctrain_json_put(c->status, "conditions", cJSON_Duplicate(conds, 1)))
    return CTRAIN_E_NOMEM;
  const char *fields[] = {"startTime", "completionTime"};
  for (int i = 0; i < 2; i++) {
    const char *v = ctrain_json_str(c->old_status, fields[i]);
    if (v && !ctrain_json_put(c->status, fields[i], cJSON_CreateString(v)))
      return CTRAIN_E_NOMEM;
  }
  /* The runtime's snapshot, recorded once (recon_runtime.c). */
  const cJSON *rt = ctrain_json_get(c->old_status, "runtime");
  if (rt && !ctrain_json_put(c->status, "runtime", cJSON_Duplicate(rt, 1)))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

ctrain_err recon_status_object(const cJSON *job, const cJSON *status, cJSON **out) {
  ctrain_err result = CTRAIN_E_NOMEM;
  cJSON *obj = cJSON_Duplicate(job, 1), *copy = cJSON_Duplicate(status, 1);
  *out = NULL;
  if (!obj || !copy)
    goto out;
  cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
  if (!cJSON_AddItemToObject(obj, "status", copy))
    goto out;
  copy = NULL; /* obj owns it */
  *out = obj;
  obj = NULL;
  result = CTRAIN_OK;
out:
  cJSON_Delete(copy);
  cJSON_Delete(obj);
  return result;
}

const char *recon_state(const cJSON *status) {
  const char *state = "Pending";
  const cJSON *it;
  cJSON_ArrayForEach(it, ctrain_json_get(status, "conditions")) {
    const char *t = ctrain_json_str(it, "type"), *st = ctrain_json_str(it, "status");
    if (t && st && !strcmp(st, "True"))
      state = t;
  }
  return state;
}

ctrain_err recon_set_terminal(recon_ctx *c, const char *type, const char *reason,
                              const char *message, int *changed) {
  ctrain_err result = recon_cond_set(c, type, 1, reason, message, changed);
  if (!result)
    result = recon_cond_set(c, C_RUNNING, 0, reason, message, NULL);
  if (!result)
    result = recon_cond_set(c, C_RESTARTING, 0, reason, message, NULL);
  if (!result && !ctrain_json_str(c->status, "completionTime"))
    result = recon_set_time(c, "completionTime", c->in->now);
  return result;
}
