/* controller/recon_internal.h - what the parts of the reconciler share:
 * the pass context and the helpers each part gives the others. Private to
 * controller/recon_*.c and reconcile.c; the API is controller/reconcile.h.
 *
 *   reconcile.c       the decision: parse the job, the order of the steps,
 *                     the Secret, strays, pod creates, Running, stuck pods
 *   recon_expect.c    expectations (creates and deletes not yet observed)
 *   recon_validate.c  the budget of the built objects (the spec's own
 *                     checks are controller/jobspec.c's)
 *   recon_observe.c   the observed pods: phase, failure, stuck, slots
 *   recon_policy.c    restart (failures), success, clean-up and TTL
 *   recon_failrules.c spec.failurePolicy.rules: which rule an ended pod
 *                     matches, its action, the per-rule counts
 *   recon_status.c    conditions, replicaStatuses, the status object
 *   recon_result.c    the action list
 *   recon_progress.c  status.progress (polled), the Straggler condition,
 *                     status.result (the chief's termination message)
 *   recon_kueue.c     admission by Kueue: the Workload, the gate, Finished
 *
 * All of it is pure, like recon_reconcile: time is c->in->now. */
#ifndef CTRAIN_RECON_INTERNAL_H
#define CTRAIN_RECON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "controller/jobspec.h"
#include "controller/kueue.h"
#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "ctrain/err.h"

_Static_assert(RECON_MAX_RULES == JOBSPEC_MAX_RULES, "one bound of spec.failurePolicy.rules");

/* Condition types and reasons. */
#define C_CREATED    "Created"
#define C_RUNNING    "Running"
#define C_RESTARTING "Restarting"
#define C_SUCCEEDED  "Succeeded"
#define C_FAILED     "Failed"
#define C_SUSPENDED  "Suspended"
#define C_STRAGGLER  "Straggler"
#define C_BLOCKED    "Blocked"

#define R_CREATED       "TrainingJobCreated"
#define R_RUNNING       "TrainingJobRunning"
#define R_RESTART       "GangRestart"
#define R_SUCCEEDED     "TrainingJobSucceeded"
#define R_SUSPENDED     "TrainingJobSuspended"
#define R_RESUMED       "TrainingJobResumed"
#define R_ADMITTED      "AdmittedByKueue"
#define R_NOT_RETRYABLE "NotRetryable"
#define R_BACKOFF       "BackoffLimitExceeded"
#define R_DEADLINE      "DeadlineExceeded"
#define R_INVALID       "InvalidSpec"
#define R_DISRUPTION    "Disruption"
#define R_DISRUPTIONS   "DisruptionLimitExceeded"
#define R_NO_PROGRESS   "NoProgress"
/* spec.failurePolicy.rules (recon_failrules.c): a FailJob rule matched; a
 * rule's maxRestarts was reached; a RestartNotCounted rule's gang restart. */
#define R_RULE_FAIL_JOB    "FailurePolicyFailJob"
#define R_RULE_LIMIT       "FailurePolicyMaxRestarts"
#define R_RULE_NOT_COUNTED "RestartNotCounted"
#define R_CREATE_FAILED    "FailedCreatePod"
#define R_NAME_TAKEN       "NameTaken"
#define R_NAMES_FREE       "NamesFree"
/* spec.runtimeRef (recon_runtime.c): the runtime cannot be had; its
 * snapshot was recorded in status.runtime. */
#define R_RUNTIME_NOT_FOUND "RuntimeNotFound"
#define R_RUNTIME_RECORDED  "RuntimeRecorded"
/* A pod's runAsNonRoot refuses its image (recon_observe.c): the kubelet's
 * CreateContainerConfigError, in the job's words with the fix. */
#define R_IMAGE_ROOT      "ImageRunsAsRoot"
#define R_IMAGE_USER_NAME "ImageUserNotNumeric"

typedef enum { PH_PENDING, PH_RUNNING, PH_SUCCEEDED, PH_FAILED, PH_UNKNOWN } pod_phase;

