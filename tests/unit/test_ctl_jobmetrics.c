/* test_ctl_jobmetrics.c - the per-job series of the leader's /metrics: one
 * sample per known number and the phase as a state set, label values
 * escaped, series gone with the job and kept out when a pass of the deleted
 * job ends late, none when not leading, the cap (finished jobs left out
 * first) and the body limit counted, 10,000 jobs in linear time, and many
 * threads at once (run under ThreadSanitizer by tools/test.sh). */
#include "test.h"

#include <pthread.h>

#include "controller/jobmetrics.h"
#include "controller/metrics.h"
#include "controller/options.h"
#include "ctrain/clock.h"

#define ARGV(...) ((char *[]){__VA_ARGS__, NULL})

static char *render_cap(ctl_jobmetrics *jm, int leading, size_t cap) {
  ctrain_buf b;
  ctrain_buf_init(&b, cap);
  ASSERT_OK(ctl_jobmetrics_render(jm, leading, &b));
  char *s = ctrain_buf_take(&b, NULL);
  ASSERT_NOT_NULL(s);
  return s;
}

static char *render(ctl_jobmetrics *jm, int leading) {
  return render_cap(jm, leading, 64 << 20);
}

static cJSON *status(const char *json) {
  cJSON *s = cJSON_Parse(json);
  ASSERT_NOT_NULL(s);
  return s;
}

/* Observes `json` as the status of TrainingJob ns/name with `uid`. */
static void observe(ctl_jobmetrics *jm, const char *ns, const char *name, const char *uid,
                    const char *json) {
  char key[600];
  snprintf(key, sizeof(key), "%s/%s", ns, name);
  cJSON *s = status(json);
  ASSERT_OK(ctl_jobmetrics_observe(jm, key, ns, name, "TrainingJob", uid, s));
  cJSON_Delete(s);
}

/* Lines of `s` that start with `prefix` and end with `suffix` ("": any). */
static int count_ending(const char *s, const char *prefix, const char *suffix) {
  int n = 0;
  size_t len = strlen(prefix), slen = strlen(suffix);
  for (const char *l = s; l && *l;) {
    const char *end = strchr(l, '\n');
    size_t ll = end ? (size_t)(end - l) : strlen(l);
    n += ll >= len && ll >= slen && !strncmp(l, prefix, len) &&
         !strncmp(l + ll - slen, suffix, slen);
    l = end ? end + 1 : NULL;
  }
  return n;
}

static int count_lines(const char *s, const char *prefix) {
  return count_ending(s, prefix, "");
}

#define RUNNING                                                                                    \
  "{\"conditions\":[{\"type\":\"Straggler\",\"status\":\"True\"},"                                 \
  "{\"type\":\"Created\",\"status\":\"True\"},{\"type\":\"Running\",\"status\":\"True\"}],"        \
  "\"restarts\":2,\"disruptions\":1,\"attempt\":4,\"progress\":{\"epoch\":3,\"epochs\":10,"        \
  "\"globalStep\":5625,\"loss\":0.4123,\"accuracy\":0.8765,\"samplesPerSec\":16500.5,"             \
  "\"lastPollTime\":\"2026-01-01T00:00:00Z\"}}"
#define SUCCEEDED                                                                                  \
  "{\"conditions\":[{\"type\":\"Created\",\"status\":\"True\"},"                                   \
  "{\"type\":\"Running\",\"status\":\"False\"},{\"type\":\"Succeeded\",\"status\":\"True\"}]}"

#define L "{namespace=\"ml\",job_name=\"mnist\",kind=\"TrainingJob\"}"

