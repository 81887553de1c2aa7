/* podbuild.c - the names, the ownerReference and the pods of a
 * TrainingJob, built from its parsed spec (controller/jobspec.h; see
 * controller/podbuild.h). Only the templates are read as JSON. The job's
 * other objects are podbuild_objects.c's (controller/podbuild_int.h). */
#include "controller/podbuild.h"
#include "controller/jobspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/tfconfig.h"

#include "controller/podbuild_int.h"
#include "controller/podsec.h"

#define OOM() PODBUILD_OOM()

static const char *const spec_names[PODBUILD_NTYPES] = {"Chief", "Worker", "Evaluator"};
static const char *const label_names[PODBUILD_NTYPES] = {"chief", "worker", "evaluator"};

const char *podbuild_type_spec_name(podbuild_type t) {
  return (unsigned)t < PODBUILD_NTYPES ? spec_names[t] : "Unknown";
}

const char *podbuild_type_label(podbuild_type t) {
  return (unsigned)t < PODBUILD_NTYPES ? label_names[t] : "unknown";
}

int podbuild_type_from_label(const char *s) {
  for (int t = 0; s && t < PODBUILD_NTYPES; t++)
    if (!strcmp(s, label_names[t]))
      return t;
  return -1;
}

int podbuild_finalizer_index(const cJSON *pod) {
  const cJSON *f;
  int i = 0;
  cJSON_ArrayForEach(f, ctrain_json_get(ctrain_json_get(pod, "metadata"), "finalizers")) {
    if (cJSON_IsString(f) && !strcmp(f->valuestring, PODBUILD_FINALIZER))
      return i;
    i++;
  }
  return -1;
}

ctrain_err podbuild_pod_name(const char *job, podbuild_type t, int index, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s-%s-%d", job, podbuild_type_label(t), index);
  return (n < 0 || (size_t)n >= len) ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

ctrain_err podbuild_secret_name(const char *job, int attempt, const char *tag, char *buf,
                                size_t len) {
  int n = tag && *tag ? snprintf(buf, len, "%s" PODBUILD_SECRET_SUFFIX "%d-%s", job, attempt, tag)
                      : snprintf(buf, len, "%s" PODBUILD_SECRET_SUFFIX "%d", job, attempt);
  return (n < 0 || (size_t)n >= len) ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

ctrain_err podbuild_cluster_name(const char *job, int attempt, const char *tag, char *buf,
                                 size_t len) {
  int n = tag && *tag ? snprintf(buf, len, "%s" PODBUILD_CLUSTER_SUFFIX "%d-%s", job, attempt, tag)
                      : snprintf(buf, len, "%s" PODBUILD_CLUSTER_SUFFIX "%d", job, attempt);
  return (n < 0 || (size_t)n >= len) ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

cJSON *podbuild_obj_at(cJSON *o, const char *k) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (cJSON_IsObject(v))
    return v;
  v = cJSON_CreateObject();
  return ctrain_json_put(o, k, v) ? v : NULL;
}

cJSON *podbuild_arr_at(cJSON *o, const char *k) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (cJSON_IsArray(v))
    return v;
  v = cJSON_CreateArray();
  return ctrain_json_put(o, k, v) ? v : NULL;
}

/* Removes from array `a` every object whose `key` equals `value`. */
static void remove_named(cJSON *a, const char *key, const char *value) {
  cJSON *it = a ? a->child : NULL;
  while (it) {
    cJSON *next = it->next;
    const char *s = ctrain_json_str(it, key);
    if (s && !strcmp(s, value))
      cJSON_Delete(cJSON_DetachItemViaPointer(a, it));
    it = next;
  }
}

/* A new env entry {"name": name}; NULL when out of memory. */
static cJSON *env_entry(const char *name) {
  cJSON *e = cJSON_CreateObject();
  if (e && !cJSON_AddStringToObject(e, "name", name)) {
    cJSON_Delete(e);
    return NULL;
  }
  return e;
}

/* Sets env var `name` of `container` to `entry` (taken, its "name" already
 * set): earlier entries of that name, the template's included, are dropped so
 * ours is the only one. */
static int env_put(cJSON *container, const char *name, cJSON *entry) {
  cJSON *env = entry ? podbuild_arr_at(container, "env") : NULL;
  if (!env) {
    cJSON_Delete(entry);
    return 0;
  }
  remove_named(env, "name", name);
  return cJSON_AddItemToArray(env, entry) ? 1 : (cJSON_Delete(entry), 0);
}

static int env_value(cJSON *container, const char *name, const char *value) {
  cJSON *e = env_entry(name);
  if (e && !cJSON_AddStringToObject(e, "value", value)) {
    cJSON_Delete(e);
    return 0;
  }
  return env_put(container, name, e);
}

void podbuild_job_kind(const cJSON *job, const char **api_version, const char **kind) {
  const char *a = ctrain_json_str(job, "apiVersion"), *k = ctrain_json_str(job, "kind");
  int own = a && *a && k && *k;
  *api_version = own ? a : PODBUILD_API_VERSION;
  *kind = own ? k : PODBUILD_KIND;
}

/* The controller ownerReference to the job (api, kind, name, uid). */
static ctrain_err owner_ref(const char *api, const char *kind, const char *name, const char *uid,
                            cJSON **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *ref = NULL;
  *out = NULL;
  if (!name || !uid)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "metadata.name and metadata.uid are required");
  ref = cJSON_CreateObject();
  if (!ref || !cJSON_AddStringToObject(ref, "apiVersion", api) ||
      !cJSON_AddStringToObject(ref, "kind", kind) || !cJSON_AddStringToObject(ref, "name", name) ||
      !cJSON_AddStringToObject(ref, "uid", uid) || !cJSON_AddTrueToObject(ref, "controller") ||
      !cJSON_AddTrueToObject(ref, "blockOwnerDeletion"))
    OOM();
  *out = ref;
  ref = NULL;
out:
  cJSON_Delete(ref);
  return result;
}

