/* ctrain/kube_events.h - an event recorder (core/v1 Event) with aggregation
 * of repeats, as client-go's record.EventRecorder does it, and its
 * asynchronous front, as client-go's broadcaster.
 *
 * The same (object uid, type, reason, message) recorded again within the
 * window does not create a new Event: the existing one gets count + 1 and a
 * new lastTimestamp (a merge patch). If that Event has vanished (TTL), a new
 * one is created. kube_events_record is synchronous on the caller's thread,
 * through the client's rate limiter; failures are returned and never fatal.
 *
 * kube_events_emit is the asynchronous way: it queues the event and returns
 * at once; one writer thread (kube_events_start) records the queue in order.
 * The queue is bounded (queue_max): when it is full, or the recorder is
 * stopping, the event is dropped and counted, so a caller never waits on an
 * Event write. kube_events_flush waits for the queue to drain;
 * kube_events_stop writes what is queued for at most a deadline, drops the
 * rest and ends the thread. */
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
  size_t queue_max;      /* kube_events_emit: events waiting to be written; default 4096 */
  /* Events are best effort and a burst of creates should not wait behind
   * them at the apiserver: while yield(yield_ud) returns nonzero, the writer
   * holds the next emitted event back, at most yield_max_ns (default 2 s)
   * from when it was emitted, checking every 5 ms. NULL: never held. Called
   * on the writer thread, without the recorder's locks. */
  int (*yield)(void *yield_ud);
  void *yield_ud;
  int64_t yield_max_ns;
} kube_events_opts;

/* What the asynchronous front did so far. */
typedef struct kube_events_counts {
  long written;  /* emitted events recorded */
  long failed;   /* emitted events the apiserver refused (logged, not retried) */
  long dropped;  /* emitted events not recorded: queue full, or stopping */
  size_t queued; /* waiting now */
} kube_events_counts;

typedef struct kube_events kube_events;

/* `c` borrowed, must outlive the recorder. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err kube_events_new(kube_client *c, const kube_events_opts *o,
                                            kube_events **out);

/* Records an event about `involved` (borrowed; its apiVersion, kind and
 * metadata name/namespace/uid/resourceVersion are used). type is "Normal"
 * or "Warning"; reason is CamelCase; the message is printf-formatted, its
 * control bytes escaped (ctrain_escape_ctl: it often holds an apiserver's
 * or a pod's text) and cut at 1024 bytes. *count_out (optional) is the event's count after. */
CTRAIN_NODISCARD ctrain_err kube_events_record(kube_events *ev, const cJSON *involved,
                                               const char *type, const char *reason, int *count_out,
                                               const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Starts the writer thread of kube_events_emit. Events emitted before it
 * starts wait in the queue. CTRAIN_E_NOMEM when the thread cannot start;
 * a second call does nothing. */
CTRAIN_NODISCARD ctrain_err kube_events_start(kube_events *ev);

/* Queues an event about `ref` (borrowed: a core/v1 ObjectReference, its
 * apiVersion, kind, name, namespace, uid and resourceVersion at the top
 * level) for the writer thread; type and reason are copied, the message is
 * printf-formatted, escaped as kube_events_record's and cut at 1024 bytes. Never blocks on the
 * apiserver. Returns CTRAIN_OK when queued; CTRAIN_E_TOOBIG when the queue is full,
 * CTRAIN_E_CANCELLED when stopping, CTRAIN_E_NOMEM: the event is dropped and
 * counted (the first drop and each power of two are logged). */
CTRAIN_NODISCARD ctrain_err kube_events_emit(kube_events *ev, const cJSON *ref, const char *type,
                                             const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Waits until every queued event is written (or failed), at most
 * `timeout_ms` (no wait when the writer was never started).
 * CTRAIN_E_TIMEOUT when events are still queued then. */
CTRAIN_NODISCARD ctrain_err kube_events_flush(kube_events *ev, int timeout_ms);

/* Stops the writer: what is queued is written for at most `drain_ms`, the
 * rest dropped; later emits are dropped. Joins the thread. Accepts NULL; a
 * second call does nothing. */
void kube_events_stop(kube_events *ev, int drain_ms);

/* The counts so far (consistent with one another). */
kube_events_counts kube_events_get_counts(kube_events *ev);

/* Stops the writer (kube_events_stop with no drain time) and frees the
 * recorder. Accepts NULL. */
void kube_events_free(kube_events *ev);

#endif
