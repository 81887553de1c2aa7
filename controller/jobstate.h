/* controller/jobstate.h - what the controller keeps per job key (the
 * string of a ctl_key, controller/jobkind.h) between passes: the
 * expectations (controller/reconcile.h), which attempt's token Secret it
 * knows to exist (it never reads one), and the latest poll of
 * the chief's /progress with the straggler history (controller/progress.h).
 *
 * Locking, per job: the map from key to state has its own lock, held only to
 * look a key up, insert or remove it and count holders; each job's state has
 * its own lock, held around what reads or changes it (a recon_reconcile of
 * that job, a failed create or delete, the token attempt). Workers deciding
 * different jobs never wait for one another. The work queue already hands
 * a key to one worker at a time, so a job's lock is normally uncontended; it
 * makes that a matter of speed, not of correctness.
 *
 * A state lives while it is in the map or held: ctl_jobs_drop (the job was
 * deleted) takes it out of the map, and the last ctl_jobs_release frees it,
 * so a worker still executing a pass of a deleted job works on a state
 * nobody else sees and that goes with it. */
#ifndef CTRAIN_CTL_JOBSTATE_H
#define CTRAIN_CTL_JOBSTATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "controller/reconcile.h"
#include "ctrain/err.h"

typedef struct ctl_jobs ctl_jobs;
typedef struct ctl_job ctl_job;

/* *out owned by the caller (ctl_jobs_free). */
CTRAIN_NODISCARD ctrain_err ctl_jobs_new(ctl_jobs **out);

/* Frees the map and every state. No state may be held. Accepts NULL. */
void ctl_jobs_free(ctl_jobs *jobs);

/* The state of `key`, created on first use, held until ctl_jobs_release.
 * NULL when out of memory. */
ctl_job *ctl_jobs_acquire(ctl_jobs *jobs, const char *key);

/* Lets go of a state from ctl_jobs_acquire. Accepts NULL. */
void ctl_jobs_release(ctl_jobs *jobs, ctl_job *j);

/* Forgets `key` (its job was deleted): freed now, or by its last holder. */
void ctl_jobs_drop(ctl_jobs *jobs, const char *key);

/* Keys in the map. */
size_t ctl_jobs_len(ctl_jobs *jobs);

/* recon_reconcile with the job's expectations, under the job's lock. */
CTRAIN_NODISCARD ctrain_err ctl_job_reconcile(ctl_job *j, const recon_input *in, recon_result *res,
                                              char *errbuf, size_t errlen);

/* recon_expect_creation_failed / recon_expect_deletion_failed, under the
 * job's lock. */
void ctl_job_creation_failed(ctl_job *j, const char *pod_name);
void ctl_job_deletion_failed(ctl_job *j, const char *uid);

/* The attempt of job `uid` whose token Secret this process created or
 * found existing (recon_input.token_attempt); 0 when none is known (another
 * job of that name, or nothing created yet). */
int ctl_job_token_attempt(ctl_job *j, const char *uid);

/* Remembers that the token Secret of `attempt` of job `uid` exists. */
void ctl_job_token_written(ctl_job *j, const char *uid, int attempt);

/* Remembers that the apiserver refused a pod create of job `uid` for good
 * (a permanent error: ctl_exec_create_permanent): `message` (borrowed,
 * copied, cut at RECON_CREATE_ERROR_MAX) is what the next pass fails the
 * job with (recon_input.create_error). The first one is kept. */
void ctl_job_create_refused(ctl_job *j, const char *uid, const char *message);

/* Copies the refusal of job `uid` into buf (len bytes) and returns 1, or
 * returns 0 when there is none for that uid. */
int ctl_job_create_error(ctl_job *j, const char *uid, char *buf, size_t len);

#define CTL_JOB_WAIT_MAX_S 30 /* the longest wait between tries of a taken name */

/* Remembers what the creates of job `uid` wait for (a name taken:
 * recon_input.waiting; `message` borrowed, copied, cut at
 * RECON_CREATE_ERROR_MAX), or, with message NULL or "", that they went
 * through. Returns the seconds to wait before the next try: 1, 2, 4, ...
 * up to CTL_JOB_WAIT_MAX_S for passes that waited in a row; 0 when
 * cleared. */
int ctl_job_wait(ctl_job *j, const char *uid, const char *message);

/* Copies what job `uid` waits for into buf and returns 1, or returns 0. */
int ctl_job_waiting(ctl_job *j, const char *uid, char *buf, size_t len);

/* Remembers the latest poll of the job's chief for `attempt`: `progress`
 * (taken; status.progress with slowestWorker {rank, ratio}) and the
 * slowest rank and its ratio for straggler detection (controller/straggler.h,
 * reset with a new attempt) at the caller's time `now`. Returns 1 when a
 * pass has something new to write: the poll differs from the last one in
 * more than lastPollTime, or the straggler verdict changed. */
int ctl_job_progress_store(ctl_job *j, int attempt, cJSON *progress, int rank, double ratio,
                           double threshold, int64_t now);

/* What a pass of `attempt` passes on (recon_input.progress, .straggler):
 * *progress a duplicate (owned by the caller; NULL: no poll of this
 * attempt) and the straggler verdict (known 0 without a poll). */
CTRAIN_NODISCARD ctrain_err ctl_job_progress(ctl_job *j, int attempt, cJSON **progress,
                                             recon_straggler *s);

/* Creates and deletes still expected (recon_expectations_pending). */
size_t ctl_job_pending(ctl_job *j);

#endif
