/* jobstate.c - per-job state with per-job locking; see controller/jobstate.h. */
#include "controller/jobstate.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/straggler.h"
#include "ctrain/clock.h"
#include "ctrain/strmap.h"
#include "ctrain/thread.h"

struct ctl_job {
  pthread_mutex_t mu; /* guards everything below but refs and dropped */
  int refs;           /* holders; guarded by ctl_jobs.mu */
  int dropped;        /* out of the map; guarded by ctl_jobs.mu */
  recon_expectations x;
  int token_attempt;                    /* the attempt whose token Secret exists; 0: unknown */
  char token_owner[RECON_UID_MAX];      /* the job uid it was written for */
  char refused[RECON_CREATE_ERROR_MAX]; /* a pod create refused for good; "": none */
  char refused_owner[RECON_UID_MAX];    /* the job uid it was for */
  char waiting[RECON_CREATE_ERROR_MAX]; /* what its creates wait for; "": nothing */
  char waiting_owner[RECON_UID_MAX];    /* the job uid it is about */
  int waits;                            /* passes in a row that waited */
  cJSON *progress;                      /* the latest poll as status.progress; NULL: none */
  int progress_attempt;                 /* the attempt it and `straggler` are about */
  ctl_straggler straggler;
};

struct ctl_jobs {
  pthread_mutex_t mu; /* guards the map and every state's refs and dropped */
  ctrain_strmap *map; /* key -> ctl_job* */
};

