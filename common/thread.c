/* thread.c - checked mutex and condition-variable calls; see ctrain/thread.h. */
#include "ctrain/thread.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A failed lock call is a bug: say which and stop. */
static void check(int rc, const char *what) {
  if (rc == 0)
    return;
  fprintf(stderr, "ctrain: %s failed: %s (a lock used wrongly; aborting)\n", what, strerror(rc));
  abort();
}

void ctrain_mutex_lock(pthread_mutex_t *m) {
  check(pthread_mutex_lock(m), "pthread_mutex_lock");
}

void ctrain_mutex_unlock(pthread_mutex_t *m) {
  check(pthread_mutex_unlock(m), "pthread_mutex_unlock");
}

void ctrain_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
  check(pthread_cond_wait(c, m), "pthread_cond_wait");
}

int ctrain_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abstime) {
  int rc = pthread_cond_timedwait(c, m, abstime);
  if (rc == ETIMEDOUT)
    return rc;
  check(rc, "pthread_cond_timedwait");
  return 0;
}

void ctrain_cond_signal(pthread_cond_t *c) {
  check(pthread_cond_signal(c), "pthread_cond_signal");
}

void ctrain_cond_broadcast(pthread_cond_t *c) {
  check(pthread_cond_broadcast(c), "pthread_cond_broadcast");
}
