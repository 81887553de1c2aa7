/* ctrain/kube_events.h - an event recorder (core/v1 Event) with aggregation
 * of repeats, as client-go's record.EventRecorder does it.
 *
 * The same (object uid, type, reason, message) recorded again within the
 * window does not create a new Event: the existing one gets count + 1 and a
 * new lastTimestamp (a merge patch). If that Event has vanished (TTL), a new
 * one is created. Recording is synchronous on the caller's thread, through
 * the client's rate limiter; failures are returned and never fatal. */
#ifndef CTRAIN_KUBE_EVENTS_H
#define CTRAIN_KUBE_EVENTS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"
#include "ctrain/kube_client.h"

typedef struct kube_events_opts {
  const char *component; /* source.component / reportingComponent; copied */
  const char *instance;  /* source.host / reportingInstance (e.g. pod name); copied, may be NULL */
  int64_t window_ns;     /* aggregation window; default 10 min */
  size_t max_cache;      /* remembered events; default 4096 (cleared when full) */
} kube_events_opts;

typedef struct kube_events kube_events;

/* `c` borrowed, must outlive the recorder. *out owned by the caller. */
ctrain_err kube_events_new(kube_client *c, const kube_events_opts *o, kube_events **out);

/* Records an event about `involved` (borrowed; its apiVersion, kind and
 * metadata name/namespace/uid/resourceVersion are used). type is "Normal"
 * or "Warning"; reason is CamelCase; the message is printf-formatted and
 * cut at 1024 bytes. *count_out (optional) is the event's count after. */
ctrain_err kube_events_record(kube_events *ev, const cJSON *involved, const char *type,
                              const char *reason, int *count_out, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Accepts NULL. */
void kube_events_free(kube_events *ev);

#endif
