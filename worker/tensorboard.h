/* worker/tensorboard.h - TensorBoard event files (--tensorboard-dir).
 *
 * An event file is TFRecord framing (worker/data/tfrecord.h) of
 * tensorflow.Event protos (tensorflow/core/util/event.proto): first an
 * Event with file_version "brain.Event:2", then one Event per call of
 * tb_scalars holding a Summary of simple_value scalars, each with the
 * wall time and the step. The file is
 * DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.ctrain, a new one per
 * run, as tf.summary names them; TensorBoard reads every file of a
 * directory as one run. Each record is flushed as written, so a reader
 * (or a killed run) sees whole records up to the last one. */
#ifndef CTRAIN_TENSORBOARD_H
#define CTRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

typedef struct tb_writer tb_writer;

/* Creates DIR (one level) when missing and the event file in it, writes
 * the file_version event and a SessionLog START at start_step, the step of
 * the run's first event (a fresh run's too). TensorBoard's server (its
 * plugin_event_accumulator) takes a run's first START as its start and each
 * later one as a restart, discarding the events of earlier files at that
 * step and after (what a killed run wrote past its last backup), so no step
 * appears twice; the legacy EventAccumulator purges at every START (with a
 * fresh run's, nothing yet). A START only in a resumed run's file would be
 * the first the server sees, and purge nothing. *out owned by the caller
 * (tb_close). CTRAIN_E_IO naming the path. */
CTRAIN_NODISCARD ctrain_err tb_open(const char *dir, int64_t start_step, tb_writer **out,
                                    char *errbuf, size_t errlen);

/* One Event at `step` with the n scalars tags[i] = values[i] (borrowed).
 * CTRAIN_E_IO naming the file. */
CTRAIN_NODISCARD ctrain_err tb_scalars(tb_writer *w, int64_t step, const char *const *tags,
                                       const double *values, int n, char *errbuf, size_t errlen);

/* The event file's path (borrowed from w). */
const char *tb_path(const tb_writer *w);

/* Closes the file; NULL is fine. */
void tb_close(tb_writer *w);

typedef enum { TB_SCALARS = 0, TB_FILE_VERSION, TB_SESSION_START } tb_event_kind;

/* For tests: encodes an Event of `kind` (TB_SCALARS: the n tags and values)
 * into out[0..cap); returns its length, 0 when it does not fit. */
size_t tb_encode_event(double wall, int64_t step, tb_event_kind kind, const char *const *tags,
                       const double *values, int n, uint8_t *out, size_t cap);

#endif
