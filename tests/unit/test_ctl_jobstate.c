/* test_ctl_jobstate.c - the controller's per-job state and its locking:
 * two jobs are decided at the same time (no lock spans workers), one key
 * maps to one state, a dropped state lives until its last holder lets go,
 * expectations and the token attempt persist between passes, and many
 * threads acquiring, changing and dropping states race on nothing (run
 * under ThreadSanitizer by tools/test.sh). */
#include "test.h"

#include <pthread.h>

#include "controller/executor.h"
#include "controller/jobstate.h"

#define NOW 1700000000

static cJSON *job_json(const char *name) {
  char buf[1024];
  snprintf(buf, sizeof(buf),
           "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
           "\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\",\"uid\":\"uid-%s\"},"
           "\"spec\":{\"replicaSpecs\":{\"Worker\":{\"replicas\":2,\"template\":{\"spec\":"
           "{\"containers\":[{\"name\":\"w\",\"image\":\"ctrain:dev\"}]}}}},\"port\":2222}}",
           name, name);
  cJSON *j = cJSON_Parse(buf);
  ASSERT_NOT_NULL(j);
  return j;
}

/* ---- two decisions at once ----------------------------------------------- */

/* The token is derived inside recon_reconcile: each job's
 * callback waits there until the other job's pass arrives too. Under one
 * lock around every reconcile the second could never arrive. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
} meeting;

typedef struct {
  meeting *m;
  ctl_job *js;
  cJSON *job;
  int met; /* the other pass was inside recon_reconcile at the same time */
  ctrain_err result;
} pass_arg;

static ctrain_err meet_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  pass_arg *a = ctx;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  pthread_mutex_lock(&a->m->mu);
  a->m->arrived++;
  pthread_cond_broadcast(&a->m->cv);
  while (a->m->arrived < 2)
    if (pthread_cond_timedwait(&a->m->cv, &a->m->mu, &until))
      break;
  a->met = a->m->arrived >= 2;
  pthread_mutex_unlock(&a->m->mu);
  snprintf(hex, n, "t-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

static void *one_pass(void *arg) {
  pass_arg *a = arg;
  recon_result res = {0};
  char err[256] = "";
  recon_input in = {.job = a->job, .now = NOW, .token = meet_token, .token_ctx = a};
  a->result = ctl_job_reconcile(a->js, &in, &res, err, sizeof(err));
  recon_result_free(&res);
  return NULL;
}

TEST(two_jobs_decided_at_once) {
  ctl_jobs *jobs = NULL;
  ASSERT_OK(ctl_jobs_new(&jobs));
  meeting m = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  pass_arg a[2] = {{.m = &m, .js = ctl_jobs_acquire(jobs, "ml/a"), .job = job_json("a")},
                   {.m = &m, .js = ctl_jobs_acquire(jobs, "ml/b"), .job = job_json("b")}};
  ASSERT(a[0].js && a[1].js && a[0].js != a[1].js);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    ASSERT_OK(pthread_create(&t[i], NULL, one_pass, &a[i]));
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    ASSERT_OK(a[i].result);
    ASSERT_EQ(a[i].met, 1);
    ASSERT_EQ(ctl_job_pending(a[i].js), 2); /* the two worker pods */
    ctl_jobs_release(jobs, a[i].js);
    cJSON_Delete(a[i].job);
  }
  ctl_jobs_free(jobs);
}

/* ---- one key, one state; drop while held ---------------------------------- */

