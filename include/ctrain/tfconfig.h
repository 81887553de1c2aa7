/* ctrain/tfconfig.h - the TF_CONFIG environment variable, as TensorFlow reads it.
 *
 * Parsing and validation follow tf.distribute's TFConfigClusterResolver and
 * multi_worker_util: the same errors (malformed JSON, unknown task type, task
 * type missing from the cluster, index out of range, more than one chief or
 * evaluator) and the same ranks as MultiWorkerMirroredStrategy (chief 0,
 * worker i is i+1 when a chief exists; the evaluator is outside the
 * collective). The renderer is the controller's side of the same contract. */
#ifndef CTRAIN_TFCONFIG_H
#define CTRAIN_TFCONFIG_H

#include <stddef.h>

#include "ctrain/err.h"

typedef enum {
  TFCONFIG_CHIEF = 0,
  TFCONFIG_WORKER,
  TFCONFIG_EVALUATOR,
  TFCONFIG_PS,
} tfconfig_task_type;

typedef struct {
  int local;               /* 1: no TF_CONFIG (or no cluster): one local worker */
  tfconfig_task_type type; /* this task's type */
  int index;               /* this task's index within its type */
  int rank;                /* rank in the collective; -1 for the evaluator */
  int world;               /* collective members: chiefs + workers (1 when local) */
  int is_chief;            /* chief, or worker 0 when the cluster has no chief */
  int n_chief, n_worker, n_evaluator, n_ps;
  char **addrs;    /* (world) "host:port" of each collective member in rank order; owned */
  char *self_addr; /* this task's own address (also for the evaluator); owned, NULL if local */
} tfconfig;

/* Parses and validates `json` (borrowed; NULL or "" means no TF_CONFIG: a
 * single local worker). On error returns CTRAIN_E_PARSE (malformed JSON) or
 * CTRAIN_E_CONFIG with a message naming the field in errbuf, and leaves `tc`
 * empty. The caller owns what `tc` holds and releases it with tfconfig_free. */
ctrain_err tfconfig_parse(tfconfig *tc, const char *json, char *errbuf, size_t errlen);

/* Reads $TF_CONFIG and calls tfconfig_parse. */
ctrain_err tfconfig_from_env(tfconfig *tc, char *errbuf, size_t errlen);

/* Releases what `tc` holds; accepts a zeroed or already-freed struct. */
void tfconfig_free(tfconfig *tc);

/* "chief", "worker", "evaluator", "ps". */
const char *tfconfig_type_name(tfconfig_task_type t);

typedef struct {
  const char *job;         /* job name (DNS label) */
  const char *ns;          /* namespace */
  int port;                /* collective port */
  int n_chief;             /* 0 or 1 */
  int n_worker;            /* >= 0 */
  int n_evaluator;         /* 0 or 1 */
  tfconfig_task_type type; /* the pod's task */
  int index;
} tfconfig_render_args;

/* Renders the TF_CONFIG of one pod: a cluster with chief/worker/evaluator
 * lists of "<job>-<type>-<i>.<job>.<ns>.svc:<port>", the task, and
 * "environment":"cloud". The result is validated with tfconfig_parse before
 * it is returned. *out is owned by the caller (free()). */
ctrain_err tfconfig_render(const tfconfig_render_args *a, char **out, char *errbuf, size_t errlen);

#endif
