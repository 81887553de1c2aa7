/* ctrain/train.h - the `ctrain-worker train` command: mirrored data-parallel
 * training across the workers of TF_CONFIG (DESIGN.md "Worker contract").
 *
 * Order of work: TF_CONFIG, flags, model config and data are all checked
 * before any output file is touched or any peer contacted; then the
 * rendezvous, the chief's initial weights broadcast, the epochs (gradients
 * averaged over the global batch with one all-reduce per step), evaluation
 * on --test-data after each epoch, and the final model written by the chief
 * to --output (other workers write to --output/.worker-<rank>, as Keras's
 * multi-worker saving does, so a shared volume is never clobbered). */
#ifndef CTRAIN_TRAIN_H
#define CTRAIN_TRAIN_H

#include <stddef.h>

#include "ctrain/err.h"
#include "ctrain/wk_options.h"

/* Runs training; on failure errbuf names the flag, file or peer. Map the
 * result to an exit code with ctrain_exit_for_err. `o` is borrowed. */
ctrain_err train_run(const wk_options *o, char *errbuf, size_t errlen);

#endif
