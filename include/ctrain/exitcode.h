/* ctrain/exitcode.h - the worker's exit codes (DESIGN.md "Gang restart").
 *
 * The controller decides restarts from these: the permanent ones are never
 * retried, 75 is retryable, 128+n is a signal (retryable). */
#ifndef CTRAIN_EXITCODE_H
#define CTRAIN_EXITCODE_H

#include "ctrain/err.h"

#define CTRAIN_EXIT_OK       0
#define CTRAIN_EXIT_SOFTWARE 70 /* internal error (sysexits EX_SOFTWARE) */
#define CTRAIN_EXIT_USAGE    64 /* bad flag: permanent */
#define CTRAIN_EXIT_DATAERR  65 /* bad data file: permanent */
#define CTRAIN_EXIT_TEMPFAIL 75 /* peer lost, timeout, preempted: retryable */
#define CTRAIN_EXIT_CONFIG   78 /* bad TF_CONFIG/model config/checkpoint config: permanent */

typedef enum {
  CTRAIN_EXIT_CLASS_SUCCESS,
  CTRAIN_EXIT_CLASS_PERMANENT,
  CTRAIN_EXIT_CLASS_RETRYABLE,
  CTRAIN_EXIT_CLASS_OTHER /* any other non-zero code: retried only by OnFailure */
} ctrain_exit_class;

/* Classifies a container exit code as DESIGN.md's table does. */
ctrain_exit_class ctrain_exit_classify(int code);

/* The exit code a worker uses for a failure of this kind. */
int ctrain_exit_for_err(ctrain_err err);

#endif