/* One observed pod, its fields borrowed from the input. */
typedef struct {
  const cJSON *obj; /* the pod */
  const char *name, *uid;
  int type;    /* podbuild_type, -1 when the labels name none */
  int index;   /* -1 when unknown */
  int attempt; /* 0 when unlabeled */
  int deleting;
  pod_phase phase;
  int exit_code;      /* failed pods: the first non-zero container exit code, -1 if none */
  const char *reason; /* failed pods: terminated.reason or status.reason */
  int64_t finished;   /* failed pods: terminated.finishedAt, 0 if unknown */
  int slot;           /* 1: it is the desired pod of (type, index) */
  /* Pending pods that cannot start: why (a container's waiting reason such
   * as ErrImageNeverPull, or Unschedulable) and the kubelet's or the
   * scheduler's words; NULL when none. A CreateContainerConfigError of
   * runAsNonRoot is R_IMAGE_ROOT or R_IMAGE_USER_NAME instead, its message
   * ours (static), naming the fix in the replica's template. */
  const char *stuck_reason, *stuck_message, *stuck_container, *stuck_image;
  const char *node;       /* spec.nodeName, NULL when unscheduled */
  int64_t delete_at;      /* metadata.deletionTimestamp (unix s), 0 when none */
  int grace0;             /* deletionGracePeriodSeconds is 0: forced already */
  int finalizer;          /* index of PODBUILD_FINALIZER in metadata.finalizers, -1: none */
  const char *disruption; /* DisruptionTarget=True: its reason; NULL: none */
  int node_lost;          /* Ready False by the node controller: its node stopped reporting */
} obs_pod;

typedef struct {
  const recon_input *in;
  recon_expectations *x;
  recon_result *res;
  char *errbuf;
  size_t errlen;
  const cJSON *job, *old_status;
  /* The job's spec, parsed once per pass (parse_job); spec_err and
   * spec_msg: jobspec_parse's verdict, reported by decide. */
  job_spec js;
  ctrain_err spec_err;
  char spec_msg[1024];
  const char *name, *ns, *uid; /* js's */
  obs_pod *pods;
  size_t n_pods;
  obs_pod **slots[PODBUILD_NTYPES]; /* (js.replicas[t]) the pod holding each name, or NULL */
  cJSON *status;                    /* the new status being built */
  int attempt, restarts;
  int64_t requeue;      /* -1: none */
  int invalid;          /* the spec failed recon_validate this pass: no action but the status */
  kueue_state wl_state; /* its Workload's state (js.queue set) */
  int disruptions;      /* status.disruptions: attempts ended by a disruption */
  int old_pods;         /* collective pods of older attempts still present */
  /* status.ruleRestarts: gang restarts by each rule of spec.failurePolicy
   * (recon_failrules.c reads them from the observed status when first
   * needed: rules_loaded). */
  int rule_restarts[JOBSPEC_MAX_RULES];
  int rules_loaded;
} recon_ctx;

/* How recon_end_attempt counts a gang restart. */
typedef enum {
  RECON_END_FAILURE = 0,    /* status.restarts, against backoffLimit */
  RECON_END_DISRUPTION = 1, /* status.disruptions, against maxDisruptions */
} recon_end_kind;

/* Chief and workers: the members of the collective (not the evaluator). */
static inline int recon_is_collective(int t) {
  return t == PODBUILD_CHIEF || t == PODBUILD_WORKER;
}

/* ---- recon_expect.c ---- */

/* Adds an expected create (is_delete 0: of `name`, for `attempt`) or
 * delete (1: of pod `uid`), decided at `now`. */
CTRAIN_NODISCARD ctrain_err recon_exp_add(recon_expectations *x, int is_delete, const char *name,
                                          const char *uid, int attempt, int64_t now);
/* Whether a create of `name` / a delete of `uid` is still expected. */
int recon_exp_pending_create(const recon_expectations *x, const char *name);
int recon_exp_pending_delete(const recon_expectations *x, const char *uid);
/* Drops the entries the observed pods satisfy and the expired ones; the
 * earliest expiry of what is left (INT64_MAX when nothing is). */
int64_t recon_exp_observe(recon_ctx *c);

/* ---- recon_runtime.c ---- */

/* The runtime gate (recon_input's runtime_admit and runtime_blocked): sets
 * *done when the pass ends there. */
CTRAIN_NODISCARD ctrain_err recon_runtime_gate(recon_ctx *c, int *done);
/* " (the job merged over <kind> <name>, generation N)" when the job has a
 * snapshot of its runtime, else "": for an InvalidSpec message. */
void recon_runtime_note(const recon_ctx *c, char *buf, size_t len);

/* ---- recon_validate.c ---- */

/* The budget check of recon_validate on a parsed, valid spec. */
CTRAIN_NODISCARD ctrain_err recon_validate_budget(const job_spec *js, char *msg, size_t len);

/* ---- recon_observe.c ---- */

/* A non-negative decimal label value; -1 when it is not one. */
int recon_parse_uint(const char *s);
/* Builds c->pods and c->slots from c->in->pods. */
CTRAIN_NODISCARD ctrain_err recon_observe(recon_ctx *c);

