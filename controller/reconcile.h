/* controller/reconcile.h - the decision core of the TrainingJob reconciler.
 *
 * recon_reconcile is a pure function of what the controller observed (the
 * TrainingJob, its pods, whether its Service exists, which attempt's token
 * Secret is known to exist, `now`) plus the per-job expectations the caller
 * keeps between passes. It returns the actions to perform and the new
 * status; it performs nothing and reads no clock; the attempt's token comes
 * from a callback (controller/jobtoken.h derives it from the controller's
 * key, so no Secret of the job is ever read). docs/design.md "Controller contract" is
 * the rulebook; the summary:
 *
 * - Attempts. Pods carry ctrain.dev/attempt. A failed collective member
 *   (chief or worker) of the current attempt ends it: by spec.restartPolicy
 *   and the exit-code table (ctrain_exit_classify; ExitCode retries only
 *   retryable codes, OnFailure all but permanent, Never nothing) the job
 *   either fails or restarts the gang: status.attempt+1, status.restarts+1
 *   (against backoffLimit), every pod of an older attempt is deleted and the
 *   pods of the new attempt are created once no pod of an older attempt is
 *   left (one attempt at a time). A pod that failed without an exit code
 *   counts as retryable.
 * - spec.failurePolicy.rules (recon_failrules.c) come before restartPolicy:
 *   the first rule matching an ended collective pod (onExitCodes In/NotIn,
 *   optionally one container; onTerminationReasons, the kubelet's
 *   terminated.reason such as OOMKilled; onPodConditions such as
 *   DisruptionTarget; all a rule gives) decides for it. FailJob on any pod
 *   fails the job (FailurePolicyFailJob); else an unmatched failure
 *   restartPolicy does not retry fails it, an unmatched disruption counts as
 *   one, and the cause (the earliest failure or matched disruption) follows
 *   its rule: Restart (against backoffLimit) or RestartNotCounted
 *   (reason RestartNotCounted: against maxDisruptions, never backoffLimit),
 *   both counted in status.ruleRestarts[rule] and failing the job
 *   (FailurePolicyMaxRestarts) at the rule's maxRestarts. A pod no rule
 *   matches follows restartPolicy.
 * - Disruptions (recon_policy.c): a pod of the attempt deleted by someone
 *   else (every pod carries PODBUILD_FINALIZER, so even a force delete is
 *   seen), with a DisruptionTarget condition, ended by its kubelet for the
 *   node, or marked not ready by the node controller (its node stopped
 *   reporting) ends the attempt as a disruption: status.disruptions+1
 *   against spec.maxDisruptions, not backoffLimit. Failures that are all
 *   exit 75 (lost a peer) while a member still runs wait up to
 *   RECON_PEER_LOSS_WINDOW_S for such a cause. Pods of an ended attempt whose
 *   node is lost, or still Terminating RECON_FORCE_DELETE_AFTER_S past their
 *   deletionTimestamp, are deleted with grace 0. Every deleting pod loses the
 *   finalizer in the pass that saw it (after the status write).
 * - spec.progressDeadlineSeconds: a Running attempt whose polled position
 *   (globalStep, epoch and step) has not moved for that long ends with
 *   reason NoProgress (against backoffLimit). With progress_interval_s 0
 *   (nothing polls) it is not enforced: condition ProgressDeadlineNotEnforced
 *   True, reason PollingDisabled, and a Warning event.
 * - The NetworkPolicy is written per attempt with its token Secret, before
 *   its pods: only pods of the same job and attempt reach one another.
 * - Pods of the current attempt are never created twice (expectations) and
 *   a Succeeded pod is never recreated. A pass returns every missing pod,
 *   bounded by `burst` minus the creates still expected from earlier passes
 *   (the Job controller's burstReplicas); slow start is the executor's (below).
 * - Success by successPolicy (ChiefOrWorker0: the chief, or worker 0 without
 *   a chief, Succeeded; AllWorkers: every worker and the chief Succeeded);
 *   activeDeadlineSeconds from status.startTime (reset on resume) fails the
 *   job with DeadlineExceeded, else a requeue at the remaining time; on a
 *   terminal state cleanPodPolicy deletes pods (Running: Pending and Running
 *   ones; All; None) and ttlSecondsAfterFinished (from completionTime)
 *   requeues, then deletes the job.
 * - suspend deletes every pod that has not Succeeded and sets Suspended;
 *   resume sets Suspended False, resets startTime and recreates the pods.
 * - Kueue (controller/kueue.h): a job labelled kueue.x-k8s.io/queue-name is
 *   gated on its Workload: CREATE_WORKLOAD when there is none; until it is
 *   Admitted the job is Suspended (reason WaitingForAdmission, the message
 *   names the Workload and the LocalQueue), no pod is created and any that
 *   has not Succeeded is deleted; Evicted does the same and, once no pod is
 *   left, releases the quota (UPDATE_WORKLOAD); Admitted resumes as above,
 *   the pods getting the admission checks' podSetUpdates. A terminal job
 *   marks its Workload Finished (UPDATE_WORKLOAD) so the quota frees.
 * - spec.runtimeRef (controller/runtime.h): a job with no snapshot of its
 *   runtime gets one recorded in status.runtime first (recon_input's
 *   runtime_admit) and nothing else; a runtime that cannot be had blocks
 *   it (condition Blocked, reason RuntimeNotFound, recon_input's
 *   runtime_blocked). The pass reads the job merged over the snapshot
 *   (the caller's view); status.runtime is kept as it is by every pass.
 * - A spec the schema accepts but the controller cannot run (recon_validate)
 *   gives a Failed condition (reason InvalidSpec, message naming the field)
 *   and no other action.
 * - replicaStatuses counts the pods of the current attempt; `active`
 *   includes the creates in flight (returned by the pass or still expected),
 *   as the Job controller counts the pods it just created, so the passes
 *   that see them appear write nothing; a create given up lowers it again.
 * - The status is returned always and an UPDATE_STATUS action is emitted
 *   only when it differs from the observed one. lastTransitionTime changes
 *   only when the status of a condition type changes; a condition that
 *   becomes True moves to the end of the list (the printer column State
 *   shows the last one).
 *
 * Executing the actions (the wiring layer):
 * - Perform them in list order. UPDATE_STATUS, when present, is first: write
 *   it through the status subresource (PUT the observed job with `status`
 *   replaced: recon_status_object); on a conflict skip everything else and
 *   requeue the key.
 * - CREATE_SERVICE / CREATE_SECRET / CREATE_CONFIGMAP: AlreadyExists counts
 *   as success. The
 *   token Secret `<job>-token-<attempt>-<tag>` has deterministic content (the
 *   token derives from the job uid and attempt), so one that exists was
 *   written by an earlier pass or process; remember that the attempt's
 *   Secret exists (recon_input.token_attempt) so later passes skip it. A
 *   failed CREATE_SECRET sends none of the pass's pod creates. The cluster
 *   ConfigMap `<job>-cluster-<attempt>` (podbuild_cluster_configmap) goes
 *   with the Secret: deterministic too, its failure leaves the pods unsent
 *   and forgets the Secret's attempt, so the next pass writes both again.
 * - DELETE_CONFIGMAP: the previous attempt's cluster ConfigMap, returned
 *   with the new one's create; NotFound counts as success; a failure
 *   forgets the Secret's attempt, so the next pass returns it again.
 * - CREATE_POD: slow start, as the Kubernetes Job controller's
 *   slowStartBatch: send the creates of the pass in list order in batches of
 *   1, 2, 4, ... (the creates of one batch in parallel, bounded), the next
 *   batch once the whole batch returned, and none after a batch in which a
 *   create failed. A failure (other than AlreadyExists, which counts as
 *   success) calls recon_expect_creation_failed and emits a Warning
 *   FailedCreatePod; a create not sent calls recon_expect_creation_failed
 *   too, so the next pass returns it again, and counts as not succeeded (its
 *   SuccessfulCreatePod event is skipped). Requeue the key with backoff.
 *   A permanent failure (400, 413, 422: the object itself is refused) is
 *   remembered and given to the next pass as recon_input.create_error.
 * - DELETE_POD / DELETE_JOB: with preconditions.uid = `uid`; NotFound counts
 *   as success; on another failure call recon_expect_deletion_failed.
 * - CREATE_WORKLOAD: AlreadyExists counts as success.
 * - UPDATE_WORKLOAD: PUT to the Workload's status subresource; a conflict
 *   (the cache was behind) fails the pass, which is requeued.
 * - EVENT: emit it when `after` is -1 or the action at index `after`
 *   succeeded.
 * - REQUEUE: add the key back after `seconds` (at most one per result, also
 *   in recon_result.requeue_after_s). */
