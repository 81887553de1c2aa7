/* worker/collective/coll_queue.h - collectives on a thread of their own, in
 * the order they are queued: what lets a gradient all-reduce overlap the
 * backward pass (as PyTorch DDP's buckets and Horovod's tensor fusion do).
 *
 * The train loop queues a part of the gradient vector as soon as backprop
 * has finished it (coll_queue_part, returns at once) and goes on with the
 * layers below; the queue's thread all-reduces the parts one after another
 * (coll_allreduce_part: the whole vector's bits). A collective the step
 * itself needs, synchronized BatchNormalization's statistics, goes through
 * the same queue (coll_queue_allreduce, which waits for it), so that every
 * rank issues its collectives in one order: the order of the calls here,
 * which is the program order of the step on every rank.
 *
 * Nothing else may use the coll_t while anything is queued; after
 * coll_queue_drain returns, the caller may (the queue's thread only waits).
 * The first failure is kept: every later item fails with it without
 * running, and coll_queue_drain returns it (coll_errmsg names the peer).
 * Threads: one caller at a time (the train loop's thread). */
#ifndef CTRAIN_COLL_QUEUE_H
#define CTRAIN_COLL_QUEUE_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/collective/coll.h"

typedef struct coll_queue coll_queue;

/* Starts the thread. c is borrowed (outlives the queue). */
CTRAIN_NODISCARD ctrain_err coll_queue_create(coll_t *c, coll_queue **out);
/* Drains, then stops the thread. Accepts NULL. */
void coll_queue_free(coll_queue *q);

/* Queues the all-reduce of buf[lo, hi) as a part of buf (n), borrowed until
 * coll_queue_drain (coll_allreduce_parts(c, n) must hold). Returns the
 * queue's first failure, if any, without queueing. */
CTRAIN_NODISCARD ctrain_err coll_queue_part(coll_queue *q, float *buf, size_t n, size_t lo,
                                            size_t hi);
/* Queues coll_allreduce_sum(buf, n) and waits for it (and so for everything
 * queued before it). */
CTRAIN_NODISCARD ctrain_err coll_queue_allreduce(coll_queue *q, float *buf, size_t n);
/* Waits until everything queued has run; the first failure since the queue
 * was made. */
CTRAIN_NODISCARD ctrain_err coll_queue_drain(coll_queue *q);

#endif
