/* ctrain/clock.h - the monotonic clock and deadlines, for every timeout.
 *
 * CLOCK_MONOTONIC only: wall-clock steps never move a timeout. Condition
 * variables that wait with ctrain_deadline_ts must be created with
 * pthread_condattr_setclock(CLOCK_MONOTONIC). */
#ifndef CTRAIN_CLOCK_H
#define CTRAIN_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds / seconds (arbitrary origin). */
int64_t ctrain_mono_ns(void);
double ctrain_mono_s(void);

/* The absolute CLOCK_MONOTONIC time `ns` from now (ns >= 0), for
 * pthread_cond_timedwait. */
struct timespec ctrain_deadline_ts(int64_t ns);

/* Sleeps `ns` nanoseconds (nothing for ns <= 0), resuming after signals. */
void ctrain_sleep_ns(int64_t ns);

/* pthread_cond_init on CLOCK_MONOTONIC, the clock ctrain_deadline_ts
 * speaks. 0 or the pthread error. */
int ctrain_cond_init_mono(pthread_cond_t *cv);

/* Waits on cv (mu not held by the caller) up to `ns`, or until *flag, read
 * under mu, is non-zero: the cancellable sleep of every background loop.
 * Returns *flag. Whoever sets the flag does so under mu and broadcasts cv. */
int ctrain_cond_nap(pthread_cond_t *cv, pthread_mutex_t *mu, const int *flag, int64_t ns);

#endif
