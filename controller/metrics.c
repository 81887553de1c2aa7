/* metrics.c - the controller's counters and histogram, rendered as
 * Prometheus text; see controller/metrics.h. */
#include "controller/metrics.h"

#include <string.h> /* (first: it defines __GLIBC__) */
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "ctrain/thread.h"
#include "ctrain/version.h"

static const double hist_le[CTL_METRICS_BUCKETS - 1] = {0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 2.5};

void ctl_metrics_init(ctl_metrics *m) {
  memset(m, 0, sizeof(*m));
  ctl_outcomes_init(&m->outcomes);
  ctl_jobmetrics_init(&m->jobs);
  pthread_mutex_init(&m->hist_mu, NULL);
}

void ctl_metrics_destroy(ctl_metrics *m) {
  ctl_outcomes_destroy(&m->outcomes);
  ctl_jobmetrics_destroy(&m->jobs);
  pthread_mutex_destroy(&m->hist_mu);
}

void ctl_metrics_add_cache(ctl_metrics *m, const char *resource, kube_informer *inf) {
  int n = atomic_load(&m->ncaches);
  if (!inf || n >= CTL_METRICS_CACHES)
    return;
  m->caches[n].resource = resource;
  m->caches[n].inf = inf;
  atomic_store(&m->ncaches, n + 1);
}

/* ctrain_cache_objects and ctrain_watch_events_total of each cache added. */
static ctrain_err caches(ctl_metrics *m, ctrain_buf *out) {
  static const char *const types[] = {[KUBE_WATCH_ADDED] = "ADDED",
                                      [KUBE_WATCH_MODIFIED] = "MODIFIED",
                                      [KUBE_WATCH_DELETED] = "DELETED",
                                      [KUBE_WATCH_BOOKMARK] = "BOOKMARK"};
  int n = atomic_load(&m->ncaches);
  kube_informer_stats st[CTL_METRICS_CACHES];
  size_t len[CTL_METRICS_CACHES];
  for (int i = 0; i < n; i++) {
    len[i] = kube_informer_len(m->caches[i].inf);
    kube_informer_get_stats(m->caches[i].inf, &st[i]);
  }
  ctrain_err result = ctrain_buf_printf(
      out, "# HELP ctrain_cache_objects Objects in the controller's informer cache, by resource.\n"
           "# TYPE ctrain_cache_objects gauge\n");
  for (int i = 0; !result && i < n; i++)
    result = ctrain_buf_printf(out, "ctrain_cache_objects{resource=\"%s\"} %zu\n",
                               m->caches[i].resource, len[i]);
  if (!result)
    result = ctrain_buf_printf(out, "# HELP ctrain_watch_events_total Watch events the "
                                    "controller's informers received, by resource and type.\n"
                                    "# TYPE ctrain_watch_events_total counter\n");
  for (int i = 0; !result && i < n; i++)
    for (int t = KUBE_WATCH_ADDED; !result && t <= KUBE_WATCH_BOOKMARK; t++)
      result =
          ctrain_buf_printf(out, "ctrain_watch_events_total{resource=\"%s\",type=\"%s\"} %ld\n",
                            m->caches[i].resource, types[t], st[i].events_by_type[t]);
  return result;
}

/* ctrain_heap_bytes: the C heap as glibc's malloc sees it (mallinfo2): in use,
 * free but held (fragmentation: counted in RSS where touched), mmapped. What
 * the process's RSS is made of, next to the caches' object counts. */
static ctrain_err heap(ctrain_buf *out) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  return ctrain_buf_printf(out,
                           "# HELP ctrain_heap_bytes The C heap (glibc mallinfo2): in use, free "
                           "but held by malloc, mmapped.\n"
                           "# TYPE ctrain_heap_bytes gauge\n"
                           "ctrain_heap_bytes{state=\"in_use\"} %zu\n"
                           "ctrain_heap_bytes{state=\"free\"} %zu\n"
                           "ctrain_heap_bytes{state=\"mmapped\"} %zu\n",
                           mi.uordblks, mi.fordblks, mi.hblkhd);
#else
  (void)out;
  return CTRAIN_OK;
#endif
}

void ctl_metrics_observe(ctl_metrics *m, double secs) {
  size_t b = 0;
  while (b < CTL_METRICS_BUCKETS - 1 && secs > hist_le[b])
    b++;
  atomic_fetch_add(&m->reconciles, 1);
  ctrain_mutex_lock(&m->hist_mu);
  m->seconds_sum += secs;
  m->buckets[b]++;
  ctrain_mutex_unlock(&m->hist_mu);
}

static ctrain_err metric(ctrain_buf *out, const char *type, const char *name, const char *help,
                         long value) {
  return ctrain_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %ld\n", name, help, name, type,
                           name, value);
}

