/* controller.c - ctrain-controller's run loop; see controller/controller.h.
 *
 * Informers feed a work queue of job keys, typed (controller/jobkind.h:
 * one table of the kinds served, TrainingJob and with --enable-tfjob
 * TFJob); pod, Service and Workload events map to their controlling job
 * (ctl_handlers.c). A worker takes a key and makes one pass of it
 * (ctl_pass.c): the reconcile input from the caches, the pure
 * recon_reconcile with the job's expectations (controller/jobstate.h), the
 * result to the executor (controller/executor.h). Only the leader runs
 * informers and workers (ctl_leader.c). This file: setup, the workers,
 * metrics and health, teardown. controller/ctl_internal.h is what the
 * parts share.
 *
 * Workers decide in parallel: nothing is locked across a whole pass. The
 * queue never hands one key to two workers; what workers share is locked
 * narrowly where it lives: the map of job states (a lookup), one job's
 * state (that job's lock), the metrics (atomics and the histogram's lock),
 * the informer caches, the queue and the event recorder (their own locks).
 *
 * No Secret of a job's namespace is ever read: each attempt's token is
 * derived from the controller's key (controller/jobtoken.h), which lives
 * in one Secret of the controller's own namespace, created or read once at
 * start. The job state remembers which attempt's token Secret exists, so a
 * pass creates it once per attempt (once more after a restart, answered
 * AlreadyExists). */
#include "controller/controller.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/crypto.h>

#include "controller/ctl_internal.h"
#include "ctrain/clock.h"
#include "ctrain/json.h"
#include "ctrain/log.h"
#include "ctrain/version.h"

#define CREATE_POOL_THREADS 16   /* pod creates in flight, besides one per worker */
#define EVENT_QUEUE_MAX     4096 /* events waiting to be written; more are dropped */
#define EVENT_DRAIN_MS      2000 /* at shutdown, write queued events for at most this */

/* Set by the signal handler (on whichever thread the signal lands) and read
 * by the main thread and the lease thread (on_stopped): a lock-free atomic,
 * which C11 allows in a handler, where volatile sig_atomic_t orders nothing
 * between threads. */
static atomic_int stop_requested;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "stop_requested must be lock-free for the handler");

void ctl_request_stop(void) {
  atomic_store(&stop_requested, 1);
}

/* ---- what the parts share (controller/ctl_internal.h) --------------------------- */

int ctl_stop_requested(void) {
  return atomic_load(&stop_requested);
}

int ctl_stopping(void *ud) {
  ctl *c = ud;
  return atomic_load(&stop_requested) || atomic_load(&c->lost_leadership);
}

const char *ctl_own_namespace(const ctl_options *o) {
  const char *ns = o->lease_namespace;
  if (!ns || !*ns)
    ns = getenv("POD_NAMESPACE");
  if (!ns || !*ns)
    ns = "ctrain-system";
  return ns;
}

/* ---- the job token, for the progress poller ------------------------------ */

/* The job token of `attempt` (hex, as the pods get it in CTRAIN_JOB_TOKEN):
 * derived from the controller's key, as the reconciler derives it for the
 * attempt's Secret, so the poller reads no Secret. */
static ctrain_err progress_token(void *ud, const cJSON *job, int attempt, char *out, size_t len) {
  ctl *c = ud;
  const char *uid = ctrain_json_str(ctrain_json_get(job, "metadata"), "uid");
  if (!uid || !*uid)
    return CTRAIN_E_NOTFOUND;
  return jobtoken_derive(&c->key, uid, attempt, out, len);
}

/* ---- the workers ----------------------------------------------------------------- */

