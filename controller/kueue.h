/* controller/kueue.h - a TrainingJob admitted by Kueue (sigs.k8s.io/kueue)
 * as an external framework: the job's own Workload, no pods before it is
 * admitted.
 *
 * A TrainingJob whose metadata.labels carry kueue.x-k8s.io/queue-name is
 * admission-gated: the controller writes one Workload (kueue.x-k8s.io/v1beta2)
 * per job, named kueue_workload_name(job), owned by the job (controller
 * ownerReference), with spec.queueName the label's LocalQueue and one podSet
 * per replica type (name: chief, worker, evaluator; count: replicas;
 * template: that replica's pod template, whose requests Kueue counts). Kueue
 * reserves quota and admits it (QuotaReserved and Admitted True); only then
 * does the reconciler create pods. When the job ends the controller sets the
 * Workload's Finished condition (workloads/status) so the quota frees; when
 * Kueue evicts it the pods go and, once none runs, the controller clears the
 * quota reservation (as Kueue's own job integrations do) so it is requeued.
 *
 * Everything here is pure (JSON in, JSON out, no API call, no clock): the
 * reconciler decides with it, the executor sends what it builds. Objects
 * returned are owned by the caller; arguments are borrowed. */
#ifndef CTRAIN_CTL_KUEUE_H
#define CTRAIN_CTL_KUEUE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"

/* The parsed spec, controller/jobspec.h. */
#ifndef CTRAIN_JOB_SPEC_TYPEDEF
#define CTRAIN_JOB_SPEC_TYPEDEF
typedef struct job_spec job_spec;
#endif

#define KUEUE_LABEL_QUEUE     "kueue.x-k8s.io/queue-name"
#define KUEUE_API_VERSION     "kueue.x-k8s.io/v1beta2"
#define KUEUE_WORKLOAD_PREFIX "trainingjob-"
#define KUEUE_NAME_MAX        256

/* Where a job's Workload stands. */
typedef enum {
  KUEUE_ABSENT = 0, /* no Workload yet */
  KUEUE_PENDING,    /* queued: no quota reserved, or reserved and not yet Admitted */
  KUEUE_ADMITTED,   /* QuotaReserved and Admitted True, not Evicted: pods may run */
  KUEUE_EVICTED,    /* Evicted True while it still holds quota: the pods must go */
  KUEUE_FINISHED,   /* Finished True */
} kueue_state;

/* The LocalQueue of `job` (its metadata.labels[kueue.x-k8s.io/queue-name]),
 * borrowed from it; NULL when the job is not gated (no label, or empty). */
const char *kueue_queue_name(const cJSON *job);

/* "trainingjob-<name>" into buf; CTRAIN_E_TOOBIG when it does not fit or
 * exceeds 253 characters. Deterministic: the same job, the same Workload. */
CTRAIN_NODISCARD ctrain_err kueue_workload_name(const char *job_name, char *buf, size_t len);

/* The state of the Workload `wl` (NULL: KUEUE_ABSENT). */
kueue_state kueue_workload_state(const cJSON *wl);

/* "Pending", "Admitted", ... for logs and messages. Static. */
const char *kueue_state_name(kueue_state s);

/* The message of condition `type` of `wl`, or NULL; borrowed. */
const char *kueue_condition_message(const cJSON *wl, const char *type);

/* The Workload of the job whose parsed spec is `js` (controller/jobspec.h;
 * see above), labelled ctrain.dev/job-name, with
 * spec.priorityClassRef when a replica template names a priorityClassName
 * (spec.priority is not set: its value is the PriorityClass's, not read
 * here; Kueue takes 0).
 * CTRAIN_E_INVAL (errbuf says why) for a job without name, namespace, uid
 * or queue label, CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err kueue_workload_build(const job_spec *js, cJSON **out, char *errbuf,
                                                 size_t errlen);

/* A copy of `wl` with condition Finished True (reason Succeeded or Failed,
 * `message`, lastTransitionTime `now`), to PUT to workloads/status (its
 * resourceVersion makes a stale write conflict). */
CTRAIN_NODISCARD ctrain_err kueue_workload_finished(const cJSON *wl, int succeeded,
                                                    const char *message, int64_t now, cJSON **out);

/* A copy of an evicted `wl` with its quota reservation released:
 * status.admission removed, QuotaReserved and Admitted False (reason
 * Pending, the eviction's message), Requeued (reason: the eviction's) True
 * after a preemption or node failures, else False (Kueue requeues a
 * reactivated or backed-off Workload itself), as Kueue's job integrations
 * do; to PUT to workloads/status once the job's pods are gone. */
CTRAIN_NODISCARD ctrain_err kueue_workload_release(const cJSON *wl, int64_t now, cJSON **out);

/* Applies to `pod` what Kueue's admission gives the podSet `podset`: the
 * podSetUpdates of the Workload's admission checks (nodeSelector, labels,
 * annotations, tolerations; merged, the pod's own keys kept when they
 * clash). A ResourceFlavor's nodeLabels are not in the Workload and are not
 * applied (see docs/kueue.md). */
CTRAIN_NODISCARD ctrain_err kueue_pod_apply(const cJSON *wl, const char *podset, cJSON *pod);

#endif
