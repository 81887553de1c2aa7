/* reconcile.c - the pure decision core of the TrainingJob reconciler (see
 * controller/reconcile.h for the rules and how to execute the actions). */
#include "controller/reconcile.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "ctrain/kube_time.h"
#include "controller/podbuild.h"

/* Condition types and reasons. */
#define C_CREATED    "Created"
#define C_RUNNING    "Running"
#define C_RESTARTING "Restarting"
#define C_SUCCEEDED  "Succeeded"
#define C_FAILED     "Failed"
#define C_SUSPENDED  "Suspended"

#define R_CREATED       "TrainingJobCreated"
#define R_RUNNING       "TrainingJobRunning"
#define R_RESTART       "GangRestart"
#define R_SUCCEEDED     "TrainingJobSucceeded"
#define R_SUSPENDED     "TrainingJobSuspended"
#define R_RESUMED       "TrainingJobResumed"
#define R_NOT_RETRYABLE "NotRetryable"
#define R_BACKOFF       "BackoffLimitExceeded"
#define R_DEADLINE      "DeadlineExceeded"
#define R_INVALID       "InvalidSpec"

typedef enum { POL_ON_FAILURE, POL_EXIT_CODE, POL_NEVER } restart_policy;
typedef enum { CLEAN_RUNNING, CLEAN_ALL, CLEAN_NONE } clean_policy;
typedef enum { SUCC_CHIEF_OR_WORKER0, SUCC_ALL_WORKERS } success_policy;
typedef enum { PH_PENDING, PH_RUNNING, PH_SUCCEEDED, PH_FAILED, PH_UNKNOWN } pod_phase;

/* One observed pod, its fields borrowed from the input. */
typedef struct {
  const char *name, *uid;
  int type;    /* podbuild_type, -1 when the labels name none */
  int index;   /* -1 when unknown */
  int attempt; /* 0 when unlabeled */
  int deleting;
  pod_phase phase;
  int exit_code;      /* failed pods: the first non-zero container exit code, -1 if none */
  const char *reason; /* failed pods: terminated.reason or status.reason */
  int64_t finished;   /* failed pods: terminated.finishedAt, 0 if unknown */
  int slot;           /* 1: it is the desired pod of (type, index) */
  /* Pending pods that cannot start: why (a container's waiting reason such
   * as ErrImageNeverPull, or Unschedulable) and the kubelet's or the
   * scheduler's words; NULL when none. */
  const char *stuck_reason, *stuck_message, *stuck_container, *stuck_image;
} obs_pod;

typedef struct {
  const recon_input *in;
  recon_expectations *x;
  recon_result *res;
  char *errbuf;
  size_t errlen;
  const cJSON *job, *spec, *old_status;
  const char *name, *ns, *uid;
  int replicas[PODBUILD_NTYPES];
  int backoff_limit;
  restart_policy restart;
  clean_policy clean;
  success_policy success;
  int suspend;
  int64_t deadline_s; /* 0: none */
  int64_t ttl_s;      /* -1: none */
  obs_pod *pods;
  size_t n_pods;
  obs_pod **slots[PODBUILD_NTYPES]; /* (replicas[t]) the pod holding each name, or NULL */
  cJSON *status;                    /* the new status being built */
  int attempt, restarts;
  int64_t requeue; /* -1: none */
  int invalid;     /* the spec failed recon_validate this pass: no action but the status */
} recon_ctx;

/* ---- small JSON helpers ---------------------------------------------- */

static const cJSON *jget(const cJSON *o, const char *k) {
  return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = jget(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jint(const cJSON *o, const char *k, int64_t def) {
  const cJSON *v = jget(o, k);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : def;
}

/* Parses a non-negative decimal label value; -1 when it is not one. */
static int parse_uint(const char *s) {
  long v = 0;
  if (!s || !*s || strlen(s) > 9)
    return -1;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p))
      return -1;
    v = v * 10 + (*p - '0');
  }
  return (int)v;
}

/* Replaces (or adds) o[k] with `v` (taken). 0 on failure. */
static int put(cJSON *o, const char *k, cJSON *v) {
  if (!v)
    return 0;
  if (cJSON_GetObjectItemCaseSensitive(o, k))
    return cJSON_ReplaceItemInObjectCaseSensitive(o, k, v) ? 1 : (cJSON_Delete(v), 0);
  return cJSON_AddItemToObject(o, k, v) ? 1 : (cJSON_Delete(v), 0);
}

/* ---- time ---------------------------------------------------------------- */

/* ---- expectations -------------------------------------------------------- */

void recon_expectations_init(recon_expectations *x) {
  memset(x, 0, sizeof(*x));
}

void recon_expectations_free(recon_expectations *x) {
  if (!x)
    return;
  free(x->e);
  memset(x, 0, sizeof(*x));
}

static void exp_remove_at(recon_expectations *x, size_t i) {
  x->e[i] = x->e[--x->n];
}

void recon_expect_creation_failed(recon_expectations *x, const char *pod_name) {
  for (size_t i = 0; x && pod_name && i < x->n; i++)
    if (!x->e[i].is_delete && !strcmp(x->e[i].name, pod_name)) {
      exp_remove_at(x, i);
      return;
    }
}

void recon_expect_deletion_failed(recon_expectations *x, const char *uid) {
  for (size_t i = 0; x && uid && i < x->n; i++)
    if (x->e[i].is_delete && !strcmp(x->e[i].uid, uid)) {
      exp_remove_at(x, i);
      return;
    }
}

size_t recon_expectations_pending(const recon_expectations *x) {
  return x ? x->n : 0;
}

static ctrain_err exp_add(recon_expectations *x, int is_delete, const char *name, const char *uid,
                          int attempt, int64_t now) {
  if (x->n == x->cap) {
    size_t cap = x->cap ? x->cap * 2 : 16;
    recon_expect_entry *e = realloc(x->e, cap * sizeof(*e));
    if (!e)
      return CTRAIN_E_NOMEM;
    x->e = e;
    x->cap = cap;
  }
  recon_expect_entry *en = &x->e[x->n];
  memset(en, 0, sizeof(*en));
  en->is_delete = is_delete;
  snprintf(en->name, sizeof(en->name), "%s", name ? name : "");
  snprintf(en->uid, sizeof(en->uid), "%s", uid ? uid : "");
  en->attempt = attempt;
  en->at = now;
  x->n++;
  return CTRAIN_OK;
}

