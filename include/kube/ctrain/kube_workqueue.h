/* ctrain/kube_workqueue.h - the controller work queue, with client-go's
 * semantics (workqueue.TypedRateLimitingInterface).
 *
 * Keys are strings ("namespace/name"). A key is in the queue at most once
 * (the dirty set), and never handed to two workers at once: a key added
 * while a worker holds it is parked (processing set) and queued again when
 * that worker calls done(). add_after() delays a key on a real timer thread
 * (a min-heap; an earlier deadline for a waiting key wins), which is what
 * deadlines and TTLs rest on. add_rate_limited() delays by the larger of a
 * per-key exponential backoff (base * 2^failures, capped) and an overall
 * token bucket; forget() clears the key's failures.
 *
 * Time comes from an injectable monotonic clock so tests can run on fake
 * time; after moving a fake clock, call kube_workqueue_tick() to wake the
 * timer. All functions are thread-safe. */
#ifndef CTRAIN_KUBE_WORKQUEUE_H
#define CTRAIN_KUBE_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/kube_ratelimit.h"

typedef struct kube_workqueue_opts {
  int64_t base_delay_ns; /* per-key backoff base; default 5 ms */
  int64_t max_delay_ns;  /* per-key backoff cap; default 1000 s */
  double qps;            /* overall rate; default 10, < 0 unlimited */
  int burst;             /* default 100 */
  kube_clock_fn clock;   /* default CLOCK_MONOTONIC */
  void *clock_ctx;
} kube_workqueue_opts;

typedef struct kube_workqueue kube_workqueue;

/* opts may be NULL. Starts the timer thread. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err kube_workqueue_new(const kube_workqueue_opts *opts,
                                               kube_workqueue **out);

/* Shuts down (if not yet), joins the timer and frees. No worker may still
 * be inside get(). Accepts NULL. */
void kube_workqueue_free(kube_workqueue *q);

/* Queues key (copied) unless it is already queued; parks it if a worker
 * holds it. Ignored after shutdown. */
CTRAIN_NODISCARD ctrain_err kube_workqueue_add(kube_workqueue *q, const char *key);

/* Queues key after delay_ns (<= 0: now). */
CTRAIN_NODISCARD ctrain_err kube_workqueue_add_after(kube_workqueue *q, const char *key,
                                                     int64_t delay_ns);

/* Queues key after its backoff (and the bucket's wait), counting a failure. */
CTRAIN_NODISCARD ctrain_err kube_workqueue_add_rate_limited(kube_workqueue *q, const char *key);

/* Clears key's failure count (call after a successful reconcile). */
void kube_workqueue_forget(kube_workqueue *q, const char *key);

/* How many times key went through add_rate_limited since the last forget. */
int kube_workqueue_num_requeues(kube_workqueue *q, const char *key);

/* Blocks until a key is available; *key is owned by the caller (free())
 * and must be handed back with done(). CTRAIN_E_CANCELLED once the queue
 * is shut down and drained. timeout_ms < 0 waits forever; on timeout,
 * CTRAIN_E_TIMEOUT. */
CTRAIN_NODISCARD ctrain_err kube_workqueue_get(kube_workqueue *q, long timeout_ms, char **key);

/* The worker finished key: it may be handed out again (and is, at once, if
 * it was added meanwhile). */
void kube_workqueue_done(kube_workqueue *q, const char *key);

/* Keys ready to be handed out (not counting delayed or in-process ones). */
size_t kube_workqueue_len(kube_workqueue *q);

/* Keys waiting on the timer. */
size_t kube_workqueue_waiting(kube_workqueue *q);

/* For /metrics (client-go's workqueue_* families). */
typedef struct kube_workqueue_stats {
  long adds;         /* keys queued or parked (de-duplicated adds not counted) */
  long retries;      /* add_rate_limited calls */
  size_t depth;      /* ready keys */
  size_t waiting;    /* keys on the timer */
  size_t processing; /* keys held by workers */
} kube_workqueue_stats;
void kube_workqueue_get_stats(kube_workqueue *q, kube_workqueue_stats *out);

/* Stops accepting keys and wakes all getters; keys already queued are
 * still handed out. Idempotent. */
void kube_workqueue_shutdown(kube_workqueue *q);

/* Wakes the timer thread to re-read the clock (fake clocks in tests). */
void kube_workqueue_tick(kube_workqueue *q);

#endif
