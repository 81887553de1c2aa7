/* kube_ratelimit.c - token bucket; see ctrain/kube_ratelimit.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_ratelimit.h"
#include "ctrain/thread.h"

#include "kube_util.h"

int64_t kube_clock_monotonic(void *ctx) {
  (void)ctx;
  return ctrain_mono_ns();
}

void kube_ratelimit_init(kube_ratelimit *rl, double qps, int burst, kube_clock_fn clock,
                         void *clock_ctx) {
  pthread_mutex_init(&rl->mu, NULL);
  rl->qps = qps;
  rl->burst = burst < 1 ? 1 : burst;
  rl->tokens = rl->burst;
  rl->clock = clock ? clock : kube_clock_monotonic;
  rl->clock_ctx = clock_ctx;
  rl->last_ns = rl->clock(rl->clock_ctx);
}

void kube_ratelimit_destroy(kube_ratelimit *rl) {
  pthread_mutex_destroy(&rl->mu);
}

/* Refills for the time since the last call. Called with mu held. */
static void refill(kube_ratelimit *rl, int64_t now) {
  if (now > rl->last_ns) {
    rl->tokens += (double)(now - rl->last_ns) * 1e-9 * rl->qps;
    if (rl->tokens > rl->burst)
      rl->tokens = rl->burst;
    rl->last_ns = now;
  }
}

/* Takes a token if the resulting wait is within max_wait_ns (< 0: any);
 * returns the wait, or -1 when it would be too long. */
static int64_t take(kube_ratelimit *rl, int64_t max_wait_ns) {
  if (rl->qps <= 0)
    return 0;
  ctrain_mutex_lock(&rl->mu);
  refill(rl, rl->clock(rl->clock_ctx));
  int64_t wait = 0;
  double after = rl->tokens - 1.0;
  if (after < 0)
    wait = (int64_t)(-after / rl->qps * 1e9 + 0.5);
  if (max_wait_ns >= 0 && wait > max_wait_ns) {
    wait = -1;
  } else {
    rl->tokens = after;
  }
  ctrain_mutex_unlock(&rl->mu);
  return wait;
}

int64_t kube_ratelimit_reserve(kube_ratelimit *rl) {
  return take(rl, -1);
}

int kube_ratelimit_try(kube_ratelimit *rl) {
  return take(rl, 0) == 0;
}

ctrain_err kube_ratelimit_wait(kube_ratelimit *rl, int64_t max_wait_ns) {
  int64_t wait = take(rl, max_wait_ns);
  if (wait < 0)
    return CTRAIN_E_TIMEOUT;
  ctrain_sleep_ns(wait);
  return CTRAIN_OK;
}
