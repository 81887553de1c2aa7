/* worker/train_setup.c - the train loop's setup phases (train_internal.h):
 * inputs checked, devices and replicas prepared, peers connected, the start
 * state synchronised, the run planned. */
#include "worker/train_internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ctrain/clock.h"
#include "ctrain/contract.h"
#include "ctrain/fileio.h"
#include "ctrain/log.h"
#include "ctrain/tfconfig.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/collective/coll.h"
#include "worker/collective/coll_nccl.h"
#include "worker/collective/ring.h"
#include "worker/data/data.h"
#include "worker/cpubudget.h"
#include "worker/devinfo.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/model/replicas.h"
#include "worker/progress.h"
#include "worker/train_backup.h"
#include "worker/train_data.h"
#include "worker/train_report.h"

static ctrain_err check_fit(const model_t *m, const data_set *ds, const char *what,
                            const char *path, const char *model_path, char *errbuf, size_t errlen) {
  if (ds->dim != m->input_dim) {
    snprintf(errbuf, errlen,
             "%s %s: samples have %d features (%dx%d), model %s expects input_shape with %d", what,
             path, ds->dim, ds->shape[0], ds->rank > 1 ? ds->shape[1] : 1, model_path,
             m->input_dim);
    return CTRAIN_E_CONFIG;
  }
  if (ds->max_label >= m->n_classes) {
    snprintf(errbuf, errlen, "%s %s: label %d, but model %s has only %d classes", what, path,
             ds->max_label, model_path, m->n_classes);
    return CTRAIN_E_DATA;
  }
  return CTRAIN_OK;
}

/* Phase 1: everything the user gave us, checked before any side effect. */
ctrain_err train_check_inputs(train_ctx *x) {
  ctrain_err result = CTRAIN_OK;
  const wk_options *o = x->o;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  data_format fmt;
  result = tfconfig_from_env(&x->tc, errbuf, errlen);
  if (result)
    goto out;
  if (x->tc.type == TFCONFIG_EVALUATOR)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.type 'evaluator' does not join training; side-car "
                "evaluation is not supported by ctrain-worker train");
  if (!o->model)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--model: required");
  if (!o->data)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--data: required");
  devinfo di;
  result = devinfo_probe(&di);
  if (result)
    CTRAIN_FAIL(result, "probing the GPUs: %s", ctrain_strerror(result));
  result = devinfo_choose(o->device, o->replicas, o->collective, &di, &x->dc, errbuf, errlen);
  if (result)
    goto out;
  LOG_DEBUG("%s", x->dc.why);
  if (!x->dc.gpu)
    cpubudget_configure_blas(x->dc.replicas);
  x->rank = x->tc.rank;
  x->world = x->tc.world;
  x->R = x->dc.replicas;
  x->B = o->batch;
  x->chief = x->rank == 0;
  x->backups = o->backup_dir != NULL || o->backup_uri != NULL;
  result = model_load_file(o->model, &x->m, errbuf, errlen);
  if (result)
    goto out;
  result = optim_create(o->optimizer, x->m->n_params, (float)o->momentum, o->nesterov, &x->opt,
                        errbuf, errlen);
  if (result)
    goto out;
  wk_options_data_format(o, &fmt);
  if (wk_options_streaming(o))
    result = train_data_stream(o, x->rank, x->world, &x->stream, &x->train, errbuf, errlen);
  else
    result = data_load(o->data, &fmt, o->shard, x->rank, x->world, &x->train, errbuf, errlen);
  if (result)
    goto out;
  result = check_fit(x->m, &x->train, "--data", o->data, o->model, errbuf, errlen);
  if (result)
    goto out;
  if (o->test_data) {
    result = train_data_load(o, o->test_data, "--test-data", DATA_SHARD_DATA, x->rank, x->world,
                             &x->test, errbuf, errlen);
    if (result)
      goto out;
    result = check_fit(x->m, &x->test, "--test-data", o->test_data, o->model, errbuf, errlen);
    if (result)
      goto out;
  }
  x->token = getenv(CTRAIN_ENV_JOB_TOKEN);
  x->job = getenv(CTRAIN_ENV_JOB_NAME);
  const char *attempt_s = getenv(CTRAIN_ENV_ATTEMPT);
  if (attempt_s && *attempt_s) {
    char *end = NULL;
    errno = 0;
    x->attempt = strtoul(attempt_s, &end, 10);
    if (errno || *end || x->attempt > UINT32_MAX)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, CTRAIN_ENV_ATTEMPT ": '%s' is not a non-negative integer",
                  attempt_s);
  }
  if (x->world > 1 && (!x->token || !*x->token))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                CTRAIN_ENV_JOB_TOKEN ": required with %d workers (peers authenticate with "
                                     "it)",
                x->world);
