/* controller/options.h - ctrain-controller's command-line flags. */
#ifndef CTRAIN_CTL_OPTIONS_H
#define CTRAIN_CTL_OPTIONS_H

#include <stdio.h>

#include "ctrain/err.h"

typedef struct {
  const char *kubeconfig; /* borrowed from argv; NULL: $KUBECONFIG, then in-cluster */
  const char *context;    /* kubeconfig context; NULL: current-context */
  const char *namespace_; /* watch one namespace; NULL: all */
  int workers;            /* reconcile workers */
  double qps;             /* client rate limit */
  int burst;              /* client burst */
  int leader_elect;       /* 0/1 */
  const char *lease_name; /* leader-election Lease name */
  /* client-go's three: a standby takes over lease_s after the last renewal
   * (checking every retry_s); the leader steps down when it could not renew
   * for renew_s. retry_s < renew_s < lease_s. */
  double lease_s, renew_s, retry_s;
  /* own namespace: the Lease and the job-token key Secret */
  const char *lease_namespace;
  const char *metrics_addr;   /* host:port of /metrics, /healthz, /readyz */
  const char *log_level;      /* debug|info|warn|error */
  const char *log_format;     /* text|json */
  double progress_interval_s; /* between polls of a Running job's chief; 0: no polls */
  double straggler_threshold; /* ms/step over the median that makes a straggler */
  int progress_concurrency;   /* polls in flight */
  int enable_tfjob;           /* also serve kubeflow.org/v1 TFJobs (controller/tfjob.h) */
  int metrics_max_jobs;       /* jobs with per-job series on /metrics (jobmetrics.h); 0: none */
  int release_finalizers;     /* one-shot: release our pods' finalizer, exit (uninstall.h) */
  int show_help;
  int show_version;
} ctl_options;

/* Fills `o` from argv. Returns CTRAIN_E_INVAL with a message naming the flag
 * in `errbuf` for a bad flag or value. Strings in `o` borrow from argv. */
CTRAIN_NODISCARD ctrain_err ctl_options_parse(ctl_options *o, int argc, char **argv, char *errbuf,
                                              size_t errlen);

void ctl_options_usage(FILE *f);

#endif
