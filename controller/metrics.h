/* controller/metrics.h - ctrain-controller's Prometheus metrics: the
 * counters the workers bump, the reconcile-duration histogram, the per-job
 * series (controller/jobmetrics.h), and the text format /metrics serves.
 *
 * Counters are lock-free atomics; the histogram has its own small lock
 * (sum and buckets change together). Neither is held across anything else. */
#ifndef CTRAIN_CTL_METRICS_H
#define CTRAIN_CTL_METRICS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "controller/jobmetrics.h"
#include "controller/outcomes.h"
#include "ctrain/buf.h"
#include "ctrain/err.h"
#include "ctrain/kube_events.h"
#include "ctrain/kube_informer.h"

#define CTL_METRICS_BUCKETS 8 /* le 0.005 .. 2.5, +Inf */
#define CTL_METRICS_CACHES  8 /* informers shown: pods, services, workloads, the job kinds */

typedef struct ctl_metrics {
  atomic_long reconciles, reconcile_errors, pods_created, pods_deleted, pod_create_errors,
      pod_creates_skipped, status_updates, status_conflicts, restarts_decided;
  /* Creates (pods and the writes before them) sent and not yet answered:
   * events yield to them (kube_events_opts.yield). */
  atomic_long creates_in_flight;
  /* Polls of a chief's /progress (controller/progress.h), by result: ok,
   * error (no answer, not 200, not JSON), skipped (no pod IP or token yet). */
  atomic_long progress_polls_ok, progress_polls_error, progress_polls_skipped;
  ctl_outcomes outcomes; /* job outcomes by kind and namespace */
  ctl_jobmetrics jobs;   /* per-job series, shown while leading */
  /* The informers whose caches /metrics shows (ctl_metrics_add_cache):
   * entries [0, ncaches) are set before ncaches counts them (release), so
   * a render reads only whole ones. */
  struct {
    const char *resource; /* the gvr's plural, static */
    kube_informer *inf;   /* borrowed: freed only after /metrics stops */
  } caches[CTL_METRICS_CACHES];
  atomic_int ncaches;
  pthread_mutex_t hist_mu;
  double seconds_sum;                /* guarded by hist_mu */
  long buckets[CTL_METRICS_BUCKETS]; /* guarded by hist_mu */
} ctl_metrics;

/* What /metrics shows that others own, read when it renders. */
typedef struct ctl_metrics_gauges {
  long kube_requests;        /* kube_client_requests */
  int leader;                /* 1 while leading */
  size_t queue_depth;        /* kube_workqueue_len */
  size_t queue_waiting;      /* kube_workqueue_waiting */
  size_t trainingjobs;       /* kube_informer_len of the job informer */
  kube_events_counts events; /* the event recorder's */
} ctl_metrics_gauges;

void ctl_metrics_init(ctl_metrics *m);
void ctl_metrics_destroy(ctl_metrics *m);

/* Shows `inf`'s cache on /metrics as `resource` (static): the objects in
 * it (ctrain_cache_objects) and the watch events it received
 * (ctrain_watch_events_total, by type). `inf` must outlive the renders
 * (the controller stops /metrics before it frees its informers). One
 * thread adds; renders may run meanwhile. Past CTL_METRICS_CACHES: not
 * shown. */
void ctl_metrics_add_cache(ctl_metrics *m, const char *resource, kube_informer *inf);

/* Counts one reconcile that took `secs` seconds. */
void ctl_metrics_observe(ctl_metrics *m, double secs);

/* Appends the Prometheus text of `m` and `g` (both borrowed) to `out`, the
 * per-job series last (with g->leader only; those that do not fit in `out`'s
 * cap are left out and counted). Errors as ctrain_buf_printf. */
CTRAIN_NODISCARD ctrain_err ctl_metrics_render(ctl_metrics *m, const ctl_metrics_gauges *g,
                                               ctrain_buf *out);

#endif