static int exp_pending_create(const recon_expectations *x, const char *name) {
  for (size_t i = 0; i < x->n; i++)
    if (!x->e[i].is_delete && !strcmp(x->e[i].name, name))
      return 1;
  return 0;
}

static int exp_pending_delete(const recon_expectations *x, const char *uid) {
  for (size_t i = 0; uid && i < x->n; i++)
    if (x->e[i].is_delete && !strcmp(x->e[i].uid, uid))
      return 1;
  return 0;
}

/* Drops the entries the observed pods satisfy (a create whose pod is seen; a
 * delete whose pod is gone or has a deletionTimestamp, as the Job controller
 * counts it) and the expired ones. Returns the earliest expiry of what is
 * left (INT64_MAX when nothing is). */
static int64_t exp_observe(recon_ctx *c) {
  recon_expectations *x = c->x;
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < x->n;) {
    recon_expect_entry *en = &x->e[i];
    int done = en->at + RECON_EXPECTATIONS_TTL_S <= c->in->now;
    if (!done && !en->is_delete) {
      for (size_t k = 0; k < c->n_pods && !done; k++)
        done = !strcmp(c->pods[k].name, en->name);
    } else if (!done) {
      done = 1;
      for (size_t k = 0; k < c->n_pods; k++)
        if (c->pods[k].uid && !strcmp(c->pods[k].uid, en->uid)) {
          done = c->pods[k].deleting;
          break;
        }
    }
    if (done) {
      exp_remove_at(x, i);
      continue;
    }
    if (en->at + RECON_EXPECTATIONS_TTL_S < next)
      next = en->at + RECON_EXPECTATIONS_TTL_S;
    i++;
  }
  return next;
}

/* ---- results --------------------------------------------------------------- */

static const char *const kind_names[] = {
    "UpdateStatus", "CreateService", "CreateSecret", "UpdateSecret", "DeletePod",
    "CreatePod",    "Event",         "DeleteJob",    "Requeue",      "CreateNetworkPolicy",
};

const char *recon_action_kind_name(recon_action_kind k) {
  return (unsigned)k < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[k] : "Unknown";
}

void recon_result_free(recon_result *res) {
  if (!res)
    return;
  for (size_t i = 0; i < res->n_actions; i++) {
    cJSON_Delete(res->actions[i].object);
    free(res->actions[i].name);
    free(res->actions[i].uid);
    free(res->actions[i].message);
  }
  free(res->actions);
  cJSON_Delete(res->status);
  memset(res, 0, sizeof(*res));
}

static char *dupstr(const char *s) {
  return s ? strdup(s) : NULL;
}

/* Appends an action; takes `object` (deleted on failure). Returns its index
 * or -1 when out of memory. */
static int push(recon_ctx *c, recon_action_kind kind, cJSON *object, const char *name,
                const char *uid) {
  recon_result *r = c->res;
  if (r->n_actions == r->cap_actions) {
    size_t cap = r->cap_actions ? r->cap_actions * 2 : 16;
    recon_action *a = realloc(r->actions, cap * sizeof(*a));
    if (!a) {
      cJSON_Delete(object);
      return -1;
    }
    r->actions = a;
    r->cap_actions = cap;
  }
  recon_action *a = &r->actions[r->n_actions];
  memset(a, 0, sizeof(*a));
  a->kind = kind;
  a->object = object;
  a->after = -1;
  a->name = dupstr(name);
  a->uid = dupstr(uid);
  r->n_actions++;
  if ((name && !a->name) || (uid && !a->uid))
    return -1;
  return (int)(r->n_actions - 1);
}

