/* coll_queue.c - collectives on a thread of their own; see coll_queue.h. */
#include "worker/collective/coll_queue.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "ctrain/thread.h"

#define QUEUE_CAP 64 /* items in flight; a step queues one per bucket and BN layer */

typedef struct {
  float *buf;
  size_t n, lo, hi;
  int part; /* 0: the whole of buf (n) */
} queue_item;

struct coll_queue {
  coll_t *c;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  uint64_t queued, done; /* items ever queued; ever finished (run or skipped) */
  int stop;
  ctrain_err failed;
  queue_item items[QUEUE_CAP];
};

static void *queue_thread(void *p) {
  coll_queue *q = p;
  ctrain_mutex_lock(&q->mu);
  for (;;) {
    while (q->done == q->queued && !q->stop)
      ctrain_cond_wait(&q->cv, &q->mu);
    if (q->done == q->queued)
      break;
    queue_item it = q->items[q->done % QUEUE_CAP];
    ctrain_err failed = q->failed;
    ctrain_mutex_unlock(&q->mu);
    ctrain_err rc = CTRAIN_OK;
    if (!failed)
      rc = it.part ? coll_allreduce_part(q->c, it.buf, it.n, it.lo, it.hi)
                   : coll_allreduce_sum(q->c, it.buf, it.n);
    ctrain_mutex_lock(&q->mu);
    if (rc && !q->failed)
      q->failed = rc;
    q->done++;
    ctrain_cond_broadcast(&q->cv);
  }
  ctrain_mutex_unlock(&q->mu);
  return NULL;
}

ctrain_err coll_queue_create(coll_t *c, coll_queue **out) {
  *out = NULL;
  coll_queue *q = calloc(1, sizeof(*q));
  if (!q)
    return CTRAIN_E_NOMEM;
  q->c = c;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  if (pthread_create(&q->thread, NULL, queue_thread, q)) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    return CTRAIN_E_NOMEM;
  }
  *out = q;
  return CTRAIN_OK;
}

void coll_queue_free(coll_queue *q) {
  if (!q)
    return;
  ctrain_mutex_lock(&q->mu);
  q->stop = 1;
  ctrain_cond_broadcast(&q->cv);
  ctrain_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL); /* it runs what is queued first */
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q);
}

/* Queues it under q->mu; its ticket in *ticket. */
static ctrain_err put(coll_queue *q, queue_item it, uint64_t *ticket) {
  while (!q->failed && q->queued - q->done == QUEUE_CAP)
    ctrain_cond_wait(&q->cv, &q->mu);
  if (q->failed)
    return q->failed;
  *ticket = q->queued;
  q->items[q->queued % QUEUE_CAP] = it;
  q->queued++;
  ctrain_cond_broadcast(&q->cv);
  return CTRAIN_OK;
}

ctrain_err coll_queue_part(coll_queue *q, float *buf, size_t n, size_t lo, size_t hi) {
  uint64_t ticket;
  ctrain_mutex_lock(&q->mu);
  ctrain_err rc = put(q, (queue_item){.buf = buf, .n = n, .lo = lo, .hi = hi, .part = 1}, &ticket);
  ctrain_mutex_unlock(&q->mu);
  return rc;
}

ctrain_err coll_queue_allreduce(coll_queue *q, float *buf, size_t n) {
  uint64_t ticket;
  ctrain_mutex_lock(&q->mu);
  ctrain_err rc = put(q, (queue_item){.buf = buf, .n = n}, &ticket);
  while (!rc && q->done <= ticket)
    ctrain_cond_wait(&q->cv, &q->mu);
  if (!rc)
    rc = q->failed;
  ctrain_mutex_unlock(&q->mu);
  return rc;
}

ctrain_err coll_queue_drain(coll_queue *q) {
  ctrain_mutex_lock(&q->mu);
  while (q->done != q->queued)
    ctrain_cond_wait(&q->cv, &q->mu);
  ctrain_err rc = q->failed;
  ctrain_mutex_unlock(&q->mu);
  return rc;
}
