/* kueue.c - the job's Kueue Workload, built and read; see controller/kueue.h. */
#include "controller/kueue.h"

#include <stdio.h>
#include <string.h>

#include "controller/jobspec.h"
#include "controller/podbuild.h"
#include "ctrain/json.h"
#include "ctrain/kube_time.h"

static const cJSON *labels_of(const cJSON *obj) {
  return ctrain_json_get(ctrain_json_get(obj, "metadata"), "labels");
}

const char *kueue_queue_name(const cJSON *job) {
  const char *q = ctrain_json_str(labels_of(job), KUEUE_LABEL_QUEUE);
  return q && *q ? q : NULL;
}

ctrain_err kueue_workload_name(const char *job_name, char *buf, size_t len) {
  if (!job_name || !*job_name)
    return CTRAIN_E_INVAL;
  int n = snprintf(buf, len, KUEUE_WORKLOAD_PREFIX "%s", job_name);
  return (n < 0 || (size_t)n >= len || n > 253) ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

static const cJSON *condition(const cJSON *wl, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, ctrain_json_get(ctrain_json_get(wl, "status"), "conditions")) {
    const char *t = ctrain_json_str(c, "type");
    if (t && !strcmp(t, type))
      return c;
  }
  return NULL;
}

static int condition_true(const cJSON *wl, const char *type) {
  const char *s = ctrain_json_str(condition(wl, type), "status");
  return s && !strcmp(s, "True");
}

const char *kueue_condition_message(const cJSON *wl, const char *type) {
  return ctrain_json_str(condition(wl, type), "message");
}

kueue_state kueue_workload_state(const cJSON *wl) {
  if (!wl)
    return KUEUE_ABSENT;
  if (condition_true(wl, "Finished"))
    return KUEUE_FINISHED;
  int reserved = condition_true(wl, "QuotaReserved") ||
                 cJSON_IsObject(ctrain_json_get(ctrain_json_get(wl, "status"), "admission"));
  if (condition_true(wl, "Evicted") && reserved)
    return KUEUE_EVICTED;
  if (reserved && condition_true(wl, "QuotaReserved") && condition_true(wl, "Admitted") &&
      !condition_true(wl, "Evicted"))
    return KUEUE_ADMITTED;
  return KUEUE_PENDING;
}

const char *kueue_state_name(kueue_state s) {
  static const char *const names[] = {"Absent", "Pending", "Admitted", "Evicted", "Finished"};
  return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "Unknown";
}

/* The podSet of replica type t: {name, count, template}. NULL: out of memory. */
static cJSON *pod_set(const job_spec *js, podbuild_type t) {
  cJSON *ps = cJSON_CreateObject();
  cJSON *tmpl = cJSON_Duplicate(js->tmpl[t], 1);
  if (!tmpl)
    tmpl = cJSON_CreateObject();
  if (!ps || !tmpl || !ctrain_json_put(ps, "name", cJSON_CreateString(podbuild_type_label(t))) ||
      !ctrain_json_put(ps, "count", cJSON_CreateNumber(js->replicas[t]))) {
    cJSON_Delete(ps);
    cJSON_Delete(tmpl);
    return NULL;
  }
  /* The pods get restartPolicy Never from podbuild; Kueue validates the
   * template as a pod's, so the podSet says what the pods will say. */
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
  if ((!spec && !(spec = cJSON_AddObjectToObject(tmpl, "spec"))) ||
      !ctrain_json_put(spec, "restartPolicy", cJSON_CreateString("Never")) ||
      !ctrain_json_put(ps, "template", tmpl)) {
    cJSON_Delete(ps);
    return NULL;
  }
  return ps;
}

/* The first priorityClassName of the job's templates, or NULL. */
static const char *priority_class(const job_spec *js) {
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const char *pc = ctrain_json_str(ctrain_json_get(js->tmpl[t], "spec"), "priorityClassName");
    if (pc && *pc && js->replicas[t] > 0)
      return pc;
  }
  return NULL;
}

