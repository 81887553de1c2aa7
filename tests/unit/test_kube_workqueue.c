/* test_kube_workqueue.c - the work queue: de-duplication, the processing
 * set (a key is never held by two workers), add_after on a fake clock
 * (earliest deadline wins), per-key exponential backoff and the overall
 * bucket, the FIFO growing while wrapped, shutdown semantics, a real-timer delay, and a
 * multi-worker run. */
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>

#include "ctrain/clock.h"
#include "ctrain/kube_workqueue.h"

#define MS 1000000LL

static _Atomic int64_t fake_now = 1000 * MS;
static int64_t fake_clock(void *ctx) {
  (void)ctx;
  return atomic_load(&fake_now);
}

static kube_workqueue *fake_queue(double qps, int burst) {
  kube_workqueue_opts o = {.clock = fake_clock, .qps = qps, .burst = burst};
  kube_workqueue *q = NULL;
  ASSERT_OK(kube_workqueue_new(&o, &q));
  return q;
}

/* Advances fake time and waits (real time, bounded) for the queue to reach n. */
static void advance_and_expect(kube_workqueue *q, int64_t by, size_t n) {
  atomic_fetch_add(&fake_now, by);
  kube_workqueue_tick(q);
  for (int i = 0; i < 200 && kube_workqueue_len(q) != n; i++)
    usleep(5000);
  ASSERT_EQ(kube_workqueue_len(q), n);
}

static char *get_now(kube_workqueue *q) {
  char *k = NULL;
  ASSERT_OK(kube_workqueue_get(q, 1000, &k));
  return k;
}

TEST(dedup_and_processing_set) {
  kube_workqueue *q = fake_queue(-1, 1);
  ASSERT_OK(kube_workqueue_add(q, "ns/a"));
  ASSERT_OK(kube_workqueue_add(q, "ns/a"));
  ASSERT_OK(kube_workqueue_add(q, "ns/b"));
  ASSERT_EQ(kube_workqueue_len(q), 2);
  char *a = get_now(q);
  ASSERT_STR_EQ(a, "ns/a"); /* FIFO */
  /* Added while held: parked, not handed to a second worker. */
  ASSERT_OK(kube_workqueue_add(q, "ns/a"));
  ASSERT_OK(kube_workqueue_add(q, "ns/a"));
  ASSERT_EQ(kube_workqueue_len(q), 1);
  char *b = get_now(q);
  ASSERT_STR_EQ(b, "ns/b");
  char *k = NULL;
  ASSERT_EQ(kube_workqueue_get(q, 50, &k), CTRAIN_E_TIMEOUT);
  ASSERT_NULL(k);
  kube_workqueue_done(q, a); /* re-queued once, for the parked add */
  ASSERT_EQ(kube_workqueue_len(q), 1);
  kube_workqueue_done(q, b); /* b was not re-added */
  ASSERT_EQ(kube_workqueue_len(q), 1);
  kube_workqueue_stats ws;
  kube_workqueue_get_stats(q, &ws);
  ASSERT_EQ(ws.adds, 3); /* a, b, and a parked while held */
  ASSERT_EQ(ws.depth, 1);
  ASSERT_EQ(ws.processing, 0);
  char *a2 = get_now(q);
  ASSERT_STR_EQ(a2, "ns/a");
  kube_workqueue_get_stats(q, &ws);
  ASSERT_EQ(ws.processing, 1);
  kube_workqueue_done(q, a2);
  ASSERT_EQ(kube_workqueue_len(q), 0);
  free(a);
  free(b);
  free(a2);
  kube_workqueue_free(q);
}

/* Adds "k<*next>" .. "k<upto - 1>". */
static void add_keys(kube_workqueue *q, int *next, int upto) {
  char key[32];
  for (; *next < upto; (*next)++) {
    snprintf(key, sizeof(key), "k%d", *next);
    ASSERT_OK(kube_workqueue_add(q, key));
  }
}

/* Gets (and finishes) "k<*next>" .. "k<upto - 1>", in that order. */
static void take_keys(kube_workqueue *q, int *next, int upto) {
  char key[32];
  for (; *next < upto; (*next)++) {
    char *k = get_now(q);
    snprintf(key, sizeof(key), "k%d", *next);
    ASSERT_STR_EQ(k, key);
    kube_workqueue_done(q, k);
    free(k);
  }
}