/* Emits an event on the job. `after`: the action it reports, or -1. */
static ctrain_err event(recon_ctx *c, const char *type, const char *reason, int after,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static ctrain_err event(recon_ctx *c, const char *type, const char *reason, int after,
                        const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  cJSON *io = cJSON_CreateObject();
  if (!io || !cJSON_AddStringToObject(io, "apiVersion", PODBUILD_API_VERSION) ||
      !cJSON_AddStringToObject(io, "kind", PODBUILD_KIND) ||
      !cJSON_AddStringToObject(io, "name", c->name) ||
      !cJSON_AddStringToObject(io, "namespace", c->ns) ||
      !cJSON_AddStringToObject(io, "uid", c->uid)) {
    cJSON_Delete(io);
    return CTRAIN_E_NOMEM;
  }
  int i = push(c, RECON_EVENT, io, NULL, NULL);
  if (i < 0)
    return CTRAIN_E_NOMEM;
  recon_action *a = &c->res->actions[i];
  a->event_type = type;
  a->reason = reason;
  a->after = after;
  a->message = strdup(msg);
  return a->message ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

static ctrain_err delete_pod(recon_ctx *c, const obs_pod *p) {
  if (p->deleting || !p->uid || exp_pending_delete(c->x, p->uid))
    return CTRAIN_OK;
  if (push(c, RECON_DELETE_POD, NULL, p->name, p->uid) < 0)
    return CTRAIN_E_NOMEM;
  return exp_add(c->x, 1, p->name, p->uid, p->attempt, c->in->now);
}

static void requeue_at(recon_ctx *c, int64_t when) {
  int64_t after = when - c->in->now;
  if (after < 1)
    after = 1;
  if (c->requeue < 0 || after < c->requeue)
    c->requeue = after;
}

/* ---- conditions -------------------------------------------------------- */

static cJSON *cond_find(const cJSON *status, const char *type) {
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
  cJSON *it;
  cJSON_ArrayForEach(it, conds) {
    const char *t = jstr(it, "type");
    if (t && !strcmp(t, type))
      return it;
  }
  return NULL;
}

static int cond_true(const cJSON *status, const char *type) {
  const char *s = jstr(cond_find(status, type), "status");
  return s && !strcmp(s, "True");
}

/* Sets condition `type` of the new status. A status change stamps
 * lastTransitionTime; a condition that becomes True moves to the end of the
 * list; a False condition that never existed is not added. Sets *changed to
 * 1 when the status of the type changed. */
static ctrain_err cond_set(recon_ctx *c, const char *type, int value, const char *reason,
                           const char *message, int *changed) {
  char now[40];
  const char *want = value ? "True" : "False";
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(c->status, "conditions");
  cJSON *cur = cond_find(c->status, type);
  if (changed)
    *changed = 0;
  if (kube_time_format(c->in->now, now, sizeof(now)))
    return CTRAIN_E_INVAL;
  if (!cur && !value)
    return CTRAIN_OK;
  const char *st = jstr(cur, "status");
  if (cur && st && !strcmp(st, want)) {
    const char *r = jstr(cur, "reason"), *m = jstr(cur, "message");
    if (r && m && !strcmp(r, reason) && !strcmp(m, message))
      return CTRAIN_OK;
    if (!put(cur, "reason", cJSON_CreateString(reason)) ||
        !put(cur, "message", cJSON_CreateString(message)) ||
        !put(cur, "lastUpdateTime", cJSON_CreateString(now)))
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

static ctrain_err set_time_field(recon_ctx *c, const char *field, int64_t t) {
  char buf[40];
  if (kube_time_format(t, buf, sizeof(buf)))
    return CTRAIN_E_INVAL;
  return put(c->status, field, cJSON_CreateString(buf)) ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

/* ---- validation ------------------------------------------------------------ */

#define VFAIL(...)                                                                                 \
  do {                                                                                             \
    if (msg && len)                                                                                \
      snprintf(msg, len, __VA_ARGS__);                                                             \
    return CTRAIN_E_CONFIG;                                                                        \
  } while (0)

static int is_dns1035_label(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > PODBUILD_DNS_LABEL_MAX || !islower((unsigned char)s[0]) || s[n - 1] == '-')
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
      return 0;
  return 1;
}

static int enum_index(const char *v, const char *const *names, int n, int def) {
  if (!v)
    return def;
  for (int i = 0; i < n; i++)
    if (!strcmp(v, names[i]))
      return i;
  return -1;
}

static const char *const restart_names[] = {"OnFailure", "ExitCode", "Never"};
static const char *const clean_names[] = {"Running", "All", "None"};
static const char *const success_names[] = {"ChiefOrWorker0", "AllWorkers"};

/* Checks one replica type's template. */
static ctrain_err validate_template(const cJSON *job, podbuild_type t, char *msg, size_t len) {
  const char *tn = podbuild_type_spec_name(t);
  const cJSON *spec = jget(job, "spec");
  const cJSON *rs = jget(jget(spec, "replicaSpecs"), tn);
  const cJSON *pspec = jget(jget(rs, "template"), "spec");
  const cJSON *containers = jget(pspec, "containers");
  const int port = (int)jint(spec, "port", 2222);
  const cJSON *ckpt = jget(spec, "checkpoint");
  const char *mount = cJSON_IsObject(ckpt) ? jstr(ckpt, "mountPath") : NULL;
  const char *port_owner = NULL;
  if (!cJSON_IsObject(pspec))
    VFAIL("spec.replicaSpecs.%s.template.spec: required", tn);
  if (!cJSON_IsArray(containers) || cJSON_GetArraySize(containers) < 1)
    VFAIL("spec.replicaSpecs.%s.template.spec.containers: at least one container is required", tn);
  int ci = 0;
  const cJSON *ctr;
  cJSON_ArrayForEach(ctr, containers) {
    const char *cname = jstr(ctr, "name");
    if (!cJSON_IsObject(ctr) || !cname || !*cname)
      VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].name: required", tn, ci);
    int cj = 0;
    const cJSON *other;
    cJSON_ArrayForEach(other, containers) {
      if (cj >= ci)
        break;
      const char *on = jstr(other, "name");
      if (on && !strcmp(on, cname))
        VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].name: duplicate name '%s'", tn, ci,
              cname);
      cj++;
    }
    int pi = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, jget(ctr, "ports")) {
      if (jint(p, "containerPort", -1) == port) {
        if (port_owner)
          VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].ports[%d].containerPort: %d "
                "is spec.port and is already declared by container '%s' of the same pod",
                tn, ci, pi, port, port_owner);
        port_owner = cname;
      }
      pi++;
    }
    int mi = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, jget(ctr, "volumeMounts")) {
      const char *mp = jstr(m, "mountPath"), *mn = jstr(m, "name");
      if (mount && mp && !strcmp(mp, mount))
        VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].volumeMounts[%d].mountPath: "
              "'%s' is spec.checkpoint.mountPath",
              tn, ci, mi, mp);
      if (mount && mn && !strcmp(mn, PODBUILD_CKPT_VOLUME))
        VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].volumeMounts[%d].name: '%s' is "
              "reserved for spec.checkpoint",
              tn, ci, mi, mn);
      mi++;
    }
    ci++;
  }
  int vi = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, jget(pspec, "volumes")) {
    const char *vn = jstr(v, "name");
    if (mount && vn && !strcmp(vn, PODBUILD_CKPT_VOLUME))
      VFAIL("spec.replicaSpecs.%s.template.spec.volumes[%d].name: '%s' is reserved for "
            "spec.checkpoint",
            tn, vi, vn);
    vi++;
  }
  return CTRAIN_OK;
}

ctrain_err recon_validate(const cJSON *job, char *msg, size_t len) {
  const cJSON *spec = jget(job, "spec");
  const char *name = jstr(jget(job, "metadata"), "name");
  ctrain_err result;
  if (!cJSON_IsObject(spec))
    VFAIL("spec: required");
  if (!name || !is_dns1035_label(name))
    VFAIL("metadata.name: '%s' must be a DNS-1035 label (lower-case letters, digits and '-', "
          "starting with a letter): it names the Service and the pod subdomain",
          name ? name : "");
  if (!cJSON_IsObject(jget(jget(spec, "replicaSpecs"), "Worker")))
    VFAIL("spec.replicaSpecs.Worker: required");
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const cJSON *rs = jget(jget(spec, "replicaSpecs"), podbuild_type_spec_name(t));
    if (!rs)
      continue;
    const int n = podbuild_replicas(job, t);
    const int max = t == PODBUILD_WORKER ? 4096 : 1;
    if (n < 1 || n > max)
      VFAIL("spec.replicaSpecs.%s.replicas: %d is outside 1..%d", podbuild_type_spec_name(t), n,
            max);
    char pod[256];
    if (podbuild_pod_name(name, t, n - 1, pod, sizeof(pod)) || strlen(pod) > PODBUILD_DNS_LABEL_MAX)
      VFAIL("metadata.name: '%s' is too long: pod and hostname '%s' would exceed %d characters",
            name, pod, PODBUILD_DNS_LABEL_MAX);
    result = validate_template(job, t, msg, len);
    if (result)
      return result;
  }
  const int64_t port = jint(spec, "port", 2222);
  if (port < 1 || port > 65535)
    VFAIL("spec.port: %" PRId64 " is outside 1..65535", port);
  if (enum_index(jstr(spec, "restartPolicy"), restart_names, 3, 0) < 0)
    VFAIL("spec.restartPolicy: unknown value '%s'", jstr(spec, "restartPolicy"));
  if (enum_index(jstr(spec, "cleanPodPolicy"), clean_names, 3, 0) < 0)
    VFAIL("spec.cleanPodPolicy: unknown value '%s'", jstr(spec, "cleanPodPolicy"));
  if (enum_index(jstr(spec, "successPolicy"), success_names, 2, 0) < 0)
    VFAIL("spec.successPolicy: unknown value '%s'", jstr(spec, "successPolicy"));
  if (jint(spec, "backoffLimit", 3) < 0)
    VFAIL("spec.backoffLimit: must be >= 0");
  const cJSON *ckpt = jget(spec, "checkpoint");
  if (ckpt) {
    const char *mp = jstr(ckpt, "mountPath");
    if (!mp || mp[0] != '/')
      VFAIL("spec.checkpoint.mountPath: must be an absolute path");
    if (!cJSON_IsObject(jget(ckpt, "volume")))
      VFAIL("spec.checkpoint.volume: required");
  }
  return CTRAIN_OK;
}

