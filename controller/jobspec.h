/* controller/jobspec.h - a TrainingJob's spec, parsed and validated once per
 * pass.
 *
 * jobspec_parse reads the job object (cJSON as the apiserver returns it, CRD
 * defaults applied, or the TFJob adapter's TrainingJob-shaped job) into a
 * job_spec: typed scalars and enums for everything the reconciler and the
 * builders (controller/podbuild.h) decide on, and borrowed cJSON pointers
 * only for what is opaque by nature (each replica type's pod template, the
 * checkpoint volume source). The reconciler's parts and podbuild then take
 * `const job_spec *` instead of reading the spec from cJSON.
 *
 * The struct is always filled, valid or not: a value that is absent, of
 * another type or out of range reads as its default (a replica count as 0),
 * so a pass can still act on a finished or an invalid job (clean-up, TTL,
 * finalizers). Whether the spec is one the controller can run, and if not
 * which field says why, is the return value: what the CRD schema cannot
 * check, in the order and the words recon_validate reports (InvalidSpec).
 * recon_validate (controller/reconcile.h) adds the etcd budget of the built
 * objects. Pure: no I/O, nothing allocated; the pointers borrow `job`, which
 * must outlive the job_spec. */
#ifndef CTRAIN_JOBSPEC_H
#define CTRAIN_JOBSPEC_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "controller/podbuild.h"
#include "ctrain/err.h"

/* A validation failure: the message into the caller's `msg` (of `len` bytes,
 * either may be 0) and CTRAIN_E_CONFIG returned from the caller. */
#define JOBSPEC_FAIL(...)                                                                          \
  do {                                                                                             \
    if (msg && len)                                                                                \
      snprintf(msg, len, __VA_ARGS__);                                                             \
    return CTRAIN_E_CONFIG;                                                                        \
  } while (0)

/* The most workers a job may have (chief and evaluator: 1). */
#define JOBSPEC_MAX_WORKERS 4096

/* spec.restartPolicy, spec.cleanPodPolicy, spec.successPolicy. The first of
 * each is the default. */
typedef enum { POL_ON_FAILURE, POL_EXIT_CODE, POL_NEVER } restart_policy;
typedef enum { CLEAN_RUNNING, CLEAN_ALL, CLEAN_NONE } clean_policy;
typedef enum { SUCC_CHIEF_OR_WORKER0, SUCC_ALL_WORKERS } success_policy;

/* spec.failurePolicy.rules (docs/api.md "failurePolicy"): ordered, the first
 * rule that matches a failed or disrupted collective pod decides for it.
 * The bounds are the CRD schema's. */
#define JOBSPEC_MAX_RULES       16
#define JOBSPEC_MAX_RULE_VALUES 32 /* onExitCodes.values, onTerminationReasons.values */
#define JOBSPEC_MAX_RULE_CONDS  8  /* onPodConditions */
typedef enum { RULE_FAIL_JOB, RULE_RESTART_NOT_COUNTED, RULE_RESTART } jobspec_rule_action;

typedef struct {
  jobspec_rule_action action;
  int max_restarts; /* maxRestarts, -1: unset */
  struct {
    int set;               /* onExitCodes given */
    const char *container; /* containerName, NULL: any container */
    int not_in;            /* operator NotIn (else In) */
    int n;
    int values[JOBSPEC_MAX_RULE_VALUES];
  } exit;
  struct {
    int set;               /* onTerminationReasons given */
    const char *container; /* containerName, NULL: any container, or the pod's status.reason */
    int n;
    const char *values[JOBSPEC_MAX_RULE_VALUES];
  } reason;
  int n_conds; /* onPodConditions: any of them present with its status */
  struct {
    const char *type, *status; /* status "True" when not written */
  } conds[JOBSPEC_MAX_RULE_CONDS];
} jobspec_rule;

/* spec.checkpoint: none, a volume mounted in every container, or an
 * object-storage URI; INVALID when it is neither as written (ckpt.why). */