/* The FIFO grows while wrapped around (head in the middle of its array) and
 * keeps its order: 40 in, 30 out, 54 in (64: full and wrapped), then 46
 * more, the first of which grows it. */
TEST(fifo_grows_while_wrapped) {
  kube_workqueue *q = fake_queue(-1, 1);
  int in = 0, out = 0;
  add_keys(q, &in, 40);
  take_keys(q, &out, 30);
  add_keys(q, &in, 140);
  ASSERT_EQ(kube_workqueue_len(q), 110);
  take_keys(q, &out, 140);
  ASSERT_EQ(kube_workqueue_len(q), 0);
  kube_workqueue_free(q);
}

TEST(add_after_fake_clock) {
  kube_workqueue *q = fake_queue(-1, 1);
  ASSERT_OK(kube_workqueue_add_after(q, "x", 100 * MS));
  ASSERT_OK(kube_workqueue_add_after(q, "y", 300 * MS));
  ASSERT_OK(kube_workqueue_add_after(q, "x", 500 * MS)); /* later: does not postpone x */
  ASSERT_OK(kube_workqueue_add_after(q, "y", 200 * MS)); /* earlier: y moves up */
  ASSERT_EQ(kube_workqueue_waiting(q), 2);
  advance_and_expect(q, 50 * MS, 0);
  advance_and_expect(q, 60 * MS, 1); /* t=110: x */
  char *k = get_now(q);
  ASSERT_STR_EQ(k, "x");
  kube_workqueue_done(q, k);
  free(k);
  advance_and_expect(q, 80 * MS, 0); /* t=190 */
  advance_and_expect(q, 20 * MS, 1); /* t=210: y */
  ASSERT_EQ(kube_workqueue_waiting(q), 0);
  ASSERT_OK(kube_workqueue_add_after(q, "z", 0)); /* no delay: at once */
  ASSERT_EQ(kube_workqueue_len(q), 2);
  kube_workqueue_free(q);
}

TEST(rate_limited_backoff_and_forget) {
  kube_workqueue *q = fake_queue(-1, 1);              /* bucket off: backoff only */
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "k")); /* 5 ms */
  ASSERT_EQ(kube_workqueue_num_requeues(q, "k"), 1);
  advance_and_expect(q, 4 * MS, 0);
  advance_and_expect(q, 1 * MS, 1);
  char *k = get_now(q);
  kube_workqueue_done(q, k);
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "k")); /* 10 ms */
  advance_and_expect(q, 9 * MS, 0);
  advance_and_expect(q, 1 * MS, 1);
  free(get_now(q));
  kube_workqueue_done(q, "k");
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "k")); /* 20 ms */
  ASSERT_EQ(kube_workqueue_num_requeues(q, "k"), 3);
  advance_and_expect(q, 19 * MS, 0);
  advance_and_expect(q, 1 * MS, 1);
  free(get_now(q));
  kube_workqueue_done(q, "k");
  kube_workqueue_forget(q, "k");
  ASSERT_EQ(kube_workqueue_num_requeues(q, "k"), 0);
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "k")); /* back to 5 ms */
  advance_and_expect(q, 5 * MS, 1);
  free(k);
  kube_workqueue_free(q);
}

TEST(backoff_capped) {
  kube_workqueue_opts o = {.clock = fake_clock, .qps = -1, .max_delay_ns = 40 * MS};
  kube_workqueue *q = NULL;
  ASSERT_OK(kube_workqueue_new(&o, &q));
  for (int i = 0; i < 40; i++) /* 2^40 * 5 ms would overflow without the cap */
    ASSERT_OK(kube_workqueue_add_rate_limited(q, "k"));
  kube_workqueue_done(q, "k");
  /* The first add set the deadline at 5 ms; later ones never postpone it. */
  advance_and_expect(q, 5 * MS, 1);
  free(get_now(q));
  kube_workqueue_done(q, "k");
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "k"));
  advance_and_expect(q, 39 * MS, 0);
  advance_and_expect(q, 1 * MS, 1);
  kube_workqueue_free(q);
}

TEST(overall_bucket) {
  kube_workqueue *q = fake_queue(1, 2); /* 1 per second, burst 2 */
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "a"));
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "b"));
  ASSERT_OK(kube_workqueue_add_rate_limited(q, "c")); /* bucket empty: 1 s */
  advance_and_expect(q, 5 * MS, 2);
  advance_and_expect(q, 900 * MS, 2);
  advance_and_expect(q, 100 * MS, 3);
  kube_workqueue_free(q);
}

