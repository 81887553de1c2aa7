/* jobspec.c - a TrainingJob's spec parsed into a job_spec, and what the CRD
 * schema cannot check about it (controller/jobspec.h). */
#include "controller/jobspec.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/backup_uri.h"
#include "ctrain/json.h"

#include "controller/kueue.h"

const char *const jobspec_restart_names[3] = {"OnFailure", "ExitCode", "Never"};
const char *const jobspec_clean_names[3] = {"Running", "All", "None"};
const char *const jobspec_success_names[2] = {"ChiefOrWorker0", "AllWorkers"};
const char *const jobspec_rule_action_names[3] = {"FailJob", "RestartNotCounted", "Restart"};

/* The index of `v` in names[0..n-1]; 0 (the default) for NULL, -1 for an
 * unknown value. */
static int enum_index(const char *v, const char *const *names, int n) {
  if (!v)
    return 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(v, names[i]))
      return i;
  return -1;
}

static int is_dns1035_label(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > PODBUILD_DNS_LABEL_MAX || !islower((unsigned char)s[0]) || s[n - 1] == '-')
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
      return 0;
  return 1;
}

/* spec.checkpoint into js->ckpt: its kind, or INVALID and why. */
static void parse_checkpoint(const cJSON *ckpt, job_spec *js) {
  char *why = js->ckpt.why;
  const size_t wlen = sizeof(js->ckpt.why);
  js->ckpt.kind = JOBSPEC_CKPT_NONE;
  js->ckpt.mount_path = cJSON_IsObject(ckpt) ? ctrain_json_str(ckpt, "mountPath") : NULL;
  if (ckpt && ctrain_json_get(ckpt, "uri")) {
    const char *uri = ctrain_json_str(ckpt, "uri");
    const char *creds = ctrain_json_str(ckpt, "credentialsSecret");
    char uwhy[256];
    js->ckpt.kind = JOBSPEC_CKPT_INVALID;
    if (!uri)
      snprintf(why, wlen,
               "spec.checkpoint.uri: must be s3://bucket[/prefix] or gs://bucket[/prefix]");
    /* The worker's own grammar: never start pods whose worker would refuse it. */
    else if (ctrain_backup_uri_parse(uri, NULL, uwhy, sizeof(uwhy)))
      snprintf(why, wlen, "spec.checkpoint.uri: %s", uwhy);
    else if (ctrain_json_get(ckpt, "volume"))
      snprintf(why, wlen, "spec.checkpoint.uri: mutually exclusive with spec.checkpoint.volume");
    else if (!creds || !*creds)
      snprintf(why, wlen, "spec.checkpoint.credentialsSecret: required with uri");
    else {
      js->ckpt.kind = JOBSPEC_CKPT_URI;
      js->ckpt.uri = uri;
      js->ckpt.endpoint = ctrain_json_str(ckpt, "endpoint");
      js->ckpt.credentials = creds;
    }
  } else if (ckpt) {
    const char *mp = ctrain_json_str(ckpt, "mountPath");
    js->ckpt.kind = JOBSPEC_CKPT_INVALID;
    if (!mp || mp[0] != '/')
      snprintf(why, wlen, "spec.checkpoint.mountPath: must be an absolute path");
    else if (!cJSON_IsObject(ctrain_json_get(ckpt, "volume")))
      snprintf(why, wlen, "spec.checkpoint.volume: required");
    else {
      js->ckpt.kind = JOBSPEC_CKPT_VOLUME;
      js->ckpt.volume = ctrain_json_get(ckpt, "volume");
    }
  }
}

/* A whole number in int32's range, the way a container's exit code is. */
static int is_int32(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == (double)(int64_t)v->valuedouble &&
         v->valuedouble >= INT32_MIN && v->valuedouble <= INT32_MAX;
}

