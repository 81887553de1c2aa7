/* controller/executor.h - performs what a reconcile pass decided: each
 * action of a recon_result becomes its API call, in the order and with the
 * rules of controller/reconcile.h ("Executing the actions").
 *
 * Pod creates go out with slow start on a pool of threads that keep their
 * connections (controller/slowstart.h); Events go to the recorder's
 * asynchronous queue (kube_events_emit), so a pass never waits on one. The
 * executor keeps no state of its own: what it learns (a create or delete
 * that failed, the token Secret that exists) goes to the job's state
 * (controller/jobstate.h) under that job's lock, and its counts to
 * controller/metrics.h. Any number of workers may execute at once. */
#ifndef CTRAIN_CTL_EXECUTOR_H
#define CTRAIN_CTL_EXECUTOR_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "controller/jobstate.h"
#include "controller/metrics.h"
#include "controller/reconcile.h"
#include "controller/slowstart.h"
#include "ctrain/err.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_events.h"

/* The TrainingJob resource. */
extern const kube_gvr ctl_exec_gvr_trainingjobs;
/* Kueue's Workload resource (kueue.x-k8s.io/v1beta2). */
extern const kube_gvr ctl_exec_gvr_workloads;
/* TrainingRuntimes and ClusterTrainingRuntimes (controller/runtime.h), only read. */
extern const kube_gvr ctl_exec_gvr_runtimes;
extern const kube_gvr ctl_exec_gvr_cluster_runtimes;

/* What differs between the kinds of job the controller serves (TrainingJob;
 * TFJob with --enable-tfjob, controller/tfjob.h). Static, shared. */
typedef struct ctl_exec_kind {
  const kube_gvr *gvr; /* the job's resource: status writes and TTL deletes */
  const char *noun;    /* the job in logs: "trainingjob", "tfjob" */
  /* Writes an UPDATE_STATUS action's `object` for the observed `job` (both
   * borrowed); CTRAIN_E_CONFLICT when the job changed since it was read.
   * NULL: PUT recon_status_object(job, object) to the status subresource. */
  ctrain_err (*write_status)(kube_client *client, const cJSON *job, const cJSON *object,
                             kube_status *st);
} ctl_exec_kind;

/* TrainingJob's. */
extern const ctl_exec_kind ctl_exec_kind_trainingjob;

/* What the executor calls; all borrowed, shared by every worker. */
typedef struct ctl_exec {
  kube_client *client;
  slowstart_pool *create_pool;
  kube_events *events;
  ctl_metrics *metrics;
  /* Non-zero when the controller is stopping or lost its Lease: a pass then
   * sends nothing more (a 4096-pod gang's deletes take minutes at the
   * client's QPS, and a SIGTERM must not wait for them; the next leader
   * lists what is left). NULL: never. */
  int (*stopping)(void *ud);
  void *stopping_ud;
} ctl_exec;

/* Performs the actions of `res` (borrowed) for the job `job` (the observed
 * object, borrowed) of kind `kind` (NULL: TrainingJob) and key `key`, whose
 * state `state` is held by the caller.
 * `jobref` is the job's ObjectReference, which the executor's own events
 * name. *requeue_after_s is set from a REQUEUE action (-1: none). Returns
 * CTRAIN_OK, or the first failure (CTRAIN_E_CONFLICT when the status write
 * conflicted and nothing after it was done; CTRAIN_E_CANCELLED when
 * `stopping` cut the pass short): the caller requeues the key with
 * backoff. */
CTRAIN_NODISCARD ctrain_err ctl_exec_run(const ctl_exec *e, const ctl_exec_kind *kind,
                                         ctl_job *state, const char *key, const cJSON *job,
                                         const cJSON *jobref, const recon_result *res,
                                         int64_t *requeue_after_s);

/* Whether a failed create (HTTP status `http_code`) is permanent: the
 * object itself is refused, so the same create fails forever. 400
 * BadRequest (malformed, or a webhook's denial with that code), 413 (too
 * large) and 422 Invalid (validation, naming the field) are. 403 Forbidden
 * is not: a ResourceQuota that is full, a namespace being deleted, a
 * webhook or RBAC that may change; nor 404, 409, 429 or 5xx. The Job and
 * ReplicaSet controllers retry every create error; a TrainingJob cannot be
 * partly created, so a permanent one fails it (reconcile.h). */
int ctl_exec_create_permanent(int http_code);

/* Removes PODBUILD_FINALIZER, at metadata.finalizers[index], from the pod
 * `name` with uid `uid` in `ns` (a JSON patch that tests both first);
 * NotFound counts as done. For a pod whose job is gone. */
CTRAIN_NODISCARD ctrain_err ctl_exec_remove_finalizer(const ctl_exec *e, const char *ns,
                                                      const char *name, const char *uid, int index,
                                                      kube_status *st);

#endif
