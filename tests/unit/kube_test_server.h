/* kube_test_server.h - a scripted HTTP/1.1 server on loopback for the
 * kube_* unit tests: the library ctrain_test_kube (kube_test_server.c).
 * Serves the responses in `resp` in order, one per request, keeping the
 * connection unless a response says "Connection: close"; records each
 * request (line, headers, body) in `req`. */
#ifndef CTRAIN_KUBE_TEST_SERVER_H
#define CTRAIN_KUBE_TEST_SERVER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrain/clock.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "test.h"

/* ---- scripted server ---------------------------------------------------- */

#define MAXREQ 16
typedef struct {
  const char *resp[MAXREQ]; /* raw responses, in order; NULL ends */
  int stream_forever;       /* last response: keep the connection open */
  int port, lfd;
  _Atomic int cfd; /* the connection being served, for ks_stop_server */
  int nreq, nconn;
  char req[MAXREQ][4096]; /* request line + headers + body, as received */
  /* Optional gate: while hold is i + 1, response i waits (its request read)
   * with held set to i + 1; the test clears hold to let it go. */
  _Atomic int hold, held;
} server;

/* Starts serving s on a loopback port (s->port); the server thread. */
pthread_t ks_start_server(server *s);
/* Ends a server that may be blocked on a kept-open stream and joins it, so
 * the test may read s->req without racing the server thread. */
void ks_stop_server(server *s, pthread_t t);
/* A client for the server s (a kubeconfig naming it, token tok-123). */
kube_client *ks_client_for(server *s, const kube_client_opts *o);
/* Frees a client made by ks_client_for and its config. */
void ks_client_done(kube_client *c);
/* A raw 200 response with the JSON body; one of 8 rotating buffers. */
const char *ks_resp200(const char *body);
/* A raw response with code, reason, extra headers (each ending \r\n) and
 * the JSON body; one of 8 rotating buffers. */
const char *ks_resp_status(int code, const char *reason, const char *extra_hdr, const char *body);

/* How long a stream whose only bytes came `wait_ms` ago goes on before its
 * loop next looks at anything (a cancel flag, its idle timeout), measured in
 * this run: the loop looks between polls (kube_stream.c: 1 s, woken earlier
 * by curl's own timers), so a stream with an idle timeout of wait_ms on a
 * server gone silent ends at the first look at or after it. A cancel fired
 * wait_ms after the bytes that did not wake the poll would wait that long;
 * one that wakes it returns in a small part of it. The cancel latencies are
 * held to that (a ratio to a time of the same run, not a wall-clock
 * ceiling, which flakes on a loaded machine). In seconds, from the bytes. */
typedef struct {
  _Atomic int64_t first_ns; /* when the first bytes came, 0 before */
} first_bytes;

void ks_note_first_bytes(first_bytes *f);
ctrain_err ks_on_first_bytes(void *ud, const char *d, size_t n);
/* See first_bytes: how long after its bytes a silent stream is noticed. */
double ks_next_look_s(long wait_ms);
/* Waits for f's first bytes, then wait_ms; when that was (mono ns). */
int64_t ks_wait_after_first_bytes(first_bytes *f, long wait_ms);
/* A cancel fired at fired_ns, `after_ms` after a stream's bytes, returned at
 * end_ns: woken at once (under half of what the unwoken loop waits). */
void ks_assert_woken(int64_t end_ns, int64_t fired_ns, double look, long after_ms);

#endif
