/* recon_validate.c - a job the controller can run: its spec parsed and
 * checked (controller/jobspec.c), then the etcd budget of what it builds. */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <string.h>

/* What the job's objects may take in etcd, as the controller sends them:
 * the cluster ConfigMap within PODBUILD_CLUSTER_BYTES_MAX, and the pods of
 * an attempt plus that ConfigMap within RECON_JOB_BYTES_MAX. Each pod is
 * measured as built (the last index of its type: the longest names). */
ctrain_err recon_validate_budget(const job_spec *js, char *msg, size_t len) {
  size_t cluster = 0, total = 0;
  int pods = 0;
  char err[512] = "";
  if (podbuild_cluster_size(js, &cluster))
    return CTRAIN_OK; /* no collective, or no namespace: reported elsewhere */
  if (cluster > PODBUILD_CLUSTER_BYTES_MAX)
    JOBSPEC_FAIL(
        "spec.replicaSpecs: the cluster spec of TF_CONFIG would be %zu bytes, over the budget of "
        "%d bytes (a ConfigMap's 1 MiB less 64 KiB for its metadata)",
        cluster, PODBUILD_CLUSTER_BYTES_MAX);
  total = cluster;
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const int n = js->replicas[t];
    cJSON *pod = NULL;
    if (n < 1)
      continue;
    ctrain_err result = podbuild_pod(js, t, n - 1, 1, &pod, err, sizeof(err));
    if (result == CTRAIN_E_CONFIG || result == CTRAIN_E_TOOBIG)
      JOBSPEC_FAIL("%s", err);
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
    JOBSPEC_FAIL(
        "spec.replicaSpecs: the job's %d pods and its cluster ConfigMap would be %zu bytes, over "
        "the per-job budget of %d bytes (64 MiB): use fewer replicas or smaller pod templates",
        pods, total, RECON_JOB_BYTES_MAX);
  return CTRAIN_OK;
}

ctrain_err recon_validate(const cJSON *job, char *msg, size_t len) {
  job_spec js;
  ctrain_err result = jobspec_parse(job, &js, msg, len);
  return result ? result : recon_validate_budget(&js, msg, len);
}