/* One rule of spec.failurePolicy.rules, leniently (validate_rules judges). */
static void parse_rule(const cJSON *r, jobspec_rule *out) {
  const cJSON *ex = ctrain_json_get(r, "onExitCodes"),
              *rs = ctrain_json_get(r, "onTerminationReasons");
  const cJSON *v;
  int a = enum_index(ctrain_json_str(r, "action"), jobspec_rule_action_names, 3);
  out->action = a < 0 ? RULE_RESTART : (jobspec_rule_action)a;
  const cJSON *mr = ctrain_json_get(r, "maxRestarts");
  out->max_restarts = is_int32(mr) && mr->valuedouble >= 0 ? (int)mr->valuedouble : -1;
  if (cJSON_IsObject(ex)) {
    const char *op = ctrain_json_str(ex, "operator");
    out->exit.set = 1;
    out->exit.container = ctrain_json_str(ex, "containerName");
    out->exit.not_in = op && !strcmp(op, "NotIn");
    cJSON_ArrayForEach(v, ctrain_json_get(ex, "values")) {
      if (out->exit.n < JOBSPEC_MAX_RULE_VALUES && is_int32(v))
        out->exit.values[out->exit.n++] = (int)v->valuedouble;
    }
  }
  if (cJSON_IsObject(rs)) {
    out->reason.set = 1;
    out->reason.container = ctrain_json_str(rs, "containerName");
    cJSON_ArrayForEach(v, ctrain_json_get(rs, "values")) {
      if (out->reason.n < JOBSPEC_MAX_RULE_VALUES && cJSON_IsString(v))
        out->reason.values[out->reason.n++] = v->valuestring;
    }
  }
  cJSON_ArrayForEach(v, ctrain_json_get(r, "onPodConditions")) {
    const char *ty = ctrain_json_str(v, "type"), *st = ctrain_json_str(v, "status");
    if (out->n_conds < JOBSPEC_MAX_RULE_CONDS && ty) {
      out->conds[out->n_conds].type = ty;
      out->conds[out->n_conds++].status = st ? st : "True";
    }
  }
}

static void parse_rules(const cJSON *fp, job_spec *js) {
  const cJSON *r;
  cJSON_ArrayForEach(r, ctrain_json_get(fp, "rules")) {
    if (js->n_rules >= JOBSPEC_MAX_RULES)
      break;
    if (cJSON_IsObject(r))
      parse_rule(r, &js->rules[js->n_rules++]);
  }
}

/* The typed fields, leniently: defaults for what is absent or wrong. */
static void fill(const cJSON *job, job_spec *js) {
  memset(js, 0, sizeof(*js));
  js->job = job;
  const cJSON *md = ctrain_json_get(job, "metadata"), *spec = ctrain_json_get(job, "spec");
  const cJSON *rss = ctrain_json_get(spec, "replicaSpecs");
  js->name = ctrain_json_str(md, "name");
  js->ns = ctrain_json_str(md, "namespace");
  js->uid = ctrain_json_str(md, "uid");
  podbuild_job_kind(job, &js->api_version, &js->kind);
  js->deleting = ctrain_json_get(md, "deletionTimestamp") &&
                 !cJSON_IsNull(ctrain_json_get(md, "deletionTimestamp"));
  js->queue = kueue_queue_name(job);
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const cJSON *rs = ctrain_json_get(rss, podbuild_type_spec_name(t));
    js->present[t] = rs != NULL;
    if (!cJSON_IsObject(rs))
      continue;
    /* As written (1: the CRD default), then the range the reconciler sizes by. */
    const int n = (int)ctrain_json_int(rs, "replicas", 1);
    js->replicas[t] = n < 0 || n > JOBSPEC_MAX_WORKERS ? 0 : n;
    js->tmpl[t] = ctrain_json_get(rs, "template");
  }
  js->port = (int)ctrain_json_int(spec, "port", CTRAIN_DEFAULT_COLLECTIVE_PORT);
  js->progress_port = (int)ctrain_json_int(spec, "progressPort", CTRAIN_DEFAULT_PROGRESS_PORT);
  int r = enum_index(ctrain_json_str(spec, "restartPolicy"), jobspec_restart_names, 3);
  js->restart = r < 0 ? POL_ON_FAILURE : (restart_policy)r;
  r = enum_index(ctrain_json_str(spec, "cleanPodPolicy"), jobspec_clean_names, 3);
  js->clean = r < 0 ? CLEAN_RUNNING : (clean_policy)r;
  r = enum_index(ctrain_json_str(spec, "successPolicy"), jobspec_success_names, 2);
  js->success = r < 0 ? SUCC_CHIEF_OR_WORKER0 : (success_policy)r;
  js->backoff_limit = (int)ctrain_json_int(spec, "backoffLimit", 3);
  js->suspend = cJSON_IsTrue(ctrain_json_get(spec, "suspend"));
  js->active_deadline_s = ctrain_json_int(spec, "activeDeadlineSeconds", 0);
  js->ttl_s = ctrain_json_int(spec, "ttlSecondsAfterFinished", -1);
  js->max_disruptions = (int)ctrain_json_int(spec, "maxDisruptions", 10);
  js->progress_deadline_s = ctrain_json_int(spec, "progressDeadlineSeconds", 0);
  parse_checkpoint(ctrain_json_get(spec, "checkpoint"), js);
  parse_rules(ctrain_json_get(spec, "failurePolicy"), js);
}

