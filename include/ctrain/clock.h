/* ctrain/clock.h - the monotonic clock and deadlines, for every timeout.
 *
 * CLOCK_MONOTONIC only: wall-clock steps never move a timeout. Condition
 * variables that wait with ctrain_deadline_ts must be created with
 * pthread_condattr_setclock(CLOCK_MONOTONIC). */
#ifndef CTRAIN_CLOCK_H
#define CTRAIN_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds / seconds (arbitrary origin). */
int64_t ctrain_mono_ns(void);
double ctrain_mono_s(void);

/* The absolute CLOCK_MONOTONIC time `ns` from now (ns >= 0), for
 * pthread_cond_timedwait. */
struct timespec ctrain_deadline_ts(int64_t ns);

#endif
