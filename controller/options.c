/* options.c - ctrain-controller's flags, one table (ctrain/flags.h). */
#include "controller/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/jobmetrics.h"
#include "ctrain/contract.h"
#include "ctrain/flags.h"
#include "ctrain/log.h"

void ctl_options_usage(FILE *f) {
  fputs(
      "Usage: ctrain-controller [flags]\n"
      "\n"
      "Runs the TrainingJob operator: watches " CTRAIN_API_GROUP_VERSION " TrainingJobs and\n"
      "creates, restarts and cleans up their pods, Service and Secret.\n"
      "\n"
      "Flags:\n"
      "  --kubeconfig FILE              kubeconfig (default: $KUBECONFIG, then in-cluster)\n"
      "  --context NAME                 kubeconfig context (default: current-context)\n"
      "  --namespace NS                 watch only NS (default: all namespaces)\n"
      "  --workers N                    concurrent reconciles (default 16)\n"
      "  --kube-api-qps Q               client rate limit, requests/s (default 20)\n"
      "  --kube-api-burst N             client burst (default 30)\n"
      "  --leader-elect[=true|false]    leader election on a coordination.k8s.io Lease (default "
      "true)\n"
      "  --leader-elect-lease-name NAME Lease name (default ctrain-controller)\n"
      "  --leader-elect-namespace NS    Lease, key Secret ns (default: pod's, else ctrain-system)\n"
      "  --leader-elect-lease-duration SECONDS  a standby takes over this long after the\n"
      "                                 leader's last renewal (default 15)\n"
      "  --leader-elect-renew-deadline SECONDS  the leader steps down when it could not\n"
      "                                 renew for this long (default 10; < the lease)\n"
      "  --leader-elect-retry-period SECONDS    between tries to renew or take over\n"
      "                                 (default 2; < the renew deadline)\n"
      "  --metrics-bind-address ADDR    /metrics, /healthz, /readyz (default :8080; 0 disables)\n"
      "  --metrics-max-jobs N           jobs with per-job series (ctrain_job_*) on /metrics;\n"
      "                                 past N, finished jobs first are left out (default "
      "1000; 0: none)\n"
      "  --progress-interval SECONDS    poll each Running job's chief /progress this often, +-10%\n"
      "                                 (default 10; 0 disables it, and with it every job's\n"
      "                                 progressDeadlineSeconds: condition "
      "ProgressDeadlineNotEnforced)\n"
      "  --progress-concurrency N       polls in flight (default 4)\n"
      "  --straggler-threshold RATIO    a worker whose ms/step stays at RATIO x the median for\n"
      "                                 two polls is a Straggler (default 1.5)\n"
      "  --enable-tfjob[=true|false]    also serve kubeflow.org/v1 TFJobs (the TFJob CRD must be\n"
      "                                 installed; default false)\n"
      "  --log-level LEVEL              debug|info|warn|error (default info)\n"
      "  --log-format FORMAT            text|json (default json)\n"
      "  --release-finalizers           for uninstall: remove the " CTRAIN_FINALIZER_ATTEMPT
      " finalizer\n"
      "                                 from every pod in scope (all namespaces, or --namespace)\n"
      "                                 that holds it, print a summary and exit (0: all done)\n"
      "  --version                      print the version and exit\n"
      "  -h, --help                     print this help and exit\n",
      f);
}

static const char *const log_formats[] = {"text", "json", NULL};

