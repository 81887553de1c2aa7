/* controller/podbuild.h - the objects the controller creates for a TrainingJob.
 *
 * Pure builders: each takes the observed TrainingJob's parsed spec (a
 * job_spec, controller/jobspec.h: jobspec_parse of the object as the
 * apiserver returns it, CRD defaults applied; borrowed) and returns a new
 * cJSON object owned by the caller (cJSON_Delete). Only the pod templates
 * are read as JSON. Nothing here talks to a server.
 *
 * The rules are docs/design.md's "Controller contract":
 * - pod `<job>-<type>-<i>` (type lower-case), hostname = name, subdomain
 *   `<job>`, restartPolicy Never, labels ctrain.dev/{job-name, replica-type,
 *   replica-index, attempt}, one controller ownerReference (controller=true,
 *   blockOwnerDeletion=true), TF_CONFIG (tfconfig_render_ref: the task, the
 *   cluster as $(CTRAIN_TF_CLUSTER), which the kubelet expands from the
 *   variable before it, a configMapKeyRef to the attempt's ConfigMap),
 *   CTRAIN_JOB_NAME, CTRAIN_NAMESPACE, CTRAIN_ATTEMPT and
 *   CTRAIN_JOB_TOKEN (secretKeyRef to the attempt's Secret, key `token`) in
 *   every container; automountServiceAccountToken false unless the template
 *   sets it; spec.checkpoint mounted at its mountPath in every container with
 *   CTRAIN_BACKUP_DIR; a TrainingJob's pods get the Pod Security `restricted`
 *   defaults the template leaves unset (controller/podsec.h);
 * - headless Service `<job>`: clusterIP None, publishNotReadyAddresses true,
 *   selector on the job-name label, port spec.port;
 * - Secret `<job>-token-<attempt>-<tag>` holding the token of that attempt under
 *   the key `token`, one per attempt and never updated (the controller may
 *   only create Secrets in a job's namespace, not read or update them). A
 *   pod of attempt N names the Secret of attempt N, so a kubelet that does
 *   not see it yet retries the container start instead of starting it with
 *   another attempt's token. The ownerReference makes the garbage collector
 *   delete every attempt's Secret with the job.
 * - ConfigMap `<job>-cluster-<attempt>` (immutable) holding the cluster of
 *   TF_CONFIG under the key `cluster` (tfconfig_render_cluster): stored once
 *   per attempt instead of in every pod (n pods each listing n addresses
 *   made a 4096-worker job ~717 MB of pods), created before the attempt's
 *   pods like the Secret, and for the same reason per attempt: a kubelet
 *   that does not see it yet retries instead of starting a pod with another
 *   attempt's cluster. The previous attempt's is deleted with the new one's
 *   creation, so a job keeps one (two while a restart is under way). */
#ifndef CTRAIN_PODBUILD_H
#define CTRAIN_PODBUILD_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/contract.h"
#include "ctrain/err.h"

/* controller/jobspec.h; declared here too, as its header includes this one. */
#ifndef CTRAIN_JOB_SPEC_TYPEDEF
#define CTRAIN_JOB_SPEC_TYPEDEF
typedef struct job_spec job_spec;
#endif

/* Names of ctrain/contract.h (the one place they are written), under the
 * names the controller's files use. */
#define PODBUILD_API_VERSION    CTRAIN_API_GROUP_VERSION
#define PODBUILD_KIND           CTRAIN_KIND_TRAININGJOB
#define PODBUILD_LABEL_JOB      CTRAIN_LABEL_JOB_NAME
#define PODBUILD_LABEL_TYPE     CTRAIN_LABEL_REPLICA_TYPE
#define PODBUILD_LABEL_INDEX    CTRAIN_LABEL_REPLICA_INDEX
#define PODBUILD_LABEL_ATTEMPT  CTRAIN_LABEL_ATTEMPT
#define PODBUILD_CKPT_VOLUME    "ctrain-checkpoint"
#define PODBUILD_SECRET_SUFFIX  "-token-"
#define PODBUILD_TOKEN_KEY      "token" /* the Secret key that holds the token */
#define PODBUILD_CLUSTER_SUFFIX "-cluster-"
#define PODBUILD_CLUSTER_KEY    "cluster" /* the ConfigMap key of the cluster */
/* The most a cluster spec may hold: a ConfigMap's data is limited to 1 MiB
 * (1048576 bytes); 64 KiB stay for its metadata within etcd's 1.5 MiB
 * request limit. 4096 workers with the longest names the CRD allows (a
 * 48-character job, a 63-character namespace) take about 0.75 MiB. */
#define PODBUILD_CLUSTER_BYTES_MAX  (1024 * 1024 - 64 * 1024)
#define PODBUILD_DNS_LABEL_MAX      63
#define PODBUILD_PORT_NAME          "ctrain"
#define PODBUILD_PROGRESS_PORT_NAME "progress"
/* On every pod: removed by the reconciler once it recorded the pod's end
 * (reconcile.h), so no pod of an attempt disappears unseen. */
#define PODBUILD_FINALIZER CTRAIN_FINALIZER_ATTEMPT
/* tolerationSeconds of the not-ready/unreachable NoExecute taints given to
 * chief and worker pods whose template has none for those keys. */
#define PODBUILD_NODE_LOSS_TOLERATION_S 30