static void job_free(void *p) {
  ctl_job *j = p;
  if (!j)
    return;
  recon_expectations_free(&j->x);
  cJSON_Delete(j->progress);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

ctrain_err ctl_jobs_new(ctl_jobs **out) {
  ctl_jobs *jobs = calloc(1, sizeof(*jobs));
  *out = NULL;
  if (!jobs)
    return CTRAIN_E_NOMEM;
  if (ctrain_strmap_new(&jobs->map)) {
    free(jobs);
    return CTRAIN_E_NOMEM;
  }
  pthread_mutex_init(&jobs->mu, NULL);
  *out = jobs;
  return CTRAIN_OK;
}

void ctl_jobs_free(ctl_jobs *jobs) {
  if (!jobs)
    return;
  ctrain_strmap_free(jobs->map, job_free);
  pthread_mutex_destroy(&jobs->mu);
  free(jobs);
}

ctl_job *ctl_jobs_acquire(ctl_jobs *jobs, const char *key) {
  ctrain_mutex_lock(&jobs->mu);
  ctl_job *j = ctrain_strmap_get(jobs->map, key);
  if (!j && (j = calloc(1, sizeof(*j)))) {
    pthread_mutex_init(&j->mu, NULL);
    recon_expectations_init(&j->x);
    if (ctrain_strmap_put(jobs->map, key, j, NULL)) {
      job_free(j);
      j = NULL;
    }
  }
  if (j)
    j->refs++;
  ctrain_mutex_unlock(&jobs->mu);
  return j;
}

void ctl_jobs_release(ctl_jobs *jobs, ctl_job *j) {
  if (!j)
    return;
  ctrain_mutex_lock(&jobs->mu);
  int last = --j->refs == 0 && j->dropped;
  ctrain_mutex_unlock(&jobs->mu);
  if (last)
    job_free(j);
}

void ctl_jobs_drop(ctl_jobs *jobs, const char *key) {
  ctrain_mutex_lock(&jobs->mu);
  ctl_job *j = ctrain_strmap_del(jobs->map, key, NULL);
  int last = j && j->refs == 0;
  if (j)
    j->dropped = 1;
  ctrain_mutex_unlock(&jobs->mu);
  if (last)
    job_free(j);
}

size_t ctl_jobs_len(ctl_jobs *jobs) {
  ctrain_mutex_lock(&jobs->mu);
  size_t n = ctrain_strmap_len(jobs->map);
  ctrain_mutex_unlock(&jobs->mu);
  return n;
}

ctrain_err ctl_job_reconcile(ctl_job *j, const recon_input *in, recon_result *res, char *errbuf,
                             size_t errlen) {
  ctrain_mutex_lock(&j->mu);
  ctrain_err result = recon_reconcile(in, &j->x, res, errbuf, errlen);
  ctrain_mutex_unlock(&j->mu);
  return result;
}

void ctl_job_creation_failed(ctl_job *j, const char *pod_name) {
  ctrain_mutex_lock(&j->mu);
  recon_expect_creation_failed(&j->x, pod_name);
  ctrain_mutex_unlock(&j->mu);
}

void ctl_job_deletion_failed(ctl_job *j, const char *uid) {
  ctrain_mutex_lock(&j->mu);
  recon_expect_deletion_failed(&j->x, uid);
  ctrain_mutex_unlock(&j->mu);
}

size_t ctl_job_pending(ctl_job *j) {
  ctrain_mutex_lock(&j->mu);
  size_t n = recon_expectations_pending(&j->x);
  ctrain_mutex_unlock(&j->mu);
  return n;
}

int ctl_job_token_attempt(ctl_job *j, const char *uid) {
  ctrain_mutex_lock(&j->mu);
  int a = uid && !strcmp(j->token_owner, uid) ? j->token_attempt : 0;
  ctrain_mutex_unlock(&j->mu);
  return a;
}

void ctl_job_token_written(ctl_job *j, const char *uid, int attempt) {
  ctrain_mutex_lock(&j->mu);
  snprintf(j->token_owner, sizeof(j->token_owner), "%s", uid ? uid : "");
  j->token_attempt = attempt;
  ctrain_mutex_unlock(&j->mu);
}

void ctl_job_create_refused(ctl_job *j, const char *uid, const char *message) {
  ctrain_mutex_lock(&j->mu);
  if (!j->refused[0] || !uid || strcmp(j->refused_owner, uid)) {
    snprintf(j->refused_owner, sizeof(j->refused_owner), "%s", uid ? uid : "");
    snprintf(j->refused, sizeof(j->refused), "%s", message && *message ? message : "refused");
  }
  ctrain_mutex_unlock(&j->mu);
}

int ctl_job_wait(ctl_job *j, const char *uid, const char *message) {
  int delay = 0;
  ctrain_mutex_lock(&j->mu);
  if (!uid || strcmp(j->waiting_owner, uid))
    j->waits = 0;
  snprintf(j->waiting_owner, sizeof(j->waiting_owner), "%s", uid ? uid : "");
  if (message && *message) {
    snprintf(j->waiting, sizeof(j->waiting), "%s", message);
    delay = j->waits >= 5 ? CTL_JOB_WAIT_MAX_S : 1 << j->waits;
    if (delay > CTL_JOB_WAIT_MAX_S)
      delay = CTL_JOB_WAIT_MAX_S;
    j->waits++;
  } else {
    j->waiting[0] = 0;
    j->waits = 0;
  }
  ctrain_mutex_unlock(&j->mu);
  return delay;
}

int ctl_job_waiting(ctl_job *j, const char *uid, char *buf, size_t len) {
  ctrain_mutex_lock(&j->mu);
  int has = uid && j->waiting[0] && !strcmp(j->waiting_owner, uid);
  if (has && buf && len)
    snprintf(buf, len, "%s", j->waiting);
  ctrain_mutex_unlock(&j->mu);
  return has;
}

int ctl_job_create_error(ctl_job *j, const char *uid, char *buf, size_t len) {
  ctrain_mutex_lock(&j->mu);
  int has = uid && j->refused[0] && !strcmp(j->refused_owner, uid);
  if (has && buf && len)
    snprintf(buf, len, "%s", j->refused);
  ctrain_mutex_unlock(&j->mu);
  return has;
}

/* Whether two polls differ in more than lastPollTime. */
static int poll_differs(const cJSON *a, const cJSON *b) {
  if (!a || !b)
    return a != b;
  const cJSON *x;
  int na = 0, nb = cJSON_GetArraySize(b) - !!cJSON_GetObjectItemCaseSensitive(b, "lastPollTime");
  cJSON_ArrayForEach(x, a) {
    if (!strcmp(x->string, "lastPollTime"))
      continue;
    na++;
    if (!cJSON_Compare(x, cJSON_GetObjectItemCaseSensitive(b, x->string), 1))
      return 1;
  }
  return na != nb;
}

int ctl_job_progress_store(ctl_job *j, int attempt, cJSON *progress, int rank, double ratio,
                           double threshold, int64_t now) {
  int news = 0;
  ctrain_mutex_lock(&j->mu);
  if (attempt != j->progress_attempt) {
    ctl_straggler_init(&j->straggler);
    j->progress_attempt = attempt;
    news = 1;
  }
  news |= poll_differs(j->progress, progress);
  cJSON_Delete(j->progress);
  j->progress = progress;
  news |= ctl_straggler_observe(&j->straggler, rank, ratio, threshold, now);
  ctrain_mutex_unlock(&j->mu);
  return news;
}

ctrain_err ctl_job_progress(ctl_job *j, int attempt, cJSON **progress, recon_straggler *s) {
  ctrain_err result = CTRAIN_OK;
  *progress = NULL;
  *s = (recon_straggler){.rank = -1};
  ctrain_mutex_lock(&j->mu);
  if (j->progress && j->progress_attempt == attempt) {
    *progress = cJSON_Duplicate(j->progress, 1);
    if (!*progress)
      result = CTRAIN_E_NOMEM;
    s->known = 1;
    if (j->straggler.flagged) {
      s->rank = j->straggler.rank;
      s->ratio = j->straggler.ratio;
    }
  }
  ctrain_mutex_unlock(&j->mu);
  return result;
}
