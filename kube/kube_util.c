/* kube_util.c - private helpers shared by the kube/ modules. */
#include "kube_util.h"

#include <stdlib.h>
#include <string.h>

char *kube_dup_opt(const char *s, int *oom) {
  if (!s || !*s)
    return NULL;
  char *d = strdup(s);
  if (!d)
    *oom = 1;
  return d;
}
