/* worker/train_report.h - what the chief reports after each epoch: the
 * Keras-like progress line on stderr, the JSON-lines metrics record (with
 * replicas in sync and per-replica throughput), and the straggler line. */
#ifndef CTRAIN_TRAIN_REPORT_H
#define CTRAIN_TRAIN_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "ctrain/err.h"
#include "worker/progress.h"

typedef struct {
  int epoch;         /* 1-based */
  size_t steps, ran; /* steps per epoch; steps this attempt ran of it */
  double seconds, loss, accuracy;
  int has_val;
  double val_loss, val_accuracy;
  int workers, replicas; /* replicas: per worker */
  long global_batch;
} train_report;

/* The progress line on stderr and, when metrics is not NULL, one JSON line
 * (flushed). */
void train_report_epoch(const train_report *r, FILE *metrics);

/* Logs the slowest worker's compute time per step against the median; ms
 * (world) in rank order, borrowed. */
void train_report_straggler(const double *ms, int world, int epoch);

/* The rank with the largest ms (world >= 1, borrowed); *median gets the
 * median (the lower one for an even count, so with 2 workers the slowest is
 * compared with the other), NAN when out of memory. */
int train_report_slowest(const double *ms, int world, double *median);

#define TRAIN_REPORT_TERMINATION_MAX 4096 /* the kubelet reads at most 4 KiB */

/* The termination message (docs/design.md "Worker contract") as one JSON line,
 * into out (at most TRAIN_REPORT_TERMINATION_MAX bytes with the NUL):
 *   {"state":"Succeeded"|"Failed","loss":L,"accuracy":A,"val_loss":VL,
 *    "val_accuracy":VA,"samples_per_sec":S,"epochs":E,"steps":G,
 *    "model":"<--output>"|null,"replicas_in_sync":N[,"error":"<message>"]}
 * from the snapshot (unknown numbers are null; epochs: the epochs finished,
 * steps: global steps). model and error (borrowed, may be NULL) are cut so
 * the whole fits. Returns the length. */
size_t train_report_termination_json(const progress_snapshot *s, const char *model,
                                     const char *error, char *out, size_t outlen);

/* Writes that JSON to path once (O_WRONLY|O_CREAT|O_TRUNC|O_NOFOLLOW: the
 * kubelet's file is a bind mount, no temp-and-rename). IO with errbuf. */
CTRAIN_NODISCARD ctrain_err train_report_termination(const char *path, const progress_snapshot *s,
                                                     const char *model, const char *error,
                                                     char *errbuf, size_t errlen);

#endif