TEST(samples_of_a_running_job) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  observe(&jm, "ml", "mnist", "u1", RUNNING);
  char *s = render(&jm, 1);
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_job_epoch gauge\nctrain_job_epoch" L " 3\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_global_step" L " 5625\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_loss" L " 0.4123\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_accuracy" L " 0.8765\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_samples_per_second" L " 16500.5\n");
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_job_restarts_total counter\nctrain_job_restarts_total" L
                         " 2\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_disruptions_total" L " 1\n");
  /* No validation accuracy reported yet: no series, only the headers. */
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_job_val_accuracy gauge\n# HELP");
  ASSERT_EQ(count_lines(s, "ctrain_job_val_accuracy{"), 0);
  /* The phase: a state set, Running (Straggler is no phase). */
  ASSERT_STR_CONTAINS(s,
                      "# TYPE ctrain_job_phase gauge\n"
                      "ctrain_job_phase{namespace=\"ml\",job_name=\"mnist\",kind=\"TrainingJob\","
                      "phase=\"Pending\"} 0\n");
  ASSERT_STR_CONTAINS(s, "kind=\"TrainingJob\",phase=\"Running\"} 1\n");
  ASSERT_EQ(count_lines(s, "ctrain_job_phase{"), CTL_JOBMETRICS_NPHASES);
  ASSERT_EQ(count_ending(s, "ctrain_job_phase{", "} 1"), 1);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_jobs 1\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_dropped{reason=\"max_jobs\"} 0\n"
                         "ctrain_job_metrics_dropped{reason=\"body_size\"} 0\n");
  free(s);
  /* A later pass: the new numbers replace the old; the job finished. */
  observe(&jm, "ml", "mnist", "u1",
          "{\"conditions\":[{\"type\":\"Succeeded\",\"status\":\"True\"}],\"restarts\":3,"
          "\"progress\":{\"epoch\":10,\"valAccuracy\":0.9,\"loss\":\"bad\"}}");
  s = render(&jm, 1);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_epoch" L " 10\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_val_accuracy" L " 0.9\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_restarts_total" L " 3\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_disruptions_total" L " 0\n");
  ASSERT_EQ(count_lines(s, "ctrain_job_loss{"), 0); /* not a number: not known */
  ASSERT_EQ(count_lines(s, "ctrain_job_global_step{"), 0);
  ASSERT_STR_CONTAINS(s, "phase=\"Succeeded\"} 1\n");
  ASSERT_STR_CONTAINS(s, "phase=\"Running\"} 0\n");
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* No True condition is Pending; the last True phase wins; a TFJob is
 * labelled as one; no status at all is a Pending job with no restarts. */
TEST(phases_and_kinds) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  observe(&jm, "a", "new", "u1", "{}");
  observe(&jm, "a", "sus", "u2",
          "{\"conditions\":[{\"type\":\"Created\",\"status\":\"True\"},"
          "{\"type\":\"Suspended\",\"status\":\"True\"},{\"type\":\"Blocked\",\"status\":"
          "\"True\"}]}");
  ASSERT_OK(ctl_jobmetrics_observe(&jm, "tfjob:a/tf", "a", "tf", "TFJob", "u3", NULL));
  char *s = render(&jm, 1);
  ASSERT_STR_CONTAINS(s, "{namespace=\"a\",job_name=\"new\",kind=\"TrainingJob\",phase="
                         "\"Pending\"} 1\n");
  ASSERT_STR_CONTAINS(s, "{namespace=\"a\",job_name=\"sus\",kind=\"TrainingJob\",phase="
                         "\"Suspended\"} 1\n");
  ASSERT_STR_CONTAINS(s, "{namespace=\"a\",job_name=\"sus\",kind=\"TrainingJob\",phase="
                         "\"Created\"} 0\n");
  ASSERT_STR_CONTAINS(s, "ctrain_job_restarts_total{namespace=\"a\",job_name=\"tf\",kind="
                         "\"TFJob\"} 0\n");
  ASSERT_STR_CONTAINS(s, "{namespace=\"a\",job_name=\"tf\",kind=\"TFJob\",phase=\"Pending\"} 1\n");
  ASSERT_EQ(count_lines(s, "ctrain_job_phase{"), 3 * CTL_JOBMETRICS_NPHASES);
  ASSERT_EQ(count_ending(s, "ctrain_job_phase{", "} 1"), 3);
  ASSERT_EQ(count_lines(s, "ctrain_job_epoch{"), 0);
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* Backslash, double quote and line feed escaped, as the text format wants;
 * nothing else touched. */
