/* tfjob.c - kubeflow.org/v1 TFJob through the TrainingJob reconciler: the
 * mapping in, the status and objects out, the status write (see
 * controller/tfjob.h for the mapping table). */
#include "controller/tfjob.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "controller/podbuild.h"
#include "ctrain/contract.h"
#include "ctrain/json.h"

#define NO_BACKOFF_LIMIT 2147483647 /* runPolicy.backoffLimit unset: no limit */

/* ---- reasons and messages, both ways ------------------------------------ */

/* Condition reasons: ours <-> training-operator's. The first rows map both
 * ways; the Failed reasons below them only out (a terminal condition is
 * never set again, so it needs no way back). */
static const char *const reasons[][2] = {
    {"TrainingJobCreated", "TFJobCreated"},
    {"TrainingJobRunning", "TFJobRunning"},
    {"GangRestart", "TFJobRestarting"},
    {"TrainingJobSucceeded", "TFJobSucceeded"},
    {"TrainingJobSuspended", "TFJobSuspended"},
    {"TrainingJobResumed", "TFJobResumed"},
    {"InvalidSpec", "TFJobFailedValidation"},
    {NULL, NULL},
    {"NotRetryable", "TFJobFailed"},
    {"BackoffLimitExceeded", "TFJobFailed"},
    {"DeadlineExceeded", "TFJobFailed"},
};
#define N_REASONS (sizeof(reasons) / sizeof(reasons[0]))

/* Event reasons of the job, out only (events are never read back). */
static const char *const event_reasons[][2] = {
    {"Restarting", "TFJobRestarting"}, {"Succeeded", "TFJobSucceeded"}, {"Failed", "TFJobFailed"},
    {"Suspended", "TFJobSuspended"},   {"Resumed", "TFJobResumed"},
};

/* `r` mapped ours -> TFJob's (out) or back; static or `r` itself. */
static const char *map_reason(const char *r, int out) {
  for (size_t i = 0; r && i < N_REASONS; i++) {
    if (!reasons[i][0]) {
      if (!out)
        break;
      continue;
    }
    if (!strcmp(r, reasons[i][out ? 0 : 1]))
      return reasons[i][out ? 1 : 0];
  }
  return r;
}

/* "TrainingJob x ..." <-> "TFJob x ..."; out also names the TFJob's
 * field (spec.tfReplicaSpecs) in a validation message. *o owned. */
static ctrain_err map_message(const char *m, int out, char **o) {
  const char *from = out ? "TrainingJob " : "TFJob ", *to = out ? "TFJob " : "TrainingJob ";
  size_t n = strlen(m) + 64;
  char *buf = malloc(n);
  *o = NULL;
  if (!buf)
    return CTRAIN_E_NOMEM;
  if (!strncmp(m, from, strlen(from)))
    snprintf(buf, n, "%s%s", to, m + strlen(from));
  else
    snprintf(buf, n, "%s", m);
  const char *ours = "spec.replicaSpecs.";
  char *at = out ? strstr(buf, ours) : NULL;
  if (at) {
    char *tail = strdup(at + strlen(ours));
    if (!tail) {
      free(buf);
      return CTRAIN_E_NOMEM;
    }
    snprintf(at, n - (size_t)(at - buf), "spec.tfReplicaSpecs.%s", tail);
    free(tail);
  }
  *o = buf;
  return CTRAIN_OK;
}

/* A copy of `conds` with reasons and messages mapped (out or back). */
static cJSON *map_conditions(const cJSON *conds, int out) {
  cJSON *res = cJSON_CreateArray();
  const cJSON *it;
  cJSON_ArrayForEach(it, conds) {
    cJSON *c = cJSON_Duplicate(it, 1);
    if (!res || !c || !cJSON_AddItemToArray(res, c)) {
      cJSON_Delete(c);
      cJSON_Delete(res);
      return NULL;
    }
    const char *r = ctrain_json_str(c, "reason"), *m = ctrain_json_str(c, "message");
    if (r && !ctrain_json_put(c, "reason", cJSON_CreateString(map_reason(r, out)))) {
      cJSON_Delete(res);
      return NULL;
    }
    char *mm = NULL;
    if (m && (map_message(m, out, &mm) || !ctrain_json_put(c, "message", cJSON_CreateString(mm)))) {
      free(mm);
      cJSON_Delete(res);
      return NULL;
    }
    free(mm);
  }
  return res;
}