/* ---- observation --------------------------------------------------------- */

/* Fills the failure fields of a pod: the first container that terminated
 * with a non-zero code. Returns 1 when one did. */
static int container_failure(obs_pod *p, const cJSON *pod_status) {
  const cJSON *cs;
  cJSON_ArrayForEach(cs, jget(pod_status, "containerStatuses")) {
    const cJSON *term = jget(jget(cs, "state"), "terminated");
    if (!term)
      continue;
    int64_t code = jint(term, "exitCode", 0);
    if (code == 0)
      continue;
    p->exit_code = (int)code;
    p->reason = jstr(term, "reason");
    int64_t t = 0;
    if (!kube_time_parse(jstr(term, "finishedAt"), &t))
      p->finished = t;
    return 1;
  }
  return 0;
}

/* Waiting reasons after which a container does not start by itself soon:
 * image problems and bad container configuration (kubelet's names). */
static const char *stuck_waiting_reason(const char *r) {
  static const char *const reasons[] = {
      "ErrImagePull",     "ImagePullBackOff",           "ErrImageNeverPull",
      "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
      "RunContainerError"};
  for (size_t i = 0; r && i < sizeof(reasons) / sizeof(reasons[0]); i++)
    if (!strcmp(r, reasons[i]))
      return reasons[i]; /* static: event reasons outlive the input */
  return NULL;
}

/* Fills the stuck_* fields of a pending pod. */
static void observe_stuck(obs_pod *p, const cJSON *st) {
  const char *kinds[] = {"initContainerStatuses", "containerStatuses"};
  for (size_t k = 0; k < 2; k++) {
    const cJSON *cs;
    cJSON_ArrayForEach(cs, jget(st, kinds[k])) {
      const cJSON *w = jget(jget(cs, "state"), "waiting");
      const char *r = w ? stuck_waiting_reason(jstr(w, "reason")) : NULL;
      if (r) {
        p->stuck_reason = r;
        p->stuck_message = jstr(w, "message");
        p->stuck_container = jstr(cs, "name");
        p->stuck_image = jstr(cs, "image");
        return;
      }
    }
  }
  const cJSON *pc;
  cJSON_ArrayForEach(pc, jget(st, "conditions")) {
    const char *t = jstr(pc, "type"), *cst = jstr(pc, "status"), *r = jstr(pc, "reason");
    if (t && !strcmp(t, "PodScheduled") && cst && !strcmp(cst, "False") && r &&
        !strcmp(r, "Unschedulable")) {
      p->stuck_reason = "Unschedulable";
      p->stuck_message = jstr(pc, "message");
      return;
    }
  }
}

static void observe_pod(obs_pod *p, const cJSON *pod) {
  const cJSON *md = jget(pod, "metadata"), *labels = jget(md, "labels");
  const cJSON *st = jget(pod, "status");
  const char *phase = jstr(st, "phase");
  memset(p, 0, sizeof(*p));
  p->name = jstr(md, "name");
  p->uid = jstr(md, "uid");
  p->type = podbuild_type_from_label(jstr(labels, PODBUILD_LABEL_TYPE));
  p->index = parse_uint(jstr(labels, PODBUILD_LABEL_INDEX));
  p->attempt = parse_uint(jstr(labels, PODBUILD_LABEL_ATTEMPT));
  if (p->attempt < 0)
    p->attempt = 0;
  p->deleting = jget(md, "deletionTimestamp") && !cJSON_IsNull(jget(md, "deletionTimestamp"));
  p->exit_code = -1;
  if (!phase || !strcmp(phase, "Pending"))
    p->phase = PH_PENDING;
  else if (!strcmp(phase, "Running"))
    p->phase = PH_RUNNING;
  else if (!strcmp(phase, "Succeeded"))
    p->phase = PH_SUCCEEDED;
  else if (!strcmp(phase, "Failed"))
    p->phase = PH_FAILED;
  else
    p->phase = PH_UNKNOWN;
  /* restartPolicy Never: a container that exited non-zero stays so, even
   * when a sidecar keeps the pod Running. */
  if (p->phase != PH_SUCCEEDED && container_failure(p, st))
    p->phase = PH_FAILED;
  if (p->phase == PH_FAILED && !p->reason)
    p->reason = jstr(st, "reason");
  if (p->phase == PH_PENDING)
    observe_stuck(p, st);
}

static int is_collective(int t) {
  return t == PODBUILD_CHIEF || t == PODBUILD_WORKER;
}

