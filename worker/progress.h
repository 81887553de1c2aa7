/* worker/progress.h - the progress port (docs/design.md "Worker contract"): a
 * small HTTP server on its own thread that serves what the train loop last
 * published.
 *
 *   GET /progress  the chief only: JSON (progress_render_json)
 *   GET /metrics   every worker: Prometheus text (progress_render_metrics)
 *   GET /healthz   "ok", no authentication
 *
 * /progress and /metrics need `Authorization: Bearer <read token>`, the read
 * token being hex(HMAC-SHA256(key = CTRAIN_JOB_TOKEN, CTRAIN_PROGRESS_READ_LABEL))
 * (ctrain_progress_read_token, ctrain/contract.h): the controller, which knows the job token,
 * derives it; a leaked read token does not give the ring's token. Anything else gets 401 with
 * `WWW-Authenticate: Bearer`. Neither token nor header is logged.
 *
 * The train loop calls progress_publish at step and epoch boundaries: it
 * copies the snapshot under a mutex that the server holds only to copy it
 * back, never across I/O, so training never waits on a client. Connections
 * are bounded (PROGRESS_MAX_CONNS; when full, the oldest idle one is shed for
 * a new one, see ctrain/httpd.h), each has
 * PROGRESS_DEADLINE_MS to send its request and take the answer, and requests
 * are capped at PROGRESS_REQ_MAX bytes. */
#ifndef CTRAIN_PROGRESS_H
#define CTRAIN_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/buf.h"
#include "ctrain/contract.h"
#include "ctrain/err.h"

#define PROGRESS_MAX_WORKERS 256 /* per-worker ms/step entries kept in a snapshot */
#define PROGRESS_MAX_CONNS   256
#define PROGRESS_DEADLINE_MS 2000
#define PROGRESS_REQ_MAX     4096

typedef enum {
  PROGRESS_STARTING = 0, /* before the first step */
  PROGRESS_TRAINING,
  PROGRESS_SUCCEEDED,
  PROGRESS_FAILED
} progress_state;

/* What the train loop knows; NAN for a number not known yet. */
typedef struct {
  progress_state state;
  int rank;
  int epoch;  /* 1-based epoch in progress (or the last one at the end); 0: none yet */
  int epochs; /* --epochs */
  uint64_t step, steps_per_epoch; /* step: steps done of this epoch */
  uint64_t global_step;           /* optimizer steps since the job's start */
  double samples_per_sec;         /* global, over this epoch so far */
  double loss, accuracy; /* running mean of this epoch so far over this worker's replicas; once
                          * the epoch ends, the epoch's value over all replicas */
  double val_loss, val_accuracy;          /* after the epoch's evaluation (--test-data) */
  int replicas_in_sync, workers;          /* replicas in sync = workers x local replicas */
  double step_ms;                         /* this worker's compute ms per step, this epoch */
  int n_worker_ms;                        /* entries of worker_ms (at most the cap) */
  double worker_ms[PROGRESS_MAX_WORKERS]; /* last epoch's compute ms/step, by rank */
  int slowest_rank;                       /* -1: not known yet */
  double median_ms, slowest_ratio;        /* slowest ms/step over the median */
  int64_t backup_step;                    /* global step of the newest backup; -1: none */
} progress_snapshot;

/* An empty snapshot: state STARTING, numbers NAN, ranks and backup -1. */
void progress_snapshot_init(progress_snapshot *s);

/* The /progress body and the /metrics body, appended to b. NOMEM/TOOBIG as
 * ctrain_buf. Unknown numbers are JSON null; in Prometheus text they are NaN. */
CTRAIN_NODISCARD ctrain_err progress_render_json(const progress_snapshot *s, ctrain_buf *b);
CTRAIN_NODISCARD ctrain_err progress_render_metrics(const progress_snapshot *s, ctrain_buf *b);

typedef struct progress_server progress_server;

typedef struct {
  const char *bind_host;  /* NULL: every interface (IPv6 and IPv4 where possible) */
  int port;               /* 0: an ephemeral port (tests) */
  const char *read_token; /* required, borrowed; copied */
  int chief;              /* 1: serves /progress */
} progress_config;

/* Binds, listens and starts the thread. *port_out (optional) gets the bound
 * port. The server is owned by the caller (progress_stop). Errors: INVAL (no
 * token, bad host), NET (bind/listen, with the port in errbuf), IO, NOMEM. */
CTRAIN_NODISCARD ctrain_err progress_start(const progress_config *cfg, progress_server **out,
                                           int *port_out, char *errbuf, size_t errlen);

/* Copies *snap (borrowed) as what the next requests see; s may be NULL. */
void progress_publish(progress_server *s, const progress_snapshot *snap);

/* Stops the thread, closes every connection, frees s; NULL is fine. */
void progress_stop(progress_server *s);

#endif