/* ---- replica types ------------------------------------------------------- */

typedef enum { RT_CHIEF, RT_MASTER, RT_WORKER, RT_EVALUATOR, RT_PS, RT_UNKNOWN } rtype;
static const char *const rtype_names[] = {"Chief", "Master", "Worker", "Evaluator", "PS"};

static rtype parse_rtype(const char *k) {
  for (int i = 0; i < RT_UNKNOWN; i++)
    if (!strcasecmp(k, rtype_names[i]))
      return (rtype)i;
  return RT_UNKNOWN;
}

/* The TFJob's replica spec of `want` (keys compared case-insensitively, as
 * training-operator's defaulting normalises them); *key its key. */
static const cJSON *tf_replica(const cJSON *tf, rtype want, const char **key) {
  const cJSON *it;
  cJSON_ArrayForEach(it, ctrain_json_get(ctrain_json_get(tf, "spec"), "tfReplicaSpecs")) {
    if (it->string && parse_rtype(it->string) == want) {
      if (key)
        *key = it->string;
      return it;
    }
  }
  return NULL;
}

/* Whether the chief is spelled Master in the TFJob. */
static int uses_master(const cJSON *tf) {
  return tf_replica(tf, RT_MASTER, NULL) && !tf_replica(tf, RT_CHIEF, NULL);
}

/* ---- in: TFJob -> the reconciler's job --------------------------------- */

/* The restartPolicy strictness: OnFailure/Always 0, ExitCode 1, Never 2;
 * -1 unknown. */
static int restart_rank(const char *p) {
  if (!p || !*p || !strcmp(p, "Never"))
    return 2; /* TFJobDefaultRestartPolicy */
  if (!strcmp(p, "ExitCode"))
    return 1;
  if (!strcmp(p, "OnFailure") || !strcmp(p, "Always"))
    return 0;
  return -1;
}

/* The port named tfjob-port of the container named tensorflow (else the
 * first) of replica spec `rs` (key: its key) into *port, 0 when none.
 * CTRAIN_E_INVAL (why says) when its containerPort is not a port. */
static ctrain_err spec_port(const cJSON *rs, const char *key, int *port, char *why, size_t whylen) {
  const cJSON *ctrs =
      ctrain_json_get(ctrain_json_get(ctrain_json_get(rs, "template"), "spec"), "containers");
  const cJSON *c = cJSON_GetArrayItem(ctrs, 0), *it, *p;
  int ci = 0, pi = 0;
  *port = 0;
  cJSON_ArrayForEach(it, ctrs) {
    const char *n = ctrain_json_str(it, "name");
    if (n && !strcmp(n, TFJOB_CONTAINER)) {
      c = it;
      break;
    }
    ci++;
  }
  if (!it)
    ci = 0;
  cJSON_ArrayForEach(p, ctrain_json_get(c, "ports")) {
    const char *n = ctrain_json_str(p, "name");
    if (n && !strcmp(n, TFJOB_PORT_NAME)) {
      char field[256];
      int64_t v = 0;
      snprintf(field, sizeof(field),
               "spec.tfReplicaSpecs.%.64s.template.spec.containers[%d].ports[%d].containerPort",
               key, ci, pi);
      ctrain_err result =
          ctrain_json_int_in(p, "containerPort", 1, 65535, 0, &v, field, why, whylen);
      *port = (int)v;
      return result;
    }
    pi++;
  }
  return CTRAIN_OK;
}

/* Records why the spec cannot run (the first reason found); CTRAIN_OK. */
#define INVALID(...)                                                                               \
  ((v->invalid[0] ? 0 : snprintf(v->invalid, sizeof(v->invalid), __VA_ARGS__)), CTRAIN_OK)

