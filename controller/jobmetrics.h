/* controller/jobmetrics.h - per-job series on the leader's /metrics: each
 * job's training numbers, phase, restarts and disruptions, as the
 * status the controller wrote (or found already right) says them:
 *
 *   ctrain_job_epoch{namespace="ml",job_name="mnist",kind="TrainingJob"} 3
 *   ctrain_job_global_step, ctrain_job_loss, ctrain_job_accuracy,
 *   ctrain_job_val_accuracy, ctrain_job_samples_per_second (gauges, from
 *   status.progress: absent until the chief reported them),
 *   ctrain_job_restarts_total, ctrain_job_disruptions_total (counters:
 *   status.restarts and .disruptions, which only grow for one job),
 *   ctrain_job_phase{...,phase="Running"} 1 (a state set: one series per
 *   phase of CTL_JOBMETRICS_PHASES, 1 for the job's phase, 0 for the others)
 *
 * The label is `job_name`, not `job`: `job` is the scrape job's target label
 * (and honor_labels, which the shipped scrape sets for `namespace`, would let
 * a job's name replace it), as kube-state-metrics' kube_job_* use job_name.
 *
 * Fed from the executor after each pass (ctl_jobmetrics_observe: the status
 * the pass decided, once written or when unchanged) and emptied of a job when
 * its informer sees it deleted (ctl_jobmetrics_drop). Passes run on the
 * leader only, and ctl_jobmetrics_render shows series only while leading.
 * A deleted job's uid is remembered for CTL_JOBMETRICS_TOMB_S (at most
 * CTL_JOBMETRICS_TOMBS_MAX of them), so a pass still in flight when its job
 * was deleted does not bring the series back.
 *
 * Bounds: every job the passes observe costs one entry (about 450 bytes:
 * the key, the escaped labels, ten numbers); the map is a hash map and the
 * live entries a dense array, so observe and drop are O(1) and a render is
 * O(jobs). A render shows at most max_jobs jobs (--metrics-max-jobs): jobs
 * not finished first, then finished ones (Succeeded, Failed), each in the
 * order the controller first saw them; and no more than fit in what is left
 * of the output buffer's cap (the /metrics body limit), so the page never
 * fails for its per-job part. What is left out is counted by
 * ctrain_job_metrics_dropped{reason}. Thread-safe: one mutex, held inside
 * these calls only; a render holds it to choose the jobs and copy what it
 * shows of them, and formats the text after. */
#ifndef CTRAIN_CTL_JOBMETRICS_H
#define CTRAIN_CTL_JOBMETRICS_H

#include <pthread.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"
#include "ctrain/strmap.h"

#define CTL_JOBMETRICS_MAX_DEFAULT 1000    /* --metrics-max-jobs: see docs/operations.md */
#define CTL_JOBMETRICS_MAX_LIMIT   1000000 /* the flag's largest value */
#define CTL_JOBMETRICS_TOMB_S      600.0   /* a deleted job's uid is remembered this long */
#define CTL_JOBMETRICS_TOMBS_MAX   16384   /* and at most this many of them */
#define CTL_JOBMETRICS_UID_MAX     48      /* a uid kept (a UUID is 36), with the NUL */

/* The phases of ctrain_job_phase, in its order. */
#define CTL_JOBMETRICS_PHASES                                                                      \
  "Pending", "Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed"
#define CTL_JOBMETRICS_NPHASES 7

typedef struct ctl_jm_entry ctl_jm_entry;

typedef struct ctl_jobmetrics {
  pthread_mutex_t mu;
  size_t max_jobs; /* exported at most; 0: no per-job series, nothing kept. Guarded by mu */
  double tomb_s;   /* how long a deleted job's uid is kept (tests shorten it). Guarded by mu */
  ctrain_strmap *by_key; /* job key -> ctl_jm_entry*, live and deleted; NULL until first use */
  ctl_jm_entry **live;   /* (nlive) the jobs not deleted, in the order first seen */
  size_t nlive, cap_live;
  ctl_jm_entry *tomb_head, *tomb_tail; /* deleted jobs, oldest first */
  size_t ntombs;
} ctl_jobmetrics;

void ctl_jobmetrics_init(ctl_jobmetrics *jm);
void ctl_jobmetrics_destroy(ctl_jobmetrics *jm);

/* Sets --metrics-max-jobs (at most CTL_JOBMETRICS_MAX_LIMIT). With 0 the
 * store forgets every job and keeps none. */
void ctl_jobmetrics_set_max(ctl_jobmetrics *jm, size_t max_jobs);

/* Records what `status` (a TrainingJob-shaped status, borrowed; NULL: none)
 * says of job `key` (the ctl_key string), `ns`/`name` of `kind`
 * ("TrainingJob", "TFJob"), incarnation `uid` (all borrowed, copied). A
 * pass of a uid deleted since is ignored. CTRAIN_E_NOMEM when a new job's
 * entry cannot be made (nothing recorded). */
CTRAIN_NODISCARD ctrain_err ctl_jobmetrics_observe(ctl_jobmetrics *jm, const char *key,
                                                   const char *ns, const char *name,
                                                   const char *kind, const char *uid,
                                                   const cJSON *status);

/* Job `key` of incarnation `uid` (NULL: whichever) was deleted: its series
 * go, and passes of that uid are ignored from now on. */
void ctl_jobmetrics_drop(ctl_jobmetrics *jm, const char *key, const char *uid);

/* Jobs kept (not deleted). */
size_t ctl_jobmetrics_len(ctl_jobmetrics *jm);

/* Appends the Prometheus text of the per-job series to `out`: every
 * family's HELP and TYPE, samples only when `leading`; then
 * ctrain_job_metrics_jobs and ctrain_job_metrics_dropped{reason}. Jobs
 * that would take `out` past its cap are left out (reason "body_size");
 * the rest must fit or it fails as ctrain_buf_printf. */
CTRAIN_NODISCARD ctrain_err ctl_jobmetrics_render(ctl_jobmetrics *jm, int leading, ctrain_buf *out);

/* `s` (borrowed) as a Prometheus label value: backslash, double quote and
 * line feed escaped (\\, \", \n). Appended to `out`; errors as
 * ctrain_buf_append. */
CTRAIN_NODISCARD ctrain_err ctl_jobmetrics_escape(const char *s, ctrain_buf *out);

#endif
