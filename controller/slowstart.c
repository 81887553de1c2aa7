/* slowstart.c - slow-start batches on a pool of long-lived threads; see
 * controller/slowstart.h. */
#include "controller/slowstart.h"

#include <pthread.h>
#include <stdlib.h>

#include "ctrain/thread.h"

/* One batch of one slowstart_run, on the caller's stack. */
typedef struct ss_batch {
  struct ss_batch *next; /* on the pool's list while it has items not taken */
  slowstart_fn fn;
  void *ud;
  size_t next_i, end; /* items [next_i, end) not taken yet */
  size_t running;     /* taken, not returned */
  int failed;
} ss_batch;

struct slowstart_pool {
  pthread_mutex_t mu;
  pthread_cond_t work; /* a batch was queued, or stop */
  pthread_cond_t idle; /* some batch's last call returned */
  ss_batch *head;      /* batches with items not taken, oldest first */
  int stop;
  int n;
  pthread_t *th; /* (n) */
};

/* Takes the next item of b and unlinks b once nothing is left to take.
 * Caller holds mu and b->next_i < b->end. */
static size_t take(slowstart_pool *p, ss_batch *b) {
  size_t i = b->next_i++;
  b->running++;
  if (p && b->next_i == b->end) {
    ss_batch **pp = &p->head;
    while (*pp && *pp != b)
      pp = &(*pp)->next;
    if (*pp)
      *pp = b->next;
  }
  return i;
}

/* Runs item i of b without the lock and accounts for it. Caller holds mu. */
static void run_one(slowstart_pool *p, ss_batch *b, size_t i) {
  ctrain_mutex_unlock(&p->mu);
  int r = b->fn(b->ud, i);
  ctrain_mutex_lock(&p->mu);
  if (r)
    b->failed = 1;
  if (--b->running == 0 && b->next_i == b->end)
    ctrain_cond_broadcast(&p->idle);
}

static void *pool_main(void *arg) {
  slowstart_pool *p = arg;
  ctrain_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && !p->head)
      ctrain_cond_wait(&p->work, &p->mu);
    if (!p->head)
      break;
    ss_batch *b = p->head;
    run_one(p, b, take(p, b));
  }
  ctrain_mutex_unlock(&p->mu);
  return NULL;
}

ctrain_err slowstart_pool_new(int threads, slowstart_pool **out) {
  ctrain_err result = CTRAIN_OK;
  slowstart_pool *p = NULL;
  *out = NULL;
  if (threads < 0 || threads > 1024)
    return CTRAIN_E_INVAL;
  p = calloc(1, sizeof(*p));
  if (!p)
    return CTRAIN_E_NOMEM;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->idle, NULL);
  p->th = calloc(threads ? (size_t)threads : 1, sizeof(*p->th));
  if (!p->th) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (; p->n < threads; p->n++)
    if (pthread_create(&p->th[p->n], NULL, pool_main, p)) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  *out = p;
  p = NULL;
out:
  slowstart_pool_free(p);
  return result;
}

void slowstart_pool_free(slowstart_pool *p) {
  if (!p)
    return;
  ctrain_mutex_lock(&p->mu);
  p->stop = 1;
  ctrain_cond_broadcast(&p->work);
  ctrain_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++)
    pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->idle);
  pthread_mutex_destroy(&p->mu);
  free(p->th);
  free(p);
}

size_t slowstart_run(slowstart_pool *p, size_t n, size_t initial, slowstart_fn fn, void *ud) {
  size_t done = 0, size = initial ? initial : 1;
  while (done < n) {
    if (size > n - done)
      size = n - done;
    ss_batch b = {.fn = fn, .ud = ud, .next_i = done, .end = done + size};
    if (!p) {
      for (size_t i = done; i < done + size; i++)
        b.failed |= fn(ud, i) != 0;
    } else {
      ctrain_mutex_lock(&p->mu);
      if (size > 1 && p->n) {
        /* Queue it behind other callers' batches: the pool serves them in
         * order while this thread works on its own. */
        ss_batch **pp = &p->head;
        while (*pp)
          pp = &(*pp)->next;
        *pp = &b;
        ctrain_cond_broadcast(&p->work);
      }
      while (b.next_i < b.end)
        run_one(p, &b, take(p, &b));
      while (b.running)
        ctrain_cond_wait(&p->idle, &p->mu);
      ctrain_mutex_unlock(&p->mu);
    }
    done += size;
    if (b.failed)
      break;
    size = size > n / 2 ? n : size * 2;
  }
  return done;
}