/* spec.replicaSpecs, restartPolicy and port from spec.tfReplicaSpecs. */
static ctrain_err map_replicas(const cJSON *tf, cJSON *spec, tfjob_view *v) {
  static const rtype order[] = {RT_CHIEF, RT_MASTER, RT_WORKER, RT_EVALUATOR};
  static const char *const ours[] = {"Chief", "Chief", "Worker", "Evaluator"};
  const cJSON *specs = ctrain_json_get(ctrain_json_get(tf, "spec"), "tfReplicaSpecs"), *it;
  int strictest = 0, port = 0, collective = 0;
  char field[128], why[TFJOB_INVALID_MAX];
  cJSON *rss = cJSON_AddObjectToObject(spec, "replicaSpecs");
  if (!rss)
    return CTRAIN_E_NOMEM;
  cJSON_ArrayForEach(it, specs) {
    rtype t = parse_rtype(it->string ? it->string : "");
    if (t == RT_PS)
      return INVALID("spec.tfReplicaSpecs.%s: parameter servers are not supported: ctrain runs "
                     "the collective (MultiWorkerMirroredStrategy); use Chief/Worker only",
                     it->string);
    if (t == RT_UNKNOWN)
      return INVALID("spec.tfReplicaSpecs.%s: unknown replica type (Chief, Master, Worker, "
                     "Evaluator)",
                     it->string ? it->string : "");
    /* Keys differ in case only (Worker and WORKER): which one runs would be
     * an accident of the map's order; refused. */
    for (const cJSON *o = specs->child; o && o != it; o = o->next)
      if (o->string && parse_rtype(o->string) == t)
        return INVALID("spec.tfReplicaSpecs: %s and %s are the same replica type; give one",
                       o->string, it->string);
  }
  if (tf_replica(tf, RT_CHIEF, NULL) && tf_replica(tf, RT_MASTER, NULL))
    return INVALID("spec.tfReplicaSpecs: Chief and Master are the same replica type; give one");
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
    const char *key = NULL;
    const cJSON *rs = tf_replica(tf, order[i], &key);
    if (!rs)
      continue;
    int64_t replicas = 1;
    snprintf(field, sizeof(field), "spec.tfReplicaSpecs.%.64s.replicas", key);
    if (ctrain_json_int_in(rs, "replicas", 0, INT32_MAX, 1, &replicas, field, why, sizeof(why)))
      return INVALID("%s", why);
    cJSON *o = cJSON_AddObjectToObject(rss, ours[i]);
    if (!o || !cJSON_AddNumberToObject(o, "replicas", (double)replicas))
      return CTRAIN_E_NOMEM;
    const cJSON *tmpl = ctrain_json_get(rs, "template");
    /* An object whose members are the template's own (not freed with it). */
    if (cJSON_IsObject(tmpl) &&
        !cJSON_AddItemToObject(o, "template", cJSON_CreateObjectReference(tmpl->child)))
      return CTRAIN_E_NOMEM;
    int this_port = 0;
    if (spec_port(rs, key, &this_port, why, sizeof(why)))
      return INVALID("%s", why);
    if (!port)
      port = this_port;
    if (order[i] == RT_EVALUATOR)
      continue;
    const char *rp = ctrain_json_str(rs, "restartPolicy");
    int rank = restart_rank(rp);
    if (rank < 0)
      return INVALID("spec.tfReplicaSpecs.%s.restartPolicy: unknown value '%s'", key, rp);
    if (!collective || rank > strictest)
      strictest = rank;
    collective = 1;
  }
  static const char *const policies[] = {"OnFailure", "ExitCode", "Never"};
  if (!cJSON_AddStringToObject(spec, "restartPolicy", policies[collective ? strictest : 2]) ||
      !cJSON_AddNumberToObject(spec, "port", port > 0 ? port : CTRAIN_DEFAULT_COLLECTIVE_PORT))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* cleanPodPolicy, backoffLimit, deadline, TTL, suspend, successPolicy. */