ctrain_err ctl_options_parse(ctl_options *o, int argc, char **argv, char *errbuf, size_t errlen) {
  memset(o, 0, sizeof(*o));
  o->workers = 16; /* a pass is ~6 requests in a row: 4 could not keep the apiserver busy */
  o->qps = 20.0;
  o->burst = 30;
  o->leader_elect = 1;
  o->lease_name = "ctrain-controller";
  o->lease_s = 15;
  o->renew_s = 10;
  o->retry_s = 2;
  o->metrics_addr = ":8080";
  o->log_level = "info";
  o->log_format = "json";
  o->progress_interval_s = 10.0;
  o->straggler_threshold = 1.5;
  o->progress_concurrency = 4;
  o->metrics_max_jobs = CTL_JOBMETRICS_MAX_DEFAULT;

  const ctrain_flag flags[] = {
      {.name = "kubeconfig", .kind = CTRAIN_FLAG_STRING, .dst = &o->kubeconfig},
      {.name = "context", .kind = CTRAIN_FLAG_STRING, .dst = &o->context},
      {.name = "namespace", .kind = CTRAIN_FLAG_STRING, .dst = &o->namespace_},
      {.name = "workers", .kind = CTRAIN_FLAG_INT, .dst = &o->workers, .min = 1, .max = 256},
      {.name = "kube-api-qps",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->qps,
       .min = 0,
       .max = 1e6,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "a positive number"},
      {.name = "kube-api-burst",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->burst,
       .min = 1,
       .max = 1000000,
       .expect = "a positive integer"},
      {.name = "leader-elect", .kind = CTRAIN_FLAG_BOOL, .dst = &o->leader_elect},
      {.name = "leader-elect-lease-name", .kind = CTRAIN_FLAG_STRING, .dst = &o->lease_name},
      {.name = "leader-elect-namespace", .kind = CTRAIN_FLAG_STRING, .dst = &o->lease_namespace},
      {.name = "leader-elect-lease-duration",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->lease_s,
       .min = 0,
       .max = 3600,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "seconds, over 0 and up to 3600"},
      {.name = "leader-elect-renew-deadline",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->renew_s,
       .min = 0,
       .max = 3600,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "seconds, over 0 and up to 3600"},
      {.name = "leader-elect-retry-period",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->retry_s,
       .min = 0,
       .max = 3600,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "seconds, over 0 and up to 3600"},
      {.name = "metrics-bind-address", .kind = CTRAIN_FLAG_STRING, .dst = &o->metrics_addr},
      {.name = "metrics-max-jobs",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->metrics_max_jobs,
       .min = 0,
       .max = CTL_JOBMETRICS_MAX_LIMIT},
      {.name = "log-level",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = &o->log_level,
       .parse = ctrain_log_level_flag,
       .expect = CTRAIN_LOG_LEVEL_EXPECT},
      {.name = "log-format",
       .kind = CTRAIN_FLAG_CHOICE_STR,
       .dst = &o->log_format,
       .choices = log_formats},
      {.name = "progress-interval",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->progress_interval_s,
       .min = 0,
       .max = 86400,
       .expect = "seconds, 0 to 86400"},
      {.name = "progress-concurrency",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->progress_concurrency,
       .min = 1,
       .max = 16},
      {.name = "straggler-threshold",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->straggler_threshold,
       .min = 1,
       .max = 1000,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "a ratio over 1"},
      {.name = "enable-tfjob", .kind = CTRAIN_FLAG_BOOL, .dst = &o->enable_tfjob},
      {.name = "release-finalizers", .kind = CTRAIN_FLAG_SET, .dst = &o->release_finalizers},
      {.name = "version", .kind = CTRAIN_FLAG_SET, .dst = &o->show_version},
      {.name = NULL}};
  char **pos = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*pos));
  int npos = 0;
  if (!pos)
    return CTRAIN_E_NOMEM;
  ctrain_err result =
      ctrain_flags_parse(flags, argc, argv, &o->show_help, pos, &npos, errbuf, errlen);
  if (!result && npos > 0) {
    snprintf(errbuf, errlen, "unexpected argument '%s'", pos[0]);
    result = CTRAIN_E_INVAL;
  }
  if (!result && !(o->retry_s < o->renew_s && o->renew_s < o->lease_s)) {
    snprintf(errbuf, errlen,
             "--leader-elect-retry-period (%g s) < --leader-elect-renew-deadline (%g s) < "
             "--leader-elect-lease-duration (%g s) must hold",
             o->retry_s, o->renew_s, o->lease_s);
    result = CTRAIN_E_INVAL;
  }
  free(pos);
  return result;
}
