/* worker/train.h - the `ctrain-worker train` command: mirrored data-parallel
 * training across the workers of TF_CONFIG (docs/design.md "Worker contract").
 *
 * Each worker drives R local replicas (--device gpu: one per visible GPU, or
 * gpu:R; cpu:R: R logical CPU replicas), each a dmodel (the one model path,
 * over the kernels table). --batch is per replica: global batch = batch x R
 * x workers ("replicas in sync" = R x workers; --scale-lr scales by it). At a
 * step, replica r takes the contiguous slice [r*B, (r+1)*B) of the worker's
 * B*R samples of the epoch order, so (with DATA sharding, or one worker) any
 * layout with the same global batch takes the same samples at every step. Gradients: summed across
 * the R replicas, then one all-reduce across workers (ring on CPU, NCCL on GPU), then the same
 * update on every replica.
 *
 * Order of work (the phases of train.c, around one context): TF_CONFIG,
 * flags, model config and data are all checked before any output file is
 * touched or any peer contacted; then the replicas and the chief's backup
 * verdict, the rendezvous, the chief's initial weights broadcast, the epochs
 * (gradients averaged over the global batch with one all-reduce per step), evaluation
 * on --test-data after each epoch, and the final model written by the chief
 * to --output (other workers write to --output/.worker-<rank>, as Keras's
 * multi-worker saving does, so a shared volume is never clobbered).
 *
 * BackupAndRestore (--backup-dir, ckpt.h): before the rendezvous the chief
 * loads the newest backup that verifies and checks its config hash (a
 * mismatch is CTRAIN_E_CONFIG, exit 78, unless --backup-ignore-config);
 * after it, the chief broadcasts its verdict and the state (weights,
 * optimizer state, position, each replica's dropout RNG), so only the chief
 * needs the storage. Training resumes at the exact step and ends bitwise
 * identical to an unbroken run (train_backup.h: another replica layout
 * resumes only where that stays exact, else exit 78 saying why). Saves
 * (--save-freq, every N global steps or each epoch) gather each replica's RNG
 * to the chief, which writes atomically
 * and prunes to --keep; a failed save stops every worker with exit 75, the
 * previous backup intact. A SIGTERM (after the rendezvous) travels as one
 * extra float of the step's gradient all-reduce: all workers finish that step,
 * the chief saves, all exit 75 (CTRAIN_E_CANCELLED). After success the
 * final model is written, then the backups deleted (--keep-backup keeps
 * them). The caller should ignore SIGXFSZ so a file-size limit fails the
 * write instead of killing the worker. */
#ifndef CTRAIN_TRAIN_H
#define CTRAIN_TRAIN_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/options.h"

/* Runs training; on failure errbuf names the flag, file or peer. Map the
 * result to an exit code with ctrain_exit_for_err. `o` is borrowed. */
CTRAIN_NODISCARD ctrain_err train_run(const wk_options *o, char *errbuf, size_t errlen);

#endif