out:
  return result;
}

/* The progress port (--progress-port), when asked for. Monitoring never
 * fails training: without CTRAIN_JOB_TOKEN (nothing to authenticate with)
 * or when the port cannot be bound, a warning, and training goes on. */
void train_start_progress(train_ctx *x) {
  char why[512] = "", read_token[CTRAIN_PROGRESS_TOKEN_HEX + 1];
  int port = 0;
  x->snap.rank = x->rank;
  x->snap.epochs = x->o->epochs;
  x->snap.workers = x->world;
  if (x->o->progress_port <= 0)
    return;
  if (!x->token || !*x->token) {
    LOG_WARN("--progress-port %d: CTRAIN_JOB_TOKEN is not set, so requests cannot be "
             "authenticated: the progress port stays closed",
             x->o->progress_port);
    return;
  }
  ctrain_progress_read_token(x->token, read_token);
  progress_config pc = {.port = x->o->progress_port, .read_token = read_token, .chief = x->chief};
  if (progress_start(&pc, &x->prog, &port, why, sizeof(why)))
    LOG_WARN("%s; training goes on without it", why);
  else
    LOG_INFO("progress port %d: %s (bearer read token)", port,
             x->chief ? "/progress and /metrics" : "/metrics");
  memset(read_token, 0, sizeof(read_token));
}

/* Phase 2: buffers, the replicas, and the chief's verdict on the backups
 * (decided before any peer is contacted; the others learn it after the
 * rendezvous). */
ctrain_err train_prepare(train_ctx *x) {
  ctrain_err result = CTRAIN_OK;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  size_t held = x->stream ? 0 : x->train.n; /* a stream has no epoch order array */
  size_t maxn = held > x->test.n ? held : x->test.n;
  x->order = malloc((maxn ? maxn : 1) * sizeof(uint32_t));
  /* The worker's step batch: R replicas' slices of B. */
  x->xb = malloc((size_t)x->R * (size_t)x->B * (size_t)x->m->input_dim * sizeof(float));
  x->yb = malloc((size_t)x->R * (size_t)x->B * sizeof(int32_t));
  if (!x->order || !x->xb || !x->yb)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for batch %d", x->B);
  /* One float past the reduced gradients carries the SIGTERM flag through
   * the step's all-reduce, so agreeing to stop costs no extra round trip. */
  if (model_has_batchnorm(x->m) && x->R > 1 && x->dc.gpu)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model %s: BatchNormalization with %d GPU replicas in one worker: its statistics "
                "are synchronized across the CPU replicas of a worker and across workers, not yet "
                "across the GPUs of one worker; use one GPU per worker (--device gpu:1) and more "
                "workers",
                x->o->model, x->R);
  result = replicas_create(x->m, x->opt, x->R, x->dc.gpu, x->B, 1, &x->reps, errbuf, errlen);
  if (result == CTRAIN_E_UNSUPPORTED) /* a layer the backend has no kernels for: the config's */
    result = CTRAIN_E_CONFIG;
  if (result)
    goto out;
  uint8_t data_id[32];
  if (x->stream)
    data_stream_identity(x->stream, data_id);
  train_config_hash(x->o, x->m, &x->train, x->stream ? data_id : NULL, x->world, x->R, x->sv.hash);
  x->res.verdict = TRAIN_FRESH;
  if (x->chief && x->backups)
    result = train_restore_decide(x->o, x->m, x->opt, x->sv.hash, x->world, x->R, &x->sv.store,
                                  &x->restored, &x->res, x->chosen, sizeof(x->chosen), x->refuse,
                                  sizeof(x->refuse), errbuf, errlen);
out:
  return result;
}

