/* podbuild_objects.c - a TrainingJob's objects besides its pods: the
 * headless Service, the attempt's NetworkPolicy, token Secret and cluster
 * ConfigMap, built from its parsed spec (controller/podbuild.h; the shared
 * helpers are controller/podbuild_int.h's). */
#include "controller/podbuild_int.h"
#include "controller/jobspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/tfconfig.h"

#define OOM() PODBUILD_OOM()

ctrain_err podbuild_service(const job_spec *js, cJSON **out, char *errbuf, size_t errlen) {
  const char *job_name = NULL, *ns = NULL;
  cJSON *svc = NULL;
  *out = NULL;
  ctrain_err result = podbuild_job_names(js, &job_name, &ns, errbuf, errlen);
  if (result)
    goto out;
  const int port = js->port;
  svc = podbuild_new_object(js, "v1", "Service", job_name, NULL);
  if (!svc)
    OOM();
  cJSON *spec = podbuild_obj_at(svc, "spec");
  cJSON *sel = spec ? podbuild_obj_at(spec, "selector") : NULL;
  cJSON *ports = spec ? podbuild_arr_at(spec, "ports") : NULL;
  cJSON *p = cJSON_CreateObject();
  if (!sel || !ports || !p || !cJSON_AddItemToArray(ports, p)) {
    cJSON_Delete(p);
    OOM();
  }
  if (!ctrain_json_put(spec, "clusterIP", cJSON_CreateString("None")) ||
      !ctrain_json_put(spec, "publishNotReadyAddresses", cJSON_CreateTrue()) ||
      !ctrain_json_put(sel, PODBUILD_LABEL_JOB, cJSON_CreateString(job_name)) ||
      !ctrain_json_put(p, "name", cJSON_CreateString(PODBUILD_PORT_NAME)) ||
      !ctrain_json_put(p, "protocol", cJSON_CreateString("TCP")) ||
      !ctrain_json_put(p, "port", cJSON_CreateNumber(port)) ||
      !ctrain_json_put(p, "targetPort", cJSON_CreateNumber(port)))
    OOM();
  *out = svc;
  svc = NULL;
out:
  cJSON_Delete(svc);
  return result;
}

/* The second ingress rule of the job's NetworkPolicy: the controller's pods
 * (PODBUILD_CONTROLLER_LABELS in the namespace `ctl_ns`, by its immutable
 * kubernetes.io/metadata.name label: a tenant can copy the labels, not the
 * namespace) to the progress port only. */
static ctrain_err progress_ingress(const job_spec *js, const char *ctl_ns, cJSON *ingress) {
  cJSON *rule = cJSON_CreateObject();
  if (!rule || !cJSON_AddItemToArray(ingress, rule)) {
    cJSON_Delete(rule);
    return CTRAIN_E_NOMEM;
  }
  cJSON *from = podbuild_arr_at(rule, "from"), *ports = podbuild_arr_at(rule, "ports");
  cJSON *peer = cJSON_CreateObject(), *p = cJSON_CreateObject();
  if (!from || !ports || !peer || !p || !cJSON_AddItemToArray(from, peer) ||
      !cJSON_AddItemToArray(ports, p)) {
    cJSON_Delete(peer);
    cJSON_Delete(p);
    return CTRAIN_E_NOMEM;
  }
  cJSON *labels = podbuild_obj_at(podbuild_obj_at(peer, "podSelector"), "matchLabels");
  cJSON *nsl = podbuild_obj_at(podbuild_obj_at(peer, "namespaceSelector"), "matchLabels");
  if (!labels || !nsl ||
      !ctrain_json_put(nsl, "kubernetes.io/metadata.name", cJSON_CreateString(ctl_ns)) ||
      !ctrain_json_put(labels, "app.kubernetes.io/name", cJSON_CreateString("ctrain")) ||
      !ctrain_json_put(labels, "app.kubernetes.io/component", cJSON_CreateString("controller")) ||
      !ctrain_json_put(p, "protocol", cJSON_CreateString("TCP")) ||
      !ctrain_json_put(p, "port", cJSON_CreateNumber(js->progress_port)))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

ctrain_err podbuild_network_policy(const job_spec *js, int attempt, const char *ctl_ns, cJSON **out,
                                   char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *np = NULL;
  const char *job_name = NULL, *ns = NULL;
  char att[32];
  *out = NULL;
  result = podbuild_job_names(js, &job_name, &ns, errbuf, errlen);
  if (result)
    goto out;
  if (attempt < 1 || !ctl_ns || !*ctl_ns)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "podbuild_network_policy: attempt >= 1 and a namespace required");
  snprintf(att, sizeof(att), "%d", attempt);
  np = podbuild_new_object(js, "networking.k8s.io/v1", "NetworkPolicy", job_name, NULL);
  if (!np)
    OOM();
  cJSON *spec = podbuild_obj_at(np, "spec");
  cJSON *sel = spec ? podbuild_obj_at(podbuild_obj_at(spec, "podSelector"), "matchLabels") : NULL;
  cJSON *types = spec ? podbuild_arr_at(spec, "policyTypes") : NULL;
  cJSON *ingress = spec ? podbuild_arr_at(spec, "ingress") : NULL;
  cJSON *rule = cJSON_CreateObject();
  if (!sel || !types || !ingress || !rule || !cJSON_AddItemToArray(ingress, rule)) {
    cJSON_Delete(rule);
    OOM();
  }
  /* No "ports": every TCP and UDP port (NCCL bootstraps and connects on
   * ephemeral ones), but only between pods of this attempt. */
  cJSON *from = podbuild_arr_at(rule, "from");
  cJSON *peer = cJSON_CreateObject();
  if (!from || !peer || !cJSON_AddItemToArray(from, peer)) {
    cJSON_Delete(peer);
    OOM();
  }
  cJSON *peer_sel = podbuild_obj_at(podbuild_obj_at(peer, "podSelector"), "matchLabels");
  if (!peer_sel || !ctrain_json_put(sel, PODBUILD_LABEL_JOB, cJSON_CreateString(job_name)) ||
      !ctrain_json_put(peer_sel, PODBUILD_LABEL_JOB, cJSON_CreateString(job_name)) ||
      !ctrain_json_put(peer_sel, PODBUILD_LABEL_ATTEMPT, cJSON_CreateString(att)) ||
      !cJSON_AddItemToArray(types, cJSON_CreateString("Ingress")))
    OOM();
  result = progress_ingress(js, ctl_ns, ingress);
  if (!result) {
    *out = np;
    np = NULL;
  }
out:
  cJSON_Delete(np);
  return result;
}