/* ---- recon_result.c ---- */

/* Appends an action; takes `object` (deleted on failure). Its index, or -1
 * when out of memory. */
int recon_push(recon_ctx *c, recon_action_kind kind, cJSON *object, const char *name,
               const char *uid);
/* Appends an Event about the job. `after`: the action it reports, or -1. */
CTRAIN_NODISCARD ctrain_err recon_event(recon_ctx *c, const char *type, const char *reason,
                                        int after, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Deletes pod `p` unless it is going already or its delete is expected. */
CTRAIN_NODISCARD ctrain_err recon_delete_pod(recon_ctx *c, const obs_pod *p);
/* Deletes pod `p` with gracePeriodSeconds 0, unless that was done. */
CTRAIN_NODISCARD ctrain_err recon_force_delete_pod(recon_ctx *c, const obs_pod *p);
/* Asks for a requeue at unix time `when` (the earliest asked wins). */
void recon_requeue_at(recon_ctx *c, int64_t when);
/* Keeps only the DELETE_JOB actions of the result (the job is going). */
void recon_result_keep_delete_job(recon_result *res);
/* Prepends UPDATE_STATUS with a copy of c->status, shifting `after`. */
CTRAIN_NODISCARD ctrain_err recon_result_status_first(recon_ctx *c);

/* ---- recon_status.c ---- */

/* Condition `type` of `status` (borrowed), or NULL. */
cJSON *recon_cond_find(const cJSON *status, const char *type);
int recon_cond_true(const cJSON *status, const char *type);
/* Sets condition `type` of the new status (see the rules in the source);
 * *changed (optional) 1 when its status changed. */
CTRAIN_NODISCARD ctrain_err recon_cond_set(recon_ctx *c, const char *type, int value,
                                           const char *reason, const char *message, int *changed);
/* A terminal condition `type` (Succeeded or Failed) becomes True, Running
 * and Restarting False, completionTime is set once. *changed as
 * recon_cond_set's for `type`. */
CTRAIN_NODISCARD ctrain_err recon_set_terminal(recon_ctx *c, const char *type, const char *reason,
                                               const char *message, int *changed);
/* status[field] = the time t, in Kubernetes' format. */
CTRAIN_NODISCARD ctrain_err recon_set_time(recon_ctx *c, const char *field, int64_t t);
/* Starts c->status from the observed one: conditions, times. */
CTRAIN_NODISCARD ctrain_err recon_init_status(recon_ctx *c);
/* replicaStatuses, restarts, attempt, observedGeneration. */
CTRAIN_NODISCARD ctrain_err recon_fill_counts(recon_ctx *c);

/* ---- recon_policy.c ---- */

/* What a finished job still does: cleanPodPolicy, then TTL. *deleted when
 * the TTL expired and the job is to be deleted. */
CTRAIN_NODISCARD ctrain_err recon_finished(recon_ctx *c, int *deleted);
/* Marks the job Failed; an event when `emit` and the condition changed. */
CTRAIN_NODISCARD ctrain_err recon_fail_job(recon_ctx *c, const char *reason, const char *message,
                                           int emit);
/* The failed collective pods of the attempt, by restartPolicy: a gang
 * restart or a Failed job (*done). */
CTRAIN_NODISCARD ctrain_err recon_handle_failures(recon_ctx *c, int *done);
/* Whether the success policy holds for the attempt; names it in `what`. */
int recon_succeeded(recon_ctx *c, char *what, size_t len);
/* Ends the current attempt: a gang restart (reason R_RESTART, R_DISRUPTION,
 * R_NO_PROGRESS or R_RULE_NOT_COUNTED; `what` says why), counted by `kind`:
 * in status.restarts against backoffLimit or in status.disruptions against
 * maxDisruptions. Sets *done when a
 * limit made the job Failed. */
CTRAIN_NODISCARD ctrain_err recon_end_attempt(recon_ctx *c, const char *reason, recon_end_kind kind,
                                              const char *what, int *done);
/* "pod X failed with exit code N (Reason)", ...: how pod `p` ended. */
void recon_describe_failure(const obs_pod *p, char *buf, size_t len);
/* spec.progressDeadlineSeconds: a Running attempt whose reported position
 * (globalStep, epoch and step) has not moved for that long ends with
 * R_NO_PROGRESS. *done as above. Not enforced with in->progress_interval_s
 * 0 (nothing polls): the condition ProgressDeadlineNotEnforced says so. */
CTRAIN_NODISCARD ctrain_err recon_check_progress(recon_ctx *c, int *done);

/* ---- recon_failrules.c ---- */

/* What a rule matched in a pod: the rule's index (-1: none) and, when an
 * exit-code or reason matcher chose a container, that container. */
typedef struct {
  int rule;
  const char *container; /* borrowed from the pod; NULL: the pod as a whole */
  int exit_code;         /* the container's, or the pod's (-1: none) */
  const char *reason;    /* its terminated.reason, or the pod's */
} recon_rule_match;

/* The first rule of spec.failurePolicy.rules that matches pod `p` (a
 * collective pod of the attempt that ended: failed, deleted, disrupted),
 * into *m; returns m->rule (-1 when none matches). Every matcher a rule
 * gives must match. */
int recon_rule_match_pod(const recon_ctx *c, const obs_pod *p, recon_rule_match *m);
/* A FailJob rule matched pod `p`: the job Fails, reason R_RULE_FAIL_JOB,
 * the message naming the rule's index and the exit code. Sets *done. */
CTRAIN_NODISCARD ctrain_err recon_rule_fail(recon_ctx *c, const obs_pod *p,
                                            const recon_rule_match *m, int *done);
/* A Restart or RestartNotCounted rule matched the cause of the attempt's
 * end, pod `p`: the job Fails (R_RULE_LIMIT, *done) when the rule's
 * maxRestarts is reached, else a gang restart counted in
 * status.ruleRestarts[rule] and, for Restart, against backoffLimit, for
 * RestartNotCounted against maxDisruptions (as a disruption). */
CTRAIN_NODISCARD ctrain_err recon_rule_restart(recon_ctx *c, const obs_pod *p,
                                               const recon_rule_match *m, int *done);
/* status.ruleRestarts, one count per rule, when the spec has rules or the
 * observed status had counts. */
CTRAIN_NODISCARD ctrain_err recon_rule_status(recon_ctx *c);
/* A gang restart was decided: the expectations keep the rule counts that go
 * with its attempt, as they keep status.restarts (a cache behind our own
 * status write must not lose them). */
void recon_rule_remember(recon_ctx *c);

/* ---- recon_progress.c ---- */

/* Carries status.progress and status.result of the observed status over
 * into the new one, and copies the chief's termination message of the
 * current attempt into status.result. Before the decision, so the
 * completion event can quote it. */
CTRAIN_NODISCARD ctrain_err recon_progress_init(recon_ctx *c);
/* After the decision: the latest poll (in->progress) into status.progress
 * while the job runs, and the Straggler condition (in->straggler). */
CTRAIN_NODISCARD ctrain_err recon_progress_apply(recon_ctx *c);
/* When the chief's position last moved (status.progress.lastProgressTime,
 * or the latest poll's lastPollTime when its globalStep, epoch or step
 * differs), in buf; "" when unknown. */
void recon_progress_moved(const recon_ctx *c, char *buf, size_t len);
/* Characters of the chief's error kept in status.result. */
#define RECON_RESULT_ERROR_MAX 512
/* status.result from the chief's termination message `msg` (JSON, what
 * ctrain-worker writes: state, accuracy, loss, val_accuracy, val_loss,
 * samples_per_sec, epochs, steps, replicas_in_sync, model, error); NULL when
 * it is not a JSON object (a message someone else wrote). Only finite
 * numbers are taken (epochs, steps, replicas floored), the error cut at
 * RECON_RESULT_ERROR_MAX characters. *nomem on allocation failure. Fuzzed
 * (tests/fuzz/fuzz_result_message.c): the message is the pod's, and a
 * tenant's container writes it. */
cJSON *recon_result_from_message(const char *msg, int *nomem);
/* ", accuracy 0.877 (val 0.86), model /ckpt/model" from status.result, or
 * "" when there is none; in buf. */
const char *recon_result_summary(const recon_ctx *c, char *buf, size_t len);

/* ---- recon_kueue.c ---- */

/* A job with a queue (c->queue): unless its Workload is Admitted, makes it
 * wait (creates the Workload, deletes pods, Suspended WaitingForAdmission,
 * releases an evicted Workload's quota) and sets *gated. */
CTRAIN_NODISCARD ctrain_err recon_kueue_gate(recon_ctx *c, int *gated);
/* After the decision: a terminal job's Workload becomes Finished. */
CTRAIN_NODISCARD ctrain_err recon_kueue_finish(recon_ctx *c);
/* Applies the admission's podSetUpdates of replica type t to `pod`. */
CTRAIN_NODISCARD ctrain_err recon_kueue_pod(recon_ctx *c, int t, cJSON *pod);

#endif
