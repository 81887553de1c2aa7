/* controller/progress.h - the poller of the chiefs' /progress: how far each job is, without reading
 * its logs.
 *
 * For each Running TrainingJob in the informer cache, every `interval_s`
 * (+-10% jitter, the first poll spread over one interval), a few pollers
 * (`concurrency`, each with its own curl handle) GET
 * http://<chief pod IP>:<spec.progressPort>/progress with
 * `Authorization: Bearer <read token>` (ctrain_progress_read_token of the job
 * token), 2 s to answer. A good answer becomes status.progress
 * (ctl_progress_parse) kept in the job's state with the straggler history
 * (controller/jobstate.h), and the job's key is queued: the next pass
 * writes it (at most once per poll, only when it changed). A failed poll
 * is a debug log and a count (ctrain_progress_polls_total), never an error
 * of the job. The chief is the chief pod, or worker 0 without one (rank 0).
 *
 * The poller does no API request itself: jobs and pods come from the
 * informer caches, the token from `token` (controller.c's
 * progress_token, which derives it from the controller's key). */
#ifndef CTRAIN_CTL_PROGRESS_H
#define CTRAIN_CTL_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "controller/jobstate.h"
#include "controller/metrics.h"
#include "ctrain/contract.h"
#include "ctrain/err.h"
#include "ctrain/kube_informer.h"
#include "ctrain/kube_workqueue.h"

#define CTL_PROGRESS_TIMEOUT_MS 2000
#define CTL_PROGRESS_BODY_MAX   (256 << 10) /* bytes of a /progress answer read */

/* The job token (hex, NUL-terminated, in out[0..len-1]) of attempt
 * `attempt` of `job` (borrowed, from the cache). CTRAIN_E_NOTFOUND when it
 * is not known (yet). */
typedef ctrain_err (*ctl_progress_token_fn)(void *ud, const cJSON *job, int attempt, char *out,
                                            size_t len);

typedef struct {
  double interval_s; /* between polls of one job; 0 disables the poller */
  double threshold;  /* straggler ratio to the median */
  int concurrency;   /* polls in flight */
  kube_informer *jobs, *pods;
  ctl_jobs *states;
  kube_workqueue *q;
  ctl_metrics *metrics;
  ctl_progress_token_fn token;
  void *token_ud;
} ctl_progress_opts;

typedef struct ctl_progress ctl_progress;

/* Starts the pollers (nothing when interval_s is 0: *out NULL). `o` is
 * copied; what it points to must outlive ctl_progress_stop. */
CTRAIN_NODISCARD ctrain_err ctl_progress_start(const ctl_progress_opts *o, ctl_progress **out);

/* Stops the pollers (a poll in flight ends within its timeout) and frees
 * them. Accepts NULL. */
void ctl_progress_stop(ctl_progress *p);

/* Bounds of a /progress answer's numbers (a chief's answer is foreign input): an integer field in
 * 0..CTL_PROGRESS_NUM_MAX (below 1e15, so it is written back without an
 * exponent, as the schema's int64 needs), a float in
 * -CTL_PROGRESS_NUM_MAX..CTL_PROGRESS_NUM_MAX, slowest_rank in
 * 0..CTL_PROGRESS_RANK_MAX (and below workers), slowest_ratio in
 * 0..CTL_PROGRESS_RATIO_MAX. */
#define CTL_PROGRESS_NUM_MAX   999999999999999.0
#define CTL_PROGRESS_RANK_MAX  4096
#define CTL_PROGRESS_RATIO_MAX 1e6

/* A /progress answer (`body`, `len` bytes) as status.progress: epoch,
 * epochs, step, globalStep, stepsPerEpoch, samplesPerSec, loss, accuracy, valLoss,
 * valAccuracy, replicasInSync, backupStep, slowestWorker {rank, ratio}
 * (the pass names the pod) and lastPollTime (`now`, unix seconds); absent
 * or null numbers are left out. *progress owned by the caller. *rank and
 * *ratio: the slowest worker and its ms/step over the median (-1 and NaN
 * when unknown, or with a single worker). CTRAIN_E_PARSE for anything but
 * a JSON object, and for a known field that is not a number within its
 * bounds (above): a bad answer is a failed poll, never a status the
 * apiserver refuses. why (optional) says which field. */
CTRAIN_NODISCARD ctrain_err ctl_progress_parse(const char *body, size_t len, int64_t now,
                                               cJSON **progress, int *rank, double *ratio,
                                               char *why, size_t whylen);

#endif
