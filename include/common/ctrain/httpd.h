/* ctrain/httpd.h - the one small HTTP/1.x server of both programs (the
 * controller's /metrics /healthz /readyz, the worker's progress port).
 *
 * One thread runs one poll loop over the listening socket and at most
 * max_conns connections. Each connection has deadline_ms to send its
 * request head and take the answer, after which it is dropped; a head of
 * req_max bytes or more is answered 431, a request line that does not parse
 * 400. Every connection gets one response and is closed (`Connection:
 * close`); a HEAD gets the head of what GET would get. After the answer the
 * server shuts its side and reads what the client still sends (at most
 * CTRAIN_HTTPD_DRAIN_MAX bytes for CTRAIN_HTTPD_DRAIN_MS) before it closes,
 * so unread bytes (the rest of an oversized head) never turn the close into
 * a reset that would lose the answer.
 *
 * Shedding: hostile clients that open connections and send
 * nothing must not lock others out. The listen backlog is SOMAXCONN; the
 * loop accepts up to max_conns/4 connections per round; when the table is
 * full a new connection takes the slot of one that has had at least
 * CTRAIN_HTTPD_GRACE_MS: one draining first, then one that sent nothing,
 * then one with a partial head, then one being answered, the oldest first.
 * A real client sends its request at once and is answered within its grace
 * time; measured with 1,000 idle connections re-opened as they are dropped
 * (test_common_httpd, test_progress), a request is answered within tens of
 * milliseconds. On EMFILE (and ENFILE, ENOBUFS, ENOMEM) accepting pauses for
 * CTRAIN_HTTPD_ACCEPT_PAUSE_MS.
 *
 * The handler runs on the server thread, one request at a time: it must not
 * block (copy shared state under a lock held only for the copy). Starting
 * never blocks the caller; stopping wakes the loop, joins it and closes
 * every connection. Nothing of a request (an Authorization header) is
 * logged. */
#ifndef CTRAIN_HTTPD_H
#define CTRAIN_HTTPD_H

#include <stddef.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"

#define CTRAIN_HTTPD_MAX_CONNS       256
#define CTRAIN_HTTPD_GRACE_MS        50    /* never shed younger */
#define CTRAIN_HTTPD_DRAIN_MS        1000  /* after the answer, at most */
#define CTRAIN_HTTPD_DRAIN_MAX       65536 /* bytes discarded after the answer */
#define CTRAIN_HTTPD_ACCEPT_PAUSE_MS 100
#define CTRAIN_HTTPD_DEADLINE_MS     2000
#define CTRAIN_HTTPD_REQ_MAX         4096
#define CTRAIN_HTTPD_BODY_MAX        (4u << 20)

/* A parsed request. The strings are borrowed from the connection's buffer
 * and valid during the handler call only. */
typedef struct ctrain_httpd_request {
  const char *method;  /* as sent ("GET", "HEAD", ...) */
  const char *path;    /* the target up to '?' */
  const char *query;   /* after '?', "" when none */
  const char *headers; /* private: the header lines (ctrain_httpd_header) */
} ctrain_httpd_request;

/* What the handler fills. The server sets status 0, content_type NULL and
 * empty buffers before the call; status 0 after it answers 500. */
typedef struct ctrain_httpd_response {
  int status;               /* 200, 404, ... */
  const char *content_type; /* static or outliving the call; NULL: "text/plain" */
  ctrain_buf body;          /* capped at the config's body_max: TOOBIG past it */
  ctrain_buf headers;       /* extra lines (ctrain_httpd_add_header) */
} ctrain_httpd_response;

typedef void (*ctrain_httpd_handler)(void *ud, const ctrain_httpd_request *req,
                                     ctrain_httpd_response *resp);

typedef struct {
  const char *name;             /* in errors and logs ("progress server"); NULL: "http server" */
  const char *bind_host;        /* NULL: every interface (IPv6 and IPv4 where possible) */
  int port;                     /* 0: an ephemeral port (tests) */
  int max_conns;                /* 0: CTRAIN_HTTPD_MAX_CONNS */
  int deadline_ms;              /* 0: CTRAIN_HTTPD_DEADLINE_MS */
  size_t req_max;               /* 0: CTRAIN_HTTPD_REQ_MAX */
  size_t body_max;              /* 0: CTRAIN_HTTPD_BODY_MAX */
  ctrain_httpd_handler handler; /* required */
  void *ud;                     /* passed to handler, borrowed */
} ctrain_httpd_config;

typedef struct ctrain_httpd ctrain_httpd;

/* Binds, listens and starts the thread. *out is owned by the caller
 * (ctrain_httpd_stop); *port_out (optional) gets the bound port. Errors:
 * INVAL (no handler, bad host), NET (bind/listen; errbuf names the port),
 * IO (pipe, thread), NOMEM. */
CTRAIN_NODISCARD ctrain_err ctrain_httpd_start(const ctrain_httpd_config *cfg, ctrain_httpd **out,
                                               int *port_out, char *errbuf, size_t errlen);

/* Stops the thread, closes the socket and every connection, frees s.
 * Accepts NULL. */
void ctrain_httpd_stop(ctrain_httpd *s);

/* The value of header `name` (case-insensitive), trimmed, copied into out
 * (NUL-terminated). NOTFOUND when absent, TOOBIG when it does not fit. */
CTRAIN_NODISCARD ctrain_err ctrain_httpd_header(const ctrain_httpd_request *req, const char *name,
                                                char *out, size_t outlen);

/* Appends the line `name: value` to resp->headers. NOMEM, or INVAL when
 * either holds a CR or LF. */
CTRAIN_NODISCARD ctrain_err ctrain_httpd_add_header(ctrain_httpd_response *resp, const char *name,
                                                    const char *value);

/* Sets status and a text/plain body (replacing any body): the short answers
 * ("ok\n", "not found\n"). Errors as ctrain_buf_append. */
CTRAIN_NODISCARD ctrain_err ctrain_httpd_text(ctrain_httpd_response *resp, int status,
                                              const char *text);

/* The request parser, exposed for the fuzz target: the length of the head
 * in buf[0..len) through its blank line, or 0 while it is not complete. */
size_t ctrain_httpd_head_len(const char *buf, size_t len);

/* Parses a complete head of `len` bytes (buf[len] must be writable and is
 * set to NUL), in place: *req points into buf. PARSE on a bad request line
 * or a NUL byte. */
CTRAIN_NODISCARD ctrain_err ctrain_httpd_parse(char *buf, size_t len, ctrain_httpd_request *req);

#endif
