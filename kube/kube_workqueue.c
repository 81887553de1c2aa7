/* kube_workqueue.c - de-duplicating, rate-limited, delaying work queue; see
 * ctrain/kube_workqueue.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_workqueue.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/buf.h"
#include "ctrain/strmap.h"
#include "ctrain/thread.h"
#include "kube_util.h"

/* With a fake clock the timer cannot sleep until a deadline in real time;
 * it re-reads the clock at least this often (and on every tick). */
#define FAKE_CLOCK_POLL_NS 10000000LL

typedef struct waiting {
  char *key;
  int64_t ready_ns;
  size_t idx; /* position in the heap */
} waiting;

struct kube_workqueue {
  kube_workqueue_opts o;
  int real_clock;
  kube_ratelimit bucket;

  pthread_mutex_t mu;
  pthread_cond_t cond;  /* getters: queue non-empty or shutdown */
  pthread_cond_t timer; /* timer thread: heap changed, tick, shutdown */

  /* FIFO of owned keys (ring buffer). */
  char **ring;
  size_t head, count, cap;

  ctrain_strmap *dirty;      /* keys that need processing (queued or parked) */
  ctrain_strmap *processing; /* keys held by workers */
  ctrain_strmap *failures;   /* key -> (intptr_t) count */
  ctrain_strmap *waits;      /* key -> waiting* */
  waiting **heap;            /* min-heap on ready_ns */
  size_t nheap, capheap;

  long adds, retries;
  int shutting_down;
  pthread_t timer_thread;
  int have_timer;
};

static int64_t now_ns(kube_workqueue *q) {
  return q->o.clock(q->o.clock_ctx);
}

/* ---- ring ------------------------------------------------------------------ */

static ctrain_err ring_push(kube_workqueue *q, char *key) {
  if (q->count == q->cap) {
    size_t old = q->cap;
    ctrain_err result = ctrain_grow(&q->ring, &q->cap, q->count + 1, sizeof(*q->ring), 64, 0);
    if (result)
      return result;
    /* A wrapped ring: its part from head on moves to the new end. */
    if (q->head) {
      size_t tail = old - q->head;
      memmove(q->ring + q->cap - tail, q->ring + q->head, tail * sizeof(*q->ring));
      q->head = q->cap - tail;
    }
  }
  q->ring[(q->head + q->count) % q->cap] = key;
  q->count++;
  return CTRAIN_OK;
}

static char *ring_pop(kube_workqueue *q) {
  char *k = q->ring[q->head];
  q->head = (q->head + 1) % q->cap;
  q->count--;
  return k;
}

/* ---- heap ------------------------------------------------------------------ */

static void heap_swap(kube_workqueue *q, size_t a, size_t b) {
  waiting *t = q->heap[a];
  q->heap[a] = q->heap[b];
  q->heap[b] = t;
  q->heap[a]->idx = a;
  q->heap[b]->idx = b;
}

static void heap_up(kube_workqueue *q, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (q->heap[p]->ready_ns <= q->heap[i]->ready_ns)
      break;
    heap_swap(q, p, i);
    i = p;
  }
}

static void heap_down(kube_workqueue *q, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < q->nheap && q->heap[l]->ready_ns < q->heap[m]->ready_ns)
      m = l;
    if (r < q->nheap && q->heap[r]->ready_ns < q->heap[m]->ready_ns)
      m = r;
    if (m == i)
      return;
    heap_swap(q, i, m);
    i = m;
  }
}

static waiting *heap_pop(kube_workqueue *q) {
  waiting *top = q->heap[0];
  q->nheap--;
  if (q->nheap) {
    q->heap[0] = q->heap[q->nheap];
    q->heap[0]->idx = 0;
    heap_down(q, 0);
  }
  return top;
}

/* ---- core ------------------------------------------------------------------ */

/* mu held. */
static ctrain_err add_locked(kube_workqueue *q, const char *key) {
  ctrain_err result = CTRAIN_OK;
  char *copy = NULL;
  if (q->shutting_down || ctrain_strmap_has(q->dirty, key))
    return CTRAIN_OK;
  if ((result = ctrain_strmap_put(q->dirty, key, NULL, NULL)))
    return result;
  q->adds++;
  if (ctrain_strmap_has(q->processing, key))
    return CTRAIN_OK; /* parked: done() queues it */
  copy = strdup(key);
  if (!copy || (result = ring_push(q, copy))) {
    free(copy);
    ctrain_strmap_del(q->dirty, key, NULL);
    return result ? result : CTRAIN_E_NOMEM;
  }
  ctrain_cond_signal(&q->cond);
  return CTRAIN_OK;
}