/* Checks one replica type's template (opaque to the rest: read here only). */
static ctrain_err validate_template(const job_spec *js, podbuild_type t, char *msg, size_t len) {
  const char *tn = podbuild_type_spec_name(t);
  const cJSON *pspec = ctrain_json_get(js->tmpl[t], "spec");
  const cJSON *containers = ctrain_json_get(pspec, "containers");
  const int port = js->port;
  const char *mount = js->ckpt.mount_path;
  const char *port_owner = NULL;
  if (!cJSON_IsObject(pspec))
    JOBSPEC_FAIL("spec.replicaSpecs.%s.template.spec: required", tn);
  if (!cJSON_IsArray(containers) || cJSON_GetArraySize(containers) < 1)
    JOBSPEC_FAIL(
        "spec.replicaSpecs.%s.template.spec.containers: at least one container is required", tn);
  int ci = 0;
  const cJSON *ctr;
  cJSON_ArrayForEach(ctr, containers) {
    const char *cname = ctrain_json_str(ctr, "name");
    if (!cJSON_IsObject(ctr) || !cname || !*cname)
      JOBSPEC_FAIL("spec.replicaSpecs.%s.template.spec.containers[%d].name: required", tn, ci);
    int cj = 0;
    const cJSON *other;
    cJSON_ArrayForEach(other, containers) {
      if (cj >= ci)
        break;
      const char *on = ctrain_json_str(other, "name");
      if (on && !strcmp(on, cname))
        JOBSPEC_FAIL("spec.replicaSpecs.%s.template.spec.containers[%d].name: duplicate name '%s'",
                     tn, ci, cname);
      cj++;
    }
    int pi = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, ctrain_json_get(ctr, "ports")) {
      if (ctrain_json_int(p, "containerPort", -1) == port) {
        if (port_owner)
          JOBSPEC_FAIL(
              "spec.replicaSpecs.%s.template.spec.containers[%d].ports[%d].containerPort: %d "
              "is spec.port and is already declared by container '%s' of the same pod",
              tn, ci, pi, port, port_owner);
        port_owner = cname;
      }
      pi++;
    }
    int mi = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ctrain_json_get(ctr, "volumeMounts")) {
      const char *mp = ctrain_json_str(m, "mountPath"), *mn = ctrain_json_str(m, "name");
      if (mount && mp && !strcmp(mp, mount))
        JOBSPEC_FAIL(
            "spec.replicaSpecs.%s.template.spec.containers[%d].volumeMounts[%d].mountPath: "
            "'%s' is spec.checkpoint.mountPath",
            tn, ci, mi, mp);
      if (mount && mn && !strcmp(mn, PODBUILD_CKPT_VOLUME))
        JOBSPEC_FAIL(
            "spec.replicaSpecs.%s.template.spec.containers[%d].volumeMounts[%d].name: '%s' is "
            "reserved for spec.checkpoint",
            tn, ci, mi, mn);
      mi++;
    }
    ci++;
  }
  int vi = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, ctrain_json_get(pspec, "volumes")) {
    const char *vn = ctrain_json_str(v, "name");
    if (mount && vn && !strcmp(vn, PODBUILD_CKPT_VOLUME))
      JOBSPEC_FAIL("spec.replicaSpecs.%s.template.spec.volumes[%d].name: '%s' is reserved for "
                   "spec.checkpoint",
                   tn, vi, vn);
    vi++;
  }
  return CTRAIN_OK;
}