#ifndef CTRAIN_RECONCILE_H
#define CTRAIN_RECONCILE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"

#define RECON_DEFAULT_BURST      500 /* max pod creates in flight (Job controller's burstReplicas) */
#define RECON_EXPECTATIONS_TTL_S 300 /* as the Job controller's ExpectationsTimeout */
#define RECON_NAME_MAX           64  /* DNS label (63) + NUL */
#define RECON_UID_MAX            64
/* What one job's objects may take, as the controller sends them: its pods
 * (one attempt) and its cluster ConfigMap. 64 MiB lets 4096 workers have
 * 16 KiB pods; the apiserver adds status and managedFields. etcd's default
 * quota is 2 GiB. recon_validate refuses a job over it (InvalidSpec). */
#define RECON_JOB_BYTES_MAX    (64 * 1024 * 1024)
#define RECON_CREATE_ERROR_MAX 1024 /* recon_input.create_error, with its NUL */
#define RECON_MAX_RULES        16   /* spec.failurePolicy.rules (JOBSPEC_MAX_RULES) */

/* How long a pod of an ended attempt may stay Terminating past its
 * deletionTimestamp before it is force-deleted (its kubelet never
 * confirmed: the node is lost). */
#define RECON_FORCE_DELETE_AFTER_S 30
/* How long the end of an attempt whose failed pods all exited 75 (lost a
 * peer) waits for its cause to show while a member still looks Running:
 * the node controller marks the pods of an unreachable node after its
 * node-monitor-grace-period (40-50 s by default), which makes the end a
 * disruption rather than a failure. */