static ctrain_err map_policies(const cJSON *tf, cJSON *spec, tfjob_view *v) {
  const cJSON *tspec = ctrain_json_get(tf, "spec"), *rp = ctrain_json_get(tspec, "runPolicy");
  const char *clean = ctrain_json_str(rp, "cleanPodPolicy");
  const char *succ = ctrain_json_str(tspec, "successPolicy");
  if (!clean)
    clean = "None"; /* SetDefaults_TFJob */
  if (strcmp(clean, "None") && strcmp(clean, "Running") && strcmp(clean, "All"))
    return INVALID("spec.runPolicy.cleanPodPolicy: unknown value '%s'", clean);
  if (succ && *succ && strcmp(succ, "AllWorkers"))
    return INVALID("spec.successPolicy: unknown value '%s' (\"\" or AllWorkers)", succ);
  if (!cJSON_AddStringToObject(spec, "cleanPodPolicy", clean) ||
      !cJSON_AddStringToObject(spec, "successPolicy",
                               succ && *succ ? "AllWorkers" : "ChiefOrWorker0"))
    return CTRAIN_E_NOMEM;
  /* int32 seconds at most, so no deadline arithmetic can overflow. */
  static const struct {
    const char *name;
    int64_t min, def;
  } ints[] = {{"backoffLimit", 0, NO_BACKOFF_LIMIT},
              {"activeDeadlineSeconds", 1, -1},
              {"ttlSecondsAfterFinished", 0, -1}};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
    char field[64], why[TFJOB_INVALID_MAX];
    int64_t n = 0;
    snprintf(field, sizeof(field), "spec.runPolicy.%s", ints[i].name);
    if (ctrain_json_int_in(rp, ints[i].name, ints[i].min, INT32_MAX, ints[i].def, &n, field, why,
                           sizeof(why)))
      return INVALID("%s", why);
    if (n >= 0 && !cJSON_AddNumberToObject(spec, ints[i].name, (double)n))
      return CTRAIN_E_NOMEM;
  }
  if (cJSON_IsTrue(ctrain_json_get(rp, "suspend")) && !cJSON_AddTrueToObject(spec, "suspend"))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* metadata: what the reconciler and the builders read. */
static ctrain_err map_metadata(const cJSON *tf, cJSON *job) {
  const cJSON *md = ctrain_json_get(tf, "metadata");
  cJSON *m = cJSON_AddObjectToObject(job, "metadata");
  static const char *const strs[] = {"name", "namespace", "uid", "resourceVersion"};
  if (!m || !cJSON_AddStringToObject(job, "apiVersion", TFJOB_API_VERSION) ||
      !cJSON_AddStringToObject(job, "kind", TFJOB_KIND))
    return CTRAIN_E_NOMEM;
  for (int i = 0; i < 4; i++) {
    const char *s = ctrain_json_str(md, strs[i]);
    if (s && !cJSON_AddStringToObject(m, strs[i], s))
      return CTRAIN_E_NOMEM;
  }
  const cJSON *gen = ctrain_json_get(md, "generation");
  if (cJSON_IsNumber(gen) && !cJSON_AddNumberToObject(m, "generation", gen->valuedouble))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

ctrain_err tfjob_to_job(const cJSON *tf, tfjob_view *v) {
  ctrain_err result = CTRAIN_E_NOMEM;
  cJSON *status = NULL;
  memset(v, 0, sizeof(*v));
  const char *mb =
      ctrain_json_str(ctrain_json_get(ctrain_json_get(tf, "spec"), "runPolicy"), "managedBy");
  v->foreign = mb && *mb && strcmp(mb, TFJOB_MANAGED_BY);
  v->job = cJSON_CreateObject();
  cJSON *spec = v->job ? cJSON_AddObjectToObject(v->job, "spec") : NULL;
  if (!spec || (result = map_metadata(tf, v->job)) || (result = map_replicas(tf, spec, v)) ||
      (result = map_policies(tf, spec, v)) || (result = tfjob_status_from_tf(tf, &status)))
    goto out;
  result = ctrain_json_put(v->job, "status", status) ? CTRAIN_OK : CTRAIN_E_NOMEM;
  status = NULL;
out:
  cJSON_Delete(status);
  if (result) {
    cJSON_Delete(v->job);
    memset(v, 0, sizeof(*v));
  }
  return result;
}

void tfjob_view_free(tfjob_view *v) {
  if (!v)
    return;
  cJSON_Delete(v->job);
  v->job = NULL;
}

/* ---- status, both ways ---------------------------------------------------- */

/* A non-negative decimal annotation of `tf`; `def` when absent or bad. */
static int annotation_int(const cJSON *tf, const char *key, int def) {
  const char *s =
      ctrain_json_str(ctrain_json_get(ctrain_json_get(tf, "metadata"), "annotations"), key);
  char *end = NULL;
  long n = s && *s ? strtol(s, &end, 10) : -1;
  return n >= 0 && n < 1000000000 && end && !*end ? (int)n : def;
}

/* {active, succeeded, failed} of one replicaStatuses entry, zeros when
 * absent or not an int32 count (the next pass writes them anew). */
static cJSON *counts(const cJSON *rs) {
  static const char *const f[] = {"active", "succeeded", "failed"};
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; o && i < 3; i++) {
    int64_t n = 0;
    if (ctrain_json_int_in(rs, f[i], 0, INT32_MAX, 0, &n, f[i], NULL, 0))
      n = 0;
    if (!cJSON_AddNumberToObject(o, f[i], (double)n)) {
      cJSON_Delete(o);
      return NULL;
    }
  }
  return o;
}

