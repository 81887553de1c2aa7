/* test_slowstart.c - slow-start batches: sizes 1, 2, 4, ..., a batch starts
 * only after the previous one returned, the calls of a batch really run at
 * once, a failure stops everything after its batch, the pool bounds the
 * calls in flight and its threads are reused, several callers share a pool. */
#include "test.h"

#include <errno.h>
#include <pthread.h>

#include "controller/slowstart.h"

#define MAXN 64

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t initial;
  int called[MAXN];
  size_t done_at_start[MAXN]; /* calls returned when item i started */
  size_t started, done, in_flight, max_in_flight;
  long fail_at;   /* the item that fails; -1: none */
  int rendezvous; /* each call waits until its whole batch has started */
  int rendezvous_timeouts;
  pthread_t threads[4 * MAXN];
  size_t n_threads;
} rec;

static void rec_init(rec *r, size_t initial) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->initial = initial ? initial : 1;
  r->fail_at = -1;
}

/* The test's own statement of the batches: [start, end) of item i's batch. */
static void batch_of(size_t n, size_t initial, size_t i, size_t *start, size_t *end) {
  size_t s = 0, size = initial;
  for (;;) {
    size_t e = s + size < n ? s + size : n;
    if (i < e) {
      *start = s;
      *end = e;
      return;
    }
    s = e;
    size *= 2;
  }
}

static size_t n_items; /* of the run in progress (one run per rec) */

static int item(void *ud, size_t i) {
  rec *r = ud;
  size_t bs, be;
  batch_of(n_items, r->initial, i, &bs, &be);
  pthread_mutex_lock(&r->mu);
  r->called[i]++;
  r->done_at_start[i] = r->done;
  r->started++;
  r->in_flight++;
  if (r->in_flight > r->max_in_flight)
    r->max_in_flight = r->in_flight;
  int seen = 0;
  for (size_t k = 0; k < r->n_threads; k++)
    seen |= pthread_equal(r->threads[k], pthread_self());
  if (!seen && r->n_threads < sizeof(r->threads) / sizeof(r->threads[0]))
    r->threads[r->n_threads++] = pthread_self();
  pthread_cond_broadcast(&r->cv);
  if (r->rendezvous) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    while (r->started < be)
      if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT) {
        r->rendezvous_timeouts++;
        break;
      }
  }
  pthread_mutex_unlock(&r->mu);
  usleep(1000);
  pthread_mutex_lock(&r->mu);
  r->in_flight--;
  r->done++;
  pthread_mutex_unlock(&r->mu);
  return (long)i == r->fail_at;
}

/* Every item before `ran` called once, none after; no item started before
 * the whole previous batch returned. */
static void check(rec *r, size_t n, size_t ran) {
  for (size_t i = 0; i < n; i++) {
    if (r->called[i] != (i < ran))
      TEST_FAIL_("item %zu of %zu called %d times (ran %zu)", i, n, r->called[i], ran);
    size_t bs, be;
    batch_of(n, r->initial, i, &bs, &be);
    if (i < ran && r->done_at_start[i] < bs)
      TEST_FAIL_("item %zu started with %zu calls returned; its batch starts at %zu", i,
                 r->done_at_start[i], bs);
  }
}

TEST(batches_double_on_the_caller) {
  rec r;
  rec_init(&r, 1);
  n_items = 20; /* 1 + 2 + 4 + 8 + 5 */
  ASSERT_EQ(slowstart_run(NULL, 20, 1, item, &r), 20);
  check(&r, 20, 20);
  ASSERT_EQ(r.max_in_flight, 1);
  ASSERT_EQ(r.n_threads, 1);
}

TEST(failure_stops_after_its_batch) {
  for (int threads = 0; threads <= 4; threads += 4) {
    slowstart_pool *p = NULL;
    ASSERT_OK(slowstart_pool_new(threads, &p));
    rec r;
    rec_init(&r, 1);
    r.fail_at = 5; /* batch [3, 7) */
    n_items = 20;
    ASSERT_EQ(slowstart_run(p, 20, 1, item, &r), 7);
    check(&r, 20, 7);
    /* A failure in the first batch: one call, not twenty. */
    rec_init(&r, 1);
    r.fail_at = 0;
    ASSERT_EQ(slowstart_run(p, 20, 1, item, &r), 1);
    check(&r, 20, 1);
    /* In the last batch: everything ran anyway. */
    rec_init(&r, 1);
    r.fail_at = 19;
    ASSERT_EQ(slowstart_run(p, 20, 1, item, &r), 20);
    check(&r, 20, 20);
    slowstart_pool_free(p);
  }
}