ctrain_err podbuild_owner_ref(const cJSON *job, cJSON **out, char *errbuf, size_t errlen) {
  const cJSON *md = ctrain_json_get(job, "metadata");
  const char *api, *kind;
  podbuild_job_kind(job, &api, &kind);
  return owner_ref(api, kind, ctrain_json_str(md, "name"), ctrain_json_str(md, "uid"), out, errbuf,
                   errlen);
}

/* metadata for an object of the job: name, namespace, the job-name label and
 * the controller ownerReference. Returns the metadata object (owned by obj). */
static cJSON *base_metadata(cJSON *obj, const job_spec *js, const char *name) {
  const char *jname = js->name, *ns = js->ns;
  cJSON *ref = NULL, *refs = NULL;
  cJSON *md = podbuild_obj_at(obj, "metadata");
  if (!md || !ctrain_json_put(md, "name", cJSON_CreateString(name)) ||
      (ns && !ctrain_json_put(md, "namespace", cJSON_CreateString(ns))))
    return NULL;
  cJSON *labels = podbuild_obj_at(md, "labels");
  if (!labels || !ctrain_json_put(labels, PODBUILD_LABEL_JOB, cJSON_CreateString(jname)))
    return NULL;
  if (owner_ref(js->api_version, js->kind, js->name, js->uid, &ref, NULL, 0))
    return NULL;
  refs = cJSON_CreateArray();
  if (!refs || !cJSON_AddItemToArray(refs, ref)) {
    cJSON_Delete(ref);
    cJSON_Delete(refs);
    return NULL;
  }
  return ctrain_json_put(md, "ownerReferences", refs) ? md : NULL;
}

/* Its metadata is base_metadata. */
cJSON *podbuild_new_object(const job_spec *js, const char *api, const char *kind, const char *name,
                           cJSON **md) {
  cJSON *obj = cJSON_CreateObject(), *m = NULL;
  if (!obj || !ctrain_json_put(obj, "apiVersion", cJSON_CreateString(api)) ||
      !ctrain_json_put(obj, "kind", cJSON_CreateString(kind)) ||
      !(m = base_metadata(obj, js, name))) {
    cJSON_Delete(obj);
    return NULL;
  }
  if (md)
    *md = m;
  return obj;
}

ctrain_err podbuild_job_names(const job_spec *js, const char **name, const char **ns, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  *name = js->name;
  *ns = js->ns;
  if (!*name || !**name)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "metadata.name is required");
  if (!*ns || !**ns)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "metadata.namespace is required");
  if (!js->uid)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "metadata.uid is required");
out:
  return result;
}

/* Sets env `name` of container `c` from key `name` of Secret `secret`;
 * `optional`: the container starts without it when the key is absent. */
