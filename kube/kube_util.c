/* kube_util.c - private helpers shared by the kube/ modules. */
#include "kube_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void kube_sleep_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

char *kube_dup_opt(const char *s, int *oom) {
  if (!s || !*s)
    return NULL;
  char *d = strdup(s);
  if (!d)
    *oom = 1;
  return d;
}