/* The spec's integer fields as written, whole and in range: the reconciler's
 * arithmetic (startTime + activeDeadlineSeconds) must not overflow on a
 * value the schema of an older CRD let through. */
static ctrain_err validate_numbers(const cJSON *spec, char *msg, size_t len) {
  static const struct {
    const char *k;
    int64_t min, max;
  } f[] = {{"port", 1, 65535},
           {"progressPort", 1, 65535},
           {"backoffLimit", 0, INT32_MAX},
           {"maxDisruptions", 0, 1000},
           {"activeDeadlineSeconds", 1, INT32_MAX},
           {"ttlSecondsAfterFinished", 0, INT32_MAX},
           {"progressDeadlineSeconds", 1, 604800}};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
    char field[64];
    int64_t v = 0;
    snprintf(field, sizeof(field), "spec.%s", f[i].k);
    if (ctrain_json_int_in(spec, f[i].k, f[i].min, f[i].max, 0, &v, field, msg, len))
      return CTRAIN_E_CONFIG;
  }
  return CTRAIN_OK;
}

/* Whether `name` is a container of the Chief or Worker template: the pods
 * a rule judges. */
static int collective_container(const job_spec *js, const char *name) {
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++) {
    const cJSON *ctr;
    cJSON_ArrayForEach(ctr, ctrain_json_get(ctrain_json_get(js->tmpl[t], "spec"), "containers")) {
      const char *cn = ctrain_json_str(ctr, "name");
      if (js->replicas[t] && cn && !strcmp(cn, name))
        return 1;
    }
  }
  return 0;
}

/* A matcher's containerName (when given) and values: `what` names the
 * matcher in the field path; `ints` whether the values are exit codes. */
static ctrain_err validate_matcher(const job_spec *js, int i, const char *what, const cJSON *m,
                                   int ints, char *msg, size_t len) {
  const cJSON *cn = ctrain_json_get(m, "containerName"), *vals = ctrain_json_get(m, "values"), *v;
  if (!cJSON_IsObject(m))
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d].%s: must be an object", i, what);
  if (cn && (!cJSON_IsString(cn) || !*cn->valuestring))
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d].%s.containerName: must be a non-empty string", i,
                 what);
  if (cn && !collective_container(js, cn->valuestring))
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d].%s.containerName: '%s' is no container of the "
                 "Chief or Worker template",
                 i, what, cn->valuestring);
  const int n = cJSON_GetArraySize(vals);
  if (!cJSON_IsArray(vals) || n < 1 || n > JOBSPEC_MAX_RULE_VALUES)
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d].%s.values: 1..%d values required", i, what,
                 JOBSPEC_MAX_RULE_VALUES);
  int k = 0;
  cJSON_ArrayForEach(v, vals) {
    if (ints ? !is_int32(v) : (!cJSON_IsString(v) || !*v->valuestring))
      JOBSPEC_FAIL("spec.failurePolicy.rules[%d].%s.values[%d]: must be %s", i, what, k,
                   ints ? "an int32 exit code" : "a non-empty string");
    k++;
  }
  return CTRAIN_OK;
}