#define RECON_PEER_LOSS_WINDOW_S 75

/* ---- expectations ------------------------------------------------------ */

typedef struct {
  int is_delete;             /* 0: create of `name`; 1: delete of `uid` */
  char name[RECON_NAME_MAX]; /* pod name */
  char uid[RECON_UID_MAX];   /* deletes: the pod's uid */
  int attempt;               /* creates: the attempt created */
  int64_t at;                /* when the action was decided (now of that pass) */
} recon_expect_entry;

/* What this controller did for one job and has not yet seen in its cache.
 * The caller keeps one per job key (zeroed or recon_expectations_init),
 * passes it to every recon_reconcile of that key, and frees it when the job
 * is gone. `attempt`/`restarts` remember the latest gang restart decided, so
 * a job cache that lags behind our own status write never resurrects an
 * older attempt. */
typedef struct {
  recon_expect_entry *e; /* owned */
  size_t n, cap;
  int attempt;     /* highest attempt decided here (0: none) */
  int restarts;    /* status.restarts that goes with it */
  int disruptions; /* status.disruptions that goes with it */
  /* status.ruleRestarts that goes with it, by spec.failurePolicy rule */
  int rule_restarts[RECON_MAX_RULES];
} recon_expectations;

void recon_expectations_init(recon_expectations *x);
/* Releases what x holds; accepts a zeroed struct. */
void recon_expectations_free(recon_expectations *x);
/* The create of `pod_name` failed: stop waiting for it. */
void recon_expect_creation_failed(recon_expectations *x, const char *pod_name);
/* The delete of pod `uid` failed: stop waiting for it. */
void recon_expect_deletion_failed(recon_expectations *x, const char *uid);
/* Number of creates and deletes still expected. */
size_t recon_expectations_pending(const recon_expectations *x);

/* ---- actions ------------------------------------------------------------- */

typedef enum {
  RECON_UPDATE_STATUS = 0,     /* object: the new status */
  RECON_CREATE_SERVICE,        /* object: the Service */
  RECON_CREATE_SECRET,         /* object: the Secret; attempt */
  RECON_DELETE_POD,            /* name, uid (precondition) */
  RECON_CREATE_POD,            /* object: the pod; name, attempt */
  RECON_EVENT,                 /* object: involvedObject; event_type, reason, message, after */
  RECON_DELETE_JOB,            /* name, uid (precondition) */
  RECON_REQUEUE,               /* seconds */
  RECON_CREATE_NETWORK_POLICY, /* object: the NetworkPolicy (with CREATE_SERVICE) */
  RECON_CREATE_WORKLOAD,       /* object: the job's Kueue Workload (controller/kueue.h) */
  RECON_UPDATE_WORKLOAD,       /* object: the Workload with its new status (workloads/status) */
  RECON_REMOVE_FINALIZER, /* name, uid, index: PODBUILD_FINALIZER at metadata.finalizers[index] */
  RECON_CREATE_CONFIGMAP, /* object: the attempt's cluster ConfigMap; attempt */
  RECON_DELETE_CONFIGMAP, /* name: the previous attempt's cluster ConfigMap; attempt (its) */
} recon_action_kind;