/* A worker: takes a key, reconciles it, requeues it as the pass says. */
static void *worker_main(void *arg) {
  ctl *c = arg;
  for (;;) {
    char *key = NULL;
    ctrain_err r = kube_workqueue_get(c->q, -1, &key);
    if (r == CTRAIN_E_CANCELLED)
      break;
    if (r)
      continue;
    int64_t after = -1;
    double t0 = ctrain_mono_s();
    ctl_key k;
    /* A string that is no key of ours is dropped, as a pass without error. */
    ctrain_err result = ctl_key_parse(key, &k) ? CTRAIN_OK : ctl_reconcile_key(c, &k, &after);
    ctl_metrics_observe(&c->metrics, ctrain_mono_s() - t0);
    if (result) {
      atomic_fetch_add(&c->metrics.reconcile_errors, 1);
      if (kube_workqueue_add_rate_limited(c->q, key))
        LOG_WARN("%s: out of memory requeueing it after a failed pass; the informer's resync "
                 "queues it again",
                 key);
    } else {
      kube_workqueue_forget(c->q, key);
    }
    if (after >= 0 && kube_workqueue_add_after(c->q, key, after * NS_PER_S + NS_PER_S / 2))
      LOG_WARN("%s: out of memory queueing its pass in %lld s; the informer's resync queues it "
               "again",
               key, (long long)after);
    kube_workqueue_done(c->q, key);
    free(key);
  }
  return NULL;
}

/* ---- metrics, health ------------------------------------------------------------- */

/* Whether the informer of every kind served has synced, waiting up to
 * `wait_ms` for each (0: a look). The TrainingJob one must exist. */
static int jobs_synced(ctl *c, int wait_ms) {
  if (!TRAININGJOBS(c))
    return 0;
  for (int i = 0; i < CTL_NKINDS; i++) {
    if (!ctl_kind_enabled(&ctl_kinds[i], c->o))
      continue;
    if (!c->jobs[i] || (wait_ms ? kube_informer_wait_synced(c->jobs[i], wait_ms)
                                : !kube_informer_has_synced(c->jobs[i])))
      return 0;
  }
  return 1;
}

static ctrain_err render_metrics(void *ud, ctrain_buf *out) {
  ctl *c = ud;
  ctl_metrics_gauges g = {
      .kube_requests = c->client ? kube_client_requests(c->client) : 0,
      .leader = atomic_load(&c->leading),
      .queue_depth = c->q ? kube_workqueue_len(c->q) : 0,
      .queue_waiting = c->q ? kube_workqueue_waiting(c->q) : 0,
      .trainingjobs = TRAININGJOBS(c) ? kube_informer_len(TRAININGJOBS(c)) : 0,
  };
  if (c->events)
    g.events = kube_events_get_counts(c->events);
  return ctl_metrics_render(&c->metrics, &g, out);
}

/* The event writer holds events back (2 s at most) while keys wait in the
 * queue or creates are in flight: under a burst of new jobs the pods reach
 * the apiserver first, and the events after them. */
static int creates_first(void *ud) {
  ctl *c = ud;
  return atomic_load(&c->metrics.creates_in_flight) > 0 || (c->q && kube_workqueue_len(c->q) > 0);
}

/* Ready: the leader once its caches synced; a standby is ready too (it
 * serves nothing but is healthy), so a rollout does not wait on election. */
static int ready(void *ud) {
  ctl *c = ud;
  if (!atomic_load(&c->leading))
    return !c->o->leader_elect ? 0 : 1;
  return jobs_synced(c, 0) && kube_informer_has_synced(c->pods) &&
         kube_informer_has_synced(c->services);
}

/* ---- run ------------------------------------------------------------------------ */

/* Fails fast, with the apiserver's words, when the CRD of a kind this run
 * serves is missing or RBAC forbids listing it: the one thing the
 * controller cannot work without. */
static ctrain_err check_job_lists(ctl *c) {
  for (int i = 0; i < CTL_NKINDS; i++) {
    const ctl_kind *k = &ctl_kinds[i];
    if (!ctl_kind_enabled(k, c->o))
      continue;
    kube_list_opts lo = {.limit = 1};
    kube_status st;
    cJSON *l = NULL;
    ctrain_err result = kube_client_list(c->client, k->exec->gvr, c->o->namespace_, &lo, &l, &st);
    cJSON_Delete(l);
    if (result) {
      LOG_ERROR("%s%scannot list %s.%s%s: %s (HTTP %d %s: %s)", k->flag ? k->flag : "",
                k->flag ? ": " : "", k->exec->gvr->resource, k->exec->gvr->group, k->crd_hint,
                ctrain_strerror(result), st.http_code, st.reason, st.message);
      return result;
    }
  }
  return CTRAIN_OK;
}