/* mu held. */
static ctrain_err add_after_locked(kube_workqueue *q, const char *key, int64_t delay_ns) {
  ctrain_err result = CTRAIN_OK;
  if (q->shutting_down)
    return CTRAIN_OK;
  if (delay_ns <= 0)
    return add_locked(q, key);
  int64_t ready = now_ns(q) + delay_ns;
  waiting *w = ctrain_strmap_get(q->waits, key);
  if (w) {
    if (ready < w->ready_ns) { /* an earlier deadline wins, a later one never postpones */
      w->ready_ns = ready;
      heap_up(q, w->idx);
      ctrain_cond_signal(&q->timer);
    }
    return CTRAIN_OK;
  }
  if ((result = ctrain_grow(&q->heap, &q->capheap, q->nheap + 1, sizeof(*q->heap), 64, 0)))
    return result;
  w = calloc(1, sizeof(*w));
  if (!w || !(w->key = strdup(key))) {
    free(w);
    return CTRAIN_E_NOMEM;
  }
  if ((result = ctrain_strmap_put(q->waits, key, w, NULL))) {
    free(w->key);
    free(w);
    return result;
  }
  w->ready_ns = ready;
  w->idx = q->nheap;
  q->heap[q->nheap++] = w;
  heap_up(q, w->idx);
  ctrain_cond_signal(&q->timer);
  return CTRAIN_OK;
}

static void *timer_main(void *arg) {
  kube_workqueue *q = arg;
  ctrain_mutex_lock(&q->mu);
  while (!q->shutting_down) {
    int64_t now = now_ns(q);
    while (q->nheap && q->heap[0]->ready_ns <= now) {
      waiting *w = heap_pop(q);
      ctrain_strmap_del(q->waits, w->key, NULL);
      add_locked(q, w->key); /* NOMEM drops one wake-up; the next add repairs it */
      free(w->key);
      free(w);
    }
    if (!q->nheap && q->real_clock) {
      ctrain_cond_wait(&q->timer, &q->mu);
      continue;
    }
    int64_t wait = q->nheap ? q->heap[0]->ready_ns - now : FAKE_CLOCK_POLL_NS;
    if (!q->real_clock && wait > FAKE_CLOCK_POLL_NS)
      wait = FAKE_CLOCK_POLL_NS;
    struct timespec ts = ctrain_deadline_ts(wait);
    ctrain_cond_timedwait(&q->timer, &q->mu, &ts);
  }
  ctrain_mutex_unlock(&q->mu);
  return NULL;
}

ctrain_err kube_workqueue_new(const kube_workqueue_opts *opts, kube_workqueue **out) {
  ctrain_err result = CTRAIN_OK;
  kube_workqueue *q = NULL;
  *out = NULL;
  q = calloc(1, sizeof(*q));
  if (!q)
    return CTRAIN_E_NOMEM;
  if (opts)
    q->o = *opts;
  if (q->o.base_delay_ns <= 0)
    q->o.base_delay_ns = 5000000LL;
  if (q->o.max_delay_ns <= 0)
    q->o.max_delay_ns = 1000LL * 1000000000LL;
  if (q->o.qps == 0)
    q->o.qps = 10;
  if (q->o.burst <= 0)
    q->o.burst = 100;
  q->real_clock = !q->o.clock || q->o.clock == kube_clock_monotonic;
  if (!q->o.clock)
    q->o.clock = kube_clock_monotonic;
  if (ctrain_strmap_new(&q->dirty) || ctrain_strmap_new(&q->processing) ||
      ctrain_strmap_new(&q->failures) || ctrain_strmap_new(&q->waits)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  kube_ratelimit_init(&q->bucket, q->o.qps < 0 ? 0 : q->o.qps, q->o.burst, q->o.clock,
                      q->o.clock_ctx);
  pthread_mutex_init(&q->mu, NULL);
  ctrain_cond_init_mono(&q->cond);
  ctrain_cond_init_mono(&q->timer);
  if (pthread_create(&q->timer_thread, NULL, timer_main, q)) {
    result = CTRAIN_E_NOMEM;
    kube_workqueue_free(q);
    q = NULL;
    goto out;
  }
  q->have_timer = 1;
  *out = q;
  q = NULL;
out:
  if (q) {
    ctrain_strmap_free(q->dirty, NULL);
    ctrain_strmap_free(q->processing, NULL);
    ctrain_strmap_free(q->failures, NULL);
    ctrain_strmap_free(q->waits, NULL);
    free(q);
  }
  return result;
}

void kube_workqueue_shutdown(kube_workqueue *q) {
  ctrain_mutex_lock(&q->mu);
  q->shutting_down = 1;
  ctrain_cond_broadcast(&q->cond);
  ctrain_cond_broadcast(&q->timer);
  ctrain_mutex_unlock(&q->mu);
}

void kube_workqueue_free(kube_workqueue *q) {
  if (!q)
    return;
  kube_workqueue_shutdown(q);
  if (q->have_timer)
    pthread_join(q->timer_thread, NULL);
  while (q->count)
    free(ring_pop(q));
  free(q->ring);
  for (size_t i = 0; i < q->nheap; i++) {
    free(q->heap[i]->key);
    free(q->heap[i]);
  }
  free(q->heap);
  ctrain_strmap_free(q->dirty, NULL);
  ctrain_strmap_free(q->processing, NULL);
  ctrain_strmap_free(q->failures, NULL);
  ctrain_strmap_free(q->waits, NULL);
  kube_ratelimit_destroy(&q->bucket);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cond);
  pthread_cond_destroy(&q->timer);
  free(q);
}