static int env_secret(cJSON *c, const char *name, const char *secret, int optional) {
  cJSON *e = env_entry(name);
  cJSON *vf = e ? cJSON_AddObjectToObject(e, "valueFrom") : NULL;
  cJSON *ref = vf ? cJSON_AddObjectToObject(vf, "secretKeyRef") : NULL;
  if (!ref || !cJSON_AddStringToObject(ref, "name", secret) ||
      !cJSON_AddStringToObject(ref, "key", name) ||
      !cJSON_AddBoolToObject(ref, "optional", optional)) {
    cJSON_Delete(e);
    return 0;
  }
  return env_put(c, name, e);
}

/* Object-storage backups (spec.checkpoint.uri): the URI, the endpoint and
 * the credentials, the latter by reference only; the controller never
 * reads the Secret. */
static ctrain_err fix_backup_uri(cJSON *c, const job_spec *js) {
  const char *uri = js->ckpt.uri;
  const char *endpoint = js->ckpt.endpoint;
  const char *creds = js->ckpt.credentials;
  if (!env_value(c, CTRAIN_ENV_BACKUP_URI, uri))
    return CTRAIN_E_NOMEM;
  if (endpoint && *endpoint && !env_value(c, CTRAIN_ENV_S3_ENDPOINT, endpoint))
    return CTRAIN_E_NOMEM;
  if (!env_secret(c, "AWS_ACCESS_KEY_ID", creds, 0) ||
      !env_secret(c, "AWS_SECRET_ACCESS_KEY", creds, 0) ||
      !env_secret(c, "AWS_SESSION_TOKEN", creds, 1))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* The progress port of the training container (the first): CTRAIN_PROGRESS_PORT and a
 * containerPort named `progress`, replacing one of that name the template declares. */
static ctrain_err add_progress_port(cJSON *c, int port) {
  char buf[16];
  snprintf(buf, sizeof(buf), "%d", port);
  if (!env_value(c, CTRAIN_ENV_PROGRESS_PORT, buf))
    return CTRAIN_E_NOMEM;
  cJSON *ports = podbuild_arr_at(c, "ports");
  if (!ports)
    return CTRAIN_E_NOMEM;
  remove_named(ports, "name", PODBUILD_PROGRESS_PORT_NAME);
  cJSON *p = cJSON_CreateObject();
  if (!p || !cJSON_AddStringToObject(p, "name", PODBUILD_PROGRESS_PORT_NAME) ||
      !cJSON_AddNumberToObject(p, "containerPort", port) ||
      !cJSON_AddStringToObject(p, "protocol", "TCP") || !cJSON_AddItemToArray(ports, p)) {
    cJSON_Delete(p);
    return CTRAIN_E_NOMEM;
  }
  return CTRAIN_OK;
}

/* CTRAIN_ENV_TF_CLUSTER from the attempt's ConfigMap, then TF_CONFIG,
 * which references it: the kubelet expands $(VAR) only from variables
 * defined earlier in the list, so the order matters (env_put appends). */
static int env_tf_config(cJSON *c, const char *tfconfig_ref, const char *configmap) {
  cJSON *e = env_entry(CTRAIN_ENV_TF_CLUSTER);
  cJSON *vf = e ? cJSON_AddObjectToObject(e, "valueFrom") : NULL;
  cJSON *ref = vf ? cJSON_AddObjectToObject(vf, "configMapKeyRef") : NULL;
  if (!ref || !cJSON_AddStringToObject(ref, "name", configmap) ||
      !cJSON_AddStringToObject(ref, "key", PODBUILD_CLUSTER_KEY)) {
    cJSON_Delete(e);
    return 0;
  }
  return env_put(c, CTRAIN_ENV_TF_CLUSTER, e) && env_value(c, "TF_CONFIG", tfconfig_ref);
}

tfconfig_render_args podbuild_render_args(const job_spec *js, podbuild_type t, int index) {
  tfconfig_render_args ra = {
      .job = js->name,
      .ns = js->ns,
      .port = js->port,
      .n_chief = js->replicas[PODBUILD_CHIEF],
      .n_worker = js->replicas[PODBUILD_WORKER],
      .n_evaluator = js->replicas[PODBUILD_EVALUATOR],
      .type = t == PODBUILD_CHIEF    ? TFCONFIG_CHIEF
              : t == PODBUILD_WORKER ? TFCONFIG_WORKER
                                     : TFCONFIG_EVALUATOR,
      .index = index,
  };
  return ra;
}

/* Adds our variables and the checkpoint mount to one container. */
static ctrain_err fix_container(cJSON *c, const char *job, const char *ns, int attempt,
                                const char *tfconfig_ref, const char *configmap, const char *secret,
                                const char *mount_path, const job_spec *backup_uri_js) {
  char buf[32];
  cJSON *e = NULL, *vf = NULL, *ref = NULL;
  if (!cJSON_IsObject(c))
    return CTRAIN_E_INVAL;
  snprintf(buf, sizeof(buf), "%d", attempt);
  if (!env_tf_config(c, tfconfig_ref, configmap) || !env_value(c, CTRAIN_ENV_JOB_NAME, job) ||
      !env_value(c, CTRAIN_ENV_NAMESPACE, ns) || !env_value(c, CTRAIN_ENV_ATTEMPT, buf))
    return CTRAIN_E_NOMEM;
  e = env_entry(CTRAIN_ENV_JOB_TOKEN);
  vf = e ? cJSON_AddObjectToObject(e, "valueFrom") : NULL;
  ref = vf ? cJSON_AddObjectToObject(vf, "secretKeyRef") : NULL;
  if (!ref || !cJSON_AddStringToObject(ref, "name", secret) ||
      !cJSON_AddStringToObject(ref, "key", PODBUILD_TOKEN_KEY)) {
    cJSON_Delete(e);
    return CTRAIN_E_NOMEM;
  }
  if (!env_put(c, CTRAIN_ENV_JOB_TOKEN, e))
    return CTRAIN_E_NOMEM;
  if (backup_uri_js) {
    ctrain_err r = fix_backup_uri(c, backup_uri_js);
    if (r)
      return r;
  }
  if (mount_path) {
    if (!env_value(c, CTRAIN_ENV_BACKUP_DIR, mount_path))
      return CTRAIN_E_NOMEM;
    cJSON *mounts = podbuild_arr_at(c, "volumeMounts");
    if (!mounts)
      return CTRAIN_E_NOMEM;
    remove_named(mounts, "name", PODBUILD_CKPT_VOLUME);
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "name", PODBUILD_CKPT_VOLUME) ||
        !cJSON_AddStringToObject(m, "mountPath", mount_path) || !cJSON_AddItemToArray(mounts, m)) {
      cJSON_Delete(m);
      return CTRAIN_E_NOMEM;
    }
  }
  return CTRAIN_OK;
}

