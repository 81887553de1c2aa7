/* ctrain/contract.h - the controller <-> worker <-> cluster contract, written
 * once: the environment the controller gives each training container, the
 * ports, the Kubernetes names (API group and version, labels, the finalizer,
 * annotations) and the label the progress read token is derived with. Both
 * the controller and the worker include this header; nothing else defines
 * these values. Each fact says who sets it and who reads it.
 *
 * The CRD (manifests/crds/trainingjobs.ctrain.dev.yaml) carries the same
 * group, version, kind and port defaults for the apiserver;
 * tests/integration/test_contract.py checks that they agree with this file,
 * and that the environment names docs/worker.md and docs/api.md mention are
 * the ones below. Keep every value a plain literal or a concatenation of the
 * macros above it (that test reads the #defines). */
#ifndef CTRAIN_CONTRACT_H
#define CTRAIN_CONTRACT_H

/* ---- The API: set by the CRD manifests; read by the controller (its
 * informers and requests, ownerReferences on what it creates). */
#define CTRAIN_API_GROUP   "ctrain.dev"
#define CTRAIN_API_VERSION "v1alpha1"
/* apiVersion: "ctrain.dev/v1alpha1" */
#define CTRAIN_API_GROUP_VERSION CTRAIN_API_GROUP "/" CTRAIN_API_VERSION
#define CTRAIN_KIND_TRAININGJOB  "TrainingJob"
/* Resource plurals: the CRDs' spec.names.plural. */
#define CTRAIN_RESOURCE_TRAININGJOBS            "trainingjobs"
#define CTRAIN_RESOURCE_TRAININGRUNTIMES        "trainingruntimes"
#define CTRAIN_RESOURCE_CLUSTERTRAININGRUNTIMES "clustertrainingruntimes"

/* ---- Ports. */
/* spec.port's default (the CRD's): the collective port, set by the
 * controller into TF_CONFIG's cluster addresses; the workers listen on and
 * dial it (read from TF_CONFIG, never from this macro at run time). */
#define CTRAIN_DEFAULT_COLLECTIVE_PORT 2222
/* spec.progressPort's default (the CRD's): set by the controller as
 * CTRAIN_ENV_PROGRESS_PORT and a containerPort named `progress`; the worker
 * serves /progress and /metrics on it; the controller polls the chief's. */
#define CTRAIN_DEFAULT_PROGRESS_PORT 8471

/* ---- The training container's environment: set by the controller
 * (controller/podbuild.c) in every chief and worker container; read by the
 * worker (worker/options.c, worker/train_setup.c) unless said otherwise. */
/* The attempt's cluster spec (a configMapKeyRef); read by no one directly:
 * TF_CONFIG references it as $(CTRAIN_TF_CLUSTER), which the kubelet expands,
 * so it is declared before TF_CONFIG. */
#define CTRAIN_ENV_TF_CLUSTER "CTRAIN_TF_CLUSTER"
/* The TrainingJob's name: the worker scopes its collective handshake by it. */
#define CTRAIN_ENV_JOB_NAME "CTRAIN_JOB_NAME"
/* The TrainingJob's namespace; for the user's command lines ($(...)), the
 * worker does not read it. */
#define CTRAIN_ENV_NAMESPACE "CTRAIN_NAMESPACE"
/* The attempt, a non-negative decimal: peers of other attempts are refused. */
#define CTRAIN_ENV_ATTEMPT "CTRAIN_ATTEMPT"
/* The attempt's job token (a secretKeyRef): authenticates the ring's peers
 * and keys the progress read token (CTRAIN_PROGRESS_READ_LABEL). */
#define CTRAIN_ENV_JOB_TOKEN "CTRAIN_JOB_TOKEN"
/* spec.progressPort (decimal, 0..65535); --progress-port overrides it. */
#define CTRAIN_ENV_PROGRESS_PORT "CTRAIN_PROGRESS_PORT"
/* spec.checkpoint.mountPath, with a checkpoint volume; --backup-dir
 * overrides it. At most one of it and CTRAIN_ENV_BACKUP_URI is set. */
#define CTRAIN_ENV_BACKUP_DIR "CTRAIN_BACKUP_DIR"
/* spec.checkpoint.uri (s3:// or gs://); --backup-uri overrides it. */
#define CTRAIN_ENV_BACKUP_URI "CTRAIN_BACKUP_URI"
/* spec.checkpoint.endpoint, when given; --s3-endpoint overrides it. */
#define CTRAIN_ENV_S3_ENDPOINT "CTRAIN_S3_ENDPOINT"

/* ---- Labels: set by the controller on every pod it creates; read by the
 * controller (its pod informer's selector, grouping pods by job, attempt,
 * type and index) and by users (kubectl -l). */
#define CTRAIN_LABEL_JOB_NAME      CTRAIN_API_GROUP "/job-name"
#define CTRAIN_LABEL_REPLICA_TYPE  CTRAIN_API_GROUP "/replica-type"
#define CTRAIN_LABEL_REPLICA_INDEX CTRAIN_API_GROUP "/replica-index"
#define CTRAIN_LABEL_ATTEMPT       CTRAIN_API_GROUP "/attempt"

/* ---- The finalizer: set by the controller on every pod it creates;
 * removed by the controller once it recorded the pod's end, or by
 * `ctrain-controller --release-finalizers` on uninstall. */
#define CTRAIN_FINALIZER_ATTEMPT CTRAIN_API_GROUP "/attempt"

/* ---- Annotations: written and read by the controller on a TFJob
 * (kubeflow.org/v1), which has no status fields of ours: the attempt, the
 * restarts and the disruptions its view was at. */
#define CTRAIN_ANN_ATTEMPT     CTRAIN_API_GROUP "/attempt"
#define CTRAIN_ANN_RESTARTS    CTRAIN_API_GROUP "/restarts"
#define CTRAIN_ANN_DISRUPTIONS CTRAIN_API_GROUP "/disruptions"

/* ---- The progress read token: hex(HMAC-SHA256(key = the job token,
 * msg = this label)). The worker checks it on /progress and /metrics
 * (worker/progress.c); the controller derives it to poll the chief
 * (controller/progress.c). */
#define CTRAIN_PROGRESS_READ_LABEL "ctrain-progress-read"
/* Hex characters of a read token (the 32 bytes of SHA-256): the worker
 * compares the bearer it gets, the controller sends one. */
#define CTRAIN_PROGRESS_TOKEN_HEX 64

/* The read token of `job_token` (NUL-terminated): the lower-case hex of
 * HMAC-SHA256(key = job_token, msg = CTRAIN_PROGRESS_READ_LABEL), into out
 * (CTRAIN_PROGRESS_TOKEN_HEX + 1 bytes, NUL-terminated). The worker checks
 * the bearer it gets against it; the controller sends it. */
void ctrain_progress_read_token(const char *job_token, char out[CTRAIN_PROGRESS_TOKEN_HEX + 1]);

#endif
