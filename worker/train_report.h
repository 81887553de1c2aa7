/* worker/train_report.h - what the chief reports after each epoch: the
 * Keras-like progress line on stderr, the JSON-lines metrics record (with
 * replicas in sync and per-replica throughput), and the straggler line. */
#ifndef CTRAIN_TRAIN_REPORT_H
#define CTRAIN_TRAIN_REPORT_H

#include <stddef.h>
#include <stdio.h>

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

#endif
