/* worker/train_internal.h - what the train loop's files share: the run's
 * context (train_ctx), one epoch's state, and the setup phases in
 * train_setup.c that train_run (train.c) calls in order:
 * check_inputs -> prepare -> connect_peers -> sync_start -> plan. Each
 * phase returns a ctrain_err with its message in x->errbuf. */
#ifndef CTRAIN_WORKER_TRAIN_INTERNAL_H
#define CTRAIN_WORKER_TRAIN_INTERNAL_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "ctrain/tfconfig.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/collective/coll.h"
#include "worker/collective/coll_queue.h"
#include "worker/data/data.h"
#include "worker/data/stream.h"
#include "worker/devinfo.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/model/replicas.h"
#include "worker/options.h"
#include "worker/progress.h"
#include "worker/tensorboard.h"
#include "worker/train_backup.h"

/* Everything one training run holds; every pointer starts NULL and is
 * released by ctx_free. */
typedef struct {
  const wk_options *o;
  char *errbuf;
  size_t errlen;
  tfconfig tc;
  int rank, world, R, B, chief, backups; /* R: local replicas; B: per-replica batch */
  devinfo_choice dc;
  const char *token, *job;
  unsigned long attempt;
  model_t *m;        /* host copy of the weights (init, broadcast, backups, output) */
  optim_t *opt;      /* hyper-parameters; its state is the host copy for backups */
  replica_set *reps; /* the R replicas the steps run on */
  coll_t *c;
  /* The overlap (train_connect_peers): the queue the gradients' parts are
   * all-reduced on during the backward pass, or NULL (after it, in one call);
   * ar_hi: the gradients from ar_hi up are queued this step. */
  coll_queue *q;
  size_t ar_hi;
  /* With q: whether this step queues parts (else all after the backward
   * pass, and batch normalization's all-reduces on this thread). --overlap
   * auto (tune): the attempt's first steps time both ways (train.c,
   * tune_pick) and every worker keeps the one that was faster on all. */
  int overlap_now, tune;
  long tune_k;          /* steps into the tuning */
  double tune_s[2];     /* this worker's timed steps: [0] after, [1] during the backward pass */
  data_set train, test; /* train: with `stream`, its description only (no arrays) */
  data_stream *stream;  /* the streaming reader (--data-stream, object URIs), or NULL */
  uint32_t *order;      /* (max samples held) the epoch order */
  float *xb;            /* (B, input_dim) one replica's batch */
  int32_t *yb;          /* (B) */
  FILE *metrics;
  tb_writer *tb;       /* --tensorboard-dir: chief only; NULL after a failed write */
  tb_writer *tb_steps; /* --tensorboard-freq: DIR/steps, likewise */
  ckpt_state restored;
  train_resume res;
  uint64_t *rows; /* (res.world * res.replicas, CKPT_RANK_WORDS) restored per-replica state */
  char chosen[4096], refuse[9216];
  train_saver sv;
  size_t steps;      /* per epoch, the same on every replica of every worker */
  long global_batch; /* B x R x workers */
  double lr;
  uint64_t gstep, data_seed;
  int start_epoch;
  size_t start_step;
  double val_loss, val_acc;
  struct sigaction old_term;
  int term_installed;
  progress_server *prog;  /* NULL: no progress port */
  progress_snapshot snap; /* what the train loop last published */
} train_ctx;

/* The state of one epoch in progress. */
typedef struct {
  int epoch;
  size_t s0; /* first step run in this epoch (resume) */
  double t0, compute, lsum;
  long correct;
  int stop, save_at_end;
} epoch_state;

/* The collective's message (naming the peer) into errbuf; returns result. */
CTRAIN_NODISCARD ctrain_err train_coll_failed(train_ctx *x, ctrain_err result);

/* Floats of gradients queued at a time while the backward pass goes on
 * (256 KiB): PyTorch DDP's buckets are 25 MiB for GPUs, but our models are
 * small and a part's fixed cost (2(W-1) exchanges) is tens of us. The MLP's
 * kernel and the CNN's Dense kernel each make one. */
#define TRAIN_BUCKET_FLOATS ((size_t)64 << 10)

/* Whether the backward pass, done with layer i's gradients, queues the
 * finished top [layer i's first parameter, hi) now: a bucket's worth, not
 * the bottom layer, and no synchronized BatchNormalization next below (whose
 * all-reduce would wait behind it; the part goes after that layer instead). */
int train_part_due(const model_t *m, int i, size_t hi);

/* The learning rate of global step g (0-based): the linear warm-up
 * (--warmup-steps), then x->lr, or with --lr-schedule cosine a cosine decay
 * from x->lr to 0 over the rest of the run's epochs x steps (Keras'
 * CosineDecay with alpha 0, its warm-up's steps taken from the front). */
double train_lr(const train_ctx *x, uint64_t g);

/* dmodel_ready_fn of the overlap (train.c): queues the finished top of the
 * gradients when train_part_due says so. */
CTRAIN_NODISCARD ctrain_err train_grads_ready(void *ctx, size_t lo, char *errbuf, size_t errlen);

/* SIGTERM's handler (train.c): the workers stop after the same step. */
void train_on_sigterm(int sig);

/* Flags, TF_CONFIG, model and data, checked before any side effect. */
CTRAIN_NODISCARD ctrain_err train_check_inputs(train_ctx *x);
/* The progress port (--progress-port) when asked for; never fails training. */
void train_start_progress(train_ctx *x);
/* Devices, replicas, the optimizer, the metrics file and the progress port. */
CTRAIN_NODISCARD ctrain_err train_prepare(train_ctx *x);
/* The collective: the ring (or NCCL over it), or the local one for one rank. */
CTRAIN_NODISCARD ctrain_err train_connect_peers(train_ctx *x);
/* Restore (chief) and broadcast: every rank starts from the same state. */
CTRAIN_NODISCARD ctrain_err train_sync_start(train_ctx *x);
/* Steps per epoch, global batch, learning rate and the resume position. */
CTRAIN_NODISCARD ctrain_err train_plan(train_ctx *x);

#endif