/* Synchronized batch normalization: one BatchNormalization layer's sums of
 * this worker's replica, summed over every worker through the collective
 * (the same calls in the same order on every worker: the same layers). */
static ctrain_err bn_allreduce(void *ctx, float *v, size_t n, char *errbuf, size_t errlen) {
  train_ctx *x = ctx;
  /* Through the queue when this step uses it: in step order with the
   * gradients' parts queued before it, on every rank (nothing is queued in
   * a step without the overlap: every rank makes the same choice). */
  ctrain_err rc =
      x->q && x->overlap_now ? coll_queue_allreduce(x->q, v, n) : coll_allreduce_sum(x->c, v, n);
  if (rc)
    snprintf(errbuf, errlen, "collective failed: %s", coll_errmsg(x->c));
  return rc;
}

/* How many parts of the gradients train_grads_ready queues in a step while
 * the backward pass goes on (the rest is all-reduced at its end). */
static int overlap_parts(const model_t *m) {
  size_t hi = m->n_params + 1;
  int parts = 0;
  for (int i = m->n_layers - 1; i >= 0; i--)
    if (train_part_due(m, i, hi)) {
      parts++;
      hi = model_layer_first_param(&m->layers[i]);
    }
  return parts;
}

/* Phase 3: the peers (TCP ring, or NCCL bootstrapped over it), then SIGTERM
 * means: finish the step, save, exit 75. */
ctrain_err train_connect_peers(train_ctx *x) {
  ctrain_err result = CTRAIN_OK;
  coll_t *boot = NULL;
  if (x->world > 1) {
    ring_config rc = {.rank = x->rank,
                      .world = x->world,
                      .addrs = (const char *const *)x->tc.addrs,
                      .job = x->job && *x->job ? x->job : "ctrain",
                      .attempt = (uint32_t)x->attempt,
                      .token = x->token,
                      .rendezvous_timeout = x->o->rendezvous_timeout,
                      .peer_timeout = x->o->peer_timeout,
                      .bind_host = NULL};
    result = ring_create(&rc, &boot, x->errbuf, x->errlen);
  } else {
    result = coll_local_create(&boot);
  }
  if (result)
    return result;
  /* The overlap (below) changes how every rank cuts the all-reduce: it runs
   * only where every worker can run it. Flags and devices need not be the
   * same everywhere (a TFJob's chief and workers have specs of their own):
   * one worker left out turns it off for all, rather than a frame size
   * mismatch at the first step. Over the ring, before NCCL takes it. */
  int overlap = 0;
  if (x->world > 1) {
    int can = x->o->overlap != WK_OVERLAP_OFF && x->R == 1 && !x->dc.gpu && !x->dc.nccl &&
              overlap_parts(x->m) > 0 && coll_allreduce_parts(boot, x->m->n_params + 1);
    /* How many can, and how many of those tune (--overlap auto): tuning
     * switches how the all-reduce is cut, so it runs only where all tune. */
    float all[2] = {can ? 1.0f : 0.0f, can && x->o->overlap == WK_OVERLAP_AUTO ? 1.0f : 0.0f};
    if ((result = coll_allreduce_sum(boot, all, 2))) {
      snprintf(x->errbuf, x->errlen, "collective failed: %s", coll_errmsg(boot));
      coll_free(boot);
      return result;
    }
    overlap = all[0] == (float)x->world;
    x->tune = overlap && all[1] == (float)x->world;
    if (can && !overlap)
      LOG_WARN("gradients: all-reduced after the backward pass, not during it: %d of %d workers "
               "cannot overlap it (--no-overlap, a GPU, or several replicas there)",
               x->world - (int)all[0], x->world);
  }
  if (x->dc.nccl) {
    coll_nccl_config nc = {.bootstrap = boot, .device = 0, .peer_timeout = x->o->peer_timeout};
    result = coll_nccl_create(&nc, &x->c, x->errbuf, x->errlen); /* takes boot */
    if (result)
      return result;
  } else {
    x->c = boot;
  }
  if (model_has_batchnorm(x->m) &&
      (result = replicas_sync_bn(x->reps, bn_allreduce, x, x->errbuf, x->errlen)))
    return result == CTRAIN_E_UNSUPPORTED ? CTRAIN_E_CONFIG : result;
  /* The gradients' all-reduce overlaps the backward pass (train.c,
   * grads_ready) where the backward writes them to host memory as it goes
   * and the collective can take them in parts: one CPU replica (several
   * reduce theirs after all have finished), the ring, a vector large enough
   * for its bandwidth-bound algorithm, and layers above the bottom one with
   * a bucket's worth of parameters (the MLP's bottom layer holds 99% of
   * its: nothing to overlap, no thread). */
  int parts = overlap_parts(x->m);
  if (overlap) {
    if ((result = coll_queue_create(x->c, &x->q))) {
      snprintf(x->errbuf, x->errlen, "the all-reduce's thread: out of resources");
      return result;
    }
    if ((result = dmodel_set_grads_ready(x->reps->d[0], train_grads_ready, x))) {
      snprintf(x->errbuf, x->errlen, "the overlap: %s", dmodel_errmsg(x->reps->d[0]));
      return result;
    }
    x->overlap_now = 1;
    LOG_INFO("gradients: %d part%s of the all-reduce during the backward pass, the rest "
             "after it (--no-overlap: all after it)%s",
             parts, parts == 1 ? "" : "s",
             x->tune ? "; --overlap auto: timing both ways in the first steps" : "");
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = train_on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, &x->old_term) == 0)
    x->term_installed = 1;
  return CTRAIN_OK;
}