/* Everything that does not need leadership: the client (and a check that
 * the CRD is there and RBAC lets us list it), the job states, the event
 * recorder, the create pool, the queue, the metrics server. */
static ctrain_err setup(ctl *c) {
  ctrain_err result;
  const ctl_options *o = c->o;
  char err[512] = "";
  result = kube_config_load_default(o->kubeconfig, o->context, &c->cfg, err, sizeof(err));
  if (result) {
    LOG_ERROR("kubeconfig: %s", err);
    return result;
  }
  LOG_INFO("API server %s (configuration: %s)", c->cfg->server, c->cfg->source);
  kube_client_opts co = {.qps = o->qps, .burst = o->burst, .http1 = 1}; /* ~40 threads */
  result = kube_client_new(c->cfg, &co, &c->client, err, sizeof(err));
  if (result) {
    LOG_ERROR("kube client: %s", err);
    return result;
  }
  if ((result = check_job_lists(c)))
    return result;
  /* The token key: a missing RBAC rule on the key Secret stops us here,
   * with the apiserver's words, rather than at the first job. */
  result = jobtoken_key_load(c->client, ctl_own_namespace(o), JOBTOKEN_KEY_SECRET, &c->key, err,
                             sizeof(err));
  if (result) {
    LOG_ERROR("job token key: %s", err);
    return result;
  }
  LOG_INFO("job token key: secret %s/%s", ctl_own_namespace(o), JOBTOKEN_KEY_SECRET);
  const char *pod = getenv("POD_NAME");
  kube_events_opts eo = {.component = "ctrain-controller",
                         .instance = pod && *pod ? pod : NULL,
                         .queue_max = EVENT_QUEUE_MAX,
                         .yield = creates_first,
                         .yield_ud = c};
  kube_workqueue_opts qo = {.qps = 10, .burst = 100};
  /* The queue before the event writer starts: creates_first reads it. */
  if ((result = ctl_jobs_new(&c->states)) || (result = kube_workqueue_new(&qo, &c->q)) ||
      (result = kube_events_new(c->client, &eo, &c->events)) ||
      (result = kube_events_start(c->events)) ||
      (result = slowstart_pool_new(CREATE_POOL_THREADS, &c->create_pool)))
    return result;
  c->exec = (ctl_exec){.client = c->client,
                       .create_pool = c->create_pool,
                       .events = c->events,
                       .metrics = &c->metrics,
                       .stopping = ctl_stopping,
                       .stopping_ud = c};
  if (strcmp(o->metrics_addr, "0")) {
    ctl_http_handlers h = {render_metrics, ready, c};
    int port = 0;
    result = ctl_http_start(o->metrics_addr, &h, &c->http, &port, err, sizeof(err));
    if (result) {
      LOG_ERROR("%s", err);
      return result;
    }
    LOG_INFO("serving /metrics, /healthz, /readyz on port %d", port);
  }
  return CTRAIN_OK;
}

/* The informers, until every cache synced. They start before the election
 * (a warm standby, as controller-runtime's caches): a new leader's first
 * write then waits for the Lease only, not for a relist of every pod
 * (bench/scale.py --lifecycle: 1.4 s at 5,000 pods, 2.5 s at 10,000). Their
 * handlers only enqueue keys; nothing is written before start_workers. */
static ctrain_err start_caches(ctl *c) {
  ctrain_err result = ctl_start_informers(c);
  if (result) {
    LOG_ERROR("informers: %s", ctrain_strerror(result));
    return result;
  }
  while (!atomic_load(&stop_requested) &&
         (!jobs_synced(c, 200) || kube_informer_wait_synced(c->pods, 200) ||
          kube_informer_wait_synced(c->services, 200)))
    ;
  if (atomic_load(&stop_requested))
    return CTRAIN_OK;
  LOG_INFO("caches synced: %zu trainingjobs, %zu pods, %zu services",
           kube_informer_len(TRAININGJOBS(c)), kube_informer_len(c->pods),
           kube_informer_len(c->services));
  return CTRAIN_OK;
}

/* The workers, once this replica leads (its caches synced, start_caches). No
 * worker may decide on a partial cache: a pod informer that has not listed
 * yet would look like "no pods" and duplicate them. */