static ctrain_err histogram(ctl_metrics *m, ctrain_buf *out) {
  ctrain_err result;
  long buckets[CTL_METRICS_BUCKETS], cum = 0;
  ctrain_mutex_lock(&m->hist_mu);
  memcpy(buckets, m->buckets, sizeof(buckets));
  double sum = m->seconds_sum;
  ctrain_mutex_unlock(&m->hist_mu);
  result = ctrain_buf_printf(out, "# HELP ctrain_reconcile_duration_seconds Time per reconcile.\n"
                                  "# TYPE ctrain_reconcile_duration_seconds histogram\n");
  for (size_t i = 0; !result && i < CTL_METRICS_BUCKETS - 1; i++) {
    cum += buckets[i];
    result = ctrain_buf_printf(out, "ctrain_reconcile_duration_seconds_bucket{le=\"%g\"} %ld\n",
                               hist_le[i], cum);
  }
  cum += buckets[CTL_METRICS_BUCKETS - 1];
  if (!result)
    result = ctrain_buf_printf(out,
                               "ctrain_reconcile_duration_seconds_bucket{le=\"+Inf\"} %ld\n"
                               "ctrain_reconcile_duration_seconds_sum %.6f\n"
                               "ctrain_reconcile_duration_seconds_count %ld\n",
                               cum, sum, cum);
  return result;
}

ctrain_err ctl_metrics_render(ctl_metrics *m, const ctl_metrics_gauges *g, ctrain_buf *out) {
  const struct {
    const char *type, *name, *help;
    long value;
  } rows[] = {
      {"counter", "ctrain_reconcile_total", "Reconciles run.", atomic_load(&m->reconciles)},
      {"counter", "ctrain_reconcile_errors_total", "Reconciles that failed and were requeued.",
       atomic_load(&m->reconcile_errors)},
      {"counter", "ctrain_pods_created_total", "Pods created.", atomic_load(&m->pods_created)},
      {"counter", "ctrain_pod_create_errors_total", "Pod creations that failed.",
       atomic_load(&m->pod_create_errors)},
      {"counter", "ctrain_pod_creates_skipped_total",
       "Pod creates not sent: slow start stopped after a failed batch, or no token Secret.",
       atomic_load(&m->pod_creates_skipped)},
      {"counter", "ctrain_pods_deleted_total", "Pods deleted.", atomic_load(&m->pods_deleted)},
      {"counter", "ctrain_status_updates_total", "Status writes.", atomic_load(&m->status_updates)},
      {"counter", "ctrain_status_conflicts_total", "Status writes that hit a conflict.",
       atomic_load(&m->status_conflicts)},
      {"counter", "ctrain_events_total", "Events written.", g->events.written},
      {"counter", "ctrain_events_failed_total", "Events the apiserver refused (not retried).",
       g->events.failed},
      {"counter", "ctrain_events_dropped_total",
       "Events dropped: queue full, or not written by shutdown.", g->events.dropped},
      {"counter", "ctrain_kube_requests_total",
       "HTTP requests sent to the apiserver (retries and watches included).", g->kube_requests},
      {"counter", "ctrain_gang_restarts_total", "Gang restarts decided.",
       atomic_load(&m->restarts_decided)},
      {"gauge", "ctrain_leader", "1 while this replica leads.", g->leader},
      {"gauge", "ctrain_workqueue_depth", "Keys ready in the work queue.", (long)g->queue_depth},
      {"gauge", "ctrain_workqueue_waiting", "Keys waiting on a delayed requeue.",
       (long)g->queue_waiting},
      {"gauge", "ctrain_events_queued", "Events waiting to be written.", (long)g->events.queued},
      {"gauge", "ctrain_trainingjobs", "TrainingJobs in the cache.", (long)g->trainingjobs},
  };
  ctrain_err result = CTRAIN_OK;
  for (size_t i = 0; !result && i < sizeof(rows) / sizeof(rows[0]); i++)
    result = metric(out, rows[i].type, rows[i].name, rows[i].help, rows[i].value);
  if (!result)
    result = ctrain_buf_printf(
        out,
        "# HELP ctrain_progress_polls_total Polls of a Running job's chief /progress, by result.\n"
        "# TYPE ctrain_progress_polls_total counter\n"
        "ctrain_progress_polls_total{result=\"ok\"} %ld\n"
        "ctrain_progress_polls_total{result=\"error\"} %ld\n"
        "ctrain_progress_polls_total{result=\"skipped\"} %ld\n",
        atomic_load(&m->progress_polls_ok), atomic_load(&m->progress_polls_error),
        atomic_load(&m->progress_polls_skipped));
  if (!result)
    result = caches(m, out);
  if (!result)
    result = heap(out);
  if (!result)
    result = ctl_outcomes_render(&m->outcomes, out);
  if (!result)
    result = histogram(m, out);
  if (!result)
    result =
        ctrain_buf_printf(out,
                          "# HELP ctrain_build_info The release this controller was built from.\n"
                          "# TYPE ctrain_build_info gauge\nctrain_build_info{version=\"%s\"} 1\n",
                          CTRAIN_VERSION);
  /* Last: what is left of the body's cap bounds how many jobs it shows. */
  if (!result)
    result = ctl_jobmetrics_render(&m->jobs, g->leader, out);
  return result;
}