typedef enum {
  JOBSPEC_CKPT_NONE,
  JOBSPEC_CKPT_VOLUME,
  JOBSPEC_CKPT_URI,
  JOBSPEC_CKPT_INVALID
} jobspec_ckpt_kind;

struct job_spec {
  const cJSON *job; /* the object itself, borrowed: metadata for builders */
  /* metadata: NULL when absent (jobspec_parse's verdict does not cover them). */
  const char *name, *ns, *uid;
  const char *api_version, *kind; /* the job's own, else the TrainingJob's */
  int deleting;                   /* metadata.deletionTimestamp is set */
  /* The tag of the token Secret's and cluster ConfigMap's names
   * (recon_input.name_tag); NULL: none. Not parsed: the pass sets it. */
  const char *name_tag;
  const char *queue; /* the Kueue LocalQueue label; NULL: none */

  /* spec.replicaSpecs.<Type>, by podbuild_type: */
  int present[PODBUILD_NTYPES];       /* the key is there (whatever its value) */
  int replicas[PODBUILD_NTYPES];      /* 0: absent, not an object, outside 0..JOBSPEC_MAX_WORKERS */
  const cJSON *tmpl[PODBUILD_NTYPES]; /* .template, borrowed: opaque, copied into each pod */
  int port;                           /* spec.port, CTRAIN_DEFAULT_COLLECTIVE_PORT */
  int progress_port;                  /* spec.progressPort, CTRAIN_DEFAULT_PROGRESS_PORT */
  int backoff_limit;                  /* spec.backoffLimit, 3 */
  int max_disruptions;                /* spec.maxDisruptions, 10 */
  int64_t active_deadline_s;          /* spec.activeDeadlineSeconds, 0: none */
  int64_t ttl_s;                      /* spec.ttlSecondsAfterFinished, -1: none */
  int64_t progress_deadline_s;        /* spec.progressDeadlineSeconds, 0: none */
  restart_policy restart;
  clean_policy clean;
  success_policy success;
  int suspend; /* spec.suspend */
  /* spec.failurePolicy.rules, in order; the first JOBSPEC_MAX_RULES read
   * (more is refused by jobspec_parse), strings borrowed from `job`. */
  int n_rules;
  jobspec_rule rules[JOBSPEC_MAX_RULES];
  struct {
    jobspec_ckpt_kind kind;
    const char *mount_path;  /* .mountPath as written (any kind); NULL: none */
    const cJSON *volume;     /* .volume (VOLUME), borrowed: a volume source */
    const char *uri;         /* .uri (URI) */
    const char *endpoint;    /* .endpoint (URI); NULL or "": the worker's default */
    const char *credentials; /* .credentialsSecret (URI) */
    char why[320];           /* INVALID: the field and why */
  } ckpt;
};
#ifndef CTRAIN_JOB_SPEC_TYPEDEF
#define CTRAIN_JOB_SPEC_TYPEDEF
typedef struct job_spec job_spec;
#endif

/* The names of the policies, by their enum. */
extern const char *const jobspec_restart_names[3];
extern const char *const jobspec_clean_names[3];
extern const char *const jobspec_success_names[2];
extern const char *const jobspec_rule_action_names[3];

/* Fills *out from `job` (borrowed). CTRAIN_OK when the spec is one the
 * controller can run (but for the budget, recon_validate's); CTRAIN_E_CONFIG
 * with msg = "<field>: why" when not (the first problem, in recon_validate's
 * order). *out is filled either way. */
CTRAIN_NODISCARD ctrain_err jobspec_parse(const cJSON *job, job_spec *out, char *msg, size_t len);

/* Fills *out from `job` without judging it: for a reader outside a pass
 * (the progress poller) that needs a field, not a verdict. */
void jobspec_read(const cJSON *job, job_spec *out);

/* The replicas of type t (0 for an unknown type). */
static inline int jobspec_replicas(const job_spec *js, podbuild_type t) {
  return (unsigned)t < PODBUILD_NTYPES ? js->replicas[t] : 0;
}

#endif
