/* options.c - ctrain-localnode flags (see ctrain/lnode_options.h). */
#include "ctrain/lnode_options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/log.h"
#include "ctrain/lnode_util.h"

void lnode_options_usage(FILE *f) {
  fputs("Usage: ctrain-localnode [flags]\n"
        "A node agent for development and tests: registers a Node and runs the pods bound to\n"
        "it as local processes, each in its own network and mount namespace. Needs root\n"
        "(CAP_SYS_ADMIN, CAP_NET_ADMIN) and `ip` from iproute2.\n\n"
        "  --kubeconfig PATH       kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
        "  --context NAME          kubeconfig context\n"
        "  --node-name NAME        Node name (default: hostname)\n"
        "  --state-dir DIR         logs, volumes, claims (default /var/lib/ctrain-localnode)\n"
        "  --pod-cidr CIDR         private pod range (default 10.88.0.0/24)\n"
        "  --bridge NAME           host bridge (default ctrbr0)\n"
        "  --bin-dir DIR           searched before PATH for commands (repeatable)\n"
        "  --cluster-domain D      default cluster.local\n"
        "  --node-ip IP            InternalIP (default: the bridge's address)\n"
        "  --max-pods N            default 110\n"
        "  --gpus N                nvidia.com/gpu capacity (default: detect)\n"
        "  --lease-duration S      node Lease duration (default 40)\n"
        "  --heartbeat S           Lease renew period (default 10)\n"
        "  --status-period S       Node status period (default 60)\n"
        "  --shutdown-grace S      grace for pods when the agent stops (default 10)\n"
        "  --log-level L           debug|info|warn|error (default info)\n"
        "  --log-format F          text|json (default text)\n"
        "  --help, --version\n",
        f);
}

static ctrain_err int_arg(const char *flag, const char *v, int lo, int hi, int *out, char *err,
                          size_t errlen) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "%s: '%s' is not an integer in [%d, %d]", flag,
                       v, lo, hi);
  *out = (int)x;
  return CTRAIN_OK;
}

ctrain_err lnode_options_parse(lnode_options *o, int argc, char **argv, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  memset(o, 0, sizeof(*o));
  o->state_dir = "/var/lib/ctrain-localnode";
  o->pod_cidr = "10.88.0.0/24";
  o->bridge = "ctrbr0";
  o->cluster_domain = "cluster.local";
  o->max_pods = 110;
  o->gpus = -1;
  o->lease_duration_s = 40;
  o->heartbeat_s = 10;
  o->status_period_s = 60;
  o->shutdown_grace_s = 10;
  o->log_level = "info";
  o->log_format = "text";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = NULL;
    char name[64];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      o->show_help = 1;
      continue;
    }
    if (!strcmp(a, "--version")) {
      o->show_version = 1;
      continue;
    }
    if (strncmp(a, "--", 2))
      return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "unexpected argument '%s'", a);
    const char *eq = strchr(a, '=');
    if (eq) {
      if ((size_t)(eq - a) >= sizeof(name))
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "unknown flag '%s'", a);
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = '\0';
      v = eq + 1;
    } else {
      if (strlen(a) >= sizeof(name))
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "unknown flag '%s'", a);
      memcpy(name, a, strlen(a) + 1);
      static const char *known[] = {"--kubeconfig", "--context",        "--node-name",
                                    "--state-dir",  "--pod-cidr",       "--bridge",
                                    "--bin-dir",    "--cluster-domain", "--node-ip",
                                    "--max-pods",   "--gpus",           "--lease-duration",
                                    "--heartbeat",  "--status-period",  "--shutdown-grace",
                                    "--log-level",  "--log-format"};
      int is_known = 0;
      for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
        is_known |= !strcmp(name, known[k]);
      if (!is_known)
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "unknown flag '%s'", name);
      if (i + 1 >= argc)
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "%s needs a value", name);
      v = argv[++i];
    }
    if (!strcmp(name, "--kubeconfig"))
      o->kubeconfig = v;
    else if (!strcmp(name, "--context"))
      o->context = v;
    else if (!strcmp(name, "--node-name"))
      o->node_name = v;
    else if (!strcmp(name, "--state-dir"))
      o->state_dir = v;
    else if (!strcmp(name, "--pod-cidr"))
      o->pod_cidr = v;
    else if (!strcmp(name, "--bridge")) {
      if (!*v || strlen(v) > 15)
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "--bridge: '%s' is not 1-15 characters", v);
      o->bridge = v;
    } else if (!strcmp(name, "--bin-dir")) {
      if (o->n_bin_dirs >= LNODE_MAX_BIN_DIRS)
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "--bin-dir: at most %d",
                           LNODE_MAX_BIN_DIRS);
      o->bin_dirs[o->n_bin_dirs++] = v;
    } else if (!strcmp(name, "--cluster-domain"))
      o->cluster_domain = v;
    else if (!strcmp(name, "--node-ip"))
      o->node_ip = v;
    else if (!strcmp(name, "--max-pods"))
      result = int_arg(name, v, 1, 1000000, &o->max_pods, err, errlen);
    else if (!strcmp(name, "--gpus"))
      result = int_arg(name, v, 0, 1024, &o->gpus, err, errlen);
    else if (!strcmp(name, "--lease-duration"))
      result = int_arg(name, v, 1, 3600, &o->lease_duration_s, err, errlen);
    else if (!strcmp(name, "--heartbeat"))
      result = int_arg(name, v, 1, 3600, &o->heartbeat_s, err, errlen);
    else if (!strcmp(name, "--status-period"))
      result = int_arg(name, v, 1, 3600, &o->status_period_s, err, errlen);
    else if (!strcmp(name, "--shutdown-grace"))
      result = int_arg(name, v, 0, 3600, &o->shutdown_grace_s, err, errlen);
    else if (!strcmp(name, "--log-level")) {
      if (ctrain_log_level_parse(v) < 0)
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen,
                           "--log-level: '%s' is not debug|info|warn|error", v);
      o->log_level = v;
    } else if (!strcmp(name, "--log-format")) {
      if (strcmp(v, "text") && strcmp(v, "json"))
        return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "--log-format: '%s' is not text|json", v);
      o->log_format = v;
    } else
      return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "unknown flag '%s'", name);
    if (result)
      return result;
  }
  return CTRAIN_OK;
}