TEST(label_values_escaped) {
  ctrain_buf b;
  ctrain_buf_init(&b, 0);
  ASSERT_OK(ctl_jobmetrics_escape("a\\b\"c\nd-é", &b));
  ASSERT_STR_EQ(b.p, "a\\\\b\\\"c\\nd-é");
  ctrain_buf_free(&b);
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  ASSERT_OK(ctl_jobmetrics_observe(&jm, "k", "n\"s", "x\\y\nz", "TrainingJob", "u", NULL));
  char *s = render(&jm, 1);
  ASSERT_STR_CONTAINS(s, "ctrain_job_restarts_total{namespace=\"n\\\"s\",job_name=\"x\\\\y\\nz\","
                         "kind=\"TrainingJob\"} 0\n");
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* Deleted: the series go at once. A pass of that job still in flight at the
 * delete does not bring them back; the job made again (a new uid) does, and
 * a late pass of the old one does not overwrite it. */
TEST(deleted_jobs_go_and_stay_gone) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  observe(&jm, "ml", "mnist", "u1", RUNNING);
  observe(&jm, "ml", "other", "o1", RUNNING);
  ctl_jobmetrics_drop(&jm, "ml/mnist", "u1");
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 1);
  char *s = render(&jm, 1);
  ASSERT_EQ(count_lines(s, "ctrain_job_epoch{namespace=\"ml\",job_name=\"mnist\""), 0);
  ASSERT_EQ(count_lines(s, "ctrain_job_epoch{namespace=\"ml\",job_name=\"other\""), 1);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_jobs 1\n");
  free(s);
  observe(&jm, "ml", "mnist", "u1", RUNNING); /* the late pass */
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 1);
  /* Made again. */
  observe(&jm, "ml", "mnist", "u2", SUCCEEDED);
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 2);
  observe(&jm, "ml", "mnist", "u1", RUNNING); /* later still */
  s = render(&jm, 1);
  ASSERT_STR_CONTAINS(s, "{namespace=\"ml\",job_name=\"mnist\",kind=\"TrainingJob\",phase="
                         "\"Succeeded\"} 1\n");
  ASSERT_EQ(count_lines(s, "ctrain_job_epoch{namespace=\"ml\",job_name=\"mnist\""), 0);
  free(s);
  /* Deleted before any pass of it ended: the pass in flight is kept out. */
  ctl_jobmetrics_drop(&jm, "ml/quick", "q1");
  observe(&jm, "ml", "quick", "q1", RUNNING);
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 2);
  ctl_jobmetrics_drop(&jm, "ml/quick", "q2"); /* made and deleted again, no pass ended */
  observe(&jm, "ml", "quick", "q1", RUNNING);
  observe(&jm, "ml", "quick", "q2", RUNNING);
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 2);
  observe(&jm, "ml", "quick", "q3", RUNNING); /* and made again: labelled */
  s = render(&jm, 1);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_epoch{namespace=\"ml\",job_name=\"quick\",kind="
                         "\"TrainingJob\"} 3\n");
  free(s);
  /* Every deleted: nothing but the headers. */
  ctl_jobmetrics_drop(&jm, "ml/mnist", "u2");
  ctl_jobmetrics_drop(&jm, "ml/other", NULL);
  ctl_jobmetrics_drop(&jm, "ml/quick", "q3");
  ctl_jobmetrics_drop(&jm, "ml/never", NULL); /* unknown, no uid: nothing kept */
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 0);
  s = render(&jm, 1);
  ASSERT(!strstr(s, "job_name="));
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_jobs 0\n");
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* A deleted job's uid is forgotten after tomb_s, and at most
 * CTL_JOBMETRICS_TOMBS_MAX are kept, oldest out first. */
TEST(deleted_uids_are_bounded) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  char name[32], uid[32];
  for (int i = 0; i < CTL_JOBMETRICS_TOMBS_MAX + 10; i++) {
    snprintf(name, sizeof(name), "ml/j%d", i);
    snprintf(uid, sizeof(uid), "u%d", i);
    ctl_jobmetrics_drop(&jm, name, uid);
  }
  ASSERT_EQ(jm.ntombs, CTL_JOBMETRICS_TOMBS_MAX);
  observe(&jm, "ml", "j0", "u0", "{}"); /* forgotten: shown again */
  observe(&jm, "ml", "j20", "u20", "{}");
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 1);
  jm.tomb_s = 0; /* every one expired at the next call */
  observe(&jm, "ml", "j30", "u30", "{}");
  ASSERT_EQ(jm.ntombs, 0);
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 2);
  ctl_jobmetrics_destroy(&jm);
}

/* A replica that does not lead shows no job (a standby's would be stale). */
TEST(only_the_leader_shows_jobs) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  observe(&jm, "ml", "mnist", "u1", RUNNING);
  char *s = render(&jm, 0);
  ASSERT(!strstr(s, "job_name="));
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_job_epoch gauge\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_jobs 0\n");
  ASSERT_STR_CONTAINS(s, "{reason=\"max_jobs\"} 0\n");
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* Past max_jobs the finished jobs are left out first; then the jobs seen
 * last. Each left out is counted. 0 keeps nothing at all. */