/* One rule: an action, at least one matcher, each well formed. */
static ctrain_err validate_rule(const job_spec *js, int i, const cJSON *r, char *msg, size_t len) {
  const cJSON *ex = ctrain_json_get(r, "onExitCodes"),
              *rs = ctrain_json_get(r, "onTerminationReasons");
  const cJSON *pc = ctrain_json_get(r, "onPodConditions"), *v;
  ctrain_err result;
  char field[96];
  int64_t mr = -1;
  if (!cJSON_IsObject(r))
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d]: must be an object", i);
  const char *action = ctrain_json_str(r, "action");
  if (!action)
    JOBSPEC_FAIL(
        "spec.failurePolicy.rules[%d].action: required (FailJob, Restart or RestartNotCounted)", i);
  if (enum_index(action, jobspec_rule_action_names, 3) < 0)
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d].action: unknown value '%s' (FailJob, Restart or "
                 "RestartNotCounted)",
                 i, action);
  snprintf(field, sizeof(field), "spec.failurePolicy.rules[%d].maxRestarts", i);
  if (ctrain_json_int_in(r, "maxRestarts", 0, 10000, -1, &mr, field, msg, len))
    return CTRAIN_E_CONFIG;
  if (mr >= 0 && !strcmp(action, "FailJob"))
    JOBSPEC_FAIL("%s: only with action Restart or RestartNotCounted", field);
  if (!ex && !rs && !pc)
    JOBSPEC_FAIL("spec.failurePolicy.rules[%d]: needs onExitCodes, onTerminationReasons or "
                 "onPodConditions",
                 i);
  if (ex) {
    const char *op = ctrain_json_str(ex, "operator");
    result = validate_matcher(js, i, "onExitCodes", ex, 1, msg, len);
    if (result)
      return result;
    if (!op || (strcmp(op, "In") && strcmp(op, "NotIn")))
      JOBSPEC_FAIL("spec.failurePolicy.rules[%d].onExitCodes.operator: In or NotIn required", i);
    int k = 0;
    cJSON_ArrayForEach(v, ctrain_json_get(ex, "values")) {
      if (!strcmp(op, "In") && v->valuedouble == 0)
        JOBSPEC_FAIL("spec.failurePolicy.rules[%d].onExitCodes.values[%d]: 0 is success, never "
                     "a failure, with operator In",
                     i, k);
      k++;
    }
  }
  if (rs) {
    result = validate_matcher(js, i, "onTerminationReasons", rs, 0, msg, len);
    if (result)
      return result;
  }
  if (pc) {
    const int n = cJSON_GetArraySize(pc);
    if (!cJSON_IsArray(pc) || n < 1 || n > JOBSPEC_MAX_RULE_CONDS)
      JOBSPEC_FAIL("spec.failurePolicy.rules[%d].onPodConditions: 1..%d conditions required", i,
                   JOBSPEC_MAX_RULE_CONDS);
    int k = 0;
    cJSON_ArrayForEach(v, pc) {
      const char *ty = ctrain_json_str(v, "type"), *st = ctrain_json_str(v, "status");
      if (!ty || !*ty)
        JOBSPEC_FAIL("spec.failurePolicy.rules[%d].onPodConditions[%d].type: required", i, k);
      if (ctrain_json_get(v, "status") &&
          (!st || (strcmp(st, "True") && strcmp(st, "False") && strcmp(st, "Unknown"))))
        JOBSPEC_FAIL("spec.failurePolicy.rules[%d].onPodConditions[%d].status: True, False or "
                     "Unknown",
                     i, k);
      k++;
    }
  }
  return CTRAIN_OK;
}

/* spec.failurePolicy: what an older CRD's schema (or none) let through, and
 * what no schema can say (a containerName of the templates). */
static ctrain_err validate_rules(const job_spec *js, const cJSON *fp, char *msg, size_t len) {
  const cJSON *rules = ctrain_json_get(fp, "rules"), *r;
  if (!fp)
    return CTRAIN_OK;
  if (!cJSON_IsObject(fp))
    JOBSPEC_FAIL("spec.failurePolicy: must be an object");
  if (rules && !cJSON_IsArray(rules))
    JOBSPEC_FAIL("spec.failurePolicy.rules: must be a list");
  if (cJSON_GetArraySize(rules) > JOBSPEC_MAX_RULES)
    JOBSPEC_FAIL("spec.failurePolicy.rules: %d rules, at most %d", cJSON_GetArraySize(rules),
                 JOBSPEC_MAX_RULES);
  int i = 0;
  cJSON_ArrayForEach(r, rules) {
    ctrain_err result = validate_rule(js, i, r, msg, len);
    if (result)
      return result;
    i++;
  }
  return CTRAIN_OK;
}

