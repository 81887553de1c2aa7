/* ctrain/lnode_node.h - the Node object and Lease of ctrain-localnode.
 *
 * Capacity is what the machine has: online CPUs, MemTotal, a pod count,
 * ephemeral storage of the state directory, and nvidia.com/gpu when GPUs
 * are present (/dev/nvidiaN device files, or `nvidia-smi -L`). */
#ifndef CTRAIN_LNODE_NODE_H
#define CTRAIN_LNODE_NODE_H

#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"

typedef struct lnode_resources {
  long cpus;
  long long memory_kib;
  long long storage_bytes; /* 0: not reported */
  int pods;
  int gpus;
} lnode_resources;

/* Counts /dev/nvidiaN files in `dev_dir` (NULL: "/dev"); when none, asks
 * `nvidia-smi -L` if it is on PATH. 0 without GPUs. */
int lnode_count_gpus(const char *dev_dir);

/* Reads MemTotal (kB) from a /proc/meminfo text; -1 when absent. */
long long lnode_meminfo_total_kib(const char *meminfo);

/* Fills r from this machine (`state_dir` for storage; gpus < 0: detect). */
void lnode_resources_detect(lnode_resources *r, const char *state_dir, int max_pods, int gpus);

typedef struct lnode_node_info {
  const char *name;
  const char *internal_ip;
  const char *version; /* of ctrain */
  int ready;           /* Ready condition True/False */
  const char *ready_reason;
  const char *ready_message;
} lnode_node_info;

/* The Node object to create (owned by the caller): labels, capacity,
 * allocatable, conditions, addresses, nodeInfo. `now` stamps the
 * conditions' heartbeat and transition times. */
cJSON *lnode_node_object(const lnode_node_info *ni, const lnode_resources *r, time_t now);

/* The `status` part alone (owned by the caller), for a status patch. */
cJSON *lnode_node_status(const lnode_node_info *ni, const lnode_resources *r, time_t now);

/* Removes taints of `node` whose key is node.kubernetes.io/not-ready or
 * node.kubernetes.io/unreachable from spec.taints; returns how many it
 * removed (the caller then writes the node back). */
int lnode_node_drop_notready_taints(cJSON *node);

/* A kube-node-lease Lease for node `name` (uid for the ownerReference may be
 * NULL), renewed at `now`. Owned by the caller. */
cJSON *lnode_lease_object(const char *name, const char *node_uid, int duration_s,
                          const struct timespec *now);

#endif