/* Builds c->pods and c->slots from the input. */
static ctrain_err observe(recon_ctx *c) {
  const cJSON *list = c->in->pods;
  if (cJSON_IsObject(list))
    list = jget(list, "items");
  size_t n = cJSON_IsArray(list) ? (size_t)cJSON_GetArraySize(list) : 0;
  c->pods = calloc(n ? n : 1, sizeof(*c->pods));
  if (!c->pods)
    return CTRAIN_E_NOMEM;
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    c->slots[t] = calloc(c->replicas[t] ? (size_t)c->replicas[t] : 1, sizeof(obs_pod *));
    if (!c->slots[t])
      return CTRAIN_E_NOMEM;
  }
  const cJSON *pod;
  cJSON_ArrayForEach(pod, list) {
    obs_pod *p = &c->pods[c->n_pods];
    observe_pod(p, pod);
    if (!p->name)
      continue;
    /* A pod of someone else's (another controller, a namesake job) is not ours. */
    const cJSON *ref;
    int foreign = 0;
    cJSON_ArrayForEach(ref, jget(jget(pod, "metadata"), "ownerReferences")) {
      const char *ruid = jstr(ref, "uid");
      if (cJSON_IsTrue(jget(ref, "controller")) && ruid && strcmp(ruid, c->uid))
        foreign = 1;
    }
    if (foreign)
      continue;
    c->n_pods++;
    if (p->type < 0 || p->index < 0 || p->index >= c->replicas[p->type])
      continue;
    char want[256];
    if (podbuild_pod_name(c->name, p->type, p->index, want, sizeof(want)) || strcmp(want, p->name))
      continue;
    if (!c->slots[p->type][p->index]) {
      c->slots[p->type][p->index] = p;
      p->slot = 1;
    }
  }
  return CTRAIN_OK;
}

/* ---- status ---------------------------------------------------------------- */

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
  *index = parse_uint(dash + 1);
  return *type >= 0 && *index >= 0 && *index < c->replicas[*type] &&
         !podbuild_pod_name(c->name, *type, *index, want, sizeof(want)) && !strcmp(want, name);
}

/* replicaStatuses counts the pods of the current attempt (any attempt for
 * the evaluator). `active` includes the creates in flight (returned by this
 * pass or still expected), as the Job controller counts the pods it just
 * created: the status written before the creates already says what they
 * make, and the pass that sees them appear has nothing to write. A create
 * that fails leaves the expectations and the next pass corrects the count. */
