/* test_ctl_outcomes.c - job outcome counters by kind and namespace: each
 * transition of a status write counted once, the rows rendered in order,
 * the series capped, and counts from many threads exact (run under
 * ThreadSanitizer by tools/test.sh with the other threaded tests). */
#include "test.h"

#include <pthread.h>

#include "controller/outcomes.h"

static char *render(ctl_outcomes *o) {
  ctrain_buf b;
  ctrain_buf_init(&b, 1 << 22);
  ASSERT_OK(ctl_outcomes_render(o, &b));
  char *s = ctrain_buf_take(&b, NULL);
  ASSERT_NOT_NULL(s);
  return s;
}

static cJSON *status(const char *conds) {
  char buf[512];
  snprintf(buf, sizeof(buf), "{\"conditions\":[%s]}", conds);
  cJSON *s = cJSON_Parse(buf);
  ASSERT_NOT_NULL(s);
  return s;
}

#define C(type, st) "{\"type\":\"" type "\",\"status\":\"" st "\"}"

TEST(transitions_count_once) {
  ctl_outcomes o;
  ctl_outcomes_init(&o);
  cJSON *none = status(""), *created = status(C("Created", "True")),
        *running = status(C("Created", "True") "," C("Running", "True")),
        *done = status(C("Created", "True") "," C("Running", "False") "," C("Succeeded", "True")),
        *failed = status(C("Created", "True") "," C("Failed", "True"));
  ASSERT_OK(ctl_outcomes_observe(&o, "TrainingJob", "ml", NULL, created));
  ASSERT_OK(ctl_outcomes_observe(&o, "TrainingJob", "ml", created, running)); /* nothing new */
  ASSERT_OK(ctl_outcomes_observe(&o, "TrainingJob", "ml", running, done));
  ASSERT_OK(ctl_outcomes_observe(&o, "TrainingJob", "ml", done, done));   /* a rewrite */
  ASSERT_OK(ctl_outcomes_observe(&o, "TrainingJob", "ab", none, failed)); /* both at once */
  ASSERT_OK(ctl_outcomes_add(&o, "TFJob", "ml", CTL_OUTCOME_RESTARTED, 2));
  char *s = render(&o);
  /* Rows by kind, then namespace; every row in every series. */
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_jobs_created_total counter\n"
                         "ctrain_jobs_created_total{kind=\"TFJob\",namespace=\"ml\"} 0\n"
                         "ctrain_jobs_created_total{kind=\"TrainingJob\",namespace=\"ab\"} 1\n"
                         "ctrain_jobs_created_total{kind=\"TrainingJob\",namespace=\"ml\"} 1\n");
  ASSERT_STR_CONTAINS(s, "ctrain_jobs_successful_total{kind=\"TrainingJob\",namespace=\"ml\"} 1\n");
  ASSERT_STR_CONTAINS(s, "ctrain_jobs_successful_total{kind=\"TrainingJob\",namespace=\"ab\"} 0\n");
  ASSERT_STR_CONTAINS(s, "ctrain_jobs_failed_total{kind=\"TrainingJob\",namespace=\"ab\"} 1\n");
  ASSERT_STR_CONTAINS(s, "ctrain_jobs_failed_total{kind=\"TrainingJob\",namespace=\"ml\"} 0\n");
  ASSERT_STR_CONTAINS(s, "ctrain_jobs_restarted_total{kind=\"TFJob\",namespace=\"ml\"} 2\n");
  ASSERT_STR_CONTAINS(s, "# HELP ctrain_jobs_restarted_total ");
  free(s);
  cJSON_Delete(none);
  cJSON_Delete(created);
  cJSON_Delete(running);
  cJSON_Delete(done);
  cJSON_Delete(failed);
  ctl_outcomes_destroy(&o);
}

/* Nothing counted yet: the HELP and TYPE lines alone (a valid exposition). */
TEST(empty_renders_headers_only) {
  ctl_outcomes o;
  ctl_outcomes_init(&o);
  char *s = render(&o);
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_jobs_failed_total counter\n# HELP ctrain_jobs_restarted");
  ASSERT(!strstr(s, "{"));
  free(s);
  ctl_outcomes_destroy(&o);
}

/* Past CTL_OUTCOMES_MAX rows a new namespace counts under "_other"; known
 * rows keep counting as themselves. */
TEST(series_are_capped) {
  ctl_outcomes o;
  ctl_outcomes_init(&o);
  char ns[32];
  for (int i = 0; i < CTL_OUTCOMES_MAX + 5; i++) {
    snprintf(ns, sizeof(ns), "ns-%05d", i);
    ASSERT_OK(ctl_outcomes_add(&o, "TrainingJob", ns, CTL_OUTCOME_CREATED, 1));
  }
  ASSERT_EQ(o.len, CTL_OUTCOMES_MAX + 1);
  ASSERT_OK(ctl_outcomes_add(&o, "TrainingJob", "ns-00007", CTL_OUTCOME_CREATED, 1));
  char *s = render(&o);
  ASSERT_STR_CONTAINS(s,
                      "ctrain_jobs_created_total{kind=\"TrainingJob\",namespace=\"_other\"} 5\n");
  ASSERT_STR_CONTAINS(s,
                      "ctrain_jobs_created_total{kind=\"TrainingJob\",namespace=\"ns-00007\"} 2\n");
  free(s);
  ctl_outcomes_destroy(&o);
}

static void *adder(void *arg) {
  ctl_outcomes *o = arg;
  char ns[16];
  for (int i = 0; i < 1000; i++) {
    snprintf(ns, sizeof(ns), "ns-%d", i % 7);
    ASSERT_OK(ctl_outcomes_add(o, "TrainingJob", ns, CTL_OUTCOME_RESTARTED, 1));
  }
  return NULL;
}

TEST(many_threads_count_exactly) {
  ctl_outcomes o;
  ctl_outcomes_init(&o);
  pthread_t t[8];
  for (int i = 0; i < 8; i++)
    ASSERT_OK(pthread_create(&t[i], NULL, adder, &o));
  free(render(&o)); /* rendering while they count */
  for (int i = 0; i < 8; i++)
    pthread_join(t[i], NULL);
  long total = 0;
  for (size_t i = 0; i < o.len; i++)
    total += o.rows[i].n[CTL_OUTCOME_RESTARTED];
  ASSERT_EQ(o.len, 7);
  ASSERT_EQ(total, 8000);
  ctl_outcomes_destroy(&o);
}

TEST_MAIN(T(transitions_count_once), T(empty_renders_headers_only), T(series_are_capped),
          T(many_threads_count_exactly))
