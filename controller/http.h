/* controller/http.h - the controller's /metrics, /healthz and /readyz routes,
 * served by ctrain_httpd (ctrain/httpd.h): one thread, at most
 * CTRAIN_HTTPD_MAX_CONNS connections (the oldest idle one shed for a new one
 * when full, so idle clients cannot fail the liveness probe), each answered
 * once and closed.
 *
 * /metrics is the Prometheus text format, rendered by the caller's callback;
 * /healthz answers 200 while the process runs; /readyz answers 200 when the
 * caller's ready callback says so, else 503. A request head of 8 KiB or more
 * is a 431, a client slower than 5 s is dropped; a /metrics body over 4 MiB
 * is a 500. */
#ifndef CTRAIN_CTL_HTTP_H
#define CTRAIN_CTL_HTTP_H

#include <stddef.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"

typedef struct ctl_http ctl_http;

typedef struct {
  /* Appends the metrics text to `out` (an empty buffer with a cap).
   * CTRAIN_OK, or an error that answers 500. */
  ctrain_err (*render_metrics)(void *ud, ctrain_buf *out);
  int (*ready)(void *ud); /* 1: ready */
  void *ud;
} ctl_http_handlers;

/* Listens on `addr` ("host:port", ":port", or "port"; port 0 picks a free
 * one) and starts the server thread. *out owned by the caller. The bound
 * port is in *port_out when non-NULL. */
CTRAIN_NODISCARD ctrain_err ctl_http_start(const char *addr, const ctl_http_handlers *h,
                                           ctl_http **out, int *port_out, char *err, size_t errlen);

/* Stops the thread and closes the socket. Accepts NULL. */
void ctl_http_stop(ctl_http *s);

#endif