/* Phase 4: the same starting point everywhere: the chief's weights, or the
 * state of the chief's backup; then every replica gets it. */
ctrain_err train_sync_start(train_ctx *x) {
  ctrain_err rc;
  ctrain_err result = CTRAIN_OK;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  model_t *m = x->m;
  if ((rc = coll_broadcast(x->c, &x->res, sizeof(x->res), 0)))
    return train_coll_failed(x, rc);
  if (x->res.verdict == TRAIN_REFUSE) {
    if (x->chief)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s", x->refuse);
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "the chief refused its backup in --backup-dir (see the chief's "
                                 "log: a different training config or replica layout)");
  }
  int resumed = x->res.verdict == TRAIN_RESUME;
  if (resumed &&
      (x->res.world < 1 || x->res.replicas < 1 || x->res.world * x->res.replicas > CKPT_MAX_WORLD))
    CTRAIN_FAIL(CTRAIN_E_PEER, "the chief sent a backup header with layout %llu x %llu",
                (unsigned long long)x->res.world, (unsigned long long)x->res.replicas);
  model_init(m, x->o->seed);
  if (x->chief && resumed)
    memcpy(m->params, x->restored.params, m->n_params * sizeof(float));
  if ((rc = coll_broadcast(x->c, m->params, m->n_params * sizeof(float), 0)))
    return train_coll_failed(x, rc);
  x->data_seed = x->o->seed;
  if (resumed) {
    size_t state = (size_t)x->opt->n_slots * m->n_params * sizeof(float);
    if (x->chief && state)
      memcpy(x->opt->state, x->restored.optim_state, state);
    if (state && (rc = coll_broadcast(x->c, x->opt->state, state, 0)))
      return train_coll_failed(x, rc);
    size_t nrow = (size_t)(x->res.world * x->res.replicas) * CKPT_RANK_WORDS;
    x->rows = malloc(nrow * sizeof(uint64_t));
    if (!x->rows)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for the backup's per-replica state");
    if (x->chief)
      memcpy(x->rows, x->restored.per_rank, nrow * sizeof(uint64_t));
    if ((rc = coll_broadcast(x->c, x->rows, nrow * sizeof(uint64_t), 0)))
      return train_coll_failed(x, rc);
    x->gstep = x->res.global_step;
    x->start_epoch = x->res.epoch > (uint64_t)x->o->epochs ? x->o->epochs : (int)x->res.epoch;
    x->start_step = (size_t)x->res.step;
    x->opt->iterations = x->res.optim_iterations;
    x->data_seed = x->res.data_seed;
    x->snap.backup_step = (int64_t)x->gstep;
    if (x->chief)
      LOG_INFO("backup: resuming from %s at epoch %d, step %zu (global step %llu)", x->chosen,
               x->start_epoch + 1, x->start_step, (unsigned long long)x->gstep);
  }
  ckpt_state_free(&x->restored);
  result = replicas_push(x->reps, m, x->opt, errbuf, errlen);
  if (result)
    goto out;
  if (x->backups) {
    x->sv.c = x->c;
    x->sv.o = x->o;
    x->sv.m = m;
    x->sv.opt = x->opt;
    x->sv.rank = x->rank;
    x->sv.world = x->world;
    x->sv.replicas = x->R;
    x->sv.batch = x->B;
    x->sv.data_seed = x->data_seed;
    if (train_saver_init(&x->sv))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for backup state");
  }