ctrain_err kube_workqueue_add(kube_workqueue *q, const char *key) {
  ctrain_mutex_lock(&q->mu);
  ctrain_err result = add_locked(q, key);
  ctrain_mutex_unlock(&q->mu);
  return result;
}

ctrain_err kube_workqueue_add_after(kube_workqueue *q, const char *key, int64_t delay_ns) {
  ctrain_mutex_lock(&q->mu);
  ctrain_err result = add_after_locked(q, key, delay_ns);
  ctrain_mutex_unlock(&q->mu);
  return result;
}

ctrain_err kube_workqueue_add_rate_limited(kube_workqueue *q, const char *key) {
  /* The bucket has its own lock; take its reservation first. */
  int64_t bucket_wait = kube_ratelimit_reserve(&q->bucket);
  ctrain_mutex_lock(&q->mu);
  intptr_t fails = (intptr_t)ctrain_strmap_get(q->failures, key);
  int64_t backoff = q->o.base_delay_ns;
  for (intptr_t i = 0; i < fails && backoff < q->o.max_delay_ns; i++)
    backoff *= 2;
  if (backoff > q->o.max_delay_ns)
    backoff = q->o.max_delay_ns;
  ctrain_err result = ctrain_strmap_put(q->failures, key, (void *)(fails + 1), NULL);
  q->retries++;
  if (!result)
    result = add_after_locked(q, key, backoff > bucket_wait ? backoff : bucket_wait);
  ctrain_mutex_unlock(&q->mu);
  return result;
}

void kube_workqueue_forget(kube_workqueue *q, const char *key) {
  ctrain_mutex_lock(&q->mu);
  ctrain_strmap_del(q->failures, key, NULL);
  ctrain_mutex_unlock(&q->mu);
}

int kube_workqueue_num_requeues(kube_workqueue *q, const char *key) {
  ctrain_mutex_lock(&q->mu);
  int n = (int)(intptr_t)ctrain_strmap_get(q->failures, key);
  ctrain_mutex_unlock(&q->mu);
  return n;
}

ctrain_err kube_workqueue_get(kube_workqueue *q, long timeout_ms, char **key) {
  ctrain_err result = CTRAIN_OK;
  struct timespec ts;
  *key = NULL;
  if (timeout_ms >= 0)
    ts = ctrain_deadline_ts((int64_t)timeout_ms * 1000000);
  ctrain_mutex_lock(&q->mu);
  while (!q->count && !q->shutting_down) {
    if (timeout_ms < 0) {
      ctrain_cond_wait(&q->cond, &q->mu);
    } else if (ctrain_cond_timedwait(&q->cond, &q->mu, &ts)) {
      if (!q->count && !q->shutting_down) {
        result = CTRAIN_E_TIMEOUT;
        goto out;
      }
    }
  }
  if (!q->count) {
    result = CTRAIN_E_CANCELLED;
    goto out;
  }
  char *k = ring_pop(q);
  if ((result = ctrain_strmap_put(q->processing, k, NULL, NULL))) {
    ring_push(q, k); /* cannot fail: we just made room */
    goto out;
  }
  ctrain_strmap_del(q->dirty, k, NULL);
  *key = k;
out:
  ctrain_mutex_unlock(&q->mu);
  return result;
}

void kube_workqueue_done(kube_workqueue *q, const char *key) {
  ctrain_mutex_lock(&q->mu);
  ctrain_strmap_del(q->processing, key, NULL);
  if (ctrain_strmap_has(q->dirty, key)) {
    char *copy = strdup(key);
    if (!copy || ring_push(q, copy)) {
      free(copy);
      ctrain_strmap_del(q->dirty, key, NULL); /* NOMEM: drop rather than wedge the key */
    } else {
      ctrain_cond_signal(&q->cond);
    }
  }
  ctrain_mutex_unlock(&q->mu);
}

size_t kube_workqueue_len(kube_workqueue *q) {
  ctrain_mutex_lock(&q->mu);
  size_t n = q->count;
  ctrain_mutex_unlock(&q->mu);
  return n;
}

size_t kube_workqueue_waiting(kube_workqueue *q) {
  ctrain_mutex_lock(&q->mu);
  size_t n = q->nheap;
  ctrain_mutex_unlock(&q->mu);
  return n;
}

void kube_workqueue_tick(kube_workqueue *q) {
  ctrain_mutex_lock(&q->mu);
  ctrain_cond_broadcast(&q->timer);
  ctrain_mutex_unlock(&q->mu);
}

void kube_workqueue_get_stats(kube_workqueue *q, kube_workqueue_stats *out) {
  ctrain_mutex_lock(&q->mu);
  out->adds = q->adds;
  out->retries = q->retries;
  out->depth = q->count;
  out->waiting = q->nheap;
  out->processing = ctrain_strmap_len(q->processing);
  ctrain_mutex_unlock(&q->mu);
}