/* What the schema cannot check, on the filled js, in the order users see. */
static ctrain_err validate(const job_spec *js, char *msg, size_t len) {
  const cJSON *spec = ctrain_json_get(js->job, "spec");
  const cJSON *rss = ctrain_json_get(spec, "replicaSpecs");
  const char *name = js->name;
  ctrain_err result;
  if (!cJSON_IsObject(spec))
    JOBSPEC_FAIL("spec: required");
  result = validate_numbers(spec, msg, len);
  if (result)
    return result;
  if (!name || !is_dns1035_label(name))
    JOBSPEC_FAIL(
        "metadata.name: '%s' must be a DNS-1035 label (lower-case letters, digits and '-', "
        "starting with a letter): it names the Service and the pod subdomain",
        name ? name : "");
  if (!cJSON_IsObject(ctrain_json_get(rss, "Worker")))
    JOBSPEC_FAIL("spec.replicaSpecs.Worker: required");
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    if (!js->present[t])
      continue;
    /* The count as written (js->replicas[t] is 0 when it is wrong). */
    const cJSON *rs = ctrain_json_get(rss, podbuild_type_spec_name(t));
    const int n = cJSON_IsObject(rs) ? (int)ctrain_json_int(rs, "replicas", 1) : 0;
    const int max = t == PODBUILD_WORKER ? JOBSPEC_MAX_WORKERS : 1;
    if (n < 1 || n > max)
      JOBSPEC_FAIL("spec.replicaSpecs.%s.replicas: %d is outside 1..%d", podbuild_type_spec_name(t),
                   n, max);
    char pod[256];
    if (podbuild_pod_name(name, t, n - 1, pod, sizeof(pod)) || strlen(pod) > PODBUILD_DNS_LABEL_MAX)
      JOBSPEC_FAIL(
          "metadata.name: '%s' is too long: pod and hostname '%s' would exceed %d characters", name,
          pod, PODBUILD_DNS_LABEL_MAX);
    result = validate_template(js, t, msg, len);
    if (result)
      return result;
  }
  const int64_t port = ctrain_json_int(spec, "port", CTRAIN_DEFAULT_COLLECTIVE_PORT);
  if (port < 1 || port > 65535)
    JOBSPEC_FAIL("spec.port: %" PRId64 " is outside 1..65535", port);
  if (enum_index(ctrain_json_str(spec, "restartPolicy"), jobspec_restart_names, 3) < 0)
    JOBSPEC_FAIL("spec.restartPolicy: unknown value '%s'", ctrain_json_str(spec, "restartPolicy"));
  if (enum_index(ctrain_json_str(spec, "cleanPodPolicy"), jobspec_clean_names, 3) < 0)
    JOBSPEC_FAIL("spec.cleanPodPolicy: unknown value '%s'",
                 ctrain_json_str(spec, "cleanPodPolicy"));
  if (enum_index(ctrain_json_str(spec, "successPolicy"), jobspec_success_names, 2) < 0)
    JOBSPEC_FAIL("spec.successPolicy: unknown value '%s'", ctrain_json_str(spec, "successPolicy"));
  if (js->backoff_limit < 0)
    JOBSPEC_FAIL("spec.backoffLimit: must be >= 0");
  if (js->ckpt.kind == JOBSPEC_CKPT_INVALID)
    JOBSPEC_FAIL("%s", js->ckpt.why);
  return validate_rules(js, ctrain_json_get(spec, "failurePolicy"), msg, len);
}

void jobspec_read(const cJSON *job, job_spec *out) {
  fill(job, out);
}

ctrain_err jobspec_parse(const cJSON *job, job_spec *out, char *msg, size_t len) {
  fill(job, out);
  return validate(out, msg, len);
}