/* Removes every string element equal to `v` from the array `a`. */
static void remove_string(cJSON *a, const char *v) {
  for (int i = cJSON_GetArraySize(a) - 1; i >= 0; i--) {
    const cJSON *e = cJSON_GetArrayItem(a, i);
    if (cJSON_IsString(e) && !strcmp(e->valuestring, v))
      cJSON_DeleteItemFromArray(a, i);
  }
}

/* Tolerations of the node lifecycle taints (not-ready, unreachable;
 * NoExecute) for PODBUILD_NODE_LOSS_TOLERATION_S, unless the template has
 * its own for that key: a pod bound to a lost node, even one that never
 * started, is evicted (DisruptionTarget) within a bounded time instead of
 * the 300 s the DefaultTolerationSeconds admission plugin gives. */
static int add_node_loss_tolerations(cJSON *spec) {
  static const char *const keys[] = {"node.kubernetes.io/not-ready",
                                     "node.kubernetes.io/unreachable"};
  cJSON *tol = podbuild_arr_at(spec, "tolerations");
  if (!tol)
    return -1;
  for (size_t k = 0; k < 2; k++) {
    const cJSON *e;
    int has = 0;
    cJSON_ArrayForEach(e, tol) {
      const char *key = ctrain_json_str(e, "key");
      has |= key && !strcmp(key, keys[k]);
    }
    if (has)
      continue;
    cJSON *t = cJSON_CreateObject();
    if (!t || !cJSON_AddItemToArray(tol, t) || !cJSON_AddStringToObject(t, "key", keys[k]) ||
        !cJSON_AddStringToObject(t, "operator", "Exists") ||
        !cJSON_AddStringToObject(t, "effect", "NoExecute") ||
        !cJSON_AddNumberToObject(t, "tolerationSeconds", PODBUILD_NODE_LOSS_TOLERATION_S))
      return -1;
  }
  return 0;
}

/* Pod Security `restricted` defaults (controller/podsec.h) on a
 * TrainingJob's pod; fsGroup too when it mounts the checkpoint volume. A
 * TFJob's pods stay as training-operator builds them (no securityContext of
 * ours): its users' images, stock TensorFlow's among them, run as root. */