typedef struct {
  recon_action_kind kind;
  cJSON *object;          /* owned by the result; see the kinds */
  char *body;             /* owned; CREATE_POD once the controller serialised it (object
                           * NULL then): a pass holding hundreds of pods keeps text, not
                           * cJSON trees ~10x its size (ctl_pass.c) */
  char *name;             /* owned; pod or job name */
  char *uid;              /* owned; precondition of deletes */
  int attempt;            /* CREATE_POD, CREATE_SECRET */
  const char *event_type; /* EVENT: "Normal" or "Warning" (static) */
  const char *reason;     /* EVENT: CamelCase reason (static) */
  char *message;          /* EVENT: owned */
  int after;              /* EVENT: index of the action it reports, or -1 */
  int64_t seconds;        /* REQUEUE */
  int force;              /* DELETE_POD: gracePeriodSeconds 0 (its node is lost or it is stuck) */
  int index;              /* REMOVE_FINALIZER */
} recon_action;

typedef struct {
  recon_action *actions; /* owned */
  size_t n_actions, cap_actions;
  cJSON *status;           /* the new status, owned; set whenever recon_reconcile succeeds */
  int status_changed;      /* 1: an UPDATE_STATUS action is in the list */
  int64_t requeue_after_s; /* -1: no delayed requeue */
  int attempt;             /* the current attempt after this pass */
} recon_result;

/* Releases what res holds; accepts a zeroed struct. */
void recon_result_free(recon_result *res);

/* "UpdateStatus", "CreatePod", ... Static. */
const char *recon_action_kind_name(recon_action_kind k);

/* Writes the token of attempt `attempt` of the job with uid `uid` into hex
 * (printable, NUL-terminated, len bytes at most); 0 on success. The same
 * arguments must give the same token (a restarted controller recreates the
 * same Secret content). jobtoken_fn is the controller's. */
typedef ctrain_err (*recon_token_fn)(void *ctx, const char *uid, int attempt, char *hex,
                                     size_t len);
#define RECON_TOKEN_MAX 129 /* token buffer handed to recon_token_fn */

/* ---- the reconcile ------------------------------------------------------- */

/* What the controller's poller of the chief's /progress concluded about
 * stragglers (controller/straggler.h), for the Straggler condition. */
typedef struct {
  int known;    /* 0: no poll yet: the condition stays as it is */
  int rank;     /* the straggling worker's rank (TF's: chief 0, worker i -> i+1), -1: none */
  double ratio; /* its compute ms/step over the median */
} recon_straggler;

typedef struct {
  const cJSON *job;     /* the observed TrainingJob, CRD defaults applied; borrowed */
  const cJSON *pods;    /* pods owned by the job: an array or a PodList ({items}); NULL: none */
  const cJSON *service; /* the Service `<job>`, NULL when absent; borrowed */
  int token_attempt;    /* the attempt whose token Secret is known to exist; 0: none */
  int64_t now;          /* unix seconds */
  recon_token_fn token; /* required */
  void *token_ctx;
  int burst; /* max pod creates in flight (returned or expected); 0: RECON_DEFAULT_BURST */
  /* The latest poll of the chief's /progress, as status.progress, with
   * slowestWorker {rank, ratio} (the pass names the pod); NULL: none.
   * Written while the job is Running, when it differs from the observed
   * one in more than lastPollTime. Borrowed. */
  const cJSON *progress;
  recon_straggler straggler;
  /* Set by an adapter that found the job's own spec unrunnable before it
   * became ours (controller/tfjob.h: a TFJob with parameter servers): the
   * message of the Failed condition (reason InvalidSpec), taken like a
   * recon_validate failure. NULL: none. Borrowed. */
  const char *invalid_spec;
  /* A pod create of this job that the apiserver refused for good (the
   * executor's ctl_exec_create_permanent: 400 BadRequest, 413, 422
   * Invalid; the message names the pod and quotes the apiserver's Status,
   * which names the field): the pass fails the job (reason
   * FailedCreatePod) and cleans up as for any failure. The same spec would
   * be refused again, so retrying forever only hides it. NULL: none.
   * Borrowed. */
  const char *create_error;
  /* What the job's objects wait for (the executor met a name it uses taken:
   * by an earlier job of the same name whose objects are still going, or
   * by an object that is not the job's, which the controller never
   * touches; controller/ownership.h): the message of the condition
   * Blocked=True (reason NameTaken), which goes False once the pass's
   * creates went through. NULL: none. Borrowed. */
  const char *waiting;
  /* The tag of this job's token Secret and cluster ConfigMap names
   * (`<job>-token-<attempt>-<tag>`, `<job>-cluster-<attempt>-<tag>`), a
   * keyed hash of its uid (jobtoken_name_tag) that no one without the
   * controller's key can know before the job's pods name it, so no object
   * can be made under those names before the controller makes them, and
   * an earlier job of the same name never shares them. NULL or "": no tag
   * (`<job>-token-<attempt>`). Borrowed. */
  const char *name_tag;
  /* The job's Kueue Workload (kueue_workload_name), NULL when absent. Read
   * only for a job labelled kueue.x-k8s.io/queue-name; the caller must not
   * pass a pass for such a job before its Workload cache synced. Borrowed. */
  const cJSON *workload;
  /* The controller's namespace: the NetworkPolicy admits the progress
   * poller from it. NULL: "ctrain-system". Borrowed. */
  const char *controller_ns;
  /* Seconds between polls of a chief's /progress (--progress-interval);
   * spec.progressDeadlineSeconds must be at least two of them. 0: nothing
   * polls, and the deadline is not enforced (condition
   * ProgressDeadlineNotEnforced, reason PollingDisabled). */
  int progress_interval_s;
  /* spec.runtimeRef (controller/runtime.h) of a job with no snapshot yet
   * (no status.runtime), the runtime looked up by the pass: the snapshot
   * to record (runtime_snapshot), which is all that pass does (condition
   * Blocked goes False if it was True for the runtime, a Normal event
   * RuntimeRecorded): the next pass reads the job merged over it; or, when
   * the runtime cannot be had, why (the message names it): condition
   * Blocked True, reason RuntimeNotFound, a Warning event when it becomes
   * so, a requeue after RECON_RUNTIME_RETRY_S, no other action. Both NULL:
   * nothing to admit. Borrowed. */
  const cJSON *runtime_admit;
  const char *runtime_blocked;
} recon_input;