static void *get_blocking(void *arg) {
  char *k = NULL;
  ctrain_err r = kube_workqueue_get(arg, -1, &k);
  free(k);
  return (void *)(intptr_t)r;
}

TEST(shutdown) {
  kube_workqueue *q = fake_queue(-1, 1);
  pthread_t t;
  ASSERT_OK(pthread_create(&t, NULL, get_blocking, q));
  usleep(50000);
  kube_workqueue_shutdown(q);
  void *r = NULL;
  pthread_join(t, &r);
  ASSERT_EQ((intptr_t)r, CTRAIN_E_CANCELLED);
  kube_workqueue_free(q);

  q = fake_queue(-1, 1);
  ASSERT_OK(kube_workqueue_add(q, "left"));
  kube_workqueue_shutdown(q);
  ASSERT_OK(kube_workqueue_add(q, "ignored"));
  ASSERT_EQ(kube_workqueue_len(q), 1);
  char *k = get_now(q); /* drained after shutdown */
  ASSERT_STR_EQ(k, "left");
  free(k);
  ASSERT_EQ(kube_workqueue_get(q, 1000, &k), CTRAIN_E_CANCELLED);
  kube_workqueue_free(q);
}

TEST(real_timer) {
  kube_workqueue *q = NULL;
  ASSERT_OK(kube_workqueue_new(NULL, &q));
  double a = ctrain_mono_s();
  ASSERT_OK(kube_workqueue_add_after(q, "deadline", 150 * MS));
  char *k = NULL;
  ASSERT_OK(kube_workqueue_get(q, 2000, &k));
  double s = ctrain_mono_s() - a;
  ASSERT_STR_EQ(k, "deadline"); /* the timer fired: get's 2 s wait did not run out */
  ASSERT(s >= 0.149);           /* not before its time (a floor; no ceiling on a loaded machine) */
  free(k);
  kube_workqueue_free(q);
}

/* Many workers, many adders: no key is ever held by two workers at once,
 * and every key added after its last processing started is processed. */
#define NKEYS 16
static atomic_int holding[NKEYS];
static atomic_int violations, processed;

static void *worker(void *arg) {
  kube_workqueue *q = arg;
  char *k = NULL;
  while (kube_workqueue_get(q, -1, &k) == CTRAIN_OK) {
    int i = (int)strtol(k + 1, NULL, 10);
    if (atomic_fetch_add(&holding[i], 1) != 0)
      atomic_fetch_add(&violations, 1);
    usleep(100);
    atomic_fetch_sub(&holding[i], 1);
    atomic_fetch_add(&processed, 1);
    kube_workqueue_done(q, k);
    free(k);
  }
  return NULL;
}

static void *adder(void *arg) {
  kube_workqueue *q = arg;
  char key[8];
  for (int i = 0; i < 2000; i++) {
    snprintf(key, sizeof(key), "k%d", i % NKEYS);
    ASSERT_OK(kube_workqueue_add(q, key));
    if (i % 7 == 0)
      usleep(50);
  }
  return NULL;
}

TEST(workers_never_share_a_key) {
  kube_workqueue *q = NULL;
  ASSERT_OK(kube_workqueue_new(NULL, &q));
  pthread_t w[6], a[3];
  for (int i = 0; i < 6; i++)
    pthread_create(&w[i], NULL, worker, q);
  for (int i = 0; i < 3; i++)
    pthread_create(&a[i], NULL, adder, q);
  for (int i = 0; i < 3; i++)
    pthread_join(a[i], NULL);
  /* Drain: everything queued or parked gets processed. */
  for (int i = 0; i < 400 && (kube_workqueue_len(q) || atomic_load(&processed) == 0); i++)
    usleep(5000);
  usleep(20000);
  kube_workqueue_shutdown(q);
  for (int i = 0; i < 6; i++)
    pthread_join(w[i], NULL);
  ASSERT_EQ(atomic_load(&violations), 0);
  ASSERT_GE(atomic_load(&processed), NKEYS);
  ASSERT_LE(atomic_load(&processed), 6000);
  ASSERT_EQ(kube_workqueue_len(q), 0);
  kube_workqueue_free(q);
}

TEST_MAIN(T(dedup_and_processing_set), T(fifo_grows_while_wrapped), T(add_after_fake_clock),
          T(rate_limited_backoff_and_forget), T(backoff_capped), T(overall_bucket), T(shutdown),
          T(real_timer), T(workers_never_share_a_key))