static ctrain_err pod_security(const job_spec *js, cJSON *spec, int ckpt_volume) {
  if (strcmp(js->kind, PODBUILD_KIND))
    return CTRAIN_OK;
  const podsec_opts opts = {.non_root = 1, .fs_group = ckpt_volume};
  return podsec_apply(spec, &opts);
}

/* One pod of podbuild_pod: its job and task, the names, where its
 * checkpoints go and its TF_CONFIG. */
typedef struct {
  const job_spec *js;
  podbuild_type t;
  int index, attempt;
  const char *job_name, *ns, *mount_path;
  const job_spec *backup_uri; /* the job when the pod gets the backup URI */
  char name[256], secret[256], configmap[256];
  char *tfc; /* owned */
} pod_build;

/* Checks the task (type, index, attempt) and its template; renders the pod's,
 * the Secret's and the ConfigMap's names. */
static ctrain_err pod_check(pod_build *p, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const job_spec *js = p->js;
  podbuild_type t = p->t;
  if ((unsigned)t >= PODBUILD_NTYPES)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "podbuild_pod: unknown replica type %d", (int)t);
  const int replicas = js->replicas[t];
  if (p->index < 0 || p->index >= replicas)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "spec.replicaSpecs.%s: index %d is outside 0..%d",
                podbuild_type_spec_name(t), p->index, replicas - 1);
  if (p->attempt < 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "podbuild_pod: attempt %d < 1", p->attempt);
  const cJSON *tmpl = js->tmpl[t];
  if (!cJSON_IsObject(ctrain_json_get(tmpl, "spec")))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "spec.replicaSpecs.%s.template.spec is required",
                podbuild_type_spec_name(t));
  if (podbuild_pod_name(p->job_name, t, p->index, p->name, sizeof(p->name)) ||
      podbuild_secret_name(p->job_name, p->attempt, js->name_tag, p->secret, sizeof(p->secret)) ||
      podbuild_cluster_name(p->job_name, p->attempt, js->name_tag, p->configmap,
                            sizeof(p->configmap)))
    CTRAIN_FAIL(CTRAIN_E_TOOBIG, "metadata.name: '%s' is too long", p->job_name);
out:
  return result;
}

/* Where the pod's checkpoints go: p->backup_uri or p->mount_path. */
static ctrain_err pod_checkpoint(pod_build *p, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const job_spec *js = p->js;
  switch (js->ckpt.kind) {
  case JOBSPEC_CKPT_INVALID:
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s", js->ckpt.why);
  case JOBSPEC_CKPT_URI:
    /* Only the collective writes and restores backups. */
    if (p->t != PODBUILD_EVALUATOR)
      p->backup_uri = js;
    break;
  case JOBSPEC_CKPT_VOLUME:
    p->mount_path = js->ckpt.mount_path;
    break;
  case JOBSPEC_CKPT_NONE:
    break;
  }
out:
  return result;
}

/* The pod's metadata: the job's (base_metadata), the task's labels, the
 * finalizer. */
static ctrain_err pod_metadata(cJSON *pod, const pod_build *p, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char buf[32];
  cJSON *md = base_metadata(pod, p->js, p->name);
  cJSON *labels = md ? podbuild_obj_at(md, "labels") : NULL;
  if (!labels ||
      !ctrain_json_put(labels, PODBUILD_LABEL_TYPE, cJSON_CreateString(podbuild_type_label(p->t))))
    OOM();
  snprintf(buf, sizeof(buf), "%d", p->index);
  if (!ctrain_json_put(labels, PODBUILD_LABEL_INDEX, cJSON_CreateString(buf)))
    OOM();
  snprintf(buf, sizeof(buf), "%d", p->attempt);
  if (!ctrain_json_put(labels, PODBUILD_LABEL_ATTEMPT, cJSON_CreateString(buf)))
    OOM();
  /* Fields of a template's metadata that a pod must not carry. */
  cJSON_DeleteItemFromObjectCaseSensitive(md, "generateName");
  cJSON_DeleteItemFromObjectCaseSensitive(md, "uid");
  cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");

  /* The pod cannot vanish unseen: a force delete, PodGC or node-loss
   * clean-up leaves it with a deletionTimestamp until the reconciler has
   * recorded the end of its attempt and removes this finalizer. */
  cJSON *fins = podbuild_arr_at(md, "finalizers");
  if (!fins)
    OOM();
  remove_string(fins, PODBUILD_FINALIZER);
  if (!cJSON_AddItemToArray(fins, cJSON_CreateString(PODBUILD_FINALIZER)))
    OOM();
out:
  return result;
}