/* Copies startTime and completionTime. */
static int copy_times(const cJSON *from, cJSON *to) {
  static const char *const f[] = {"startTime", "completionTime"};
  for (int i = 0; i < 2; i++) {
    const char *s = ctrain_json_str(from, f[i]);
    if (s && !cJSON_AddStringToObject(to, f[i], s))
      return 0;
  }
  return 1;
}

/* replicaStatuses of `from` re-keyed: out maps Chief to `chief_key`, back
 * maps Chief and Master to Chief; counts only. */
static cJSON *map_replica_statuses(const cJSON *from, int out, const char *chief_key) {
  cJSON *rs = cJSON_CreateObject();
  const cJSON *it;
  cJSON_ArrayForEach(it, from) {
    rtype t = parse_rtype(it->string ? it->string : "");
    const char *k = NULL;
    if (t == RT_CHIEF || t == RT_MASTER)
      k = out ? chief_key : "Chief";
    else if (t == RT_WORKER)
      k = "Worker";
    else if (t == RT_EVALUATOR)
      k = "Evaluator";
    if (!k || (rs && cJSON_GetObjectItemCaseSensitive(rs, k)))
      continue;
    cJSON *c = counts(it);
    if (!rs || !c || !cJSON_AddItemToObject(rs, k, c)) {
      cJSON_Delete(c);
      cJSON_Delete(rs);
      return NULL;
    }
  }
  return rs;
}

ctrain_err tfjob_status_from_tf(const cJSON *tf, cJSON **out) {
  const cJSON *st = ctrain_json_get(tf, "status");
  const cJSON *gen = ctrain_json_get(ctrain_json_get(tf, "metadata"), "generation");
  cJSON *s = cJSON_CreateObject();
  const cJSON *conds = ctrain_json_get(st, "conditions");
  int attempt = annotation_int(tf, CTRAIN_ANN_ATTEMPT, 1);
  *out = NULL;
  if (!s || (cJSON_IsArray(conds) && !ctrain_json_put(s, "conditions", map_conditions(conds, 0))) ||
      !copy_times(st, s) ||
      (ctrain_json_get(st, "replicaStatuses") &&
       !ctrain_json_put(s, "replicaStatuses",
                        map_replica_statuses(ctrain_json_get(st, "replicaStatuses"), 0, NULL))) ||
      !cJSON_AddNumberToObject(s, "restarts", annotation_int(tf, CTRAIN_ANN_RESTARTS, 0)) ||
      !cJSON_AddNumberToObject(s, "disruptions", annotation_int(tf, CTRAIN_ANN_DISRUPTIONS, 0)) ||
      !cJSON_AddNumberToObject(s, "attempt", attempt < 1 ? 1 : attempt) ||
      (cJSON_IsNumber(gen) &&
       !cJSON_AddNumberToObject(s, "observedGeneration", gen->valuedouble))) {
    cJSON_Delete(s);
    return CTRAIN_E_NOMEM;
  }
  *out = s;
  return CTRAIN_OK;
}

ctrain_err tfjob_status_to_tf(const cJSON *tf, const cJSON *status, cJSON **out) {
  const cJSON *conds = ctrain_json_get(status, "conditions");
  const cJSON *rs = ctrain_json_get(status, "replicaStatuses");
  cJSON *s = cJSON_CreateObject();
  *out = NULL;
  if (!s || (cJSON_IsArray(conds) && !ctrain_json_put(s, "conditions", map_conditions(conds, 1))) ||
      (rs && !ctrain_json_put(s, "replicaStatuses",
                              map_replica_statuses(rs, 1, uses_master(tf) ? "Master" : "Chief"))) ||
      !copy_times(status, s)) {
    cJSON_Delete(s);
    return CTRAIN_E_NOMEM;
  }
  *out = s;
  return CTRAIN_OK;
}

/* ---- out: the result of a pass ------------------------------------------- */