/* How long a job whose runtime cannot be had waits before a pass looks
 * again (the runtime informer's events bring it back sooner). */
#define RECON_RUNTIME_RETRY_S 30

/* Decides one pass for one job. `x` (the job's expectations) is updated in
 * place: entries the observed pods satisfy or that expired are dropped, and
 * one is added per create/delete action returned. `res` must be empty:
 * zeroed, or released with recon_result_free; one that still holds actions
 * or a status is refused with CTRAIN_E_INVAL and left as it was (never
 * overwritten, which would leak it). On success `res` holds the actions and
 * the new status, owned by the caller (recon_result_free); on other errors
 * it is empty. An invalid spec is not an error (it is a Failed status);
 * errors are CTRAIN_E_INVAL for a NULL or non-empty `res` or a job without
 * metadata.name/namespace/uid or without a token callback, CTRAIN_E_NOMEM,
 * or the token callback's, with
 * errbuf saying which. */
CTRAIN_NODISCARD ctrain_err recon_reconcile(const recon_input *in, recon_expectations *x,
                                            recon_result *res, char *errbuf, size_t errlen);

/* The object an UPDATE_STATUS action writes: a copy of `job` with its
 * status replaced by a copy of `status` (both borrowed). *out is owned by
 * the caller. CTRAIN_E_NOMEM leaves *out NULL: never a job without its new
 * status, which a PUT to the status subresource would record as cleared. */
CTRAIN_NODISCARD ctrain_err recon_status_object(const cJSON *job, const cJSON *status, cJSON **out);

/* Checks what the CRD schema cannot: DNS-safe pod names, containers in every
 * template, the collective port declared twice in a pod, failure rules (what
 * an older schema let through; a containerName no template has), a checkpoint mount
 * that collides with the template, the budgets of the job's objects (the
 * cluster ConfigMap within PODBUILD_CLUSTER_BYTES_MAX, pods and ConfigMap
 * within RECON_JOB_BYTES_MAX, each pod measured as built). CTRAIN_E_CONFIG with a message that
 * starts with the field path (e.g. "spec.replicaSpecs.Worker.template.spec.containers: ..."). `job`
 * borrowed. jobspec_parse (controller/jobspec.h) then the budget: what a
 * pass does with the spec it parsed once. */
CTRAIN_NODISCARD ctrain_err recon_validate(const cJSON *job, char *msg, size_t len);

/* The job's state for logs and metrics: the type of the last True condition
 * of `status` (borrowed from it: Created, Running, Restarting, Succeeded,
 * Failed, Suspended), or "Pending" (static) when none is True. */
const char *recon_state(const cJSON *status);

#endif