/* The pod spec's own fields: tolerations, hostname and subdomain, restart
 * policy, service account token. */
static ctrain_err pod_spec_fields(cJSON *spec, const pod_build *p, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (p->t != PODBUILD_EVALUATOR && add_node_loss_tolerations(spec))
    OOM();
  if (!ctrain_json_put(spec, "hostname", cJSON_CreateString(p->name)) ||
      !ctrain_json_put(spec, "subdomain", cJSON_CreateString(p->job_name)) ||
      !ctrain_json_put(spec, "restartPolicy", cJSON_CreateString("Never")))
    OOM();
  /* Workers need no API access: no token unless the template asks for one. */
  if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(spec, "automountServiceAccountToken")) &&
      !ctrain_json_put(spec, "automountServiceAccountToken", cJSON_CreateFalse()))
    OOM();
out:
  return result;
}

/* Every container gets our variables (fix_container); then the pod security
 * defaults, and the training container its progress port. */
static ctrain_err pod_containers(cJSON *spec, const pod_build *p, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  podbuild_type t = p->t;
  cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
  if (!cJSON_IsArray(containers) || cJSON_GetArraySize(containers) < 1)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "spec.replicaSpecs.%s.template.spec.containers: at least one is required",
                podbuild_type_spec_name(t));
  cJSON *c;
  cJSON_ArrayForEach(c, containers) {
    result = fix_container(c, p->job_name, p->ns, p->attempt, p->tfc, p->configmap, p->secret,
                           p->mount_path, p->backup_uri);
    if (result == CTRAIN_E_INVAL)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "spec.replicaSpecs.%s.template.spec.containers: not an object",
                  podbuild_type_spec_name(t));
    if (result)
      OOM();
  }
  result = pod_security(p->js, spec, p->mount_path != NULL);
  if (result)
    OOM();
  if ((t == PODBUILD_CHIEF || t == PODBUILD_WORKER) &&
      add_progress_port(cJSON_GetArrayItem(containers, 0), p->js->progress_port))
    OOM();
out:
  return result;
}

/* The checkpoint volume, when the pod mounts one. */
static ctrain_err pod_ckpt_volume(cJSON *spec, const pod_build *p, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (p->mount_path) {
    cJSON *vols = podbuild_arr_at(spec, "volumes");
    if (!vols)
      OOM();
    remove_named(vols, "name", PODBUILD_CKPT_VOLUME);
    cJSON *v = cJSON_Duplicate(p->js->ckpt.volume, 1);
    if (!v || !ctrain_json_put(v, "name", cJSON_CreateString(PODBUILD_CKPT_VOLUME)) ||
        !cJSON_AddItemToArray(vols, v)) {
      cJSON_Delete(v);
      OOM();
    }
  }
out:
  return result;
}

ctrain_err podbuild_pod(const job_spec *js, podbuild_type t, int index, int attempt, cJSON **out,
                        char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *pod = NULL;
  pod_build p = {.js = js, .t = t, .index = index, .attempt = attempt};
  *out = NULL;
  result = podbuild_job_names(js, &p.job_name, &p.ns, errbuf, errlen);
  if (result)
    goto out;
  result = pod_check(&p, errbuf, errlen);
  if (result)
    goto out;
  result = pod_checkpoint(&p, errbuf, errlen);
  if (result)
    goto out;

  tfconfig_render_args ra = podbuild_render_args(js, t, index);
  result = tfconfig_render_ref(&ra, CTRAIN_ENV_TF_CLUSTER, &p.tfc, errbuf, errlen);
  if (result)
    goto out;

  pod = cJSON_Duplicate(js->tmpl[t], 1);
  if (!pod || !ctrain_json_put(pod, "apiVersion", cJSON_CreateString("v1")) ||
      !ctrain_json_put(pod, "kind", cJSON_CreateString("Pod")))
    OOM();
  result = pod_metadata(pod, &p, errbuf, errlen);
  if (result)
    goto out;
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
  result = pod_spec_fields(spec, &p, errbuf, errlen);
  if (result)
    goto out;
  result = pod_containers(spec, &p, errbuf, errlen);
  if (result)
    goto out;
  result = pod_ckpt_volume(spec, &p, errbuf, errlen);
out:
  free(p.tfc);
  if (result)
    cJSON_Delete(pod);
  else
    *out = pod; /* the caller's now */
  return result;
}