static ctrain_err fill_counts(recon_ctx *c) {
  cJSON *rs = cJSON_CreateObject();
  if (!rs || !put(c->status, "replicaStatuses", rs))
    return CTRAIN_E_NOMEM;
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    if (!c->replicas[t])
      continue;
    int active = 0, succeeded = 0, failed = 0;
    for (size_t k = 0; k < c->n_pods; k++) {
      const obs_pod *p = &c->pods[k];
      if (p->type != t || (is_collective(t) && p->attempt != c->attempt))
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
      if (!en->is_delete && (!is_collective(t) || en->attempt == c->attempt) &&
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
  if (!put(c->status, "restarts", cJSON_CreateNumber(c->restarts)) ||
      !put(c->status, "attempt", cJSON_CreateNumber(c->attempt)))
    return CTRAIN_E_NOMEM;
  const cJSON *gen = jget(jget(c->job, "metadata"), "generation");
  if (cJSON_IsNumber(gen) &&
      !put(c->status, "observedGeneration", cJSON_CreateNumber(gen->valuedouble)))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* Starts the new status from the observed one: conditions, times. */
static ctrain_err init_status(recon_ctx *c) {
  c->status = cJSON_CreateObject();
  if (!c->status)
    return CTRAIN_E_NOMEM;
  const cJSON *conds = jget(c->old_status, "conditions");
  if (cJSON_IsArray(conds) && !put(c->status, "conditions", cJSON_Duplicate(conds, 1)))
    return CTRAIN_E_NOMEM;
  const char *fields[] = {"startTime", "completionTime"};
  for (int i = 0; i < 2; i++) {
    const char *v = jstr(c->old_status, fields[i]);
    if (v && !put(c->status, fields[i], cJSON_CreateString(v)))
      return CTRAIN_E_NOMEM;
  }
  return CTRAIN_OK;
}

/* ---- lifecycle steps ------------------------------------------------------- */

/* What a finished job still does: cleanPodPolicy, then TTL. Sets *deleted
 * when the TTL expired and the job is to be deleted. */
static ctrain_err finished(recon_ctx *c, int *deleted) {
  ctrain_err result = CTRAIN_OK;
  *deleted = 0;
  if (c->ttl_s >= 0) {
    int64_t base = 0;
    if (kube_time_parse(jstr(c->status, "completionTime"), &base)) {
      const char *ty = cond_true(c->status, C_SUCCEEDED) ? C_SUCCEEDED : C_FAILED;
      if (kube_time_parse(jstr(cond_find(c->status, ty), "lastTransitionTime"), &base))
        base = c->in->now;
    }
    if (c->in->now >= base + c->ttl_s) {
      *deleted = 1;
      return push(c, RECON_DELETE_JOB, NULL, c->name, c->uid) < 0 ? CTRAIN_E_NOMEM : CTRAIN_OK;
    }
    requeue_at(c, base + c->ttl_s);
  }
  for (size_t k = 0; k < c->n_pods && c->clean != CLEAN_NONE; k++) {
    const obs_pod *p = &c->pods[k];
    if (c->clean == CLEAN_RUNNING && p->phase != PH_PENDING && p->phase != PH_RUNNING &&
        p->phase != PH_UNKNOWN)
      continue;
    result = delete_pod(c, p);
    if (result)
      return result;
  }
  return result;
}

/* Marks the job Failed with `reason`/`message`. */
static ctrain_err fail_job(recon_ctx *c, const char *reason, const char *message, int emit) {
  ctrain_err result;
  int changed = 0;
  result = cond_set(c, C_FAILED, 1, reason, message, &changed);
  if (!result)
    result = cond_set(c, C_RUNNING, 0, reason, message, NULL);
  if (!result)
    result = cond_set(c, C_RESTARTING, 0, reason, message, NULL);
  if (!result && !jstr(c->status, "completionTime"))
    result = set_time_field(c, "completionTime", c->in->now);
  if (!result && changed && emit)
    result = event(c, "Warning", "Failed", -1, "%s", message);
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

static void describe_failure(const obs_pod *p, char *buf, size_t len) {
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

/* Looks at the failed collective pods of the current attempt. Sets *done
 * when the job became terminal. */
static ctrain_err handle_failures(recon_ctx *c, int *done) {
  ctrain_err result = CTRAIN_OK;
  const obs_pod *first = NULL, *first_perm = NULL;
  char what[512], msg[1024];
  *done = 0;
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++)
    for (int i = 0; i < c->replicas[t]; i++) {
      obs_pod *p = c->slots[t][i];
      if (!p || p->attempt != c->attempt)
        continue;
      if (p->deleting && p->phase != PH_SUCCEEDED && !exp_pending_delete(c->x, p->uid)) {
        /* Deleted by someone else (kubectl delete, a drain's eviction, a
         * preemption) before it finished: the attempt is over, as for a
         * failure. Its name cannot be reused within the attempt. */
        if (p->phase != PH_FAILED) {
          p->phase = PH_FAILED;
          p->exit_code = -1;
          p->reason = "Deleted";
        }
      } else if (p->deleting || p->phase != PH_FAILED) {
        continue;
      }
      if (!first || cause_before(p, first))
        first = p;
      if (!retries(c->restart, pod_class(p)) && (!first_perm || cause_before(p, first_perm)))
        first_perm = p;
    }
  if (!first)
    return CTRAIN_OK;
  if (first_perm) {
    describe_failure(first_perm, what, sizeof(what));
    snprintf(msg, sizeof(msg), "%s, which restartPolicy %s does not retry", what,
             restart_names[c->restart]);
    *done = 1;
    return fail_job(c, R_NOT_RETRYABLE, msg, 1);
  }
  describe_failure(first, what, sizeof(what));
  if (c->restarts >= c->backoff_limit) {
    snprintf(msg, sizeof(msg), "backoffLimit %d reached after %d restarts; last failure: %s",
             c->backoff_limit, c->restarts, what);
    *done = 1;
    return fail_job(c, R_BACKOFF, msg, 1);
  }
  /* Gang restart: the attempt is over for every collective member. */
  c->attempt++;
  c->restarts++;
  if (c->attempt > c->x->attempt) {
    c->x->attempt = c->attempt;
    c->x->restarts = c->restarts;
  }
  snprintf(msg, sizeof(msg), "%s; gang restart %d of %d, attempt %d", what, c->restarts,
           c->backoff_limit, c->attempt);
  int changed = 0;
  result = cond_set(c, C_RESTARTING, 1, R_RESTART, msg, &changed);
  if (!result)
    result = cond_set(c, C_RUNNING, 0, R_RESTART, msg, NULL);
  if (!result)
    result = event(c, "Warning", "Restarting", -1, "%s", msg);
  /* A failed evaluator gets a fresh start with the new attempt. */
  for (int i = 0; !result && i < c->replicas[PODBUILD_EVALUATOR]; i++) {
    const obs_pod *p = c->slots[PODBUILD_EVALUATOR][i];
    if (p && p->phase == PH_FAILED)
      result = delete_pod(c, p);
  }
  return result;
}

/* Whether the success policy holds for the current attempt; names the pod or
 * group in `what`. */
static int succeeded(recon_ctx *c, char *what, size_t len) {
  const obs_pod *p;
  if (c->success == SUCC_CHIEF_OR_WORKER0) {
    p = c->replicas[PODBUILD_CHIEF] ? c->slots[PODBUILD_CHIEF][0] : c->slots[PODBUILD_WORKER][0];
    if (p && p->attempt == c->attempt && p->phase == PH_SUCCEEDED) {
      snprintf(what, len, "pod %s succeeded", p->name);
      return 1;
    }
    return 0;
  }
  for (int t = PODBUILD_CHIEF; t <= PODBUILD_WORKER; t++)
    for (int i = 0; i < c->replicas[t]; i++) {
      p = c->slots[t][i];
      if (!p || p->attempt != c->attempt || p->phase != PH_SUCCEEDED)
        return 0;
    }
  snprintf(what, len, "all %d workers%s succeeded", c->replicas[PODBUILD_WORKER],
           c->replicas[PODBUILD_CHIEF] ? " and the chief" : "");
  return 1;
}

static ctrain_err ensure_secret(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  cJSON *sec = NULL;
  unsigned char raw[PODBUILD_TOKEN_BYTES];
  char hex[2 * PODBUILD_TOKEN_BYTES + 1], key[64];
  if (podbuild_token_key(c->attempt, key, sizeof(key)))
    return CTRAIN_E_INVAL;
  const cJSON *sd = c->in->secret;
  if (sd && (jget(jget(sd, "data"), key) || jget(jget(sd, "stringData"), key)))
    return CTRAIN_OK;
  recon_rand_fn rnd = c->in->rand ? c->in->rand : recon_random_bytes;
  result = rnd(c->in->rand_ctx, raw, sizeof(raw));
  if (result) {
    if (c->errbuf && c->errlen)
      snprintf(c->errbuf, c->errlen, "random bytes for the job token: %s", ctrain_strerror(result));
    goto out;
  }
  for (size_t i = 0; i < sizeof(raw); i++)
    snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  result = podbuild_secret(c->job, c->attempt, hex,
                           sd ? jstr(jget(sd, "metadata"), "resourceVersion") : NULL, &sec,
                           c->errbuf, c->errlen);
  if (result)
    goto out;
  if (push(c, sd ? RECON_UPDATE_SECRET : RECON_CREATE_SECRET, sec, NULL, NULL) < 0)
    result = CTRAIN_E_NOMEM;
  sec = NULL;
out:
  memset(raw, 0, sizeof(raw));
  memset(hex, 0, sizeof(hex));
  cJSON_Delete(sec);
  return result;
}

/* Deletes pods that are not the desired pod of the current attempt: older
 * attempts of the collective, indexes past `replicas`, unknown names. */
static ctrain_err delete_strays(recon_ctx *c) {
  for (size_t k = 0; k < c->n_pods; k++) {
    const obs_pod *p = &c->pods[k];
    int stray = !p->slot || (is_collective(p->type) && p->attempt != c->attempt);
    if (stray) {
      ctrain_err result = delete_pod(c, p);
      if (result)
        return result;
    }
  }
  return CTRAIN_OK;
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
  for (int t = 0; t < PODBUILD_NTYPES && budget > 0; t++)
    for (int i = 0; i < c->replicas[t] && budget > 0; i++) {
      char name[256];
      cJSON *pod = NULL;
      if (c->slots[t][i])
        continue; /* the name is taken: ours, or an older one going away */
      if (podbuild_pod_name(c->name, t, i, name, sizeof(name)))
        return CTRAIN_E_INVAL;
      if (exp_pending_create(c->x, name))
        continue;
      result = podbuild_pod(c->job, t, i, c->attempt, &pod, c->errbuf, c->errlen);
      if (result)
        return result;
      int idx = push(c, RECON_CREATE_POD, pod, name, NULL);
      if (idx < 0)
        return CTRAIN_E_NOMEM;
      c->res->actions[idx].attempt = c->attempt;
      result = exp_add(c->x, 0, name, NULL, c->attempt, c->in->now);
      if (!result)
        result = event(c, "Normal", "SuccessfulCreatePod", idx, "Created pod: %s (attempt %d)",
                       name, c->attempt);
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
    for (int i = 0; i < c->replicas[t]; i++) {
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
  ctrain_err result = cond_set(c, C_RUNNING, 1, R_RUNNING, msg, NULL);
  if (!result)
    result = cond_set(c, C_RESTARTING, 0, R_RUNNING, msg, NULL);
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
    for (int i = 0; i < c->replicas[t] && !p; i++) {
      const obs_pod *q = c->slots[t][i];
      if (q && !q->deleting && q->attempt == c->attempt && q->stuck_reason)
        p = q;
    }
  if (!p)
    return CTRAIN_OK;
  const char *type = cond_true(c->status, C_RESTARTING) ? C_RESTARTING : C_CREATED;
  if (!cond_true(c->status, type))
    return CTRAIN_OK;
  char msg[1024];
  if (p->stuck_container)
    snprintf(msg, sizeof(msg), "pod %s cannot start: container %s (image %s): %s: %s", p->name,
             p->stuck_container, p->stuck_image ? p->stuck_image : "?", p->stuck_reason,
             p->stuck_message ? p->stuck_message : "");
  else
    snprintf(msg, sizeof(msg), "pod %s cannot be scheduled: %s", p->name,
             p->stuck_message ? p->stuck_message : p->stuck_reason);
  const cJSON *old = cond_find(c->old_status, type);
  const char *old_reason = jstr(old, "reason");
  ctrain_err result = cond_set(c, type, 1, p->stuck_reason, msg, NULL);
  if (!result && (!old_reason || strcmp(old_reason, p->stuck_reason)))
    result = event(c, "Warning", p->stuck_reason, -1, "%s", msg);
  return result;
}

/* The pass itself, after parsing. */
static ctrain_err decide(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  char msg[1024];
  int changed = 0, done = 0, deleted = 0;

  if (cond_true(c->old_status, C_SUCCEEDED) || cond_true(c->old_status, C_FAILED))
    return finished(c, &deleted);

  result = recon_validate(c->job, msg, sizeof(msg));
  if (result == CTRAIN_E_CONFIG) {
    /* Nothing is created for an invalid job: the status says why. */
    result = cond_set(c, C_FAILED, 1, R_INVALID, msg, NULL);
    if (!result && !jstr(c->status, "completionTime"))
      result = set_time_field(c, "completionTime", c->in->now);
    c->invalid = 1;
    return result;
  }
  if (result)
    return result;

  if (c->suspend) {
    for (size_t k = 0; k < c->n_pods && !result; k++)
      if (c->pods[k].phase != PH_SUCCEEDED)
        result = delete_pod(c, &c->pods[k]);
    if (!result)
      result = cond_set(c, C_SUSPENDED, 1, R_SUSPENDED, "TrainingJob is suspended", &changed);
    if (!result)
      result = cond_set(c, C_RUNNING, 0, R_SUSPENDED, "TrainingJob is suspended", NULL);
    if (!result && changed)
      result =
          event(c, "Normal", "Suspended", -1, "TrainingJob %s is suspended: pods deleted", c->name);
    return result;
  }
  if (cond_true(c->old_status, C_SUSPENDED)) {
    /* Resumed: the deadline counts from now, as the Job controller does. */
    result = cond_set(c, C_SUSPENDED, 0, R_RESUMED, "TrainingJob is resumed", NULL);
    if (!result)
      result = set_time_field(c, "startTime", c->in->now);
    if (!result)
      result =
          event(c, "Normal", "Resumed", -1, "TrainingJob %s is resumed: recreating pods", c->name);
    if (result)
      return result;
  }
  if (!jstr(c->status, "startTime")) {
    result = set_time_field(c, "startTime", c->in->now);
    if (result)
      return result;
  }
  snprintf(msg, sizeof(msg), "TrainingJob %s is created", c->name);
  result = cond_set(c, C_CREATED, 1, R_CREATED, msg, NULL);
  if (result)
    return result;

  if (succeeded(c, msg, sizeof(msg))) {
    result = cond_set(c, C_SUCCEEDED, 1, R_SUCCEEDED, msg, &changed);
    if (!result)
      result = cond_set(c, C_RUNNING, 0, R_SUCCEEDED, msg, NULL);
    if (!result)
      result = cond_set(c, C_RESTARTING, 0, R_SUCCEEDED, msg, NULL);
    if (!result && !jstr(c->status, "completionTime"))
      result = set_time_field(c, "completionTime", c->in->now);
    if (!result && changed)
      result = event(c, "Normal", "Succeeded", -1, "TrainingJob %s succeeded: %s", c->name, msg);
    return result ? result : finished(c, &deleted);
  }

  if (c->deadline_s > 0) {
    int64_t start = 0;
    if (!kube_time_parse(jstr(c->status, "startTime"), &start)) {
      if (c->in->now >= start + c->deadline_s) {
        snprintf(msg, sizeof(msg),
                 "TrainingJob was active longer than activeDeadlineSeconds %" PRId64,
                 c->deadline_s);
        result = fail_job(c, R_DEADLINE, msg, 1);
        return result ? result : finished(c, &deleted);
      }
      requeue_at(c, start + c->deadline_s);
    }
  }

  result = handle_failures(c, &done);
  if (result)
    return result;
  if (done)
    return finished(c, &deleted);

  if (!c->in->service) {
    cJSON *svc = NULL;
    result = podbuild_service(c->job, &svc, c->errbuf, c->errlen);
    if (result)
      return result;
    if (push(c, RECON_CREATE_SERVICE, svc, NULL, NULL) < 0)
      return CTRAIN_E_NOMEM;
    /* With the Service, once: only the job's own pods may reach its
     * collective port. */
    cJSON *np = NULL;
    result = podbuild_network_policy(c->job, &np, c->errbuf, c->errlen);
    if (result)
      return result;
    if (push(c, RECON_CREATE_NETWORK_POLICY, np, NULL, NULL) < 0)
      return CTRAIN_E_NOMEM;
  }
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

static ctrain_err parse_job(recon_ctx *c) {
  ctrain_err result = CTRAIN_OK;
  char *errbuf = c->errbuf;
  size_t errlen = c->errlen;
  const cJSON *md = jget(c->in->job, "metadata");
  c->job = c->in->job;
  c->spec = jget(c->job, "spec");
  c->old_status = jget(c->job, "status");
  c->name = jstr(md, "name");
  c->ns = jstr(md, "namespace");
  c->uid = jstr(md, "uid");
  if (!c->name || !c->ns || !c->uid)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "recon: the TrainingJob has no metadata.name, namespace or uid");
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    c->replicas[t] = podbuild_replicas(c->job, t);
    if (c->replicas[t] < 0 || c->replicas[t] > 4096)
      c->replicas[t] = 0; /* recon_validate reports it */
  }
  int r = enum_index(jstr(c->spec, "restartPolicy"), restart_names, 3, 0);
  c->restart = r < 0 ? POL_ON_FAILURE : (restart_policy)r;
  r = enum_index(jstr(c->spec, "cleanPodPolicy"), clean_names, 3, 0);
  c->clean = r < 0 ? CLEAN_RUNNING : (clean_policy)r;
  r = enum_index(jstr(c->spec, "successPolicy"), success_names, 2, 0);
  c->success = r < 0 ? SUCC_CHIEF_OR_WORKER0 : (success_policy)r;
  c->backoff_limit = (int)jint(c->spec, "backoffLimit", 3);
  c->suspend = cJSON_IsTrue(jget(c->spec, "suspend"));
  c->deadline_s = jint(c->spec, "activeDeadlineSeconds", 0);
  c->ttl_s = jint(c->spec, "ttlSecondsAfterFinished", -1);
out:
  return result;
}

ctrain_err recon_reconcile(const recon_input *in, recon_expectations *x, recon_result *res,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  recon_ctx c;
  size_t exp_mark = 0;
  int exp_attempt = 0, exp_restarts = 0, exp_marked = 0;
  if (errbuf && errlen)
    errbuf[0] = '\0';
  /* A result still holding a pass is refused, not overwritten: zeroing it
   * would leak its actions and status. Checked before `out`, which frees
   * `res` on failure and must not free what the caller still owns. */
  if (!res || res->actions || res->n_actions || res->status) {
    if (errbuf && errlen)
      snprintf(errbuf, errlen, "recon_reconcile: %s",
               res ? "result not empty (recon_result_free it first)" : "result is required");
    return CTRAIN_E_INVAL;
  }
  memset(&c, 0, sizeof(c));
  memset(res, 0, sizeof(*res));
  res->requeue_after_s = -1;
  c.in = in;
  c.x = x;
  c.res = res;
  c.errbuf = errbuf;
  c.errlen = errlen;
  c.requeue = -1;
  if (!in || !in->job || !x)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "recon_reconcile: job and expectations are required");
  result = parse_job(&c);
  if (result)
    goto out;
  result = observe(&c);
  if (result)
    goto out;
  int64_t exp_next = exp_observe(&c);
  /* What this pass adds to the expectations is undone when its actions are
   * not returned (an error, or the job itself is to be deleted). */
  exp_mark = x->n;
  exp_attempt = x->attempt;
  exp_restarts = x->restarts;
  exp_marked = 1;

  /* The current attempt: the status, or what we decided and the cache has
   * not shown yet, or the newest pod. */
  c.attempt = (int)jint(c.old_status, "attempt", 1);
  c.restarts = (int)jint(c.old_status, "restarts", 0);
  if (c.attempt < 1)
    c.attempt = 1;
  if (x->attempt > c.attempt) {
    c.attempt = x->attempt;
    if (x->restarts > c.restarts)
      c.restarts = x->restarts;
  }
  for (size_t k = 0; k < c.n_pods; k++)
    if (is_collective(c.pods[k].type) && c.pods[k].attempt > c.attempt)
      c.attempt = c.pods[k].attempt;

  result = init_status(&c);
  if (result)
    goto out;
  result = decide(&c);
  if (result)
    goto out;
  int delete_job = 0;
  for (size_t i = 0; i < res->n_actions; i++)
    delete_job |= res->actions[i].kind == RECON_DELETE_JOB;
  result = fill_counts(&c);
  if (result)
    goto out;

  /* A job about to be deleted needs nothing else. */
  if (delete_job) {
    size_t keep = 0;
    for (size_t i = 0; i < res->n_actions; i++) {
      if (res->actions[i].kind == RECON_DELETE_JOB) {
        res->actions[keep++] = res->actions[i];
        continue;
      }
      cJSON_Delete(res->actions[i].object);
      free(res->actions[i].name);
      free(res->actions[i].uid);
      free(res->actions[i].message);
    }
    res->n_actions = keep;
    x->n = exp_mark;
    goto done;
  }
  if (exp_next != INT64_MAX && x->n && !c.invalid)
    requeue_at(&c, exp_next);

  /* The status goes first so a decision (a new attempt, a terminal state) is
   * recorded before the pods change. */
  const cJSON *old = c.old_status ? c.old_status : NULL;
  cJSON *empty = NULL;
  if (!old) {
    empty = cJSON_CreateObject();
    old = empty;
  }
  int differs = !cJSON_Compare(old, c.status, 1);
  cJSON_Delete(empty);
  if (differs) {
    cJSON *copy = cJSON_Duplicate(c.status, 1);
    if (!copy || push(&c, RECON_UPDATE_STATUS, copy, NULL, NULL) < 0)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "recon: out of memory");
    recon_action st = res->actions[res->n_actions - 1];
    memmove(res->actions + 1, res->actions, (res->n_actions - 1) * sizeof(*res->actions));
    res->actions[0] = st;
    for (size_t i = 1; i < res->n_actions; i++)
      if (res->actions[i].after >= 0)
        res->actions[i].after++;
    res->status_changed = 1;
  }
  if (c.requeue >= 0) {
    int i = push(&c, RECON_REQUEUE, NULL, NULL, NULL);
    if (i < 0)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "recon: out of memory");
    res->actions[i].seconds = c.requeue;
    res->requeue_after_s = c.requeue;
  }
done:
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
  cJSON_ArrayForEach(it, jget(status, "conditions")) {
    const char *t = jstr(it, "type"), *st = jstr(it, "status");
    if (t && st && !strcmp(st, "True"))
      state = t;
  }
  return state;
}

ctrain_err recon_random_bytes(void *ctx, unsigned char *buf, size_t n) {
  (void)ctx;
  if (n > (size_t)0x7fffffff || RAND_bytes(buf, (int)n) != 1)
    return CTRAIN_E_IO;
  return CTRAIN_OK;
}
