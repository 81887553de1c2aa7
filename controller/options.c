/* options.c - ctrain-controller's flags, one table (ctrain/flags.h). */
#include "controller/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/jobmetrics.h"
#include "ctrain/contract.h"
#include "ctrain/flags.h"
#include "ctrain/log.h"

static const char *const log_formats[] = {"text", "json", NULL};

/* The flag table over `o`, into flags[CTL_NFLAGS] (the last entry's name
 * NULL): what parses the flags and what --help prints, one entry a flag. */
#define CTL_NFLAGS 23
static void flag_table(ctl_options *o, ctrain_flag flags[CTL_NFLAGS]) {
  const ctrain_flag t[] = {
      {.name = "kubeconfig",
       .kind = CTRAIN_FLAG_STRING,
       .dst = &o->kubeconfig,
       .metavar = "FILE",
       .help = "kubeconfig (default: $KUBECONFIG, then in-cluster)"},
      {.name = "context",
       .kind = CTRAIN_FLAG_STRING,
       .dst = &o->context,
       .metavar = "NAME",
       .help = "kubeconfig context (default: current-context)"},
      {.name = "namespace",
       .kind = CTRAIN_FLAG_STRING,
       .dst = &o->namespace_,
       .metavar = "NS",
       .help = "watch only NS (default: all namespaces)"},
      {.name = "workers",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->workers,
       .min = 1,
       .max = 256,
       .metavar = "N",
       .help = "concurrent reconciles (default 16)"},
      {.name = "kube-api-qps",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->qps,
       .min = 0,
       .max = 1e6,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "a positive number",
       .metavar = "Q",
       .help = "client rate limit, requests/s (default 20)"},
      {.name = "kube-api-burst",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->burst,
       .min = 1,
       .max = 1000000,
       .expect = "a positive integer",
       .metavar = "N",
       .help = "client burst (default 30)"},
      {.name = "leader-elect",
       .kind = CTRAIN_FLAG_BOOL,
       .dst = &o->leader_elect,
       .metavar = "[=true|false]",
       .help = "leader election on a coordination.k8s.io Lease (default true)"},
      {.name = "leader-elect-lease-name",
       .kind = CTRAIN_FLAG_STRING,
       .dst = &o->lease_name,
       .metavar = "NAME",
       .help = "Lease name (default ctrain-controller)"},
      {.name = "leader-elect-namespace",
       .kind = CTRAIN_FLAG_STRING,
       .dst = &o->lease_namespace,
       .metavar = "NS",
       .help = "Lease, key Secret ns (default: pod's, else ctrain-system)"},
      {.name = "leader-elect-lease-duration",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->lease_s,
       .min = 0,
       .max = 3600,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "seconds, over 0 and up to 3600",
       .metavar = "SECONDS",
       .help = "a standby takes over this long after the leader's last renewal (default 15)"},
      {.name = "leader-elect-renew-deadline",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->renew_s,
       .min = 0,
       .max = 3600,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "seconds, over 0 and up to 3600",
       .metavar = "SECONDS",
       .help =
           "the leader steps down when it could not renew for this long (default 10; < the lease)"},
      {.name = "leader-elect-retry-period",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->retry_s,
       .min = 0,
       .max = 3600,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "seconds, over 0 and up to 3600",
       .metavar = "SECONDS",
       .help = "between tries to renew or take over (default 2; < the renew deadline)"},
      {.name = "metrics-bind-address",
       .kind = CTRAIN_FLAG_STRING,
       .dst = &o->metrics_addr,
       .metavar = "ADDR",
       .help = "/metrics, /healthz, /readyz (default :8080; 0 disables)"},
      {.name = "metrics-max-jobs",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->metrics_max_jobs,
       .min = 0,
       .max = CTL_JOBMETRICS_MAX_LIMIT,
       .metavar = "N",
       .help = "jobs with per-job series (ctrain_job_*) on /metrics; past N, finished jobs first "
               "are left out (default 1000; 0: none)"},
      {.name = "progress-interval",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->progress_interval_s,
       .min = 0,
       .max = 86400,
       .expect = "seconds, 0 to 86400",
       .metavar = "SECONDS",
       .help = "poll each Running job's chief /progress this often, +-10% (default 10; 0 disables "
               "it, and with it every job's progressDeadlineSeconds: condition "
               "ProgressDeadlineNotEnforced)"},
      {.name = "progress-concurrency",
       .kind = CTRAIN_FLAG_INT,
       .dst = &o->progress_concurrency,
       .min = 1,
       .max = 16,
       .metavar = "N",
       .help = "polls in flight (default 4)"},
      {.name = "straggler-threshold",
       .kind = CTRAIN_FLAG_DOUBLE,
       .dst = &o->straggler_threshold,
       .min = 1,
       .max = 1000,
       .excl = CTRAIN_FLAG_EXCL_MIN,
       .expect = "a ratio over 1",
       .metavar = "RATIO",
       .help = "a worker whose ms/step stays at RATIO x the median for two polls is a Straggler "
               "(default 1.5)"},
      {.name = "enable-tfjob",
       .kind = CTRAIN_FLAG_BOOL,
       .dst = &o->enable_tfjob,
       .metavar = "[=true|false]",
       .help =
           "also serve kubeflow.org/v1 TFJobs (the TFJob CRD must be installed; default false)"},
      {.name = "log-level",
       .kind = CTRAIN_FLAG_FUNC,
       .dst = &o->log_level,
       .parse = ctrain_log_level_flag,
       .expect = CTRAIN_LOG_LEVEL_EXPECT,
       .metavar = "LEVEL",
       .help = "debug|info|warn|error (default info)"},
      {.name = "log-format",
       .kind = CTRAIN_FLAG_CHOICE_STR,
       .dst = &o->log_format,
       .choices = log_formats,
       .metavar = "FORMAT",
       .help = "text|json (default json)"},
      {.name = "release-finalizers",
       .kind = CTRAIN_FLAG_SET,
       .dst = &o->release_finalizers,
       .help = "for uninstall: remove the " CTRAIN_FINALIZER_ATTEMPT
               " finalizer from every pod in scope (all namespaces, or --namespace) that holds it, "
               "print a summary and exit (0: all done)"},
      {.name = "version",
       .kind = CTRAIN_FLAG_SET,
       .dst = &o->show_version,
       .help = "print the version and exit"},
      {.name = NULL}};
  _Static_assert(sizeof(t) == CTL_NFLAGS * sizeof(ctrain_flag), "CTL_NFLAGS is the table's size");
  memcpy(flags, t, sizeof(t));
}

/* --help: the column the help starts in and the width it is wrapped to. */
#define CTL_HELP_COL   33
#define CTL_HELP_WIDTH 90

void ctl_options_usage(FILE *f) {
  ctl_options o;
  ctrain_flag flags[CTL_NFLAGS];
  memset(&o, 0, sizeof(o));
  flag_table(&o, flags);
  fputs("Usage: ctrain-controller [flags]\n"
        "\n"
        "Runs the TrainingJob operator: watches " CTRAIN_API_GROUP_VERSION " TrainingJobs and\n"
        "creates, restarts and cleans up their pods, Service and Secret.\n"
        "\n"
        "Flags:\n",
        f);
  for (const ctrain_flag *fl = flags; fl->name; fl++)
    if (fl->help)
      ctrain_flags_usage_line(f, 0, fl->name, fl->metavar, fl->help, CTL_HELP_COL, CTL_HELP_WIDTH);
  ctrain_flags_usage_line(f, 'h', "help", NULL, "print this help and exit", CTL_HELP_COL,
                          CTL_HELP_WIDTH);
}

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

  ctrain_flag flags[CTL_NFLAGS];
  flag_table(o, flags);
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