TEST(cap_leaves_finished_jobs_out_first) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  ctl_jobmetrics_set_max(&jm, 3);
  observe(&jm, "ml", "done1", "d1", SUCCEEDED);
  observe(&jm, "ml", "run1", "r1", RUNNING);
  observe(&jm, "ml", "done2", "d2", SUCCEEDED);
  observe(&jm, "ml", "run2", "r2", RUNNING);
  char *s = render(&jm, 1);
  ASSERT_EQ(count_lines(s, "ctrain_job_restarts_total{"), 3);
  ASSERT_EQ(count_lines(s, "ctrain_job_restarts_total{namespace=\"ml\",job_name=\"run"), 2);
  ASSERT_EQ(count_lines(s, "ctrain_job_restarts_total{namespace=\"ml\",job_name=\"done1\""), 1);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_jobs 3\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_dropped{reason=\"max_jobs\"} 1\n");
  free(s);
  observe(&jm, "ml", "run3", "r3", RUNNING);
  observe(&jm, "ml", "run4", "r4", RUNNING);
  s = render(&jm, 1);
  ASSERT_EQ(count_lines(s, "ctrain_job_restarts_total{namespace=\"ml\",job_name=\"run"), 3);
  ASSERT_EQ(count_lines(s, "ctrain_job_restarts_total{namespace=\"ml\",job_name=\"run4\""), 0);
  ASSERT_EQ(count_lines(s, "ctrain_job_restarts_total{namespace=\"ml\",job_name=\"done"), 0);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_dropped{reason=\"max_jobs\"} 3\n");
  free(s);
  ctl_jobmetrics_set_max(&jm, 0);
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 0);
  observe(&jm, "ml", "run5", "r5", RUNNING);
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 0);
  s = render(&jm, 1);
  ASSERT(!strstr(s, "job_name="));
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* The page never fails for its per-job part: the jobs that would pass the
 * buffer's cap are left out and counted. */
TEST(body_limit_leaves_jobs_out) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  char name[32], uid[32];
  for (int i = 0; i < 100; i++) {
    snprintf(name, sizeof(name), "job-%03d", i);
    snprintf(uid, sizeof(uid), "u%d", i);
    observe(&jm, "ml", name, uid, RUNNING);
  }
  char *full = render(&jm, 1);
  size_t need = strlen(full);
  free(full);
  char *s = render_cap(&jm, 1, need / 2);
  ASSERT_LT(strlen(s), need / 2);
  int shown = count_lines(s, "ctrain_job_epoch{");
  ASSERT_GT(shown, 10);
  ASSERT_LT(shown, 60);
  char want[128];
  snprintf(want, sizeof(want), "\nctrain_job_metrics_dropped{reason=\"body_size\"} %d\n",
           100 - shown);
  ASSERT_STR_CONTAINS(s, want);
  /* Each shown job whole: its 8 samples (no val accuracy) and 7 phases. */
  ASSERT_EQ(count_lines(s, "ctrain_job_phase{"), shown * CTL_JOBMETRICS_NPHASES);
  ASSERT_EQ(count_lines(s, "ctrain_job_disruptions_total{"), shown);
  free(s);
  ctl_jobmetrics_destroy(&jm);
}

/* Through ctl_metrics_render: the per-job series come last, with
 * g->leader; and a 4 MiB page (the /metrics body limit) holds the default
 * cap's jobs with long names. */
TEST(in_the_controller_page) {
  ctl_metrics m;
  ctl_metrics_init(&m);
  char ns[64], name[64], key[160];
  for (int i = 0; i < CTL_JOBMETRICS_MAX_DEFAULT + 5; i++) {
    snprintf(ns, sizeof(ns), "team-research-%02d", i % 50);
    snprintf(name, sizeof(name), "llama-finetune-lr3e-4-bs256-%06d", i);
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    cJSON *s = status(RUNNING);
    ASSERT_OK(ctl_jobmetrics_observe(&m.jobs, key, ns, name, "TrainingJob", name, s));
    cJSON_Delete(s);
  }
  ctl_metrics_gauges g = {.leader = 1};
  ctrain_buf b;
  ctrain_buf_init(&b, 4u << 20);
  ASSERT_OK(ctl_metrics_render(&m, &g, &b));
  char *s = ctrain_buf_take(&b, NULL);
  ASSERT_NOT_NULL(s);
  printf("# %d jobs: %zu bytes\n", CTL_JOBMETRICS_MAX_DEFAULT, strlen(s));
  ASSERT_STR_CONTAINS(s, "ctrain_build_info{");
  ASSERT(strstr(s, "ctrain_build_info{") < strstr(s, "ctrain_job_epoch{"));
  ASSERT_EQ(count_lines(s, "ctrain_job_epoch{"), CTL_JOBMETRICS_MAX_DEFAULT);
  ASSERT_STR_CONTAINS(s, "\nctrain_job_metrics_dropped{reason=\"max_jobs\"} 5\n"
                         "ctrain_job_metrics_dropped{reason=\"body_size\"} 0\n");
  free(s);
  ctl_metrics_destroy(&m);
}

