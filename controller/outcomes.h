/* controller/outcomes.h - job outcome counters by kind and namespace, as
 * training-operator's jobs_{created,successful,failed,restarted}_total:
 *
 *   ctrain_jobs_created_total{kind="TrainingJob",namespace="ml"} 3
 *   ctrain_jobs_successful_total{...}, ctrain_jobs_failed_total{...},
 *   ctrain_jobs_restarted_total{...} (gang restarts, disruptions included)
 *
 * Created, successful and failed are counted from the status writes the
 * apiserver accepted (ctl_outcomes_observe compares the job's status before
 * and after), restarted with each Restarting event the executor emits (a
 * TFJob keeps its restart counts in annotations, not in its status); so a
 * transition counts once, on the replica that wrote it: the leader. A new leader starts from zero,
 * as any restarted process; PromQL's increase() and rate() take that. The
 * series are at most CTL_OUTCOMES_MAX (kind, namespace) pairs; later pairs
 * count under namespace "_other". Thread-safe (one mutex, held only inside
 * these calls). */
#ifndef CTRAIN_CTL_OUTCOMES_H
#define CTRAIN_CTL_OUTCOMES_H

#include <pthread.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"

#define CTL_OUTCOMES_MAX   4096
#define CTL_OUTCOMES_OTHER "_other"

typedef enum {
  CTL_OUTCOME_CREATED = 0,
  CTL_OUTCOME_SUCCESSFUL,
  CTL_OUTCOME_FAILED,
  CTL_OUTCOME_RESTARTED,
  CTL_OUTCOME_N
} ctl_outcome;

typedef struct ctl_outcome_row {
  char *kind, *ns;
  long n[CTL_OUTCOME_N];
} ctl_outcome_row;

typedef struct ctl_outcomes {
  pthread_mutex_t mu;
  ctl_outcome_row *rows; /* (len) sorted by kind, then namespace; guarded by mu */
  size_t len, cap;       /* guarded by mu */
} ctl_outcomes;

void ctl_outcomes_init(ctl_outcomes *o);
void ctl_outcomes_destroy(ctl_outcomes *o);

/* Adds `n` to the `which` counter of (kind, ns) (borrowed strings, copied).
 * CTRAIN_E_NOMEM when a new row cannot be made (nothing counted). */
CTRAIN_NODISCARD ctrain_err ctl_outcomes_add(ctl_outcomes *o, const char *kind, const char *ns,
                                             ctl_outcome which, long n);

/* Counts what a status write the apiserver accepted changed: the Created,
 * Succeeded and Failed conditions turned True. `before` is the job's status as observed (NULL for
 * none), `after` the one written; both borrowed. */
CTRAIN_NODISCARD ctrain_err ctl_outcomes_observe(ctl_outcomes *o, const char *kind, const char *ns,
                                                 const cJSON *before, const cJSON *after);

/* Appends the four counters' Prometheus text (HELP, TYPE, one sample per
 * row) to `out`. Errors as ctrain_buf_printf. */
CTRAIN_NODISCARD ctrain_err ctl_outcomes_render(ctl_outcomes *o, ctrain_buf *out);

#endif
