/* clock.c - the monotonic clock and deadlines; see ctrain/clock.h. */
#include "ctrain/clock.h"
#include "ctrain/thread.h"

#include <errno.h>

int64_t ctrain_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double ctrain_mono_s(void) {
  return (double)ctrain_mono_ns() * 1e-9;
}

struct timespec ctrain_deadline_ts(int64_t ns) {
  int64_t t = ctrain_mono_ns() + (ns > 0 ? ns : 0);
  struct timespec ts = {.tv_sec = (time_t)(t / 1000000000), .tv_nsec = (long)(t % 1000000000)};
  return ts;
}

void ctrain_sleep_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

int ctrain_cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  int rc = pthread_condattr_init(&ca);
  if (rc)
    return rc;
  if (!(rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)))
    rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
}

int ctrain_cond_nap(pthread_cond_t *cv, pthread_mutex_t *mu, const int *flag, int64_t ns) {
  struct timespec ts = ctrain_deadline_ts(ns);
  ctrain_mutex_lock(mu);
  while (!*flag && ctrain_cond_timedwait(cv, mu, &ts) == 0)
    ;
  int f = *flag;
  ctrain_mutex_unlock(mu);
  return f;
}
