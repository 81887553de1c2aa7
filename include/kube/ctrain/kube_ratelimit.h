/* ctrain/kube_ratelimit.h - a token bucket (QPS and burst), as client-go's
 * flowcontrol and golang.org/x/time/rate have it.
 *
 * The bucket holds up to `burst` tokens and refills at `qps` per second. A
 * reservation always succeeds: it takes a token, going into debt if none is
 * left, and says how long the caller must wait before using it, so waiters
 * are served in order without a thundering herd. The clock is injectable so
 * tests run on fake time. Thread-safe. */
#ifndef CTRAIN_KUBE_RATELIMIT_H
#define CTRAIN_KUBE_RATELIMIT_H

#include <pthread.h>
#include <stdint.h>

#include "ctrain/err.h"

/* A monotonic clock in nanoseconds; `ctx` is the caller's. */
typedef int64_t (*kube_clock_fn)(void *ctx);

/* The real monotonic clock (CLOCK_MONOTONIC); ignores ctx. */
int64_t kube_clock_monotonic(void *ctx);

typedef struct kube_ratelimit {
  pthread_mutex_t mu;
  double qps;   /* <= 0: unlimited */
  double burst; /* bucket size, >= 1 */
  double tokens;
  int64_t last_ns;
  kube_clock_fn clock;
  void *clock_ctx;
} kube_ratelimit;

/* `clock` NULL: kube_clock_monotonic. The bucket starts full. */
void kube_ratelimit_init(kube_ratelimit *rl, double qps, int burst, kube_clock_fn clock,
                         void *clock_ctx);
void kube_ratelimit_destroy(kube_ratelimit *rl);

/* Takes one token; returns the nanoseconds to wait before acting (0: now). */
int64_t kube_ratelimit_reserve(kube_ratelimit *rl);

/* Takes a token only if one is available now; returns 1 if taken. */
int kube_ratelimit_try(kube_ratelimit *rl);

/* Reserves and sleeps (real time) until the token is usable. Gives up
 * without taking a token, returning CTRAIN_E_TIMEOUT, when the wait would
 * go past `max_wait_ns` (< 0: no limit). */
CTRAIN_NODISCARD ctrain_err kube_ratelimit_wait(kube_ratelimit *rl, int64_t max_wait_ns);

#endif
