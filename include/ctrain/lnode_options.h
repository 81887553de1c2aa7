/* ctrain/lnode_options.h - ctrain-localnode's command-line flags. */
#ifndef CTRAIN_LNODE_OPTIONS_H
#define CTRAIN_LNODE_OPTIONS_H

#include <stdio.h>

#include "ctrain/err.h"

#define LNODE_MAX_BIN_DIRS 16

typedef struct lnode_options {
  const char *kubeconfig;                   /* NULL: $KUBECONFIG, in-cluster, ~/.kube/config */
  const char *context;                      /* NULL: current-context */
  const char *node_name;                    /* NULL: hostname (lower-cased by main) */
  const char *state_dir;                    /* default /var/lib/ctrain-localnode */
  const char *pod_cidr;                     /* default 10.88.0.0/24 */
  const char *bridge;                       /* default ctrbr0 */
  const char *cluster_domain;               /* default cluster.local */
  const char *node_ip;                      /* NULL: the bridge's address */
  const char *bin_dirs[LNODE_MAX_BIN_DIRS]; /* --bin-dir, in order */
  int n_bin_dirs;
  int max_pods;           /* default 110 */
  int gpus;               /* -1: detect */
  int lease_duration_s;   /* default 40 */
  int heartbeat_s;        /* lease renew period, default 10 */
  int status_period_s;    /* node status period, default 60 */
  int shutdown_grace_s;   /* grace for pods when the agent stops, default 10 */
  const char *log_level;  /* debug|info|warn|error */
  const char *log_format; /* text|json */
  int show_help;
  int show_version;
} lnode_options;

/* Fills `o` from argv (strings borrow from argv). CTRAIN_E_INVAL with a
 * message naming the flag for a bad flag or value. */
ctrain_err lnode_options_parse(lnode_options *o, int argc, char **argv, char *err, size_t errlen);

void lnode_options_usage(FILE *f);

#endif
