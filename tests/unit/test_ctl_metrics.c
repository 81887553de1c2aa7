/* test_ctl_metrics.c - the controller's /metrics text: every counter and
 * gauge with its value, the histogram cumulative by bucket, and counts from
 * many threads at once exact (run under ThreadSanitizer by tools/test.sh). */
#include "test.h"

#include <pthread.h>

#include "controller/metrics.h"
#include "ctrain/version.h"

static char *render(ctl_metrics *m, const ctl_metrics_gauges *g) {
  ctrain_buf b;
  ctrain_buf_init(&b, 1 << 20);
  ASSERT_OK(ctl_metrics_render(m, g, &b));
  char *s = ctrain_buf_take(&b, NULL);
  ASSERT_NOT_NULL(s);
  return s;
}

TEST(counters_gauges_histogram) {
  ctl_metrics m;
  ctl_metrics_init(&m);
  atomic_fetch_add(&m.pods_created, 12);
  atomic_fetch_add(&m.status_conflicts, 2);
  ctl_metrics_observe(&m, 0.001);
  ctl_metrics_observe(&m, 0.02);
  ctl_metrics_observe(&m, 0.02);
  ctl_metrics_observe(&m, 9.0);
  ctl_metrics_gauges g = {.kube_requests = 77,
                          .leader = 1,
                          .queue_depth = 3,
                          .queue_waiting = 4,
                          .trainingjobs = 5,
                          .events = {.written = 6, .failed = 1, .dropped = 2, .queued = 8}};
  char *s = render(&m, &g);
  ASSERT_STR_CONTAINS(s,
                      "# TYPE ctrain_pods_created_total counter\nctrain_pods_created_total 12\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_status_conflicts_total 2\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_reconcile_total 4\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_kube_requests_total 77\n");
  ASSERT_STR_CONTAINS(s, "# TYPE ctrain_leader gauge\nctrain_leader 1\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_workqueue_depth 3\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_workqueue_waiting 4\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_trainingjobs 5\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_events_total 6\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_events_failed_total 1\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_events_dropped_total 2\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_events_queued 8\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_bucket{le=\"0.005\"} 1\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_bucket{le=\"0.01\"} 1\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_bucket{le=\"0.05\"} 3\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_bucket{le=\"2.5\"} 3\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_bucket{le=\"+Inf\"} 4\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_sum 9.041000\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_count 4\n");
  ASSERT_STR_CONTAINS(s, "ctrain_build_info{version=");
  free(s);
  ctl_metrics_destroy(&m);
}

/* ctrain_build_info names the release of the VERSION file (the one place it
 * is written), as "v" MAJOR.MINOR.PATCH. */
TEST(build_info_is_the_version_file) {
  char path[4096], want[128], line[64] = {0};
  snprintf(path, sizeof(path), "%s/VERSION", CTRAIN_SOURCE_DIR);
  FILE *f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  ASSERT_NOT_NULL(fgets(line, sizeof(line), f));
  fclose(f);
  line[strcspn(line, "\n")] = '\0';
  snprintf(want, sizeof(want), "\nctrain_build_info{version=\"v%s\"} 1\n", line);
  ASSERT_STR_EQ(&CTRAIN_VERSION[1], line);
  ctl_metrics m;
  ctl_metrics_init(&m);
  ctl_metrics_gauges g = {0};
  char *s = render(&m, &g);
  ASSERT_STR_CONTAINS(s, want);
  free(s);
  ctl_metrics_destroy(&m);
}

TEST(render_respects_the_cap) {
  ctl_metrics m;
  ctl_metrics_init(&m);
  ctl_metrics_gauges g = {0};
  ctrain_buf b;
  ctrain_buf_init(&b, 64);
  ASSERT_EQ(ctl_metrics_render(&m, &g, &b), CTRAIN_E_TOOBIG);
  ctrain_buf_free(&b);
  ctl_metrics_destroy(&m);
}

static void *observer(void *arg) {
  ctl_metrics *m = arg;
  for (int i = 0; i < 1000; i++) {
    ctl_metrics_observe(m, 0.001 * (i % 7));
    atomic_fetch_add(&m->pods_created, 1);
  }
  return NULL;
}

TEST(many_threads_count_exactly) {
  ctl_metrics m;
  ctl_metrics_init(&m);
  pthread_t t[8];
  for (int i = 0; i < 8; i++)
    ASSERT_OK(pthread_create(&t[i], NULL, observer, &m));
  ctl_metrics_gauges g = {0};
  char *mid = render(&m, &g); /* rendering while they count */
  free(mid);
  for (int i = 0; i < 8; i++)
    pthread_join(t[i], NULL);
  char *s = render(&m, &g);
  ASSERT_STR_CONTAINS(s, "\nctrain_reconcile_total 8000\n");
  ASSERT_STR_CONTAINS(s, "\nctrain_pods_created_total 8000\n");
  ASSERT_STR_CONTAINS(s, "ctrain_reconcile_duration_seconds_count 8000\n");
  free(s);
  ctl_metrics_destroy(&m);
}

TEST_MAIN(T(counters_gauges_histogram), T(build_info_is_the_version_file),
          T(render_respects_the_cap), T(many_threads_count_exactly))