/* 10,000 jobs observed, rendered and deleted in linear time: a quadratic
 * scan (10^8 steps) would take seconds. */
TEST(ten_thousand_jobs) {
  ctl_jobmetrics jm;
  ctl_jobmetrics_init(&jm);
  ctl_jobmetrics_set_max(&jm, 10000);
  cJSON *st = status(RUNNING);
  char key[64], name[32];
  double t0 = ctrain_mono_s();
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < 10000; i++) {
      snprintf(name, sizeof(name), "job-%05d", i);
      snprintf(key, sizeof(key), "ns-%d/%s", i % 100, name);
      ASSERT_OK(ctl_jobmetrics_observe(&jm, key, key, name, "TrainingJob", name, st));
    }
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 10000);
  char *s = render(&jm, 1);
  ASSERT_EQ(count_lines(s, "ctrain_job_loss{"), 10000);
  free(s);
  for (int i = 0; i < 10000; i++) {
    snprintf(name, sizeof(name), "job-%05d", i);
    snprintf(key, sizeof(key), "ns-%d/%s", i % 100, name);
    ctl_jobmetrics_drop(&jm, key, name);
  }
  ASSERT_EQ(ctl_jobmetrics_len(&jm), 0);
  double secs = ctrain_mono_s() - t0;
  printf("# 30,000 observes, a render and 10,000 deletes: %.3f s\n", secs);
  ASSERT_LT(secs * 1000, 5000);
  cJSON_Delete(st);
  ctl_jobmetrics_destroy(&jm);
}

static ctl_jobmetrics shared;

static void *churn(void *arg) {
  long t = (long)arg;
  char key[64], name[32];
  cJSON *st = cJSON_Parse(RUNNING);
  for (int i = 0; i < 2000; i++) {
    snprintf(name, sizeof(name), "t%ld-%d", t, i % 50);
    snprintf(key, sizeof(key), "ml/%s", name);
    if (i % 7 == 3)
      ctl_jobmetrics_drop(&shared, key, name);
    else
      ASSERT_OK(ctl_jobmetrics_observe(&shared, key, "ml", name, "TrainingJob", name, st));
  }
  cJSON_Delete(st);
  return NULL;
}

TEST(many_threads) {
  ctl_jobmetrics_init(&shared);
  pthread_t t[8];
  for (long i = 0; i < 8; i++)
    ASSERT_OK(pthread_create(&t[i], NULL, churn, (void *)i));
  for (int i = 0; i < 20; i++)
    free(render(&shared, 1)); /* rendering while they change */
  for (int i = 0; i < 8; i++)
    pthread_join(t[i], NULL);
  size_t n = ctl_jobmetrics_len(&shared);
  ASSERT_LE(n, 8 * 50);
  char *s = render(&shared, 1);
  ASSERT_EQ(count_lines(s, "ctrain_job_epoch{"), (int)n);
  free(s);
  ctl_jobmetrics_destroy(&shared);
}

/* --metrics-max-jobs: the default, a value, 0, and the bounds. */
TEST(flag) {
  ctl_options o;
  char err[256];
  ASSERT_OK(ctl_options_parse(&o, 1, ARGV("c"), err, sizeof(err)));
  ASSERT_EQ(o.metrics_max_jobs, CTL_JOBMETRICS_MAX_DEFAULT);
  ASSERT_OK(ctl_options_parse(&o, 3, ARGV("c", "--metrics-max-jobs", "250"), err, sizeof(err)));
  ASSERT_EQ(o.metrics_max_jobs, 250);
  ASSERT_OK(ctl_options_parse(&o, 2, ARGV("c", "--metrics-max-jobs=0"), err, sizeof(err)));
  ASSERT_EQ(o.metrics_max_jobs, 0);
  ASSERT_EQ(ctl_options_parse(&o, 3, ARGV("c", "--metrics-max-jobs", "-1"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--metrics-max-jobs");
  ASSERT_EQ(ctl_options_parse(&o, 3, ARGV("c", "--metrics-max-jobs", "1000001"), err, sizeof(err)),
            CTRAIN_E_INVAL);
}

TEST_MAIN(T(samples_of_a_running_job), T(phases_and_kinds), T(label_values_escaped),
          T(deleted_jobs_go_and_stay_gone), T(deleted_uids_are_bounded),
          T(only_the_leader_shows_jobs), T(cap_leaves_finished_jobs_out_first),
          T(body_limit_leaves_jobs_out), T(in_the_controller_page), T(ten_thousand_jobs),
          T(many_threads), T(flag))