/* training-operator's labels on a pod we create. */
static ctrain_err label_pod(const cJSON *tf, cJSON *pod) {
  cJSON *labels = (cJSON *)ctrain_json_get(ctrain_json_get(pod, "metadata"), "labels");
  const char *job = ctrain_json_str(ctrain_json_get(tf, "metadata"), "name");
  const char *type = ctrain_json_str(labels, PODBUILD_LABEL_TYPE);
  const char *index = ctrain_json_str(labels, PODBUILD_LABEL_INDEX);
  if (!labels || !job || !type || !index)
    return CTRAIN_E_INVAL;
  int chief = !strcmp(type, "chief");
  const char *tf_type = chief && uses_master(tf) ? "master" : type;
  int has_chief = tf_replica(tf, RT_CHIEF, NULL) || tf_replica(tf, RT_MASTER, NULL);
  int master = chief || (!has_chief && !strcmp(type, "worker") && !strcmp(index, "0"));
  if (!ctrain_json_put(labels, "training.kubeflow.org/job-name", cJSON_CreateString(job)) ||
      !ctrain_json_put(labels, "training.kubeflow.org/replica-type", cJSON_CreateString(tf_type)) ||
      !ctrain_json_put(labels, "training.kubeflow.org/replica-index", cJSON_CreateString(index)) ||
      !ctrain_json_put(labels, "training.kubeflow.org/operator-name",
                       cJSON_CreateString(TFJOB_OPERATOR)) ||
      (master &&
       !ctrain_json_put(labels, "training.kubeflow.org/job-role", cJSON_CreateString("master"))))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* An event of the job: its reason and message as TFJob's. */
static ctrain_err adapt_event(recon_action *a) {
  char *m = NULL;
  for (size_t i = 0; i < sizeof(event_reasons) / sizeof(event_reasons[0]); i++)
    if (!strcmp(a->reason, event_reasons[i][0])) {
      a->reason = event_reasons[i][1];
      break;
    }
  if (!a->message)
    return CTRAIN_OK;
  if (map_message(a->message, 1, &m))
    return CTRAIN_E_NOMEM;
  free(a->message);
  a->message = m;
  return CTRAIN_OK;
}

/* The TFJob to write for the reconciler's `status` and attempt: a copy of
 * tf with the TFJob status and the annotations. *same when neither differs
 * from tf. */
static ctrain_err status_object(const cJSON *tf, const cJSON *status, int attempt, cJSON **out,
                                int *same) {
  cJSON *obj = cJSON_Duplicate(tf, 1), *tst = NULL;
  char a[16], r[16], d[16];
  *out = NULL;
  if (!obj || tfjob_status_to_tf(tf, status, &tst))
    goto oom;
  int restarts = (int)ctrain_json_int(status, "restarts", 0);
  int disruptions = (int)ctrain_json_int(status, "disruptions", 0);
  *same = cJSON_Compare(tst, ctrain_json_get(tf, "status"), 1) &&
          annotation_int(tf, CTRAIN_ANN_ATTEMPT, -1) == attempt &&
          annotation_int(tf, CTRAIN_ANN_RESTARTS, -1) == restarts &&
          annotation_int(tf, CTRAIN_ANN_DISRUPTIONS, 0) == disruptions;
  if (!ctrain_json_put(obj, "status", tst))
    goto oom;
  tst = NULL;
  cJSON *md = (cJSON *)ctrain_json_get(obj, "metadata");
  cJSON *ann = (cJSON *)ctrain_json_get(md, "annotations");
  if (!cJSON_IsObject(ann) && !(md && ctrain_json_put(md, "annotations", cJSON_CreateObject())))
    goto oom;
  ann = (cJSON *)ctrain_json_get(md, "annotations");
  snprintf(a, sizeof(a), "%d", attempt);
  snprintf(r, sizeof(r), "%d", restarts);
  snprintf(d, sizeof(d), "%d", disruptions);
  if (!ctrain_json_put(ann, CTRAIN_ANN_ATTEMPT, cJSON_CreateString(a)) ||
      !ctrain_json_put(ann, CTRAIN_ANN_RESTARTS, cJSON_CreateString(r)) ||
      (disruptions && !ctrain_json_put(ann, CTRAIN_ANN_DISRUPTIONS, cJSON_CreateString(d))))
    goto oom;
  *out = obj;
  return CTRAIN_OK;
oom:
  cJSON_Delete(tst);
  cJSON_Delete(obj);
  return CTRAIN_E_NOMEM;
}

/* Removes action i (an UPDATE_STATUS nobody's `after` names). */
static void drop_action(recon_result *res, size_t i) {
  recon_action *a = &res->actions[i];
  cJSON_Delete(a->object);
  free(a->name);
  free(a->uid);
  free(a->message);
  memmove(a, a + 1, (res->n_actions - i - 1) * sizeof(*a));
  res->n_actions--;
  for (size_t k = 0; k < res->n_actions; k++) {
    int *after = &res->actions[k].after;
    if (*after > (int)i)
      (*after)--;
    else if (*after == (int)i)
      *after = -1;
  }
}

/* A Warning TFJobFailedValidation event about tf, appended. */
static ctrain_err push_invalid_event(const cJSON *tf, recon_result *res, const char *msg) {
  const cJSON *md = ctrain_json_get(tf, "metadata");
  char *m = NULL;
  if (res->n_actions == res->cap_actions) {
    size_t cap = res->cap_actions ? res->cap_actions * 2 : 4;
    recon_action *na = realloc(res->actions, cap * sizeof(*na));
    if (!na)
      return CTRAIN_E_NOMEM;
    res->actions = na;
    res->cap_actions = cap;
  }
  cJSON *io = cJSON_CreateObject();
  if (!io || !cJSON_AddStringToObject(io, "apiVersion", TFJOB_API_VERSION) ||
      !cJSON_AddStringToObject(io, "kind", TFJOB_KIND) ||
      !ctrain_json_put(io, "name", cJSON_CreateString(ctrain_json_str(md, "name"))) ||
      !ctrain_json_put(io, "namespace", cJSON_CreateString(ctrain_json_str(md, "namespace"))) ||
      !ctrain_json_put(io, "uid", cJSON_CreateString(ctrain_json_str(md, "uid"))) ||
      map_message(msg, 1, &m)) {
    cJSON_Delete(io);
    return CTRAIN_E_NOMEM;
  }
  res->actions[res->n_actions++] = (recon_action){.kind = RECON_EVENT,
                                                  .object = io,
                                                  .event_type = "Warning",
                                                  .reason = "TFJobFailedValidation",
                                                  .message = m,
                                                  .after = -1};
  return CTRAIN_OK;
}

/* The Failed condition's message when it became True with InvalidSpec in
 * this pass (old: the observed status in our shape), else NULL. */
static const char *new_invalid(const cJSON *old, const cJSON *now) {
  const cJSON *it;
  cJSON_ArrayForEach(it, ctrain_json_get(old, "conditions")) {
    const char *t = ctrain_json_str(it, "type"), *s = ctrain_json_str(it, "status");
    if (t && s && !strcmp(t, "Failed") && !strcmp(s, "True"))
      return NULL;
  }
  cJSON_ArrayForEach(it, ctrain_json_get(now, "conditions")) {
    const char *t = ctrain_json_str(it, "type"), *s = ctrain_json_str(it, "status");
    const char *r = ctrain_json_str(it, "reason");
    if (t && s && r && !strcmp(t, "Failed") && !strcmp(s, "True") && !strcmp(r, "InvalidSpec"))
      return ctrain_json_str(it, "message");
  }
  return NULL;
}

ctrain_err tfjob_adapt_result(const cJSON *tf, const tfjob_view *v, recon_result *res) {
  ctrain_err result = CTRAIN_OK;
  for (size_t i = 0; i < res->n_actions && !result; i++) {
    recon_action *a = &res->actions[i];
    if (a->kind == RECON_CREATE_POD)
      result = label_pod(tf, a->object);
    else if (a->kind == RECON_EVENT)
      result = adapt_event(a);
  }
  const char *msg = new_invalid(ctrain_json_get(v->job, "status"), res->status);
  if (!result && msg)
    result = push_invalid_event(tf, res, msg);
  for (size_t i = 0; i < res->n_actions && !result; i++) {
    recon_action *a = &res->actions[i];
    if (a->kind != RECON_UPDATE_STATUS)
      continue;
    cJSON *obj = NULL;
    int same = 0;
    result = status_object(tf, a->object, res->attempt, &obj, &same);
    if (result)
      break;
    if (same) {
      cJSON_Delete(obj);
      drop_action(res, i);
      res->status_changed = 0;
      break;
    }
    cJSON_Delete(a->object);
    a->object = obj;
    break;
  }
  return result;
}