out:
  return result;
}

/* Phase 5: the same number of steps on every replica of every worker
 * whatever the shard sizes; the run's numbers; the metrics file. */
ctrain_err train_plan(train_ctx *x) {
  const wk_options *o = x->o;
  ctrain_err rc, result = CTRAIN_OK;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  uint64_t mine = x->stream ? data_stream_count(x->stream) : data_local_count(&x->train);
  uint64_t *counts = NULL;
  counts = malloc((size_t)x->world * sizeof(uint64_t));
  if (!counts)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for %d workers", x->world);
  if ((rc = coll_allgather_bytes(x->c, &mine, sizeof(mine), counts))) {
    result = train_coll_failed(x, rc);
    goto out;
  }
  size_t per_step = (size_t)x->B * (size_t)x->R;
  int smallest = 0;
  x->steps = SIZE_MAX;
  for (int r = 0; r < x->world; r++)
    if (counts[r] / per_step < x->steps) {
      x->steps = counts[r] / per_step;
      smallest = r;
    }
  if (x->steps == 0)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "--data %s: worker rank %d's shard has %llu samples, fewer than one step of "
                "%d replica(s) x batch %d",
                o->data, smallest, (unsigned long long)counts[smallest], x->R, x->B);
  int in_sync = x->world * x->R;
  x->global_batch = (long)x->B * in_sync;
  x->lr = o->lr * (o->scale_lr ? in_sync : 1);
  x->snap.replicas_in_sync = in_sync;
  x->snap.steps_per_epoch = x->steps;
  if (x->chief) {
    LOG_INFO("replicas in sync: %d (workers %d x replicas %d, %s); global batch %ld = "
             "per-replica batch %d x %d; learning rate %g%s; %zu steps per epoch; %zu parameters; "
             "collective %s",
             in_sync, x->world, x->R, x->dc.gpu ? "GPU" : "CPU", x->global_batch, x->B, in_sync,
             x->lr, o->scale_lr ? " (scaled by replicas)" : "", x->steps, x->m->n_params,
             x->c->ops->name);
    if (o->metrics) {
      /* O_NOFOLLOW, regular files only: the path may be on shared storage. */
      int mfd = -1;
      char why[4200];
      result = ctrain_file_open_append(o->metrics, &mfd, why, sizeof(why));
      if (result)
        CTRAIN_FAIL(result, "--metrics %s", why);
      x->metrics = fdopen(mfd, "a");
      if (!x->metrics) {
        close(mfd);
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "--metrics %s: %s", o->metrics, strerror(errno));
      }
    }
  }
  if (x->res.verdict == TRAIN_RESUME && x->start_step >= x->steps) {
    x->start_epoch++;
    x->start_step = 0;
  }
  if (x->chief && o->tensorboard_dir) {
    /* Events are per epoch at step = epoch: every run starts its curves
     * at its first epoch, so a resumed run's supersede the older events
     * from there on (tb_open). */
    int resumed = x->res.verdict == TRAIN_RESUME;
    result = tb_open(o->tensorboard_dir, (int64_t)x->start_epoch + 1, &x->tb, errbuf, errlen);
    if (result)
      goto out;
    LOG_INFO("TensorBoard events: %s%s", tb_path(x->tb),
             resumed ? " (resumed: earlier events from this epoch on are superseded)" : "");
  }
  if (x->chief && o->tensorboard_dir && o->tensorboard_freq) {
    /* Steps in a run of their own (DIR/steps): its restart marker is at a
     * global step, the epochs' at an epoch. */
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/steps", o->tensorboard_dir);
    result = tb_open(dir, (int64_t)x->gstep + 1, &x->tb_steps, errbuf, errlen);
    if (result)
      goto out;
  }
out:
  free(counts);
  return result;
}
