/* test_alloc.h - allocation-failure injection for the unit tests, in the
 * style of curl's torture tests: every cJSON allocation goes through a hook
 * (cJSON_InitHooks), and the Nth one made by the thread that armed it fails,
 * once. A test loops n = 0, 1, 2, ... calling the code under test with
 * test_alloc_fail_nth(n) until a call in which no allocation failed
 * (test_alloc_fired() == 0), so each allocation fails in turn, and checks
 * after each call that the failure was reported and nothing half-built was
 * used. Only the arming thread counts, so helper threads (a scripted server)
 * never take the failure. Tests run in their own process, so the hooks need
 * no undoing between tests; test_alloc_off() undoes them within one. */
#ifndef CTRAIN_TEST_ALLOC_H
#define CTRAIN_TEST_ALLOC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

static atomic_long test_alloc_left_ = -1; /* allocations to let through; -1: disarmed */
static atomic_int test_alloc_fired_;
static pthread_t test_alloc_thread_;

static void *test_alloc_malloc_(size_t n) {
  if (atomic_load(&test_alloc_left_) >= 0 && pthread_equal(pthread_self(), test_alloc_thread_) &&
      atomic_fetch_sub(&test_alloc_left_, 1) == 0) {
    atomic_store(&test_alloc_fired_, 1);
    return NULL;
  }
  return malloc(n);
}

/* Makes the nth (0-based) cJSON allocation from this thread fail, once. */
static inline void test_alloc_fail_nth(long n) {
  static cJSON_Hooks hooks = {test_alloc_malloc_, free};
  atomic_store(&test_alloc_left_, -1);
  test_alloc_thread_ = pthread_self();
  atomic_store(&test_alloc_fired_, 0);
  cJSON_InitHooks(&hooks);
  atomic_store(&test_alloc_left_, n);
}

/* Whether the armed failure happened since test_alloc_fail_nth. */
static inline int test_alloc_fired(void) {
  return atomic_load(&test_alloc_fired_);
}

/* Disarms and gives cJSON back the plain allocator. */
static inline void test_alloc_off(void) {
  atomic_store(&test_alloc_left_, -1);
  cJSON_InitHooks(NULL);
}

#endif
