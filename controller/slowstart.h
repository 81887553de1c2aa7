/* controller/slowstart.h - the Kubernetes Job controller's slowStartBatch, on a
 * pool of long-lived threads.
 *
 * slowstart_run calls fn for the items 0..n-1 in batches of `initial`,
 * 2*initial, 4*initial, ... (the last one cut to what is left): the calls of
 * one batch run in parallel, the next batch starts once every call of the
 * batch returned, and none starts after a batch in which a call failed. A job
 * whose creates all fail (quota, an admission webhook, a bad template) so
 * costs one request instead of n, while a healthy job's n creates take about
 * log2(n) round trips.
 *
 * The pool's threads live as long as the pool, so the per-thread kube_client
 * handles (and their keep-alive connections) serve every batch of every job;
 * a thread per create would pay a TCP and TLS handshake per pod. The calling
 * thread works on its own batch too, so a batch makes progress even while
 * every pool thread serves other callers, and the pool size (+ 1 per caller)
 * bounds the calls in flight. */
#ifndef CTRAIN_SLOWSTART_H
#define CTRAIN_SLOWSTART_H

#include <stddef.h>

#include "ctrain/err.h"

typedef struct slowstart_pool slowstart_pool;

/* One item: 0 on success, non-zero on failure. Runs on the caller's thread
 * or a pool thread, concurrently with the other items of its batch. */
typedef int (*slowstart_fn)(void *ud, size_t i);

/* A pool of `threads` threads (0..1024; 0: every call runs on its caller).
 * *out owned by the caller (slowstart_pool_free). */
CTRAIN_NODISCARD ctrain_err slowstart_pool_new(int threads, slowstart_pool **out);

/* Stops and joins the threads; no slowstart_run may be in progress.
 * Accepts NULL. */
void slowstart_pool_free(slowstart_pool *p);

/* Runs fn(ud, i) for i in [0, n) in batches as above on `p` (NULL: on the
 * caller, one at a time); `initial` 0 counts as 1. Returns how many items
 * were run: n, or, when a batch had a failure, the items up to the end of
 * that batch; the caller gives up the others. Any number of threads may run
 * on one pool at once. */
size_t slowstart_run(slowstart_pool *p, size_t n, size_t initial, slowstart_fn fn, void *ud);

#endif