static ctrain_err fixed_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  (void)ctx;
  snprintf(hex, n, "t-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

TEST(expectations_live_with_the_key) {
  ctl_jobs *jobs = NULL;
  ASSERT_OK(ctl_jobs_new(&jobs));
  cJSON *job = job_json("a");
  ctl_job *js = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT_NOT_NULL(js);
  recon_result res = {0};
  char err[256] = "";
  recon_input in = {.job = job, .now = NOW, .token = fixed_token};
  ASSERT_OK(ctl_job_reconcile(js, &in, &res, err, sizeof(err)));
  ASSERT_EQ(ctl_job_pending(js), 2);
  recon_result_free(&res);
  ctl_jobs_release(jobs, js);

  /* The next pass of the key sees what the first expected: no create again. */
  ctl_job *again = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT(again == js);
  ASSERT_OK(ctl_job_reconcile(again, &in, &res, err, sizeof(err)));
  size_t creates = 0;
  for (size_t i = 0; i < res.n_actions; i++)
    creates += res.actions[i].kind == RECON_CREATE_POD;
  ASSERT_EQ(creates, 0);
  recon_result_free(&res);
  ctl_job_creation_failed(again, "a-worker-1");
  ASSERT_EQ(ctl_job_pending(again), 1);
  ctl_jobs_release(jobs, again);
  cJSON_Delete(job);
  ctl_jobs_free(jobs);
}

TEST(dropped_state_lives_until_released) {
  ctl_jobs *jobs = NULL;
  ASSERT_OK(ctl_jobs_new(&jobs));
  ctl_job *a = ctl_jobs_acquire(jobs, "ml/a");
  ctl_job *b = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT(a && a == b);
  ASSERT_EQ(ctl_jobs_len(jobs), 1);
  ctl_jobs_drop(jobs, "ml/a");
  ASSERT_EQ(ctl_jobs_len(jobs), 0);
  /* Still usable by its holders (ASan: nothing freed under them). */
  ctl_job_token_written(a, "u", 2);
  ctl_jobs_release(jobs, a);
  ASSERT_EQ(ctl_job_token_attempt(b, "u"), 2);
  ctl_jobs_release(jobs, b); /* the last holder frees it (LeakSanitizer) */
  /* A new job of the same name starts from nothing. */
  ctl_job *c = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT(c != NULL);
  ASSERT_EQ(ctl_job_token_attempt(c, "u"), 0);
  ASSERT_EQ(ctl_job_pending(c), 0);
  ctl_jobs_release(jobs, c);
  ctl_jobs_drop(jobs, "ml/missing"); /* nothing to drop */
  ctl_jobs_free(jobs);
}

TEST(token_attempt) {
  ctl_jobs *jobs = NULL;
  ASSERT_OK(ctl_jobs_new(&jobs));
  ctl_job *js = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT_EQ(ctl_job_token_attempt(js, "u1"), 0);
  ctl_job_token_written(js, "u1", 1);
  ASSERT_EQ(ctl_job_token_attempt(js, "u1"), 1);
  ASSERT_EQ(ctl_job_token_attempt(js, "u2"), 0); /* another job of that name */
  ASSERT_EQ(ctl_job_token_attempt(js, NULL), 0);
  ctl_job_token_written(js, "u1", 2); /* the next attempt */
  ASSERT_EQ(ctl_job_token_attempt(js, "u1"), 2);
  ctl_jobs_release(jobs, js);
  ctl_jobs_free(jobs);
}

/* A pod create refused for good is kept for the job's uid (the first one)
 * until the next pass reads it; the executor says which codes are. */
TEST(create_refused_per_uid) {
  ctl_jobs *jobs = NULL;
  char buf[RECON_CREATE_ERROR_MAX];
  ASSERT_OK(ctl_jobs_new(&jobs));
  ctl_job *js = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT_EQ(ctl_job_create_error(js, "u1", buf, sizeof(buf)), 0);
  ctl_job_create_refused(js, "u1", "pod a-worker-0: containerPort: Invalid value: -5");
  ctl_job_create_refused(js, "u1", "pod a-worker-1: later");
  ASSERT_EQ(ctl_job_create_error(js, "u1", buf, sizeof(buf)), 1);
  ASSERT_STR_EQ(buf, "pod a-worker-0: containerPort: Invalid value: -5");
  ASSERT_EQ(ctl_job_create_error(js, "u2", buf, sizeof(buf)), 0); /* another job of that name */
  ASSERT_EQ(ctl_job_create_error(js, NULL, buf, sizeof(buf)), 0);
  char big[3000];
  memset(big, 'm', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  ctl_job_create_refused(js, "u2", big); /* the new job's: replaces, cut */
  ASSERT_EQ(ctl_job_create_error(js, "u2", buf, sizeof(buf)), 1);
  ASSERT_EQ(strlen(buf), (size_t)RECON_CREATE_ERROR_MAX - 1);
  ASSERT_EQ(ctl_job_create_error(js, "u1", buf, sizeof(buf)), 0);
  ctl_jobs_release(jobs, js);
  ctl_jobs_free(jobs);
  ASSERT(ctl_exec_create_permanent(422));
  ASSERT(ctl_exec_create_permanent(400));
  ASSERT(ctl_exec_create_permanent(413));
  static const int transient[] = {0, 403, 404, 409, 429, 500, 503, 504};
  for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
    ASSERT(!ctl_exec_create_permanent(transient[i]));
}

/* What a job's creates wait for (a name taken) is kept per uid, with a
 * backoff that doubles per pass that waited, up to CTL_JOB_WAIT_MAX_S, and
 * is cleared (and the backoff reset) once creates go through. */
TEST(wait_per_uid_with_backoff) {
  ctl_jobs *jobs = NULL;
  char buf[RECON_CREATE_ERROR_MAX];
  ASSERT_OK(ctl_jobs_new(&jobs));
  ctl_job *js = ctl_jobs_acquire(jobs, "ml/a");
  ASSERT_EQ(ctl_job_waiting(js, "u1", buf, sizeof(buf)), 0);
  ASSERT_EQ(ctl_job_wait(js, "u1", "pod a-worker-0 is taken"), 1);
  ASSERT_EQ(ctl_job_wait(js, "u1", "pod a-worker-0 is taken"), 2);
  ASSERT_EQ(ctl_job_wait(js, "u1", "pod a-worker-0 is taken"), 4);
  for (int i = 0; i < 10; i++)
    ASSERT_LE(ctl_job_wait(js, "u1", "still"), CTL_JOB_WAIT_MAX_S);
  ASSERT_EQ(ctl_job_wait(js, "u1", "still"), CTL_JOB_WAIT_MAX_S);
  ASSERT_EQ(ctl_job_waiting(js, "u1", buf, sizeof(buf)), 1);
  ASSERT_STR_EQ(buf, "still");
  ASSERT_EQ(ctl_job_waiting(js, "u2", buf, sizeof(buf)), 0); /* another job of that name */
  ASSERT_EQ(ctl_job_wait(js, "u2", "x"), 1);                 /* a new job starts over */
  ASSERT_EQ(ctl_job_waiting(js, "u1", buf, sizeof(buf)), 0);
  ASSERT_EQ(ctl_job_wait(js, "u2", NULL), 0);
  ASSERT_EQ(ctl_job_waiting(js, "u2", buf, sizeof(buf)), 0);
  ASSERT_EQ(ctl_job_wait(js, "u2", "again"), 1);
  ctl_jobs_release(jobs, js);
  ctl_jobs_free(jobs);
}

/* ---- many threads --------------------------------------------------------- */

typedef struct {
  ctl_jobs *jobs;
  int id;
} churn_arg;

static void *churn(void *arg) {
  churn_arg *a = arg;
  char key[32];
  for (int i = 0; i < 2000; i++) {
    snprintf(key, sizeof(key), "ml/j%d", (a->id + i) % 4);
    if (a->id == 0 && i % 3 == 0) {
      ctl_jobs_drop(a->jobs, key);
      continue;
    }
    ctl_job *js = ctl_jobs_acquire(a->jobs, key);
    ASSERT_NOT_NULL(js);
    ctl_job_token_written(js, "u", i + 1);
    ASSERT(ctl_job_token_attempt(js, "u") > 0);
    ctl_job_creation_failed(js, "nothing");
    /* The poller stores a poll while a pass reads the last one. */
    if (a->id % 2)
      ctl_job_progress_store(js, 1, cJSON_CreateObject(), i % 3, 2.0, 1.5, i);
    cJSON *p = NULL;
    recon_straggler sv;
    ASSERT_OK(ctl_job_progress(js, 1, &p, &sv));
    cJSON_Delete(p);
    ctl_jobs_release(a->jobs, js);
  }
  return NULL;
}

TEST(many_threads_acquire_and_drop) {
  ctl_jobs *jobs = NULL;
  ASSERT_OK(ctl_jobs_new(&jobs));
  pthread_t t[8];
  churn_arg a[8];
  for (int i = 0; i < 8; i++) {
    a[i] = (churn_arg){.jobs = jobs, .id = i};
    ASSERT_OK(pthread_create(&t[i], NULL, churn, &a[i]));
  }
  for (int i = 0; i < 8; i++)
    pthread_join(t[i], NULL);
  ASSERT_LE(ctl_jobs_len(jobs), 4);
  ctl_jobs_free(jobs);
}

/* The latest poll and the straggler verdict, per attempt. */
TEST(progress_and_straggler_per_attempt) {
  ctl_jobs *jobs = NULL;
  ASSERT_OK(ctl_jobs_new(&jobs));
  ctl_job *js = ctl_jobs_acquire(jobs, "ml/a");
  cJSON *p = NULL;
  recon_straggler s;
  ASSERT_OK(ctl_job_progress(js, 1, &p, &s));
  ASSERT_NULL(p);
  ASSERT_EQ(s.known, 0);
  ASSERT_EQ(ctl_job_progress_store(js, 1, cJSON_Parse("{\"epoch\":1,\"lastPollTime\":\"a\"}"), 2,
                                   2.5, 1.5, 10),
            1);
  ASSERT_OK(ctl_job_progress(js, 1, &p, &s));
  ASSERT_NOT_NULL(p);
  ASSERT_EQ(s.known, 1);
  ASSERT_EQ(s.rank, -1); /* one slow poll */
  cJSON_Delete(p);
  /* Only lastPollTime moved, but the verdict changed: news. */
  ASSERT_EQ(ctl_job_progress_store(js, 1, cJSON_Parse("{\"epoch\":1,\"lastPollTime\":\"b\"}"), 2,
                                   2.5, 1.5, 20),
            1);
  /* Nothing but lastPollTime: no news, no pass. */
  ASSERT_EQ(ctl_job_progress_store(js, 1, cJSON_Parse("{\"epoch\":1,\"lastPollTime\":\"c\"}"), 2,
                                   2.5, 1.5, 30),
            0);
  ASSERT_EQ(ctl_job_progress_store(js, 1, cJSON_Parse("{\"epoch\":2,\"lastPollTime\":\"d\"}"), 2,
                                   2.5, 1.5, 40),
            1);
  ASSERT_OK(ctl_job_progress(js, 1, &p, &s));
  ASSERT_EQ(s.rank, 2);
  ASSERT_NEAR(s.ratio, 2.5, 0);
  cJSON_Delete(p);
  /* A pass of another attempt gets nothing; a poll of attempt 2 starts over. */
  ASSERT_OK(ctl_job_progress(js, 2, &p, &s));
  ASSERT_NULL(p);
  ASSERT_EQ(s.known, 0);
  ctl_job_progress_store(js, 2, cJSON_Parse("{\"epoch\":0}"), 2, 2.5, 1.5, 30);
  ASSERT_OK(ctl_job_progress(js, 2, &p, &s));
  ASSERT_EQ(s.rank, -1);
  cJSON_Delete(p);
  ctl_jobs_release(jobs, js);
  ctl_jobs_free(jobs);
}

TEST_MAIN(T(progress_and_straggler_per_attempt), T(two_jobs_decided_at_once),
          T(expectations_live_with_the_key), T(dropped_state_lives_until_released),
          T(token_attempt), T(many_threads_acquire_and_drop), T(create_refused_per_uid),
          T(wait_per_uid_with_backoff))
