/* ctrain/kube_time.h - Kubernetes' time formats: metav1.Time (RFC 3339 in
 * UTC, seconds) and metav1.MicroTime (microseconds), as the apiserver writes
 * and reads them in object fields (creationTimestamp, lastTransitionTime,
 * a Lease's renewTime). */
#ifndef CTRAIN_KUBE_TIME_H
#define CTRAIN_KUBE_TIME_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ctrain/err.h"

/* metav1.Time of unix seconds t: "2024-05-01T12:00:00Z" (needs 21 bytes). */
CTRAIN_NODISCARD ctrain_err kube_time_format(int64_t t, char *buf, size_t len);

/* Parses an RFC 3339 time (a fraction and a +hh:mm offset accepted) into unix
 * seconds; CTRAIN_E_PARSE for anything else, NULL included. */
CTRAIN_NODISCARD ctrain_err kube_time_parse(const char *s, int64_t *t);

/* metav1.MicroTime of a wall-clock time: "2006-01-02T15:04:05.000000Z". */
void kube_microtime_format(const struct timespec *ts, char *buf, size_t cap);

#endif
