/* controller/tfjob.h - kubeflow.org/v1 TFJob served by the TrainingJob
 * reconciler (--enable-tfjob): an adapter on both sides of the one pure
 * recon_reconcile, nothing of its own decides.
 *
 * In: tfjob_to_job turns the observed TFJob into the TrainingJob-shaped job
 * the reconciler takes (training-operator v1.9's defaults applied as its
 * SetDefaults_TFJob does). The mapping, TFJob field -> TrainingJob field:
 *
 *   tfReplicaSpecs keys       case-insensitive, as training-operator's
 *                             defaulting: Chief|Master -> Chief (Master is
 *                             the legacy name; both at once is invalid),
 *                             Worker, Evaluator; PS -> the job Failed
 *                             (InvalidSpec): no parameter servers; another
 *                             key -> invalid
 *   <type>.replicas           replicas (default 1)
 *   <type>.template           template (shared, not copied)
 *   <type>.restartPolicy      the job-level restartPolicy: the strictest of
 *                             the collective members' (Chief, Worker):
 *                             Never > ExitCode > OnFailure; Always counts as
 *                             OnFailure (pods are always restartPolicy Never:
 *                             every restart is a gang restart); default Never
 *                             (TFJobDefaultRestartPolicy). The evaluator's is
 *                             not used: it restarts with each new attempt.
 *   port `tfjob-port` of container `tensorflow` (else the first container),
 *                             Chief's, else Worker's, else Evaluator's
 *                             -> port (default CTRAIN_DEFAULT_COLLECTIVE_PORT)
 *   successPolicy             "" -> ChiefOrWorker0, AllWorkers -> AllWorkers
 *   runPolicy.cleanPodPolicy  -> cleanPodPolicy (default None, as TFJob's)
 *   runPolicy.backoffLimit    -> backoffLimit (gang restarts); unset: no
 *                             limit, as training-operator's nil
 *   runPolicy.activeDeadlineSeconds, ttlSecondsAfterFinished, suspend
 *                             -> the same fields
 *   runPolicy.managedBy       another controller than
 *                             kubeflow.org/training-operator: not ours, left
 *                             alone
 *   runPolicy.schedulingPolicy, enableDynamicWorker: ignored
 *
 * The reconciler's state that TFJob's structural status cannot hold (the
 * apiserver prunes unknown status fields) lives in two annotations of the
 * TFJob, ctrain.dev/attempt and ctrain.dev/restarts, written (a merge patch
 * with the observed resourceVersion as precondition) before the status that
 * goes with them; the pods' ctrain.dev/attempt labels back the attempt up
 * (recon_reconcile takes the newest), so a controller restarted mid-job
 * resumes the attempt and its restart count.
 *
 * Out: tfjob_adapt_result turns the pass's result into TFJob's: the status
 * in TFJob's shape (conditions with training-operator's reasons TFJobCreated,
 * TFJobRunning, TFJobRestarting, TFJobSucceeded, TFJobFailed,
 * TFJobSuspended, TFJobResumed, TFJobFailedValidation; messages that say
 * "TFJob"; replicaStatuses keyed Chief (or Master)/Worker/Evaluator;
 * startTime, completionTime), written only when it differs in that shape;
 * pods also carry training-operator's labels (training.kubeflow.org/
 * job-name, replica-type, replica-index, operator-name: ctrain, job-role:
 * master on the chief, or worker 0 without one); events say TFJob. */
#ifndef CTRAIN_CTL_TFJOB_H
#define CTRAIN_CTL_TFJOB_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "controller/reconcile.h"
#include "ctrain/err.h"

#define TFJOB_API_VERSION "kubeflow.org/v1"
#define TFJOB_KIND        "TFJob"
#define TFJOB_PORT_NAME   "tfjob-port"
#define TFJOB_CONTAINER   "tensorflow"
#define TFJOB_MANAGED_BY  "kubeflow.org/training-operator"
#define TFJOB_OPERATOR    "ctrain" /* training.kubeflow.org/operator-name */
#define TFJOB_INVALID_MAX 512

typedef struct {
  cJSON *job; /* the TrainingJob-shaped job, owned; its templates refer to the TFJob's */
  char invalid[TFJOB_INVALID_MAX]; /* non-empty: why it cannot run (recon_input.invalid_spec) */
  int foreign;                     /* runPolicy.managedBy names another controller: do nothing */
} tfjob_view;

/* Builds the reconciler's view of the TFJob `tf` (borrowed; it must outlive
 * v->job, whose templates refer to it). On success v holds the job (free it
 * with tfjob_view_free); CTRAIN_E_NOMEM leaves it empty. A spec we cannot
 * run is not an error: v->invalid says why. */
CTRAIN_NODISCARD ctrain_err tfjob_to_job(const cJSON *tf, tfjob_view *v);

/* Releases what v holds; accepts a zeroed one. */
void tfjob_view_free(tfjob_view *v);

/* The reconciler's status (our shape) of the TFJob `tf` (borrowed): its
 * status with training-operator's reasons and messages mapped back, plus
 * attempt and restarts from the annotations and observedGeneration. *out
 * owned by the caller. */
CTRAIN_NODISCARD ctrain_err tfjob_status_from_tf(const cJSON *tf, cJSON **out);

/* The TFJob status for the reconciler's `status` (borrowed) of `tf`
 * (borrowed; the replicaStatuses key of the chief is Master when its spec
 * says Master). *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err tfjob_status_to_tf(const cJSON *tf, const cJSON *status, cJSON **out);

/* Turns the result of a pass over `v` (built from `tf`) into TFJob's, in
 * place: the UPDATE_STATUS object becomes the TFJob to write (a copy of
 * `tf` with the TFJob status and the two annotations), or the action is
 * dropped when neither differs from `tf`; pods get training-operator's
 * labels; event reasons and messages say TFJob; a Failed InvalidSpec that
 * is new gets a Warning TFJobFailedValidation event. All borrowed but res. */
CTRAIN_NODISCARD ctrain_err tfjob_adapt_result(const cJSON *tf, const tfjob_view *v,
                                               recon_result *res);

#endif
