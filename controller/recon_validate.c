/* recon_validate.c - what the CRD schema cannot check (recon_validate), and
 * the names of the policies. */
#include "controller/recon_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/backup_uri.h"
#include "ctrain/json.h"

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

int recon_enum_index(const char *v, const char *const *names, int n, int def) {
  if (!v)
    return def;
  for (int i = 0; i < n; i++)
    if (!strcmp(v, names[i]))
      return i;
  return -1;
}

const char *const recon_restart_names[3] = {"OnFailure", "ExitCode", "Never"};
const char *const recon_clean_names[3] = {"Running", "All", "None"};
const char *const recon_success_names[2] = {"ChiefOrWorker0", "AllWorkers"};

/* Checks one replica type's template. */
static ctrain_err validate_template(const cJSON *job, podbuild_type t, char *msg, size_t len) {
  const char *tn = podbuild_type_spec_name(t);
  const cJSON *spec = ctrain_json_get(job, "spec");
  const cJSON *rs = ctrain_json_get(ctrain_json_get(spec, "replicaSpecs"), tn);
  const cJSON *pspec = ctrain_json_get(ctrain_json_get(rs, "template"), "spec");
  const cJSON *containers = ctrain_json_get(pspec, "containers");
  const int port = (int)ctrain_json_int(spec, "port", 2222);
  const cJSON *ckpt = ctrain_json_get(spec, "checkpoint");
  const char *mount = cJSON_IsObject(ckpt) ? ctrain_json_str(ckpt, "mountPath") : NULL;
  const char *port_owner = NULL;
  if (!cJSON_IsObject(pspec))
    VFAIL("spec.replicaSpecs.%s.template.spec: required", tn);
  if (!cJSON_IsArray(containers) || cJSON_GetArraySize(containers) < 1)
    VFAIL("spec.replicaSpecs.%s.template.spec.containers: at least one container is required", tn);
  int ci = 0;
  const cJSON *ctr;
  cJSON_ArrayForEach(ctr, containers) {
    const char *cname = ctrain_json_str(ctr, "name");
    if (!cJSON_IsObject(ctr) || !cname || !*cname)
      VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].name: required", tn, ci);
    int cj = 0;
    const cJSON *other;
    cJSON_ArrayForEach(other, containers) {
      if (cj >= ci)
        break;
      const char *on = ctrain_json_str(other, "name");
      if (on && !strcmp(on, cname))
        VFAIL("spec.replicaSpecs.%s.template.spec.containers[%d].name: duplicate name '%s'", tn, ci,
              cname);
      cj++;
    }
    int pi = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, ctrain_json_get(ctr, "ports")) {
      if (ctrain_json_int(p, "containerPort", -1) == port) {
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
    cJSON_ArrayForEach(m, ctrain_json_get(ctr, "volumeMounts")) {
      const char *mp = ctrain_json_str(m, "mountPath"), *mn = ctrain_json_str(m, "name");
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
  cJSON_ArrayForEach(v, ctrain_json_get(pspec, "volumes")) {
    const char *vn = ctrain_json_str(v, "name");
    if (mount && vn && !strcmp(vn, PODBUILD_CKPT_VOLUME))
      VFAIL("spec.replicaSpecs.%s.template.spec.volumes[%d].name: '%s' is reserved for "
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

/* What the job's objects may take in etcd, as the controller sends them:
 * the cluster ConfigMap within PODBUILD_CLUSTER_BYTES_MAX, and the pods of
 * an attempt plus that ConfigMap within RECON_JOB_BYTES_MAX. Each pod is
 * measured as built (the last index of its type: the longest names). */
static ctrain_err validate_budget(const cJSON *job, char *msg, size_t len) {
  size_t cluster = 0, total = 0;
  int pods = 0;
  char err[512] = "";
  if (podbuild_cluster_size(job, &cluster))
    return CTRAIN_OK; /* no collective, or no namespace: reported elsewhere */
  if (cluster > PODBUILD_CLUSTER_BYTES_MAX)
    VFAIL("spec.replicaSpecs: the cluster spec of TF_CONFIG would be %zu bytes, over the budget of "
          "%d bytes (a ConfigMap's 1 MiB less 64 KiB for its metadata)",
          cluster, PODBUILD_CLUSTER_BYTES_MAX);
  total = cluster;
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const int n = podbuild_replicas(job, t);
    cJSON *pod = NULL;
    if (n < 1)
      continue;
    ctrain_err result = podbuild_pod(job, t, n - 1, 1, &pod, err, sizeof(err));
    if (result == CTRAIN_E_CONFIG || result == CTRAIN_E_TOOBIG)
      VFAIL("%s", err);
    if (result == CTRAIN_E_NOMEM)
      return result;
    if (result)
      continue; /* no uid yet: the pass refuses the job itself */
    char *text = cJSON_PrintUnformatted(pod);
    cJSON_Delete(pod);
    if (!text)
      return CTRAIN_E_NOMEM;
    total += (size_t)n * strlen(text);
    pods += n;
    cJSON_free(text);
  }
  if (total > RECON_JOB_BYTES_MAX)
    VFAIL("spec.replicaSpecs: the job's %d pods and its cluster ConfigMap would be %zu bytes, over "
          "the per-job budget of %d bytes (64 MiB): use fewer replicas or smaller pod templates",
          pods, total, RECON_JOB_BYTES_MAX);
  return CTRAIN_OK;
}

ctrain_err recon_validate(const cJSON *job, char *msg, size_t len) {
  const cJSON *spec = ctrain_json_get(job, "spec");
  const char *name = ctrain_json_str(ctrain_json_get(job, "metadata"), "name");
  ctrain_err result;
  if (!cJSON_IsObject(spec))
    VFAIL("spec: required");
  result = validate_numbers(spec, msg, len);
  if (result)
    return result;
  if (!name || !is_dns1035_label(name))
    VFAIL("metadata.name: '%s' must be a DNS-1035 label (lower-case letters, digits and '-', "
          "starting with a letter): it names the Service and the pod subdomain",
          name ? name : "");
  if (!cJSON_IsObject(ctrain_json_get(ctrain_json_get(spec, "replicaSpecs"), "Worker")))
    VFAIL("spec.replicaSpecs.Worker: required");
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const cJSON *rs =
        ctrain_json_get(ctrain_json_get(spec, "replicaSpecs"), podbuild_type_spec_name(t));
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
  const int64_t port = ctrain_json_int(spec, "port", 2222);
  if (port < 1 || port > 65535)
    VFAIL("spec.port: %" PRId64 " is outside 1..65535", port);
  if (recon_enum_index(ctrain_json_str(spec, "restartPolicy"), recon_restart_names, 3, 0) < 0)
    VFAIL("spec.restartPolicy: unknown value '%s'", ctrain_json_str(spec, "restartPolicy"));
  if (recon_enum_index(ctrain_json_str(spec, "cleanPodPolicy"), recon_clean_names, 3, 0) < 0)
    VFAIL("spec.cleanPodPolicy: unknown value '%s'", ctrain_json_str(spec, "cleanPodPolicy"));
  if (recon_enum_index(ctrain_json_str(spec, "successPolicy"), recon_success_names, 2, 0) < 0)
    VFAIL("spec.successPolicy: unknown value '%s'", ctrain_json_str(spec, "successPolicy"));
  if (ctrain_json_int(spec, "backoffLimit", 3) < 0)
    VFAIL("spec.backoffLimit: must be >= 0");
  const cJSON *ckpt = ctrain_json_get(spec, "checkpoint");
  if (ckpt && ctrain_json_get(ckpt, "uri")) {
    const char *uri = ctrain_json_str(ckpt, "uri");
    const char *creds = ctrain_json_str(ckpt, "credentialsSecret");
    char why[256];
    if (!uri)
      VFAIL("spec.checkpoint.uri: must be s3://bucket[/prefix] or gs://bucket[/prefix]");
    /* The worker's own grammar: never start pods whose worker would refuse it. */
    if (ctrain_backup_uri_parse(uri, NULL, why, sizeof(why)))
      VFAIL("spec.checkpoint.uri: %s", why);
    if (ctrain_json_get(ckpt, "volume"))
      VFAIL("spec.checkpoint.uri: mutually exclusive with spec.checkpoint.volume");
    if (!creds || !*creds)
      VFAIL("spec.checkpoint.credentialsSecret: required with uri");
  } else if (ckpt) {
    const char *mp = ctrain_json_str(ckpt, "mountPath");
    if (!mp || mp[0] != '/')
      VFAIL("spec.checkpoint.mountPath: must be an absolute path");
    if (!cJSON_IsObject(ctrain_json_get(ckpt, "volume")))
      VFAIL("spec.checkpoint.volume: required");
  }
  return validate_budget(job, msg, len);
}