/* Replica types in the order pods are created: the collective (chief,
 * workers), then the evaluator. */
typedef enum {
  PODBUILD_CHIEF = 0,
  PODBUILD_WORKER,
  PODBUILD_EVALUATOR,
  PODBUILD_NTYPES
} podbuild_type;

/* "Chief", "Worker", "Evaluator": the key in spec.replicaSpecs and
 * status.replicaStatuses. Static. */
const char *podbuild_type_spec_name(podbuild_type t);

/* "chief", "worker", "evaluator": the pod name part and replica-type label. */
const char *podbuild_type_label(podbuild_type t);

/* Parses a replica-type label; -1 when unknown. */
int podbuild_type_from_label(const char *s);

/* The index of PODBUILD_FINALIZER in the pod's metadata.finalizers, or -1. */
int podbuild_finalizer_index(const cJSON *pod);

/* Writes `<job>-<type>-<index>` into buf. CTRAIN_E_TOOBIG when it does not fit
 * in len (a DNS label is checked by the caller against 63). */
CTRAIN_NODISCARD ctrain_err podbuild_pod_name(const char *job, podbuild_type t, int index,
                                              char *buf, size_t len);

/* Writes `<job>-token-<attempt>-<tag>`, the token Secret of one attempt,
 * into buf; without the tag part when `tag` is NULL or "" (the tag:
 * recon_input.name_tag). */
CTRAIN_NODISCARD ctrain_err podbuild_secret_name(const char *job, int attempt, const char *tag,
                                                 char *buf, size_t len);

/* Writes `<job>-cluster-<attempt>-<tag>`, the cluster ConfigMap of one
 * attempt, as podbuild_secret_name. */
CTRAIN_NODISCARD ctrain_err podbuild_cluster_name(const char *job, int attempt, const char *tag,
                                                  char *buf, size_t len);

/* Builds the pod of replica `t`, index `index`, attempt `attempt` (>= 1) from
 * the job's template (deep-copied; the template is not modified). Variables
 * and volumes the template already has under our names are replaced. On
 * success *out is owned by the caller; on error *out is NULL and errbuf says
 * which field (CTRAIN_E_CONFIG for a spec jobspec_parse refuses: a
 * checkpoint that is none of its kinds, a template without containers). */
CTRAIN_NODISCARD ctrain_err podbuild_pod(const job_spec *js, podbuild_type t, int index,
                                         int attempt, cJSON **out, char *errbuf, size_t errlen);

/* Builds the headless Service `<job>`. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err podbuild_service(const job_spec *js, cJSON **out, char *errbuf,
                                             size_t errlen);

/* Builds the NetworkPolicy `<job>` of attempt `attempt`: the job's pods
 * accept ingress only from pods of the same job AND attempt (labels
 * job-name and attempt), on every port (NCCL connects on ephemeral ports),
 * and from the controller's pods (labels app.kubernetes.io/name=ctrain,
 * component=controller) in the namespace `ctl_ns` (matched by its
 * kubernetes.io/metadata.name label) only on the progress port. A process
 * of an older attempt that outlives its pod object (force delete, node
 * loss) so cannot reach the pods of the next one. Every other ingress to
 * them is denied where the cluster's network plugin enforces NetworkPolicy.
 * The controller writes it (create, or merge-patch of the spec) before the
 * pods of each attempt. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err podbuild_network_policy(const job_spec *js, int attempt,
                                                    const char *ctl_ns, cJSON **out, char *errbuf,
                                                    size_t errlen);

/* Builds the Secret `<job>-token-<attempt>-<tag>` holding `token` (borrowed,
 * printable) under the key `token` (stringData), labelled with the job name
 * and attempt, owned by the job. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err podbuild_secret(const job_spec *js, int attempt, const char *token,
                                            cJSON **out, char *errbuf, size_t errlen);

/* Builds the ConfigMap `<job>-cluster-<attempt>` (immutable) holding the
 * cluster of the job's TF_CONFIG under PODBUILD_CLUSTER_KEY, labelled with
 * the job name and attempt, owned by the job. CTRAIN_E_TOOBIG when the
 * cluster exceeds PODBUILD_CLUSTER_BYTES_MAX (recon_validate refuses such a
 * job first). *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err podbuild_cluster_configmap(const job_spec *js, int attempt, cJSON **out,
                                                       char *errbuf, size_t errlen);

/* The bytes of that ConfigMap's cluster, computed without rendering it
 * (tfconfig_cluster_size); CTRAIN_E_INVAL when the job has no name,
 * namespace, port or collective tfconfig_render accepts. */
CTRAIN_NODISCARD ctrain_err podbuild_cluster_size(const job_spec *js, size_t *out);

/* The apiVersion and kind of `job` (borrowed): its own when it carries both
 * (a TrainingJob, or the TFJob adapter's job, controller/tfjob.h), else
 * PODBUILD_API_VERSION / PODBUILD_KIND. What ownerReferences and events name. */
void podbuild_job_kind(const cJSON *job, const char **api_version, const char **kind);

/* The controller ownerReference to `job` (apiVersion, kind as
 * podbuild_job_kind, name, uid, controller, blockOwnerDeletion). *out owned
 * by the caller. */
CTRAIN_NODISCARD ctrain_err podbuild_owner_ref(const cJSON *job, cJSON **out, char *errbuf,
                                               size_t errlen);

#endif
