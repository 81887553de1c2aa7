/* ctrain/thread.h - checked mutex and condition-variable calls.
 *
 * pthread_mutex_lock and friends fail only on a programming error (a lock
 * not initialised, destroyed, or a deadlock the implementation detects); a
 * caller that ignores the failure goes on without the lock and corrupts
 * what it guards. These wrappers abort with a message naming the call and
 * the error instead, as libuv's uv_mutex_lock does: every lock in ctrain
 * goes through them. */
#ifndef CTRAIN_THREAD_H
#define CTRAIN_THREAD_H

#include <pthread.h>
#include <time.h>

void ctrain_mutex_lock(pthread_mutex_t *m);
void ctrain_mutex_unlock(pthread_mutex_t *m);

/* pthread_cond_wait; aborts on failure. */
void ctrain_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);

/* pthread_cond_timedwait until the absolute time `abstime` (the clock the
 * condition variable was made with): 0 when signalled (or spuriously woken),
 * ETIMEDOUT when the time passed; aborts on any other failure. */
int ctrain_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abstime);

void ctrain_cond_signal(pthread_cond_t *c);
void ctrain_cond_broadcast(pthread_cond_t *c);

#endif