/* Names an attempt's object: podbuild_secret_name, podbuild_cluster_name. */
typedef ctrain_err (*attempt_name_fn)(const char *job, int attempt, const char *tag, char *buf,
                                      size_t len);

/* A new v1 `kind` of the job's attempt `attempt` (>= 1) into *obj, named by
 * `name_of` (the job's name, the attempt, its tag) and labelled with the
 * attempt; *md its metadata. */
static ctrain_err attempt_object(const job_spec *js, int attempt, const char *kind,
                                 attempt_name_fn name_of, cJSON **obj, cJSON **md, char *errbuf,
                                 size_t errlen) {
  const char *job_name = NULL, *ns = NULL;
  char name[256], att[32];
  *obj = NULL;
  ctrain_err result = podbuild_job_names(js, &job_name, &ns, errbuf, errlen);
  if (result)
    goto out;
  if (attempt < 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "the %s of attempt %d: the attempt must be >= 1", kind, attempt);
  if (name_of(job_name, attempt, js->name_tag, name, sizeof(name)))
    CTRAIN_FAIL(CTRAIN_E_TOOBIG, "metadata.name: '%s' is too long", job_name);
  *obj = podbuild_new_object(js, "v1", kind, name, md);
  snprintf(att, sizeof(att), "%d", attempt);
  cJSON *labels = *obj ? podbuild_obj_at(*md, "labels") : NULL;
  if (!labels || !ctrain_json_put(labels, PODBUILD_LABEL_ATTEMPT, cJSON_CreateString(att))) {
    cJSON_Delete(*obj);
    *obj = NULL;
    OOM();
  }
out:
  return result;
}

ctrain_err podbuild_secret(const job_spec *js, int attempt, const char *token, cJSON **out,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *sec = NULL, *md = NULL;
  *out = NULL;
  if (!token || !*token)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "podbuild_secret: a token is required");
  result = attempt_object(js, attempt, "Secret", podbuild_secret_name, &sec, &md, errbuf, errlen);
  if (result)
    goto out;
  cJSON *sd = podbuild_obj_at(sec, "stringData");
  if (!sd || !ctrain_json_put(sec, "type", cJSON_CreateString("Opaque")) ||
      !ctrain_json_put(sd, PODBUILD_TOKEN_KEY, cJSON_CreateString(token)))
    OOM();
  *out = sec;
  sec = NULL;
out:
  cJSON_Delete(sec);
  return result;
}

ctrain_err podbuild_cluster_size(const job_spec *js, size_t *out) {
  tfconfig_render_args ra = podbuild_render_args(js, PODBUILD_WORKER, 0);
  return tfconfig_cluster_size(&ra, out);
}

ctrain_err podbuild_cluster_configmap(const job_spec *js, int attempt, cJSON **out, char *errbuf,
                                      size_t errlen) {
  cJSON *cm = NULL, *md = NULL;
  char *cluster = NULL;
  *out = NULL;
  ctrain_err result =
      attempt_object(js, attempt, "ConfigMap", podbuild_cluster_name, &cm, &md, errbuf, errlen);
  if (result)
    goto out;
  tfconfig_render_args ra = podbuild_render_args(js, PODBUILD_WORKER, 0);
  result = tfconfig_render_cluster(&ra, &cluster, errbuf, errlen);
  if (result)
    goto out;
  if (strlen(cluster) > PODBUILD_CLUSTER_BYTES_MAX)
    CTRAIN_FAIL(CTRAIN_E_TOOBIG, "the cluster spec is %zu bytes, over %d", strlen(cluster),
                PODBUILD_CLUSTER_BYTES_MAX);
  cJSON *data = podbuild_obj_at(cm, "data");
  /* Immutable: never rewritten, and the kubelets need not watch it. */
  if (!data || !ctrain_json_put(cm, "immutable", cJSON_CreateTrue()) ||
      !ctrain_json_put(data, PODBUILD_CLUSTER_KEY, cJSON_CreateString(cluster)))
    OOM();
  *out = cm;
  cm = NULL;
out:
  free(cluster);
  cJSON_Delete(cm);
  return result;
}