static ctrain_err start_workers(ctl *c) {
  ctrain_err result;
  for (; c->nworkers < c->o->workers && c->nworkers < MAX_WORKERS; c->nworkers++)
    if (pthread_create(&c->workers[c->nworkers], NULL, worker_main, c))
      return CTRAIN_E_NOMEM;
  ctl_progress_opts po = {.interval_s = c->o->progress_interval_s,
                          .threshold = c->o->straggler_threshold,
                          .concurrency = c->o->progress_concurrency,
                          .jobs = TRAININGJOBS(c),
                          .pods = c->pods,
                          .states = c->states,
                          .q = c->q,
                          .metrics = &c->metrics,
                          .token = progress_token,
                          .token_ud = c};
  result = ctl_progress_start(&po, &c->progress);
  if (result)
    return result;
  LOG_INFO("ctrain-controller %s running: %d workers, namespace %s", CTRAIN_VERSION, c->nworkers,
           c->o->namespace_ ? c->o->namespace_ : "(all)");
  return CTRAIN_OK;
}

/* Stops and frees everything setup, start_caches, ctl_leader_run and start_workers made, in the
 * order their users go. */
static void teardown(ctl *c) {
  ctl_progress_stop(c->progress); /* it reads the caches, states and queue below */
  if (c->q)
    kube_workqueue_shutdown(c->q);
  for (int i = 0; i < c->nworkers; i++)
    pthread_join(c->workers[i], NULL);
  ctl_http_stop(c->http);              /* /metrics and /readyz read what goes below */
  slowstart_pool_free(c->create_pool); /* its threads' handles go before the client */
  kube_events_stop(c->events, EVENT_DRAIN_MS);
  for (int i = 0; i < CTL_NKINDS; i++)
    kube_informer_free(c->jobs[i]);
  kube_informer_free(c->pods);
  kube_informer_free(c->services);
  kube_informer_free(c->workloads);
  kube_informer_free(c->runtimes);
  kube_informer_free(c->cluster_runtimes);
  kube_lease_free(c->lease); /* releases the Lease so a standby takes over at once */
  kube_events_free(c->events);
  kube_workqueue_free(c->q);
  ctl_jobs_free(c->states);
  kube_client_free(c->client);
  kube_config_free(c->cfg);
  ctl_metrics_destroy(&c->metrics);
  OPENSSL_cleanse(&c->key, sizeof(c->key));
}

/* glibc keeps what is freed inside the heap resident until the top of the
 * heap is free: the holes that a burst of pod creates or a relist leaves
 * (parsed pages, pod trees, response buffers) stayed in RSS. At 10 jobs x
 * 1,024 workers the heap held 58 MiB free beside 19 MiB in use
 * (bench/scale.py, ctrain_heap_bytes); malloc_trim gives those pages back
 * (madvise): a walk of the free lists, once a second. */
#define HEAP_TRIM_PERIOD_NS (1000 * 1000000LL)

void ctl_heap_trim(void) {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

void ctl_tick(ctl *c) {
  ctl_leader_sync_mark(c);
  int64_t now = ctrain_mono_ns();
  if (now >= c->trim_next_ns) {
    ctl_heap_trim();
    c->trim_next_ns = now + HEAP_TRIM_PERIOD_NS;
  }
}

ctrain_err ctl_run(const ctl_options *o) {
  ctrain_err result;
  ctl *c = calloc(1, sizeof(*c));
  if (!c)
    return CTRAIN_E_NOMEM;
  c->o = o;
  c->marked = -1;
  ctl_metrics_init(&c->metrics);
  if ((result = setup(c)) || (result = start_caches(c)) || atomic_load(&stop_requested) ||
      (result = ctl_leader_run(c)) || atomic_load(&stop_requested) || (result = start_workers(c)))
    goto out;
  while (!atomic_load(&stop_requested) && !atomic_load(&c->lost_leadership)) {
    ctl_tick(c);
    usleep(100000);
  }
  if (atomic_load(&c->lost_leadership)) {
    LOG_ERROR("leadership lost; exiting so a new leader starts from a fresh cache");
    result = CTRAIN_E_CANCELLED;
  } else {
    LOG_INFO("stopping (signal)");
  }
out:
  teardown(c);
  free(c);
  return result;
}