TEST(batch_calls_run_at_once) {
  slowstart_pool *p = NULL;
  ASSERT_OK(slowstart_pool_new(3, &p)); /* 3 + the caller: a batch of 4 at once */
  rec r;
  rec_init(&r, 1);
  r.rendezvous = 1;
  n_items = 7; /* 1, 2, 4 */
  ASSERT_EQ(slowstart_run(p, 7, 1, item, &r), 7);
  ASSERT_EQ(r.rendezvous_timeouts, 0);
  ASSERT_EQ(r.max_in_flight, 4);
  check(&r, 7, 7);
  slowstart_pool_free(p);
}

TEST(pool_bounds_in_flight_and_keeps_its_threads) {
  slowstart_pool *p = NULL;
  ASSERT_OK(slowstart_pool_new(2, &p));
  rec r;
  rec_init(&r, 1);
  n_items = 31; /* 1, 2, 4, 8, 16 */
  for (int run = 0; run < 3; run++) {
    memset(r.called, 0, sizeof(r.called));
    r.done = r.started = 0;
    ASSERT_EQ(slowstart_run(p, 31, 1, item, &r), 31);
    check(&r, 31, 31);
  }
  ASSERT_LE(r.max_in_flight, 3);
  /* The same 2 pool threads and the caller served all three runs: their
   * kube_client handles (connections) live on. */
  ASSERT_LE(r.n_threads, 3);
  ASSERT_GE(r.n_threads, 2);
  slowstart_pool_free(p);
}

TEST(initial_batch_size) {
  rec r;
  rec_init(&r, 3);
  n_items = 10; /* 3, 6, 1 */
  ASSERT_EQ(slowstart_run(NULL, 10, 3, item, &r), 10);
  check(&r, 10, 10);
  rec_init(&r, 1);
  ASSERT_EQ(slowstart_run(NULL, 0, 1, item, &r), 0);
  ASSERT_EQ(r.started, 0);
  rec_init(&r, 1); /* initial 0 counts as 1 */
  r.fail_at = 0;
  n_items = 4;
  ASSERT_EQ(slowstart_run(NULL, 4, 0, item, &r), 1);
}

typedef struct {
  slowstart_pool *p;
  rec r;
  size_t ran;
} caller;

static void *caller_main(void *arg) {
  caller *c = arg;
  c->ran = slowstart_run(c->p, 31, 1, item, &c->r);
  return NULL;
}

TEST(callers_share_a_pool) {
  slowstart_pool *p = NULL;
  ASSERT_OK(slowstart_pool_new(4, &p));
  static caller cs[4];
  pthread_t th[4];
  n_items = 31;
  for (int i = 0; i < 4; i++) {
    cs[i].p = p;
    rec_init(&cs[i].r, 1);
    if (i == 2)
      cs[i].r.fail_at = 4; /* batch [3, 7) */
    ASSERT_EQ(pthread_create(&th[i], NULL, caller_main, &cs[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ(pthread_join(th[i], NULL), 0);
    ASSERT_EQ(cs[i].ran, i == 2 ? 7 : 31);
    check(&cs[i].r, 31, cs[i].ran);
  }
  slowstart_pool_free(p);
}

TEST(pool_new_rejects_bad_sizes) {
  slowstart_pool *p = NULL;
  ASSERT_EQ(slowstart_pool_new(-1, &p), CTRAIN_E_INVAL);
  ASSERT_NULL(p);
  ASSERT_EQ(slowstart_pool_new(1025, &p), CTRAIN_E_INVAL);
  slowstart_pool_free(NULL);
}

TEST_MAIN(T(batches_double_on_the_caller), T(failure_stops_after_its_batch),
          T(batch_calls_run_at_once), T(pool_bounds_in_flight_and_keeps_its_threads),
          T(initial_batch_size), T(callers_share_a_pool), T(pool_new_rejects_bad_sizes))
