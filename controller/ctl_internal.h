/* controller/ctl_internal.h - what the parts of ctrain-controller's run
 * loop share: the controller's state and the functions each part gives the
 * others. Private to these files; the API is controller/controller.h.
 *
 *   controller.c    setup, the workers, metrics and health, teardown, ctl_run
 *   ctl_handlers.c  the informers and their handlers: every event a job key
 *   ctl_pass.c      one pass of one key: decide, execute; orphans released
 *   ctl_leader.c    leader election's callbacks, the leader label on our pod */
#ifndef CTRAIN_CTL_INTERNAL_H
#define CTRAIN_CTL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "controller/executor.h"
#include "controller/http.h"
#include "controller/jobkind.h"
#include "controller/jobstate.h"
#include "controller/jobtoken.h"
#include "controller/metrics.h"
#include "controller/options.h"
#include "controller/progress.h"
#include "controller/slowstart.h"
#include "ctrain/err.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/kube_events.h"
#include "ctrain/kube_informer.h"
#include "ctrain/kube_lease.h"
#include "ctrain/kube_workqueue.h"

#define MAX_WORKERS    256
#define NS_PER_S       1000000000LL
#define OWNED_BATCH_NS (1000 * 1000000LL) /* pod/Service events of one job, one pass */

struct ctl;

/* An informer handler's ud: the controller and the kind it watches. */
typedef struct {
  struct ctl *c;
  const ctl_kind *kind;
} kind_ud;

typedef struct ctl {
  const ctl_options *o;
  kube_config *cfg;
  kube_client *client;
  kube_informer *jobs[CTL_NKINDS]; /* by ctl_kind_id; NULL: a kind this run does not serve */
  kind_ud kinds[CTL_NKINDS];       /* the ud of each one's handlers */
  kube_informer *pods, *services;
  kube_informer *workloads; /* Kueue Workloads of the jobs (controller/kueue.h) */
  /* TrainingRuntimes (of the namespace served, or all) and
   * ClusterTrainingRuntimes (NULL when one namespace is served):
   * controller/runtime.h. */
  kube_informer *runtimes, *cluster_runtimes;
  kube_workqueue *q;
  kube_lease *lease;
  kube_events *events;
  ctl_http *http;
  ctl_progress *progress; /* the poller of the chiefs' /progress; NULL: off */
  slowstart_pool *create_pool;
  ctl_jobs *states; /* job key -> expectations and token attempt, locked per job */
  jobtoken_key key; /* derives every job token; read once at start */
  ctl_metrics metrics;
  ctl_exec exec;
  pthread_t workers[MAX_WORKERS];
  int nworkers;
  atomic_int leading;
  atomic_int lost_leadership;
  int marked;           /* the leader label last written on our pod (leader.h); -1: unknown */
  int64_t mark_next_ns; /* when a failed write of it is tried again */
  int64_t trim_next_ns; /* when ctl_tick next gives the heap's free pages back */
} ctl;

/* The TrainingJob informer: the gauge's, the progress poller's. */
#define TRAININGJOBS(c) ((c)->jobs[CTL_KIND_TRAININGJOB])

/* controller.c */

/* Whether ctl_request_stop was called (a signal). */
int ctl_stop_requested(void);

/* The executor's `stopping` (controller/executor.h), ud a ctl: stopping,
 * or leadership lost. */
int ctl_stopping(void *ud);

/* The main thread's loop body (every 100 ms, leading or waiting to): the
 * leader label on our pod (ctl_leader_sync_mark), and, every
 * HEAP_TRIM_PERIOD_NS, the heap's free pages given back to the kernel. */
void ctl_tick(ctl *c);

/* Gives the pages of the heap's free chunks back to the kernel (glibc's
 * malloc_trim; nothing elsewhere). */
void ctl_heap_trim(void);

/* The controller's own namespace (its Lease and its key Secret): the
 * --leader-elect-namespace flag, else the pod's (POD_NAMESPACE), else
 * ctrain-system. Static or borrowed. */
const char *ctl_own_namespace(const ctl_options *o);

/* ctl_handlers.c */

/* Creates and starts the informers: the owned objects' (pods, Services,
 * Workloads), whose handlers enqueue their controlling job after
 * OWNED_BATCH_NS; the runtimes', whose handlers enqueue the jobs waiting
 * for one; then one per kind served, whose handlers enqueue the job and
 * drop a deleted one's state. */
CTRAIN_NODISCARD ctrain_err ctl_start_informers(ctl *c);

/* ctl_pass.c */

/* One reconcile of the key `k`. Returns CTRAIN_OK, or an error that makes
 * the caller requeue the key with backoff. *requeue_after_s is set when
 * the result asks for a delayed requeue (-1: none). */
CTRAIN_NODISCARD ctrain_err ctl_reconcile_key(ctl *c, const ctl_key *k, int64_t *requeue_after_s);

/* ctl_leader.c */

/* Waits for leadership of the Lease (or takes it when election is off). */
CTRAIN_NODISCARD ctrain_err ctl_leader_run(ctl *c);

/* Brings the leader label on our pod in line with whether we lead. Called
 * from the main thread only. */
void ctl_leader_sync_mark(ctl *c);

#endif
