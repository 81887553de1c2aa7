/* ctrain/kube_watch.h - streaming watch with reconnect, as client-go's
 * reflector/watcher pair does it.
 *
 * The body of a watch is one JSON event per line. Lines are split
 * incrementally as bytes arrive (only new bytes are scanned; a line that
 * grows past its cap fails the stream with CTRAIN_E_TOOBIG rather than
 * eating memory) and each line is parsed exactly once.
 *
 * kube_watch_run() keeps the watch alive: when the server ends a stream
 * (timeoutSeconds) or the connection drops, it reconnects from the last
 * resourceVersion it saw (events and bookmarks both advance it), with
 * backoff on errors. When the apiserver answers 410 Gone (the version was
 * compacted), it calls the `relist` hook, which lists and returns a fresh
 * resourceVersion; without a hook it returns CTRAIN_E_GONE. Another thread
 * stops it at once with kube_watch_cancel(). */
#ifndef CTRAIN_KUBE_WATCH_H
#define CTRAIN_KUBE_WATCH_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"
#include "ctrain/kube_client.h"

/* ---- line splitter -------------------------------------------------------- */

typedef struct kube_lines {
  ctrain_buf carry; /* the partial line carried between chunks; its cap is
                       the longest line accepted */
} kube_lines;

/* `line` (not NUL-terminated, without the '\n') is borrowed for the call;
 * a non-zero return stops feeding and is returned by kube_lines_feed. */
typedef ctrain_err (*kube_lines_fn)(void *ud, const char *line, size_t len);

void kube_lines_init(kube_lines *ls, size_t cap);
/* Forgets a partial line (a new connection starts clean). */
void kube_lines_reset(kube_lines *ls);
void kube_lines_free(kube_lines *ls);

/* Feeds a chunk; calls fn once per complete, non-empty line ("\r\n" and
 * "\n" both end a line). Lines wholly inside the chunk are passed without a
 * copy. CTRAIN_E_TOOBIG when a line exceeds the cap. */
CTRAIN_NODISCARD ctrain_err kube_lines_feed(kube_lines *ls, const char *data, size_t len,
                                            kube_lines_fn fn, void *ud);

/* ---- events --------------------------------------------------------------- */

typedef enum {
  KUBE_WATCH_ADDED = 1,
  KUBE_WATCH_MODIFIED,
  KUBE_WATCH_DELETED,
  KUBE_WATCH_BOOKMARK,
  KUBE_WATCH_ERROR /* object is a Status */
} kube_watch_type;

typedef struct kube_watch_event {
  kube_watch_type type;
  cJSON *object;                /* owned by the event; a handler may take it (set NULL) */
  const char *resource_version; /* object's metadata.resourceVersion (borrowed) or NULL */
} kube_watch_event;

/* Parses one line {"type": ..., "object": {...}}. CTRAIN_E_PARSE for
 * anything else (unknown type, missing object). ev->object is owned by ev
 * afterwards: release with kube_watch_event_clear. */
CTRAIN_NODISCARD ctrain_err kube_watch_event_parse(const char *line, size_t len,
                                                   kube_watch_event *ev);
void kube_watch_event_clear(kube_watch_event *ev);

const char *kube_watch_type_name(kube_watch_type t);

/* ---- watch ---------------------------------------------------------------- */

typedef struct kube_watch_opts {
  const kube_gvr *gvr;        /* borrowed, must outlive the watch */
  const char *ns;             /* NULL or "": all namespaces / cluster-scoped; copied */
  const char *label_selector; /* copied */
  const char *field_selector; /* copied */
  /* Start here; NULL or "": from now, with a synthetic ADDED per existing
   * object (the apiserver's "unset" semantics). Copied. */
  const char *resource_version;
  long timeout_seconds; /* per connection, server side; default 300 */
  int no_bookmarks;     /* 1: do not ask for BOOKMARK events */
  size_t max_line;      /* one event's cap; default 16 MiB */
  /* Called on 410 Gone: must list (and reconcile) and write the list's
   * resourceVersion into rv (NUL-terminated). NULL: run returns _GONE. */
  ctrain_err (*relist)(void *ud, char *rv, size_t rv_cap);
  void *relist_ud;
} kube_watch_opts;

/* Called for every ADDED/MODIFIED/DELETED/BOOKMARK event, in order. The
 * event is borrowed (its object may be taken). A non-zero return stops
 * kube_watch_run with that result. ERROR events are handled inside. */
typedef ctrain_err (*kube_watch_fn)(void *ud, kube_watch_event *ev);

typedef struct kube_watch kube_watch;

/* `c` is borrowed and must outlive the watch. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err kube_watch_new(kube_client *c, const kube_watch_opts *o,
                                           kube_watch **out);

/* Streams until cancelled (CTRAIN_E_CANCELLED), the handler stops it (its
 * result), 410 without a relist hook (CTRAIN_E_GONE), or an error that
 * retrying cannot fix (CTRAIN_E_TOOBIG, _INVAL, _NOTFOUND, _TLS, ...; st
 * says which). Transient failures are retried with backoff forever. */
CTRAIN_NODISCARD ctrain_err kube_watch_run(kube_watch *w, kube_watch_fn fn, void *ud,
                                           kube_status *st);

/* Thread-safe, idempotent; run returns promptly afterwards. */
void kube_watch_cancel(kube_watch *w);

/* The last resourceVersion seen, copied into buf (thread-safe). */
void kube_watch_resource_version(kube_watch *w, char *buf, size_t cap);

/* Counters for tests and metrics (thread-safe reads). */
typedef struct kube_watch_stats {
  long events;    /* ADDED/MODIFIED/DELETED delivered */
  long bookmarks; /* BOOKMARK events seen */
  long connects;  /* streams opened */
  long relists;   /* 410s handled by relist */
} kube_watch_stats;
void kube_watch_get_stats(kube_watch *w, kube_watch_stats *out);

/* Accepts NULL. Not while run is in progress. */
void kube_watch_free(kube_watch *w);

#endif