static ctrain_err add_priority(cJSON *spec, const job_spec *js) {
  const char *pc = priority_class(js);
  if (!pc)
    return CTRAIN_OK;
  cJSON *ref = cJSON_AddObjectToObject(spec, "priorityClassRef");
  if (!ref || !cJSON_AddStringToObject(ref, "group", "scheduling.k8s.io") ||
      !cJSON_AddStringToObject(ref, "kind", "PriorityClass") ||
      !cJSON_AddStringToObject(ref, "name", pc))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

ctrain_err kueue_workload_build(const job_spec *js, cJSON **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *wl = NULL, *ref = NULL;
  char name[KUEUE_NAME_MAX];
  const char *jname = js->name, *ns = js->ns, *queue = js->queue;
  *out = NULL;
  if (!jname || !ns || !queue || kueue_workload_name(jname, name, sizeof(name))) {
    if (errbuf && errlen)
      snprintf(errbuf, errlen, "kueue: the job has no name, namespace or %s label",
               KUEUE_LABEL_QUEUE);
    return CTRAIN_E_INVAL;
  }
  result = podbuild_owner_ref(js->job, &ref, errbuf, errlen);
  if (result)
    return result;
  wl = cJSON_CreateObject();
  cJSON *md = wl ? cJSON_AddObjectToObject(wl, "metadata") : NULL;
  cJSON *labels = md ? cJSON_AddObjectToObject(md, "labels") : NULL;
  cJSON *refs = md ? cJSON_AddArrayToObject(md, "ownerReferences") : NULL;
  cJSON *spec = wl ? cJSON_AddObjectToObject(wl, "spec") : NULL;
  cJSON *sets = spec ? cJSON_AddArrayToObject(spec, "podSets") : NULL;
  if (!sets || !labels || !refs || !cJSON_AddStringToObject(wl, "apiVersion", KUEUE_API_VERSION) ||
      !cJSON_AddStringToObject(wl, "kind", "Workload") ||
      !cJSON_AddStringToObject(md, "name", name) || !cJSON_AddStringToObject(md, "namespace", ns) ||
      !cJSON_AddStringToObject(labels, PODBUILD_LABEL_JOB, jname) ||
      !cJSON_AddItemToArray(refs, ref) || !cJSON_AddStringToObject(spec, "queueName", queue)) {
    if (!refs || !cJSON_GetArraySize(refs))
      cJSON_Delete(ref);
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    if (js->replicas[t] <= 0)
      continue;
    cJSON *ps = pod_set(js, (podbuild_type)t);
    if (!ps || !cJSON_AddItemToArray(sets, ps)) {
      cJSON_Delete(ps);
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  }
  result = add_priority(spec, js);
out:
  if (result == CTRAIN_E_NOMEM && errbuf && errlen)
    snprintf(errbuf, errlen, "kueue: out of memory");
  if (result)
    cJSON_Delete(wl);
  else
    *out = wl;
  return result;
}

/* Sets condition `type` of `status` (created when missing): status, reason,
 * message; lastTransitionTime `now` when the status changes. */
static ctrain_err set_condition(cJSON *status, const char *type, const char *value,
                                const char *reason, const char *message, int64_t now) {
  char ts[40];
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
  if (!cJSON_IsArray(conds)) {
    cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
    if (!(conds = cJSON_AddArrayToObject(status, "conditions")))
      return CTRAIN_E_NOMEM;
  }
  cJSON *c = NULL, *it;
  cJSON_ArrayForEach(it, conds) {
    const char *t = ctrain_json_str(it, "type");
    if (t && !strcmp(t, type))
      c = it;
  }
  if (!c && (!(c = cJSON_CreateObject()) || !cJSON_AddItemToArray(conds, c))) {
    cJSON_Delete(c);
    return CTRAIN_E_NOMEM;
  }
  const char *old = ctrain_json_str(c, "status");
  int changed = !old || strcmp(old, value);
  char msg[1024];
  snprintf(msg, sizeof(msg), "%s", message ? message : "");
  if (kube_time_format(now, ts, sizeof(ts)))
    return CTRAIN_E_INVAL;
  if (!ctrain_json_put(c, "type", cJSON_CreateString(type)) ||
      !ctrain_json_put(c, "status", cJSON_CreateString(value)) ||
      !ctrain_json_put(c, "reason", cJSON_CreateString(reason)) ||
      !ctrain_json_put(c, "message", cJSON_CreateString(msg)) ||
      (changed && !ctrain_json_put(c, "lastTransitionTime", cJSON_CreateString(ts))))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* A copy of wl with a status object to edit (*status). */
static ctrain_err copy_with_status(const cJSON *wl, cJSON **out, cJSON **status) {
  *out = cJSON_Duplicate(wl, 1);
  if (!*out)
    return CTRAIN_E_NOMEM;
  *status = cJSON_GetObjectItemCaseSensitive(*out, "status");
  if (!cJSON_IsObject(*status)) {
    cJSON_DeleteItemFromObjectCaseSensitive(*out, "status");
    *status = cJSON_AddObjectToObject(*out, "status");
  }
  if (!*status) {
    cJSON_Delete(*out);
    *out = NULL;
    return CTRAIN_E_NOMEM;
  }
  return CTRAIN_OK;
}

ctrain_err kueue_workload_finished(const cJSON *wl, int succeeded, const char *message, int64_t now,
                                   cJSON **out) {
  cJSON *status = NULL;
  ctrain_err result = copy_with_status(wl, out, &status);
  if (!result)
    result =
        set_condition(status, "Finished", "True", succeeded ? "Succeeded" : "Failed", message, now);
  if (result) {
    cJSON_Delete(*out);
    *out = NULL;
  }
  return result;
}

ctrain_err kueue_workload_release(const cJSON *wl, int64_t now, cJSON **out) {
  cJSON *status = NULL;
  const cJSON *ev = condition(wl, "Evicted");
  const char *why = ctrain_json_str(ev, "message");
  const char *reason = ctrain_json_str(ev, "reason");
  ctrain_err result = copy_with_status(wl, out, &status);
  if (result)
    return result;
  cJSON_DeleteItemFromObjectCaseSensitive(status, "admission");
  result = set_condition(status, "QuotaReserved", "False", "Pending", why, now);
  if (!result)
    result = set_condition(status, "Admitted", "False", "NoReservation",
                           "The workload has no reservation", now);
  /* As Kueue's own job integrations: queued again at once after a
   * preemption or node failures; after a deactivation or a backoff
   * eviction Kueue sets Requeued True itself when the time comes. */
  int requeue = reason && (!strcmp(reason, "Preempted") || !strcmp(reason, "NodeFailures"));
  if (!result)
    result = set_condition(status, "Requeued", requeue ? "True" : "False",
                           reason ? reason : "Evicted", why, now);
  if (result) {
    cJSON_Delete(*out);
    *out = NULL;
  }
  return result;
}

/* Adds every key of `from` (an object of strings) to obj[field] that it
 * does not have yet. */
static ctrain_err merge_map(cJSON *obj, const char *field, const cJSON *from) {
  if (!cJSON_IsObject(from) || !from->child)
    return CTRAIN_OK;
  cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!cJSON_IsObject(m)) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, field);
    if (!(m = cJSON_AddObjectToObject(obj, field)))
      return CTRAIN_E_NOMEM;
  }
  const cJSON *kv;
  cJSON_ArrayForEach(kv, from) {
    if (!cJSON_IsString(kv) || cJSON_GetObjectItemCaseSensitive(m, kv->string))
      continue;
    if (!cJSON_AddStringToObject(m, kv->string, kv->valuestring))
      return CTRAIN_E_NOMEM;
  }
  return CTRAIN_OK;
}

