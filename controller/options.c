/* options.c - ctrain-controller flag parsing (getopt_long). */
#include "controller/options.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/log.h"

enum {
  OPT_KUBECONFIG = 256,
  OPT_CONTEXT,
  OPT_NAMESPACE,
  OPT_WORKERS,
  OPT_QPS,
  OPT_BURST,
  OPT_LEADER_ELECT,
  OPT_LEASE_NAME,
  OPT_LEASE_NAMESPACE,
  OPT_METRICS_ADDR,
  OPT_LOG_LEVEL,
  OPT_LOG_FORMAT,
  OPT_VERSION,
};

static const struct option long_opts[] = {
    {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"namespace", required_argument, NULL, OPT_NAMESPACE},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"kube-api-qps", required_argument, NULL, OPT_QPS},
    {"kube-api-burst", required_argument, NULL, OPT_BURST},
    {"leader-elect", optional_argument, NULL, OPT_LEADER_ELECT},
    {"leader-elect-lease-name", required_argument, NULL, OPT_LEASE_NAME},
    {"leader-elect-namespace", required_argument, NULL, OPT_LEASE_NAMESPACE},
    {"metrics-bind-address", required_argument, NULL, OPT_METRICS_ADDR},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

void ctl_options_usage(FILE *f) {
  fputs(
      "Usage: ctrain-controller [flags]\n"
      "\n"
      "Runs the TrainingJob operator: watches ctrain.dev/v1alpha1 TrainingJobs and\n"
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
      "  --leader-elect-namespace NS    Lease namespace (default: the pod's, else ctrain-system)\n"
      "  --metrics-bind-address ADDR    /metrics, /healthz, /readyz (default :8080; 0 disables)\n"
      "  --log-level LEVEL              debug|info|warn|error (default info)\n"
      "  --log-format FORMAT            text|json (default json)\n"
      "  --version                      print the version and exit\n"
      "  -h, --help                     print this help and exit\n",
      f);
}

/* Parses a whole decimal int in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

static int parse_bool(const char *s, int *out) {
  if (!s || !strcmp(s, "true") || !strcmp(s, "1")) {
    *out = 1;
    return 0;
  }
  if (!strcmp(s, "false") || !strcmp(s, "0")) {
    *out = 0;
    return 0;
  }
  return -1;
}

ctrain_err ctl_options_parse(ctl_options *o, int argc, char **argv, char *errbuf, size_t errlen) {
  memset(o, 0, sizeof(*o));
  o->workers = 16; /* a pass is ~6 requests in a row: 4 could not keep the apiserver busy */
  o->qps = 20.0;
  o->burst = 30;
  o->leader_elect = 1;
  o->lease_name = "ctrain-controller";
  o->metrics_addr = ":8080";
  o->log_level = "info";
  o->log_format = "json";

  optind = 0; /* reset: tests call this more than once */
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    switch (c) {
    case OPT_KUBECONFIG:
      o->kubeconfig = optarg;
      break;
    case OPT_CONTEXT:
      o->context = optarg;
      break;
    case OPT_NAMESPACE:
      o->namespace_ = optarg;
      break;
    case OPT_WORKERS:
      if (parse_int(optarg, 1, 256, &o->workers)) {
        snprintf(errbuf, errlen, "--workers: '%s' is not an integer in 1..256", optarg);
        return CTRAIN_E_INVAL;
      }
      break;
    case OPT_QPS: {
      char *end = NULL;
      o->qps = strtod(optarg, &end);
      if (end == optarg || *end || !(o->qps > 0.0) || o->qps > 1e6) {
        snprintf(errbuf, errlen, "--kube-api-qps: '%s' is not a positive number", optarg);
        return CTRAIN_E_INVAL;
      }
      break;
    }
    case OPT_BURST:
      if (parse_int(optarg, 1, 1000000, &o->burst)) {
        snprintf(errbuf, errlen, "--kube-api-burst: '%s' is not a positive integer", optarg);
        return CTRAIN_E_INVAL;
      }
      break;
    case OPT_LEADER_ELECT:
      if (parse_bool(optarg, &o->leader_elect)) {
        snprintf(errbuf, errlen, "--leader-elect: '%s' is not true or false", optarg);
        return CTRAIN_E_INVAL;
      }
      break;
    case OPT_LEASE_NAME:
      o->lease_name = optarg;
      break;
    case OPT_LEASE_NAMESPACE:
      o->lease_namespace = optarg;
      break;
    case OPT_METRICS_ADDR:
      o->metrics_addr = optarg;
      break;
    case OPT_LOG_LEVEL:
      if (ctrain_log_level_parse(optarg) < 0) {
        snprintf(errbuf, errlen, "--log-level: '%s' is not one of debug, info, warn, error",
                 optarg);
        return CTRAIN_E_INVAL;
      }
      o->log_level = optarg;
      break;
    case OPT_LOG_FORMAT:
      if (strcmp(optarg, "text") && strcmp(optarg, "json")) {
        snprintf(errbuf, errlen, "--log-format: '%s' is not text or json", optarg);
        return CTRAIN_E_INVAL;
      }
      o->log_format = optarg;
      break;
    case OPT_VERSION:
      o->show_version = 1;
      break;
    case 'h':
      o->show_help = 1;
      break;
    case ':':
      snprintf(errbuf, errlen, "%s: missing value", argv[optind - 1]);
      return CTRAIN_E_INVAL;
    default:
      snprintf(errbuf, errlen, "%s: unknown flag", argv[optind - 1]);
      return CTRAIN_E_INVAL;
    }
  }
  if (optind < argc) {
    snprintf(errbuf, errlen, "unexpected argument '%s'", argv[optind]);
    return CTRAIN_E_INVAL;
  }
  return CTRAIN_OK;
}
