/* ctrain/tfconfig.h - the TF_CONFIG environment variable, as TensorFlow reads it.
 *
 * Parsing and validation follow tf.distribute's TFConfigClusterResolver and
 * multi_worker_util: the same errors (malformed JSON, unknown task type, task
 * type missing from the cluster, index out of range, more than one chief or
 * evaluator) and the same ranks as MultiWorkerMirroredStrategy (chief 0,
 * worker i is i+1 when a chief exists; the evaluator is outside the
 * collective). The renderer is the controller's side of the same contract.
 *
 * Beyond TF, a TF_CONFIG is rejected (CTRAIN_E_CONFIG, exit 78) when any
 * object in it repeats a key (JSON parsers disagree on which one wins) or
 * when any address in the cluster is not a valid "host:port" or
 * "[v6]:port": such a config can never work, so it must not look
 * retryable. */
#ifndef CTRAIN_TFCONFIG_H
#define CTRAIN_TFCONFIG_H

#include <stddef.h>

#include "ctrain/err.h"

#define TFCONFIG_HOST_MAX 253 /* longest host name (RFC 1035) or address literal */
#define TFCONFIG_PORT_MAX 5   /* digits of a port, "65535" */
#define TFCONFIG_ADDR_MAX (TFCONFIG_HOST_MAX + 2 + 1 + TFCONFIG_PORT_MAX) /* "[h]:p" */

typedef enum {
  TFCONFIG_CHIEF = 0,
  TFCONFIG_WORKER,
  TFCONFIG_EVALUATOR,
  TFCONFIG_PS,
} tfconfig_task_type;

typedef struct {
  int local;               /* 1: no TF_CONFIG (or no cluster): one local worker */
  tfconfig_task_type type; /* this task's type */
  int index;               /* this task's index within its type */
  int rank;                /* rank in the collective; -1 for the evaluator */
  int world;               /* collective members: chiefs + workers (1 when local) */
  int is_chief;            /* chief, or worker 0 when the cluster has no chief */
  int n_chief, n_worker, n_evaluator, n_ps;
  char **addrs;    /* (world) "host:port" of each collective member in rank order; owned */
  char *self_addr; /* this task's own address (also for the evaluator); owned, NULL if local */
} tfconfig;

/* Parses and validates `json` (borrowed; NULL or "" means no TF_CONFIG: a
 * single local worker). On error returns CTRAIN_E_PARSE (malformed JSON) or
 * CTRAIN_E_CONFIG with a message naming the field in errbuf (a duplicate
 * key, or a bad address with its task and whether it is this task's own),
 * and leaves `tc` empty. On success every address in tc->addrs and
 * tc->self_addr passes tfconfig_split_hostport. The caller owns what `tc`
 * holds and releases it with tfconfig_free. */
CTRAIN_NODISCARD ctrain_err tfconfig_parse(tfconfig *tc, const char *json, char *errbuf,
                                           size_t errlen);

/* Reads $TF_CONFIG and calls tfconfig_parse. */
CTRAIN_NODISCARD ctrain_err tfconfig_from_env(tfconfig *tc, char *errbuf, size_t errlen);

/* Releases what `tc` holds; accepts a zeroed or already-freed struct. */
void tfconfig_free(tfconfig *tc);

/* The one parser of a cluster address: splits "host:port" or "[v6]:port"
 * (borrowed, NUL-terminated) into host (brackets removed) and port, written
 * NUL-terminated to the caller's buffers of hlen and plen bytes.
 *   host: 1..TFCONFIG_HOST_MAX bytes of [A-Za-z0-9._-] (a DNS name or IPv4
 *         address), or in brackets an IPv6 address (inet_pton) with an
 *         optional %zone of [A-Za-z0-9._-]; it must also fit hlen.
 *   port: 1..TFCONFIG_PORT_MAX decimal digits, 1..65535; it must fit plen
 *         (6 bytes always do).
 * An unbracketed host with ':' is refused (ambiguous: write [v6]:port).
 * Returns CTRAIN_OK, or CTRAIN_E_CONFIG with a message quoting the address
 * and the reason in errbuf, and host and port set to "". */
CTRAIN_NODISCARD ctrain_err tfconfig_split_hostport(const char *addr, char *host, size_t hlen,
                                                    char *port, size_t plen, char *errbuf,
                                                    size_t errlen);

/* "chief", "worker", "evaluator", "ps". */
const char *tfconfig_type_name(tfconfig_task_type t);

typedef struct {
  const char *job;         /* job name (DNS label) */
  const char *ns;          /* namespace */
  int port;                /* collective port */
  int n_chief;             /* 0 or 1 */
  int n_worker;            /* >= 0 */
  int n_evaluator;         /* 0 or 1 */
  tfconfig_task_type type; /* the pod's task */
  int index;
} tfconfig_render_args;

/* Renders the TF_CONFIG of one pod: a cluster with chief/worker/evaluator
 * lists of "<job>-<type>-<i>.<job>.<ns>.svc:<port>", the task, and
 * "environment":"cloud". The result is validated with tfconfig_parse before
 * it is returned. *out is owned by the caller (free()). */
CTRAIN_NODISCARD ctrain_err tfconfig_render(const tfconfig_render_args *a, char **out, char *errbuf,
                                            size_t errlen);

/* The TF_CONFIG of one pod in two parts, so the cluster (every address,
 * quadratic when each of n pods carries it) is stored once: the cluster
 * object alone (tfconfig_render's "cluster" value, checked as a whole
 * TF_CONFIG; a->type and a->index are not used), and the pod's TF_CONFIG
 * with the cluster replaced by the reference $(var), which the kubelet
 * expands from the variable `var` (defined earlier in the container's env,
 * e.g. from a ConfigMap key holding the cluster): expanded, it is exactly
 * tfconfig_render's. var must be an environment variable name
 * ([A-Za-z_][A-Za-z0-9_]*); the task must be within the counts, else
 * CTRAIN_E_INVAL. *out owned by the caller (free()). */
CTRAIN_NODISCARD ctrain_err tfconfig_render_cluster(const tfconfig_render_args *a, char **out,
                                                    char *errbuf, size_t errlen);
CTRAIN_NODISCARD ctrain_err tfconfig_render_ref(const tfconfig_render_args *a, const char *var,
                                                char **out, char *errbuf, size_t errlen);

/* The length (bytes, no NUL) of what tfconfig_render_cluster returns,
 * computed without rendering it (a validation that runs on every pass);
 * CTRAIN_E_INVAL on the arguments tfconfig_render refuses. */
CTRAIN_NODISCARD ctrain_err tfconfig_cluster_size(const tfconfig_render_args *a, size_t *out);

#endif
