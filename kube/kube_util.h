/* kube_util.h - private helpers shared by the kube/ modules.
 * Not installed, not part of any public header. */
#ifndef CTRAIN_KUBE_UTIL_H
#define CTRAIN_KUBE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/util.h"

/* strdup of an optional string: NULL for NULL or "" (no allocation);
 * sets *oom when the copy fails. */
char *kube_dup_opt(const char *s, int *oom);

#endif