static ctrain_err append_all(cJSON *obj, const char *field, const cJSON *from) {
  if (!cJSON_IsArray(from) || !from->child)
    return CTRAIN_OK;
  cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!cJSON_IsArray(a)) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, field);
    if (!(a = cJSON_AddArrayToObject(obj, field)))
      return CTRAIN_E_NOMEM;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, from) {
    cJSON *d = cJSON_Duplicate(it, 1);
    if (!d || !cJSON_AddItemToArray(a, d)) {
      cJSON_Delete(d);
      return CTRAIN_E_NOMEM;
    }
  }
  return CTRAIN_OK;
}

ctrain_err kueue_pod_apply(const cJSON *wl, const char *podset, cJSON *pod) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *check, *u;
  cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
  if (!md || !spec)
    return CTRAIN_E_INVAL;
  cJSON_ArrayForEach(check, ctrain_json_get(ctrain_json_get(wl, "status"), "admissionChecks")) {
    cJSON_ArrayForEach(u, ctrain_json_get(check, "podSetUpdates")) {
      const char *n = ctrain_json_str(u, "name");
      if (!n || strcmp(n, podset))
        continue;
      if ((result = merge_map(md, "labels", ctrain_json_get(u, "labels"))) ||
          (result = merge_map(md, "annotations", ctrain_json_get(u, "annotations"))) ||
          (result = merge_map(spec, "nodeSelector", ctrain_json_get(u, "nodeSelector"))) ||
          (result = append_all(spec, "tolerations", ctrain_json_get(u, "tolerations"))))
        return result;
    }
  }
  return CTRAIN_OK;
}
